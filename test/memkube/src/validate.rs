//! Checks every real API server makes on every write, whatever the kind, and
//! a few kind-specific ones our clients meet: label and annotation syntax,
//! the events.k8s.io Event limits, and the keys of a `kubernetes.io/tls`
//! Secret. Each rejection is a 422 Invalid in the API server's own words,
//! because memkube once accepted what every real server rejects.

use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::registry::ResourceSpec;

/// Longest label value and name part of a qualified name.
const NAME_MAX: usize = 63;
/// Longest DNS-1123 subdomain (the prefix of a qualified name).
const PREFIX_MAX: usize = 253;
/// Total size of a object's annotations, keys and values.
const ANNOTATIONS_MAX: usize = 256 * 1024;
/// events.k8s.io/v1 `note`, in bytes.
pub const EVENT_NOTE_MAX: usize = 1024;
/// events.k8s.io/v1 `reason` and `action`.
pub const EVENT_REASON_MAX: usize = 128;

const LABEL_VALUE_MESSAGE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const QUALIFIED_NAME_MESSAGE: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')";

/// Every check that applies to `obj` of `spec`.
pub fn object(spec: &ResourceSpec, obj: &Value) -> ApiResult<()> {
    let mut causes = Vec::new();
    let meta = &obj["metadata"];
    if let Some(labels) = meta["labels"].as_object() {
        for (key, value) in labels {
            if !qualified_name(key) {
                causes.push((
                    "metadata.labels".to_string(),
                    format!("Invalid value: {key:?}: {QUALIFIED_NAME_MESSAGE}"),
                ));
            }
            let value = value.as_str().unwrap_or_default();
            if !label_value(value) {
                let why = if value.len() > NAME_MAX {
                    format!("must be no more than {NAME_MAX} characters")
                } else {
                    LABEL_VALUE_MESSAGE.to_string()
                };
                causes.push((
                    "metadata.labels".to_string(),
                    format!("Invalid value: {value:?}: {why}"),
                ));
            }
        }
    }
    if let Some(annotations) = meta["annotations"].as_object() {
        let mut total = 0;
        for (key, value) in annotations {
            total += key.len() + value.as_str().map_or(0, str::len);
            if !qualified_name(&key.to_lowercase()) {
                causes.push((
                    "metadata.annotations".to_string(),
                    format!("Invalid value: {key:?}: {QUALIFIED_NAME_MESSAGE}"),
                ));
            }
        }
        if total > ANNOTATIONS_MAX {
            causes.push((
                "metadata.annotations".to_string(),
                format!("Too long: may not be more than {ANNOTATIONS_MAX} bytes"),
            ));
        }
    }
    if spec.group == "events.k8s.io" && spec.plural == "events" {
        // The API server converts to core Events before validating: the note
        // is reported as `message`.
        let note = obj["note"].as_str().unwrap_or_default();
        if note.len() > EVENT_NOTE_MAX {
            causes.push((
                "message".to_string(),
                format!("Invalid value: \"\": can have at most {EVENT_NOTE_MAX} characters"),
            ));
        }
        for field in ["reason", "action"] {
            let text = obj[field].as_str().unwrap_or_default();
            if text.len() > EVENT_REASON_MAX {
                causes.push((
                    field.to_string(),
                    format!("Invalid value: \"\": can have at most {EVENT_REASON_MAX} characters"),
                ));
            }
        }
    }
    if spec.group.is_empty() && spec.plural == "secrets" && obj["type"] == "kubernetes.io/tls" {
        for key in ["tls.crt", "tls.key"] {
            if obj["data"].get(key).is_none() {
                causes.push((format!("data[{key}]"), "Required value".to_string()));
            }
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    let name = meta["name"].as_str().unwrap_or_default();
    Err(ApiError::invalid(&spec.kind, &spec.group, name, causes))
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters.
fn name_part(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= NAME_MAX
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A label value: empty, or a name part.
fn label_value(s: &str) -> bool {
    s.is_empty() || name_part(s)
}

/// `[prefix/]name`, the prefix a lowercase DNS-1123 subdomain.
fn qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        None => name_part(s),
        Some((prefix, name)) => {
            !prefix.is_empty()
                && prefix.len() <= PREFIX_MAX
                && prefix.split('.').all(|label| {
                    let b = label.as_bytes();
                    !b.is_empty()
                        && b.len() <= NAME_MAX
                        && b[0].is_ascii_alphanumeric()
                        && b[b.len() - 1].is_ascii_alphanumeric()
                        && b.iter()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                })
                && name_part(name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_and_keys_as_kubernetes_checks_them() {
        assert!(label_value(""));
        assert!(label_value("controller.hcp-ingress.dev"));
        assert!(!label_value("hcp-ingress.dev/controller"));
        assert!(!label_value("-a"));
        assert!(!label_value(&"a".repeat(64)));
        assert!(qualified_name("endpointslice.kubernetes.io/managed-by"));
        assert!(qualified_name("app"));
        assert!(!qualified_name("Example.com/x"));
        assert!(!qualified_name("a/b/c"));
        assert!(!qualified_name("/x"));
    }
}
