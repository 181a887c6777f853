//! Traefik `IngressRouteTCP` with TLS passthrough.

use kube::api::DynamicObject;
use serde_json::json;

use super::{
    ingress::merged_annotations,
    shared::{RouteKind, foreign, host_routes, owned_meta, route_name},
};
use crate::api::ControlPlaneIngress;

/// Traefik's default TLS entry point.
const DEFAULT_ENTRY_POINT: &str = "websecure";
/// How Traefik's CRD provider filters objects by class.
const CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

pub(super) fn render(cpi: &ControlPlaneIngress) -> DynamicObject {
    let spec = &cpi.spec;
    let entry_points = spec
        .route
        .as_ref()
        .and_then(|r| r.traefik.as_ref())
        .map(|t| t.entry_points.clone())
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| vec![DEFAULT_ENTRY_POINT.to_string()]);
    // Only the tenant's own host names: matching `kubernetes.default.svc`
    // (as Steward does) would collide between tenants.
    let routes: Vec<_> = host_routes(cpi)
        .into_iter()
        .map(|route| {
            json!({
                "match": format!("HostSNI(`{}`)", route.host),
                "services": [{"name": spec.backend.service_name, "port": route.port}],
            })
        })
        .collect();
    let mut metadata = owned_meta(cpi, route_name(cpi));
    let class = spec
        .ingress
        .class_name
        .iter()
        .map(|c| (CLASS_ANNOTATION, c.as_str()))
        .collect::<Vec<_>>();
    let annotations = merged_annotations(&class, &spec.ingress.annotations);
    metadata.annotations = (!annotations.is_empty()).then_some(annotations);
    foreign(
        &RouteKind::IngressRouteTcp.gvk(),
        metadata,
        json!({"spec": {"entryPoints": entry_points, "routes": routes, "tls": {"passthrough": true}}}),
    )
}
