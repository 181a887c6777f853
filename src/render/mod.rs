//! Pure render functions: a validated ControlPlaneIngress in, the objects
//! hcp-ingress owns out. No I/O here; the controller applies what these return
//! and `hcp-ingress render` prints it.

pub mod conflict;
pub mod crs;
mod gateway;
mod ingress;
mod shared;
mod traefik;
pub mod workload;

use kube::{Resource, api::DynamicObject};
use serde::Serialize;

pub use self::gateway::{Acceptance, acceptance};
use self::shared::host_routes;
pub use self::shared::{
    ROUTE_PREFIX, RouteKind, describe, owner_reference, route_name, status_addresses,
    upstream_route,
};
use crate::api::{
    ControlPlaneIngress,
    validation::{self, FieldErrors},
};

/// Why nothing can be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The ControlPlaneIngress breaks a field rule.
    #[error("{object}: {errors}")]
    Invalid { object: String, errors: FieldErrors },
    /// A rendered object did not serialize (a bug, not bad input).
    #[error("failed to serialize {kind}: {source}")]
    Serialize {
        kind: &'static str,
        source: serde_json::Error,
    },
}

/// Every management-cluster object of a ControlPlaneIngress: its route, in
/// the kind its flavor asks for, for the hosts the control plane's provider
/// does not route itself (`spec.upstream.route`); nothing when
/// `ingress.deploy` is false.
pub fn management(cpi: &ControlPlaneIngress) -> Result<Vec<DynamicObject>, RenderError> {
    validation::validate(cpi).map_err(|errors| RenderError::Invalid {
        object: describe(cpi),
        errors,
    })?;
    if !cpi.spec.ingress.deploy || host_routes(cpi).is_empty() {
        return Ok(Vec::new());
    }
    match RouteKind::of(cpi.spec.flavor()) {
        RouteKind::Ingress => Ok(vec![dynamic(&ingress::render(cpi), "Ingress")?]),
        RouteKind::IngressRouteTcp => Ok(vec![traefik::render(cpi)]),
        RouteKind::TlsRoute => Ok(gateway::render(cpi)),
    }
}

fn dynamic<K: Resource<DynamicType = ()> + Serialize>(
    obj: &K,
    kind: &'static str,
) -> Result<DynamicObject, RenderError> {
    let value =
        serde_json::to_value(obj).map_err(|source| RenderError::Serialize { kind, source })?;
    serde_json::from_value(value).map_err(|source| RenderError::Serialize { kind, source })
}
