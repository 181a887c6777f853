//! Shared set-up: the management and workload API servers (real
//! kube-apiservers by default, memkube where a test injects faults), a
//! running controller, polling.

use std::{
    future::Future,
    path::Path,
    sync::{Mutex, OnceLock},
    time::Duration,
};

use hcp_ingress::{
    api::ControlPlaneIngress,
    cli::crd_yaml,
    controller::{Settings, run},
    render::RouteKind,
};
use k8s_openapi::api::{core::v1::Namespace, events::v1::Event};
use kube::{
    Api, Client,
    api::{DynamicObject, ListParams, Patch, PatchParams, PostParams},
};
use memkube::{RequestRecord, TestApi};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub const NS: &str = "tenants";
/// The namespace and ServiceAccount `clusterctl init --addon hcp-ingress` installs.
pub const CONTROLLER_NAMESPACE: &str = "hcp-ingress-system";
pub const CONTROLLER_SERVICE_ACCOUNT: &str = "hcp-ingress-controller-manager";
/// The user the controller authenticates as on a real API server.
pub fn controller_user() -> String {
    format!("system:serviceaccount:{CONTROLLER_NAMESPACE}:{CONTROLLER_SERVICE_ACCOUNT}")
}

/// An API server under test.
pub enum Server {
    /// The in-memory API: for injected faults (5xx, dropped watches, latency).
    Mem(TestApi),
    /// A real etcd + kube-apiserver (+ kube-controller-manager).
    Real(Box<Real>),
}

/// A real control plane, where its request log was last cleared, and whose
/// requests must never have been rejected.
pub struct Real {
    pub cluster: realkube::Cluster,
    log_from: Mutex<usize>,
    /// Checked when the test ends well: the requests of this user (the
    /// controller's identity on this server) were never rejected.
    checked_user: Mutex<Option<String>>,
}

impl Drop for Real {
    fn drop(&mut self) {
        let user = self.checked_user.lock().unwrap().clone();
        if let Some(user) = user
            && !std::thread::panicking()
        {
            let rejected = self.cluster.rejections_of(&user);
            assert!(
                rejected.is_empty(),
                "the API server rejected requests of {user}: {rejected:#?}"
            );
        }
    }
}

impl Server {
    /// A real control plane (see realkube::Options), failing the test when
    /// the binaries are missing: never a silent fall back to memkube.
    pub async fn start_real(opts: realkube::Options) -> Server {
        let cluster = realkube::Cluster::start(opts)
            .await
            .unwrap_or_else(|e| panic!("a real API server for the test: {e}"));
        Server::Real(Box::new(Real {
            cluster,
            log_from: Mutex::new(0),
            checked_user: Mutex::new(None),
        }))
    }

    /// Fail the test at its end if a request of `user` was rejected (see [`rejections`]).
    pub fn check_rejections_of(&self, user: &str) {
        if let Server::Real(real) = self {
            *real.checked_user.lock().unwrap() = Some(user.to_string());
        }
    }

    /// A client with every permission (the test's own).
    pub fn client(&self) -> Client {
        match self {
            Server::Mem(api) => api.client(),
            Server::Real(real) => real.cluster.admin_client(),
        }
    }

    /// An admin kubeconfig, as CAPI writes `<cluster>-kubeconfig`.
    pub fn kubeconfig_yaml(&self) -> String {
        match self {
            Server::Mem(api) => api.kubeconfig_yaml(),
            Server::Real(real) => real.cluster.kubeconfig_yaml(),
        }
    }

    /// The memkube behind this server, for fault injection.
    pub fn mem(&self) -> &TestApi {
        match self {
            Server::Mem(api) => api,
            Server::Real(_) => panic!("fault injection needs the in-memory API server"),
        }
    }

    /// The real control plane behind this server.
    pub fn real(&self) -> &realkube::Cluster {
        match self {
            Server::Real(real) => &real.cluster,
            Server::Mem(_) => panic!("this test needs a real API server"),
        }
    }

