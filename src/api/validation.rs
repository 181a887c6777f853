//! Field rules of the API, defined once: the CRD schema is generated from the
//! constants in `rules`, and [`validate`] applies the same constants plus the
//! schema's own CEL rules to an object before anything is rendered.

use std::net::IpAddr;

use super::control_plane_ingress::{
    ControlPlaneIngress, ControlPlaneIngressSpec, Flavor, ParentRef,
};
pub use super::rules::*;

/// Check every field of a ControlPlaneIngress: the schema's patterns and
/// ranges first, then the CEL rules of the CRD itself.
pub fn validate(cpi: &ControlPlaneIngress) -> Result<(), FieldErrors> {
    let mut errors = check_fields(&cpi.spec);
    if errors.is_empty() {
        // The CEL rules compare fields; they are only meaningful on well-formed ones.
        if let Err(cel) = validate_cel(cpi) {
            errors.extend(cel.into_vec().into_iter().map(|e| FieldError {
                field: e.field_path.trim_start_matches('.').to_string(),
                message: e.message,
            }));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(FieldErrors(errors))
    }
}

/// The CRD's CEL rules, compiled once: generating the schema and compiling
/// its rules costs far more than evaluating them, and every reconcile validates.
static CEL_RULES: std::sync::LazyLock<kube::core::cel::CompiledSchema> =
    std::sync::LazyLock::new(|| {
        use kube::CustomResourceExt;
        let crd = ControlPlaneIngress::crd();
        let schema = crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("the derived CRD has an openAPIV3Schema");
        kube::core::cel::compile_schema(
            &serde_json::to_value(schema).expect("a CRD schema serializes"),
        )
    });

thread_local! {
    /// A CEL evaluation context with the Kubernetes functions registered; not
    /// shareable between threads, and costly enough to build once per thread.
    static CEL: kube::core::cel::Validator = kube::core::cel::Validator::new();
}

/// The same check as the derived `validate_cel`, with the rules compiled once.
fn validate_cel(cpi: &ControlPlaneIngress) -> Result<(), kube::core::cel::ValidationErrors> {
    let object = serde_json::to_value(cpi).expect("a ControlPlaneIngress serializes");
    CEL.with(|validator| validator.validate_compiled(&CEL_RULES, &object, None))
}

/// A host the shared ingress routes by SNI: a DNS-1123 subdomain that is not
/// an IP address (SNI carries host names only, and Gateway API hostnames
/// refuse addresses).
fn check_sni_host(host: &str) -> Result<(), String> {
    check_dns1123_subdomain(host)?;
    match host.parse::<IpAddr>() {
        Ok(_) => Err(format!(
            "{host:?} is an IP address: the shared ingress routes by SNI, which carries host names only"
        )),
        Err(_) => Ok(()),
    }
}

/// The TLSRoute CRD's rules for several references to one Gateway: they must
/// all name a listener the same way (sectionName and port set alike), and
/// never the same listener twice. Checked here so that a spec we accept never
/// renders a TLSRoute the API server rejects.
fn check_same_parent(earlier: &[ParentRef], parent: &ParentRef) -> Result<(), String> {
    let namespace = |p: &ParentRef| p.namespace.clone().filter(|n| !n.is_empty());
    let section = |p: &ParentRef| p.section_name.clone().filter(|s| !s.is_empty());
    let port = |p: &ParentRef| p.port.filter(|p| *p != 0);
    for (j, other) in earlier.iter().enumerate() {
        if other.name != parent.name || namespace(other) != namespace(parent) {
            continue;
        }
        if section(other).is_some() != section(parent).is_some()
            || port(other).is_some() != port(parent).is_some()
        {
            return Err(format!(
                "references Gateway {:?} like parentRefs[{j}] but names its listener differently: sectionName or port must be set alike on every reference to the same Gateway",
                parent.name
            ));
        }
        if section(other) == section(parent) && port(other) == port(parent) {
            return Err(format!(
                "repeats parentRefs[{j}]: sectionName or port must be unique when parentRefs refers to the same Gateway more than once"
            ));
        }
    }
    Ok(())
}

fn check_fields(spec: &ControlPlaneIngressSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut check = |field: &str, result: Result<(), String>| {
        if let Err(message) = result {
            errors.push(FieldError {
                field: field.to_string(),
                message,
            });
        }
    };
    check(
        "spec.clusterName",
        check_dns1123_subdomain(&spec.cluster_name),
    );
    let ingress = &spec.ingress;
    check("spec.ingress.apiHost", check_sni_host(&ingress.api_host));
    if let Some(host) = &ingress.konnectivity_host {
        check("spec.ingress.konnectivityHost", check_sni_host(host));
    }
    check("spec.ingress.port", check_port(ingress.port.into()));
    for key in ingress.annotations.keys() {
        check("spec.ingress.annotations", check_annotation_key(key));
    }
    check(
        "spec.backend.serviceName",
        check_dns1123_label(&spec.backend.service_name),
    );
    check(
        "spec.backend.apiPort",
        check_port(spec.backend.api_port.into()),
    );
    if let Some(port) = spec.backend.konnectivity_port {
        check("spec.backend.konnectivityPort", check_port(port.into()));
    }
    if spec.flavor() == Flavor::Gateway {
        let refs = spec
            .route
            .as_ref()
            .and_then(|r| r.gateway.as_ref())
            .map(|g| g.parent_refs.as_slice());
        let refs = refs.unwrap_or_default();
        for (i, parent) in refs.iter().enumerate() {
            if let Some(port) = parent.port {
                check(
                    &format!("spec.route.gateway.parentRefs[{i}].port"),
                    check_port(port.into()),
                );
            }
            check(
                &format!("spec.route.gateway.parentRefs[{i}]"),
                check_same_parent(&refs[..i], parent),
            );
        }
    }
    if let Some(proxy) = &spec.proxy {
        if let Some(address) = &proxy.advertise_address {
            check(
                "spec.proxy.advertiseAddress",
                address
                    .parse::<IpAddr>()
                    .map(drop)
                    .map_err(|_| format!("{address:?} is not an IP address")),
            );
        }
        for (i, upstream) in proxy.upstreams.iter().enumerate() {
            check(
                &format!("spec.proxy.upstreams[{i}]"),
                upstream
                    .parse::<IpAddr>()
                    .map(drop)
                    .map_err(|_| format!("{upstream:?} is not an IP address")),
            );
        }
    }
    if let Some(ccm) = &spec.ccm {
        for (i, target) in ccm.targets.iter().enumerate() {
            if !matches!(target.kind.as_str(), "Deployment" | "DaemonSet") {
                check(
                    &format!("spec.ccm.targets[{i}].kind"),
                    Err(format!(
                        "{:?} is not supported: use Deployment or DaemonSet",
                        target.kind
                    )),
                );
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ingress_host_is_a_name_never_an_address() {
        assert!(check_sni_host("api.tenant-01.example.com").is_ok());
        let err = check_sni_host("2.8.3.0").unwrap_err();
        assert!(err.contains("IP address") && err.contains("SNI"), "{err}");
    }

    fn gateway(name: &str, section: Option<&str>, port: Option<i32>) -> ParentRef {
        ParentRef {
            name: name.into(),
            namespace: None,
            section_name: section.map(String::from),
            port,
        }
    }

    #[test]
    fn several_references_to_one_gateway_must_name_distinct_listeners_alike() {
        let a = gateway("shared", Some("tls"), None);
        // Another Gateway, or another listener named the same way: fine.
        assert!(check_same_parent(std::slice::from_ref(&a), &gateway("other", None, None)).is_ok());
        assert!(
            check_same_parent(
                std::slice::from_ref(&a),
                &gateway("shared", Some("tls-2"), None)
            )
            .is_ok()
        );
        // The TLSRoute CRD rejects both of these.
        let mixed = check_same_parent(std::slice::from_ref(&a), &gateway("shared", None, None))
            .unwrap_err();
        assert!(
            mixed.contains("parentRefs[0]") && mixed.contains("alike"),
            "{mixed}"
        );
        let twice = check_same_parent(std::slice::from_ref(&a), &a).unwrap_err();
        assert!(twice.contains("repeats parentRefs[0]"), "{twice}");
        let mut other_ns = a.clone();
        other_ns.namespace = Some("gateways".into());
        assert!(check_same_parent(&[a], &other_ns).is_ok());
    }
}
