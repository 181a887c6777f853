//! The controller benchmark, small: 200 clusters with their workload sides
//! on a real kube-apiserver, through the same binary and the same `run`
//! role that `hack/bench-controller.sh` drives at 1,000 and 5,000. It keeps
//! the measurement from rotting (the rig, the stand-ins, the hand-over), and
//! holds the figures that do not depend on the machine's speed: every
//! cluster converges, a resync at steady state writes nothing, a new leader
//! resyncs every cluster without a write, and the API requests per cluster
//! stay where they are. Times are printed, never asserted. The same 200 in
//! two watch-filter shards: each controller touches its own clusters only.

use std::process::Command;

use serde_json::Value;

const N: u64 = 200;

/// The `run` role for N clusters with their workload sides on a real
/// kube-apiserver, with `extra` flags: its result and its log.
fn run(extra: &[&str]) -> (Value, String) {
    let schemas = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/schemas");
    let output = Command::new(env!("CARGO_BIN_EXE_bench-controller"))
        .args([
            "--role=run",
            &format!("--n={N}"),
            "--api=real",
            "--workloads",
            // Longer than the convergence, even with the other test beside
            // it on two cores (a resync pass while converging would count in
            // the convergence's requests), and short enough for a steady
            // window (resync + 5 s) of well under a minute.
            "--resync-secs=30",
            "--timeout-secs=150",
            &format!("--schemas={schemas}"),
        ])
        .args(extra)
        .output()
        .expect("failed to run bench-controller");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let Some(result) = stdout.lines().find_map(|l| l.strip_prefix("result ")) else {
        panic!(
            "bench-controller printed no result ({}):\n{stderr}",
            output.status
        );
    };
    (
        serde_json::from_str(result).expect("the result is JSON"),
        stderr,
    )
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

#[test]
fn two_hundred_clusters_converge_and_a_resync_or_a_hand_over_writes_nothing() {
    let (r, stderr) = run(&[]);
    eprintln!(
        "N={N}: converged {} in {:.1} s, {:.2} requests and {:.2} reconciles per cluster; steady: {} writes, {} reconciles; hand-over: {} resynced in {:.1} s, {} writes; controller peak RSS {:.1} MiB",
        r["converged"],
        f(&r["converge_secs"]),
        f(&r["converge"]["total"]) / N as f64,
        f(&r["reconciles_converge"]) / N as f64,
        r["steady"]["writes"],
        r["reconciles_steady"],
        r["handover_resynced"],
        f(&r["handover_secs"]),
        r["handover"]["writes"],
        f(&r["rss_peak_mib"]),
    );

    assert_eq!(r["converged"], N, "clusters converged:\n{stderr}");
    // The one refusal expected: the first read of the Lease, before the
    // leader creates it.
    let mut refused = r["converge"]["errors"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    refused.remove("404 get       coordination.k8s.io/leases");
    assert!(
        refused.is_empty(),
        "requests the API server refused during convergence: {refused:?}"
    );
    // About 10 requests (5 writes) and 2 reconciliations per cluster today;
    // twice that is a regression in what every cluster costs the API server.
    let per_cluster = f(&r["converge"]["total"]) / N as f64;
    assert!(
        per_cluster <= 20.0,
        "{per_cluster:.2} API requests per cluster while converging"
    );
    let reconciles = f(&r["reconciles_converge"]) / N as f64;
    assert!(
        reconciles <= 4.0,
        "{reconciles:.2} reconciliations per cluster while converging"
    );

    assert!(
        f(&r["reconciles_steady"]) >= N as f64,
        "no full resync in the steady window: {} reconciles",
        r["reconciles_steady"]
    );
    assert_eq!(
        r["steady"]["writes"], 0,
        "writes in a resync at steady state: {}",
        r["steady"]["write_samples"]
    );
    assert_eq!(
        r["handover_resynced"], N,
        "clusters the new leader resynced"
    );
    assert_eq!(
        r["handover"]["writes"], 0,
        "writes by the new leader: {}",
        r["handover"]["write_samples"]
    );
}

#[test]
fn two_watch_filter_shards_each_touch_only_their_own_clusters() {
    let (r, stderr) = run(&["--shards=2"]);
    eprintln!(
        "N={N} in 2 shards: converged {} in {:.1} s, requests by shard {}; about another shard's clusters: {} converging, {} steady; steady: {} writes, {} reconciles",
        r["converged"],
        f(&r["converge_secs"]),
        r["converge"]["by_shard"],
        r["converge"]["foreign"],
        r["steady"]["foreign"],
        r["steady"]["writes"],
        r["reconciles_steady"],
    );
    assert_eq!(r["converged"], N, "clusters converged:\n{stderr}");
    for shard in ["shard-0", "shard-1"] {
        assert!(
            f(&r["converge"]["by_shard"][shard]) > 0.0,
            "{shard} made no request: {}",
            r["converge"]["by_shard"]
        );
    }
    for window in ["converge", "steady"] {
        assert_eq!(
            r[window]["foreign"], 0,
            "requests about another shard's clusters ({window}): {}",
            r[window]["foreign_samples"]
        );
    }
    assert_eq!(
        r["steady"]["writes"], 0,
        "writes in a resync at steady state: {}",
        r["steady"]["write_samples"]
    );
}
