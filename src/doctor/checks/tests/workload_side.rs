//! Unit tests of the doctor's workload-side decisions: the steering of
//! `kubernetes.default.svc` compared with what the controller writes and
//! whether it reaches a proxy, the node proxy's readiness, the
//! cloud-controller-manager's environment, and the konnectivity agents'
//! server connections.

use k8s_openapi::api::{apps::v1::DaemonSet, core::v1::Endpoints};

use super::*;
use crate::render::workload::{self, NAME, OverrideTarget, WorkloadInputs};

#[test]
fn steering_compares_with_what_the_controller_writes() {
    let cpi = cpi(json!({}));
    let objects = workload::proxy(&cpi, &WorkloadInputs::default())
        .unwrap()
        .unwrap();
    let (endpoints, endpoint_slice) = objects.steering.advertise_address();
    let steered = steering(
        &cpi,
        Some(&objects.steering),
        Some(endpoints),
        Some(endpoint_slice),
        None,
    );
    assert_eq!(steered.verdict, Verdict::Pass, "{steered:?}");
    let reset: Endpoints = serde_json::from_value(json!({
        "metadata": {"name": "kubernetes", "namespace": "default"},
        "subsets": [{"addresses": [{"ip": "10.0.0.5"}], "ports": [{"name": "https", "port": 6443}]}]
    }))
    .unwrap();
    let check = steering(
        &cpi,
        Some(&objects.steering),
        Some(&reset),
        Some(endpoint_slice),
        None,
    );
    assert_eq!(check.verdict, Verdict::Fail);
    assert!(
        check.detail.contains("10.0.0.5")
            && check.detail.contains("--endpoint-reconciler-type=none"),
        "{}",
        check.detail
    );
    assert_eq!(
        steering(&cpi, None, None, None, None).verdict,
        Verdict::Skip
    );
}

#[test]
fn proxy_ready_counts() {
    let ds = |desired: i32, ready: i32| -> DaemonSet {
        serde_json::from_value(json!({"metadata": {"name": NAME},
            "status": {"desiredNumberScheduled": desired, "numberReady": ready, "currentNumberScheduled": desired, "numberMisscheduled": 0}}))
        .unwrap()
    };
    let c = cpi(json!({}));
    assert_eq!(proxy(&c, true, Some(&ds(3, 3))).verdict, Verdict::Pass);
    let partial = proxy(&c, true, Some(&ds(3, 1)));
    assert_eq!(partial.verdict, Verdict::Fail);
    assert!(partial.detail.starts_with("1/3 nodes"));
    assert_eq!(proxy(&c, true, Some(&ds(0, 0))).verdict, Verdict::Warn);
    assert_eq!(proxy(&c, true, None).verdict, Verdict::Fail);
    assert_eq!(proxy(&c, false, None).verdict, Verdict::Skip);
}

fn ccm_deployment(env: serde_json::Value) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "cloud-controller-manager", "namespace": "kube-system"},
        "spec": {"template": {"spec": {"containers": [{"name": "ccm", "image": "x", "env": env}]}}}}))
    .unwrap()
}

fn well_known() -> OverrideTarget {
    OverrideTarget {
        kind: workload::WorkloadKind::Deployment,
        namespace: "kube-system".into(),
        name: "cloud-controller-manager".into(),
        containers: Vec::new(),
        well_known: true,
    }
}

