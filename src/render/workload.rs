//! Workload-cluster objects of a ControlPlaneIngress, pure: the
//! node proxy (ConfigMap with its config, Secret with its certificate,
//! DaemonSet), the steering of `kubernetes.default.svc` to it, and the
//! partial objects that set `KUBERNETES_SERVICE_HOST/PORT` on the
//! cloud-controller-manager. The controller applies them with server-side
//! apply; `hcp-ingress render --workload` prints them.

mod ccm;
mod proxy;
mod steering;

use std::{collections::BTreeMap, fmt, net::IpAddr, time::SystemTime};

use k8s_openapi::{
    ByteString,
    api::{
        apps::v1::DaemonSet,
        core::v1::{ConfigMap, Endpoints, Secret, Service},
        discovery::v1::EndpointSlice,
    },
};
use kube::api::DynamicObject;
use serde::{Serialize, de::DeserializeOwned};

pub use ccm::*;
pub use proxy::{
    ADMIN_PORT, CONFIG_DIR, CONFIG_FILE, RESTART_HASH_ANNOTATION, TLS_DIR, proxy_capabilities,
    proxy_config, proxy_port,
};
pub use steering::{
    RECORD_KEY, RECORD_NAME, Restore, ServiceFields, SteeringRecord, parse_record, record,
    record_config_map, restore,
};

use crate::{
    api::{
        ControlPlaneIngress, MANAGED_BY_LABEL, MANAGER, ProxyMode, ProxySpec, Steering,
        validation::{self, FieldErrors},
    },
    pki::LeafSpec,
};

/// Namespace of the proxy's objects in the workload cluster.
pub const NAMESPACE: &str = "kube-system";
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

/// The node proxy's objects in the workload cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyObjects {
    /// The proxy's mode (reencrypt needs [`ProxyObjects::secret`]).
    pub mode: ProxyMode,
    /// `kube-system/hcp-ingress-proxy`: `config.yaml` and `ca.crt`.
    pub config_map: ConfigMap,
    /// `kube-system/hcp-ingress-proxy`, `kubernetes.io/tls`: present in
    /// reencrypt mode once a certificate was given.
    pub secret: Option<Secret>,
    /// `kube-system/hcp-ingress-proxy`.
    pub daemon_set: DaemonSet,
    /// How `kubernetes.default.svc` reaches the proxy.
    pub steering: SteeringObjects,
}

/// The objects that steer the `kubernetes` Service to the proxy.
#[derive(Debug, Clone, PartialEq)]
pub enum SteeringObjects {
    /// `default/kubernetes` Endpoints and EndpointSlice with the one advertise
    /// address; the API server must run with `--endpoint-reconciler-type=none`.
    AdvertiseAddress {
        /// `default/kubernetes` Endpoints (skip-mirror).
        endpoints: Box<Endpoints>,
        /// `default/kubernetes` EndpointSlice.
        endpoint_slice: Box<EndpointSlice>,
    },
    /// A partial `default/kubernetes` Service for server-side apply: selector
    /// on the proxy pods, `internalTrafficPolicy: Local`,
    /// `publishNotReadyAddresses: true`. Not ours: no labels of ours.
    Service {
        /// The partial Service.
        patch: Box<DynamicObject>,
    },
}

impl ProxyObjects {
    /// Every object, in apply order (config and certificate before the pods
    /// that mount them, steering last), as dynamic objects for printing.
    pub fn to_dynamic(&self) -> Result<Vec<DynamicObject>, WorkloadError> {
        let mut out = vec![dynamic(&self.config_map, "ConfigMap")?];
        if let Some(secret) = &self.secret {
            out.push(dynamic(secret, "Secret")?);
        }
        out.push(dynamic(&self.daemon_set, "DaemonSet")?);
        match &self.steering {
            SteeringObjects::AdvertiseAddress {
                endpoints,
                endpoint_slice,
            } => {
                out.push(dynamic(endpoints.as_ref(), "Endpoints")?);
                out.push(dynamic(endpoint_slice.as_ref(), "EndpointSlice")?);
            }
            SteeringObjects::Service { patch } => out.push(patch.as_ref().clone()),
        }
        Ok(out)
    }
}

/// The proxy settings in force: `spec.proxy`, or its defaults when absent.
pub fn proxy_spec(cpi: &ControlPlaneIngress) -> ProxySpec {
    cpi.spec.proxy.clone().unwrap_or_default()
}

/// Every node-proxy object of a ControlPlaneIngress; `None` when
/// `spec.proxy.enabled` is false (the controller then removes them).
pub fn proxy(
    cpi: &ControlPlaneIngress,
    inputs: &WorkloadInputs,
) -> Result<Option<ProxyObjects>, WorkloadError> {
    validation::validate(cpi).map_err(|errors| WorkloadError::Invalid {
        object: super::describe(cpi),
        errors,
    })?;
    let spec = proxy_spec(cpi);
    if !spec.enabled {
        return Ok(None);
    }
    let config_map = proxy::config_map(cpi, inputs)?;
    let secret = proxy::secret(&spec, inputs)?;
    let daemon_set = proxy::daemon_set(cpi, inputs)?;
    let steering = match spec.steering {
        Steering::AdvertiseAddress => SteeringObjects::AdvertiseAddress {
            endpoints: Box::new(proxy::endpoints(&spec, inputs)?),
            endpoint_slice: Box::new(proxy::endpoint_slice(&spec, inputs)?),
        },
        Steering::Service => SteeringObjects::Service {
            patch: Box::new(proxy::service_patch()),
        },
    };
    Ok(Some(ProxyObjects {
        mode: spec.mode,
        config_map,
        secret,
        daemon_set,
        steering,
    }))
}

