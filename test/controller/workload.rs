//! Workload side: two memkube instances, management and workload; the
//! controller installs the node proxy through `<cluster>-kubeconfig`.

use std::{collections::BTreeMap, time::Duration};

use hcp_ingress::{
    controller::Settings,
    pki::{self, CertificateAuthority, LeafSpec, Renewal},
    proxy::config,
};
use k8s_openapi::{
    ByteString,
    api::{
        apps::v1::{DaemonSet, Deployment},
        core::v1::{ConfigMap, Endpoints, Namespace, Secret, Service},
        discovery::v1::EndpointSlice,
    },
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use memkube::{RequestMatch, TestApi};
use serde_json::{Value, json};

use crate::harness::*;

pub(crate) const CLUSTER: &str = "wl";
pub(crate) const CA_CRT: &str = include_str!("../workload/fixtures/ca.crt");
pub(crate) const CA_KEY: &str = include_str!("../workload/fixtures/ca.key");

/// A workload cluster as a hosted control plane leaves it: a real API server
/// run with `--endpoint-reconciler-type=none` (as steering needs), the
/// `kubernetes` Endpoints and EndpointSlice written by the control plane
/// provider, and a cloud-controller-manager.
pub(crate) async fn workload_cluster() -> Server {
    let server = Server::start_real(realkube::Options {
        name: "workload".into(),
        endpoint_reconciler: "none".into(),
        ..realkube::Options::default()
    })
    .await;
    seed_workload(&server.client(), true).await;
    // The controller reaches the workload cluster as the kubeconfig's user.
    server.check_rejections_of(realkube::CLUSTER_ADMIN_USER);
    server
}

/// An in-memory workload cluster, for tests that inject API faults.
pub(crate) async fn workload_cluster_in_memory() -> Server {
    let server = Server::Mem(TestApi::start().await);
    seed_workload(&server.client(), true).await;
    server
}

/// What a workload API server holds before hcp-ingress touches it: a `real`
/// one made the `kubernetes` Service itself.
pub(crate) async fn seed_workload(client: &Client, real: bool) {
    let client = client.clone();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in ["default", "kube-system"] {
        let _ = namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
            )
            .await;
    }
    // The control plane provider's manager (Kamaji's, say): the API server
    // runs without its endpoint reconciler.
    let as_provider = PatchParams::apply("kube-apiserver");
    if !real {
        let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kubernetes", "namespace": "default"},
            "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443, "targetPort": 6443, "protocol": "TCP"}]}});
        Api::<Service>::namespaced(client.clone(), "default")
            .patch("kubernetes", &as_provider, &Patch::Apply(&service))
            .await
            .unwrap();
    }
    let endpoints = json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "kubernetes", "namespace": "default",
            "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": [{"addresses": [{"ip": "10.0.0.5"}], "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}]});
    Api::<Endpoints>::namespaced(client.clone(), "default")
        .patch("kubernetes", &as_provider, &Patch::Apply(&endpoints))
        .await
        .unwrap();
    if real {
        let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.5"], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]});
        Api::<EndpointSlice>::namespaced(client.clone(), "default")
            .patch("kubernetes", &as_provider, &Patch::Apply(&slice))
            .await
            .unwrap();
    }
    let ccm = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "cloud-controller-manager", "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"app": "ccm"}}, "template": {"metadata": {"labels": {"app": "ccm"}},
            "spec": {"containers": [{"name": "ccm", "image": "registry.example/ccm:v1", "args": ["--cloud-provider=azure"],
                "env": [{"name": "AZURE_CLOUD", "value": "public"}]}]}}}});
    Api::<Deployment>::namespaced(client, "kube-system")
        .patch(
            "cloud-controller-manager",
            &PatchParams::apply("helm"),
            &Patch::Apply(&ccm),
        )
        .await
        .unwrap();
}

/// Management side for `CLUSTER`: its Cluster (initialized), kubeconfig and CA Secrets.
pub(crate) async fn connect(m: &Management, workload: &Server) {
    initialized_cluster(m, CLUSTER).await;
    put_secret(
        &m.client,
        &format!("{CLUSTER}-kubeconfig"),
        [("value", workload.kubeconfig_yaml())],
    )
    .await;
    put_secret(
        &m.client,
        &format!("{CLUSTER}-ca"),
        [
            ("tls.crt", CA_CRT.to_string()),
            ("tls.key", CA_KEY.to_string()),
        ],
    )
    .await;
    // A stand-in for the API server's own serving key: it must never be read.
    put_secret(
        &m.client,
        &format!("{CLUSTER}-apiserver-key"),
        [("tls.key", "secret".to_string())],
    )
    .await;
}

/// A CAPI Cluster `name` whose control plane is initialized.
pub(crate) async fn initialized_cluster(m: &Management, name: &str) {
    let cluster = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": name, "namespace": NS}, "spec": {"paused": false}});
    apply_value(&m.client, cluster).await;
    let clusters = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        m.client.clone(),
        NS,
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster"),
            "clusters",
        ),
    );
    clusters
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"initialization": {"controlPlaneInitialized": true}}})),
        )
        .await
        .unwrap();
}

pub(crate) async fn put_secret<const N: usize>(
    client: &Client,
    name: &str,
    data: [(&str, String); N],
) {
    let data: BTreeMap<String, ByteString> = data
        .into_iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.into_bytes())))
        .collect();
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), NS)
        .patch(
            name,
            &PatchParams::apply("capi").force(),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap();
}

fn cpi(extra_proxy: Value) -> Value {
    let mut proxy = json!({"upstreams": ["192.0.2.10", "192.0.2.11"]});
    proxy
        .as_object_mut()
        .unwrap()
        .extend(extra_proxy.as_object().unwrap().clone());
    json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
        "metadata": {"name": CLUSTER, "namespace": NS},
        "spec": {"clusterName": CLUSTER, "ingress": {"apiHost": "api.wl.example.com", "className": "haproxy"},
                 "backend": {"serviceName": "kmc-wl", "apiPort": 30443}, "proxy": proxy}})
}