#[test]
fn ccm_env_must_be_what_the_controller_sets() {
    let cpi = cpi(json!({}));
    let set = ccm_deployment(json!([
        {"name": "KUBERNETES_SERVICE_HOST", "value": "api.wl.example.com"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": "443"}
    ]));
    assert_eq!(
        ccm(&cpi, &[(well_known(), set)], &[]).verdict,
        Verdict::Pass
    );
    let unset = ccm_deployment(json!([{"name": "AZURE_CLOUD", "value": "public"}]));
    let check = ccm(&cpi, &[(well_known(), unset)], &[]);
    assert_eq!(check.verdict, Verdict::Fail);
    assert!(
        check.detail.contains(
            "Deployment kube-system/cloud-controller-manager spec.template.spec.containers[name=ccm].env: KUBERNETES_SERVICE_HOST missing (want api.wl.example.com)"
        ),
        "{}",
        check.detail
    );
    let wrong_port = ccm_deployment(json!([
        {"name": "KUBERNETES_SERVICE_HOST", "value": "api.wl.example.com"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"}
    ]));
    let check = ccm(&cpi, &[(well_known(), wrong_port)], &[]);
    assert!(
        check
            .detail
            .contains("KUBERNETES_SERVICE_PORT=6443 (want 443)"),
        "{}",
        check.detail
    );
    let missing = ccm(&cpi, &[], &["DaemonSet kube-system/my-ccm".into()]);
    assert_eq!(missing.verdict, Verdict::Fail);
    assert!(missing.detail.contains("spec.ccm.targets"));
    assert_eq!(ccm(&cpi, &[], &[]).verdict, Verdict::Skip);
    let off = cpi_with(json!({"spec": {"ccm": {"enabled": false}}}));
    assert_eq!(ccm(&off, &[], &[]).verdict, Verdict::Skip);
}

#[test]
fn a_steering_whose_endpoint_slices_hold_no_proxy_fails() {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let passed = || Check::new("steering", Verdict::Pass, "fields as wanted");
    let slice = |endpoints: serde_json::Value| -> EndpointSlice {
        serde_json::from_value(
            json!({"metadata": {"name": "kubernetes-x", "namespace": "default"},
            "addressType": "IPv4", "endpoints": endpoints}),
        )
        .unwrap()
    };
    let service = cpi(json!({"spec": {"proxy": {"steering": "service"}}}));
    // The selector is right but the proxy pods run elsewhere: no endpoint.
    let empty = steering_reaches_proxy(&service, passed(), None, &[slice(json!([]))]);
    assert_eq!(empty.verdict, Verdict::Fail, "{empty:?}");
    assert!(
        empty.detail.contains("must run in default"),
        "{}",
        empty.detail
    );
    let selected = slice(
        json!([{"addresses": ["10.0.0.7"], "conditions": {"ready": true}, "nodeName": "n1",
        "targetRef": {"kind": "Pod", "namespace": "default", "name": "hcp-ingress-proxy-x7k2p"}}]),
    );
    let check = steering_reaches_proxy(&service, passed(), None, &[selected]);
    assert_eq!(check.verdict, Verdict::Pass, "{check:?}");

    let advertise = cpi(json!({}));
    let ours = slice(json!([{"addresses": ["240.0.0.1"], "conditions": {"ready": true}}]));
    let theirs = slice(json!([{"addresses": ["10.0.0.5"], "conditions": {"ready": true}}]));
    assert_eq!(
        steering_reaches_proxy(&advertise, passed(), None, std::slice::from_ref(&ours)).verdict,
        Verdict::Pass
    );
    let split = steering_reaches_proxy(&advertise, passed(), None, &[ours, theirs]);
    assert_eq!(split.verdict, Verdict::Fail);
    assert!(split.detail.contains("10.0.0.5"), "{}", split.detail);
    // A failed field check stays as it is.
    let failed = Check::new("steering", Verdict::Fail, "x");
    assert_eq!(
        steering_reaches_proxy(&advertise, failed.clone(), None, &[]),
        failed
    );

    // In a cluster whose `kubernetes` Service is IPv6 the proxy's address
    // is the IPv6 default, and the IPv4 one is someone else's.
    let v6: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
        "metadata": {"name": "kubernetes", "namespace": "default"},
        "spec": {"clusterIP": "fd00:10:96::1", "ports": [{"port": 443}]}}))
    .unwrap();
    let ours6 = slice(json!([{"addresses": ["100::1"], "conditions": {"ready": true}}]));
    let check = steering_reaches_proxy(&advertise, passed(), Some(&v6), &[ours6]);
    assert_eq!(check.verdict, Verdict::Pass, "{check:?}");
    let old = slice(json!([{"addresses": ["240.0.0.1"], "conditions": {"ready": true}}]));
    let check = steering_reaches_proxy(&advertise, passed(), Some(&v6), &[old]);
    assert_eq!(check.verdict, Verdict::Fail, "{check:?}");
    assert!(check.detail.contains("100::1"), "{}", check.detail);
}

