//! The standalone `memkube` binary driven by the real kubectl
//! (/usr/bin/kubectl): server-side apply by two field managers, get, get -o
//! yaml, get -w, patch --type merge, delete waiting on finalizers,
//! api-resources, and CRDs loaded with `--crds`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

const KUBECTL: &str = "/usr/bin/kubectl";

/// A running `memkube` process, killed on drop.
struct Server {
    child: Child,
    dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Server {
    fn start(name: &str) -> Server {
        Self::start_with(name, &[])
    }

    fn start_with(name: &str, extra: &[&str]) -> Server {
        let dir =
            std::env::temp_dir().join(format!("memkube-kubectl-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let schemas = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/schemas");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_memkube"));
        cmd.args(["--listen", "127.0.0.1:0", "--kubeconfig"])
            .arg(dir.join("kubeconfig"));
        if schemas.exists() {
            cmd.arg("--crds").arg(&schemas);
        }
        cmd.args(extra);
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // The first stdout line (the URL) is printed once the kubeconfig is written.
        let mut url = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut url)
            .unwrap();
        assert!(
            url.starts_with("http://127.0.0.1:") || url.starts_with("https://127.0.0.1:"),
            "{url}"
        );
        Server { child, dir }
    }

    fn kubectl(&self, args: &[&str]) -> Command {
        let mut c = Command::new(KUBECTL);
        c.env("KUBECONFIG", self.dir.join("kubeconfig"))
            .arg("--cache-dir")
            .arg(self.dir.join("cache"))
            .args(args);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.kubectl(args).output().unwrap()
    }

    /// Runs kubectl and returns stdout, failing the test on a non-zero exit.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn file(&self, name: &str, text: &str) -> String {
        let p = self.dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }
}

fn kubectl_present() -> bool {
    if Path::new(KUBECTL).exists() {
        return true;
    }
    eprintln!("skipping: {KUBECTL} is not installed");
    false
}

const DEPLOYMENT: &str = "
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: app
        image: nginx
        env:
        - {name: A, value: '1'}
        - {name: B, value: '2'}
";

const SIDECAR_ENV: &str = "
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  template:
    spec:
      containers:
      - name: app
        env:
        - {name: C, value: '3'}
";

#[test]
fn kubectl_server_side_apply_by_two_field_managers_merges_env_by_name() {
    if !kubectl_present() {
        return;
    }
    let s = Server::start("apply");
    let first = s.file("dep.yaml", DEPLOYMENT);
    assert!(
        s.ok(&["apply", "--server-side", "-f", &first])
            .contains("deployment.apps/web serverside-applied")
    );
    let second = s.file("env.yaml", SIDECAR_ENV);
    s.ok(&[
        "apply",
        "--server-side",
        "--field-manager=sidecar",
        "-f",
        &second,
    ]);
    let env = s.ok(&[
        "get",
        "deploy",
        "web",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].env[*].name}",
    ]);
    assert_eq!(env, "A B C");
    // Both managers are recorded, each as an Apply.
    let yaml = s.ok(&[
        "get",
        "deploy",
        "web",
        "-o",
        "yaml",
        "--show-managed-fields",
    ]);
    let obj: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
    let managers: Vec<(String, String)> = obj["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["manager"].as_str().unwrap().to_string(),
                m["operation"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("kubectl".into(), "Apply".into())),
        "{managers:?}"
    );
    assert!(
        managers.contains(&("sidecar".into(), "Apply".into())),
        "{managers:?}"
    );
    // Re-applying the first file leaves the sidecar's entry alone.
    s.ok(&["apply", "--server-side", "-f", &first]);
    let env = s.ok(&[
        "get",
        "deploy",
        "web",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].env[*].name}",
    ]);
    assert_eq!(env, "A B C");
    // A conflicting apply fails until forced.
    let changed = s.file(
        "img.yaml",
        &DEPLOYMENT.replace("image: nginx", "image: httpd"),
    );
    let out = s.run(&[
        "apply",
        "--server-side",
        "--field-manager=other",
        "-f",
        &changed,
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("conflict"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    s.ok(&[
        "apply",
        "--server-side",
        "--field-manager=other",
        "--force-conflicts",
        "-f",
        &changed,
    ]);
}

#[test]
fn kubectl_get_get_yaml_patch_merge_and_api_resources() {
    if !kubectl_present() {
        return;
    }
    let s = Server::start("get");
    let resources = s.ok(&["api-resources"]);
    for want in [
        "configmaps",
        "deployments",
        "leases",
        "customresourcedefinitions",
    ] {
        assert!(
            resources.contains(want),
            "{want} missing from:\n{resources}"
        );
    }
    s.ok(&[
        "apply",
        "--server-side",
        "-f",
        &s.file("dep.yaml", DEPLOYMENT),
    ]);
    let table = s.ok(&["get", "deployments"]);
    assert!(table.lines().next().unwrap().starts_with("NAME"), "{table}");
    assert!(table.contains("web"), "{table}");
    let yaml = s.ok(&["get", "deployment", "web", "-o", "yaml"]);
    let obj: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(obj["metadata"]["generation"], 1);
    assert!(
        s.ok(&[
            "patch",
            "deploy",
            "web",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"replicas":3}}"#
        ])
        .contains("patched")
    );
    assert!(
        s.ok(&[
            "patch",
            "deploy",
            "web",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"replicas":3}}"#
        ])
        .contains("(no change)")
    );
    assert_eq!(
        s.ok(&[
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.metadata.generation}"
        ]),
        "2"
    );
    let all = s.ok(&["get", "namespaces"]);
    assert!(all.contains("kube-system"), "{all}");
    let missing = s.run(&["get", "configmap", "nope"]);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("NotFound"));
}