/// The usual start: both clusters connected, the controller running, and
/// the ControlPlaneIngress of `CLUSTER` with `extra_proxy` applied.
async fn installed(extra_proxy: Value) -> (Management, Server, Running) {
    let m = management(&[]).await;
    let w = workload_cluster().await;
    connect(&m, &w).await;
    let running = m.start();
    apply_value(&m.client, cpi(extra_proxy)).await;
    (m, w, running)
}

async fn wait_object<K>(api: &Api<K>, name: &str) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(&format!("workload object {name}"), || async {
        api.get_opt(name).await.ok()?
    })
    .await
}

/// Whether `namespace/name` of kind `K` exists.
async fn exists<K>((client, namespace, name): (Client, &str, &str)) -> bool
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client, namespace)
        .get_opt(name)
        .await
        .unwrap()
        .is_some()
}

fn ca() -> CertificateAuthority {
    CertificateAuthority::from_pem(CA_CRT, CA_KEY).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installs_the_proxy_with_its_config_and_a_certificate_minted_from_the_cluster_ca() {
    let (m, w, running) = installed(json!({})).await;

    let wc = w.client();
    let config_map = wait_object(
        &Api::<ConfigMap>::namespaced(wc.clone(), "kube-system"),
        "hcp-ingress-proxy",
    )
    .await;
    let text = &config_map.data.as_ref().unwrap()["config.yaml"];
    let parsed = config::validate(config::parse(text).unwrap())
        .expect("the rendered config is one the proxy accepts");
    let rendered = format!("{parsed:?}");
    assert!(
        rendered.contains("api.wl.example.com") && rendered.contains("192.0.2.10"),
        "{rendered}"
    );

    let secret = wait_object(
        &Api::<Secret>::namespaced(wc.clone(), "kube-system"),
        "hcp-ingress-proxy",
    )
    .await;
    let cert = String::from_utf8(secret.data.as_ref().unwrap()["tls.crt"].0.clone()).unwrap();
    let spec = LeafSpec::proxy(
        "cluster.local",
        "10.96.0.1".parse().unwrap(),
        "240.0.0.1".parse().unwrap(),
        std::time::SystemTime::now(),
    );
    // Valid means: parses, chains to the CA, carries exactly the wanted SANs, not due.
    assert!(
        matches!(
            pki::renewal_due(&cert, spec.now, &ca(), &spec),
            Renewal::Valid { .. }
        ),
        "the proxy certificate must be fresh and right"
    );
    let key = String::from_utf8(secret.data.as_ref().unwrap()["tls.key"].0.clone()).unwrap();
    assert!(
        pki::key_matches(&cert, &key),
        "the key in the Secret belongs to the certificate"
    );

    let ds = wait_object(
        &Api::<DaemonSet>::namespaced(wc.clone(), "kube-system"),
        "hcp-ingress-proxy",
    )
    .await;
    let pod = ds.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.host_network, Some(true));
    assert_eq!(pod.automount_service_account_token, Some(false));

    // The API server's key is never read: only these two Secrets are, one by one.
    let secrets_read: std::collections::BTreeSet<String> = m
        .api
        .request_log()
        .into_iter()
        .filter(|r| {
            r.path.contains("/secrets") && matches!(r.verb.as_str(), "get" | "list" | "watch")
        })
        .map(|r| format!("{} {}", r.verb, r.path))
        .collect();
    for read in &secrets_read {
        assert!(
            read == &format!("get /api/v1/namespaces/{NS}/secrets/{CLUSTER}-kubeconfig")
                || read == &format!("get /api/v1/namespaces/{NS}/secrets/{CLUSTER}-ca"),
            "the controller read {read}"
        );
    }
    assert!(
        !secrets_read.iter().any(|r| r.contains("apiserver-key")),
        "{secrets_read:?}"
    );

    // Status follows the DaemonSet's own report.
    let status = json!({"status": {"desiredNumberScheduled": 2, "numberReady": 2, "currentNumberScheduled": 2, "numberMisscheduled": 0}});
    Api::<DaemonSet>::namespaced(wc.clone(), "kube-system")
        .patch_status(
            "hcp-ingress-proxy",
            &PatchParams::default(),
            &Patch::Merge(status),
        )
        .await
        .unwrap();
    let (_, message) = wait_condition(&m.client, CLUSTER, "ProxyReady", "True").await;
    assert_eq!(message, "2/2 nodes run a ready proxy");
    let cpi = cpis(&m.client).get(CLUSTER).await.unwrap();
    assert_eq!(cpi.status.unwrap().proxy.unwrap().ready_nodes, 2);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_past_two_thirds_of_its_life_is_reminted() {
    let m = management(&[]).await;
    let w = workload_cluster().await;
    connect(&m, &w).await;
    // A certificate minted six days ago with a seven-day life.
    let then = std::time::SystemTime::now() - Duration::from_secs(6 * 24 * 3600);
    let old_spec = LeafSpec::proxy(
        "cluster.local",
        "10.96.0.1".parse().unwrap(),
        "240.0.0.1".parse().unwrap(),
        then,
    );
    let old = pki::mint_leaf(&ca(), &old_spec).unwrap();
    let secrets: Api<Secret> = Api::namespaced(w.client(), "kube-system");
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "hcp-ingress-proxy", "namespace": "kube-system", "labels": {"app.kubernetes.io/managed-by": "hcp-ingress"}},
        "stringData": {"tls.crt": old.cert_pem, "tls.key": old.key_pem}});
    secrets
        .patch(
            "hcp-ingress-proxy",
            &PatchParams::apply("hcp-ingress"),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap();

    let running = m.start();
    apply_value(&m.client, cpi(json!({}))).await;
    let renewed = eventually("a new certificate", || async {
        let s = secrets.get("hcp-ingress-proxy").await.ok()?;
        let cert = String::from_utf8(s.data?.get("tls.crt")?.0.clone()).ok()?;
        (cert != old.cert_pem).then_some(cert)
    })
    .await;
    let spec = LeafSpec::proxy(
        "cluster.local",
        "10.96.0.1".parse().unwrap(),
        "240.0.0.1".parse().unwrap(),
        std::time::SystemTime::now(),
    );
    assert!(matches!(
        pki::renewal_due(&renewed, spec.now, &ca(), &spec),
        Renewal::Valid { .. }
    ));
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_are_steered_and_an_overwrite_is_detected() {
    let (m, w, running) = installed(json!({})).await;
    let endpoints: Api<Endpoints> = Api::namespaced(w.client(), "default");
    let steered = eventually("steered endpoints", || async {
        let e = endpoints.get("kubernetes").await.ok()?;
        let ip = e
            .subsets
            .as_ref()?
            .first()?
            .addresses
            .as_ref()?
            .first()?
            .ip
            .clone();
        (ip == "240.0.0.1").then_some(e)
    })
    .await;
    assert_eq!(
        steered.labels()["endpointslice.kubernetes.io/skip-mirror"],
        "true"
    );
    let slices = Api::<EndpointSlice>::namespaced(w.client(), "default");
    let slice = eventually("the steered EndpointSlice", || async {
        let slice = slices.get("kubernetes").await.ok()?;
        (slice.endpoints.first()?.addresses == ["240.0.0.1"]).then_some(slice)
    })
    .await;
    assert_eq!(slice.labels()["kubernetes.io/service-name"], "kubernetes");
    wait_condition(&m.client, CLUSTER, "EndpointsSteered", "True").await;

    // An API server still running its endpoint reconciler puts its own address back.
    let mut rewritten = endpoints.get("kubernetes").await.unwrap();
    rewritten.subsets = Some(serde_json::from_value(json!([{"addresses": [{"ip": "10.0.0.5"}], "ports": [{"name": "https", "port": 6443}]}])).unwrap());
    endpoints
        .replace("kubernetes", &PostParams::default(), &rewritten)
        .await
        .unwrap();
    let (reason, message) = wait_condition(&m.client, CLUSTER, "EndpointsSteered", "False").await;
    assert_eq!(reason, "EndpointsOverwritten");
    assert!(
        message.contains("--endpoint-reconciler-type=none"),
        "{message}"
    );
    assert!(
        message.contains("Endpoints default/kubernetes holds") && message.contains("10.0.0.5"),
        "{message}"
    );
    assert!(
        !message.contains("EndpointSlice"),
        "only the Endpoints were rewritten: {message}"
    );
    // ... and re-steered.
    eventually("re-steered endpoints", || async {
        let e = endpoints.get("kubernetes").await.ok()?;
        (e.subsets.as_ref()?.first()?.addresses.as_ref()?.first()?.ip == "240.0.0.1").then_some(())
    })
    .await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_steering_patches_only_the_fields_it_needs() {
    let (m, w, running) = installed(json!({"steering": "service"})).await;
    let services: Api<Service> = Api::namespaced(w.client(), "default");
    let service = eventually("the steered Service", || async {
        let s = services.get("kubernetes").await.ok()?;
        s.spec.as_ref()?.selector.is_some().then_some(s)
    })
    .await;
    let spec = service.spec.unwrap();
    assert_eq!(spec.internal_traffic_policy.as_deref(), Some("Local"));
    assert_eq!(spec.publish_not_ready_addresses, Some(true));
    assert_eq!(
        spec.cluster_ip.as_deref(),
        Some("10.96.0.1"),
        "the API server's fields stay"
    );
    assert_eq!(spec.ports.unwrap()[0].port, 443);
    wait_condition(&m.client, CLUSTER, "EndpointsSteered", "True").await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ccm_gets_the_service_env_while_other_managers_keep_their_fields() {
    let (m, w, running) = installed(json!({})).await;
    let deployments: Api<Deployment> = Api::namespaced(w.client(), "kube-system");
    let env_of = |d: &Deployment| -> BTreeMap<String, String> {
        d.spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect()
    };
    let patched = eventually("CCM env", || async {
        let d = deployments.get("cloud-controller-manager").await.ok()?;
        env_of(&d)
            .contains_key("KUBERNETES_SERVICE_HOST")
            .then_some(d)
    })
    .await;
    let env = env_of(&patched);
    assert_eq!(env["KUBERNETES_SERVICE_HOST"], "api.wl.example.com");
    assert_eq!(env["KUBERNETES_SERVICE_PORT"], "443");
    assert_eq!(
        env["AZURE_CLOUD"], "public",
        "the chart's env entry survives"
    );
    let container = &patched
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    assert_eq!(container.image.as_deref(), Some("registry.example/ccm:v1"));
    let (_, message) = wait_condition(&m.client, CLUSTER, "CCMConfigured", "True").await;
    assert!(
        message.contains("Deployment kube-system/cloud-controller-manager"),
        "{message}"
    );

    // The chart upgrades its own env entry; ours stay.
    let upgrade = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "cloud-controller-manager", "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"app": "ccm"}}, "template": {"metadata": {"labels": {"app": "ccm"}},
            "spec": {"containers": [{"name": "ccm", "image": "registry.example/ccm:v2", "args": ["--cloud-provider=azure"],
                "env": [{"name": "AZURE_CLOUD", "value": "china"}]}]}}}});
    deployments
        .patch(
            "cloud-controller-manager",
            &PatchParams::apply("helm"),
            &Patch::Apply(&upgrade),
        )
        .await
        .unwrap();
    let env = env_of(&deployments.get("cloud-controller-manager").await.unwrap());
    assert_eq!(env["AZURE_CLOUD"], "china");
    assert_eq!(env["KUBERNETES_SERVICE_HOST"], "api.wl.example.com");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_workload_api_is_a_condition_then_converges_and_a_rotated_kubeconfig_is_followed()
 {
    let m = management(&[]).await;
    let w = workload_cluster_in_memory().await;
    connect(&m, &w).await;
    w.mem()
        .fail_next(1_000_000, RequestMatch::new("*", ""), 503);
    let (settings, metrics) = with_metrics(Settings::for_tests());
    let running = m.start_with(settings);
    apply_value(&m.client, cpi(json!({}))).await;
    let (reason, message) = wait_condition(&m.client, CLUSTER, "WorkloadReachable", "False").await;
    assert_eq!(reason, "WorkloadAPIError", "{message}");
    // The controller keeps trying, backing off: every failed attempt doubles
    // the delay (1 s, 2 s, 4 s), so three more attempts take at least the
    // 1 s and 2 s delays even if one came at once, and each is one bounded
    // round of requests to the workload API.
    let done = reconciles(metrics).await.expect("metrics answer");
    let attempts = w.request_log().len();
    let since = std::time::Instant::now();
    eventually("three more attempts at the workload cluster", || async {
        (reconciles(metrics).await? >= done + 3).then_some(())
    })
    .await;
    let (elapsed, requests) = (since.elapsed(), w.request_log().len() - attempts);
    assert!(
        elapsed >= Duration::from_secs(3),
        "backoff, not a hot loop: three attempts within {elapsed:?}"
    );
    assert!(
        requests < 60,
        "each attempt is one round of requests: {requests} in three attempts"
    );

    w.mem().clear_faults();
    wait_condition(&m.client, CLUSTER, "WorkloadReachable", "True").await;
    wait_object(
        &Api::<DaemonSet>::namespaced(w.client(), "kube-system"),
        "hcp-ingress-proxy",
    )
    .await;

    // CAPI rotates the kubeconfig (here: the cluster moved); the controller follows.
    let moved = workload_cluster().await;
    put_secret(
        &m.client,
        &format!("{CLUSTER}-kubeconfig"),
        [("value", moved.kubeconfig_yaml())],
    )
    .await;
    // Touch the ControlPlaneIngress so the change is picked up now rather than at the next resync.
    cpis(&m.client)
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"touch": "1"}}})),
        )
        .await
        .unwrap();
    wait_object(
        &Api::<DaemonSet>::namespaced(moved.client(), "kube-system"),
        "hcp-ingress-proxy",
    )
    .await;
    running.stop().await;
}

