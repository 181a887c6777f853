//! `clusterctl move` of a namespace from one real management cluster to
//! another, with both controllers running, as in the step of every Cluster
//! API install that moves from a bootstrap cluster to the permanent one.
//!
//! The Clusters' control planes are K0smotronControlPlanes whose status the
//! test writes where k0smotron's controller would, in each management
//! cluster (hosted.rs). Everything else is the real thing: clusterctl, the
//! Cluster API manager (webhooks, Cluster status, ownership), both
//! controllers, the workload API server.

use std::collections::BTreeMap;

use hcp_ingress::{api::ControlPlaneIngress, controller::Settings};
use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{ConfigMap, Endpoints, Secret},
    discovery::v1::EndpointSlice,
    networking::v1::Ingress,
};
use kube::{Api, Client, ResourceExt, api::ListParams};
use serde_json::json;

use crate::{
    capi::{Clusterctl, Management, PROVIDER_NAMESPACE, SERVICE_ACCOUNT},
    harness::{NS, apply_value, eventually, start_with, wait_condition},
    hosted::{
        cluster_secrets, clusters, control_plane_initialized, hosted_cluster,
        install_control_plane_crd, workload_cluster,
    },
    manager::CapiManager,
};

const HAND_WRITTEN: &str = "wl-a";
const DERIVED: &str = "wl-b";

/// A management cluster after `clusterctl init --addon hcp-ingress`, with
/// k0smotron's control plane CRD and the Cluster API manager running.
async fn management(name: &str, clusterctl: &Clusterctl) -> (Management, CapiManager) {
    let m = Management::init(name, clusterctl).await;
    install_control_plane_crd(&m).await;
    let capi = CapiManager::start(&m).await;
    m.namespace(NS).await;
    (m, capi)
}

/// `kind namespace/name` → resourceVersion of every object of kind `K`.
async fn versions_of<K>(client: &Client, versions: &mut BTreeMap<String, String>)
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for o in Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        versions.insert(
            format!(
                "{} {}/{}",
                K::kind(&()),
                o.namespace().unwrap_or_default(),
                o.name_any()
            ),
            o.resource_version().unwrap_or_default(),
        );
    }
}

/// Everything of the workload cluster hcp-ingress writes or steers, with
/// its resourceVersion: any write changes it.
async fn workload_versions(client: &Client) -> BTreeMap<String, String> {
    let mut versions = BTreeMap::new();
    versions_of::<Endpoints>(client, &mut versions).await;
    versions_of::<EndpointSlice>(client, &mut versions).await;
    versions_of::<DaemonSet>(client, &mut versions).await;
    versions_of::<ConfigMap>(client, &mut versions).await;
    versions_of::<Secret>(client, &mut versions).await;
    versions
}

