//! A workload cluster without kube-proxy (Cilium's kube-proxy replacement,
//! Calico's eBPF dataplane): nothing on the node implements Services until
//! the dataplane's agents run, and they need the API server to run. With
//! `spec.kubeProxyReplacement.publishEndpoint` the controller publishes
//! `apiHost:port` where those agents read it, and that address works on a
//! node where `kubernetes.default.svc` does not.
//!
//! The bed is the real data path of `data_path.rs` with no kube-proxy at
//! all: the real workload kube-apiserver and kube-controller-manager, one
//! node (a network namespace) whose hosts file resolves the tenant's
//! `apiHost` to the shared ingress (HAProxy routing by SNI to the API
//! server, whose certificate names `apiHost`), and the test as the kubelet.
//! The agents are played by processes on the node given their environment
//! exactly as the dataplanes' manifests give it: calico-node's
//! `envFrom: configMapRef kubernetes-services-endpoint` (every key becomes a
//! variable), Cilium's agent `KUBERNETES_SERVICE_HOST/PORT` from the keys
//! its `k8sServiceHostRef` names. Each calls `/version` as client-go's
//! in-cluster config does (`in-cluster` of the pod's client in
//! `data_path.rs`): TLS to `$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`,
//! SNI and certificate check against the cluster CA for that host, a bearer
//! token.

use std::{collections::BTreeMap, time::Instant};

use hcp_ingress::render::workload::{
    CALICO_ENDPOINT_NAME, CILIUM_ENDPOINT_NAME, OPERATOR_NAMESPACE,
};
use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Namespace};
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams},
};
use serde_json::json;

use crate::{
    data_path::{API_HOST, CLUSTER, DataPath, KubeProxy, Node, Stack, WITHIN, Workload, until},
    harness::*,
};

/// The ControlPlaneIngress: the defaults (the node proxy and its steering,
/// which a kube-proxy replacement implements as kube-proxy would) and the
/// opt-in, on or off.
fn cpi(publish: bool) -> serde_json::Value {
    json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
        "metadata": {"name": CLUSTER, "namespace": NS},
        "spec": {"clusterName": CLUSTER, "ingress": {"apiHost": API_HOST, "className": "haproxy"},
                 "backend": {"serviceName": "kmc-tenant-01", "apiPort": 30443},
                 "kubeProxyReplacement": {"publishEndpoint": publish}}})
}

/// Wait until our ConfigMaps in `kube-system` are gone, `why`.
async fn ours_gone(path: &DataPath, why: &str) {
    let system_cms: Api<ConfigMap> = Api::namespaced(path.w.client(), "kube-system");
    until(&path.node, 60, why, async || {
        let mut gone = true;
        for name in [CALICO_ENDPOINT_NAME, CILIUM_ENDPOINT_NAME] {
            gone &= matches!(system_cms.get_opt(name).await, Ok(None));
        }
        gone
    })
    .await;
}

/// The environment an agent gets from a ConfigMap: `envFrom` takes every
/// key, a `configMapKeyRef` per variable takes the named ones.
fn env_from(data: &BTreeMap<String, String>, keys: Option<(&str, &str)>) -> Vec<String> {
    match keys {
        None => data.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        Some((host, port)) => vec![
            format!("KUBERNETES_SERVICE_HOST={}", data[host]),
            format!("KUBERNETES_SERVICE_PORT={}", data[port]),
        ],
    }
}

/// Answered calls of the process `name` so far.
fn answered(node: &Node, name: &str) -> usize {
    node.log(name)
        .lines()
        .filter(|l| l.starts_with("ok "))
        .count()
}

/// The ConfigMap `namespace/name` in the workload cluster, once it exists.
async fn published(path: &DataPath, namespace: &str, name: &str) -> BTreeMap<String, String> {
    let api: Api<ConfigMap> = Api::namespaced(path.w.client(), namespace);
    let mut found = None;
    until(
        &path.node,
        WITHIN.as_secs(),
        &format!("ConfigMap {namespace}/{name}"),
        async || {
            found = api.get_opt(name).await.ok().flatten().and_then(|c| c.data);
            found.is_some()
        },
    )
    .await;
    found.expect("checked by until")
}