/// The `kubernetes` Endpoints and EndpointSlice addresses, as "ip:port".
pub(crate) async fn kubernetes_addresses(wc: &Client) -> (Vec<String>, Vec<String>) {
    let endpoints = Api::<Endpoints>::namespaced(wc.clone(), "default")
        .get_opt("kubernetes")
        .await
        .unwrap();
    let slice = Api::<EndpointSlice>::namespaced(wc.clone(), "default")
        .get_opt("kubernetes")
        .await
        .unwrap();
    let from_endpoints = endpoints
        .and_then(|e| e.subsets)
        .unwrap_or_default()
        .into_iter()
        .flat_map(|s| {
            let ports: Vec<i32> = s.ports.unwrap_or_default().iter().map(|p| p.port).collect();
            s.addresses
                .unwrap_or_default()
                .into_iter()
                .flat_map(move |a| {
                    ports
                        .iter()
                        .map(move |p| format!("{}:{p}", a.ip))
                        .collect::<Vec<_>>()
                })
        })
        .collect();
    let from_slice = slice
        .map(|s| {
            let ports: Vec<i32> = s
                .ports
                .unwrap_or_default()
                .iter()
                .filter_map(|p| p.port)
                .collect();
            s.endpoints
                .iter()
                .flat_map(|e| e.addresses.clone())
                .flat_map(|a| {
                    ports
                        .iter()
                        .map(move |p| format!("{a}:{p}"))
                        .collect::<Vec<_>>()
                })
                .collect()
        })
        .unwrap_or_default();
    (from_endpoints, from_slice)
}

