//! Giving `default/kubernetes` back. Steering changes objects that are not
//! ours (the API server's `kubernetes` Service, Endpoints and EndpointSlice),
//! so before the first steering write the controller records what they held,
//! in a ConfigMap of ours in the workload cluster, and when the proxy goes
//! (deletion, opt-out, a steering switch) it writes that back first. Pure:
//! the controller does the reads and writes.

use std::{collections::BTreeMap, net::IpAddr, time::Duration};

use k8s_openapi::api::{
    core::v1::{ConfigMap, Endpoints, Service},
    discovery::v1::EndpointSlice,
};
use kube::api::DynamicObject;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::shared::{
    ENDPOINT_SLICE_MANAGER, NAME, NAMESPACE, WorkloadError, own_labels, selector_labels, typed,
};
use crate::api::Steering;

/// Name of the ConfigMap (in [`NAMESPACE`]) that holds the record.
pub const RECORD_NAME: &str = "hcp-ingress-steering";
/// Key of the record in that ConfigMap.
pub const RECORD_KEY: &str = "record.json";
/// Label the EndpointSlice of a given Service carries.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// `endpointslice.kubernetes.io/managed-by`.
const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
/// The annotation our own applies leave (see `controller::apply`).
const APPLIED_DIGEST_ANNOTATION: &str = "hcp-ingress.dev/applied-digest";

/// What `default/kubernetes` held before steering took it over, and which
/// steering is applied now.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SteeringRecord {
    /// The steering mode we applied last; `None` before the first apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<Steering>,
    /// A mode whose proxy may still be installed though it does not steer:
    /// the mode switched away from (its proxy goes in a pass after the
    /// switch, once kube-proxy took the new path in), or the target of a
    /// switch still under way (its proxy goes if the switch is called off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaving: Option<Steering>,
    /// Service steering's proxy runs in its own namespace: set when service
    /// steering is applied. A record of service steering without it was
    /// made by a release that ran that proxy in `kube-system`, where the
    /// Service selects nothing; that proxy is removed once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub service_proxy_beside_service: bool,
    /// What a removal gave back, in words, while the proxy still runs: it is
    /// removed in a later pass, once kube-proxy took the given-back
    /// endpoints in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored: Option<String>,
    /// The Service fields service steering changes, as they were.
    #[serde(default)]
    pub service: ServiceFields,
    /// `default/kubernetes` Endpoints as they were (labels and subsets);
    /// `None`: there were none, or they were already ours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Value>,
    /// `default/kubernetes` EndpointSlice as it was (labels, addressType,
    /// endpoints, ports); `None`: there was none, or it was already ours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_slice: Option<Value>,
    /// The Service already selected the proxy when the record was made: its
    /// original fields are unknown.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub service_unknown: bool,
    /// Address steering took the Service's selector and
    /// `internalTrafficPolicy` too (a provider's node proxy taken over): a
    /// give-back restores them first, so the provider's proxy pods are
    /// selected again before our endpoints go.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub service_released: bool,
    /// When a path was last replaced (a give-back, a steering switch), in
    /// Unix seconds. The replaced path's proxy stays until kube-proxy on
    /// every node has had the handover pause to take the new path in,
    /// whatever wakes the controller before: a proxy that stops while
    /// kube-proxy still sends pods to it refuses their connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced_at: Option<i64>,
    /// When, during a hand-over to service steering, the EndpointSlice
    /// controller was first seen listing every ready proxy pod, in Unix
    /// seconds. The Service turns `internalTrafficPolicy: Local` only once
    /// kube-proxy had the handover pause to take those slices in: its
    /// Service and EndpointSlice watches are apart, and `Local` with none
    /// of the node's endpoints known drops every connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxies_listed_at: Option<i64>,
    /// What a give-back still deletes once kube-proxy had the handover
    /// pause to take the given-back Service in: the slices it served from
    /// while the Service was steered. Its Service and EndpointSlice watches
    /// are apart: seeing those slices go first, with `Local` still in force
    /// and none of its node's endpoints left, it would drop every
    /// connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred: Option<Deferred>,
}

/// The deletions of a give-back, made a handover pause after its writes
/// (see [`Restore`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Deferred {
    /// Wait first for a slice that is neither ours nor the proxy pods'.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub await_other_slice: bool,
    /// The EndpointSlice controller's slices for our selector.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub abandoned_slices: bool,
    /// Our EndpointSlice `default/kubernetes`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub endpoint_slice: bool,
    /// Our Endpoints `default/kubernetes`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub endpoints: bool,
}

