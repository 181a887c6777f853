//! Tests of the steering record, the restore it drives and the checks of
//! where the `kubernetes` Service's endpoints point.

use super::*;

#[test]
fn a_replaced_path_keeps_its_proxy_for_the_whole_pause_whatever_wakes_us() {
    let pause = Duration::from_secs(5);
    let at = |replaced_at| SteeringRecord {
        replaced_at,
        ..SteeringRecord::default()
    };
    assert_eq!(at(None).handover_wait(1_000, pause), None);
    assert_eq!(
        at(Some(1_000)).handover_wait(1_000, pause),
        Some(Duration::from_secs(5))
    );
    assert_eq!(
        at(Some(1_000)).handover_wait(1_003, pause),
        Some(Duration::from_secs(2))
    );
    assert_eq!(at(Some(1_000)).handover_wait(1_005, pause), None);
    // A clock that went back: one pause from now, not longer.
    assert_eq!(
        at(Some(1_000)).handover_wait(900, pause),
        Some(Duration::from_secs(5))
    );
    // Kept in the record as Unix seconds, absent when none.
    let text = serde_json::to_string(&at(Some(1_000))).unwrap();
    assert!(text.contains(r#""replacedAt":1000"#), "{text}");
    assert!(
        !serde_json::to_string(&at(None))
            .unwrap()
            .contains("replacedAt")
    );
}

const NOTHING_LIVE: Live<'static> = Live {
    endpoints: None,
    advertise_address: IpAddr::V4(std::net::Ipv4Addr::new(240, 0, 0, 1)),
    finish_anyway: false,
};

fn service(selector: Option<Value>, policy: Option<&str>) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": "kubernetes", "namespace": "default"},
        "spec": {"clusterIP": "10.96.0.1", "selector": selector, "internalTrafficPolicy": policy,
                 "ports": [{"name": "https", "port": 443, "targetPort": 6443}]}
    }))
    .unwrap()
}

fn endpoints(ip: &str, ours: bool) -> Endpoints {
    let annotations = if ours {
        json!({APPLIED_DIGEST_ANNOTATION: "x"})
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "metadata": {"name": "kubernetes", "namespace": "default", "annotations": annotations,
                     "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": [{"addresses": [{"ip": ip}], "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}]
    }))
    .unwrap()
}

fn slice(ip: &str, manager: &str) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"name": "kubernetes", "namespace": "default",
                     "labels": {SERVICE_NAME_LABEL: "kubernetes", MANAGED_BY: manager}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [ip]}],
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]
    }))
    .unwrap()
}

#[test]
fn advertise_address_restore_writes_back_the_recorded_addresses() {
    let record = record(
        Some(&service(None, Some("Cluster"))),
        Some(&endpoints("10.0.0.5", false)),
        Some(&slice("10.0.0.5", "endpointslice-controller.k8s.io")),
    );
    // Survives the trip through its ConfigMap.
    let cm = record_config_map(&record).unwrap();
    assert_eq!(parse_record(&cm).unwrap(), record);
    let restore = restore(&record, Steering::AdvertiseAddress, &NOTHING_LIVE).unwrap();
    assert_eq!(restore.apply.len(), 2);
    let endpoints = serde_json::to_value(&restore.apply[0]).unwrap();
    assert_eq!(endpoints["subsets"][0]["addresses"][0]["ip"], "10.0.0.5");
    assert_eq!(
        endpoints["metadata"]["labels"]["endpointslice.kubernetes.io/skip-mirror"],
        "true"
    );
    let slice = serde_json::to_value(&restore.apply[1]).unwrap();
    assert_eq!(slice["endpoints"][0]["addresses"][0], "10.0.0.5");
    assert_eq!(
        slice["metadata"]["labels"][MANAGED_BY],
        "endpointslice-controller.k8s.io"
    );
    assert!(!restore.delete_endpoint_slice);
    assert!(
        restore.summary.contains("10.0.0.5:6443"),
        "{}",
        restore.summary
    );
}

