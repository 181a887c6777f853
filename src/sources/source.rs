//! What every adapter shares: the source kinds, their errors, and the
//! object being adapted.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::DynamicObject;
use serde::de::DeserializeOwned;

use super::tenant;
use crate::api::{
    self, CLUSTER_NAME_LABEL, ControlPlaneIngress, ControlPlaneIngressSpec, MANAGED_BY_LABEL,
    MANAGER, upstream,
    validation::{FieldError, FieldErrors},
};

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

/// A source object being adapted, with what every adapter needs.
pub(super) struct Source<'a> {
    pub kind: SourceKind,
    pub obj: &'a DynamicObject,
    pub object: String,
}

impl Source<'_> {
    pub(super) fn name(&self) -> &str {
        self.obj.metadata.name.as_deref().unwrap_or_default()
    }

    pub(super) fn namespace(&self) -> &str {
        self.obj.metadata.namespace.as_deref().unwrap_or_default()
    }

    /// The object's `spec` as its upstream type (the type's default when it
    /// has none); a field that does not fit is named in the error.
    pub(super) fn spec<T: DeserializeOwned + Default>(&self) -> Result<T, SourceError> {
        upstream::part(self.obj, "spec").map_err(|m| self.malformed(m))
    }

    pub(super) fn malformed(&self, misfit: upstream::Misfit) -> SourceError {
        SourceError::Malformed {
            object: self.object.clone(),
            field: misfit.field,
            source: misfit.source,
        }
    }

    /// A Kamaji or Steward TenantControlPlane's spec, read through its own type.
    pub(super) fn tenant(&self) -> Result<tenant::Tenant, SourceError> {
        let steward = self.kind == SourceKind::StewardTenantControlPlane;
        tenant::Tenant::read(self.obj, steward).map_err(|m| self.malformed(m))
    }

    pub(super) fn not_requested(&self, field: &str, reason: &str) -> SourceError {
        SourceError::NotRequested {
            object: self.object.clone(),
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The CAPI cluster: the CAPI label, else the owning `Cluster`, else the object's own name.
    pub(super) fn cluster_name(&self) -> String {
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
    pub(super) fn cpi_metadata(&self, spec: &ControlPlaneIngressSpec) -> ObjectMeta {
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

impl Source<'_> {
    /// A port read from the source, defaulted and range-checked under its own field name.
    pub(super) fn port(
        &self,
        value: Option<i64>,
        default: i64,
        field: &str,
    ) -> Result<i32, SourceError> {
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
