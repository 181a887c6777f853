//! The real data path the take-over and steering tests share: pods on a
//! node reaching the workload API server through `kubernetes.default.svc`.
//!
//! Everything on it is the real thing, on one "node" (a network namespace
//! joined to the host by a veth pair): kube-proxy (iptables or nftables
//! mode, [`KubeProxy`]) programs the Service from the workload API server, which runs as hosted control
//! planes run it (`--endpoint-reconciler-type=none`, kube-controller-manager
//! turning a selector into endpoints); the shared ingress on the host is
//! HAProxy routing by SNI to that API server, whose serving certificate
//! names the tenant's `apiHost`; a pod calls the API in a loop and logs
//! each call. The test plays the kubelet: it binds the DaemonSets' pods to
//! the node, starts their processes (the hcp-ingress proxy from exactly the
//! ConfigMap and Secret the controller wrote, or k0smotron's HAProxy) and
//! reports them Ready once they answer.
//!
//! [`DataPath::start`] brings the node up; each test then adds what is its
//! own (k0smotron's stack, provider Endpoints, ...), starts the pod with
//! [`DataPath::start_pod`] and the controller with [`DataPath::manage`].

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use hcp_ingress::render::workload::{
    ADMIN_PORT, CONFIG_DIR, CONFIG_FILE, NAME, SERVICE_STEERING_ADMIN_PORT,
    SERVICE_STEERING_NAMESPACE, TLS_DIR, selector_labels,
};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

use crate::{
    harness::*,
    workload::{initialized_cluster, put_secret},
};

/// The tenant's cluster, as the examples name it.
pub(crate) const CLUSTER: &str = "tenant-01";
/// The tenant's `apiHost`: the name the shared ingress routes by.
pub(crate) const API_HOST: &str = "api.tenant-01.example.com";
/// The one node's name.
const NODE: &str = "node-0";
/// The `kubernetes` Service's cluster IP in an IPv4 cluster, which the pod calls.
pub(crate) const SERVICE_IP: &str = "10.96.0.1";
/// The same in a cluster whose `kubernetes` Service is IPv6.
const SERVICE_IP_V6: &str = "fd00:10:96::1";
/// The name pods resolve to the `kubernetes` Service's cluster IP.
const SERVICE_NAME: &str = "kubernetes.default.svc";
/// How long a step of the controller may take on a loaded 2-core machine.
pub(crate) const WITHIN: Duration = Duration::from_secs(120);

/// What differs between the tests' workload clusters.
pub(crate) struct Workload {
    /// The API server's name, for its logs and kubeconfig.
    pub(crate) name: &'static str,
    /// The API server's certificate also names the `kubernetes` Service IP:
    /// pods can then call it directly, once steering has been given back to
    /// Endpoints with its own address.
    pub(crate) serves_service_ip: bool,
    /// The IP families of the cluster and its node.
    pub(crate) stack: Stack,
    /// What implements Services on the node.
    pub(crate) kube_proxy: KubeProxy,
    /// kube-controller-manager runs without its EndpointSlice controller
    /// until [`DataPath::start_endpoint_slice_controller`]: a selector of
    /// the `kubernetes` Service turns into no slice until then.
    pub(crate) endpoint_slices_held_back: bool,
}

/// What implements Services on the node: kube-proxy in one of the modes the
/// steering promise rests on, or nothing (a cluster whose dataplane replaces
/// kube-proxy, whose agents reach the API server by an address of their own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KubeProxy {
    /// kube-proxy's default mode.
    Iptables,
    /// GA since Kubernetes 1.33, where kube-proxy is going; alpha behind the
    /// `NFTablesProxyMode` feature gate on 1.30, beta from 1.31.
    Nftables,
    /// No kube-proxy at all.
    None,
}

/// The IP families of a workload cluster: of its service CIDRs (the first
/// one's is the `kubernetes` Service's) and of its node's addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stack {
    /// IPv4 only.
    V4,
    /// IPv6 only.
    V6,
    /// Dual-stack, IPv6 first: the `kubernetes` Service is single-stack IPv6.
    DualV6Primary,
}

impl Stack {
    /// `--service-cluster-ip-range`.
    fn service_cidr(self) -> &'static str {
        match self {
            Stack::V4 => "10.96.0.0/12",
            Stack::V6 => "fd00:10:96::/112",
            Stack::DualV6Primary => "fd00:10:96::/112,10.96.0.0/12",
        }
    }

    /// The `kubernetes` Service's cluster IP: the first of the primary range.
    pub(crate) fn service_ip(self) -> &'static str {
        match self {
            Stack::V4 => SERVICE_IP,
            Stack::V6 | Stack::DualV6Primary => SERVICE_IP_V6,
        }
    }

    /// The API server's `--advertise-address`, of the primary family.
    fn apiserver_address(self) -> &'static str {
        match self {
            Stack::V4 => "192.0.2.10",
            Stack::V6 | Stack::DualV6Primary => "2001:db8::10",
        }
    }
}

