//! The node tests: both steering modes with both TLS-terminating proxy
//! modes, and a node that is not Ready yet.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use realnode::ProxyMode;
use serde_json::json;

use super::{
    IMAGE, NAMESPACE, NodeBed, SERVICE_STEERING_NAMESPACE,
    checks::{Held, check_container, check_open_files, memory_of},
    container_id, node_ready,
};
use crate::{
    bed::{CLUSTER, NS, apply},
    whole_path::plant_aged_certificate,
};

/// The Node Ready (its kubelet no newer than its API server), the proxy's
/// pod Ready in `namespace`, reported so (`ProxyReady`, `EndpointsSteered`),
/// and its process as the DaemonSet asks ([`check_container`]): the pod and
/// the process id.
async fn proxy_running(nb: &NodeBed, namespace: &str) -> (Pod, u32) {
    nb.eventually("the Node Ready", || async {
        nb.node_ready().await.filter(|r| *r)
    })
    .await;
    nb.check_node().await;
    let pod = nb.proxy_pod(namespace, IMAGE).await;
    nb.bed.condition("ProxyReady", "True").await;
    nb.bed.condition("EndpointsSteered", "True").await;
    let pid = check_container(nb, &pod, namespace).await;
    (pod, pid)
}

/// Address steering with the re-encrypting proxy, the default: the proxy
/// pod runs as the DaemonSet says, a pod and a hostNetwork pod reach the
/// tenant's API through `kubernetes.default.svc`; then, while both keep
/// calling, a certificate renewal and a new upstream reach the proxy
/// through the kubelet's atomic Secret and ConfigMap updates without a
/// restart, and a new revision (a new image tag) rolls out with maxSurge;
/// no call fails and the proxy stays within its memory limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn address_steering_on_a_real_kubelet_renews_and_rolls_without_a_failed_call() {
    if !node_ready() {
        return;
    }
    let nb = NodeBed::start(
        ProxyMode::Iptables,
        true,
        &[],
        json!({"steering": "advertise-address", "mode": "reencrypt"}),
    )
    .await;
    let (pod, pid) = proxy_running(&nb, NAMESPACE).await;
    check_open_files(&nb, pid, &pod, NAMESPACE);

    nb.start_client("on-the-pod-network", false).await;
    nb.start_client("on-the-node-network", true).await;
    let first = nb.answered("on-the-pod-network", 5).await;
    nb.answered("on-the-node-network", 5).await;
    // Connections that stay open across both reloads below.
    let mut held = tokio::task::block_in_place(|| Held::open(&nb, 20));

    // A renewal: the Secret now holds a certificate six days into a
    // seven-day life; the kubelet swaps the volume, the proxy serves it on
    // new connections (and the controller, seeing it old, mints the next).
    plant_aged_certificate(&nb.bed, &nb.workload, NAMESPACE).await;
    let old: BTreeSet<String> = first.leaves.iter().cloned().collect();
    nb.eventually("a renewed certificate seen by the pod", || async {
        let calls = nb.calls("on-the-pod-network");
        calls.leaves.iter().any(|l| !old.contains(l)).then_some(())
    })
    .await;
    let renewed = nb.proxy_pod(NAMESPACE, IMAGE).await;
    assert_eq!(
        nb.node.container_pid(&container_id(&renewed)),
        Some(pid),
        "the proxy reloaded the certificate without a restart"
    );

    // A config change: the proxy's upstream moves to the ingress's second
    // address. Only the ConfigMap changes (no new revision): the kubelet
    // swaps the volume and the proxy dials the new address from then on.
    let pod_uid = pod.metadata.uid.clone();
    let second = nb.second.expect("haproxy-ingress's second address");
    apply(
        &nb.bed.client,
        json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
               "metadata": {"name": CLUSTER, "namespace": NS},
               "spec": {"proxy": {"upstreams": [second.to_string()]}}}),
        "test-user-upstreams",
    )
    .await;
    let to_second = format!("src {second}:{}", nb.https);
    nb.eventually(
        "the proxy's connections to the ingress's second address",
        || async {
            let out = std::process::Command::new("ss")
                .args(["-Htn", "state", "established"])
                .args(to_second.split(' '))
                .output()
                .ok()?;
            (!out.stdout.is_empty()).then_some(())
        },
    )
    .await;
    let reloaded = nb.proxy_pod(NAMESPACE, IMAGE).await;
    assert_eq!(
        reloaded.metadata.uid, pod_uid,
        "a config change rolls no pod"
    );
    assert_eq!(
        nb.node.container_pid(&container_id(&reloaded)),
        Some(pid),
        "the proxy reloaded its config without a restart"
    );
    let (answered, failed, said) = tokio::task::block_in_place(|| held.request());
    assert_eq!(
        (answered, failed),
        (20, 0),
        "connections opened before the renewal and the config change still carry requests: {said}"
    );
    drop(held);

    // A new revision: the same image under a new tag, rolled out by the
    // DaemonSet controller with maxSurge while the pods keep calling.
    let next = IMAGE.replace(":dev", ":dev-next");
    nb.node
        .ctr(&["images", "tag", IMAGE, &next])
        .unwrap_or_else(|e| nb.fail(&e.to_string()));
    let before = nb.calls("on-the-pod-network").total();
    apply(
        &nb.bed.client,
        json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
               "metadata": {"name": CLUSTER, "namespace": NS},
               "spec": {"proxy": {"image": next}}}),
        "test-user-image",
    )
    .await;
    let rolled = nb.proxy_pod(NAMESPACE, &next).await;
    assert_ne!(
        rolled.metadata.uid, pod.metadata.uid,
        "a new pod runs the new revision"
    );
    nb.eventually("20 more calls after the roll", || async {
        (nb.calls("on-the-pod-network").total() > before + 20).then_some(())
    })
    .await;

    for client in ["on-the-pod-network", "on-the-node-network"] {
        let calls = nb.calls(client);
        assert!(
            calls.failures.is_empty(),
            "{client}: {} of {} calls failed across the renewal and the roll:\n{}",
            calls.failures.len(),
            calls.total() + calls.failures.len(),
            calls.failures.join("\n")
        );
        eprintln!(
            "{client}: {} calls answered, none failed, certificates seen: {:?}",
            calls.total(),
            calls.leaves
        );
    }
    let new_pid = nb.node.container_pid(&container_id(&rolled)).unwrap();
    let (peak, limit) = memory_of(&nb, new_pid, NAMESPACE).await;
    eprintln!(
        "proxy memory: peak {} KiB of a {} KiB limit",
        peak / 1024,
        limit / 1024
    );
    assert!(peak < limit, "the proxy stayed within its memory limit");
    nb.finish().await;
}

