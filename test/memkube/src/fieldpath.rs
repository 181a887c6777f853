//! Field paths and field sets as server-side apply uses them, and their
//! `FieldsV1` encoding (`f:name`, `k:{"name":"x"}`, `v:"x"`, `.`).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::typeinfo::{ListType, TypeInfo};

/// A path of encoded elements, for example `["f:spec", "f:containers", "k:{\"name\":\"a\"}"]`.
pub type Path = Vec<String>;

/// A set of owned fields.
pub type FieldSet = BTreeSet<Path>;

/// Fields the server owns itself and never records in managedFields.
const RESET_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// The key element for a list-map item, or an error if it has no key field.
pub fn key_element(item: &Value, keys: &[String]) -> Option<String> {
    let mut m = Map::new();
    let mut sorted = keys.to_vec();
    sorted.sort();
    for k in &sorted {
        if let Some(v) = item.get(k) {
            m.insert(k.clone(), v.clone());
        }
    }
    if m.is_empty() {
        return None;
    }
    Some(format!("k:{}", Value::Object(m)))
}

/// The set of leaf fields (and list-map items) present in `obj`.
pub fn collect(obj: &Value, ti: &TypeInfo) -> ApiResult<FieldSet> {
    let mut out = FieldSet::new();
    let Some(map) = obj.as_object() else {
        return Ok(out);
    };
    for (k, v) in map {
        if k == "apiVersion" || k == "kind" {
            continue;
        }
        if k == "metadata" {
            let Some(meta) = v.as_object() else { continue };
            for (mk, mv) in meta {
                if RESET_METADATA.contains(&mk.as_str()) {
                    continue;
                }
                walk(
                    mv,
                    &mut vec!["f:metadata".into(), format!("f:{mk}")],
                    &mut vec!["metadata".into(), mk.clone()],
                    ti,
                    &mut out,
                )?;
            }
            continue;
        }
        walk(
            v,
            &mut vec![format!("f:{k}")],
            &mut vec![k.clone()],
            ti,
            &mut out,
        )?;
    }
    Ok(out)
}

fn walk(
    v: &Value,
    path: &mut Path,
    names: &mut Vec<String>,
    ti: &TypeInfo,
    out: &mut FieldSet,
) -> ApiResult<()> {
    match v {
        Value::Object(m) if !m.is_empty() && !ti.atomic_map(names) => {
            for (k, child) in m {
                path.push(format!("f:{k}"));
                names.push(k.clone());
                walk(child, path, names, ti, out)?;
                names.pop();
                path.pop();
            }
        }
        Value::Array(items) => match ti.list_type(names) {
            ListType::Map(keys) => {
                for item in items {
                    let el = key_element(item, &keys).ok_or_else(|| {
                        ApiError::invalid(
                            "",
                            "",
                            "",
                            vec![(names.join("."), format!("associative list with keys {keys:?} has an element that omits all key fields"))],
                        )
                    })?;
                    path.push(el);
                    out.insert(path.clone());
                    if let Value::Object(m) = item {
                        for (k, child) in m {
                            path.push(format!("f:{k}"));
                            names.push(k.clone());
                            walk(child, path, names, ti, out)?;
                            names.pop();
                            path.pop();
                        }
                    }
                    path.pop();
                }
            }
            ListType::Set => {
                for item in items {
                    path.push(format!("v:{item}"));
                    out.insert(path.clone());
                    path.pop();
                }
            }
            ListType::Atomic => {
                out.insert(path.clone());
            }
        },
        _ => {
            out.insert(path.clone());
        }
    }
    Ok(())
}

/// The value at `path`, if present.
pub fn get<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = obj;
    for el in path {
        cur = step(cur, el)?;
    }
    Some(cur)
}

fn step<'a>(cur: &'a Value, el: &str) -> Option<&'a Value> {
    if let Some(f) = el.strip_prefix("f:") {
        return cur.as_object()?.get(f);
    }
    let items = cur.as_array()?;
    if let Some(k) = el.strip_prefix("k:") {
        let key: Map<String, Value> = serde_json::from_str(k).ok()?;
        return items
            .iter()
            .find(|i| key.iter().all(|(kk, kv)| i.get(kk) == Some(kv)));
    }
    if let Some(v) = el.strip_prefix("v:") {
        let want: Value = serde_json::from_str(v).ok()?;
        return items.iter().find(|i| **i == want);
    }
    None
}

