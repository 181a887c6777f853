//! Kamaji `TenantControlPlane`, read as Kamaji's ingress addon reads it: the
//! annotation `kamaji.clastix.io/ingress.domain: <suffix>` asks for hosts
//! `<ns>-<name>.k8s.<suffix>` (and `<ns>-<name>.konnectivity.<suffix>` when the
//! konnectivity addon is on), routed by HAProxy with SSL passthrough to the
//! tenant's Service. hcp-ingress plays the addon: it creates the route and the
//! node proxy, so nothing here is left to Kamaji.

use super::{
    domain,
    source::{Source, SourceError},
    tenant::Tenant,
};
use crate::api::{ControlPlaneIngressSpec, UpstreamObject, UpstreamSpec};

/// The addon's opt-in annotation: its value is the domain suffix.
pub const KAMAJI_DOMAIN_ANNOTATION: &str = "kamaji.clastix.io/ingress.domain";
pub(super) const DOMAIN_FIELD: &str = "metadata.annotations[kamaji.clastix.io/ingress.domain]";
/// The class the addon doc gives Kamaji's own Ingress so no controller serves it.
const UNHANDLED_CLASS: &str = "unhandled";
/// The addon's ingress class (HAProxy Kubernetes Ingress Controller).
const ADDON_CLASS: &str = "haproxy";

pub(super) fn spec(source: &Source<'_>) -> Result<ControlPlaneIngressSpec, SourceError> {
    let tenant = source.tenant()?;
    let spec = domain::tenant(
        source,
        &tenant,
        &[KAMAJI_DOMAIN_ANNOTATION, domain::DOMAIN_ANNOTATION],
        Some(ADDON_CLASS),
    )?;
    Ok(ControlPlaneIngressSpec {
        upstream: Some(UpstreamSpec {
            provider: "kamaji".into(),
            route: own_route(source, &tenant),
            // Kamaji's Gateway API mode: its TLSRoutes carry both hosts.
            route_includes_konnectivity: tenant.gateway,
            take_over_node_proxy: false,
            node_proxy: None,
        }),
        ..spec
    })
}

/// The route Kamaji makes itself, named after the tenant: a TLSRoute for
/// both hosts with `spec.controlPlane.gateway`, an Ingress for the API host
/// with `spec.controlPlane.ingress` in a served class. The addon doc's
/// `ingressClassName: unhandled` Ingress is served by nobody: not a route.
fn own_route(source: &Source<'_>, tenant: &Tenant) -> Option<UpstreamObject> {
    let object = |kind: &str| UpstreamObject {
        kind: kind.into(),
        name: source.name().to_string(),
        namespace: Some(source.namespace().to_string()),
    };
    if tenant.gateway {
        return Some(object("TLSRoute"));
    }
    tenant
        .ingress
        .as_ref()
        .filter(|i| i.ingress_class_name.as_deref() != Some(UNHANDLED_CLASS))
        .map(|_| object("Ingress"))
}
