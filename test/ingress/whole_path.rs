//! The whole path once, as a pod of a workload cluster takes it:
//!
//! ```text
//!  pod netns            node netns                         host (management side)
//!  curl https://10.96.0.1 ─DNAT→ 240.0.0.1:443 on lo
//!                        hcp-ingress-proxy ──veth──→ haproxy-ingress ──SNI──→ tenant's
//!                        (config and certificate      (our Ingress)          kube-apiserver
//!                         the controller wrote)
//! ```
//!
//! The workload cluster is the tenant's own kube-apiserver: the management
//! cluster holds its `<cluster>-kubeconfig` and `<cluster>-ca`, so the
//! controller installs the node proxy's ConfigMap, Secret and DaemonSet
//! there, as it would in any CAPI workload cluster. The test then plays the
//! kubelet and kube-proxy of one node: it runs the proxy binary with the
//! DaemonSet's own command, arguments and environment, its volumes written
//! as the kubelet writes ConfigMap and Secret volumes (a timestamped folder
//! behind a `..data` symlink swapped atomically) and mounted at the
//! DaemonSet's mount paths (a private mount namespace: nothing of the host's
//! `/etc` changes), and a DNAT from the `kubernetes` Service's address to the
//! proxy, in a "node" network namespace. From a "pod" namespace, curl calls
//! `https://10.96.0.1` without SNI, as in-cluster clients do, trusting only
//! the cluster CA, with a ServiceAccount token; and with the API host as SNI
//! and a client certificate of the cluster CA, which the proxy passes
//! through untouched. Both are answered by the tenant's API server through
//! the real ingress controller reading the Ingress the controller wrote.
//!
//! Then, while both kinds of call keep running, the certificate ages and the
//! config changes: the controller re-mints the certificate and rewrites the
//! config, the "kubelet" swaps the files, and every call must still be
//! answered, the pods seeing the new certificate.

