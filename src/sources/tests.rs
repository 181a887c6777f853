//! The adapters against the upstreams' own documented objects.

use kube::api::DynamicObject;
use serde_json::{Value, json};

use super::*;
use crate::{api::ControlPlaneIngress, render};

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap()
}

fn kamaji(annotations: Value, spec: Value) -> DynamicObject {
    object(json!({
        "apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "TenantControlPlane",
        "metadata": {"name": "tenant-00", "namespace": "tenant-ns", "uid": "u-k", "annotations": annotations},
        "spec": spec,
    }))
}

fn steward(spec: Value) -> DynamicObject {
    object(json!({
        "apiVersion": "steward.butlerlabs.dev/v1alpha1", "kind": "TenantControlPlane",
        "metadata": {"name": "tenant-01", "namespace": "tenants", "uid": "u-s"},
        "spec": spec,
    }))
}

fn ingress_of(cpi: &ControlPlaneIngress) -> Value {
    let objects = render::management(cpi).unwrap();
    assert_eq!(objects.len(), 1, "one route object");
    serde_json::to_value(&objects[0]).unwrap()
}

#[test]
fn kamaji_addon_annotation_renders_the_addons_ingress_field_for_field() {
    let tcp = kamaji(
        json!({"kamaji.clastix.io/ingress.domain": "clastix.cloud"}),
        json!({"networkProfile": {"port": 6443}, "addons": {"konnectivity": {"server": {"port": 8132}}}}),
    );
    let cpi = derive(&tcp).unwrap();
    assert_eq!(
        cpi.spec.ingress.api_host,
        "tenant-ns-tenant-00.k8s.clastix.cloud"
    );
    assert_eq!(
        cpi.spec.ingress.konnectivity_host.as_deref(),
        Some("tenant-ns-tenant-00.konnectivity.clastix.cloud")
    );
    let ingress = ingress_of(&cpi);
    assert_eq!(ingress["spec"]["ingressClassName"], "haproxy");
    assert_eq!(
        ingress["metadata"]["annotations"]["haproxy.org/ssl-passthrough"],
        "true"
    );
    assert_eq!(ingress["metadata"]["name"], "hcp-ingress-tenant-00");
    let rules = &ingress["spec"]["rules"];
    let backend = |i: usize| &rules[i]["http"]["paths"][0]["backend"]["service"];
    assert_eq!(rules[0]["host"], "tenant-ns-tenant-00.k8s.clastix.cloud");
    assert_eq!(backend(0)["name"], "tenant-00");
    assert_eq!(backend(0)["port"]["number"], 6443);
    assert_eq!(
        rules[1]["host"],
        "tenant-ns-tenant-00.konnectivity.clastix.cloud"
    );
    assert_eq!(backend(1)["port"]["number"], 8132);
    // Standalone (no CAPI control plane): Kamaji's admin kubeconfig.
    let secret = cpi.spec.kubeconfig_secret.unwrap();
    assert_eq!(
        (secret.name.as_str(), secret.key.as_str()),
        ("tenant-00-admin-kubeconfig", "admin.conf")
    );
}

