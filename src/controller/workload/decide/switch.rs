//! A steering switch is a hand-over: the new mode's path carries traffic
//! before the old one is released, one step per pass, so pods never lack
//! an endpoint. Recorded addresses are not needed: they are only given
//! back when leaving hcp-ingress.

use kube::api::DynamicObject;

use super::pass::{Pass, Record, Steer, is_ours};
use crate::{
    api::Steering,
    controller::{
        status::{Desired, types},
        workload::plan::{Phase, Plan, Step},
    },
    render::workload,
};

/// Where a switch stands after this pass's steps.
enum Stage {
    /// The new path carries the traffic and the old steering is released,
    /// in words; the old proxy goes in a later pass.
    Done(String),
    /// A step was written, the next waits for the cluster to take it in.
    Waiting(String),
}

/// Switch from `previous` (the record's mode) to the spec's: nothing before
/// the new mode's proxy is up, then the hand-over's next steps.
pub(super) fn switch(
    plan: &mut Plan,
    pass: &Pass,
    record: &mut Record,
    previous: Steering,
    proxy_up: bool,
    no_nodes: bool,
) -> Steer {
    let mode = pass.mode();
    if record.now.leaving != Some(mode) {
        // Should the switch be called off, this proxy is to go.
        record.now.leaving = Some(mode);
        record.write(plan);
    }
    if !proxy_up {
        let namespace = workload::proxy_namespace(mode);
        let (ready, desired) = (pass.proxy.ready, pass.proxy.desired);
        plan.conditions.push(Desired::ok(
            types::ENDPOINTS_STEERED,
            "SwitchPending",
            format!(
                "{previous:?} steers default/kubernetes until the {mode:?} proxy in {namespace} is ready on every node ({ready}/{desired})"
            ),
        ));
        plan.retry(pass.given.retry);
        return Steer::No;
    }
    plan.begin_switch(previous, mode);
    let stage = match (&pass.wanted.endpoints, &pass.wanted.endpoint_slice) {
        (Some(endpoints), Some(slice)) => to_address(plan, pass, record, endpoints, slice),
        _ => to_service(plan, pass, record, no_nodes),
    };
    plan.enter(Phase::Steer);
    match stage {
        Stage::Done(summary) => Steer::Yes {
            switched: Some(summary),
            handed_over: false,
        },
        Stage::Waiting(step) => {
            plan.conditions.push(Desired::ok(
                types::ENDPOINTS_STEERED,
                "SwitchInProgress",
                format!("switching from {previous:?} to {mode:?}: {step}"),
            ));
            plan.retry(pass.given.retry);
            Steer::No
        }
    }
}

/// advertise-address → service: the hand-over to the proxy pods, then the
/// advertise address goes: our slice, our Endpoints fields (the endpoints
/// controller writes the Endpoints of a selected Service from now on). The
/// full Service patch follows with the steering.
fn to_service(plan: &mut Plan, pass: &Pass, record: &mut Record, no_nodes: bool) -> Stage {
    if let Some(step) = service_handover(plan, pass, record, no_nodes) {
        return Stage::Waiting(format!("{step}; the advertise address steers until then"));
    }
    if let Some(slice) = pass.seen.endpoint_slice.as_ref().filter(|s| is_ours(s)) {
        plan.push(Step::Delete(slice.clone()));
    }
    if pass.seen.endpoints.as_ref().is_some_and(is_ours) {
        plan.push(Step::Force(workload::bare_endpoints()));
    }
    Stage::Done(
        "switched from advertise-address: the proxy pods' EndpointSlices carry the traffic, the advertise address is released".into(),
    )
}

/// service → advertise-address.
fn to_address(
    plan: &mut Plan,
    pass: &Pass,
    record: &Record,
    endpoints: &DynamicObject,
    endpoint_slice: &DynamicObject,
) -> Stage {
    // 1. Our Endpoints and slice next to the pods' slices: with
    // `internalTrafficPolicy: Local` kube-proxy ignores a slice without a
    // node name, so nothing changes yet.
    plan.apply(endpoint_slice.clone(), pass.seen.endpoint_slice.clone());
    // 2. ONE Service update drops our selector and restores the recorded
    // policy: kube-proxy balances over the advertise address and the pods'
    // slices, both of which work.
    plan.push(Step::Force(workload::service_release_for_switch(
        &record.now,
    )));
    // 3. Our Endpoints, which the endpoints controller rewrote while the
    // selector was there. The pods' slices stay for the handover pause
    // (`abandoned_slices`): kube-proxy sees the Service and the slices on
    // two watches, and had it seen the slices go before the policy, it
    // would have kept `Local` with no local endpoint left, and dropped
    // every call.
    plan.apply(endpoints.clone(), pass.seen.endpoints.clone());
    Stage::Done(
        "switched from service: the advertise address carries the traffic, the Service's selector is released".into(),
    )
}

