//! Server-side apply that writes only when needed: at steady state the
//! controller makes no writes at all.

use kube::{
    Api, ResourceExt,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, Preconditions},
};
use md5::{Digest, Md5};

use super::{context::Context, error::Error};
use crate::api::MANAGER;

/// Annotation holding a digest of what we last applied, so that a field we
/// stop setting is noticed (and dropped by the next apply) too.
pub const APPLIED_DIGEST_ANNOTATION: &str = "hcp-ingress.dev/applied-digest";

/// Digest of an object as we apply it.
pub fn digest(obj: &DynamicObject) -> String {
    let bytes = serde_json::to_vec(obj).expect("objects serialize");
    format!("{:x}", Md5::digest(&bytes))
}

/// True when `existing` carries everything `desired` sets and was last
/// applied from the same `digest` of `desired` (so nothing was dropped since).
pub fn up_to_date(desired: &DynamicObject, digest: &str, existing: Option<&DynamicObject>) -> bool {
    let Some(existing) = existing else {
        return false;
    };
    existing
        .annotations()
        .get(APPLIED_DIGEST_ANNOTATION)
        .map(String::as_str)
        == Some(digest)
        && is_subset(
            &without_types(desired),
            &serde_json::to_value(existing).unwrap_or_default(),
        )
}

/// An object without `apiVersion` and `kind`: the items of a list of a
/// built-in kind carry neither, so a cache filled by a list never has them.
fn without_types(obj: &DynamicObject) -> serde_json::Value {
    let mut value = serde_json::to_value(obj).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
    }
    value
}

/// True when `existing` was applied by us from this very `desired` (same
/// digest) and someone else has changed our fields since.
pub fn rewritten_by_others(desired: &DynamicObject, existing: Option<&DynamicObject>) -> bool {
    existing.is_some_and(|e| {
        e.annotations().get(APPLIED_DIGEST_ANNOTATION) == Some(&digest(desired))
            && !up_to_date(desired, &digest(desired), Some(e))
    })
}

/// `a ⊆ b`: every field of `a` is in `b` with the same value. Lists of
/// objects that all carry a `name` (containers, env, ports, volumes) are
/// compared by name, as server-side apply merges them; other lists element by
/// element.
pub fn is_subset(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    let named = |list: &[Value]| {
        list.iter()
            .all(|v| v.get("name").is_some_and(Value::is_string))
    };
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => a.iter().all(|(k, v)| {
            b.get(k).is_some_and(|bv| is_subset(v, bv)) || (v.is_null() && !b.contains_key(k))
        }),
        (Value::Array(a), Value::Array(b)) if !a.is_empty() && named(a) && named(b) => {
            a.iter().all(|x| {
                b.iter()
                    .any(|y| y.get("name") == x.get("name") && is_subset(x, y))
            })
        }
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| is_subset(x, y))
        }
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => a == b,
    }
}

/// Apply `desired` unless `existing` is already up to date. Returns whether it wrote.
pub async fn apply(
    ctx: &Context,
    api: &Api<DynamicObject>,
    mut desired: DynamicObject,
    existing: Option<&DynamicObject>,
) -> Result<bool, Error> {
    let digest = digest(&desired);
    if up_to_date(&desired, &digest, existing) {
        return Ok(false);
    }
    desired
        .annotations_mut()
        .insert(APPLIED_DIGEST_ANNOTATION.into(), digest);
    write(ctx, api, desired).await
}

/// Server-side apply with our field manager, behind the leader gate.
async fn write(
    ctx: &Context,
    api: &Api<DynamicObject>,
    desired: DynamicObject,
) -> Result<bool, Error> {
    ctx.leader.ensure_leader()?;
    let name = desired.name_any();
    let kind = desired
        .types
        .as_ref()
        .map(|t| t.kind.clone())
        .unwrap_or_default();
    ctx.metrics.write(&kind, "apply");
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&desired),
    )
    .await
    .map_err(|source| Error::Apply { kind, name, source })?;
    Ok(true)
}