/// The newest Event of `reason` on the ControlPlaneIngress.
pub(crate) async fn event_note(m: &Management, reason: &str) -> String {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(m.client.clone(), NS);
    eventually(&format!("a {reason} Event"), || async {
        events
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason))?
            .note
    })
    .await
}

async fn delete_cpi(m: &Management) {
    cpis(&m.client)
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    wait_cpi_gone(&m.client, CLUSTER).await;
}

/// `clusterctl move` deletes each moved object from the source management
/// cluster with its delete-for-move annotation, then drops every finalizer.
/// Between the two, the source's controller must not give the workload
/// cluster back (the target's controller carries on with it) nor write the
/// object. test/capi runs the real move; this test holds the object at
/// that step to see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_for_clusterctl_move_leaves_the_workload_cluster_as_it_is() {
    let (m, w, running) = installed(json!({})).await;
    wait_condition(&m.client, CLUSTER, "EndpointsSteered", "True").await;
    let wc = w.client();
    let steered = kubernetes_addresses(&wc).await;
    assert!(
        steered.0.iter().all(|a| a.starts_with("240.0.0.1:")),
        "{steered:?}"
    );
    let proxy = Api::<DaemonSet>::namespaced(wc.clone(), "kube-system")
        .get("hcp-ingress-proxy")
        .await
        .unwrap();
    cpis(&m.client)
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"clusterctl.cluster.x-k8s.io/delete-for-move": ""}}})),
        )
        .await
        .unwrap();
    cpis(&m.client)
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    let note = event_note(&m, "MovedAway").await;
    assert!(note.contains("left as it is"), "{note}");
    // What clusterctl does next.
    cpis(&m.client)
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    wait_cpi_gone(&m.client, CLUSTER).await;
    assert_eq!(
        kubernetes_addresses(&wc).await,
        steered,
        "steering given back"
    );
    let still = Api::<DaemonSet>::namespaced(wc.clone(), "kube-system")
        .get("hcp-ingress-proxy")
        .await
        .expect("the node proxy stays");
    assert_eq!(still.resource_version(), proxy.resource_version());
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_gives_kubernetes_back_then_removes_only_what_we_installed() {
    let m = management(&[]).await;
    let w = workload_cluster().await;
    connect(&m, &w).await;
    let bystander = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns", "namespace": "kube-system"}, "data": {"Corefile": "."}});
    Api::<ConfigMap>::namespaced(w.client(), "kube-system")
        .patch(
            "coredns",
            &PatchParams::apply("kubeadm"),
            &Patch::Apply(&bystander),
        )
        .await
        .unwrap();
    let running = m.start();
    apply_value(&m.client, cpi(json!({}))).await;
    let wc = w.client();
    let daemon_sets: Api<DaemonSet> = Api::namespaced(wc.clone(), "kube-system");
    wait_object(&daemon_sets, "hcp-ingress-proxy").await;
    wait_condition(&m.client, CLUSTER, "EndpointsSteered", "True").await;
    let steered = kubernetes_addresses(&wc).await;
    assert_eq!(
        steered,
        (
            vec!["240.0.0.1:443".to_string()],
            vec!["240.0.0.1:443".to_string()]
        ),
        "steered at the node-local proxy address"
    );

    delete_cpi(&m).await;
    // Given back what the control plane provider had written, both of them.
    assert_eq!(
        kubernetes_addresses(&wc).await,
        (
            vec!["10.0.0.5:6443".to_string()],
            vec!["10.0.0.5:6443".to_string()]
        ),
        "default/kubernetes reaches the API server again"
    );
    let in_kube_system = |name: &'static str| (wc.clone(), "kube-system", name);
    for (present, what) in [
        (
            exists::<DaemonSet>(in_kube_system("hcp-ingress-proxy")).await,
            "DaemonSet hcp-ingress-proxy",
        ),
        (
            exists::<ConfigMap>(in_kube_system("hcp-ingress-proxy")).await,
            "ConfigMap hcp-ingress-proxy",
        ),
        (
            exists::<Secret>(in_kube_system("hcp-ingress-proxy")).await,
            "Secret hcp-ingress-proxy",
        ),
        (
            exists::<ConfigMap>(in_kube_system("hcp-ingress-steering")).await,
            "the steering record",
        ),
    ] {
        assert!(!present, "{what} must be removed");
    }
    assert!(
        exists::<ConfigMap>(in_kube_system("coredns")).await,
        "someone else's ConfigMap stays"
    );
    assert!(
        exists::<Deployment>(in_kube_system("cloud-controller-manager")).await,
        "the CCM stays"
    );
    let note = event_note(&m, "WorkloadCleanedUp").await;
    assert!(
        note.contains("Endpoints and EndpointSlice default/kubernetes back at 10.0.0.5:6443"),
        "{note}"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_service_steering_deletion_gives_the_service_back() {
    let (m, w, running) = installed(json!({"steering": "service"})).await;
    let wc = w.client();
    let services: Api<Service> = Api::namespaced(wc.clone(), "default");
    wait_condition(&m.client, CLUSTER, "EndpointsSteered", "True").await;
    let steered = services.get("kubernetes").await.unwrap().spec.unwrap();
    assert!(steered.selector.is_some());
    assert_eq!(steered.internal_traffic_policy.as_deref(), Some("Local"));

    delete_cpi(&m).await;
    let spec = services.get("kubernetes").await.unwrap().spec.unwrap();
    assert_eq!(spec.selector, None, "the selector we set is gone");
    assert_eq!(spec.internal_traffic_policy.as_deref(), Some("Cluster"));
    assert_ne!(spec.publish_not_ready_addresses, Some(true));
    assert_eq!(
        kubernetes_addresses(&wc).await.0,
        vec!["10.0.0.5:6443".to_string()],
        "the endpoints were never touched"
    );
    assert!(!exists::<DaemonSet>((wc.clone(), "kube-system", "hcp-ingress-proxy")).await);
    let note = event_note(&m, "WorkloadCleanedUp").await;
    assert!(
        note.contains("Service default/kubernetes: selector removed"),
        "{note}"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opting_out_gives_kubernetes_back_and_removes_the_proxy() {
    let (m, w, running) = installed(json!({})).await;
    let wc = w.client();
    wait_condition(&m.client, CLUSTER, "EndpointsSteered", "True").await;
    eventually("the proxy in the status", || async {
        cpis(&m.client).get(CLUSTER).await.ok()?.status?.proxy
    })
    .await;
    let mut off = cpi(json!({}));
    off["spec"]["proxy"]["enabled"] = json!(false);
    apply_value(&m.client, off).await;
    // Given back first; the proxy goes in a later pass.
    wait_reason(
        &m.client,
        CLUSTER,
        ("ProxyReady", "True", "ProxyDisabled"),
        Duration::from_secs(60),
    )
    .await;
    let (reason, message) = wait_condition(&m.client, CLUSTER, "EndpointsSteered", "True").await;
    assert_eq!(reason, "Restored", "{message}");
    assert!(message.contains("back at 10.0.0.5:6443"), "{message}");
    assert_eq!(
        kubernetes_addresses(&wc).await,
        (
            vec!["10.0.0.5:6443".to_string()],
            vec!["10.0.0.5:6443".to_string()]
        )
    );
    assert!(!exists::<DaemonSet>((wc.clone(), "kube-system", "hcp-ingress-proxy")).await);
    event_note(&m, "SteeringRestored").await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steering_switch_is_our_own_change_not_tampering() {
    let (m, w, running) = installed(json!({})).await;
    let wc = w.client();
    let services: Api<Service> = Api::namespaced(wc.clone(), "default");
    wait_condition(&m.client, CLUSTER, "EndpointsSteered", "True").await;

    apply_value(&m.client, cpi(json!({"steering": "service"}))).await;
    let message = wait_reason(
        &m.client,
        CLUSTER,
        ("EndpointsSteered", "True", "ServiceSelector"),
        Duration::from_secs(60),
    )
    .await;
    assert!(
        message.contains("switched from advertise-address"),
        "{message}"
    );
    // A hand-over, not a give-back: the recorded addresses stay in the
    // record (they are for leaving hcp-ingress); the advertise address is
    // released once the Service selects the proxy pods, which run next to it.
    let (endpoints, slice) = kubernetes_addresses(&wc).await;
    assert!(slice.is_empty(), "our EndpointSlice is gone: {slice:?}");
    assert!(
        !endpoints.contains(&"240.0.0.1:443".to_string()),
        "{endpoints:?}"
    );
    assert!(
        services
            .get("kubernetes")
            .await
            .unwrap()
            .spec
            .unwrap()
            .selector
            .is_some()
    );
    assert!(exists::<DaemonSet>((wc.clone(), "default", "hcp-ingress-proxy")).await);
    eventually(
        "the advertise-address proxy removed after the switch",
        || async {
            (!exists::<DaemonSet>((wc.clone(), "kube-system", "hcp-ingress-proxy")).await)
                .then_some(())
        },
    )
    .await;

    apply_value(&m.client, cpi(json!({}))).await;
    let message = wait_reason(
        &m.client,
        CLUSTER,
        ("EndpointsSteered", "True", "AdvertiseAddress"),
        Duration::from_secs(60),
    )
    .await;
    assert!(message.contains("switched from service"), "{message}");
    assert_eq!(
        services
            .get("kubernetes")
            .await
            .unwrap()
            .spec
            .unwrap()
            .selector,
        None
    );
    assert_eq!(
        kubernetes_addresses(&wc).await.0,
        vec!["240.0.0.1:443".to_string()]
    );
    eventually(
        "the service-steering proxy removed after the switch",
        || async {
            (!exists::<DaemonSet>((wc.clone(), "default", "hcp-ingress-proxy")).await).then_some(())
        },
    )
    .await;
    // Never reported as someone else's doing, at any point.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(m.client.clone(), NS);
    let tampering: Vec<String> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason
                .as_deref()
                .is_some_and(|r| r.ends_with("Overwritten"))
        })
        .filter_map(|e| e.note)
        .collect();
    assert!(tampering.is_empty(), "{tampering:#?}");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_nothing_to_give_back_the_proxy_stays_and_the_deletion_waits() {
    let m = management(&[]).await;
    let w = workload_cluster().await;
    let wc = w.client();
    // No control plane provider wrote endpoints: nothing to restore.
    Api::<Endpoints>::namespaced(wc.clone(), "default")
        .delete("kubernetes", &DeleteParams::default())
        .await
        .unwrap();
    Api::<EndpointSlice>::namespaced(wc.clone(), "default")
        .delete("kubernetes", &DeleteParams::default())
        .await
        .unwrap();
    connect(&m, &w).await;
    let running = m.start();
    apply_value(&m.client, cpi(json!({}))).await;
    wait_condition(&m.client, CLUSTER, "EndpointsSteered", "True").await;
    cpis(&m.client)
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    let (_, message) = wait_condition(&m.client, CLUSTER, "EndpointsSteered", "False").await;
    assert!(message.contains("kept the node proxy"), "{message}");
    assert!(message.contains("no addresses to give back"), "{message}");
    assert!(exists::<DaemonSet>((wc.clone(), "kube-system", "hcp-ingress-proxy")).await);
    assert_eq!(
        kubernetes_addresses(&wc).await.0,
        vec!["240.0.0.1:443".to_string()]
    );
    assert!(
        cpis(&m.client).get_opt(CLUSTER).await.unwrap().is_some(),
        "the deletion waits"
    );
    // The advice, followed literally: the opt-in annotation on the object
    // being deleted finishes the deletion.
    let annotation = "hcp-ingress.dev/finish-without-restore";
    assert!(message.contains(&format!("{annotation}=true")), "{message}");
    cpis(&m.client)
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {annotation: "true"}}})),
        )
        .await
        .unwrap();
    wait_cpi_gone(&m.client, CLUSTER).await;
    // Nothing of ours outlives the proxy: the steering went with it.
    assert_eq!(kubernetes_addresses(&wc).await, (vec![], vec![]));
    assert!(!exists::<DaemonSet>((wc.clone(), "kube-system", "hcp-ingress-proxy")).await);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ccm_selected_by_label_and_the_konnectivity_agent_when_asked_and_both_given_back_on_deletion()
 {
    let m = management(&[]).await;
    let w = workload_cluster().await;
    connect(&m, &w).await;
    let wc = w.client();
    let custom = json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "my-cloud-ccm", "namespace": "kube-system", "labels": {"component": "cloud-controller-manager"}},
        "spec": {"selector": {"matchLabels": {"app": "my-ccm"}}, "template": {"metadata": {"labels": {"app": "my-ccm"}},
            "spec": {"containers": [{"name": "manager", "image": "example/ccm:v1"}]}}}});
    Api::<DaemonSet>::namespaced(wc.clone(), "kube-system")
        .patch(
            "my-cloud-ccm",
            &PatchParams::apply("vendor"),
            &Patch::Apply(&custom),
        )
        .await
        .unwrap();
    let agent = json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "konnectivity-agent", "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"app": "konn"}}, "template": {"metadata": {"labels": {"app": "konn"}},
            "spec": {"containers": [{"name": "konnectivity-agent", "image": "example/agent:v1",
                "args": ["--logtostderr=true", "--proxy-server-host=10.0.0.5", "--proxy-server-port=8132"]}]}}}});
    Api::<DaemonSet>::namespaced(wc.clone(), "kube-system")
        .patch(
            "konnectivity-agent",
            &PatchParams::apply("k0s"),
            &Patch::Apply(&agent),
        )
        .await
        .unwrap();
    let mut object = cpi(json!({}));
    object["spec"]["ingress"]["konnectivityHost"] = json!("konn.wl.example.com");
    object["spec"]["backend"]["konnectivityPort"] = json!(30132);
    object["spec"]["ccm"] =
        json!({"selector": {"component": "cloud-controller-manager"}, "konnectivityAgent": true});
    let running = m.start();
    apply_value(&m.client, object).await;

    let daemon_sets: Api<DaemonSet> = Api::namespaced(wc.clone(), "kube-system");
    let selected = eventually("env on the selected CCM", || async {
        let d = daemon_sets.get("my-cloud-ccm").await.ok()?;
        let env = d.spec?.template.spec?.containers[0].env.clone()?;
        env.iter()
            .any(|e| e.name == "KUBERNETES_SERVICE_HOST")
            .then_some(env)
    })
    .await;
    assert!(
        selected.iter().any(|e| e.name == "KUBERNETES_SERVICE_HOST"
            && e.value.as_deref() == Some("api.wl.example.com"))
    );
    let args = eventually("konnectivity-agent args", || async {
        let d = daemon_sets.get("konnectivity-agent").await.ok()?;
        let args = d.spec?.template.spec?.containers[0].args.clone()?;
        args.contains(&"--proxy-server-host=konn.wl.example.com".to_string())
            .then_some(args)
    })
    .await;
    assert!(
        args.contains(&"--proxy-server-port=443".to_string()),
        "{args:?}"
    );
    assert!(
        args.contains(&"--logtostderr=true".to_string()),
        "other flags stay: {args:?}"
    );
    assert!(!args.iter().any(|a| a.contains("10.0.0.5")), "{args:?}");
    let (_, message) = wait_condition(&m.client, CLUSTER, "CCMConfigured", "True").await;
    assert!(
        message.contains("DaemonSet kube-system/my-cloud-ccm")
            && message.contains("konnectivity-agent"),
        "{message}"
    );

    // Deleted, the route to the ingress host goes: both get their own back.
    delete_cpi(&m).await;
    let ccm = daemon_sets.get("my-cloud-ccm").await.unwrap();
    let container = &ccm.spec.unwrap().template.spec.unwrap().containers[0];
    assert!(
        !container
            .env
            .iter()
            .flatten()
            .any(|e| e.name.starts_with("KUBERNETES_SERVICE_")),
        "our env is dropped: {:?}",
        container.env
    );
    assert_eq!(
        container.image.as_deref(),
        Some("example/ccm:v1"),
        "the vendor's fields stay"
    );
    let agent = daemon_sets.get("konnectivity-agent").await.unwrap();
    assert!(
        !agent
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("hcp-ingress.dev/original-args"),
        "the record of the original args goes too"
    );
    assert_eq!(
        agent.spec.unwrap().template.spec.unwrap().containers[0].args,
        Some(
            [
                "--logtostderr=true",
                "--proxy-server-host=10.0.0.5",
                "--proxy-server-port=8132"
            ]
            .map(String::from)
            .to_vec()
        ),
        "konnectivity-agent dials what it dialled before"
    );
    running.stop().await;
}

