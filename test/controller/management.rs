//! Management side: routes, status, events, faults, leader election.

use std::time::Duration;

use hcp_ingress::{
    api::ControlPlaneIngress,
    controller::{LeaseConfig, Settings, campaign},
    render::RouteKind,
};
use k8s_openapi::{
    api::{
        coordination::v1::{Lease, LeaseSpec},
        networking::v1::Ingress,
    },
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::{SignedDuration, Timestamp},
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, DynamicObject, ListParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use memkube::RequestMatch;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::harness::*;

/// A ControlPlaneIngress for `name` with the given route block.
fn cpi(name: &str, ingress_extra: Value, route: Value) -> Value {
    let mut ingress = json!({"apiHost": format!("api.{name}.example.com"), "konnectivityHost": format!("konn.{name}.example.com")});
    ingress
        .as_object_mut()
        .unwrap()
        .extend(ingress_extra.as_object().unwrap().clone());
    // Management side only: no workload cluster behind these.
    let mut spec = json!({"clusterName": name, "ingress": ingress, "proxy": {"enabled": false},
                          "backend": {"serviceName": format!("kmc-{name}"), "apiPort": 30443, "konnectivityPort": 30132}});
    if route != json!({}) {
        spec["route"] = route;
    }
    json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
           "metadata": {"name": name, "namespace": NS}, "spec": spec})
}

/// Our route object for the ControlPlaneIngress name `name` (TLSRoutes: `<name>-<purpose>`).
fn route_name(name: &str) -> String {
    format!("{}{name}", hcp_ingress::render::ROUTE_PREFIX)
}

async fn wait_route(client: &kube::Client, kind: RouteKind, name: &str) -> DynamicObject {
    let name = &route_name(name);
    let api = routes(client, kind);
    eventually(&format!("{kind:?} {name}"), || async {
        api.get_opt(name).await.ok()?
    })
    .await
}

