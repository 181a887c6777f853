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
mod index;
mod oci;
mod templates;
mod workflow;

use std::path::{Path, PathBuf};

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

/// A folder of this test process under the target's temporary folder
/// (nextest runs each test in a process of its own).
pub fn scratch(prefix: &str, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{prefix}-{}", std::process::id()))
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Packs an image with hack/build-image-tarball.sh and `env` from stand-ins
/// for its two binaries, written into `dir` (`contents` of each binary's
/// name); returns the tarball.
pub fn pack_stand_ins(
    dir: &Path,
    contents: impl Fn(&str) -> Vec<u8>,
    env: &[(&str, &str)],
) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    for bin in ["hcp-ingress", "hcp-ingress-proxy"] {
        let path = dir.join(bin);
        std::fs::write(&path, contents(bin)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = dir.join("image.oci.tar");
    run_ok(
        std::process::Command::new("bash")
            .arg("hack/build-image-tarball.sh")
            .current_dir(root())
            .env("BIN_DIR", dir)
            .env("OUT", &out)
            .envs(env.iter().copied()),
        "hack/build-image-tarball.sh (it builds hack/ociimage with Go the first time)",
    );
    out
}
