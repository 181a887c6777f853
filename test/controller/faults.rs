//! Hardening: 100 clusters reconciled under seeded random API faults, the
//! controller killed mid-way (its runtime dropped with requests in flight) and
//! a fresh one started on the same API servers. Everything converges to
//! exactly the expected objects (none lost, none duplicated), the Lease stays
//! single, and a resync afterwards writes nothing.
//!
//! Clusters `c000`..`c099`, by `i % 10`: a K0smotronControlPlane, a k0rdent
//! ClusterDeployment, a CAPI Cluster with the domain annotation, a plain
//! ControlPlaneIngress with the node proxy (those four install into a
//! workload cluster: one memkube each, since the proxy objects have fixed
//! names), and six plain management-only ControlPlaneIngresses of the
//! haproxy, nginx, traefik, gateway, haproxy-ingress and generic flavors.

use std::{
    collections::{BTreeMap, BTreeSet},
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use hcp_ingress::{
    api::{CLUSTER_NAME_LABEL, ControlPlaneIngress, MANAGED_BY_LABEL, MANAGER},
    controller::{LeaseConfig, Settings, run},
    render::{self, RouteKind},
};
use k8s_openapi::{
    ByteString,
    api::{
        apps::v1::{DaemonSet, Deployment},
        coordination::v1::Lease,
        core::v1::{ConfigMap, Endpoints, Namespace, Secret, Service},
        discovery::v1::EndpointSlice,
    },
};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams},
};
use memkube::{RandomFaults, TestApi};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::harness::*;

const CLUSTERS: usize = 100;
/// Seed of the management server's faults; workload server `j` uses `SEED + 1 + j`.
const SEED: u64 = 20_250_803;
const LEASE_NAMESPACE: &str = "hcp-ingress-system";
const LEASE_NAME: &str = "hcp-ingress-controller";
const FINALIZER: &str = "hcp-ingress.dev/workload-cleanup";
const CA_CRT: &str = include_str!("../workload/fixtures/ca.crt");
const CA_KEY: &str = include_str!("../workload/fixtures/ca.key");

/// Where a cluster's ControlPlaneIngress comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Origin {
    K0smotronControlPlane,
    ClusterDeployment,
    DomainAnnotation,
    /// A plain ControlPlaneIngress; `proxy` installs into a workload cluster.
    Plain {
        flavor: &'static str,
        proxy: bool,
    },
}

impl Origin {
    /// k0smotron makes the route and the node proxy of these itself.
    fn k0smotron(self) -> bool {
        matches!(
            self,
            Origin::K0smotronControlPlane | Origin::ClusterDeployment
        )
    }
}

/// One of the 100 clusters.
struct Case {
    cluster: String,
    /// Name of its ControlPlaneIngress.
    cpi: String,
    origin: Origin,
    /// Index of its workload server, if it installs into one.
    workload: Option<usize>,
}

impl Case {
    fn new(i: usize, workloads: &mut usize) -> Case {
        let cluster = format!("c{i:03}");
        let origin = match i % 10 {
            0 => Origin::K0smotronControlPlane,
            1 => Origin::ClusterDeployment,
            2 => Origin::DomainAnnotation,
            3 => Origin::Plain {
                flavor: "haproxy",
                proxy: true,
            },
            n => Origin::Plain {
                flavor: [
                    "haproxy",
                    "nginx",
                    "traefik",
                    "gateway",
                    "haproxy-ingress",
                    "generic",
                ][n - 4],
                proxy: false,
            },
        };
        let workload = match origin {
            Origin::Plain { proxy: false, .. } => None,
            _ => {
                *workloads += 1;
                Some(*workloads - 1)
            }
        };
        let cpi = match origin {
            Origin::K0smotronControlPlane => format!("{cluster}-cp"),
            _ => cluster.clone(),
        };
        Case {
            cluster,
            cpi,
            origin,
            workload,
        }
    }

