//! The real konnectivity server and agent (apiserver-network-proxy's
//! `proxy-server` and `proxy-agent`, built by hack/consumers/build.sh)
//! behind the shared ingress.
//!
//! Every ingress controller's test ends with them: two server replicas
//! (`--server-count=2`) behind the konnectivity port of the tenant's
//! Service, each at its own address, and an agent dialling
//! `konnectivityHost` at the ingress as it does from a node, until it holds
//! a connection to every server id. An agent that reaches one replica only
//! breaks `kubectl logs` and `exec` for the API servers that dial the
//! other ("expected one server ID in the context"); what decides it is the
//! ingress: whether it spreads new connections over the route's endpoints,
//! and whether it passes the agent's TLS (its SNI, its ALPN `h2`) through.
//! The real node's test (node/konnectivity.rs) uses the same servers with
//! the agent as a pod.

use std::{
    net::{Ipv4Addr, SocketAddr, TcpListener},
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::{
    bed::{API_PORT, Bed, CLUSTER, KONNECTIVITY_HOST, KONNECTIVITY_PORT, NS, apply, ready},
    consumers::{Process, bin_dir, http_get},
    tls::{konnectivity_leaf, look},
};

/// The server replicas behind the konnectivity Service, each started with
/// `--server-count` this many.
pub const SERVERS: u8 = 2;
/// Each server's metrics port (`--admin-port`), and the agent pod's admin
/// port.
pub const ADMIN_PORT: u16 = 8133;
/// Each server's health port, and the agent pod's (where it serves its
/// metrics).
pub const HEALTH_PORT: u16 = 8134;
/// How to build the servers and the agent.
const HOW_TO_BUILD: &str = "bash hack/consumers/build.sh konnectivity";

/// Whether the servers and the agent are built (under `CI=true` a missing
/// one fails the test).
pub fn can_run() -> bool {
    let dir = bin_dir("konnectivity");
    ready(
        &["unshare", "mount"],
        &[
            (dir.join("proxy-server"), HOW_TO_BUILD),
            (dir.join("proxy-agent"), HOW_TO_BUILD),
        ],
    )
}

/// One proxy-server process and its flags, so it restarts as it ran.
pub struct Server {
    pub id: String,
    pub address: Ipv4Addr,
    args: Vec<String>,
    dir: PathBuf,
    starts: u32,
    process: Option<Process>,
}

impl Server {
    /// Server `index` of [`SERVERS`] at `address`: its agent port
    /// (TLS with `cert` and `key`) is the Service's konnectivity port, its
    /// API server side the Unix socket `uds`; `more` are flags of the
    /// caller's (the agents' authentication). Started.
    pub fn start_new(
        index: u8,
        address: Ipv4Addr,
        uds: &Path,
        (cert, key): (&Path, &Path),
        more: Vec<String>,
        dir: &Path,
    ) -> Server {
        let id = format!("server-{index}");
        let mut args = vec![
            "--mode=grpc".into(),
            format!("--uds-name={}", uds.display()),
            "--delete-existing-uds-file".into(),
            "--server-port=0".into(),
            format!("--cluster-cert={}", cert.display()),
            format!("--cluster-key={}", key.display()),
            format!("--agent-port={KONNECTIVITY_PORT}"),
            format!("--agent-bind-address={address}"),
            format!("--admin-port={ADMIN_PORT}"),
            format!("--admin-bind-address={address}"),
            format!("--health-port={HEALTH_PORT}"),
            format!("--health-bind-address={address}"),
            format!("--server-id={id}"),
            format!("--server-count={SERVERS}"),
            "--v=2".into(),
        ];
        args.extend(more);
        let mut server = Server {
            id,
            address,
            args,
            dir: dir.to_path_buf(),
            starts: 0,
            process: None,
        };
        server.start();
        server
    }

    /// Starts the process (again, after [`Server::stop`]), as it ran.
    pub fn start(&mut self) {
        let bin = bin_dir("konnectivity").join("proxy-server");
        self.starts += 1;
        let log = self.dir.join(format!("{}.{}.log", self.id, self.starts));
        self.process = Some(Process::spawn(&bin, &self.args, &self.dir, log));
    }

    pub fn stop(&mut self) {
        self.process = None;
    }

    /// The server's metrics, from its admin port.
    pub fn metrics(&self) -> Option<String> {
        metrics_at(SocketAddr::from((self.address, ADMIN_PORT)))
    }

    /// Agents this server holds a ready connection of.
    pub fn agents(&self) -> Option<f64> {
        metric(
            &self.metrics()?,
            "konnectivity_network_proxy_server_ready_backend_connections",
        )
    }

    pub fn tail(&self) -> String {
        self.process
            .as_ref()
            .map(Process::tail)
            .unwrap_or_else(|| "(stopped)".into())
    }
}

/// Writes a serving certificate of the tenant's CA for
/// `KONNECTIVITY_HOST` into `dir`: the servers' agent-side certificate and
/// key files.
pub fn write_server_cert(ca_pem: &str, ca_key_pem: &str, dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = konnectivity_leaf(KONNECTIVITY_HOST, ca_pem, ca_key_pem);
    let (crt, pem) = (dir.join("cluster.crt"), dir.join("cluster.key"));
    std::fs::write(&crt, cert.pem()).unwrap();
    std::fs::write(&pem, key.serialize_pem()).unwrap();
    (crt, pem)
}

/// The body of a 200 to GET /metrics at `addr` (the servers' and the
/// agent's metrics are plain HTTP).
fn metrics_at(addr: SocketAddr) -> Option<String> {
    http_get(addr, "/metrics")
        .filter(|(status, _)| *status == 200)
        .map(|(_, body)| body)
}

/// The sum of every series of `name` in a Prometheus text exposition.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    let values: Vec<f64> = text
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// What a control plane provider writes: the konnectivity port's endpoints
/// are `servers`; the bed's own slice keeps the API port only.
pub async fn route_konnectivity_to(bed: &Bed, servers: &[Ipv4Addr]) {
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(bed.client.clone(), NS);
    slices
        .patch(
            &format!("{CLUSTER}-backends"),
            &PatchParams::default(),
            &Patch::Merge(json!({"ports": [{"name": "api", "port": API_PORT, "protocol": "TCP"}]})),
        )
        .await
        .unwrap();
    let endpoints: Vec<_> = servers
        .iter()
        .map(|address| {
            json!({"addresses": [address.to_string()],
                   "conditions": {"ready": true, "serving": true, "terminating": false}})
        })
        .collect();
    apply(
        &bed.client,
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": format!("{CLUSTER}-konnectivity"), "namespace": NS,
                            "labels": {"kubernetes.io/service-name": CLUSTER,
                                       "endpointslice.kubernetes.io/managed-by": "hcp-ingress-test"}},
               "addressType": "IPv4",
               "endpoints": endpoints,
               "ports": [{"name": "konnectivity", "port": KONNECTIVITY_PORT, "protocol": "TCP"}]}),
        "test",
    )
    .await;
}

