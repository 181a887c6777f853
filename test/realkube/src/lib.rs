//! `realkube`: real Kubernetes control planes for tests, on loopback.
//!
//! Each [`Cluster`] is its own etcd and kube-apiserver (RBAC on, bearer-token
//! authentication, an audit log of every request), optionally with
//! kube-controller-manager (garbage collection, DaemonSets, endpoints,
//! ServiceAccounts), kube-scheduler and kwok (simulated nodes). The binaries
//! come from `hack/kube/build.sh`, which builds them once per version from
//! the Go module proxy into a cache outside the checkout; when they are
//! missing a test fails and says how to build them: it never falls back to a
//! fake.
//!
//! ```no_run
//! # async fn demo() {
//! let cluster = realkube::Cluster::start(realkube::Options::default()).await.unwrap();
//! let client = cluster.admin_client();
//! # let _ = client;
//! # }
//! ```
#![forbid(unsafe_code)]

mod audit;
mod pki;
mod process;

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    time::Duration,
};

use base64::Engine;
use kube::config::{KubeConfigOptions, Kubeconfig};

pub use audit::AuditRecord;
use process::Supervised;

/// Why a control plane did not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A binary is not built.
    #[error(
        "{0} is not built: run `bash hack/kube/build.sh` (builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok from the Go module proxy into ~/.cache/hcp-ingress/kube; HCP_KUBE_VERSION=... for another release), or set HCP_KUBE_BIN (HCP_KUBE_BIN_MANAGEMENT, HCP_KUBE_BIN_WORKLOAD for one role) to a folder that holds them"
    )]
    Missing(PathBuf),
    /// A file of the control plane could not be written.
    #[error("failed to write {0}: {1}")]
    Io(PathBuf, std::io::Error),
    /// A process did not start or did not become ready.
    #[error("{what} did not become ready within {secs} s; its log ends with:\n{log}")]
    NotReady {
        /// Which process.
        what: String,
        /// How long we waited.
        secs: u64,
        /// The last lines of its log.
        log: String,
    },
    /// Certificates could not be generated.
    #[error("failed to generate the test PKI: {0}")]
    Pki(#[from] rcgen::Error),
    /// A kube client could not be built.
    #[error("failed to build a client: {0}")]
    Client(String),
}

/// Which side of hcp-ingress a control plane stands for: the version matrix
/// runs each on its own Kubernetes release (see [`bin_dir_for`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Role {
    /// A management cluster: where the controller, Cluster API and the
    /// shared ingress run (binaries from `HCP_KUBE_BIN_MANAGEMENT`).
    Management,
    /// A workload cluster: a tenant's API server and what its nodes run
    /// (kube-proxy), binaries from `HCP_KUBE_BIN_WORKLOAD`. The default: a
    /// test's API server is a tenant's unless it says it is the management
    /// cluster.
    #[default]
    Workload,
}

