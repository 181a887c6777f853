//! What a hosted control plane provider leaves behind, in the management
//! cluster and in the workload cluster, for the tests of this target.
//!
//! The control planes are K0smotronControlPlanes (the upstream CRD): Cluster
//! API's webhook wants a Cluster to reference a control plane, an
//! infrastructure or a topology, and a hosted control plane needs no
//! infrastructure. k0smotron itself does not run: the tests write the
//! status its controller would.

use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams},
};
use serde_json::{Value, json};

use k8s_openapi::api::{core::v1::Endpoints, discovery::v1::EndpointSlice};

use crate::{
    capi::{Management, root},
    harness::{apply_value, eventually},
};

/// k0smotron's control plane CRD, upstream.
const K0SMOTRON_CONTROL_PLANE_CRD: &str =
    "../shared/schemas/controlplane.cluster.x-k8s.io_k0smotroncontrolplanes.yaml";

/// Install k0smotron's control plane CRD in the management cluster, labelled
/// as clusterctl labels the CRDs of a provider it installed (which is how
/// `clusterctl move` finds their objects).
pub async fn install_control_plane_crd(m: &Management) {
    let text = std::fs::read_to_string(root().join(K0SMOTRON_CONTROL_PLANE_CRD))
        .unwrap_or_else(|e| panic!("{K0SMOTRON_CONTROL_PLANE_CRD} (CI checks out ../shared): {e}"));
    let mut crd: Value = serde_saphyr::from_str(&text).expect("the CRD parses");
    crd["metadata"]["labels"]["clusterctl.cluster.x-k8s.io"] = json!("");
    m.cluster
        .apply_crds(&serde_json::to_string(&crd).unwrap())
        .await
        .expect("the K0smotronControlPlane CRD");
}

/// Cluster API `Cluster`s of `namespace`, served at `version`.
pub fn clusters(client: &Client, namespace: &str, version: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", version, "Cluster");
    Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk_with_plural(&gvk, "clusters"),
    )
}

fn control_planes(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(
        "controlplane.cluster.x-k8s.io",
        "v1beta2",
        "K0smotronControlPlane",
    );
    Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk_with_plural(&gvk, "k0smotroncontrolplanes"),
    )
}

/// What k0smotron's controller writes once a control plane answers; waits
/// for the object first (after `clusterctl move` it arrives on its own).
pub async fn control_plane_initialized(client: &Client, namespace: &str, name: &str) {
    let api = control_planes(client, namespace);
    eventually(
        &format!("K0smotronControlPlane {namespace}/{name}"),
        || async { api.get_opt(name).await.ok()? },
    )
    .await;
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"status": {"initialization": {"controlPlaneInitialized": true},
            "initialized": true, "ready": true}}),
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("status of K0smotronControlPlane {namespace}/{name}: {e}"));
}

/// A hosted cluster as Cluster API sees one: an initialized
/// K0smotronControlPlane and the v1beta2 `Cluster` (with `annotations`)
/// referencing it, without an infrastructureRef (Cluster API then marks the
/// infrastructure provisioned itself, which its ClusterCache waits for
/// before connecting). The Cluster passes Cluster API's webhooks.
pub async fn hosted_cluster(client: &Client, namespace: &str, name: &str, annotations: Value) {
    apply_value(
        client,
        json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "K0smotronControlPlane",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"version": "v1.34.1-k0s.0"}}),
    )
    .await;
    control_plane_initialized(client, namespace, name).await;
    apply_value(
        client,
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
            "spec": {"controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io",
                "kind": "K0smotronControlPlane", "name": name}}}),
    )
    .await;
}

/// The Secrets a control plane provider writes for a workload cluster:
/// `<cluster>-kubeconfig` (Cluster API and hcp-ingress connect with it) and
/// `<cluster>-ca` (the workload cluster's CA, the node proxy's leaf is
/// minted from it). Written before the Cluster: Cluster API retries a failed
/// connection only every 30 s.
pub async fn cluster_secrets(
    client: &Client,
    namespace: &str,
    name: &str,
    workload: &realkube::Cluster,
) {
    for (suffix, type_, data) in [
        (
            "kubeconfig",
            "cluster.x-k8s.io/secret",
            json!({"value": workload.kubeconfig_yaml()}),
        ),
        (
            "ca",
            "kubernetes.io/tls",
            json!({"tls.crt": workload.ca_pem(), "tls.key": workload.ca_key_pem()}),
        ),
    ] {
        apply_value(
            client,
            json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("{name}-{suffix}"), "namespace": namespace,
                    "labels": {"cluster.x-k8s.io/cluster-name": name}},
                "type": type_, "stringData": data}),
        )
        .await;
    }
}

/// A workload API server as a hosted control plane leaves it: its endpoint
/// reconciler off (`--endpoint-reconciler-type=none`, as steering needs),
/// the `kubernetes` Endpoints and EndpointSlice written by the provider.
pub async fn workload_cluster() -> realkube::Cluster {
    let w = realkube::Cluster::start(realkube::Options {
        name: "workload".into(),
        endpoint_reconciler: "none".into(),
        ..realkube::Options::default()
    })
    .await
    .unwrap_or_else(|e| panic!("a real workload API server: {e}"));
    let client = w.admin_client();
    let provider = PatchParams::apply("kube-apiserver");
    let endpoints = json!({"apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "kubernetes", "namespace": "default",
            "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": [{"addresses": [{"ip": "10.0.0.5"}], "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}]});
    Api::<Endpoints>::namespaced(client.clone(), "default")
        .patch("kubernetes", &provider, &Patch::Apply(&endpoints))
        .await
        .unwrap();
    let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.5"], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]});
    Api::<EndpointSlice>::namespaced(client, "default")
        .patch("kubernetes", &provider, &Patch::Apply(&slice))
        .await
        .unwrap();
    w
}
