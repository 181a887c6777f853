//! The upstreams' own documented objects, applied as is on a real API server
//! next to what each upstream creates itself: one ControlPlaneIngress per
//! cluster, one route per host, one owner of `default/kubernetes`.

use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment},
    core::v1::Service,
    networking::v1::Ingress,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};

use hcp_ingress::render::RouteKind;

use crate::{
    harness::*,
    workload::{CA_CRT, CA_KEY, initialized_cluster, put_secret, workload_cluster},
};

fn strip_uid(text: &str) -> Value {
    let mut value: Value = serde_saphyr::from_str(text).unwrap();
    value["metadata"].as_object_mut().unwrap().remove("uid");
    value
}

/// A controller reference to `owner`, as the upstream's controller-runtime sets it.
fn controlled_by(owner: &kube::api::DynamicObject) -> Value {
    let types = owner.types.clone().unwrap();
    json!([{"apiVersion": types.api_version, "kind": types.kind, "name": owner.name_any(),
            "uid": owner.uid().unwrap(), "controller": true, "blockOwnerDeletion": true}])
}

/// An Ingress as an upstream writes it: one rule per host to `service`.
fn upstream_ingress(
    name: &str,
    class: &str,
    hosts: &[(&str, i32)],
    service: &str,
    owners: Value,
) -> Value {
    let rules: Vec<Value> = hosts
        .iter()
        .map(|(host, port)| {
            json!({"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": service, "port": {"number": port}}}}]}})
        })
        .collect();
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
           "metadata": {"name": name, "namespace": NS, "ownerReferences": owners},
           "spec": {"ingressClassName": class, "rules": rules}})
}

/// Every Ingress in the namespace that routes `host` in `class`.
async fn ingresses_for(client: &kube::Client, host: &str, class: &str) -> Vec<String> {
    let all = Api::<Ingress>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap();
    all.items
        .into_iter()
        .filter(|i| {
            let spec = i.spec.as_ref().unwrap();
            spec.ingress_class_name.as_deref() == Some(class)
                && spec
                    .rules
                    .iter()
                    .flatten()
                    .any(|r| r.host.as_deref() == Some(host))
        })
        .map(|i| i.name_any())
        .collect()
}

