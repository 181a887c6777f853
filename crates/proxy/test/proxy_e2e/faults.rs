//! Faults around the proxy: an upstream that resets, an upstream certificate
//! from another CA, DNS that fails, a garbage config file, SIGTERM while
//! transfers run.

use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use crate::world::{self, API_A, INGRESS, Ingress, SERVICE_IP, World};

/// Ports (on the proxy's side) of the ingress connections that stay
/// established across several looks: the held client connections, not the
/// health checks, which last a few milliseconds.
fn long_lived_upstream_ports(w: &World) -> HashSet<String> {
    let look = || -> HashSet<String> {
        let out = world::run(&[
            "ip",
            "netns",
            "exec",
            &w.lb,
            "ss",
            "-tnH",
            "state",
            "established",
            "( sport = :443 )",
        ]);
        out.lines()
            .filter_map(|l| l.split_whitespace().last())
            .filter_map(|peer| peer.rsplit_once(':').map(|(_, port)| port.to_string()))
            .collect()
    };
    let mut stable = look();
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(150));
        stable = stable.intersection(&look()).cloned().collect();
    }
    stable
}

#[test]
fn an_upstream_reset_mid_stream_closes_that_client_promptly_and_nobody_else() {
    let mut w = World::new(Ingress::Haproxy);
    w.start_proxy("reencrypt", &INGRESS, "");
    let ca = w.pki.path("ca-a.crt");
    let victim = w.hold(&[SERVICE_IP, "443", "--ca", &ca]);
    let ports = long_lived_upstream_ports(&w);
    assert_eq!(ports.len(), 1, "one held connection upstream: {ports:?}");
    let port = ports.into_iter().next().unwrap();
    let other = w.hold(&[SERVICE_IP, "443", "--ca", &ca]);
    // The ingress side of the victim's upstream connection aborts: the
    // kernel sends the proxy a RST (SOCK_DESTROY).
    let filter = format!("( sport = :443 and dport = :{port} )");
    let killed = world::run(&[
        "ip",
        "netns",
        "exec",
        &w.lb,
        "ss",
        "-K",
        "-tnH",
        "state",
        "established",
        &filter,
    ]);
    assert!(!killed.trim().is_empty(), "no socket killed for {filter}");
    let reset = "hcp_proxy_stream_errors_total{side=\"upstream\",reason=\"reset\"}";
    w.eventually("the reset is counted", || w.metric(reset) == 1.0);
    // The victim's next request finds its connection closed, not hung (the
    // client would report a timeout after 10 s).
    let r = victim.again();
    assert_eq!(r["ok"], false, "{r}");
    assert!(!r["error"].as_str().unwrap().contains("timed out"), "{r}");
    // The other connection and new ones are fine.
    assert_eq!(other.again()["status"], 200);
    assert_eq!(w.get_service()["status"], 200);
    assert_eq!(w.admin("/readyz").0, 200);
    assert!(w.running("proxy"));
}

#[test]
fn an_upstream_certificate_from_another_ca_is_refused_and_readiness_follows() {
    let mut w = World::new(Ingress::Haproxy);
    w.start_proxy("reencrypt", &INGRESS, "");
    assert_eq!(w.get_service()["status"], 200);
    let dir = w.dir.clone();
    let file = |n: &str| dir.join(n);
    let (good_crt, good_key) = (
        std::fs::read(file("tenant-a.crt")).unwrap(),
        std::fs::read(file("tenant-a.key")).unwrap(),
    );
    // Tenant A now serves a certificate our CA does not sign.
    w.pki.write_foreign_tenant_a("rogue");
    std::fs::copy(file("rogue.crt"), file("tenant-a.crt")).unwrap();
    std::fs::copy(file("rogue.key"), file("tenant-a.key")).unwrap();
    w.signal("backends", "TERM");
    w.backends();
    w.eventually("not ready without a usable upstream", || {
        w.admin("/readyz").0 == 503
    });
    let r = w.get_service();
    assert_eq!(r["ok"], false, "refused, never forwarded: {r}");
    // Both addresses tried, both refused for the certificate.
    assert!(w.metric("hcp_proxy_upstream_errors_total{reason=\"certificate\"}") >= 2.0);
    assert!(w.log("proxy").contains("upstream certificate rejected"));
    for a in INGRESS {
        let key = format!("hcp_proxy_upstream_healthy{{address=\"{a}:443\"}}");
        assert_eq!(w.metric(&key), 0.0);
    }
    // The good certificate returns: ready and serving again.
    std::fs::write(file("tenant-a.crt"), good_crt).unwrap();
    std::fs::write(file("tenant-a.key"), good_key).unwrap();
    w.signal("backends", "TERM");
    w.backends();
    w.wait_ready();
    assert_eq!(w.get_service()["status"], 200);
}

