//! What the tests read off the node: the proxy's process as the kernel
//! sees it, its open-file limit, its memory cgroup, and a load client.

use k8s_openapi::api::{apps::v1::DaemonSet, core::v1::Pod};
use kube::Api;

use super::{NAME, NodeBed, container_id};

/// The running proxy container as the kernel sees it matches what the
/// DaemonSet the controller wrote asks for: its user and group, exactly
/// the capabilities it adds (nothing else effective or permitted), no
/// privilege escalation, a read-only root, and the config and certificate
/// at the mount paths the proxy reads. Returns the container's pid.
pub(super) async fn check_container(nb: &NodeBed, pod: &Pod, namespace: &str) -> u32 {
    let ds = Api::<DaemonSet>::namespaced(nb.workload.clone(), namespace)
        .get(NAME)
        .await
        .unwrap();
    let ds = serde_json::to_value(ds).unwrap();
    let template = &ds["spec"]["template"]["spec"];
    let container = &template["containers"][0];
    let id = container_id(pod);
    let Some(pid) = nb.node.container_pid(&id) else {
        nb.fail(&format!("no task for container {id}"))
    };
    let status = nb.node.read(&format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:\t")))
            .unwrap_or_default()
            .to_string()
    };
    let user = container["securityContext"]["runAsUser"]
        .as_u64()
        .or(template["securityContext"]["runAsUser"].as_u64())
        .expect("the DaemonSet names its user");
    assert_eq!(
        field("Uid").split_whitespace().next(),
        Some(user.to_string().as_str()),
        "the proxy runs as the DaemonSet's user; /proc/{pid}/status:\n{status}"
    );
    if let Some(group) = template["securityContext"]["runAsGroup"].as_u64() {
        assert_eq!(
            field("Gid").split_whitespace().next(),
            Some(group.to_string().as_str())
        );
    }
    let wanted = container["securityContext"]["capabilities"]["add"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| capability_bit(c.as_str().unwrap()))
                .fold(0u64, |m, b| m | b)
        })
        .unwrap_or(0);
    for set in ["CapEff", "CapPrm", "CapBnd"] {
        let seen = u64::from_str_radix(&field(set), 16).unwrap();
        assert_eq!(
            seen, wanted,
            "{set} of the proxy is {seen:#x}, the DaemonSet adds {wanted:#x} (to an empty set)"
        );
    }
    assert_eq!(field("NoNewPrivs"), "1", "allowPrivilegeEscalation: false");
    let mounts = nb.node.read(&format!("/proc/{pid}/mountinfo")).unwrap();
    let root_ro = mounts.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.get(4) == Some(&"/") && f.get(5).is_some_and(|o| o.split(',').any(|o| o == "ro"))
    });
    assert!(root_ro, "the root filesystem is read-only:\n{mounts}");
    for mount in container["volumeMounts"].as_array().unwrap() {
        let path = mount["mountPath"].as_str().unwrap();
        let listing = nb
            .node
            .exec(&["ls", &format!("/proc/{pid}/root{path}")])
            .unwrap();
        assert!(
            listing.status.success() && !listing.stdout.is_empty(),
            "{path} is mounted and holds the files"
        );
    }
    pid
}

