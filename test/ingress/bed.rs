//! The test bed every consumer test shares: a management cluster with our
//! CRD and RBAC and the upstream CRDs, the hcp-ingress controller running
//! in-process as its ServiceAccount, a tenant cluster (a real
//! kube-apiserver whose serving certificate names the tenant's host), the
//! tenant's konnectivity stand-in, and the tenant's Service and
//! EndpointSlice in the management cluster, as a hosted control plane's
//! provider makes them.

use std::{
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
    time::Duration,
};

use hcp_ingress::{
    api::ControlPlaneIngress,
    controller::{Settings, run},
    doctor::{Check, Options, Resolver, Target, diagnose},
    render::RouteKind,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, Patch, PatchParams},
};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_util::sync::CancellationToken;

use crate::tls::{ClientCert, Forward, Konnectivity, client_cert, der};

pub const NS: &str = "tenants";
pub const CLUSTER: &str = "tenant-01";
pub const API_HOST: &str = "api.tenant-01.hcp.example.com";
pub const KONNECTIVITY_HOST: &str = "konnectivity.tenant-01.hcp.example.com";
/// The Service ports of the tenant's control plane, as Kamaji and k0smotron expose them.
pub const API_PORT: u16 = 6443;
pub const KONNECTIVITY_PORT: u16 = 8132;
/// The user of the tenant's client certificate (kubeadm's admin.conf has
/// the same shape: CN the user, O `system:masters`).
pub const ADMIN_USER: &str = "ingress-test-admin";
pub const ADMIN_GROUP: &str = "system:masters";

/// The namespace and ServiceAccount `clusterctl init --addon hcp-ingress` installs.
const CONTROLLER_NAMESPACE: &str = "hcp-ingress-system";
const CONTROLLER_SERVICE_ACCOUNT: &str = "hcp-ingress-controller-manager";

fn controller_user() -> String {
    format!("system:serviceaccount:{CONTROLLER_NAMESPACE}:{CONTROLLER_SERVICE_ACCOUNT}")
}

/// Two beds at a time: each is two control planes and an ingress
/// controller, and the CI machine has two cores.
static SLOTS: Semaphore = Semaphore::const_new(2);

pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `true` when the machine can run these tests; otherwise a note and
/// `false`, or under `CI=true` a failure: CI never passes a consumer it did
/// not run. `files` are the consumer binaries the test needs.
pub fn ready(commands: &[&str], files: &[(PathBuf, &str)]) -> bool {
    let mut missing = Vec::new();
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    if uid != "0" {
        missing.push("root (a network namespace and a veth for the backends)".to_string());
    }
    for command in ["ip", "kubectl"].iter().chain(commands) {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {command}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            missing.push(format!(
                "{command} (bash hack/install-test-deps.sh installs it)"
            ));
        }
    }
    for (path, how) in files {
        if !path.exists() {
            missing.push(format!("{} ({how})", path.display()));
        }
    }
    if missing.is_empty() {
        return true;
    }
    let how = format!("missing: {}", missing.join(", "));
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{how}");
    eprintln!("note: ingress consumer test not run: {how}");
    false
}

