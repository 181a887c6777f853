//! The node proxy's crate graph: crates/proxy and crates/telemetry reach no
//! Kubernetes crate, through any kind of dependency, so the binary on every
//! node links and lists (cargo auditable) none. The compiler keeps the
//! proxy's code from using the controller's; this keeps its manifest from
//! growing a path back. hack/check-image-proxy.sh checks the built binary.

use std::process::Command;

/// Whether a package is a Kubernetes client or API crate.
fn is_kube(name: &str) -> bool {
    name == "kube" || name == "k8s-openapi" || name.starts_with("kube-")
}

/// The names of the packages `cargo tree -p package` shows: normal, build
/// and dev dependencies, for this machine's target.
fn tree(package: &str) -> Vec<String> {
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--locked", "-p", package, "-e", "normal,build,dev"])
        .args(["--prefix", "none", "--format", "{p}"])
        .current_dir(crate::root())
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(String::from)
        .collect()
}

#[test]
fn the_proxy_and_telemetry_crates_reach_no_kubernetes_crate() {
    for package in ["hcp-ingress-proxy", "hcp-ingress-telemetry"] {
        let all = tree(package);
        let kube: Vec<&String> = all.iter().filter(|n| is_kube(n)).collect();
        assert!(kube.is_empty(), "cargo tree -p {package} shows {kube:?}");
        assert!(
            all.iter().any(|n| n == "tokio"),
            "cargo tree -p {package} showed too little: {all:?}"
        );
    }
    // The check finds them where they are.
    assert!(tree("hcp-ingress").iter().any(|n| n == "kube-runtime"));
}
