//! `bench-controller`: how fast and how lean the controller converges many clusters.
//!
//! N ControlPlaneIngresses (haproxy, nginx, traefik and gateway flavors, each
//! with its CAPI Cluster) on the in-memory API server with latency added to
//! every request; measures the time to converge, the API requests per cluster,
//! the writes during one resync period at steady state and the peak RSS of
//! the controller.
//!
//! Three roles of the same binary, so that each measurement has its own
//! process and the controller's RSS is measured alone:
//! - `main` (default): runs one `run` process per `--n` and prints the table;
//! - `run`: the controller (`hcp_ingress::controller::run`), in this process;
//! - `serve`: memkube with the CRDs, the seeded objects and the latency, in a
//!   child of `run`, driven by lines on its stdin (`converged`, `clear`,
//!   `stats`), answering one line on its stdout.
//!
//! Requests are attributed by `User-Agent`: the controller's client sends
//! [`CONTROLLER_AGENT`], the benchmark's own clients (seeding, convergence
//! polls) send [`BENCH_AGENT`], and only the controller's are counted. On a
//! real kube-apiserver (`--api real`) they are attributed by user, from its
//! audit log, and the API server's and etcd's own CPU is measured too.
//!
//! With `--workloads` every cluster also gets its workload side: an
//! in-memory workload API server (`<cluster>-kubeconfig`; a tenant of one
//! [`memkube::Host`], so that thousands fit on the machine), the cluster CA
//! (`<cluster>-ca`) and a stand-in kubelet that reports the proxy DaemonSet
//! ready; a cluster has converged when its route is ready, its endpoints
//! steered and its cloud-controller-manager configured. A stand-in Gateway
//! controller accepts the gateway flavor's TLSRoutes.
//!
//! The controller runs with leader election, as deployed. After the steady
//! window a second replica campaigns and the leader stops (releasing its
//! Lease, as on a rolling update): the time until the new leader has
//! reconciled every cluster, and its writes until then, are measured.
//!
//! With `--shards K`, K controllers run side by side instead, each with the
//! `--watch-filter` of its shard and its own Lease, and cluster `i` is
//! labelled for shard `i % K`: every request a shard makes about another
//! shard's cluster (its objects are named after it) is counted and shown.
#![forbid(unsafe_code)]

use std::{
    collections::{BTreeMap, HashSet},
    path::{Path, PathBuf},
    process::{ExitCode, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use clap::{Parser, ValueEnum};
use futures::{StreamExt, TryStreamExt};
use hcp_ingress::{
    api::ControlPlaneIngress,
    controller::{
        DEFAULT_LEASE, LeaseConfig, Settings, WATCH_FILTER_LABEL, WatchFilter, lease_name, run,
    },
};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, reflector, watcher},
};
use memkube::{Host, RequestMatch, RequestRecord, TestApi};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::{Layer, filter, layer::SubscriberExt, util::SubscriberInitExt};

/// `User-Agent` of the controller's client.
const CONTROLLER_AGENT: &str = "hcp-ingress-controller";
/// `User-Agent` of the benchmark's own clients (not counted).
const BENCH_AGENT: &str = "hcp-bench";
/// `controllerName` of the stand-in Gateway controller.
const GATEWAY_CONTROLLER: &str = "bench.hcp-ingress.dev/gateway";
/// Route flavors, in turn.
const FLAVORS: [&str; 4] = ["haproxy", "nginx", "traefik", "gateway"];
/// Targets on 2 cores, with the workload sides: (time to converge in
/// seconds, peak RSS in MiB) for N clusters. Up to 1,000: 60 s and
/// 150 MiB; beyond, up to 5,000: 180 s and 400 MiB (the hand-over's full
/// resync within the same time).
fn targets(n: usize) -> (f64, f64) {
    if n <= 1000 {
        (60.0, 150.0)
    } else {
        (180.0, 400.0)
    }
}

/// Which management API server the controller talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ApiKind {
    /// The in-memory API server, with `--latency-ms` added to every request.
    Memkube,
    /// A real etcd and kube-apiserver (hack/kube/build.sh).
    Real,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Role {
    Main,
    Run,
    Serve,
}

/// Benchmark of the management-side controller on the in-memory API server.
#[derive(Clone, Debug, Parser)]
#[command(name = "bench-controller")]
struct Args {
    /// Internal: which process this is.
    #[arg(long, value_enum, default_value = "main", hide = true)]
    role: Role,
    /// Numbers of ControlPlaneIngresses, one run each (repeatable).
    #[arg(long = "n", default_values_t = [100, 1000])]
    n: Vec<usize>,
    /// Latency added to every API request, in milliseconds.
    #[arg(long, default_value_t = 5)]
    latency_ms: u64,
    /// Resync period of the controller, in seconds (one is measured at steady state).
    #[arg(long, default_value_t = 10)]
    resync_secs: u64,
    /// Reconciliations at once (default: the controller's default).
    #[arg(long)]
    concurrency: Option<u16>,
    /// Folder of the upstream CRDs.
    #[arg(long, default_value = "../shared/schemas")]
    schemas: PathBuf,
    /// Namespaces the ControlPlaneIngresses are spread over.
    #[arg(long, default_value_t = 10)]
    namespaces: usize,
    /// Watch events memkube keeps per resource (older resourceVersions get 410 Gone).
    #[arg(long, default_value_t = 100_000)]
    history: usize,
    /// Keep the node proxy (workload side) enabled; without workload clusters
    /// every ControlPlaneIngress then stays not Ready and is retried, not resynced.
    #[arg(long)]
    workload_proxy: bool,
    /// Give up converging after this many seconds.
    #[arg(long, default_value_t = 180)]
    timeout_secs: u64,
    /// Management API servers, one run each per N, side by side in the table.
    #[arg(long = "api", value_enum, default_values_t = [ApiKind::Memkube])]
    api: Vec<ApiKind>,
    /// Give every cluster its workload side (see the module docs).
    #[arg(long)]
    workloads: bool,
    /// Controllers side by side, each with its own `--watch-filter`: cluster
    /// `i` is labelled for shard `i % shards` (1: one controller, no filter).
    #[arg(long, default_value_t = 1)]
    shards: usize,
}

impl Args {
    /// Flags for a child process of `role` measuring `n`.
    fn child_args(&self, role: &str, n: usize, api: ApiKind) -> Vec<String> {
        let mut args = vec![
            format!("--role={role}"),
            format!("--n={n}"),
            format!(
                "--api={}",
                api.to_possible_value()
                    .expect("no skipped variants")
                    .get_name()
            ),
            format!("--latency-ms={}", self.latency_ms),
            format!("--resync-secs={}", self.resync_secs),
            format!("--schemas={}", self.schemas.display()),
            format!("--namespaces={}", self.namespaces),
            format!("--history={}", self.history),
            format!("--timeout-secs={}", self.timeout_secs),
            format!("--shards={}", self.shards),
        ];
        if let Some(c) = self.concurrency {
            args.push(format!("--concurrency={c}"));
        }
        if self.workload_proxy {
            args.push("--workload-proxy".into());
        }
        if self.workloads {
            args.push("--workloads".into());
        }
        args
    }

