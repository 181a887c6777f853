//! What the workload renderers share: names and labels of our objects in
//! the workload cluster, the render's inputs and error, and the helpers
//! that build typed objects.

use std::{collections::BTreeMap, fmt, net::IpAddr};

use k8s_openapi::ByteString;
use kube::api::DynamicObject;
use serde::{Serialize, de::DeserializeOwned};

use crate::api::{
    ControlPlaneIngress, MANAGED_BY_LABEL, MANAGER, ProxySpec, Steering, validation::FieldErrors,
};

/// Namespace of the steering record, and of the proxy's objects with
/// advertise-address steering (see [`proxy_namespace`]).
pub const NAMESPACE: &str = "kube-system";
/// Namespace of the proxy's objects with service steering: a Service selects
/// pods of its own namespace only, and `kubernetes` lives in `default`.
pub const SERVICE_STEERING_NAMESPACE: &str = "default";
/// Name of the proxy's ConfigMap, Secret and DaemonSet.
pub const NAME: &str = "hcp-ingress-proxy";
/// `app.kubernetes.io/name`, which also selects the proxy pods.
pub const NAME_LABEL: &str = "app.kubernetes.io/name";
/// Value of `endpointslice.kubernetes.io/managed-by` on the EndpointSlice we write.
/// A label value: no `/` (the API server rejects one), named like
/// Kubernetes' own `endpointslice-controller.k8s.io`.
pub const ENDPOINT_SLICE_MANAGER: &str = "controller.hcp-ingress.dev";
/// Label that keeps the EndpointSlice mirroring controller off our Endpoints.
pub const SKIP_MIRROR_LABEL: &str = "endpointslice.kubernetes.io/skip-mirror";
/// First address of the usual service CIDR (`10.96.0.0/12`).
pub const DEFAULT_SERVICE_IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 96, 0, 1));
/// Default cluster DNS domain.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";
/// The image of this build, used when neither `spec.proxy.image` nor the
/// controller's own image (`HCP_INGRESS_IMAGE`) is known.
pub const DEFAULT_IMAGE: &str = concat!(
    "ghcr.io/hcp-ingress/hcp-ingress:v",
    env!("CARGO_PKG_VERSION")
);

/// Why the workload objects cannot be rendered.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The ControlPlaneIngress breaks a field rule.
    #[error("{object}: {errors}")]
    Invalid {
        /// `ControlPlaneIngress namespace/name`.
        object: String,
        /// The fields at fault.
        errors: FieldErrors,
    },
    /// An object did not (de)serialize (a bug, not bad input).
    #[error("failed to build the {kind}: {source}")]
    Serialize {
        /// Kind of the object.
        kind: &'static str,
        /// Cause.
        source: serde_json::Error,
    },
}

/// What the render needs besides the ControlPlaneIngress: facts about the
/// workload cluster and the controller, and the certificate material.
#[derive(Clone, PartialEq, Eq)]
pub struct WorkloadInputs {
    /// Image when `spec.proxy.image` is empty: the controller's own image, so
    /// an air-gapped mirror needs one setting.
    pub image: String,
    /// Port the proxy listens on; `None`: 443 for advertise-address steering,
    /// 6443 for service steering (see [`proxy_port`]).
    pub proxy_port: Option<u16>,
    /// First address of the service CIDR (the `kubernetes` Service's ClusterIP).
    pub service_ip: IpAddr,
    /// Cluster DNS domain.
    pub cluster_domain: String,
    /// Cluster CA certificate (PEM): the proxy verifies the ingress with it.
    pub ca_cert_pem: Option<String>,
    /// The proxy's serving certificate and key (reencrypt mode).
    pub tls: Option<ProxyTls>,
}

impl Default for WorkloadInputs {
    fn default() -> Self {
        WorkloadInputs {
            image: DEFAULT_IMAGE.to_string(),
            proxy_port: None,
            service_ip: DEFAULT_SERVICE_IP,
            cluster_domain: DEFAULT_CLUSTER_DOMAIN.to_string(),
            ca_cert_pem: None,
            tls: None,
        }
    }
}

impl fmt::Debug for WorkloadInputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkloadInputs")
            .field("image", &self.image)
            .field("proxy_port", &self.proxy_port)
            .field("service_ip", &self.service_ip)
            .field("cluster_domain", &self.cluster_domain)
            .field("ca_cert_pem", &self.ca_cert_pem.as_ref().map(|_| "<set>"))
            .field("tls", &self.tls)
            .finish()
    }
}

/// A certificate and its key, PEM. `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyTls {
    /// `tls.crt`.
    pub cert_pem: String,
    /// `tls.key`.
    pub key_pem: String,
}

impl fmt::Debug for ProxyTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyTls")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

impl From<&crate::pki::Leaf> for ProxyTls {
    fn from(leaf: &crate::pki::Leaf) -> Self {
        ProxyTls {
            cert_pem: leaf.cert_pem.clone(),
            key_pem: leaf.key_pem.clone(),
        }
    }
}

/// Where the proxy's ConfigMap, Secret and DaemonSet live for a steering
/// mode. Service steering needs its pods next to the `kubernetes` Service,
/// so that kube-controller-manager's endpoint controllers select them (as
/// k0smotron's own HAProxy lives in `default`); advertise-address steering
/// selects nothing and keeps the proxy with the system add-ons.
pub fn proxy_namespace(steering: Steering) -> &'static str {
    match steering {
        Steering::AdvertiseAddress => NAMESPACE,
        Steering::Service => SERVICE_STEERING_NAMESPACE,
    }
}

/// The proxy settings in force: `spec.proxy`, or its defaults when absent.
pub fn proxy_spec(cpi: &ControlPlaneIngress) -> ProxySpec {
    cpi.spec.proxy.clone().unwrap_or_default()
}

/// The labels on every object that is ours in the workload cluster.
pub fn own_labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY_LABEL.to_string(), MANAGER.to_string()),
        (NAME_LABEL.to_string(), NAME.to_string()),
    ])
}

/// The labels that select the proxy pods (immutable in the DaemonSet selector).
pub fn selector_labels() -> BTreeMap<String, String> {
    BTreeMap::from([(NAME_LABEL.to_string(), NAME.to_string())])
}

/// Build a typed object from JSON: terse to write, checked by the type.
pub(super) fn typed<T: DeserializeOwned>(
    kind: &'static str,
    value: serde_json::Value,
) -> Result<T, WorkloadError> {
    serde_json::from_value(value).map_err(|source| WorkloadError::Serialize { kind, source })
}

/// A typed object as the DynamicObject the controller applies.
pub fn dynamic<T: Serialize>(obj: &T, kind: &'static str) -> Result<DynamicObject, WorkloadError> {
    let value =
        serde_json::to_value(obj).map_err(|source| WorkloadError::Serialize { kind, source })?;
    serde_json::from_value(value).map_err(|source| WorkloadError::Serialize { kind, source })
}

pub(super) fn bytes(s: &str) -> ByteString {
    ByteString(s.as_bytes().to_vec())
}