impl Deferred {
    /// Whether anything is left to delete.
    pub fn any(&self) -> bool {
        self.abandoned_slices || self.endpoint_slice || self.endpoints
    }
}

/// How long a path that was just replaced (a steering switch, a give-back)
/// keeps its proxy: kube-proxy programs a change within a second or two.
pub const HANDOVER_PAUSE: Duration = Duration::from_secs(5);

impl SteeringRecord {
    /// How much longer the replaced path's proxy must stay, at `now` (Unix
    /// seconds); `None` once `pause` has passed since the replacement, or
    /// when none is recorded.
    pub fn handover_wait(&self, now: i64, pause: Duration) -> Option<Duration> {
        wait_since(self.replaced_at?, now, pause)
    }
}

/// What is left of `pause` begun at `since`, at `now` (Unix seconds);
/// `None` once it has passed. A clock that went back waits at most one
/// pause from now.
pub fn wait_since(since: i64, now: i64, pause: Duration) -> Option<Duration> {
    let elapsed = now.saturating_sub(since).max(0).unsigned_abs();
    Some(pause.saturating_sub(Duration::from_secs(elapsed))).filter(|w| !w.is_zero())
}

/// The `default/kubernetes` Service fields service steering sets.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceFields {
    /// `spec.selector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<BTreeMap<String, String>>,
    /// `spec.internalTrafficPolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_traffic_policy: Option<String>,
    /// `spec.publishNotReadyAddresses`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish_not_ready_addresses: Option<bool>,
}

/// The ControlPlaneIngress annotation that lets a removal finish when
/// nothing safe can be given back: `default/kubernetes` is then left
/// without our endpoints (as it was before steering, when it had none), and
/// pods lose the in-cluster API path until something writes them.
pub const FINISH_WITHOUT_RESTORE_ANNOTATION: &str = "hcp-ingress.dev/finish-without-restore";

/// The objects that give back what a steering mode took, or why nothing
/// safe can be given back.
#[derive(Debug, Clone, PartialEq)]
pub struct Restore {
    /// Apply these with our field manager, forced, whatever is there: fields
    /// we set and they lack are dropped by server-side apply.
    pub apply: Vec<DynamicObject>,
    /// Delete `default/kubernetes` EndpointSlice if it is still ours: we
    /// created it, there was none to give back.
    pub delete_endpoint_slice: bool,
    /// Delete `default/kubernetes` Endpoints: they point at the proxy and
    /// none were there before (only with the opt-in to finish anyway).
    pub delete_endpoints: bool,
    /// Addresses are given back: wait (bounded) until an EndpointSlice that
    /// is neither ours nor the EndpointSlice controller's for our selector
    /// (the recorded one, the mirroring controller's, the API server's)
    /// holds them before those go, so kube-proxy is never left without an
    /// endpoint.
    pub await_other_slice: bool,
    /// Delete the EndpointSlices the EndpointSlice controller made for our
    /// selector: it leaves them behind when a Service loses its selector, and
    /// they would keep pointing at proxy pods that are about to go.
    pub delete_abandoned_slices: bool,
    /// What was restored, in words, for the condition and the Event.
    pub summary: String,
}

/// What the removal finds live, besides the record.
#[derive(Debug, Clone, Copy)]
pub struct Live<'a> {
    /// `default/kubernetes` Endpoints as they are now.
    pub endpoints: Option<&'a Endpoints>,
    /// The advertise address in force: an address that is the proxy's.
    pub advertise_address: IpAddr,
    /// [`FINISH_WITHOUT_RESTORE_ANNOTATION`] is set.
    pub finish_anyway: bool,
}

/// Whether Endpoints send anything to the node proxy: the advertise
/// address, or a proxy pod that the endpoints controller selected.
pub fn points_at_proxy(endpoints: &Endpoints, advertise_address: IpAddr) -> bool {
    endpoints
        .subsets
        .iter()
        .flatten()
        .flat_map(|s| {
            s.addresses
                .iter()
                .flatten()
                .chain(s.not_ready_addresses.iter().flatten())
        })
        .any(|a| {
            a.ip.parse::<IpAddr>().ok() == Some(advertise_address)
                || a.target_ref.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some("Pod")
                        && r.name
                            .as_deref()
                            .is_some_and(|n| n.starts_with(&format!("{NAME}-")))
                })
        })
}