/// The facts the workload objects depend on, read from the live
/// `default/kubernetes` Service: its ClusterIP is the service IP, and with
/// service steering the proxy listens on its targetPort (the API server owns
/// the Service's ports). The controller renders with these, and `doctor`
/// compares the live steering with what they render.
pub fn inputs_from_service(
    steering: Steering,
    kubernetes: Option<&Service>,
    base: WorkloadInputs,
) -> WorkloadInputs {
    let mut inputs = base;
    let spec = kubernetes.and_then(|s| s.spec.as_ref());
    if let Some(ip) = spec
        .and_then(|s| s.cluster_ip.as_ref())
        .and_then(|ip| ip.parse::<IpAddr>().ok())
    {
        inputs.service_ip = ip;
    }
    if steering == Steering::Service {
        inputs.proxy_port = spec
            .and_then(|s| s.ports.as_ref()?.first()?.target_port.clone())
            .and_then(|p| match p {
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n) => {
                    u16::try_from(n).ok()
                }
                _ => None,
            });
    }
    inputs
}

/// The proxy certificate a ControlPlaneIngress needs at `now` (SANs from the
/// cluster domain, service IP and advertise address; [`crate::pki::DEFAULT_VALIDITY`]);
/// `None` when it needs none (proxy disabled, or a mode that does not
/// terminate TLS).
/// The controller mints with it and checks the live one with
/// [`crate::pki::renewal_due`].
pub fn proxy_leaf_spec(
    cpi: &ControlPlaneIngress,
    inputs: &WorkloadInputs,
    now: SystemTime,
) -> Option<LeafSpec> {
    let spec = proxy_spec(cpi);
    if !spec.enabled || !spec.mode.terminates_tls() {
        return None;
    }
    // An unparsable address fails validation before anything is applied.
    let advertise = spec.advertise_address.parse().ok()?;
    Some(LeafSpec::proxy(
        &inputs.cluster_domain,
        inputs.service_ip,
        advertise,
        now,
    ))
}

/// What differs between the wanted steering and the live objects, in words
/// (empty: intact). Something else rewriting `default/kubernetes` (an API
/// server without `--endpoint-reconciler-type=none`, an add-on) shows up here.
pub fn steering_drift(
    wanted: &SteeringObjects,
    live_endpoints: Option<&Endpoints>,
    live_slice: Option<&EndpointSlice>,
    live_service: Option<&Service>,
) -> Vec<String> {
    let mut drift = Vec::new();
    match wanted {
        SteeringObjects::AdvertiseAddress {
            endpoints,
            endpoint_slice,
        } => {
            let endpoint_view = |e: &Endpoints| {
                let subsets = e.subsets.iter().flatten();
                let ips: Vec<String> = subsets
                    .clone()
                    .flat_map(|s| s.addresses.iter().flatten().map(|a| a.ip.clone()))
                    .collect();
                let ports: Vec<i32> = subsets
                    .flat_map(|s| s.ports.iter().flatten().map(|p| p.port))
                    .collect();
                (ips, ports)
            };
            match live_endpoints {
                None => drift.push("Endpoints default/kubernetes is missing".to_string()),
                Some(live) if endpoint_view(live) != endpoint_view(endpoints) => {
                    drift.push(format!(
                        "Endpoints default/kubernetes holds {:?}, not {:?}",
                        endpoint_view(live),
                        endpoint_view(endpoints)
                    ))
                }
                Some(_) => {}
            }
            let slice_view = |e: &EndpointSlice| {
                let ips: Vec<String> = e
                    .endpoints
                    .iter()
                    .flat_map(|p| p.addresses.clone())
                    .collect();
                let ports: Vec<Option<i32>> = e.ports.iter().flatten().map(|p| p.port).collect();
                (ips, ports)
            };
            match live_slice {
                None => drift.push("EndpointSlice default/kubernetes is missing".to_string()),
                Some(live) if slice_view(live) != slice_view(endpoint_slice) => {
                    drift.push(format!(
                        "EndpointSlice default/kubernetes holds {:?}, not {:?}",
                        slice_view(live),
                        slice_view(endpoint_slice)
                    ))
                }
                Some(_) => {}
            }
        }
        SteeringObjects::Service { .. } => {
            let Some(spec) = live_service.and_then(|s| s.spec.as_ref()) else {
                drift.push("Service default/kubernetes is missing".to_string());
                return drift;
            };
            if spec.selector.as_ref() != Some(&selector_labels()) {
                drift.push(format!(
                    "Service default/kubernetes selects {:?}",
                    spec.selector
                ));
            }
            if spec.internal_traffic_policy.as_deref() != Some("Local") {
                drift.push(format!(
                    "Service default/kubernetes has internalTrafficPolicy {:?}",
                    spec.internal_traffic_policy
                ));
            }
            if spec.publish_not_ready_addresses != Some(true) {
                drift.push(
                    "Service default/kubernetes does not publish not-ready addresses".to_string(),
                );
            }
        }
    }
    drift
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
fn typed<T: DeserializeOwned>(
    kind: &'static str,
    value: serde_json::Value,
) -> Result<T, WorkloadError> {
    serde_json::from_value(value).map_err(|source| WorkloadError::Serialize { kind, source })
}

fn dynamic<T: Serialize>(obj: &T, kind: &'static str) -> Result<DynamicObject, WorkloadError> {
    let value =
        serde_json::to_value(obj).map_err(|source| WorkloadError::Serialize { kind, source })?;
    serde_json::from_value(value).map_err(|source| WorkloadError::Serialize { kind, source })
}

fn bytes(s: &str) -> ByteString {
    ByteString(s.as_bytes().to_vec())
}

#[cfg(test)]
mod tests;