#[test]
fn our_own_steering_is_never_recorded_as_the_original() {
    let record = record(
        Some(&service(Some(json!(selector_labels())), Some("Local"))),
        Some(&endpoints("240.0.0.1", true)),
        Some(&slice("240.0.0.1", ENDPOINT_SLICE_MANAGER)),
    );
    assert!(record.endpoints.is_none() && record.endpoint_slice.is_none());
    assert!(record.service_unknown);
    let why = restore(&record, Steering::AdvertiseAddress, &NOTHING_LIVE).unwrap_err();
    assert!(why.contains("no addresses to give back"), "{why}");
    let why = restore(&record, Steering::Service, &NOTHING_LIVE).unwrap_err();
    assert!(why.contains("original selector is unknown"), "{why}");
}

#[test]
fn service_restore_drops_our_selector_and_keeps_the_recorded_policy() {
    let record = record(
        Some(&service(None, Some("Cluster"))),
        Some(&endpoints("10.0.0.5", false)),
        None,
    );
    let restore = restore(&record, Steering::Service, &NOTHING_LIVE).unwrap();
    let patch = serde_json::to_value(&restore.apply[0]).unwrap();
    // No selector in the patch: server-side apply drops the one we own.
    assert_eq!(patch["spec"], json!({"internalTrafficPolicy": "Cluster"}));
    assert!(restore.summary.contains("selector removed"));
    // Then the addresses the endpoints controller overwrote, and the
    // slices it leaves behind for the selector that is gone.
    let endpoints = serde_json::to_value(&restore.apply[1]).unwrap();
    assert_eq!(endpoints["subsets"][0]["addresses"][0]["ip"], "10.0.0.5");
    assert!(restore.delete_abandoned_slices);
}

#[test]
fn a_slice_we_created_is_deleted_not_restored() {
    let record = record(None, Some(&endpoints("10.0.0.5", false)), None);
    let restore = restore(&record, Steering::AdvertiseAddress, &NOTHING_LIVE).unwrap();
    assert_eq!(restore.apply.len(), 1);
    assert!(restore.delete_endpoint_slice);
}

#[test]
fn a_released_service_gets_its_selector_back_before_the_addresses() {
    let mut record = record(
        Some(&service(
            Some(json!({"app": "k0smotron-haproxy"})),
            Some("Local"),
        )),
        Some(&endpoints("10.213.0.2", false)),
        None,
    );
    record.service_released = true;
    let given_back = restore(&record, Steering::AdvertiseAddress, &NOTHING_LIVE).unwrap();
    let kinds: Vec<String> = given_back
        .apply
        .iter()
        .map(|o| o.types.as_ref().unwrap().kind.clone())
        .collect();
    assert_eq!(kinds, ["Service", "Endpoints"]);
    let service = serde_json::to_value(&given_back.apply[0]).unwrap();
    assert_eq!(
        service["spec"],
        json!({"selector": {"app": "k0smotron-haproxy"}, "internalTrafficPolicy": "Local"})
    );
    assert!(given_back.delete_endpoint_slice, "ours goes last");
    // Without the release, address steering never touched the Service.
    record.service_released = false;
    let given_back = restore(&record, Steering::AdvertiseAddress, &NOTHING_LIVE).unwrap();
    assert_eq!(given_back.apply.len(), 1);
}

#[test]
fn without_recorded_addresses_live_ones_written_since_are_given_back() {
    let record = record(None, None, None);
    // Still ours: nothing safe, and the advice names both ways on.
    let ours = endpoints("240.0.0.1", true);
    let live = Live {
        endpoints: Some(&ours),
        ..NOTHING_LIVE
    };
    let why = restore(&record, Steering::AdvertiseAddress, &live).unwrap_err();
    assert!(why.contains("write Endpoints default/kubernetes"), "{why}");
    assert!(why.contains(FINISH_WITHOUT_RESTORE_ANNOTATION), "{why}");
    // Service steering: the endpoints controller rewrites them, so only the opt-in.
    let why = restore(&record, Steering::Service, &live).unwrap_err();
    assert!(!why.contains("write Endpoints"), "{why}");
    // A user wrote the API server's address: given back as it is.
    let theirs = endpoints("10.0.0.9", false);
    let live = Live {
        endpoints: Some(&theirs),
        ..NOTHING_LIVE
    };
    let given_back = restore(&record, Steering::AdvertiseAddress, &live).unwrap();
    assert!(given_back.delete_endpoint_slice && !given_back.delete_endpoints);
    assert!(
        given_back.summary.contains("10.0.0.9:6443"),
        "{}",
        given_back.summary
    );
    let bare = serde_json::to_value(&given_back.apply[0]).unwrap();
    assert!(
        bare.get("subsets").is_none(),
        "our labels and subsets dropped: {bare}"
    );
}

