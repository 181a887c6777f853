//! A provider that runs its own node proxy (k0smotron's HAProxy, Steward's
//! tcp-proxy): nothing of ours is installed and `default/kubernetes` is
//! left to it; the plan reports on its proxy, applies the CCM override and
//! publishes the endpoint.

use std::time::Duration;

use super::{
    super::{
        ccm::CcmFacts,
        error::WorkloadError,
        observe::PublishedAt,
        plan::{Phase, Plan},
    },
    publish::publish,
};
use crate::{
    api::{ControlPlaneIngress, UpstreamObject},
    controller::{
        status::{Desired, Status, types},
        workload::ccm,
    },
};

/// The plan beside the provider's node proxy `upstream`, whose desired and
/// ready pods are `rollout` (`None`: not there yet).
pub(in crate::controller::workload) fn complement(
    cpi: &ControlPlaneIngress,
    upstream: &UpstreamObject,
    rollout: Option<(i32, i32)>,
    ccm_facts: &CcmFacts,
    published: &[PublishedAt],
    retry: Duration,
) -> Result<Plan, WorkloadError> {
    let provider = cpi
        .spec
        .upstream
        .as_ref()
        .map_or("the provider", |u| u.provider.as_str());
    let mut plan = Plan::default();
    plan.conditions.push(Desired::ok(
        types::WORKLOAD_REACHABLE,
        "Connected",
        "the workload API answers through the kubeconfig Secret",
    ));
    let leave =
        format!("hcp-ingress installs no node proxy and leaves default/kubernetes to {provider}");
    let (desired, ready) = rollout.unwrap_or((0, 0));
    let proxy_ready = match rollout {
        Some(_) if desired > 0 && ready == desired => Desired::ok(
            types::PROXY_READY,
            "ManagedByUpstream",
            format!(
                "{provider}'s {upstream} runs the node proxy: {ready}/{desired} ready; {leave}"
            ),
        ),
        Some(_) => Desired::failed(
            types::PROXY_READY,
            "UpstreamProxyNotReady",
            format!("{provider}'s {upstream}: {ready}/{desired} ready; {leave}"),
        ),
        None => Desired::failed(
            types::PROXY_READY,
            "UpstreamProxyMissing",
            format!("waiting for {provider} to create {upstream} in the workload cluster; {leave}"),
        ),
    };
    if proxy_ready.status != Status::True {
        plan.retry(retry);
    }
    plan.conditions.push(proxy_ready);
    plan.conditions.push(Desired::ok(
        types::ENDPOINTS_STEERED,
        "ManagedByUpstream",
        format!("default/kubernetes is steered by {provider}'s node proxy, not by hcp-ingress"),
    ));
    plan.enter(Phase::Ccm);
    let (steps, configured) = ccm::plan(cpi, ccm_facts);
    plan.extend(steps);
    plan.conditions.push(configured);
    publish(&mut plan, cpi, published)?;
    Ok(plan)
}
