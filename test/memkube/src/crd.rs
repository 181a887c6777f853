//! CustomResourceDefinitions: turning a CRD object into served resources,
//! validating custom objects against its schema, and reading CRD files.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Error};
use crate::registry::{CrdSchema, ResourceSpec, Scope};

/// The resources a CRD serves, one per served version.
pub fn resources_from_crd(crd: &Value) -> ApiResult<Vec<ResourceSpec>> {
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let field = |p: &str| {
        crd.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let (group, plural, kind) = (
        field("/spec/group"),
        field("/spec/names/plural"),
        field("/spec/names/kind"),
    );
    let mut causes = Vec::new();
    for (f, v) in [
        ("spec.group", &group),
        ("spec.names.plural", &plural),
        ("spec.names.kind", &kind),
    ] {
        if v.is_empty() {
            causes.push((f.to_string(), "Required value".to_string()));
        }
    }
    if causes.is_empty() && name != format!("{plural}.{group}") {
        causes.push((
            "metadata.name".into(),
            format!("Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    let scope = match field("/spec/scope").as_str() {
        "Namespaced" => Scope::Namespaced,
        "Cluster" => Scope::Cluster,
        other => {
            causes.push((
                "spec.scope".into(),
                format!(
                    "Unsupported value: {other:?}: supported values: \"Cluster\", \"Namespaced\""
                ),
            ));
            Scope::Cluster
        }
    };
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        causes.push(("spec.versions".into(), "Required value".into()));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            "CustomResourceDefinition",
            "apiextensions.k8s.io",
            name,
            causes,
        ));
    }
    // The sibling validator understands the whole CRD; build it once for all versions.
    let validator = crdschema::Crd::from_value(crd.clone()).ok();
    let validator = validator.map(Arc::new);
    let singular = field("/spec/names/singular");
    let short: Vec<String> = crd
        .pointer("/spec/names/shortNames")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let mut out = Vec::new();
    for v in versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(true))
    {
        let version = v.get("name").and_then(Value::as_str).unwrap_or_default();
        let mut spec = ResourceSpec::new(&group, version, &plural, &kind, scope);
        spec.singular = if singular.is_empty() {
            kind.to_ascii_lowercase()
        } else {
            singular.clone()
        };
        spec.short_names = short.clone();
        spec.generation = true;
        spec.crd = Some(name.to_string());
        if v.pointer("/subresources/status").is_some() {
            spec.subresources.push("status".into());
        }
        spec.printer_columns = v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let openapi = v
            .pointer("/schema/openAPIV3Schema")
            .cloned()
            .unwrap_or(Value::Null);
        let preserve_unknown = openapi
            .get("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            .unwrap_or(false)
            || crd
                .pointer("/spec/preserveUnknownFields")
                .and_then(Value::as_bool)
                .unwrap_or(false);
        spec.schema = Some(Arc::new(CrdSchema {
            validator: validator.clone(),
            openapi,
            preserve_unknown,
        }));
        out.push(spec);
    }
    Ok(out)
}

/// Prunes unknown fields and validates a custom object like the API server
/// (422 Invalid with one cause per violation). With `strict` (the request's
/// `fieldValidation=Strict`) unknown fields are rejected instead of pruned.
pub fn validate(spec: &ResourceSpec, obj: &mut Value, strict: bool) -> ApiResult<()> {
    let Some(schema) = &spec.schema else {
        return Ok(());
    };
    let Some(validator) = &schema.validator else {
        return Ok(());
    };
    let opts = if strict && !schema.preserve_unknown {
        crdschema::Options::default()
    } else {
        crdschema::Options::api_server()
    };
    let result = validator.validate_with(obj, &opts);
    if !schema.preserve_unknown {
        validator.prune(obj);
    }
    match result {
        Ok(()) => Ok(()),
        Err(violations) => {
            let name = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let causes = violations
                .iter()
                .map(|v| {
                    (
                        v.path.trim_start_matches('.').to_string(),
                        v.message.clone(),
                    )
                })
                .collect();
            Err(ApiError::invalid(&spec.kind, &spec.group, name, causes))
        }
    }
}

/// The status the API server writes on an accepted CRD.
pub fn accepted_status(crd: &Value, now: &str) -> Value {
    let names = crd
        .pointer("/spec/names")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let stored: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .filter_map(|v| v.get("name").cloned())
                .collect()
        })
        .unwrap_or_default();
    let cond = |t: &str, reason: &str, msg: &str| json!({"type": t, "status": "True", "lastTransitionTime": now, "reason": reason, "message": msg});
    json!({
        "acceptedNames": names,
        "storedVersions": stored,
        "conditions": [
            cond("NamesAccepted", "NoConflicts", "no conflicts found"),
            cond("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
    })
}

/// Reads every CustomResourceDefinition in a YAML file or a folder of them.
pub fn read_crds(path: &Path) -> Result<Vec<Value>, Error> {
    let mut files = Vec::new();
    if path.is_dir() {
        let rd = std::fs::read_dir(path).map_err(|source| Error::Read {
            path: path.display().to_string(),
            source,
        })?;
        for entry in rd.flatten() {
            let p = entry.path();
            if matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml" | "json")
            ) {
                files.push(p);
            }
        }
        files.sort();
    } else {
        files.push(path.to_path_buf());
    }
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|source| Error::Read {
            path: f.display().to_string(),
            source,
        })?;
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).map_err(|e| Error::Parse {
            path: f.display().to_string(),
            message: e.to_string(),
        })?;
        for v in docs {
            if v.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition") {
                out.push(v);
            }
        }
    }
    Ok(out)
}
