//! Unit tests of the doctor's decisions, one per check and verdict: the
//! management side's (DNS, routes, conditions, TLS), the verdict table and
//! the shared fixtures here, the workload side's (steering, node proxy,
//! cloud-controller-manager) in [`workload_side`]. Each fault is spelled out
//! as its own fixture, which reads better than a table of opaque cases.

mod workload_side;

use std::{
    net::{IpAddr, SocketAddr},
    time::{Duration, SystemTime},
};

use kube::api::DynamicObject;
use serde_json::json;

use super::*;
use crate::{
    api::ControlPlaneIngress,
    controller::probe::{Handshake, ProbeFailure},
    render::RouteKind,
};

fn cpi(extra: serde_json::Value) -> ControlPlaneIngress {
    let mut value = json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
        "metadata": {"name": "wl", "namespace": "tenants", "generation": 1},
        "spec": {"clusterName": "wl", "ingress": {"apiHost": "api.wl.example.com", "className": "haproxy"},
                 "backend": {"serviceName": "kmc-wl", "apiPort": 30443}}});
    json_merge(&mut value, extra);
    serde_json::from_value(value).unwrap()
}

fn cpi_with(extra: serde_json::Value) -> ControlPlaneIngress {
    cpi(extra)
}

fn json_merge(into: &mut serde_json::Value, from: serde_json::Value) {
    match (into, from) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                json_merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn ingress_at(address: &str) -> IngressAddress {
    IngressAddress {
        source: "status.loadBalancer of Ingress tenants/wl".into(),
        addresses: vec![address.into()],
    }
}

#[test]
fn dns_passes_only_when_every_address_is_the_ingress() {
    let ingress = ingress_at("192.0.2.1");
    let want = [ip("192.0.2.1")];
    let pass = dns(
        "api.wl.example.com",
        &Ok(vec![ip("192.0.2.1")]),
        Some((&ingress, &want)),
    );
    assert_eq!(pass.verdict, Verdict::Pass, "{pass:?}");
    let elsewhere = dns(
        "api.wl.example.com",
        &Ok(vec![ip("198.51.100.7")]),
        Some((&ingress, &want)),
    );
    assert_eq!(elsewhere.verdict, Verdict::Fail);
    assert!(
        elsewhere
            .detail
            .contains("point the DNS record of api.wl.example.com at 192.0.2.1"),
        "{}",
        elsewhere.detail
    );
    // One address elsewhere sends some clients elsewhere.
    let partly = dns(
        "api.wl.example.com",
        &Ok(vec![ip("192.0.2.1"), ip("198.51.100.7")]),
        Some((&ingress, &want)),
    );
    assert_eq!(partly.verdict, Verdict::Fail);
    let missing = dns(
        "api.wl.example.com",
        &Err("NXDOMAIN".into()),
        Some((&ingress, &want)),
    );
    assert_eq!(missing.verdict, Verdict::Fail);
    assert!(
        missing
            .detail
            .contains("create a DNS record api.wl.example.com -> 192.0.2.1"),
        "{}",
        missing.detail
    );
    let unknown = dns("api.wl.example.com", &Ok(vec![ip("192.0.2.1")]), None);
    assert_eq!(unknown.verdict, Verdict::Warn);
    assert!(unknown.detail.contains("--ingress-address"));
}

#[test]
fn an_ingress_host_name_that_does_not_resolve_fails() {
    let ingress = ingress_at("lb-1234.elb.example.com");
    let check = ingress_unresolved(
        &ingress,
        &[("lb-1234.elb.example.com".into(), "NXDOMAIN".into())],
    );
    assert_eq!(check.verdict, Verdict::Fail);
    assert_eq!(
        check.detail,
        "lb-1234.elb.example.com: NXDOMAIN (from status.loadBalancer of Ingress tenants/wl) does not resolve: check the load balancer of the ingress controller, or pass the address with --ingress-address"
    );
}

#[test]
fn ingress_addresses_come_from_the_load_balancer_or_gateway_status() {
    let ingress: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "wl"},
        "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}, {"hostname": "lb.example.com"}]}}
    }))
    .unwrap();
    assert_eq!(status_addresses(&ingress), ["192.0.2.1", "lb.example.com"]);
    let gateway: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": {"name": "gw"},
        "status": {"addresses": [{"type": "IPAddress", "value": "192.0.2.2"}]}
    }))
    .unwrap();
    assert_eq!(status_addresses(&gateway), ["192.0.2.2"]);
}