/// With no kube-proxy on the node, the agents configured from the published
/// ConfigMaps reach the tenant's real kube-apiserver through the shared
/// ingress with full certificate verification, while the `kubernetes`
/// Service's ClusterIP goes nowhere; a ConfigMap of the same name that is
/// not ours is reported and left as it is; the deletion takes ours back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_reach_the_api_server_from_the_published_endpoint_without_kube_proxy() {
    let started = Instant::now();
    let path = DataPath::start(Workload {
        name: "no-kube-proxy",
        serves_service_ip: false,
        stack: Stack::V4,
        kube_proxy: KubeProxy::None,
        endpoint_slices_held_back: false,
    })
    .await;
    let wc = path.w.client();
    // As a control plane provider writes them (the reconciler is off): the
    // record the deletion gives back. Nothing on this node reads them.
    Api::<Endpoints>::namespaced(wc.clone(), "default")
        .patch(
            "kubernetes",
            &PatchParams::apply("kube-apiserver"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": "kubernetes", "namespace": "default"},
                "subsets": [{"addresses": [{"ip": path.ingress()}],
                    "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}]})),
        )
        .await
        .unwrap();
    // An operator install of Calico whose user wrote the ConfigMap by hand,
    // with another address: not ours, so never overwritten.
    Api::<Namespace>::all(wc.clone())
        .patch(
            OPERATOR_NAMESPACE,
            &PatchParams::apply("tigera-operator"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": OPERATOR_NAMESPACE}})),
        )
        .await
        .unwrap();
    let operator_cms: Api<ConfigMap> = Api::namespaced(wc.clone(), OPERATOR_NAMESPACE);
    let theirs = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": CALICO_ENDPOINT_NAME, "namespace": OPERATOR_NAMESPACE},
        "data": {"KUBERNETES_SERVICE_HOST": "10.0.0.10", "KUBERNETES_SERVICE_PORT": "6443"}});
    operator_cms
        .patch(
            CALICO_ENDPOINT_NAME,
            &PatchParams::apply("kubectl"),
            &Patch::Apply(theirs),
        )
        .await
        .unwrap();

    let (m, running) = path.manage().await;
    apply_value(&m.client, cpi(true)).await;

    // 1. Published: Calico's and Cilium's ConfigMaps hold apiHost:port.
    let calico = published(&path, "kube-system", CALICO_ENDPOINT_NAME).await;
    assert_eq!(
        calico,
        BTreeMap::from([
            ("KUBERNETES_SERVICE_HOST".into(), API_HOST.into()),
            ("KUBERNETES_SERVICE_PORT".into(), "443".into()),
        ])
    );
    let cilium = published(&path, "kube-system", CILIUM_ENDPOINT_NAME).await;
    assert_eq!(
        cilium,
        BTreeMap::from([
            ("apiServerHost".into(), API_HOST.into()),
            ("apiServerPort".into(), "443".into()),
        ])
    );
    // The user's ConfigMap is reported, naming it and its keys, and left.
    let message = wait_reason(
        &m.client,
        CLUSTER,
        ("EndpointPublished", "False", "ConfigMapNotOurs"),
        WITHIN,
    )
    .await;
    assert!(
        message.contains("ConfigMap tigera-operator/kubernetes-services-endpoint")
            && message.contains("data.KUBERNETES_SERVICE_HOST \"10.0.0.10\""),
        "{message}"
    );
    let event = wait_event(&m.client, "ConfigMapNotOurs").await;
    assert!(
        event
            .note
            .is_some_and(|n| n.contains("tigera-operator/kubernetes-services-endpoint")),
        "the Event names the ConfigMap"
    );
    let kept = operator_cms.get(CALICO_ENDPOINT_NAME).await.unwrap();
    assert_eq!(
        kept.data.unwrap()["KUBERNETES_SERVICE_HOST"],
        "10.0.0.10",
        "not ours: never overwritten"
    );
    // The node proxy and its steering are installed as on any cluster: the
    // kube-proxy replacement implements the Service from them once it runs.
    wait_reason(
        &m.client,
        CLUSTER,
        ("EndpointsSteered", "True", "AdvertiseAddress"),
        WITHIN,
    )
    .await;

    // 2. Nothing implements Services on this node: the address the kubelet
    // gives every container, the `kubernetes` Service's, goes nowhere.
    let (ok, output) = path.call_once_with_env(&[
        format!("KUBERNETES_SERVICE_HOST={}", Stack::V4.service_ip()),
        "KUBERNETES_SERVICE_PORT=443".to_string(),
    ]);
    assert!(
        !ok && output.starts_with("fail "),
        "the Service IP answered without kube-proxy, or the client broke: {output}"
    );

    // 3. Host-network agents, each configured from its ConfigMap as its
    // manifest does: calico-node (envFrom) and cilium-agent (the keys of
    // k8sServiceHostRef).
    for (agent, env) in [
        ("calico-node", env_from(&calico, None)),
        (
            "cilium-agent",
            env_from(&cilium, Some(("apiServerHost", "apiServerPort"))),
        ),
    ] {
        let (ok, output) = path.call_once_with_env(&env);
        assert!(ok, "{agent} with {env:?}: {output}");
    }

    // 4. A pod whose container takes its environment from the ConfigMap
    // (calico-kube-controllers, the tigera-operator) keeps calling it.
    path.start_pod_with_env("agent-pod", &env_from(&calico, None));
    until(&path.node, 60, "the pod's calls answered", async || {
        answered(&path.node.lock().unwrap(), "agent-pod") >= 10
    })
    .await;
    let log = path.node.lock().unwrap().log("agent-pod");
    assert!(
        log.lines().all(|l| l.starts_with("ok ")),
        "every call of the pod answered: {log}"
    );

    // 5. The opt-in removed: ours go, the user's stays; back on: published again.
    apply_value(&m.client, cpi(false)).await;
    ours_gone(&path, "our ConfigMaps gone with the opt-in").await;
    let kept = operator_cms.get(CALICO_ENDPOINT_NAME).await.unwrap();
    assert_eq!(kept.data.unwrap()["KUBERNETES_SERVICE_HOST"], "10.0.0.10");
    apply_value(&m.client, cpi(true)).await;
    assert_eq!(
        published(&path, "kube-system", CALICO_ENDPOINT_NAME).await,
        calico
    );

    // 6. Deleted: what we published goes, the user's ConfigMap stays.
    cpis(&m.client)
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    wait_cpi_gone(&m.client, CLUSTER).await;
    ours_gone(&path, "our ConfigMaps gone with the ControlPlaneIngress").await;
    let kept = operator_cms.get(CALICO_ENDPOINT_NAME).await.unwrap();
    assert_eq!(kept.data.unwrap()["KUBERNETES_SERVICE_HOST"], "10.0.0.10");

    eprintln!(
        "no kube-proxy: {} calls of the pod answered through the published endpoint (total {:.0}s)",
        answered(&path.node.lock().unwrap(), "agent-pod"),
        started.elapsed().as_secs_f64()
    );
    path.stop(running).await;
}