/// Whether Endpoints hold at least one address.
fn has_addresses(endpoints: &Endpoints) -> bool {
    endpoints
        .subsets
        .iter()
        .flatten()
        .any(|s| s.addresses.as_ref().is_some_and(|a| !a.is_empty()))
}

/// Why nothing can be given back, and the two ways on, for a mode.
fn nothing_to_give_back(mode: Steering) -> String {
    let write = match mode {
        Steering::AdvertiseAddress => {
            "write Endpoints default/kubernetes with the API server's own address (a reachable address and port that serve its certificate for the kubernetes Service IP); the removal then gives those back and finishes on its next try (within a minute), or "
        }
        // The endpoints controller rewrites Endpoints of a Service with a selector.
        Steering::Service => "",
    };
    format!(
        "Endpoints default/kubernetes did not exist (or were already steered) before steering, as with an API server run with --endpoint-reconciler-type=none: there are no addresses to give back, and removing the proxy now would cut every pod off the API. To finish: {write}annotate the ControlPlaneIngress {FINISH_WITHOUT_RESTORE_ANNOTATION}=true to remove the proxy anyway, leaving default/kubernetes without endpoints"
    )
}

/// Record what `default/kubernetes` holds now, before our first steering write.
/// Objects that already carry our steering are not recorded as originals.
pub fn record(
    service: Option<&Service>,
    endpoints: Option<&Endpoints>,
    slice: Option<&EndpointSlice>,
) -> SteeringRecord {
    let spec = service.and_then(|s| s.spec.as_ref());
    let service_unknown = spec.is_some_and(|s| s.selector.as_ref() == Some(&selector_labels()));
    let service = match spec {
        Some(s) if !service_unknown => ServiceFields {
            selector: s.selector.clone().filter(|m| !m.is_empty()),
            internal_traffic_policy: s.internal_traffic_policy.clone(),
            publish_not_ready_addresses: s.publish_not_ready_addresses,
        },
        _ => ServiceFields::default(),
    };
    let endpoints = endpoints
        .filter(|e| {
            !e.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(APPLIED_DIGEST_ANNOTATION))
        })
        .map(|e| {
            json!({
                "labels": e.metadata.labels.clone().unwrap_or_default(),
                "subsets": e.subsets.clone().unwrap_or_default(),
            })
        });
    let endpoint_slice = slice
        .filter(|s| {
            s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(MANAGED_BY))
                .map(String::as_str)
                != Some(ENDPOINT_SLICE_MANAGER)
        })
        .map(|s| {
            json!({
                "labels": s.metadata.labels.clone().unwrap_or_default(),
                "addressType": s.address_type,
                "endpoints": s.endpoints,
                "ports": s.ports.clone().unwrap_or_default(),
            })
        });
    SteeringRecord {
        applied: None,
        leaving: None,
        service_proxy_beside_service: false,
        restored: None,
        service,
        endpoints,
        endpoint_slice,
        service_unknown,
        service_released: false,
        replaced_at: None,
        proxies_listed_at: None,
        deferred: None,
    }
}

/// The ConfigMap that keeps a record in the workload cluster.
pub fn record_config_map(record: &SteeringRecord) -> Result<ConfigMap, WorkloadError> {
    let text = serde_json::to_string(record).map_err(|source| WorkloadError::Serialize {
        kind: "ConfigMap",
        source,
    })?;
    typed(
        "ConfigMap",
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": RECORD_NAME, "namespace": NAMESPACE, "labels": own_labels()},
            "data": {RECORD_KEY: text},
        }),
    )
}

/// The record in a ConfigMap, or why it cannot be read.
pub fn parse_record(config_map: &ConfigMap) -> Result<SteeringRecord, String> {
    let text = config_map
        .data
        .as_ref()
        .and_then(|d| d.get(RECORD_KEY))
        .ok_or_else(|| format!("ConfigMap {NAMESPACE}/{RECORD_NAME} has no {RECORD_KEY}"))?;
    serde_json::from_str(text)
        .map_err(|e| format!("ConfigMap {NAMESPACE}/{RECORD_NAME} key {RECORD_KEY}: {e}"))
}

