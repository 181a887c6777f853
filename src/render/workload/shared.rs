//! What the workload renderers share: names and labels of our objects in
//! the workload cluster, the render's inputs and error, and the helpers
//! that build typed objects.

use std::{
    collections::BTreeMap,
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use k8s_openapi::ByteString;
use kube::api::DynamicObject;
use serde::{Serialize, de::DeserializeOwned};

use crate::api::{
    ControlPlaneIngress, MANAGED_BY_LABEL, MANAGER, ProxySpec, Steering,
    validation::{FieldError, FieldErrors},
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
/// The proxy's node-local address where the `kubernetes` Service is IPv4 and
/// `spec.proxy.advertiseAddress` is unset: from 240.0.0.0/4, reserved for
/// future use (RFC 1112), which no network routes and Endpoints accept.
pub const DEFAULT_ADVERTISE_ADDRESS_V4: Ipv4Addr = Ipv4Addr::new(240, 0, 0, 1);
/// The same where the `kubernetes` Service is IPv6: from 100::/64, the
/// discard-only prefix (RFC 6666), which no network routes, Endpoints accept
/// (it is not loopback, link-local or unspecified), and no usual pod or
/// service CIDR (ULA fd00::/8, a provider's global prefix) overlaps.
pub const DEFAULT_ADVERTISE_ADDRESS_V6: Ipv6Addr = Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 1);
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

/// The advertise address in force for a cluster whose `kubernetes` Service
/// has `service_ip`: `spec.proxy.advertiseAddress` when set (whatever its
/// family: a removal must recognise what was steered), else the default of
/// the Service's family. An unparsable address fails validation before
/// anything is rendered; here it falls back to the default.
pub fn advertise_address(spec: &ProxySpec, service_ip: IpAddr) -> IpAddr {
    match spec.advertise_address.as_deref().map(str::parse::<IpAddr>) {
        Some(Ok(address)) => address,
        _ if service_ip.is_ipv6() => IpAddr::V6(DEFAULT_ADVERTISE_ADDRESS_V6),
        _ => IpAddr::V4(DEFAULT_ADVERTISE_ADDRESS_V4),
    }
}

/// `spec.proxy.advertiseAddress` must be of the family of the `kubernetes`
/// Service: kube-proxy programs a Service only from EndpointSlices of its
/// own family and ignores the others, so an address of the other family
/// would cut every pod off the API server while looking steered.
pub fn check_advertise_family(
    cpi: &ControlPlaneIngress,
    service_ip: IpAddr,
) -> Result<(), WorkloadError> {
    let spec = proxy_spec(cpi);
    let Some(Ok(chosen)) = spec.advertise_address.as_deref().map(str::parse::<IpAddr>) else {
        return Ok(());
    };
    if chosen.is_ipv6() == service_ip.is_ipv6() {
        return Ok(());
    }
    let family = |ip: IpAddr| if ip.is_ipv6() { "IPv6" } else { "IPv4" };
    let default = advertise_address(&ProxySpec::default(), service_ip);
    Err(WorkloadError::Invalid {
        object: crate::render::describe(cpi),
        errors: FieldErrors(vec![FieldError {
            field: "spec.proxy.advertiseAddress".into(),
            message: format!(
                "{chosen} is {}, but the workload cluster's kubernetes Service is {} ({service_ip}): kube-proxy ignores endpoints of another family than the Service's, so pods would lose the API server; set an {} address, or remove the field for the default {default}",
                family(chosen),
                family(service_ip),
                family(service_ip),
            ),
        }]),
    })
}

/// The labels on every object that is ours in the workload cluster.
pub fn own_labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY_LABEL.to_string(), MANAGER.to_string()),
        (NAME_LABEL.to_string(), NAME.to_string()),
    ])
}

/// Whether an object with `labels` is ours: only objects we created carry
/// [`own_labels`].
pub fn is_ours(labels: &BTreeMap<String, String>) -> bool {
    labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGER)
}

/// The labels that select the proxy pods (immutable in the DaemonSet selector).
pub fn selector_labels() -> BTreeMap<String, String> {
    BTreeMap::from([(NAME_LABEL.to_string(), NAME.to_string())])
}

/// Whether `service` selects the proxy pods.
pub fn selects_proxy_pods(service: &k8s_openapi::api::core::v1::Service) -> bool {
    service
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .is_some_and(|s| *s == selector_labels())
}

/// Whether `service` selects the proxy pods with `internalTrafficPolicy:
/// Local`: service steering holds.
pub fn service_steering_holds(service: &k8s_openapi::api::core::v1::Service) -> bool {
    selects_proxy_pods(service)
        && service
            .spec
            .as_ref()
            .and_then(|s| s.internal_traffic_policy.as_deref())
            == Some("Local")
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
