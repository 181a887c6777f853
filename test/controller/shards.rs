//! Shards: two controller instances on one real management cluster, each
//! with its own `--watch-filter` (Cluster API's convention: the objects
//! labelled `cluster.x-k8s.io/watch-filter=<value>`), its own Lease and its
//! own ServiceAccount, so the API server's audit log tells their requests
//! apart.

use std::collections::BTreeSet;

use hcp_ingress::{
    api::ControlPlaneIngress,
    controller::{
        DEFAULT_LEASE, LeaseConfig, Settings, WATCH_FILTER_LABEL, WatchFilter, lease_name,
    },
    render::{ROUTE_PREFIX, RouteKind},
};
use k8s_openapi::api::{
    apps::v1::DaemonSet,
    coordination::v1::Lease,
    core::v1::{ConfigMap, Endpoints},
    rbac::v1::{ClusterRoleBinding, RoleBinding},
};
use kube::{Api, Client, ResourceExt, api::ListParams};
use realkube::AuditRecord;
use serde_json::{Value, json};

use crate::harness::*;
use crate::workload::{CLUSTER, connect, workload_cluster};

/// The shards' ControlPlaneIngresses (three each), one nobody's.
const SHARD_A: [&str; 3] = ["a-0", "a-1", "a-2"];
const SHARD_B: [&str; 3] = ["b-0", "b-1", "b-2"];
const UNSHARDED: &str = "no-shard";
/// Derived from a CAPI Cluster labelled for shard b.
const DERIVED_B: &str = "b-derived";
/// The one moved from shard a to shard b.
const MOVED: &str = "a-2";
/// Shard b's ServiceAccount: the controller's RBAC, another name.
const SHARD_B_ACCOUNT: &str = "hcp-ingress-shard-b";

fn shard_b_user() -> String {
    format!("system:serviceaccount:{CONTROLLER_NAMESPACE}:{SHARD_B_ACCOUNT}")
}

/// A management-side ControlPlaneIngress, labelled for `shard` (or none).
fn cpi(name: &str, shard: Option<&str>) -> Value {
    let mut value = json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"clusterName": name, "proxy": {"enabled": false},
                 "ingress": {"apiHost": format!("api.{name}.example.com")},
                 "backend": {"serviceName": format!("kmc-{name}"), "apiPort": 30443}}});
    if let Some(shard) = shard {
        value["metadata"]["labels"] = json!({WATCH_FILTER_LABEL: shard});
    }
    value
}

/// The workload cluster's ControlPlaneIngress in `shard`, with the node
/// proxy, steering `default/kubernetes` to it, and `upstreams`.
fn workload_cpi(shard: &str, upstreams: &[&str]) -> Value {
    json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
        "metadata": {"name": CLUSTER, "namespace": NS, "labels": {WATCH_FILTER_LABEL: shard}},
        "spec": {"clusterName": CLUSTER, "ingress": {"apiHost": "api.wl.example.com"},
                 "backend": {"serviceName": "kmc-wl", "apiPort": 30443},
                 "proxy": {"upstreams": upstreams}}})
}

/// The addresses `default/kubernetes` sends pods to.
fn endpoint_ips(endpoints: &Endpoints) -> Vec<String> {
    endpoints
        .subsets
        .iter()
        .flatten()
        .flat_map(|s| s.addresses.iter().flatten())
        .map(|a| a.ip.clone())
        .collect()
}

/// The field managers of an object's main resource (its status is the
/// cluster's controllers' to write).
fn managers<K: kube::Resource>(object: &K) -> BTreeSet<String> {
    object
        .meta()
        .managed_fields
        .iter()
        .flatten()
        .filter(|f| f.subresource.is_none())
        .filter_map(|f| f.manager.clone())
        .collect()
}

/// An instance for shard `value`: its watch filter, and leader election on
/// the Lease the flags would name for it.
fn shard(value: &str) -> Settings {
    let filter = WatchFilter::parse(value).unwrap();
    let mut settings = Settings::for_tests().in_shard(filter.clone());
    settings.lease = Some(LeaseConfig {
        name: lease_name(DEFAULT_LEASE, Some(&filter)),
        namespace: CONTROLLER_NAMESPACE.into(),
        identity: format!("shard-{value}-0"),
        lease_duration: std::time::Duration::from_secs(4),
        renew_deadline: std::time::Duration::from_secs(3),
        retry_period: std::time::Duration::from_millis(500),
    });
    settings
}