/// The node up and running with its kube-proxy, the shared ingress in front
/// of the workload API server, and the test's kubelet; the pod and the
/// controller start later, when each test is ready for them.
pub(crate) struct DataPath {
    /// The workload cluster's API server (and controller manager).
    pub(crate) w: Server,
    /// The node, shared with the kubelet's task.
    pub(crate) node: Arc<Mutex<Node>>,
    /// The API server as `host:port`, behind the shared ingress.
    pub(crate) apiserver: String,
    /// The token of the pod and of kube-proxy.
    token: String,
    /// The kubelet's task, running until [`DataPath::stop`].
    kubelet: tokio::task::JoinHandle<()>,
    /// The cluster's IP families.
    pub(crate) stack: Stack,
    /// What implements Services on the node.
    kube_proxy: KubeProxy,
}

impl DataPath {
    /// The node, the workload API server, the shared ingress, kube-proxy
    /// and the kubelet.
    pub(crate) async fn start(workload: Workload) -> DataPath {
        require_data_path_tools();
        let stack = workload.stack;
        let node = Arc::new(Mutex::new(Node::new(stack)));
        let (addresses, ingress, dir) = {
            let n = node.lock().unwrap();
            (n.addresses.clone(), n.ingress.clone(), n.dir.clone())
        };

        let mut extra_sans = vec![API_HOST.to_string()];
        if workload.serves_service_ip {
            extra_sans.extend([stack.service_ip().to_string(), SERVICE_NAME.to_string()]);
        }
        let w = Server::start_real(realkube::Options {
            name: workload.name.into(),
            controller_manager: true,
            held_back_controllers: if workload.endpoint_slices_held_back {
                vec!["endpointslice".into()]
            } else {
                Vec::new()
            },
            endpoint_reconciler: "none".into(),
            extra_sans,
            service_cidr: stack.service_cidr().into(),
            advertise_address: stack.apiserver_address().into(),
            ..realkube::Options::default()
        })
        .await;
        w.check_rejections_of(realkube::CLUSTER_ADMIN_USER);
        let cluster = w.real();
        let addresses: Vec<&str> = addresses.iter().map(String::as_str).collect();
        cluster
            .add_real_node_with_addresses(NODE, &addresses)
            .await
            .unwrap();
        let apiserver = cluster.url().trim_start_matches("https://").to_string();
        fs::write(dir.join("ca.crt"), cluster.ca_pem()).unwrap();

        // The shared ingress on the host, and kube-proxy on the node, which
        // reaches the API through it as a hosted control plane's workers do.
        let token = cluster.cluster_admin_token().to_string();
        let kubeconfig = dir.join("kube-proxy.kubeconfig");
        fs::write(
            &kubeconfig,
            cluster.kubeconfig_for("kube-proxy", &token).replace(
                &format!("https://{apiserver}"),
                &format!("https://{API_HOST}:443"),
            ),
        )
        .unwrap();
        {
            let mut n = node.lock().unwrap();
            n.spawn_haproxy("ingress", false, &ingress_config(&ingress, &apiserver));
            spawn_kube_proxy(&mut n, &kubeconfig, workload.kube_proxy);
        }

        let kubelet = spawn_kubelet(w.client(), node.clone());
        DataPath {
            w,
            node,
            apiserver,
            token,
            kubelet,
            stack,
            kube_proxy: workload.kube_proxy,
        }
    }

    /// The EndpointSlice controller the workload cluster was started
    /// without, running until the value returned is dropped.
    pub(crate) fn start_endpoint_slice_controller(&self) -> realkube::Controllers {
        self.w
            .real()
            .start_controllers(&["endpointslice"])
            .expect("kube-controller-manager with the EndpointSlice controller")
    }

    /// The shared ingress's address, on the host.
    pub(crate) fn ingress(&self) -> String {
        self.node.lock().unwrap().ingress.clone()
    }

    /// The pod on the node starts calling the API. Its calls fail until
    /// something serves the Service; [`calls`] counts only the failures
    /// after the first answer.
    pub(crate) fn start_pod(&self) {
        self.start_pod_calling(&[self.stack.service_ip()]);
    }

    /// [`DataPath::start_pod`], the pod calling by turns the Service IP and
    /// `kubernetes.default.svc`, which the node resolves to it as cluster
    /// DNS would.
    pub(crate) fn start_pod_by_ip_and_name(&self) {
        self.start_pod_calling(&[self.stack.service_ip(), SERVICE_NAME]);
    }

