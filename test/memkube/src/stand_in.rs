//! Stand-ins for what a real cluster runs beside its API server and memkube
//! does not: the DaemonSet controller and the kubelets, and a Gateway
//! controller.

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;

use crate::store::{Event, EventType, PatchBody, Store, Subscription, WriteOptions};

/// The status the DaemonSet controller writes once one node runs the pod.
fn ready_on_one_node() -> Value {
    json!({"status": {"desiredNumberScheduled": 1, "currentNumberScheduled": 1,
                      "numberReady": 1, "numberMisscheduled": 0}})
}

/// Whenever DaemonSet `namespace/name` shows no ready node, report it
/// scheduled and ready on one node, as the DaemonSet controller would once a
/// kubelet ran its pod. Driven by a watch, as the real controllers are; runs
/// until its task is dropped or aborted.
pub async fn daemon_set_ready_on_one_node(client: Client, namespace: &str, name: &str) {
    let api: Api<DaemonSet> = Api::namespaced(client, namespace);
    let status = ready_on_one_node();
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

/// [`daemon_set_ready_on_one_node`] working on a store in-process, with no
/// client and no connection: for a rig that holds thousands of workload
/// API servers, where a watch connection each would cost more than the
/// servers. Runs until its task is dropped or aborted.
pub async fn daemon_set_ready_in_store(store: Arc<Store>, namespace: &str, name: &str) {
    let Some(spec) = store.resolve("apps", "v1", "daemonsets") else {
        return;
    };
    let status = ready_on_one_node();
    let write = WriteOptions {
        manager: "kube-controller-manager".into(),
        subresource: Some("status".into()),
        ..Default::default()
    };
    let mut from = None;
    loop {
        let Ok(Subscription {
            initial,
            mut rx,
            rv,
        }) = store.subscribe(&spec, from, Some(namespace))
        else {
            // Our resourceVersion was compacted away: start from the objects.
            from = None;
            continue;
        };
        from = Some(rv);
        let mut pending: std::collections::VecDeque<Arc<Event>> = initial.into();
        loop {
            let event = match pending.pop_front() {
                Some(event) => event,
                None => match rx.recv().await {
                    Ok(event) => event,
                    Err(RecvError::Lagged(_)) => break,
                    Err(RecvError::Closed) => return,
                },
            };
            from = Some(event.rv);
            let object = &event.object;
            let is_it = object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                == Some(namespace)
                && object.pointer("/metadata/name").and_then(Value::as_str) == Some(name);
            let ready = object
                .pointer("/status/numberReady")
                .and_then(Value::as_i64)
                == Some(1);
            if is_it && event.kind != EventType::Deleted && !ready {
                let _ = store.patch(
                    &spec,
                    namespace,
                    name,
                    PatchBody::Merge(status.clone()),
                    &write,
                );
            }
        }
    }
}

/// A Gateway controller named `controller_name` that accepts every
/// TLSRoute (`gateway.networking.k8s.io/v1`) on every parent it names:
/// `Accepted` and `ResolvedRefs` True at the route's generation, as a real
/// one reports on routes its Gateways admit. Driven by a watch; runs until
/// its task is dropped or aborted.
pub async fn tls_routes_accepted(client: Client, controller_name: &str) {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "gateway.networking.k8s.io",
        "v1",
        "TLSRoute",
    ));
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let events = watcher(all, watcher::Config::default())
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(events);
    while let Some(event) = events.next().await {
        let Ok(route) = event else { continue };
        let Some(status) = route_acceptance(&route, controller_name) else {
            continue;
        };
        let namespace = route.metadata.namespace.clone().unwrap_or_default();
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource);
        // A failed report is retried on the route's next event.
        let _ = api
            .patch_status(
                &route.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&status),
            )
            .await;
    }
}

/// The status a Gateway controller writes on `route`, or none when the
/// route already shows it accepted at its generation.
fn route_acceptance(route: &DynamicObject, controller_name: &str) -> Option<Value> {
    let generation = route.metadata.generation;
    let parents = route.data["spec"]["parentRefs"].as_array()?;
    let condition = |type_: &str, reason: &str| {
        json!({"type": type_, "status": "True", "reason": reason, "message": "",
               "observedGeneration": generation, "lastTransitionTime": "2026-01-01T00:00:00Z"})
    };
    let wanted: Vec<Value> = parents
        .iter()
        .map(|parent| {
            json!({"parentRef": parent, "controllerName": controller_name,
                   "conditions": [condition("Accepted", "Accepted"), condition("ResolvedRefs", "ResolvedRefs")]})
        })
        .collect();
    let current = route.data["status"]["parents"].as_array();
    let up_to_date = current.is_some_and(|c| {
        c.len() == wanted.len()
            && c.iter().zip(&wanted).all(|(c, w)| {
                c["parentRef"] == w["parentRef"]
                    && c["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .all(|x| x["observedGeneration"].as_i64() == generation)
                    })
            })
    });
    (!up_to_date).then(|| json!({"status": {"parents": wanted}}))
}
