//! Steering in the workload cluster's own IP family, against real API
//! servers: kube-proxy programs a Service only from EndpointSlices of the
//! Service's family, so the advertise address follows the family of the
//! live `kubernetes` ClusterIP, and a chosen address of the other family is
//! refused before anything is written. The data path over IPv6 is in
//! `steering_path.rs`.

use k8s_openapi::api::{
    core::v1::{Endpoints, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};

use crate::{
    harness::*,
    workload::{CLUSTER, connect, event_note, kubernetes_addresses},
};

/// A hosted control plane's workload API server (no endpoint reconciler)
/// with the service CIDRs `service_cidr`, and the `kubernetes` Endpoints and
/// EndpointSlice its provider wrote, in the family of `provider_address`.
async fn workload_of(name: &str, service_cidr: &str, provider_address: &str) -> Server {
    let server = Server::start_real(realkube::Options {
        name: name.into(),
        endpoint_reconciler: "none".into(),
        service_cidr: service_cidr.into(),
        ..realkube::Options::default()
    })
    .await;
    let client = server.client();
    let family = if provider_address.contains(':') {
        "IPv6"
    } else {
        "IPv4"
    };
    let as_provider = PatchParams::apply("kube-apiserver");
    Api::<Endpoints>::namespaced(client.clone(), "default")
        .patch(
            "kubernetes",
            &as_provider,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": "kubernetes", "namespace": "default",
                    "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
                "subsets": [{"addresses": [{"ip": provider_address}],
                    "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}]})),
        )
        .await
        .unwrap();
    Api::<EndpointSlice>::namespaced(client, "default")
        .patch(
            "kubernetes",
            &as_provider,
            &Patch::Apply(
                json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "kubernetes", "namespace": "default",
                    "labels": {"kubernetes.io/service-name": "kubernetes"}},
                "addressType": family,
                "endpoints": [{"addresses": [provider_address], "conditions": {"ready": true}}],
                "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}),
            ),
        )
        .await
        .unwrap();
    server.check_rejections_of(realkube::CLUSTER_ADMIN_USER);
    server
}

/// The ControlPlaneIngress of [`CLUSTER`], `proxy` as given (defaults: `{}`).
fn cpi(proxy: Value) -> Value {
    json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
        "metadata": {"name": CLUSTER, "namespace": NS},
        "spec": {"clusterName": CLUSTER, "ingress": {"apiHost": "api.wl.example.com", "className": "haproxy"},
                 "backend": {"serviceName": "kmc-wl", "apiPort": 30443}, "proxy": proxy}})
}

/// The `kubernetes` Service's ClusterIP, the EndpointSlice's addressType,
/// and the Endpoints' and EndpointSlice's addresses as "ip:port".
async fn kubernetes(wc: &Client) -> (String, String, (Vec<String>, Vec<String>)) {
    let service = Api::<Service>::namespaced(wc.clone(), "default")
        .get("kubernetes")
        .await
        .unwrap();
    let slice = Api::<EndpointSlice>::namespaced(wc.clone(), "default")
        .get("kubernetes")
        .await
        .unwrap();
    (
        service.spec.unwrap().cluster_ip.unwrap(),
        slice.address_type,
        kubernetes_addresses(wc).await,
    )
}

/// Dual-stack, IPv4 first: the `kubernetes` Service is single-stack IPv4,
/// and so is what steers it, as before dual-stack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dual_stack_ipv4_primary_cluster_is_steered_in_ipv4() {
    let m = management(&[]).await;
    let w = workload_of("dual-v4", "10.96.0.0/12,fd00:10:96::/112", "10.0.0.5").await;
    connect(&m, &w).await;
    let running = m.start();
    apply_value(&m.client, cpi(json!({}))).await;
    wait_condition(&m.client, CLUSTER, "EndpointsSteered", "True").await;
    let steered = vec!["240.0.0.1:443".to_string()];
    assert_eq!(
        kubernetes(&w.client()).await,
        (
            "10.96.0.1".into(),
            "IPv4".into(),
            (steered.clone(), steered)
        )
    );
    running.stop().await;
}

/// IPv6-only: the defaults steer at the IPv6 default; a chosen IPv4 address
/// afterwards is refused with a condition and an Event that name the field
/// and both families, and the steering in place is left as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipv6_cluster_is_steered_in_ipv6_and_an_ipv4_address_is_refused() {
    let m = management(&[]).await;
    let w = workload_of("v6", "fd00:10:96::/112", "2001:db8::10").await;
    connect(&m, &w).await;
    let running = m.start();
    apply_value(&m.client, cpi(json!({}))).await;
    let steered = wait_reason(
        &m.client,
        CLUSTER,
        ("EndpointsSteered", "True", "AdvertiseAddress"),
        std::time::Duration::from_secs(60),
    )
    .await;
    let ours = vec!["100::1:443".to_string()];
    let expected = (
        "fd00:10:96::1".to_string(),
        "IPv6".to_string(),
        (ours.clone(), ours),
    );
    assert_eq!(kubernetes(&w.client()).await, expected, "{steered}");

    apply_value(&m.client, cpi(json!({"advertiseAddress": "240.0.0.1"}))).await;
    let (reason, message) = wait_condition(&m.client, CLUSTER, "EndpointsSteered", "False").await;
    assert_eq!(reason, "AddressFamilyMismatch");
    for part in [
        "spec.proxy.advertiseAddress",
        "240.0.0.1 is IPv4",
        "kubernetes Service is IPv6 (fd00:10:96::1)",
        "default 100::1",
    ] {
        assert!(message.contains(part), "{part:?} missing: {message}");
    }
    let (reason, _) = wait_condition(&m.client, CLUSTER, "ProxyReady", "False").await;
    assert_eq!(reason, "InvalidSpec");
    let note = event_note(&m, "AddressFamilyMismatch").await;
    assert!(
        note.contains("spec.proxy.advertiseAddress") && note.contains("IPv6"),
        "{note}"
    );
    // Refused before any write: what steered before still does.
    assert_eq!(kubernetes(&w.client()).await, expected);
    running.stop().await;
}