/// What to run besides etcd and kube-apiserver.
#[derive(Debug, Clone)]
pub struct Options {
    /// A name for logs and the kubeconfig.
    pub name: String,
    /// Management or workload cluster: which binaries run it.
    pub role: Role,
    /// kube-controller-manager (garbage collector, DaemonSet, endpoint and
    /// ServiceAccount controllers).
    pub controller_manager: bool,
    /// Controllers of kube-controller-manager left out (`endpointslice`,
    /// say), to hold a step back for as long as a test needs: it starts
    /// them with [`Cluster::start_controllers`].
    pub held_back_controllers: Vec<String>,
    /// kube-scheduler and kwok with `nodes` simulated nodes (implies the
    /// controller manager).
    pub scheduler: bool,
    /// Simulated nodes when `scheduler` is on.
    pub nodes: usize,
    /// Real kubelets join this cluster (test/realnode): the Node
    /// authorizer and the NodeRestriction admission plugin are on, the API
    /// server presents a client certificate of the cluster CA to kubelets
    /// (logs, exec, port-forward), and
    /// `scheduler` starts kube-scheduler without the simulator, which
    /// would otherwise claim every Node.
    pub real_nodes: bool,
    /// `--endpoint-reconciler-type`: `lease` (the default of kube-apiserver)
    /// or `none`, as hosted control planes run it for steering.
    pub endpoint_reconciler: String,
    /// Extra admission plugins (`--enable-admission-plugins`).
    pub admission_plugins: Vec<String>,
    /// The address the API server advertises in `default/kubernetes`.
    pub advertise_address: String,
    /// More DNS names on the serving certificate (a tenant's `apiHost`, for
    /// tests that reach the API server through an SNI-routing ingress).
    pub extra_sans: Vec<String>,
    /// `--service-cluster-ip-range`: one CIDR, or two of different families
    /// for a dual-stack cluster; the first one's family is the family of the
    /// `kubernetes` Service (`10.96.0.0/12`: IPv4).
    pub service_cidr: String,
    /// More kube-apiserver flags, after the others (an
    /// `--egress-selector-config-file` that sends the traffic to nodes
    /// through a konnectivity server, say).
    pub apiserver_args: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            name: "cluster".into(),
            role: Role::default(),
            controller_manager: false,
            held_back_controllers: Vec::new(),
            scheduler: false,
            nodes: 0,
            real_nodes: false,
            endpoint_reconciler: "lease".into(),
            admission_plugins: Vec::new(),
            advertise_address: "192.0.2.10".into(),
            extra_sans: Vec::new(),
            service_cidr: "10.96.0.0/12".into(),
            apiserver_args: Vec::new(),
        }
    }
}

/// A running control plane; every process stops when it is dropped.
pub struct Cluster {
    dir: tempfile::TempDir,
    url: String,
    ca_pem: String,
    ca_key_pem: String,
    admin_token: String,
    cluster_admin_token: String,
    // Stopped in reverse order of start on drop.
    processes: Vec<Supervised>,
    audit_path: PathBuf,
    name: String,
    admin: Option<kube::Client>,
    bin: PathBuf,
    /// kube-controller-manager's arguments but `--controllers`, when it runs.
    controller_manager_args: Vec<String>,
}

/// A kube-controller-manager running some controllers only, beside the
/// cluster's own (see [`Cluster::start_controllers`]); stopped when dropped.
pub struct Controllers {
    _running: Supervised,
}

/// The admin user of the test itself (`system:masters`).
pub const ADMIN_USER: &str = "realkube-admin";
/// A second admin user, for the kubeconfig handed to the program under test
/// (as CAPI's `<cluster>-kubeconfig`): its requests stay apart in the audit log.
pub const CLUSTER_ADMIN_USER: &str = "cluster-admin";

/// Where a workload cluster's binaries are, kube-proxy of its nodes
/// included: [`bin_dir_for`]`(Role::Workload)`.
pub fn bin_dir() -> PathBuf {
    bin_dir_for(Role::Workload)
}

/// Where the binaries of a `role` cluster are: `HCP_KUBE_BIN_MANAGEMENT` or
/// `HCP_KUBE_BIN_WORKLOAD`, else `HCP_KUBE_BIN`, else what
/// `hack/kube/build.sh --print-bin-dir` says (the release of
/// `hack/kube/versions.env`, or of `HCP_KUBE_VERSION`).
pub fn bin_dir_for(role: Role) -> PathBuf {
    let own = match role {
        Role::Management => "HCP_KUBE_BIN_MANAGEMENT",
        Role::Workload => "HCP_KUBE_BIN_WORKLOAD",
    };
    for var in [own, "HCP_KUBE_BIN"] {
        if let Some(dir) = std::env::var_os(var).filter(|d| !d.is_empty()) {
            return PathBuf::from(dir);
        }
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack/kube/build.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg("--print-bin-dir")
        .output()
        .expect("bash runs hack/kube/build.sh");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

fn binary(bin: &Path, name: &str) -> Result<PathBuf, Error> {
    let path = bin.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::Missing(path))
    }
}