use std::{
    collections::BTreeMap,
    net::Ipv4Addr,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use hcp_ingress::{
    api::ControlPlaneIngress,
    pki::{self, CertificateAuthority, LeafSpec},
    render::{ROUTE_PREFIX, RouteKind},
};
use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{ConfigMap, Secret, Service, ServiceAccount},
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

use crate::{
    bed::{
        ADMIN_USER, API_HOST, API_PORT, Bed, CLUSTER, KONNECTIVITY_HOST, KONNECTIVITY_PORT, NS,
        add_veth, apply, eventually, free_slot, ready, run_ok,
    },
    consumers::{Process, free_port, haproxy_ingress_files, start_haproxy_ingress},
    tls::der,
};

/// The namespace and name of everything the controller installs for the proxy.
const PROXY_NS: &str = "kube-system";
const PROXY_NAME: &str = "hcp-ingress-proxy";
/// The ServiceAccount whose token the pod presents.
const READER: &str = "whole-path-reader";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_reaches_its_api_server_through_the_node_proxy_and_the_ingress_while_both_rotate() {
    if !ready(
        &["haproxy", "iptables", "curl", "unshare", "mount"],
        &haproxy_ingress_files(),
    ) {
        return;
    }
    let bed = Bed::start(&[]).await;
    let net = NodeNet::new();
    // haproxy-ingress's TLS frontend on the two addresses the nodes reach
    // the shared ingress at (port `https`), its HTTP one on loopback.
    let https = free_port();
    let [a, b] = net.ingress;
    let ingress = start_haproxy_ingress(
        &bed,
        json!({"bind-https": format!("{a}:{https},{b}:{https}"),
               "bind-http": format!("127.0.0.1:{}", free_port())}),
    )
    .await;

    // The management side of a CAPI workload cluster: an initialized
    // Cluster, its admin kubeconfig and its CA (the tenant's own).
    connect_workload(&bed).await;
    let upstream = |addr: Ipv4Addr| json!({"upstreams": [addr.to_string()]});
    apply_cpi(&bed, https, upstream(net.ingress[0])).await;
    bed.route_written_by_controller(RouteKind::Ingress, &format!("{ROUTE_PREFIX}{CLUSTER}"))
        .await;

    // The node: the DaemonSet's container, its volumes as the kubelet
    // writes them, and kube-proxy's DNAT.
    let workload = bed.tenant.admin_client();
    let node = bed.dir.path().join("node");
    let mut kubelet = Kubelet::new(&workload, &node).await;
    kubelet.sync().await;
    let proxy = kubelet.start_proxy(&net);
    let config = kubelet.config();
    let listen = format!(
        "{}:{}",
        config["listen"]["address"].as_str().unwrap(),
        config["listen"]["port"].as_u64().unwrap()
    );
    // kube-proxy sends the `kubernetes` Service's address to the endpoint
    // the controller steers it to: the advertise address the proxy listens
    // on. Taken from the proxy's config, not from `default/kubernetes`: this
    // tenant's API server runs its own endpoint reconciler (the bed's), which
    // writes its own address back over the steering.
    let service = Api::<Service>::namespaced(workload.clone(), "default")
        .get("kubernetes")
        .await
        .unwrap();
    let cluster_ip = service.spec.and_then(|s| s.cluster_ip).unwrap_or_default();
    assert_eq!(cluster_ip, "10.96.0.1", "the pods' KUBERNETES_SERVICE_HOST");
    net.kube_proxy_dnat(&format!("{cluster_ip}:443"), &listen);
    kubelet.wait_ready(&net, &proxy).await;
    // The DaemonSet controller's part: one node, its proxy ready; the
    // controller reports it.
    Api::<DaemonSet>::namespaced(workload.clone(), PROXY_NS)
        .patch_status(
            PROXY_NAME,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"desiredNumberScheduled": 1, "currentNumberScheduled": 1,
                                            "numberReady": 1, "numberMisscheduled": 0}}),
            ),
        )
        .await
        .unwrap();
    bed.condition("ProxyReady", "True").await;

    // The pod's credentials: the cluster CA (its ServiceAccount volume's
    // ca.crt), a ServiceAccount token, and a client certificate.
    let pod = Pod::new(&bed, &net).await;

    // Both calls answered before anything rotates; the pod sees the
    // proxy's leaf minted from the cluster CA, and through the passthrough
    // the tenant API server's own.
    let first = kubelet.secret_cert();
    let seen = pod.token_call().await.unwrap_or_else(|e| {
        panic!(
            "{e}\nproxy log:\n{}\nhaproxy-ingress log:\n{}",
            proxy.tail(),
            ingress.tail()
        )
    });
    assert_eq!(
        seen, first,
        "without SNI the pod must see the proxy's certificate the controller minted"
    );
    let seen = pod.client_cert_call().await.unwrap();
    assert_eq!(
        seen, bed.tenant_leaf,
        "with the API host as SNI the pod must reach the tenant API server's own TLS"
    );

    // A watch opened now lives through both rotations on its connection
    // (established connections keep their config and certificate).
    let watch = pod.watch_config_maps(&bed).await;
    // Calls keep coming from here on, each on a new connection (and so a
    // new handshake with whatever certificate is in force).
    let calls = Calls::start(pod);
    calls.wait_for(10).await;

    // The certificate ages: the Secret holds one minted six days ago with a
    // seven-day life (what the controller wrote a week earlier), past two
    // thirds of its life but still valid. The kubelet swaps the volume and
    // new connections get it (unless the controller, reconciling on its
    // own, replaced it first).
    let aged = plant_aged_certificate(&bed, &workload, PROXY_NS).await;
    let aged_der = der(&aged.cert_pem);
    calls.wait_for_new_leaf(&first, &proxy).await;
    calls.wait_for(calls.total() + 10).await;

    // The config changes: the nodes are to reach the shared ingress at its
    // other address. Reconciling it, the controller rewrites config.yaml and
    // finds the certificate due: it mints a new one (it does not watch the
    // Secret; in a real cluster the renewal time it requeues at is the
    // trigger). The kubelet swaps both volumes, the proxy reloads: new
    // connections get the new leaf and go to the new address.
    apply_cpi(&bed, https, upstream(net.ingress[1])).await;
    eventually("the controller to rewrite the proxy config", || async {
        kubelet
            .live_config()
            .await
            .filter(|c| c.contains(&net.ingress[1].to_string()))
    })
    .await;
    let renewed = eventually(
        "the controller to re-mint the proxy certificate",
        || async {
            let cert = kubelet.live_cert().await?;
            (cert != aged_der && cert != first).then_some(cert)
        },
    )
    .await;
    calls.wait_for_leaf(&renewed, &kubelet, &proxy).await;
    let (old_upstream, new_upstream) = (
        format!("{}:{https}", net.ingress[0]),
        format!("{}:{https}", net.ingress[1]),
    );
    // Its health series names the new address and no longer the old one:
    // what a dashboard of the node's upstreams shows.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = net
            .node_get("http://127.0.0.1:9445/metrics")
            .unwrap_or_default();
        let health: Vec<&str> = metrics
            .lines()
            .filter(|l| l.starts_with("hcp_proxy_upstream_healthy{"))
            .collect();
        if health
            == [format!(
                "hcp_proxy_upstream_healthy{{address=\"{new_upstream}\"}} 1"
            )]
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "30 s after the config moved the upstream from {old_upstream} to {new_upstream}, the proxy reports {health:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // A little more traffic on the new config and certificate.
    calls.wait_for(calls.total() + 20).await;
    let report = calls.stop().await;
    // The watch opened before both rotations still streams.
    watch.sees_a_new_config_map(&workload).await;

    let name = |leaf: &Vec<u8>| {
        if *leaf == first {
            "minted at install"
        } else if *leaf == aged_der {
            "aged (six days old)"
        } else if *leaf == renewed {
            "re-minted"
        } else {
            "unknown"
        }
    };
    let leaves: Vec<&str> = report.leaves.iter().map(name).collect();
    eprintln!(
        "whole path: {} calls while rotating ({} with a ServiceAccount token without SNI, {} with a client certificate by SNI), {} failed; leaves seen without SNI, in order: {leaves:?}",
        report.ok + report.failed.len(),
        report.token_calls,
        report.client_calls,
        report.failed.len(),
    );
    assert!(
        !leaves.contains(&"unknown"),
        "the pod saw a certificate that was never in the Secret: {leaves:?}"
    );
    assert!(
        report.failed.is_empty(),
        "{} of {} calls failed while the proxy's config and certificate rotated; first failures: {:#?}\nproxy log:\n{}",
        report.failed.len(),
        report.ok + report.failed.len(),
        &report.failed[..report.failed.len().min(5)],
        proxy.tail()
    );
    assert!(
        report.token_calls >= 20 && report.client_calls >= 20,
        "too few calls to say anything: {} with a token, {} with a client certificate",
        report.token_calls,
        report.client_calls
    );
    let reloads = net
        .node_get("http://127.0.0.1:9445/metrics")
        .unwrap_or_default();
    assert!(
        reloads.contains("hcp_proxy_reloads_total{result=\"failure\"} 0"),
        "the proxy rejected a file the controller wrote:\n{reloads}"
    );
    assert!(proxy.running(), "the proxy exited:\n{}", proxy.tail());
    // The node goes before the clusters its kubelet reads.
    drop(kubelet);
    drop(proxy);
    drop(ingress);
    drop(net);
    bed.finish().await;
}