#[test]
fn dns_failure_keeps_the_resolved_addresses_and_no_resolution_is_not_ready() {
    let mut w = World::new(Ingress::Haproxy);
    // The node namespace's own resolver files: the name is in /etc/hosts or
    // nowhere (the only nameserver does not exist).
    let unresolvable = "127.0.0.1 localhost\n";
    let resolvable = format!("127.0.0.1 localhost\n{} {API_A}\n", INGRESS[0]);
    w.node_etc(
        "resolv.conf",
        "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
    );
    w.node_etc("hosts", unresolvable);
    w.upstream_extra = "  dns: {minTtl: 1s}\n".into();
    // No addresses: the server name is resolved.
    w.launch_proxy("reencrypt", &[], "");
    let dns = "hcp_proxy_upstream_errors_total{reason=\"dns\"}";
    w.eventually("resolution failures counted", || w.metric(dns) >= 2.0);
    assert_eq!(w.admin("/readyz").0, 503, "not ready before any resolution");
    assert_eq!(w.get_service()["ok"], false);
    assert!(w.running("proxy"));

    w.node_etc("hosts", &resolvable);
    w.wait_ready();
    assert_eq!(w.get_service()["status"], 200);
    let healthy = format!(
        "hcp_proxy_upstream_healthy{{address=\"{}:443\"}}",
        INGRESS[0]
    );
    assert_eq!(w.metric(&healthy), 1.0);

    // The name stops resolving: the known address stays in use.
    w.node_etc("hosts", unresolvable);
    let before = w.metric(dns);
    w.eventually("the new failures counted", || w.metric(dns) >= before + 2.0);
    assert_eq!(w.metric(&healthy), 1.0);
    assert_eq!(w.admin("/readyz").0, 200);
    assert_eq!(w.get_service()["status"], 200);
    assert!(
        w.log("proxy")
            .contains("keeping the previous upstream addresses")
    );
    assert!(w.running("proxy"));
}

#[test]
fn a_garbage_config_file_keeps_the_running_config_and_traffic() {
    let mut w = World::new(Ingress::Haproxy);
    w.start_proxy("reencrypt", &INGRESS, "");
    let ca = w.pki.path("ca-a.crt");
    let held = w.hold(&[SERVICE_IP, "443", "--ca", &ca]);
    let good = std::fs::read(w.config_path()).unwrap();
    std::fs::write(w.config_path(), b"\x00\xff{{{ not: [yaml\n\x7f").unwrap();
    let failure = "hcp_proxy_reloads_total{result=\"failure\"}";
    w.eventually("garbage rejected", || w.metric(failure) == 1.0);
    assert_eq!(w.admin("/readyz").0, 200);
    assert_eq!(w.get_service()["status"], 200);
    assert_eq!(held.again()["status"], 200);
    // Counted once, not at every poll.
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(w.metric(failure), 1.0);
    std::fs::write(w.config_path(), good).unwrap();
    w.eventually("the good file loads again", || {
        w.metric("hcp_proxy_reloads_total{result=\"success\"}") == 1.0
    });
    assert_eq!(w.get_service()["status"], 200);
}

#[test]
fn sigterm_under_load_finishes_transfers_refuses_new_connections_and_exits_zero() {
    let mut w = World::new(Ingress::Haproxy);
    w.start_proxy("reencrypt", &INGRESS, "timeouts: {drain: 6s}\n");
    let ca = w.pki.path("ca-a.crt");
    let mut busy = w.many(20, &["--ca", &ca]);
    assert_eq!(busy.opened["opened"], 20, "{}", busy.opened);
    // One more that stays open and silent past the drain timeout.
    let straggler = w.hold(&[SERVICE_IP, "443", "--ca", &ca]);
    // Requests back to back on all twenty for 3 s; SIGTERM in the middle.
    busy.send("loop 3");
    std::thread::sleep(Duration::from_millis(500));
    let term = Instant::now();
    world::run(&["kill", "-TERM", &w.pid("proxy").to_string()]);
    w.eventually("not ready once draining", || w.admin("/readyz").0 == 503);
    let r = w.get_service();
    assert_eq!(r["ok"], false, "a new connection during the drain: {r}");
    let r = busy.reply();
    assert_eq!(r["ok"], 20, "every transfer finished: {r}");
    assert_eq!(r["failed"], 0, "{r}");
    assert!(r["requests"].as_u64().unwrap() >= 40, "{r}");
    busy.close();
    // The straggler is closed at the drain timeout, and the exit is clean.
    let code = w.signal("proxy", "0");
    assert_eq!(code, Some(0));
    eprintln!("exited {:?} after SIGTERM (drain 6 s)", term.elapsed());
    let r = straggler.again();
    assert_eq!(r["ok"], false, "{r}");
}