    /// The objects a user (and CAPI) would create, in order: the Cluster
    /// first, but for k0rdent.
    fn inputs(&self, workload: Option<&TestApi>) -> Vec<Value> {
        let name = &self.cluster;
        let mut cluster = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": name, "namespace": NS}, "spec": {"paused": false}});
        let mut out = Vec::new();
        let mut source = match self.origin {
            Origin::K0smotronControlPlane => Some(
                json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "K0smotronControlPlane",
                "metadata": {"name": self.cpi, "namespace": NS, "labels": {CLUSTER_NAME_LABEL: name}},
                "spec": {"version": "v1.33.4-k0s.0", "service": {"type": "ClusterIP", "apiPort": 30443, "konnectivityPort": 30132},
                         "ingress": {"apiHost": format!("api.{name}.example.com"), "konnectivityHost": format!("konn.{name}.example.com"),
                                     "className": "haproxy", "port": 443}}}),
            ),
            Origin::ClusterDeployment => Some(
                json!({"apiVersion": "k0rdent.mirantis.com/v1beta1", "kind": "ClusterDeployment",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"template": "aws-hosted-cp-1-0-14", "credential": "aws-cluster-identity-cred",
                         "config": {"k0smotron": {"service": {"type": "LoadBalancer", "apiPort": 6443, "konnectivityPort": 8132}},
                                    "ingress": {"enabled": true, "className": "haproxy-ingress", "apiHost": format!("api.{name}.example.com"),
                                                "konnectivityHost": format!("konn.{name}.example.com"), "port": 443}}}}),
            ),
            Origin::DomainAnnotation => {
                cluster["metadata"]["annotations"] = json!({"hcp-ingress.dev/domain": "hcp.example.com",
                                                           "hcp-ingress.dev/controller": "traefik"});
                cluster["spec"]["controlPlaneRef"] = json!({"apiGroup": "controlplane.cluster.x-k8s.io",
                                                            "kind": "KamajiControlPlane", "name": format!("{name}-cp")});
                None
            }
            Origin::Plain { flavor, proxy } => {
                let mut route = json!({"controller": flavor});
                if flavor == "gateway" {
                    route["gateway"] =
                        json!({"parentRefs": [{"name": "shared", "namespace": "gw"}]});
                }
                let proxy = if proxy {
                    json!({"upstreams": ["192.0.2.10", "192.0.2.11"]})
                } else {
                    json!({"enabled": false})
                };
                Some(
                    json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
                    "metadata": {"name": name, "namespace": NS},
                    "spec": {"clusterName": name, "route": route, "proxy": proxy,
                             "ingress": {"apiHost": format!("api.{name}.example.com"), "konnectivityHost": format!("konn.{name}.example.com")},
                             "backend": {"serviceName": format!("kmc-{name}"), "apiPort": 30443, "konnectivityPort": 30132}}}),
                )
            }
        };
        // k0rdent creates the CAPI Cluster after the ClusterDeployment, from
        // its template (seconds later): the caller creates these first.
        if self.origin == Origin::ClusterDeployment {
            out.extend(source.take());
        }
        out.push(cluster);
        if let Some(workload) = workload {
            out.push(secret(
                &format!("{name}-kubeconfig"),
                [("value", workload.kubeconfig_yaml())],
            ));
            out.push(secret(
                &format!("{name}-ca"),
                [
                    ("tls.crt", CA_CRT.to_string()),
                    ("tls.key", CA_KEY.to_string()),
                ],
            ));
        }
        out.extend(source);
        // k0smotron makes the route of these itself: Ingress `kmc-<cluster>`.
        if let Some(class) = match self.origin {
            Origin::K0smotronControlPlane => Some("haproxy"),
            Origin::ClusterDeployment => Some("haproxy-ingress"),
            _ => None,
        } {
            let rule = |host: String| {
                json!({"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": format!("kmc-{name}"), "port": {"number": 443}}}}]}})
            };
            out.push(json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"name": format!("kmc-{name}"), "namespace": NS},
                "spec": {"ingressClassName": class, "rules": [rule(format!("api.{name}.example.com")), rule(format!("konn.{name}.example.com"))]}}));
        }
        out
    }
}

fn secret<const N: usize>(name: &str, data: [(&str, String); N]) -> Value {
    let data: BTreeMap<String, ByteString> = data
        .into_iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.into_bytes())))
        .collect();
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}, "data": data})
}

fn cluster_api(client: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        NS,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster"),
            "clusters",
        ),
    )
}