    fn start_pod_calling(&self, targets: &[&str]) {
        let mut n = self.node.lock().unwrap();
        let args = self.pod_args(&n, &[], targets);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        n.spawn("pod", true, &args);
    }

    /// A pod named `name` on the node calling the API where client-go's
    /// in-cluster config goes: `KUBERNETES_SERVICE_HOST/PORT` of `env`
    /// (`NAME=value`), as a manifest's `envFrom` or `valueFrom` gives them.
    pub(crate) fn start_pod_with_env(&self, name: &str, env: &[String]) {
        let mut n = self.node.lock().unwrap();
        let args = self.pod_args(&n, env, &["in-cluster"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        n.spawn(name, true, &args);
    }

    /// One call of the pod's client on the node with `env`, to where its
    /// in-cluster config goes: whether it answered, and what it printed.
    pub(crate) fn call_once_with_env(&self, env: &[String]) -> (bool, String) {
        let n = self.node.lock().unwrap();
        let args = self.pod_args(&n, env, &["--once", "in-cluster"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = n
            .command(true, &args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), printed)
    }

    /// The command line of [`POD_CLIENT`] calling `targets`, with `env`.
    fn pod_args(&self, n: &Node, env: &[String], targets: &[&str]) -> Vec<String> {
        let script = n.dir.join("pod.py");
        fs::write(&script, POD_CLIENT).unwrap();
        let mut args = Vec::new();
        if !env.is_empty() {
            args.push("env".to_string());
            args.extend(env.iter().cloned());
        }
        args.extend([
            "python3".to_string(),
            "-u".to_string(),
            script.display().to_string(),
            n.dir.join("ca.crt").display().to_string(),
            self.token.clone(),
        ]);
        args.extend(targets.iter().map(|t| t.to_string()));
        args
    }

    /// The management cluster with [`CLUSTER`] initialized, its kubeconfig
    /// and CA Secrets pointing at the workload API server, and the
    /// controller running.
    pub(crate) async fn manage(&self) -> (Management, Running) {
        let cluster = self.w.real();
        let m = management(&[]).await;
        initialized_cluster(&m, CLUSTER).await;
        put_secret(
            &m.client,
            &format!("{CLUSTER}-kubeconfig"),
            [("value", self.w.kubeconfig_yaml())],
        )
        .await;
        put_secret(
            &m.client,
            &format!("{CLUSTER}-ca"),
            [
                ("tls.crt", cluster.ca_pem().to_string()),
                ("tls.key", cluster.ca_key_pem().to_string()),
            ],
        )
        .await;
        let running = m.start();
        (m, running)
    }

    /// The end of a test: the kubelet, then the controller, stop; the
    /// workload API server and the node go with `self`.
    pub(crate) async fn stop(self, running: Running) {
        self.kubelet.abort();
        running.stop().await;
        self.programmed_by(self.kube_proxy);
    }

    /// The node's rules for the `kubernetes` Service are `mode`'s: the test
    /// ran on the dataplane it names, not on another one left behind.
    fn programmed_by(&self, mode: KubeProxy) {
        let node = self.node.lock().unwrap();
        let rules = |args: &[&str]| {
            let out = node.command(true, args).output().unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        // nftables mode's own tables (Debian's iptables writes nftables
        // too, in tables of its own: `nat`, `filter`).
        let nft = rules(&["nft", "list", "table", "ip", "kube-proxy"])
            + &rules(&["nft", "list", "table", "ip6", "kube-proxy"]);
        let iptables = rules(&["iptables-save"]) + &rules(&["ip6tables-save"]);
        let (in_nft, in_iptables) = (
            nft.contains("default/kubernetes"),
            iptables.contains("default/kubernetes"),
        );
        let expected = match mode {
            KubeProxy::Iptables => (false, true),
            KubeProxy::Nftables => (true, false),
            KubeProxy::None => (false, false),
        };
        assert_eq!(
            (in_nft, in_iptables),
            expected,
            "the node's rules for default/kubernetes (in nftables, in iptables) with kube-proxy {mode:?}"
        );
    }
}

/// The kubelet's loop, syncing the node with its pods every 250 ms.
fn spawn_kubelet(client: Client, node: Arc<Mutex<Node>>) -> tokio::task::JoinHandle<()> {
    let kubelet = Arc::new(tokio::sync::Mutex::new(Kubelet {
        client,
        node,
        running: BTreeMap::new(),
        seen: BTreeMap::new(),
    }));
    tokio::spawn(async move {
        loop {
            kubelet.lock().await.sync().await;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
}

/// Names of this test run's network objects: unique per process.
fn id() -> String {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    format!(
        "{}{}",
        std::process::id() % 10_000,
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// PATH with the sbin directories, where `ip` and `iptables` live.
fn sbin_path() -> String {
    format!(
        "{}:/usr/sbin:/sbin",
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Run `args` on the host, failing the test if it fails.
fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .env("PATH", sbin_path())
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One node: a network namespace joined to the host by a veth pair. The
/// host side carries the shared ingress.
pub(crate) struct Node {
    /// The network namespace.
    ns: String,
    /// The host's end of the veth pair.
    host_link: String,
    /// The node's InternalIPs, one per family, the primary first.
    addresses: Vec<String>,
    /// The shared ingress's address, on the host side, of the primary family.
    ingress: String,
    /// Where the node's files and its processes' logs are.
    pub(crate) dir: PathBuf,
    /// The processes started on the node (or for it on the host), by name.
    pub(crate) processes: Vec<(String, Child)>,
}

impl Node {
    /// A new node with its namespace, veth pair, routes and hosts file, its
    /// addresses of the families of `stack`.
    fn new(stack: Stack) -> Node {
        let id = id();
        let ns = format!("hcpto{id}");
        let (host_link, node_link) = (format!("hto{id}h"), format!("hto{id}n"));
        // 10.213.<n>.0/30 and 2001:db8:213:<n>::/64 (TEST-NET, documentation
        // prefix), n from the id: never the same as a parallel run's.
        let n: u32 = id.parse::<u32>().unwrap() % 250 + 1;
        let v4 = (format!("10.213.{n}.1"), format!("10.213.{n}.2"), 30);
        let v6 = (
            format!("2001:db8:213:{n:x}::1"),
            format!("2001:db8:213:{n:x}::2"),
            64,
        );
        let families = match stack {
            Stack::V4 => vec![v4],
            Stack::V6 => vec![v6],
            Stack::DualV6Primary => vec![v6, v4],
        };
        let ingress = families[0].0.clone();
        run(&["ip", "netns", "add", &ns]);
        run(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        run(&[
            "ip", "link", "add", &host_link, "type", "veth", "peer", "name", &node_link, "netns",
            &ns,
        ]);
        // No duplicate address detection: an address is usable at once.
        for (host, node, prefix) in &families {
            let (host, node) = (format!("{host}/{prefix}"), format!("{node}/{prefix}"));
            run(&["ip", "addr", "add", &host, "dev", &host_link, "nodad"]);
            run(&[
                "ip", "-n", &ns, "addr", "add", &node, "dev", &node_link, "nodad",
            ]);
        }
        run(&["ip", "link", "set", &host_link, "up"]);
        run(&["ip", "-n", &ns, "link", "set", &node_link, "up"]);
        // The service range is routed off the node, as on a real one: the
        // kube-proxy rules rewrite it before it leaves.
        for (host, _, _) in &families {
            run(&["ip", "-n", &ns, "route", "add", "default", "via", host]);
        }
        // The node resolves the tenant's hosts to the shared ingress, and
        // the `kubernetes` Service's name to its cluster IP, as cluster DNS
        // answers pods.
        let etc = Path::new("/etc/netns").join(&ns);
        fs::create_dir_all(&etc).unwrap();
        fs::write(
            etc.join("hosts"),
            format!(
                "127.0.0.1 localhost\n::1 localhost\n{ingress} {API_HOST}\n{} {SERVICE_NAME} {SERVICE_NAME}.cluster.local\n",
                stack.service_ip()
            ),
        )
        .unwrap();
        let addresses = families.iter().map(|(_, node, _)| node.clone()).collect();
        let dir = std::env::temp_dir().join(format!("hcp-takeover-{id}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Node {
            ns,
            host_link,
            addresses,
            ingress,
            dir,
            processes: Vec::new(),
        }
    }

    /// `args` run in the node's namespace (or on the host), with sbin on PATH.
    pub(crate) fn command(&self, in_node: bool, args: &[&str]) -> Command {
        let mut c = if in_node {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &self.ns]).args(args);
            c
        } else {
            let mut c = Command::new(args[0]);
            c.args(&args[1..]);
            c
        };
        c.env("PATH", sbin_path());
        c
    }

    /// Start `args` in the node's namespace (or on the host), logging to a file.
    pub(crate) fn spawn(&mut self, name: &str, in_node: bool, args: &[&str]) {
        let log = fs::File::create(self.dir.join(format!("{name}.log"))).unwrap();
        let child = self
            .command(in_node, args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        self.processes.push((name.to_string(), child));
    }

    /// HAProxy named `name` with `config` (written to `<name>.cfg` in the
    /// node's directory), in the node's namespace or on the host.
    pub(crate) fn spawn_haproxy(&mut self, name: &str, in_node: bool, config: &str) {
        let cfg = self.dir.join(format!("{name}.cfg"));
        fs::write(&cfg, config).unwrap();
        let cfg = cfg.display().to_string();
        self.spawn(name, in_node, &["haproxy", "-db", "-f", &cfg]);
    }

    /// Stop the process `name`, if it runs.
    fn stop(&mut self, name: &str) {
        if let Some(i) = self.processes.iter().position(|(n, _)| n == name) {
            let (_, mut child) = self.processes.remove(i);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// What the process `name` logged so far.
    pub(crate) fn log(&self, name: &str) -> String {
        fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default()
    }

    /// `curl` inside the node: the proxy's admin port is node-local.
    fn curl(&self, url: &str) -> Option<String> {
        let out = self
            .command(true, &["curl", "-sf", "--max-time", "2", url])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Whether something listens on `address:port` in the node.
    fn listening(&self, address: &str, port: u16) -> bool {
        let probe = format!(
            "import socket; socket.create_connection(('{address}', {port}), timeout=1).close()"
        );
        self.command(true, &["python3", "-c", &probe])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        for (_, child) in &mut self.processes {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = self
            .command(false, &["ip", "link", "del", &self.host_link])
            .status();
        let _ = self
            .command(false, &["ip", "netns", "del", &self.ns])
            .status();
        let _ = fs::remove_dir_all(Path::new("/etc/netns").join(&self.ns));
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// The data-path tests' tools on this machine, or a failure that says how
/// to install them.
fn require_data_path_tools() {
    let missing: Vec<&str> = ["haproxy", "iptables", "nft", "curl", "python3"]
        .into_iter()
        .filter(|b| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {b}")])
                .env("PATH", sbin_path())
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .collect();
    assert!(
        missing.is_empty(),
        "the data-path test needs {missing:?} (apt-get install -y haproxy iptables nftables curl python3)"
    );
}

/// kube-proxy in `mode` on the node, as a kubelet's node runs it,
/// re-syncing every second so a steering change reaches the rules at once.
fn spawn_kube_proxy(n: &mut Node, kubeconfig: &Path, mode: KubeProxy) {
    let mode = match mode {
        KubeProxy::Iptables => "iptables",
        KubeProxy::Nftables => "nftables",
        KubeProxy::None => return,
    };
    let kube_proxy = realkube::bin_dir().join("kube-proxy");
    let kube_proxy = kube_proxy.to_str().unwrap();
    let (kubeconfig, hostname, proxy_mode) = (
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--hostname-override={NODE}"),
        format!("--proxy-mode={mode}"),
    );
    let mut args = vec![
        kube_proxy,
        &kubeconfig,
        &hostname,
        &proxy_mode,
        "--conntrack-max-per-core=0",
        "--conntrack-tcp-timeout-established=0s",
        "--conntrack-tcp-timeout-close-wait=0s",
        "--metrics-bind-address=127.0.0.1:10249",
        "--healthz-bind-address=127.0.0.1:10256",
        // Current releases take these for every mode but IPVS.
        "--iptables-sync-period=1s",
        "--iptables-min-sync-period=0s",
        // Each sync and its length: a lost call's report shows them.
        "--v=2",
    ];
    // Before 1.31 the nftables mode is alpha, off unless its gate is on;
    // once GA the gate is gone and naming it is an error.
    if mode == "nftables" && realnode::nftables_gated(Path::new(kube_proxy)) {
        args.push("--feature-gates=NFTablesProxyMode=true");
    }
    n.spawn("kube-proxy", true, &args);
}

/// Calls so far through the proxy whose admin port is `port` on the node.
fn proxied(node: &Node, port: u16) -> f64 {
    node.curl(&format!("http://127.0.0.1:{port}/metrics"))
        .map(|m| metric_sum(&m, "hcp_proxy_connections_total"))
        .unwrap_or(0.0)
}

/// Sum of every sample of `metric` in a Prometheus text exposition.
fn metric_sum(text: &str, metric: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(metric)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// k0smotron's HAProxy sidecar config: it terminates TLS with a certificate
/// for the `kubernetes` Service and re-originates TLS to the ingress with SNI
/// = apiHost, verifying the cluster CA.
pub(crate) fn haproxy_config(dir: &Path) -> String {
    format!(
        "global\n  maxconn 1000\n\
         defaults\n  timeout connect 5s\n  timeout client 5m\n  timeout server 5m\n\
         frontend kubeapi_front\n    bind :::7443 v4v6 ssl crt {dir}/server.pem\n    mode tcp\n    default_backend kubeapi_back\n\
         backend kubeapi_back\n    mode tcp\n    server kube_api {API_HOST}:443 ssl verify required ca-file {dir}/ca.crt sni str({API_HOST})\n",
        dir = dir.display()
    )
}

/// `address:port`, an IPv6 address in brackets.
pub(crate) fn host_port(address: &str, port: u16) -> String {
    match address.parse::<std::net::IpAddr>() {
        Ok(ip) => std::net::SocketAddr::new(ip, port).to_string(),
        Err(_) => format!("{address}:{port}"),
    }
}

/// The shared ingress: SNI routing, TLS passed through to the tenant API server.
fn ingress_config(listen: &str, apiserver: &str) -> String {
    let listen = host_port(listen, 443);
    format!(
        "global\n  maxconn 1000\n\
         defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 5m\n  timeout server 5m\n\
         frontend shared\n  bind {listen}\n  tcp-request inspect-delay 5s\n  tcp-request content accept if {{ req.ssl_hello_type 1 }}\n  use_backend tenant if {{ req.ssl_sni -i {API_HOST} }}\n\
         backend tenant\n  server api {apiserver}\n"
    )
}

/// A pod calling the API as client-go does: a new connection to the Service
/// IP (no SNI), the serving certificate verified against the cluster CA, a
/// bearer token; several targets (the Service IP, its name) by turns. The
/// target `in-cluster` is where client-go's in-cluster config goes: the host
/// and port of `KUBERNETES_SERVICE_HOST/PORT`, that host also the TLS server
/// name (SNI, and the name the certificate must carry). One line per call:
/// `ok <target>`, or `fail <unix time> <target> <stage> <seconds in it>
/// <why>` (the time places a failure among the test's steps and kube-proxy's
/// log, the stage says whether the SYN, the TLS handshake or the answer was
/// lost). `--once` first: one call, answered or not in the exit code.
const POD_CLIENT: &str = r#"
import os, socket, ssl, sys, time
ca, token, targets = sys.argv[1], sys.argv[2], sys.argv[3:]
once = targets[0] == "--once"
if once:
    targets = targets[1:]
ctx = ssl.create_default_context(cafile=ca)
turn = 0
while True:
    target = targets[turn % len(targets)]
    turn += 1
    if target == "in-cluster":
        ip, port = os.environ["KUBERNETES_SERVICE_HOST"], int(os.environ["KUBERNETES_SERVICE_PORT"])
    else:
        ip, port = target, 443
    ok = False
    stage, began = "connect", time.time()
    try:
        # A SYN that finds no listener is lost, not refused (the address is
        # only bound once the proxy runs). One retransmission (after 1 s) is
        # a delay client-go's 30 s dial never notices; a connect that needs
        # a second one (3 s) is a lost call, so a path down for more than a
        # second or so fails the test.
        with socket.create_connection((ip, port), timeout=2.5) as raw:
            raw.settimeout(10)
            stage, began = "tls", time.time()
            with ctx.wrap_socket(raw, server_hostname=ip) as tls:
                stage, began = "answer", time.time()
                tls.sendall(("GET /version HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n" % (ip, token)).encode())
                answer = b""
                while True:
                    chunk = tls.recv(65536)
                    if not chunk:
                        break
                    answer += chunk
        status = answer.split(b"\r\n", 1)[0]
        if b" 200 " in status and b"gitVersion" in answer:
            ok = True
            print("ok", target, flush=True)
        else:
            print("fail", "%.3f" % time.time(), target, stage, "%.3f" % (time.time() - began), status.decode(errors="replace"), flush=True)
    except Exception as e:
        print("fail", "%.3f" % time.time(), target, stage, "%.3f" % (time.time() - began), repr(e), flush=True)
    if once:
        sys.exit(0 if ok else 1)
    time.sleep(0.05)
"#;

/// The pod's calls so far: (answered, failures since the first answer; the
/// path is up only once HAProxy and kube-proxy are).
pub(crate) fn calls(node: &Node) -> (usize, Vec<String>) {
    let log = node.log("pod");
    let answered = |l: &&str| l.starts_with("ok ");
    let ok = log.lines().filter(answered).count();
    let failed = log
        .lines()
        .skip_while(|l| !answered(l))
        .filter(|l| l.starts_with("fail"))
        .map(String::from)
        .collect();
    (ok, failed)
}

/// Wait (60 s at most) until the pod has answered `n` more calls.
pub(crate) async fn more_calls(node: &Arc<Mutex<Node>>, what: &str, n: usize) {
    let from = calls(&node.lock().unwrap()).0;
    until(node, 60, what, async || {
        calls(&node.lock().unwrap()).0 >= from + n
    })
    .await;
}

/// Wait (60 s at most) until `n` more calls have gone through the proxy
/// whose admin port is `port` on the node, as its metrics count them.
pub(crate) async fn more_calls_through(node: &Arc<Mutex<Node>>, port: u16, what: &str, n: f64) {
    let from = proxied(&node.lock().unwrap(), port);
    until(node, 60, what, async || {
        proxied(&node.lock().unwrap(), port) >= from + n
    })
    .await;
}

/// The kubelet of the one node: binds the DaemonSets' pods to it, starts
/// their processes, reports them Ready once they answer, and removes them
/// when deleted.
struct Kubelet {
    client: Client,
    node: Arc<Mutex<Node>>,
    /// Pod uid -> process name.
    running: BTreeMap<String, String>,
    /// Pod uid -> when it was first seen on the node: its process starts
    /// [`IMAGE_PULL`] later, as a kubelet pulls an image first.
    seen: BTreeMap<String, tokio::time::Instant>,
}

/// How long the kubelet takes to start a pod's process: long enough that a
/// controller steering to a proxy before it is ready loses calls.
const IMAGE_PULL: Duration = Duration::from_secs(3);

impl Kubelet {
    /// One pass over the pods: bind, start, report Ready, remove.
    async fn sync(&mut self) {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let Ok(list) = pods.list(&ListParams::default()).await else {
            return;
        };
        for pod in list.items {
            let (ns, name, uid) = (
                pod.namespace().unwrap_or_default(),
                pod.name_any(),
                pod.uid().unwrap_or_default(),
            );
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
            if pod.metadata.deletion_timestamp.is_some() {
                if let Some(process) = self.running.remove(&uid) {
                    self.node.lock().unwrap().stop(&process);
                }
                let _ = api
                    .delete(&name, &DeleteParams::default().grace_period(0))
                    .await;
                continue;
            }
            let spec = pod.spec.clone().unwrap_or_default();
            if spec.node_name.is_none() {
                let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                    "target": {"kind": "Node", "name": NODE}});
                let _ = api
                    .create_subresource::<_, serde_json::Value>(
                        "binding",
                        &name,
                        &PostParams::default(),
                        &binding,
                    )
                    .await;
                continue;
            }
            let since = *self
                .seen
                .entry(uid.clone())
                .or_insert_with(tokio::time::Instant::now);
            if !self.running.contains_key(&uid) && since.elapsed() >= IMAGE_PULL {
                let labels = pod.labels();
                let process = if labels.get("app").map(String::as_str) == Some("k0smotron-haproxy")
                {
                    self.start_haproxy(&uid)
                } else if selector_labels()
                    .iter()
                    .all(|(k, v)| labels.get(k) == Some(v))
                {
                    self.start_proxy(&uid, &ns).await
                } else {
                    None
                };
                if let Some(process) = process {
                    self.running.insert(uid.clone(), process);
                }
            }
            let Some(process) = self.running.get(&uid) else {
                continue;
            };
            let ready = {
                let node = self.node.lock().unwrap();
                if process.starts_with("haproxy") {
                    node.listening(&node.addresses[0], 7443)
                } else {
                    // Each steering mode's proxy has its own admin port.
                    let port = if ns == SERVICE_STEERING_NAMESPACE {
                        SERVICE_STEERING_ADMIN_PORT
                    } else {
                        ADMIN_PORT
                    };
                    node.curl(&format!("http://127.0.0.1:{port}/readyz"))
                        .is_some()
                }
            };
            let was_ready = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            if ready && !was_ready {
                let addresses = self.node.lock().unwrap().addresses.clone();
                let (address, ips) = (
                    &addresses[0],
                    addresses
                        .iter()
                        .map(|a| json!({"ip": a}))
                        .collect::<Vec<_>>(),
                );
                let now = rfc3339_now();
                let status = json!({"status": {"phase": "Running", "podIP": address, "podIPs": ips,
                    "hostIP": address, "hostIPs": ips, "startTime": now,
                    "conditions": [
                        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                        {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                        {"type": "Ready", "status": "True", "lastTransitionTime": now}]}});
                let _ = api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                    .await;
            }
        }
    }

    /// k0smotron's HAProxy, with the serving certificate the take-over test
    /// wrote to `server.pem` in the node's directory.
    fn start_haproxy(&mut self, uid: &str) -> Option<String> {
        let mut node = self.node.lock().unwrap();
        let name = format!("haproxy-{uid}");
        let config = haproxy_config(&node.dir);
        node.spawn_haproxy(&name, true, &config);
        Some(name)
    }

    /// Our proxy, from the ConfigMap and Secret the controller wrote next
    /// to its pod, mounted under the node's directory.
    async fn start_proxy(&mut self, uid: &str, namespace: &str) -> Option<String> {
        let config: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let config = config.get_opt(NAME).await.ok()??;
        let secret = secrets.get_opt(NAME).await.ok()??;
        let mut node = self.node.lock().unwrap();
        let root = node.dir.join(format!("proxy-{uid}"));
        let mount = |path: &str| root.join(path.trim_start_matches('/'));
        fs::create_dir_all(mount(CONFIG_DIR)).unwrap();
        fs::create_dir_all(mount(TLS_DIR)).unwrap();
        for (key, value) in config.data.unwrap_or_default() {
            let text = value.replace(
                "/etc/hcp-ingress",
                root.join("etc/hcp-ingress").to_str().unwrap(),
            );
            fs::write(mount(CONFIG_DIR).join(key), text).unwrap();
        }
        for (key, value) in secret.data.unwrap_or_default() {
            fs::write(mount(TLS_DIR).join(key), value.0).unwrap();
        }
        let name = format!("proxy-{uid}");
        let cfg = mount(CONFIG_DIR).join(CONFIG_FILE).display().to_string();
        node.spawn(
            &name,
            true,
            &[crate::proxy_bin::proxy_bin(), "--config", &cfg],
        );
        Some(name)
    }
}

/// Now, as Kubernetes writes times in a status.
fn rfc3339_now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap()
        .to_string()
}

/// Poll until `check` holds, failing with `what` and the node's logs after `secs`.
pub(crate) async fn until(
    node: &Arc<Mutex<Node>>,
    secs: u64,
    what: &str,
    mut check: impl AsyncFnMut() -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while !check().await {
        if tokio::time::Instant::now() > deadline {
            let node = node.lock().unwrap();
            let logs: Vec<String> = node
                .processes
                .iter()
                .map(|(n, _)| format!("--- {n}\n{}", tail(&node.log(n), 15)))
                .collect();
            panic!("timed out waiting for {what}\n{}", logs.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The last `lines` lines of `text`.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The steps of a data-path test, each from when it began, to place a
/// lost call among them.
pub(crate) struct Steps {
    /// Each step's name and when it began (Unix seconds), in order.
    began: Vec<(String, f64)>,
}

impl Steps {
    /// The first step begins now.
    pub(crate) fn first(name: &str) -> Steps {
        Steps {
            began: vec![(name.to_string(), unix_now())],
        }
    }

    /// The step `name` begins now, the one before has ended.
    pub(crate) fn next(&mut self, name: &str) {
        self.began.push((name.to_string(), unix_now()));
    }

    /// Each step with how long it took (the last one until now):
    /// "name 8.9s, ...".
    pub(crate) fn summary(&self) -> String {
        let ends = self.began.iter().skip(1).map(|(_, t)| *t);
        self.began
            .iter()
            .zip(ends.chain([unix_now()]))
            .map(|((name, from), to)| format!("{name} {:.1}s", to - from))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The step that was running at `t` (Unix seconds).
    fn at(&self, t: f64) -> &str {
        self.began
            .iter()
            .rev()
            .find(|(_, from)| *from <= t)
            .map_or("before the first step", |(name, _)| name)
    }
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The lost calls (lines of [`calls`]), counted; the first and the last
/// placed in the step they fell in, with kube-proxy's lines of the ten
/// seconds before them (at `--v=2` they include each sync and its length),
/// so a failure says whether the rules lagged a change.
pub(crate) fn lost_calls(node: &Node, failed: &[String], steps: &Steps) -> String {
    let kube_proxy = node.log("kube-proxy");
    let place = |line: &String| {
        let Some(t) = line
            .split_whitespace()
            .nth(1)
            .and_then(|t| t.parse::<f64>().ok())
        else {
            return line.clone();
        };
        let near: Vec<&str> = kube_proxy
            .lines()
            .filter(|l| klog_seconds(l).is_some_and(|s| (t - 10.0..=t + 1.0).contains(&s)))
            .collect();
        format!(
            "{line:?} in step {:?}; kube-proxy's lines of the 10 s before it:\n{}",
            steps.at(t),
            tail(&near.join("\n"), 40)
        )
    };
    let mut report = format!("{} calls lost (steps: {})", failed.len(), steps.summary());
    if let Some(first) = failed.first() {
        report += &format!("\nthe first: {}", place(first));
    }
    if let Some(last) = failed.last().filter(|_| failed.len() > 1) {
        report += &format!("\nthe last: {}", place(last));
    }
    report
}

/// A klog line's time in Unix seconds: klog writes "I1129 07:39:39.955591"
/// in the local time zone and without the year, which is this year's.
fn klog_seconds(line: &str) -> Option<f64> {
    let head = line.get(1..21)?;
    let (month, day) = (head.get(0..2)?.parse().ok()?, head.get(2..4)?.parse().ok()?);
    let time: jiff::civil::Time = head.get(5..)?.parse().ok()?;
    let tz = jiff::tz::TimeZone::system();
    let year = jiff::Timestamp::now().to_zoned(tz.clone()).year();
    let at = jiff::civil::date(year, month, day)
        .to_datetime(time)
        .to_zoned(tz)
        .ok()?
        .timestamp();
    Some(at.as_nanosecond() as f64 / 1e9)
}
