//! The API server's address for dataplanes that replace kube-proxy
//! (`spec.kubeProxyReplacement.publishEndpoint`): the ConfigMaps their
//! agents read, written where they are ours or absent, reported where
//! someone else's holds the name, and taken back when the opt-in goes.

use super::{
    super::{
        error::WorkloadError,
        observe::PublishedAt,
        plan::{Plan, Step},
    },
    pass::is_ours,
};
use crate::{
    api::{ControlPlaneIngress, MANAGED_BY_LABEL, MANAGER},
    controller::status::{Desired, types},
    render::workload,
};

/// The steps and EndpointPublished of `spec.kubeProxyReplacement`, into the
/// plan's current phase. Without the opt-in the ConfigMaps that are ours go,
/// and no condition is reported.
pub(in crate::controller::workload) fn publish(
    plan: &mut Plan,
    cpi: &ControlPlaneIngress,
    seen: &[PublishedAt],
) -> Result<(), WorkloadError> {
    let wanted = workload::endpoint_config_maps(cpi);
    if wanted.is_empty() {
        plan.extend(
            seen.iter()
                .filter_map(|s| s.live.clone())
                .filter(is_ours)
                .map(Step::Delete),
        );
        return Ok(());
    }
    let ingress = &cpi.spec.ingress;
    let address = format!("{}:{}", ingress.api_host, ingress.port);
    let (mut written, mut waiting, mut theirs_agree, mut conflicts) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (location, config_map) in wanted {
        let at = seen.iter().find(|s| s.location == location);
        let live = at.and_then(|s| s.live.clone());
        if let Some(theirs) = live.as_ref().filter(|l| !is_ours(l)) {
            let value = |key: &str| theirs.data.pointer(&format!("/data/{key}")).cloned();
            let (host, port) = (value(location.host_key), value(location.port_key));
            let port_wanted = ingress.port.to_string();
            if host.as_ref().and_then(|v| v.as_str()) == Some(ingress.api_host.as_str())
                && port.as_ref().and_then(|v| v.as_str()) == Some(port_wanted.as_str())
            {
                theirs_agree.push(location.to_string());
            } else {
                let shown = |v: Option<serde_json::Value>| {
                    v.map_or_else(|| "unset".into(), |v| v.to_string())
                };
                conflicts.push(format!(
                    "{location} is not ours (no label {MANAGED_BY_LABEL}={MANAGER}) and holds data.{} {}, data.{} {}",
                    location.host_key,
                    shown(host),
                    location.port_key,
                    shown(port),
                ));
            }
            continue;
        }
        if live.is_none() && !at.is_some_and(|s| s.namespace_exists) {
            waiting.push(location);
            continue;
        }
        let object = workload::dynamic(&config_map, "ConfigMap")?;
        plan.push(Step::Apply { object, live });
        written.push(location.to_string());
    }
    let mut parts = Vec::new();
    if !written.is_empty() {
        parts.push(format!("{} hold {address}", written.join(", ")));
    }
    if !theirs_agree.is_empty() {
        parts.push(format!(
            "{} already hold {address} and are left to their owner",
            theirs_agree.join(", ")
        ));
    }
    for location in waiting {
        parts.push(format!(
            "namespace {} does not exist: {location} is written once it does",
            location.namespace
        ));
    }
    let summary = parts.join("; ");
    let condition = if conflicts.is_empty() {
        Desired::ok(types::ENDPOINT_PUBLISHED, "Published", summary)
    } else {
        Desired::failed(
            types::ENDPOINT_PUBLISHED,
            "ConfigMapNotOurs",
            format!(
                "{}: left as it is, so the dataplane's agents that read it do not get {address}; set those keys to {address}, or delete the ConfigMap and hcp-ingress writes its own{}",
                conflicts.join("; "),
                if summary.is_empty() {
                    String::new()
                } else {
                    format!(" ({summary})")
                }
            ),
        )
    };
    plan.conditions.push(condition);
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use kube::{ResourceExt, api::DynamicObject};

    use super::*;
    use crate::{controller::status::Status, render::workload::EndpointLocation};

    fn cpi(publish: bool) -> ControlPlaneIngress {
        serde_json::from_value(json!({
            "apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
            "metadata": {"name": "tenant-01", "namespace": "tenants"},
            "spec": {
                "clusterName": "tenant-01",
                "ingress": {"apiHost": "api.tenant-01.example.com", "port": 8443},
                "backend": {"serviceName": "kmc-tenant-01", "apiPort": 30443},
                "kubeProxyReplacement": {"publishEndpoint": publish},
            },
        }))
        .expect("a valid ControlPlaneIngress")
    }

    fn config_map(location: &EndpointLocation, ours: bool, host: &str) -> DynamicObject {
        let mut labels = json!({});
        if ours {
            labels[MANAGED_BY_LABEL] = json!(MANAGER);
        }
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": location.name, "namespace": location.namespace,
                         "uid": format!("uid-{}", location.namespace), "labels": labels},
            "data": {location.host_key: host, location.port_key: "8443"},
        }))
        .expect("a ConfigMap")
    }

    /// Every location, each with what `live` puts there; every namespace exists.
    fn seen(live: impl Fn(&EndpointLocation) -> Option<DynamicObject>) -> Vec<PublishedAt> {
        workload::ENDPOINT_LOCATIONS
            .iter()
            .map(|l| PublishedAt {
                location: *l,
                live: live(l),
                namespace_exists: true,
            })
            .collect()
    }

    fn steps(plan: &Plan) -> Vec<String> {
        plan.steps()
            .map(|s| match s {
                Step::Apply { object, .. } => format!(
                    "Apply {}/{} {}",
                    object.namespace().unwrap_or_default(),
                    object.name_any(),
                    object.data["data"]
                ),
                Step::Delete(object) => format!(
                    "Delete {}/{}",
                    object.namespace().unwrap_or_default(),
                    object.name_any()
                ),
                other => format!("{other:?}"),
            })
            .collect()
    }

    fn published(plan: &Plan) -> Option<(Status, String, String)> {
        plan.conditions
            .iter()
            .find(|c| c.type_ == types::ENDPOINT_PUBLISHED)
            .map(|c| (c.status, c.reason.clone(), c.message.clone()))
    }

    #[test]
    fn without_the_opt_in_nothing_is_written_or_reported() {
        let mut plan = Plan::default();
        publish(&mut plan, &cpi(false), &seen(|_| None)).unwrap();
        assert!(plan.is_empty(), "{:?}", steps(&plan));
        assert_eq!(published(&plan), None);
    }

    #[test]
    fn the_opt_in_writes_the_api_host_and_the_ingress_port_for_calico_and_cilium() {
        let mut plan = Plan::default();
        publish(&mut plan, &cpi(true), &seen(|_| None)).unwrap();
        let calico = r#"{"KUBERNETES_SERVICE_HOST":"api.tenant-01.example.com","KUBERNETES_SERVICE_PORT":"8443"}"#;
        assert_eq!(
            steps(&plan),
            [
                format!("Apply kube-system/kubernetes-services-endpoint {calico}"),
                format!("Apply tigera-operator/kubernetes-services-endpoint {calico}"),
                r#"Apply kube-system/control-plane-endpoint {"apiServerHost":"api.tenant-01.example.com","apiServerPort":"8443"}"#.to_string(),
            ]
        );
        let (status, reason, message) = published(&plan).expect("EndpointPublished");
        assert_eq!((status, reason.as_str()), (Status::True, "Published"));
        assert!(
            message.contains("api.tenant-01.example.com:8443"),
            "{message}"
        );
    }

    #[test]
    fn a_namespace_that_does_not_exist_is_waited_for_not_created() {
        let mut plan = Plan::default();
        let mut at = seen(|_| None);
        for s in &mut at {
            s.namespace_exists = s.location.namespace != workload::OPERATOR_NAMESPACE;
        }
        publish(&mut plan, &cpi(true), &at).unwrap();
        assert!(
            steps(&plan).iter().all(|s| !s.contains("tigera-operator")),
            "{:?}",
            steps(&plan)
        );
        let (status, _, message) = published(&plan).expect("EndpointPublished");
        assert_eq!(status, Status::True);
        assert!(
            message.contains("namespace tigera-operator does not exist"),
            "{message}"
        );
    }

    #[test]
    fn a_config_map_that_is_not_ours_is_left_as_it_is_and_reported() {
        let mut plan = Plan::default();
        let theirs = |l: &EndpointLocation| {
            (l.name == workload::CALICO_ENDPOINT_NAME && l.namespace == "kube-system")
                .then(|| config_map(l, false, "10.0.0.10"))
        };
        publish(&mut plan, &cpi(true), &seen(theirs)).unwrap();
        let steps = steps(&plan);
        assert!(
            steps
                .iter()
                .all(|s| !s.contains("kube-system/kubernetes-services-endpoint")),
            "{steps:?}"
        );
        assert_eq!(steps.len(), 2, "the others are still written: {steps:?}");
        let (status, reason, message) = published(&plan).expect("EndpointPublished");
        assert_eq!(
            (status, reason.as_str()),
            (Status::False, "ConfigMapNotOurs")
        );
        // The object and the field, for the Event the condition becomes.
        assert!(
            message.contains("ConfigMap kube-system/kubernetes-services-endpoint")
                && message.contains("data.KUBERNETES_SERVICE_HOST \"10.0.0.10\""),
            "{message}"
        );
    }

    #[test]
    fn a_config_map_not_ours_that_already_holds_the_address_is_fine() {
        let mut plan = Plan::default();
        let theirs = |l: &EndpointLocation| {
            (l.name == workload::CILIUM_ENDPOINT_NAME)
                .then(|| config_map(l, false, "api.tenant-01.example.com"))
        };
        publish(&mut plan, &cpi(true), &seen(theirs)).unwrap();
        assert_eq!(steps(&plan).len(), 2, "{:?}", steps(&plan));
        let (status, _, message) = published(&plan).expect("EndpointPublished");
        assert_eq!(status, Status::True);
        assert!(message.contains("left to their owner"), "{message}");
    }

    #[test]
    fn the_opt_in_removed_deletes_only_ours() {
        let mut plan = Plan::default();
        let live = |l: &EndpointLocation| {
            Some(config_map(
                l,
                l.name == workload::CALICO_ENDPOINT_NAME,
                "api.tenant-01.example.com",
            ))
        };
        publish(&mut plan, &cpi(false), &seen(live)).unwrap();
        assert_eq!(
            steps(&plan),
            [
                "Delete kube-system/kubernetes-services-endpoint",
                "Delete tigera-operator/kubernetes-services-endpoint",
            ]
        );
        assert_eq!(published(&plan), None);
    }
}
