//! Hand-written valid and invalid objects against upstream CRDs.

use std::path::Path;

use crdschema::{Crd, Options, Violation};
use serde_json::{Value, json};

fn crd(file: &str) -> Crd {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/schemas")
        .join(file);
    crdschema::load_file(&p).unwrap().remove(0)
}

fn violations(crd: &Crd, obj: &Value) -> Vec<(String, String)> {
    let report = crd.validate_report(obj, &Options::default());
    assert!(
        report.skipped.iter().all(|s| s.reason.contains("oldSelf")),
        "unexpected skipped rules: {:?}",
        report.skipped
    );
    report
        .violations
        .into_iter()
        .map(|Violation { path, message }| (path, message))
        .collect()
}

fn one(crd: &Crd, obj: &Value) -> (String, String) {
    let v = violations(crd, obj);
    assert_eq!(v.len(), 1, "{v:#?}");
    v.into_iter().next().unwrap()
}

fn set(obj: &mut Value, ptr: &str, val: Value) {
    *obj.pointer_mut(ptr).unwrap_or_else(|| panic!("{ptr}")) = val;
}

// ---------- Traefik IngressRouteTCP ----------

fn ingressroutetcp() -> Value {
    json!({
        "apiVersion": "traefik.io/v1alpha1",
        "kind": "IngressRouteTCP",
        "metadata": {"name": "hcp-abc", "namespace": "hcp-system", "labels": {"a": "b"}},
        "spec": {
            "entryPoints": ["websecure"],
            "routes": [{
                "match": "HostSNI(`abc.hcp.example.com`)",
                "services": [{"name": "abc-apiserver", "namespace": "tenant-a", "port": 6443}]
            }, {
                "match": "HostSNI(`konnectivity.abc.hcp.example.com`)",
                "syntax": "v3",
                "priority": 10,
                "services": [{"name": "abc-konnectivity", "port": "konnectivity"}]
            }],
            "tls": {"passthrough": true}
        }
    })
}

#[test]
fn ingressroutetcp_valid() {
    let crd = crd("traefik.io_ingressroutetcps.yaml");
    assert_eq!(crd.validate(&ingressroutetcp()), Ok(()));
}

#[test]
fn ingressroutetcp_missing_match() {
    let crd = crd("traefik.io_ingressroutetcps.yaml");
    let mut o = ingressroutetcp();
    o["spec"]["routes"][0]
        .as_object_mut()
        .unwrap()
        .remove("match");
    assert_eq!(
        one(&crd, &o),
        (".spec.routes[0].match".into(), "Required value".into())
    );
}

#[test]
fn ingressroutetcp_bad_types_and_enum() {
    let crd = crd("traefik.io_ingressroutetcps.yaml");
    let mut o = ingressroutetcp();
    set(&mut o, "/spec/tls/passthrough", json!("yes"));
    assert_eq!(
        one(&crd, &o),
        (
            ".spec.tls.passthrough".into(),
            "must be of type boolean: \"string\"".into()
        )
    );
    let mut o = ingressroutetcp();
    set(&mut o, "/spec/routes/1/syntax", json!("v4"));
    assert_eq!(
        one(&crd, &o),
        (
            ".spec.routes[1].syntax".into(),
            "Unsupported value: \"v4\": supported values: \"v3\", \"v2\"".into()
        )
    );
    let mut o = ingressroutetcp();
    set(&mut o, "/spec/routes/0/services/0/port", json!(true));
    assert_eq!(
        one(&crd, &o),
        (
            ".spec.routes[0].services[0].port".into(),
            "must be of type int-or-string: \"boolean\"".into()
        )
    );
}

#[test]
fn ingressroutetcp_unknown_field_rejected_or_pruned() {
    let crd = crd("traefik.io_ingressroutetcps.yaml");
    let mut o = ingressroutetcp();
    o["spec"]["routes"][0]["hostSNI"] = json!("x");
    assert_eq!(
        one(&crd, &o),
        (
            ".spec.routes[0].hostSNI".into(),
            "unknown field \"hostSNI\"".into()
        )
    );
    assert_eq!(crd.validate_with(&o, &Options::api_server()), Ok(()));
    crd.prune(&mut o);
    assert_eq!(o, ingressroutetcp());
}

#[test]
fn ingressroutetcp_wrong_header() {
    let crd = crd("traefik.io_ingressroutetcps.yaml");
    let mut o = ingressroutetcp();
    o["apiVersion"] = json!("traefik.containo.us/v1alpha1");
    assert_eq!(one(&crd, &o).0, ".apiVersion");
    let mut o = ingressroutetcp();
    o["kind"] = json!("IngressRoute");
    assert_eq!(
        one(&crd, &o),
        (
            ".kind".into(),
            "Invalid value: \"IngressRoute\": must be \"IngressRouteTCP\"".into()
        )
    );
    let mut o = ingressroutetcp();
    o["metadata"] = json!("x");
    assert_eq!(
        one(&crd, &o),
        (
            ".metadata".into(),
            "must be of type object: \"string\"".into()
        )
    );
}

// ---------- Gateway API TLSRoute v1 ----------

