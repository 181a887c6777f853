//! Taking the node proxy over from the provider (k0smotron's
//! `k0smotron-haproxy`): our proxy is installed beside theirs and must be
//! ready on every node before anything steers to it; then the record says
//! the Service was released, our EndpointSlice is written, and one Service
//! update hands the traffic over; the provider's pods' slices go a pause
//! later. The provider's proxy is removed by the
//! provider itself, once the user tells it to (the condition and the Event
//! say how).

use super::{
    pass::{Pass, Record, taken_over},
    switch::drop_abandoned_slices,
};
use crate::{
    controller::{
        status::{Desired, Status, types},
        workload::{
            error::WorkloadError,
            plan::{Plan, Step},
        },
    },
    render::workload::{self, ServiceRelease, service_release},
};

/// Where the take-over stands after [`prepare`].
pub(super) enum Prepared {
    /// Our proxy is not ready on every node yet: the provider's still steers.
    Waiting,
    /// `default/kubernetes` is released to address steering; steer now.
    Steer {
        /// This pass makes the Service update.
        released_now: bool,
        /// This pass's plan applies our proxy already.
        proxy_applied: bool,
    },
}

/// Install our proxy beside the provider's and, once it is ready on every
/// node, release `default/kubernetes` from the provider's proxy.
pub(super) fn prepare(
    plan: &mut Plan,
    pass: &Pass,
    record: &mut Record,
) -> Result<Prepared, WorkloadError> {
    let Some(endpoint_slice) = &pass.wanted.endpoint_slice else {
        // Validation admits no other steering with a take-over.
        return Err(WorkloadError::InvalidSpec(
            "spec.upstream.takeOverNodeProxy needs spec.proxy.steering advertise-address".into(),
        ));
    };
    let release = pass
        .facts
        .service
        .as_ref()
        .map(service_release)
        .unwrap_or_default();
    if release == ServiceRelease::default() {
        // Released in an earlier pass: our steering holds the Service now,
        // whatever the readiness of a node that joined since.
        record.ensure(plan);
        drop_abandoned_slices_after_the_pause(plan, pass, record);
        return Ok(Prepared::Steer {
            released_now: false,
            proxy_applied: false,
        });
    }
    // Our proxy first, without steering: ConfigMap, Secret and DaemonSet.
    plan.extend(pass.wanted.proxy_writes(&pass.facts.proxy));
    let (ready, desired) = (pass.proxy.ready, pass.proxy.desired);
    if desired == 0 || ready < desired {
        let theirs = taken_over(pass.given.cpi).map(ToString::to_string);
        let theirs_state = pass
            .facts
            .provider_proxy
            .map_or("missing".to_string(), |(d, r)| format!("{r}/{d} ready"));
        plan.conditions.push(pass.proxy.condition.clone());
        plan.conditions.push(Desired::ok(
            types::ENDPOINTS_STEERED,
            "ManagedByUpstream",
            format!(
                "{} ({theirs_state}) steers default/kubernetes until hcp-ingress's proxy is ready on every node ({ready}/{desired}): taking the node proxy over",
                theirs.unwrap_or_default()
            ),
        ));
        plan.proxy = Some((desired, ready));
        plan.retry(pass.given.retry);
        return Ok(Prepared::Waiting);
    }
    // The record says the Service is released before anything is written.
    record.ensure(plan);
    if !record.now.service_released {
        record.now.service_released = true;
        record.write(plan);
    }
    // Out of k0s's stack first: its prune must never delete the Service.
    if let Some(unlabel) = release.unlabel {
        plan.push(Step::PatchService(unlabel));
    }
    let Some(patch) = release.release else {
        drop_abandoned_slices_after_the_pause(plan, pass, record);
        return Ok(Prepared::Steer {
            released_now: false,
            proxy_applied: true,
        });
    };
    // Our EndpointSlice while the Service still selects theirs: with
    // `internalTrafficPolicy: Local` kube-proxy ignores it (no node name).
    plan.apply(endpoint_slice.clone(), pass.seen.endpoint_slice.clone());
    // The release's time: the provider's slices go a pause after it.
    record.now.replaced_at = Some(pass.given.now);
    record.write(plan);
    plan.push(Step::PatchService(patch));
    Ok(Prepared::Steer {
        released_now: true,
        proxy_applied: true,
    })
}

/// The provider's pods' slices, which the EndpointSlice controller leaves
/// behind when the Service's selector is released, go once kube-proxy had
/// the handover pause to take the released Service in. It reads the
/// Service and the slices on two watches: seeing the slices go while it
/// still held `internalTrafficPolicy: Local`, with only our slice (no node
/// name) left, it would drop every call.
fn drop_abandoned_slices_after_the_pause(plan: &mut Plan, pass: &Pass, record: &Record) {
    if pass.seen.controller_slices.is_empty() {
        return;
    }
    match record
        .now
        .handover_wait(pass.given.now, workload::HANDOVER_PAUSE)
    {
        Some(wait) => plan.requeue = Some(plan.requeue.map_or(wait, |r| r.min(wait))),
        None => drop_abandoned_slices(plan, pass),
    }
}

/// After our steering is written: EndpointsSteered says whether the
/// provider's proxy is still to be removed, and how; the pass that released
/// the Service says so in an Event.
pub(super) fn report(plan: &mut Plan, pass: &Pass, theirs: &crate::api::UpstreamObject) {
    let still_deployed = pass.facts.provider_proxy;
    if still_deployed.is_some() {
        // The provider removes its proxy when told to: look again.
        plan.retry(pass.given.retry);
    }
    let Some(steered) = plan
        .conditions
        .iter_mut()
        .rev()
        .find(|c| c.type_ == types::ENDPOINTS_STEERED && c.status == Status::True)
    else {
        return;
    };
    let theirs_name = theirs.to_string();
    match workload::pending(still_deployed, &theirs_name) {
        Some(pending) => {
            steered.reason = "TakeOverPending".into();
            steered.message = format!("{}; {pending}", steered.message);
            if pass.released_now {
                plan.events.push(("NodeProxyTakenOver", pending));
            }
        }
        None => {
            steered.message = format!(
                "{} (taken over from {theirs_name}, which is gone)",
                steered.message
            );
        }
    }
}
