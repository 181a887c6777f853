//! Steward `TenantControlPlane`: `spec.controlPlane.ingress` {`hostname`,
//! `ingressClassName`, `controllerType`} and `spec.addons.tcpProxy`. Steward
//! creates the route itself in ingress mode (an Ingress, or an
//! IngressRouteTCP for `controllerType: traefik`, named after the tenant) and,
//! with `addons.tcpProxy`, its own node proxy: hcp-ingress leaves both to it
//! and does the rest. Without `spec.controlPlane.ingress` the domain
//! annotation still works, and hcp-ingress then creates the route.

use super::{
    domain,
    source::{Source, SourceError},
    tenant::Tenant,
};
use crate::api::{
    ControlPlaneIngressSpec, DEFAULT_INGRESS_PORT, Flavor, IngressSpec, UpstreamObject,
    UpstreamSpec,
};

/// Where Steward's tcp-proxy runs in the tenant cluster.
pub const TCP_PROXY_NAMESPACE: &str = "kube-system";
/// Name of Steward's tcp-proxy Deployment in the tenant cluster.
pub const TCP_PROXY_NAME: &str = "steward-tcp-proxy";

pub(super) fn spec(source: &Source<'_>) -> Result<ControlPlaneIngressSpec, SourceError> {
    let mut tenant = source.tenant()?;
    let Some(ingress) = tenant.ingress.take() else {
        // No ingress mode: the domain annotation, and hcp-ingress makes the route.
        return annotated(source, &tenant);
    };
    let field = "spec.controlPlane.ingress.hostname";
    let hostname = ingress.hostname.filter(|h| !h.is_empty()).ok_or_else(|| {
        source.not_requested(field, "missing: Steward derives none we can route by SNI")
    })?;
    // Steward's tcp-proxy dials `<hostname>:443` as written: a port in it is
    // a misconfiguration that preflight reports; routing goes by the host.
    let api_host = hostname
        .rsplit_once(':')
        .map_or(hostname.as_str(), |(host, _)| host)
        .to_string();
    let flavor = match ingress.controller_type.as_deref() {
        None | Some("generic") => Flavor::Generic,
        Some("haproxy") => Flavor::Haproxy,
        Some("nginx") => Flavor::Nginx,
        Some("traefik") => Flavor::Traefik,
        Some(other) => {
            return Err(domain::invalid(
                source,
                "spec.controlPlane.ingress.controllerType",
                format!(
                    "unknown controller type {other:?}: Steward takes haproxy, nginx, traefik or generic"
                ),
            ));
        }
    };
    let route_kind = if flavor == Flavor::Traefik {
        "IngressRouteTCP"
    } else {
        "Ingress"
    };
    let backend = domain::tenant_backend(source, &tenant)?;
    // Steward's konnectivity host: the API host with its first `.k8s.`
    // replaced (without one Steward uses the API host, which SNI cannot split).
    let konnectivity_host = backend.konnectivity_port.and_then(|_| {
        api_host
            .contains(".k8s.")
            .then(|| api_host.replacen(".k8s.", ".konnectivity.", 1))
    });
    let tcp_proxy = tenant.tcp_proxy;
    let ingress = IngressSpec {
        api_host,
        konnectivity_host,
        class_name: ingress.ingress_class_name.filter(|c| !c.is_empty()),
        port: DEFAULT_INGRESS_PORT,
        annotations: Default::default(),
        deploy: true,
    };
    Ok(ControlPlaneIngressSpec {
        kubeconfig_secret: domain::standalone_kubeconfig(source),
        upstream: Some(UpstreamSpec {
            provider: "steward".into(),
            route: Some(UpstreamObject {
                kind: route_kind.into(),
                name: source.name().to_string(),
                namespace: Some(source.namespace().to_string()),
            }),
            // Only Steward's IngressRouteTCP has a konnectivity rule.
            route_includes_konnectivity: flavor == Flavor::Traefik,
            take_over_node_proxy: false,
            node_proxy: tcp_proxy.then(|| UpstreamObject {
                kind: "Deployment".into(),
                name: TCP_PROXY_NAME.into(),
                namespace: Some(TCP_PROXY_NAMESPACE.into()),
            }),
        }),
        ..domain::assemble(source, ingress, Some(flavor), backend)
    })
}

/// A Steward tenant with the domain annotation and no ingress mode.
fn annotated(source: &Source<'_>, tenant: &Tenant) -> Result<ControlPlaneIngressSpec, SourceError> {
    domain::tenant(source, tenant, &[domain::DOMAIN_ANNOTATION], None).map_err(|e| match e {
        SourceError::NotRequested { object, .. } => SourceError::NotRequested {
            object,
            field: format!(
                "spec.controlPlane.ingress (or metadata.annotations[{}])",
                domain::DOMAIN_ANNOTATION
            ),
            reason: "missing: the object asks for no ingress".into(),
        },
        other => other,
    })
}
