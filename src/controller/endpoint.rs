//! The endpoint stage of a reconciliation: the tenant's endpoint probed
//! through the shared ingress (`probe` does the handshake), as the
//! `EndpointReachable` and `CertificateCoversHosts` conditions.

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};

use super::{
    context::Context,
    probe,
    status::{Desired, types},
};
use crate::api::ControlPlaneIngress;

/// `EndpointReachable` and `CertificateCoversHosts`, once the route is ready.
pub(super) async fn conditions(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
    route_ok: bool,
) -> Vec<Desired> {
    if !ctx.settings.probe_endpoints {
        let message = "endpoint probes are disabled (--probe-endpoints=false)";
        return vec![
            Desired::ok(types::ENDPOINT_REACHABLE, "ProbesDisabled", message),
            Desired::ok(types::CERTIFICATE_COVERS_HOSTS, "ProbesDisabled", message),
        ];
    }
    if !route_ok {
        let message = "waiting for the route";
        return vec![
            Desired::unknown(types::ENDPOINT_REACHABLE, "RouteNotReady", message),
            Desired::unknown(types::CERTIFICATE_COVERS_HOSTS, "RouteNotReady", message),
        ];
    }
    let spec = &cpi.spec;
    let addresses = spec
        .proxy
        .as_ref()
        .map(|p| p.upstreams.clone())
        .unwrap_or_default();
    let port = spec.ingress.port as u16;
    let mut hosts = vec![spec.ingress.api_host.clone()];
    hosts.extend(spec.ingress.konnectivity_host.clone());
    let mut chains = Vec::new();
    for host in &hosts {
        match probe::handshake(host, port, &addresses, ctx.settings.probe_timeout).await {
            Ok(handshake) => chains.push((host.clone(), handshake.address, handshake.chain)),
            Err(failure) => {
                return vec![
                    Desired::failed(types::ENDPOINT_REACHABLE, failure.reason, failure.message),
                    Desired::unknown(
                        types::CERTIFICATE_COVERS_HOSTS,
                        "EndpointNotReachable",
                        format!("no certificate seen for {host}"),
                    ),
                ];
            }
        }
    }
    let seen: Vec<String> = chains
        .iter()
        .map(|(host, address, _)| format!("{host} via {address}"))
        .collect();
    let reachable = Desired::ok(
        types::ENDPOINT_REACHABLE,
        "HandshakeSucceeded",
        format!(
            "TLS handshake through the ingress succeeded: {}",
            seen.join(", ")
        ),
    );
    let covers = match ca_certificate(ctx, cpi).await {
        Err(unknown) => unknown,
        Ok(ca) => match chains
            .iter()
            .map(|(host, _, chain)| probe::covers(chain, host, &ca))
            .find_map(Result::err)
        {
            None => Desired::ok(
                types::CERTIFICATE_COVERS_HOSTS,
                "Verified",
                "the served certificates name every host and chain to the cluster CA",
            ),
            Some(not_covered) => Desired::failed(
                types::CERTIFICATE_COVERS_HOSTS,
                "CertificateMismatch",
                not_covered.to_string(),
            ),
        },
    };
    vec![reachable, covers]
}

/// `tls.crt` of Secret `<cluster>-ca` (CAPI's cluster CA), or the
/// CertificateCoversHosts condition that says why it is not available. Only
/// the certificate is read.
async fn ca_certificate(ctx: &Context, cpi: &ControlPlaneIngress) -> Result<Vec<u8>, Desired> {
    let namespace = cpi.namespace().unwrap_or_default();
    let name = format!("{}-ca", cpi.spec.cluster_name);
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let unavailable = |message: String| {
        Desired::unknown(types::CERTIFICATE_COVERS_HOSTS, "CANotAvailable", message)
    };
    match api.get_opt(&name).await {
        Ok(Some(secret)) => secret
            .data
            .and_then(|mut d| d.remove("tls.crt"))
            .map(|b| b.0)
            .ok_or_else(|| unavailable(format!("Secret {namespace}/{name} has no tls.crt"))),
        Ok(None) => Err(unavailable(format!(
            "Secret {namespace}/{name} not found: cannot check the served certificate"
        ))),
        Err(e) => Err(unavailable(format!(
            "failed to read Secret {namespace}/{name}: {e}"
        ))),
    }
}
