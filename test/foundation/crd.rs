//! The generated CRD: committed, in sync, and shaped as the issue asks.

use hcp_ingress::cli::crd_yaml;

use crate::root;

const CRD_FILE: &str = "config/crd/bases/hcp-ingress.dev_controlplaneingresses.yaml";

/// `UPDATE_GOLDEN=1` rewrites the file; otherwise any drift fails.
#[test]
fn committed_crd_matches_the_types() {
    let path = root().join(CRD_FILE);
    let generated = crd_yaml();
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{CRD_FILE} drifted from the Rust types: run `cargo run -- crd > {CRD_FILE}`"
    );
}

#[test]
fn crd_has_the_names_columns_and_subresources_kubectl_shows() {
    let crd: serde_json::Value = serde_saphyr::from_str(&crd_yaml()).unwrap();
    let spec = &crd["spec"];
    assert_eq!(spec["group"], "hcp-ingress.dev");
    assert_eq!(spec["scope"], "Namespaced");
    assert_eq!(spec["names"]["shortNames"][0], "cpi");
    let version = &spec["versions"][0];
    assert_eq!(version["name"], "v1alpha1");
    assert!(
        version["subresources"]["status"].is_object(),
        "status subresource"
    );
    let columns: Vec<_> = version["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        columns,
        [
            "Cluster",
            "API host",
            "Flavor",
            "Ready",
            "Reason",
            "Proxy nodes",
            "Age",
            "Endpoint",
            "Message"
        ]
    );
    // The wide-only columns: long text that would push AGE off a terminal.
    let wide: Vec<_> = version["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["priority"] == 1)
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(wide, ["Endpoint", "Message"]);
    let spec_schema = &version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    assert_eq!(
        spec_schema["route"]["properties"]["controller"]["enum"],
        serde_json::json!([
            "haproxy",
            "haproxy-ingress",
            "nginx",
            "traefik",
            "gateway",
            "generic"
        ])
    );
    assert_eq!(
        spec_schema["ingress"]["properties"]["port"]["maximum"],
        65535.0
    );
}

#[test]
fn crd_command_prints_the_committed_file() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_hcp-ingress"))
        .arg("crd")
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        std::fs::read_to_string(root().join(CRD_FILE)).unwrap()
    );
}
