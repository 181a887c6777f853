//! The node proxy as a real pod, on a real node (test/realnode): the
//! kubelet starts the DaemonSet the controller wrote into the tenant's
//! cluster through containerd and runc, from the image we ship (the OCI
//! tarball hack/build-image-tarball.sh writes), with its securityContext,
//! probes and ConfigMap and Secret volumes; kube-proxy programs the
//! `kubernetes` Service as the controller steers it.
//!
//! ```text
//!  node (own mount, net, pid namespaces)                     host
//!  pod (CNI bridge) ─┐                                                     shared ingress:
//!  hostNetwork pod ──┴→ 10.96.0.1 ─kube-proxy→ hcp-ingress-proxy ──veth──→ haproxy-ingress (our Ingress) ──SNI──→ tenant's
//!  kubelet, kube-proxy ────────────────────────────────────────────────→   or Traefik (our IngressRouteTCP)    kube-apiserver
//! ```
//!
//! The node's kubelet and kube-proxy reach the tenant's API server by its
//! `apiHost` through the same shared ingress, as a hosted control plane's
//! workers do. The shared ingress is haproxy-ingress (every test but one)
//! or Traefik's CRD provider ([`SharedIngress`]): the node reaches either
//! only at the host's end of its veth, the one address it is bound to.
//! The pods are `hack/node/apicall`: an in-cluster client that
//! calls the API at `KUBERNETES_SERVICE_HOST` with its ServiceAccount token,
//! verifying the certificate for the ClusterIP and for
//! `kubernetes.default.svc` by turns, on a new connection per call, and logs
//! each call; the tests read those logs from the node.

use std::{fmt, net::SocketAddr, path::PathBuf, time::Duration};

use hcp_ingress::render::{
    ROUTE_PREFIX, RouteKind,
    workload::{NAME, NAME_LABEL, NAMESPACE, SERVICE_STEERING_NAMESPACE},
};
use k8s_openapi::api::core::v1::{Node as KubeNode, Pod};
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
};
use realnode::{APICALL_IMAGE, Node};
use serde_json::{Value, json};
use tokio::sync::{Mutex, MutexGuard};

mod checks;
mod konnectivity;
mod tests;

use crate::{
    bed::{API_HOST, Bed, CLUSTER, ready},
    consumers::{HOW_TO_BUILD, Process, free_port, haproxy_ingress_files, start_haproxy_ingress},
    traefik,
    whole_path::{apply_cpi_routed, connect_workload},
};

/// One node test at a time: each is two API servers, the controller, the
/// shared ingress, containerd, a kubelet and its pods, on two cores.
static ONE_NODE: Mutex<()> = Mutex::const_new(());

/// The image hack/build-image-tarball.sh names (IMAGE:TAG).
const IMAGE: &str = "ghcr.io/hcp-ingress/hcp-ingress:dev";
/// The node's name.
const WORKER: &str = "worker-0";
/// How long the node, its pods and the controller may take on a loaded
/// 2-core machine.
const WITHIN: Duration = Duration::from_secs(180);

/// The image tarball: `HCP_IMAGE_TARBALL` (hack/test.sh builds and exports
/// it), else where hack/build-image-tarball.sh writes it.
fn image_tarball() -> PathBuf {
    std::env::var_os("HCP_IMAGE_TARBALL")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::bed::repo().join("target/image/hcp-ingress-amd64.oci.tar"))
}

/// The shared ingress the node reaches the tenant's hosts through, on the
/// host's end of the node's veth, as the platform runs it for every tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SharedIngress {
    /// haproxy-ingress reading our Ingress (class `haproxy-ingress`), on
    /// two addresses: the node's `host_address` and a second one.
    HaproxyIngress,
    /// Traefik's CRD provider reading the IngressRouteTCP our controller
    /// writes (class `traefik`), its entry point on the node's
    /// `host_address` alone: a different proxy between the node and the
    /// tenant, with its own idle handling of long TCP connections.
    TraefikCrd,
}

impl fmt::Display for SharedIngress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SharedIngress::HaproxyIngress => "haproxy-ingress",
            SharedIngress::TraefikCrd => "Traefik (CRD provider, IngressRouteTCP)",
        })
    }
}

/// Whether the machine can run a node with haproxy-ingress; under
/// `CI=true` a missing piece fails.
fn node_ready() -> bool {
    node_ready_with(SharedIngress::HaproxyIngress)
}

