//! Data-path end-to-end tests of `hcp-ingress-proxy` with real peers (the
//! tests against a real kube-apiserver are the controller package's
//! `test/proxy_kube`: this crate's dev-dependencies have no Kubernetes crate).
//!
//! Each test builds its own world (see `world.rs`): a pod namespace, a node
//! namespace running the proxy with its listen address on `lo` (our kernels
//! have no `dummy` link type) behind kube-proxy's DNAT, and an lb namespace
//! with two shared-ingress instances (Debian's HAProxy or nginx stream)
//! routing by SNI to two tenant API stand-ins (nginx, TLS; tenant A accepts
//! client certificates). Needs root, iproute2, iptables, haproxy, nginx with
//! the stream module, python3, curl, ss (iproute2) and prlimit (util-linux): it
//! fails, never skips, without them.

mod faults;
mod hostile;
mod load;
mod pooled;
mod world;

use std::{
    process::Command,
    time::{Duration, Instant},
};

use serde_json::Value;
use world::{ADVERTISE, API_A, API_B, INGRESS, INGRESS6, Ingress, SERVICE_IP, World};

fn tenant(v: &Value) -> Value {
    assert_eq!(v["ok"], true, "request failed: {v}");
    assert_eq!(v["status"], 200, "unexpected status: {v}");
    serde_json::from_str(v["body"].as_str().unwrap()).unwrap()
}

/// The paths every ingress flavour must get right.
fn routes_and_passthrough(w: &World) {
    // No SNI, verifying the service IP against the cluster CA: tenant A,
    // reencrypted, never tenant B.
    for _ in 0..4 {
        let r = w.get_service();
        let t = tenant(&r);
        assert_eq!(t["tenant"], "a", "{r}");
        // Reencrypted: tenant A sees the proxy's connection, no client cert.
        assert_eq!(t["verify"], "NONE");
    }
    // The pod's usual SNI is not a passthrough name: reencrypted too.
    let ca = w.pki.path("ca-a.crt");
    let r = w.get(&[
        SERVICE_IP,
        "443",
        "--sni",
        "kubernetes.default.svc",
        "--ca",
        &ca,
    ]);
    assert_eq!(tenant(&r)["tenant"], "a");

    // SNI = apiHost with a client certificate: passed through untouched,
    // tenant A authenticates the client itself.
    let (cert, key) = (w.pki.path("client.crt"), w.pki.path("client.key"));
    let r = w.get(&[
        SERVICE_IP, "443", "--sni", API_A, "--ca", &ca, "--cert", &cert, "--key", &key,
    ]);
    let t = tenant(&r);
    assert_eq!(t["tenant"], "a");
    assert_eq!(t["verify"], "SUCCESS", "{r}");
    assert!(
        t["client"].as_str().unwrap().contains("CN=e2e-client"),
        "{r}"
    );

    // ALPN: the client's h2 offer reaches tenant A, which picks h2.
    let r = w.get(&[
        SERVICE_IP,
        "443",
        "--ca",
        &ca,
        "--alpn",
        "h2,http/1.1",
        "--no-request",
    ]);
    assert_eq!(r["alpn"], "h2", "{r}");
    let r = w.get(&[SERVICE_IP, "443", "--ca", &ca, "--alpn", "http/1.1"]);
    assert_eq!(r["alpn"], "http/1.1", "{r}");
    assert_eq!(tenant(&r)["tenant"], "a");

    assert!(w.metric("hcp_proxy_connections_total{path=\"reencrypt\"}") >= 7.0);
    assert!(w.metric("hcp_proxy_connections_total{path=\"sni-passthrough\"}") >= 1.0);
    assert!(w.metric("hcp_proxy_bytes_total{path=\"reencrypt\",direction=\"downstream\"}") > 0.0);
    for a in INGRESS {
        assert_eq!(
            w.metric(&format!(
                "hcp_proxy_upstream_healthy{{address=\"{a}:443\"}}"
            )),
            1.0
        );
    }
}