#[test]
fn kamaji_konnectivity_rule_only_with_the_addon_and_on_its_port() {
    let without = derive(&kamaji(
        json!({"kamaji.clastix.io/ingress.domain": "example.com"}),
        json!({"networkProfile": {"port": 6443}}),
    ))
    .unwrap();
    assert_eq!(without.spec.ingress.konnectivity_host, None);
    assert_eq!(
        ingress_of(&without)["spec"]["rules"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let custom = derive(&kamaji(
        json!({"kamaji.clastix.io/ingress.domain": "example.com"}),
        json!({"networkProfile": {"port": 8443}, "addons": {"konnectivity": {"server": {"port": 9132}}}}),
    ))
    .unwrap();
    assert_eq!(custom.spec.backend.api_port, 8443);
    assert_eq!(custom.spec.backend.konnectivity_port, Some(9132));
    // Our flavor annotation may override the addon's HAProxy.
    let nginx = derive(&kamaji(
        json!({"kamaji.clastix.io/ingress.domain": "example.com", "hcp-ingress.dev/controller": "nginx", "hcp-ingress.dev/class-name": "nginx"}),
        json!({}),
    ))
    .unwrap();
    let ingress = ingress_of(&nginx);
    assert_eq!(
        ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/backend-protocol"],
        "HTTPS"
    );
}

#[test]
fn kamaji_own_ingress_in_a_served_class_keeps_the_api_host() {
    let unhandled = derive(&kamaji(
        json!({"kamaji.clastix.io/ingress.domain": "example.com"}),
        json!({"controlPlane": {"ingress": {"ingressClassName": "unhandled", "hostname": "tenant-ns-tenant-00.k8s.example.com:443"}}}),
    ))
    .unwrap();
    assert!(
        render::upstream_route(&unhandled).is_none(),
        "an unhandled Ingress routes nothing"
    );
    let served = derive(&kamaji(
        json!({"kamaji.clastix.io/ingress.domain": "example.com"}),
        json!({"controlPlane": {"ingress": {"ingressClassName": "haproxy"}}, "addons": {"konnectivity": {}}}),
    ))
    .unwrap();
    assert_eq!(
        render::upstream_route(&served).unwrap().to_string(),
        "Ingress tenant-ns/tenant-00"
    );
    // Kamaji routes the API host only: we route the konnectivity host.
    let ingress = ingress_of(&served);
    let rules = ingress["spec"]["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0]["host"],
        "tenant-ns-tenant-00.konnectivity.example.com"
    );
}

#[test]
fn steward_ingress_mode_leaves_its_route_and_tcp_proxy_to_steward() {
    let cpi = derive(&steward(json!({
        "controlPlane": {"ingress": {"hostname": "tenant-01.k8s.example.com", "ingressClassName": "nginx", "controllerType": "nginx"}},
        "addons": {"konnectivity": {"server": {"port": 8132}}, "tcpProxy": {}},
        "networkProfile": {"port": 6443},
    })))
    .unwrap();
    assert_eq!(cpi.spec.ingress.api_host, "tenant-01.k8s.example.com");
    assert_eq!(
        cpi.spec.ingress.konnectivity_host.as_deref(),
        Some("tenant-01.konnectivity.example.com")
    );
    assert_eq!(cpi.spec.flavor(), crate::api::Flavor::Nginx);
    let upstream = cpi.spec.upstream.as_ref().unwrap();
    assert_eq!(
        upstream.route.as_ref().unwrap().to_string(),
        "Ingress tenants/tenant-01"
    );
    assert_eq!(
        upstream.node_proxy.as_ref().unwrap().to_string(),
        "Deployment kube-system/steward-tcp-proxy"
    );
    // Steward's Ingress has no konnectivity rule: ours has only that one, with nginx's settings.
    let ingress = ingress_of(&cpi);
    assert_eq!(
        ingress["spec"]["rules"][0]["host"],
        "tenant-01.konnectivity.example.com"
    );
    assert_eq!(
        ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/backend-protocol"],
        "HTTPS"
    );
    // Traefik: Steward's IngressRouteTCP has both; nothing is ours to route.
    let traefik = derive(&steward(json!({
        "controlPlane": {"ingress": {"hostname": "tenant-01.k8s.example.com", "controllerType": "traefik"}},
        "addons": {"konnectivity": {}},
    })))
    .unwrap();
    assert!(render::management(&traefik).unwrap().is_empty());
    // Without tcpProxy nobody else steers default/kubernetes: ours does.
    assert!(traefik.spec.upstream.unwrap().node_proxy.is_none());
    // controllerType defaults to generic.
    let generic = derive(&steward(
        json!({"controlPlane": {"ingress": {"hostname": "t.k8s.example.com"}}}),
    ))
    .unwrap();
    assert_eq!(generic.spec.flavor(), crate::api::Flavor::Generic);
    let bad = derive(&steward(
        json!({"controlPlane": {"ingress": {"hostname": "t.example.com", "controllerType": "envoy"}}}),
    ));
    let message = bad.unwrap_err().to_string();
    assert!(
        message.contains("spec.controlPlane.ingress.controllerType"),
        "{message}"
    );
}

#[test]
fn k0smotron_keeps_its_ingress_and_haproxy_and_deploy_false_leaves_the_route_to_us() {
    let kcp = |deploy: Option<bool>| {
        let mut ingress = json!({"apiHost": "api.t.example.com", "konnectivityHost": "konn.t.example.com", "className": "haproxy"});
        if let Some(deploy) = deploy {
            ingress["deploy"] = json!(deploy);
        }
        object(json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "K0smotronControlPlane",
            "metadata": {"name": "t-cp", "namespace": "ns", "uid": "u", "labels": {"cluster.x-k8s.io/cluster-name": "t"}},
            "spec": {"ingress": ingress},
        }))
    };
    let cpi = derive(&kcp(None)).unwrap();
    // k0smotron names everything after the CAPI Cluster.
    assert_eq!(cpi.spec.backend.service_name, "kmc-t");
    let upstream = cpi.spec.upstream.as_ref().unwrap();
    assert_eq!(
        upstream.route.as_ref().unwrap().to_string(),
        "Ingress ns/kmc-t"
    );
    assert_eq!(
        upstream.node_proxy.as_ref().unwrap().to_string(),
        "DaemonSet default/k0smotron-haproxy"
    );
    assert!(
        render::management(&cpi).unwrap().is_empty(),
        "no second Ingress"
    );
    let told_not_to = derive(&kcp(Some(false))).unwrap();
    assert_eq!(
        ingress_of(&told_not_to)["spec"]["rules"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert!(
        told_not_to.spec.upstream.unwrap().node_proxy.is_some(),
        "k0smotron ships its HAProxy anyway"
    );
}

#[test]
fn the_take_over_annotation_asks_for_our_node_proxy_in_place_of_k0smotrons() {
    let kcp = |annotation: &str| {
        object(json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "K0smotronControlPlane",
            "metadata": {"name": "t-cp", "namespace": "ns", "uid": "u", "labels": {"cluster.x-k8s.io/cluster-name": "t"},
                         "annotations": {"hcp-ingress.dev/take-over": annotation}},
            "spec": {"ingress": {"apiHost": "api.t.example.com", "konnectivityHost": "konn.t.example.com"}},
        }))
    };
    let cpi = derive(&kcp("node-proxy")).unwrap();
    let upstream = cpi.spec.upstream.as_ref().unwrap();
    assert!(upstream.take_over_node_proxy);
    assert_eq!(upstream.kept_node_proxy(), None, "ours replaces it");
    let err = derive(&kcp("yes")).unwrap_err().to_string();
    assert!(
        err.contains("metadata.annotations[hcp-ingress.dev/take-over]")
            && err.contains("node-proxy"),
        "{err}"
    );
}