/// A second identity with exactly the controller's RBAC: a ServiceAccount
/// bound to every role the release binds the controller's to.
async fn second_identity(m: &Management) -> Client {
    let real = m.api.real();
    apply_value(
        &m.client,
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": SHARD_B_ACCOUNT, "namespace": CONTROLLER_NAMESPACE}}),
    )
    .await;
    let ours = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        subjects.iter().flatten().any(|s| {
            s.kind == "ServiceAccount"
                && s.name == CONTROLLER_SERVICE_ACCOUNT
                && s.namespace.as_deref() == Some(CONTROLLER_NAMESPACE)
        })
    };
    let cluster_bindings = Api::<ClusterRoleBinding>::all(m.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    let bindings = Api::<RoleBinding>::namespaced(m.client.clone(), CONTROLLER_NAMESPACE)
        .list(&ListParams::default())
        .await
        .unwrap();
    // (kind, metadata, roleRef) of each binding naming the controller's account.
    let copies = cluster_bindings
        .items
        .iter()
        .filter(|b| ours(&b.subjects))
        .map(|b| ("ClusterRoleBinding", json!({"name": format!("{}-shard-b", b.name_any())}), &b.role_ref))
        .chain(bindings.items.iter().filter(|b| ours(&b.subjects)).map(|b| {
            ("RoleBinding",
             json!({"name": format!("{}-shard-b", b.name_any()), "namespace": CONTROLLER_NAMESPACE}),
             &b.role_ref)
        }));
    for (kind, metadata, role_ref) in copies {
        apply_value(
            &m.client,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
                   "metadata": metadata, "roleRef": role_ref,
                   "subjects": [{"kind": "ServiceAccount", "name": SHARD_B_ACCOUNT, "namespace": CONTROLLER_NAMESPACE}]}),
        )
        .await;
    }
    let token = real
        .service_account_token(CONTROLLER_NAMESPACE, SHARD_B_ACCOUNT)
        .await;
    real.client_with_token(&token).await
}

/// Whether `record` is about the ControlPlaneIngress `name`, its route, or
/// its cluster's Secrets (`<name>-kubeconfig`, `<name>-ca`).
fn about(record: &AuditRecord, name: &str) -> bool {
    record.resource.as_ref().is_some_and(|r| {
        r.name == name
            || r.name == format!("{ROUTE_PREFIX}{name}")
            || r.name == format!("{name}-kubeconfig")
            || r.name == format!("{name}-ca")
    })
}

