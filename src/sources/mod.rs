//! Source adapters: pure functions that turn an object of another project
//! (k0smotron, k0rdent, Kamaji, Steward, CAPI) into the `ControlPlaneIngress`
//! it implies, so there is one reconcile path and one status for all of them.

mod domain;
mod k0rdent;
mod k0smotron;
mod kamaji;
pub mod preflight;
mod source;
mod steward;
mod tenant;

use kube::api::{DynamicObject, GroupVersionKind};

use crate::api::{
    self, ControlPlaneIngress,
    validation::{FieldError, FieldErrors},
};

pub use domain::DOMAIN_ANNOTATION;
pub use k0smotron::{HAPROXY_NAME, HAPROXY_NAMESPACE};
pub use kamaji::KAMAJI_DOMAIN_ANNOTATION;

use source::Source;
pub use source::{SourceError, SourceKind, describe};

/// Derive the ControlPlaneIngress a source object asks for, validated.
pub fn derive(obj: &DynamicObject) -> Result<ControlPlaneIngress, SourceError> {
    let types = obj.types.clone().unwrap_or_default();
    let object = describe(&types.kind, &obj.metadata);
    let kind = SourceKind::of(&types.api_version, &types.kind).ok_or_else(|| {
        SourceError::Unsupported {
            object: object.clone(),
            api_version: types.api_version.clone(),
            kind: types.kind.clone(),
        }
    })?;
    let source = Source { kind, obj, object };
    let spec = match kind {
        SourceKind::K0smotronControlPlane | SourceKind::K0smotronCluster => {
            k0smotron::spec(&source)?
        }
        SourceKind::ClusterDeployment => k0rdent::spec(&source)?,
        SourceKind::CapiCluster => domain::spec(&source)?,
        SourceKind::KamajiTenantControlPlane => kamaji::spec(&source)?,
        SourceKind::StewardTenantControlPlane => steward::spec(&source)?,
    };
    let cpi = ControlPlaneIngress {
        metadata: source.cpi_metadata(&spec),
        spec,
        status: None,
    };
    api::validation::validate(&cpi).map_err(|FieldErrors(errors)| SourceError::Invalid {
        object: source.object.clone(),
        errors: FieldErrors(
            errors
                .into_iter()
                .map(|e| FieldError {
                    field: source_field(kind, &e.field),
                    message: e.message,
                })
                .collect(),
        ),
    })?;
    Ok(cpi)
}

/// Where the CPI field `cpi_field` comes from in the source object, so
/// errors name the field the user wrote.
fn source_field(kind: SourceKind, cpi_field: &str) -> String {
    let renames: &[(&str, &str)] = match kind {
        SourceKind::K0smotronControlPlane | SourceKind::K0smotronCluster => &[
            ("spec.backend.apiPort", "spec.service.apiPort"),
            (
                "spec.backend.konnectivityPort",
                "spec.service.konnectivityPort",
            ),
        ],
        SourceKind::ClusterDeployment => &[
            ("spec.ingress.", "spec.config.ingress."),
            (
                "spec.backend.apiPort",
                "spec.config.k0smotron.service.apiPort",
            ),
            (
                "spec.backend.konnectivityPort",
                "spec.config.k0smotron.service.konnectivityPort",
            ),
        ],
        SourceKind::KamajiTenantControlPlane => &[
            ("spec.ingress.apiHost", kamaji::DOMAIN_FIELD),
            ("spec.ingress.konnectivityHost", kamaji::DOMAIN_FIELD),
            ("spec.backend.apiPort", "spec.networkProfile.port"),
            (
                "spec.backend.konnectivityPort",
                "spec.addons.konnectivity.server.port",
            ),
        ],
        SourceKind::StewardTenantControlPlane => &[
            ("spec.ingress.apiHost", "spec.controlPlane.ingress.hostname"),
            (
                "spec.ingress.konnectivityHost",
                "spec.controlPlane.ingress.hostname",
            ),
            (
                "spec.ingress.className",
                "spec.controlPlane.ingress.ingressClassName",
            ),
            ("spec.backend.apiPort", "spec.networkProfile.port"),
            (
                "spec.backend.konnectivityPort",
                "spec.addons.konnectivity.server.port",
            ),
        ],
        SourceKind::CapiCluster => &[
            ("spec.ingress.apiHost", domain::DOMAIN_FIELD),
            ("spec.ingress.konnectivityHost", domain::DOMAIN_FIELD),
            ("spec.backend.apiPort", "spec.networkProfile.port"),
        ],
    };
    renames
        .iter()
        .find_map(|(from, to)| {
            cpi_field
                .strip_prefix(from)
                .map(|rest| format!("{to}{rest}"))
        })
        .unwrap_or_else(|| cpi_field.to_string())
}

/// The GroupVersionKind of a source object's served versions, for watches.
pub fn gvk(kind: SourceKind, version: &str) -> GroupVersionKind {
    let (group, kind) = kind.group_kind();
    GroupVersionKind::gvk(group, version, kind)
}

/// Whether `other`, another ControlPlaneIngress for the same cluster, keeps
/// the cluster from the one derived from a `kind` source (`ours`, if it
/// exists yet): one a user wrote always does, a derived one when its source
/// has precedence, and between equals the older one.
pub fn yields_to(
    kind: SourceKind,
    other: &ControlPlaneIngress,
    ours: Option<&ControlPlaneIngress>,
) -> bool {
    let Some(theirs) = SourceKind::of_derived(other) else {
        return true;
    };
    match theirs.precedence().cmp(&kind.precedence()) {
        std::cmp::Ordering::Less => true,
        std::cmp::Ordering::Greater => false,
        std::cmp::Ordering::Equal => ours.is_none_or(|ours| {
            let age = |c: &ControlPlaneIngress| {
                (
                    c.metadata.creation_timestamp.clone(),
                    c.metadata.name.clone(),
                )
            };
            age(other) < age(ours)
        }),
    }
}
#[cfg(test)]
mod tests;

/// The ControlPlaneIngress among `all` that keeps the cluster from `cpi`, a
/// derived one: it then goes (one per cluster). `None` for one a user wrote.
pub fn superseded_by<'a>(
    cpi: &ControlPlaneIngress,
    all: impl IntoIterator<Item = &'a ControlPlaneIngress>,
) -> Option<&'a ControlPlaneIngress> {
    let kind = SourceKind::of_derived(cpi)?;
    all.into_iter().find(|other| {
        same_cluster(other, cpi)
            && other.metadata.deletion_timestamp.is_none()
            && yields_to(kind, other, Some(cpi))
    })
}

/// The labels of a source object named in `keys` (the watch filter's):
/// what the ControlPlaneIngress derived from it carries, so both sit in
/// the same shard.
pub fn shard_labels(
    keys: &[String],
    source: &std::collections::BTreeMap<String, String>,
) -> std::collections::BTreeMap<String, String> {
    keys.iter()
        .filter_map(|k| Some((k.clone(), source.get(k)?.clone())))
        .collect()
}

/// Whether `other` is another ControlPlaneIngress describing the cluster `cpi` describes.
pub fn same_cluster(other: &ControlPlaneIngress, cpi: &ControlPlaneIngress) -> bool {
    other.metadata.namespace == cpi.metadata.namespace
        && other.metadata.name != cpi.metadata.name
        && other.spec.cluster_name == cpi.spec.cluster_name
}