#[test]
fn kubectl_get_watch_streams_changes() {
    if !kubectl_present() {
        return;
    }
    let s = Server::start("watch");
    s.ok(&[
        "apply",
        "--server-side",
        "-f",
        &s.file("dep.yaml", DEPLOYMENT),
    ]);
    let mut watch = s
        .kubectl(&["get", "deployments", "-w", "--output-watch-events"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut next_web = || loop {
        let line = lines.next().unwrap().unwrap();
        if line.contains("web") {
            return line.split_whitespace().next().unwrap().to_string();
        }
    };
    // The listed object first; the watch starts at the list's resourceVersion.
    assert_eq!(next_web(), "ADDED");
    s.ok(&[
        "patch",
        "deploy",
        "web",
        "--type",
        "merge",
        "-p",
        r#"{"metadata":{"labels":{"x":"y"}}}"#,
    ]);
    assert_eq!(next_web(), "MODIFIED");
    s.ok(&["delete", "deploy", "web"]);
    assert_eq!(next_web(), "DELETED");
    let _ = watch.kill();
    let _ = watch.wait();
}

#[test]
fn kubectl_delete_waits_for_finalizers() {
    if !kubectl_present() {
        return;
    }
    let s = Server::start("delete");
    s.ok(&[
        "apply",
        "--server-side",
        "-f",
        &s.file("dep.yaml", DEPLOYMENT),
    ]);
    s.ok(&[
        "patch",
        "deploy",
        "web",
        "--type",
        "merge",
        "-p",
        r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
    ]);
    let mut delete = s
        .kubectl(&["delete", "deploy", "web", "--timeout=120s"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the deletion is pending: kubectl is now waiting for the object to go.
    loop {
        let ts = s.ok(&[
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ]);
        if !ts.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        delete.try_wait().unwrap().is_none(),
        "kubectl delete must wait while a finalizer holds the object"
    );
    s.ok(&[
        "patch",
        "deploy",
        "web",
        "--type",
        "merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
    let out = delete.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("deleted"));
    let gone = s.run(&["get", "deploy", "web"]);
    assert!(!gone.status.success());
}

#[test]
fn kubectl_custom_resources_from_crds_flag_are_validated() {
    if !kubectl_present() {
        return;
    }
    let s = Server::start("crd");
    if !s.ok(&["api-resources"]).contains("cluster.x-k8s.io") {
        eprintln!("skipping: ../shared/schemas not found");
        return;
    }
    let good = s.file(
        "cluster.yaml",
        "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {name: c1}\nspec:\n  controlPlaneEndpoint: {host: example.com, port: 6443}\n",
    );
    s.ok(&["apply", "--server-side", "-f", &good]);
    let table = s.ok(&["get", "clusters.cluster.x-k8s.io"]);
    // The CRD's additionalPrinterColumns make the table.
    let header = table.lines().next().unwrap();
    assert!(
        header.contains("PHASE") && header.contains("AGE"),
        "{table}"
    );
    assert!(table.lines().nth(1).unwrap().starts_with("c1"), "{table}");
    let bad = s.file("bad.yaml", "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {name: c2}\nspec:\n  controlPlaneEndpoint: {host: example.com, port: high}\n");
    let out = s.run(&["apply", "--server-side", "-f", &bad]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("spec.controlPlaneEndpoint.port"), "{err}");
}

#[test]
fn kubectl_over_https_trusts_the_generated_ca() {
    if !kubectl_present() {
        return;
    }
    let s = Server::start_with("tls", &["--tls"]);
    let kc = std::fs::read_to_string(s.dir.join("kubeconfig")).unwrap();
    assert!(
        kc.contains("server: https://127.0.0.1:") && kc.contains("certificate-authority-data"),
        "{kc}"
    );
    assert!(s.ok(&["get", "namespaces"]).contains("default"));
    s.ok(&[
        "apply",
        "--server-side",
        "-f",
        &s.file("dep.yaml", DEPLOYMENT),
    ]);
    assert!(
        s.ok(&["get", "deploy", "web", "-o", "yaml"])
            .contains("name: web")
    );
}