/// On a real scheduler (kube-scheduler, the DaemonSet controller, kwok
/// nodes) the proxy DaemonSet rolls out, and a new image rolls it again with
/// a surge pod next to the old one on each node: the pods declare no host
/// ports, which the scheduler would refuse to place twice on one node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_rolls_out_and_rolls_again_on_a_real_scheduler() {
    let m = management(&[]).await;
    let w = Server::start_real(realkube::Options {
        name: "workload".into(),
        endpoint_reconciler: "none".into(),
        scheduler: true,
        nodes: 3,
        ..realkube::Options::default()
    })
    .await;
    seed_workload(&w.client(), true).await;
    w.check_rejections_of(realkube::CLUSTER_ADMIN_USER);
    connect(&m, &w).await;
    let running = m.start();
    apply_value(
        &m.client,
        cpi(json!({"image": "registry.example/hcp-ingress:v1"})),
    )
    .await;
    let daemon_sets: Api<DaemonSet> = Api::namespaced(w.client(), "kube-system");
    let rolled_out = |image: &'static str| {
        let daemon_sets = daemon_sets.clone();
        async move {
            eventually(
                &format!("the proxy DaemonSet rolled out with {image}"),
                || async {
                    let ds = daemon_sets.get("hcp-ingress-proxy").await.ok()?;
                    let spec_image = ds.spec.as_ref()?.template.spec.as_ref()?.containers[0]
                        .image
                        .clone()?;
                    let status = ds.status?;
                    (spec_image == image
                        && status.observed_generation == ds.metadata.generation
                        && status.desired_number_scheduled == 3
                        && status.updated_number_scheduled == Some(3)
                        && status.number_available == Some(3)
                        && status.number_ready == 3)
                        .then_some(())
                },
            )
            .await
        }
    };
    rolled_out("registry.example/hcp-ingress:v1").await;
    let (reason, message) = wait_condition(&m.client, CLUSTER, "ProxyReady", "True").await;
    assert_eq!(reason, "AllNodesReady", "{message}");
    assert!(message.contains("3/3"), "{message}");

    apply_value(
        &m.client,
        cpi(json!({"image": "registry.example/hcp-ingress:v2"})),
    )
    .await;
    rolled_out("registry.example/hcp-ingress:v2").await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(w.client(), "kube-system");
    let images = eventually("only new pods, one per node", || async {
        let list = pods
            .list(
                &kube::api::ListParams::default()
                    .labels("app.kubernetes.io/name=hcp-ingress-proxy"),
            )
            .await
            .ok()?;
        let images: Vec<(String, String)> = list
            .items
            .iter()
            .map(|p| {
                (
                    p.spec
                        .as_ref()
                        .and_then(|s| s.node_name.clone())
                        .unwrap_or_default(),
                    p.spec
                        .as_ref()
                        .map(|s| s.containers[0].image.clone().unwrap_or_default())
                        .unwrap_or_default(),
                )
            })
            .collect();
        (images.len() == 3 && images.iter().all(|(_, i)| i.ends_with(":v2"))).then_some(images)
    })
    .await;
    let nodes: std::collections::BTreeSet<_> = images.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(nodes.len(), 3, "one proxy per node: {images:?}");
    running.stop().await;
}

