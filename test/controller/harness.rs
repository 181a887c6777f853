//! Shared set-up: a memkube with the upstream CRDs and ours, a running controller, polling.

use std::{future::Future, path::Path, time::Duration};

use hcp_ingress::{
    api::ControlPlaneIngress,
    cli::crd_yaml,
    controller::{Settings, run},
    render::RouteKind,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams, PostParams},
};
use memkube::TestApi;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub const NS: &str = "tenants";

/// A management cluster: memkube with CRDs loaded.
pub struct Management {
    pub api: TestApi,
    pub client: Client,
}

/// Upstream CRD files, by name prefix, to load (all when `except` is empty).
pub async fn management(except: &[&str]) -> Management {
    let api = TestApi::start().await;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/schemas");
    for entry in std::fs::read_dir(&dir).expect("../shared/schemas exists beside the repository") {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.ends_with(".yaml") && !except.iter().any(|e| name.starts_with(e)) {
            api.load_crds(&path)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
    let ours: Value = serde_saphyr::from_str(&crd_yaml()).unwrap();
    api.add_crd(ours).unwrap();
    let client = api.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    let _ = namespaces.create(&PostParams::default(), &ns).await;
    Management { api, client }
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

/// Start the controller with test settings (fast retries, no probes, no admin ports).
pub fn start(client: Client) -> Running {
    start_with(client, Settings::for_tests())
}

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

/// Apply an object as a user would (`kubectl apply --server-side`).
pub async fn apply_value(client: &Client, value: Value) -> DynamicObject {
    let obj: DynamicObject = serde_json::from_value(value.clone()).unwrap();
    let types = obj.types.clone().unwrap();
    let (group, version) = types
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", &types.api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, &types.kind);
    let (resource, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let ns = obj
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| NS.to_string());
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    let name = obj.metadata.name.clone().unwrap();
    api.patch(
        &name,
        &PatchParams::apply("test-user").force(),
        &Patch::Apply(&value),
    )
    .await
    .unwrap()
}

pub fn cpis(client: &Client) -> Api<ControlPlaneIngress> {
    Api::namespaced(client.clone(), NS)
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
    let api = cpis(client);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let cpi = api.get_opt(name).await.ok().flatten();
        if let Some(cpi) = &cpi
            && let Some((s, reason, message)) = condition(cpi, type_)
            && s == status
            && cpi.status.as_ref().and_then(|s| s.observed_generation) == cpi.metadata.generation
        {
            return (reason, message);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {name} {type_}={status}; last seen: {:#?}",
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

/// Writes (anything but reads) in the request log.
pub fn writes(api: &TestApi) -> Vec<String> {
    api.request_log()
        .into_iter()
        .filter(|r| !matches!(r.verb.as_str(), "get" | "list" | "watch" | "discovery"))
        .map(|r| format!("{} {} {}", r.verb, r.path, r.status))
        .collect()
}
