//! Removal (a deletion, or `spec.proxy.enabled: false` on an installed
//! proxy), in the order that keeps the in-cluster API path: give
//! `default/kubernetes` back what steering took (from the record made before
//! the first steering write), let kube-proxy take the given-back Service and
//! endpoints in, then delete the slices it served from while steered, let it
//! take that in, then give back the CCM workloads we patched and the
//! endpoint we published, then remove the proxy's objects, the record last.
//! When nothing safe can be given back the proxy stays: a cluster is never
//! left steered at a proxy that is gone.

use std::{net::IpAddr, time::Duration};

use k8s_openapi::api::core::v1::Endpoints;
use kube::{ResourceExt, api::DynamicObject};

use super::{
    super::{
        error::WorkloadError,
        plan::{Phase, Plan, Step},
    },
    pass::{is_ours, kind_of},
};
use crate::{
    api::Steering,
    render::workload::{
        self, Deferred, FINISH_WITHOUT_RESTORE_ANNOTATION, Live, NAMESPACE, RECORD_NAME, Restore,
        SteeringRecord,
    },
    sources::describe,
};

/// What a removal reads in the workload cluster.
#[derive(Clone, Debug)]
pub(in crate::controller::workload) struct RemovalFacts {
    /// Endpoints `default/kubernetes`, typed, and as read (to delete it).
    pub endpoints: Option<Endpoints>,
    pub endpoints_object: Option<DynamicObject>,
    /// The steering record; `None` when never written or deleted.
    pub record: Option<SteeringRecord>,
    /// ConfigMap of the record, when it carries our labels.
    pub record_object: Option<DynamicObject>,
    /// The advertise address in force.
    pub advertise_address: IpAddr,
    /// The user's opt-in to finish without a give-back.
    pub finish_anyway: bool,
    /// Service `default/kubernetes` selects our proxy pods.
    pub service_steered: bool,
    /// Whether the selector the record gives back selects a Ready pod; read
    /// only when the record gives a provider's selector back.
    pub recorded_selector_ready: Option<bool>,
    /// EndpointSlice `default/kubernetes`, when it is ours.
    pub our_slice: Option<DynamicObject>,
    /// The EndpointSlice controller's slices of the `kubernetes` Service.
    pub controller_slices: Vec<DynamicObject>,
    /// CCM and konnectivity-agent workloads our field manager patched,
    /// with their kind.
    pub patched: Vec<(workload::WorkloadKind, DynamicObject)>,
    /// The ConfigMaps where the endpoint is published, whoever wrote them:
    /// only ours go.
    pub published: Vec<DynamicObject>,
    /// The proxy's own objects (DaemonSet, Secret, ConfigMap) of both
    /// steering modes, where they carry our labels.
    pub proxy_objects: Vec<DynamicObject>,
    /// Now, in Unix seconds.
    pub now: i64,
}

/// What a removal did.
#[derive(Clone, Debug, PartialEq)]
pub enum Removal {
    /// default/kubernetes was given back; the proxy goes in a later pass,
    /// once kube-proxy had the handover pause to take the given-back
    /// endpoints in: what was given back, and how long until then.
    Restoring(String, Duration),
    /// default/kubernetes was given back and the proxy removed: what was done.
    Removed(String),
    /// Nothing safe could be given back: the proxy stays, and why.
    Kept(String),
}

/// Where the give-back of `default/kubernetes` stands.
enum GiveBack {
    /// Nothing (more) to give back: the proxy can go. What was given back.
    Done(String),
    /// Given back (in this pass or a recent one): the proxy goes once
    /// kube-proxy had the handover pause. What, and how long still.
    Settling(String, Duration),
    /// Nothing safe can be given back, and why.
    Kept(String),
}

