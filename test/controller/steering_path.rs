//! Steering on the data path, each mode and each switch between them: a pod
//! keeps calling the real workload API server through
//! `kubernetes.default.svc` while the controller steers `default/kubernetes`
//! at its proxy with advertise-address steering, hands it over to service
//! steering, back again, and finally gives it back on deletion, following
//! the advice of the `RestoreNotPossible` condition. No call may fail.
//!
//! The workload API server runs as hosted control planes run it, with
//! `--endpoint-reconciler-type=none` and no `kubernetes` Endpoints before
//! hcp-ingress; kube-controller-manager runs every controller (endpoints,
//! EndpointSlice, mirroring, DaemonSet, garbage collector), so a selector
//! of the `kubernetes` Service turns into endpoints as on a real cluster.
//! The rest of the path is the one in `data_path.rs`, which the take-over
//! test shares: one node in a network namespace with kube-proxy in iptables
//! or nftables mode (each test runs in both), the hcp-ingress proxy run from exactly the ConfigMap and Secret the
//! controller wrote, the shared ingress (HAProxy routing by SNI), and the
//! test as the kubelet.

use std::{
    sync::{Arc, Mutex},
    time::Instant,
};

use hcp_ingress::render::workload::{NAME, SERVICE_STEERING_ADMIN_PORT};
use k8s_openapi::api::{apps::v1::DaemonSet, core::v1::Endpoints, discovery::v1::EndpointSlice};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};

use crate::{
    data_path::{
        API_HOST, CLUSTER, DataPath, KubeProxy, Node, Stack, Steps, WITHIN, Workload, calls,
        host_port, lost_calls, more_calls, more_calls_through, until,
    },
    harness::*,
};

/// Where the shared ingress's host also serves the API server itself, as a
/// plain TCP pass-through: the "API server's own address" a user writes
/// into the `kubernetes` Endpoints when asked to.
const APISERVER_PORT: u16 = 6443;

/// The deletion has finished and the node runs no proxy any more.
async fn deleted_with_its_proxy(m: &Management, node: &Arc<Mutex<Node>>) {
    wait_cpi_gone(&m.client, CLUSTER).await;
    until(node, 60, "the proxy removed", async || {
        proxies_running(&node.lock().unwrap()) == 0
    })
    .await;
}

/// How many of our proxies run on the node.
fn proxies_running(node: &Node) -> usize {
    node.processes
        .iter()
        .filter(|(n, _)| n.starts_with("proxy-"))
        .count()
}

fn cpi(steering: &str) -> Value {
    json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
        "metadata": {"name": CLUSTER, "namespace": NS},
        "spec": {"clusterName": CLUSTER, "ingress": {"apiHost": API_HOST, "className": "haproxy"},
                 "backend": {"serviceName": "kmc-tenant-01", "apiPort": 30443},
                 "proxy": {"steering": steering}}})
}

/// The API server's address as a TCP pass-through on the ingress host.
fn apiserver_front(listen: &str, apiserver: &str) -> String {
    let listen = host_port(listen, APISERVER_PORT);
    format!(
        "global\n  maxconn 1000\n\
         defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 5m\n  timeout server 5m\n\
         frontend apiserver\n  bind {listen}\n  default_backend api\n\
         backend api\n  server api {apiserver}\n"
    )
}

/// Apply the ControlPlaneIngress with `steering` and wait until it reports
/// the `kubernetes` Endpoints steered for the `reason`; its message.
async fn steer(m: &Management, steering: &str, reason: &str) -> String {
    apply_value(&m.client, cpi(steering)).await;
    wait_reason(
        &m.client,
        CLUSTER,
        ("EndpointsSteered", "True", reason),
        WITHIN,
    )
    .await
}

/// Everything on the path, up and running: the data path with the pod
/// calling the API, the management cluster and the controller.
struct Bed {
    path: DataPath,
    m: Management,
    running: Running,
}