/// Metrics of a real proxy-agent (v0.36.0) whose server said
/// `--server-count=2` while every dial reached the same server; and of one
/// connected to its only server.
const AGENT_1_OF_2: &str =
    include_str!("../../../../test/workload/fixtures/konnectivity-agent-metrics-1-of-2.txt");
const AGENT_CONNECTED: &str =
    include_str!("../../../../test/workload/fixtures/konnectivity-agent-metrics-connected.txt");

fn agent(pod: &str, metrics: Result<&str, &str>) -> KonnectivityAgent {
    KonnectivityAgent {
        pod: pod.into(),
        metrics: metrics.map(str::to_string).map_err(str::to_string),
    }
}

#[test]
fn konnectivity_agents_must_reach_every_server() {
    let with_host = cpi(
        json!({"spec": {"ingress": {"konnectivityHost": "konnectivity.wl.example.com", "port": 443},
                                        "backend": {"konnectivityPort": 8132}}}),
    );
    // No konnectivity route, nothing to check.
    let check = konnectivity(&cpi(json!({})), Ok(&[]));
    assert_eq!(check.verdict, Verdict::Skip, "{}", check.detail);

    let check = konnectivity(
        &with_host,
        Ok(&[agent("konnectivity-agent-a", Ok(AGENT_CONNECTED))]),
    );
    assert_eq!(check.verdict, Verdict::Pass, "{}", check.detail);
    assert!(
        check
            .detail
            .contains("every konnectivity server it knows of (1)"),
        "{}",
        check.detail
    );

    // One agent short of a server fails, naming it and the counts.
    let check = konnectivity(
        &with_host,
        Ok(&[
            agent("konnectivity-agent-a", Ok(AGENT_CONNECTED)),
            agent("konnectivity-agent-b", Ok(AGENT_1_OF_2)),
        ]),
    );
    assert_eq!(check.verdict, Verdict::Fail, "{}", check.detail);
    assert!(
        check.detail.contains("agent konnectivity-agent-b is connected to 1 of the 2 konnectivity servers")
            && !check.detail.contains("konnectivity-agent-a")
            && check.detail.contains("the route for konnectivity.wl.example.com does not lead to every konnectivity server replica"),
        "{}",
        check.detail
    );

    // The API server could not reach an agent: the tunnel itself is broken.
    let check = konnectivity(
        &with_host,
        Ok(&[agent(
            "konnectivity-agent-a",
            Err("the server is currently unable to handle the request"),
        )]),
    );
    assert_eq!(check.verdict, Verdict::Fail, "{}", check.detail);
    assert!(
        check
            .detail
            .contains("could not reach agent konnectivity-agent-a"),
        "{}",
        check.detail
    );

    // No agent at all: a warning naming the selector and the host to dial.
    let check = konnectivity(&with_host, Ok(&[]));
    assert_eq!(check.verdict, Verdict::Warn, "{}", check.detail);
    assert!(
        check.detail.contains(KONNECTIVITY_AGENT_SELECTOR)
            && check.detail.contains("konnectivity.wl.example.com:443"),
        "{}",
        check.detail
    );

    // An agent without the gauges cannot be judged.
    let check = konnectivity(&with_host, Ok(&[agent("other-agent", Ok("up 1\n"))]));
    assert_eq!(check.verdict, Verdict::Warn, "{}", check.detail);

    // The pods could not be listed.
    let check = konnectivity(&with_host, Err("failed to list"));
    assert_eq!(check.verdict, Verdict::Fail);
}

#[test]
fn the_agents_metrics_port_is_its_health_port() {
    let pod = |args: serde_json::Value| -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(json!({"metadata": {"name": "a"},
            "spec": {"containers": [{"name": "agent", "command": ["/proxy-agent"], "args": args}]}}))
        .unwrap()
    };
    assert_eq!(
        konnectivity_agent_port(&pod(json!(["--logtostderr=true"]))),
        8093
    );
    assert_eq!(
        konnectivity_agent_port(&pod(json!(["--health-server-port=9093"]))),
        9093
    );
    assert_eq!(
        konnectivity_agent_port(&pod(json!(["--health-server-port", "9094"]))),
        9094
    );
}
