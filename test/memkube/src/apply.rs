//! Server-side apply and managed fields, and the patch formats
//! (JSON merge patch, strategic merge patch, JSON patch).
//!
//! Field ownership follows the API server's structured-merge-diff: every
//! manager owns a set of leaf fields; an apply owns exactly the fields of its
//! configuration, conflicts with other managers whose fields it would change,
//! and removes the fields it applied before and no longer applies unless
//! someone else owns them. Updates (create, update, patch) take ownership of
//! the fields they change.

use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult};
use crate::fieldpath::{self, FieldSet, key_element};
use crate::typeinfo::{ListType, TypeInfo};

/// Who writes and how, for the managedFields entry.
#[derive(Debug, Clone)]
pub struct Writer<'a> {
    /// Field manager name.
    pub manager: &'a str,
    /// `apiVersion` the request used.
    pub api_version: &'a str,
    /// `status` for writes to the status subresource.
    pub subresource: Option<&'a str>,
    /// RFC 3339 time of the write.
    pub now: &'a str,
}

/// One `metadata.managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: Option<String>,
    set: FieldSet,
}

impl Entry {
    fn is(&self, w: &Writer, operation: &str) -> bool {
        self.manager == w.manager
            && self.operation == operation
            && self.subresource.as_deref() == w.subresource
    }
}

fn read_entries(obj: &Value) -> Vec<Entry> {
    let Some(list) = obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    list.iter()
        .map(|e| Entry {
            manager: str_of(e, "manager"),
            operation: str_of(e, "operation"),
            api_version: str_of(e, "apiVersion"),
            time: str_of(e, "time"),
            subresource: e
                .get("subresource")
                .and_then(Value::as_str)
                .map(String::from),
            set: e
                .get("fieldsV1")
                .map(fieldpath::from_fields_v1)
                .unwrap_or_default(),
        })
        .collect()
}