#[test]
fn a_minimal_cluster_deployment_gets_the_hosted_cp_template_defaults() {
    let cd = object(json!({
        "apiVersion": "k0rdent.mirantis.com/v1beta1", "kind": "ClusterDeployment",
        "metadata": {"name": "t", "namespace": "kcm-system", "uid": "u"},
        "spec": {"template": "aws-hosted-cp", "config": {"ingress": {"enabled": true, "apiHost": "api.t.example.com", "konnectivityHost": "konn.t.example.com"}}},
    }));
    let cpi = derive(&cd).unwrap();
    assert_eq!(cpi.spec.ingress.class_name.as_deref(), Some("haproxy"));
    assert_eq!(
        cpi.spec.ingress.annotations["haproxy.org/ssl-passthrough"],
        "true"
    );
    assert_eq!(cpi.spec.backend.service_name, "kmc-t-lb");
    assert_eq!(cpi.spec.upstream.unwrap().route.unwrap().name, "kmc-t");
}

#[test]
fn one_control_plane_ingress_per_cluster_by_precedence() {
    let derived = |kind: &str, api_version: &str, created: &str| -> ControlPlaneIngress {
        serde_json::from_value(json!({
            "apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
            "metadata": {"name": format!("x-{kind}"), "namespace": "ns", "creationTimestamp": created,
                         "labels": {"app.kubernetes.io/managed-by": "hcp-ingress"},
                         "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": "x", "uid": kind, "controller": true}]},
            "spec": {"clusterName": "t", "ingress": {"apiHost": "a.example.com"}, "backend": {"serviceName": "s", "apiPort": 1}}
        }))
        .unwrap()
    };
    let cd = derived(
        "ClusterDeployment",
        "k0rdent.mirantis.com/v1beta1",
        "2026-01-01T00:00:00Z",
    );
    let kcp = derived(
        "K0smotronControlPlane",
        "controlplane.cluster.x-k8s.io/v1beta2",
        "2026-01-01T00:00:00Z",
    );
    assert!(yields_to(
        SourceKind::K0smotronControlPlane,
        &cd,
        Some(&kcp)
    ));
    assert!(!yields_to(SourceKind::ClusterDeployment, &kcp, Some(&cd)));
    let mut user = kcp.clone();
    user.metadata.labels = None;
    assert!(
        yields_to(SourceKind::ClusterDeployment, &user, None),
        "a user's own wins"
    );
    let older = derived(
        "TenantControlPlane",
        "kamaji.clastix.io/v1alpha1",
        "2026-01-01T00:00:00Z",
    );
    let newer = derived(
        "TenantControlPlane",
        "steward.butlerlabs.dev/v1alpha1",
        "2026-02-01T00:00:00Z",
    );
    assert!(yields_to(
        SourceKind::StewardTenantControlPlane,
        &older,
        Some(&newer)
    ));
    assert!(!yields_to(
        SourceKind::KamajiTenantControlPlane,
        &newer,
        Some(&older)
    ));
}

