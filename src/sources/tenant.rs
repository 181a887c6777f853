//! What the adapters and preflight read of a TenantControlPlane: Kamaji's
//! and Steward's CRDs agree on every field read here (Steward is a fork), so
//! both typed specs are read into this one view.

use kube::api::DynamicObject;

use crate::api::upstream::{
    Misfit, kamaji_tenant_control_plane as kamaji, part, steward_tenant_control_plane as steward,
};

/// The fields of a TenantControlPlane hcp-ingress reads.
#[derive(Debug, Default)]
pub(super) struct Tenant {
    /// `spec.networkProfile.port`.
    pub port: Option<i32>,
    /// `spec.networkProfile.certSANs`.
    pub cert_sans: Vec<String>,
    /// `spec.controlPlane.ingress`, when set.
    pub ingress: Option<Ingress>,
    /// `spec.controlPlane.gateway` is set (Kamaji's Gateway API mode).
    pub gateway: bool,
    /// `spec.controlPlane.deployment.extraArgs.apiServer`.
    pub api_server_args: Vec<String>,
    /// `spec.addons.konnectivity`, when set (the addon is on by its presence).
    pub konnectivity: Option<Konnectivity>,
    /// `spec.addons.tcpProxy` is set (Steward's own node proxy).
    pub tcp_proxy: bool,
}

/// `spec.controlPlane.ingress`.
#[derive(Debug, Default)]
pub(super) struct Ingress {
    pub hostname: Option<String>,
    pub ingress_class_name: Option<String>,
    /// Steward only.
    pub controller_type: Option<String>,
}

/// `spec.addons.konnectivity`.
#[derive(Debug, Default)]
pub(super) struct Konnectivity {
    /// `server.port`.
    pub server_port: Option<i32>,
    /// `agent.extraArgs`.
    pub agent_args: Vec<String>,
}

impl Tenant {
    /// The spec of `obj`, a Steward TenantControlPlane when `steward`, else a Kamaji one.
    pub(super) fn read(obj: &DynamicObject, steward: bool) -> Result<Tenant, Misfit> {
        Ok(if steward {
            part::<steward::TenantControlPlaneSpec>(obj, "spec")?.into()
        } else {
            part::<kamaji::TenantControlPlaneSpec>(obj, "spec")?.into()
        })
    }
}

/// One conversion for both kinds: their generated types carry the same
/// fields under their own names; the three arguments read what only one
/// kind has (from `$cp`, the control plane block, `$addons`, and `$ingress`).
macro_rules! tenant_from {
    ($spec:ty, |$cp:ident, $addons:ident, $ingress:ident| controller_type: $controller_type:expr, gateway: $gateway:expr, tcp_proxy: $tcp_proxy:expr) => {
        impl From<$spec> for Tenant {
            fn from(spec: $spec) -> Tenant {
                let network = spec.network_profile.unwrap_or_default();
                let $cp = spec.control_plane.unwrap_or_default();
                let $addons = spec.addons.unwrap_or_default();
                Tenant {
                    port: network.port,
                    cert_sans: network.cert_sa_ns.unwrap_or_default(),
                    gateway: $gateway,
                    tcp_proxy: $tcp_proxy,
                    ingress: $cp.ingress.map(|$ingress| Ingress {
                        hostname: $ingress.hostname,
                        ingress_class_name: $ingress.ingress_class_name,
                        controller_type: $controller_type,
                    }),
                    api_server_args: $cp
                        .deployment
                        .and_then(|d| d.extra_args)
                        .and_then(|a| a.api_server)
                        .unwrap_or_default(),
                    konnectivity: $addons.konnectivity.map(|k| Konnectivity {
                        server_port: k.server.and_then(|s| s.port),
                        agent_args: k.agent.and_then(|a| a.extra_args).unwrap_or_default(),
                    }),
                }
            }
        }
    };
}

tenant_from!(kamaji::TenantControlPlaneSpec, |cp, addons, ingress|
    controller_type: None,
    gateway: cp.gateway.is_some(),
    tcp_proxy: false);

tenant_from!(steward::TenantControlPlaneSpec, |cp, addons, ingress|
    controller_type: ingress.controller_type,
    gateway: false,
    tcp_proxy: addons.tcp_proxy.is_some());