#[test]
fn haproxy_ingress_reencrypts_no_sni_and_passes_client_certificates_through() {
    let mut w = World::new(Ingress::Haproxy);
    w.start_proxy("reencrypt", &INGRESS, "");
    // The proxy put the advertise address on lo itself.
    let addrs = world::run(&["ip", "-n", &w.node, "addr", "show", "dev", "lo"]);
    assert!(addrs.contains(&format!("{ADVERTISE}/32")), "{addrs}");
    routes_and_passthrough(&w);
    // Tenant B's name is not routable through this node's proxy: a client
    // that asks for it by SNI is reencrypted to tenant A, never to B.
    let ca = w.pki.path("ca-a.crt");
    let r = w.get(&[SERVICE_IP, "443", "--sni", API_B, "--ca", &ca]);
    assert!(
        !r["body"]
            .as_str()
            .unwrap_or("")
            .contains("\"tenant\":\"b\""),
        "{r}"
    );
}

#[test]
fn nginx_stream_ingress_reencrypts_no_sni_and_passes_client_certificates_through() {
    let mut w = World::new(Ingress::NginxStream);
    w.start_proxy("reencrypt", &INGRESS, "");
    routes_and_passthrough(&w);
}

#[test]
fn ipv6_upstreams_and_least_connections() {
    let mut w = World::new(Ingress::Haproxy);
    w.start_proxy(
        "reencrypt",
        &INGRESS6,
        "", // balance is set below through a reload, exercising it too
    );
    let r = w.get_service();
    assert_eq!(tenant(&r)["tenant"], "a");
    // Both IPv6 ingress addresses pass their health check (the first request
    // may come before the second address's first check finished).
    for a in INGRESS6 {
        let key = format!("hcp_proxy_upstream_healthy{{address=\"[{a}]:443\"}}");
        w.eventually(&format!("{a} healthy"), || w.metric(&key) == 1.0);
    }
    let cfg = std::fs::read_to_string(w.config_path()).unwrap();
    let cfg = cfg.replace(
        "  port: 443\n",
        "  port: 443\n  balance: least-connections\n",
    );
    std::fs::write(w.config_path(), cfg).unwrap();
    w.eventually("reload", || {
        w.metric("hcp_proxy_reloads_total{result=\"success\"}") >= 1.0
    });
    assert_eq!(tenant(&w.get_service())["tenant"], "a");
}

#[test]
fn ipv6_listen_address_and_service_ip() {
    let mut w = World::new(Ingress::Haproxy);
    w.listen = world::ADVERTISE6.to_string();
    w.start_proxy("reencrypt", &INGRESS6, "");
    // The proxy put the IPv6 advertise address on lo itself (/128, no DAD).
    let addrs = world::run(&["ip", "-n", &w.node, "-6", "addr", "show", "dev", "lo"]);
    assert!(
        addrs.contains(&format!("{}/128", world::ADVERTISE6)),
        "{addrs}"
    );
    // A pod dialing the IPv6 service IP, no SNI, verifying the IP SAN.
    let ca = w.pki.path("ca-a.crt");
    let r = w.get(&[world::SERVICE_IP6, "443", "--ca", &ca]);
    assert_eq!(tenant(&r)["tenant"], "a");
    let (cert, key) = (w.pki.path("client.crt"), w.pki.path("client.key"));
    let r = w.get(&[
        world::SERVICE_IP6,
        "443",
        "--sni",
        API_A,
        "--ca",
        &ca,
        "--cert",
        &cert,
        "--key",
        &key,
    ]);
    assert_eq!(tenant(&r)["verify"], "SUCCESS", "{r}");
}