#[test]
fn the_opt_in_finishes_with_our_endpoints_and_slices_gone() {
    let record = record(None, None, None);
    let ours = endpoints("240.0.0.1", true);
    let live = Live {
        endpoints: Some(&ours),
        finish_anyway: true,
        ..NOTHING_LIVE
    };
    let done = restore(&record, Steering::AdvertiseAddress, &live).unwrap();
    assert!(done.apply.is_empty() && done.delete_endpoints && done.delete_endpoint_slice);
    let done = restore(&record, Steering::Service, &live).unwrap();
    assert_eq!(done.apply.len(), 1, "the Service's fields dropped");
    assert!(done.delete_abandoned_slices, "the proxy pods' slices go");
}

#[test]
fn given_back_addresses_are_written_as_host_port_in_either_family() {
    let subsets = json!([{"addresses": [{"ip": "10.0.0.5"}, {"ip": "2001:db8::10"}],
        "ports": [{"port": 6443}]}]);
    assert_eq!(
        endpoint_addresses(&subsets),
        ["10.0.0.5:6443", "[2001:db8::10]:6443"]
    );
}

#[test]
fn endpoints_of_proxy_pods_point_at_the_proxy() {
    let selected: Endpoints = serde_json::from_value(json!({
        "metadata": {"name": "kubernetes", "namespace": "default"},
        "subsets": [{"addresses": [{"ip": "10.0.0.7", "targetRef": {"kind": "Pod", "name": "hcp-ingress-proxy-x7k2p", "namespace": "default"}}],
                     "ports": [{"port": 6443}]}]
    }))
    .unwrap();
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert!(points_at_proxy(&selected, ip("240.0.0.1")));
    assert!(!points_at_proxy(
        &endpoints("10.0.0.5", false),
        ip("240.0.0.1")
    ));
    assert!(points_at_proxy(
        &endpoints("240.0.0.1", false),
        ip("240.0.0.1")
    ));
}

/// The hand-over's bridge carries the provider's addresses of the Service's
/// family only: kube-proxy ignores a slice of the other family, so an IPv4
/// bridge in front of an IPv6 Service would bridge nothing.
#[test]
fn the_bridge_slice_is_of_the_services_family() {
    let endpoints: Endpoints = serde_json::from_value(json!({
        "metadata": {"name": "kubernetes", "namespace": "default"},
        "subsets": [{"addresses": [{"ip": "192.0.2.10"}, {"ip": "2001:db8::10"}],
                     "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}],
    }))
    .unwrap();
    let v6 = bridge_slice(&endpoints, "fd00:10:96::1".parse().unwrap()).unwrap();
    assert_eq!(v6.data["addressType"], "IPv6");
    assert_eq!(
        v6.data["endpoints"][0]["addresses"],
        json!(["2001:db8::10"])
    );
    assert_eq!(v6.data["endpoints"].as_array().unwrap().len(), 1);
    assert_eq!(v6.data["ports"][0]["port"], 6443);
    let v4 = bridge_slice(&endpoints, "10.96.0.1".parse().unwrap()).unwrap();
    assert_eq!(v4.data["addressType"], "IPv4");
    assert_eq!(v4.data["endpoints"][0]["addresses"], json!(["192.0.2.10"]));
    // Nothing of the Service's family: nothing to bridge.
    let only_v4: Endpoints = serde_json::from_value(json!({
        "subsets": [{"addresses": [{"ip": "192.0.2.10"}],
                     "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}],
    }))
    .unwrap();
    assert!(bridge_slice(&only_v4, "fd00:10:96::1".parse().unwrap()).is_none());
}
