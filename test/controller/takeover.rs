//! Taking the node proxy over from k0smotron, on the data path: a pod keeps
//! calling the real workload API server through `kubernetes.default.svc`
//! while the controller moves `default/kubernetes` from k0smotron's HAProxy
//! to the hcp-ingress proxy, and while k0s then removes HAProxy. No call may
//! fail.
//!
//! The path is the one in `data_path.rs`, with HAProxy running k0smotron's
//! sidecar config; the test plays k0s as well (it applies k0smotron's stack,
//! and prunes it when the user has told k0smotron to stop).

use std::{fs, path::Path, time::Duration};

use hcp_ingress::{
    pki::{self, CertificateAuthority, LeafSpec},
    render::workload::ADMIN_PORT,
};
use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{ConfigMap, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams},
};
use serde_json::json;

use crate::{
    data_path::{
        DataPath, KubeProxy, SERVICE_IP, Stack, Steps, WITHIN, Workload, calls, haproxy_config,
        lost_calls, more_calls, more_calls_through, until,
    },
    harness::*,
};

/// The ControlPlaneIngress derived from the K0smotronControlPlane example.
const CPI: &str = "tenant-01-cp";
/// k0smotron's stack, as the k0s applier labels it.
const STACK: &str = "kmc-tenant-01-ingress";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taking_the_node_proxy_over_from_k0smotron_keeps_pods_on_the_api() {
    taking_the_node_proxy_over("takeover", KubeProxy::Iptables).await;
}

/// The same with kube-proxy in nftables mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taking_the_node_proxy_over_from_k0smotron_keeps_pods_on_the_api_on_nftables() {
    taking_the_node_proxy_over("takeover-nft", KubeProxy::Nftables).await;
}