fn ingress_object(status: serde_json::Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "wl", "namespace": "tenants"}, "status": status
    }))
    .unwrap()
}

#[test]
fn routes_missing_unadmitted_admitted_and_not_deployed() {
    let cpi = cpi(json!({}));
    let wanted = [(RouteKind::Ingress, "wl".to_string())];
    let missing = routes(&cpi, &wanted, &[None]);
    assert_eq!(missing[0].verdict, Verdict::Fail);
    assert!(
        missing[0]
            .detail
            .contains("Ingress tenants/wl does not exist"),
        "{}",
        missing[0].detail
    );
    let unadmitted = routes(&cpi, &wanted, &[Some(ingress_object(json!({})))]);
    assert_eq!(unadmitted[0].verdict, Verdict::Fail);
    assert!(
        unadmitted[0].detail.contains("spec.ingress.className")
            && unadmitted[0].detail.contains("\"haproxy\""),
        "{}",
        unadmitted[0].detail
    );
    let admitted = routes(
        &cpi,
        &wanted,
        &[Some(ingress_object(
            json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}),
        ))],
    );
    assert_eq!(admitted[0].verdict, Verdict::Pass);
    let manual = cpi_with(json!({"spec": {"ingress": {"deploy": false}}}));
    assert_eq!(routes(&manual, &[], &[])[0].verdict, Verdict::Skip);
}

#[test]
fn a_tls_route_must_be_accepted_by_a_gateway() {
    let cpi = cpi(json!({}));
    let wanted = [(RouteKind::TlsRoute, "wl-api".to_string())];
    let route = |status: serde_json::Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "TLSRoute",
            "metadata": {"name": "wl-api", "namespace": "tenants"},
            "spec": {"parentRefs": [{"name": "gw"}]}, "status": status
        }))
        .unwrap()
    };
    let accepted = route(json!({"parents": [{"parentRef": {"name": "gw"},
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": ""},
            {"type": "ResolvedRefs", "status": "True", "reason": "ResolvedRefs", "message": ""}]}]}));
    assert_eq!(
        routes(&cpi, &wanted, &[Some(accepted)])[0].verdict,
        Verdict::Pass
    );
    let refused = route(json!({"parents": [{"parentRef": {"name": "gw"},
        "conditions": [{"type": "Accepted", "status": "False", "reason": "NotAllowedByListeners", "message": "no TLS listener"}]}]}));
    let check = &routes(&cpi, &wanted, &[Some(refused)])[0];
    assert_eq!(check.verdict, Verdict::Fail);
    assert!(
        check.detail.contains("NotAllowedByListeners") && check.detail.contains("Passthrough"),
        "{}",
        check.detail
    );
}

