//! The Helm chart (`charts/hcp-ingress/`): rendered by the real `helm`
//! binary, checked against `config/` (CRD, RBAC, Deployment), installed on a
//! real kube-apiserver and run from; and the dashboard and alerts checked
//! against the metrics the running controller and node proxy export.
//!
//! `helm` comes from `hack/install-helm.sh` (a cache outside the checkout),
//! else PATH. Without it these tests fail under `CI=true` and say how to get
//! it; elsewhere they print a note and pass, so a laptop without Go still
//! runs the rest of the suite.

mod k0rdent;
mod live;
mod offline;
mod promql;

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use serde_json::Value;

/// The repository root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The chart folder.
pub fn chart() -> PathBuf {
    root().join("charts/hcp-ingress")
}

/// Where `hack/install-helm.sh` puts helm.
fn cached_helm() -> PathBuf {
    let out = Command::new("bash")
        .arg(root().join("hack/install-helm.sh"))
        .arg("--print-path")
        .output()
        .expect("bash runs hack/install-helm.sh");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The helm binary: the cache of `hack/install-helm.sh`, else PATH.
fn find_helm() -> Option<PathBuf> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let cached = cached_helm();
            if cached.is_file() {
                return Some(cached);
            }
            std::env::var_os("PATH").and_then(|path| {
                std::env::split_paths(&path)
                    .map(|dir| dir.join("helm"))
                    .find(|p| p.is_file())
            })
        })
        .clone()
}

/// helm, or `None` with a note outside CI; under `CI=true` a missing helm
/// fails the test: CI must never pass a chart it did not render.
pub fn helm() -> Option<PathBuf> {
    if let Some(helm) = find_helm() {
        return Some(helm);
    }
    let how = format!(
        "helm is not installed: run `bash hack/install-helm.sh` (builds helm from the Go module proxy into {}), or put helm on PATH",
        cached_helm().display()
    );
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{how}");
    eprintln!("note: chart test not run: {how}");
    None
}

/// Prometheus's PromQL parser as a tool (`hack/install-promql.sh`):
/// reads expressions on stdin, prints each one's metric names or `error: ...`.
/// `None` with a note outside CI, a failure under `CI=true`, as [`helm`].
pub fn promql_tool() -> Option<PathBuf> {
    let out = Command::new("bash")
        .arg(root().join("hack/install-promql.sh"))
        .arg("--print-path")
        .output()
        .expect("bash runs hack/install-promql.sh");
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if path.is_file() {
        return Some(path);
    }
    let how = format!(
        "{} is not built: run `bash hack/install-promql.sh` (Prometheus's PromQL parser, from the Go module proxy)",
        path.display()
    );
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{how}");
    eprintln!("note: PromQL not parsed by Prometheus: {how}");
    None
}

/// Run helm with `args` in the repository root: (success, stdout, stderr).
pub fn run_helm(helm: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(helm)
        .args(args)
        .current_dir(root())
        // No user config, cache or plugins: the same result on every machine.
        .env(
            "HELM_CONFIG_HOME",
            std::env::temp_dir().join("hcp-helm-config"),
        )
        .env(
            "HELM_CACHE_HOME",
            std::env::temp_dir().join("hcp-helm-cache"),
        )
        .env("HELM_DATA_HOME", std::env::temp_dir().join("hcp-helm-data"))
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", helm.display()));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `helm template RELEASE charts/hcp-ingress -n NAMESPACE --include-crds`
/// with values files (relative to the chart) and `--set` pairs.
pub fn template(
    helm: &Path,
    release: &str,
    namespace: &str,
    values: &[&str],
    sets: &[String],
) -> Result<Vec<Value>, String> {
    template_chart(helm, &chart(), release, namespace, values, sets)
}

/// [`template`] of the chart in folder `chart`.
pub fn template_chart(
    helm: &Path,
    chart: &Path,
    release: &str,
    namespace: &str,
    values: &[&str],
    sets: &[String],
) -> Result<Vec<Value>, String> {
    let mut args: Vec<String> = vec![
        "template".into(),
        release.into(),
        chart.display().to_string(),
        "--namespace".into(),
        namespace.into(),
        "--include-crds".into(),
    ];
    for v in values {
        args.push("--values".into());
        args.push(chart.join(v).display().to_string());
    }
    for s in sets {
        args.push("--set".into());
        args.push(s.clone());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, stdout, stderr) = run_helm(helm, &args);
    if ok {
        Ok(documents(&stdout))
    } else {
        Err(stderr)
    }
}

/// The values files checked in under `charts/hcp-ingress/ci/`, relative to the chart.
pub fn ci_values() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(chart().join("ci"))
        .expect("charts/hcp-ingress/ci exists")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .map(|n| format!("ci/{n}"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 3,
        "charts/hcp-ingress/ci holds too few values files: {files:?}"
    );
    files
}

/// Parse a multi-document YAML text into JSON values (empty documents dropped).
pub fn documents(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .unwrap_or_else(|e| panic!("invalid YAML: {e}\n{text}"))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// Parse one YAML file into a JSON value.
pub fn yaml_file(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The objects of `kind` in `objects`.
pub fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

/// The one object of `kind`, failing the test otherwise.
pub fn single<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found = of_kind(objects, kind);
    assert_eq!(
        found.len(),
        1,
        "want exactly one {kind}, got {}",
        found.len()
    );
    found[0]
}

/// The manager container of the rendered Deployment.
pub fn manager_container(objects: &[Value]) -> &Value {
    &single(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
}

/// A container's string list (`args`).
pub fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}
