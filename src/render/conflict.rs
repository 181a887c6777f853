//! Route objects that are not ours but route one of our hosts on the same
//! ingress: a conflict to report, never a reason to create a second route.
//! Pure: the controller passes what its watch caches hold.

use k8s_openapi::api::networking::v1::IngressSpec;
use kube::{ResourceExt, api::DynamicObject};

use super::shared::{RouteKind, host_routes};

/// The ingress class annotation older Ingresses carry instead of `ingressClassName`.
const INGRESS_CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";
use crate::api::{
    ControlPlaneIngress,
    upstream::{ingress_route_tcp::IngressRouteTcpSpec, part, tls_route::TlsRouteSpec},
};

/// True when `object`'s controller reference is `cpi`.
pub fn controlled_by(object: &DynamicObject, cpi: &ControlPlaneIngress) -> bool {
    let Some(uid) = cpi.metadata.uid.as_deref() else {
        return false;
    };
    object
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// Who controls an object, for messages: `Kind name` of its controller
/// reference, or its field manager when it has none.
pub fn controller_of(object: &DynamicObject) -> String {
    object
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| format!("{} {}", o.kind, o.name))
        .or_else(|| {
            object
                .metadata
                .managed_fields
                .iter()
                .flatten()
                .find_map(|m| m.manager.clone())
                .map(|m| format!("field manager {m:?}"))
        })
        .unwrap_or_else(|| "no controller".into())
}