#[test]
fn conditions_that_are_not_true_are_named_with_their_message() {
    let mut c = cpi(json!({"status": {"observedGeneration": 1, "conditions": [
        {"type": "Ready", "status": "False", "reason": "NotReady", "message": "x", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        {"type": "RouteReady", "status": "True", "reason": "Applied", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        {"type": "CCMConfigured", "status": "False", "reason": "TargetNotFound", "message": "not found: Deployment kube-system/ccm", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    ]}}));
    let check = conditions(&c);
    assert_eq!(check.verdict, Verdict::Warn);
    assert_eq!(
        check.detail,
        "CCMConfigured=False (TargetNotFound): not found: Deployment kube-system/ccm"
    );
    c.status.as_mut().unwrap().conditions.pop();
    // Not paused is the good state of Paused; paused is worth a word.
    let paused = |status: &str| -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        serde_json::from_value(
            json!({"type": "Paused", "status": status, "reason": "ClusterPaused",
            "message": "spec.paused", "lastTransitionTime": "2026-01-01T00:00:00Z"}),
        )
        .unwrap()
    };
    c.status.as_mut().unwrap().conditions.push(paused("False"));
    assert_eq!(conditions(&c).verdict, Verdict::Pass);
    c.status.as_mut().unwrap().conditions.pop();
    c.status.as_mut().unwrap().conditions.push(paused("True"));
    assert_eq!(conditions(&c).verdict, Verdict::Warn);
    c.status.as_mut().unwrap().conditions.pop();
    c.status = None;
    assert_eq!(conditions(&c).verdict, Verdict::Warn);
}

fn certificate(sans: &[&str], not_after: SystemTime) -> Handshake {
    let mut params =
        rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
    params.not_before = time::OffsetDateTime::from(SystemTime::now() - Duration::from_secs(3600));
    params.not_after = time::OffsetDateTime::from(not_after);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    Handshake {
        chain: vec![cert.der().clone()],
        address: "192.0.2.1:443".parse::<SocketAddr>().unwrap(),
    }
}

#[test]
fn tls_needs_the_host_in_the_sans_and_reports_expiry() {
    let now = SystemTime::now();
    let year = now + Duration::from_secs(365 * 86_400);
    let good = tls(
        "api.wl.example.com",
        &Ok(certificate(&["api.wl.example.com"], year)),
        &no_ca(),
        now,
    );
    assert_eq!(good.verdict, Verdict::Pass, "{good:?}");
    assert!(good.detail.contains("expires"), "{}", good.detail);
    let wildcard = tls(
        "api.wl.example.com",
        &Ok(certificate(&["*.wl.example.com"], year)),
        &no_ca(),
        now,
    );
    assert_eq!(wildcard.verdict, Verdict::Pass);
    let other = tls(
        "api.wl.example.com",
        &Ok(certificate(&["ingress.local"], year)),
        &no_ca(),
        now,
    );
    assert_eq!(other.verdict, Verdict::Fail);
    assert!(
        other.detail.contains("DNS:ingress.local")
            && other.detail.contains("does not name api.wl.example.com")
            && other.detail.contains("certSANs"),
        "{}",
        other.detail
    );
    let soon = tls(
        "api.wl.example.com",
        &Ok(certificate(
            &["api.wl.example.com"],
            now + Duration::from_secs(86_400),
        )),
        &no_ca(),
        now,
    );
    assert_eq!(soon.verdict, Verdict::Warn);
    let expired = tls(
        "api.wl.example.com",
        &Ok(certificate(
            &["api.wl.example.com"],
            now - Duration::from_secs(60),
        )),
        &no_ca(),
        now,
    );
    assert_eq!(expired.verdict, Verdict::Fail);
    assert!(expired.detail.contains("expired"), "{}", expired.detail);
    let refused = tls(
        "api.wl.example.com",
        &Err(ProbeFailure {
            reason: "ConnectFailed",
            message: "failed to connect to the ingress at 192.0.2.1:443: refused".into(),
        }),
        &no_ca(),
        now,
    );
    assert_eq!(refused.verdict, Verdict::Fail);
    assert!(refused.detail.contains("refused (ConnectFailed)"));
}

fn no_ca() -> ClusterCa {
    Err("Secret tenants/wl-ca not found".into())
}

#[test]
fn tls_with_the_cluster_ca_tells_passthrough_from_the_ingress_own_certificate() {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::from_ca_cert_der(ca_cert.der(), &ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["api.wl.example.com".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let ca: ClusterCa = Ok(("Secret tenants/wl-ca".into(), ca_cert.pem()));
    let through = Handshake {
        chain: vec![leaf.der().clone()],
        address: "192.0.2.1:443".parse().unwrap(),
    };
    let now = SystemTime::now();
    let pass = tls("api.wl.example.com", &Ok(through), &ca, now);
    assert_eq!(pass.verdict, Verdict::Pass, "{pass:?}");
    assert!(
        pass.detail
            .contains("issued by the cluster CA (Secret tenants/wl-ca)"),
        "{}",
        pass.detail
    );
    // The right name, but not the tenant's CA: the ingress's own certificate.
    let own = certificate(
        &["api.wl.example.com"],
        now + Duration::from_secs(365 * 86_400),
    );
    let check = tls("api.wl.example.com", &Ok(own), &ca, now);
    assert_eq!(check.verdict, Verdict::Fail);
    assert!(
        check
            .detail
            .contains("does not verify against the cluster CA")
            && check.detail.contains("passing TLS through"),
        "{}",
        check.detail
    );
    // Without a CA the issuer is not judged, and the report says so.
    let own = certificate(
        &["api.wl.example.com"],
        now + Duration::from_secs(365 * 86_400),
    );
    let unchecked = tls("api.wl.example.com", &Ok(own), &no_ca(), now);
    assert_eq!(unchecked.verdict, Verdict::Pass);
    assert!(
        unchecked.detail.contains("issuer not checked"),
        "{}",
        unchecked.detail
    );
}

#[test]
fn san_matching() {
    assert!(san_matches("DNS:api.example.com", "API.example.com."));
    assert!(san_matches("DNS:*.example.com", "api.example.com"));
    assert!(!san_matches("DNS:*.example.com", "a.b.example.com"));
    assert!(!san_matches("DNS:*.example.com", "example.com"));
    assert!(san_matches("IP:192.0.2.1", "192.0.2.1"));
    assert!(!san_matches("IP:192.0.2.1", "api.example.com"));
}

#[test]
fn a_providers_own_route_and_node_proxy_are_named_as_theirs() {
    let k0smotron = cpi(json!({"spec": {"upstream": {"provider": "k0smotron",
        "route": {"kind": "Ingress", "name": "kmc-wl", "namespace": "tenants"}, "routeIncludesKonnectivity": true,
        "nodeProxy": {"kind": "DaemonSet", "name": "k0smotron-haproxy", "namespace": "default"}}}}));
    let missing = routes(
        &k0smotron,
        &[(RouteKind::Ingress, "kmc-wl".into())],
        &[None],
    );
    assert_eq!(missing[0].verdict, Verdict::Fail);
    assert!(
        missing[0].detail.contains("k0smotron creates it"),
        "{}",
        missing[0].detail
    );
    let node = proxy(&k0smotron, false, None);
    assert_eq!(node.verdict, Verdict::Skip);
    assert!(
        node.detail.contains("DaemonSet default/k0smotron-haproxy"),
        "{}",
        node.detail
    );
    let steered = steering(&k0smotron, None, None, None, None);
    assert_eq!(steered.verdict, Verdict::Skip);
    assert!(
        steered.detail.contains("k0smotron's node proxy"),
        "{}",
        steered.detail
    );
}

#[test]
fn table_and_exit_code() {
    let checks = [
        Check::new("dns api.wl.example.com", Verdict::Pass, "ok"),
        Check::new("ccm env", Verdict::Warn, "hm"),
    ];
    assert_eq!(
        table(&checks),
        "CHECK                  | RESULT | DETAIL / FIX\n\
         dns api.wl.example.com | PASS   | ok\n\
         ccm env                | WARN   | hm\n"
    );
    assert_eq!(exit_code(&checks), 0);
    let failed = [Check::new("steering", Verdict::Fail, "x")];
    assert_eq!(exit_code(&failed), 1);
}
