//! What every route renderer shares: the route kinds, names, the metadata
//! of owned objects and the hosts to route.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{
    Resource, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind},
};

use crate::api::{CLUSTER_NAME_LABEL, ControlPlaneIngress, Flavor, MANAGED_BY_LABEL, MANAGER};

/// The kinds of route object a ControlPlaneIngress can own in the management cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RouteKind {
    /// `networking.k8s.io/v1` Ingress (haproxy, haproxy-ingress, nginx, generic).
    Ingress,
    /// `traefik.io/v1alpha1` IngressRouteTCP.
    IngressRouteTcp,
    /// `gateway.networking.k8s.io/v1` TLSRoute.
    TlsRoute,
}

impl RouteKind {
    /// Every route kind.
    pub const ALL: [RouteKind; 3] = [
        RouteKind::Ingress,
        RouteKind::IngressRouteTcp,
        RouteKind::TlsRoute,
    ];

    /// The route kind of an object kind (`Ingress`, `IngressRouteTCP`, `TLSRoute`).
    pub fn from_kind(kind: &str) -> Option<RouteKind> {
        RouteKind::ALL.into_iter().find(|k| k.gvk().kind == kind)
    }

    /// The kind a flavor renders.
    pub fn of(flavor: Flavor) -> RouteKind {
        match flavor {
            Flavor::Traefik => RouteKind::IngressRouteTcp,
            Flavor::Gateway => RouteKind::TlsRoute,
            Flavor::Haproxy | Flavor::HaproxyIngress | Flavor::Nginx | Flavor::Generic => {
                RouteKind::Ingress
            }
        }
    }

    /// Group, version and kind.
    pub fn gvk(self) -> GroupVersionKind {
        match self {
            RouteKind::Ingress => GroupVersionKind::gvk("networking.k8s.io", "v1", "Ingress"),
            RouteKind::IngressRouteTcp => {
                GroupVersionKind::gvk("traefik.io", "v1alpha1", "IngressRouteTCP")
            }
            RouteKind::TlsRoute => {
                GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "TLSRoute")
            }
        }
    }

    /// The API resource (plural) of the kind.
    pub fn api_resource(self) -> ApiResource {
        let plural = match self {
            RouteKind::Ingress => "ingresses",
            RouteKind::IngressRouteTcp => "ingressroutetcps",
            RouteKind::TlsRoute => "tlsroutes",
        };
        ApiResource::from_gvk_with_plural(&self.gvk(), plural)
    }
}

/// `ControlPlaneIngress namespace/name`, for messages.
pub fn describe(cpi: &ControlPlaneIngress) -> String {
    crate::sources::describe("ControlPlaneIngress", &cpi.metadata)
}

/// Metadata shared by everything a ControlPlaneIngress owns: same namespace,
/// the CAPI cluster label, our managed-by label, an owner reference for GC.
pub fn owned_meta(cpi: &ControlPlaneIngress, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: cpi.namespace(),
        labels: Some(BTreeMap::from([
            (
                CLUSTER_NAME_LABEL.to_string(),
                cpi.spec.cluster_name.clone(),
            ),
            (MANAGED_BY_LABEL.to_string(), MANAGER.to_string()),
        ])),
        owner_references: owner_reference(cpi).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

/// Owner reference to the ControlPlaneIngress; `None` until it has a uid
/// (rendered from a file rather than a live object).
pub fn owner_reference(cpi: &ControlPlaneIngress) -> Option<OwnerReference> {
    cpi.controller_owner_ref(&())
}

/// An object of a kind we have no Rust type for.
pub fn foreign(
    gvk: &GroupVersionKind,
    metadata: ObjectMeta,
    data: serde_json::Value,
) -> DynamicObject {
    let resource = ApiResource::from_gvk(gvk);
    let mut obj =
        DynamicObject::new(metadata.name.as_deref().unwrap_or_default(), &resource).data(data);
    obj.metadata = metadata;
    obj
}

/// The route object the control plane's provider creates itself, if it does.
pub fn upstream_route(cpi: &ControlPlaneIngress) -> Option<&crate::api::UpstreamObject> {
    cpi.spec.upstream.as_ref()?.route.as_ref()
}

/// Name of the Ingress or IngressRouteTCP of a ControlPlaneIngress (TLSRoutes
/// add `-api` / `-konnectivity`): never a name an upstream gives its own
/// route for the tenant (Kamaji and Steward: `<name>`, `<name>-konnectivity`;
/// k0smotron: `kmc-<cluster>`).
pub fn route_name(cpi: &ControlPlaneIngress) -> String {
    format!(
        "{ROUTE_PREFIX}{}",
        cpi.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Prefix of [`route_name`].
pub const ROUTE_PREFIX: &str = "hcp-ingress-";

/// The hosts hcp-ingress routes for a ControlPlaneIngress and their backend
/// ports: every host, less those the control plane's provider routes itself.
pub fn host_routes(cpi: &ControlPlaneIngress) -> Vec<HostRoute<'_>> {
    let spec = &cpi.spec;
    let upstream = spec.upstream.as_ref().filter(|u| u.route.is_some());
    let mut routes = Vec::new();
    if upstream.is_none() {
        routes.push(HostRoute {
            purpose: "api",
            host: &spec.ingress.api_host,
            port: spec.backend.api_port,
        });
    }
    if let (Some(host), Some(port)) = (
        &spec.ingress.konnectivity_host,
        spec.backend.konnectivity_port,
    ) && !upstream.is_some_and(|u| u.route_includes_konnectivity)
    {
        routes.push(HostRoute {
            purpose: "konnectivity",
            host,
            port,
        });
    }
    routes
}

/// One host of the tenant and the backend port it goes to.
pub struct HostRoute<'a> {
    /// `api` or `konnectivity`.
    pub purpose: &'static str,
    pub host: &'a str,
    pub port: i32,
}

/// The addresses a route's status reports for the shared ingress: Ingress
/// `status.loadBalancer.ingress[].ip/hostname`; a Gateway's
/// `status.addresses[].value` (the TLSRoute itself reports none).
pub fn status_addresses(object: &DynamicObject) -> Vec<String> {
    let status = object.data.get("status");
    let from_ingress = status
        .and_then(|s| s.pointer("/loadBalancer/ingress"))
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            entry
                .get("ip")
                .or_else(|| entry.get("hostname"))
                .and_then(|v| v.as_str())
        });
    let from_gateway = status
        .and_then(|s| s.get("addresses"))
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.get("value").and_then(|v| v.as_str()));
    from_ingress
        .chain(from_gateway)
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect()
}