/// Run a command that must succeed.
pub fn run_ok(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The first of `slots` numbered slots (an address range of the test's)
/// that no test process holds, and its lock, which holds it while it lives:
/// a file lock on `<temp dir>/<name>-<slot>.lock`, so tests in other
/// processes (nextest runs one per test) take other slots, and a killed
/// process lets go of its slot. Fails naming `what` when all are taken.
pub fn free_slot(name: &str, slots: u8, what: &str) -> (u8, std::fs::File) {
    (0..slots)
        .find_map(|slot| {
            let path = std::env::temp_dir().join(format!("{name}-{slot}.lock"));
            let file = std::fs::File::create(path).ok()?;
            file.try_lock().ok().map(|()| (slot, file))
        })
        .unwrap_or_else(|| panic!("{what}"))
}

/// A veth pair: `host_if` on the host, its peer `ns_if` in the network
/// namespace `ns`.
pub fn add_veth(host_if: &str, ns_if: &str, ns: &str) {
    run_ok(&[
        "ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if, "netns", ns,
    ]);
}

/// A network namespace and a veth pair: the host end holds the backends'
/// addresses (a /29 of TEST-NET-3 of this bed only), the other end lives in
/// the namespace. Deleting the namespace deletes both ends.
pub struct BackendNet {
    ns: String,
    host_if: String,
    /// The backends' address, on the host end.
    pub addr: Ipv4Addr,
    /// The first address of the bed's /29.
    base: u8,
    /// The slot's lock, held while the bed lives: beds in other test
    /// processes (nextest runs one per test) take other slots, and a
    /// killed process lets go of its slot.
    _lock: std::fs::File,
}

impl BackendNet {
    fn new() -> Self {
        let (slot, lock) = free_slot(
            "hcp-ingress-consumer-net",
            31,
            "a free /29 of 203.0.113.0/24 for the backends",
        );
        let ns = format!("hcpi-net{slot}");
        let (host_if, ns_if) = (format!("hcpi{slot}h"), format!("hcpi{slot}n"));
        let base = 8 * slot;
        let addr = Ipv4Addr::new(203, 0, 113, base + 1);
        let peer = Ipv4Addr::new(203, 0, 113, base + 2);
        // Left over by a killed run that held this slot: start clean.
        let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        let _ = Command::new("ip").args(["link", "del", &host_if]).output();
        run_ok(&["ip", "netns", "add", &ns]);
        let net = BackendNet {
            ns,
            host_if,
            addr,
            base,
            _lock: lock,
        };
        add_veth(&net.host_if, &ns_if, &net.ns);
        run_ok(&[
            "ip",
            "addr",
            "add",
            &format!("{addr}/29"),
            "dev",
            &net.host_if,
        ]);
        run_ok(&[
            "ip",
            "-n",
            &net.ns,
            "addr",
            "add",
            &format!("{peer}/29"),
            "dev",
            &ns_if,
        ]);
        run_ok(&["ip", "link", "set", &net.host_if, "up"]);
        run_ok(&["ip", "-n", &net.ns, "link", "set", &ns_if, "up"]);
        net
    }
}

impl BackendNet {
    /// One more address of the bed's /29 on the host end, for a backend
    /// of its own (`n` < 4): two replicas behind one Service port need two
    /// addresses, as two pods have.
    pub fn add_address(&self, n: u8) -> Ipv4Addr {
        assert!(n < 4, "a /29 has four more host addresses");
        let address = Ipv4Addr::new(203, 0, 113, self.base + 3 + n);
        run_ok(&[
            "ip",
            "addr",
            "add",
            &format!("{address}/29"),
            "dev",
            &self.host_if,
        ]);
        address
    }
}

impl Drop for BackendNet {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .output();
    }
}

/// A folder for a consumer's files, removed on drop unless the test failed.
pub struct Scratch(Option<tempfile::TempDir>);

impl Scratch {
    pub fn path(&self) -> &Path {
        self.0.as_ref().expect("a scratch folder until drop").path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(dir) = self.0.take()
        {
            eprintln!("ingress consumer files kept in {}", dir.keep().display());
        }
    }
}

/// The hcp-ingress controller running in this process; stopped on drop,
/// before the API servers it talks to.
struct Controller {
    token: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.token.cancel();
        self.task.abort();
    }
}

/// A running bed; everything stops on drop.
pub struct Bed {
    controller: Controller,
    pub management: realkube::Cluster,
    /// The test's own client of the management cluster (admin).
    pub client: Client,
    pub tenant: realkube::Cluster,
    /// The tenant API server's own serving certificate (DER).
    pub tenant_leaf: Vec<u8>,
    pub konnectivity: Konnectivity,
    /// A client certificate of the tenant's CA for [`ADMIN_USER`].
    pub admin: ClientCert,
    /// Files of the consumer (configs, logs); kept when a test fails.
    pub dir: Scratch,
    _forward: Forward,
    /// The backends' network: more addresses for backends of a test's own.
    pub net: BackendNet,
    _slot: SemaphorePermit<'static>,
}

impl Bed {
    /// Start the bed; `extra_crds` are the consumer's own CRD files (the
    /// kinds it watches beyond those hcp-ingress reads).
    pub async fn start(extra_crds: &[PathBuf]) -> Bed {
        Bed::start_inner(extra_crds, false, false, Vec::new()).await
    }