/// The proxy's open-file limit on a real node: the soft limit lifted to the
/// hard one the runtime gave the container, and a warning in the proxy's log
/// exactly when even the hard limit is below what its connection limit
/// needs (two descriptors per connection).
pub(super) fn check_open_files(nb: &NodeBed, pid: u32, pod: &Pod, namespace: &str) -> (u64, u64) {
    let limits = nb.node.read(&format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_else(|| panic!("/proc/{pid}/limits:\n{limits}"));
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (soft, hard): (u64, u64) = (fields[3].parse().unwrap(), fields[4].parse().unwrap());
    assert_eq!(
        soft, hard,
        "the proxy lifts its soft open-file limit to the hard one: {line}"
    );
    let needed = hcp_ingress::proxy::fds_needed(10_000);
    let name = pod.metadata.name.as_deref().unwrap();
    let log = nb.node.pod_log(namespace, name, "proxy");
    let warned = log.contains("the open file limit is below");
    assert_eq!(
        warned,
        hard < needed,
        "the proxy warns when its hard limit ({hard}) is below the {needed} descriptors 10,000 connections need, and only then:\n{log}"
    );
    (hard, needed)
}

/// `n` TLS connections to the `kubernetes` Service held from the node
/// (hack/bench/idle_conns.py, one request each, as the load tests do),
/// trusting the cluster CA for `kubernetes.default.svc`; closed when
/// dropped.
pub(super) struct Held {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl Held {
    /// Opens the connections and returns once every one had its answer.
    pub(super) fn open(nb: &NodeBed, n: usize) -> Held {
        use std::io::BufRead;
        let script = crate::bed::repo().join("hack/bench/idle_conns.py");
        let ca = nb.node.path().join("ca.crt");
        let errors = nb.node.path().join("idle_conns.err");
        let mut child = nb
            .node
            .command(&[
                "python3",
                script.to_str().unwrap(),
                "10.96.0.1",
                "443",
                &n.to_string(),
                "--ca",
                ca.to_str().unwrap(),
                "--sni",
                "kubernetes.default.svc",
                "--concurrency",
                "100",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(&errors).unwrap())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let opened: usize = line
            .strip_prefix("ready ")
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| {
                let err = std::fs::read_to_string(&errors).unwrap_or_default();
                nb.fail(&format!("the load client: {line}{err}"))
            });
        if opened != n {
            let metrics = nb
                .node
                .exec(&["sh", "-c", "curl -s http://127.0.0.1:9446/metrics http://127.0.0.1:9445/metrics | grep -E '^hcp_proxy_(connections|accept|pool)'"])
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            nb.fail(&format!(
                "{opened} of {n} connections through the proxy got their answer: {}\n{metrics}",
                std::fs::read_to_string(&errors).unwrap_or_default()
            ));
        }
        Held {
            child,
            stdin,
            stdout,
        }
    }

    /// One more request on every held connection: (answered, failed, what
    /// the client said).
    pub(super) fn request(&mut self) -> (usize, usize, String) {
        use std::io::{BufRead, Write};
        writeln!(self.stdin, "request").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let count = |key: &str| -> usize {
            line.split_whitespace()
                .find_map(|f| f.strip_prefix(key)?.parse().ok())
                .unwrap_or(0)
        };
        (count("ok="), count("failed="), line.trim().to_string())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The bit of a capability in /proc's capability masks.
fn capability_bit(name: &str) -> u64 {
    let number = match name.trim_start_matches("CAP_") {
        "NET_BIND_SERVICE" => 10,
        "NET_ADMIN" => 12,
        "NET_RAW" => 13,
        "SYS_ADMIN" => 21,
        other => panic!("capability {other} is not known to this test"),
    };
    1 << number
}

/// The proxy container's memory: its cgroup's peak usage and limit; the
/// limit is the one the DaemonSet in `namespace` asks for.
pub(super) async fn memory_of(nb: &NodeBed, pid: u32, namespace: &str) -> (u64, u64) {
    let ds = Api::<DaemonSet>::namespaced(nb.workload.clone(), namespace)
        .get(NAME)
        .await
        .unwrap();
    let asked =
        serde_json::to_value(ds).unwrap()["spec"]["template"]["spec"]["containers"][0]["resources"]
            ["limits"]["memory"]
            .as_str()
            .map(|q| {
                let (n, unit) =
                    q.split_at(q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len()));
                let n: u64 = n.parse().unwrap();
                n * match unit {
                    "Mi" => 1 << 20,
                    "Gi" => 1 << 30,
                    "" => 1,
                    other => panic!("memory unit {other}"),
                }
            })
            .expect("the DaemonSet limits the proxy's memory");
    let dir = nb
        .node
        .cgroup_of(pid, "memory")
        .unwrap_or_else(|| nb.fail("the proxy's memory cgroup"));
    let read = |file: &str| -> u64 {
        std::fs::read_to_string(dir.join(file))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.join(file).display()))
            .trim()
            .parse()
            .unwrap()
    };
    let (peak, limit) = (
        read("memory.max_usage_in_bytes"),
        read("memory.limit_in_bytes"),
    );
    assert_eq!(
        limit, asked,
        "the container's memory cgroup has the DaemonSet's limit"
    );
    (peak, limit)
}
