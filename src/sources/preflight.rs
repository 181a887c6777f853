//! Preflight: what a control plane's own spec lacks for the path through the
//! shared ingress to work, named by the exact field to set. Pure: read from
//! the source object and the ControlPlaneIngress derived from it.
//!
//! k0smotron needs nothing here: with `spec.ingress` set it adds both hosts to
//! the API server's SANs, runs it with the endpoint reconciler off and points
//! konnectivity at the konnectivity host itself. Kamaji and Steward do none of
//! that on their own.

use kube::api::DynamicObject;

use super::{source::SourceKind, tenant::Tenant};
use crate::api::{ControlPlaneIngress, Steering, validation::FieldError};

/// The API server flag advertise-address steering needs: otherwise the API
/// server rewrites `default/kubernetes` to its own address again.
pub const ENDPOINT_RECONCILER_NONE: &str = "--endpoint-reconciler-type=none";

/// The settings `obj` (a source of `kind`) is missing for `cpi` to work.
pub fn preflight(
    kind: SourceKind,
    obj: &DynamicObject,
    cpi: &ControlPlaneIngress,
) -> Vec<FieldError> {
    match kind {
        SourceKind::KamajiTenantControlPlane | SourceKind::StewardTenantControlPlane => {
            tenant_control_plane(kind, obj, cpi)
        }
        _ => Vec::new(),
    }
}

fn tenant_control_plane(
    kind: SourceKind,
    obj: &DynamicObject,
    cpi: &ControlPlaneIngress,
) -> Vec<FieldError> {
    // Derive read the same spec first and stopped at a field that did not fit.
    let tenant =
        Tenant::read(obj, kind == SourceKind::StewardTenantControlPlane).unwrap_or_default();
    let ingress = &cpi.spec.ingress;
    let mut missing = Vec::new();

    // The API server's certificate must name the host clients dial through
    // passthrough: the ingress never terminates TLS.
    let hosts: Vec<&str> = std::iter::once(ingress.api_host.as_str())
        .chain(ingress.konnectivity_host.as_deref())
        .filter(|h| !tenant.cert_sans.iter().any(|san| san == h))
        .collect();
    if !hosts.is_empty() {
        missing.push(FieldError {
            field: "spec.networkProfile.certSANs".into(),
            message: format!(
                "add {}: the API server's certificate must name the host clients reach it by",
                hosts.join(", ")
            ),
        });
    }

    if let Some(hostname) = tenant.ingress.as_ref().and_then(|i| i.hostname.as_deref()) {
        let field = "spec.controlPlane.ingress.hostname";
        match kind {
            // Kamaji writes kubeconfigs for `hostname`: they must dial the
            // shared ingress's host and port.
            SourceKind::KamajiTenantControlPlane => {
                let wanted = format!("{}:{}", ingress.api_host, ingress.port);
                if hostname != wanted {
                    missing.push(FieldError {
                        field: field.into(),
                        message: format!(
                            "set it to {wanted:?}: the kubeconfigs Kamaji writes dial it, and the shared ingress serves {} on port {}",
                            ingress.api_host, ingress.port
                        ),
                    });
                }
            }
            // Steward's tcp-proxy dials `<hostname>:443` as written.
            _ => {
                if hostname.contains(':') {
                    missing.push(FieldError {
                        field: field.into(),
                        message: format!(
                            "set it to {:?}, without a port: Steward's tcp-proxy appends :443 to it",
                            ingress.api_host
                        ),
                    });
                }
            }
        }
    }

    // Our own steering writes default/kubernetes: the API server must not.
    let ours_steer = cpi
        .spec
        .upstream
        .as_ref()
        .is_none_or(|u| u.kept_node_proxy().is_none())
        && cpi
            .spec
            .proxy
            .as_ref()
            .is_none_or(|p| p.enabled && p.steering == Steering::AdvertiseAddress);
    if ours_steer
        && !tenant
            .api_server_args
            .iter()
            .any(|a| a == ENDPOINT_RECONCILER_NONE)
    {
        missing.push(FieldError {
            field: "spec.controlPlane.deployment.extraArgs.apiServer".into(),
            message: format!(
                "add {ENDPOINT_RECONCILER_NONE:?}: otherwise the API server points default/kubernetes back at itself and pods bypass the node proxy"
            ),
        });
    }

    // The provider owns konnectivity-agent's args (a patch is reverted): say what to set.
    if let Some(host) = &ingress.konnectivity_host
        && let Some(konnectivity) = &tenant.konnectivity
    {
        let args = &konnectivity.agent_args;
        let wanted = [
            format!("--proxy-server-host={host}"),
            format!("--proxy-server-port={}", ingress.port),
        ];
        let absent: Vec<&String> = wanted.iter().filter(|w| !args.contains(w)).collect();
        if !absent.is_empty() {
            missing.push(FieldError {
                field: "spec.addons.konnectivity.agent.extraArgs".into(),
                message: format!(
                    "add {}: the agents must reach the konnectivity server through the shared ingress",
                    absent.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(", ")
                ),
            });
        }
    }
    missing
}
