//! Load hardening at test scale (hundreds of connections; the 10,000
//! connection run is `hack/load-proxy.sh`): many held connections, the
//! connection limit, slowloris clients, running out of file descriptors.

use crate::world::{INGRESS, Ingress, World};

const ACTIVE: &str = "hcp_proxy_connections_active{path=\"reencrypt\"}";
const REFUSED: &str = "hcp_proxy_connections_refused_total{reason=\"limit\"}";

#[test]
fn hundreds_of_tls_connections_are_held_and_still_work() {
    let mut w = World::new(Ingress::Haproxy);
    // 300 connections need ~600 descriptors: started at a soft limit of 256
    // (as container runtimes often do, at 1024), the proxy lifts its soft
    // limit to the hard one itself.
    w.proxy_wrapper = ["prlimit", "--nofile=256:4096"].map(String::from).to_vec();
    w.start_proxy("reencrypt", &INGRESS, "");
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", w.pid("proxy"))).unwrap();
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    assert_eq!(
        open_files.split_whitespace().collect::<Vec<_>>()[3..5],
        ["4096", "4096"],
        "{open_files}"
    );
    let ca = w.pki.path("ca-a.crt");
    let mut conns = w.many(300, &["--ca", &ca]);
    assert_eq!(conns.opened["opened"], 300, "{}", conns.opened);
    assert_eq!(w.metric(ACTIVE), 300.0);
    // Each still carries a request after all of them were opened.
    let r = conns.cmd("request");
    assert_eq!(r["ok"], 300, "{r}");
    conns.close();
    w.eventually("every connection closed", || w.metric(ACTIVE) == 0.0);
    assert_eq!(w.metric(REFUSED), 0.0);
    assert_eq!(w.admin("/readyz").0, 200);
}

#[test]
fn connections_beyond_the_limit_are_reset_at_once_and_counted() {
    let mut w = World::new(Ingress::Haproxy);
    w.start_proxy("reencrypt", &INGRESS, "limits: {maxConnections: 20}\n");
    let ca = w.pki.path("ca-a.crt");
    let mut held = w.many(20, &["--ca", &ca]);
    assert_eq!(held.opened["opened"], 20, "{}", held.opened);
    assert_eq!(w.metric(REFUSED), 0.0, "the series exists from the start");
    // Ten more: accepted and reset at once, not left waiting in the backlog
    // (a wait would end in the client's 10 s timeout, TimeoutError).
    let extra = w.many(10, &["--ca", &ca]);
    assert_eq!(extra.opened["opened"], 0, "{}", extra.opened);
    assert_eq!(
        extra.opened["errors"]["ConnectionResetError"], 10,
        "{}",
        extra.opened
    );
    extra.close();
    assert_eq!(w.metric(REFUSED), 10.0);
    assert!(
        w.log("proxy").contains("connection limit reached"),
        "{}",
        w.logs()
    );
    // The twenty keep working; once they close, new clients are served.
    let r = held.cmd("request");
    assert_eq!(r["ok"], 20, "{r}");
    held.close();
    w.eventually("slots freed", || w.metric(ACTIVE) == 0.0);
    let r = w.get_service();
    assert_eq!(r["status"], 200, "{r}");
    assert_eq!(w.metric(REFUSED), 10.0);
}

#[test]
fn slowloris_clients_are_closed_at_the_handshake_timeout_and_block_nobody() {
    let mut w = World::new(Ingress::Haproxy);
    w.start_proxy("reencrypt", &INGRESS, "timeouts: {handshake: 2s}\n");
    let ca = w.pki.path("ca-a.crt");
    // Silent after connect, half a record header, and a complete
    // ClientHello with nothing after it (stalls the TLS handshake proper).
    let mut stalled = [
        (w.many(100, &["--stall", "silent"]), 100),
        (w.many(50, &["--stall", "partial"]), 50),
        (w.many(50, &["--stall", "hello", "--ca", &ca]), 50),
    ];
    for (m, n) in &stalled {
        assert_eq!(m.opened["opened"], *n, "{}", m.opened);
    }
    // Meanwhile everyone else is served.
    for _ in 0..3 {
        let r = w.get_service();
        assert_eq!(r["status"], 200, "{r}");
    }
    // The proxy closes every stalled connection (by the deadline; the client
    // waits far longer, so a miss shows as `open`).
    for (m, n) in &mut stalled {
        let r = m.cmd("wait 20");
        assert_eq!(r["closed"], *n, "{r}");
        assert_eq!(r["open"], 0, "{r}");
    }
    let timeouts = w.metric("hcp_proxy_handshake_errors_total{reason=\"timeout\"}");
    assert!(timeouts >= 200.0, "{timeouts}");
    eprintln!("slowloris: {timeouts} handshake timeouts counted");
    for (m, _) in stalled {
        m.close();
    }
    assert_eq!(w.get_service()["status"], 200);
}

#[test]
fn running_out_of_file_descriptors_is_counted_and_survived() {
    let mut w = World::new(Ingress::Haproxy);
    // 64 descriptors: a few dozen connections exhaust them.
    w.proxy_wrapper = ["prlimit", "--nofile=64:64"].map(String::from).to_vec();
    w.start_proxy("reencrypt", &INGRESS, "timeouts: {handshake: 60s}\n");
    // Connections that say nothing hold a descriptor each until the client
    // closes them; the kernel queues those the proxy cannot accept.
    let silent = w.many(150, &["--stall", "silent"]);
    assert_eq!(silent.opened["opened"], 150, "{}", silent.opened);
    w.eventually("accept fails with EMFILE", || {
        w.log("proxy").contains("failed to accept")
    });
    // Let it retry a while (each retry is an accept error).
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(w.running("proxy"), "{}", w.logs());
    silent.close();
    // Descriptors free up: served again, without a restart.
    w.eventually("served again", || w.get_service()["status"] == 200);
    assert!(w.running("proxy"));
    assert_eq!(w.admin("/healthz").0, 200);
    let errors = w.metric("hcp_proxy_accept_errors_total{reason=\"fds\"}");
    assert!(errors >= 2.0, "accept errors: {errors}");
    // Rate-limited: far fewer log lines than errors.
    let lines = w
        .log("proxy")
        .lines()
        .filter(|l| l.contains("failed to accept"))
        .count();
    assert!((lines as f64) < errors, "{lines} lines for {errors} errors");
    eprintln!("out of descriptors: {errors} accept errors counted, {lines} log lines");
}
