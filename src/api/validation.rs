//! Field rules of the API, defined once: the CRD schema is generated from the
//! constants here, and [`validate`] applies the same constants plus the
//! schema's own CEL rules to an object before anything is rendered.

use std::{fmt, net::IpAddr};

use schemars::{Schema, SchemaGenerator, json_schema};

use super::{ControlPlaneIngress, ControlPlaneIngressSpec, Flavor};

/// RFC 1123 subdomain, as Kubernetes spells it (lower case only).
pub const DNS1123_SUBDOMAIN_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// Longest RFC 1123 subdomain.
pub const DNS1123_SUBDOMAIN_MAX: usize = 253;
/// Longest RFC 1123 label (one dot-separated part, or a Service name).
pub const DNS1123_LABEL_MAX: usize = 63;
/// TCP ports.
pub const PORT_RANGE: std::ops::RangeInclusive<i64> = 1..=65535;

/// Schema of a host name field.
pub fn dns1123_subdomain_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "minLength": 1,
        "maxLength": DNS1123_SUBDOMAIN_MAX,
        "pattern": DNS1123_SUBDOMAIN_PATTERN,
    })
}

/// Schema of a TCP port field.
pub fn port_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "integer",
        "format": "int32",
        "minimum": PORT_RANGE.start(),
        "maximum": PORT_RANGE.end(),
    })
}

/// One invalid field: `spec.ingress.apiHost: "A_B" is not a valid ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the field, e.g. `spec.ingress.port`.
    pub field: String,
    /// What is wrong and what would be right.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Every invalid field of one object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", join(.0))]
pub struct FieldErrors(pub Vec<FieldError>);

fn join(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why `value` is not an RFC 1123 subdomain, if it is not.
pub fn check_dns1123_subdomain(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        return Err(format!(
            "{value:?} is longer than {DNS1123_SUBDOMAIN_MAX} characters"
        ));
    }
    for label in value.split('.') {
        check_dns1123_label_chars(label).map_err(|why| {
            format!("{value:?} is not a valid RFC 1123 host name ({why}; lower-case letters, digits, '-' and '.' only)")
        })?;
    }
    Ok(())
}

/// Why `value` is not an RFC 1123 label (a Service name), if it is not.
pub fn check_dns1123_label(value: &str) -> Result<(), String> {
    if value.len() > DNS1123_LABEL_MAX {
        return Err(format!(
            "{value:?} is longer than {DNS1123_LABEL_MAX} characters"
        ));
    }
    check_dns1123_label_chars(value)
        .map_err(|why| format!("{value:?} is not a valid RFC 1123 label ({why})"))
}

fn check_dns1123_label_chars(label: &str) -> Result<(), String> {
    let bytes = label.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return Err("empty label".into());
    };
    if let Some(bad) = label
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Err(format!("character {bad:?} is not allowed"));
    }
    if *first == b'-' || *last == b'-' {
        return Err("must start and end with a letter or digit".into());
    }
    Ok(())
}

/// Why `port` is not a TCP port, if it is not.
pub fn check_port(port: i64) -> Result<(), String> {
    if PORT_RANGE.contains(&port) {
        Ok(())
    } else {
        Err(format!(
            "{port} is out of range {}-{}",
            PORT_RANGE.start(),
            PORT_RANGE.end()
        ))
    }
}

/// Why `key` is not a valid annotation key (`[prefix/]name`), if it is not.
pub fn check_annotation_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        check_dns1123_subdomain(prefix)
            .map_err(|why| format!("annotation key {key:?}: prefix {why}"))?;
    }
    let valid_name = !name.is_empty()
        && name.len() <= DNS1123_LABEL_MAX
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid_name {
        Ok(())
    } else {
        Err(format!(
            "annotation key {key:?} is invalid: the name part must be 1-63 characters of [A-Za-z0-9-_.], starting and ending with a letter or digit"
        ))
    }
}

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
    check(
        "spec.ingress.apiHost",
        check_dns1123_subdomain(&ingress.api_host),
    );
    if let Some(host) = &ingress.konnectivity_host {
        check(
            "spec.ingress.konnectivityHost",
            check_dns1123_subdomain(host),
        );
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
        for (i, parent) in refs.unwrap_or_default().iter().enumerate() {
            if let Some(port) = parent.port {
                check(
                    &format!("spec.route.gateway.parentRefs[{i}].port"),
                    check_port(port.into()),
                );
            }
        }
    }
    if let Some(proxy) = &spec.proxy {
        check(
            "spec.proxy.advertiseAddress",
            proxy
                .advertise_address
                .parse::<IpAddr>()
                .map(drop)
                .map_err(|_| format!("{:?} is not an IP address", proxy.advertise_address)),
        );
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