    fn single_api(&self) -> ApiKind {
        self.api.first().copied().unwrap_or(ApiKind::Memkube)
    }

    fn single_n(&self) -> usize {
        self.n.first().copied().unwrap_or(100)
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: failed to start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match args.role {
            Role::Main => orchestrate(&args).await,
            Role::Run => measure(&args).await,
            Role::Serve => serve(&args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------- main role

/// One `run` process per N, then the table.
async fn orchestrate(args: &Args) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("failed to find this binary: {e}"))?;
    let mut results = Vec::new();
    for (&api, &n) in args
        .api
        .iter()
        .flat_map(|api| args.n.iter().map(move |n| (api, n)))
    {
        eprintln!("== {api:?}, N = {n}");
        // Not `output()`: tokio's would capture stderr, the progress report.
        let output = tokio::process::Command::new(&exe)
            .args(args.child_args("run", n, api))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("failed to run the N={n} measurement: {e}"))?
            .wait_with_output()
            .await
            .map_err(|e| format!("failed to run the N={n} measurement: {e}"))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let result = stdout
            .lines()
            .find_map(|l| l.strip_prefix("result "))
            .ok_or_else(|| format!("the N={n} measurement failed ({})", output.status))?;
        let result: Value = serde_json::from_str(result)
            .map_err(|e| format!("the N={n} measurement printed a bad result: {e}"))?;
        print_details(&result);
        results.push(result);
    }
    print_table(args, &results);
    Ok(())
}

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or(f64::NAN)
}

fn verdict(ok: bool) -> &'static str {
    if ok { "PASS" } else { "MISS" }
}

fn print_details(r: &Value) {
    println!();
    println!(
        "N={}: converged {} of {} in {:.2} s (first RouteReady at {:.2} s, 50% at {:.2} s, 90% at {:.2} s); {} reconciles",
        r["n"],
        r["converged"],
        r["n"],
        f(r, "converge_secs"),
        f(r, "first_secs"),
        f(r, "p50_secs"),
        f(r, "p90_secs"),
        r["reconciles_converge"],
    );
    println!(
        "  reconciles per cluster by route flavor during convergence: {}",
        r["reconciles_by_flavor"]
    );
    println!(
        "  reconciles per cluster by reason during convergence: {}",
        r["reconciles_by_reason"]
    );
    println!("  controller requests during convergence, by verb and resource:");
    if let Some(by) = r["converge"]["by"].as_object() {
        for (key, count) in by {
            println!("    {count:>7}  {key}");
        }
    }
    if r["shards"].as_u64().unwrap_or(1) > 1 {
        println!(
            "  requests by shard during convergence: {}; requests about another shard's clusters: {} (steady window: {})",
            r["converge"]["by_shard"], r["converge"]["foreign"], r["steady"]["foreign"]
        );
        for sample in r["converge"]["foreign_samples"]
            .as_array()
            .into_iter()
            .flatten()
        {
            println!(
                "    another shard's: {}",
                sample.as_str().unwrap_or_default()
            );
        }
    }
    if let Some(errors) = r["converge"]["errors"].as_object() {
        for (key, count) in errors {
            println!("    {count:>7}  failed: {key}");
        }
    }
    println!(
        "  CPU during convergence: controller {:.2} s, API server process {:.2} s (incl. seeding){}",
        f(r, "cpu_converge_secs"),
        f(&r["converge"], "cpu_secs"),
        if r["api"] == "real" {
            format!(
                ", kube-apiserver {:.2} s, etcd {:.2} s",
                f(&r["converge"], "apiserver_cpu_since_clear"),
                f(&r["converge"], "etcd_cpu_since_clear")
            )
        } else {
            String::new()
        },
    );
    println!(
        "  steady state: {} requests ({} writes) and {} reconciles in {} s",
        r["steady"]["total"],
        r["steady"]["writes"],
        r["reconciles_steady"],
        r["steady_window_secs"]
    );
    if let Some(samples) = r["steady"]["write_samples"].as_array() {
        for s in samples {
            println!("    write: {}", s.as_str().unwrap_or_default());
        }
    }
}