/// Removes the field or list item at `path`; a missing path is a no-op.
pub fn remove(obj: &mut Value, path: &[String]) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for el in parent_path {
        let next = match el.strip_prefix("f:") {
            Some(f) => cur.as_object_mut().and_then(|m| m.get_mut(f)),
            None => {
                let idx = index_of(cur, el);
                match (idx, cur.as_array_mut()) {
                    (Some(i), Some(a)) => a.get_mut(i),
                    _ => None,
                }
            }
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    if let Some(f) = last.strip_prefix("f:") {
        if let Some(m) = cur.as_object_mut() {
            m.remove(f);
        }
    } else if let Some(i) = index_of(cur, last)
        && let Some(a) = cur.as_array_mut()
    {
        a.remove(i);
    }
}

fn index_of(list: &Value, el: &str) -> Option<usize> {
    let target = step(list, el)? as *const Value;
    list.as_array()?
        .iter()
        .position(|i| std::ptr::eq(i, target))
}

/// Encodes a field set as `fieldsV1`.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut node = &mut root;
        for el in path {
            let child = node
                .entry(el.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            node = match child {
                Value::Object(m) => m,
                _ => unreachable!("fieldsV1 nodes are objects"),
            };
        }
    }
    // A member that also has members below it is marked with ".".
    fn mark(node: &mut Map<String, Value>, members: &FieldSet, prefix: &mut Path) {
        for (k, v) in node.iter_mut() {
            if k == "." {
                continue;
            }
            prefix.push(k.clone());
            if let Value::Object(child) = v {
                if !child.is_empty() && members.contains(prefix) {
                    child.insert(".".into(), Value::Object(Map::new()));
                }
                mark(child, members, prefix);
            }
            prefix.pop();
        }
    }
    mark(&mut root, set, &mut Vec::new());
    Value::Object(root)
}

/// Decodes `fieldsV1` into a field set.
pub fn from_fields_v1(v: &Value) -> FieldSet {
    fn rec(node: &Map<String, Value>, prefix: &mut Path, out: &mut FieldSet) {
        for (k, child) in node {
            if k == "." {
                out.insert(prefix.clone());
                continue;
            }
            prefix.push(k.clone());
            match child.as_object() {
                Some(c) if !c.is_empty() => rec(c, prefix, out),
                _ => {
                    out.insert(prefix.clone());
                }
            }
            prefix.pop();
        }
    }
    let mut out = FieldSet::new();
    if let Some(m) = v.as_object() {
        rec(m, &mut Vec::new(), &mut out);
    }
    out
}

/// `.spec.containers[name="a"].image`, as the API server prints paths in conflicts.
pub fn display(path: &[String]) -> String {
    let mut s = String::new();
    for el in path {
        if let Some(f) = el.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = el.strip_prefix("k:") {
            let key: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
            let parts: Vec<String> = key.iter().map(|(k, v)| format!("{k}={v}")).collect();
            s.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(v) = el.strip_prefix("v:") {
            s.push_str(&format!("[{v}]"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_v1_round_trips_with_dot_members() {
        let obj = json!({"spec": {"containers": [{"name": "a", "image": "x", "env": [{"name": "E", "value": "1"}]}]},
            "metadata": {"name": "n", "labels": {"l": "1"}, "finalizers": ["f"]}});
        let set = collect(&obj, &TypeInfo::default()).unwrap();
        let enc = to_fields_v1(&set);
        assert_eq!(
            enc["f:spec"]["f:containers"]["k:{\"name\":\"a\"}"]["."],
            json!({})
        );
        assert_eq!(enc["f:metadata"]["f:finalizers"]["v:\"f\""], json!({}));
        assert!(
            enc["f:metadata"].get("f:name").is_none(),
            "metadata.name is never managed"
        );
        assert_eq!(from_fields_v1(&enc), set);
    }

    #[test]
    fn get_and_remove_address_list_items_by_key() {
        let mut obj = json!({"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]});
        let p: Path = vec![
            "f:env".into(),
            "k:{\"name\":\"B\"}".into(),
            "f:value".into(),
        ];
        assert_eq!(get(&obj, &p), Some(&json!("2")));
        remove(&mut obj, &p[..2]);
        assert_eq!(obj, json!({"env": [{"name": "A", "value": "1"}]}));
    }
}
