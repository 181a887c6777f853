//! Decide: what a workload reconcile writes, from what it read. Pure: the
//! ControlPlaneIngress, the [`Facts`] observed and the clock in, a [`Plan`]
//! out (the ordered writes, the steering record they leave, the conditions
//! and when to look again). The states and transitions are the table in
//! docs/architecture.md ("Steering, state by state"); the property tests
//! check its invariants on generated facts.
//!
//! The rules it keeps, whatever it is given:
//! - the steering record is stored before the first steering write;
//! - steering never goes to a proxy that is not rolled out on every node,
//!   unless no Node exists (or a provider's proxy is being taken over and ours
//!   is ready);
//! - a switch of mode is a hand-over: the new path carries traffic before
//!   the old one is released, one step per pass;
//! - a proxy is only removed when the record no longer steers at it and the
//!   handover pause has passed since it was replaced.

mod complement;
mod pass;
mod publish;
mod removal;
mod steer;
mod switch;
mod takeover;

#[cfg(test)]
mod fixture;
#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;

use std::time::Duration;

pub(super) use complement::complement;
pub(super) use pass::Given;
use pass::{Pass, ProxyState, Record, Seen, Steer, Wanted, taken_over};
use publish::publish;
pub use removal::Removal;
pub(super) use removal::{RemovalFacts, removal};

use super::{
    ccm,
    error::WorkloadError,
    observe::Facts,
    plan::{Acted, Phase, Plan},
};
use crate::{
    api::Steering,
    controller::status::{Desired, types},
    render::workload::{self, ProxyObjects, SteeringObjects},
};

/// The plan for bringing the workload cluster to what `given` asks, from
/// what `facts` say it holds.
pub(super) fn decide(given: &Given, facts: &Facts) -> Result<Plan, WorkloadError> {
    let mut plan = Plan::default();
    plan.conditions.push(Desired::ok(
        types::WORKLOAD_REACHABLE,
        "Connected",
        "the workload API answers through the kubeconfig Secret",
    ));
    let Some(objects) = render(given, facts, &mut plan) else {
        return Ok(plan);
    };
    let wanted = Wanted::of(&objects)?;
    let seen = Seen::of(facts);
    let proxy = ProxyState::of(&wanted, &facts.proxy);
    let mut record = Record::of(facts);
    let mut pass = Pass {
        given,
        facts,
        objects: &objects,
        wanted: &wanted,
        seen: &seen,
        proxy: &proxy,
        released_now: false,
    };
    let mut proxy_applied = false;
    if taken_over(given.cpi).is_some() {
        match takeover::prepare(&mut plan, &pass, &mut record)? {
            takeover::Prepared::Waiting => {
                configure_ccm(&mut plan, given, facts)?;
                return Ok(plan);
            }
            takeover::Prepared::Steer {
                released_now,
                proxy_applied: applied,
            } => {
                pass.released_now = released_now;
                proxy_applied = applied;
            }
        }
    }
    // The record of what default/kubernetes holds, before any steering write.
    record.ensure(&mut plan);
    // The proxy first, steering only at a proxy that is ready.
    if !proxy_applied {
        plan.extend(wanted.proxy_writes(&facts.proxy));
    }
    let steered_before = record.now.applied == Some(pass.mode());
    let steer = route(&mut plan, &pass, &mut record);
    plan.enter(Phase::Steer);
    if let Steer::Yes {
        switched,
        handed_over,
    } = steer
    {
        let how = steer::How {
            steered_before,
            switched,
            handed_over,
        };
        steer::steer(&mut plan, &pass, &mut record, how);
    }
    if let Some(theirs) = taken_over(given.cpi) {
        takeover::report(&mut plan, &pass, theirs);
    }
    if !plan.last_holds() {
        plan.retry(given.retry);
    }
    plan.conditions.push(proxy.condition.clone());
    if proxy.desired == 0 || proxy.ready < proxy.desired {
        plan.retry(given.retry);
    }
    plan.proxy = Some((proxy.desired, proxy.ready));
    configure_ccm(&mut plan, given, facts)?;
    Ok(plan)
}

/// The proxy's objects, or the plan that stops before them: a refused
/// address family, no cluster CA, an invalid spec, the proxy disabled.
fn render(given: &Given, facts: &Facts, plan: &mut Plan) -> Option<ProxyObjects> {
    let spec = workload::proxy_spec(given.cpi);
    let mut inputs =
        workload::inputs_from_service(spec.steering, facts.service.as_ref(), given.base.clone());
    // An advertise address of the other family than the live Service's
    // would look steered while kube-proxy ignores it: refused before any write.
    if let Err(refused) = workload::check_advertise_family(given.cpi, inputs.service_ip) {
        let message = refused.to_string();
        plan.conditions.push(Desired::failed(
            types::ENDPOINTS_STEERED,
            "AddressFamilyMismatch",
            format!("default/kubernetes is left as it is: {message}"),
        ));
        stop(plan, "InvalidSpec", message, None);
        return None;
    }
    let credentials = match &facts.credentials {
        Ok(credentials) => credentials,
        Err(unavailable) => {
            let reason = unavailable.reason();
            stop(plan, reason, unavailable.to_string(), Some(given.retry));
            return None;
        }
    };
    inputs.ca_cert_pem = Some(credentials.ca_cert_pem.clone());
    if let Some(tls) = &credentials.tls {
        inputs.tls = Some(tls.clone());
        plan.requeue = credentials.renew_in;
    }
    match workload::proxy(given.cpi, &inputs) {
        Ok(Some(objects)) => Some(objects),
        Ok(None) => {
            plan.conditions = disabled();
            None
        }
        Err(e) => {
            stop(plan, "InvalidSpec", e.to_string(), None);
            None
        }
    }
}