/// The host names an object of `kind` routes, and the ingress it asks for
/// (an Ingress's class; `None` for kinds whose controller we cannot tell).
pub fn routed_hosts(kind: RouteKind, object: &DynamicObject) -> (Vec<String>, Option<String>) {
    // The API server validated the object; a spec that does not fit its type
    // routes nothing we can name.
    match kind {
        RouteKind::Ingress => {
            let spec: IngressSpec = part(object, "spec").unwrap_or_default();
            let hosts = spec
                .rules
                .into_iter()
                .flatten()
                .filter_map(|rule| rule.host)
                .collect();
            let class = spec
                .ingress_class_name
                .or_else(|| object.annotations().get(INGRESS_CLASS_ANNOTATION).cloned());
            (hosts, class)
        }
        RouteKind::IngressRouteTcp => {
            let spec: IngressRouteTcpSpec = part(object, "spec").unwrap_or_default();
            let hosts = spec
                .routes
                .into_iter()
                .flatten()
                .filter_map(|route| route.r#match)
                .flat_map(|rule| host_sni(&rule))
                .collect();
            (hosts, None)
        }
        RouteKind::TlsRoute => {
            let spec: TlsRouteSpec = part(object, "spec").unwrap_or_default();
            (spec.hostnames.unwrap_or_default(), None)
        }
    }
}

/// The names inside every ``HostSNI(`a`, `b`)`` of a Traefik TCP rule.
fn host_sni(rule: &str) -> Vec<String> {
    let mut hosts = Vec::new();
    let mut rest = rule;
    while let Some(start) = rest.find("HostSNI(") {
        rest = &rest[start + "HostSNI(".len()..];
        let end = rest.find(')').unwrap_or(rest.len());
        hosts.extend(
            rest[..end]
                .split(',')
                .map(|h| h.trim().trim_matches(|c| c == '`' || c == '"'))
                .filter(|h| !h.is_empty())
                .map(str::to_string),
        );
        rest = &rest[end..];
    }
    hosts
}

/// The keys a route object of `kind` is indexed under in the controller's
/// cache: [`host_key`] of each host it routes, and [`controller_key`] of the
/// object that controls it.
pub fn index_keys(kind: RouteKind, object: &DynamicObject) -> Vec<String> {
    let (hosts, _) = routed_hosts(kind, object);
    let controller = object
        .owner_references()
        .iter()
        .filter(|o| o.controller == Some(true))
        .map(|o| controller_key(&o.uid));
    hosts
        .iter()
        .map(|h| host_key(h))
        .chain(controller)
        .collect()
}

/// The index key of the route objects that route `host`.
pub fn host_key(host: &str) -> String {
    format!("host:{host}")
}

/// The index key of the route objects whose controller has uid `uid`.
pub fn controller_key(uid: &str) -> String {
    format!("controller:{uid}")
}

/// The index keys under which the routes that may conflict with `cpi` are
/// found: its hosts'.
pub fn candidate_keys(cpi: &ControlPlaneIngress) -> Vec<String> {
    host_routes(cpi).iter().map(|r| host_key(r.host)).collect()
}

/// Objects of `kind`, not controlled by `cpi`, that route one of its hosts
/// on the same ingress (for an Ingress: the same class). Each entry names the
/// object, the host and its controller, for a condition and an Event.
pub fn route_conflicts<'a>(
    cpi: &ControlPlaneIngress,
    kind: RouteKind,
    candidates: impl IntoIterator<Item = &'a DynamicObject>,
) -> Vec<String> {
    let ours: Vec<&str> = host_routes(cpi).iter().map(|r| r.host).collect();
    let our_class = cpi.spec.ingress.class_name.as_deref();
    let mut found = Vec::new();
    for object in candidates {
        if controlled_by(object, cpi) {
            continue;
        }
        let (hosts, class) = routed_hosts(kind, object);
        if kind == RouteKind::Ingress && class.as_deref() != our_class {
            continue;
        }
        for host in hosts.iter().filter(|h| ours.contains(&h.as_str())) {
            found.push(format!(
                "{} {}/{} (controlled by {}) already routes {host}",
                kind.gvk().kind,
                object.namespace().unwrap_or_default(),
                object.name_any(),
                controller_of(object)
            ));
        }
    }
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cpi(class: Option<&str>) -> ControlPlaneIngress {
        serde_json::from_value(json!({
            "apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
            "metadata": {"name": "t", "namespace": "ns", "uid": "u-1"},
            "spec": {"clusterName": "t", "ingress": {"apiHost": "api.example.com", "konnectivityHost": "konn.example.com", "className": class},
                     "backend": {"serviceName": "t", "apiPort": 6443, "konnectivityPort": 8132}}
        }))
        .unwrap()
    }

    fn object(value: serde_json::Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_foreign_ingress_of_the_same_class_for_our_host_conflicts() {
        let k0smotron = object(json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "kmc-t", "namespace": "ns", "ownerReferences": [{"apiVersion": "k0smotron.io/v1beta2", "kind": "Cluster", "name": "t", "uid": "k-1", "controller": true}]},
            "spec": {"ingressClassName": "haproxy", "rules": [{"host": "api.example.com"}, {"host": "other.example.com"}]}
        }));
        let found = route_conflicts(&cpi(Some("haproxy")), RouteKind::Ingress, [&k0smotron]);
        assert_eq!(
            found,
            ["Ingress ns/kmc-t (controlled by Cluster t) already routes api.example.com"]
        );
        // Kamaji's own Ingress with class `unhandled`, as its addon doc asks: served by nobody.
        assert!(
            route_conflicts(&cpi(Some("haproxy")), RouteKind::Ingress, [&k0smotron]).len() == 1
        );
        assert!(
            route_conflicts(&cpi(Some("unhandled")), RouteKind::Ingress, [&k0smotron]).is_empty()
        );
    }

    #[test]
    fn our_own_objects_never_conflict() {
        let ours = object(json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "t-hcp-ingress", "namespace": "ns", "ownerReferences": [{"apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress", "name": "t", "uid": "u-1", "controller": true}]},
            "spec": {"ingressClassName": "haproxy", "rules": [{"host": "api.example.com"}]}
        }));
        assert!(route_conflicts(&cpi(Some("haproxy")), RouteKind::Ingress, [&ours]).is_empty());
    }

    #[test]
    fn traefik_rules_and_tls_routes_are_read_for_hosts() {
        let steward = object(json!({
            "apiVersion": "traefik.io/v1alpha1", "kind": "IngressRouteTCP",
            "metadata": {"name": "t", "namespace": "ns", "managedFields": [{"manager": "steward"}]},
            "spec": {"routes": [{"match": "HostSNI(`konn.example.com`) || HostSNI(`kubernetes.default.svc`)"}]}
        }));
        assert_eq!(
            route_conflicts(&cpi(None), RouteKind::IngressRouteTcp, [&steward]),
            [
                "IngressRouteTCP ns/t (controlled by field manager \"steward\") already routes konn.example.com"
            ]
        );
        assert_eq!(host_sni("HostSNI(`a.b`, `c.d`)"), ["a.b", "c.d"]);
        let tls = object(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "TLSRoute",
            "metadata": {"name": "x", "namespace": "other"},
            "spec": {"hostnames": ["api.example.com"]}
        }));
        assert_eq!(
            route_conflicts(&cpi(None), RouteKind::TlsRoute, [&tls]).len(),
            1
        );
    }
}