/// Service steering with the pooled proxy: the `kubernetes` Service selects
/// the proxy pods, which run as non-root with no capability at all, and
/// pods reach the tenant's API through them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_steering_on_a_real_kubelet_runs_unprivileged_and_carries_pods() {
    if !node_ready() {
        return;
    }
    let nb = NodeBed::start(
        ProxyMode::Iptables,
        true,
        &[],
        json!({"steering": "service", "mode": "pooled"}),
    )
    .await;
    let (pod, pid) = proxy_running(&nb, SERVICE_STEERING_NAMESPACE).await;
    let (hard, needed) = check_open_files(&nb, pid, &pod, SERVICE_STEERING_NAMESPACE);
    nb.start_client("on-the-pod-network", false).await;
    nb.start_client("on-the-node-network", true).await;
    for client in ["on-the-pod-network", "on-the-node-network"] {
        let calls = nb.answered(client, 5).await;
        assert!(calls.failures.is_empty(), "{client}: {:?}", calls.failures);
    }

    // As many connections as the container's descriptors allow (the load
    // tests hold 10,000), each with its answer: the proxy stays within its
    // memory limit.
    let n = usize::try_from((hard.min(needed) - 64) / 2)
        .unwrap()
        .min(10_000)
        - 100;
    let started = std::time::Instant::now();
    let held = tokio::task::block_in_place(|| Held::open(&nb, n));
    let (peak, limit) = memory_of(&nb, pid, SERVICE_STEERING_NAMESPACE).await;
    eprintln!(
        "{n} connections held through the pooled proxy in {:?}: its memory peaked at {} KiB of a {} KiB limit ({} bytes per connection)",
        started.elapsed(),
        peak / 1024,
        limit / 1024,
        peak / n as u64
    );
    assert!(peak < limit, "the proxy stayed within its memory limit");
    drop(held);
    nb.finish().await;
}