/// The removal's plan and what it comes to once acted on.
pub(in crate::controller::workload) fn removal(
    facts: &RemovalFacts,
) -> Result<(Plan, Removal), WorkloadError> {
    let mut plan = Plan::default();
    plan.enter(Phase::Steer);
    let restored = match give_back(&mut plan, facts)? {
        GiveBack::Done(summary) => summary,
        GiveBack::Settling(summary, wait) => return Ok((plan, Removal::Restoring(summary, wait))),
        GiveBack::Kept(why) => {
            let kept = format!("kept the node proxy, default/kubernetes still points at it: {why}");
            return Ok((Plan::default(), Removal::Kept(kept)));
        }
    };
    // The CCM env, konnectivity-agent args and published endpoint point at
    // the ingress, whose route goes with this object: give them back while
    // the API path just restored is there for the pods they restart.
    plan.enter(Phase::Ccm);
    let mut released = Vec::new();
    for (kind, live) in &facts.patched {
        plan.push(Step::Force(workload::release_patch(*kind, live)));
        released.push(describe(kind.as_str(), &live.metadata));
    }
    let mut removed = Vec::new();
    for object in facts.published.iter().filter(|o| is_ours(o)) {
        plan.push(Step::Delete(object.clone()));
        removed.push(describe(kind_of(object), &object.metadata));
    }
    plan.enter(Phase::Remove);
    // The steering record goes last: a removal cut short is resumed with it.
    for object in facts.proxy_objects.iter().chain(&facts.record_object) {
        plan.push(Step::Delete(object.clone()));
        removed.push(describe(kind_of(object), &object.metadata));
    }
    let list = |items: Vec<String>| {
        if items.is_empty() {
            "nothing".to_string()
        } else {
            items.join(", ")
        }
    };
    let note = format!(
        "restored {restored}; gave back {}; removed {}",
        list(released),
        list(removed)
    );
    Ok((plan, Removal::Removed(note)))
}

/// Give back what the applied steering took.
fn give_back(plan: &mut Plan, facts: &RemovalFacts) -> Result<GiveBack, WorkloadError> {
    let Some(record) = &facts.record else {
        return give_back_without_record(plan, facts);
    };
    if record.applied.is_none()
        && let Some(restored) = &record.restored
    {
        if let Some(wait) = record.handover_wait(facts.now, workload::HANDOVER_PAUSE) {
            return Ok(GiveBack::Settling(restored.clone(), wait));
        }
        let Some(deferred) = record.deferred.filter(Deferred::any) else {
            return Ok(GiveBack::Done(restored.clone()));
        };
        // kube-proxy has the given-back Service: the slices it served from
        // while steered go now, the proxy a pause later.
        restore_deletes(plan, facts, deferred);
        let mut record = record.clone();
        record.deferred = None;
        record.replaced_at = Some(facts.now);
        plan.push(Step::Record(record));
        return Ok(GiveBack::Settling(
            restored.clone(),
            workload::HANDOVER_PAUSE,
        ));
    }
    // The record is made before the first steering write and marked
    // applied after it: steering seen without the mark was written by a
    // pass cut short (or a hand-over under way), and the record holds what
    // was there before it.
    let Some(mode) = record.applied.or_else(|| steering_seen(facts)) else {
        // Recorded, never steered (the proxy never became ready): nothing to give back.
        plan.extend(facts.our_slice.clone().map(Step::Delete));
        return Ok(GiveBack::Done("nothing was steered".into()));
    };
    let restore = match workload::restore(record, mode, &live(facts, facts.finish_anyway)) {
        Ok(restore) => restore,
        Err(why) => return Ok(GiveBack::Kept(why)),
    };
    if record.service_released
        && let Some(selector) = &record.service.selector
        && facts.recorded_selector_ready == Some(false)
        && !facts.finish_anyway
    {
        // The provider's proxy is gone (it was told to stop): giving its
        // selector back would leave the Service without a single endpoint.
        return Ok(GiveBack::Kept(format!(
            "the recorded selector {selector:?} of Service default/kubernetes selects no ready pod: the provider's node proxy is gone, and giving the selector back would cut pods off the API; have the provider deploy its proxy again (remove the spec.patches entry that stopped it), or annotate the ControlPlaneIngress {FINISH_WITHOUT_RESTORE_ANNOTATION}=true to remove the proxy anyway"
        )));
    }
    // The given-back fields now; the deletions a pause later, once
    // kube-proxy has taken them in.
    let (summary, deferred) = restore_writes(plan, restore);
    // Given back: remembered, so later passes delete what is deferred and
    // remove the proxy.
    let mut record = record.clone();
    record.applied = None;
    record.restored = Some(summary.clone());
    record.replaced_at = Some(facts.now);
    record.deferred = Some(deferred).filter(Deferred::any);
    plan.push(Step::Record(record));
    Ok(GiveBack::Settling(summary, workload::HANDOVER_PAUSE))
}

