//! Gateway API `TLSRoute` (v1), one per host: a passthrough listener routes
//! by SNI. And what the Gateway's controller answered in the route's status.

use kube::{ResourceExt, api::DynamicObject};
use serde_json::{Value, json};

use super::shared::{RouteKind, foreign, host_routes, owned_meta, route_name};
use crate::api::ControlPlaneIngress;

pub(super) fn render(cpi: &ControlPlaneIngress) -> Vec<DynamicObject> {
    let spec = &cpi.spec;
    let parent_refs = spec
        .route
        .as_ref()
        .and_then(|r| r.gateway.as_ref())
        .map(|g| &g.parent_refs);
    host_routes(cpi)
        .into_iter()
        .map(|route| {
            let mut metadata = owned_meta(cpi, format!("{}-{}", route_name(cpi), route.purpose));
            metadata.annotations = (!spec.ingress.annotations.is_empty()).then(|| spec.ingress.annotations.clone());
            foreign(
                &RouteKind::TlsRoute.gvk(),
                metadata,
                json!({"spec": {
                    "parentRefs": parent_refs,
                    "hostnames": [route.host],
                    "rules": [{"backendRefs": [{"name": spec.backend.service_name, "port": route.port}]}],
                }}),
            )
        })
        .collect()
}

/// What the controllers of a TLSRoute's parent Gateways said about it, read
/// from `status.parents` (Gateway API: a route is routed once each parent
/// reports `Accepted` and `ResolvedRefs` True for its current generation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acceptance {
    /// Every parent accepted the route and resolved its backend.
    Accepted,
    /// A parent has not reported on this generation of the route yet.
    Pending(String),
    /// A parent refused the route; the message names the parent and says why.
    Refused(String),
}

/// The acceptance of one TLSRoute as it is stored (spec and status).
pub fn acceptance(route: &DynamicObject) -> Acceptance {
    let namespace = route.namespace().unwrap_or_default();
    let what = format!("TLSRoute {namespace}/{}", route.name_any());
    let generation = route.metadata.generation;
    let parents = route.data["spec"]["parentRefs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if parents.is_empty() {
        return Acceptance::Pending(format!("{what} names no parent Gateway"));
    }
    let reported = route.data["status"]["parents"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for parent in &parents {
        let gateway = format!(
            "Gateway {}/{}{}",
            parent["namespace"].as_str().unwrap_or(&namespace),
            parent["name"].as_str().unwrap_or_default(),
            parent["sectionName"]
                .as_str()
                .map(|s| format!(" listener {s}"))
                .unwrap_or_default()
        );
        let Some(status) = reported
            .iter()
            .find(|r| same_parent(parent, &r["parentRef"], &namespace))
        else {
            return Acceptance::Pending(format!(
                "no controller of {gateway} has reported on {what} yet"
            ));
        };
        let controller = status["controllerName"]
            .as_str()
            .unwrap_or("its controller");
        for type_ in ["Accepted", "ResolvedRefs"] {
            let condition = status["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == type_));
            let current = condition.is_some_and(|c| {
                c["observedGeneration"].as_i64().is_none()
                    || c["observedGeneration"].as_i64() == generation
            });
            match condition.filter(|_| current) {
                None => {
                    return Acceptance::Pending(format!(
                        "{controller} has not reported {type_} for this generation of {what} on {gateway} yet"
                    ));
                }
                Some(c) if c["status"] != "True" => {
                    return Acceptance::Refused(format!(
                        "{controller} did not accept {what} on {gateway}: {type_} {} {}: {}",
                        c["status"].as_str().unwrap_or_default(),
                        c["reason"].as_str().unwrap_or_default(),
                        c["message"].as_str().unwrap_or_default()
                    ));
                }
                Some(_) => {}
            }
        }
    }
    Acceptance::Accepted
}

/// Whether a status entry's `parentRef` is the spec's `parentRef` (group,
/// kind, namespace and port at their defaults when left out).
fn same_parent(spec: &Value, reported: &Value, route_namespace: &str) -> bool {
    let text = |v: &Value, key: &str, default: &str| v[key].as_str().unwrap_or(default).to_string();
    text(spec, "name", "") == text(reported, "name", "")
        && text(spec, "namespace", route_namespace) == text(reported, "namespace", route_namespace)
        && text(spec, "group", "gateway.networking.k8s.io")
            == text(reported, "group", "gateway.networking.k8s.io")
        && text(spec, "kind", "Gateway") == text(reported, "kind", "Gateway")
        && spec["sectionName"] == reported["sectionName"]
        && spec["port"] == reported["port"]
}

#[cfg(test)]
mod tests {
    use super::{Acceptance, acceptance};
    use kube::api::DynamicObject;
    use serde_json::{Value, json};

    fn route(parents: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "TLSRoute",
            "metadata": {"name": "t-api", "namespace": "tenants", "generation": 2},
            "spec": {"parentRefs": [{"name": "shared", "namespace": "gw", "sectionName": "tls"}]},
            "status": {"parents": parents},
        }))
        .unwrap()
    }

    fn reported(accepted: &str, generation: i64) -> Value {
        json!([{"parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "shared", "namespace": "gw", "sectionName": "tls"},
            "controllerName": "traefik.io/gateway-controller",
            "conditions": [
                {"type": "Accepted", "status": accepted, "reason": "NoMatchingParent", "message": "no listener", "observedGeneration": generation},
                {"type": "ResolvedRefs", "status": "True", "reason": "ResolvedRefs", "message": "", "observedGeneration": generation}]}])
    }

    #[test]
    fn a_route_is_accepted_when_its_parent_says_so_for_this_generation() {
        assert_eq!(
            acceptance(&route(reported("True", 2))),
            Acceptance::Accepted
        );
        let Acceptance::Pending(why) = acceptance(&route(reported("True", 1))) else {
            panic!("an answer about generation 1 is not one about generation 2")
        };
        assert!(why.contains("this generation"), "{why}");
        let Acceptance::Pending(why) = acceptance(&route(json!([]))) else {
            panic!("no status yet")
        };
        assert!(why.contains("Gateway gw/shared listener tls"), "{why}");
    }

    #[test]
    fn a_refusal_names_the_controller_the_parent_and_the_reason() {
        let Acceptance::Refused(why) = acceptance(&route(reported("False", 2))) else {
            panic!("refused")
        };
        assert!(
            why.contains("traefik.io/gateway-controller")
                && why.contains("Gateway gw/shared listener tls")
                && why.contains("Accepted False NoMatchingParent: no listener"),
            "{why}"
        );
    }

    #[test]
    fn another_listener_of_the_same_gateway_is_another_parent() {
        let mut other = reported("True", 2);
        other[0]["parentRef"]["sectionName"] = json!("other");
        assert!(matches!(acceptance(&route(other)), Acceptance::Pending(_)));
    }
}
