//! Pooled mode in front of a real kube-apiserver (realkube, on loopback):
//! `kubectl` gets and watches through the proxy, many kubectl processes
//! (each its own pod connection) share one upstream connection, and a
//! watch streams an object created after it started. kubectl exec and logs
//! need a kubelet, which this rig has not: the upgrade path is tested
//! against an upgrade-capable server in `pooled.rs`.

use std::{
    io::{BufRead, BufReader},
    net::TcpListener,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Proxy(Child);
impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn metric(admin: u16, sample: &str) -> f64 {
    let out = Command::new("curl")
        .args([
            "-s",
            "-m",
            "5",
            &format!("http://127.0.0.1:{admin}/metrics"),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(sample).and_then(|r| r.strip_prefix(' ')))
        .map(|v| v.trim().parse().unwrap_or(0.0))
        .unwrap_or(0.0)
}

fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_and_watches_through_the_pooled_proxy_on_one_upstream_connection() {
    let cluster = realkube::Cluster::start(realkube::Options::default())
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("hcp-pooled-kube-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.as_path();
    // The proxy's own serving leaf, from a CA the pods (kubectl) trust.
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    std::fs::write(d.join("proxy.crt"), leaf.pem()).unwrap();
    std::fs::write(d.join("proxy.key"), leaf_key.serialize_pem()).unwrap();
    std::fs::write(d.join("api-ca.crt"), cluster.ca_pem()).unwrap();
    std::fs::write(d.join("proxy-ca.crt"), ca.pem()).unwrap();

    let api_port: u16 = cluster.url().rsplit(':').next().unwrap().parse().unwrap();
    let (port, admin) = (free_port(), free_port());
    let config = format!(
        "listen: {{address: 127.0.0.1, port: {port}}}\nmode: pooled\n\
         upstream: {{serverName: localhost, port: {api_port}, addresses: [\"127.0.0.1\"], caFile: {d}/api-ca.crt}}\n\
         tls: {{certFile: {d}/proxy.crt, keyFile: {d}/proxy.key}}\n\
         admin: {{address: \"127.0.0.1:{admin}\"}}\nlog: {{level: debug}}\n",
        d = d.display()
    );
    std::fs::write(d.join("proxy.yaml"), config).unwrap();
    let log = std::fs::File::create(d.join("proxy.log")).unwrap();
    let _proxy = Proxy(
        Command::new(env!("CARGO_BIN_EXE_hcp-ingress-proxy"))
            .arg("--config")
            .arg(d.join("proxy.yaml"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let ready = || {
        Command::new("curl")
            .args([
                "-sf",
                "-m",
                "2",
                &format!("http://127.0.0.1:{admin}/readyz"),
            ])
            .status()
            .is_ok_and(|s| s.success())
    };
    eventually("the proxy is ready", ready);

    // kubectl's kubeconfig: the proxy's address and CA, the cluster's token.
    let kubeconfig = cluster
        .kubeconfig_yaml()
        .replace(cluster.url(), &format!("https://127.0.0.1:{port}"))
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("certificate-authority-data:") {
                format!(
                    "    certificate-authority: {}",
                    d.join("proxy-ca.crt").display()
                )
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let kc = d.join("kubeconfig");
    std::fs::write(&kc, kubeconfig).unwrap();
    let kubectl = |args: &[&str]| {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kc)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(d.join("proxy.log")).unwrap_or_default()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    // Plain gets.
    assert!(kubectl(&["get", "--raw", "/version"]).contains("gitVersion"));
    assert!(kubectl(&["get", "namespaces", "-o", "name"]).contains("namespace/default"));

    // Ten watches, each kubectl its own connection to the proxy.
    let watches: Vec<Child> = (0..10)
        .map(|_| {
            Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&kc)
                .args(["get", "configmaps", "--watch", "-o", "name"])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    eventually("ten watches on the pool", || {
        metric(admin, "hcp_proxy_pool_streams") >= 10.0
    });
    assert_eq!(metric(admin, "hcp_proxy_pool_upstream_connections"), 1.0);
    assert!(metric(admin, "hcp_proxy_connections_active{path=\"pooled\"}") >= 10.0);
    // The API server's side of it: the proxy's sockets to it.
    let api_sockets = Command::new("ss")
        .args([
            "-Htn",
            "state",
            "established",
            "dst",
            &format!("127.0.0.1:{api_port}"),
        ])
        .output()
        .unwrap();
    let proxy_pid = _proxy.0.id();
    let from_proxy = String::from_utf8_lossy(
        &Command::new("ss")
            .args([
                "-Htnp",
                "state",
                "established",
                "dst",
                &format!("127.0.0.1:{api_port}"),
            ])
            .output()
            .unwrap()
            .stdout,
    )
    .lines()
    .filter(|l| l.contains(&format!("pid={proxy_pid},")))
    .count();
    assert_eq!(
        from_proxy,
        1,
        "one upstream connection for ten watches: {}",
        String::from_utf8_lossy(&api_sockets.stdout)
    );

    // The watches stream: an object created now reaches every one.
    kubectl(&["create", "configmap", "pooled-watch-probe"]);
    for mut w in watches {
        let mut lines = BufReader::new(w.stdout.take().unwrap()).lines();
        let seen = lines
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l == "configmap/pooled-watch-probe");
        assert!(seen, "the watch saw the new ConfigMap");
        let _ = w.kill();
        let _ = w.wait();
    }
    assert!(metric(admin, "hcp_proxy_pool_requests_total{route=\"pooled\"}") >= 12.0);
    assert_eq!(
        metric(admin, "hcp_proxy_pool_requests_total{route=\"dedicated\"}"),
        0.0
    );
    let _ = std::fs::remove_dir_all(&dir);
}
