//! `realnode`: a real Kubernetes node for tests, in namespaces of its own.
//!
//! A [`Node`] is containerd (with Debian's runc and CNI plugins), the
//! kubelet and kube-proxy, joined to a real API server (test/realkube) with a
//! client certificate of the cluster CA (`system:node:<name>`, so the Node
//! authorizer and NodeRestriction apply to it as to any node). The binaries
//! come from `hack/node/build.sh` (kubelet, containerd, the pause image) and
//! `hack/kube/build.sh` (kube-proxy); when they are missing the node fails to
//! start and says how to build them.
//!
//! Everything runs inside one mount, network and PID namespace that the
//! node makes for itself (`unshare`), never with `ip netns exec`, which
//! remounts /sys and hides the cgroup tree from the kubelet:
//! - a fresh tmpfs over /run, /var/lib and /var/log, and the node's own
//!   /etc/hosts, so containerd's images and state, the kubelet's root, the
//!   CNI plugins' state, the pods' logs and the names the node resolves
//!   never touch the host's (and the kubelet's eviction thresholds measure
//!   the tmpfs, not how full the host's disk happens to be);
//! - a veth pair to the host, 198.18.N.0/24 (RFC 2544's test range; the
//!   three TEST-NETs are the other tests'): the host end is `.1`, the node
//!   `.2`, default route via the host;
//! - the kubelet's cgroups under the test process's own memory cgroup
//!   (`cgroupfs` driver, cgroup v1 allowed), so the pods count against the
//!   test's memory and are removed with the node.
//!
//! Dropping the node kills the namespace's init, which takes every process
//! of the node with it (containerd's shims and the pods included), then
//! removes the cgroups and the host's end of the veth: nothing is left on
//! the host.
#![forbid(unsafe_code)]

mod cgroups;
mod config;
mod namespaces;

use namespaces::{alive, free_slot, host_command, start_namespaces};
use std::{
    fs::File,
    net::Ipv4Addr,
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

/// Why a node did not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A binary is not built.
    #[error(
        "{0} is not built: run `bash hack/node/build.sh` (kubelet, containerd and the pause image, from the Go module proxy into ~/.cache/hcp-ingress/node) and `bash hack/kube/build.sh` (kube-proxy); runc and the CNI plugins come from Debian (hack/install-test-deps.sh)"
    )]
    Missing(PathBuf),
    /// A file of the node could not be written or read.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    /// A command that sets up the node failed.
    #[error("{command}: {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A process of the node did not become ready.
    #[error("{what} did not become ready within {secs} s; its log ends with:\n{log}")]
    NotReady {
        /// Which process.
        what: String,
        /// How long we waited.
        secs: u64,
        /// The last lines of its log.
        log: String,
    },
    /// The kubelet's or kube-proxy's client certificate could not be minted.
    #[error("client certificate: {0}")]
    Pki(#[from] rcgen::Error),
}

/// How to join the node to its cluster.
#[derive(Debug, Clone)]
pub struct Options {
    /// The Node's name.
    pub name: String,
    /// The API server's URL as the node reaches it (a hosted control plane's
    /// workers reach it through the shared ingress, by name).
    pub api_server: String,
    /// Names the node resolves to the host's end of its veth (its
    /// /etc/hosts), where the test runs what the node reaches: the shared
    /// ingress that carries `api_server`'s name.
    pub host_names: Vec<String>,
    /// The cluster CA, which signs the kubelet's and kube-proxy's client
    /// certificates and which they trust for the API server.
    pub ca_pem: String,
    /// The cluster CA's key.
    pub ca_key_pem: String,
    /// Write the CNI config at start. Without it the node stays NotReady
    /// ("network plugin not ready") until [`Node::install_cni`], as a node
    /// does while its CNI DaemonSet has not run yet.
    pub cni: bool,
    /// `--register-with-taints`, e.g.
    /// `node.cloudprovider.kubernetes.io/uninitialized=true:NoSchedule`.
    pub taints: Vec<String>,
    /// OCI image tarballs imported into containerd before the kubelet starts.
    pub images: Vec<PathBuf>,
    /// The folder of kube-proxy (the workload cluster's release).
    pub kube_bin: PathBuf,
    /// The API server's `--service-cluster-ip-range` (kube-proxy's rules).
    pub service_cidr: String,
    /// kube-proxy's mode.
    pub proxy_mode: ProxyMode,
}