/// The proxy's allocator reserves its arenas large; on a node whose
/// transparent huge pages are `always`, every arena touched would take RSS
/// in 2 MiB steps. The proxy turns THP off for itself (a build setting of
/// its allocator, `.cargo/config.toml`), whatever the node's setting.
#[test]
fn proxy_runs_with_transparent_huge_pages_off() {
    let mut w = World::new(Ingress::Haproxy);
    w.start_proxy("reencrypt", &INGRESS, "");
    routes_and_passthrough(&w);
    let status = std::fs::read_to_string(format!("/proc/{}/status", w.pid("proxy"))).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("THP_enabled:"))
        .expect("the kernel reports THP_enabled (Linux >= 5.0)");
    assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
}

#[test]
fn passthrough_mode_forwards_bytes_untouched() {
    let mut w = World::new(Ingress::Haproxy);
    w.start_proxy("passthrough", &INGRESS, "");
    // With SNI = apiHost the ingress can route it; tenant A's own cert is seen.
    let ca = w.pki.path("ca-a.crt");
    let r = w.get(&[SERVICE_IP, "443", "--sni", API_A, "--ca", &ca]);
    assert_eq!(tenant(&r)["tenant"], "a");
    // Without SNI the shared ingress cannot route: closed, as expected of L4.
    let r = w.get_service();
    assert_eq!(r["ok"], false, "{r}");
}

#[test]
fn proxy_protocol_mode_routes_on_the_authority_tlv() {
    let mut w = World::new(Ingress::HaproxyProxyProtocol);
    w.start_proxy("proxy-protocol", &INGRESS, "passthroughServerNames: []\n");
    // No SNI at all: HAProxy routes on the PROXY v2 authority = apiHost,
    // and the client talks TLS end to end with tenant A.
    let r = w.get_service();
    let t = tenant(&r);
    assert_eq!(t["tenant"], "a");
    let ca = w.pki.path("ca-a.crt");
    let (cert, key) = (w.pki.path("client.crt"), w.pki.path("client.key"));
    let r = w.get(&[
        SERVICE_IP, "443", "--ca", &ca, "--cert", &cert, "--key", &key,
    ]);
    assert_eq!(tenant(&r)["verify"], "SUCCESS", "{r}");
    assert!(w.metric("hcp_proxy_connections_total{path=\"proxy-protocol\"}") >= 1.0);
}

/// The same over IPv6 end to end: the proxy on the IPv6 advertise address,
/// the pod dialing the IPv6 service IP, the ingress dialed over IPv6, and a
/// PROXY v2 header with IPv6 addresses that HAProxy reads and routes on.
#[test]
fn proxy_protocol_mode_over_ipv6() {
    let mut w = World::new(Ingress::HaproxyProxyProtocol);
    w.listen = world::ADVERTISE6.to_string();
    w.start_proxy("proxy-protocol", &INGRESS6, "passthroughServerNames: []\n");
    let ca = w.pki.path("ca-a.crt");
    let (cert, key) = (w.pki.path("client.crt"), w.pki.path("client.key"));
    let r = w.get(&[
        world::SERVICE_IP6,
        "443",
        "--ca",
        &ca,
        "--cert",
        &cert,
        "--key",
        &key,
    ]);
    let t = tenant(&r);
    assert_eq!(t["tenant"], "a");
    assert_eq!(t["verify"], "SUCCESS", "{r}");
    assert!(w.metric("hcp_proxy_connections_total{path=\"proxy-protocol\"}") >= 1.0);
}