/// The CAPI objects of the tenant's cluster in the management cluster: its
/// Cluster (control plane initialized), `<cluster>-kubeconfig` (the
/// tenant's admin kubeconfig) and `<cluster>-ca` (the tenant's CA, which its
/// API server trusts for client certificates and pods trust for the API).
pub async fn connect_workload(bed: &Bed) {
    apply(
        &bed.client,
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
               "metadata": {"name": CLUSTER, "namespace": NS}, "spec": {"paused": false}}),
        "capi",
    )
    .await;
    let clusters = Api::<kube::api::DynamicObject>::namespaced_with(
        bed.client.clone(),
        NS,
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster"),
            "clusters",
        ),
    );
    clusters
        .patch_status(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"initialization": {"controlPlaneInitialized": true}}})),
        )
        .await
        .unwrap();
    for (name, data) in [
        (
            format!("{CLUSTER}-kubeconfig"),
            json!({"value": bed.tenant.kubeconfig_yaml()}),
        ),
        (
            format!("{CLUSTER}-ca"),
            json!({"tls.crt": bed.tenant.ca_pem(), "tls.key": bed.tenant.ca_key_pem()}),
        ),
    ] {
        apply(
            &bed.client,
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": name, "namespace": NS}, "stringData": data}),
            "capi",
        )
        .await;
    }
}

/// The tenant's ControlPlaneIngress: haproxy-ingress's route at the
/// ingress's `port`, and the node proxy as `proxy` says (its `upstreams`:
/// the shared ingress's addresses, as seen from the nodes).
pub async fn apply_cpi(bed: &Bed, port: u16, proxy: Value) {
    apply_cpi_routed(
        bed,
        port,
        proxy,
        "haproxy-ingress",
        json!({"controller": "haproxy-ingress"}),
    )
    .await;
}

/// [`apply_cpi`] for another shared ingress: its class `class_name` and the
/// `route` that writes what it reads.
pub async fn apply_cpi_routed(bed: &Bed, port: u16, proxy: Value, class_name: &str, route: Value) {
    apply(
        &bed.client,
        json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
               "metadata": {"name": CLUSTER, "namespace": NS},
               "spec": {"clusterName": CLUSTER,
                        "ingress": {"apiHost": API_HOST, "konnectivityHost": KONNECTIVITY_HOST,
                                    "port": port, "className": class_name},
                        "backend": {"serviceName": CLUSTER, "apiPort": API_PORT, "konnectivityPort": KONNECTIVITY_PORT},
                        "proxy": proxy,
                        "route": route}}),
        "test-user",
    )
    .await;
    // The controller has seen this generation.
    let api: Api<ControlPlaneIngress> = Api::namespaced(bed.client.clone(), NS);
    eventually(
        "the controller to observe the ControlPlaneIngress",
        || async {
            let cpi = api.get(CLUSTER).await.ok()?;
            (cpi.status?.observed_generation == cpi.metadata.generation).then_some(())
        },
    )
    .await;
}

/// Writes [`aged_certificate`] into the proxy's Secret in `namespace` of the
/// tenant's cluster, as the controller's field manager: what the Secret
/// holds a week after the controller wrote it. Returns it.
pub async fn plant_aged_certificate(bed: &Bed, workload: &Client, namespace: &str) -> pki::Leaf {
    let aged = aged_certificate(bed);
    Api::<Secret>::namespaced(workload.clone(), namespace)
        .patch(
            PROXY_NAME,
            &PatchParams::apply(hcp_ingress::api::MANAGER).force(),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": PROXY_NAME, "namespace": namespace},
                "stringData": {"tls.crt": aged.cert_pem, "tls.key": aged.key_pem}}),
            ),
        )
        .await
        .unwrap();
    aged
}

