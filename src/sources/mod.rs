//! Source adapters: pure functions that turn an object of another project
//! (k0smotron, k0rdent, Kamaji, Steward, CAPI) into the `ControlPlaneIngress`
//! it implies, so there is one reconcile path and one status for all of them.

mod domain;
mod k0rdent;
mod k0smotron;
mod kamaji;
pub mod preflight;
mod steward;
mod tenant;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DynamicObject, GroupVersionKind};
use serde::de::DeserializeOwned;

use crate::api::upstream;

use crate::api::{
    self, CLUSTER_NAME_LABEL, ControlPlaneIngress, ControlPlaneIngressSpec, MANAGED_BY_LABEL,
    MANAGER,
    validation::{FieldError, FieldErrors},
};

pub use domain::DOMAIN_ANNOTATION;
pub use k0smotron::{HAPROXY_NAME, HAPROXY_NAMESPACE};
pub use kamaji::KAMAJI_DOMAIN_ANNOTATION;

/// The kinds a ControlPlaneIngress can be derived from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SourceKind {
    /// `controlplane.cluster.x-k8s.io` K0smotronControlPlane, `.spec.ingress`.
    K0smotronControlPlane,
    /// `k0smotron.io` Cluster (standalone k0smotron), `.spec.ingress`.
    K0smotronCluster,
    /// `k0rdent.mirantis.com` ClusterDeployment, `.spec.config.ingress`.
    ClusterDeployment,
    /// `cluster.x-k8s.io` Cluster with the domain annotation.
    CapiCluster,
    /// `kamaji.clastix.io` TenantControlPlane with `kamaji.clastix.io/ingress.domain`.
    KamajiTenantControlPlane,
    /// `steward.butlerlabs.dev` TenantControlPlane, `.spec.controlPlane.ingress`.
    StewardTenantControlPlane,
}

impl SourceKind {
    /// Every source kind.
    pub const ALL: [SourceKind; 6] = [
        SourceKind::K0smotronControlPlane,
        SourceKind::K0smotronCluster,
        SourceKind::ClusterDeployment,
        SourceKind::CapiCluster,
        SourceKind::KamajiTenantControlPlane,
        SourceKind::StewardTenantControlPlane,
    ];

    /// Name used by the controller's `--sources` flag.
    pub fn flag_name(self) -> &'static str {
        match self {
            SourceKind::K0smotronControlPlane => "k0smotron-controlplane",
            SourceKind::K0smotronCluster => "k0smotron-cluster",
            SourceKind::ClusterDeployment => "k0rdent",
            SourceKind::CapiCluster => "capi-cluster",
            SourceKind::KamajiTenantControlPlane => "kamaji",
            SourceKind::StewardTenantControlPlane => "steward",
        }
    }

    /// API group and kind.
    pub fn group_kind(self) -> (&'static str, &'static str) {
        match self {
            SourceKind::K0smotronControlPlane => {
                ("controlplane.cluster.x-k8s.io", "K0smotronControlPlane")
            }
            SourceKind::K0smotronCluster => ("k0smotron.io", "Cluster"),
            SourceKind::ClusterDeployment => ("k0rdent.mirantis.com", "ClusterDeployment"),
            SourceKind::CapiCluster => ("cluster.x-k8s.io", "Cluster"),
            SourceKind::KamajiTenantControlPlane => ("kamaji.clastix.io", "TenantControlPlane"),
            SourceKind::StewardTenantControlPlane => {
                ("steward.butlerlabs.dev", "TenantControlPlane")
            }
        }
    }

    /// Which source describes a cluster when several do (lower wins): a k0rdent
    /// ClusterDeployment renders the K0smotronControlPlane `<name>-cp` whose
    /// `spec.ingress` says the same again, and a control plane object says
    /// more than a domain annotation on its Cluster.
    pub fn precedence(self) -> u8 {
        match self {
            SourceKind::ClusterDeployment => 0,
            SourceKind::K0smotronControlPlane => 1,
            SourceKind::K0smotronCluster
            | SourceKind::KamajiTenantControlPlane
            | SourceKind::StewardTenantControlPlane => 2,
            SourceKind::CapiCluster => 3,
        }
    }

    /// The source kind a derived ControlPlaneIngress came from (its
    /// controller reference), `None` for one a user wrote.
    pub fn of_derived(cpi: &ControlPlaneIngress) -> Option<SourceKind> {
        if cpi
            .metadata
            .labels
            .as_ref()?
            .get(MANAGED_BY_LABEL)
            .map(String::as_str)
            != Some(MANAGER)
        {
            return None;
        }
        cpi.metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|o| o.controller == Some(true))
            .find_map(|o| SourceKind::of(&o.api_version, &o.kind))
    }

    /// The source kind of an object, from its `apiVersion` and `kind`.
    pub fn of(api_version: &str, kind: &str) -> Option<SourceKind> {
        let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
        SourceKind::ALL
            .into_iter()
            .find(|s| s.group_kind() == (group, kind))
    }

    /// Where the CPI field `cpi_field` comes from in the source object, so
    /// errors name the field the user wrote.
    fn source_field(self, cpi_field: &str) -> String {
        let renames: &[(&str, &str)] = match self {
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
}

/// Why a source object yields no ControlPlaneIngress.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The object does not ask for an ingress (block missing or disabled).
    #[error("{object}: {field}: {reason}")]
    NotRequested {
        object: String,
        field: String,
        reason: String,
    },
    /// The object asks for one, with invalid fields.
    #[error("{object}: {errors}")]
    Invalid { object: String, errors: FieldErrors },
    /// The object does not have the shape of its upstream CRD.
    #[error("{object}: failed to read {field}: {source}")]
    Malformed {
        object: String,
        field: String,
        source: serde_json::Error,
    },
    /// Not a kind hcp-ingress derives from.
    #[error(
        "{object}: failed to derive a ControlPlaneIngress: {api_version} {kind} is not a supported source kind"
    )]
    Unsupported {
        object: String,
        api_version: String,
        kind: String,
    },
}