/// The steps before service steering's `internalTrafficPolicy: Local`,
/// whatever steered before (our advertise address, the API server's own
/// endpoints): the Service selects the proxy pods with its traffic policy
/// untouched, so kube-proxy balances over what was there and the proxy pods
/// (both work) while the EndpointSlice controller writes their slices (with
/// `Local` it would ignore a node-less endpoint at once). `None` once its
/// slices have listed every ready proxy for the handover pause (or no Node
/// exists); else the step waited on.
pub(super) fn service_handover(
    plan: &mut Plan,
    pass: &Pass,
    record: &mut Record,
    no_nodes: bool,
) -> Option<String> {
    if !selects_proxy(pass) {
        // The selector makes the mirroring controller delete the slice it
        // made of a provider's Endpoints, before the EndpointSlice
        // controller has made the proxy pods': our slice with the same
        // addresses carries the traffic between the two. With a slice of
        // its own in place (the API server's, our address steering's),
        // none is needed.
        if pass.facts.endpoint_slice.is_none()
            && let Some(bridge) = pass.facts.endpoints.as_ref().and_then(|e| {
                workload::bridge_slice(e, workload::service_ip(pass.facts.service.as_ref()))
            })
        {
            plan.apply(bridge, None);
        }
        plan.push(Step::ApplyFields {
            object: workload::service_handover_patch(),
            live: None,
        });
        if !no_nodes {
            return Some(
                "the kubernetes Service selects the proxy pods; waiting for their EndpointSlice"
                    .into(),
            );
        }
    }
    if no_nodes {
        return None;
    }
    let ready = pass.proxy.ready;
    let selected = listed_proxies(pass);
    if selected < ready.max(1) {
        if record.now.proxies_listed_at.take().is_some() {
            record.write(plan);
        }
        return Some(format!(
            "the EndpointSlice controller lists {selected} of {ready} ready proxy pods for the kubernetes Service"
        ));
    }
    let now = pass.given.now;
    let since = match record.now.proxies_listed_at {
        Some(since) => since,
        None => {
            record.now.proxies_listed_at = Some(now);
            record.write(plan);
            now
        }
    };
    workload::wait_since(since, now, workload::HANDOVER_PAUSE).map(|wait| {
        format!(
            "the EndpointSlice controller lists every ready proxy pod; kube-proxy takes them in before the Service turns internalTrafficPolicy Local (another {}s)",
            wait.as_secs()
        )
    })
}

/// Whether Service `default/kubernetes` selects the proxy pods with
/// `internalTrafficPolicy: Local` now: service steering holds.
pub(super) fn service_steered(pass: &Pass) -> bool {
    pass.facts
        .service
        .as_ref()
        .is_some_and(workload::service_steering_holds)
}

/// Whether Service `default/kubernetes` selects the proxy pods now.
fn selects_proxy(pass: &Pass) -> bool {
    pass.facts
        .service
        .as_ref()
        .is_some_and(workload::selects_proxy_pods)
}

/// Ready endpoints with a node name in the EndpointSlice controller's
/// slices of the `kubernetes` Service.
fn listed_proxies(pass: &Pass) -> i32 {
    let ready = pass
        .facts
        .controller_slices
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .filter(|e| {
            e.node_name.is_some() && e.conditions.as_ref().and_then(|c| c.ready) != Some(false)
        })
        .count();
    i32::try_from(ready).unwrap_or(i32::MAX)
}

/// Whether the proxy pods' slices are left over from a switch away from
/// service steering: the EndpointSlice controller leaves the slices of a
/// selector that is gone. While the Service has a selector (still ours,
/// the recorded one given back, one another manager set since) its slices
/// are that selector's, live: they stay.
pub(super) fn abandoned_slices(pass: &Pass, record: &Record) -> bool {
    let selector = pass
        .facts
        .service
        .as_ref()
        .and_then(|s| s.spec.as_ref()?.selector.as_ref());
    !pass.seen.controller_slices.is_empty()
        && selector.is_none()
        && record.now.service.selector.is_none()
}

/// The EndpointSlice controller leaves the slices it made for a selector
/// that is gone (it skips selector-less Services): while they stay,
/// kube-proxy still sends part of the traffic to the pods they name. They
/// have no manager any more; a selector given back makes it create them anew.
pub(super) fn drop_abandoned_slices(plan: &mut Plan, pass: &Pass) {
    for slice in &pass.seen.controller_slices {
        plan.push(Step::Delete(slice.clone()));
    }
}