/// The bed, its cluster and node of the IP families of `stack`, the node's
/// Services implemented by `kube_proxy`; `provider_endpoints`: the control
/// plane provider wrote
/// `default/kubernetes` Endpoints with the API server's own address before
/// hcp-ingress (else there are none: the reconciler is off).
async fn bed(
    name: &'static str,
    stack: Stack,
    kube_proxy: KubeProxy,
    provider_endpoints: bool,
) -> Bed {
    // No Endpoints: the API server's reconciler is off and no provider wrote
    // any. Its certificate names the Service IP, for the end, when pods
    // reach it directly.
    let path = DataPath::start(Workload {
        name,
        serves_service_ip: true,
        stack,
        kube_proxy,
        endpoint_slices_held_back: provider_endpoints,
    })
    .await;
    let endpoints: Api<Endpoints> = Api::namespaced(path.w.client(), "default");
    assert!(endpoints.get_opt("kubernetes").await.unwrap().is_none());
    let ingress = path.ingress();
    path.node.lock().unwrap().spawn_haproxy(
        "apiserver-front",
        false,
        &apiserver_front(&ingress, &path.apiserver),
    );
    // Calls fail until the first steering (nothing to reach): only
    // failures after the first answer count.
    path.start_pod_by_ip_and_name();

    let (m, running) = path.manage().await;
    if provider_endpoints {
        // As a provider writes them: no skip-mirror label, so the mirroring
        // controller gives kube-proxy a slice.
        endpoints
            .patch(
                "kubernetes",
                &PatchParams::apply("kube-apiserver"),
                &Patch::Apply(json!({"apiVersion": "v1", "kind": "Endpoints",
                    "metadata": {"name": "kubernetes", "namespace": "default"},
                    "subsets": [{"addresses": [{"ip": ingress}],
                        "ports": [{"name": "https", "port": APISERVER_PORT, "protocol": "TCP"}]}]})),
            )
            .await
            .unwrap();
    }
    Bed { path, m, running }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_steering_mode_and_switch_and_the_give_back_keep_pods_on_the_api() {
    each_steering_mode_and_switch_and_the_give_back("steering", Stack::V4, KubeProxy::Iptables)
        .await;
}

/// The same with kube-proxy in nftables mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_steering_mode_and_switch_and_the_give_back_keep_pods_on_the_api_on_nftables() {
    each_steering_mode_and_switch_and_the_give_back("steering-nft", Stack::V4, KubeProxy::Nftables)
        .await;
}

/// The same in a cluster whose `kubernetes` Service is IPv6 and whose node
/// has only IPv6 addresses: kube-proxy programs ip6tables, the proxy binds
/// the IPv6 default advertise address and dials the ingress over IPv6.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_steering_mode_and_switch_and_the_give_back_keep_pods_on_the_api_over_ipv6() {
    each_steering_mode_and_switch_and_the_give_back("steering-v6", Stack::V6, KubeProxy::Iptables)
        .await;
}

/// The same over IPv6 with kube-proxy in nftables mode (its `ip6` table).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_steering_mode_and_switch_and_the_give_back_keep_pods_on_the_api_over_ipv6_on_nftables()
 {
    each_steering_mode_and_switch_and_the_give_back(
        "steering-v6-nft",
        Stack::V6,
        KubeProxy::Nftables,
    )
    .await;
}

/// The same in a dual-stack cluster, IPv6 first: the `kubernetes` Service
/// is single-stack IPv6 and kube-proxy runs both families.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_steering_mode_and_switch_and_the_give_back_keep_pods_on_the_api_dual_stack_ipv6_primary()
 {
    each_steering_mode_and_switch_and_the_give_back(
        "steering-dual",
        Stack::DualV6Primary,
        KubeProxy::Iptables,
    )
    .await;
}

/// The IPv6 address pods are steered at when the user has chosen none.
const DEFAULT_ADVERTISE_V6: &str = "100::1";

