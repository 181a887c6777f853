//! Giving `default/kubernetes` back. Steering changes objects that are not
//! ours (the API server's `kubernetes` Service, Endpoints and EndpointSlice),
//! so before the first steering write the controller records what they held,
//! in a ConfigMap of ours in the workload cluster, and when the proxy goes
//! (deletion, opt-out, a steering switch) it writes that back first. Pure:
//! the controller does the reads and writes.

use std::collections::BTreeMap;

use k8s_openapi::api::{
    core::v1::{ConfigMap, Endpoints, Service},
    discovery::v1::EndpointSlice,
};
use kube::api::DynamicObject;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::shared::{
    ENDPOINT_SLICE_MANAGER, NAMESPACE, WorkloadError, own_labels, selector_labels, typed,
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
    /// What was restored, in words, for the condition and the Event.
    pub summary: String,
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
        service,
        endpoints,
        endpoint_slice,
        service_unknown,
        service_released: false,
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

/// What to write to give back what `mode` took, from the record.
/// `Err`: nothing safe can be given back, and why.
pub fn restore(record: &SteeringRecord, mode: Steering) -> Result<Restore, String> {
    match mode {
        Steering::Service => {
            let (patch, summary) = service_fields(record)?;
            Ok(Restore {
                apply: vec![patch],
                delete_endpoint_slice: false,
                summary,
            })
        }
        Steering::AdvertiseAddress => {
            let mut restore = addresses(record)?;
            if record.service_released {
                let (patch, summary) = service_fields(record)?;
                // The Service first: its selector makes the provider's proxy
                // pods endpoints again before ours are taken away.
                restore.apply.insert(0, patch);
                restore.summary = format!("{summary}; {}", restore.summary);
            }
            Ok(restore)
        }
    }
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

/// The Endpoints and EndpointSlice as recorded.
fn addresses(record: &SteeringRecord) -> Result<Restore, String> {
    let Some(endpoints) = &record.endpoints else {
        return Err(
            "Endpoints default/kubernetes did not exist (or were already steered) before steering: there are no addresses to give back; run the API server with its endpoint reconciler, or write them, then delete again".into(),
        );
    };
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
    let addresses: Vec<String> = endpoints["subsets"]
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
                .map(move |a| format!("{}:{}", a["ip"].as_str().unwrap_or("?"), ports.join(",")))
                .collect::<Vec<_>>()
        })
        .collect();
    Ok(Restore {
        apply,
        delete_endpoint_slice,
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

fn dynamic(value: Value) -> Result<DynamicObject, String> {
    serde_json::from_value(value).map_err(|e| format!("failed to build a restore object: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(selector: Option<Value>, policy: Option<&str>) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "kubernetes", "namespace": "default"},
            "spec": {"clusterIP": "10.96.0.1", "selector": selector, "internalTrafficPolicy": policy,
                     "ports": [{"name": "https", "port": 443, "targetPort": 6443}]}
        }))
        .unwrap()
    }

    fn endpoints(ip: &str, ours: bool) -> Endpoints {
        let annotations = if ours {
            json!({APPLIED_DIGEST_ANNOTATION: "x"})
        } else {
            json!({})
        };
        serde_json::from_value(json!({
            "metadata": {"name": "kubernetes", "namespace": "default", "annotations": annotations,
                         "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
            "subsets": [{"addresses": [{"ip": ip}], "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}]
        }))
        .unwrap()
    }

    fn slice(ip: &str, manager: &str) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {SERVICE_NAME_LABEL: "kubernetes", MANAGED_BY: manager}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [ip]}],
            "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]
        }))
        .unwrap()
    }

    #[test]
    fn advertise_address_restore_writes_back_the_recorded_addresses() {
        let record = record(
            Some(&service(None, Some("Cluster"))),
            Some(&endpoints("10.0.0.5", false)),
            Some(&slice("10.0.0.5", "endpointslice-controller.k8s.io")),
        );
        // Survives the trip through its ConfigMap.
        let cm = record_config_map(&record).unwrap();
        assert_eq!(parse_record(&cm).unwrap(), record);
        let restore = restore(&record, Steering::AdvertiseAddress).unwrap();
        assert_eq!(restore.apply.len(), 2);
        let endpoints = serde_json::to_value(&restore.apply[0]).unwrap();
        assert_eq!(endpoints["subsets"][0]["addresses"][0]["ip"], "10.0.0.5");
        assert_eq!(
            endpoints["metadata"]["labels"]["endpointslice.kubernetes.io/skip-mirror"],
            "true"
        );
        let slice = serde_json::to_value(&restore.apply[1]).unwrap();
        assert_eq!(slice["endpoints"][0]["addresses"][0], "10.0.0.5");
        assert_eq!(
            slice["metadata"]["labels"][MANAGED_BY],
            "endpointslice-controller.k8s.io"
        );
        assert!(!restore.delete_endpoint_slice);
        assert!(
            restore.summary.contains("10.0.0.5:6443"),
            "{}",
            restore.summary
        );
    }

    #[test]
    fn our_own_steering_is_never_recorded_as_the_original() {
        let record = record(
            Some(&service(Some(json!(selector_labels())), Some("Local"))),
            Some(&endpoints("240.0.0.1", true)),
            Some(&slice("240.0.0.1", ENDPOINT_SLICE_MANAGER)),
        );
        assert!(record.endpoints.is_none() && record.endpoint_slice.is_none());
        assert!(record.service_unknown);
        let why = restore(&record, Steering::AdvertiseAddress).unwrap_err();
        assert!(why.contains("no addresses to give back"), "{why}");
        let why = restore(&record, Steering::Service).unwrap_err();
        assert!(why.contains("original selector is unknown"), "{why}");
    }

    #[test]
    fn service_restore_drops_our_selector_and_keeps_the_recorded_policy() {
        let record = record(Some(&service(None, Some("Cluster"))), None, None);
        let restore = restore(&record, Steering::Service).unwrap();
        let patch = serde_json::to_value(&restore.apply[0]).unwrap();
        // No selector in the patch: server-side apply drops the one we own.
        assert_eq!(patch["spec"], json!({"internalTrafficPolicy": "Cluster"}));
        assert!(restore.summary.contains("selector removed"));
    }

    #[test]
    fn a_slice_we_created_is_deleted_not_restored() {
        let record = record(None, Some(&endpoints("10.0.0.5", false)), None);
        let restore = restore(&record, Steering::AdvertiseAddress).unwrap();
        assert_eq!(restore.apply.len(), 1);
        assert!(restore.delete_endpoint_slice);
    }

    #[test]
    fn a_released_service_gets_its_selector_back_before_the_addresses() {
        let mut record = record(
            Some(&service(
                Some(json!({"app": "k0smotron-haproxy"})),
                Some("Local"),
            )),
            Some(&endpoints("10.213.0.2", false)),
            None,
        );
        record.service_released = true;
        let given_back = restore(&record, Steering::AdvertiseAddress).unwrap();
        let kinds: Vec<String> = given_back
            .apply
            .iter()
            .map(|o| o.types.as_ref().unwrap().kind.clone())
            .collect();
        assert_eq!(kinds, ["Service", "Endpoints"]);
        let service = serde_json::to_value(&given_back.apply[0]).unwrap();
        assert_eq!(
            service["spec"],
            json!({"selector": {"app": "k0smotron-haproxy"}, "internalTrafficPolicy": "Local"})
        );
        assert!(given_back.delete_endpoint_slice, "ours goes last");
        // Without the release, address steering never touched the Service.
        record.service_released = false;
        let given_back = restore(&record, Steering::AdvertiseAddress).unwrap();
        assert_eq!(given_back.apply.len(), 1);
    }
}