    /// Start the bed with a tenant that real kubelets join (test/realnode):
    /// its kube-controller-manager (DaemonSets, ServiceAccount tokens,
    /// EndpointSlices) and kube-scheduler run, the Node authorizer is on, and
    /// it writes no endpoints of its own for `default/kubernetes`
    /// (`--endpoint-reconciler-type=none`, as hosted control planes run it):
    /// the steering is the controller's alone. `extra_crds` are the shared
    /// ingress's own CRD files, as for [`Bed::start`]; `apiserver_args`
    /// are more flags for the tenant's kube-apiserver (its egress through a
    /// konnectivity server).
    pub async fn start_for_nodes(extra_crds: &[PathBuf], apiserver_args: Vec<String>) -> Bed {
        Bed::start_inner(extra_crds, false, true, apiserver_args).await
    }

    /// Start the bed with `own_crds` in place of the files of
    /// ../shared/schemas of the same name: a consumer at another release of
    /// a kind hcp-ingress reads (k0smotron v1.10.9 serves v1beta1 only where
    /// the shared schemas are v2's).
    pub async fn start_with_own_crds(own_crds: &[PathBuf]) -> Bed {
        Bed::start_inner(own_crds, true, false, Vec::new()).await
    }

    async fn start_inner(
        extra_crds: &[PathBuf],
        replace_shared: bool,
        nodes: bool,
        apiserver_args: Vec<String>,
    ) -> Bed {
        let slot = SLOTS.acquire().await.unwrap();
        let dir = Scratch(Some(
            tempfile::Builder::new()
                .prefix("hcp-ingress-consumer-")
                .tempdir()
                .unwrap(),
        ));
        let net = BackendNet::new();

        let (management, tenant) = tokio::join!(
            realkube::Cluster::start(realkube::Options {
                name: "management".into(),
                role: realkube::Role::Management,
                controller_manager: true,
                admission_plugins: vec!["OwnerReferencesPermissionEnforcement".into()],
                ..realkube::Options::default()
            }),
            realkube::Cluster::start(realkube::Options {
                name: "tenant".into(),
                extra_sans: vec![API_HOST.into()],
                controller_manager: nodes,
                scheduler: nodes,
                real_nodes: nodes,
                endpoint_reconciler: if nodes { "none" } else { "lease" }.into(),
                apiserver_args,
                ..realkube::Options::default()
            })
        );
        let management = management.unwrap_or_else(|e| panic!("management cluster: {e}"));
        let tenant = tenant.unwrap_or_else(|e| panic!("tenant cluster: {e}"));
        let client = management.admin_client();

        // The consumer's CRDs first, then those hcp-ingress is checked
        // against (the same kinds at the same release where both have them).
        let replaced = |path: &PathBuf| {
            replace_shared
                && extra_crds
                    .iter()
                    .any(|own| own.file_name() == path.file_name())
        };
        let shared = upstream_crds().into_iter().filter(|p| !replaced(p));
        for path in extra_crds.iter().cloned().chain(shared) {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            management
                .apply_crds(&text)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        for object in release_components() {
            match object["kind"].as_str().unwrap_or_default() {
                "Deployment" | "Service" => {}
                "CustomResourceDefinition" => {
                    management
                        .apply_crds(&serde_json::to_string(&object).unwrap())
                        .await
                        .unwrap();
                }
                _ => apply(&client, object, "clusterctl").await,
            }
        }
        apply(
            &client,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
            "test",
        )
        .await;

        // The tenant's backends: its API server through an L4 hop, its
        // konnectivity stand-in directly, both at the bed's address.
        let backend = net.addr;
        let api_port: u16 = tenant.url().rsplit(':').next().unwrap().parse().unwrap();
        let forward = Forward::start(
            SocketAddr::from((backend, API_PORT)),
            SocketAddr::from(([127, 0, 0, 1], api_port)),
        )
        .await;
        let konnectivity = Konnectivity::start(
            SocketAddr::from((backend, KONNECTIVITY_PORT)),
            KONNECTIVITY_HOST,
            tenant.ca_pem(),
            tenant.ca_key_pem(),
        )
        .await;
        let tenant_leaf =
            der(&std::fs::read_to_string(tenant.dir().join("apiserver.crt")).unwrap());
        let admin = client_cert(
            tenant.ca_pem(),
            tenant.ca_key_pem(),
            ADMIN_USER,
            ADMIN_GROUP,
        );

        // What the control plane's provider makes in the management
        // cluster: the Service the route names, and its endpoints.
        apply(
            &client,
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": CLUSTER, "namespace": NS},
                   "spec": {"ports": [
                       {"name": "api", "port": API_PORT, "targetPort": API_PORT, "protocol": "TCP"},
                       {"name": "konnectivity", "port": KONNECTIVITY_PORT, "targetPort": KONNECTIVITY_PORT, "protocol": "TCP"}]}}),
            "test",
        )
        .await;
        apply(
            &client,
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                   "metadata": {"name": format!("{CLUSTER}-backends"), "namespace": NS,
                                "labels": {"kubernetes.io/service-name": CLUSTER,
                                           "endpointslice.kubernetes.io/managed-by": "hcp-ingress-test"}},
                   "addressType": "IPv4",
                   "endpoints": [{"addresses": [backend.to_string()], "conditions": {"ready": true, "serving": true, "terminating": false}}],
                   "ports": [{"name": "api", "port": API_PORT, "protocol": "TCP"},
                             {"name": "konnectivity", "port": KONNECTIVITY_PORT, "protocol": "TCP"}]}),
            "test",
        )
        .await;

        // The controller, as its ServiceAccount with the RBAC of config/.
        let token = management
            .service_account_token(CONTROLLER_NAMESPACE, CONTROLLER_SERVICE_ACCOUNT)
            .await;
        let controller_client = management.client_with_token(&token).await;
        hcp_ingress::telemetry::init_logging(hcp_ingress::telemetry::LogFormat::Text, "warn");
        let token = CancellationToken::new();
        let task = tokio::spawn({
            let token = token.clone();
            async move {
                run(controller_client, Settings::for_tests(), token)
                    .await
                    .expect("controller runs")
            }
        });

        Bed {
            controller: Controller { token, task },
            management,
            client,
            tenant,
            tenant_leaf,
            konnectivity,
            admin,
            dir,
            _forward: forward,
            net,
            _slot: slot,
        }
    }

    /// Create the tenant's ControlPlaneIngress: both hosts, the Service
    /// above, `class` and `route` as the flavor needs. Management side only
    /// (no node proxy): the route is what these tests are about.
    pub async fn create_control_plane_ingress(&self, class: Option<&str>, route: Value) {
        let mut ingress =
            json!({"apiHost": API_HOST, "konnectivityHost": KONNECTIVITY_HOST, "port": 443});
        if let Some(class) = class {
            ingress["className"] = json!(class);
        }
        apply(
            &self.client,
            json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
                   "metadata": {"name": CLUSTER, "namespace": NS},
                   "spec": {"clusterName": CLUSTER,
                            "ingress": ingress,
                            "backend": {"serviceName": CLUSTER, "apiPort": API_PORT, "konnectivityPort": KONNECTIVITY_PORT},
                            "proxy": {"enabled": false},
                            "route": route}}),
            "test-user",
        )
        .await;
    }

    /// The management cluster's kubeconfig for a consumer (an admin token:
    /// the consumers' own RBAC is theirs to get right, not ours).
    pub fn consumer_kubeconfig(&self) -> PathBuf {
        let path = self.dir.path().join("management.kubeconfig");
        std::fs::write(&path, self.management.kubeconfig_yaml()).unwrap();
        path
    }

    /// The management CA as a file, and the admin token, for consumers that
    /// take endpoint, token and CA rather than a kubeconfig.
    pub fn consumer_credentials(&self) -> (String, String, PathBuf) {
        let ca = self.dir.path().join("management-ca.crt");
        std::fs::write(&ca, self.management.ca_pem()).unwrap();
        (
            self.management.url().to_string(),
            self.management.cluster_admin_token().to_string(),
            ca,
        )
    }

    /// Wait for the route object `name` of `kind` and check the controller
    /// wrote it: it is controlled by our ControlPlaneIngress and its
    /// fields are managed by `hcp-ingress`.
    pub async fn route_written_by_controller(&self, kind: RouteKind, name: &str) -> DynamicObject {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), NS, &kind.api_resource());
        let cpi: Api<ControlPlaneIngress> = Api::namespaced(self.client.clone(), NS);
        let route = eventually(&format!("{kind:?} {NS}/{name}"), || async {
            api.get_opt(name).await.ok().flatten()
        })
        .await;
        let uid = cpi.get(CLUSTER).await.unwrap().uid().unwrap();
        assert!(
            route
                .owner_references()
                .iter()
                .any(|o| o.uid == uid && o.controller == Some(true)),
            "{kind:?} {name} is not controlled by ControlPlaneIngress {CLUSTER}: {:?}",
            route.owner_references()
        );
        assert!(
            route
                .managed_fields()
                .iter()
                .any(|f| f.manager.as_deref() == Some(hcp_ingress::api::MANAGER)),
            "{kind:?} {name} was not written by the controller"
        );
        route
    }

    /// Wait until the ControlPlaneIngress has `type_` = `status` for its
    /// current generation; (reason, message).
    pub async fn condition(&self, type_: &str, status: &str) -> (String, String) {
        let api: Api<ControlPlaneIngress> = Api::namespaced(self.client.clone(), NS);
        let mut last = None;
        let found = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                if let Ok(cpi) = api.get(CLUSTER).await {
                    let current = cpi.status.as_ref().and_then(|s| s.observed_generation)
                        == cpi.metadata.generation;
                    let condition = cpi.status.as_ref().and_then(|s| {
                        s.conditions
                            .iter()
                            .find(|c| c.type_ == type_)
                            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
                    });
                    if let Some((s, reason, message)) = &condition
                        && s == status
                        && current
                    {
                        return (reason.clone(), message.clone());
                    }
                    last = cpi.status.map(|s| s.conditions);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
        .await;
        found.unwrap_or_else(|_| {
            panic!("timed out waiting for {CLUSTER} {type_}={status}; last seen: {last:#?}")
        })
    }

    /// Stop the controller and fail if the management API server rejected
    /// any of its requests (its RBAC from config/ must be enough).
    pub async fn finish(mut self) {
        self.controller.token.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(20), &mut self.controller.task).await;
        let rejected = self.management.rejections_of(&controller_user());
        assert!(
            rejected.is_empty(),
            "the API server rejected requests of the controller: {rejected:#?}"
        );
    }
}