impl SourceError {
    /// True when the object simply does not opt in: the controller then owns nothing for it.
    pub fn is_not_requested(&self) -> bool {
        matches!(self, SourceError::NotRequested { .. })
    }
}

/// `Kind namespace/name` of an object, for messages.
pub fn describe(kind: &str, meta: &ObjectMeta) -> String {
    format!(
        "{kind} {}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

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
                    field: kind.source_field(&e.field),
                    message: e.message,
                })
                .collect(),
        ),
    })?;
    Ok(cpi)
}

/// A source object being adapted, with what every adapter needs.
struct Source<'a> {
    kind: SourceKind,
    obj: &'a DynamicObject,
    object: String,
}

impl Source<'_> {
    fn name(&self) -> &str {
        self.obj.metadata.name.as_deref().unwrap_or_default()
    }

    fn namespace(&self) -> &str {
        self.obj.metadata.namespace.as_deref().unwrap_or_default()
    }

    /// The object's `spec` as its upstream type (the type's default when it
    /// has none); a field that does not fit is named in the error.
    fn spec<T: DeserializeOwned + Default>(&self) -> Result<T, SourceError> {
        upstream::part(self.obj, "spec").map_err(|m| self.malformed(m))
    }

    fn malformed(&self, misfit: upstream::Misfit) -> SourceError {
        SourceError::Malformed {
            object: self.object.clone(),
            field: misfit.field,
            source: misfit.source,
        }
    }

    /// A Kamaji or Steward TenantControlPlane's spec, read through its own type.
    fn tenant(&self) -> Result<tenant::Tenant, SourceError> {
        let steward = self.kind == SourceKind::StewardTenantControlPlane;
        tenant::Tenant::read(self.obj, steward).map_err(|m| self.malformed(m))
    }

    fn not_requested(&self, field: &str, reason: &str) -> SourceError {
        SourceError::NotRequested {
            object: self.object.clone(),
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The CAPI cluster: the CAPI label, else the owning `Cluster`, else the object's own name.
    fn cluster_name(&self) -> String {
        let meta = &self.obj.metadata;
        meta.labels
            .as_ref()
            .and_then(|l| l.get(CLUSTER_NAME_LABEL))
            .cloned()
            .or_else(|| {
                meta.owner_references.iter().flatten().find_map(|o| {
                    (o.kind == "Cluster" && o.api_version.starts_with("cluster.x-k8s.io/"))
                        .then(|| o.name.clone())
                })
            })
            .unwrap_or_else(|| self.name().to_string())
    }

    /// Metadata of the derived ControlPlaneIngress: same name and namespace,
    /// owned by (and garbage-collected with) the source object.
    fn cpi_metadata(&self, spec: &ControlPlaneIngressSpec) -> ObjectMeta {
        let types = self.obj.types.clone().unwrap_or_default();
        let owner = self.obj.metadata.uid.clone().map(|uid| OwnerReference {
            api_version: types.api_version,
            kind: types.kind,
            name: self.name().to_string(),
            uid,
            controller: Some(true),
            block_owner_deletion: Some(true),
        });
        ObjectMeta {
            name: Some(self.name().to_string()),
            namespace: Some(self.namespace().to_string()),
            labels: Some(BTreeMap::from([
                (CLUSTER_NAME_LABEL.to_string(), spec.cluster_name.clone()),
                (MANAGED_BY_LABEL.to_string(), MANAGER.to_string()),
            ])),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        }
    }
}

/// The GroupVersionKind of a source object's served versions, for watches.
pub fn gvk(kind: SourceKind, version: &str) -> GroupVersionKind {
    let (group, kind) = kind.group_kind();
    GroupVersionKind::gvk(group, version, kind)
}

impl Source<'_> {
    /// A port read from the source, defaulted and range-checked under its own field name.
    fn port(&self, value: Option<i64>, default: i64, field: &str) -> Result<i32, SourceError> {
        let port = value.unwrap_or(default);
        api::validation::check_port(port)
            .map(|()| port as i32)
            .map_err(|message| SourceError::Invalid {
                object: self.object.clone(),
                errors: FieldErrors(vec![FieldError {
                    field: field.to_string(),
                    message,
                }]),
            })
    }
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

/// Whether `other` is another ControlPlaneIngress describing the cluster `cpi` describes.
pub fn same_cluster(other: &ControlPlaneIngress, cpi: &ControlPlaneIngress) -> bool {
    other.metadata.namespace == cpi.metadata.namespace
        && other.metadata.name != cpi.metadata.name
        && other.spec.cluster_name == cpi.spec.cluster_name
}