/// A proxy certificate for the same names, minted from the cluster CA six
/// days ago with a seven-day life: what the Secret holds a week on.
fn aged_certificate(bed: &Bed) -> pki::Leaf {
    let ca = CertificateAuthority::from_pem(bed.tenant.ca_pem(), bed.tenant.ca_key_pem()).unwrap();
    let then = std::time::SystemTime::now() - Duration::from_secs(6 * 24 * 3600);
    let spec = LeafSpec::proxy(
        "cluster.local",
        "10.96.0.1".parse().unwrap(),
        "240.0.0.1".parse().unwrap(),
        then,
    );
    pki::mint_leaf(&ca, &spec).unwrap()
}

/// A node and a pod: two network namespaces. The node reaches the shared
/// ingress at two TEST-NET-2 addresses (198.51.100.0/24) on the host end of
/// a veth; the pod reaches the node over another veth, default route via
/// the node. Deleting the namespaces deletes the veths and kube-proxy's
/// rule with them.
struct NodeNet {
    node: String,
    pod: String,
    host_if: String,
    /// The shared ingress's addresses, on the host end.
    ingress: [Ipv4Addr; 2],
    _lock: std::fs::File,
}

impl NodeNet {
    fn new() -> Self {
        // A /29 of 198.51.100.0/24 per slot; the lock spans processes.
        let (slot, lock) = free_slot(
            "hcp-ingress-whole-path-net",
            32,
            "a free /29 of 198.51.100.0/24 for the node",
        );
        let base = 8 * slot;
        let net = NodeNet {
            node: format!("hcpi-wp{slot}-node"),
            pod: format!("hcpi-wp{slot}-pod"),
            host_if: format!("hcpiwp{slot}h"),
            ingress: [
                Ipv4Addr::new(198, 51, 100, base + 1),
                Ipv4Addr::new(198, 51, 100, base + 2),
            ],
            _lock: lock,
        };
        let node_addr = Ipv4Addr::new(198, 51, 100, base + 6);
        let (node_if, node_pod_if, pod_if) = (
            format!("hcpiwp{slot}n"),
            format!("hcpiwp{slot}q"),
            format!("hcpiwp{slot}p"),
        );
        // Left over by a killed run that held this slot: start clean.
        net.remove();
        for ns in [&net.node, &net.pod] {
            run_ok(&["ip", "netns", "add", ns]);
            run_ok(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        add_veth(&net.host_if, &node_if, &net.node);
        for addr in net.ingress {
            run_ok(&[
                "ip",
                "addr",
                "add",
                &format!("{addr}/29"),
                "dev",
                &net.host_if,
            ]);
        }
        run_ok(&["ip", "link", "set", &net.host_if, "up"]);
        run_ok(&[
            "ip",
            "-n",
            &net.node,
            "addr",
            "add",
            &format!("{node_addr}/29"),
            "dev",
            &node_if,
        ]);
        run_ok(&["ip", "-n", &net.node, "link", "set", &node_if, "up"]);
        run_ok(&[
            "ip",
            "link",
            "add",
            &pod_if,
            "netns",
            &net.pod,
            "type",
            "veth",
            "peer",
            "name",
            &node_pod_if,
            "netns",
            &net.node,
        ]);
        run_ok(&[
            "ip",
            "-n",
            &net.node,
            "addr",
            "add",
            "10.244.0.1/24",
            "dev",
            &node_pod_if,
        ]);
        run_ok(&["ip", "-n", &net.node, "link", "set", &node_pod_if, "up"]);
        run_ok(&[
            "ip",
            "-n",
            &net.pod,
            "addr",
            "add",
            "10.244.0.2/24",
            "dev",
            &pod_if,
        ]);
        run_ok(&["ip", "-n", &net.pod, "link", "set", &pod_if, "up"]);
        run_ok(&[
            "ip",
            "-n",
            &net.pod,
            "route",
            "add",
            "default",
            "via",
            "10.244.0.1",
        ]);
        net
    }

    /// kube-proxy's part: the Service address goes to the endpoint.
    fn kube_proxy_dnat(&self, service: &str, endpoint: &str) {
        let (ip, port) = service.split_once(':').unwrap();
        run_ok(&[
            "ip",
            "netns",
            "exec",
            &self.node,
            "iptables",
            "-t",
            "nat",
            "-A",
            "PREROUTING",
            "-d",
            &format!("{ip}/32"),
            "-p",
            "tcp",
            "--dport",
            port,
            "-j",
            "DNAT",
            "--to-destination",
            endpoint,
        ]);
    }

    /// A plain HTTP GET from the node (the proxy's admin port).
    fn node_get(&self, url: &str) -> Option<String> {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.node,
                "curl",
                "-sf",
                "--max-time",
                "5",
            ])
            .arg(url)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn remove(&self) {
        for ns in [&self.node, &self.pod] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .output();
    }
}

impl Drop for NodeNet {
    fn drop(&mut self) {
        self.remove();
    }
}

/// A volume of the proxy's pod: a ConfigMap or a Secret at a mount path.
struct Volume {
    name: String,
    kind: &'static str,
    object: String,
    mount: String,
    /// The files' mode (the volume's `defaultMode`).
    mode: u32,
}

/// One node's kubelet, for the proxy's pod only: reads the DaemonSet the
/// controller wrote, writes its ConfigMap and Secret volumes as the kubelet
/// does (files in a timestamped folder, `..data` pointing at it, swapped by
/// a rename), and keeps them in sync with the API.
struct Kubelet {
    workload: Client,
    node: PathBuf,
    container: Value,
    volumes: Vec<Volume>,
    sync: Option<tokio::task::JoinHandle<()>>,
}

impl Kubelet {
    async fn new(workload: &Client, node: &Path) -> Kubelet {
        let daemon_sets: Api<DaemonSet> = Api::namespaced(workload.clone(), PROXY_NS);
        let ds = eventually("the proxy DaemonSet in the workload cluster", || async {
            daemon_sets.get_opt(PROXY_NAME).await.ok()?
        })
        .await;
        let ds = serde_json::to_value(ds).unwrap();
        let pod = &ds["spec"]["template"]["spec"];
        let container = pod["containers"][0].clone();
        let mut volumes = Vec::new();
        for mount in container["volumeMounts"].as_array().unwrap() {
            let name = mount["name"].as_str().unwrap();
            let volume = pod["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == name)
                .unwrap_or_else(|| panic!("volume {name} of the proxy DaemonSet"));
            let (kind, object) = if let Some(name) = volume["configMap"]["name"].as_str() {
                ("ConfigMap", name)
            } else {
                let name = volume["secret"]["secretName"].as_str().unwrap();
                ("Secret", name)
            };
            let source = &volume[if kind == "ConfigMap" {
                "configMap"
            } else {
                "secret"
            }];
            volumes.push(Volume {
                name: name.to_string(),
                kind,
                object: object.to_string(),
                mount: mount["mountPath"].as_str().unwrap().to_string(),
                // The API's default when the DaemonSet says nothing.
                mode: source["defaultMode"].as_u64().map_or(0o644, |m| m as u32),
            });
        }
        std::fs::create_dir_all(node.join("volumes")).unwrap();
        Kubelet {
            workload: workload.clone(),
            node: node.to_path_buf(),
            container,
            volumes,
            sync: None,
        }
    }

    fn volume_dir(&self, name: &str) -> PathBuf {
        self.node.join("volumes").join(name)
    }

    /// The data of one volume's object, once it exists.
    async fn volume_data(&self, kind: &str, object: &str) -> Option<BTreeMap<String, Vec<u8>>> {
        volume_data(&self.workload, kind, object).await
    }

    /// Write every volume once (waiting for its object), then keep them in
    /// sync every 500 ms in the background.
    async fn sync(&self) -> &Self {
        for v in &self.volumes {
            let data = eventually(&format!("{} {PROXY_NS}/{}", v.kind, v.object), || {
                self.volume_data(v.kind, &v.object)
            })
            .await;
            AtomicWriter(self.volume_dir(&v.name), v.mode).write(&data);
        }
        self
    }

    fn start_sync(&mut self) {
        let workload = self.workload.clone();
        let volumes: Vec<_> = self
            .volumes
            .iter()
            .map(|v| {
                let writer = AtomicWriter(self.volume_dir(&v.name), v.mode);
                (writer, v.kind, v.object.clone())
            })
            .collect();
        self.sync = Some(tokio::spawn(async move {
            loop {
                for (writer, kind, object) in &volumes {
                    if let Some(data) = volume_data(&workload, kind, object).await {
                        writer.write(&data);
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }));
    }

    /// The proxy's container as the kubelet starts it: the DaemonSet's
    /// command (the image's binary is this build's), arguments and
    /// environment, its volumes at their mount paths. The mounts live in a
    /// private mount namespace: an overlay on `/etc` whose top layer holds
    /// only symlinks to the volume folders, so the host's `/etc` is left as
    /// it is.
    fn start_proxy(&self, net: &NodeNet) -> Process {
        let top = self.node.join("etc-layer");
        for v in &self.volumes {
            let rel = Path::new(&v.mount)
                .strip_prefix("/etc")
                .unwrap_or_else(|_| panic!("the test mounts under /etc only, not {}", v.mount));
            let link = top.join(rel);
            std::fs::create_dir_all(link.parent().unwrap()).unwrap();
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(self.volume_dir(&v.name), &link).unwrap();
        }
        let command: Vec<String> = self.container["command"]
            .as_array()
            .unwrap()
            .iter()
            .chain(self.container["args"].as_array().unwrap())
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            command[0],
            hcp_ingress::render::workload::PROXY_COMMAND,
            "the DaemonSet runs the proxy-only binary"
        );
        let mut script = format!(
            "mount -t overlay overlay -o lowerdir={}:/etc /etc && exec env",
            top.display()
        );
        for env in self.container["env"].as_array().into_iter().flatten() {
            script.push_str(&format!(
                " {}={}",
                env["name"].as_str().unwrap(),
                env["value"].as_str().unwrap()
            ));
        }
        script.push_str(&format!(" {}", crate::proxy_bin::proxy_bin()));
        for arg in &command[1..] {
            script.push_str(&format!(" '{arg}'"));
        }
        let args: Vec<String> = [
            "netns",
            "exec",
            &net.node,
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        Process::spawn(
            Path::new("ip"),
            &args,
            &self.node,
            self.node.join("proxy.log"),
        )
    }

    /// Until the DaemonSet's readiness probe passes on the node.
    async fn wait_ready(&mut self, net: &NodeNet, proxy: &Process) {
        let probe = &self.container["readinessProbe"]["httpGet"];
        let url = format!(
            "http://{}:{}{}",
            probe["host"].as_str().unwrap(),
            probe["port"].as_u64().unwrap(),
            probe["path"].as_str().unwrap()
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while net.node_get(&url).is_none() {
            assert!(
                proxy.running(),
                "the proxy exited; its log ends with:\n{}",
                proxy.tail()
            );
            if Instant::now() >= deadline {
                // Why: the upstream failures the proxy counted (a health
                // transition is logged once, its reason is counted).
                let errors: Vec<String> = net
                    .node_get("http://127.0.0.1:9445/metrics")
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| {
                        l.starts_with("hcp_proxy_upstream_errors_total") && !l.ends_with(" 0")
                    })
                    .map(str::to_string)
                    .collect();
                panic!(
                    "the proxy was not ready at {url} within 60 s; upstream errors: {errors:?}; its log ends with:\n{}",
                    proxy.tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        self.start_sync();
    }

    /// The config file the proxy runs, parsed.
    fn config(&self) -> Value {
        let v = self.volumes.iter().find(|v| v.kind == "ConfigMap").unwrap();
        let text = std::fs::read_to_string(self.volume_dir(&v.name).join("config.yaml")).unwrap();
        serde_saphyr::from_str(&text).unwrap()
    }

    /// The certificate (DER) in the node's volume now.
    fn secret_cert(&self) -> Vec<u8> {
        let v = self
            .volumes
            .iter()
            .find(|v| v.kind == "Secret")
            .expect("a TLS volume: the default mode terminates TLS");
        der(&std::fs::read_to_string(self.volume_dir(&v.name).join("tls.crt")).unwrap())
    }

    /// The certificate (DER) in the workload cluster's Secret now.
    async fn live_cert(&self) -> Option<Vec<u8>> {
        let data = volume_data(&self.workload, "Secret", PROXY_NAME).await?;
        Some(der(std::str::from_utf8(data.get("tls.crt")?).ok()?))
    }

    /// The config in the workload cluster's ConfigMap now.
    async fn live_config(&self) -> Option<String> {
        let data = volume_data(&self.workload, "ConfigMap", PROXY_NAME).await?;
        String::from_utf8(data.get("config.yaml")?.clone()).ok()
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        if let Some(sync) = self.sync.take() {
            sync.abort();
        }
    }
}

async fn volume_data(
    workload: &Client,
    kind: &str,
    object: &str,
) -> Option<BTreeMap<String, Vec<u8>>> {
    if kind == "ConfigMap" {
        let cm = Api::<ConfigMap>::namespaced(workload.clone(), PROXY_NS)
            .get_opt(object)
            .await
            .ok()??;
        Some(
            cm.data?
                .into_iter()
                .map(|(k, v)| (k, v.into_bytes()))
                .collect(),
        )
    } else {
        let secret = Api::<Secret>::namespaced(workload.clone(), PROXY_NS)
            .get_opt(object)
            .await
            .ok()??;
        Some(secret.data?.into_iter().map(|(k, v)| (k, v.0)).collect())
    }
}

/// The kubelet's atomic writer for ConfigMap and Secret volumes: the files
/// in a new `..<n>` folder, a `..data_tmp` symlink to it renamed over
/// `..data`, each file a symlink `name -> ..data/name`, the old folder
/// removed. A reader sees the old set or the new one, never a mix.
struct AtomicWriter(PathBuf, u32);

impl AtomicWriter {
    fn write(&self, data: &BTreeMap<String, Vec<u8>>) {
        let dir = &self.0;
        std::fs::create_dir_all(dir).unwrap();
        let data_link = dir.join("..data");
        let old = std::fs::read_link(&data_link).ok();
        if let Some(old) = &old {
            let unchanged = data
                .iter()
                .all(|(k, v)| std::fs::read(dir.join(old).join(k)).is_ok_and(|have| &have == v));
            if unchanged {
                return;
            }
        }
        let stamp = format!(
            "..{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        let new = dir.join(&stamp);
        std::fs::create_dir(&new).unwrap();
        for (k, v) in data {
            std::fs::write(new.join(k), v).unwrap();
            std::fs::set_permissions(new.join(k), std::fs::Permissions::from_mode(self.1)).unwrap();
        }
        let tmp = dir.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&stamp, &tmp).unwrap();
        std::fs::rename(&tmp, &data_link).unwrap();
        for k in data.keys() {
            let link = dir.join(k);
            if std::fs::symlink_metadata(&link).is_err() {
                std::os::unix::fs::symlink(Path::new("..data").join(k), &link).unwrap();
            }
        }
        if let Some(old) = old {
            let _ = std::fs::remove_dir_all(dir.join(old));
        }
    }
}

/// What a pod holds: its ServiceAccount token, the cluster CA, and a client
/// certificate of that CA; it calls from its network namespace with curl.
struct Pod {
    ns: String,
    dir: PathBuf,
    sa_user: String,
}

impl Pod {
    async fn new(bed: &Bed, net: &NodeNet) -> Pod {
        let tenant = bed.tenant.admin_client();
        let _ = Api::<ServiceAccount>::namespaced(tenant, "default")
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": READER}})).unwrap(),
            )
            .await;
        let token = bed.tenant.service_account_token("default", READER).await;
        let dir = bed.dir.path().join("pod");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.crt"), bed.tenant.ca_pem()).unwrap();
        // A header file keeps the token off the command line.
        std::fs::write(
            dir.join("auth.header"),
            format!("Authorization: Bearer {token}\n"),
        )
        .unwrap();
        std::fs::write(dir.join("client.crt"), &bed.admin.cert_pem).unwrap();
        std::fs::write(dir.join("client.key"), &bed.admin.key_pem).unwrap();
        Pod {
            ns: net.pod.clone(),
            dir,
            sa_user: format!("system:serviceaccount:default:{READER}"),
        }
    }

    /// A watch of ConfigMaps in `default` to `https://10.96.0.1` without
    /// SNI, with the ServiceAccount token (granted by a Role), its stream
    /// into a file.
    async fn watch_config_maps(&self, bed: &Bed) -> Watch {
        for object in [
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": READER, "namespace": "default"},
                   "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": READER, "namespace": "default"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": READER},
                   "subjects": [{"kind": "ServiceAccount", "name": READER, "namespace": "default"}]}),
        ] {
            apply(&bed.tenant.admin_client(), object, "test").await;
        }
        apply(
            &bed.tenant.admin_client(),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "created-before-the-rotations", "namespace": "default"}}),
            "test",
        )
        .await;
        let out = self.dir.join("watch.out");
        let child = tokio::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns,
                "curl",
                "-sS",
                "-N",
                "--max-time",
                "300",
            ])
            .args(["--cacert", &self.dir.join("ca.crt").display().to_string()])
            .args([
                "-H",
                &format!("@{}", self.dir.join("auth.header").display()),
            ])
            .arg("https://10.96.0.1/api/v1/namespaces/default/configmaps?watch=1")
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(self.dir.join("watch.err")).unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("curl runs");
        // Open once it has sent the ConfigMap there is (an ADDED event).
        eventually("the watch to stream", || async {
            std::fs::read_to_string(&out)
                .ok()
                .filter(|t| t.contains(r#""type":"ADDED""#))
        })
        .await;
        Watch { child, out }
    }

    /// A SelfSubjectReview to `https://10.96.0.1` without SNI, with the
    /// ServiceAccount token: the leaf the pod saw, or why it failed.
    async fn token_call(&self) -> Result<Vec<u8>, String> {
        let header = format!("@{}", self.dir.join("auth.header").display());
        self.review(
            &["-H", &header],
            "https://10.96.0.1/apis/authentication.k8s.io/v1/selfsubjectreviews",
            &self.sa_user,
        )
        .await
    }

    /// The same with the API host as SNI (resolved to the Service address)
    /// and a client certificate, which only a passthrough carries.
    async fn client_cert_call(&self) -> Result<Vec<u8>, String> {
        let cert = self.dir.join("client.crt").display().to_string();
        let key = self.dir.join("client.key").display().to_string();
        let resolve = format!("{API_HOST}:443:10.96.0.1");
        self.review(
            &["--cert", &cert, "--key", &key, "--resolve", &resolve],
            &format!("https://{API_HOST}/apis/authentication.k8s.io/v1/selfsubjectreviews"),
            ADMIN_USER,
        )
        .await
    }

    async fn review(&self, extra: &[&str], url: &str, user: &str) -> Result<Vec<u8>, String> {
        let ca = self.dir.join("ca.crt").display().to_string();
        let out = tokio::process::Command::new("ip")
            .args(["netns", "exec", &self.ns, "curl", "-sS", "--max-time", "10"])
            .args(["--cacert", &ca, "-X", "POST"])
            .args(["-H", "Content-Type: application/json"])
            .args([
                "-d",
                r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#,
            ])
            .args(["-w", "\n@@@%{http_code}\n%{certs}"])
            .args(extra)
            .arg(url)
            .output()
            .await
            .map_err(|e| format!("curl: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!(
                "curl {url} exited {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let (body, rest) = text
            .rsplit_once("\n@@@")
            .ok_or_else(|| format!("no status from curl: {text}"))?;
        let (status, certs) = rest.split_once('\n').unwrap_or((rest, ""));
        let seen_user = serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|v| Some(v["status"]["userInfo"]["username"].as_str()?.to_string()));
        if status != "201" || seen_user.as_deref() != Some(user) {
            return Err(format!("{url}: {status} {body}"));
        }
        let leaf = certs
            .find("-----BEGIN CERTIFICATE-----")
            .map(|start| der(&certs[start..]))
            .ok_or_else(|| format!("{url}: curl showed no certificate"))?;
        Ok(leaf)
    }
}

/// Two loops of calls from the pod, one per kind, each call on a new
/// connection, counted.
struct Calls {
    stop: Arc<AtomicBool>,
    state: Arc<Mutex<Tally>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

#[derive(Default)]
struct Tally {
    ok: usize,
    token_calls: usize,
    client_calls: usize,
    failed: Vec<String>,
    /// The leaf of the latest answered call without SNI.
    last_leaf: Vec<u8>,
    /// Each leaf seen without SNI, once per change, in order.
    leaves: Vec<Vec<u8>>,
}

impl Calls {
    fn start(pod: Pod) -> Calls {
        let pod = Arc::new(pod);
        let stop = Arc::new(AtomicBool::new(false));
        let state = Arc::new(Mutex::new(Tally::default()));
        let tasks = [false, true]
            .into_iter()
            .map(|client_cert| {
                let (pod, stop, state) = (pod.clone(), stop.clone(), state.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let result = if client_cert {
                            pod.client_cert_call().await
                        } else {
                            pod.token_call().await
                        };
                        let mut tally = state.lock().unwrap();
                        if client_cert {
                            tally.client_calls += 1;
                        } else {
                            tally.token_calls += 1;
                        }
                        match result {
                            Ok(leaf) => {
                                tally.ok += 1;
                                if !client_cert && leaf != tally.last_leaf {
                                    tally.leaves.push(leaf.clone());
                                    tally.last_leaf = leaf;
                                }
                            }
                            Err(e) => tally.failed.push(e),
                        }
                    }
                })
            })
            .collect();
        Calls { stop, state, tasks }
    }

    fn total(&self) -> usize {
        let tally = self.state.lock().unwrap();
        tally.ok + tally.failed.len()
    }

    /// Until calls without SNI see a leaf other than `old`.
    async fn wait_for_new_leaf(&self, old: &[u8], proxy: &Process) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.state.lock().unwrap().last_leaf == old {
            assert!(
                Instant::now() < deadline,
                "the pod still sees the first certificate 60 s after the Secret changed; the proxy's log ends with:\n{}",
                proxy.tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Until calls without SNI see `leaf`: the kubelet swapped the files
    /// and the proxy took them in.
    async fn wait_for_leaf(&self, leaf: &[u8], kubelet: &Kubelet, proxy: &Process) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if self.state.lock().unwrap().last_leaf == leaf {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the pod did not see the new certificate within 60 s (the node's file has {}the new one); the proxy's log ends with:\n{}",
                if kubelet.secret_cert() == leaf {
                    ""
                } else {
                    "not "
                },
                proxy.tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Until `n` calls were made in all.
    async fn wait_for(&self, n: usize) {
        eventually(&format!("{n} calls from the pod"), || async {
            (self.total() >= n).then_some(())
        })
        .await;
    }

    async fn stop(mut self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        for task in std::mem::take(&mut self.tasks) {
            task.await.unwrap();
        }
        std::mem::take(&mut *self.state.lock().unwrap())
    }
}

impl Drop for Calls {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// A watch from the pod, on one connection.
struct Watch {
    child: tokio::process::Child,
    out: PathBuf,
}

impl Watch {
    /// A ConfigMap created now reaches the watch.
    async fn sees_a_new_config_map(mut self, workload: &Client) {
        let name = "created-after-the-rotations";
        apply(
            workload,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": "default"}}),
            "test",
        )
        .await;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = std::fs::read_to_string(&self.out).unwrap_or_default();
            if text.contains(&format!(r#""name":"{name}""#)) {
                break;
            }
            let exited = self.child.try_wait().ok().flatten();
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "the watch opened before the rotations did not see ConfigMap {name} (curl {}): {}",
                exited.map_or("still running".to_string(), |s| s.to_string()),
                std::fs::read_to_string(self.out.with_file_name("watch.err")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
