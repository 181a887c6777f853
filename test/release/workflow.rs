//! `.github/workflows/release.yml`: actionlint finds nothing in the
//! workflows, and a release uploads exactly the files
//! `hack/release-manifests.sh` writes and the chart package helm writes,
//! with the components pointing at the image the workflow pushes; that image
//! is built by the scripts CI runs (one tarball a platform of
//! test/release/index.rs, their index) and pushed as that index.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::components::{out_dir, run_release_script};
use crate::index::PLATFORMS;
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

/// Whether `step` runs `what` or uses the action `what` (owner/name, any
/// version).
fn does(step: &Value, what: &str) -> bool {
    step["run"].as_str().is_some_and(|run| run.contains(what))
        || step["uses"]
            .as_str()
            .is_some_and(|uses| uses.split('@').next() == Some(what))
}

/// The one step that runs `command` or uses `action` (owner/name, any version).
fn step<'a>(steps: &'a [Value], what: &str) -> &'a Value {
    let found: Vec<&Value> = steps.iter().filter(|s| does(s, what)).collect();
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

/// The components' default image is the image the workflow pushes.
#[test]
fn the_release_pushes_the_image_its_components_name() {
    let workflow = workflow();
    let steps = steps(&workflow);
    let manifests = step(&steps, "hack/release-manifests.sh");
    let push = step(&steps, "skopeo copy");
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
    assert_eq!(push["env"]["TAG"], "${{ github.ref_name }}");
    assert!(
        push["run"]
            .as_str()
            .unwrap()
            .contains(r#""docker://$IMAGE:$TAG""#),
        "the push goes to env.IMAGE at the tag: {}",
        push["run"]
    );
    assert_eq!(workflow["on"]["push"]["tags"], serde_json::json!(["v*"]));
}

/// The image is built the one way CI builds and tests it: for each platform
/// test/release/index.rs requires, hack/check-image-proxy.sh's binaries
/// packed by hack/build-image-tarball.sh with that ARCH; those tarballs, and
/// only those, indexed by hack/build-image-index.sh; and that index pushed
/// with every platform (`skopeo copy --all`), after the clusterctl assets
/// are built and before the release is created. No other image build.
#[test]
fn the_release_builds_the_image_through_the_scripts_ci_runs() {
    let workflow = workflow();
    let steps = steps(&workflow);
    let at = |what: &str| {
        steps
            .iter()
            .position(|s| does(s, what))
            .unwrap_or_else(|| panic!("{WORKFLOW}: no step with {what:?}"))
    };

    let images: Vec<&Value> = steps
        .iter()
        .filter(|s| does(s, "hack/build-image-tarball.sh"))
        .collect();
    let mut tarballs = BTreeSet::new();
    for image in &images {
        let env = &image["env"];
        let arch = env["ARCH"].as_str().expect("each image step sets ARCH");
        let run = image["run"].as_str().unwrap();
        assert!(
            run.contains("bash hack/check-image-proxy.sh") && run.contains("BIN_DIR="),
            "ARCH={arch}: packs hack/check-image-proxy.sh's binaries: {run}"
        );
        assert_eq!(env["TAG"], "${{ github.ref_name }}", "ARCH={arch}");
        assert_eq!(env["REVISION"], "${{ github.sha }}", "ARCH={arch}");
        assert_eq!(
            env["SOURCE_DATE_EPOCH"], "${{ steps.source.outputs.epoch }}",
            "ARCH={arch}"
        );
        let out = env["OUT"].as_str().expect("each image step sets OUT");
        assert!(
            tarballs.insert((arch.to_string(), out.to_string())),
            "ARCH={arch} twice"
        );
    }
    let arches: BTreeSet<&str> = tarballs.iter().map(|(a, _)| a.as_str()).collect();
    let want: BTreeSet<&str> = PLATFORMS.iter().map(|(a, _, _)| *a).collect();
    assert_eq!(arches, want, "the architectures the release builds");

    let index = step(&steps, "hack/build-image-index.sh");
    let inputs: BTreeSet<String> = index["run"]
        .as_str()
        .unwrap()
        .split_once("hack/build-image-index.sh")
        .unwrap()
        .1
        .split_whitespace()
        .map(String::from)
        .collect();
    let outs: BTreeSet<String> = tarballs.into_iter().map(|(_, out)| out).collect();
    assert_eq!(
        inputs, outs,
        "the index is of the tarballs the image steps write"
    );
    assert_eq!(index["env"]["TAG"], "${{ github.ref_name }}");
    let out = index["env"]["OUT"]
        .as_str()
        .expect("the index step sets OUT");

    let push = step(&steps, "skopeo copy");
    let run = push["run"].as_str().unwrap();
    assert!(
        run.contains(&format!("skopeo copy --all oci-archive:{out} ")),
        "the push copies the index {out} with every platform: {run}"
    );
    assert!(
        run.contains("skopeo login ghcr.io") && run.contains("--password-stdin"),
        "the push logs in to ghcr.io with the token on stdin: {run}"
    );
    assert_eq!(push["env"]["TOKEN"], "${{ secrets.GITHUB_TOKEN }}");

    assert!(
        at("hack/release-manifests.sh") < at("hack/build-image-tarball.sh"),
        "the assets are checked before an image is built"
    );
    assert!(at("hack/build-image-index.sh") < at("skopeo copy"));
    assert!(
        at("skopeo copy") < at("softprops/action-gh-release"),
        "the release is created after the image is pushed"
    );
    let other: Vec<&str> = steps
        .iter()
        .filter_map(|s| s["uses"].as_str())
        .filter(|uses| uses.starts_with("docker/"))
        .collect();
    assert!(other.is_empty(), "a second image build path: {other:?}");
}
