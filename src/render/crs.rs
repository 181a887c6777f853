//! ClusterResourceSet delivery of the workload objects, for management
//! clusters where the controller must not (or cannot) reach workload
//! clusters: CAPI's own ClusterResourceSet controller applies them.
//!
//! Key material: the proxy's TLS Secret (with its private key) travels in a
//! Secret of type `addons.cluster.x-k8s.io/resource-set`, never in the
//! ConfigMap; everything else is public and goes in one ConfigMap. Both live
//! in the Cluster's namespace, next to `<cluster>-ca`, whose key can mint
//! such a leaf anyway, so they widen no one's access. See
//! docs/clusterresourceset.md.

use std::collections::BTreeMap;

use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::api::{DynamicObject, GroupVersionKind};
use serde_json::json;

use super::{
    shared::{describe, foreign, owned_meta},
    workload::{ProxyObjects, SteeringObjects, WorkloadError},
};
use crate::api::ControlPlaneIngress;

/// The label a user puts on the CAPI Cluster (value: its name) so that its
/// ClusterResourceSet selects it and no other.
pub const CLUSTER_SELECTOR_LABEL: &str = "hcp-ingress.dev/resource-set";
/// Secret type the ClusterResourceSet controller accepts.
pub const RESOURCE_SET_SECRET_TYPE: &str = "addons.cluster.x-k8s.io/resource-set";
/// Key of the ConfigMap holding the public objects.
pub const OBJECTS_KEY: &str = "hcp-ingress-proxy.yaml";
/// Key of the Secret holding the TLS Secret.
pub const SECRET_KEY: &str = "hcp-ingress-proxy-tls.yaml";

/// Why the workload objects cannot go into a ClusterResourceSet.
#[derive(Debug, thiserror::Error)]
pub enum CrsError {
    /// `proxy.enabled: false`: nothing to deliver.
    #[error(
        "{object}: failed to build a ClusterResourceSet: the proxy is disabled (spec.proxy.enabled is false)"
    )]
    ProxyDisabled {
        /// `ControlPlaneIngress namespace/name`.
        object: String,
    },
    /// Service steering patches an existing object, which a ClusterResourceSet cannot do.
    #[error(
        "{object}: failed to build a ClusterResourceSet: spec.proxy.steering service patches the existing kubernetes Service, and a ClusterResourceSet only creates whole objects; use advertise-address steering, or the controller"
    )]
    ServiceSteering {
        /// `ControlPlaneIngress namespace/name`.
        object: String,
    },
    /// The proxy cannot start without the CA it verifies the ingress with.
    #[error(
        "{object}: failed to build a ClusterResourceSet: the cluster CA certificate is required (the proxy verifies the ingress with it)"
    )]
    MissingCa {
        /// `ControlPlaneIngress namespace/name`.
        object: String,
    },
    /// Reencrypt mode without a certificate.
    #[error(
        "{object}: failed to build a ClusterResourceSet: mode reencrypt needs the proxy certificate, minted from the cluster CA key"
    )]
    MissingCertificate {
        /// `ControlPlaneIngress namespace/name`.
        object: String,
    },
    /// An object did not serialize (a bug).
    #[error(transparent)]
    Workload(#[from] WorkloadError),
}

/// The `ClusterResourceSet` group, version and kind.
pub fn gvk() -> GroupVersionKind {
    GroupVersionKind::gvk("addons.cluster.x-k8s.io", "v1beta2", "ClusterResourceSet")
}

/// Name of the ConfigMap, Secret and ClusterResourceSet of a ControlPlaneIngress.
pub fn name(cpi: &ControlPlaneIngress) -> String {
    format!(
        "{}-hcp-ingress-proxy",
        cpi.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Wrap the proxy objects: a ConfigMap with the public ones, a resource-set
/// Secret with the TLS Secret (reencrypt mode), and a `Reconcile`
/// ClusterResourceSet selecting the Cluster labelled
/// `hcp-ingress.dev/resource-set: <clusterName>`; all in the
/// ControlPlaneIngress's namespace. `proxy` is what
/// [`super::workload::proxy`] returned.
pub fn cluster_resource_set(
    cpi: &ControlPlaneIngress,
    proxy: Option<&ProxyObjects>,
) -> Result<Vec<DynamicObject>, CrsError> {
    let object = describe(cpi);
    let proxy = proxy.ok_or_else(|| CrsError::ProxyDisabled {
        object: object.clone(),
    })?;
    if matches!(proxy.steering, SteeringObjects::Service { .. }) {
        return Err(CrsError::ServiceSteering { object });
    }
    let has_ca = proxy
        .config_map
        .data
        .as_ref()
        .is_some_and(|d| d.contains_key("ca.crt"));
    if !has_ca {
        return Err(CrsError::MissingCa { object });
    }
    if proxy.mode.terminates_tls() && proxy.secret.is_none() {
        return Err(CrsError::MissingCertificate { object });
    }

    let name = name(cpi);
    let mut public = proxy.to_dynamic()?;
    public.retain(|o| o.types.as_ref().is_none_or(|t| t.kind != "Secret"));
    let mut config_map = owned_meta(cpi, name.clone());
    config_map.annotations = Some(BTreeMap::from([(
        "hcp-ingress.dev/delivered-by".to_string(),
        format!("ClusterResourceSet {name}"),
    )]));
    let mut out = vec![foreign(
        &GroupVersionKind::gvk("", "v1", "ConfigMap"),
        config_map,
        json!({"data": {OBJECTS_KEY: yaml_stream(&public)}}),
    )];

    let mut resources = vec![json!({"kind": "ConfigMap", "name": name})];
    if let Some(tls) = &proxy.secret {
        let secret = Secret {
            metadata: owned_meta(cpi, name.clone()),
            type_: Some(RESOURCE_SET_SECRET_TYPE.to_string()),
            data: Some(BTreeMap::from([(
                SECRET_KEY.to_string(),
                ByteString(yaml_stream(&[tls]).into_bytes()),
            )])),
            ..Secret::default()
        };
        let value = serde_json::to_value(&secret).map_err(|source| WorkloadError::Serialize {
            kind: "Secret",
            source,
        })?;
        let mut secret: DynamicObject =
            serde_json::from_value(value).map_err(|source| WorkloadError::Serialize {
                kind: "Secret",
                source,
            })?;
        secret.types = Some(kube::api::TypeMeta {
            api_version: "v1".into(),
            kind: "Secret".into(),
        });
        out.push(secret);
        resources.push(json!({"kind": "Secret", "name": name}));
    }

    out.push(foreign(
        &gvk(),
        owned_meta(cpi, name),
        json!({"spec": {
            "clusterSelector": {"matchLabels": {CLUSTER_SELECTOR_LABEL: cpi.spec.cluster_name}},
            "resources": resources,
            // Re-applied whenever the ConfigMap or Secret changes, so a
            // re-rendered certificate or config reaches the cluster.
            "strategy": "Reconcile",
        }}),
    ));
    Ok(out)
}

fn yaml_stream<T: serde::Serialize>(objects: &[T]) -> String {
    objects
        .iter()
        .map(|o| {
            format!(
                "---\n{}",
                serde_saphyr::to_string(o).expect("objects serialize to YAML")
            )
        })
        .collect()
}