/// What to write to give back what `mode` took: the record first; where it
/// holds no addresses, the live Endpoints when someone else wrote them since
/// (they are given back as they are); else, only with the opt-in, nothing.
/// `Err`: nothing safe can be given back, and why.
pub fn restore(record: &SteeringRecord, mode: Steering, live: &Live) -> Result<Restore, String> {
    let takes_service = mode == Steering::Service || record.service_released;
    let service = if takes_service {
        Some(service_fields(record).or_else(|why| {
            if live.finish_anyway {
                Ok(drop_service_fields())
            } else {
                Err(format!(
                    "{why}. To finish anyway: annotate the ControlPlaneIngress {FINISH_WITHOUT_RESTORE_ANNOTATION}=true"
                ))
            }
        })?)
    } else {
        None
    };
    let mut restore = match addresses(record) {
        Some(restore) => restore?,
        None => match live.endpoints {
            Some(now) if has_addresses(now) && !points_at_proxy(now, live.advertise_address) => {
                // Written since by a user or the API server: theirs to keep.
                // Our labels go (skip-mirror among them, so the mirroring
                // controller gives them an EndpointSlice), our slice too.
                Restore {
                    apply: vec![bare_endpoints()],
                    delete_endpoint_slice: true,
                    await_other_slice: true,
                    delete_endpoints: false,
                    delete_abandoned_slices: false,
                    summary: format!(
                        "Endpoints default/kubernetes as written since steering ({})",
                        endpoint_addresses(&serde_json::to_value(&now.subsets).unwrap_or_default())
                            .join(" ")
                    ),
                }
            }
            _ if live.finish_anyway => Restore {
                apply: Vec::new(),
                delete_endpoint_slice: true,
                await_other_slice: false,
                delete_endpoints: live
                    .endpoints
                    .is_some_and(|e| points_at_proxy(e, live.advertise_address)),
                delete_abandoned_slices: false,
                summary: format!(
                    "no endpoints for default/kubernetes, as before steering ({FINISH_WITHOUT_RESTORE_ANNOTATION})"
                ),
            },
            _ => return Err(nothing_to_give_back(mode)),
        },
    };
    if let Some((patch, summary)) = service {
        // The Service first: a recorded selector makes the provider's proxy
        // pods endpoints again before ours are taken away; without one, the
        // endpoint controllers stop writing before the addresses go back.
        restore.apply.insert(0, patch);
        restore.summary = format!("{summary}; {}", restore.summary);
        restore.delete_abandoned_slices = record
            .service
            .selector
            .as_ref()
            .is_none_or(|s| s.is_empty())
            || record.service_unknown;
        restore.await_other_slice |= restore.delete_abandoned_slices && !live.finish_anyway;
    }
    Ok(restore)
}

/// Our EndpointSlice `default/kubernetes` with the addresses and ports of
/// `endpoints` (a provider's, without the skip-mirror label, which only the
/// mirroring controller turns into a slice): written before service
/// steering's first selector, it carries the traffic from the moment the
/// selector makes the mirroring controller delete its slice until the
/// EndpointSlice controller has made the proxy pods'. A slice holds one
/// family, and kube-proxy serves the Service from slices of its own
/// (`service_ip`'s) only: `None` when `endpoints` hold no address of it.
pub fn bridge_slice(endpoints: &Endpoints, service_ip: IpAddr) -> Option<DynamicObject> {
    let subsets = endpoints.subsets.as_deref().unwrap_or_default();
    let ready = json!({"ready": true, "serving": true, "terminating": false});
    let endpoints: Vec<Value> = subsets
        .iter()
        .flat_map(|s| s.addresses.iter().flatten())
        .filter(|a| {
            a.ip.parse::<IpAddr>()
                .is_ok_and(|ip| ip.is_ipv6() == service_ip.is_ipv6())
        })
        .map(|a| json!({"addresses": [a.ip], "conditions": ready}))
        .collect();
    if endpoints.is_empty() {
        return None;
    }
    let ports: Vec<Value> = subsets
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .map(|p| json!({"name": p.name, "port": p.port, "protocol": p.protocol}))
        .collect();
    let mut labels = own_labels();
    labels.insert(SERVICE_NAME_LABEL.into(), "kubernetes".into());
    labels.insert(
        "endpointslice.kubernetes.io/managed-by".into(),
        ENDPOINT_SLICE_MANAGER.into(),
    );
    dynamic(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": labels},
        "addressType": if service_ip.is_ipv6() { "IPv6" } else { "IPv4" },
        "endpoints": endpoints,
        "ports": ports,
    }))
    .ok()
}

/// A partial Service with no field: applied with our manager, it drops the
/// fields we set, whatever they were before.
fn drop_service_fields() -> (DynamicObject, String) {
    let patch = dynamic(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default"},
        "spec": {},
    }))
    .expect("a Service with metadata is a DynamicObject");
    (
        patch,
        "Service default/kubernetes: our selector and traffic policy dropped".into(),
    )
}

