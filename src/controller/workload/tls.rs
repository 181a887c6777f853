//! The proxy's TLS: the cluster CA from `<cluster>-ca` in the management
//! cluster, and the proxy's own short-lived certificate minted from it (the
//! API server's key is never read).

use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt, api::DynamicObject};

use super::error::WorkloadError;
use crate::{
    api::ControlPlaneIngress,
    controller::{context::Context, redact},
    pki::{self, CertificateAuthority, Renewal},
    render::workload::{self, ProxyTls, WorkloadInputs},
};

/// The cluster CA from Secret `<cluster>-ca` in the management cluster.
pub(super) async fn cluster_ca(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
) -> Result<CertificateAuthority, WorkloadError> {
    let namespace = cpi.namespace().unwrap_or_default();
    let name = format!("{}-ca", cpi.spec.cluster_name);
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let secret = api
        .get_opt(&name)
        .await
        .map_err(|e| {
            WorkloadError::CaNotAvailable(format!("failed to read Secret {namespace}/{name}: {e}"))
        })?
        .ok_or_else(|| WorkloadError::CaNotAvailable(format!("Secret {namespace}/{name} not found: the proxy certificate is minted from the cluster CA")))?;
    let data = secret.data.unwrap_or_default();
    let field = |key: &str| {
        data.get(key)
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
            .ok_or_else(|| {
                WorkloadError::CaNotAvailable(format!("Secret {namespace}/{name} has no {key}"))
            })
    };
    let key = field("tls.key")?;
    CertificateAuthority::from_pem(&field("tls.crt")?, &key).map_err(|e| {
        WorkloadError::CaNotAvailable(format!(
            "Secret {namespace}/{name}: {}",
            redact::scrub(&e.to_string(), &key)
        ))
    })
}

/// The proxy's serving certificate: the live one (from its Secret, as
/// observed) while it is valid for the current hosts and CA, else a new one
/// minted from the cluster CA. `None` where the proxy serves no TLS; with
/// it, when to look again for renewal.
pub(super) fn proxy_certificate(
    cpi: &ControlPlaneIngress,
    live_secret: Option<&DynamicObject>,
    inputs: &WorkloadInputs,
    ca: &CertificateAuthority,
    now: SystemTime,
) -> Result<Option<(ProxyTls, Option<Duration>)>, WorkloadError> {
    let Some(leaf_spec) = workload::proxy_leaf_spec(cpi, inputs, now) else {
        return Ok(None);
    };
    let live_tls = live_secret
        .and_then(|s| serde_json::from_value::<Secret>(serde_json::to_value(s).ok()?).ok())
        .and_then(|s| s.data)
        .and_then(|d| {
            let cert = String::from_utf8(d.get("tls.crt")?.0.clone()).ok()?;
            let key = String::from_utf8(d.get("tls.key")?.0.clone()).ok()?;
            Some(ProxyTls {
                cert_pem: cert,
                key_pem: key,
            })
        });
    let renewal = live_tls
        .as_ref()
        .map(|t| pki::renewal_due(&t.cert_pem, leaf_spec.now, ca, &leaf_spec))
        .unwrap_or(Renewal::Due(pki::RenewReason::Unparsable(
            "no certificate yet".into(),
        )));
    let certificate = match (renewal, live_tls) {
        (Renewal::Valid { renew_at }, Some(tls)) => {
            let renew_in = renew_at.duration_since(now).ok();
            (tls, renew_in)
        }
        (due, _) => {
            let leaf = pki::mint_leaf(ca, &leaf_spec).map_err(|e| {
                WorkloadError::CertificateMintFailed(format!(
                    "failed to mint the proxy certificate: {e}"
                ))
            })?;
            if let Renewal::Due(reason) = due {
                tracing::info!(object = %crate::render::describe(cpi), %reason, "minting the proxy certificate");
            }
            let renew_in = leaf.renew_at().duration_since(now).ok();
            (ProxyTls::from(&leaf), renew_in)
        }
    };
    Ok(Some(certificate))
}
