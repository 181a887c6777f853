//! The hybrid post-quantum key exchange X25519MLKEM768 on both legs of the
//! reencrypt path, seen by the real peers: a Go client at its defaults (the
//! `tlsprobe` program, Go's crypto/tls as kubectl and client-go use it)
//! reports what it agreed with the proxy, and the proxy's upstream leg to
//! the real kube-apiserver of the test bed (Go's crypto/tls on the server
//! side) agrees it too, which the proxy counts per leg and group.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use crate::apiserver_front::Front;

/// Build the Go probe (Go's standard library only).
fn tlsprobe(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("test/proxy_kube/tlsprobe/main.go");
    let bin = dir.join("tlsprobe");
    let out = Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .env("CGO_ENABLED", "0")
        .output()
        .expect("go is needed to build the Go TLS client");
    assert!(
        out.status.success(),
        "go build tlsprobe: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    bin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x25519mlkem768_is_agreed_on_both_legs() {
    let cluster = realkube::Cluster::start(realkube::Options::default())
        .await
        .unwrap();
    let front = Front::start(&cluster, "reencrypt", "pq", &["kubernetes.default.svc"]);
    let (d, port) = (front.dir.as_path(), front.port);

    // The Go client's view of its handshake with the proxy.
    let probe = tlsprobe(d);
    let out = Command::new(&probe)
        .args(["-addr", &format!("127.0.0.1:{port}")])
        .args(["-name", "kubernetes.default.svc"])
        .arg("-ca")
        .arg(d.join("proxy-ca.crt"))
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tlsprobe: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(seen["curve"], "X25519MLKEM768", "{line}");
    assert_eq!(seen["version"], "TLS 1.3", "{line}");

    // A request carried to kube-apiserver: the upstream leg's handshake,
    // counted per group; the Go client's handshake counted on the client
    // leg. Both legs must have agreed the hybrid group, none anything else.
    let status = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-m", "10"])
        .arg("--cacert")
        .arg(d.join("proxy-ca.crt"))
        .args([
            "--connect-to",
            &format!("kubernetes.default.svc:443:127.0.0.1:{port}"),
        ])
        .arg("https://kubernetes.default.svc/version")
        .output()
        .unwrap();
    // Anonymous: 401 or 403 from kube-apiserver itself, through the proxy.
    let code = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(
        ["200", "401", "403"].contains(&code.as_str()),
        "kube-apiserver did not answer through the proxy: {code:?} {}\n{}",
        String::from_utf8_lossy(&status.stderr),
        front.log()
    );
    let m = front.metrics();
    let kx = |leg: &str, group: &str| {
        front.metric(&format!(
            "hcp_proxy_tls_key_exchanges_total{{leg=\"{leg}\",group=\"{group}\"}}"
        ))
    };
    assert!(kx("upstream", "X25519MLKEM768") >= 1.0, "{m}");
    assert_eq!(kx("upstream", "X25519"), 0.0, "{m}");
    assert!(kx("client", "X25519MLKEM768") >= 1.0, "{m}");
}