/// Endpoints with no field: applied with our manager, they drop our labels,
/// annotation and whatever subsets are still ours.
pub fn bare_endpoints() -> DynamicObject {
    dynamic(json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "kubernetes", "namespace": "default"},
    }))
    .expect("Endpoints with metadata are a DynamicObject")
}

/// The Service partial a steering switch away from service steering
/// applies: the recorded fields, or ours dropped when they are unknown.
pub fn service_release_for_switch(record: &SteeringRecord) -> DynamicObject {
    service_fields(record)
        .unwrap_or_else(|_| drop_service_fields())
        .0
}

/// The Service fields as recorded, as a partial Service, and in words.
fn service_fields(record: &SteeringRecord) -> Result<(DynamicObject, String), String> {
    if record.service_unknown {
        return Err(
            "Service default/kubernetes already selected the proxy when steering was recorded: its original selector is unknown".into(),
        );
    }
    let mut spec = serde_json::Map::new();
    let fields = &record.service;
    if let Some(selector) = &fields.selector {
        spec.insert("selector".into(), json!(selector));
    }
    if let Some(policy) = &fields.internal_traffic_policy {
        spec.insert("internalTrafficPolicy".into(), json!(policy));
    }
    if let Some(publish) = fields.publish_not_ready_addresses {
        spec.insert("publishNotReadyAddresses".into(), json!(publish));
    }
    let summary = format!(
        "Service default/kubernetes: selector {}, internalTrafficPolicy {}",
        fields
            .selector
            .as_ref()
            .map(|s| format!("{s:?}"))
            .unwrap_or_else(|| "removed".into()),
        fields
            .internal_traffic_policy
            .as_deref()
            .unwrap_or("default"),
    );
    let patch = dynamic(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default"},
        "spec": spec,
    }))?;
    Ok((patch, summary))
}

/// The Endpoints and EndpointSlice as recorded; `None` when none were.
fn addresses(record: &SteeringRecord) -> Option<Result<Restore, String>> {
    let endpoints = record.endpoints.as_ref()?;
    Some(recorded_addresses(record, endpoints))
}

fn recorded_addresses(record: &SteeringRecord, endpoints: &Value) -> Result<Restore, String> {
    let mut apply = vec![dynamic(json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": endpoints["labels"]},
        "subsets": endpoints["subsets"],
    }))?];
    let mut delete_endpoint_slice = false;
    match &record.endpoint_slice {
        Some(slice) => {
            let mut labels = slice["labels"].clone();
            // The slice must stay tied to the Service whatever it held.
            labels[SERVICE_NAME_LABEL] = json!("kubernetes");
            apply.push(dynamic(json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "kubernetes", "namespace": "default", "labels": labels},
                "addressType": slice["addressType"],
                "endpoints": slice["endpoints"],
                "ports": slice["ports"],
            }))?);
        }
        // We created it: it goes, kube-proxy then uses the Endpoints' mirror or the API server's own.
        None => delete_endpoint_slice = true,
    }
    let addresses = endpoint_addresses(&endpoints["subsets"]);
    Ok(Restore {
        apply,
        delete_endpoint_slice,
        // The recorded addresses reach kube-proxy through a slice of
        // someone else (the recorded one, the mirroring controller's).
        await_other_slice: true,
        delete_endpoints: false,
        delete_abandoned_slices: false,
        summary: format!(
            "Endpoints{} default/kubernetes back at {}",
            if record.endpoint_slice.is_some() {
                " and EndpointSlice"
            } else {
                ""
            },
            if addresses.is_empty() {
                "no address (as they were)".to_string()
            } else {
                addresses.join(" ")
            }
        ),
    })
}

/// `ip:port` of every address of Endpoints subsets (as JSON).
fn endpoint_addresses(subsets: &Value) -> Vec<String> {
    subsets
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| {
            let ports: Vec<String> = s["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| p["port"].to_string())
                .collect();
            s["addresses"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |a| {
                    let ip = a["ip"].as_str().unwrap_or("?");
                    // An IPv6 address in brackets, as in any host:port.
                    let ip = if ip.contains(':') {
                        format!("[{ip}]")
                    } else {
                        ip.to_string()
                    };
                    format!("{ip}:{}", ports.join(","))
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

fn dynamic(value: Value) -> Result<DynamicObject, String> {
    serde_json::from_value(value).map_err(|e| format!("failed to build a restore object: {e}"))
}

#[cfg(test)]
mod tests;