pub use config::nftables_gated;

/// kube-proxy's mode on the node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ProxyMode {
    /// The default mode.
    #[default]
    Iptables,
    /// GA since Kubernetes 1.33; alpha behind the `NFTablesProxyMode`
    /// feature gate on 1.30, which the node's config turns on there.
    Nftables,
}

/// The tests' in-cluster client image (hack/node/apicall), which
/// [`Node::start`] imports: it calls the API at `KUBERNETES_SERVICE_HOST`
/// with the pod's ServiceAccount and prints a line per call.
pub const APICALL_IMAGE: &str = "hcp-ingress.test/apicall:v1";

/// The pods' addresses on the node's CNI bridge.
pub const POD_CIDR: &str = "10.244.0.0/24";
/// The CNI bridge's own address: the pods' gateway.
pub const POD_GATEWAY: &str = "10.244.0.1";

/// A running node; every process, cgroup and link goes when it is dropped.
pub struct Node {
    dir: Option<tempfile::TempDir>,
    /// `unshare`, whose child is the init of the node's namespaces.
    holder: Child,
    /// That init's process id on the host: the target of every `nsenter`.
    init: u32,
    processes: Vec<Process>,
    cgroups: cgroups::Tree,
    host_if: String,
    /// The host's end of the node's veth: where the node reaches the host.
    pub host_address: Ipv4Addr,
    /// The node's address (its InternalIP).
    pub address: Ipv4Addr,
    bin: PathBuf,
    /// Which of [`HOST_STATE`] did not exist when the node started.
    absent_before: Vec<&'static str>,
    _lock: File,
}

struct Process {
    name: String,
    child: Child,
}

/// Where `hack/node/build.sh` puts the node's binaries (`HCP_NODE_BIN`
/// overrides it).
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("HCP_NODE_BIN").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack/node/build.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("--print-bin-dir")
        .output()
        .expect("bash runs hack/node/build.sh");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The files a node needs besides root, and how to get each: the binaries
