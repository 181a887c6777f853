//! Pooled mode in front of a real kube-apiserver (realkube, on loopback):
//! `kubectl` gets and watches through the proxy, many kubectl processes
//! (each its own pod connection) share one upstream connection, and a
//! watch streams an object created after it started. kubectl exec and logs
//! need a kubelet, which this rig has not: the upgrade path is tested
//! against an upgrade-capable server in `pooled.rs`.

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
};

use crate::apiserver_front::{Front, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_and_watches_through_the_pooled_proxy_on_one_upstream_connection() {
    let cluster = realkube::Cluster::start(realkube::Options::default())
        .await
        .unwrap();
    let front = Front::start(&cluster, "pooled", "pooled-kube", &["127.0.0.1"]);
    let (d, port) = (front.dir.as_path(), front.port);
    let api_port: u16 = cluster.url().rsplit(':').next().unwrap().parse().unwrap();
    let metric = |sample: &str| front.metric(sample);

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
            front.log()
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
        metric("hcp_proxy_pool_streams") >= 10.0
    });
    assert_eq!(metric("hcp_proxy_pool_upstream_connections"), 1.0);
    assert!(metric("hcp_proxy_connections_active{path=\"pooled\"}") >= 10.0);
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
    let proxy_pid = front.pid();
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
    assert!(metric("hcp_proxy_pool_requests_total{route=\"pooled\"}") >= 12.0);
    assert_eq!(
        metric("hcp_proxy_pool_requests_total{route=\"dedicated\"}"),
        0.0
    );
}
