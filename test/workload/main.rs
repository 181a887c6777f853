//! Workload-side tests: the proxy certificate, the workload
//! objects `render --workload` prints (golden), the proxy config round trip
//! and a real request through the proxy binary running the rendered config
//! and certificate, the DaemonSet's security properties, ClusterResourceSet
//! delivery against the upstream CRD, and bad CA input.
//!
//! `fixtures/ca.*` is a throw-away test CA (RSA, PKCS#1 key, as kubeadm and
//! k0s write them); `fixtures/ec-ca.*` a second, unrelated one (EC, SEC1).

mod bad_input;
mod certificate;
mod clusterresourceset;
mod data_path;
mod golden;
#[path = "../support/proxy_bin.rs"]
mod proxy_bin;
mod proxy_config;
mod published_endpoint;
mod security;

use std::{
    path::{Path, PathBuf},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use hcp_ingress::cli::{CaInput, Rendered, WorkloadOptions, render_workload_documents};

/// The repository root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A file under test/workload/fixtures.
pub fn fixture(name: &str) -> PathBuf {
    root().join("test/workload/fixtures").join(name)
}

/// The fixtures that are ControlPlaneIngresses.
pub fn inputs() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("test/workload/fixtures"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// The fixed clock of every test: 2026-01-01T00:00:00Z.
pub fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_767_225_600)
}

/// `render --workload` with the test CA and the fixed clock.
pub fn options(crs: bool) -> WorkloadOptions {
    let read = |name: &str| std::fs::read_to_string(fixture(name)).unwrap();
    WorkloadOptions {
        ca: Some(CaInput {
            cert_path: "ca.crt".into(),
            cert_pem: read("ca.crt"),
            key: Some(("ca.key".into(), read("ca.key"))),
        }),
        now: now(),
        as_cluster_resource_set: crs,
        ..WorkloadOptions::default()
    }
}

/// Render one fixture.
pub fn render(input: &Path, crs: bool) -> Rendered {
    let text = std::fs::read_to_string(input).unwrap();
    render_workload_documents(&input.display().to_string(), &text, &options(crs))
        .unwrap_or_else(|e| panic!("{} must render: {e}", input.display()))
}

/// The rendered object of `kind` named `name`.
pub fn object<'a>(rendered: &'a Rendered, kind: &str, name: &str) -> &'a serde_json::Value {
    rendered
        .objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in {:#?}", rendered.objects))
}

/// Decode a base64 Secret value.
pub fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let digits: Vec<u8> = text
        .bytes()
        .filter(|c| *c != b'=' && !c.is_ascii_whitespace())
        .map(value)
        .collect();
    let mut out = Vec::new();
    for chunk in digits.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, d)| acc | u32::from(*d) << (18 - 6 * i));
        out.extend(n.to_be_bytes()[1..chunk.len()].iter());
    }
    out
}

/// A Secret's `data[key]`, decoded as text.
pub fn secret_text(secret: &serde_json::Value, key: &str) -> String {
    String::from_utf8(base64_decode(secret["data"][key].as_str().unwrap())).unwrap()
}

/// Where a path of the proxy pod (`/etc/hcp-ingress/…`) lies when the
/// volumes are mounted under `dir`.
pub fn under(dir: &Path, path: &str) -> PathBuf {
    dir.join(path.trim_start_matches('/'))
}

/// Write the rendered proxy ConfigMap and Secret (when there is one) where
/// the DaemonSet mounts them, moved under `dir`; the config's paths follow,
/// and each `(from, to)` of `edits` is replaced in the config files too.
pub fn mount_proxy_files(rendered: &Rendered, dir: &Path, edits: &[(&str, &str)]) {
    use hcp_ingress::render::workload::{CONFIG_DIR, TLS_DIR};
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(under(dir, CONFIG_DIR)).unwrap();
    std::fs::create_dir_all(under(dir, TLS_DIR)).unwrap();
    let moved = dir.join("etc/hcp-ingress");
    let config_map = object(rendered, "ConfigMap", "hcp-ingress-proxy");
    for (key, value) in config_map["data"].as_object().unwrap() {
        let mut text = value
            .as_str()
            .unwrap()
            .replace("/etc/hcp-ingress", moved.to_str().unwrap());
        for (from, to) in edits {
            text = text.replace(from, to);
        }
        std::fs::write(under(dir, CONFIG_DIR).join(key), text).unwrap();
    }
    if let Some(secret) = rendered.objects.iter().find(|o| o["kind"] == "Secret") {
        for key in ["tls.crt", "tls.key"] {
            std::fs::write(under(dir, TLS_DIR).join(key), secret_text(secret, key)).unwrap();
        }
    }
}