/// Retry `op` through injected faults (the test's own requests meet them too).
async fn retrying<T, E: std::fmt::Display, F, Fut>(what: &str, mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut last = String::new();
    for _ in 0..200 {
        match op().await {
            Ok(value) => return value,
            Err(error) => last = error.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what}: still failing after 200 attempts: {last}");
}

/// Create the inputs of `cases` in order, each ClusterDeployment first of all
/// (its Cluster comes a while later, after the other clusters' objects).
async fn create_all(client: &Client, cases: &[Case], workloads: &[TestApi]) {
    let inputs: Vec<Vec<Value>> = cases
        .iter()
        .map(|case| case.inputs(case.workload.map(|j| &workloads[j])))
        .collect();
    let (first, rest): (Vec<_>, Vec<_>) = cases
        .iter()
        .zip(&inputs)
        .map(|(case, inputs)| match case.origin {
            Origin::ClusterDeployment => (&inputs[..1], &inputs[1..]),
            _ => (&inputs[..0], &inputs[..]),
        })
        .unzip();
    for input in first.into_iter().chain(rest).flatten() {
        create(client, input).await;
    }
}

/// Apply one input as its owner would, then mark the Cluster initialized.
async fn create(client: &Client, value: &Value) {
    let obj: DynamicObject = serde_json::from_value(value.clone()).unwrap();
    let types = obj.types.clone().unwrap();
    let (group, version) = types
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", &types.api_version));
    let gvk = GroupVersionKind::gvk(group, version, &types.kind);
    let (resource, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &resource);
    let name = obj.name_any();
    let manager = if types.kind == "Secret" {
        "capi"
    } else {
        "user"
    };
    let (params, patch) = (PatchParams::apply(manager).force(), Patch::Apply(value));
    retrying(&format!("apply {} {name}", types.kind), || {
        api.patch(&name, &params, &patch)
    })
    .await;
    if types.kind == "Cluster" && types.api_version.starts_with("cluster.x-k8s.io/") {
        let status =
            Patch::Merge(json!({"status": {"initialization": {"controlPlaneInitialized": true}}}));
        let params = PatchParams::default();
        retrying(&format!("initialize Cluster {name}"), || {
            api.patch_status(&name, &params, &status)
        })
        .await;
    }
}

/// A workload cluster as its API server leaves it (a name of its own in the logs).
async fn workload_cluster(index: usize) -> TestApi {
    let api = TestApi::start_with(memkube::Options {
        name: format!("workload-{index}"),
        ..Default::default()
    })
    .await
    .unwrap();
    crate::workload::seed_workload(&api.client(), false).await;
    api
}

/// Stand-in for the DaemonSet controller and kubelets of one workload cluster.
fn kubelet(
    client: Client,
    namespace: &'static str,
    name: &'static str,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        memkube::stand_in::daemon_set_ready_on_one_node(client, namespace, name).await
    })
}

fn settings(identity: &str, resync: Duration) -> Settings {
    let mut settings = Settings::for_tests();
    settings.timing.retry = Duration::from_secs(1);
    settings.timing.resync = resync;
    settings.lease = Some(LeaseConfig {
        name: LEASE_NAME.into(),
        namespace: LEASE_NAMESPACE.into(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(250),
    });
    settings
}

/// A controller in its own runtime on its own thread, as a process would be:
/// `kill` drops the runtime, every task and request in flight with it, and
/// releases nothing (the Lease is left to expire).
struct Process {
    kill: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Process {
    fn start(url: String, settings: Settings) -> Process {
        let (kill, killed) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let client = Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
                tokio::select! {
                    result = run(client, settings, CancellationToken::new()) => result.expect("controller runs"),
                    _ = killed => {}
                }
            });
            runtime.shutdown_timeout(Duration::from_secs(5));
        });
        Process { kill, thread }
    }

    fn kill(self) {
        let _ = self.kill.send(());
        self.thread.join().expect("the controller thread ends");
    }
}

/// Ready=True at the current generation. No Gateway controller runs here:
/// a TLSRoute is done once applied and waiting for one (RouteReady Unknown
/// AwaitingGateway), every other condition True (Paused: False).
fn converged(cpi: &ControlPlaneIngress) -> bool {
    let current =
        cpi.status.as_ref().and_then(|s| s.observed_generation) == cpi.metadata.generation;
    let conditions = cpi
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let ready = condition(cpi, "Ready").is_some_and(|(status, ..)| status == "True");
    let awaiting_gateway = !conditions.is_empty()
        && conditions
            .iter()
            .filter(|c| c.type_ != "Ready" && c.type_ != "Paused")
            .all(|c| {
                c.status == "True" || (c.type_ == "RouteReady" && c.reason == "AwaitingGateway")
            });
    current && (ready || awaiting_gateway)
}