#[test]
fn preflight_names_each_missing_setting_of_a_tenant_control_plane() {
    let tcp = kamaji(
        json!({"kamaji.clastix.io/ingress.domain": "example.com"}),
        json!({"controlPlane": {"ingress": {"ingressClassName": "unhandled", "hostname": "tenant-ns-tenant-00.k8s.example.com"}},
               "networkProfile": {"certSANs": ["tenant-ns-tenant-00.k8s.example.com"]},
               "addons": {"konnectivity": {"agent": {"extraArgs": ["--proxy-server-port=443"]}}}}),
    );
    let cpi = derive(&tcp).unwrap();
    let missing = preflight::preflight(SourceKind::KamajiTenantControlPlane, &tcp, &cpi);
    let fields: Vec<&str> = missing.iter().map(|m| m.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.networkProfile.certSANs",
            "spec.controlPlane.ingress.hostname",
            "spec.controlPlane.deployment.extraArgs.apiServer",
            "spec.addons.konnectivity.agent.extraArgs",
        ]
    );
    assert!(
        missing[0]
            .message
            .contains("tenant-ns-tenant-00.konnectivity.example.com")
    );
    assert!(
        missing[1]
            .message
            .contains("\"tenant-ns-tenant-00.k8s.example.com:443\"")
    );
    assert!(
        missing[3]
            .message
            .contains("--proxy-server-host=tenant-ns-tenant-00.konnectivity.example.com")
    );
    assert!(
        !missing[3].message.contains("--proxy-server-port"),
        "{}",
        missing[3].message
    );
    let fixed = kamaji(
        json!({"kamaji.clastix.io/ingress.domain": "example.com"}),
        json!({"controlPlane": {"ingress": {"ingressClassName": "unhandled", "hostname": "tenant-ns-tenant-00.k8s.example.com:443"},
                                "deployment": {"extraArgs": {"apiServer": ["--endpoint-reconciler-type=none"]}}},
               "networkProfile": {"certSANs": ["tenant-ns-tenant-00.k8s.example.com", "tenant-ns-tenant-00.konnectivity.example.com"]},
               "addons": {"konnectivity": {"agent": {"extraArgs": ["--proxy-server-host=tenant-ns-tenant-00.konnectivity.example.com", "--proxy-server-port=443"]}}}}),
    );
    let cpi = derive(&fixed).unwrap();
    assert!(preflight::preflight(SourceKind::KamajiTenantControlPlane, &fixed, &cpi).is_empty());
}