/// The steering `default/kubernetes` shows, whatever the record says: the
/// Service selecting the proxy pods, or Endpoints at the proxy's address.
fn steering_seen(facts: &RemovalFacts) -> Option<Steering> {
    if facts.service_steered {
        Some(Steering::Service)
    } else if facts
        .endpoints
        .as_ref()
        .is_some_and(|e| workload::points_at_proxy(e, facts.advertise_address))
    {
        Some(Steering::AdvertiseAddress)
    } else {
        None
    }
}

/// A give-back without the record (never steered, or the record was
/// deleted): what still points at the proxy cannot be given back without
/// the user's word, and our slice never outlives the proxy.
fn give_back_without_record(
    plan: &mut Plan,
    facts: &RemovalFacts,
) -> Result<GiveBack, WorkloadError> {
    let advertise = facts.advertise_address;
    let ours = facts
        .endpoints
        .as_ref()
        .is_some_and(|e| workload::points_at_proxy(e, advertise));
    if !ours && !facts.service_steered {
        // Endpoints we wrote that someone rewrote since: theirs, as they
        // are, our labels and slice gone (as with a record).
        if facts
            .endpoints
            .as_ref()
            .is_some_and(|e| workload::is_ours(e.labels()))
            && let Ok(restore) = workload::restore(
                &SteeringRecord::default(),
                Steering::AdvertiseAddress,
                &live(facts, false),
            )
        {
            return Ok(GiveBack::Done(restore_steps(plan, facts, restore)));
        }
        plan.extend(facts.our_slice.clone().map(Step::Delete));
        return Ok(GiveBack::Done("nothing was steered".into()));
    }
    if !facts.finish_anyway {
        return Ok(GiveBack::Kept(format!(
            "default/kubernetes is steered at the proxy but ConfigMap {NAMESPACE}/{RECORD_NAME}, the record of what it held before, is gone. To finish: write Endpoints default/kubernetes with the API server's own address, or annotate the ControlPlaneIngress {FINISH_WITHOUT_RESTORE_ANNOTATION}=true to remove the proxy anyway"
        )));
    }
    let record = SteeringRecord {
        service_unknown: true,
        ..SteeringRecord::default()
    };
    // Both modes' traces: our slice, our Service fields, the pods' slices.
    let mode = if facts.service_steered {
        Steering::Service
    } else {
        Steering::AdvertiseAddress
    };
    let restore = workload::restore(&record, mode, &live(facts, facts.finish_anyway))
        .map_err(WorkloadError::RestoreFailed)?;
    Ok(GiveBack::Done(restore_steps(plan, facts, restore)))
}

/// A whole give-back in one pass (without a record, on the user's word):
/// the given-back fields, then the slices and Endpoints that go.
fn restore_steps(plan: &mut Plan, facts: &RemovalFacts, restore: Restore) -> String {
    let (summary, deferred) = restore_writes(plan, restore);
    restore_deletes(plan, facts, deferred);
    summary
}

/// The given-back fields, written; what is to be deleted, and the summary.
fn restore_writes(plan: &mut Plan, restore: Restore) -> (String, Deferred) {
    plan.extend(restore.apply.into_iter().map(Step::Force));
    let deferred = Deferred {
        await_other_slice: restore.await_other_slice,
        abandoned_slices: restore.delete_abandoned_slices,
        endpoint_slice: restore.delete_endpoint_slice,
        endpoints: restore.delete_endpoints,
    };
    (restore.summary, deferred)
}

/// The deletions of a give-back: once another slice carries the addresses,
/// the slices and Endpoints that go.
fn restore_deletes(plan: &mut Plan, facts: &RemovalFacts, deferred: Deferred) {
    if deferred.await_other_slice && (deferred.abandoned_slices || deferred.endpoint_slice) {
        plan.push(Step::AwaitOtherSlice);
    }
    if deferred.abandoned_slices {
        plan.extend(facts.controller_slices.iter().cloned().map(Step::Delete));
    }
    if deferred.endpoint_slice {
        plan.extend(facts.our_slice.clone().map(Step::Delete));
    }
    if deferred.endpoints {
        plan.extend(facts.endpoints_object.clone().map(Step::Delete));
    }
}

fn live(facts: &RemovalFacts, finish_anyway: bool) -> Live<'_> {
    Live {
        endpoints: facts.endpoints.as_ref(),
        advertise_address: facts.advertise_address,
        finish_anyway,
    }
}
