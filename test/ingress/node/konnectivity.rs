//! The real konnectivity server and agent through the shared ingress: what
//! every `kubectl logs`, `exec` and `port-forward` of a hosted control
//! plane travels.
//!
//! ```text
//!  kubectl ──ingress (apiHost)──→ kube-apiserver ─UDS (egress selector, GRPC)─→ proxy-server 0
//!                                                                                     │ the agent's
//!  node: proxy-agent pod ──dials konnectivityHost:443──→ ingress ──SNI──→ proxy-server 0 / 1
//!        └──→ kubelet (the node's address) ──→ the pod
//! ```
//!
//! Two proxy-server processes with `--server-count=2` sit behind the one
//! konnectivity Service the controller's route points at, each on its own
//! address; the agent (the upstream binary as a DaemonSet's pod on the real
//! node, its image assembled by hack/consumers/build.sh) dials
//! `konnectivityHost` through the load-balancing ingress until it holds a
//! connection to every server id: an agent that reaches only one replica
//! is what breaks `kubectl logs` for half of the requests in the field
//! ("expected one server ID in the context"). The agent authenticates with
//! its projected ServiceAccount token (audience
//! `system:konnectivity-server`), which each server reviews against the
//! tenant's API server, as k0smotron and Kamaji run it.
//!
//! The pod a user reaches is `hack/node/userpod` (no shell in the image:
//! every command is that binary). The same binary, in a second pod on the
//! node, holds one watch on the tenant's API through the node proxy while
//! the user's streams are silent: what a controller in a pod holds across
//! the same idle timeouts, on the other path through the shared ingress.
//!
//! Each test runs the same checks over one pairing of shared ingress and
//! node proxy mode: haproxy-ingress with the re-encrypting proxy, and
//! Traefik's CRD provider with the pooled proxy (where the watch is an
//! HTTP/2 stream on the proxy's pooled upstream connection, which the
//! node's other requests share).

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{SocketAddr, TcpStream},
    path::PathBuf,
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use hcp_ingress::doctor::{Check, Verdict, checks::KONNECTIVITY_AGENT_SELECTOR};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, PostParams};
use realnode::ProxyMode;
use serde_json::json;

use super::{NodeBed, SharedIngress, cri_lines, node_ready_with, pod_ready};
use crate::{
    bed::{API_HOST, Bed, CLUSTER, KONNECTIVITY_HOST, apply, doctor_row, ready},
    consumers::bin_dir,
    konnectivity::{
        ADMIN_PORT, HEALTH_PORT, SERVERS, Server, await_route_cut, metric, route_konnectivity_to,
        write_server_cert,
    },
};

/// Where the agent's ServiceAccount lives, as the servers expect it.
const AGENT_NAMESPACE: &str = "kube-system";
const AGENT_ACCOUNT: &str = "konnectivity-agent";
/// The audience of the agent's projected token, which the servers review.
const AUDIENCE: &str = "system:konnectivity-server";
/// The user's pod image (hack/node/build.sh).
const USERPOD_IMAGE: &str = "hcp-ingress.test/userpod:v1";
/// The user's pod, and the port it echoes on.
const TALKER: &str = "talker";
const ECHO_PORT: &str = "8080";
/// How long each stream stays silent: longer than the idle timeouts a
/// proxy on the way might have (haproxy's `timeout tunnel`, gRPC
/// keepalives, the kubelet's streaming idle timeout).
const SILENCE: Duration = Duration::from_secs(150);
/// What the pod prints once the silence is over.
const LAST_LINE: &str = "after-the-silence";
/// The watching pod's namespace, its ServiceAccount (`view` there) and
/// name, and the ConfigMap it watches for.
const WATCH_NAMESPACE: &str = "watch";
const WATCHER: &str = "watcher";
const WATCHED: &str = "after-the-silence";
/// How soon after the ConfigMap's creation the watch must report it.
const WATCH_PROMPT: Duration = Duration::from_secs(20);

