//! Requests per second memkube serves for list and server-side apply,
//! measured with real `kube` clients over loopback in the same process (so
//! client and server share the machine's cores, as in the project's tests).
//!
//! Run: `cargo bench -p memkube --bench throughput`
//! (`MEMKUBE_BENCH_SECS` sets the duration of each case, default 3;
//! `MEMKUBE_BENCH_CLIENTS` the number of concurrent clients, default 8).
//! A benchmark, not a test: it prints figures and asserts nothing about speed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams};
use memkube::TestApi;
use serde_json::json;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `op` from `clients` concurrent tasks for `secs` and returns requests per second.
async fn measure<F, Fut>(clients: u64, secs: u64, op: F) -> f64
where
    F: Fn(u64, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (op, stop, done) = (op.clone(), stop.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                op(c, i).await;
                i += 1;
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("benchmark task panicked");
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let secs = env_or("MEMKUBE_BENCH_SECS", 3);
    let clients = env_or("MEMKUBE_BENCH_CLIENTS", 8);
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        let api = TestApi::start().await;
        let client = api.client();
        let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
        for i in 0..100 {
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("seed-{i}"), "labels": {"bench": "seed", "n": (i % 10).to_string()}}, "data": {"k": "v".repeat(64)}});
            cms.patch(&format!("seed-{i}"), &PatchParams::apply("bench"), &Patch::Apply(cm)).await.expect("seed");
        }
        println!("memkube throughput: {cores} cores, {clients} concurrent kube clients, {secs}s per case");

        let c = cms.clone();
        let rps = measure(clients, secs, move |_, _| {
            let c = c.clone();
            async move {
                let l = c.list(&ListParams::default().labels("n=3")).await.expect("list");
                assert_eq!(l.items.len(), 10);
            }
        })
        .await;
        println!("list (10 of 100 objects, label selector): {rps:>8.0} req/s");

        let c = cms.clone();
        let rps = measure(clients, secs, move |_, _| {
            let c = c.clone();
            async move {
                let l = c.list(&ListParams::default()).await.expect("list");
                assert_eq!(l.items.len(), 100);
            }
        })
        .await;
        println!("list (100 objects):                       {rps:>8.0} req/s");

        let c = cms.clone();
        let rps = measure(clients, secs, move |client, i| {
            let c = c.clone();
            async move {
                let name = format!("apply-{client}");
                let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"bench": "apply"}}, "data": {"i": i.to_string(), "k": "v".repeat(64)}});
                c.patch(&name, &PatchParams::apply("bench"), &Patch::Apply(cm)).await.expect("apply");
            }
        })
        .await;
        println!("server-side apply (each a change):        {rps:>8.0} req/s");

        let c = cms.clone();
        let rps = measure(clients, secs, move |client, _| {
            let c = c.clone();
            async move {
                let name = format!("apply-{client}");
                let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"bench": "apply"}}, "data": {"i": "same", "k": "v".repeat(64)}});
                c.patch(&name, &PatchParams::apply("bench"), &Patch::Apply(cm)).await.expect("apply");
            }
        })
        .await;
        println!("server-side apply (no-op, steady state):  {rps:>8.0} req/s");
        drop(api);
    });
}