async fn taking_the_node_proxy_over(name: &'static str, kube_proxy: KubeProxy) {
    // The workload cluster as k0smotron runs it: the API server without its
    // endpoint reconciler, a serving certificate that names the apiHost, the
    // controllers that turn a selector into endpoints, and one real node,
    // whose kube-proxy reaches the API through the shared ingress as
    // k0smotron's workers do.
    let path = DataPath::start(Workload {
        name,
        serves_service_ip: false,
        stack: Stack::V4,
        kube_proxy,
        endpoint_slices_held_back: false,
    })
    .await;
    let (node, w) = (&path.node, &path.w);
    let cluster = w.real();
    let wc = w.client();
    // k0smotron's HAProxy serves the `kubernetes` Service with a certificate
    // of the cluster CA.
    let ca = CertificateAuthority::from_pem(cluster.ca_pem(), cluster.ca_key_pem()).unwrap();
    let leaf = pki::mint_leaf(
        &ca,
        &LeafSpec {
            dns_names: vec![
                "kubernetes".into(),
                "kubernetes.default".into(),
                "kubernetes.default.svc".into(),
            ],
            ip_addresses: vec![SERVICE_IP.parse().unwrap()],
            validity: Duration::from_secs(3600),
            now: std::time::SystemTime::now(),
        },
    )
    .unwrap();
    fs::write(
        node.lock().unwrap().dir.join("server.pem"),
        format!("{}{}", leaf.cert_pem, leaf.key_pem),
    )
    .unwrap();

    // What k0s applies from k0smotron's stack: the HAProxy DaemonSet and its
    // ConfigMap, and the `kubernetes` Service turned to select it.
    let k0s = PatchParams::apply("k0s");
    let stack_meta = |name: &str| {
        json!({"name": name, "namespace": "default",
            "labels": {"k0s.k0sproject.io/stack": STACK, "app": "k0smotron-haproxy"},
            "annotations": {"k0s.k0sproject.io/stack-checksum": "0c4b1e2f"}})
    };
    Api::<ConfigMap>::namespaced(wc.clone(), "default")
        .patch(
            "k0smotron-haproxy-config",
            &k0s,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": stack_meta("k0smotron-haproxy-config"),
                "data": {"haproxy.cfg": haproxy_config(Path::new("/etc/haproxy"))}})),
        )
        .await
        .unwrap();
    let haproxy_ds: Api<DaemonSet> = Api::namespaced(wc.clone(), "default");
    haproxy_ds
        .patch("k0smotron-haproxy", &k0s, &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": stack_meta("k0smotron-haproxy"),
            "spec": {"selector": {"matchLabels": {"app": "k0smotron-haproxy"}},
                "template": {"metadata": {"labels": {"app": "k0smotron-haproxy"}},
                    "spec": {"hostNetwork": true, "containers": [{"name": "haproxy", "image": "haproxy:2.8",
                        "ports": [{"containerPort": 7443, "name": "https"}]}]}}}})))
        .await
        .unwrap();
    let services: Api<Service> = Api::namespaced(wc.clone(), "default");
    services
        .patch(
            "kubernetes",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {
                    "labels": {"k0s.k0sproject.io/stack": STACK},
                    "annotations": {"k0s.k0sproject.io/stack-checksum": "5f1d0a9c"}},
                "spec": {"selector": {"app": "k0smotron-haproxy"}, "internalTrafficPolicy": "Local",
                    "ports": [{"name": "https", "port": 443, "targetPort": 7443, "protocol": "TCP"}]}})),
        )
        .await
        .unwrap();

    // A pod on the node calls the API through k0smotron's HAProxy.
    path.start_pod();
    until(
        node,
        120,
        "the pod's first calls through k0smotron's HAProxy",
        async || calls(&node.lock().unwrap()).0 >= 5,
    )
    .await;
    let (before, failed) = calls(&node.lock().unwrap());
    assert!(
        failed.is_empty(),
        "calls failed before any change: {failed:?}"
    );

    // The user asks hcp-ingress to take the node proxy over.
    let mut steps = Steps::first("the take-over");
    let (m, running) = path.manage().await;
    let mut kcp: serde_json::Value =
        serde_saphyr::from_str(&example("k0smotron-controlplane.yaml")).unwrap();
    kcp["metadata"].as_object_mut().unwrap().remove("uid");
    kcp["metadata"]["annotations"] = json!({"hcp-ingress.dev/take-over": "node-proxy"});
    apply_value(&m.client, kcp).await;

    // Ours ready on the node, the Service released from HAProxy: pending
    // until k0smotron is told to stop.
    let message = wait_reason(
        &m.client,
        CPI,
        ("EndpointsSteered", "True", "TakeOverPending"),
        WITHIN,
    )
    .await;
    assert!(message.contains("2_haproxy-ds.yaml"), "{message}");
    let service = services.get("kubernetes").await.unwrap();
    let spec = service.spec.clone().unwrap();
    assert_eq!(spec.selector, None, "the selector is dropped");
    assert_eq!(spec.internal_traffic_policy.as_deref(), Some("Cluster"));
    assert!(
        !service.labels().contains_key("k0s.k0sproject.io/stack"),
        "out of k0s's stack, so its prune cannot delete the Service"
    );
    assert!(
        service
            .annotations()
            .contains_key("k0s.k0sproject.io/stack-checksum"),
        "k0s's checksum stays: it skips the Service from now on"
    );

    // kube-proxy sends the pod to our proxy: only our EndpointSlice is left.
    let slices: Api<EndpointSlice> = Api::namespaced(wc.clone(), "default");
    until(
        node,
        60,
        "only hcp-ingress's EndpointSlice for default/kubernetes",
        async || {
            let list = slices
                .list(&ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
                .await
                .unwrap();
            list.items.len() == 1 && list.items[0].name_any() == "kubernetes"
        },
    )
    .await;
    more_calls_through(
        node,
        ADMIN_PORT,
        "the pod's calls through the hcp-ingress proxy",
        20.0,
    )
    .await;

    steps.next("HAProxy pruned by k0s");

    // The user adds the patch; k0s prunes HAProxy's DaemonSet and ConfigMap
    // (the Service is no longer in the stack).
    haproxy_ds
        .delete("k0smotron-haproxy", &DeleteParams::background())
        .await
        .unwrap();
    Api::<ConfigMap>::namespaced(wc.clone(), "default")
        .delete("k0smotron-haproxy-config", &DeleteParams::default())
        .await
        .unwrap();
    until(node, 60, "HAProxy stopped", async || {
        !node
            .lock()
            .unwrap()
            .processes
            .iter()
            .any(|(n, _)| n.starts_with("haproxy"))
    })
    .await;
    let message = wait_reason(
        &m.client,
        CPI,
        ("EndpointsSteered", "True", "AdvertiseAddress"),
        WITHIN,
    )
    .await;
    assert!(
        message.contains("taken over from DaemonSet default/k0smotron-haproxy"),
        "{message}"
    );
    more_calls(node, "20 more calls with HAProxy gone", 20).await;

    steps.next("taken back");

    // Taken back without HAProxy to give it to: the cluster is never left
    // steered at a proxy that is gone, so ours stays.
    let kcps: Api<kube::api::DynamicObject> = Api::namespaced_with(
        m.client.clone(),
        NS,
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "controlplane.cluster.x-k8s.io",
            "v1beta2",
            "K0smotronControlPlane",
        )),
    );
    kcps.patch(
        "tenant-01-cp",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"hcp-ingress.dev/take-over": null}}})),
    )
    .await
    .unwrap();
    let message = wait_reason(
        &m.client,
        CPI,
        ("EndpointsSteered", "False", "RestoreNotPossible"),
        WITHIN,
    )
    .await;
    assert!(message.contains("selects no ready pod"), "{message}");
    more_calls(node, "calls through the proxy that was kept", 10).await;

    let (answered, failed) = calls(&node.lock().unwrap());
    eprintln!(
        "take-over data path ({kube_proxy:?}): {answered} calls answered ({before} before the controller started), {} failed; {}",
        failed.len(),
        steps.summary()
    );
    assert!(
        failed.is_empty(),
        "the pod lost the API during the take-over: {}",
        lost_calls(&node.lock().unwrap(), &failed, &steps)
    );
    path.stop(running).await;
}