/// of `hack/node/build.sh`, Debian's runc and CNI plugins.
pub fn required_files() -> Vec<(PathBuf, &'static str)> {
    let bin = bin_dir();
    let mut files: Vec<(PathBuf, &'static str)> = config::BINARIES
        .iter()
        .map(|name| (bin.join(name), "bash hack/node/build.sh"))
        .collect();
    for path in [config::RUNC, config::CNI_BIN] {
        files.push((PathBuf::from(path), "bash hack/install-test-deps.sh"));
    }
    files
}

impl Node {
    /// Starts the node: its namespaces and veth, containerd with `images`
    /// imported, kube-proxy, and the kubelet, which registers the Node.
    /// Returns once the kubelet has started; the Node's readiness is the
    /// test's to wait for (it depends on the CNI config).
    pub fn start(opts: Options) -> Result<Node, Error> {
        let bin = bin_dir();
        for name in config::BINARIES {
            if !bin.join(name).exists() {
                return Err(Error::Missing(bin.join(name)));
            }
        }
        let kube_proxy = opts.kube_bin.join("kube-proxy");
        if !kube_proxy.exists() {
            return Err(Error::Missing(kube_proxy));
        }
        let (slot, lock) = free_slot()?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("realnode-{}-", opts.name))
            .tempdir()
            .map_err(|e| Error::Io("a temporary folder".into(), e))?;
        let host_address = Ipv4Addr::new(198, 18, slot, 1);
        let address = Ipv4Addr::new(198, 18, slot, 2);
        let host_if = format!("rnode{slot}h");
        // Left over by a killed run that held this slot.
        let _ = Command::new("ip").args(["link", "del", &host_if]).output();

        let files = config::write_all(dir.path(), &opts, address, host_address)?;
        let (holder, init) = start_namespaces(dir.path(), &files)?;
        let mut node = Node {
            dir: Some(dir),
            holder,
            init,
            processes: Vec::new(),
            cgroups: cgroups::Tree::default(),
            host_if,
            host_address,
            address,
            bin,
            absent_before: HOST_STATE
                .into_iter()
                .filter(|p| !Path::new(p).exists())
                .collect(),
            _lock: lock,
        };
        node.connect()?;
        node.cgroups = cgroups::Tree::create(&format!("realnode-{slot}"))?;
        config::write_kubelet_config(node.path(), address, node.cgroups.root())?;

        let containerd = node.bin.join("containerd");
        node.spawn(
            "containerd",
            &[
                containerd.as_os_str().to_str().unwrap_or_default(),
                "--config",
            ],
            &[&node.file("containerd.toml")],
        )?;
        node.wait_for("containerd", 60, |n| n.ctr(&["version"]).is_ok())?;
        let own = [
            node.bin.join("pause.oci.tar"),
            node.bin.join("apicall.oci.tar"),
        ];
        for image in own.iter().chain(&opts.images) {
            node.import_image(image)?;
        }
        if opts.cni {
            node.install_cni()?;
        }
        let kube_proxy = kube_proxy.display().to_string();
        node.spawn(
            "kube-proxy",
            &[&kube_proxy],
            &[
                &format!("--config={}", node.file("kube-proxy.yaml")),
                &format!("--hostname-override={}", opts.name),
                "--v=1",
            ],
        )?;
        let kubelet = node.bin.join("kubelet").display().to_string();
        let taints = opts.taints.join(",");
        let mut args = vec![
            format!("--config={}", node.file("kubelet.yaml")),
            format!("--kubeconfig={}", node.file("kubelet.kubeconfig")),
            // On the node's tmpfs, like containerd's images: the kubelet
            // evicts pods when its root's filesystem runs short, and the
            // host's disk is not the test's to count on.
            "--root-dir=/var/lib/kubelet".into(),
            format!("--hostname-override={}", opts.name),
            format!("--node-ip={address}"),
            "--v=1".into(),
        ];
        if !taints.is_empty() {
            args.push(format!("--register-with-taints={taints}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        node.spawn("kubelet", &[&kubelet], &args)?;
        Ok(node)
    }

    /// Adds `198.18.N.<last>` to the host's end of the node's veth: another
    /// address of the host the node reaches (a second ingress address).
    pub fn add_host_address(&self, last: u8) -> Result<Ipv4Addr, Error> {
        let [a, b, c, _] = self.host_address.octets();
        let address = Ipv4Addr::new(a, b, c, last);
        host_command(&[
            "ip",
            "addr",
            "add",
            &format!("{address}/24"),
            "dev",
            &self.host_if,
        ])?;
        Ok(address)
    }

    /// The node's folder (configs, logs, the kubelet's root).
    pub fn path(&self) -> &Path {
        self.dir
            .as_ref()
            .expect("the folder lives until drop")
            .path()
    }

    fn file(&self, name: &str) -> String {
        self.path().join(name).display().to_string()
    }

    /// Writes the CNI config (a bridge, host-local addresses from
    /// [`POD_CIDR`], masquerade out): containerd picks it up and the kubelet
    /// reports the network ready.
    pub fn install_cni(&self) -> Result<(), Error> {
        let path = self.path().join("cni/10-realnode.conflist");
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, config::cni_conflist())
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| Error::Io(path.display().to_string(), e))
    }

    /// Runs `args` in the node's namespaces (a hostNetwork process's view).
    pub fn exec(&self, args: &[&str]) -> std::io::Result<Output> {
        self.command(args).stdin(Stdio::null()).output()
    }

    /// A command that runs `args` in the node's namespaces, for the test to
    /// spawn (a load client on the node, say).
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("nsenter");
        command.args(self.enter()).arg("--").args(args);
        command
    }

    /// `ctr` of the node's containerd, in the CRI's `k8s.io` namespace.
    pub fn ctr(&self, args: &[&str]) -> Result<String, Error> {
        let ctr = self.bin.join("ctr").display().to_string();
        let socket = self.file("containerd/containerd.sock");
        let mut all = vec![ctr.as_str(), "--address", &socket, "--namespace", "k8s.io"];
        all.extend(args);
        self.checked(&all)
    }

    /// Imports an OCI image tarball into the node's containerd, as a node
    /// that pulled it would hold it.
    pub fn import_image(&self, tarball: &Path) -> Result<String, Error> {
        // `ctr` runs in the node's mount namespace, whose working folder is
        // not the test's: a relative path would name another file.
        let path = std::fs::canonicalize(tarball)
            .map_err(|e| Error::Io(tarball.display().to_string(), e))?
            .display()
            .to_string();
        self.ctr(&["images", "import", "--local", &path])
    }

    /// The last `lines` lines of a process's log (`containerd`, `kubelet`,
    /// `kube-proxy`).
    pub fn log_tail(&self, process: &str, lines: usize) -> String {
        let log = self.path().join(format!("{process}.log"));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Whether the process `name` of the node is still running.
    pub fn running(&self, name: &str) -> bool {
        self.processes
            .iter()
            .find(|p| p.name == name)
            .is_some_and(|p| alive(p.child.id()))
    }

    /// The logs of every container the kubelet ran (the last `lines` of
    /// each, under its /var/log/pods path), for a failure message.
    pub fn container_logs(&self, lines: usize) -> String {
        let script = format!(
            "for f in /var/log/pods/*/*/*.log; do echo \"== $f\"; tail -n {lines} \"$f\"; done"
        );
        self.exec(&["sh", "-c", &script])
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// The whole log of the container `container` of pod `namespace/pod`
    /// (every restart), as the kubelet wrote it: CRI log lines
    /// (`<time> <stream> <tag> <text>`).
    pub fn pod_log(&self, namespace: &str, pod: &str, container: &str) -> String {
        let glob = format!("/var/log/pods/{namespace}_{pod}_*/{container}/*.log");
        self.exec(&["sh", "-c", &format!("cat {glob}")])
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// The host process id of a running container (`containerd://<id>` or
    /// the bare id, as a pod's status gives it), seen from the node.
    pub fn container_pid(&self, container_id: &str) -> Option<u32> {
        let id = container_id.trim_start_matches("containerd://");
        let tasks = self.ctr(&["tasks", "ls"]).ok()?;
        tasks.lines().find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next()? == id).then(|| f.next()?.parse().ok())?
        })
    }

    /// A file of the node's /proc (`/proc/<pid>/status`, a container's
    /// cgroup files...), read in the node's mount namespace.
    pub fn read(&self, path: &str) -> Option<String> {
        self.exec(&["cat", path])
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    }

    /// The cgroup v1 folder of controller `controller` (`memory`, ...) that
    /// holds the node's process `pid`.
    pub fn cgroup_of(&self, pid: u32, controller: &str) -> Option<PathBuf> {
        let text = self.read(&format!("/proc/{pid}/cgroup"))?;
        let path = text.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, names, path) = (f.next()?, f.next()?, f.next()?);
            names
                .split(',')
                .any(|n| n == controller)
                .then(|| path.to_string())
        })?;
        Some(
            Path::new("/sys/fs/cgroup")
                .join(controller)
                .join(path.trim_start_matches('/')),
        )
    }

    /// The node's processes' logs and the containers', for a failure message.
    pub fn diagnostics(&self) -> String {
        let mut out = String::new();
        for p in &self.processes {
            out.push_str(&format!(
                "--- {} (running: {})\n{}\n",
                p.name,
                alive(p.child.id()),
                self.log_tail(&p.name, 25)
            ));
        }
        out.push_str("--- containers\n");
        out.push_str(&self.container_logs(20));
        out
    }

    fn enter(&self) -> Vec<String> {
        vec![
            format!("--target={}", self.init),
            "--mount".into(),
            "--net".into(),
            "--pid".into(),
        ]
    }

    fn checked(&self, args: &[&str]) -> Result<String, Error> {
        let out = self
            .exec(args)
            .map_err(|e| Error::Io(format!("nsenter {}", args.join(" ")), e))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(Error::Command {
                command: args.join(" "),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            })
        }
    }

    fn spawn(&mut self, name: &str, program: &[&str], args: &[&str]) -> Result<(), Error> {
        let log = self.path().join(format!("{name}.log"));
        let file = File::create(&log).map_err(|e| Error::Io(log.display().to_string(), e))?;
        let err = file
            .try_clone()
            .map_err(|e| Error::Io(log.display().to_string(), e))?;
        let child = Command::new("nsenter")
            .args(self.enter())
            .arg("--")
            .args(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .spawn()
            .map_err(|e| Error::Io(format!("nsenter {name}"), e))?;
        self.processes.push(Process {
            name: name.into(),
            child,
        });
        Ok(())
    }

    fn wait_for(&self, what: &str, secs: u64, ready: impl Fn(&Node) -> bool) -> Result<(), Error> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if ready(self) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(Error::NotReady {
            what: what.into(),
            secs,
            log: self.log_tail(what, 30),
        })
    }

    /// The veth between the host and the node, the node's addresses and its
    /// default route via the host.
    fn connect(&self) -> Result<(), Error> {
        let init = self.init.to_string();
        let host = format!("{}/24", self.host_address);
        let node = format!("{}/24", self.address);
        let gateway = self.host_address.to_string();
        let host_if = self.host_if.as_str();
        for args in [
            vec![
                "ip", "link", "add", host_if, "type", "veth", "peer", "name", "eth0", "netns",
                &init,
            ],
            vec!["ip", "addr", "add", &host, "dev", host_if],
            vec!["ip", "link", "set", host_if, "up"],
        ] {
            host_command(&args)?;
        }
        for args in [
            vec!["ip", "addr", "add", &node, "dev", "eth0"],
            vec!["ip", "link", "set", "eth0", "up"],
            vec!["ip", "route", "add", "default", "via", &gateway],
        ] {
            self.checked(&args)?;
        }
        Ok(())
    }
}

