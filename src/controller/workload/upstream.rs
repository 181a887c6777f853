//! A workload cluster whose control plane provider ships its own node
//! proxy (k0smotron's HAProxy, Steward's tcp-proxy): hcp-ingress installs no
//! second one and never writes `default/kubernetes`; it reports on the
//! provider's proxy and applies the CCM override.

use kube::api::DynamicObject;

use super::{
    act, ccm, decide,
    error::WorkloadError,
    observe::{provider_rollout, published},
    outcome::{Outcome, not_initialized, unreachable, workload_key},
};
use crate::api::{ControlPlaneIngress, UpstreamObject};
use crate::controller::context::Context;

/// The control plane's provider runs its own node proxy and owns
/// `default/kubernetes`: leave both to it, report on its proxy, and do what
/// it does not (the CCM override). Observe, decide, act, as `install` does.
pub(super) async fn complement(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
    cluster: Option<&DynamicObject>,
    upstream: &UpstreamObject,
) -> Outcome {
    if let Some(waiting) = not_initialized(ctx, cluster) {
        return waiting;
    }
    let result = async {
        let client = ctx.workload_clients.of(&ctx.client, cpi).await?;
        let live = provider_rollout(&client, upstream).await?;
        let ccm_facts = ccm::observe(&client, cpi).await?;
        let published = published(&client, cpi).await?;
        let plan = decide::complement(
            cpi,
            upstream,
            live,
            &ccm_facts,
            &published,
            ctx.settings.retry,
        )?;
        act::act(ctx, &client, &plan).await?;
        Ok::<_, WorkloadError>(Outcome {
            conditions: plan.conditions,
            proxy: None,
            requeue: plan.requeue,
        })
    }
    .await;
    match result {
        Ok(outcome) => {
            ctx.backoff.reset(&workload_key(cpi));
            outcome
        }
        Err(u) => unreachable(ctx, cpi, u),
    }
}
