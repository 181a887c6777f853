//! The HAProxy Kubernetes Ingress Controller (haproxytech/kubernetes-ingress,
//! what k0smotron, Kamaji and Steward users run for class `haproxy`) reads
//! our Ingress with its `haproxy.org/ssl-passthrough` annotation and
//! configures a real HAProxy (3.0, Debian trixie's source package: the
//! controller needs >= 2.8, Debian 12 ships 2.6) to pass the tenant's TLS
//! through by SNI.
//!
//! The controller runs in its external mode (`--external`: a kubeconfig, and
//! HAProxy as a program it starts and reloads itself), every listener on a
//! free port.

use std::{
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use hcp_ingress::render::{ROUTE_PREFIX, RouteKind};
use serde_json::json;

use crate::{
    bed::{Bed, CLUSTER, apply, ready},
    consumers::{Process, assert_passthrough, built_by, free_port},
    konnectivity::assert_agent_reaches_every_server,
};

const HOW_TO_BUILD: &str = "run `bash hack/consumers/haproxytech.sh --build-only` (builds Debian trixie's HAProxy 3.0 from Debian's source package and the haproxytech controller from the Go module proxy, versions in hack/consumers/versions.env)";

/// The folder `hack/consumers/haproxytech.sh` builds `what` into
/// (`haproxytech`: the controller; `haproxy`: HAProxy).
fn bin_dir(what: &str) -> PathBuf {
    built_by("hack/consumers/haproxytech.sh", what)
}

/// The HAProxy the controller started: it daemonizes (the controller's
/// `haproxy.cfg` says `daemon` and `master-worker`), so it is not among the
/// controller's descendants that [`Process`] kills. Its master is found by
/// the pid file the controller configured, and it and its workers are
/// killed on drop, by pid. Declared before the controller's [`Process`], so
/// it is dropped after it: a running controller would start HAProxy again.
struct Haproxy {
    pid_file: PathBuf,
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let Some(master) = std::fs::read_to_string(&self.pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
        else {
            return;
        };
        // Only an HAProxy: the pid file may outlive the process it named.
        let comm = std::fs::read_to_string(format!("/proc/{master}/comm")).unwrap_or_default();
        if comm.trim() != "haproxy" {
            return;
        }
        let mut pids = children(master);
        pids.push(master);
        for pid in pids {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// The direct children of `pid` (an HAProxy master's workers).
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|task| {
            std::fs::read_to_string(task.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

fn dir(path: &Path) -> String {
    std::fs::create_dir_all(path).unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxytech_passes_tls_through_by_sni_with_our_haproxy_ingress() {
    let controller = bin_dir("haproxytech").join("haproxy-ingress-controller");
    let haproxy = bin_dir("haproxy").join("haproxy");
    if !ready(
        &[],
        &[
            (controller.clone(), HOW_TO_BUILD),
            (haproxy.clone(), HOW_TO_BUILD),
        ],
    ) {
        return;
    }
    let bed = Bed::start(&[]).await;
    // The IngressClass haproxytech's Helm chart installs for class
    // `haproxy`; the controller serves it with `--ingress.class=haproxy`.
    apply(
        &bed.client,
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
               "metadata": {"name": "haproxy"},
               "spec": {"controller": "haproxy.org/ingress-controller/haproxy"}}),
        "platform",
    )
    .await;

    // With passthrough on, the controller moves its HTTPS frontend to
    // 127.0.0.1 on the HTTPS port (behind a PROXY-protocol hop) and binds
    // its TCP frontend, the one that reads the SNI, on the IPv4 bind
    // address and the same port. Bound to 127.0.0.1 too, the two would
    // share one address and port (SO_REUSEPORT) and the kernel would split
    // connections between them; 127.0.0.2 (loopback as well) keeps them
    // apart, as a pod IP does in a cluster.
    let ingress_ip = Ipv4Addr::new(127, 0, 0, 2);
    let https = free_port();
    let files = bed.dir.path().join("haproxytech");
    let runtime = files.join("run");
    let haproxy_guard = Haproxy {
        pid_file: runtime.join("haproxy.pid"),
    };
    let process = Process::spawn(
        &controller,
        &[
            "--external".into(),
            format!("--kubeconfig={}", bed.consumer_kubeconfig().display()),
            format!("--program={}", haproxy.display()),
            format!("--config-dir={}", dir(&files.join("etc"))),
            format!("--runtime-dir={}", dir(&runtime)),
            "--ingress.class=haproxy".into(),
            format!("--ipv4-bind-address={ingress_ip}"),
            "--disable-ipv6".into(),
            format!("--https-bind-port={https}"),
            format!("--http-bind-port={}", free_port()),
            // Stats, healthz and the controller's local default backend
            // bind every address (no flag for theirs), the local peer
            // 127.0.0.1: free ports keep them all off the defaults (1024,
            // 1042, 6061, 10000) another process may hold.
            format!("--stats-bind-port={}", free_port()),
            format!("--healthz-bind-port={}", free_port()),
            format!("--localpeer-port={}", free_port()),
            format!("--default-backend-port={}", free_port()),
            // No metrics/pprof server; and no QUIC: this HAProxy is built
            // without it.
            "--controller-port=0".into(),
            "--disable-quic".into(),
            // Its changes reach HAProxy once a sync period: 1 s, not 5 s,
            // keeps the test's waits short.
            "--sync-period=1s".into(),
            "--log=debug".into(),
        ],
        bed.dir.path(),
        bed.dir.path().join("haproxytech.log"),
    );

    bed.create_control_plane_ingress(Some("haproxy"), json!({"controller": "haproxy"}))
        .await;
    bed.route_written_by_controller(RouteKind::Ingress, &format!("{ROUTE_PREFIX}{CLUSTER}"))
        .await;
    assert_passthrough(&bed, SocketAddr::from((ingress_ip, https)), &process).await;
    assert_agent_reaches_every_server(&bed, SocketAddr::from((ingress_ip, https)), &process).await;
    // The HAProxy it ran is the one built for it, not the system's 2.6.
    let log = std::fs::read_to_string(&process.log).unwrap_or_default();
    assert!(
        log.contains("Running with HAProxy version 3."),
        "the controller did not run HAProxy 3; its log ends with:\n{}",
        process.tail()
    );
    let (reason, _) = bed.condition("RouteReady", "True").await;
    assert_eq!(reason, "Applied");
    drop(process);
    drop(haproxy_guard);
    bed.finish().await;
}