/// Whether the machine can run a node with `shared` as its ingress.
fn node_ready_with(shared: SharedIngress) -> bool {
    let (mut commands, mut files) = match shared {
        SharedIngress::HaproxyIngress => (vec!["haproxy"], haproxy_ingress_files()),
        SharedIngress::TraefikCrd => (
            Vec::new(),
            vec![
                (traefik::binary(), HOW_TO_BUILD),
                (
                    crate::consumers::bin_dir("traefik").join("crds"),
                    HOW_TO_BUILD,
                ),
            ],
        ),
    };
    commands.extend(["iptables", "nft", "unshare", "nsenter"]);
    files.extend(realnode::required_files());
    files.push((image_tarball(), "bash hack/build-image-tarball.sh"));
    ready(&commands, &files)
}

/// The bed, the node and the shared ingress the node reaches.
struct NodeBed {
    node: Node,
    /// Which shared ingress runs, named in failures.
    shared: SharedIngress,
    ingress: Process,
    bed: Bed,
    /// The tenant's cluster, as its admin.
    workload: Client,
    /// The shared ingress's port, on the host's end of the node's veth.
    https: u16,
    /// haproxy-ingress's second address there (the first is the node's
    /// `host_address`, which the kubelet reaches the API at); Traefik has
    /// none, its one entry point is bound to one address.
    second: Option<std::net::Ipv4Addr>,
    _one: MutexGuard<'static, ()>,
}

impl NodeBed {
    /// The management and tenant clusters with the controller, a node
    /// (`cni`: its network plugin configured; `taints` registered), the
    /// shared ingress on the host's end of the node's veth, the tenant's
    /// CAPI objects, and its ControlPlaneIngress with `proxy` (steering,
    /// mode; the upstream and the image are set here); kube-proxy runs in
    /// `proxy_mode`.
    async fn start(
        proxy_mode: realnode::ProxyMode,
        cni: bool,
        taints: &[&str],
        proxy: Value,
    ) -> NodeBed {
        NodeBed::start_with(
            SharedIngress::HaproxyIngress,
            proxy_mode,
            cni,
            taints,
            proxy,
            Vec::new(),
        )
        .await
    }

    /// [`NodeBed::start`] with `shared` as the shared ingress and more flags
    /// for the tenant's kube-apiserver.
    async fn start_with(
        shared: SharedIngress,
        proxy_mode: realnode::ProxyMode,
        cni: bool,
        taints: &[&str],
        proxy: Value,
        apiserver_args: Vec<String>,
    ) -> NodeBed {
        let one = ONE_NODE.lock().await;
        // Traefik's kinds are the management cluster's from the start, as
        // for its own tests: the controller watches IngressRouteTCP at once.
        let crds = match shared {
            SharedIngress::HaproxyIngress => Vec::new(),
            SharedIngress::TraefikCrd => traefik::crds(),
        };
        let bed = Bed::start_for_nodes(&crds, apiserver_args).await;
        let https = realkube::free_port();
        let options = realnode::Options {
            name: WORKER.into(),
            api_server: format!("https://{API_HOST}:{https}"),
            host_names: vec![API_HOST.into()],
            ca_pem: bed.tenant.ca_pem().into(),
            ca_key_pem: bed.tenant.ca_key_pem().into(),
            cni,
            taints: taints.iter().map(|t| t.to_string()).collect(),
            images: vec![image_tarball()],
            kube_bin: realkube::bin_dir(),
            service_cidr: "10.96.0.0/12".into(),
            proxy_mode,
        };
        let node = tokio::task::block_in_place(|| Node::start(options))
            .unwrap_or_else(|e| panic!("the node: {e}"));
        let host = node.host_address;
        let (ingress, second, class_name, route, kind) = match shared {
            SharedIngress::HaproxyIngress => {
                let second = node
                    .add_host_address(3)
                    .unwrap_or_else(|e| panic!("a second ingress address: {e}"));
                let ingress = start_haproxy_ingress(
                    &bed,
                    json!({"bind-https": format!("{host}:{https},{second}:{https}"),
                           "bind-http": format!("127.0.0.1:{}", free_port())}),
                )
                .await;
                let route = json!({"controller": "haproxy-ingress"});
                (
                    ingress,
                    Some(second),
                    "haproxy-ingress",
                    route,
                    RouteKind::Ingress,
                )
            }
            SharedIngress::TraefikCrd => {
                // className `traefik` is also the CRD provider's class
                // filter, which our route's class annotation must match.
                let traefik = traefik::start_at(
                    &bed,
                    json!({"kubernetesCRD": {"ingressClass": "traefik"}}),
                    SocketAddr::from((host, https)),
                );
                let route = json!({"controller": "traefik"});
                (
                    traefik.process,
                    None,
                    "traefik",
                    route,
                    RouteKind::IngressRouteTcp,
                )
            }
        };
        connect_workload(&bed).await;
        let mut proxy = proxy;
        proxy["upstreams"] = json!([host.to_string()]);
        proxy["image"] = json!(IMAGE);
        apply_cpi_routed(&bed, https, proxy, class_name, route).await;
        bed.route_written_by_controller(kind, &format!("{ROUTE_PREFIX}{CLUSTER}"))
            .await;
        let workload = bed.tenant.admin_client();
        NodeBed {
            node,
            shared,
            ingress,
            bed,
            workload,
            https,
            second,
            _one: one,
        }
    }