async fn each_steering_mode_and_switch_and_the_give_back(
    name: &'static str,
    stack: Stack,
    kube_proxy: KubeProxy,
) {
    let started = Instant::now();
    let Bed { path, m, running } = bed(name, stack, kube_proxy, false).await;
    let (node, ingress) = (&path.node, path.ingress());
    let wc = path.w.client();
    let endpoints: Api<Endpoints> = Api::namespaced(wc.clone(), "default");
    let daemon_sets = |ns: &str| Api::<DaemonSet>::namespaced(wc.clone(), ns);
    // A switch is done once the old mode's DaemonSet is gone and one proxy
    // runs on the node.
    let old_proxy_removed = async |namespace: &str, what: &str| {
        until(node, 60, what, async || {
            daemon_sets(namespace)
                .get_opt(NAME)
                .await
                .unwrap()
                .is_none()
                && proxies_running(&node.lock().unwrap()) == 1
        })
        .await;
    };

    // 1. Advertise-address steering, only once the proxy is ready.
    let mut steps = Steps::first("advertise-address steering");
    apply_value(&m.client, cpi("advertise-address")).await;
    let waiting = wait_reason(
        &m.client,
        CLUSTER,
        ("EndpointsSteered", "False", "WaitingForProxy"),
        WITHIN,
    )
    .await;
    assert!(waiting.contains("ready on every node"), "{waiting}");
    assert!(
        endpoints.get_opt("kubernetes").await.unwrap().is_none(),
        "nothing steers at a proxy that is not ready"
    );
    wait_reason(
        &m.client,
        CLUSTER,
        ("EndpointsSteered", "True", "AdvertiseAddress"),
        WITHIN,
    )
    .await;
    more_calls(node, "calls through the advertise address", 20).await;
    if stack != Stack::V4 {
        // The defaults steer in the Service's family: an IPv4 slice would
        // be ignored by kube-proxy.
        let slice = Api::<EndpointSlice>::namespaced(wc.clone(), "default")
            .get("kubernetes")
            .await
            .unwrap();
        assert_eq!(slice.address_type, "IPv6");
        assert_eq!(slice.endpoints[0].addresses, [DEFAULT_ADVERTISE_V6]);
    }

    steps.next("the switch to service steering");

    // 2. Switch to service steering: the proxy pods run in `default`, next
    // to the Service that selects them.
    let message = steer(&m, "service", "ServiceSelector").await;
    assert!(
        message.contains("switched from advertise-address"),
        "{message}"
    );
    old_proxy_removed("kube-system", "the advertise-address proxy removed").await;
    let slices: Api<EndpointSlice> = Api::namespaced(wc.clone(), "default");
    let list = slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
        .await
        .unwrap();
    let selected: Vec<String> = list
        .items
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .filter_map(|e| e.target_ref.as_ref()?.name.clone())
        .collect();
    assert!(
        selected.iter().all(|n| n.starts_with(&format!("{NAME}-"))) && selected.len() == 1,
        "the Service's endpoints are the proxy pod: {selected:?}"
    );
    // kube-proxy follows within a few seconds: the calls then go through
    // the proxy the Service selects.
    more_calls_through(
        node,
        SERVICE_STEERING_ADMIN_PORT,
        "the calls through the proxy selected by the Service",
        20.0,
    )
    .await;

    steps.next("the switch back to advertise-address");

    // 3. And back.
    let message = steer(&m, "advertise-address", "AdvertiseAddress").await;
    assert!(message.contains("switched from service"), "{message}");
    old_proxy_removed("default", "the service-steering proxy removed").await;
    more_calls(node, "calls through the advertise address again", 20).await;

    steps.next("the deletion and the give-back");

    // 4. Deletion: nothing was recorded to give back, so the proxy stays
    // and the condition says what to do; done literally, the deletion
    // finishes and pods keep the API.
    cpis(&m.client)
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    let advice = wait_reason(
        &m.client,
        CLUSTER,
        ("EndpointsSteered", "False", "RestoreNotPossible"),
        WITHIN,
    )
    .await;
    assert!(
        advice.contains("write Endpoints default/kubernetes with the API server's own address"),
        "{advice}"
    );
    more_calls(node, "calls while the deletion waits", 10).await;
    // As `kubectl edit` would: the API server's address.
    endpoints
        .patch(
            "kubernetes",
            &PatchParams {
                field_manager: Some("kubectl-edit".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"subsets": [{"addresses": [{"ip": ingress}],
                "ports": [{"name": "https", "port": APISERVER_PORT, "protocol": "TCP"}]}]})),
        )
        .await
        .unwrap();
    deleted_with_its_proxy(&m, node).await;
    let ours: Vec<String> = slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
        .await
        .unwrap()
        .items
        .iter()
        .filter(|s| {
            s.labels()
                .get("endpointslice.kubernetes.io/managed-by")
                .map(String::as_str)
                == Some("controller.hcp-ingress.dev")
        })
        .map(|s| s.name_any())
        .collect();
    assert!(
        ours.is_empty(),
        "our EndpointSlice outlived the proxy: {ours:?}"
    );
    more_calls(node, "calls to the API server's own address", 20).await;

    let (answered, failed) = calls(&node.lock().unwrap());
    eprintln!(
        "steering data path ({stack:?}, {kube_proxy:?}): {answered} calls answered, {} failed; {} (total {:.0}s)",
        failed.len(),
        steps.summary(),
        started.elapsed().as_secs_f64()
    );
    // By address and by name alike.
    let log = node.lock().unwrap().log("pod");
    for target in [stack.service_ip(), "kubernetes.default.svc"] {
        let by = log.lines().filter(|l| *l == format!("ok {target}")).count();
        assert!(
            by * 3 > answered,
            "{by} of {answered} answered calls went to {target}"
        );
    }
    assert!(
        failed.is_empty(),
        "the pod lost the API: {}",
        lost_calls(&node.lock().unwrap(), &failed, &steps)
    );
    path.stop(running).await;
}