/// The kubeconfig Secret (name, key) and `<cluster>-ca` in the management
/// cluster, the controller started, then the example applied as a user would.
async fn connect_and_start(
    m: &Management,
    w: &Server,
    (secret, key): (&str, &str),
    cluster: &str,
    example_file: &str,
) -> Running {
    put_secret(&m.client, secret, [(key, w.kubeconfig_yaml())]).await;
    let ca = [
        ("tls.crt", CA_CRT.to_string()),
        ("tls.key", CA_KEY.to_string()),
    ];
    put_secret(&m.client, &format!("{cluster}-ca"), ca).await;
    let running = m.start();
    apply_value(&m.client, strip_uid(&example(example_file))).await;
    running
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_upstreams_example_ends_with_one_control_plane_ingress_and_one_route_per_host() {
    let m = management(&[]).await;
    let running = m.start();

    // k0smotron: the K0smotronControlPlane of its ingress guide, the
    // k0smotron Cluster it creates (named after the CAPI Cluster, same
    // `spec.ingress`) and that Cluster's own Ingress `kmc-tenant-01`.
    let kcp = apply_value(
        &m.client,
        strip_uid(&example("k0smotron-controlplane.yaml")),
    )
    .await;
    let made_by_kcp = |kcp: &kube::api::DynamicObject| {
        json!([{"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "K0smotronControlPlane",
                "name": kcp.name_any(), "uid": kcp.uid().unwrap()}])
    };
    let kcp_ingress = json!({"apiHost": "api.tenant-01.example.com", "konnectivityHost": "konnectivity.tenant-01.example.com",
        "className": "haproxy", "annotations": {"haproxy.org/ssl-passthrough": "true"}, "port": 443});
    let kmc = apply_as(&m.client, json!({"apiVersion": "k0smotron.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "tenant-01", "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": "tenant-01"},
                     "ownerReferences": made_by_kcp(&kcp)},
        "spec": {"ingress": kcp_ingress}}), "k0smotron").await;
    apply_as(
        &m.client,
        upstream_ingress(
            "kmc-tenant-01",
            "haproxy",
            &[
                ("api.tenant-01.example.com", 30443),
                ("konnectivity.tenant-01.example.com", 30132),
            ],
            "kmc-tenant-01",
            controlled_by(&kmc),
        ),
        "k0smotron",
    )
    .await;

    // k0rdent: a hosted-cp ClusterDeployment and the K0smotronControlPlane
    // `<name>-cp` its template renders in the same namespace.
    let mut cd = strip_uid(&example("k0rdent-clusterdeployment.yaml"));
    cd["metadata"]["namespace"] = json!(NS);
    apply_value(&m.client, cd).await;
    let kcp = apply_as(&m.client, json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "K0smotronControlPlane",
        "metadata": {"name": "tenant-03-cp", "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": "tenant-03"}},
        "spec": {"version": "v1.33.4-k0s.0", "service": {"type": "LoadBalancer", "apiPort": 6443, "konnectivityPort": 8132},
                 "ingress": {"apiHost": "api.tenant-03.example.com", "konnectivityHost": "konnectivity.tenant-03.example.com",
                             "className": "haproxy-ingress", "port": 443}}}), "helm").await;
    // ...which makes its k0smotron Cluster, named after the CAPI Cluster, and that one its Ingress.
    let kmc = apply_as(&m.client, json!({"apiVersion": "k0smotron.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "tenant-03", "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": "tenant-03"},
                     "ownerReferences": made_by_kcp(&kcp)},
        "spec": {"service": {"type": "LoadBalancer", "apiPort": 6443, "konnectivityPort": 8132},
                 "ingress": {"apiHost": "api.tenant-03.example.com", "konnectivityHost": "konnectivity.tenant-03.example.com",
                             "className": "haproxy-ingress", "port": 443}}}), "k0smotron").await;
    apply_as(
        &m.client,
        upstream_ingress(
            "kmc-tenant-03",
            "haproxy-ingress",
            &[
                ("api.tenant-03.example.com", 6443),
                ("konnectivity.tenant-03.example.com", 8132),
            ],
            "kmc-tenant-03-lb",
            controlled_by(&kmc),
        ),
        "k0smotron",
    )
    .await;

    // Kamaji: the TenantControlPlane with the addon's key, and Kamaji's own
    // Ingress for it in class `unhandled`, as the addon doc has it.
    let tcp = apply_value(
        &m.client,
        strip_uid(&example("kamaji-tenantcontrolplane.yaml")),
    )
    .await;
    apply_as(
        &m.client,
        upstream_ingress(
            "tenant-05",
            "unhandled",
            &[("tenants-tenant-05.k8s.hcp.example.com", 6443)],
            "tenant-05",
            controlled_by(&tcp),
        ),
        "kamaji",
    )
    .await;

    // Steward: ingress mode, and the Ingress Steward creates for the API host.
    let steward = apply_value(
        &m.client,
        strip_uid(&example("steward-tenantcontrolplane.yaml")),
    )
    .await;
    apply_as(
        &m.client,
        upstream_ingress(
            "tenant-06",
            "haproxy",
            &[("tenant-06.k8s.example.com", 6443)],
            "tenant-06",
            controlled_by(&steward),
        ),
        "steward",
    )
    .await;
    // Steward with Traefik: its IngressRouteTCP routes both hosts (and claims
    // kubernetes.default.svc by SNI, which we never do).
    let mut traefik: Value =
        serde_saphyr::from_str(&example("steward-tenantcontrolplane.yaml")).unwrap();
    traefik["metadata"] = json!({"name": "tenant-07", "namespace": NS});
    traefik["spec"]["controlPlane"]["ingress"] =
        json!({"hostname": "tenant-07.k8s.example.com", "controllerType": "traefik"});
    let steward = apply_value(&m.client, traefik).await;
    let sni = "HostSNI(`tenant-07.k8s.example.com`) || HostSNI(`kubernetes`) || HostSNI(`kubernetes.default`) || HostSNI(`kubernetes.default.svc`)";
    apply_as(&m.client, json!({"apiVersion": "traefik.io/v1alpha1", "kind": "IngressRouteTCP",
        "metadata": {"name": "tenant-07", "namespace": NS, "ownerReferences": controlled_by(&steward)},
        "spec": {"entryPoints": ["websecure"], "tls": {"passthrough": true}, "routes": [
            {"match": sni, "services": [{"name": "tenant-07", "port": 6443}]},
            {"match": "HostSNI(`tenant-07.konnectivity.example.com`)", "services": [{"name": "tenant-07", "port": 8132}]}]}}),
        "steward").await;

    // One ControlPlaneIngress per cluster, derived from the source that says most.
    for (cluster, name, reason) in [
        ("tenant-01", "tenant-01-cp", "ManagedByUpstream"),
        ("tenant-03", "tenant-03", "ManagedByUpstream"),
        ("tenant-05", "tenant-05", "Applied"),
        ("tenant-06", "tenant-06", "ManagedByUpstream"),
        ("tenant-07", "tenant-07", "ManagedByUpstream"),
    ] {
        let (got, message) = wait_condition(&m.client, name, "RouteReady", "True").await;
        assert_eq!(got, reason, "{cluster}: {message}");
        let for_cluster: Vec<String> = cpis(&m.client)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|c| c.spec.cluster_name == cluster)
            .map(|c| c.name_any())
            .collect();
        assert_eq!(for_cluster, [name], "one ControlPlaneIngress for {cluster}");
    }
    // The k0rdent template's K0smotronControlPlane got an Event saying why it yields.
    wait_event_on(&m.client, "ClusterDescribedElsewhere", Some("tenant-03-cp")).await;

    // One route per host in each ingress class.
    for (host, class, owner) in [
        ("api.tenant-01.example.com", "haproxy", "kmc-tenant-01"),
        (
            "konnectivity.tenant-01.example.com",
            "haproxy",
            "kmc-tenant-01",
        ),
        (
            "api.tenant-03.example.com",
            "haproxy-ingress",
            "kmc-tenant-03",
        ),
        (
            "tenants-tenant-05.k8s.hcp.example.com",
            "haproxy",
            "hcp-ingress-tenant-05",
        ),
        (
            "tenants-tenant-05.konnectivity.hcp.example.com",
            "haproxy",
            "hcp-ingress-tenant-05",
        ),
        ("tenant-06.k8s.example.com", "haproxy", "tenant-06"),
        (
            "tenant-06.konnectivity.example.com",
            "haproxy",
            "hcp-ingress-tenant-06",
        ),
    ] {
        assert_eq!(
            ingresses_for(&m.client, host, class).await,
            [owner],
            "{host}"
        );
    }
    let traefik_routes: Vec<String> = routes(&m.client, RouteKind::IngressRouteTcp)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|r| r.name_any())
        .collect();
    assert_eq!(
        traefik_routes,
        ["tenant-07"],
        "Steward's IngressRouteTCP and no second one"
    );
    // The Kamaji example has everything the path needs; the addon's Ingress field for field.
    let (reason, message) = wait_condition(&m.client, "tenant-05", "Preflight", "True").await;
    assert_eq!(reason, "Passed", "{message}");
    let ours = Api::<Ingress>::namespaced(m.client.clone(), NS)
        .get("hcp-ingress-tenant-05")
        .await
        .unwrap();
    assert_eq!(ours.annotations()["haproxy.org/ssl-passthrough"], "true");
    let rules = ours.spec.unwrap().rules.unwrap();
    let backends: Vec<(String, String, i32)> = rules
        .iter()
        .map(|r| {
            let service = r.http.as_ref().unwrap().paths[0]
                .backend
                .service
                .clone()
                .unwrap();
            (
                r.host.clone().unwrap(),
                service.name,
                service.port.unwrap().number.unwrap(),
            )
        })
        .collect();
    assert_eq!(
        backends,
        [
            (
                "tenants-tenant-05.k8s.hcp.example.com".into(),
                "tenant-05".into(),
                6443
            ),
            (
                "tenants-tenant-05.konnectivity.hcp.example.com".into(),
                "tenant-05".into(),
                8132
            ),
        ]
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_that_is_not_ours_is_a_conflict_never_a_second_route() {
    let m = management(&[]).await;
    let running = m.start();
    // Someone routes our API host in our class, by hand.
    apply_as(
        &m.client,
        upstream_ingress(
            "by-hand",
            "haproxy",
            &[("api.c.example.com", 443)],
            "somewhere",
            json!([]),
        ),
        "kubectl",
    )
    .await;
    apply_value(&m.client, json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
        "metadata": {"name": "c", "namespace": NS},
        "spec": {"clusterName": "c", "ingress": {"apiHost": "api.c.example.com", "className": "haproxy"}, "proxy": {"enabled": false},
                 "backend": {"serviceName": "kmc-c", "apiPort": 30443}}})).await;
    let (reason, message) = wait_condition(&m.client, "c", "RouteReady", "False").await;
    assert_eq!(reason, "RouteConflict");
    assert!(
        message.contains("Ingress tenants/by-hand")
            && message.contains("field manager \"kubectl\""),
        "{message}"
    );
    let ingresses = Api::<Ingress>::namespaced(m.client.clone(), NS);
    assert!(
        ingresses.get_opt("hcp-ingress-c").await.unwrap().is_none(),
        "no second route"
    );
    wait_event(&m.client, "RouteConflict").await;

    // The host is free, but an object that is not ours holds the route's name: it is left alone.
    apply_as(
        &m.client,
        upstream_ingress(
            "hcp-ingress-c",
            "other",
            &[("elsewhere.example.com", 443)],
            "keep-me",
            json!([]),
        ),
        "kubectl",
    )
    .await;
    ingresses
        .delete("by-hand", &DeleteParams::default())
        .await
        .unwrap();
    let (reason, message) = wait_condition(&m.client, "c", "RouteReady", "False").await;
    assert_eq!(reason, "RouteConflict", "{message}");
    eventually("the name-holder's conflict", || async {
        let cpi = cpis(&m.client).get("c").await.ok()?;
        let (_, _, message) = condition(&cpi, "RouteReady")?;
        message
            .contains("Ingress tenants/hcp-ingress-c exists")
            .then_some(())
    })
    .await;
    let kept = ingresses.get("hcp-ingress-c").await.unwrap();
    assert_eq!(
        kept.spec.unwrap().rules.unwrap()[0].host.as_deref(),
        Some("elsewhere.example.com")
    );

    // Gone: the route is ours to make.
    ingresses
        .delete("hcp-ingress-c", &DeleteParams::default())
        .await
        .unwrap();
    let (reason, _) = wait_condition(&m.client, "c", "RouteReady", "True").await;
    assert_eq!(reason, "Applied");
    let ours = eventually("our route", || async {
        ingresses.get_opt("hcp-ingress-c").await.ok()?
    })
    .await;
    assert_eq!(
        ours.spec.unwrap().rules.unwrap()[0].host.as_deref(),
        Some("api.c.example.com")
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_k0smotrons_haproxy_in_the_workload_cluster_we_add_only_the_ccm_override() {
    let m = management(&[]).await;
    let w = workload_cluster().await;
    let wc = w.client();
    // What k0s's manifest deployer applies from k0smotron's `kmc-tenant-01-ingress` stack.
    let stack = PatchParams::apply("k0s").force();
    let haproxy = json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "k0smotron-haproxy", "namespace": "default", "labels": {"app": "k0smotron-haproxy"}},
        "spec": {"selector": {"matchLabels": {"app": "k0smotron-haproxy"}}, "template": {"metadata": {"labels": {"app": "k0smotron-haproxy"}},
            "spec": {"hostNetwork": true, "containers": [{"name": "haproxy", "image": "haproxy:2.8", "ports": [{"containerPort": 7443, "name": "https"}]}]}}}});
    let daemon_sets: Api<DaemonSet> = Api::namespaced(wc.clone(), "default");
    daemon_sets
        .patch("k0smotron-haproxy", &stack, &Patch::Apply(&haproxy))
        .await
        .unwrap();
    daemon_sets
        .patch_status("k0smotron-haproxy", &PatchParams::default(), &Patch::Merge(json!({"status": {
            "desiredNumberScheduled": 2, "numberReady": 2, "currentNumberScheduled": 2, "numberMisscheduled": 0}})))
        .await
        .unwrap();
    let services: Api<Service> = Api::namespaced(wc.clone(), "default");
    services
        .patch("kubernetes", &stack, &Patch::Apply(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kubernetes", "namespace": "default"},
            "spec": {"selector": {"app": "k0smotron-haproxy"}, "internalTrafficPolicy": "Local",
                     "ports": [{"name": "https", "port": 443, "targetPort": 7443, "protocol": "TCP"}]}})))
        .await
        .unwrap();
    let before = services.get("kubernetes").await.unwrap();

    initialized_cluster(&m, "tenant-01").await;
    let running = connect_and_start(
        &m,
        &w,
        ("tenant-01-kubeconfig", "value"),
        "tenant-01",
        "k0smotron-controlplane.yaml",
    )
    .await;

    let (reason, message) = wait_condition(&m.client, "tenant-01-cp", "ProxyReady", "True").await;
    assert_eq!(reason, "ManagedByUpstream");
    assert!(
        message.contains("DaemonSet default/k0smotron-haproxy") && message.contains("2/2"),
        "{message}"
    );
    let (reason, _) = wait_condition(&m.client, "tenant-01-cp", "EndpointsSteered", "True").await;
    assert_eq!(reason, "ManagedByUpstream");
    wait_condition(&m.client, "tenant-01-cp", "CCMConfigured", "True").await;
    let ccm = Api::<Deployment>::namespaced(wc.clone(), "kube-system")
        .get("cloud-controller-manager")
        .await
        .unwrap();
    let env = ccm.spec.unwrap().template.spec.unwrap().containers[0]
        .env
        .clone()
        .unwrap();
    let host = env
        .iter()
        .find(|e| e.name == "KUBERNETES_SERVICE_HOST")
        .and_then(|e| e.value.clone());
    assert_eq!(host.as_deref(), Some("api.tenant-01.example.com"));

    // No second node proxy, and default/kubernetes is k0smotron's as it was.
    let ours: Api<DaemonSet> = Api::namespaced(wc.clone(), "kube-system");
    assert!(ours.get_opt("hcp-ingress-proxy").await.unwrap().is_none());
    let after = services.get("kubernetes").await.unwrap();
    assert_eq!(after.spec, before.spec);
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "not written at all"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_kamaji_tenant_gets_its_workload_side_through_the_admin_kubeconfig() {
    let m = management(&[]).await;
    let w = workload_cluster().await;
    // Kamaji writes these for a TenantControlPlane; no CAPI object exists.
    let running = connect_and_start(
        &m,
        &w,
        ("tenant-05-admin-kubeconfig", "admin.conf"),
        "tenant-05",
        "kamaji-tenantcontrolplane.yaml",
    )
    .await;
    let (reason, message) =
        wait_condition(&m.client, "tenant-05", "WorkloadReachable", "True").await;
    assert_eq!(reason, "Connected", "{message}");
    let wc = w.client();
    eventually("the node proxy in the tenant cluster", || async {
        Api::<DaemonSet>::namespaced(wc.clone(), "kube-system")
            .get_opt("hcp-ingress-proxy")
            .await
            .ok()?
    })
    .await;
    // The tenant's `kubernetes` EndpointSlice is steered to the node proxy's address.
    let (reason, message) =
        wait_condition(&m.client, "tenant-05", "EndpointsSteered", "True").await;
    assert_ne!(reason, "ManagedByUpstream", "{message}");
    let slice =
        Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::namespaced(wc.clone(), "default")
            .get("kubernetes")
            .await
            .unwrap();
    assert_eq!(slice.endpoints[0].addresses, ["240.0.0.1"]);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_stewards_tcp_proxy_in_the_tenant_we_add_only_the_ccm_override() {
    let m = management(&[]).await;
    let w = workload_cluster().await;
    let wc = w.client();
    // What Steward deploys into the tenant with `addons.tcpProxy`, and the
    // EndpointSlice its tcp-proxy keeps rewriting.
    let steward = PatchParams::apply("steward").force();
    let deployments: Api<Deployment> = Api::namespaced(wc.clone(), "kube-system");
    let tcp_proxy = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "steward-tcp-proxy", "namespace": "kube-system", "labels": {"steward.butlerlabs.dev/project": "steward"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "steward-tcp-proxy"}}, "template": {"metadata": {"labels": {"app": "steward-tcp-proxy"}},
            "spec": {"hostNetwork": true, "containers": [{"name": "tcp-proxy", "image": "ghcr.io/butlerdotdev/steward-tcp-proxy:v0.2.0"}]}}}});
    deployments
        .patch("steward-tcp-proxy", &steward, &Patch::Apply(&tcp_proxy))
        .await
        .unwrap();
    deployments
        .patch_status(
            "steward-tcp-proxy",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 2, "readyReplicas": 2}})),
        )
        .await
        .unwrap();
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(wc.clone(), "default");
    slices
        .patch("kubernetes", &steward, &Patch::Apply(json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "kubernetes", "endpointslice.kubernetes.io/managed-by": "steward-tcp-proxy"}},
            "addressType": "IPv4", "endpoints": [{"addresses": ["10.96.0.42"], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]})))
        .await
        .unwrap();
    let before = slices.get("kubernetes").await.unwrap();

    let running = connect_and_start(
        &m,
        &w,
        ("tenant-06-admin-kubeconfig", "admin.conf"),
        "tenant-06",
        "steward-tenantcontrolplane.yaml",
    )
    .await;
    let (reason, message) = wait_condition(&m.client, "tenant-06", "ProxyReady", "True").await;
    assert_eq!(reason, "ManagedByUpstream");
    assert!(
        message.contains("Deployment kube-system/steward-tcp-proxy") && message.contains("2/2"),
        "{message}"
    );
    wait_condition(&m.client, "tenant-06", "CCMConfigured", "True").await;
    let ccm = deployments.get("cloud-controller-manager").await.unwrap();
    let env = ccm.spec.unwrap().template.spec.unwrap().containers[0]
        .env
        .clone()
        .unwrap();
    assert!(
        env.iter().any(|e| e.name == "KUBERNETES_SERVICE_HOST"
            && e.value.as_deref() == Some("tenant-06.k8s.example.com")),
        "{env:?}"
    );
    let ours: Api<DaemonSet> = Api::namespaced(wc.clone(), "kube-system");
    assert!(ours.get_opt("hcp-ingress-proxy").await.unwrap().is_none());
    let after = slices.get("kubernetes").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "Steward's EndpointSlice is never written"
    );
    running.stop().await;
}