/// The ControlPlaneIngress once its status speaks of its current generation.
async fn observed(client: &Client, name: &str) -> ControlPlaneIngress {
    let api = cpis(client);
    eventually(&format!("{name} observed at its generation"), || async {
        let cpi = api.get(name).await.ok()?;
        (cpi.status.as_ref()?.observed_generation == cpi.metadata.generation).then_some(cpi)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_watch_filter_shards_reconcile_disjoint_clusters_and_hand_one_over() {
    let m = management(&[]).await;
    let real = m.api.real();
    let w = workload_cluster().await;
    connect(&m, &w).await;
    let b_client = second_identity(&m).await;
    m.api.check_rejections_of(&shard_b_user());
    let running_a = m.start_with(shard("a"));
    let running_b = start_with(b_client, shard("b"));

    for name in SHARD_A {
        apply_value(&m.client, cpi(name, Some("a"))).await;
    }
    for name in SHARD_B {
        apply_value(&m.client, cpi(name, Some("b"))).await;
    }
    apply_value(&m.client, cpi(UNSHARDED, None)).await;
    apply_value(&m.client, workload_cpi("a", &["192.0.2.10"])).await;
    // A source object of shard b: the ControlPlaneIngress derived from it
    // must carry its shard's label, or no instance would ever see it.
    let mut cluster: Value = serde_saphyr::from_str(&example("capi-cluster-domain.yaml")).unwrap();
    cluster["metadata"] = json!({"name": DERIVED_B, "namespace": NS,
        "labels": {WATCH_FILTER_LABEL: "b"},
        "annotations": cluster["metadata"]["annotations"].clone()});
    apply_value(&m.client, cluster).await;

    for name in SHARD_A.iter().chain(&SHARD_B).chain(&[DERIVED_B]) {
        observed(&m.client, name).await;
    }
    wait_condition(&m.client, CLUSTER, "EndpointsSteered", "True").await;
    let endpoints: Api<Endpoints> = Api::namespaced(w.client(), "default");
    let steered = endpoint_ips(&endpoints.get("kubernetes").await.unwrap());
    let daemon_sets: Api<DaemonSet> = Api::namespaced(w.client(), "kube-system");
    let proxy_before = daemon_sets.get("hcp-ingress-proxy").await.unwrap();
    let derived = cpis(&m.client).get(DERIVED_B).await.unwrap();
    assert_eq!(
        derived.labels().get(WATCH_FILTER_LABEL).map(String::as_str),
        Some("b"),
        "the derived ControlPlaneIngress carries its source's shard label"
    );

    // Each shard has its own leader; both lead.
    let leases: Api<Lease> = Api::namespaced(m.client.clone(), CONTROLLER_NAMESPACE);
    for (lease, holder) in [
        ("hcp-ingress-controller-a", "shard-a-0"),
        ("hcp-ingress-controller-b", "shard-b-0"),
    ] {
        let held = leases.get(lease).await.unwrap();
        assert_eq!(
            held.spec.and_then(|s| s.holder_identity).as_deref(),
            Some(holder)
        );
    }

    // Disjoint work: no request of one shard names an object of the
    // other's, and each shard's watches of ControlPlaneIngresses and
    // sources ask for its own label only.
    let users = [
        (
            controller_user(),
            "a",
            SHARD_B
                .iter()
                .chain(&[DERIVED_B])
                .copied()
                .collect::<Vec<_>>(),
        ),
        (
            shard_b_user(),
            "b",
            SHARD_A.iter().chain(&[CLUSTER]).copied().collect(),
        ),
    ];
    for (user, own, others) in &users {
        let requests = real.requests_by(user);
        let crossing: Vec<String> = requests
            .iter()
            .filter(|r| others.iter().any(|n| about(r, n)) || about(r, UNSHARDED))
            .map(|r| format!("{} {}", r.verb, r.uri))
            .collect();
        assert!(
            crossing.is_empty(),
            "shard {own} asked for objects not its own: {crossing:#?}"
        );
        let selector = format!("labelSelector=cluster.x-k8s.io%2Fwatch-filter%3D{own}");
        let unfiltered: Vec<String> = requests
            .iter()
            .filter(|r| matches!(r.verb.as_str(), "list" | "watch"))
            .filter(|r| {
                r.resource
                    .as_ref()
                    .is_some_and(|o| o.resource == "controlplaneingresses")
            })
            .filter(|r| !r.uri.contains(&selector))
            .map(|r| r.uri.clone())
            .collect();
        assert!(
            unfiltered.is_empty(),
            "shard {own} listed or watched ControlPlaneIngresses beyond its label: {unfiltered:#?}"
        );
    }
    // The unlabelled one is left to an instance without a filter: neither
    // shard wrote its status or its route.
    let unsharded = cpis(&m.client).get(UNSHARDED).await.unwrap();
    assert!(unsharded.status.is_none(), "{:?}", unsharded.status);
    assert!(
        routes(&m.client, RouteKind::Ingress)
            .get_opt(&format!("{ROUTE_PREFIX}{UNSHARDED}"))
            .await
            .unwrap()
            .is_none()
    );

    // The hand-over: MOVED is relabelled for shard b, and its host changes
    // in the same write. b takes it (its status and its route follow the
    // new host), a never touches it again, and the route stays the same
    // object, written by one field manager.
    let route_api = routes(&m.client, RouteKind::Ingress);
    let route_name = format!("{ROUTE_PREFIX}{MOVED}");
    let route_before = route_api.get(&route_name).await.unwrap();
    let mark = real.request_log().len();
    // Meanwhile, pods of the workload cluster must never be sent anywhere
    // but the proxy: a shard that let go of the cluster as if it had been
    // deleted would give `default/kubernetes` back.
    let watching = tokio::spawn({
        let endpoints = endpoints.clone();
        async move {
            let mut seen = BTreeSet::new();
            loop {
                if let Ok(e) = endpoints.get("kubernetes").await {
                    seen.insert(endpoint_ips(&e));
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                if seen.len() > 1 {
                    return seen;
                }
            }
        }
    });
    let mut moved = cpi(MOVED, Some("b"));
    moved["spec"]["ingress"]["apiHost"] = json!("api.a-2-moved.example.com");
    apply_value(&m.client, moved).await;
    apply_value(&m.client, workload_cpi("b", &["192.0.2.10"])).await;
    observed(&m.client, MOVED).await;
    // b carries the workload side on: a change of the proxy's upstreams
    // reaches the cluster's ConfigMap, written under the same field manager.
    apply_value(&m.client, workload_cpi("b", &["192.0.2.10", "192.0.2.11"])).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(w.client(), "kube-system");
    let config = eventually("the proxy's config with the new upstream", || async {
        let config = config_maps.get("hcp-ingress-proxy").await.ok()?;
        serde_json::to_string(&config.data)
            .ok()?
            .contains("192.0.2.11")
            .then_some(config)
    })
    .await;
    wait_condition(&m.client, CLUSTER, "EndpointsSteered", "True").await;
    let route_after = eventually("the moved route with its new host", || async {
        let route = route_api.get(&route_name).await.ok()?;
        serde_json::to_string(&route.data)
            .ok()?
            .contains("api.a-2-moved.example.com")
            .then_some(route)
    })
    .await;
    // Once b carries the cluster, a asks nothing more about it. (A
    // reconciliation of CLUSTER that a started before its watch saw the
    // relabel may still finish: the proxy has no node here, so a looks
    // again every few seconds and one may be under way at the relabel.
    // MOVED has nothing to look again at.) Two of a's retry periods pass.
    let settled = real.request_log().len();
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    let log = real.request_log();
    let (since, since_settled) = (&log[mark..], &log[settled..]);
    for (name, requests) in [(MOVED, since), (CLUSTER, since_settled)] {
        let by_a: Vec<String> = requests
            .iter()
            .filter(|r| r.user == controller_user() && about(r, name))
            .map(|r| format!("{} {}", r.verb, r.uri))
            .collect();
        assert!(
            by_a.is_empty(),
            "shard a still touched {name} after the hand-over: {by_a:#?}"
        );
    }
    assert!(
        since
            .iter()
            .any(|r| r.user == shard_b_user() && r.is_write() && about(r, MOVED)),
        "shard b wrote {MOVED} after the hand-over"
    );
    assert!(
        since
            .iter()
            .any(|r| r.user == shard_b_user() && about(r, CLUSTER)),
        "shard b read {CLUSTER}'s kubeconfig after the hand-over"
    );

    // The workload side went on as one: `default/kubernetes` steered all
    // along, the same proxy DaemonSet, and one field manager on what we
    // wrote there.
    assert!(
        !watching.is_finished(),
        "default/kubernetes changed during the hand-over: {:?}",
        watching.await.unwrap()
    );
    watching.abort();
    let endpoints_after = endpoints.get("kubernetes").await.unwrap();
    assert_eq!(endpoint_ips(&endpoints_after), steered);
    let proxy_after = daemon_sets.get("hcp-ingress-proxy").await.unwrap();
    assert_eq!(
        proxy_after.uid(),
        proxy_before.uid(),
        "the proxy DaemonSet is the same object"
    );
    let ours = BTreeSet::from([hcp_ingress::api::MANAGER.to_string()]);
    assert_eq!(
        managers(&proxy_after),
        ours,
        "the proxy DaemonSet's managers"
    );
    assert_eq!(managers(&config), ours, "the proxy ConfigMap's managers");
    let endpoint_managers = managers(&endpoints_after);
    assert!(
        endpoint_managers.contains(hcp_ingress::api::MANAGER) && endpoint_managers.len() <= 2,
        "default/kubernetes is steered by one manager of ours beside the provider's: {endpoint_managers:?}"
    );
    assert_eq!(
        route_after.uid(),
        route_before.uid(),
        "the route of {MOVED} is the same object: no gap, no second one"
    );
    let managers: BTreeSet<String> = route_after
        .managed_fields()
        .iter()
        .filter_map(|f| f.manager.clone())
        .collect();
    assert_eq!(
        managers,
        BTreeSet::from([hcp_ingress::api::MANAGER.to_string()]),
        "one field manager owns the route across shards"
    );

    running_a.stop().await;
    running_b.stop().await;
}
