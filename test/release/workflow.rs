//! `.github/workflows/release.yml`: actionlint finds nothing in the
//! workflows, and a release uploads exactly the files
//! `hack/release-manifests.sh` writes and the chart package helm writes,
//! with the components pointing at the image the workflow pushes.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::components::{out_dir, run_release_script};
use crate::{root, run_ok, yaml_file};

const WORKFLOW: &str = ".github/workflows/release.yml";

fn workflow() -> Value {
    yaml_file(&root().join(WORKFLOW))
}

/// Every step of every job, in order.
fn steps(workflow: &Value) -> Vec<Value> {
    let jobs = workflow["jobs"].as_object().expect("jobs");
    jobs.values()
        .flat_map(|job| job["steps"].as_array().cloned().unwrap_or_default())
        .collect()
}

/// The one step that runs `command` or uses `action` (owner/name, any version).
fn step<'a>(steps: &'a [Value], what: &str) -> &'a Value {
    let found: Vec<&Value> = steps
        .iter()
        .filter(|s| {
            s["run"].as_str().is_some_and(|run| run.contains(what))
                || s["uses"]
                    .as_str()
                    .is_some_and(|uses| uses.split('@').next() == Some(what))
        })
        .collect();
    let [one] = found.as_slice() else {
        panic!(
            "{WORKFLOW}: want one step with {what:?}, found {}",
            found.len()
        );
    };
    one
}

/// A tool of hack/install-tool.sh or another installer printing its path
/// with `--print-path`; `None` with a note outside CI, a failure under
/// `CI=true`, as the chart tests treat helm.
fn tool(script: &str, name: Option<&str>) -> Option<PathBuf> {
    let mut cmd = Command::new("bash");
    cmd.arg(script)
        .args(name)
        .arg("--print-path")
        .current_dir(root());
    let out = cmd.output().expect("bash runs");
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if path.is_file() {
        return Some(path);
    }
    let how = format!(
        "{} is not built: run `bash {script} {}`",
        path.display(),
        name.unwrap_or("")
    );
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{how}");
    eprintln!("note: not checked: {how}");
    None
}

#[test]
fn actionlint_finds_nothing_in_the_workflows() {
    let Some(actionlint) = tool("hack/install-tool.sh", Some("actionlint")) else {
        return;
    };
    // actionlint checks the `run:` scripts with shellcheck when it finds it.
    let shellcheck = Command::new("shellcheck")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        shellcheck || std::env::var("CI").as_deref() != Ok("true"),
        "shellcheck is missing (hack/install-test-deps.sh installs Debian's)"
    );
    run_ok(
        Command::new(&actionlint)
            .arg("-no-color")
            .current_dir(root()),
        "actionlint",
    );
}

#[test]
fn the_release_uploads_what_the_scripts_write() {
    let workflow = workflow();
    let steps = steps(&workflow);

    // The clusterctl assets: what hack/release-manifests.sh writes into OUT.
    let manifests = step(&steps, "hack/release-manifests.sh");
    let out = manifests["env"]["OUT"]
        .as_str()
        .expect("the release-manifests step sets OUT");
    assert_eq!(manifests["env"]["RELEASE_TAG"], "${{ github.ref_name }}");
    let dir = out_dir("workflow-assets");
    let (ok, stderr) = run_release_script(&dir, &[]);
    assert!(ok, "hack/release-manifests.sh failed:\n{stderr}");
    let mut expected: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| format!("{out}/{}", e.unwrap().file_name().to_string_lossy()))
        .collect();

    // The chart package: helm names it <chart name>-<version>.tgz.
    let chart = step(&steps, "helm package");
    let id = chart["id"]
        .as_str()
        .expect("the helm package step has an id");
    assert!(
        chart["run"]
            .as_str()
            .unwrap()
            .contains(&format!("--destination {out}")),
        "helm package writes into {out}: {}",
        chart["run"]
    );
    let name = yaml_file(&root().join("charts/hcp-ingress/Chart.yaml"))["name"]
        .as_str()
        .expect("the chart's name")
        .to_string();
    expected.insert(format!(
        "{out}/{name}-${{{{ steps.{id}.outputs.version }}}}.tgz"
    ));
    if let Some(helm) = tool("hack/install-helm.sh", None) {
        let dir = out_dir("workflow-chart");
        run_ok(
            Command::new(helm)
                .args(["package", "charts/hcp-ingress", "--version", "1.2.3"])
                .args(["--app-version", "v1.2.3", "--destination"])
                .arg(&dir)
                .current_dir(root()),
            "helm package",
        );
        assert!(
            dir.join(format!("{name}-1.2.3.tgz")).is_file(),
            "helm package did not write {name}-1.2.3.tgz"
        );
    }

    let release = step(&steps, "softprops/action-gh-release");
    assert_eq!(
        release["with"]["fail_on_unmatched_files"], true,
        "a missing asset must fail the release"
    );
    let uploaded: BTreeSet<String> = release["with"]["files"]
        .as_str()
        .expect("files")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    assert_eq!(
        uploaded, expected,
        "{WORKFLOW} uploads other files than the scripts write"
    );
}

/// The components' default image is the image the workflow pushes, for both
/// architectures the Dockerfile builds.
#[test]
fn the_release_pushes_the_image_its_components_name() {
    let workflow = workflow();
    let steps = steps(&workflow);
    let manifests = step(&steps, "hack/release-manifests.sh");
    let push = step(&steps, "docker/build-push-action");
    let image = workflow["env"]["IMAGE"].as_str().expect("env.IMAGE");
    // With IMAGE_REPO unset the script's default repository is used: the same.
    let dir = out_dir("workflow-image");
    let (ok, stderr) = run_release_script(&dir, &[("RELEASE_TAG", "v0.1.7")]);
    assert!(ok, "hack/release-manifests.sh failed:\n{stderr}");
    let components = std::fs::read_to_string(dir.join("addon-components.yaml")).unwrap();
    assert!(
        components.contains(&format!("{image}:v0.1.7")),
        "env.IMAGE {image} is not the repository of hack/release-manifests.sh's default image"
    );
    assert_eq!(manifests["env"]["IMAGE_REPO"], "${{ env.IMAGE }}");
    assert_eq!(
        push["with"]["tags"],
        "${{ env.IMAGE }}:${{ github.ref_name }}"
    );
    assert_eq!(push["with"]["push"], true);
    assert_eq!(push["with"]["platforms"], "linux/amd64,linux/arm64");
    assert_eq!(workflow["on"]["push"]["tags"], serde_json::json!(["v*"]));
    assert!(
        push["with"]["file"].is_null() && push["with"]["context"] == ".",
        "the image is built from the Dockerfile at the root"
    );
}
