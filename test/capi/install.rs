//! `clusterctl init --addon hcp-ingress` and `clusterctl delete --addon
//! hcp-ingress --include-crd`, on a real API server: what clusterctl applies
//! is exactly config/, the controller runs from it with the RBAC clusterctl
//! bound, and delete leaves nothing of ours behind, cluster-scoped RBAC
//! included.

use std::{collections::BTreeSet, process::Command};

use k8s_openapi::api::{apps::v1::Deployment, networking::v1::Ingress};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams},
    discovery::{Scope, pinned_kind},
};
use serde_json::{Value, json};

use crate::{
    capi::{
        Clusterctl, Management, PROVIDER_LABEL, PROVIDER_NAMESPACE, Process, SERVICE_ACCOUNT,
        free_port, http_status,
    },
    harness::{NS, apply_value, cpis, documents, eventually, wait_cpi_gone},
};

const PROVIDER: &str = "addon-hcp-ingress";
const DEPLOYMENT: &str = "hcp-ingress-controller-manager";

/// An object of the components: apiVersion, kind, namespace, name.
type Key = (String, String, String, String);

fn key(o: &Value) -> Key {
    let field = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        field(&o["apiVersion"]),
        field(&o["kind"]),
        field(&o["metadata"]["namespace"]),
        field(&o["metadata"]["name"]),
    )
}

async fn resource(client: &Client, api_version: &str, kind: &str) -> (ApiResource, bool) {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let (resource, caps) = pinned_kind(client, &GroupVersionKind::gvk(group, version, kind))
        .await
        .unwrap_or_else(|e| panic!("{api_version} {kind} is not served: {e}"));
    (resource, caps.scope == Scope::Namespaced)
}

async fn get(client: &Client, (api_version, kind, ns, name): &Key) -> Option<DynamicObject> {
    let (resource, namespaced) = resource(client, api_version, kind).await;
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(client.clone(), ns, &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    };
    api.get_opt(name).await.unwrap()
}

/// Every object of the kinds in `kinds` that carries our provider label.
async fn labelled(client: &Client, kinds: &BTreeSet<(String, String)>) -> BTreeSet<Key> {
    let mut found = BTreeSet::new();
    for (api_version, kind) in kinds {
        let (resource, _) = resource(client, api_version, kind).await;
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let list = api
            .list(&ListParams::default().labels(&format!("{PROVIDER_LABEL}={PROVIDER}")))
            .await
            .unwrap();
        for o in list {
            found.insert((
                api_version.clone(),
                kind.clone(),
                o.namespace().unwrap_or_default(),
                o.name_any(),
            ));
        }
    }
    found
}

