//! Release packaging tests: the clusterctl add-on components that
//! `hack/release-manifests.sh` builds with `kubectl kustomize`, the provider
//! `metadata.yaml`, the k0rdent chart values and the ClusterResourceSet recipe,
//! the image tarball against the Dockerfile, and the release workflow.
//! The variables are substituted by the real clusterctl (hack/capi/build.sh);
//! installing, deleting and moving with it on real API servers is test/capi.
//!
//! No API server runs here, so "the manifests apply" is checked offline: every
//! object deserializes into its typed Kubernetes struct and serializes back to
//! the same JSON (a misspelled or misplaced field would be dropped and show up
//! as a difference).

mod components;
mod image;
mod oci;
mod templates;
mod workflow;

use std::path::Path;

use serde_json::Value;

/// The repository root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Run `cmd`, failing the test with `what` and its output unless it succeeds.
pub fn run_ok(cmd: &mut std::process::Command, what: &str) -> std::process::Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Parse a multi-document YAML text into JSON values (empty documents dropped).
pub fn documents(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .unwrap_or_else(|e| panic!("invalid YAML: {e}"))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// Parse one YAML file into a JSON value.
pub fn yaml_file(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `kind namespace/name` of an object, for messages.
pub fn describe(obj: &Value) -> String {
    let meta = &obj["metadata"];
    match meta["namespace"].as_str() {
        Some(ns) => format!(
            "{} {ns}/{}",
            obj["kind"].as_str().unwrap_or("?"),
            meta["name"].as_str().unwrap_or("?")
        ),
        None => format!(
            "{} {}",
            obj["kind"].as_str().unwrap_or("?"),
            meta["name"].as_str().unwrap_or("?")
        ),
    }
}
