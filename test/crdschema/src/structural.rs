//! Structural-schema checks ("Specifying a structural schema" in the Kubernetes docs)
//! plus the other openAPIV3Schema rules the API server enforces on CRDs.

use serde_json::Value;

use crate::validate::regex;

const TYPES: [&str; 6] = ["object", "array", "string", "integer", "number", "boolean"];
const SCALARS: [&str; 4] = ["string", "integer", "number", "boolean"];
const FORBIDDEN: [&str; 6] = [
    "$ref",
    "definitions",
    "id",
    "additionalItems",
    "patternProperties",
    "dependencies",
];

/// Problems that make a schema non-structural or that the API server would reject
/// when creating the CRD. Each entry is `<schema path>: <problem>`, the path in
/// object form (`.spec.ports[*].name`, `.` for the root). Empty means fine.
pub fn structural_problems(schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        out.push(".: type: must be object at the root".to_string());
    }
    node(schema, ".", true, &mut out);
    out
}

fn child(path: &str, key: &str) -> String {
    if path == "." {
        format!(".{key}")
    } else {
        format!("{path}.{key}")
    }
}

fn any(path: &str) -> String {
    if path == "." {
        "[*]".to_string()
    } else {
        format!("{path}[*]")
    }
}

fn flag(s: &Value, k: &str) -> bool {
    s.get(k).and_then(Value::as_bool) == Some(true)
}

fn ty(s: &Value) -> &str {
    s.get("type").and_then(Value::as_str).unwrap_or("")
}

/// Checks shared by structural nodes and junctor branches.
fn common(s: &Value, path: &str, out: &mut Vec<String>) {
    for k in FORBIDDEN {
        if s.get(k).is_some() {
            out.push(format!(
                "{path}: {k}: Forbidden: not allowed in CRD schemas"
            ));
        }
    }
    if flag(s, "uniqueItems") {
        out.push(format!(
            "{path}: uniqueItems: Forbidden: cannot be set to true since the runtime complexity becomes quadratic"
        ));
    }
    if let Some(p) = s.get("pattern") {
        match p.as_str() {
            Some(p) => {
                if let Err(e) = regex(p) {
                    out.push(format!("{path}: pattern: Invalid value: {p:?}: {e}"));
                }
            }
            None => out.push(format!("{path}: pattern: must be a string")),
        }
    }
    if s.get("items").is_some_and(Value::is_array) {
        out.push(format!(
            "{path}: items: Forbidden: items must be a schema object and not an array"
        ));
    }
}

