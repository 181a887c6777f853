//! Unit tests of the patches to workloads that are not ours: the
//! cloud-controller-manager's `KUBERNETES_SERVICE_HOST/PORT`, the
//! konnectivity-agent's server address, what is left to another writer, and
//! how each is given back.

use super::*;

#[test]
fn ccm_targets_default_explicit_and_disabled() {
    let defaults = ccm_targets(&cpi(json!({}), json!({})));
    // Each well-known name as a Deployment and as a DaemonSet: installations
    // differ (one name, "cloud-controller-manager", is listed twice).
    assert_eq!(defaults.len(), 2 * (WELL_KNOWN_CCMS.len() - 1));
    for kind in [WorkloadKind::Deployment, WorkloadKind::DaemonSet] {
        assert!(
            defaults
                .iter()
                .any(|t| t.name == "openstack-cloud-controller-manager" && t.kind == kind),
            "openstack as a {kind:?}"
        );
    }
    assert!(
        defaults
            .iter()
            .all(|t| t.well_known && t.namespace == "kube-system" && t.containers.is_empty())
    );
    assert!(
        defaults
            .iter()
            .any(|t| t.name == "aws-cloud-controller-manager" && t.kind == WorkloadKind::DaemonSet)
    );

    let explicit = ccm_targets(&cpi(
        json!({}),
        json!({"targets": [{"kind": "Deployment", "name": "my-ccm", "containers": ["ccm"]},
                           {"kind": "DaemonSet", "name": "x", "namespace": "cloud"}]}),
    ));
    assert_eq!(
        explicit,
        [
            OverrideTarget {
                kind: WorkloadKind::Deployment,
                namespace: "kube-system".into(),
                name: "my-ccm".into(),
                containers: vec!["ccm".into()],
                well_known: false
            },
            OverrideTarget {
                kind: WorkloadKind::DaemonSet,
                namespace: "cloud".into(),
                name: "x".into(),
                containers: vec![],
                well_known: false
            },
        ]
    );
    assert!(ccm_targets(&cpi(json!({}), json!({"enabled": false}))).is_empty());
}

#[test]
fn ccm_patch_carries_only_the_two_env_vars() {
    let patch = ccm_patch(
        &cpi(json!({}), json!({})),
        WorkloadKind::DaemonSet,
        "kube-system",
        "aws-cloud-controller-manager",
        &["ccm".into(), "sidecar".into()],
    );
    let value = serde_json::to_value(&patch).unwrap();
    let env = json!([{"name": "KUBERNETES_SERVICE_HOST", "value": "api.tenant-01.example.com"}, {"name": "KUBERNETES_SERVICE_PORT", "value": "8443"}]);
    assert_eq!(
        value,
        json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "aws-cloud-controller-manager", "namespace": "kube-system"},
            "spec": {"template": {"spec": {"containers": [{"name": "ccm", "env": env}, {"name": "sidecar", "env": env}]}}},
        })
    );
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

#[test]
fn konnectivity_args_replace_both_spellings_and_keep_the_rest() {
    assert_eq!(
        konnectivity_agent_args(
            &args(&[
                "--logtostderr=true",
                "--proxy-server-host=10.0.0.1",
                "--ca-cert=/ca",
                "--proxy-server-port",
                "8132"
            ]),
            "konnectivity.t.example.com",
            443
        ),
        args(&[
            "--logtostderr=true",
            "--proxy-server-host=konnectivity.t.example.com",
            "--ca-cert=/ca",
            "--proxy-server-port=443"
        ])
    );
    assert_eq!(
        konnectivity_agent_args(&args(&["--agent-identifiers=x"]), "k.example.com", 8132),
        args(&[
            "--agent-identifiers=x",
            "--proxy-server-host=k.example.com",
            "--proxy-server-port=8132"
        ])
    );
    let c = cpi(json!({}), json!({}));
    assert_eq!(
        konnectivity_server(&c),
        Some(("konnectivity.tenant-01.example.com".into(), 8443))
    );
    let patch = serde_json::to_value(konnectivity_agent_patch(
        WorkloadKind::DaemonSet,
        "kube-system",
        "konnectivity-agent",
        "konnectivity-agent",
        &args(&["--a"]),
        &args(&["--before"]),
    ))
    .unwrap();
    assert_eq!(
        patch["spec"]["template"]["spec"]["containers"],
        json!([{"name": "konnectivity-agent", "args": ["--a"]}])
    );
    assert_eq!(
        patch["metadata"]["annotations"][ORIGINAL_ARGS_ANNOTATION],
        json!(r#"["--before"]"#)
    );
}

/// Giving a patched workload back: the recorded args are applied again (an
/// atomic list we own would otherwise be deleted); anything else is the bare
/// identity, so that server-side apply drops every field we set.
#[test]
fn release_restores_recorded_args_and_otherwise_drops_our_fields() {
    let live = |annotations: serde_json::Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "konnectivity-agent", "namespace": "kube-system", "annotations": annotations},
            "spec": {"template": {"spec": {"containers": [{"name": "agent", "args": ["--now"]}]}}},
        }))
        .unwrap()
    };
    let patched = live(json!({ORIGINAL_ARGS_ANNOTATION: r#"["--before","--x=1"]"#}));
    assert_eq!(
        original_args(&patched, &args(&["--now"])),
        args(&["--before", "--x=1"])
    );
    let release = serde_json::to_value(release_patch(WorkloadKind::DaemonSet, &patched)).unwrap();
    assert_eq!(
        release["spec"]["template"]["spec"]["containers"],
        json!([{"name": "agent", "args": ["--before", "--x=1"]}])
    );
    assert!(
        release["metadata"].get("annotations").is_none(),
        "the record goes with the release: {release}"
    );

    let ccm = live(json!({}));
    assert_eq!(original_args(&ccm, &args(&["--now"])), args(&["--now"]));
    let release = serde_json::to_value(release_patch(WorkloadKind::DaemonSet, &ccm)).unwrap();
    assert_eq!(
        release,
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
               "metadata": {"name": "konnectivity-agent", "namespace": "kube-system"}})
    );
}

#[test]
fn a_service_host_someone_else_set_is_left_to_them() {
    let workload = |managers: &[&str]| -> kube::api::DynamicObject {
        let managed: Vec<_> = managers
            .iter()
            .map(|m| serde_json::json!({"manager": m, "operation": "Apply"}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "openstack-cloud-controller-manager", "namespace": "kube-system", "managedFields": managed},
            "spec": {"template": {"spec": {"containers": [
                {"name": "occm", "env": [{"name": "KUBERNETES_SERVICE_HOST", "value": "api.t.example.com"}]},
                {"name": "sidecar"}]}}}
        }))
        .unwrap()
    };
    let helm = workload(&["helm"]);
    assert_eq!(
        super::foreign_service_host(&helm, "occm").as_deref(),
        Some("api.t.example.com")
    );
    assert_eq!(super::foreign_service_host(&helm, "sidecar"), None);
    // Once we have written the object, the value is ours to keep up to date.
    assert_eq!(
        super::foreign_service_host(&workload(&["helm", "hcp-ingress"]), "occm"),
        None
    );
}