fn tlsroute() -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "TLSRoute",
        "metadata": {"name": "abc", "namespace": "hcp-system"},
        "spec": {
            "parentRefs": [
                {"name": "hcp-gateway", "namespace": "gw", "sectionName": "tls"},
                {"name": "hcp-gateway", "namespace": "gw", "sectionName": "tls-alt"}
            ],
            "hostnames": ["abc.hcp.example.com", "*.abc.hcp.example.com"],
            "rules": [{"backendRefs": [{"name": "abc-apiserver", "namespace": "tenant-a", "port": 6443}]}]
        }
    })
}

#[test]
fn tlsroute_valid() {
    let crd = crd("gateway.networking.k8s.io_tlsroutes.yaml");
    assert_eq!(crd.validate(&tlsroute()), Ok(()));
    let r = crd.validate_report(&tlsroute(), &Options::strict());
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert!(r.evaluated_rules >= 6, "{}", r.evaluated_rules);
}

#[test]
fn tlsroute_hostname_pattern() {
    let crd = crd("gateway.networking.k8s.io_tlsroutes.yaml");
    let mut o = tlsroute();
    set(&mut o, "/spec/hostnames/0", json!("ABC.example.com"));
    let v = violations(&crd, &o);
    assert_eq!(v.len(), 2, "{v:?}");
    assert_eq!(v[0].0, ".spec.hostnames[0]");
    assert_eq!(
        v[0].1,
        r"should match '^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'"
    );
    // The CEL rule on the list fires too, as in the API server.
    assert_eq!(
        v[1],
        (
            ".spec.hostnames".into(),
            "Hostnames must be valid based on RFC-1123".into()
        )
    );
}

#[test]
fn tlsroute_hostname_ip_rejected_by_cel() {
    let crd = crd("gateway.networking.k8s.io_tlsroutes.yaml");
    let mut o = tlsroute();
    set(&mut o, "/spec/hostnames/0", json!("10.0.0.1"));
    assert_eq!(
        one(&crd, &o),
        (
            ".spec.hostnames".into(),
            "Hostnames cannot contain an IP".into()
        )
    );
}

#[test]
fn tlsroute_wildcard_not_first_label() {
    let crd = crd("gateway.networking.k8s.io_tlsroutes.yaml");
    let mut o = tlsroute();
    set(&mut o, "/spec/hostnames/1", json!("abc.*.example.com"));
    let v = violations(&crd, &o);
    assert_eq!(v.len(), 2, "{v:?}");
    assert_eq!(v[0].0, ".spec.hostnames[1]");
    assert!(
        v.contains(&(
            ".spec.hostnames".into(),
            "Wildcards on hostnames must be the first label, and the rest of hostname must be valid based on RFC-1123".into()
        )),
        "{v:?}"
    );
}

#[test]
fn tlsroute_duplicate_parent_refs_cel() {
    let crd = crd("gateway.networking.k8s.io_tlsroutes.yaml");
    let mut o = tlsroute();
    set(&mut o, "/spec/parentRefs/1/sectionName", json!("tls"));
    assert_eq!(
        one(&crd, &o),
        (
            ".spec.parentRefs".into(),
            "sectionName or port must be unique when parentRefs includes 2 or more references to the same parent".into()
        )
    );
    let mut o = tlsroute();
    o["spec"]["parentRefs"][1]
        .as_object_mut()
        .unwrap()
        .remove("sectionName");
    assert_eq!(
        one(&crd, &o),
        (
            ".spec.parentRefs".into(),
            "sectionName or port must be specified when parentRefs includes 2 or more references to the same parent".into()
        )
    );
}

#[test]
fn tlsroute_backend_port_required_for_service() {
    let crd = crd("gateway.networking.k8s.io_tlsroutes.yaml");
    let mut o = tlsroute();
    o["spec"]["rules"][0]["backendRefs"][0]
        .as_object_mut()
        .unwrap()
        .remove("port");
    assert_eq!(
        one(&crd, &o),
        (
            ".spec.rules[0].backendRefs[0]".into(),
            "Must have port for Service reference".into()
        )
    );
}

#[test]
fn tlsroute_limits() {
    let crd = crd("gateway.networking.k8s.io_tlsroutes.yaml");
    let mut o = tlsroute();
    set(&mut o, "/spec/hostnames", json!([]));
    assert_eq!(
        one(&crd, &o),
        (
            ".spec.hostnames".into(),
            "Too few: must have at least 1 items".into()
        )
    );
    let mut o = tlsroute();
    let rule = o["spec"]["rules"][0].clone();
    set(&mut o, "/spec/rules", json!([rule.clone(), rule]));
    assert_eq!(
        one(&crd, &o),
        (
            ".spec.rules".into(),
            "Too many: must have at most 1 items".into()
        )
    );
    let mut o = tlsroute();
    set(&mut o, "/spec/rules/0/backendRefs/0/port", json!(70000));
    assert_eq!(
        one(&crd, &o),
        (
            ".spec.rules[0].backendRefs[0].port".into(),
            "should be less than or equal to 65535".into()
        )
    );
}