fn print_table(args: &Args, results: &[Value]) {
    println!();
    println!(
        "controller benchmark: {} ms added latency per request, resync {} s, concurrency {}, {} cores",
        args.latency_ms,
        args.resync_secs,
        args.concurrency
            .map_or_else(|| "default".to_string(), |c| c.to_string()),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let mut header = "| metric | target |".to_string();
    let mut rule = "|---|---|".to_string();
    for r in results {
        let shards = r["shards"].as_u64().unwrap_or(1);
        header.push_str(&format!(
            " {} N={}{} |",
            r["api"].as_str().unwrap_or("memkube"),
            r["n"],
            if shards > 1 {
                format!(" in {shards} shards")
            } else {
                String::new()
            }
        ));
        rule.push_str("---|");
    }
    println!("{header}");
    println!("{rule}");
    let row = |name: &str, target: &str, cell: &dyn Fn(&Value) -> String| {
        let mut line = format!("| {name} | {target} |");
        for r in results {
            line.push_str(&format!(" {} |", cell(r)));
        }
        println!("{line}");
    };
    let n_of = |r: &Value| r["n"].as_u64().unwrap_or(0) as usize;
    row("time to converge (s)", TARGETS, &|r| {
        let s = f(r, "converge_secs");
        let ok = r["converged"] == r["n"] && s < targets(n_of(r)).0;
        format!("{s:.2} {}", verdict(ok))
    });
    // Requests per cluster must not grow with N: each column against the
    // smallest smaller N, at or above 1,000, of its API server and shards in
    // this run (none: no verdict).
    let per_cluster = |r: &Value| f(&r["converge"], "total") / f(r, "n");
    let anchor = |r: &Value| {
        results
            .iter()
            .filter(|a| {
                a["api"] == r["api"]
                    && a["shards"] == r["shards"]
                    && (1000..n_of(r)).contains(&n_of(a))
            })
            .min_by_key(|a| n_of(a))
            .map(per_cluster)
    };
    row(
        "API requests per cluster (convergence)",
        "≤ N=1,000's",
        &|r| {
            let mine = per_cluster(r);
            match anchor(r) {
                Some(a) => format!("{mine:.2} {}", verdict(mine <= a * 1.05)),
                _ => format!("{mine:.2}"),
            }
        },
    );
    row("API writes per cluster (convergence)", "—", &|r| {
        format!("{:.2}", f(&r["converge"], "writes") / f(r, "n"))
    });
    row("reconciles per cluster (convergence)", "—", &|r| {
        format!("{:.2}", f(r, "reconciles_converge") / f(r, "n"))
    });
    row("writes in one resync at steady state", "0", &|r| {
        let w = f(&r["steady"], "writes");
        let resynced = f(r, "reconciles_steady") >= f(r, "n");
        format!(
            "{w} {}",
            if resynced {
                verdict(w == 0.0)
            } else {
                "MISS (no full resync seen)"
            }
        )
    });
    row("reconciles in that window", "≥ N", &|r| {
        format!("{}", r["reconciles_steady"])
    });
    row("controller CPU during convergence (s)", "—", &|r| {
        format!("{:.2}", f(r, "cpu_converge_secs"))
    });
    row("controller CPU in the steady window (s)", "—", &|r| {
        format!("{:.2}", f(r, "cpu_steady_secs"))
    });
    row(
        "peak RSS of the controller process (MiB)",
        "< 150 MiB (1,000), < 400 MiB (5,000)",
        &|r| {
            let m = f(r, "rss_peak_mib");
            format!("{m:.1} {}", verdict(m < targets(n_of(r)).1))
        },
    );
    row(
        "  of which before the controller started (MiB)",
        "—",
        &|r| format!("{:.1}", f(r, "rss_base_mib")),
    );
    row(
        "peak RSS of the serving process (memkube, or the bench's workload servers) (MiB)",
        "—",
        &|r| format!("{:.1}", f(r, "memkube_rss_peak_mib")),
    );
    row(
        "requests about another shard's clusters (convergence + steady)",
        "0",
        &|r| {
            if r["shards"].as_u64().unwrap_or(1) > 1 {
                let foreign = f(&r["converge"], "foreign") + f(&r["steady"], "foreign");
                format!("{foreign} {}", verdict(foreign == 0.0))
            } else {
                "—".into()
            }
        },
    );
    // Measured with one controller; shards stop instead.
    let handed_over = |r: &Value, cell: &dyn Fn(&Value) -> String| {
        if r["handover"].is_null() {
            "—".to_string()
        } else {
            cell(r)
        }
    };
    row(
        "hand-over: leadership and a full resync (s)",
        TARGETS,
        &|r| {
            handed_over(r, &|r| {
                let s = f(r, "handover_secs");
                let ok = r["handover_resynced"] == r["n"] && s < targets(n_of(r)).0;
                format!("{s:.2} {}", verdict(ok))
            })
        },
    );
    row("hand-over: writes until then", "0", &|r| {
        handed_over(r, &|r| {
            let w = f(&r["handover"], "writes");
            format!("{w} {}", verdict(w == 0.0))
        })
    });
    row(
        "rig: workload side's memory in the bench (KiB/cluster)",
        "—",
        &|r| format!("{:.1}", f(&r["steady"], "rig_kib_per_cluster")),
    );
    row("kube-apiserver CPU during convergence (s)", "—", &|r| {
        real_only(r, |r| {
            format!("{:.2}", f(&r["converge"], "apiserver_cpu_since_clear"))
        })
    });
    row("kube-apiserver CPU in the steady window (s)", "—", &|r| {
        real_only(r, |r| {
            format!("{:.2}", f(&r["steady"], "apiserver_cpu_since_clear"))
        })
    });
    row("etcd CPU in the steady window (s)", "—", &|r| {
        real_only(r, |r| {
            format!("{:.2}", f(&r["steady"], "etcd_cpu_since_clear"))
        })
    });
    row("kube-apiserver peak RSS (MiB)", "—", &|r| {
        real_only(r, |r| {
            format!("{:.1}", f(&r["steady"], "apiserver_rss_mib"))
        })
    });
}

/// The time targets, as the table's target column says them.
const TARGETS: &str = "< 60 s (1,000), < 180 s (5,000)";

fn real_only(r: &Value, cell: impl Fn(&Value) -> String) -> String {
    if r["api"] == "real" {
        cell(r)
    } else {
        "—".into()
    }
}

// ----------------------------------------------------------------- run role

/// Counts kube-runtime's "reconciling object" spans of ControlPlaneIngresses:
/// one per reconciliation (the source adapters' reconciliations are not
/// counted), and remembers which objects were reconciled since the set was
/// last emptied (a full resync has seen every one).
#[derive(Clone, Default)]
struct ReconcileCounter {
    count: Arc<AtomicU64>,
    seen: Arc<Mutex<HashSet<String>>>,
    /// Reconciliations of each route flavor (from the object's name: the
    /// bench gives cluster `i` flavor `i % 4`).
    by_flavor: Arc<Mutex<BTreeMap<&'static str, u64>>>,
    /// Reconciliations by kube-runtime's reason (`object.reason`), a related
    /// object's by its kind only: which trigger grows with N.
    by_reason: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl ReconcileCounter {
    fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Distinct ControlPlaneIngresses reconciled since the last [`Self::forget`].
    fn distinct(&self) -> usize {
        self.seen.lock().expect("seen").len()
    }

    /// Reconciliations per cluster of each flavor so far.
    fn per_flavor(&self, n: usize) -> Value {
        per_cluster(&self.by_flavor.lock().expect("flavors"), n / FLAVORS.len())
    }

    /// Reconciliations per cluster for each reason so far.
    fn per_reason(&self, n: usize) -> Value {
        per_cluster(&self.by_reason.lock().expect("reasons"), n)
    }

    fn forget(&self) {
        self.seen.lock().expect("seen").clear();
    }
}

/// Each count divided by `clusters`, as a JSON object.
fn per_cluster<K: ToString>(counts: &BTreeMap<K, u64>, clusters: usize) -> Value {
    let clusters = clusters.max(1) as f64;
    counts
        .iter()
        .map(|(key, count)| (key.to_string(), json!(*count as f64 / clusters)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// The flavor of a `ControlPlaneIngress.<version>.hcp-ingress.dev/tenant-NNNNN.<ns>` reference.
fn flavor_of(object: &str) -> Option<&'static str> {
    tenant_of(object).map(|i| FLAVORS[i % FLAVORS.len()])
}

/// A span's `object.ref`, when it names a ControlPlaneIngress, and its
/// `object.reason`, a related object's reason cut to its kind
/// (`related object updated: Cluster`).
#[derive(Default)]
struct CpiRef {
    object: Option<String>,
    reason: String,
}

impl tracing::field::Visit for CpiRef {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "object.ref" => {
                let text = format!("{value:?}");
                self.object = text.starts_with("ControlPlaneIngress.").then_some(text);
            }
            "object.reason" => {
                let text = format!("{value:?}");
                self.reason = match text.split_once(": ") {
                    Some((why, object)) => {
                        format!("{why}: {}", object.split('.').next().unwrap_or(object))
                    }
                    None => text,
                };
            }
            _ => {}
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for ReconcileCounter {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if attrs.metadata().name() == "reconciling object" {
            let mut cpi = CpiRef::default();
            attrs.record(&mut cpi);
            if let Some(object) = cpi.object {
                self.count.fetch_add(1, Ordering::Relaxed);
                *self
                    .by_reason
                    .lock()
                    .expect("reasons")
                    .entry(cpi.reason)
                    .or_default() += 1;
                if let Some(flavor) = flavor_of(&object) {
                    *self
                        .by_flavor
                        .lock()
                        .expect("flavors")
                        .entry(flavor)
                        .or_default() += 1;
                }
                self.seen.lock().expect("seen").insert(object);
            }
        }
    }
}

/// This process's resident memory now (`VmRSS`), in KiB.
fn rss_kib() -> f64 {
    status_kib("self", "VmRSS:")
}

/// Peak resident set size of this process (`VmHWM`), in MiB.
fn vmhwm_mib() -> f64 {
    vmhwm_mib_of("self")
}

/// Peak resident set size of process `pid` (`self` for this one), in MiB.
fn vmhwm_mib_of(pid: &str) -> f64 {
    status_kib(pid, "VmHWM:") / 1024.0
}

/// A `kB` line of /proc/<pid>/status, in KiB.
fn status_kib(pid: &str, key: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .unwrap_or(f64::NAN)
}

/// CPU time (user + system) this process used so far, in seconds.
fn cpu_secs() -> f64 {
    cpu_secs_of("self")
}

/// CPU time (user + system) of process `pid` (`self` for this one), in seconds.
fn cpu_secs_of(pid: &str) -> f64 {
    // Fields 14 and 15 of /proc/<pid>/stat, after the parenthesized command name.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let fields: Vec<u64> = s
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .skip(11)
                .take(2)
                .map(|v| v.parse().unwrap_or(0))
                .collect();
            Some(fields.iter().sum::<u64>() as f64 / 100.0)
        })
        .unwrap_or(f64::NAN)
}

/// A client for `url` sending `agent` as its `User-Agent`.
fn client(url: &str, agent: &str) -> Result<Client, String> {
    let uri = url
        .parse()
        .map_err(|e| format!("bad memkube URL {url}: {e}"))?;
    with_agent(kube::Config::new(uri), agent)
}

fn with_agent(mut config: kube::Config, agent: &str) -> Result<Client, String> {
    let agent =
        http::HeaderValue::from_str(agent).map_err(|e| format!("bad User-Agent {agent}: {e}"))?;
    config.headers.push((http::header::USER_AGENT, agent));
    Client::try_from(config).map_err(|e| format!("failed to build a client: {e}"))
}

/// The controller's client, from what the `serve` child said: memkube's
/// URL, or the real API server's kubeconfig.
async fn controller_client(said: &str, agent: &str) -> Result<Client, String> {
    match said.split_once(' ') {
        Some(("url", url)) => client(url, agent),
        Some(("kubeconfig", path)) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("failed to read {path}: {e}"))?;
            let kubeconfig =
                kube::config::Kubeconfig::from_yaml(&text).map_err(|e| format!("{path}: {e}"))?;
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|e| format!("{path}: {e}"))?;
            with_agent(config, agent)
        }
        _ => Err(format!("the API server said {said:?}")),
    }
}