fn node(s: &Value, path: &str, root: bool, out: &mut Vec<String>) {
    let Some(obj) = s.as_object() else {
        out.push(format!("{path}: must be a schema object"));
        return;
    };
    common(s, path, out);
    let t = ty(s);
    let int_or_string = flag(s, "x-kubernetes-int-or-string");
    let preserve = flag(s, "x-kubernetes-preserve-unknown-fields");
    if t.is_empty() {
        if !int_or_string && !preserve {
            out.push(format!(
                "{path}: type: Required value: must not be empty for specified fields"
            ));
        }
    } else if !TYPES.contains(&t) {
        out.push(format!("{path}: type: Unsupported value: {t:?}"));
    }
    if int_or_string && !t.is_empty() {
        out.push(format!(
            "{path}: type: Forbidden: must be empty if x-kubernetes-int-or-string is true"
        ));
    }
    if s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        out.push(format!(
            "{path}: x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined"
        ));
    }
    let props = s.get("properties").and_then(Value::as_object);
    let additional = s.get("additionalProperties");
    if props.is_some_and(|p| !p.is_empty())
        && additional.is_some_and(|a| a.is_object() || a == &Value::Bool(false))
    {
        out.push(format!(
            "{path}: additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"
        ));
    }
    if (props.is_some() || additional.is_some()) && !t.is_empty() && t != "object" {
        out.push(format!(
            "{path}: properties: Forbidden: only allowed for type object, not {t:?}"
        ));
    }
    if t == "array" && s.get("items").is_none() {
        out.push(format!(
            "{path}: items: Required value: must be specified for type array"
        ));
    }
    if s.get("items").is_some() && !t.is_empty() && t != "array" {
        out.push(format!(
            "{path}: items: Forbidden: only allowed for type array"
        ));
    }
    if flag(s, "x-kubernetes-embedded-resource") {
        if t != "object" {
            out.push(format!(
                "{path}: type: Invalid value: {t:?}: must be object if x-kubernetes-embedded-resource is true"
            ));
        }
        if props.is_none() && !preserve {
            out.push(format!(
                "{path}: properties: Required value: if x-kubernetes-embedded-resource is true, properties or x-kubernetes-preserve-unknown-fields must be set"
            ));
        }
    }
    list_type(s, path, out);
    if let Some(mt) = s.get("x-kubernetes-map-type") {
        if !matches!(mt.as_str(), Some("granular" | "atomic")) {
            out.push(format!(
                "{path}: x-kubernetes-map-type: Unsupported value: {mt}: supported values: \"atomic\", \"granular\""
            ));
        }
        if t != "object" {
            out.push(format!(
                "{path}: x-kubernetes-map-type: Invalid value: must only be used on type object"
            ));
        }
    }
    if let Some(rules) = s.get("x-kubernetes-validations") {
        match rules.as_array() {
            Some(rs) => {
                for (i, r) in rs.iter().enumerate() {
                    if r.get("rule")
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
                    {
                        out.push(format!(
                            "{path}: x-kubernetes-validations[{i}].rule: Required value"
                        ));
                    }
                }
            }
            None => out.push(format!("{path}: x-kubernetes-validations: must be a list")),
        }
    }
    // Junctor branches may only restate what the structural part already declares.
    for j in ["allOf", "anyOf", "oneOf"] {
        if let Some(bs) = obj.get(j) {
            match bs.as_array() {
                Some(bs) => {
                    for (i, b) in bs.iter().enumerate() {
                        let at = format!("{path} {j}[{i}]");
                        let int_or_string_branch = int_or_string
                            && matches!(j, "allOf" | "anyOf")
                            && b.as_object().is_some_and(|o| {
                                o.len() == 1 && matches!(ty(b), "integer" | "string")
                            });
                        if !int_or_string_branch {
                            junctor(b, s, &at, out);
                        }
                    }
                }
                None => out.push(format!("{path}: {j}: must be a list")),
            }
        }
    }
    if let Some(n) = obj.get("not") {
        junctor(n, s, &format!("{path} not"), out);
    }
    if root {
        if let Some(m) = props.and_then(|p| p.get("metadata")) {
            metadata(m, out);
        }
        if let Some(p) = props {
            for (k, ps) in p {
                if k != "metadata" {
                    node(ps, &child(path, k), false, out);
                }
            }
        }
    } else if let Some(p) = props {
        for (k, ps) in p {
            node(ps, &child(path, k), false, out);
        }
    }
    if let Some(a) = additional.filter(|a| a.is_object()) {
        node(a, &any(path), false, out);
    }
    if let Some(is) = s.get("items").filter(|i| i.is_object()) {
        node(is, &any(path), false, out);
    }
}