async fn wait_gone(client: &kube::Client, kind: RouteKind, name: &str) {
    let name = &route_name(name);
    let api = routes(client, kind);
    eventually(&format!("{kind:?} {name} deleted"), || async {
        api.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await
}

fn strip_uid(text: &str) -> Value {
    let mut value: Value = serde_saphyr::from_str(text).unwrap();
    value["metadata"].as_object_mut().unwrap().remove("uid");
    value
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_source_kind_becomes_a_control_plane_ingress_and_its_route() {
    let m = management(&[]).await;
    for ns in ["kcm-system"] {
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(m.client.clone());
        let _ = api
            .create(
                &Default::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
            )
            .await;
    }
    let running = m.start();
    // (example, namespace, ControlPlaneIngress name, our route: kind and
    // name, None where the upstream makes the route itself)
    let cases = [
        ("k0smotron-controlplane.yaml", NS, "tenant-01-cp", None),
        (
            "k0smotron-cluster.yaml",
            NS,
            "tenant-02",
            Some((RouteKind::Ingress, "hcp-ingress-tenant-02")),
        ),
        (
            "k0rdent-clusterdeployment.yaml",
            "kcm-system",
            "tenant-03",
            None,
        ),
        (
            "capi-cluster-domain.yaml",
            NS,
            "tenant-04",
            Some((RouteKind::IngressRouteTcp, "hcp-ingress-tenant-04")),
        ),
        (
            "kamaji-tenantcontrolplane.yaml",
            NS,
            "tenant-05",
            Some((RouteKind::Ingress, "hcp-ingress-tenant-05")),
        ),
        (
            "steward-tenantcontrolplane.yaml",
            NS,
            "tenant-06",
            Some((RouteKind::Ingress, "hcp-ingress-tenant-06")),
        ),
    ];
    for (file, ..) in &cases {
        apply_value(&m.client, strip_uid(&example(file))).await;
    }
    for (file, ns, name, route) in cases {
        let cpis: Api<ControlPlaneIngress> = Api::namespaced(m.client.clone(), ns);
        let cpi = eventually(
            &format!("ControlPlaneIngress {ns}/{name} from {file}"),
            || async { cpis.get_opt(name).await.ok()? },
        )
        .await;
        let owner = cpi
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            .cloned()
            .expect("owned by its source");
        let source_kind = serde_saphyr::from_str::<Value>(&example(file)).unwrap()["kind"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(owner.kind, source_kind, "{file}");
        let Some((kind, route)) = route else {
            // The upstream makes it: the status waits for the upstream's route, and we make none.
            let upstream = cpi.spec.upstream.as_ref().and_then(|u| u.route.as_ref());
            assert!(upstream.is_some(), "{file}: spec.upstream.route");
            let ours = Api::<Ingress>::namespaced(m.client.clone(), ns)
                .list(&ListParams::default().labels("app.kubernetes.io/managed-by=hcp-ingress"))
                .await
                .unwrap();
            assert!(
                ours.items
                    .iter()
                    .all(|i| i.owner_references()[0].uid != cpi.uid().unwrap()),
                "{file}: no route of ours"
            );
            continue;
        };
        let api =
            kube::Api::<DynamicObject>::namespaced_with(m.client.clone(), ns, &kind.api_resource());
        let object = eventually(&format!("{kind:?} {ns}/{route}"), || async {
            api.get_opt(route).await.ok()?
        })
        .await;
        let owners = object.owner_references();
        assert_eq!(
            owners[0].uid,
            cpi.uid().unwrap(),
            "{file}: the route is owned by the ControlPlaneIngress"
        );
        assert_eq!(
            object.labels()["cluster.x-k8s.io/cluster-name"],
            cpi.spec.cluster_name,
            "{file}"
        );
    }
    // The CAPI Cluster source owns its ControlPlaneIngress once, not twice.
    let cpi = cpis(&m.client).get("tenant-04").await.unwrap();
    assert_eq!(cpi.owner_references().len(), 1);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_flavor_creates_its_route_kind_with_its_passthrough_setting() {
    let m = management(&[]).await;
    let running = m.start();
    let flavors = [
        (
            "haproxy",
            json!({"controller": "haproxy"}),
            Some("haproxy.org/ssl-passthrough"),
        ),
        (
            "haproxy-ingress",
            json!({"controller": "haproxy-ingress"}),
            Some("haproxy-ingress.github.io/ssl-passthrough"),
        ),
        (
            "nginx",
            json!({"controller": "nginx"}),
            Some("nginx.ingress.kubernetes.io/ssl-passthrough"),
        ),
        ("generic", json!({"controller": "generic"}), None),
        ("traefik", json!({"controller": "traefik"}), None),
        (
            "gateway",
            json!({"controller": "gateway", "gateway": {"parentRefs": [{"name": "shared", "namespace": "gw"}]}}),
            None,
        ),
    ];
    for (flavor, route, _) in &flavors {
        apply_value(
            &m.client,
            cpi(&format!("t-{flavor}"), json!({}), route.clone()),
        )
        .await;
    }
    for (flavor, _, annotation) in flavors {
        let name = format!("t-{flavor}");
        if flavor == "gateway" {
            gateway_accepts(&m.client, &name).await;
        }
        let (reason, message) = wait_condition(&m.client, &name, "RouteReady", "True").await;
        let want = if flavor == "gateway" {
            "Accepted"
        } else {
            "Applied"
        };
        assert_eq!(reason, want, "{flavor}: {message}");
        let cpi = cpis(&m.client).get(&name).await.unwrap();
        assert_eq!(
            cpi.status.as_ref().unwrap().flavor.unwrap().as_str(),
            flavor
        );
        match flavor {
            "traefik" => {
                let route = wait_route(&m.client, RouteKind::IngressRouteTcp, &name).await;
                assert_eq!(route.data["spec"]["tls"]["passthrough"], true);
            }
            "gateway" => {
                for host in ["api", "konnectivity"] {
                    let route =
                        wait_route(&m.client, RouteKind::TlsRoute, &format!("{name}-{host}")).await;
                    assert_eq!(route.data["spec"]["parentRefs"][0]["name"], "shared");
                }
            }
            _ => {
                let ingress = Api::<Ingress>::namespaced(m.client.clone(), NS)
                    .get(&route_name(&name))
                    .await
                    .unwrap();
                if let Some(key) = annotation {
                    assert_eq!(ingress.annotations()[key], "true", "{flavor}");
                }
            }
        }
    }
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_flavor_replaces_the_route_and_deploy_false_removes_it() {
    let m = management(&[]).await;
    let running = m.start();
    apply_value(
        &m.client,
        cpi("switch", json!({"className": "haproxy"}), json!({})),
    )
    .await;
    wait_route(&m.client, RouteKind::Ingress, "switch").await;

    apply_value(
        &m.client,
        cpi(
            "switch",
            json!({"className": "haproxy"}),
            json!({"controller": "traefik"}),
        ),
    )
    .await;
    wait_route(&m.client, RouteKind::IngressRouteTcp, "switch").await;
    wait_gone(&m.client, RouteKind::Ingress, "switch").await;

    apply_value(
        &m.client,
        cpi(
            "switch",
            json!({"deploy": false}),
            json!({"controller": "traefik"}),
        ),
    )
    .await;
    wait_gone(&m.client, RouteKind::IngressRouteTcp, "switch").await;
    let (reason, _) = wait_condition(&m.client, "switch", "RouteReady", "True").await;
    assert_eq!(reason, "DeployDisabled");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_cluster_gets_only_its_paused_status_until_resumed() {
    let m = management(&[]).await;
    let cluster = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "paused", "namespace": NS}, "spec": {"paused": true}});
    apply_value(&m.client, cluster.clone()).await;
    let running = m.start();
    apply_value(
        &m.client,
        cpi("paused", json!({"className": "nginx"}), json!({})),
    )
    .await;
    let (_, message) = wait_condition(&m.client, "paused", "Paused", "True").await;
    assert!(message.contains("spec.paused"), "{message}");
    assert!(
        routes(&m.client, RouteKind::Ingress)
            .get_opt(&route_name("paused"))
            .await
            .unwrap()
            .is_none(),
        "no route while paused"
    );
    // The only thing written while paused is the status that says so: no
    // route, no finalizer, no owner reference (clusterctl move relies on it).
    let paused_writes: Vec<String> = writes(&m.api)
        .into_iter()
        .filter(|w| w.contains("/controlplaneingresses/paused") || w.contains("/ingresses"))
        .collect();
    assert!(
        !paused_writes.is_empty(),
        "the Paused condition was written"
    );
    assert!(
        paused_writes
            .iter()
            .all(|w| w.contains("/controlplaneingresses/paused/status")),
        "only status writes while paused: {paused_writes:#?}"
    );

    let mut resumed = cluster;
    resumed["spec"]["paused"] = json!(false);
    apply_value(&m.client, resumed).await;
    wait_route(&m.client, RouteKind::Ingress, "paused").await;
    wait_condition(&m.client, "paused", "Paused", "False").await;
    // The ControlPlaneIngress is owned by its Cluster (GC, clusterctl move).
    let cpi = cpis(&m.client).get("paused").await.unwrap();
    assert!(
        cpi.owner_references()
            .iter()
            .any(|o| o.kind == "Cluster" && o.name == "paused")
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_spec_is_a_condition_and_an_event_and_deletes_nothing() {
    let m = management(&[]).await;
    let running = m.start();
    apply_value(
        &m.client,
        cpi("bad", json!({"className": "haproxy"}), json!({})),
    )
    .await;
    wait_route(&m.client, RouteKind::Ingress, "bad").await;

    // The CRD schema cannot check annotation keys; the controller does.
    apply_value(
        &m.client,
        cpi(
            "bad",
            json!({"className": "haproxy", "annotations": {"not a key": "x"}}),
            json!({}),
        ),
    )
    .await;
    let (reason, message) = wait_condition(&m.client, "bad", "RouteReady", "False").await;
    assert_eq!(reason, "InvalidSpec");
    assert!(
        message.contains("spec.ingress.annotations") && message.contains("\"not a key\""),
        "{message}"
    );
    let event = wait_event(&m.client, "InvalidSpec").await;
    assert_eq!(event.regarding.unwrap().name.as_deref(), Some("bad"));
    assert!(
        routes(&m.client, RouteKind::Ingress)
            .get_opt(&route_name("bad"))
            .await
            .unwrap()
            .is_some(),
        "nothing deleted"
    );
    running.stop().await;
}

/// A TLSRoute is routed once its Gateway's controller accepts it: until
/// then `RouteReady` is Unknown; then the test answers as a Gateway
/// controller would (test/ingress runs a real one, Traefik).
async fn gateway_accepts(client: &kube::Client, name: &str) {
    let (reason, message) = wait_condition(client, name, "RouteReady", "Unknown").await;
    assert_eq!(reason, "AwaitingGateway", "{message}");
    let routes = routes(client, RouteKind::TlsRoute);
    for host in ["api", "konnectivity"] {
        let route = wait_route(client, RouteKind::TlsRoute, &format!("{name}-{host}")).await;
        let generation = route.metadata.generation.unwrap();
        let parent = route.data["spec"]["parentRefs"][0].clone();
        let conditions: Vec<_> = ["Accepted", "ResolvedRefs"]
            .iter()
            .map(|t| {
                json!({"type": t, "status": "True", "reason": t, "message": "",
                "observedGeneration": generation, "lastTransitionTime": "2026-01-01T00:00:00Z"})
            })
            .collect();
        routes
            .patch_status(
                &route.name_any(),
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"status": {"parents": [{"parentRef": parent,
                    "controllerName": "example.com/gateway", "conditions": conditions}]}})),
            )
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_route_crd_is_a_condition_and_the_route_follows_the_crd() {
    let m = management(&["gateway.networking.k8s.io_tlsroutes"]).await;
    let running = m.start();
    apply_value(
        &m.client,
        cpi(
            "gw",
            json!({}),
            json!({"controller": "gateway", "gateway": {"parentRefs": [{"name": "shared"}]}}),
        ),
    )
    .await;
    let (reason, message) = wait_condition(&m.client, "gw", "RouteReady", "False").await;
    assert_eq!(reason, "RouteKindNotInstalled");
    assert!(
        message.contains("TLSRoute (gateway.networking.k8s.io/v1) is not installed"),
        "{message}"
    );

    let crd = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/schemas/gateway.networking.k8s.io_tlsroutes.yaml");
    m.api.load_crds(&crd).await;
    wait_route(&m.client, RouteKind::TlsRoute, "gw-api").await;
    // Applied, and waiting for a Gateway controller to answer.
    let (reason, _) = wait_condition(&m.client, "gw", "RouteReady", "Unknown").await;
    assert_eq!(reason, "AwaitingGateway");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_failures_are_retried_with_backoff_until_convergence() {
    let m = management_in_memory(&[]).await;
    m.api
        .mem()
        .fail_next(3, RequestMatch::new("apply", "/ingresses/"), 500);
    m.api
        .mem()
        .fail_next(2, RequestMatch::new("patch", "/status"), 409);
    m.api.mem().add_latency(
        RequestMatch::new("*", "/ingresses"),
        Duration::from_millis(100),
    );
    let running = m.start();
    apply_value(
        &m.client,
        cpi("faulty", json!({"className": "haproxy"}), json!({})),
    )
    .await;
    wait_route(&m.client, RouteKind::Ingress, "faulty").await;
    wait_condition(&m.client, "faulty", "RouteReady", "True").await;
    let failed: Vec<_> = m
        .api
        .request_log()
        .into_iter()
        .filter(|r| r.status >= 409 && r.path.contains("faulty"))
        .collect();
    assert!(
        failed.len() >= 3,
        "the injected failures were hit: {failed:?}"
    );
    // The route's applies were retried with growing delays, not in a hot loop.
    let applies: Vec<std::time::Instant> = m
        .api
        .request_log()
        .into_iter()
        .filter(|r| r.verb == "apply" && r.path.contains("/ingresses/"))
        .filter_map(|r| r.at)
        .collect();
    assert!(
        applies.len() >= 4,
        "three failures and a success: {applies:?}"
    );
    let gaps: Vec<Duration> = applies.windows(2).take(3).map(|w| w[1] - w[0]).collect();
    // (A watch event may bring the first retry early; from then on the
    // per-object backoff spaces them: 2 s, then 4 s.)
    assert!(
        gaps[1] >= Duration::from_secs(1) && gaps[2] >= gaps[1] + Duration::from_secs(1),
        "retries back off with growing delays: {gaps:?}"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_leader_election_only_the_leader_writes_and_hands_over_on_shutdown() {
    let m = management(&[]).await;
    let replica = |identity: &'static str| {
        let mut settings = Settings::for_tests();
        // The Lease lives where config/rbac lets the controller write it.
        settings.lease = Some(LeaseConfig {
            name: "hcp-ingress-controller".into(),
            namespace: CONTROLLER_NAMESPACE.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(4),
            renew_deadline: Duration::from_secs(3),
            retry_period: Duration::from_millis(200),
        });
        let kubeconfig = Kubeconfig::from_yaml(&m.controller_kubeconfig).unwrap();
        async move {
            let mut config =
                kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                    .await
                    .unwrap();
            config.headers.push((
                http::header::USER_AGENT,
                http::HeaderValue::from_str(identity).unwrap(),
            ));
            start_with(kube::Client::try_from(config).unwrap(), settings)
        }
    };
    let a = replica("replica-a").await;
    let leases: Api<Lease> = Api::namespaced(m.client.clone(), CONTROLLER_NAMESPACE);
    eventually("replica-a leads", || async {
        let lease = leases.get_opt("hcp-ingress-controller").await.ok()??;
        (lease.spec?.holder_identity? == "replica-a").then_some(())
    })
    .await;
    let b = replica("replica-b").await;
    apply_value(
        &m.client,
        cpi("led", json!({"className": "haproxy"}), json!({})),
    )
    .await;
    wait_route(&m.client, RouteKind::Ingress, "led").await;
    wait_condition(&m.client, "led", "RouteReady", "True").await;
    let writers = |log: Vec<memkube::RequestRecord>| {
        let controller = controller_user();
        log.into_iter()
            .filter(|r| {
                !matches!(r.verb.as_str(), "get" | "list" | "watch" | "discovery")
                    && !r.path.contains("/leases")
                    && r.user_agent.starts_with(&controller)
            })
            .map(|r| r.user_agent)
            .collect::<std::collections::BTreeSet<_>>()
    };
    let seen = writers(m.api.request_log());
    assert!(
        seen.iter().all(|ua| !ua.contains("replica-b")),
        "the standby wrote: {seen:?}"
    );
    assert!(
        seen.iter().any(|ua| ua.contains("replica-a")),
        "the leader wrote: {seen:?}"
    );

    // Shutdown releases the lease: the standby takes over well before it would expire.
    a.stop().await;
    eventually("replica-b leads", || async {
        let lease = leases.get_opt("hcp-ingress-controller").await.ok()??;
        (lease.spec?.holder_identity? == "replica-b").then_some(())
    })
    .await;
    apply_value(
        &m.client,
        cpi("after", json!({"className": "haproxy"}), json!({})),
    )
    .await;
    wait_route(&m.client, RouteKind::Ingress, "after").await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_restarted_at_steady_state_makes_no_writes() {
    let m = management(&[]).await;
    let running = m.start();
    for (name, route) in [
        ("s1", json!({"controller": "haproxy"})),
        ("s2", json!({"controller": "traefik"})),
        (
            "s3",
            json!({"controller": "gateway", "gateway": {"parentRefs": [{"name": "g"}]}}),
        ),
    ] {
        let cluster = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": name, "namespace": NS}, "spec": {"paused": false}});
        apply_value(&m.client, cluster).await;
        apply_value(&m.client, cpi(name, json!({}), route)).await;
    }
    gateway_accepts(&m.client, "s3").await;
    for name in ["s1", "s2", "s3"] {
        wait_condition(&m.client, name, "Ready", "True").await;
    }
    running.stop().await;

    m.api.clear_request_log();
    // The restarted controller serves its metrics: its own count of
    // reconciliations says when it has looked at every object.
    let (settings, metrics_addr) = with_metrics(Settings::for_tests());
    let running = m.start_with(settings);
    eventually("the restarted controller reconciled all three", || async {
        (reconciles(metrics_addr).await? >= 3).then_some(())
    })
    .await;
    let writes = writes(&m.api);
    assert!(
        writes.is_empty(),
        "steady state must need no writes, saw: {writes:#?}"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_control_plane_ingress_removes_what_it_created() {
    let m = management(&[]).await;
    apply_value(
        &m.client,
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "TLSRoute", "metadata": {"name": "bystander", "namespace": NS},
               "spec": {"parentRefs": [{"name": "g"}], "hostnames": ["x.example.com"], "rules": [{"backendRefs": [{"name": "s", "port": 1}]}]}}),
    )
    .await;
    let running = m.start();
    apply_value(
        &m.client,
        cpi(
            "gone",
            json!({}),
            json!({"controller": "gateway", "gateway": {"parentRefs": [{"name": "g"}]}}),
        ),
    )
    .await;
    wait_route(&m.client, RouteKind::TlsRoute, "gone-api").await;
    wait_route(&m.client, RouteKind::TlsRoute, "gone-konnectivity").await;
    cpis(&m.client)
        .delete("gone", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&m.client, RouteKind::TlsRoute, "gone-api").await;
    wait_gone(&m.client, RouteKind::TlsRoute, "gone-konnectivity").await;
    // Someone else's object of the same kind, in the same namespace, is untouched.
    assert!(
        routes(&m.client, RouteKind::TlsRoute)
            .get_opt("bystander")
            .await
            .unwrap()
            .is_some()
    );
    running.stop().await;
}

/// A standby judges expiry from when it saw the record change, on its own
/// monotonic clock, as client-go does; never from the holder's `renewTime`.
/// The holder here is the test, writing with a clock far behind, then far
/// ahead: while it renews, the standby must not take over (with `renewTime`
/// against the local clock it took over at once when behind); once it stops,
/// the standby takes over, and not before a lease duration of its own time
/// (with `renewTime` it never did when ahead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_with_skewed_clocks_goes_by_local_observation() {
    let m = management_in_memory(&[]).await;
    let leases: Api<Lease> = Api::namespaced(m.client.clone(), NS);
    let lease_duration = Duration::from_secs(2);
    let renew_every = Duration::from_millis(200);
    for (skew, holder_clock) in [
        ("behind", "2001-01-01T00:00:00Z"),
        ("ahead", "2999-01-01T00:00:00Z"),
    ] {
        let name = format!("skewed-{skew}");
        let mut holder_now: Timestamp = holder_clock.parse().unwrap();
        leases
            .create(
                &PostParams::default(),
                &Lease {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some("replica-a".into()),
                        lease_duration_seconds: Some(lease_duration.as_secs() as i32),
                        acquire_time: Some(MicroTime(holder_now)),
                        renew_time: Some(MicroTime(holder_now)),
                        ..LeaseSpec::default()
                    }),
                },
            )
            .await
            .unwrap();
        let token = CancellationToken::new();
        let (standby, task) = campaign(
            m.client.clone(),
            LeaseConfig {
                name: name.clone(),
                namespace: NS.into(),
                identity: "replica-b".into(),
                lease_duration,
                renew_deadline: Duration::from_millis(1500),
                retry_period: Duration::from_millis(100),
            },
            token.clone(),
        );

        // The holder renews for three lease durations, its clock skewed.
        let renewing_until = tokio::time::Instant::now() + lease_duration * 3;
        let mut renewals = 0;
        while tokio::time::Instant::now() < renewing_until {
            tokio::time::sleep(renew_every).await;
            let mut lease = leases.get(&name).await.unwrap();
            let spec = lease.spec.as_mut().unwrap();
            assert_eq!(
                spec.holder_identity.as_deref(),
                Some("replica-a"),
                "the standby took over a lease renewed {renewals} times by a holder whose clock is {skew}"
            );
            assert!(
                !standby.is_leader(),
                "the standby believes it leads ({skew})"
            );
            holder_now = holder_now
                .checked_add(SignedDuration::try_from(renew_every).unwrap())
                .unwrap();
            spec.renew_time = Some(MicroTime(holder_now));
            // Carries the resourceVersion read: a takeover in between is a 409 here.
            leases
                .replace(&name, &PostParams::default(), &lease)
                .await
                .unwrap_or_else(|e| {
                    panic!("the holder could not renew (clock {skew}), the standby wrote: {e}")
                });
            renewals += 1;
        }

        // The holder stops: the standby takes over after a lease duration of
        // its own time since it saw the last renewal, which came after `stopped`.
        let stopped = tokio::time::Instant::now();
        tokio::time::timeout(lease_duration * 5, standby.acquired())
            .await
            .unwrap_or_else(|_| {
                panic!("the standby never took over from a holder that stopped (clock {skew})")
            });
        let waited = stopped.elapsed();
        assert!(
            waited >= lease_duration,
            "the standby took over {waited:?} after the last renewal, before a lease duration ({skew})"
        );
        let holder = leases
            .get(&name)
            .await
            .unwrap()
            .spec
            .unwrap()
            .holder_identity;
        assert_eq!(holder.as_deref(), Some("replica-b"));
        token.cancel();
        task.await.unwrap();
    }
}

/// A conflict on renewal (here injected; in life, a write whose reply was
/// lost) is a failed renewal, retried until the renew deadline: the leader
/// keeps its watches instead of stopping and listing everything again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_conflict_does_not_cost_the_leader_its_leadership() {
    let m = management_in_memory(&[]).await;
    let mut settings = Settings::for_tests();
    settings.lease = Some(LeaseConfig {
        name: "hcp-ingress-controller".into(),
        namespace: NS.into(),
        identity: "replica-a".into(),
        lease_duration: Duration::from_secs(6),
        renew_deadline: Duration::from_secs(4),
        retry_period: Duration::from_millis(100),
    });
    let running = m.start_with(settings);
    apply_value(
        &m.client,
        cpi("steady", json!({"className": "haproxy"}), json!({})),
    )
    .await;
    wait_condition(&m.client, "steady", "RouteReady", "True").await;
    let cpi_lists = |api: &Server| {
        api.request_log()
            .iter()
            .filter(|r| r.verb == "list" && r.path.contains("controlplaneingresses"))
            .count()
    };
    let lists_before = cpi_lists(&m.api);
    let renewals_before = m
        .api
        .request_log()
        .iter()
        .filter(|r| r.verb == "update" && r.path.contains("/leases/"))
        .count();

    m.api
        .mem()
        .fail_next(3, RequestMatch::new("update", "/leases/"), 409);
    // Well past the three failed renewals, well within the renew deadline.
    eventually("three more renewals", || async {
        let renewals = m
            .api
            .request_log()
            .iter()
            .filter(|r| r.verb == "update" && r.path.contains("/leases/"))
            .count();
        (renewals >= renewals_before + 5).then_some(())
    })
    .await;
    assert_eq!(
        cpi_lists(&m.api),
        lists_before,
        "the controller restarted its watches: it gave up leadership on a renewal conflict"
    );
    running.stop().await;
}

/// A discovery that fails (not a 404) is looked at again after `retry`: the
/// route kind is not taken for missing until the next full rediscovery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_discovery_is_retried_soon_not_taken_for_a_missing_kind() {
    let m = management_in_memory(&[]).await;
    m.api
        .mem()
        .fail_next(2, RequestMatch::new("discovery", "networking.k8s.io"), 500);
    let (settings, metrics) = with_metrics(Settings::for_tests());
    let running = m.start_with(settings);
    apply_value(
        &m.client,
        cpi("discovered", json!({"className": "haproxy"}), json!({})),
    )
    .await;
    // `retry` is 2 s in tests, `rediscover` 60 s.
    tokio::time::timeout(
        Duration::from_secs(20),
        wait_route(&m.client, RouteKind::Ingress, "discovered"),
    )
    .await
    .expect("the Ingress within 20 s: discovery was repeated after `retry`, not `rediscover`");
    let failed = m
        .api
        .request_log()
        .iter()
        .filter(|r| {
            r.verb == "discovery" && r.path.contains("networking.k8s.io") && r.status == 500
        })
        .count();
    assert_eq!(failed, 2, "the injected discovery failures were served");

    // A failure in a later discovery (here triggered by a CRD change) is not
    // a removed kind: the watches keep running, nothing is listed again.
    let cpi_lists = || {
        m.api
            .request_log()
            .iter()
            .filter(|r| r.verb == "list" && r.path.contains("controlplaneingresses"))
            .count()
    };
    let lists_before = cpi_lists();
    let discoveries_before = m.api.request_log().len();
    m.api
        .mem()
        .fail_next(3, RequestMatch::new("discovery", "networking.k8s.io"), 500);
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(m.client.clone());
    crds.patch(
        "ingressroutetcps.traefik.io",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
    )
    .await
    .unwrap();
    // The failed rounds (one every `retry`) end in one that answers: a
    // restart would have come right after a failed round, before that one.
    let networking =
        |r: &memkube::RequestRecord| r.verb == "discovery" && r.path.contains("networking.k8s.io");
    eventually("the failed discoveries, then one that answers", || async {
        let log = m.api.request_log();
        let after = &log[discoveries_before..];
        let failed: Vec<usize> = (0..after.len())
            .filter(|&i| networking(&after[i]) && after[i].status == 500)
            .collect();
        let last = *failed.last()?;
        (failed.len() == 3
            && after[last..]
                .iter()
                .any(|r| networking(r) && r.status == 200))
        .then_some(())
    })
    .await;
    // And the watches kept serving: a change to the ControlPlaneIngress is
    // reconciled (after a restart only once the caches were listed again).
    let done = reconciles(metrics).await.expect("metrics answer");
    cpis(&m.client)
        .patch(
            "discovered",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {"touch": "1"}}})),
        )
        .await
        .unwrap();
    eventually("the touched ControlPlaneIngress reconciled", || async {
        (reconciles(metrics).await? > done).then_some(())
    })
    .await;
    assert_eq!(
        cpi_lists(),
        lists_before,
        "a failed discovery restarted the watches as if Ingress had been removed"
    );
    running.stop().await;
}
