//! Taking the node proxy over from k0smotron: the decisions, pure. The
//! controller reads the workload cluster, asks these functions what to write
//! next, and writes it (see docs/ownership.md, "Migrating from k0smotron's
//! `k0smotron-haproxy`").
//!
//! The order is what keeps pods on the API: our proxy runs ready on every node
//! before any steering write; our EndpointSlice is written while the Service
//! still selects k0smotron's HAProxy (with `internalTrafficPolicy: Local`
//! kube-proxy ignores an endpoint without a node name, so nothing changes yet);
//! then ONE Service update drops the selector and sets `Cluster`, and for a
//! moment kube-proxy balances over both proxies, both of which work; the
//! EndpointSlice controller then removes HAProxy's slices. Only after that
//! does the user tell k0smotron to remove its DaemonSet.

use k8s_openapi::api::core::v1::Service;
use serde_json::{Value, json};

/// The label k0s's manifest applier puts on every object of a stack; its
/// prune deletes labelled objects that left the stack, so the Service must
/// lose it before k0smotron's files are removed.
pub const K0S_STACK_LABEL: &str = "k0s.k0sproject.io/stack";

/// The writes that take Service `default/kubernetes` from the provider's
/// proxy, in this order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ServiceRelease {
    /// A merge patch removing the k0s stack label, with the resourceVersion
    /// it was decided on (a concurrent change fails instead of being
    /// overwritten). Server-side apply cannot remove a field another manager set.
    pub unlabel: Option<Value>,
    /// A merge patch dropping the selector and setting
    /// `internalTrafficPolicy: Cluster`, in one update: selector-less, the
    /// Service takes its endpoints from our EndpointSlice, which has no node.
    pub release: Option<Value>,
}

/// What is left to write to release `service` from the provider's proxy.
pub fn service_release(service: &Service) -> ServiceRelease {
    let unlabel = service
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(K0S_STACK_LABEL))
        .map(|_| {
            json!({"metadata": {
                "resourceVersion": service.metadata.resource_version,
                "labels": {K0S_STACK_LABEL: null},
            }})
        });
    let spec = service.spec.as_ref();
    let selects = spec
        .and_then(|s| s.selector.as_ref())
        .is_some_and(|s| !s.is_empty());
    let local = spec.and_then(|s| s.internal_traffic_policy.as_deref()) != Some("Cluster");
    let release = (selects || local)
        .then(|| json!({"spec": {"selector": null, "internalTrafficPolicy": "Cluster"}}));
    ServiceRelease { unlabel, release }
}

/// The `spec.patches` entry that tells k0smotron to stop shipping its node
/// proxy and its `kubernetes` Service (K0smotronControlPlane or k0smotron
/// Cluster, `controlplane.cluster.x-k8s.io/v1beta2` / `k0smotron.io/v1beta2`).
pub const K0SMOTRON_STOP_PATCH: &str = r#"spec.patches: [{"target": {"kind": "ConfigMap", "component": "ingress"}, "patch": {"type": "merge", "content": "{\"data\": {\"0_temp-kubernetes-ep.yaml\": null, \"1_haproxy-configmap.yaml\": null, \"2_haproxy-ds.yaml\": null, \"3_kube-service.yaml\": null}}"}}]"#;

/// Where the take-over stands, for the status: `None` when it is complete.
pub fn pending(provider_proxy: Option<(i32, i32)>, proxy: &str) -> Option<String> {
    provider_proxy.map(|(desired, ready)| {
        format!(
            "{proxy} ({ready}/{desired} ready) is still deployed though no longer steered to: add to the K0smotronControlPlane (or k0smotron Cluster) {K0SMOTRON_STOP_PATCH} so k0s removes it"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(labels: Value, resource_version: &str, spec: Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "kubernetes", "namespace": "default", "labels": labels,
                         "resourceVersion": resource_version},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn k0smotrons_service_loses_the_stack_label_then_its_selector_and_local_policy() {
        let release = service_release(&service(
            json!({"k0s.k0sproject.io/stack": "kmc-tenant-01-ingress"}),
            "42",
            json!({"selector": {"app": "k0smotron-haproxy"}, "internalTrafficPolicy": "Local"}),
        ));
        assert_eq!(
            release.unlabel,
            Some(
                json!({"metadata": {"resourceVersion": "42", "labels": {"k0s.k0sproject.io/stack": null}}})
            )
        );
        assert_eq!(
            release.release,
            Some(json!({"spec": {"selector": null, "internalTrafficPolicy": "Cluster"}}))
        );
    }

    #[test]
    fn a_released_service_needs_no_further_write() {
        let release = service_release(&service(
            json!({"component": "apiserver"}),
            "7",
            json!({"internalTrafficPolicy": "Cluster"}),
        ));
        assert_eq!(release, ServiceRelease::default());
    }

    #[test]
    fn the_pending_message_carries_the_patch_and_fits_an_event() {
        let message = pending(Some((2, 2)), "DaemonSet default/k0smotron-haproxy").unwrap();
        assert!(message.contains("2_haproxy-ds.yaml"), "{message}");
        assert!(message.contains("2/2 ready"), "{message}");
        assert!(message.len() < 1024, "{} bytes", message.len());
        // The patch content is valid JSON as k0smotron's merge patch needs it.
        let entry: Value =
            serde_json::from_str(K0SMOTRON_STOP_PATCH.trim_start_matches("spec.patches: "))
                .unwrap();
        let content: Value =
            serde_json::from_str(entry[0]["patch"]["content"].as_str().unwrap()).unwrap();
        assert_eq!(content["data"].as_object().unwrap().len(), 4);
        assert_eq!(pending(None, "x"), None);
    }
}