/// Service steering from the start, on a cluster whose provider wrote the
/// API server's address into `default/kubernetes`: pods reach the API
/// before hcp-ingress, through the proxy pods once the Service selects them,
/// and directly again once the deletion gave the recorded Endpoints back and
/// removed what the proxy pods left (the EndpointSlice controller's slices).
///
/// The hand-over's window is held open on purpose: the EndpointSlice
/// controller starts only after the Service selects the proxy pods and the
/// mirroring controller has deleted its slice of the provider's Endpoints.
/// Between the two only the slice hcp-ingress wrote first carries the calls;
/// without it kube-proxy would refuse every one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_steering_from_the_start_and_its_give_back_keep_pods_on_the_api() {
    service_steering_from_the_start("service-steering", KubeProxy::Iptables).await;
}

/// The same with kube-proxy in nftables mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_steering_from_the_start_and_its_give_back_keep_pods_on_the_api_on_nftables() {
    service_steering_from_the_start("service-steering-nft", KubeProxy::Nftables).await;
}

async fn service_steering_from_the_start(name: &'static str, kube_proxy: KubeProxy) {
    let started = Instant::now();
    let Bed { path, m, running } = bed(name, Stack::V4, kube_proxy, true).await;
    let node = &path.node;
    let wc = path.w.client();
    let slices: Api<EndpointSlice> = Api::namespaced(wc.clone(), "default");
    let kubernetes_slices = async || {
        slices
            .list(&ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
            .await
            .unwrap()
            .items
    };
    let managers = |items: &[EndpointSlice]| -> Vec<String> {
        items
            .iter()
            .map(|s| {
                s.labels()
                    .get("endpointslice.kubernetes.io/managed-by")
                    .cloned()
                    .unwrap_or_default()
            })
            .collect()
    };
    more_calls(node, "calls to the API server's own address", 20).await;

    // When each step began, to place a failed call among them.
    let mut steps = Steps::first("created");
    apply_value(&m.client, cpi("service")).await;
    let services = Api::<k8s_openapi::api::core::v1::Service>::namespaced(wc.clone(), "default");
    until(
        node,
        WITHIN.as_secs(),
        "the Service selecting the proxy pods",
        async || {
            services
                .get("kubernetes")
                .await
                .unwrap()
                .spec
                .is_some_and(|s| s.selector.is_some())
        },
    )
    .await;
    steps.next("selector written");
    // The mirroring controller drops its slice of a Service with a selector.
    until(
        node,
        60,
        "the mirroring controller's slice gone",
        async || {
            !managers(&kubernetes_slices().await)
                .iter()
                .any(|m| m == "endpointslicemirroring-controller.k8s.io")
        },
    )
    .await;
    steps.next("mirrored slice gone");
    // The window: 40 calls while the proxy pods have no slice yet.
    let attempts = |node: &Node| {
        let (ok, failed) = calls(node);
        ok + failed.len()
    };
    let from = attempts(&node.lock().unwrap());
    until(node, 60, "40 calls in the hand-over's window", async || {
        attempts(&node.lock().unwrap()) >= from + 40
    })
    .await;
    let failed = calls(&node.lock().unwrap()).1;
    assert!(
        failed.is_empty(),
        "the pod lost the API in the hand-over: {}",
        lost_calls(&node.lock().unwrap(), &failed, &steps)
    );
    let window = managers(&kubernetes_slices().await);
    assert_eq!(
        window,
        ["controller.hcp-ingress.dev"],
        "in the hand-over's window only our slice of the provider's addresses serves the Service"
    );
    steps.next("slice controller started");
    let _slice_controller = path.start_endpoint_slice_controller();
    wait_reason(
        &m.client,
        CLUSTER,
        ("EndpointsSteered", "True", "ServiceSelector"),
        WITHIN,
    )
    .await;
    steps.next("steered");
    // kube-proxy follows within a few seconds: the calls then go through
    // the proxy the Service selects.
    more_calls_through(
        node,
        SERVICE_STEERING_ADMIN_PORT,
        "the calls through the proxy selected by the Service",
        20.0,
    )
    .await;
    let window = managers(&kubernetes_slices().await);
    assert!(
        window
            .iter()
            .all(|m| m == "endpointslice-controller.k8s.io"),
        "once steered, the proxy pods' slices alone serve the Service: {window:?}"
    );
    let steered_in = started.elapsed();

    steps.next("deleted");
    cpis(&m.client)
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    deleted_with_its_proxy(&m, node).await;
    steps.next("proxy gone");
    let left: Vec<String> = slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
        .await
        .unwrap()
        .items
        .iter()
        .filter(|s| {
            s.endpoints.iter().any(|e| {
                e.target_ref
                    .as_ref()
                    .is_some_and(|r| r.kind.as_deref() == Some("Pod"))
            })
        })
        .map(|s| s.name_any())
        .collect();
    assert!(
        left.is_empty(),
        "slices of the proxy pods left behind: {left:?}"
    );
    let service = Api::<k8s_openapi::api::core::v1::Service>::namespaced(wc.clone(), "default")
        .get("kubernetes")
        .await
        .unwrap();
    assert_eq!(service.spec.unwrap().selector, None);
    more_calls(node, "calls to the API server's own address again", 20).await;

    let (answered, failed) = calls(&node.lock().unwrap());
    eprintln!(
        "service steering data path ({kube_proxy:?}): {answered} calls answered, {} failed; steered after {:.0}s, total {:.0}s",
        failed.len(),
        steered_in.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        failed.is_empty(),
        "the pod lost the API: {}",
        lost_calls(&node.lock().unwrap(), &failed, &steps)
    );
    path.stop(running).await;
}
