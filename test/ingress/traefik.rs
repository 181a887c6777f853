//! Traefik reads our routes through three of its providers: the CRD
//! provider (IngressRouteTCP), the Gateway API provider (TLSRoute v1 on a
//! Gateway it serves) and its ingress-nginx provider (an Ingress with the
//! NGINX passthrough annotation: Traefik's reading of ingress-nginx's
//! annotations, not ingress-nginx itself).

use std::{net::SocketAddr, path::PathBuf};

use hcp_ingress::render::{ROUTE_PREFIX, RouteKind};
use serde_json::{Value, json};

use crate::{
    bed::{Bed, CLUSTER, NS, apply, ready},
    consumers::{HOW_TO_BUILD, Process, assert_passthrough, bin_dir, free_port},
    konnectivity::assert_agent_reaches_every_server,
};

/// The entry point every test's Traefik listens on, under the name
/// hcp-ingress uses by default for IngressRouteTCP.
const ENTRY_POINT: &str = "websecure";

/// A running Traefik: its process (stopped on drop, its log's tail for
/// failures) and the address of its one entry point.
pub(crate) struct Traefik {
    pub(crate) process: Process,
    pub(crate) addr: SocketAddr,
}

/// The Traefik binary hack/consumers/build.sh builds.
pub(crate) fn binary() -> PathBuf {
    bin_dir("traefik").join("traefik")
}

/// Traefik's own CRDs and the Gateway API CRDs its Gateway provider
/// watches, as hack/consumers/build.sh copied them from their modules.
pub(crate) fn crds() -> Vec<PathBuf> {
    let dir = bin_dir("traefik").join("crds");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    paths.sort();
    paths
}

fn can_run() -> bool {
    ready(
        &[],
        &[
            (binary(), HOW_TO_BUILD),
            (bin_dir("traefik").join("crds"), HOW_TO_BUILD),
        ],
    )
}

/// Start Traefik against the management API server with `providers` (each
/// given endpoint, token and CA), one entry point on a loopback port.
fn start(bed: &Bed, providers: Value) -> Traefik {
    start_at(
        bed,
        providers,
        SocketAddr::from(([127, 0, 0, 1], free_port())),
    )
}