#[test]
fn killing_one_ingress_instance_keeps_new_connections_working() {
    let mut w = World::new(Ingress::Haproxy);
    w.start_proxy("reencrypt", &INGRESS, "");
    let t = Instant::now();
    assert_eq!(tenant(&w.get_service())["tenant"], "a");
    let baseline = t.elapsed();
    let killed = Instant::now();
    w.signal("ingress0", "KILL");
    // The next connection succeeds: a refused connect retries the other
    // address before any byte is forwarded. Times are printed, not asserted.
    let r = w.get_service();
    assert_eq!(tenant(&r)["tenant"], "a", "{r}");
    let first_ok = killed.elapsed();
    let down = format!(
        "hcp_proxy_upstream_healthy{{address=\"{}:443\"}}",
        INGRESS[0]
    );
    w.eventually("health marks the killed instance down", || {
        w.metric(&down) == 0.0
    });
    eprintln!(
        "failover: first request after the kill answered after {first_ok:?} (a request before the kill took \
         {baseline:?}, python start-up included); marked down after {:?}",
        killed.elapsed()
    );
    for _ in 0..4 {
        assert_eq!(tenant(&w.get_service())["tenant"], "a");
    }
    assert_eq!(
        w.admin("/readyz").0,
        200,
        "one healthy upstream is enough to be ready"
    );
    // It comes back when the instance does.
    w.start_ingress(Ingress::Haproxy, 0);
    w.eventually("health marks it up again", || w.metric(&down) == 1.0);
    // With both gone, the proxy is not ready.
    w.signal("ingress0", "KILL");
    w.signal("ingress1", "KILL");
    w.eventually("not ready without upstreams", || {
        w.admin("/readyz").0 == 503
    });
}

#[test]
fn rotated_certificate_serves_the_next_handshake_and_spares_established_ones() {
    let mut w = World::new(Ingress::Haproxy);
    w.start_proxy("reencrypt", &INGRESS, "");
    let ca = w.pki.path("ca-a.crt");
    let before = w.get_service();
    let held = w.hold(&[SERVICE_IP, "443", "--ca", &ca]);
    let new_der = hex(&w.pki.rotate_proxy_leaf());
    assert_ne!(before["cert"].as_str().unwrap(), new_der);
    w.eventually("the next handshake presents the new certificate", || {
        w.get_service()["cert"].as_str() == Some(new_der.as_str())
    });
    // The connection opened before the rotation still works.
    let again = held.again();
    assert_eq!(tenant(&again)["tenant"], "a");
    assert_eq!(again["cert"], before["cert"]);

    // A broken config is rejected, the running one stays in force.
    let good = std::fs::read_to_string(w.config_path()).unwrap();
    std::fs::write(
        w.config_path(),
        good.replace("port: 443\n  addresses", "port: 70000\n  addresses"),
    )
    .unwrap();
    w.eventually("bad config rejected", || {
        w.metric("hcp_proxy_reloads_total{result=\"failure\"}") >= 1.0
    });
    assert_eq!(tenant(&w.get_service())["tenant"], "a");
    // So is a key that does not match the certificate.
    std::fs::write(w.config_path(), &good).unwrap();
    let key = std::fs::read(w.dir.join("proxy.key")).unwrap();
    std::fs::write(
        w.dir.join("proxy.key"),
        std::fs::read(w.dir.join("client.key")).unwrap(),
    )
    .unwrap();
    w.eventually("mismatched key rejected", || {
        w.metric("hcp_proxy_reloads_total{result=\"failure\"}") >= 2.0
    });
    assert_eq!(w.get_service()["cert"].as_str(), Some(new_der.as_str()));
    std::fs::write(w.dir.join("proxy.key"), key).unwrap();
}

#[test]
fn malformed_or_oversized_client_hellos_close_only_that_connection() {
    let mut w = World::new(Ingress::Haproxy);
    w.start_proxy(
        "reencrypt",
        &INGRESS,
        "limits: {maxClientHelloBytes: 4096}\n",
    );
    let ca = w.pki.path("ca-a.crt");
    let held = w.hold(&[SERVICE_IP, "443", "--ca", &ca]);

    // Plain HTTP, a handshake record that is not a ClientHello, truncated
    // extensions, and a ClientHello declaring 1 MiB.
    let cases = [
        (
            "not_tls",
            "474554202f20485454502f312e310d0a0d0a".to_string(),
        ),
        ("malformed", "16030100080200000403030000".to_string()),
        (
            "malformed",
            format!(
                "160301002f0100002b0303{}0000021301 0100ffff",
                "00".repeat(32)
            )
            .replace(' ', ""),
        ),
        (
            "oversized",
            format!("1603014000010ffffc0303{}", "00".repeat(200)),
        ),
    ];
    for (reason, hex) in &cases {
        let before = w.metric(&format!(
            "hcp_proxy_handshake_errors_total{{reason=\"{reason}\"}}"
        ));
        let r = w.raw(hex);
        assert_eq!(r["closed"], true, "{reason}: {r}");
        assert_eq!(r["received"], 0, "{reason}: {r}");
        w.eventually(&format!("{reason} counted"), || {
            w.metric(&format!(
                "hcp_proxy_handshake_errors_total{{reason=\"{reason}\"}}"
            )) > before
        });
    }
    // Nobody else noticed.
    assert_eq!(tenant(&held.again())["tenant"], "a");
    assert_eq!(tenant(&w.get_service())["tenant"], "a");
    assert_eq!(w.admin("/readyz").0, 200);
}