fn str_of(v: &Value, k: &str) -> String {
    v.get(k)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn write_entries(obj: &mut Value, entries: Vec<Entry>) {
    let list: Vec<Value> = entries
        .into_iter()
        .filter(|e| !e.set.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": fieldpath::to_fields_v1(&e.set),
            });
            if let Some(s) = e.subresource {
                v["subresource"] = json!(s);
            }
            v
        })
        .collect();
    if list.is_empty() && obj.get("metadata").is_none() {
        return;
    }
    if let Some(meta) = obj.as_object_mut().and_then(|o| {
        o.entry("metadata")
            .or_insert_with(|| json!({}))
            .as_object_mut()
    }) {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

fn upsert(entries: &mut Vec<Entry>, w: &Writer, operation: &str, set: FieldSet) {
    match entries.iter_mut().find(|e| e.is(w, operation)) {
        Some(e) => {
            if e.set != set || e.api_version != w.api_version {
                e.time = w.now.to_string();
            }
            e.set = set;
            e.api_version = w.api_version.to_string();
        }
        None => entries.push(Entry {
            manager: w.manager.to_string(),
            operation: operation.to_string(),
            api_version: w.api_version.to_string(),
            time: w.now.to_string(),
            subresource: w.subresource.map(String::from),
            set,
        }),
    }
}

/// Server-side apply of `config` onto `live` (or onto nothing, creating).
///
/// `config` must already be limited to what the endpoint may change (no
/// status on the main resource of a kind with a status subresource). The
/// result carries the new managedFields; the caller fills in server fields.
pub fn apply(
    live: Option<&Value>,
    config: &Value,
    w: &Writer,
    force: bool,
    ti: &TypeInfo,
) -> ApiResult<Value> {
    let mut entries = live.map(read_entries).unwrap_or_default();
    let applied = fieldpath::collect(config, ti)?;
    let empty = Value::Null;
    let live_v = live.unwrap_or(&empty);

    let mut conflicts: Vec<(String, String, String)> = Vec::new();
    for e in entries.iter_mut().filter(|e| !e.is(w, "Apply")) {
        let clashing: Vec<_> = e
            .set
            .intersection(&applied)
            .filter(|p| {
                // Keyed items themselves never conflict, only their fields.
                !p.last().is_some_and(|l| l.starts_with("k:"))
                    && fieldpath::get(live_v, p).is_some()
                    && fieldpath::get(live_v, p) != fieldpath::get(config, p)
            })
            .cloned()
            .collect();
        for p in clashing {
            if force {
                e.set.remove(&p);
            } else {
                conflicts.push((
                    e.manager.clone(),
                    e.api_version.clone(),
                    fieldpath::display(&p),
                ));
            }
        }
    }
    if !conflicts.is_empty() {
        return Err(conflict_error(conflicts));
    }

    let mut obj = live.cloned().unwrap_or_else(|| json!({}));
    strip_managed(&mut obj);
    merge(&mut obj, config, &mut Vec::new(), ti);

    // Fields this manager applied before, no longer applies, and nobody else owns go away.
    if let Some(mine) = entries.iter().find(|e| e.is(w, "Apply")) {
        let others: FieldSet = entries
            .iter()
            .filter(|e| !e.is(w, "Apply"))
            .flat_map(|e| e.set.iter().cloned())
            .collect();
        let mut gone: Vec<_> = mine
            .set
            .difference(&applied)
            .filter(|p| !others.contains(*p))
            .cloned()
            .collect();
        // Items before their fields: a keyed item is addressed by its key fields.
        gone.sort_by_key(|p| p.len());
        for p in gone {
            // Keep a keyed item whose other fields someone else still owns,
            // and the key fields of an item that stays.
            let kept_below = others
                .iter()
                .any(|o| o.len() > p.len() && o.starts_with(&p));
            if !kept_below && !is_key_field(&p) {
                fieldpath::remove(&mut obj, &p);
            }
        }
    }
    upsert(&mut entries, w, "Apply", applied);
    write_entries(&mut obj, entries);
    Ok(obj)
}

/// Whether `path` ends in one of the key fields of the keyed item it is in.
fn is_key_field(path: &[String]) -> bool {
    let [.., item, field] = path else {
        return false;
    };
    let (Some(key), Some(field)) = (item.strip_prefix("k:"), field.strip_prefix("f:")) else {
        return false;
    };
    serde_json::from_str::<Map<String, Value>>(key).is_ok_and(|k| k.contains_key(field))
}

fn conflict_error(conflicts: Vec<(String, String, String)>) -> ApiError {
    let n = conflicts.len();
    let lines: Vec<String> = conflicts
        .iter()
        .map(|(m, v, f)| format!("conflict with \"{m}\" using {v}: {f}"))
        .collect();
    let message = if n == 1 {
        format!("Apply failed with 1 conflict: {}", lines[0])
    } else {
        format!("Apply failed with {n} conflicts: {}", lines.join("\n"))
    };
    let causes: Vec<Value> = conflicts
        .into_iter()
        .map(|(m, v, f)| json!({"reason": "FieldManagerConflict", "message": format!("conflict with \"{m}\" using {v}"), "field": f}))
        .collect();
    ApiError {
        code: 409,
        reason: "Conflict",
        message,
        details: Some(json!({"causes": causes})),
    }
}

fn strip_managed(obj: &mut Value) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
}

/// Records ownership for a non-apply write (create, update, patch): the
/// writer takes the fields whose values changed, other managers lose them.
pub fn track_update(
    old: Option<&Value>,
    new: &mut Value,
    w: &Writer,
    ti: &TypeInfo,
) -> ApiResult<()> {
    let mut entries = old.map(read_entries).unwrap_or_default();
    let new_set = fieldpath::collect(new, ti)?;
    let changed: FieldSet = new_set
        .iter()
        .filter(|p| old.is_none_or(|o| fieldpath::get(o, p) != fieldpath::get(new, p)))
        .cloned()
        .collect();
    for e in entries.iter_mut() {
        let before = e.set.len();
        e.set
            .retain(|p| new_set.contains(p) && !changed.contains(p));
        if e.set.len() != before {
            e.time = w.now.to_string();
        }
    }
    if !changed.is_empty() {
        let mut mine = entries
            .iter()
            .find(|e| e.is(w, "Update"))
            .map(|e| e.set.clone())
            .unwrap_or_default();
        mine.extend(changed);
        upsert(&mut entries, w, "Update", mine);
    }
    write_entries(new, entries);
    Ok(())
}