/// Poll `check` until it returns Some, or fail after 90 s naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Every CRD of ../shared/schemas: the kinds hcp-ingress reads and writes.
fn upstream_crds() -> Vec<PathBuf> {
    let dir = repo().join("../shared/schemas");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("../shared/schemas exists beside the repository")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    paths
}

/// `kubectl kustomize config/default`, as `clusterctl init --addon` installs it.
fn release_components() -> Vec<Value> {
    static TEXT: OnceLock<String> = OnceLock::new();
    let text = TEXT.get_or_init(|| {
        let out = Command::new("kubectl")
            .args(["kustomize", "config/default"])
            .current_dir(repo())
            .output()
            .expect("kubectl runs");
        assert!(
            out.status.success(),
            "kubectl kustomize config/default: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    });
    serde_saphyr::from_multiple::<Value>(text)
        .unwrap()
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// Server-side apply of any object, as `manager`.
pub async fn apply(client: &Client, value: Value, manager: &str) {
    let obj: DynamicObject = serde_json::from_value(value.clone()).unwrap();
    let types = obj.types.clone().unwrap();
    let (group, version) = types
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", &types.api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, &types.kind);
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .unwrap_or_else(|e| panic!("discovery of {}: {e}", types.kind));
    let api: Api<DynamicObject> = match caps.scope {
        kube::discovery::Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            obj.metadata.namespace.as_deref().unwrap_or("default"),
            &resource,
        ),
        kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let name = obj.metadata.name.clone().unwrap();
    api.patch(
        &name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(&value),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {} {name}: {e}", types.kind));
}

/// The row `row` of `hcp-ingress doctor` for ControlPlaneIngress `name`
/// in [`NS`], the workload cluster read through Secret
/// `<cluster>-kubeconfig` as the controller reads it; `timeout` bounds
/// each probe. Nothing answers DNS here: the other rows are not read.
pub async fn doctor_row(client: &Client, name: &str, row: &str, timeout: Duration) -> Check {
    let options = Options {
        target: Target::Name {
            namespace: NS.into(),
            name: name.into(),
        },
        resolver: Resolver::Server(SocketAddr::from((
            [127, 0, 0, 1],
            crate::consumers::free_port(),
        ))),
        ingress_address: vec![],
        workload_kubeconfig: None,
        timeout,
    };
    let (_, checks) = diagnose(client, &options).await.expect("the doctor runs");
    checks
        .into_iter()
        .find(|c| c.name == row)
        .unwrap_or_else(|| panic!("the doctor has no row {row} for {name}"))
}