/// State folders of the host a node's processes would write without its
/// masks; [`Node::stop`] checks it made none of them.
const HOST_STATE: [&str; 7] = [
    "/run/containerd",
    "/var/lib/containerd",
    "/var/lib/cni",
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/etc/cni",
];

impl Node {
    /// Stops the node as dropping it does, then says what it left on the
    /// host: its PID namespace's init, a cgroup, its veth, or one of the
    /// host's state folders that did not exist when it started. Empty when
    /// nothing is left.
    pub fn stop(mut self) -> Vec<String> {
        self.tear_down();
        let mut left = Vec::new();
        if alive(self.init) {
            left.push(format!("the node's init, pid {}", self.init));
        }
        left.extend(self.cgroups.remaining());
        let link = Command::new("ip")
            .args(["link", "show", &self.host_if])
            .output();
        if link.is_ok_and(|o| o.status.success()) {
            left.push(format!("the veth {}", self.host_if));
        }
        for path in &self.absent_before {
            if Path::new(path).exists() {
                left.push(format!("{path}, which did not exist before the node"));
            }
        }
        left
    }

    fn tear_down(&mut self) {
        // The init of the namespaces dies with `unshare` (--kill-child), and
        // every process of the PID namespace with it.
        let _ = self.holder.kill();
        let _ = self.holder.wait();
        for p in &mut self.processes {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive(self.init) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.cgroups.remove();
        // Gone with the network namespace; a leftover of a killed run is not.
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .output();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.tear_down();
        if std::thread::panicking()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("realnode: kept {}", dir.keep().display());
        }
    }
}