/// A well-known cloud-controller-manager is found whatever kind its
/// installation chose: OpenStack's chart ships a DaemonSet, other manifests a
/// Deployment of the same name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_well_known_ccm_is_found_as_a_deployment_or_a_daemon_set() {
    let m = management(&[]).await;
    let w = workload_cluster().await;
    connect(&m, &w).await;
    let openstack = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "openstack-cloud-controller-manager", "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"app": "occm"}}, "template": {"metadata": {"labels": {"app": "occm"}},
            "spec": {"containers": [{"name": "openstack-cloud-controller-manager", "image": "example/occm:v1"}]}}}});
    let deployments: Api<Deployment> = Api::namespaced(w.client(), "kube-system");
    deployments
        .patch(
            "openstack-cloud-controller-manager",
            &PatchParams::apply("manifests"),
            &Patch::Apply(&openstack),
        )
        .await
        .unwrap();
    let running = m.start();
    apply_value(&m.client, cpi(json!({}))).await;
    let (_, message) = wait_condition(&m.client, CLUSTER, "CCMConfigured", "True").await;
    assert!(
        message.contains("Deployment kube-system/openstack-cloud-controller-manager")
            && message.contains("Deployment kube-system/cloud-controller-manager"),
        "{message}"
    );
    let env = deployments
        .get("openstack-cloud-controller-manager")
        .await
        .unwrap()
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers[0]
        .env
        .clone()
        .unwrap_or_default();
    assert!(
        env.iter().any(|e| e.name == "KUBERNETES_SERVICE_HOST"
            && e.value.as_deref() == Some("api.wl.example.com")),
        "{env:?}"
    );
    running.stop().await;
}

