//! Workload-cluster objects of a ControlPlaneIngress, pure: the
//! node proxy (ConfigMap with its config, Secret with its certificate,
//! DaemonSet), the steering of `kubernetes.default.svc` to it, and the
//! partial objects that set `KUBERNETES_SERVICE_HOST/PORT` on the
//! cloud-controller-manager, and, for dataplanes that replace kube-proxy,
//! the API server's address where their agents read it. The controller
//! applies them with server-side apply; `hcp-ingress render --workload`
//! prints them.

mod ccm;
mod endpoint;
mod proxy;
mod shared;
mod steering;
mod takeover;

use std::{net::IpAddr, time::SystemTime};

use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{ConfigMap, Endpoints, Secret, Service},
    discovery::v1::EndpointSlice,
};
use kube::api::DynamicObject;

pub use ccm::*;
pub use endpoint::*;
pub use proxy::{
    ADMIN_PORT, CONFIG_DIR, CONFIG_FILE, PROXY_COMMAND, RESTART_HASH_ANNOTATION,
    SERVICE_STEERING_ADMIN_PORT, TLS_DIR, admin_port, proxy_capabilities, proxy_config, proxy_port,
    service_handover_patch,
};
pub use shared::dynamic;
pub use shared::{
    DEFAULT_ADVERTISE_ADDRESS_V4, DEFAULT_ADVERTISE_ADDRESS_V6, DEFAULT_CLUSTER_DOMAIN,
    DEFAULT_IMAGE, DEFAULT_SERVICE_IP, ENDPOINT_SLICE_MANAGER, NAME, NAME_LABEL, NAMESPACE,
    ProxyTls, SERVICE_STEERING_NAMESPACE, SKIP_MIRROR_LABEL, WorkloadError, WorkloadInputs,
    advertise_address, check_advertise_family, is_ours, own_labels, proxy_namespace, proxy_spec,
    selector_labels, selects_proxy_pods, service_steering_holds,
};
pub use steering::{
    Deferred, FINISH_WITHOUT_RESTORE_ANNOTATION, HANDOVER_PAUSE, Live, RECORD_KEY, RECORD_NAME,
    Restore, ServiceFields, SteeringRecord, bare_endpoints, bridge_slice, parse_record,
    points_at_proxy, record, record_config_map, restore, service_release_for_switch, wait_since,
};
pub use takeover::{
    K0S_STACK_LABEL, K0SMOTRON_STOP_PATCH, ServiceRelease, pending, service_release,
};

use crate::{
    api::{ControlPlaneIngress, ProxyMode, Steering, validation},
    pki::LeafSpec,
};

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
        let mut out = self.proxy_to_dynamic()?;
        out.extend(self.steering_to_dynamic()?);
        Ok(out)
    }

    /// The steering objects alone, in apply order.
    pub fn steering_to_dynamic(&self) -> Result<Vec<DynamicObject>, WorkloadError> {
        let mut out = Vec::new();
        match &self.steering {
            SteeringObjects::AdvertiseAddress {
                endpoints,
                endpoint_slice,
            } => {
                // The slice first: the skip-mirror label on the Endpoints
                // makes the mirroring controller delete the slice it made
                // of the API server's own Endpoints, and kube-proxy must
                // never be left without one in between.
                out.push(dynamic(endpoint_slice.as_ref(), "EndpointSlice")?);
                out.push(dynamic(endpoints.as_ref(), "Endpoints")?);
            }
            SteeringObjects::Service { patch } => out.push(patch.as_ref().clone()),
        }
        Ok(out)
    }

    /// The proxy's own objects, without the steering: ConfigMap, Secret
    /// (when present), DaemonSet, in the order they are applied.
    pub fn proxy_to_dynamic(&self) -> Result<Vec<DynamicObject>, WorkloadError> {
        let mut out = vec![dynamic(&self.config_map, "ConfigMap")?];
        if let Some(secret) = &self.secret {
            out.push(dynamic(secret, "Secret")?);
        }
        out.push(dynamic(&self.daemon_set, "DaemonSet")?);
        Ok(out)
    }
}

// For tests here and in the doctor that compare live objects with what the
// controller writes: both need the default steering's two objects.
#[cfg(test)]
impl SteeringObjects {
    /// The Endpoints and EndpointSlice of advertise-address steering (the
    /// default); panics on service steering.
    pub(crate) fn advertise_address(&self) -> (&Endpoints, &EndpointSlice) {
        let Self::AdvertiseAddress {
            endpoints,
            endpoint_slice,
        } = self
        else {
            panic!("advertise-address is the default");
        };
        (endpoints, endpoint_slice)
    }
}

/// Every node-proxy object of a ControlPlaneIngress; `None` when
/// `spec.proxy.enabled` is false (the controller then removes them).
pub fn proxy(
    cpi: &ControlPlaneIngress,
    inputs: &WorkloadInputs,
) -> Result<Option<ProxyObjects>, WorkloadError> {
    validation::validate(cpi).map_err(|errors| WorkloadError::Invalid {
        object: super::shared::describe(cpi),
        errors,
    })?;
    let spec = proxy_spec(cpi);
    if !spec.enabled {
        return Ok(None);
    }
    check_advertise_family(cpi, inputs.service_ip)?;
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
    if let Some(ip) = cluster_ip(kubernetes) {
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

/// The live `kubernetes` Service's ClusterIP, when it has one that parses.
fn cluster_ip(kubernetes: Option<&Service>) -> Option<IpAddr> {
    kubernetes?.spec.as_ref()?.cluster_ip.as_ref()?.parse().ok()
}

/// The service IP the controller renders with (see [`inputs_from_service`]):
/// the live `kubernetes` ClusterIP, else [`DEFAULT_SERVICE_IP`]. Its family
/// picks the default advertise address ([`advertise_address`]).
pub fn service_ip(kubernetes: Option<&Service>) -> IpAddr {
    cluster_ip(kubernetes).unwrap_or(DEFAULT_SERVICE_IP)
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
    Some(LeafSpec::proxy(
        &inputs.cluster_domain,
        inputs.service_ip,
        advertise_address(&spec, inputs.service_ip),
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

#[cfg(test)]
mod tests;
