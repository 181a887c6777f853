//! Cluster API's own programs, as the tests run them: clusterctl with a local
//! repository (Cluster API's providers kustomized from its module, ours from
//! `hack/release-manifests.sh`), and the core manager serving its webhooks
//! to a real kube-apiserver. hack/capi/build.sh builds both, once per version.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
    time::Duration,
};

use kube::Client;

use crate::harness::create_namespace;

/// The namespace `clusterctl init --addon hcp-ingress` installs into.
pub const PROVIDER_NAMESPACE: &str = "hcp-ingress-system";
/// The provider label clusterctl and our kustomization put on every object.
pub const PROVIDER_LABEL: &str = "cluster.x-k8s.io/provider";
/// The ServiceAccount of our Deployment.
pub const SERVICE_ACCOUNT: &str = "hcp-ingress-controller-manager";

/// The repository root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// hack/capi/build.sh's cache for this version: `bin/` and `repository/`.
/// Missing, the test fails and says how to build it.
pub fn capi_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = Command::new("bash")
            .args(["hack/capi/build.sh", "--print-dir"])
            .current_dir(root())
            .output()
            .expect("bash runs");
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        for needed in [
            "bin/clusterctl",
            "bin/capi-manager",
            "repository/cluster-api",
        ] {
            assert!(
                dir.join(needed).exists(),
                "{} is missing: run `bash hack/capi/build.sh` (hack/test.sh does)",
                dir.join(needed).display()
            );
        }
        dir
    })
}

/// The Cluster API version of the cache (its folder name).
pub fn capi_version() -> String {
    capi_dir()
        .file_name()
        .expect("versioned folder")
        .to_string_lossy()
        .into_owned()
}

/// `hack/release-manifests.sh` into `out`: our release assets, as published.
pub fn release_assets(out: &Path) -> String {
    let output = Command::new("bash")
        .arg("hack/release-manifests.sh")
        .current_dir(root())
        .env("OUT", out)
        .output()
        .expect("bash runs");
    assert!(
        output.status.success(),
        "hack/release-manifests.sh: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::read_to_string(out.join("addon-components.yaml")).expect("addon-components.yaml")
}

/// A clusterctl configuration of its own: a local repository with Cluster
/// API's core, kubeadm bootstrap and control-plane providers and our add-on.
pub struct Clusterctl {
    dir: tempfile::TempDir,
    /// What `clusterctl init --addon hcp-ingress` reads: our components.
    pub components: String,
}

impl Clusterctl {
    pub fn new() -> Clusterctl {
        let dir = tempfile::tempdir().expect("temp dir");
        let version = format!("v{}", env!("CARGO_PKG_VERSION"));
        let ours = dir
            .path()
            .join("repository/addon-hcp-ingress")
            .join(&version);
        let components = release_assets(&ours);
        let repo = capi_dir().join("repository");
        let capi = capi_version();
        let config = format!(
            "providers:\n\
             - name: cluster-api\n  type: CoreProvider\n  url: file://{repo}/cluster-api/{capi}/core-components.yaml\n\
             - name: kubeadm\n  type: BootstrapProvider\n  url: file://{repo}/bootstrap-kubeadm/{capi}/bootstrap-components.yaml\n\
             - name: kubeadm\n  type: ControlPlaneProvider\n  url: file://{repo}/control-plane-kubeadm/{capi}/control-plane-components.yaml\n\
             - name: hcp-ingress\n  type: AddonProvider\n  url: file://{ours}/addon-components.yaml\n",
            repo = repo.display(),
            ours = ours.display(),
        );
        std::fs::write(dir.path().join("clusterctl.yaml"), config).expect("config written");
        Clusterctl { dir, components }
    }

    /// Write a kubeconfig for clusterctl; returns its path.
    pub fn kubeconfig(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(format!("{name}.kubeconfig"));
        std::fs::write(&path, text).expect("kubeconfig written");
        path
    }

    /// Run clusterctl with this configuration; Err carries its output.
    pub async fn run(&self, args: &[&str]) -> Result<String, String> {
        let mut cmd = tokio::process::Command::new(capi_dir().join("bin/clusterctl"));
        cmd.args(args)
            .arg("--config")
            .arg(self.dir.path().join("clusterctl.yaml"))
            // Nothing of the user's machine (~/.config/cluster-api), no GitHub.
            .env("XDG_CONFIG_HOME", self.dir.path())
            .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
            .stdin(Stdio::null());
        for (name, _) in std::env::vars().filter(|(k, _)| k.starts_with("HCP_INGRESS_")) {
            cmd.env_remove(name);
        }
        let output = tokio::time::timeout(Duration::from_secs(300), cmd.output())
            .await
            .unwrap_or_else(|_| panic!("clusterctl {args:?} still runs after 300 s"))
            .expect("clusterctl runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        if output.status.success() {
            Ok(text)
        } else {
            Err(text)
        }
    }

    /// `clusterctl init --addon hcp-ingress` against `kubeconfig`.
    pub async fn init(&self, kubeconfig: &Path) {
        let out = self
            .run(&[
                "init",
                "--addon",
                "hcp-ingress",
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
            ])
            .await
            .unwrap_or_else(|e| panic!("clusterctl init --addon hcp-ingress failed:\n{e}"));
        assert!(out.contains("hcp-ingress"), "{out}");
    }
}

/// cert-manager's two kinds that clusterctl and Cluster API's components use,
/// without their schema: clusterctl only checks that a Certificate is
/// accepted before it installs providers (it would install cert-manager
/// otherwise, from GitHub). cert-manager itself is not run: the Cluster API
/// manager's serving certificate is the test's (see manager.rs).
pub const CERT_MANAGER_CRDS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: certificates.cert-manager.io}
spec:
  group: cert-manager.io
  names: {kind: Certificate, listKind: CertificateList, plural: certificates, singular: certificate}
  scope: Namespaced
  versions:
    - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: issuers.cert-manager.io}