/// [`start`] with the entry point at `addr`: the node tests bind it where
/// the node reaches the host, and nowhere else.
pub(crate) fn start_at(bed: &Bed, providers: Value, addr: SocketAddr) -> Traefik {
    let (endpoint, token, ca) = bed.consumer_credentials();
    let mut providers = providers;
    for provider in providers.as_object_mut().unwrap().values_mut() {
        provider["endpoint"] = json!(endpoint);
        provider["token"] = json!(token);
        provider["certAuthFilePath"] = json!(ca);
    }
    // JSON is YAML: Traefik reads the file by its extension. No version
    // check or usage report: no traffic leaves the machine.
    let config = json!({
        "global": {"checkNewVersion": false, "sendAnonymousUsage": false},
        "entryPoints": {ENTRY_POINT: {"address": addr.to_string()}},
        "providers": providers,
        "log": {"level": "DEBUG"},
    });
    let path = bed.dir.path().join("traefik.yaml");
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    let process = Process::spawn(
        &binary(),
        &[format!("--configFile={}", path.display())],
        bed.dir.path(),
        bed.dir.path().join("traefik.log"),
    );
    Traefik { process, addr }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traefik_crd_provider_passes_tls_through_by_sni_with_our_ingress_route_tcp() {
    if !can_run() {
        return;
    }
    let bed = Bed::start(&crds()).await;
    // className `traefik` is also the CRD provider's class filter: the
    // `kubernetes.io/ingress.class` annotation we write must match it.
    let traefik = start(&bed, json!({"kubernetesCRD": {"ingressClass": "traefik"}}));
    bed.create_control_plane_ingress(Some("traefik"), json!({"controller": "traefik"}))
        .await;
    bed.route_written_by_controller(
        RouteKind::IngressRouteTcp,
        &format!("{ROUTE_PREFIX}{CLUSTER}"),
    )
    .await;
    assert_passthrough(&bed, traefik.addr, &traefik.process).await;
    assert_agent_reaches_every_server(&bed, traefik.addr, &traefik.process).await;
    let (reason, _) = bed.condition("RouteReady", "True").await;
    assert_eq!(reason, "Applied");
    drop(traefik);
    bed.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traefik_gateway_provider_passes_tls_through_by_sni_with_our_tls_routes() {
    if !can_run() {
        return;
    }
    let bed = Bed::start(&crds()).await;
    let traefik = start(&bed, json!({"kubernetesGateway": {}}));
    // The platform's Gateway, in a namespace of its own, as a platform team
    // runs it: one TLS passthrough listener on Traefik's entry point port.
    apply(
        &bed.client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ingress"}}),
        "platform",
    )
    .await;
    apply(
        &bed.client,
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
               "metadata": {"name": "traefik"},
               "spec": {"controllerName": "traefik.io/gateway-controller"}}),
        "platform",
    )
    .await;
    apply(
        &bed.client,
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": "shared", "namespace": "ingress"},
               "spec": {"gatewayClassName": "traefik",
                        "listeners": [{"name": "tls-passthrough", "port": traefik.addr.port(), "protocol": "TLS",
                                       "tls": {"mode": "Passthrough"},
                                       "allowedRoutes": {"namespaces": {"from": "All"}, "kinds": [{"kind": "TLSRoute"}]}}]}}),
        "platform",
    )
    .await;
    bed.create_control_plane_ingress(
        None,
        json!({"controller": "gateway",
               "gateway": {"parentRefs": [{"name": "shared", "namespace": "ingress", "sectionName": "tls-passthrough"}]}}),
    )
    .await;
    let names = ["api", "konnectivity"].map(|p| format!("{ROUTE_PREFIX}{CLUSTER}-{p}"));
    for name in &names {
        bed.route_written_by_controller(RouteKind::TlsRoute, name)
            .await;
    }
    assert_passthrough(&bed, traefik.addr, &traefik.process).await;
    assert_agent_reaches_every_server(&bed, traefik.addr, &traefik.process).await;

    // Traefik reports on each TLSRoute that it accepted it on our parent
    // and resolved its backend: what RouteReady stands for.
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(bed.client.clone(), NS, &RouteKind::TlsRoute.api_resource());
    for name in &names {
        let route = api.get(name).await.unwrap();
        let parent = route.data["status"]["parents"]
            .as_array()
            .and_then(|p| {
                p.iter()
                    .find(|p| p["controllerName"] == "traefik.io/gateway-controller")
            })
            .unwrap_or_else(|| {
                panic!(
                    "no status from Traefik on TLSRoute {name}: {:#}",
                    route.data
                )
            });
        assert_eq!(parent["parentRef"]["name"], "shared");
        for type_ in ["Accepted", "ResolvedRefs"] {
            let condition = parent["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == type_));
            assert_eq!(
                condition.map(|c| &c["status"]),
                Some(&json!("True")),
                "TLSRoute {name} {type_}: {parent:#}"
            );
        }
    }
    let (reason, message) = bed.condition("RouteReady", "True").await;
    assert_eq!(reason, "Accepted", "{message}");

    // A listener the Gateway does not have: Traefik refuses the routes, and
    // RouteReady says so with Traefik's own reason.
    bed.create_control_plane_ingress(
        None,
        json!({"controller": "gateway",
               "gateway": {"parentRefs": [{"name": "shared", "namespace": "ingress", "sectionName": "no-such-listener"}]}}),
    )
    .await;
    let (reason, message) = bed.condition("RouteReady", "False").await;
    assert_eq!(reason, "RouteNotAccepted", "{message}");
    assert!(
        message.contains("traefik.io/gateway-controller") && message.contains("no-such-listener"),
        "{message}"
    );
    drop(traefik);
    bed.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traefik_ingress_nginx_provider_passes_tls_through_by_sni_with_our_nginx_ingress() {
    if !can_run() {
        return;
    }
    let bed = Bed::start(&crds()).await;
    // The IngressClass an ingress-nginx installation creates; Traefik's
    // provider serves the classes of ingress-nginx's controller name.
    apply(
        &bed.client,
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
               "metadata": {"name": "nginx"}, "spec": {"controller": "k8s.io/ingress-nginx"}}),
        "platform",
    )
    .await;
    let traefik = start(
        &bed,
        json!({"kubernetesIngressNGINX": {"httpsEntryPoint": ENTRY_POINT}}),
    );
    bed.create_control_plane_ingress(Some("nginx"), json!({"controller": "nginx"}))
        .await;
    bed.route_written_by_controller(RouteKind::Ingress, &format!("{ROUTE_PREFIX}{CLUSTER}"))
        .await;
    assert_passthrough(&bed, traefik.addr, &traefik.process).await;
    assert_agent_reaches_every_server(&bed, traefik.addr, &traefik.process).await;
    let (reason, _) = bed.condition("RouteReady", "True").await;
    assert_eq!(reason, "Applied");
    drop(traefik);
    bed.finish().await;
}
