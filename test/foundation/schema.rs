//! Schema tests: rendered third-party objects and source fixtures validate
//! against the upstream CRDs in ../shared/schemas (CEL rules included), and
//! our own CRD is a structural schema that accepts what `render` accepts.

use crdschema::{Crd, Options};
use hcp_ingress::{api::validation::check_dns1123_subdomain, cli::crd_yaml, cli::render_documents};
use serde_json::json;

use crate::{documents, inputs, upstream_schemas};

pub(crate) fn upstream() -> Vec<Crd> {
    crdschema::load_dir(&upstream_schemas()).expect("upstream CRDs load")
}

fn ours() -> Crd {
    Crd::from_yaml(&crd_yaml()).expect("our CRD parses")
}

/// The CRD that defines `obj`'s kind, if we have it.
pub(crate) fn crd_for<'a>(crds: &'a [Crd], obj: &serde_json::Value) -> Option<&'a Crd> {
    let api_version = obj["apiVersion"].as_str()?;
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    crds.iter()
        .find(|c| c.group() == group && c.kind() == obj["kind"])
}

/// Validate strictly: unknown fields and CEL rules that cannot be evaluated fail too.
pub(crate) fn check(crd: &Crd, obj: &serde_json::Value, what: &str) {
    let report = crd.validate_report(obj, &Options::strict());
    assert!(
        report.violations.is_empty(),
        "{what} does not validate against the {} CRD:\n{}",
        crd.kind(),
        report
            .violations
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn rendered_third_party_objects_validate_against_upstream_crds() {
    let crds = upstream();
    let mut checked = std::collections::BTreeMap::<String, usize>::new();
    for input in inputs() {
        let text = std::fs::read_to_string(&input).unwrap();
        for obj in render_documents("x", &text).unwrap().objects {
            if let Some(crd) = crd_for(&crds, &obj) {
                check(
                    crd,
                    &obj,
                    &format!("{} from {}", obj["kind"], input.display()),
                );
                *checked.entry(crd.kind().to_string()).or_default() += 1;
            }
        }
    }
    for kind in ["IngressRouteTCP", "TLSRoute"] {
        assert!(
            checked.get(kind).copied().unwrap_or(0) > 0,
            "no rendered {kind} was checked: {checked:?}"
        );
    }
}

#[test]
fn source_fixtures_validate_against_their_upstream_crds() {
    let crds = upstream();
    let mut checked = 0;
    for input in inputs() {
        let text = std::fs::read_to_string(&input).unwrap();
        for doc in documents(&text) {
            if doc["kind"] == "ControlPlaneIngress" {
                continue;
            }
            let crd = crd_for(&crds, &doc)
                .unwrap_or_else(|| panic!("no upstream CRD for {}", input.display()));
            check(crd, &doc, &input.display().to_string());
            checked += 1;
        }
    }
    assert!(
        checked >= 6,
        "every source kind has a fixture, checked {checked}"
    );
}

#[test]
fn our_crd_is_structural_and_accepts_every_rendered_control_plane_ingress() {
    let crd = ours();
    for version in crd.served_versions() {
        let problems = crdschema::structural_problems(crd.schema(version).unwrap());
        assert!(problems.is_empty(), "not structural: {problems:#?}");
    }
    for input in inputs() {
        let text = std::fs::read_to_string(&input).unwrap();
        let from_sources = render_documents("x", &text).unwrap().objects.into_iter();
        let written = documents(&text).into_iter();
        for cpi in from_sources
            .chain(written)
            .filter(|o| o["kind"] == "ControlPlaneIngress")
        {
            check(
                &crd,
                &cpi,
                &format!("ControlPlaneIngress from {}", input.display()),
            );
        }
    }
}

/// One source of truth: the CRD's pattern and the Rust check decide alike.
#[test]
fn crd_pattern_and_render_agree_on_host_names() {
    let crd = ours();
    let hosts = [
        "api.example.com",
        "a",
        "a-b.c",
        "0.example.com",
        "xn--bcher-kva.example",
        "API.example.com",
        "api_x.example.com",
        "-api.example.com",
        "api-.example.com",
        "api..example.com",
        ".api",
        "api.",
        "",
        "a b",
        "api.example.com:443",
        "*.example.com",
    ];
    let long = format!("{}.example.com", "a".repeat(250));
    for host in hosts.iter().copied().chain([long.as_str()]) {
        let obj = json!({
            "apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
            "metadata": {"name": "t", "namespace": "ns"},
            "spec": {"clusterName": "t", "ingress": {"apiHost": host}, "backend": {"serviceName": "s", "apiPort": 443}},
        });
        let schema_ok = crd.validate_with(&obj, &Options::strict()).is_ok();
        let rust_ok = check_dns1123_subdomain(host).is_ok();
        assert_eq!(
            schema_ok, rust_ok,
            "host {host:?}: CRD says {schema_ok}, render says {rust_ok}"
        );
    }
}

/// The CEL rules in our CRD reject what `render` rejects for cross-field reasons.
#[test]
fn crd_cel_rules_reject_equal_hosts_and_gateway_without_parents() {
    let crd = ours();
    let base = |spec: serde_json::Value| {
        json!({"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
               "metadata": {"name": "t", "namespace": "ns"}, "spec": spec})
    };
    let same_hosts = base(json!({"clusterName": "t",
        "ingress": {"apiHost": "a.example.com", "konnectivityHost": "a.example.com"},
        "backend": {"serviceName": "s", "apiPort": 443, "konnectivityPort": 8132}}));
    let errors = crd
        .validate_with(&same_hosts, &Options::strict())
        .unwrap_err();
    assert!(
        errors
            .iter()
            .any(|v| v.message.contains("must differ from spec.ingress.apiHost")),
        "{errors:?}"
    );

    let gateway = base(
        json!({"clusterName": "t", "ingress": {"apiHost": "a.example.com"},
        "route": {"controller": "gateway"}, "backend": {"serviceName": "s", "apiPort": 443}}),
    );
    let errors = crd.validate_with(&gateway, &Options::strict()).unwrap_err();
    assert!(
        errors
            .iter()
            .any(|v| v.message.contains("needs at least one Gateway")),
        "{errors:?}"
    );
}