/// The `User-Agent` of shard `k`'s controller.
fn shard_agent(k: usize) -> String {
    format!("{CONTROLLER_AGENT}/{}", shard_value(k))
}

/// The shard `k` of a [`shard_agent`]`(k)`.
fn shard_of_agent(agent: &str) -> Option<usize> {
    agent
        .strip_prefix(CONTROLLER_AGENT)?
        .strip_prefix("/shard-")?
        .parse()
        .ok()
}

/// The `serve` child and its line protocol.
struct Server {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Server {
    async fn start(args: &Args, n: usize) -> Result<(Server, String), String> {
        let exe =
            std::env::current_exe().map_err(|e| format!("failed to find this binary: {e}"))?;
        let mut child = tokio::process::Command::new(exe)
            .args(args.child_args("serve", n, args.single_api()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("failed to start memkube: {e}"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        let mut server = Server {
            child,
            stdin,
            stdout,
        };
        // `url <memkube URL>` or `kubeconfig <file>` (a real API server).
        let line = server.line().await?;
        Ok((server, line))
    }

    async fn line(&mut self) -> Result<String, String> {
        self.stdout
            .next_line()
            .await
            .map_err(|e| format!("failed to read from memkube: {e}"))?
            .ok_or_else(|| "memkube exited".to_string())
    }

    async fn ask(&mut self, command: &str) -> Result<String, String> {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .map_err(|e| format!("failed to write to memkube: {e}"))?;
        self.stdin
            .flush()
            .await
            .map_err(|e| format!("failed to write to memkube: {e}"))?;
        self.line().await
    }

    async fn stats(&mut self) -> Result<Value, String> {
        let line = self.ask("stats").await?;
        let json = line
            .strip_prefix("stats ")
            .ok_or_else(|| format!("memkube said {line:?}"))?;
        serde_json::from_str(json).map_err(|e| format!("bad stats from memkube: {e}"))
    }

    /// (RouteReady=True at the current generation, Ready=True, total).
    async fn converged(&mut self) -> Result<(usize, usize, usize), String> {
        let line = self.ask("converged").await?;
        let mut words = line
            .strip_prefix("converged ")
            .ok_or_else(|| format!("memkube said {line:?}"))?
            .split(' ')
            .map(|w| w.parse::<usize>().unwrap_or(0));
        Ok((
            words.next().unwrap_or(0),
            words.next().unwrap_or(0),
            words.next().unwrap_or(0),
        ))
    }
}

/// The controller against a seeded memkube child: one N, one `result` line.
async fn measure(args: &Args) -> Result<(), String> {
    let n = args.single_n();
    let reconciles = ReconcileCounter::default();
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(
                    filter::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| filter::EnvFilter::new("warn")),
                ),
        )
        .with(reconciles.clone().with_filter(filter::filter_fn(|m| {
            m.is_span() && m.name() == "reconciling object"
        })))
        .init();

    let (mut server, url) = Server::start(args, n).await?;
    let rss_base = vmhwm_mib();
    let mut settings = Settings::for_tests();
    settings.timing.probe_endpoints = false;
    settings.timing.resync = Duration::from_secs(args.resync_secs);
    if let Some(c) = args.concurrency {
        settings.concurrency = c;
    }
    settings.lease = Some(lease(DEFAULT_LEASE, "replica-a"));
    let concurrency = settings.concurrency;
    // One controller, or one per shard with its watch filter and its own
    // Lease, as `--watch-filter` sets them; each with its own User-Agent,
    // so that the API server's log tells their requests apart.
    let mut controllers = Vec::new();
    for k in 0..args.shards {
        let (agent, settings) = if args.shards > 1 {
            let filter = WatchFilter::parse(&shard_value(k)).map_err(|e| e.to_string())?;
            let mut settings = settings.clone().in_shard(filter.clone());
            settings.lease = Some(lease(
                &lease_name(DEFAULT_LEASE, Some(&filter)),
                &format!("{}-a", shard_value(k)),
            ));
            (shard_agent(k), settings)
        } else {
            (CONTROLLER_AGENT.to_string(), settings.clone())
        };
        controllers.push((controller_client(&url, &agent).await?, settings));
    }
    let token = CancellationToken::new();
    let cpu_start = cpu_secs();
    let started = Instant::now();
    let tasks: Vec<_> = controllers
        .iter()
        .map(|(client, settings)| {
            let (client, settings, token) = (client.clone(), settings.clone(), token.clone());
            tokio::spawn(async move { run(client, settings, token).await })
        })
        .collect();

    // Converge.
    let deadline = started + Duration::from_secs(args.timeout_secs);
    let (mut first, mut p50, mut p90) = (None, None, None);
    let mut last_report = Instant::now();
    let (ready, converge_secs) = loop {
        let (route_ready, _ready, total) = server.converged().await?;
        let t = started.elapsed().as_secs_f64();
        if route_ready > 0 && first.is_none() {
            first = Some(t);
        }
        if route_ready * 2 >= n && p50.is_none() {
            p50 = Some(t);
        }
        if route_ready * 10 >= n * 9 && p90.is_none() {
            p90 = Some(t);
        }
        if route_ready >= n && total >= n {
            break (route_ready, t);
        }
        if Instant::now() > deadline {
            eprintln!("N={n}: gave up after {t:.1} s with {route_ready} of {n} converged");
            eprintln!("N={n}: {}", server.ask("stuck").await?);
            break (route_ready, t);
        }
        if last_report.elapsed() > Duration::from_secs(5) {
            eprintln!("N={n}: {t:.1} s: {route_ready} of {n} RouteReady");
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let converge = server.stats().await?;
    let cpu_converge = cpu_secs() - cpu_start;
    let reconciles_converge = reconciles.count();
    let reconciles_by_flavor = reconciles.per_flavor(n);
    let reconciles_by_reason = reconciles.per_reason(n);
    eprintln!("N={n}: converged in {converge_secs:.2} s; waiting one resync period");

    // Steady state: one full resync period plus margin, from a clean log.
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.ask("clear").await?;
    let before = reconciles.count();
    let cpu_before = cpu_secs();
    let window = args.resync_secs + 5;
    tokio::time::sleep(Duration::from_secs(window)).await;
    let steady = server.stats().await?;
    let reconciles_steady = reconciles.count() - before;
    let cpu_steady = cpu_secs() - cpu_before;
    let rss_peak = vmhwm_mib();

    // Hand-over, as in a rolling update: a second replica campaigns, then
    // the leader stops and releases the lease. The new leader starts from
    // nothing (its caches, its workload clients) and must resync every
    // cluster without a write. Measured for one controller; shards stop.
    let (handover_secs, handover_resynced, handover) = match <[_; 1]>::try_from(tasks) {
        Ok([task]) => {
            let (client, settings) = &controllers[0];
            let standby_token = CancellationToken::new();
            let standby = tokio::spawn({
                let (client, token) = (client.clone(), standby_token.clone());
                let mut settings = settings.clone();
                settings.lease = Some(lease(DEFAULT_LEASE, "replica-b"));
                async move { run(client, settings, token).await }
            });
            tokio::time::sleep(Duration::from_secs(3)).await;
            server.ask("clear").await?;
            reconciles.forget();
            let handover_started = Instant::now();
            token.cancel();
            stopped(n, "the leader", task).await;
            let handover_deadline = handover_started + Duration::from_secs(args.timeout_secs);
            while reconciles.distinct() < n && Instant::now() < handover_deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let handover_secs = handover_started.elapsed().as_secs_f64();
            let handover_resynced = reconciles.distinct();
            eprintln!(
                "N={n}: the standby resynced {handover_resynced} of {n} in {handover_secs:.2} s after the leader stopped"
            );
            // Writes that trail the last reconciliations.
            tokio::time::sleep(Duration::from_secs(5)).await;
            let handover = server.stats().await?;
            standby_token.cancel();
            stopped(n, "the second replica", standby).await;
            (json!(handover_secs), json!(handover_resynced), handover)
        }
        Err(tasks) => {
            token.cancel();
            for task in tasks {
                stopped(n, "a shard", task).await;
            }
            (Value::Null, Value::Null, Value::Null)
        }
    };
    let memkube_rss = steady["vmhwm_mib"].clone();
    // End the server by closing its input: it then stops the API servers it
    // started (a killed process would leave a real kube-apiserver behind).
    let Server {
        mut child, stdin, ..
    } = server;
    drop(stdin);
    if tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }

    let result = json!({
        "api": if args.single_api() == ApiKind::Real { "real" } else { "memkube" },
        "n": n,
        "concurrency": concurrency,
        "shards": args.shards,
        "converged": ready,
        "converge_secs": converge_secs,
        "first_secs": first,
        "p50_secs": p50,
        "p90_secs": p90,
        "converge": converge,
        "reconciles_converge": reconciles_converge,
        "reconciles_by_flavor": reconciles_by_flavor,
        "reconciles_by_reason": reconciles_by_reason,
        "cpu_converge_secs": cpu_converge,
        "cpu_steady_secs": cpu_steady,
        "steady": steady,
        "steady_window_secs": window,
        "reconciles_steady": reconciles_steady,
        "rss_base_mib": rss_base,
        "rss_peak_mib": rss_peak,
        "memkube_rss_peak_mib": memkube_rss,
        "handover_secs": handover_secs,
        "handover_resynced": handover_resynced,
        "handover": handover,
    });
    println!("result {result}");
    Ok(())
}

/// Lease `name`, which the bench's replicas campaign for, with the
/// controller's default timing (`--leader-election-lease-duration` 15 s).
fn lease(name: &str, identity: &str) -> LeaseConfig {
    let lease_duration = Duration::from_secs(15);
    LeaseConfig {
        name: name.into(),
        namespace: "default".into(),
        identity: identity.into(),
        lease_duration,
        renew_deadline: lease_duration * 2 / 3,
        retry_period: lease_duration / 7,
    }
}

/// Waits up to 20 s for a controller task to end, saying how it ended.
async fn stopped(
    n: usize,
    who: &str,
    task: tokio::task::JoinHandle<Result<(), hcp_ingress::controller::Error>>,
) {
    match tokio::time::timeout(Duration::from_secs(20), task).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => eprintln!("N={n}: {who} stopped with an error: {e}"),
        Ok(Err(e)) => eprintln!("N={n}: {who}'s task failed: {e}"),
        Err(_) => eprintln!("N={n}: {who} did not stop within 20 s"),
    }
}

// --------------------------------------------------------------- serve role

/// The management API server and what the bench needs from it.
enum Management {
    Memkube(TestApi),
    Real {
        cluster: Box<realkube::Cluster>,
        /// Audit records before this index were cleared.
        log_from: usize,
        /// kube-apiserver and etcd CPU seconds at the last `clear`.
        cpu_at_clear: (f64, f64),
    },
}

impl Management {
    fn process_cpu(&self, name: &str) -> f64 {
        match self {
            Management::Real { cluster, .. } => cluster
                .pid(name)
                .map_or(f64::NAN, |pid| cpu_secs_of(&pid.to_string())),
            Management::Memkube(_) => f64::NAN,
        }
    }