spec:
  group: cert-manager.io
  names: {kind: Issuer, listKind: IssuerList, plural: issuers, singular: issuer}
  scope: Namespaced
  versions:
    - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
"#;

/// A real management cluster made the way an operator makes one: a
/// kube-apiserver (RBAC, garbage collector), cert-manager's CRDs, and
/// `clusterctl init --addon hcp-ingress`.
pub struct Management {
    pub cluster: realkube::Cluster,
    pub client: Client,
    pub kubeconfig: PathBuf,
}

impl Management {
    pub async fn init(name: &str, clusterctl: &Clusterctl) -> Management {
        let cluster = realkube::Cluster::start(realkube::Options {
            name: name.into(),
            role: realkube::Role::Management,
            controller_manager: true,
            ..realkube::Options::default()
        })
        .await
        .unwrap_or_else(|e| panic!("a real API server for the test: {e}"));
        cluster
            .apply_crds(CERT_MANAGER_CRDS)
            .await
            .expect("cert-manager CRDs");
        let kubeconfig = clusterctl.kubeconfig(name, &cluster.kubeconfig_yaml());
        clusterctl.init(&kubeconfig).await;
        let client = cluster.admin_client();
        Management {
            cluster,
            client,
            kubeconfig,
        }
    }

    /// A token of our Deployment's ServiceAccount, which clusterctl created
    /// and bound to the RBAC it applied.
    async fn controller_token(&self) -> String {
        self.cluster
            .service_account_token(PROVIDER_NAMESPACE, SERVICE_ACCOUNT)
            .await
    }

    /// A client authenticated as our Deployment's ServiceAccount.
    pub async fn controller_client(&self) -> Client {
        let token = self.controller_token().await;
        self.cluster.client_with_token(&token).await
    }

    /// The same identity as a kubeconfig, for the controller binary.
    pub async fn controller_kubeconfig(&self) -> String {
        let token = self.controller_token().await;
        self.cluster.kubeconfig_for("controller", &token)
    }

    pub async fn namespace(&self, name: &str) {
        create_namespace(&self.client, name).await;
    }
}

/// A free loopback port (released again: the process binds it a moment later).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The status code of `GET path` on a loopback port, if it answers.
pub async fn http_status(port: u16, path: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).await.ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// A child process with its output in a file, killed when dropped.
pub struct Process {
    child: std::process::Child,
    log: PathBuf,
}

impl Process {
    pub fn spawn(mut cmd: Command, log: PathBuf) -> Process {
        let file = std::fs::File::create(&log).expect("log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log file"))
            .stderr(file)
            .spawn()
            .expect("process starts");
        Process { child, log }
    }

    /// The last `lines` lines of its output.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Whether it has ended (and how).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("wait")
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop();
    }
}
