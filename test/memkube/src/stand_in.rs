//! Stand-ins for what a real cluster runs beside its API server and memkube
//! does not: here, the DaemonSet controller and the kubelets.

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;

/// Whenever DaemonSet `namespace/name` shows no ready node, report it
/// scheduled and ready on one node, as the DaemonSet controller would once a
/// kubelet ran its pod. Driven by a watch, as the real controllers are; runs
/// until its task is dropped or aborted.
pub async fn daemon_set_ready_on_one_node(client: Client, namespace: &str, name: &str) {
    let api: Api<DaemonSet> = Api::namespaced(client, namespace);
    let status = json!({"status": {"desiredNumberScheduled": 1, "currentNumberScheduled": 1,
                                   "numberReady": 1, "numberMisscheduled": 0}});
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let events = watcher(api.clone(), config)
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(events);
    while let Some(event) = events.next().await {
        let Ok(ds) = event else { continue };
        if ds.status.is_some_and(|s| s.number_ready == 1) {
            continue;
        }
        // A failed report is retried on the next event; the watch's own
        // resync brings one.
        let _ = api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await;
    }
}