    fn clear(&mut self) {
        let cpu = (self.process_cpu("kube-apiserver"), self.process_cpu("etcd"));
        match self {
            Management::Memkube(api) => api.clear_request_log(),
            Management::Real {
                cluster,
                log_from,
                cpu_at_clear,
            } => {
                *log_from = cluster.request_log().len();
                *cpu_at_clear = cpu;
            }
        }
    }

    fn stats(&self, shards: usize) -> Value {
        match self {
            Management::Memkube(api) => stats(&api.request_log(), shards),
            Management::Real {
                cluster,
                log_from,
                cpu_at_clear,
            } => {
                // The controller authenticates as the kubeconfig's user;
                // its User-Agent tells shards apart.
                let log: Vec<RequestRecord> = cluster.request_log()[*log_from..]
                    .iter()
                    .filter(|r| r.user == realkube::CLUSTER_ADMIN_USER)
                    .map(|r| RequestRecord {
                        verb: r.verb.clone(),
                        method: String::new(),
                        path: r.path.clone(),
                        query: r
                            .uri
                            .split_once('?')
                            .map(|(_, q)| q.to_string())
                            .unwrap_or_default(),
                        field_manager: None,
                        user_agent: r.user_agent.clone(),
                        status: r.status,
                        at: None,
                    })
                    .collect();
                let mut stats = stats(&log, shards);
                let (apiserver, etcd) =
                    (self.process_cpu("kube-apiserver"), self.process_cpu("etcd"));
                stats["apiserver_cpu_secs"] = json!(apiserver);
                stats["etcd_cpu_secs"] = json!(etcd);
                stats["apiserver_cpu_since_clear"] = json!(apiserver - cpu_at_clear.0);
                stats["etcd_cpu_since_clear"] = json!(etcd - cpu_at_clear.1);
                stats["apiserver_rss_mib"] = json!(
                    cluster
                        .pid("kube-apiserver")
                        .map_or(f64::NAN, |pid| vmhwm_mib_of(&pid.to_string()))
                );
                stats
            }
        }
    }
}

/// The management API server with the CRDs and N seeded clusters (and their
/// workload sides), driven over stdio.
async fn serve(args: &Args) -> Result<(), String> {
    let n = args.single_n();
    let ours = hcp_ingress::cli::crd_yaml();
    let (mut management, setup) = match args.single_api() {
        ApiKind::Memkube => {
            let api = TestApi::start_with(memkube::Options {
                history: args.history,
                ..Default::default()
            })
            .await
            .map_err(|e| format!("failed to start memkube: {e}"))?;
            load_schemas(&api, &args.schemas)?;
            let ours: Value = serde_saphyr::from_str(&ours)
                .map_err(|e| format!("our CRD does not parse: {e}"))?;
            api.add_crd(ours)
                .map_err(|e| format!("failed to add our CRD: {e}"))?;
            let setup = client(&api.url(), BENCH_AGENT)?;
            (Management::Memkube(api), setup)
        }
        ApiKind::Real => {
            let cluster = realkube::Cluster::start(realkube::Options {
                name: "bench".into(),
                role: realkube::Role::Management,
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
            let mut files: Vec<PathBuf> = std::fs::read_dir(&args.schemas)
                .map_err(|e| format!("{}: {e}", args.schemas.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
                .collect();
            files.sort();
            for path in files {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                cluster
                    .apply_crds(&text)
                    .await
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
            cluster.apply_crds(&ours).await.map_err(|e| e.to_string())?;
            let setup = cluster.admin_client();
            let management = Management::Real {
                cluster: Box::new(cluster),
                log_from: 0,
                cpu_at_clear: (0.0, 0.0),
            };
            (management, setup)
        }
    };

    let seeding = Instant::now();
    let namespaces = args.namespaces.max(1);
    seed(
        &setup,
        n,
        namespaces,
        args.workload_proxy || args.workloads,
        args.shards,
    )
    .await?;
    let rss_before_workloads = rss_kib();
    let workloads = if args.workloads {
        Some(workload_sides(&setup, n, namespaces).await?)
    } else {
        None
    };
    // What the rig holds per workload side (its stores, the stand-in
    // kubelets), before the controller connects.
    let rig_kib_per_cluster = (rss_kib() - rss_before_workloads) / n.max(1) as f64;
    if args.workloads {
        eprintln!(
            "bench: the workload sides take {rig_kib_per_cluster:.1} KiB each in this process"
        );
    }
    eprintln!(
        "bench: seeded {n} Clusters and ControlPlaneIngresses{} in {:.2} s",
        if args.workloads {
            " with their workload sides"
        } else {
            ""
        },
        seeding.elapsed().as_secs_f64()
    );
    match &mut management {
        Management::Memkube(api) => {
            api.add_latency(
                RequestMatch::new("*", ""),
                Duration::from_millis(args.latency_ms),
            );
            management.clear();
            if let Management::Memkube(api) = &management {
                println!("url {}", api.url());
            }
        }
        Management::Real { cluster, .. } => {
            let path = cluster.dir().join("controller.kubeconfig");
            std::fs::write(&path, cluster.kubeconfig_yaml())
                .map_err(|e| format!("{}: {e}", path.display()))?;
            management.clear();
            println!("kubeconfig {}", path.display());
        }
    }

    // The gateway flavor's TLSRoutes are ready once their Gateway's
    // controller accepts them.
    let gateway = tokio::spawn({
        let client = setup.clone();
        async move { memkube::stand_in::tls_routes_accepted(client, GATEWAY_CONTROLLER).await }
    });

    // Convergence is read from a watch-fed cache: listing every object ten
    // times a second would cost the API server more than the controller does.
    let (cpis, writer) = reflector::store::<ControlPlaneIngress>();
    let watch = tokio::spawn(
        watcher(Api::all(setup.clone()), watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .for_each(|_| futures::future::ready(())),
    );
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let answer = match line.trim() {
            "converged" => {
                let (route_ready, ready, total) = converged(&cpis.state(), args.workloads);
                format!("converged {route_ready} {ready} {total}")
            }
            "clear" => {
                management.clear();
                "ok".to_string()
            }
            "stats" => {
                let mut stats = management.stats(args.shards);
                stats["rig_kib_per_cluster"] = json!(rig_kib_per_cluster);
                format!("stats {stats}")
            }
            "stuck" => format!("stuck {}", Value::from(stuck(&cpis.state()))),
            other => format!("error unknown command {other:?}"),
        };
        println!("{answer}");
    }
    watch.abort();
    gateway.abort();
    drop(workloads);
    Ok(())
}

/// The test CA every workload side's proxy certificate is minted from.
const CA_CRT: &str = include_str!("../../workload/fixtures/ca.crt");
const CA_KEY: &str = include_str!("../../workload/fixtures/ca.key");

/// For each cluster: an in-memory workload API server as the API server
/// leaves it (the `kubernetes` Service and Endpoints, a CCM), its
/// `<cluster>-kubeconfig` and `<cluster>-ca` Secrets, the Cluster marked
/// initialized, and a stand-in kubelet reporting the proxy ready.
///
/// The workload API servers are tenants of one [`memkube::Host`]: one
/// listener and certificate, a store each (with a small watch buffer), and
/// the stand-in kubelet working on the store in-process. That keeps the
/// rig's cost per cluster small enough for thousands on one machine; the
/// controller still connects to each with its own client, over TLS, from
/// the cluster's kubeconfig.
async fn workload_sides(client: &Client, n: usize, namespaces: usize) -> Result<Host, String> {
    let host = Host::start(memkube::Options {
        name: "workloads".into(),
        tls: true,
        watch_buffer: WORKLOAD_WATCH_BUFFER,
        ..Default::default()
    })
    .await
    .map_err(|e| format!("failed to start the workload API servers: {e}"))?;
    let cluster_resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "cluster.x-k8s.io",
        "v1beta2",
        "Cluster",
    ));
    futures::stream::iter(0..n)
        .map(|i| {
            let client = client.clone();
            let cluster_resource = cluster_resource.clone();
            let ns = namespace(i % namespaces);
            let name = tenant(i);
            // HTTPS with the host's CA in the kubeconfig, as CAPI writes it.
            let workload = host.add(&name);
            async move {
                seed_workload(&workload.store())?;
                let store = workload.store();
                tokio::spawn(async move {
                    memkube::stand_in::daemon_set_ready_in_store(
                        store,
                        "kube-system",
                        "hcp-ingress-proxy",
                    )
                    .await
                });
                let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
                for (secret, data) in [
                    (
                        format!("{name}-kubeconfig"),
                        json!({"value": workload.kubeconfig_yaml()}),
                    ),
                    (
                        format!("{name}-ca"),
                        json!({"tls.crt": CA_CRT, "tls.key": CA_KEY}),
                    ),
                ] {
                    let object: Secret = serde_json::from_value(
                        json!({"metadata": {"name": secret, "namespace": ns}, "stringData": data}),
                    )
                    .map_err(|e| e.to_string())?;
                    secrets
                        .create(&PostParams::default(), &object)
                        .await
                        .map_err(|e| format!("failed to create Secret {ns}/{secret}: {e}"))?;
                }
                let clusters: Api<DynamicObject> =
                    Api::namespaced_with(client, &ns, &cluster_resource);
                clusters
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(
                            json!({"status": {"initialization": {"controlPlaneInitialized": true}}}),
                        ),
                    )
                    .await
                    .map_err(|e| format!("failed to mark Cluster {ns}/{name} initialized: {e}"))?;
                Ok::<(), String>(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<()>()
        .await?;
    Ok(host)
}

/// Events a workload API server's watch may fall behind by: its objects
/// change a few times per reconciliation, and every resource preallocates
/// this many slots.
const WORKLOAD_WATCH_BUFFER: usize = 64;

/// What a workload API server holds before hcp-ingress touches it, written
/// in-process as kube-apiserver (and a deployment tool) would.
fn seed_workload(store: &memkube::store::Store) -> Result<(), String> {
    let apply = memkube::store::WriteOptions {
        manager: "kube-apiserver".into(),
        ..Default::default()
    };
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kubernetes", "namespace": "default"},
        "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443, "targetPort": 6443, "protocol": "TCP"}]}});
    let endpoints = json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "kubernetes", "namespace": "default"},
        "subsets": [{"addresses": [{"ip": "10.0.0.5"}], "ports": [{"name": "https", "port": 6443}]}]});
    let ccm = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "cloud-controller-manager", "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"app": "ccm"}}, "template": {"metadata": {"labels": {"app": "ccm"}},
            "spec": {"containers": [{"name": "ccm", "image": "registry.example/ccm:v1"}]}}}});
    for ((group, version, plural), ns, name, object) in [
        (("", "v1", "services"), "default", "kubernetes", service),
        (("", "v1", "endpoints"), "default", "kubernetes", endpoints),
        (
            ("apps", "v1", "deployments"),
            "kube-system",
            "cloud-controller-manager",
            ccm,
        ),
    ] {
        let spec = store
            .resolve(group, version, plural)
            .ok_or_else(|| format!("memkube does not serve {plural}"))?;
        store
            .patch(
                &spec,
                ns,
                name,
                memkube::store::PatchBody::Apply(object),
                &apply,
            )
            .map_err(|e| format!("failed to seed {plural} {ns}/{name}: {e:?}"))?;
    }
    Ok(())
}

fn load_schemas(api: &TestApi, dir: &Path) -> Result<(), String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("failed to read the CRD folder {}: {e}", dir.display()))?;
    let mut loaded = 0;
    for entry in entries {
        let path = entry
            .map_err(|e| format!("failed to read {}: {e}", dir.display()))?
            .path();
        if path.extension().is_some_and(|e| e == "yaml") {
            loaded += api
                .load_crds(&path)
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    eprintln!(
        "memkube: loaded {loaded} upstream CRDs from {}",
        dir.display()
    );
    Ok(())
}

/// The namespaces, then N CAPI Clusters and N ControlPlaneIngresses, 32 at a time.
async fn seed(
    client: &Client,
    n: usize,
    namespaces: usize,
    workload_proxy: bool,
    shards: usize,
) -> Result<(), String> {
    let ns_api: Api<Namespace> = Api::all(client.clone());
    for i in 0..namespaces {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace(i)}}))
            .map_err(|e| e.to_string())?;
        ns_api
            .create(&PostParams::default(), &ns)
            .await
            .map_err(|e| format!("failed to create namespace {}: {e}", namespace(i)))?;
    }
    let cluster_resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "cluster.x-k8s.io",
        "v1beta2",
        "Cluster",
    ));
    let cpi_resource = ApiResource::erase::<ControlPlaneIngress>(&());
    futures::stream::iter(0..n)
        .map(|i| {
            let client = client.clone();
            let (cluster_resource, cpi_resource) = (cluster_resource.clone(), cpi_resource.clone());
            async move {
                let ns = namespace(i % namespaces);
                let name = tenant(i);
                let post = PostParams::default();
                let clusters: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), &ns, &cluster_resource);
                let (mut cluster, mut cpi) = (
                    cluster(&ns, &name),
                    cpi(&ns, &name, FLAVORS[i % FLAVORS.len()], workload_proxy),
                );
                if shards > 1 {
                    let labels = json!({WATCH_FILTER_LABEL: shard_value(i % shards)});
                    cluster["metadata"]["labels"] = labels.clone();
                    cpi["metadata"]["labels"] = labels;
                }
                clusters
                    .create(&post, &dynamic(cluster)?)
                    .await
                    .map_err(|e| format!("failed to create Cluster {ns}/{name}: {e}"))?;
                let cpis: Api<DynamicObject> = Api::namespaced_with(client, &ns, &cpi_resource);
                cpis.create(&post, &dynamic(cpi)?).await.map_err(|e| {
                    format!("failed to create ControlPlaneIngress {ns}/{name}: {e}")
                })?;
                Ok::<(), String>(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<()>()
        .await
}

/// The `--watch-filter` value of shard `k`.
fn shard_value(k: usize) -> String {
    format!("shard-{k}")
}

fn namespace(i: usize) -> String {
    format!("bench-{i:03}")
}

fn dynamic(value: Value) -> Result<DynamicObject, String> {
    serde_json::from_value(value).map_err(|e| format!("bad seed object: {e}"))
}

fn cluster(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
           "metadata": {"name": name, "namespace": ns}, "spec": {"paused": false}})
}