/// Bootstrap: the node has no network plugin yet (NotReady) and the cloud
/// provider's uninitialized taint. The proxy runs anyway, and a
/// hostNetwork pod (what a CNI or a cloud-controller-manager is) reaches the
/// API through it: that is what breaks the bootstrap deadlock. Once the
/// CNI config lands, the node turns Ready and a pod on the bridge gets
/// through too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_is_not_ready_yet_runs_the_proxy_and_its_host_network_pods_reach_the_api() {
    if !node_ready() {
        return;
    }
    let nb = NodeBed::start(
        ProxyMode::Iptables,
        false,
        &["node.cloudprovider.kubernetes.io/uninitialized=true:NoSchedule"],
        json!({"steering": "advertise-address", "mode": "reencrypt"}),
    )
    .await;
    nb.eventually("the Node registered, NotReady", || async {
        nb.node_ready().await.filter(|r| !r)
    })
    .await;
    nb.check_node().await;
    // What a node looks like before its network and its cloud provider
    // are up: both taints, which the proxy tolerates.
    nb.eventually("the not-ready and uninitialized taints", || async {
        let taints = nb.node_taints().await;
        [
            "node.kubernetes.io/not-ready",
            "node.cloudprovider.kubernetes.io/uninitialized",
        ]
        .iter()
        .all(|t| taints.iter().any(|k| k == t))
        .then_some(())
    })
    .await;
    nb.proxy_pod(NAMESPACE, IMAGE).await;
    nb.bed.condition("EndpointsSteered", "True").await;
    nb.start_client("on-the-node-network", true).await;
    nb.answered("on-the-node-network", 5).await;
    assert_eq!(
        nb.node_ready().await,
        Some(false),
        "still NotReady: no CNI config yet"
    );

    nb.node.install_cni().unwrap();
    nb.eventually("the Node Ready once its CNI config is in", || async {
        nb.node_ready().await.filter(|r| *r)
    })
    .await;
    nb.start_client("on-the-pod-network", false).await;
    nb.answered("on-the-pod-network", 5).await;
    let calls = nb.calls("on-the-node-network");
    assert!(calls.failures.is_empty(), "{:?}", calls.failures);
    nb.finish().await;
}

/// kube-proxy in nftables mode on a real node: a pod and a hostNetwork pod
/// reach the tenant's API through address steering, then through service
/// steering after a switch, without a failed call; the node's rules for
/// `default/kubernetes` are kube-proxy's nftables table, not iptables'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_steering_modes_on_a_real_kubelet_with_kube_proxy_in_nftables_mode() {
    if !node_ready() {
        return;
    }
    let nb = NodeBed::start(
        ProxyMode::Nftables,
        true,
        &[],
        json!({"steering": "advertise-address", "mode": "reencrypt"}),
    )
    .await;
    proxy_running(&nb, NAMESPACE).await;
    let clients = ["on-the-pod-network", "on-the-node-network"];
    nb.start_client(clients[0], false).await;
    nb.start_client(clients[1], true).await;
    for client in clients {
        nb.answered(client, 5).await;
    }
    let rules = |args: &[&str]| {
        let out = nb.node.exec(args).expect("a command on the node");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let nft = rules(&["nft", "list", "table", "ip", "kube-proxy"]);
    assert!(
        nft.contains("default/kubernetes"),
        "kube-proxy's nftables table serves the Service: {nft}"
    );
    let iptables = rules(&["iptables-save"]);
    assert!(
        !iptables.contains("default/kubernetes"),
        "no iptables rule of kube-proxy's: {iptables}"
    );

    // The switch: the proxy pods in `default` take the Service over.
    apply(
        &nb.bed.client,
        json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
               "metadata": {"name": CLUSTER, "namespace": NS},
               "spec": {"proxy": {"steering": "service"}}}),
        "test-user-steering",
    )
    .await;
    proxy_running(&nb, SERVICE_STEERING_NAMESPACE).await;
    nb.eventually("the switch to service steering done", || async {
        let (reason, _) = nb.bed.condition("EndpointsSteered", "True").await;
        (reason == "ServiceSelector").then_some(())
    })
    .await;
    for client in clients {
        let before = nb.calls(client).answered_by.values().sum::<usize>();
        nb.eventually(&format!("5 more calls of pod {client}"), || async {
            (nb.calls(client).answered_by.values().sum::<usize>() >= before + 5).then_some(())
        })
        .await;
        let calls = nb.calls(client);
        assert!(
            calls.failures.is_empty(),
            "{client} lost the API on nftables: {:?}",
            calls.failures
        );
    }
    nb.finish().await;
}