// ---------- CAPI ClusterResourceSet ----------

fn crs() -> Value {
    json!({
        "apiVersion": "addons.cluster.x-k8s.io/v1beta2",
        "kind": "ClusterResourceSet",
        "metadata": {"name": "hcp-ingress", "namespace": "default"},
        "spec": {
            "clusterSelector": {"matchLabels": {"hcp-ingress.example.com/enabled": "true"}},
            "resources": [{"kind": "ConfigMap", "name": "konnectivity-agent"}],
            "strategy": "Reconcile"
        }
    })
}

#[test]
fn crs_valid() {
    let crd = crd("addons.cluster.x-k8s.io_clusterresourcesets.yaml");
    assert_eq!(crd.validate(&crs()), Ok(()));
    let mut v1 = crs();
    v1["apiVersion"] = json!("addons.cluster.x-k8s.io/v1beta1");
    assert_eq!(crd.validate(&v1), Ok(()));
}

#[test]
fn crs_invalid() {
    let crd = crd("addons.cluster.x-k8s.io_clusterresourcesets.yaml");
    let mut o = crs();
    set(&mut o, "/spec/resources/0/kind", json!("Deployment"));
    assert_eq!(
        one(&crd, &o),
        (
            ".spec.resources[0].kind".into(),
            "Unsupported value: \"Deployment\": supported values: \"Secret\", \"ConfigMap\"".into()
        )
    );
    let mut o = crs();
    set(&mut o, "/spec/resources/0/name", json!(""));
    assert_eq!(
        one(&crd, &o),
        (
            ".spec.resources[0].name".into(),
            "Too short: may not be less than 1 characters".into()
        )
    );
    let mut o = crs();
    set(
        &mut o,
        "/spec/clusterSelector/matchLabels/hcp-ingress.example.com~1enabled",
        json!(true),
    );
    assert_eq!(
        one(&crd, &o),
        (
            ".spec.clusterSelector.matchLabels[hcp-ingress.example.com/enabled]".into(),
            "must be of type string: \"boolean\"".into()
        )
    );
    let mut o = crs();
    o["spec"].as_object_mut().unwrap().remove("clusterSelector");
    assert_eq!(
        one(&crd, &o),
        (".spec.clusterSelector".into(), "Required value".into())
    );
    let mut o = crs();
    o["apiVersion"] = json!("addons.cluster.x-k8s.io/v1alpha3");
    assert_eq!(
        one(&crd, &o),
        (
            ".apiVersion".into(),
            "version \"v1alpha3\" is not served by this CRD".into()
        )
    );
}

// ---------- K0smotronControlPlane ----------

fn kcp() -> Value {
    json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
        "kind": "K0smotronControlPlane",
        "metadata": {"name": "abc", "namespace": "tenant-a"},
        "spec": {
            "version": "v1.34.1-k0s.0",
            "replicas": 3,
            "externalAddress": "abc.hcp.example.com",
            "service": {"type": "ClusterIP", "apiPort": 6443, "konnectivityPort": 8132},
            "k0sConfig": {"apiVersion": "k0s.k0sproject.io/v1beta1", "kind": "ClusterConfig", "spec": {"anything": [1, 2]}}
        }
    })
}

#[test]
fn kcp_valid_and_defaults() {
    let crd = crd("controlplane.cluster.x-k8s.io_k0smotroncontrolplanes.yaml");
    assert_eq!(crd.validate(&kcp()), Ok(()));
    let mut o = kcp();
    o["spec"].as_object_mut().unwrap().remove("service");
    crd.apply_defaults(&mut o);
    assert_eq!(
        o["spec"]["service"],
        json!({"apiPort": 30443, "konnectivityPort": 30132, "type": "ClusterIP"})
    );
    assert_eq!(o["spec"]["image"], json!("quay.io/k0sproject/k0s"));
}

#[test]
fn kcp_invalid() {
    let crd = crd("controlplane.cluster.x-k8s.io_k0smotroncontrolplanes.yaml");
    let mut o = kcp();
    set(&mut o, "/spec/service/type", json!("ExternalName"));
    assert_eq!(
        one(&crd, &o),
        (
            ".spec.service.type".into(),
            "Unsupported value: \"ExternalName\": supported values: \"ClusterIP\", \"NodePort\", \"LoadBalancer\"".into()
        )
    );
    let mut o = kcp();
    set(&mut o, "/spec/replicas", json!(3_000_000_000u64));
    assert_eq!(
        one(&crd, &o),
        (
            ".spec.replicas".into(),
            "must be of type int32: 3000000000".into()
        )
    );
    let mut o = kcp();
    set(&mut o, "/spec/replicas", json!(1.5));
    assert_eq!(
        one(&crd, &o),
        (
            ".spec.replicas".into(),
            "must be of type integer: \"number\"".into()
        )
    );
    let mut o = kcp();
    o["spec"]["ingress"] = json!({"apiHost": "abc.example.com"});
    assert_eq!(
        one(&crd, &o),
        (
            ".spec.ingress.konnectivityHost".into(),
            "Required value".into()
        )
    );
}
