//! Discovery documents (`/api`, `/apis`, group versions, `/version`) in the
//! legacy (unaggregated) format that `kube::discovery` and kubectl read, and
//! the `Table` rendering `kubectl get` asks for.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::registry::ResourceSpec;

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// `/api`: the core group's versions.
pub fn core_versions(server: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}],
    })
}

/// Orders versions as Kubernetes does: GA, then beta, then alpha, newest first.
fn version_priority(v: &str) -> (u8, i64, i64) {
    let parse = |s: &str| -> Option<(i64, u8, i64)> {
        let rest = s.strip_prefix('v')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let major: i64 = digits.parse().ok()?;
        let tail = &rest[digits.len()..];
        if tail.is_empty() {
            return Some((major, 3, 0));
        }
        let (level, n) = if let Some(n) = tail.strip_prefix("beta") {
            (2, n)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (1, n)
        } else {
            return None;
        };
        Some((major, level, n.parse().ok()?))
    };
    match parse(v) {
        Some((major, level, minor)) => (level, major, minor),
        None => (0, 0, 0),
    }
}

fn versions_of<'a>(resources: &'a [ResourceSpec], group: &str) -> Vec<&'a str> {
    let mut vs: Vec<&str> = resources
        .iter()
        .filter(|r| r.group == group)
        .map(|r| r.version.as_str())
        .collect();
    vs.sort_by(|a, b| version_priority(b).cmp(&version_priority(a)).then(a.cmp(b)));
    vs.dedup();
    vs
}

fn group_doc(resources: &[ResourceSpec], group: &str) -> Value {
    let versions: Vec<Value> = versions_of(resources, group)
        .into_iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({"name": group, "versions": versions, "preferredVersion": versions.first().cloned().unwrap_or(Value::Null)})
}