/// Apply only the fields of `desired` to an object that is not ours (the
/// `kubernetes` Service, a CCM Deployment): no marker annotation, written only
/// when a field we set is missing or different. Our field manager owns exactly
/// these fields, so every other field stays with its owner.
pub async fn apply_fields(
    ctx: &Context,
    api: &Api<DynamicObject>,
    desired: DynamicObject,
    existing: Option<&DynamicObject>,
) -> Result<bool, Error> {
    let fields_present = existing.is_some_and(|e| {
        is_subset(
            &without_types(&desired),
            &serde_json::to_value(e).unwrap_or_default(),
        )
    });
    if fields_present {
        return Ok(false);
    }
    write(ctx, api, desired).await
}

/// Apply exactly the fields of `desired` with our field manager, whatever is
/// there: fields we set before and leave out here are dropped by server-side
/// apply. For giving back what steering took; never at steady state.
pub async fn force_fields(
    ctx: &Context,
    api: &Api<DynamicObject>,
    desired: DynamicObject,
) -> Result<(), Error> {
    write(ctx, api, desired).await.map(drop)
}

/// Remove fields another manager set on an object that is not ours (a JSON
/// or merge patch, with our field manager, behind the leader gate):
/// server-side apply can only drop fields its own manager owns.
pub async fn patch_fields(
    ctx: &Context,
    api: &Api<DynamicObject>,
    kind: &str,
    name: &str,
    patch: &Patch<serde_json::Value>,
) -> Result<(), Error> {
    ctx.leader.ensure_leader()?;
    ctx.metrics.write(kind, "patch");
    let params = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..PatchParams::default()
    };
    api.patch(name, &params, patch)
        .await
        .map(drop)
        .map_err(|source| Error::Apply {
            kind: kind.into(),
            name: name.into(),
            source,
        })
}

/// Delete an object we own, only if it is still the one we saw (uid precondition).
pub async fn delete(
    ctx: &Context,
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
) -> Result<(), Error> {
    ctx.leader.ensure_leader()?;
    let name = obj.name_any();
    let kind = obj
        .types
        .as_ref()
        .map(|t| t.kind.clone())
        .unwrap_or_default();
    ctx.metrics.write(&kind, "delete");
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: obj.uid(),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(&name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(Error::Delete { kind, name, source }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::is_subset;

    #[test]
    fn subset_ignores_fields_added_by_the_server() {
        let desired = json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"rules": [{"host": "h"}]}});
        let existing = json!({"metadata": {"name": "a", "uid": "u", "labels": {"x": "1", "y": "2"}},
                              "spec": {"rules": [{"host": "h", "extra": true}]}, "status": {}});
        assert!(is_subset(&desired, &existing));
    }

    #[test]
    fn an_object_listed_without_its_types_is_up_to_date() {
        // A real API server lists built-in kinds without apiVersion and kind.
        let desired: kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "a", "namespace": "n"}, "spec": {"rules": [{"host": "h"}]}}))
        .unwrap();
        let digest = super::digest(&desired);
        let listed: kube::api::DynamicObject = serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "n", "annotations": {super::APPLIED_DIGEST_ANNOTATION: digest}},
            "spec": {"rules": [{"host": "h"}]}}))
        .unwrap();
        assert!(super::up_to_date(&desired, &digest, Some(&listed)));
    }

    #[test]
    fn subset_notices_changed_values_and_list_lengths() {
        let existing = json!({"spec": {"rules": [{"host": "h"}], "port": 443}});
        assert!(!is_subset(&json!({"spec": {"port": 444}}), &existing));
        assert!(!is_subset(
            &json!({"spec": {"rules": [{"host": "h"}, {"host": "k"}]}}),
            &existing
        ));
        assert!(
            is_subset(&json!({"spec": {"port": 443.0}}), &existing),
            "443 == 443.0 after a JSON round trip"
        );
    }
}
