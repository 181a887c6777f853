//! Steering written: the steering objects applied over what was observed,
//! the record marked, a rewrite by someone else noted, and what is left of
//! a mode that no longer steers removed once the handover pause has passed:
//! its slices, then its proxy.

use kube::api::DynamicObject;

use super::{
    pass::{Pass, Record, Seen, Wanted, is_ours, kind_of},
    switch::{abandoned_slices, drop_abandoned_slices},
};
use crate::{
    api::Steering,
    controller::{
        apply,
        status::{Desired, types},
        workload::plan::{Plan, Step},
    },
    render::workload::{self, ProxyObjects, SteeringObjects},
};

/// How this pass comes to write the steering.
pub(super) struct How {
    /// The record says the spec's mode steers already.
    pub steered_before: bool,
    /// A switch completed, in words.
    pub switched: Option<String>,
    /// Service steering's hand-over completed in this pass.
    pub handed_over: bool,
}

/// Write the steering, note a rewrite by someone else, and remove a proxy
/// that no longer steers once the handover pause has passed.
pub(super) fn steer(plan: &mut Plan, pass: &Pass, record: &mut Record, how: How) {
    let How {
        steered_before,
        switched,
        handed_over,
    } = how;
    let mode = pass.mode();
    let seen = pass.seen;
    // Steering first looks at what is there: a rewrite by someone else is news.
    // (Not after a hand-over: the Service is as it left it.)
    let mut drift = Vec::new();
    if steered_before && !handed_over {
        drift = endpoints_drift(pass.objects, pass.wanted, seen);
        if let (SteeringObjects::Service { .. }, Some(live)) =
            (&pass.objects.steering, &pass.facts.service)
        {
            drift.extend(workload::steering_drift(
                &pass.objects.steering,
                None,
                None,
                Some(live),
            ));
        }
    }
    for object in &pass.wanted.steering {
        match kind_of(object) {
            "Service" => plan.push(Step::ApplyFields {
                object: object.clone(),
                live: seen.service.clone(),
            }),
            "Endpoints" => plan.apply(object.clone(), seen.endpoints.clone()),
            _ => plan.apply(object.clone(), seen.endpoint_slice.clone()),
        }
    }
    // Service steering's hand-over bridged the provider's addresses with a
    // slice of ours; once it is done the proxy pods' slices carry the
    // traffic and with `Local` kube-proxy ignores ours (no node name): it
    // goes.
    if handed_over && let Some(bridge) = seen.endpoint_slice.as_ref().filter(|s| is_ours(s)) {
        plan.push(Step::Delete(bridge.clone()));
    }
    mark_applied(plan, record, mode, pass.given.now);
    plan.drift.clone_from(&drift);
    let shown = if drift.is_empty() {
        pass.facts.recent_drift.clone()
    } else {
        drift
    };
    plan.conditions
        .push(steered(pass.objects, shown, switched.clone()));
    if switched.is_some() {
        // The old path goes in a later pass, once kube-proxy has taken the new one in.
        plan.requeue = Some(workload::HANDOVER_PAUSE);
        plan.switched = switched;
    } else if mode == Steering::Service && !record.now.service_proxy_beside_service {
        // Steered by a release that ran this proxy in kube-system, where
        // the Service selects nothing: that one goes, once.
        plan.push(Step::RemoveProxy(Steering::AdvertiseAddress));
        record.now.service_proxy_beside_service = true;
        record.write(plan);
    } else if let Some(leaving) = record.now.leaving.filter(|m| *m != mode) {
        match record
            .now
            .handover_wait(pass.given.now, workload::HANDOVER_PAUSE)
        {
            Some(wait) => plan.requeue = Some(wait),
            // Away from service steering: the pods' slices go first, and
            // the proxies they name a pause later, so that kube-proxy never
            // sends a call to a proxy that is gone.
            None if leaving == Steering::Service && abandoned_slices(pass, record) => {
                drop_abandoned_slices(plan, pass);
                record.now.replaced_at = Some(pass.given.now);
                record.write(plan);
                plan.requeue = Some(workload::HANDOVER_PAUSE);
            }
            None => {
                plan.push(Step::RemoveProxy(leaving));
                record.now.leaving = None;
                record.write(plan);
            }
        }
    }
}