/// A ControlPlaneIngress of `flavor` for cluster `name`; the node proxy
/// (workload side) only when `workload_proxy`.
fn cpi(ns: &str, name: &str, flavor: &str, workload_proxy: bool) -> Value {
    let mut ingress = json!({"apiHost": format!("api.{name}.{ns}.example.com"),
                             "konnectivityHost": format!("konnectivity.{name}.{ns}.example.com"),
                             "port": 443});
    let mut spec = json!({"clusterName": name,
                          "backend": {"serviceName": format!("kmc-{name}"), "apiPort": 30443, "konnectivityPort": 30132}});
    match flavor {
        "haproxy" | "nginx" => ingress["className"] = json!(flavor),
        "traefik" => spec["route"] = json!({"controller": "traefik"}),
        _ => {
            spec["route"] = json!({"controller": "gateway",
                                   "gateway": {"parentRefs": [{"name": "shared", "namespace": "gateway-system"}]}})
        }
    }
    spec["ingress"] = ingress;
    if !workload_proxy {
        spec["proxy"] = json!({"enabled": false});
    }
    json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

/// (RouteReady=True at the current generation, Ready=True, total).
/// With `workloads`, a cluster converges once its endpoints are steered and
/// its cloud-controller-manager configured as well.
fn converged(cpis: &[Arc<ControlPlaneIngress>], workloads: bool) -> (usize, usize, usize) {
    let total = cpis.len();
    let (mut route_ready, mut ready) = (0, 0);
    for cpi in cpis {
        let Some(status) = &cpi.status else { continue };
        if status.observed_generation != cpi.metadata.generation {
            continue;
        }
        let is_true = |t: &str| {
            status
                .conditions
                .iter()
                .any(|c| c.type_ == t && c.status == "True")
        };
        let workload_done = !workloads || (is_true("EndpointsSteered") && is_true("CCMConfigured"));
        route_ready += usize::from(is_true("RouteReady") && workload_done);
        ready += usize::from(is_true("Ready"));
    }
    (route_ready, ready, total)
}

/// Why clusters have not converged: how many show each condition that is not
/// True yet, as "type reason (count)", most frequent first.
fn stuck(cpis: &[Arc<ControlPlaneIngress>]) -> Vec<String> {
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for cpi in cpis {
        let Some(status) = &cpi.status else {
            *reasons.entry("no status".into()).or_default() += 1;
            continue;
        };
        // Paused=False is the healthy state.
        let open = |c: &&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition| {
            c.status != "True" && c.type_ != "Paused"
        };
        for c in status.conditions.iter().filter(open) {
            *reasons
                .entry(format!("{} {}", c.type_, c.reason))
                .or_default() += 1;
        }
    }
    let mut reasons: Vec<(String, usize)> = reasons.into_iter().collect();
    reasons.sort_by_key(|r| std::cmp::Reverse(r.1));
    reasons
        .into_iter()
        .map(|(r, n)| format!("{r} ({n})"))
        .collect()
}

/// The controller's requests in `log`: total, writes, by verb and resource,
/// a few writes verbatim, and memkube's own peak RSS.
fn stats(log: &[RequestRecord], shards: usize) -> Value {
    let mine: Vec<&RequestRecord> = log.iter().filter(|r| r.user_agent != BENCH_AGENT).collect();
    // Each shard's requests, and those about one cluster's objects (its
    // ControlPlaneIngress, Cluster, Secrets, routes, all named after it)
    // that belong to another shard.
    let mut by_shard: BTreeMap<String, u64> = BTreeMap::new();
    let mut foreign = Vec::new();
    for r in &mine {
        let Some(k) = shard_of_agent(&r.user_agent) else {
            continue;
        };
        *by_shard.entry(shard_value(k)).or_default() += 1;
        if tenant_of(&r.path).is_some_and(|i| i % shards.max(1) != k) {
            foreign.push(format!(
                "{} {} {} -> {}",
                r.user_agent, r.verb, r.path, r.status
            ));
        }
    }
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    for r in &mine {
        *by.entry(format!("{:<9} {}", r.verb, resource_of(&r.path)))
            .or_default() += 1;
    }
    // The leader's renewals are its election, not its work.
    let is_lease = |r: &RequestRecord| resource_of(&r.path) == "coordination.k8s.io/leases";
    let writes: Vec<&&RequestRecord> = mine
        .iter()
        .filter(|r| is_write(r) && !is_lease(r))
        .collect();
    let lease_writes = mine.iter().filter(|r| is_write(r) && is_lease(r)).count();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    for r in mine.iter().filter(|r| r.status >= 400) {
        *errors
            .entry(format!(
                "{} {:<9} {}",
                r.status,
                r.verb,
                resource_of(&r.path)
            ))
            .or_default() += 1;
    }
    json!({
        "total": mine.len(),
        "writes": writes.len(),
        "lease_writes": lease_writes,
        "by": by,
        "write_samples": writes.iter().take(20).map(|r| format!("{} {} -> {}", r.verb, r.path, r.status)).collect::<Vec<_>>(),
        "agents": mine.iter().map(|r| r.user_agent.clone()).collect::<std::collections::BTreeSet<_>>(),
        "by_shard": by_shard,
        "foreign": foreign.len(),
        "foreign_samples": foreign.iter().take(20).collect::<Vec<_>>(),
        "errors": errors,
        "vmhwm_mib": vmhwm_mib(),
        "cpu_secs": cpu_secs(),
    })
}

/// The name of cluster `i` (its Cluster, ControlPlaneIngress and workload
/// side; its Secrets and routes are named after it).
fn tenant(i: usize) -> String {
    format!("tenant-{i:05}")
}

/// The cluster index `i` of a path or reference that names one of
/// [`tenant`]`(i)`'s objects.
fn tenant_of(path: &str) -> Option<usize> {
    let (_, rest) = path.split_once("tenant-")?;
    let digits = rest.get(..5)?;
    digits.parse().ok()
}

/// Anything but a read (get, list, watch, discovery) counts as a write.
fn is_write(r: &RequestRecord) -> bool {
    !matches!(r.verb.as_str(), "get" | "list" | "watch" | "discovery")
}

/// `group/resource[/subresource]` of a request path, without names.
fn resource_of(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => ("core", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return path.to_string(),
    };
    let rest = match rest {
        ["namespaces", _ns, rest @ ..] if !rest.is_empty() => rest,
        other => other,
    };
    match rest {
        [] => format!("{group} (discovery)"),
        [resource] | [resource, _] => format!("{group}/{resource}"),
        [resource, _, sub, ..] => format!("{group}/{resource}/{sub}"),
    }
}

#[cfg(test)]
mod tests {
    use super::resource_of;

    #[test]
    fn resources_of_paths() {
        assert_eq!(
            resource_of(
                "/apis/hcp-ingress.dev/v1alpha1/namespaces/a/controlplaneingresses/x/status"
            ),
            "hcp-ingress.dev/controlplaneingresses/status"
        );
        assert_eq!(
            resource_of("/apis/networking.k8s.io/v1/ingresses"),
            "networking.k8s.io/ingresses"
        );
        assert_eq!(resource_of("/api/v1/namespaces"), "core/namespaces");
        assert_eq!(resource_of("/api/v1/namespaces/x"), "core/namespaces");
        assert_eq!(resource_of("/apis/x.io/v1"), "x.io (discovery)");
    }
}