    /// Requests served since the last [`Server::clear_request_log`]; on a
    /// real server from its audit log, with the user name as user agent,
    /// less the control plane's own (the API server's loopback client,
    /// kube-controller-manager, kube-scheduler, kwok: when their informers
    /// list and watch differs between releases), as memkube has none.
    pub fn request_log(&self) -> Vec<RequestRecord> {
        match self {
            Server::Mem(api) => api.request_log(),
            Server::Real(real) => {
                let from = *real.log_from.lock().unwrap();
                real.cluster.request_log()[from.min(real.cluster.request_log().len())..]
                    .iter()
                    .filter(|r| {
                        r.user != "system:apiserver"
                            && !["kube-controller-manager/", "kube-scheduler/", "kwok/"]
                                .iter()
                                .any(|component| r.user_agent.starts_with(component))
                    })
                    .map(|r| RequestRecord {
                        verb: r.verb.clone(),
                        method: String::new(),
                        path: r.path.clone(),
                        query: r
                            .uri
                            .split_once('?')
                            .map(|(_, q)| q.to_string())
                            .unwrap_or_default(),
                        field_manager: None,
                        user_agent: format!("{} {}", r.user, r.user_agent),
                        status: r.status,
                        at: None,
                    })
                    .collect()
            }
        }
    }

    /// Forget the requests served so far.
    pub fn clear_request_log(&self) {
        match self {
            Server::Mem(api) => api.clear_request_log(),
            Server::Real(real) => *real.log_from.lock().unwrap() = real.cluster.request_log().len(),
        }
    }

