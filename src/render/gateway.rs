//! Gateway API `TLSRoute` (v1), one per host: a passthrough listener routes by SNI.

use kube::api::DynamicObject;
use serde_json::json;

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
