//! The field rules themselves, defined once: the CRD schema is generated
//! from the constants here and [`super::validation`] checks objects with the
//! same constants. Apart from the ControlPlaneIngress types, which use them.

use std::fmt;

use schemars::{Schema, SchemaGenerator, json_schema};

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