/// What `spec.proxy.enabled: false` reports.
pub(super) fn disabled() -> Vec<Desired> {
    let off = "spec.proxy.enabled is false: nothing is installed in the workload cluster";
    vec![
        Desired::ok(types::PROXY_READY, "ProxyDisabled", off),
        Desired::ok(types::ENDPOINTS_STEERED, "ProxyDisabled", off),
    ]
}

/// The install stops before the proxy: ProxyReady says why.
fn stop(plan: &mut Plan, reason: &str, message: String, requeue: Option<Duration>) {
    plan.conditions
        .push(Desired::failed(types::PROXY_READY, reason, message));
    plan.requeue = requeue;
}

/// Where steering stands: a switch, the first steering (service steering
/// by its hand-over), waiting for the proxy, or steered.
fn route(plan: &mut Plan, pass: &Pass, record: &mut Record) -> Steer {
    let mode = pass.mode();
    let (proxy, retry) = (pass.proxy, pass.given.retry);
    // With no Node nothing can lose the API: steering goes first, and the
    // first node's pods find the path as soon as its proxy runs.
    let no_nodes = !proxy.rolled_out && !pass.facts.any_node;
    let proxy_up = proxy.rolled_out || no_nodes || taken_over(pass.given.cpi).is_some();
    // Service steering hands over whenever it does not hold: at the start,
    // and again when someone took the selector or `Local` away (re-applied
    // at once, `Local` would drop whatever carries the traffic before the
    // proxy pods' slices do).
    let handing_over = mode == Steering::Service
        && !no_nodes
        && match record.now.applied {
            None => true,
            Some(previous) => previous == mode && !switch::service_steered(pass),
        };
    match record.now.applied {
        Some(previous) if previous != mode => {
            switch::switch(plan, pass, record, previous, proxy_up, no_nodes)
        }
        _ if handing_over && proxy_up => {
            // Whatever reached the API before keeps carrying traffic until
            // the proxy pods are the Service's endpoints.
            match switch::service_handover(plan, pass, record, no_nodes) {
                None => {
                    // Done: the next hand-over (after a rewrite) waits anew.
                    if record.now.applied.is_some() && record.now.proxies_listed_at.take().is_some()
                    {
                        record.write(plan);
                    }
                    Steer::Yes {
                        switched: None,
                        handed_over: true,
                    }
                }
                Some(step) if record.now.applied.is_some() => {
                    // A rewrite by someone else: news, remembered a while.
                    let drift = match (&pass.objects.steering, &pass.facts.service) {
                        (steering @ SteeringObjects::Service { .. }, Some(live)) => {
                            workload::steering_drift(steering, None, None, Some(live))
                        }
                        _ => Vec::new(),
                    };
                    plan.conditions.push(Desired::failed(
                        types::ENDPOINTS_STEERED,
                        "ServiceOverwritten",
                        format!(
                            "something else changed the kubernetes Service ({}); handing it over to the proxy pods again: {step}",
                            drift.join("; ")
                        ),
                    ));
                    plan.drift = drift;
                    plan.retry(retry);
                    Steer::No
                }
                Some(step) => {
                    plan.conditions.push(Desired::failed(
                        types::ENDPOINTS_STEERED,
                        "WaitingForProxy",
                        format!("{step}; then default/kubernetes is steered"),
                    ));
                    plan.retry(retry);
                    Steer::No
                }
            }
        }
        _ if !proxy_up && (handing_over || record.now.applied.is_none()) => {
            let (ready, desired) = (proxy.ready, proxy.desired);
            plan.conditions.push(Desired::failed(
                types::ENDPOINTS_STEERED,
                "WaitingForProxy",
                format!(
                    "default/kubernetes is steered once the proxy is ready on every node ({ready}/{desired}): steering at a proxy that does not answer would cut pods off the API"
                ),
            ));
            plan.retry(retry);
            Steer::No
        }
        _ => Steer::Yes {
            switched: None,
            handed_over: false,
        },
    }
}

/// The conditions and requeue of a plan acted on: a failed switch replaces
/// EndpointsSteered (the old mode still steers) and looks again after
/// `retry`; otherwise the plan's own.
pub(super) fn reported(
    plan: &Plan,
    acted: &Acted,
    retry: Duration,
) -> (Vec<Desired>, Option<Duration>) {
    let mut conditions = plan.conditions.clone();
    let (Some(failed), Some(switch)) = (&acted.switch_failed, &plan.switch) else {
        return (conditions, plan.requeue);
    };
    let (from, to) = (switch.from, switch.to);
    let failed = Desired::failed(
        types::ENDPOINTS_STEERED,
        "SteeringSwitchFailed",
        format!("cannot switch steering from {from:?} to {to:?}, {from:?} still steers: {failed}"),
    );
    conditions.retain(|c| c.type_ != types::ENDPOINTS_STEERED);
    let at = conditions
        .iter()
        .position(|c| c.type_ == types::PROXY_READY)
        .unwrap_or(conditions.len());
    conditions.insert(at, failed);
    (conditions, Some(retry))
}

/// The CCM override and the published endpoint, last: both point at the
/// ingress by name and need nothing of the proxy. Their steps, CCMConfigured
/// and EndpointPublished.
fn configure_ccm(plan: &mut Plan, given: &Given, facts: &Facts) -> Result<(), WorkloadError> {
    plan.enter(Phase::Ccm);
    let (steps, condition) = ccm::plan(given.cpi, &facts.ccm);
    plan.extend(steps);
    plan.conditions.push(condition);
    publish(plan, given.cpi, &facts.published)
}