    /// Create the CRDs of a YAML file and wait until they are served.
    pub async fn load_crds(&self, path: &Path) {
        match self {
            Server::Mem(api) => {
                api.load_crds(path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
            Server::Real(real) => {
                let text = std::fs::read_to_string(path).unwrap();
                real.cluster
                    .apply_crds(&text)
                    .await
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
        }
    }
}

/// The YAML documents of a text, as JSON values (empty ones skipped).
pub fn documents(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .unwrap_or_else(|e| panic!("YAML: {e}"))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// Create or update a CRD and wait until it is served.
async fn apply_crd(server: &realkube::Cluster, crd: Value) {
    let text = serde_json::to_string(&crd).unwrap();
    server
        .apply_crds(&text)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// A management cluster: the API server with the upstream CRDs and ours,
/// and the identity the controller runs as.
pub struct Management {
    pub api: Server,
    /// The test's own client (admin).
    pub client: Client,
    /// The controller's client: on a real server the release
    /// ServiceAccount with the RBAC of config/, so a missing permission fails.
    pub controller: Client,
    /// The kubeconfig of `controller`.
    pub controller_kubeconfig: String,
}

impl Management {
    /// Start the controller with test settings (fast retries, no probes, no admin ports).
    pub fn start(&self) -> Running {
        start_with(self.controller.clone(), Settings::for_tests())
    }

    /// Start the controller with `settings`.
    pub fn start_with(&self, settings: Settings) -> Running {
        start_with(self.controller.clone(), settings)
    }
}

/// A real management cluster: kube-apiserver with RBAC and the
/// OwnerReferencesPermissionEnforcement admission plugin, the garbage
/// collector, the upstream CRDs (all but those whose file name starts with
/// one of `except`), and what `clusterctl init --addon hcp-ingress` installs
/// from config/ (CRD, ServiceAccount, RBAC).
pub async fn management(except: &[&str]) -> Management {
    let api = Server::start_real(realkube::Options {
        name: "management".into(),
        role: realkube::Role::Management,
        controller_manager: true,
        admission_plugins: vec!["OwnerReferencesPermissionEnforcement".into()],
        ..realkube::Options::default()
    })
    .await;
    let client = api.client();
    for path in upstream_crds(except) {
        api.load_crds(&path).await;
    }
    for object in release_components() {
        match object["kind"].as_str().unwrap_or_default() {
            "CustomResourceDefinition" => apply_crd(api.real(), object).await,
            "Deployment" | "Service" => {}
            _ => drop(apply_as(&client, object, "clusterctl").await),
        }
    }
    create_namespace(&client, NS).await;
    let token = api
        .real()
        .service_account_token(CONTROLLER_NAMESPACE, CONTROLLER_SERVICE_ACCOUNT)
        .await;
    let controller = api.real().client_with_token(&token).await;
    let controller_kubeconfig = api.real().kubeconfig_for("controller", &token);
    api.check_rejections_of(&controller_user());
    Management {
        api,
        client,
        controller,
        controller_kubeconfig,
    }
}

/// An in-memory management cluster, for tests that inject API faults. The
/// controller runs with the admin client there (memkube has no RBAC).
pub async fn management_in_memory(except: &[&str]) -> Management {
    let api = TestApi::start().await;
    for path in upstream_crds(except) {
        api.load_crds(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    let ours: Value = serde_saphyr::from_str(&crd_yaml()).unwrap();
    api.add_crd(ours).unwrap();
    let client = api.client();
    create_namespace(&client, NS).await;
    let controller_kubeconfig = api.kubeconfig_yaml();
    Management {
        api: Server::Mem(api),
        controller: client.clone(),
        client,
        controller_kubeconfig,
    }
}

fn upstream_crds(except: &[&str]) -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/schemas");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("../shared/schemas exists beside the repository")
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            name.ends_with(".yaml") && !except.iter().any(|e| name.starts_with(e))
        })
        .collect();
    paths.sort();
    paths
}

/// `kubectl kustomize config/default`, as `clusterctl init --addon` installs it.
pub fn release_components() -> Vec<Value> {
    static TEXT: OnceLock<String> = OnceLock::new();
    let text = TEXT.get_or_init(|| {
        let out = std::process::Command::new("kubectl")
            .args(["kustomize", "config/default"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("kubectl on PATH, with its built-in kustomize (no script installs it: docs/development.md, tier 2)");
        assert!(
            out.status.success(),
            "kubectl kustomize config/default: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    });
    documents(text)
}

pub async fn create_namespace(client: &Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    let _ = namespaces.create(&PostParams::default(), &ns).await;
}

/// A running controller; stops (and waits) on `stop`.
pub struct Running {
    token: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    pub async fn stop(self) {
        self.token.cancel();
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("controller stops")
            .unwrap();
    }
}

/// Start the controller on `client` with `settings`.
pub fn start_with(client: Client, settings: Settings) -> Running {
    hcp_ingress::telemetry::init_logging(hcp_ingress::telemetry::LogFormat::Text, "warn");
    let token = CancellationToken::new();
    let task = tokio::spawn({
        let token = token.clone();
        async move { run(client, settings, token).await.expect("controller runs") }
    });
    Running { token, task }
}

/// Poll `check` until it returns Some, or fail after 20 s naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Wait until an Event with `reason` is published in [`NS`]; that Event.
pub async fn wait_event(client: &Client, reason: &str) -> Event {
    wait_event_on(client, reason, None).await
}

/// [`wait_event`], the Event also regarding the object `name` when given.
pub async fn wait_event_on(client: &Client, reason: &str, name: Option<&str>) -> Event {
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let what = format!("a {reason} Event on {}", name.unwrap_or("any object"));
    eventually(&what, || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some(reason)
                    && name.is_none_or(|n| {
                        e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(n)
                    })
            })
    })
    .await
}

/// `settings` with the metrics endpoint on a free local port, and its address.
pub fn with_metrics(mut settings: Settings) -> (Settings, std::net::SocketAddr) {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    settings.metrics_addr = Some(addr);
    (settings, addr)
}

/// How many reconciliations the controller serving metrics at `addr` has
/// finished, successful or not; `None` while it does not answer.
pub async fn reconciles(addr: std::net::SocketAddr) -> Option<u64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: controller\r\nConnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let (_, body) = response.split_once("\r\n\r\n")?;
    Some(
        body.lines()
            .filter(|l| l.starts_with("hcp_ingress_controller_reconciles_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64,
    )
}

/// Apply an object as a user would (`kubectl apply --server-side`).
pub async fn apply_value(client: &Client, value: Value) -> DynamicObject {
    apply_as(client, value, "test-user").await
}

/// Apply an object with the field manager `manager`.
pub async fn apply_as(client: &Client, value: Value, manager: &str) -> DynamicObject {
    let obj: DynamicObject = serde_json::from_value(value.clone()).unwrap();
    let types = obj.types.clone().unwrap();
    let (group, version) = types
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", &types.api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, &types.kind);
    let ns = obj
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| NS.to_string());
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let api: Api<DynamicObject> = match caps.scope {
        kube::discovery::Scope::Namespaced => Api::namespaced_with(client.clone(), &ns, &resource),
        kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let name = obj.metadata.name.clone().unwrap();
    api.patch(
        &name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(&value),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {} {ns}/{name}: {e}", types.kind))
}

pub fn cpis(client: &Client) -> Api<ControlPlaneIngress> {
    Api::namespaced(client.clone(), NS)
}

/// Wait until the ControlPlaneIngress `name` of [`NS`] is gone (its
/// deletion finished: every finalizer done).
pub async fn wait_cpi_gone(client: &Client, name: &str) {
    eventually(&format!("ControlPlaneIngress {name} gone"), || async {
        cpis(client)
            .get_opt(name)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
}

pub fn routes(client: &Client, kind: RouteKind) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), NS, &kind.api_resource())
}

/// The status condition of `type_` as (status, reason, message).
pub fn condition(cpi: &ControlPlaneIngress, type_: &str) -> Option<(String, String, String)> {
    cpi.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Wait until the condition has `status`, return (reason, message); on
/// timeout the failure shows the conditions last seen.
pub async fn wait_condition(
    client: &Client,
    name: &str,
    type_: &str,
    status: &str,
) -> (String, String) {
    wait_condition_with(client, name, type_, status, None, Duration::from_secs(60)).await
}

/// Like [`wait_condition`], until the condition also has `reason` (steps of
/// a longer process that keep one status), within `within`; returns the message.
pub async fn wait_reason(
    client: &Client,
    name: &str,
    (type_, status, reason): (&str, &str, &str),
    within: Duration,
) -> String {
    wait_condition_with(client, name, type_, status, Some(reason), within)
        .await
        .1
}

async fn wait_condition_with(
    client: &Client,
    name: &str,
    type_: &str,
    status: &str,
    reason: Option<&str>,
    within: Duration,
) -> (String, String) {
    let api = cpis(client);
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let cpi = api.get_opt(name).await.ok().flatten();
        if let Some(cpi) = &cpi
            && let Some((s, r, message)) = condition(cpi, type_)
            && s == status
            && reason.is_none_or(|want| want == r)
            && cpi.status.as_ref().and_then(|s| s.observed_generation) == cpi.metadata.generation
        {
            return (r, message);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {name} {type_}={status} ({}); last seen: {:#?}",
            reason.unwrap_or("any reason"),
            cpi.and_then(|c| c.status).map(|s| s.conditions)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Read an example file of the repository.
pub fn example(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("templates/examples")
            .join(name),
    )
    .unwrap()
}

/// Writes (anything but reads) in the request log; on a real server only
/// the controller's: the API server's own controllers write too.
pub fn writes(api: &Server) -> Vec<String> {
    match api {
        Server::Mem(mem) => mem_writes(mem),
        Server::Real(_) => {
            let controller = controller_user();
            write_lines(
                api.request_log()
                    .into_iter()
                    .filter(|r| r.user_agent.starts_with(&controller)),
            )
        }
    }
}

/// Writes in a memkube's request log.
pub fn mem_writes(api: &TestApi) -> Vec<String> {
    write_lines(api.request_log().into_iter())
}

fn write_lines(log: impl Iterator<Item = RequestRecord>) -> Vec<String> {
    log.filter(|r| !matches!(r.verb.as_str(), "get" | "list" | "watch" | "discovery"))
        .map(|r| format!("{} {} {}", r.verb, r.path, r.status))
        .collect()
}