/// Names of the objects of `resource` in `namespace`.
async fn names(client: &Client, namespace: &str, resource: &ApiResource) -> BTreeSet<String> {
    Api::<DynamicObject>::namespaced_with(client.clone(), namespace, resource)
        .list(&ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.name_any())
        .collect()
}

/// What a replica's `/metrics` says about its reconciliations.
#[derive(Debug, Default)]
#[allow(dead_code)] // read through Debug in the report
struct Figures {
    successes: u64,
    errors: u64,
    in_flight: u64,
    writes: u64,
    error_reasons: Vec<String>,
}

async fn scrape(addr: std::net::SocketAddr) -> Figures {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut text = String::new();
    if let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await {
        let _ = stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await;
        let _ = stream.read_to_string(&mut text).await;
    }
    let mut figures = Figures::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((key, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let value = value.parse::<f64>().unwrap_or_default() as u64;
        if key.starts_with("hcp_ingress_controller_reconciles_total{result=\"success\"") {
            figures.successes += value;
        } else if key.starts_with("hcp_ingress_controller_reconciles_total{result=\"error\"") {
            figures.errors += value;
        } else if key.starts_with("hcp_ingress_controller_reconciles_in_flight") {
            figures.in_flight += value;
        } else if key.starts_with("hcp_ingress_controller_writes_total") {
            figures.writes += value;
        } else if key.starts_with("hcp_ingress_controller_reconcile_errors_total") {
            figures.error_reasons.push(format!("{key} {value}"));
        }
    }
    figures
}

fn writes_without_leases(api: &TestApi) -> Vec<String> {
    mem_writes(api)
        .into_iter()
        .filter(|w| !w.contains("/leases/"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converges_after_random_faults_and_a_restart_with_nothing_lost_or_duplicated() {
    // Hundreds of injected failures are logged as warnings: keep the output readable.
    hcp_ingress::telemetry::init_logging(
        hcp_ingress::telemetry::LogFormat::Text,
        "error,kube_client::client::builder=off",
    );
    let started = Instant::now();
    let m = Arc::new(management_in_memory(&[]).await);
    Api::<Namespace>::all(m.client.clone())
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": LEASE_NAMESPACE}})).unwrap(),
        )
        .await
        .unwrap();
    let mut count = 0;
    let cases: Vec<Case> = (0..CLUSTERS).map(|i| Case::new(i, &mut count)).collect();
    let mut workloads = Vec::new();
    for j in 0..count {
        workloads.push(workload_cluster(j).await);
    }
    // k0smotron ships its own node proxy into its clusters (k0s manifest deployer).
    for case in &cases {
        if let (Some(j), true) = (case.workload, case.origin.k0smotron()) {
            let haproxy = json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": "k0smotron-haproxy", "namespace": "default"},
                "spec": {"selector": {"matchLabels": {"app": "k0smotron-haproxy"}}, "template": {"metadata": {"labels": {"app": "k0smotron-haproxy"}},
                    "spec": {"containers": [{"name": "haproxy", "image": "haproxy:2.8"}]}}}});
            Api::<DaemonSet>::namespaced(workloads[j].client(), "default")
                .patch(
                    "k0smotron-haproxy",
                    &PatchParams::apply("k0s"),
                    &Patch::Apply(&haproxy),
                )
                .await
                .unwrap();
        }
    }
    let servers = || std::iter::once(m.api.mem()).chain(workloads.iter());
    let faults = |share: f64, lost: f64, seed: u64| RandomFaults {
        seed,
        reads: share,
        writes: share,
        lost_replies: lost,
        codes: vec![500, 429, 409, 503],
        slow: 0.2,
        max_latency: Duration::from_millis(20),
    };
    let set_faults = |share: f64, lost: f64| {
        for (j, server) in servers().enumerate() {
            server.set_random_faults(
                (share > 0.0).then(|| faults(share, lost, SEED.wrapping_add(j as u64))),
            );
        }
    };

    // Half the clusters exist before the controller starts; a quarter arrive
    // while replica A runs, a quarter while B runs, under faults.
    let (early, rest) = cases.split_at(CLUSTERS / 2);
    let (during_a, during_b) = rest.split_at(CLUSTERS / 4);
    create_all(&m.client, early, &workloads).await;
    let kubelets: Vec<_> = workloads
        .iter()
        .flat_map(|w| {
            [
                kubelet(w.client(), "kube-system", "hcp-ingress-proxy"),
                kubelet(w.client(), "default", "k0smotron-haproxy"),
            ]
        })
        .collect();
    let stop_drops = Arc::new(AtomicBool::new(false));
    // Watch streams end every 1.5 s: the caches resume (or relist) under faults.
    let dropper = {
        let (stop, m) = (stop_drops.clone(), m.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(1500)).await;
                m.api.mem().drop_watches();
            }
        })
    };
    set_faults(0.15, 0.05);
    let setup = started.elapsed();

    // Replica A: started, then killed mid-way with reconciles in flight.
    let a = Process::start(
        m.api.mem().url(),
        settings("replica-a", Duration::from_secs(300)),
    );
    create_all(&m.client, during_a, &workloads).await;
    let cpis_api = cpis(&m.client);
    let phase_a = Instant::now();
    let ready_at_kill = loop {
        let ready = cpis_api
            .list(&ListParams::default())
            .await
            .map(|l| l.items.iter().filter(|c| converged(c)).count())
            .unwrap_or(0);
        if ready >= 20 || phase_a.elapsed() > Duration::from_secs(10) {
            break ready;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let writes_before_kill = writes(&m.api).len();
    a.kill();
    let killed_at = started.elapsed();
    eprintln!("[{killed_at:?}] replica A killed with {ready_at_kill} Ready");

    // Replica B: fresh process state, same API servers; faults at a lower
    // rate for a while, then none.
    set_faults(0.05, 0.02);
    let (b_settings, b_metrics) = with_metrics(settings("replica-b", Duration::from_secs(300)));
    let b = m.start_with(b_settings);
    let b_started = Instant::now();
    // Once B holds the Lease (A's expires first), the rest arrives.
    let leases: Api<Lease> = Api::namespaced(m.client.clone(), LEASE_NAMESPACE);
    while leases
        .get_opt(LEASE_NAME)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .as_deref()
        != Some("replica-b")
    {
        assert!(
            b_started.elapsed() < Duration::from_secs(20),
            "replica B did not take the Lease over within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let b_leader_after = b_started.elapsed();
    create_all(&m.client, during_b, &workloads).await;
    // B works under faults until it has reconciled as many times as there
    // are clusters (its first pass over the cache, or retries of it).
    eventually("replica B reconciling under faults", || async {
        let figures = scrape(b_metrics).await;
        (figures.successes + figures.errors >= CLUSTERS as u64).then_some(())
    })
    .await;
    set_faults(0.0, 0.0);
    stop_drops.store(true, Ordering::Relaxed);
    dropper.await.unwrap();
    let faults_off_at = started.elapsed();
    eprintln!("[{faults_off_at:?}] faults off; replica B led {b_leader_after:?} after its start");

    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        let list = cpis_api.list(&ListParams::default()).await.unwrap();
        let pending: Vec<_> = list.items.iter().filter(|c| !converged(c)).collect();
        let missing: Vec<_> = cases
            .iter()
            .filter(|case| !list.items.iter().any(|c| c.name_any() == case.cpi))
            .map(|case| case.cpi.clone())
            .collect();
        if pending.is_empty() && missing.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            let report: Vec<String> = pending
                .iter()
                .take(10)
                .map(|c| {
                    format!(
                        "{}: generation {:?}, {:#?}",
                        c.name_any(),
                        c.metadata.generation,
                        c.status
                    )
                })
                .collect();
            panic!(
                "not converged 45 s after the faults stopped: {} not Ready, missing {missing:?}; first ones:\n{}",
                pending.len(),
                report.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let converged_at = started.elapsed();
    let management_requests = m.api.request_log().len();
    eprintln!("[{converged_at:?}] converged");
    for k in kubelets {
        k.abort();
    }

    check_objects(&m, &cases, &workloads).await;
    check_lease(&m.client, "replica-b").await;

    let b_figures = scrape(b_metrics).await;
    b.stop().await;
    // A resync after convergence writes nothing: a fresh replica reconciles
    // every object at start, then again every 5 s.
    for server in servers() {
        server.clear_request_log();
    }
    let (c_settings, c_metrics) = with_metrics(settings("replica-c", Duration::from_secs(5)));
    let c = m.start_with(c_settings);
    eprintln!(
        "[{:?}] objects checked, replica C started",
        started.elapsed()
    );
    // Generous: other tests of this binary start real API servers on the
    // same two cores meanwhile. The assertion is that it happens, not how fast.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let figures = scrape(c_metrics).await;
        let mut reads: BTreeMap<&str, usize> = BTreeMap::new();
        for r in m.api.request_log() {
            if r.verb == "get"
                && let Some(secret) = r.path.rsplit_once("/secrets/").map(|(_, s)| s)
                && let Some(case) = cases
                    .iter()
                    .find(|c| secret.strip_suffix("-kubeconfig") == Some(c.cluster.as_str()))
            {
                *reads.entry(case.cluster.as_str()).or_default() += 1;
            }
        }
        let behind: Vec<_> = cases
            .iter()
            .filter(|c| {
                c.workload.is_some() && reads.get(c.cluster.as_str()).copied().unwrap_or(0) < 2
            })
            .map(|c| c.cluster.clone())
            .collect();
        if figures.successes >= 2 * CLUSTERS as u64 && behind.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "replica C did not reconcile everything twice within 120 s: {figures:?}; workload clusters read less than twice: {behind:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let c_figures = scrape(c_metrics).await;
    let mut steady = writes_without_leases(m.api.mem());
    for (j, w) in workloads.iter().enumerate() {
        steady.extend(
            mem_writes(w)
                .into_iter()
                .map(|line| format!("workload-{j}: {line}")),
        );
    }
    assert!(
        steady.is_empty(),
        "a resync after convergence wrote: {steady:#?}"
    );
    assert_eq!(
        c_figures.errors, 0,
        "replica C failed reconciles: {c_figures:?}"
    );
    check_lease(&m.client, "replica-c").await;
    c.stop().await;

    let injected: Vec<_> = servers().map(|s| s.random_fault_counts()).collect();
    eprintln!(
        "faults: {} clusters ({} with a workload server), setup {setup:?}, replica A killed at {killed_at:?} \
         with {ready_at_kill} Ready and {writes_before_kill} management writes, faults off at {faults_off_at:?}, \
         converged at {converged_at:?}, total {:?}; injected: failed {}, lost replies {}, delayed {}; \
         management requests {management_requests}; replica B {b_figures:?}; replica C {c_figures:?}",
        CLUSTERS,
        workloads.len(),
        started.elapsed(),
        injected.iter().map(|c| c.failed).sum::<u64>(),
        injected.iter().map(|c| c.lost_replies).sum::<u64>(),
        injected.iter().map(|c| c.delayed).sum::<u64>(),
    );
}

/// Exactly the expected objects, with the right owners and labels.
async fn check_objects(m: &Management, cases: &[Case], workloads: &[TestApi]) {
    let client = &m.client;
    let live: BTreeMap<String, ControlPlaneIngress> = cpis(client)
        .list(&ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.name_any(), c))
        .collect();
    let wanted: BTreeSet<String> = cases.iter().map(|c| c.cpi.clone()).collect();
    assert_eq!(
        live.keys().cloned().collect::<BTreeSet<_>>(),
        wanted,
        "ControlPlaneIngresses"
    );

    let clusters: BTreeMap<String, DynamicObject> = cluster_api(client)
        .list(&ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.name_any(), c))
        .collect();
    let mut wanted_routes: Vec<(RouteKind, BTreeSet<String>)> = RouteKind::ALL
        .iter()
        .map(|k| (*k, BTreeSet::new()))
        .collect();
    for case in cases {
        let cpi = &live[&case.cpi];
        let what = format!("ControlPlaneIngress {} ({:?})", case.cpi, case.origin);
        let cluster_uid = clusters[&case.cluster].uid().unwrap();
        assert_eq!(
            cpi.finalizers(),
            [FINALIZER.to_string()],
            "{what}: finalizers"
        );
        let owners: Vec<(String, String, Option<bool>)> = cpi
            .owner_references()
            .iter()
            .map(|o| (o.kind.clone(), o.name.clone(), o.controller))
            .collect();
        let cluster_owner = ("Cluster".to_string(), case.cluster.clone(), Some(false));
        let expected = match case.origin {
            Origin::Plain { .. } => vec![cluster_owner],
            Origin::K0smotronControlPlane => vec![
                (
                    "K0smotronControlPlane".to_string(),
                    case.cpi.clone(),
                    Some(true),
                ),
                cluster_owner,
            ],
            Origin::ClusterDeployment => vec![
                (
                    "ClusterDeployment".to_string(),
                    case.cpi.clone(),
                    Some(true),
                ),
                cluster_owner,
            ],
            Origin::DomainAnnotation => {
                vec![("Cluster".to_string(), case.cluster.clone(), Some(true))]
            }
        };
        assert_eq!(owners, expected, "{what}: owner references");
        assert!(
            cpi.owner_references()
                .iter()
                .filter(|o| o.kind == "Cluster")
                .all(|o| o.uid == cluster_uid),
            "{what}: the Cluster owner reference has the live uid"
        );

        // k0smotron's own route, left as it is.
        if case.origin.k0smotron() {
            let slot = wanted_routes
                .iter_mut()
                .find(|(k, _)| *k == RouteKind::Ingress)
                .unwrap();
            slot.1.insert(format!("kmc-{}", case.cluster));
        }
        // Its routes, owned by it and labelled with its cluster.
        let kind = RouteKind::of(cpi.spec.flavor());
        for object in render::management(cpi).unwrap() {
            let name = object.name_any();
            let slot = wanted_routes.iter_mut().find(|(k, _)| *k == kind).unwrap();
            slot.1.insert(name.clone());
            let live = routes(client, kind).get(&name).await.unwrap();
            let owners = live.owner_references();
            assert_eq!(owners.len(), 1, "{what}: {kind:?} {name} owners");
            assert_eq!(owners[0].uid, cpi.uid().unwrap(), "{what}: {kind:?} {name}");
            assert_eq!(owners[0].controller, Some(true), "{what}: {kind:?} {name}");
            assert_eq!(
                live.labels().get(CLUSTER_NAME_LABEL),
                Some(&case.cluster),
                "{what}: {kind:?} {name}"
            );
            assert_eq!(
                live.labels().get(MANAGED_BY_LABEL).map(String::as_str),
                Some(MANAGER),
                "{what}: {kind:?} {name}"
            );
        }

        if let Some(j) = case.workload {
            if case.origin.k0smotron() {
                check_complemented(&workloads[j], cpi, &what).await;
            } else {
                check_workload(&workloads[j], cpi, &what).await;
            }
        }
    }
    // No route of any kind beyond the wanted ones (no duplicate, no leftover).
    for (kind, wanted) in wanted_routes {
        assert_eq!(
            names(client, NS, &kind.api_resource()).await,
            wanted,
            "{kind:?} objects in {NS}"
        );
    }
    // The controller writes no Secret and nothing outside the tenants' namespace.
    let secrets = names(client, NS, &ApiResource::erase::<Secret>(&())).await;
    let expected: BTreeSet<String> = cases
        .iter()
        .filter(|c| c.workload.is_some())
        .flat_map(|c| {
            [
                format!("{}-kubeconfig", c.cluster),
                format!("{}-ca", c.cluster),
            ]
        })
        .collect();
    assert_eq!(secrets, expected, "Secrets in {NS}");
}

/// The CCM of a workload cluster points at `host`.
async fn check_ccm(client: Client, host: &str, what: &str) {
    let ccm = Api::<Deployment>::namespaced(client, "kube-system")
        .get("cloud-controller-manager")
        .await
        .unwrap();
    let env = &ccm.spec.unwrap().template.spec.unwrap().containers[0].env;
    assert!(
        env.iter()
            .flatten()
            .any(|e| e.name == "KUBERNETES_SERVICE_HOST" && e.value.as_deref() == Some(host)),
        "{what}: the CCM points at {host}: {env:?}"
    );
}

/// A cluster whose node proxy k0smotron ships: nothing of ours but the CCM env.
async fn check_complemented(server: &TestApi, cpi: &ControlPlaneIngress, what: &str) {
    let client = server.client();
    let host = &cpi.spec.ingress.api_host;
    for (namespace, resource, expected) in [
        (
            "kube-system",
            ApiResource::erase::<ConfigMap>(&()),
            BTreeSet::new(),
        ),
        (
            "kube-system",
            ApiResource::erase::<Secret>(&()),
            BTreeSet::new(),
        ),
        (
            "kube-system",
            ApiResource::erase::<DaemonSet>(&()),
            BTreeSet::new(),
        ),
        (
            "default",
            ApiResource::erase::<DaemonSet>(&()),
            BTreeSet::from(["k0smotron-haproxy".to_string()]),
        ),
    ] {
        assert_eq!(
            names(&client, namespace, &resource).await,
            expected,
            "{what}: {}s in {namespace} of its workload cluster",
            resource.kind
        );
    }
    let services = Api::<Service>::namespaced(client.clone(), "default");
    let kubernetes = services.get("kubernetes").await.unwrap();
    assert!(
        kubernetes
            .managed_fields()
            .iter()
            .all(|m| m.manager.as_deref() != Some(MANAGER)),
        "{what}: default/kubernetes is never written"
    );
    check_ccm(client, host, what).await;
}

/// The workload server of one cluster holds exactly its objects.
async fn check_workload(server: &TestApi, cpi: &ControlPlaneIngress, what: &str) {
    let client = server.client();
    let host = &cpi.spec.ingress.api_host;
    let one = |name: &str| BTreeSet::from([name.to_string()]);
    for (namespace, resource, expected) in [
        (
            "kube-system",
            ApiResource::erase::<ConfigMap>(&()),
            // The proxy's config, and the record of what steering took.
            ["hcp-ingress-proxy", "hcp-ingress-steering"]
                .into_iter()
                .map(String::from)
                .collect(),
        ),
        (
            "kube-system",
            ApiResource::erase::<Secret>(&()),
            one("hcp-ingress-proxy"),
        ),
        (
            "kube-system",
            ApiResource::erase::<DaemonSet>(&()),
            one("hcp-ingress-proxy"),
        ),
        (
            "kube-system",
            ApiResource::erase::<Deployment>(&()),
            one("cloud-controller-manager"),
        ),
        (
            "default",
            ApiResource::erase::<Endpoints>(&()),
            one("kubernetes"),
        ),
        (
            "default",
            ApiResource::erase::<EndpointSlice>(&()),
            one("kubernetes"),
        ),
        (
            "default",
            ApiResource::erase::<Service>(&()),
            one("kubernetes"),
        ),
    ] {
        assert_eq!(
            names(&client, namespace, &resource).await,
            expected,
            "{what}: {}s in {namespace} of its workload cluster",
            resource.kind
        );
    }
    for resource in [
        ApiResource::erase::<ConfigMap>(&()),
        ApiResource::erase::<Secret>(&()),
        ApiResource::erase::<DaemonSet>(&()),
    ] {
        let object =
            Api::<DynamicObject>::namespaced_with(client.clone(), "kube-system", &resource)
                .get("hcp-ingress-proxy")
                .await
                .unwrap();
        assert_eq!(
            object.labels().get(MANAGED_BY_LABEL).map(String::as_str),
            Some(MANAGER),
            "{what}: {} labels",
            resource.kind
        );
    }
    // This cluster's objects, not another's: the proxy config names its host,
    // and the CCM points at it.
    let config = Api::<ConfigMap>::namespaced(client.clone(), "kube-system")
        .get("hcp-ingress-proxy")
        .await
        .unwrap();
    let text = config
        .data
        .unwrap_or_default()
        .into_values()
        .collect::<String>();
    assert!(
        text.contains(host.as_str()),
        "{what}: the proxy config names {host}: {text}"
    );
    check_ccm(client, host, what).await;
}

/// One Lease, held by `holder`.
async fn check_lease(client: &Client, holder: &str) {
    let leases: Vec<Lease> = Api::<Lease>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let seen: Vec<(String, Option<String>)> = leases
        .iter()
        .map(|l| {
            (
                format!("{}/{}", l.namespace().unwrap_or_default(), l.name_any()),
                l.spec.as_ref().and_then(|s| s.holder_identity.clone()),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [(
            format!("{LEASE_NAMESPACE}/{LEASE_NAME}"),
            Some(holder.to_string())
        )],
        "Leases"
    );
}