#[test]
fn a_field_that_does_not_fit_its_upstream_type_is_named() {
    let malformed = |obj: DynamicObject| match derive(&obj) {
        Err(SourceError::Malformed { object, field, .. }) => format!("{object}: {field}"),
        other => panic!("not a malformed error: {other:?}"),
    };
    assert_eq!(
        malformed(kamaji(
            json!({"kamaji.clastix.io/ingress.domain": "example.com"}),
            json!({"networkProfile": {"certSANs": "api.example.com"}}),
        )),
        "TenantControlPlane tenant-ns/tenant-00: spec.networkProfile.certSANs"
    );
    assert_eq!(
        malformed(steward(
            json!({"controlPlane": {"ingress": {"hostname": 443}}})
        )),
        "TenantControlPlane tenants/tenant-01: spec.controlPlane.ingress.hostname"
    );
    assert_eq!(
        malformed(object(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c", "namespace": "ns", "annotations": {"hcp-ingress.dev/domain": "example.com"}},
            "spec": {"controlPlaneRef": {"name": 7}},
        }))),
        "Cluster ns/c: spec.controlPlaneRef.name"
    );
}

#[test]
fn a_capi_cluster_is_read_in_the_version_it_is_served_in() {
    use crate::api::upstream::CapiCluster;
    let cluster = |api_version: &str, status: Value| {
        CapiCluster::read(&object(json!({
            "apiVersion": api_version, "kind": "Cluster",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"paused": true, "controlPlaneRef": {"name": "c-cp"},
                "clusterNetwork": {"serviceDomain": "corp.local"}},
            "status": status,
        })))
        .unwrap()
    };
    let v1beta2 = cluster(
        "cluster.x-k8s.io/v1beta2",
        json!({"initialization": {"controlPlaneInitialized": true}}),
    );
    assert_eq!(
        v1beta2,
        CapiCluster {
            control_plane_ref: Some("c-cp".into()),
            paused: true,
            service_domain: Some("corp.local".into()),
            control_plane_initialized: true,
        }
    );
    let v1beta1 = cluster(
        "cluster.x-k8s.io/v1beta1",
        json!({"controlPlaneReady": false, "conditions": [{"type": "ControlPlaneInitialized", "status": "True"}]}),
    );
    assert!(
        !v1beta1.control_plane_initialized,
        "controlPlaneReady first"
    );
    assert_eq!(v1beta1.control_plane_ref.as_deref(), Some("c-cp"));
    let by_condition = cluster(
        "cluster.x-k8s.io/v1beta2",
        json!({"conditions": [{"type": "ControlPlaneInitialized", "status": "True"}]}),
    );
    assert!(by_condition.control_plane_initialized);
    // The controller reads leniently: a status that does not fit reads as absent.
    let odd = object(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"paused": true}, "status": {"initialization": "yes"},
    }));
    assert!(CapiCluster::read(&odd).is_err());
    let lenient = CapiCluster::lenient(&odd);
    assert!(lenient.paused && !lenient.control_plane_initialized);
}

/// A derived ControlPlaneIngress takes the shard labels its source has (the
/// keys the watch filter names), and no other.
#[test]
fn shard_labels_are_the_named_ones_the_source_carries() {
    let source: std::collections::BTreeMap<String, String> = [
        ("cluster.x-k8s.io/watch-filter", "a"),
        ("cluster.x-k8s.io/cluster-name", "t"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let keys = [
        "cluster.x-k8s.io/watch-filter".to_string(),
        "tier".to_string(),
    ];
    let labels = super::shard_labels(&keys, &source);
    assert_eq!(
        labels.into_iter().collect::<Vec<_>>(),
        [("cluster.x-k8s.io/watch-filter".to_string(), "a".to_string())]
    );
    assert!(super::shard_labels(&[], &source).is_empty());
}