/// `/apis`: every named group.
pub fn group_list(resources: &[ResourceSpec]) -> Value {
    let mut groups: BTreeMap<&str, ()> = BTreeMap::new();
    for r in resources.iter().filter(|r| !r.group.is_empty()) {
        groups.insert(&r.group, ());
    }
    let groups: Vec<Value> = groups.keys().map(|g| group_doc(resources, g)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`, if the group exists.
pub fn group(resources: &[ResourceSpec], group: &str) -> Option<Value> {
    if !resources.iter().any(|r| r.group == group) {
        return None;
    }
    let mut doc = group_doc(resources, group);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

/// `/api/v1` or `/apis/{group}/{version}`, if served.
pub fn resource_list(resources: &[ResourceSpec], group: &str, version: &str) -> Option<Value> {
    let mut list = Vec::new();
    for r in resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let mut doc = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced(),
            "kind": r.kind,
            "verbs": VERBS,
        });
        if !r.short_names.is_empty() {
            doc["shortNames"] = json!(r.short_names);
        }
        list.push(doc);
        for sub in &r.subresources {
            list.push(json!({
                "name": format!("{}/{sub}", r.plural),
                "singularName": "",
                "namespaced": r.namespaced(),
                "kind": if sub == "scale" { "Scale" } else { r.kind.as_str() },
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if list.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list}),
    )
}

/// `/openapi/v3`: one document per served group version.
pub fn openapi_root(resources: &[ResourceSpec]) -> Value {
    let mut paths = serde_json::Map::new();
    for r in resources {
        let key = if r.group.is_empty() {
            format!("api/{}", r.version)
        } else {
            format!("apis/{}/{}", r.group, r.version)
        };
        let url = format!("/openapi/v3/{key}");
        paths.insert(key, json!({"serverRelativeURL": url}));
    }
    json!({"paths": paths})
}

/// `/openapi/v3/{api/v1 | apis/g/v}`: a minimal document whose PATCH
/// operations declare `fieldValidation`, so kubectl leaves validation to the
/// server instead of downloading schemas. No component schemas are given.
pub fn openapi_group_version(
    resources: &[ResourceSpec],
    group: &str,
    version: &str,
) -> Option<Value> {
    let mut paths = serde_json::Map::new();
    for r in resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let base = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let path = if r.namespaced() {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("{base}/{}/{{name}}", r.plural)
        };
        let params = json!([
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}},
        ]);
        let op = json!({
            "operationId": format!("patch{}", r.kind),
            "parameters": params,
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": r.kind},
        });
        paths.insert(path, json!({"patch": op}));
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.34.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "34",
        "gitVersion": "v1.34.0-memkube",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// A `meta.k8s.io/v1` Table, as `kubectl get` asks for. Built-in kinds get
/// Name and Created At (the API server's default columns); custom resources
/// get Name and their `additionalPrinterColumns`, or Name and Age.
pub fn table(
    spec: &ResourceSpec,
    objects: &[&Value],
    rv: Option<u64>,
    continue_token: Option<&str>,
    with_columns: bool,
) -> Value {
    let name_col = json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0});
    let custom: Vec<Value> = if spec.crd.is_some() && spec.printer_columns.is_empty() {
        vec![json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})]
    } else {
        spec.printer_columns.clone()
    };
    let mut columns = vec![name_col];
    if spec.crd.is_none() {
        columns.push(json!({"name": "Created At", "type": "date", "format": "", "description": "CreationTimestamp is a timestamp representing the server time when this object was created.", "priority": 0}));
    }
    for c in &custom {
        columns.push(json!({
            "name": c.get("name").cloned().unwrap_or_default(),
            "type": c.get("type").cloned().unwrap_or_else(|| json!("string")),
            "format": c.get("format").cloned().unwrap_or_else(|| json!("")),
            "description": c.get("description").cloned().unwrap_or_else(|| json!("")),
            "priority": c.get("priority").cloned().unwrap_or_else(|| json!(0)),
        }));
    }
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let meta = o.get("metadata").cloned().unwrap_or_else(|| json!({}));
            let mut cells = vec![meta.get("name").cloned().unwrap_or(Value::Null)];
            if spec.crd.is_none() {
                cells.push(meta.get("creationTimestamp").cloned().unwrap_or(Value::Null));
            }
            for c in &custom {
                let path = c.get("jsonPath").and_then(Value::as_str).unwrap_or_default();
                let cell = simple_json_path(o, path).cloned().unwrap_or(Value::Null);
                // Date columns of custom resources are rendered as ages, as the API server does.
                let cell = match (c.get("type").and_then(Value::as_str), cell.as_str()) {
                    (Some("date"), Some(ts)) => json!(age(ts)),
                    _ => cell,
                };
                cells.push(cell);
            }
            json!({
                "cells": cells,
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta},
            })
        })
        .collect();
    let mut metadata = json!({});
    if let Some(rv) = rv {
        metadata["resourceVersion"] = json!(rv.to_string());
    }
    if let Some(c) = continue_token {
        metadata["continue"] = json!(c);
    }
    let mut t = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "rows": rows});
    t["columnDefinitions"] = if with_columns {
        Value::Array(columns)
    } else {
        Value::Null
    };
    t
}

/// `translateTimestampSince`: 42s, 3m12s, 95m, 5h3m, 30h, 3d4h, 20d, 2y.
fn age(ts: &str) -> String {
    let Ok(t) = ts.parse::<jiff::Timestamp>() else {
        return "<invalid>".into();
    };
    let s = (jiff::Timestamp::now().as_second() - t.as_second()).max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    match s {
        _ if s < 120 => format!("{s}s"),
        _ if m < 10 => format!("{m}m{}s", s % 60),
        _ if m < 180 => format!("{m}m"),
        _ if h < 8 => format!("{h}h{}m", m % 60),
        _ if h < 48 => format!("{h}h"),
        _ if h < 192 => format!("{d}d{}h", h % 24),
        _ if d < 730 => format!("{d}d"),
        _ => format!("{}y", d / 365),
    }
}

/// Evaluates the dotted subset of JSONPath printer columns use:
/// `.status.phase`, `.spec.ports[0].port`, `.status.conditions[?(@.type=="Ready")].status`.
fn simple_json_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    // Split on dots outside brackets: filters contain `@.field`.
    let mut segments = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    let path = path.trim_start_matches('.');
    for (i, c) in path.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            '.' if depth == 0 => {
                segments.push(&path[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    segments.push(&path[start..]);
    for seg in segments.into_iter().filter(|s| !s.is_empty()) {
        let (field, index) = match seg.split_once('[') {
            Some((f, rest)) => (f, Some(rest.trim_end_matches(']'))),
            None => (seg, None),
        };
        if !field.is_empty() {
            cur = cur.get(field)?;
        }
        if let Some(ix) = index {
            let items = cur.as_array()?;
            cur = if let Some(filter) = ix.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (k, v) = filter.split_once("==")?;
                let v = v.trim_matches(|c| c == '"' || c == '\'');
                items
                    .iter()
                    .find(|i| i.get(k).and_then(Value::as_str) == Some(v))?
            } else {
                items.get(ix.parse::<usize>().ok()?)?
            };
        }
    }
    Some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printer_column_paths_cover_fields_indexes_and_filters() {
        let o = json!({"spec": {"ports": [{"port": 80}]}, "status": {"conditions": [{"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        assert_eq!(
            simple_json_path(&o, ".spec.ports[0].port"),
            Some(&json!(80))
        );
        assert_eq!(
            simple_json_path(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            Some(&json!("True"))
        );
        assert_eq!(simple_json_path(&o, ".status.missing"), None);
    }

    #[test]
    fn version_priority_orders_ga_then_beta_then_alpha() {
        let mut v = vec!["v1alpha1", "v1beta1", "v1", "v2beta2", "v2"];
        v.sort_by_key(|b| std::cmp::Reverse(version_priority(b)));
        assert_eq!(v, ["v2", "v1", "v2beta2", "v1beta1", "v1alpha1"]);
    }
}