/// A free port for a process that binds it a moment later (on any address).
///
/// Picked below the kernel's ephemeral range (`ip_local_port_range`,
/// 32768-60999 by default), never from it: the local ports of outgoing
/// connections come from that range, and on a busy machine one of them can
/// take a port picked there before the process binds it ("Address already
/// in use"). Each call moves a per-process cursor that starts at an offset
/// of the process id, so parallel tests and test processes spread out.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FLOOR: u32 = 10_000;
    static CURSOR: AtomicU32 = AtomicU32::new(0);
    let ceiling = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .filter(|low| *low > FLOOR + 1_000)
        .unwrap_or(32_768);
    let span = ceiling - FLOOR;
    let start = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let step = CURSOR.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(FLOOR + start.wrapping_add(step) % span).expect("below 65536");
        if TcpListener::bind(("0.0.0.0", port)).is_ok() {
            return port;
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn write(path: &Path, text: &str) -> Result<(), Error> {
    std::fs::write(path, text).map_err(|e| Error::Io(path.to_path_buf(), e))
}

impl Cluster {
    /// Starts etcd and kube-apiserver (and what `opts` asks for), waits until
    /// the API server is ready and, with the controller manager, until the
    /// `default` ServiceAccount exists.
    pub async fn start(opts: Options) -> Result<Cluster, Error> {
        // A port is free when chosen and bound by etcd or kube-apiserver a
        // moment later: a test starting its own servers in parallel can take
        // it in between. Such a start is started again on new ports.
        let mut attempt = 1;
        loop {
            match Self::start_once(opts.clone()).await {
                Err(Error::NotReady { log, .. })
                    if attempt < 3 && log.contains("address already in use") =>
                {
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    async fn start_once(opts: Options) -> Result<Cluster, Error> {
        let bin = bin_dir_for(opts.role);
        let etcd_bin = binary(&bin, "etcd")?;
        let apiserver_bin = binary(&bin, "kube-apiserver")?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("realkube-{}-", opts.name))
            .tempdir()
            .map_err(|e| Error::Io(std::env::temp_dir(), e))?;
        let path = |name: &str| dir.path().join(name);

        let pki = pki::generate(&opts.extra_sans)?;
        write(&path("ca.crt"), &pki.ca_pem)?;
        write(&path("apiserver.crt"), &pki.serving_cert_pem)?;
        write(&path("apiserver.key"), &pki.serving_key_pem)?;
        write(&path("sa.key"), &pki.service_account_key_pem)?;
        write(&path("sa.pub"), &pki.service_account_public_pem)?;
        let admin_token = pki.admin_token.clone();
        let cluster_admin_token = format!("{admin_token}-cluster-admin");
        write(
            &path("tokens.csv"),
            &format!(
                "{admin_token},{ADMIN_USER},{ADMIN_USER},\"system:masters\"\n{cluster_admin_token},{CLUSTER_ADMIN_USER},{CLUSTER_ADMIN_USER},\"system:masters\"\n"
            ),
        )?;
        write(&path("audit-policy.yaml"), audit::POLICY)?;

        let mut processes = Vec::new();
        let etcd_port = free_port();
        let peer_port = free_port();
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        processes.push(Supervised::spawn(
            "etcd",
            &etcd_bin,
            &[
                "--name=default".into(),
                format!("--data-dir={}", path("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=default={peer_url}"),
                "--unsafe-no-fsync=true".into(),
                "--log-level=error".into(),
                "--quota-backend-bytes=2147483648".into(),
            ],
            dir.path(),
        )?);

        let port = free_port();
        let url = format!("https://127.0.0.1:{port}");
        let audit_path = path("audit.log");
        let mut plugins = vec!["NamespaceLifecycle".to_string()];
        plugins.extend(opts.admission_plugins.iter().cloned());
        let authorization = if opts.real_nodes {
            plugins.push("NodeRestriction".into());
            "Node,RBAC"
        } else {
            "RBAC"
        };
        let mut extra = Vec::new();
        if opts.real_nodes {
            // What the API server presents to kubelets (logs, exec,
            // port-forward), as kubeadm's apiserver-kubelet-client: the
            // kubelets of test/realnode authenticate clients by the cluster
            // CA.
            write(&path("kubelet-client.crt"), &pki.kubelet_client_cert_pem)?;
            write(&path("kubelet-client.key"), &pki.kubelet_client_key_pem)?;
            extra.push(format!(
                "--kubelet-client-certificate={}",
                path("kubelet-client.crt").display()
            ));
            extra.push(format!(
                "--kubelet-client-key={}",
                path("kubelet-client.key").display()
            ));
        }
        extra.extend(opts.apiserver_args.iter().cloned());
        let mut apiserver_args = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--advertise-address={}", opts.advertise_address),
            format!("--tls-cert-file={}", path("apiserver.crt").display()),
            format!("--tls-private-key-file={}", path("apiserver.key").display()),
            format!("--client-ca-file={}", path("ca.crt").display()),
            format!("--token-auth-file={}", path("tokens.csv").display()),
            format!("--authorization-mode={authorization}"),
            "--anonymous-auth=false".into(),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            format!("--service-account-key-file={}", path("sa.pub").display()),
            format!(
                "--service-account-signing-key-file={}",
                path("sa.key").display()
            ),
            format!("--service-cluster-ip-range={}", opts.service_cidr),
            format!("--endpoint-reconciler-type={}", opts.endpoint_reconciler),
            format!("--enable-admission-plugins={}", plugins.join(",")),
            "--allow-privileged=true".into(),
            format!(
                "--audit-policy-file={}",
                path("audit-policy.yaml").display()
            ),
            format!("--audit-log-path={}", audit_path.display()),
            "--audit-log-format=json".into(),
            "--audit-log-mode=blocking".into(),
            "--profiling=false".into(),
            "--enable-priority-and-fairness=false".into(),
            format!("--cert-dir={}", path("certs").display()),
            "--v=0".into(),
        ];
        apiserver_args.extend(extra);
        processes.push(Supervised::spawn(
            "kube-apiserver",
            &apiserver_bin,
            &apiserver_args,
            dir.path(),
        )?);

        let mut cluster = Cluster {
            url,
            ca_pem: pki.ca_pem,
            ca_key_pem: pki.ca_key_pem,
            admin_token,
            cluster_admin_token,
            processes,
            audit_path,
            name: opts.name.clone(),
            dir,
            admin: None,
            bin,
            controller_manager_args: Vec::new(),
        };
        cluster.admin =
            Some(client_from(&cluster.kubeconfig_for(ADMIN_USER, &cluster.admin_token)).await?);
        cluster.wait_ready().await?;

        let kubeconfig = cluster.dir.path().join("admin.kubeconfig");
        write(
            &kubeconfig,
            &cluster.kubeconfig_for(ADMIN_USER, &cluster.admin_token),
        )?;
        let kubeconfig_flag = format!("--kubeconfig={}", kubeconfig.display());
        if opts.controller_manager || opts.scheduler {
            let kcm = binary(&cluster.bin, "kube-controller-manager")?;
            let sa_key = format!(
                "--service-account-private-key-file={}",
                cluster.dir.path().join("sa.key").display()
            );
            let root_ca = format!(
                "--root-ca-file={}",
                cluster.dir.path().join("ca.crt").display()
            );
            cluster.controller_manager_args = vec![
                kubeconfig_flag.clone(),
                sa_key,
                root_ca,
                "--leader-elect=false".into(),
                "--use-service-account-credentials=false".into(),
                "--secure-port=0".into(),
                // Pods of simulated nodes are never evicted for a missed heartbeat.
                "--node-monitor-grace-period=1h".into(),
                "--concurrent-gc-syncs=5".into(),
                "--v=0".into(),
            ];
            // No node IPAM: simulated nodes need no pod CIDRs.
            let left_out: String = ["nodeipam"]
                .into_iter()
                .chain(opts.held_back_controllers.iter().map(String::as_str))
                .map(|c| format!(",-{c}"))
                .collect();
            let mut args = cluster.controller_manager_args.clone();
            args.push(format!("--controllers=*{left_out}"));
            let p = Supervised::spawn("kube-controller-manager", &kcm, &args, cluster.dir.path())?;
            cluster.processes.push(p);
        }
        if opts.scheduler {
            let scheduler = binary(&cluster.bin, "kube-scheduler")?;
            let p = Supervised::spawn(
                "kube-scheduler",
                &scheduler,
                &[
                    kubeconfig_flag.clone(),
                    "--leader-elect=false".into(),
                    "--secure-port=0".into(),
                    "--v=0".into(),
                ],
                cluster.dir.path(),
            )?;
            cluster.processes.push(p);
        }
        if opts.scheduler && !opts.real_nodes {
            let kwok = binary(&cluster.bin, "kwok")?;
            let p = Supervised::spawn(
                "kwok",
                &kwok,
                &[
                    kubeconfig_flag,
                    format!(
                        "--config={}",
                        binary(&cluster.bin, "kwok-stages.yaml")?.display()
                    ),
                    "--manage-all-nodes=true".into(),
                    "--cidr=10.244.0.1/16".into(),
                    "--node-ip=10.0.0.1".into(),
                    "--server-address=127.0.0.1:0".into(),
                ],
                cluster.dir.path(),
            )?;
            cluster.processes.push(p);
            for i in 0..opts.nodes {
                cluster.add_node(&format!("node-{i}")).await?;
            }
        }
        if opts.controller_manager || opts.scheduler {
            cluster.wait_default_service_account().await?;
        }
        Ok(cluster)
    }

    async fn wait_ready(&self) -> Result<(), Error> {
        let client = self.admin_client();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
        loop {
            let req = http_get("/readyz");
            if let Ok(text) = client.request_text(req).await
                && text.trim() == "ok"
            {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline || self.processes.iter().any(|p| p.exited()) {
                return Err(self.not_ready("kube-apiserver", 180));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn wait_default_service_account(&self) -> Result<(), Error> {
        let api: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> =
            kube::Api::namespaced(self.admin_client(), "default");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(Some(_)) = api.get_opt("default").await {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline || self.processes.iter().any(|p| p.exited()) {
                return Err(self.not_ready("kube-controller-manager", 120));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn not_ready(&self, what: &str, secs: u64) -> Error {
        // A process that ended is the likelier culprit than the one waited for.
        let culprit = self
            .processes
            .iter()
            .find(|p| p.exited())
            .or_else(|| self.processes.iter().find(|p| p.name == what));
        let log = culprit
            .map(|p| format!("[{}]\n{}", p.name, p.log_tail(30)))
            .unwrap_or_default();
        Error::NotReady {
            what: format!("{what} of {}", self.name),
            secs,
            log,
        }
    }

    /// Registers a simulated node `name` (kwok keeps it Ready and runs its pods).
    pub async fn add_node(&self, name: &str) -> Result<(), Error> {
        self.create_node(serde_json::json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"},
                         "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                       "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"}}
        }))
        .await
    }

    /// Registers a Ready node `name` with `address` as its InternalIP, that
    /// no simulator manages: the test runs its pods itself (see the data-path
    /// tests, which start real processes in a network namespace for them).
    pub async fn add_real_node(&self, name: &str, address: &str) -> Result<(), Error> {
        self.add_real_node_with_addresses(name, &[address]).await
    }

    /// [`Cluster::add_real_node`] with one InternalIP per family, the
    /// primary first (a dual-stack node's kube-proxy takes its primary
    /// family from the first).
    pub async fn add_real_node_with_addresses(
        &self,
        name: &str,
        addresses: &[&str],
    ) -> Result<(), Error> {
        let mut listed: Vec<serde_json::Value> = addresses
            .iter()
            .map(|a| serde_json::json!({"type": "InternalIP", "address": a}))
            .collect();
        listed.push(serde_json::json!({"type": "Hostname", "address": name}));
        self.create_node(serde_json::json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}},
            "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"},
                       "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110"},
                       "addresses": listed,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "run by the test"}]}
        }))
        .await
    }

    async fn create_node(&self, value: serde_json::Value) -> Result<(), Error> {
        let node: k8s_openapi::api::core::v1::Node =
            serde_json::from_value(value).expect("a valid Node");
        let name = node.metadata.name.clone().unwrap_or_default();
        let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(self.admin_client());
        api.create(&Default::default(), &node)
            .await
            .map_err(|e| Error::Client(format!("create Node {name}: {e}")))?;
        Ok(())
    }

    /// The folder of the binaries this control plane runs (see [`bin_dir_for`]).
    pub fn bin_dir(&self) -> &Path {
        &self.bin
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The CA (PEM) that signed the API server's serving certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The CA's private key (PEM): what CAPI keeps in `<cluster>-ca`, so a
    /// test can hand the controller the very CA this API server trusts.
    pub fn ca_key_pem(&self) -> &str {
        &self.ca_key_pem
    }

    /// The admin token of [`CLUSTER_ADMIN_USER`] (what `<cluster>-kubeconfig` carries).
    pub fn cluster_admin_token(&self) -> &str {
        &self.cluster_admin_token
    }

    /// A kubeconfig of [`CLUSTER_ADMIN_USER`] (`system:masters`), as CAPI
    /// writes `<cluster>-kubeconfig`.
    pub fn kubeconfig_yaml(&self) -> String {
        self.kubeconfig_for(CLUSTER_ADMIN_USER, &self.cluster_admin_token)
    }

    /// A kubeconfig that authenticates with `token`.
    pub fn kubeconfig_for(&self, user: &str, token: &str) -> String {
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        let name = &self.name;
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: {name}
  cluster:
    server: {url}
    certificate-authority-data: {ca}
contexts:
- name: {name}
  context:
    cluster: {name}
    user: {user}
    namespace: default
current-context: {name}
users:
- name: {user}
  user:
    token: {token}
",
            url = self.url
        )
    }

    /// A client for the admin user.
    pub fn admin_client(&self) -> kube::Client {
        self.admin
            .clone()
            .expect("the admin client is built at start")
    }

    /// A client that authenticates with `token` (e.g. from a TokenRequest).
    pub async fn client_with_token(&self, token: &str) -> kube::Client {
        client_from(&self.kubeconfig_for("token-user", token))
            .await
            .expect("a token client for a local API server")
    }

    /// A one-hour token of ServiceAccount `namespace/name` (TokenRequest).
    pub async fn service_account_token(&self, namespace: &str, name: &str) -> String {
        let api: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> =
            kube::Api::namespaced(self.admin_client(), namespace);
        let request: k8s_openapi::api::authentication::v1::TokenRequest =
            serde_json::from_value(serde_json::json!({
                "spec": {"audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 3600}
            }))
            .expect("a valid TokenRequest");
        let response = api
            .create_token_request(name, &Default::default(), &request)
            .await
            .unwrap_or_else(|e| panic!("TokenRequest for {namespace}/{name}: {e}"));
        response.status.expect("a token in the status").token
    }

    /// Every request the API server finished so far, from its audit log.
    pub fn request_log(&self) -> Vec<AuditRecord> {
        audit::read(&self.audit_path)
    }

    /// Requests made by `user` (e.g. `system:serviceaccount:ns:name`).
    pub fn requests_by(&self, user: &str) -> Vec<AuditRecord> {
        self.request_log()
            .into_iter()
            .filter(|r| r.user == user)
            .collect()
    }

    /// Requests of `user` this API server rejected, as `verb uri status:
    /// message`: every 4xx but a 404 on a read or delete (looking is how a
    /// client learns something is absent), a 409 (optimistic concurrency: a
    /// lost race is retried) and a 429 (come back later); and a 500 to a
    /// write, which is how a server-side apply of a field the release does
    /// not know is refused ("field not declared in schema", 1.30 to 1.37).
    pub fn rejections_of(&self, user: &str) -> Vec<String> {
        self.requests_by(user)
            .into_iter()
            .filter(|r| {
                ((400..500).contains(&r.status) && !matches!(r.status, 409 | 429))
                    || (r.status == 500 && r.is_write())
            })
            .filter(|r| {
                !(r.status == 404
                    && matches!(r.verb.as_str(), "get" | "list" | "delete" | "discovery"))
            })
            // A status written as the object is deleted (clusterctl move, a
            // user) finds it gone: the reconcile lost a race, nothing
            // refused it, and a status patch never recreates the object.
            .filter(|r| !(r.status == 404 && r.verb == "patch" && r.path.ends_with("/status")))
            .map(|r| format!("{} {} {}: {}", r.verb, r.uri, r.status, r.message))
            .collect()
    }

    /// The folder that holds the control plane's files and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A second kube-controller-manager that runs `controllers` only: the
    /// ones [`Options::held_back_controllers`] left out, released. Its log
    /// is `kube-controller-manager-<first controller>.log`.
    pub fn start_controllers(&self, controllers: &[&str]) -> Result<Controllers, Error> {
        if self.controller_manager_args.is_empty() {
            return Err(Error::Client(
                "no kube-controller-manager runs: set Options::controller_manager".into(),
            ));
        }
        let kcm = binary(&self.bin, "kube-controller-manager")?;
        let mut args = self.controller_manager_args.clone();
        args.push(format!("--controllers={}", controllers.join(",")));
        let name = format!(
            "kube-controller-manager-{}",
            controllers.first().copied().unwrap_or("none")
        );
        Supervised::spawn(&name, &kcm, &args, self.dir.path())
            .map(|running| Controllers { _running: running })
    }

    /// The process id of `etcd`, `kube-apiserver`, ... (for CPU and memory figures).
    pub fn pid(&self, process: &str) -> Option<u32> {
        self.processes
            .iter()
            .find(|p| p.name == process)
            .map(|p| p.id())
    }

    /// Create (or update) the CustomResourceDefinitions of a YAML text and
    /// wait until each is Established and its watch cache answers a list.
    pub async fn apply_crds(&self, yaml: &str) -> Result<usize, Error> {
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(yaml)
            .map_err(|e| Error::Client(format!("CRD YAML: {e}")))?;
        let mut applied = 0;
        for crd in docs
            .into_iter()
            .filter(|d| d["kind"] == "CustomResourceDefinition")
        {
            self.apply_crd(crd).await?;
            applied += 1;
        }
        Ok(applied)
    }

    async fn apply_crd(&self, crd: serde_json::Value) -> Result<(), Error> {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        use kube::api::{Patch, PatchParams};
        let client = self.admin_client();
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let api: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
        api.patch(
            &name,
            &PatchParams::apply("realkube").force(),
            &Patch::Apply(&crd),
        )
        .await
        .map_err(|e| Error::Client(format!("CRD {name}: {e}")))?;
        let spec = &crd["spec"];
        let version = spec["versions"]
            .as_array()
            .and_then(|v| v.iter().find(|v| v["served"] == true))
            .and_then(|v| v["name"].as_str())
            .unwrap_or_default();
        let gvk = kube::api::GroupVersionKind::gvk(
            spec["group"].as_str().unwrap_or_default(),
            version,
            spec["names"]["kind"].as_str().unwrap_or_default(),
        );
        let resource = kube::api::ApiResource::from_gvk_with_plural(
            &gvk,
            spec["names"]["plural"].as_str().unwrap_or_default(),
        );
        let objects: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(client, &resource);
        // Established comes before the watch cache is filled (a list answers
        // 429 "storage is (re)initializing" until then): wait for a list.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let established = api.get_opt(&name).await.ok().flatten().is_some_and(|c| {
                c.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
            if established
                && objects
                    .list(&kube::api::ListParams::default().limit(1))
                    .await
                    .is_ok()
            {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Error::Client(format!(
                    "CRD {name} is not served after 60 s"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The last lines of a process's log (`etcd`, `kube-apiserver`, ...).
    pub fn log_tail(&self, process: &str, lines: usize) -> String {
        self.processes
            .iter()
            .find(|p| p.name == process)
            .map(|p| p.log_tail(lines))
            .unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        while let Some(mut p) = self.processes.pop() {
            p.stop();
        }
        if std::env::var_os("REALKUBE_KEEP").is_some() {
            let kept = self.dir.path().to_path_buf();
            eprintln!("realkube: kept {}", kept.display());
            let _ = std::mem::replace(
                &mut self.dir,
                tempfile::tempdir().expect("a temporary folder"),
            )
            .keep();
        }
    }
}

fn http_get(path: &str) -> http::Request<Vec<u8>> {
    http::Request::get(path)
        .body(Vec::new())
        .expect("a valid request")
}

/// A kube client from kubeconfig text.
pub async fn client_from(kubeconfig: &str) -> Result<kube::Client, Error> {
    let parsed = Kubeconfig::from_yaml(kubeconfig).map_err(|e| Error::Client(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Client(e.to_string()))?;
    kube::Client::try_from(config).map_err(|e| Error::Client(e.to_string()))
}