/// The ControlPlaneIngresses of a management cluster, by cluster name.
async fn by_cluster(client: &Client) -> BTreeMap<String, Vec<ControlPlaneIngress>> {
    let mut found: BTreeMap<String, Vec<ControlPlaneIngress>> = BTreeMap::new();
    for cpi in Api::<ControlPlaneIngress>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        found
            .entry(cpi.spec.cluster_name.clone())
            .or_default()
            .push(cpi);
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_move_carries_control_plane_ingresses_and_leaves_the_workload_alone() {
    let clusterctl = Clusterctl::new();
    let (source, _source_capi) = management("source", &clusterctl).await;
    let (target, _target_capi) = management("target", &clusterctl).await;
    let w = workload_cluster().await;

    // Two tenants: one ControlPlaneIngress written by hand, one derived
    // from the Cluster's domain annotation.
    cluster_secrets(&source.client, NS, HAND_WRITTEN, &w).await;
    hosted_cluster(&source.client, NS, HAND_WRITTEN, json!({})).await;
    hosted_cluster(
        &source.client,
        NS,
        DERIVED,
        json!({"hcp-ingress.dev/domain": "tenants.example.com"}),
    )
    .await;
    apply_value(
        &source.client,
        json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
            "metadata": {"name": HAND_WRITTEN, "namespace": NS},
            "spec": {"clusterName": HAND_WRITTEN,
                "ingress": {"apiHost": "api.wl-a.example.com", "className": "haproxy"},
                "backend": {"serviceName": "kmc-wl-a", "apiPort": 30443},
                "proxy": {"upstreams": ["192.0.2.10", "192.0.2.11"]}}}),
    )
    .await;

    let source_controller = start_with(source.controller_client().await, Settings::for_tests());
    let target_controller = start_with(target.controller_client().await, Settings::for_tests());
    wait_condition(&source.client, HAND_WRITTEN, "EndpointsSteered", "True").await;
    let derived = eventually("the derived ControlPlaneIngress", || async {
        by_cluster(&source.client).await.remove(DERIVED)
    })
    .await;
    assert_eq!(derived.len(), 1);
    let before = by_cluster(&source.client).await;
    let workload_before = workload_versions(&w.admin_client()).await;
    assert!(
        workload_before.contains_key("DaemonSet kube-system/hcp-ingress-proxy"),
        "{workload_before:#?}"
    );

    let moved = clusterctl
        .run(&[
            "move",
            "--namespace",
            NS,
            "--kubeconfig",
            source.kubeconfig.to_str().unwrap(),
            "--to-kubeconfig",
            target.kubeconfig.to_str().unwrap(),
        ])
        .await
        .unwrap_or_else(|e| panic!("clusterctl move failed:\n{e}"));
    eprintln!("{moved}");

    // k0smotron in the target reports its control planes again.
    for name in [HAND_WRITTEN, DERIVED] {
        control_plane_initialized(&target.client, NS, name).await;
    }
    // The target's controller takes over: route written there, steering held.
    wait_condition(&target.client, HAND_WRITTEN, "EndpointsSteered", "True").await;
    let ingresses: Api<Ingress> = Api::namespaced(target.client.clone(), NS);
    eventually("the route in the target management cluster", || async {
        let list = ingresses.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|i| i.name_any().contains(HAND_WRITTEN))
            .then_some(())
    })
    .await;

    // Once each, the hand-written one with its spec, the derived one derived.
    let after = eventually(
        "one ControlPlaneIngress per Cluster in the target",
        || async {
            let after = by_cluster(&target.client).await;
            (after.get(DERIVED).is_some_and(|d| d.len() == 1)).then_some(after)
        },
    )
    .await;
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        [HAND_WRITTEN, DERIVED],
        "{after:#?}"
    );
    assert_eq!(after[HAND_WRITTEN].len(), 1, "{after:#?}");
    assert_eq!(
        serde_json::to_value(&after[HAND_WRITTEN][0].spec).unwrap(),
        serde_json::to_value(&before[HAND_WRITTEN][0].spec).unwrap()
    );
    assert_eq!(
        serde_json::to_value(&after[DERIVED][0].spec).unwrap(),
        serde_json::to_value(&before[DERIVED][0].spec).unwrap(),
        "the target derives what the source derived"
    );
    assert!(
        by_cluster(&source.client).await.is_empty(),
        "left in the source"
    );
    assert!(
        clusters(&source.client, NS, "v1beta2")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // The workload cluster saw no write: not while paused for the move, not
    // from the source giving up its objects, not from the target taking over.
    assert_eq!(workload_versions(&w.admin_client()).await, workload_before);

    source_controller.stop().await;
    target_controller.stop().await;
    // Both ran on the RBAC clusterctl installed, and it was enough.
    let user = format!("system:serviceaccount:{PROVIDER_NAMESPACE}:{SERVICE_ACCOUNT}");
    for m in [&source, &target] {
        let rejected = m.cluster.rejections_of(&user);
        assert!(
            rejected.is_empty(),
            "RBAC refused the controller: {rejected:#?}"
        );
    }
}