/// After steering with `mode` is written: the record says so, and which
/// mode it replaced, whose proxy is still to go.
fn mark_applied(plan: &mut Plan, record: &mut Record, mode: Steering, now: i64) {
    let r = &mut record.now;
    if r.applied == Some(mode) {
        return;
    }
    if r.applied.is_some() {
        // A switch: the path it replaced keeps its proxy for a while.
        r.replaced_at = Some(now);
    }
    r.leaving = r.applied.or(r.leaving).filter(|m| *m != mode);
    r.applied = Some(mode);
    r.proxies_listed_at = None;
    r.service_proxy_beside_service |= mode == Steering::Service;
    // Steered again after a give-back whose removal never came.
    r.restored = None;
    record.write(plan);
}

/// What someone else changed in the Endpoints and EndpointSlice we
/// steer with, from the very objects the writes are decided on.
fn endpoints_drift(objects: &ProxyObjects, wanted: &Wanted, seen: &Seen) -> Vec<String> {
    let SteeringObjects::AdvertiseAddress {
        endpoints: wanted_endpoints,
        endpoint_slice: wanted_slice,
    } = &objects.steering
    else {
        return Vec::new();
    };
    let rewritten = |want: Option<&DynamicObject>, live: Option<&DynamicObject>| {
        let want = want?;
        apply::rewritten_by_others(want, live)
            .then(|| serde_json::to_value(live?).ok())
            .flatten()
    };
    let endpoints: Option<k8s_openapi::api::core::v1::Endpoints> =
        rewritten(wanted.endpoints.as_ref(), seen.endpoints.as_ref())
            .and_then(|v| serde_json::from_value(v).ok());
    let slice: Option<k8s_openapi::api::discovery::v1::EndpointSlice> =
        rewritten(wanted.endpoint_slice.as_ref(), seen.endpoint_slice.as_ref())
            .and_then(|v| serde_json::from_value(v).ok());
    if endpoints.is_none() && slice.is_none() {
        return Vec::new();
    }
    // What was not rewritten compares as wanted.
    workload::steering_drift(
        &objects.steering,
        Some(endpoints.as_ref().unwrap_or(wanted_endpoints)),
        Some(slice.as_ref().unwrap_or(wanted_slice)),
        None,
    )
}

/// EndpointsSteered once steering is written.
fn steered(objects: &ProxyObjects, drift: Vec<String>, switched: Option<String>) -> Desired {
    let switched = switched.map(|s| format!(" ({s})")).unwrap_or_default();
    let service = matches!(objects.steering, SteeringObjects::Service { .. });
    match (service, drift.is_empty()) {
        (false, true) => Desired::ok(
            types::ENDPOINTS_STEERED,
            "AdvertiseAddress",
            format!(
                "default/kubernetes Endpoints and EndpointSlice point at the node-local proxy address{switched}"
            ),
        ),
        (true, true) => Desired::ok(
            types::ENDPOINTS_STEERED,
            "ServiceSelector",
            format!(
                "the kubernetes Service selects the node proxy (internalTrafficPolicy: Local){switched}"
            ),
        ),
        (false, false) => Desired::failed(
            types::ENDPOINTS_STEERED,
            "EndpointsOverwritten",
            format!(
                "something else rewrote default/kubernetes ({}): run the API server with --endpoint-reconciler-type=none; re-steered for now",
                drift.join("; ")
            ),
        ),
        (true, false) => Desired::failed(
            types::ENDPOINTS_STEERED,
            "ServiceOverwritten",
            format!(
                "something else changed the kubernetes Service ({}); re-applied",
                drift.join("; ")
            ),
        ),
    }
}