/// Merges an applied configuration into an object: maps field by field,
/// list-maps item by key, sets by value, everything else replaced.
fn merge(target: &mut Value, config: &Value, names: &mut Vec<String>, ti: &TypeInfo) {
    match (target, config) {
        (Value::Object(t), Value::Object(c)) if !ti.atomic_map(names) => {
            for (k, v) in c {
                names.push(k.clone());
                match t.get_mut(k) {
                    Some(existing) if !v.is_null() => merge(existing, v, names, ti),
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
                names.pop();
            }
        }
        (Value::Array(t), Value::Array(c)) => match ti.list_type(names) {
            ListType::Map(keys) => {
                for item in c {
                    let key = key_element(item, &keys);
                    match t
                        .iter_mut()
                        .find(|i| key.is_some() && key_element(i, &keys) == key)
                    {
                        Some(existing) => merge(existing, item, names, ti),
                        None => t.push(item.clone()),
                    }
                }
            }
            ListType::Set => {
                for item in c {
                    if !t.contains(item) {
                        t.push(item.clone());
                    }
                }
            }
            ListType::Atomic => *t = c.clone(),
        },
        (t, c) => *t = c.clone(),
    }
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// RFC 6902 JSON patch.
pub fn json_patch(target: &mut Value, patch: &Value) -> ApiResult<()> {
    let invalid = |e: String| {
        ApiError::new(
            422,
            "Invalid",
            format!("the server rejected our request due to an error in our request: {e}"),
        )
    };
    let ops = patch.as_array().ok_or_else(|| {
        ApiError::bad_request("failed to decode json patch: not a list".to_string())
    })?;
    // Operation by operation, as the API server's json-patch library does: a
    // `test` for `null` passes on an absent path (kube-runtime's finalizer
    // helper relies on it to add the first finalizer).
    let mut patched = target.clone();
    for op in ops {
        if op.get("op").and_then(Value::as_str) == Some("test")
            && op.get("value") == Some(&Value::Null)
        {
            let path = op.get("path").and_then(Value::as_str).unwrap_or_default();
            match patched.pointer(path) {
                None | Some(Value::Null) => continue,
                Some(other) => {
                    return Err(invalid(format!("test failed at {path}: found {other}")));
                }
            }
        }
        let one: json_patch::Patch = serde_json::from_value(Value::Array(vec![op.clone()]))
            .map_err(|e| ApiError::bad_request(format!("failed to decode json patch: {e}")))?;
        json_patch::patch(&mut patched, &one).map_err(|e| invalid(e.to_string()))?;
    }
    *target = patched;
    Ok(())
}

/// Strategic merge patch with the core merge keys and the `$patch`,
/// `$deleteFromPrimitiveList` and `$setElementOrder` directives.
pub fn strategic_merge(target: &mut Value, patch: &Value, ti: &TypeInfo) {
    smp(target, patch, &mut Vec::new(), ti);
}

fn smp(target: &mut Value, patch: &Value, names: &mut Vec<String>, ti: &TypeInfo) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        *target = strip_directives(patch);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return };
    for (k, v) in p {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Some(del)) = (t.get_mut(field), v.as_array()) {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        names.push(k.clone());
        match v {
            Value::Null => {
                t.remove(k);
            }
            Value::Object(_) if v.get("$patch").and_then(Value::as_str) == Some("delete") => {
                t.remove(k);
            }
            Value::Object(_) => smp(t.entry(k.clone()).or_insert(Value::Null), v, names, ti),
            Value::Array(items) => {
                let existing = t
                    .entry(k.clone())
                    .or_insert_with(|| Value::Array(Vec::new()));
                smp_list(existing, items, names, ti);
            }
            _ => {
                t.insert(k.clone(), v.clone());
            }
        }
        names.pop();
    }
}

