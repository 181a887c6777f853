//! How lists and maps merge: the list types of the core kinds (the
//! `patchMergeKey`/`listMapKey` markers of the Kubernetes Go types) and, for
//! CRDs, `x-kubernetes-list-type` / `x-kubernetes-list-map-keys` /
//! `x-kubernetes-map-type` from the OpenAPI schema.

use serde_json::Value;

/// How a list merges under server-side apply and strategic merge patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// Replaced as a whole, owned as one field.
    Atomic,
    /// A set of scalars, each owned separately.
    Set,
    /// Items identified by these key fields, each merged separately.
    Map(Vec<String>),
}

/// Type information for one kind: the core table, or a CRD version's schema.
#[derive(Debug, Clone, Copy, Default)]
pub struct TypeInfo<'a> {
    schema: Option<&'a Value>,
}

impl<'a> TypeInfo<'a> {
    /// Type information from a CRD's `openAPIV3Schema`, or the core table when `None`.
    pub fn new(schema: Option<&'a Value>) -> Self {
        Self { schema }
    }

    /// The list type at `path` (field names only, list items skipped).
    pub fn list_type(&self, path: &[String]) -> ListType {
        if path.first().map(String::as_str) != Some("metadata")
            && let Some(schema) = self.schema
        {
            return match self.node(schema, path) {
                Some(node) => schema_list_type(node),
                None => ListType::Atomic,
            };
        }
        core_list_type(path)
    }

    /// Whether the object at `path` is atomic (replaced and owned whole).
    pub fn atomic_map(&self, path: &[String]) -> bool {
        if path.first().map(String::as_str) != Some("metadata")
            && let Some(schema) = self.schema
        {
            return self
                .node(schema, path)
                .and_then(|n| n.get("x-kubernetes-map-type"))
                .and_then(Value::as_str)
                == Some("atomic");
        }
        // LabelSelectors are `+structType=atomic` in the core types.
        matches!(path.last().map(String::as_str), Some("selector"))
            && path.len() == 2
            && path[0] == "spec"
            || matches!(path.last().map(String::as_str), Some("nodeSelector"))
    }

    /// Walks the schema along the field names, stepping into array items.
    fn node(&self, schema: &'a Value, path: &[String]) -> Option<&'a Value> {
        let mut node = schema;
        for field in path {
            node = items(node);
            node = match node.get("properties").and_then(|p| p.get(field)) {
                Some(n) => n,
                None => node.get("additionalProperties").filter(|a| a.is_object())?,
            };
        }
        Some(node)
    }
}

fn items(node: &Value) -> &Value {
    match node.get("items") {
        Some(i) if node.get("type").and_then(Value::as_str) == Some("array") => i,
        _ => node,
    }
}

fn schema_list_type(node: &Value) -> ListType {
    match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => ListType::Set,
        Some("map") => {
            let keys = node
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| {
                    k.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            ListType::Map(keys)
        }
        // Lists without a marker are atomic in structural schemas.
        _ => ListType::Atomic,
    }
}

/// The merge keys of the core Kubernetes types the project uses.
fn core_list_type(path: &[String]) -> ListType {
    let keys = |k: &[&str]| ListType::Map(k.iter().map(|s| s.to_string()).collect());
    let last = path.last().map(String::as_str).unwrap_or_default();
    let in_container = path
        .iter()
        .any(|p| p == "containers" || p == "initContainers" || p == "ephemeralContainers");
    match last {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets" => keys(&["name"]),
        "ports" if in_container => keys(&["containerPort", "protocol"]),
        "ports" => keys(&["port", "protocol"]),
        "volumeMounts" => keys(&["mountPath"]),
        "volumeDevices" => keys(&["devicePath"]),
        "hostAliases" => keys(&["ip"]),
        "topologySpreadConstraints" => keys(&["topologyKey", "whenUnsatisfiable"]),
        "conditions" => keys(&["type"]),
        "ownerReferences" => keys(&["uid"]),
        "finalizers" => ListType::Set,
        _ => ListType::Atomic,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(s: &str) -> Vec<String> {
        s.split('.').map(String::from).collect()
    }

    #[test]
    fn core_merge_keys_follow_the_go_type_markers() {
        let t = TypeInfo::default();
        assert_eq!(
            t.list_type(&p("spec.template.spec.containers")),
            ListType::Map(vec!["name".into()])
        );
        assert_eq!(
            t.list_type(&p("spec.template.spec.containers.env")),
            ListType::Map(vec!["name".into()])
        );
        assert_eq!(
            t.list_type(&p("spec.template.spec.tolerations")),
            ListType::Atomic
        );
        assert_eq!(t.list_type(&p("metadata.finalizers")), ListType::Set);
        assert_eq!(
            t.list_type(&p("spec.ports")),
            ListType::Map(vec!["port".into(), "protocol".into()])
        );
    }

    #[test]
    fn crd_list_types_come_from_the_schema_extensions() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "hosts": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "routes": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {"rules": {"type": "array", "items": {"type": "string"}}}}},
        }}}});
        let t = TypeInfo::new(Some(&schema));
        assert_eq!(t.list_type(&p("spec.hosts")), ListType::Set);
        assert_eq!(
            t.list_type(&p("spec.routes")),
            ListType::Map(vec!["name".into()])
        );
        assert_eq!(t.list_type(&p("spec.routes.rules")), ListType::Atomic);
        assert_eq!(t.list_type(&p("metadata.finalizers")), ListType::Set);
    }
}