/// Waits until the ingress at `ingress` has taken a stopped server off
/// the konnectivity route: [`route_konnectivity_to`] only writes the
/// endpoints, and the ingress controller applies them when it gets to
/// them (seconds under load). Restarted before that, the server would take
/// the agent back through the old route, and the cut would never show.
///
/// While `stopped`'s agent port has no server, a listener there accepts
/// and closes every connection: a dial the ingress still sends there is
/// counted, and its handshake fails (a refused port would let the ingress
/// retry it on another server and hide it). The cut is in effect when
/// [`CUT_DIALS`] dials in a row each complete a handshake with a live
/// server and none reached the listener. Returns how long it took.
pub async fn await_route_cut(ingress: SocketAddr, stopped: Ipv4Addr) -> Duration {
    let listener = tokio::net::TcpListener::bind((stopped, KONNECTIVITY_PORT))
        .await
        .unwrap_or_else(|e| panic!("a listener at {stopped}:{KONNECTIVITY_PORT}: {e}"));
    let reached = Arc::new(AtomicUsize::new(0));
    let counter = reached.clone();
    let accepting = tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            drop(conn);
        }
    });
    let started = Instant::now();
    let timed_out = loop {
        let before = reached.load(Ordering::SeqCst);
        let mut failed = None;
        for _ in 0..CUT_DIALS {
            if let Some(error) = look(ingress, KONNECTIVITY_HOST).await.error {
                failed = Some(error);
            }
        }
        let to_stopped = reached.load(Ordering::SeqCst) - before;
        if failed.is_none() && to_stopped == 0 {
            break None;
        }
        if started.elapsed() > Duration::from_secs(180) {
            break Some(format!(
                "of {CUT_DIALS} dials, {to_stopped} reached {stopped}; a failed handshake said {failed:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // The listener is gone, its port free, once the task is: the server
    // that restarts next binds the same address and port.
    accepting.abort();
    let _ = accepting.await;
    if let Some(last_round) = timed_out {
        panic!(
            "the ingress at {ingress} still sends {KONNECTIVITY_HOST} to {stopped} 180 s after the route was cut: {last_round}"
        );
    }
    started.elapsed()
}

/// Dials in a row that must all reach a live server for
/// [`await_route_cut`]: with two endpoints spread round-robin (or at
/// random), a route that still holds the stopped one sends it one of them.
const CUT_DIALS: usize = 8;

/// A free loopback port the agent accepts: proxy-agent refuses ports in
/// the IANA dynamic range (above 49151), where Linux hands out most of its
/// ephemeral ones.
fn free_registered_port() -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free loopback port");
        if (1024..=49151).contains(&port) {
            return port;
        }
    }
}

/// The upstream agent as a process on this host, dialling
/// `konnectivityHost` at the ingress: the name resolves, in a mount
/// namespace of the agent's own, through an /etc/hosts that maps it to
/// the ingress's address, as a node's resolver would. The agent takes the
/// SNI and the name it verifies from that host name; the tenant's CA is
/// all it trusts.
pub struct Agent {
    process: Process,
    health: u16,
}

impl Agent {
    pub fn start(ingress: SocketAddr, ca_pem: &str, dir: &Path) -> Agent {
        let hosts = dir.join("agent-hosts");
        std::fs::write(
            &hosts,
            format!(
                "127.0.0.1 localhost\n{} {KONNECTIVITY_HOST}\n",
                ingress.ip()
            ),
        )
        .unwrap();
        let ca = dir.join("agent-ca.crt");
        std::fs::write(&ca, ca_pem).unwrap();
        let (health, admin) = (free_registered_port(), free_registered_port());
        let agent = bin_dir("konnectivity").join("proxy-agent");
        let args: Vec<String> = vec![
            "--mount".into(),
            "--propagation=private".into(),
            "--".into(),
            "sh".into(),
            "-c".into(),
            r#"mount --bind "$0" /etc/hosts && exec "$@""#.into(),
            hosts.display().to_string(),
            agent.display().to_string(),
            format!("--proxy-server-host={KONNECTIVITY_HOST}"),
            format!("--proxy-server-port={}", ingress.port()),
            format!("--ca-cert={}", ca.display()),
            "--health-server-host=127.0.0.1".into(),
            format!("--health-server-port={health}"),
            "--admin-bind-address=127.0.0.1".into(),
            format!("--admin-server-port={admin}"),
            "--v=2".into(),
        ];
        let process = Process::spawn(
            Path::new("unshare"),
            &args,
            dir,
            dir.join("proxy-agent.log"),
        );
        Agent { process, health }
    }

    /// Server connections the agent holds, from its metrics (served on its
    /// health port).
    pub fn open_server_connections(&self) -> Option<f64> {
        metric(
            &metrics_at(SocketAddr::from(([127, 0, 0, 1], self.health)))?,
            "konnectivity_network_proxy_agent_open_server_connections",
        )
    }
}

/// The agent, dialling `konnectivityHost` at `ingress`, comes to hold a
/// connection to each of [`SERVERS`] real servers behind the tenant's
/// konnectivity route, as both sides count it; the failure names the
/// servers it never reached, with the ingress's, the agent's and the
/// servers' logs.
pub async fn assert_agent_reaches_every_server(bed: &Bed, ingress: SocketAddr, consumer: &Process) {
    if !can_run() {
        return;
    }
    let dir = bed.dir.path();
    let (cert, key) = write_server_cert(bed.tenant.ca_pem(), bed.tenant.ca_key_pem(), dir);
    let servers: Vec<Server> = (0..SERVERS)
        .map(|i| {
            Server::start_new(
                i,
                bed.net.add_address(i),
                &dir.join(format!("server-{i}.sock")),
                (&cert, &key),
                Vec::new(),
                dir,
            )
        })
        .collect();
    route_konnectivity_to(bed, &servers.iter().map(|s| s.address).collect::<Vec<_>>()).await;
    let agent = Agent::start(ingress, bed.tenant.ca_pem(), dir);

    let started = Instant::now();
    let deadline = started + Duration::from_secs(90);
    loop {
        let held = agent.open_server_connections();
        let each: Vec<Option<f64>> = servers.iter().map(Server::agents).collect();
        if held == Some(f64::from(SERVERS)) && each.iter().all(|n| *n == Some(1.0)) {
            eprintln!(
                "konnectivity through {ingress}: the agent holds {SERVERS} server connections, each server one agent ({:?})",
                started.elapsed()
            );
            return;
        }
        if Instant::now() > deadline {
            let missing: Vec<&str> = servers
                .iter()
                .zip(&each)
                .filter(|(_, n)| **n != Some(1.0))
                .map(|(s, _)| s.id.as_str())
                .collect();
            let mut logs = String::new();
            for server in &servers {
                logs.push_str(&format!(
                    "--- {} ({})\n{}\n",
                    server.id,
                    server.address,
                    server.tail()
                ));
            }
            panic!(
                "the konnectivity agent dialling {KONNECTIVITY_HOST} at {ingress} never reached {missing:?} within 90 s: each server's ready agents {each:?}, the agent's open server connections {held:?} (None: unread)\n{logs}--- the agent\n{}\n--- the ingress\n{}",
                agent.process.tail(),
                consumer.tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