    /// Fails with the node's and the containers' logs, and the shared
    /// ingress's.
    fn fail(&self, what: &str) -> ! {
        panic!(
            "{what}\n{}\n--- the shared ingress: {}\n{}",
            self.node.diagnostics(),
            self.shared,
            self.ingress.tail()
        )
    }

    async fn eventually<T, F, Fut>(&self, what: &str, check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        poll_within(what, check, |why| self.fail(why)).await
    }

    /// The Node's Ready condition, as its kubelet reports it.
    async fn node_ready(&self) -> Option<bool> {
        let node = Api::<KubeNode>::all(self.workload.clone())
            .get_opt(WORKER)
            .await
            .ok()??;
        let conditions = node.status?.conditions?;
        let ready = conditions.iter().find(|c| c.type_ == "Ready")?;
        Some(ready.status == "True")
    }

    /// The keys of the Node's taints.
    async fn node_taints(&self) -> Vec<String> {
        let node = Api::<KubeNode>::all(self.workload.clone())
            .get_opt(WORKER)
            .await;
        let taints = node.ok().flatten().and_then(|n| n.spec?.taints);
        taints.into_iter().flatten().map(|t| t.key).collect()
    }

    /// The registered Node: its kubelet and the tenant's API server printed,
    /// and never a kubelet newer than its API server (the skew policy the
    /// version matrix keeps by building the workload floor's kubelet); its
    /// ephemeral storage is the node's own tmpfs, so the kubelet's eviction
    /// thresholds never depend on how full the host's disk is.
    async fn check_node(&self) {
        let node = Api::<KubeNode>::all(self.workload.clone())
            .get(WORKER)
            .await
            .unwrap();
        let status = node.status.unwrap();
        let kubelet = status.node_info.unwrap().kubelet_version;
        let server = self.workload.apiserver_version().await.unwrap().git_version;
        eprintln!("{WORKER}: kubelet {kubelet}, its API server {server}");
        let minor = |v: &str| -> u32 {
            v.trim_start_matches('v')
                .split('.')
                .nth(1)
                .unwrap()
                .parse()
                .unwrap()
        };
        assert!(
            minor(&kubelet) <= minor(&server),
            "kubelet {kubelet} is newer than its API server {server}: set HCP_NODE_BIN to a kubelet of the workload release (hack/node/build.sh with HCP_KUBE_VERSION)"
        );

        let capacity = status.capacity.unwrap_or_default();
        let storage = capacity.get("ephemeral-storage").map(|q| q.0.as_str());
        let tmpfs = self
            .node
            .exec(&["stat", "-f", "-c", "%T %b %S", "/var/lib/kubelet"])
            .unwrap();
        let tmpfs = String::from_utf8_lossy(&tmpfs.stdout).into_owned();
        let [kind, blocks, size] = tmpfs.split_whitespace().collect::<Vec<_>>()[..] else {
            panic!("stat -f /var/lib/kubelet on the node printed {tmpfs:?}");
        };
        let bytes = blocks.parse::<u64>().unwrap() * size.parse::<u64>().unwrap();
        assert_eq!(kind, "tmpfs", "the kubelet's root on the node");
        assert_eq!(
            storage.map(quantity_bytes),
            Some(bytes),
            "the Node's ephemeral-storage capacity ({storage:?}) is not the size of the node's tmpfs ({bytes} bytes)"
        );
    }

    /// The proxy's one pod in `namespace`, Ready on the node, with the
    /// image `image`.
    async fn proxy_pod(&self, namespace: &str, image: &str) -> Pod {
        let pods: Api<Pod> = Api::namespaced(self.workload.clone(), namespace);
        let selector = ListParams::default().labels(&format!("{NAME_LABEL}={NAME}"));
        self.eventually(
            &format!("one Ready proxy pod of {image} on {WORKER}"),
            || async {
                let list = pods.list(&selector).await.ok()?;
                let [pod] = list.items.as_slice() else {
                    return None;
                };
                let spec = pod.spec.as_ref()?;
                (spec.node_name.as_deref() == Some(WORKER)
                    && spec.containers[0].image.as_deref() == Some(image)
                    && pod_ready(pod)
                    && pod.metadata.deletion_timestamp.is_none())
                .then(|| pod.clone())
            },
        )
        .await
    }