fn smp_list(target: &mut Value, items: &[Value], names: &mut Vec<String>, ti: &TypeInfo) {
    match ti.list_type(names) {
        ListType::Map(keys) => {
            if !target.is_array() {
                *target = Value::Array(Vec::new());
            }
            let Value::Array(t) = target else { return };
            if items
                .iter()
                .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
            {
                *t = items
                    .iter()
                    .filter(|i| i.get("$patch").is_none())
                    .map(strip_directives)
                    .collect();
                return;
            }
            for item in items {
                let key = key_element(item, &keys);
                let pos = t
                    .iter()
                    .position(|i| key.is_some() && key_element(i, &keys) == key);
                let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                match (pos, delete) {
                    (Some(i), true) => {
                        t.remove(i);
                    }
                    (None, true) => {}
                    (Some(i), false) => smp(&mut t[i], item, names, ti),
                    (None, false) => t.push(strip_directives(item)),
                }
            }
        }
        ListType::Set => {
            if !target.is_array() {
                *target = Value::Array(Vec::new());
            }
            let Value::Array(t) = target else { return };
            for item in items {
                if !t.contains(item) {
                    t.push(item.clone());
                }
            }
        }
        ListType::Atomic => *target = Value::Array(items.iter().map(strip_directives).collect()),
    }
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(manager: &str) -> Writer<'_> {
        Writer {
            manager,
            api_version: "v1",
            subresource: None,
            now: "2026-01-01T00:00:00Z",
        }
    }

    #[test]
    fn strategic_merge_patch_merges_containers_by_name_and_honours_delete() {
        let mut t = json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]}});
        let p = json!({"spec": {"containers": [{"name": "a", "image": "3"}, {"name": "b", "$patch": "delete"}]}});
        strategic_merge(&mut t, &p, &TypeInfo::default());
        assert_eq!(
            t,
            json!({"spec": {"containers": [{"name": "a", "image": "3"}]}})
        );
    }

    #[test]
    fn json_patch_rfc6902_applies_operations() {
        let mut t = json!({"data": {"x": "1"}});
        json_patch(&mut t, &json!([{"op": "replace", "path": "/data/x", "value": "2"}, {"op": "add", "path": "/data/y", "value": "3"}])).unwrap();
        assert_eq!(t, json!({"data": {"x": "2", "y": "3"}}));
        assert_eq!(
            json_patch(
                &mut t,
                &json!([{"op": "test", "path": "/data/x", "value": "9"}])
            )
            .unwrap_err()
            .code,
            422
        );
    }

    /// RFC 6902 as the API server implements it: `test` for null passes on an absent path.
    #[test]
    fn json_patch_test_for_null_passes_on_an_absent_path() {
        let mut t = json!({"metadata": {"name": "a"}});
        json_patch(
            &mut t,
            &json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
                    {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}]),
        )
        .unwrap();
        assert_eq!(t["metadata"]["finalizers"], json!(["f"]));
        let err = json_patch(
            &mut t,
            &json!([{"op": "test", "path": "/metadata/finalizers", "value": null}]),
        );
        assert_eq!(err.unwrap_err().code, 422, "present and not null");
    }

    #[test]
    fn apply_conflicts_only_on_fields_with_different_values() {
        let cfg = json!({"data": {"a": "1"}});
        let live = apply(None, &cfg, &w("one"), false, &TypeInfo::default()).unwrap();
        assert!(
            apply(Some(&live), &cfg, &w("two"), false, &TypeInfo::default()).is_ok(),
            "same value is shared ownership"
        );
        let err = apply(
            Some(&live),
            &json!({"data": {"a": "2"}}),
            &w("two"),
            false,
            &TypeInfo::default(),
        )
        .unwrap_err();
        assert_eq!(err.code, 409);
        assert!(
            err.message.contains("conflict with \"one\""),
            "{}",
            err.message
        );
    }
}