/// A switch that fails is a steering condition, not an unreachable
/// workload cluster: `EndpointsSteered=False SteeringSwitchFailed` with the
/// error, the old mode still steering, the other conditions reported as
/// usual; once the API accepts the writes again the switch completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_switch_is_reported_on_endpoints_steered_and_the_rest_stays() {
    let m = management(&[]).await;
    let w = workload_cluster_in_memory().await;
    connect(&m, &w).await;
    let running = m.start();
    apply_value(&m.client, cpi(json!({}))).await;
    wait_reason(
        &m.client,
        CLUSTER,
        ("EndpointsSteered", "True", "AdvertiseAddress"),
        Duration::from_secs(60),
    )
    .await;
    // The Service refuses every write.
    w.mem().fail_next(
        10_000,
        RequestMatch::new("apply", "/namespaces/default/services/kubernetes"),
        500,
    );
    w.mem().fail_next(
        10_000,
        RequestMatch::new("patch", "/namespaces/default/services/kubernetes"),
        500,
    );
    apply_value(&m.client, cpi(json!({"steering": "service"}))).await;
    let message = wait_reason(
        &m.client,
        CLUSTER,
        ("EndpointsSteered", "False", "SteeringSwitchFailed"),
        Duration::from_secs(60),
    )
    .await;
    assert!(
        message.contains("AdvertiseAddress still steers"),
        "{message}"
    );
    let cpi_now = cpis(&m.client).get(CLUSTER).await.unwrap();
    for (type_, status) in [("WorkloadReachable", "True"), ("CCMConfigured", "True")] {
        let (s, reason, message) = condition(&cpi_now, type_).unwrap_or_default();
        assert_eq!(s, status, "{type_} {reason}: {message}");
    }
    assert!(condition(&cpi_now, "ProxyReady").is_some());
    assert_eq!(
        kubernetes_addresses(&w.client()).await.0,
        vec!["240.0.0.1:443".to_string()],
        "the old mode still steers"
    );

    w.mem().clear_faults();
    wait_reason(
        &m.client,
        CLUSTER,
        ("EndpointsSteered", "True", "ServiceSelector"),
        Duration::from_secs(60),
    )
    .await;
    running.stop().await;
}