/// The apiserver-network-proxy release hack/consumers/build.sh builds.
fn version() -> String {
    if let Ok(v) = std::env::var("HCP_KONNECTIVITY_VERSION")
        && !v.is_empty()
    {
        return v;
    }
    let path = crate::bed::repo().join("hack/consumers/versions.env");
    let text = std::fs::read_to_string(&path).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("KONNECTIVITY_VERSION="))
        .unwrap_or_else(|| panic!("KONNECTIVITY_VERSION in {}", path.display()))
        .to_string()
}

fn agent_image() -> String {
    format!("hcp-ingress.test/konnectivity-agent:{}", version())
}

/// The bed with the servers and the agent; everything the failures print.
struct Konn {
    nb: NodeBed,
    servers: Vec<Server>,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Konn {
    /// Fails with the servers', the agent's, the kubelet's and the API
    /// server's logs.
    fn fail(&self, what: &str) -> ! {
        let mut text = format!("{what}\n");
        for server in &self.servers {
            text.push_str(&format!(
                "--- {} ({}), agents: {:?}\n{}\n",
                server.id,
                server.address,
                server.agents(),
                server.tail()
            ));
        }
        text.push_str(&format!(
            "--- the agent's log\n{}\n--- the watching pod's log\n{}\n--- kube-apiserver (tenant)\n{}\n",
            tail(&self.agent_log(), 60),
            tail(&self.watch_log().lines.join("\n"), 20),
            self.nb.bed.tenant.log_tail("kube-apiserver", 40)
        ));
        self.nb.fail(&text)
    }

    /// [`NodeBed::eventually`], failing with everything [`Konn::fail`]
    /// prints.
    async fn eventually<T, F, Fut>(&self, what: &str, check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        super::poll_within(what, check, |why| self.fail(why)).await
    }

    /// Waits until the doctor's konnectivity row says `verdict`; on time
    /// out, fails with the last row it printed.
    async fn doctor_says(&self, verdict: Verdict) -> Check {
        let deadline = Instant::now() + super::WITHIN;
        loop {
            let check = doctor_konnectivity(&self.nb.bed).await;
            if check.verdict == verdict {
                return check;
            }
            if Instant::now() > deadline {
                self.fail(&format!(
                    "the doctor's konnectivity check never said {verdict:?} within {:?}; the last: {:?}: {}",
                    super::WITHIN,
                    check.verdict,
                    check.detail
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// What the watching pod printed, from its log on the node.
    fn watch_log(&self) -> WatchLog {
        WatchLog::parse(&self.nb.node.pod_log(WATCH_NAMESPACE, WATCHER, WATCHER))
    }

    fn agent_log(&self) -> String {
        let pods = self.nb.exec_node(&[
            "sh",
            "-c",
            "ls /var/log/pods | grep ^kube-system_konnectivity-agent-",
        ]);
        pods.lines()
            .map(|dir| {
                let pod = dir
                    .trim_start_matches("kube-system_")
                    .rsplit_once('_')
                    .map(|(name, _)| name)
                    .unwrap_or(dir);
                self.nb
                    .node
                    .pod_log(AGENT_NAMESPACE, pod, "konnectivity-agent")
            })
            .collect()
    }

    /// The agent's metrics: its health port (its admin port redirects
    /// `/metrics` there), from the node.
    async fn agent_metrics(&self) -> Option<String> {
        let pods: Api<Pod> = Api::namespaced(self.nb.workload.clone(), AGENT_NAMESPACE);
        let list = pods
            .list(&kube::api::ListParams::default().labels(KONNECTIVITY_AGENT_SELECTOR))
            .await
            .ok()?;
        let ip = list.items.first()?.status.as_ref()?.pod_ip.clone()?;
        let out = self.nb.exec_node(&[
            "curl",
            "-sf",
            "--max-time",
            "5",
            &format!("http://{ip}:{HEALTH_PORT}/metrics"),
        ]);
        (!out.is_empty()).then_some(out)
    }

    /// Waits until the agent holds a connection to every server, as both
    /// sides count it; (the agent's count, each server's).
    async fn connected_to_all(&self, what: &str) -> (f64, Vec<f64>) {
        let deadline = Instant::now() + super::WITHIN;
        loop {
            let agent = self.agent_metrics().await.and_then(|m| {
                metric(
                    &m,
                    "konnectivity_network_proxy_agent_open_server_connections",
                )
            });
            let servers: Vec<Option<f64>> = self.servers.iter().map(Server::agents).collect();
            if agent == Some(f64::from(SERVERS)) && servers.iter().all(|s| *s == Some(1.0)) {
                return (agent.unwrap(), servers.into_iter().flatten().collect());
            }
            if Instant::now() > deadline {
                let missing: Vec<&str> = self
                    .servers
                    .iter()
                    .zip(&servers)
                    .filter(|(_, n)| **n != Some(1.0))
                    .map(|(s, _)| s.id.as_str())
                    .collect();
                self.fail(&format!(
                    "{what}: the agent never reached {missing:?}: each server's ready agents {servers:?}, the agent's open server connections {agent:?} (None: its metrics unread)"
                ));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// `kubectl` against the tenant, from outside: through the shared
    /// ingress by `apiHost`, as the tenant's admin. For the streams the
    /// test ends itself (`logs -f`, `port-forward`): a `timeout` around
    /// them would leave kubectl, and the pipes it holds, behind.
    fn kubectl_stream(&self, args: &[&str]) -> Command {
        let mut command = Command::new("kubectl");
        command
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .args(args)
            .stdin(Stdio::null());
        command
    }

    /// [`Konn::kubectl_stream`] for a call that ends by itself, bounded.
    fn kubectl(&self, args: &[&str]) -> Command {
        let mut command = Command::new("timeout");
        command
            .args(["--kill-after=5", "300", "kubectl"])
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .args(args)
            .stdin(Stdio::null());
        command
    }

    fn kubectl_ok(&self, what: &str, args: &[&str]) -> String {
        let out = self.kubectl(args).output().unwrap();
        if !out.status.success() {
            self.fail(&format!("{what}: kubectl {args:?}: {}", describe(&out)));
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// One `kubectl logs` and one `kubectl exec` of the user's pod.
    fn logs_and_exec(&self, what: &str, n: usize) {
        let logs = self.kubectl_ok(&format!("{what}: kubectl logs #{n}"), &["logs", TALKER]);
        if !logs.lines().any(|l| l == "started") {
            self.fail(&format!("{what}: kubectl logs #{n} printed {logs:?}"));
        }
        let word = format!("exec-{n}");
        let out = self.kubectl_ok(
            &format!("{what}: kubectl exec #{n}"),
            &["exec", TALKER, "--", "/userpod", "sleep", "0", &word],
        );
        if out.trim() != word {
            self.fail(&format!("{what}: kubectl exec #{n} printed {out:?}"));
        }
    }
}

fn describe(out: &Output) -> String {
    format!(
        "{}; stdout {:?}; stderr {:?}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// What the watching pod (`userpod watch`) printed so far.
#[derive(Debug, Default)]
struct WatchLog {
    /// Its `watch open ...` lines: one, unless it was reopened.
    opened: Vec<String>,
    /// Its `event TYPE NAME` lines, as `TYPE NAME`.
    events: Vec<String>,
    /// Its `watch ended: ...` line, when the stream ended or failed.
    ended: Vec<String>,
    /// Every line, for failures.
    lines: Vec<String>,
}

impl WatchLog {
    /// Parses userpod's lines of its CRI log.
    fn parse(log: &str) -> WatchLog {
        let mut watch = WatchLog::default();
        for text in cri_lines(log).map(str::to_string) {
            if text.starts_with("watch open ") {
                watch.opened.push(text.clone());
            } else if let Some(event) = text.strip_prefix("event ") {
                watch.events.push(event.to_string());
            } else if text.starts_with("watch ended") {
                watch.ended.push(text.clone());
            }
            watch.lines.push(text);
        }
        watch
    }
}

impl NodeBed {
    /// The output of `args` in the node's namespaces ("" when it fails).
    fn exec_node(&self, args: &[&str]) -> String {
        self.node
            .exec(args)
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }
}

/// `kubectl logs -f`: the time from the first line to `LAST_LINE`.
fn follow_logs(mut child: Child) -> Result<Duration, String> {
    let stdout = child.stdout.take().unwrap();
    let mut first = None;
    let mut seen = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let now = Instant::now();
        first.get_or_insert(now);
        seen.push(line.clone());
        if line == LAST_LINE {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(now - first.unwrap());
        }
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    Err(format!(
        "kubectl logs -f ended before {LAST_LINE:?}: lines {seen:?}; {}",
        describe(&out)
    ))
}

/// `kubectl exec` of a command silent for `SILENCE`: its elapsed time.
fn silent_exec(mut command: Command) -> Result<Duration, String> {
    let started = Instant::now();
    let out = command.output().map_err(|e| e.to_string())?;
    let elapsed = started.elapsed();
    if !out.status.success() || String::from_utf8_lossy(&out.stdout).trim() != "done" {
        return Err(format!("after {elapsed:?}: {}", describe(&out)));
    }
    Ok(elapsed)
}

/// `kubectl port-forward` to the pod's echo port: one exchange, `SILENCE`
/// of nothing on the connection, another exchange.
fn silent_port_forward(mut child: Child) -> Result<Duration, String> {
    let result = (|| -> Result<Duration, String> {
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).map_err(|e| e.to_string())?;
        // "Forwarding from 127.0.0.1:PORT -> 8080"
        let port = line
            .split_whitespace()
            .nth(2)
            .and_then(|a| a.rsplit(':').next())
            .and_then(|p| p.parse::<u16>().ok())
            .ok_or_else(|| format!("kubectl port-forward printed {line:?}"))?;
        let mut conn = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        let mut exchange = |word: &str| -> Result<(), String> {
            conn.write_all(word.as_bytes())
                .map_err(|e| format!("writing {word:?}: {e}"))?;
            let mut back = vec![0; word.len()];
            conn.read_exact(&mut back)
                .map_err(|e| format!("reading back {word:?}: {e}"))?;
            (back == word.as_bytes()).then_some(()).ok_or_else(|| {
                format!("{word:?} came back as {:?}", String::from_utf8_lossy(&back))
            })
        };
        exchange("before\n")?;
        let started = Instant::now();
        std::thread::sleep(SILENCE);
        exchange("after\n")?;
        Ok(started.elapsed())
    })();
    let _ = child.kill();
    let out = child.wait_with_output().ok();
    result.map_err(|e| {
        format!(
            "{e}; kubectl port-forward: {}",
            out.as_ref().map(describe).unwrap_or_default()
        )
    })
}

/// The agent on the real node reaches both konnectivity servers through
/// haproxy-ingress, and what a user runs through them works: `kubectl logs
/// -f`, `kubectl exec` (WebSocket and SPDY) and `kubectl port-forward`
/// streams silent for 150 s, 20 logs and execs in a row, and all of it
/// again after the server the API server uses restarts and the agent
/// comes back to it; a pod's watch through the re-encrypting node proxy
/// outlives the same silence. A route cut to one server on purpose is what
/// the doctor reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn konnectivity_agent_on_a_real_node_reaches_both_servers_through_the_ingress() {
    konnectivity_through(SharedIngress::HaproxyIngress, "reencrypt", 0).await;
}

/// The same through Traefik's CRD provider (the IngressRouteTCP our
/// controller writes), with the node proxy in `pooled` mode carrying the
/// pod's watch: here the server the API server does not dial restarts, so
/// the agent's way back to it goes through Traefik alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn konnectivity_agent_on_a_real_node_reaches_both_servers_through_traefik() {
    konnectivity_through(SharedIngress::TraefikCrd, "pooled", 1).await;
}

/// One run: `shared` as the shared ingress, the node proxy in `mode`, and
/// server `restart` restarted once the streams are through.
async fn konnectivity_through(shared: SharedIngress, mode: &str, restart: usize) {
    let konnectivity = bin_dir("konnectivity");
    let node_bin = realnode::bin_dir();
    if !node_ready_with(shared)
        || !ready(
            &["curl", "timeout"],
            &[
                (
                    konnectivity.join("proxy-server"),
                    "bash hack/consumers/build.sh konnectivity",
                ),
                (
                    konnectivity.join("proxy-agent.oci.tar"),
                    "bash hack/consumers/build.sh konnectivity",
                ),
                (node_bin.join("userpod.oci.tar"), "bash hack/node/build.sh"),
            ],
        )
    {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("hcp-konn-")
        .tempdir()
        .unwrap();
    // The API server sends `cluster` egress (nodes, pods: logs, exec,
    // port-forward) to server 0's socket, as k0smotron and Kamaji
    // configure it; one API server dials one socket.
    let uds = |i: u8| dir.path().join(format!("server-{i}.sock"));
    let egress = dir.path().join("egress-selector.yaml");
    std::fs::write(
        &egress,
        json!({
            "apiVersion": "apiserver.k8s.io/v1beta1",
            "kind": "EgressSelectorConfiguration",
            "egressSelections": [{"name": "cluster", "connection": {
                "proxyProtocol": "GRPC",
                "transport": {"uds": {"udsName": uds(0)}}}}]
        })
        .to_string(),
    )
    .unwrap();
    let nb = NodeBed::start_with(
        shared,
        ProxyMode::Iptables,
        true,
        &[],
        json!({"steering": "advertise-address", "mode": mode}),
        vec![
            format!("--egress-selector-config-file={}", egress.display()),
            // The agent dials what the API server names; the Node's
            // hostname resolves nowhere but on the node, as in a hosted
            // control plane (Kamaji and k0smotron set the same).
            "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname".into(),
        ],
    )
    .await;
    for image in [
        konnectivity.join("proxy-agent.oci.tar"),
        node_bin.join("userpod.oci.tar"),
    ] {
        tokio::task::block_in_place(|| nb.node.import_image(&image))
            .unwrap_or_else(|e| nb.fail(&format!("importing {}: {e}", image.display())));
    }

    // The servers, each on its own address of the host (the ingress dials
    // them; kube-apiserver refuses loopback endpoints), both behind the
    // konnectivity port of the tenant's Service.
    let (cert, key) = write_server_cert(
        nb.bed.tenant.ca_pem(),
        nb.bed.tenant.ca_key_pem(),
        dir.path(),
    );
    let kubeconfig = nb.bed.tenant.dir().join("admin.kubeconfig");
    let mut servers = Vec::new();
    for i in 0..SERVERS {
        let address = nb
            .node
            .add_host_address(4 + i)
            .unwrap_or_else(|e| nb.fail(&format!("an address for server {i}: {e}")));
        // Each server reviews the agent's token against the tenant's API
        // server, as k0smotron and Kamaji run them.
        let auth = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--authentication-audience={AUDIENCE}"),
            format!("--agent-namespace={AGENT_NAMESPACE}"),
            format!("--agent-service-account={AGENT_ACCOUNT}"),
        ];
        servers.push(Server::start_new(
            i,
            address,
            &uds(i),
            (&cert, &key),
            auth,
            dir.path(),
        ));
    }
    route_konnectivity_to(
        &nb.bed,
        &servers.iter().map(|s| s.address).collect::<Vec<_>>(),
    )
    .await;

    // kubectl from outside, through the ingress by `apiHost`.
    let client_dir = dir.path();
    for (name, pem) in [
        ("ca.crt", nb.bed.tenant.ca_pem()),
        ("admin.crt", nb.bed.admin.cert_pem.as_str()),
        ("admin.key", nb.bed.admin.key_pem.as_str()),
    ] {
        std::fs::write(client_dir.join(name), pem).unwrap();
    }
    let user_kubeconfig = client_dir.join("user.kubeconfig");
    std::fs::write(
        &user_kubeconfig,
        json!({
            "apiVersion": "v1", "kind": "Config", "current-context": "tenant",
            "clusters": [{"name": "tenant", "cluster": {
                "server": format!("https://{}:{}", nb.node.host_address, nb.https),
                "tls-server-name": API_HOST,
                "certificate-authority": client_dir.join("ca.crt")}}],
            "users": [{"name": "admin", "user": {
                "client-certificate": client_dir.join("admin.crt"),
                "client-key": client_dir.join("admin.key")}}],
            "contexts": [{"name": "tenant", "context": {"cluster": "tenant", "user": "admin"}}]
        })
        .to_string(),
    )
    .unwrap();

    nb.eventually("the Node Ready", || async {
        nb.node_ready().await.filter(|r| *r)
    })
    .await;
    let konn = Konn {
        nb,
        servers,
        kubeconfig: user_kubeconfig,
        _dir: dir,
    };
    let workload = konn.nb.workload.clone();

    // The agent, as a DaemonSet's pod on the node: it reaches
    // `konnectivityHost` at the shared ingress (the node's name for the
    // host), trusts the tenant's CA and proves itself with a token for the
    // servers' audience.
    apply(
        &workload,
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": AGENT_ACCOUNT, "namespace": AGENT_NAMESPACE}}),
        "test",
    )
    .await;
    apply(
        &workload,
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
               "metadata": {"name": "konnectivity-agent", "namespace": AGENT_NAMESPACE},
               "spec": {"selector": {"matchLabels": {"k8s-app": "konnectivity-agent"}},
                        "template": {"metadata": {"labels": {"k8s-app": "konnectivity-agent"}},
                          "spec": {
                            "serviceAccountName": AGENT_ACCOUNT,
                            "tolerations": [{"operator": "Exists"}],
                            "terminationGracePeriodSeconds": 0,
                            "hostAliases": [{"ip": konn.nb.node.host_address.to_string(),
                                             "hostnames": [KONNECTIVITY_HOST]}],
                            "containers": [{
                              "name": "konnectivity-agent", "image": agent_image(),
                              "imagePullPolicy": "Never",
                              "args": [
                                format!("--proxy-server-host={KONNECTIVITY_HOST}"),
                                format!("--proxy-server-port={}", konn.nb.https),
                                "--ca-cert=/var/run/konnectivity/ca.crt",
                                "--service-account-token-path=/var/run/konnectivity/token",
                                format!("--admin-server-port={ADMIN_PORT}"),
                                format!("--health-server-port={HEALTH_PORT}"),
                                "--v=2"],
                              "securityContext": {"runAsNonRoot": true, "allowPrivilegeEscalation": false,
                                                  "capabilities": {"drop": ["ALL"]}},
                              "volumeMounts": [{"name": "konnectivity", "mountPath": "/var/run/konnectivity",
                                                "readOnly": true}]}],
                            "volumes": [{"name": "konnectivity", "projected": {"sources": [
                              {"serviceAccountToken": {"path": "token", "audience": AUDIENCE,
                                                       "expirationSeconds": 3600}},
                              {"configMap": {"name": "kube-root-ca.crt",
                                             "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}]}}}}),
        "test",
    )
    .await;
    // The user's pod: prints "started", then nothing for SILENCE, then
    // LAST_LINE; echoes on ECHO_PORT.
    let silence = SILENCE.as_secs().to_string();
    apply(
        &workload,
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": TALKER, "namespace": "default"},
               "spec": {"tolerations": [{"operator": "Exists"}],
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": TALKER, "image": USERPOD_IMAGE,
                                        "imagePullPolicy": "Never",
                                        "args": ["serve", ECHO_PORT, silence, LAST_LINE],
                                        "securityContext": {"runAsNonRoot": true, "allowPrivilegeEscalation": false,
                                                            "capabilities": {"drop": ["ALL"]}}}]}}),
        "test",
    )
    .await;
    // The watching pod: its ServiceAccount may read its namespace (the
    // `view` ClusterRole), and it reaches the API as every in-cluster
    // client does, through `kubernetes.default.svc`: the node proxy.
    for object in [
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": WATCH_NAMESPACE}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": WATCHER, "namespace": WATCH_NAMESPACE}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": WATCHER, "namespace": WATCH_NAMESPACE},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
               "subjects": [{"kind": "ServiceAccount", "name": WATCHER, "namespace": WATCH_NAMESPACE}]}),
        // It never restarts: a second watch would hide the end of the
        // first.
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": WATCHER, "namespace": WATCH_NAMESPACE},
               "spec": {"serviceAccountName": WATCHER,
                        "restartPolicy": "Never",
                        "tolerations": [{"operator": "Exists"}],
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": WATCHER, "image": USERPOD_IMAGE,
                                        "imagePullPolicy": "Never",
                                        "args": ["watch", WATCH_NAMESPACE, WATCHED],
                                        "securityContext": {"runAsNonRoot": true, "allowPrivilegeEscalation": false,
                                                            "capabilities": {"drop": ["ALL"]}}}]}}),
    ] {
        apply(&workload, object, "test").await;
    }
    let through = format!("the node proxy in mode {mode} and {shared}");

    let started = Instant::now();
    let (agent, each) = konn.connected_to_all("the agent's first connections").await;
    eprintln!(
        "the agent holds {agent} server connections; each server's ready agents {each:?} ({:?} after the DaemonSet)",
        started.elapsed()
    );
    // `hcp-ingress doctor` sees it too: through the API server's pod proxy
    // (this same konnectivity path) the agent reports both servers.
    let check = konn.doctor_says(Verdict::Pass).await;
    assert!(
        check
            .detail
            .contains("every konnectivity server it knows of (2)"),
        "{}",
        check.detail
    );
    let pods: Api<Pod> = Api::namespaced(workload.clone(), "default");
    konn.eventually("the user's pod Ready", || async {
        pods.get_opt(TALKER)
            .await
            .ok()?
            .filter(pod_ready)
            .map(|_| ())
    })
    .await;

    let watch_open = konn
        .eventually(
            &format!("the watching pod's watch open, through {through}"),
            || async {
                let watch = konn.watch_log();
                if !watch.ended.is_empty() {
                    konn.fail(&format!(
                        "the watch through {through} ended before the silence: {:?}",
                        watch.lines
                    ));
                }
                watch.opened.first().cloned()
            },
        )
        .await;
    eprintln!("the watching pod, through {through}: {watch_open}");
    let watch_opened = Instant::now();

    // Once through, then every stream at once and SILENCE once (the watch
    // is silent from now on too).
    tokio::task::block_in_place(|| konn.logs_and_exec("first call", 0));
    let streams = tokio::task::block_in_place(|| {
        std::thread::scope(|scope| {
            let spawn = |mut command: Command| -> Child {
                command.stdout(Stdio::piped()).stderr(Stdio::piped());
                command.spawn().unwrap()
            };
            let logs = spawn(konn.kubectl_stream(&["logs", "-f", TALKER]));
            let logs = scope.spawn(move || follow_logs(logs));
            let exec = |websocket: bool| {
                let mut command =
                    konn.kubectl(&["exec", TALKER, "--", "/userpod", "sleep", &silence, "done"]);
                if !websocket {
                    command.env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false");
                }
                scope.spawn(move || silent_exec(command))
            };
            let websocket = exec(true);
            let spdy = exec(false);
            let forward = spawn(konn.kubectl_stream(&[
                "port-forward",
                &format!("pod/{TALKER}"),
                &format!(":{ECHO_PORT}"),
            ]));
            let forward = scope.spawn(move || silent_port_forward(forward));
            // While they are silent: 20 of each in a row.
            for n in 1..=20 {
                konn.logs_and_exec("in a row", n);
            }
            [
                ("kubectl logs -f", logs.join().unwrap()),
                ("kubectl exec (WebSocket)", websocket.join().unwrap()),
                ("kubectl exec (SPDY)", spdy.join().unwrap()),
                ("kubectl port-forward", forward.join().unwrap()),
            ]
        })
    });
    // The silence is over for the watch too: the ConfigMap it waits for,
    // reported on the same watch, promptly.
    let configmaps: Api<ConfigMap> = Api::namespaced(workload.clone(), WATCH_NAMESPACE);
    let silent = watch_opened.elapsed();
    configmaps
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": WATCHED}})).unwrap(),
        )
        .await
        .unwrap_or_else(|e| konn.fail(&format!("creating ConfigMap {WATCHED}: {e}")));
    let created = Instant::now();
    let added = format!("ADDED {WATCHED}");
    let watch = loop {
        let watch = konn.watch_log();
        if watch.events.contains(&added)
            || !watch.ended.is_empty()
            || created.elapsed() > WATCH_PROMPT
        {
            break watch;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let reported = created.elapsed();
    let mut failures = Vec::new();
    if !watch.events.contains(&added) || !watch.ended.is_empty() || watch.opened.len() != 1 {
        failures.push(format!(
            "the watch from pod {WATCH_NAMESPACE}/{WATCHER} on the node, through {through}, silent {silent:?}: wanted event {added:?} within {WATCH_PROMPT:?} on its one watch; it printed {:?}",
            watch.lines
        ));
    } else {
        eprintln!(
            "the pod's watch through {through}: carried through {silent:?} of silence, reported the ConfigMap {reported:?} after its creation"
        );
    }
    for (what, result) in &streams {
        match result {
            Ok(elapsed) => eprintln!("{what}: carried through {elapsed:?} of silence"),
            Err(e) => failures.push(format!("{what} through konnectivity and {shared}: {e}")),
        }
    }
    if !failures.is_empty() {
        konn.fail(&failures.join("\n"));
    }
    for (what, result) in &streams {
        // The pod's silence began when it started, before the log stream
        // opened; the others are silent for all of SILENCE.
        let least = if what.contains("logs") {
            SILENCE - Duration::from_secs(30)
        } else {
            SILENCE
        };
        let elapsed = *result.as_ref().unwrap();
        if elapsed < least {
            konn.fail(&format!(
                "{what}: silent only {elapsed:?}, less than {least:?}"
            ));
        }
    }

    // A server restarts: the agent comes back to it (its connection to
    // the other one stays) and calls work again. Server 0 is the one the
    // API server dials; server 1 only the agent, through the ingress.
    let mut konn = konn;
    let id = konn.servers[restart].id.clone();
    konn.servers[restart].stop();
    konn.servers[restart].start();
    let restarted = Instant::now();
    let (agent, each) = konn
        .connected_to_all(&format!("the agent's return to {id} after its restart"))
        .await;
    eprintln!(
        "after {id}'s restart: the agent holds {agent} server connections; each server's ready agents {each:?} ({:?} after the restart)",
        restarted.elapsed()
    );
    tokio::task::block_in_place(|| {
        for n in 21..=25 {
            konn.logs_and_exec(&format!("after {id}'s restart"), n);
        }
    });

    // The route broken on purpose: the konnectivity endpoints cut to
    // server-0, then server-1 restarts once the ingress has taken it off
    // the route (before that, the agent could come back to it the old
    // way). The agent lost its connection to server-1 and every new dial
    // lands on server-0 again: it knows of two servers and holds one, and
    // the doctor says so, naming the agent.
    route_konnectivity_to(&konn.nb.bed, &[konn.servers[0].address]).await;
    konn.servers[1].stop();
    let ingress = SocketAddr::from((konn.nb.node.host_address, konn.nb.https));
    let cut = await_route_cut(ingress, konn.servers[1].address).await;
    eprintln!("{shared} took server-1 off the route after {cut:?}");
    konn.servers[1].start();
    let check = konn.doctor_says(Verdict::Fail).await;
    assert!(
        check.detail.contains("is connected to 1 of the 2 konnectivity servers")
            && check.detail.contains(&format!(
                "the route for {KONNECTIVITY_HOST} does not lead to every konnectivity server replica"
            )),
        "{}",
        check.detail
    );
    eprintln!("the route cut to server-0, the doctor: {}", check.detail);

    let Konn { nb, servers, .. } = konn;
    drop(servers);
    nb.finish().await;
}

/// The doctor's `konnectivity` row for the tenant's ControlPlaneIngress.
async fn doctor_konnectivity(bed: &Bed) -> Check {
    doctor_row(&bed.client, CLUSTER, "konnectivity", Duration::from_secs(5)).await
}