#[test]
fn sigterm_drains_established_connections_and_exits_zero() {
    let mut w = World::new(Ingress::Haproxy);
    w.start_proxy("reencrypt", &INGRESS, "timeouts: {drain: 60s}\n");
    let ca = w.pki.path("ca-a.crt");
    let held = w.hold(&[SERVICE_IP, "443", "--ca", &ca]);
    world::run(&["kill", "-TERM", &w.pid("proxy").to_string()]);
    w.eventually("not ready once draining", || w.admin("/readyz").0 == 503);
    // New connections are refused while the held one still works.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = w.get_service();
        if r["ok"] == false {
            break;
        }
        assert!(Instant::now() < deadline, "still accepting after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(tenant(&held.again())["tenant"], "a");
    // The held client closed: the proxy exits 0.
    let code = w.signal("proxy", "0");
    assert_eq!(code, Some(0));
}

#[test]
fn check_config_prints_the_effective_config_or_names_the_key() {
    let dir = std::env::temp_dir().join(format!("hcp-proxy-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("ca.crt");
    // Any valid certificate works as a CA bundle for the check.
    let ck = rcgen::generate_simple_self_signed(vec!["ca".to_string()]).unwrap();
    std::fs::write(&ca, ck.cert.pem()).unwrap();
    std::fs::write(dir.join("tls.crt"), ck.cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), ck.signing_key.serialize_pem()).unwrap();
    let good = format!(
        "listen: {{address: 240.0.0.1, port: 443, interface: hcp-ingress0}}\nmode: reencrypt\nupstream:\n  \
         serverName: api.tenant-01.example.com\n  port: 443\n  addresses: [\"192.0.2.10\", \"192.0.2.11\"]\n  caFile: {ca}\n\
         tls: {{certFile: {d}/tls.crt, keyFile: {d}/tls.key}}\npassthroughServerNames: [api.tenant-01.example.com]\n\
         admin: {{address: \"127.0.0.1:9445\"}}\n",
        ca = ca.display(),
        d = dir.display()
    );
    let check = |text: &str| {
        let p = dir.join("c.yaml");
        std::fs::write(&p, text).unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_hcp-ingress-proxy"))
            .arg("--check-config")
            .arg(&p)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, out, _) = check(&good);
    assert_eq!(code, Some(0));
    // The effective config, defaults filled in, is itself a valid file.
    let printed = hcp_ingress_proxy::config::parse(&out)
        .and_then(hcp_ingress_proxy::config::validate)
        .unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert!(out.contains("maxConnections: 10000"), "{out}");
    assert_eq!(printed.max_connections, 10000);
    assert_eq!(printed.listen.interface, "hcp-ingress0");
    let (code, _, err) = check(&good.replace("port: 443\n  addresses", "port: 70000\n  addresses"));
    assert_eq!(code, Some(2));
    assert!(
        err.contains("upstream.port: 70000 is out of range 1-65535"),
        "{err}"
    );
    let (code, _, err) = check(&good.replace("tls.key", "missing.key"));
    assert_eq!(code, Some(2));
    assert!(err.contains("tls.keyFile"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