    /// Starts `hack/node/apicall` as pod `name` in `default`: on the CNI
    /// bridge, or on the node's network, tolerating every taint (what a
    /// bootstrap DaemonSet such as a CNI's does).
    async fn start_client(&self, name: &str, host_network: bool) {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "hostNetwork": host_network,
                "dnsPolicy": "Default",
                "tolerations": [{"operator": "Exists"}],
                "terminationGracePeriodSeconds": 0,
                "containers": [{
                    "name": "apicall", "image": APICALL_IMAGE, "imagePullPolicy": "Never",
                    "securityContext": {"runAsNonRoot": true, "allowPrivilegeEscalation": false,
                                        "capabilities": {"drop": ["ALL"]}}
                }]
            }
        }))
        .unwrap();
        Api::<Pod>::namespaced(self.workload.clone(), "default")
            .create(&PostParams::default(), &pod)
            .await
            .unwrap_or_else(|e| panic!("create pod {name}: {e}"));
    }

    /// The calls pod `name` made so far, from its log on the node.
    fn calls(&self, name: &str) -> Calls {
        Calls::parse(&self.node.pod_log("default", name, "apicall"))
    }

    /// Waits until pod `name` has `n` answered calls by each name.
    async fn answered(&self, name: &str, n: usize) -> Calls {
        self.eventually(
            &format!("{n} answered calls of pod {name} by each name"),
            || async {
                let calls = self.calls(name);
                (calls.answered_by.len() == 2 && calls.answered_by.values().all(|c| *c >= n))
                    .then_some(calls)
            },
        )
        .await
    }

    async fn finish(self) {
        let NodeBed {
            node,
            ingress,
            bed,
            _one,
            ..
        } = self;
        // The node goes before the clusters its kubelet reads, and leaves
        // nothing on the host.
        let left = tokio::task::block_in_place(|| node.stop());
        assert!(left.is_empty(), "the node left on the host: {left:#?}");
        drop(ingress);
        bed.finish().await;
    }
}

/// The container's own lines of a CRI log: `<time> <stream> <tag> <line>`.
fn cri_lines(log: &str) -> impl Iterator<Item = &str> {
    log.lines()
        .map(|line| line.splitn(4, ' ').nth(3).unwrap_or_default())
}

/// What one client pod's log says.
#[derive(Debug, Default)]
struct Calls {
    /// Answered calls by the name the certificate was verified for.
    answered_by: std::collections::BTreeMap<String, usize>,
    /// Every certificate seen (sha256 prefix), in order of first sight.
    leaves: Vec<String>,
    /// Failed calls after the first answered one, with their lines.
    failures: Vec<String>,
}

impl Calls {
    /// Parses apicall's lines of its CRI log.
    fn parse(log: &str) -> Calls {
        let mut calls = Calls::default();
        for text in cri_lines(log) {
            let fields: Vec<&str> = text.split_whitespace().collect();
            match fields.as_slice() {
                ["ok", _, name, leaf, ..] => {
                    *calls.answered_by.entry(name.to_string()).or_default() += 1;
                    if !calls.leaves.iter().any(|l| l == leaf) {
                        calls.leaves.push(leaf.to_string());
                    }
                }
                ["fail", ..] if !calls.answered_by.is_empty() => {
                    calls.failures.push(text.to_string())
                }
                _ => {}
            }
        }
        calls
    }

    fn total(&self) -> usize {
        self.answered_by.values().sum()
    }
}

/// The id of a pod's first container, as its status gives it.
fn container_id(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first()?.container_id.clone())
        .expect("a running pod names its container")
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The bytes of a binary-suffixed quantity as the kubelet reports a
/// capacity (`12345`, `12056Ki`, `12Gi`).
fn quantity_bytes(q: &str) -> u64 {
    let (digits, unit) = q.split_at(q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len()));
    let shift = match unit {
        "" => 0,
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        "Ti" => 40,
        _ => panic!("unexpected quantity {q}"),
    };
    digits.parse::<u64>().unwrap() << shift
}

/// Polls `check` every 500 ms until it gives a value; after [`WITHIN`],
/// hands "timed out waiting for `what`" to `fail`, which panics with what
/// its bed knows ([`NodeBed::fail`], or a test's fuller failure).
pub(super) async fn poll_within<T, F, Fut>(
    what: &str,
    mut check: F,
    fail: impl Fn(&str) -> std::convert::Infallible,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() > deadline {
            match fail(&format!("timed out waiting for {what}")) {}
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
