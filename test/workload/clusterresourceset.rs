//! ClusterResourceSet delivery: the ClusterResourceSet validates against the
//! upstream CRD, public objects travel in a ConfigMap, the private key only
//! in a resource-set Secret, and the Cluster is selected by its label.

use crdschema::{Crd, Options};
use hcp_ingress::render::crs::{
    CLUSTER_SELECTOR_LABEL, OBJECTS_KEY, RESOURCE_SET_SECRET_TYPE, SECRET_KEY,
};
use serde_json::{Value, json};

use crate::{fixture, object, render, root, secret_text};

fn crd() -> Crd {
    let dir = root().join("../shared/schemas");
    assert!(
        dir.is_dir(),
        "{} is missing: CI checks out ../shared beside the repository",
        dir.display()
    );
    let crds = crdschema::load_dir(&dir).expect("upstream CRDs load");
    crds.into_iter()
        .find(|c| c.group() == "addons.cluster.x-k8s.io" && c.kind() == "ClusterResourceSet")
        .expect("the ClusterResourceSet CRD")
}

fn documents(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .unwrap()
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

#[test]
fn cluster_resource_sets_validate_against_the_upstream_crd() {
    let crd = crd();
    for input in ["reencrypt-advertise-address.yaml", "proxy-protocol.yaml"] {
        let rendered = render(&fixture(input), true);
        let crs = rendered
            .objects
            .iter()
            .find(|o| o["kind"] == "ClusterResourceSet")
            .unwrap();
        assert_eq!(crs["apiVersion"], "addons.cluster.x-k8s.io/v1beta2");
        let report = crd.validate_report(crs, &Options::strict());
        assert!(
            report.violations.is_empty(),
            "{input}: {}",
            report
                .violations
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        );
        // And a broken one does not: the validation has teeth.
        let mut broken = crs.clone();
        broken["spec"]["strategy"] = json!("Sometimes");
        assert!(crd.validate_with(&broken, &Options::strict()).is_err());
    }
}

#[test]
fn the_key_travels_only_in_the_resource_set_secret() {
    let rendered = render(&fixture("reencrypt-advertise-address.yaml"), true);
    let name = "tenant-01-hcp-ingress-proxy";
    let crs = object(&rendered, "ClusterResourceSet", name);
    assert_eq!(crs["metadata"]["namespace"], "tenants");
    assert_eq!(
        crs["spec"]["clusterSelector"],
        json!({"matchLabels": {CLUSTER_SELECTOR_LABEL: "tenant-01"}})
    );
    assert_eq!(crs["spec"]["strategy"], "Reconcile");
    assert_eq!(
        crs["spec"]["resources"],
        json!([{"kind": "ConfigMap", "name": name}, {"kind": "Secret", "name": name}])
    );

    let config_map = object(&rendered, "ConfigMap", name);
    let public = config_map["data"][OBJECTS_KEY].as_str().unwrap();
    assert!(
        !public.contains("PRIVATE KEY") && !public.contains("kind: Secret"),
        "key material in a ConfigMap"
    );
    let kinds: Vec<_> = documents(public)
        .iter()
        .map(|d| d["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        kinds,
        ["ConfigMap", "DaemonSet", "EndpointSlice", "Endpoints"]
    );

    let secret = object(&rendered, "Secret", name);
    assert_eq!(secret["type"], RESOURCE_SET_SECRET_TYPE);
    let inner = documents(&secret_text(secret, SECRET_KEY));
    assert_eq!(inner.len(), 1);
    assert_eq!(
        (inner[0]["kind"].as_str(), inner[0]["type"].as_str()),
        (Some("Secret"), Some("kubernetes.io/tls"))
    );
    assert_eq!(inner[0]["metadata"]["namespace"], "kube-system");
    assert!(secret_text(&inner[0], "tls.key").starts_with("-----BEGIN PRIVATE KEY-----"));
}

#[test]
fn proxy_protocol_needs_no_secret() {
    let rendered = render(&fixture("proxy-protocol.yaml"), true);
    let kinds: Vec<_> = rendered
        .objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["ConfigMap", "ClusterResourceSet"]);
}

#[test]
fn what_a_cluster_resource_set_cannot_carry_is_refused() {
    let run = |input: &str, with_key: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_hcp-ingress"));
        cmd.args(["render", "--as-clusterresourceset", "-f"])
            .arg(fixture(input))
            .arg("--ca-cert")
            .arg(fixture("ca.crt"));
        if with_key {
            cmd.arg("--ca-key").arg(fixture("ca.key"));
        }
        cmd.output().unwrap()
    };
    let service = run("service-steering.yaml", true);
    assert_eq!(service.status.code(), Some(2));
    assert!(service.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&service.stderr)
            .contains("patches the existing kubernetes Service")
    );

    let keyless = run("reencrypt-advertise-address.yaml", false);
    assert_eq!(keyless.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&keyless.stderr)
            .contains("mode reencrypt needs the proxy certificate")
    );

    let ok = run("proxy-protocol.yaml", false);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}