fn list_type(s: &Value, path: &str, out: &mut Vec<String>) {
    let lt = s.get("x-kubernetes-list-type").and_then(Value::as_str);
    let keys = s.get("x-kubernetes-list-map-keys");
    if let Some(raw) = s.get("x-kubernetes-list-type") {
        if !matches!(lt, Some("atomic" | "set" | "map")) {
            out.push(format!(
                "{path}: x-kubernetes-list-type: Unsupported value: {raw}: supported values: \"atomic\", \"map\", \"set\""
            ));
        }
        if ty(s) != "array" {
            out.push(format!(
                "{path}: x-kubernetes-list-type: Invalid value: must only be used on type array"
            ));
        }
    }
    if keys.is_some() && lt != Some("map") {
        out.push(format!(
            "{path}: x-kubernetes-list-map-keys: Forbidden: requires x-kubernetes-list-type: map"
        ));
    }
    let items = s.get("items").filter(|i| i.is_object());
    match lt {
        Some("map") => {
            let Some(is) = items else { return };
            if ty(is) != "object" {
                out.push(format!(
                    "{path}: items.type: Invalid value: must be object if x-kubernetes-list-type is map"
                ));
            }
            let keys: Vec<&str> = keys
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if keys.is_empty() {
                out.push(format!(
                    "{path}: x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"
                ));
            }
            let required: Vec<&str> = is
                .get("required")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            for k in keys {
                let Some(ks) = is.pointer(&format!("/properties/{k}")) else {
                    out.push(format!(
                        "{path}: x-kubernetes-list-map-keys: Invalid value: {k:?}: entries must all be names of item properties"
                    ));
                    continue;
                };
                let scalar = SCALARS.contains(&ty(ks)) || flag(ks, "x-kubernetes-int-or-string");
                if !scalar {
                    out.push(format!(
                        "{path}: x-kubernetes-list-map-keys: Invalid value: {k:?}: must be a scalar typed property"
                    ));
                }
                if !required.contains(&k) && ks.get("default").is_none() {
                    out.push(format!(
                        "{path}: x-kubernetes-list-map-keys: Invalid value: {k:?}: must be required or have a default"
                    ));
                }
            }
        }
        Some("set") => {
            let Some(is) = items else { return };
            let atomic = (ty(is) == "object"
                && is.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic"))
                || (ty(is) == "array"
                    && is.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("atomic"));
            if !SCALARS.contains(&ty(is)) && !flag(is, "x-kubernetes-int-or-string") && !atomic {
                out.push(format!(
                    "{path}: items: Invalid value: x-kubernetes-list-type set requires scalar or atomic items"
                ));
            }
        }
        _ => {}
    }
}

/// A branch of allOf/anyOf/oneOf/not: value validations only, each property and
/// items also declared by the structural counterpart.
fn junctor(b: &Value, counterpart: &Value, path: &str, out: &mut Vec<String>) {
    let Some(obj) = b.as_object() else {
        out.push(format!("{path}: must be a schema object"));
        return;
    };
    common(b, path, out);
    for k in obj.keys() {
        if matches!(
            k.as_str(),
            "type" | "additionalProperties" | "description" | "default" | "nullable"
        ) || k.starts_with("x-kubernetes-")
        {
            out.push(format!(
                "{path}: {k}: Forbidden: must not be used inside allOf, anyOf, oneOf or not"
            ));
        }
    }
    if let Some(p) = obj.get("properties").and_then(Value::as_object) {
        for (k, ps) in p {
            let cp = counterpart
                .pointer(&format!(
                    "/properties/{}",
                    k.replace('~', "~0").replace('/', "~1")
                ))
                .or_else(|| {
                    counterpart
                        .get("additionalProperties")
                        .filter(|a| a.is_object())
                });
            match cp {
                Some(cp) => junctor(ps, cp, &format!("{path}.{k}"), out),
                None if flag(counterpart, "x-kubernetes-preserve-unknown-fields") => {}
                None => out.push(format!(
                    "{path}.{k}: Required value: must be specified outside of allOf, anyOf, oneOf or not too"
                )),
            }
        }
    }
    if let Some(is) = obj.get("items") {
        match counterpart.get("items") {
            Some(cp) => junctor(is, cp, &format!("{path}[*]"), out),
            None => out.push(format!(
                "{path}.items: Required value: must be specified outside of allOf, anyOf, oneOf or not too"
            )),
        }
    }
    for j in ["allOf", "anyOf", "oneOf"] {
        if let Some(bs) = obj.get(j).and_then(Value::as_array) {
            for (i, nb) in bs.iter().enumerate() {
                junctor(nb, counterpart, &format!("{path} {j}[{i}]"), out);
            }
        }
    }
    if let Some(n) = obj.get("not") {
        junctor(n, counterpart, &format!("{path} not"), out);
    }
}

/// At the root, `metadata` may only restrict `name` and `generateName`.
fn metadata(m: &Value, out: &mut Vec<String>) {
    let Some(obj) = m.as_object() else {
        out.push(".metadata: must be a schema object".to_string());
        return;
    };
    for (k, v) in obj {
        match k.as_str() {
            "type" => {
                if v.as_str() != Some("object") {
                    out.push(".metadata: type: Invalid value: must be object".to_string());
                }
            }
            "description" => {}
            "properties" => {
                for (pk, ps) in v.as_object().into_iter().flatten() {
                    if pk != "name" && pk != "generateName" {
                        out.push(format!(
                            ".metadata.{pk}: Forbidden: only name and generateName may be restricted"
                        ));
                        continue;
                    }
                    if ty(ps) != "string" {
                        out.push(format!(".metadata.{pk}: type: must be string"));
                    }
                    common(ps, &format!(".metadata.{pk}"), out);
                }
            }
            _ => out.push(format!(
                ".metadata: {k}: Forbidden: only name and generateName may be restricted"
            )),
        }
    }
}
