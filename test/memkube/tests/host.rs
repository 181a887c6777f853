//! Many API servers behind one listener (`memkube::Host`), as the
//! controller benchmark holds thousands of workload clusters: each tenant
//! is reached through its own kubeconfig by a real `kube` client, over
//! TLS, and sees only its own objects.

use std::time::Duration;

use k8s_openapi::api::{apps::v1::DaemonSet, core::v1::ConfigMap};
use kube::{
    Api, Client, Config,
    api::{Patch, PatchParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use memkube::{Host, Options};
use serde_json::json;

async fn client_from(kubeconfig: &str) -> Client {
    let kubeconfig = Kubeconfig::from_yaml(kubeconfig).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

#[tokio::test]
async fn tenants_are_separate_api_servers_behind_one_listener() {
    let host = Host::start(Options {
        tls: true,
        watch_buffer: 16,
        ..Default::default()
    })
    .await
    .unwrap();
    let (a, b) = (host.add("tenant-a"), host.add("tenant-b"));
    assert!(a.url().ends_with("/clusters/tenant-a"), "{}", a.url());

    // Through the kubeconfig, as the controller reads `<cluster>-kubeconfig`.
    let a_client = client_from(&a.kubeconfig_yaml()).await;
    let b_client = client_from(&b.kubeconfig_yaml()).await;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "only-in-a", "namespace": "default"}, "data": {"k": "v"}});
    Api::<ConfigMap>::namespaced(a_client.clone(), "default")
        .patch("only-in-a", &PatchParams::apply("test"), &Patch::Apply(&cm))
        .await
        .unwrap();
    assert!(
        Api::<ConfigMap>::namespaced(a_client, "default")
            .get_opt("only-in-a")
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        Api::<ConfigMap>::namespaced(b_client.clone(), "default")
            .get_opt("only-in-a")
            .await
            .unwrap()
            .is_none(),
        "a tenant sees another tenant's object"
    );
    // Each tenant has its own resource versions and discovery.
    assert!(b_client.apiserver_version().await.is_ok());

    // A tenant that was never added is not found, rather than some other
    // tenant answering.
    let mut stray = b.kubeconfig_yaml();
    stray = stray.replace("/clusters/tenant-b", "/clusters/nobody");
    let stray = client_from(&stray).await;
    let err = Api::<ConfigMap>::namespaced(stray, "default")
        .get("anything")
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err:?}"
    );
}

#[tokio::test]
async fn the_in_store_kubelet_reports_the_daemon_set_ready() {
    let host = Host::start(Options::default()).await.unwrap();
    let tenant = host.add("t");
    let store = tenant.store();
    let kubelet = tokio::spawn(async move {
        memkube::stand_in::daemon_set_ready_in_store(store, "kube-system", "proxy").await
    });
    let ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "proxy", "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"app": "p"}}, "template": {"metadata": {"labels": {"app": "p"}},
            "spec": {"containers": [{"name": "p", "image": "p:1"}]}}}});
    let api: Api<DaemonSet> = Api::namespaced(tenant.client(), "kube-system");
    api.patch("proxy", &PatchParams::apply("test"), &Patch::Apply(&ds))
        .await
        .unwrap();
    let mut ready = None;
    for _ in 0..100 {
        ready = api
            .get("proxy")
            .await
            .unwrap()
            .status
            .map(|s| s.number_ready);
        if ready == Some(1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ready, Some(1), "the DaemonSet reported ready");
    kubelet.abort();
}