/// The controller binary started as the Deployment clusterctl applied says:
/// its arguments and environment, as our ServiceAccount. Only the admin
/// ports move to free loopback ports (a pod has its own network).
async fn controller_from(m: &Management) -> (Process, u16) {
    let deployment: Deployment = Api::namespaced(m.client.clone(), PROVIDER_NAMESPACE)
        .get(DEPLOYMENT)
        .await
        .expect("clusterctl created the Deployment");
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some(SERVICE_ACCOUNT));
    let container = &pod.containers[0];
    let health = free_port();
    let args: Vec<String> = container
        .args
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|a| {
            if a.starts_with("--health-addr=") {
                format!("--health-addr=127.0.0.1:{health}")
            } else if a.starts_with("--metrics-addr=") {
                format!("--metrics-addr=127.0.0.1:{}", free_port())
            } else {
                a
            }
        })
        .collect();
    let kubeconfig = m.cluster.dir().join("controller.kubeconfig");
    std::fs::write(&kubeconfig, m.controller_kubeconfig().await).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hcp-ingress"));
    cmd.args(&args).env_clear().env("KUBECONFIG", &kubeconfig);
    for var in container.env.clone().unwrap_or_default() {
        let value = match (var.value, var.value_from) {
            (Some(value), _) => value,
            (None, Some(from)) => match from.field_ref.map(|f| f.field_path).as_deref() {
                Some("metadata.namespace") => PROVIDER_NAMESPACE.to_string(),
                Some("metadata.name") => format!("{DEPLOYMENT}-0"),
                other => panic!(
                    "env {} from {other:?}: not a pod field the test fills",
                    var.name
                ),
            },
            (None, None) => String::new(),
        };
        cmd.env(var.name, value);
    }
    let process = Process::spawn(cmd, m.cluster.dir().join("controller.log"));
    (process, health)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_installs_exactly_config_the_controller_runs_from_it_and_delete_removes_it_all()
{
    let clusterctl = Clusterctl::new();
    let m = Management::init("management", &clusterctl).await;
    let components = documents(&clusterctl.components);
    let expected: BTreeSet<Key> = components.iter().map(key).collect();
    let kinds: BTreeSet<(String, String)> = expected
        .iter()
        .map(|(v, k, _, _)| (v.clone(), k.clone()))
        .collect();
    assert!(
        kinds.iter().any(|(_, k)| k == "ClusterRole")
            && kinds.iter().any(|(_, k)| k == "Deployment"),
        "{kinds:?}"
    );

    // Exactly config/: every object, and no other object with our label.
    for k in &expected {
        let o = get(&m.client, k)
            .await
            .unwrap_or_else(|| panic!("clusterctl did not create {k:?}"));
        assert!(
            o.labels().contains_key("clusterctl.cluster.x-k8s.io"),
            "{k:?} lacks clusterctl's label"
        );
    }
    assert_eq!(labelled(&m.client, &kinds).await, expected);

    // The controller starts from it and works with the RBAC clusterctl bound.
    let (mut controller, health) = controller_from(&m).await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while http_status(health, "/readyz").await != Some(200) {
        if let Some(status) = controller.exited() {
            panic!(
                "the controller ended ({status}):\n{}",
                controller.log_tail(30)
            );
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the controller is not ready after 60 s:\n{}",
            controller.log_tail(30)
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    m.namespace(NS).await;
    apply_value(
        &m.client,
        json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
            "metadata": {"name": "wl", "namespace": NS},
            "spec": {"clusterName": "wl", "ingress": {"apiHost": "api.wl.example.com", "className": "haproxy"},
                     "backend": {"serviceName": "kmc-wl", "apiPort": 30443}, "proxy": {"enabled": false}}}),
    )
    .await;
    let ingresses: Api<Ingress> = Api::namespaced(m.client.clone(), NS);
    eventually("the controller writes the route", || async {
        let list = ingresses.list(&ListParams::default()).await.ok()?;
        (!list.items.is_empty()).then_some(())
    })
    .await;
    let user = format!("system:serviceaccount:{PROVIDER_NAMESPACE}:{SERVICE_ACCOUNT}");
    let rejected = m.cluster.rejections_of(&user);
    assert!(
        rejected.is_empty(),
        "RBAC refused the controller: {rejected:#?}"
    );

    // The documented order: delete what the controller manages while it
    // runs (its finalizer cleans up), then the provider.
    cpis(&m.client)
        .delete("wl", &DeleteParams::default())
        .await
        .unwrap();
    wait_cpi_gone(&m.client, "wl").await;
    controller.stop();

    clusterctl
        .run(&[
            "delete",
            "--addon",
            "hcp-ingress",
            "--include-crd",
            "--kubeconfig",
            m.kubeconfig.to_str().unwrap(),
        ])
        .await
        .unwrap_or_else(|e| panic!("clusterctl delete --addon hcp-ingress failed:\n{e}"));
    // Only the Namespace stays (clusterctl keeps it without --include-namespace).
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let left = loop {
        let mut left = Vec::new();
        for k in &expected {
            if get(&m.client, k).await.is_some() {
                left.push(k.clone());
            }
        }
        let done = left.iter().all(|(_, kind, _, _)| kind == "Namespace");
        if done || tokio::time::Instant::now() > deadline {
            break left;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert!(
        left.len() == 1 && left[0].1 == "Namespace",
        "clusterctl delete --addon hcp-ingress --include-crd left behind: {left:?}"
    );
}