/// A cluster service-steered by a release that ran the proxy in
/// `kube-system` (where the `kubernetes` Service selects nothing): the proxy
/// now runs in `default`, next to the Service, and the old one goes, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_steering_moves_a_proxy_left_in_kube_system_next_to_the_service() {
    let m = management(&[]).await;
    let w = workload_cluster().await;
    let wc = w.client();
    // What that release left: its record (no word of where the proxy runs)
    // and its DaemonSet in kube-system.
    let record = json!({"applied": "service", "service": {"internalTrafficPolicy": "Cluster"},
        "endpoints": {"labels": {"endpointslice.kubernetes.io/skip-mirror": "true"},
            "subsets": [{"addresses": [{"ip": "10.0.0.5"}], "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}]}});
    let own = json!({"app.kubernetes.io/managed-by": "hcp-ingress", "app.kubernetes.io/name": "hcp-ingress-proxy"});
    Api::<ConfigMap>::namespaced(wc.clone(), "kube-system")
        .patch(
            "hcp-ingress-steering",
            &PatchParams::apply("hcp-ingress").force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "hcp-ingress-steering", "namespace": "kube-system", "labels": own},
                "data": {"record.json": record.to_string()}})),
        )
        .await
        .unwrap();
    Api::<DaemonSet>::namespaced(wc.clone(), "kube-system")
        .patch(
            "hcp-ingress-proxy",
            &PatchParams::apply("hcp-ingress").force(),
            &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": "hcp-ingress-proxy", "namespace": "kube-system", "labels": own},
                "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "hcp-ingress-proxy"}},
                    "template": {"metadata": {"labels": own},
                        "spec": {"containers": [{"name": "proxy", "image": "registry.example/hcp-ingress:old"}]}}}})),
        )
        .await
        .unwrap();
    connect(&m, &w).await;
    let running = m.start();
    apply_value(&m.client, cpi(json!({"steering": "service"}))).await;
    wait_reason(
        &m.client,
        CLUSTER,
        ("EndpointsSteered", "True", "ServiceSelector"),
        Duration::from_secs(60),
    )
    .await;
    eventually("the proxy in kube-system removed", || async {
        (!exists::<DaemonSet>((wc.clone(), "kube-system", "hcp-ingress-proxy")).await).then_some(())
    })
    .await;
    assert!(exists::<DaemonSet>((wc.clone(), "default", "hcp-ingress-proxy")).await);
    running.stop().await;
}
