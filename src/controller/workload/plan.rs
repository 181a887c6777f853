//! The plan a workload reconcile decided on: the ordered writes and
//! deletes in named phases, and what to report once they are made. Built by
//! `decide`, carried out by `act`, reported by `report`.

use std::time::Duration;

use kube::api::DynamicObject;
use serde_json::Value;

use super::error::WorkloadError;
use crate::{
    api::Steering,
    controller::status::{Desired, Status},
    render::workload::SteeringRecord,
};

/// One write (or delete) in the workload cluster.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Step {
    /// Store the steering record (ConfigMap `kube-system/hcp-ingress-steering`).
    Record(SteeringRecord),
    /// Apply one of our objects, unless `live` is already up to date.
    Apply {
        /// The object as we want it.
        object: DynamicObject,
        /// The object as observed.
        live: Option<DynamicObject>,
    },
    /// Apply our fields of an object that is not ours (the `kubernetes`
    /// Service, a CCM workload), unless `live` already has them.
    ApplyFields {
        /// The partial object.
        object: DynamicObject,
        /// The object as observed; `None` writes in any case.
        live: Option<DynamicObject>,
    },
    /// Apply exactly these fields with our manager: the fields we set
    /// before and leave out here are dropped (a give-back, a switch).
    Force(DynamicObject),
    /// Merge-patch Service `default/kubernetes`: drop fields another
    /// manager set (a provider's proxy taken over).
    PatchService(Value),
    /// Delete an object if it is still the one observed (uid precondition).
    Delete(DynamicObject),
    /// Wait (bounded) until an EndpointSlice of the `kubernetes` Service
    /// that is neither ours nor the EndpointSlice controller's holds a ready
    /// endpoint: a give-back's deletes follow, and kube-proxy must never be
    /// left without an endpoint.
    AwaitOtherSlice,
    /// Remove the proxy of a steering mode: its DaemonSet, Secret and
    /// ConfigMap, where they are ours.
    RemoveProxy(Steering),
}

/// What `act` does and `report` says. The writes come in named phases, in
/// this order: `prepare`, `switch`, `steer`, `ccm`, `remove`.
#[derive(Clone, Debug, Default)]
pub(super) struct Plan {
    /// Before any steering: the steering record, the proxy's objects, a
    /// take-over's preparation. One that fails stops the reconcile.
    pub prepare: Vec<Step>,
    /// A switch of steering mode. One of its steps that fails makes the
    /// switch fail (the old mode still steers): `steer` is skipped and
    /// `ccm` still runs.
    pub switch: Option<Switch>,
    /// Steering `default/kubernetes` at the proxy, and what follows it (an
    /// old proxy removed). One that fails stops the reconcile.
    pub steer: Vec<Step>,
    /// The CCM override and the published endpoint (or, at removal, their
    /// give-back).
    pub ccm: Vec<Step>,
    /// At removal, last: the proxy's objects and the steering record.
    pub remove: Vec<Step>,
    /// The phase `push` adds to.
    phase: Phase,
    /// The conditions, once every step is made.
    pub conditions: Vec<Desired>,
    /// Desired and ready nodes of the proxy DaemonSet.
    pub proxy: Option<(i32, i32)>,
    /// When to look again.
    pub requeue: Option<Duration>,
    /// A rewrite of `default/kubernetes` by someone else seen in this pass.
    pub drift: Vec<String>,
    /// A steering switch completed in this pass, in words.
    pub switched: Option<String>,
    /// Normal Events to publish once every step is made: reason and note.
    pub events: Vec<(&'static str, String)>,
}

/// The phases of a plan, in the order `act` makes them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) enum Phase {
    #[default]
    Prepare,
    Switch,
    Steer,
    Ccm,
    Remove,
}

/// The part of a plan that switches steering from one mode to another.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Switch {
    /// The mode that steers until the switch is done.
    pub from: Steering,
    /// The mode switched to.
    pub to: Steering,
    /// Its steps.
    pub steps: Vec<Step>,
}

/// What acting on a plan came to, when it got to the end.
#[derive(Debug, Default)]
pub(super) struct Acted {
    /// Why the switch's step failed: the rest of the switch and the
    /// steering were skipped.
    pub switch_failed: Option<WorkloadError>,
}

impl Plan {
    /// Add a step to the current phase.
    pub(super) fn push(&mut self, step: Step) {
        match self.phase {
            Phase::Prepare => self.prepare.push(step),
            Phase::Switch => match &mut self.switch {
                Some(switch) => switch.steps.push(step),
                None => self.steer.push(step),
            },
            Phase::Steer => self.steer.push(step),
            Phase::Ccm => self.ccm.push(step),
            Phase::Remove => self.remove.push(step),
        }
    }

    /// Add steps to the current phase.
    pub(super) fn extend(&mut self, steps: impl IntoIterator<Item = Step>) {
        for step in steps {
            self.push(step);
        }
    }

    /// From now on, steps go to `phase`.
    pub(super) fn enter(&mut self, phase: Phase) {
        self.phase = phase;
    }

    /// A switch from `from` to `to` begins: its steps follow.
    pub(super) fn begin_switch(&mut self, from: Steering, to: Steering) {
        self.switch = Some(Switch {
            from,
            to,
            steps: Vec::new(),
        });
        self.phase = Phase::Switch;
    }

    /// Every step, in the order `act` makes them (a switch that goes through).
    pub(super) fn steps(&self) -> impl Iterator<Item = &Step> {
        self.prepare
            .iter()
            .chain(self.switch.iter().flat_map(|s| &s.steps))
            .chain(&self.steer)
            .chain(&self.ccm)
            .chain(&self.remove)
    }

    /// Whether the plan writes nothing.
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.steps().next().is_none()
    }

    /// Apply `object` unless this plan already applies it as it is (a
    /// switch step and the steering that follows write the same object).
    pub(super) fn apply(&mut self, object: DynamicObject, live: Option<DynamicObject>) {
        let again = self
            .steps()
            .any(|s| matches!(s, Step::Apply { object: o, .. } if *o == object));
        if !again {
            self.push(Step::Apply { object, live });
        }
    }

    /// Look again after `retry`.
    pub(super) fn retry(&mut self, retry: Duration) {
        self.requeue = Some(retry);
    }

    /// Whether the last condition so far holds.
    pub(super) fn last_holds(&self) -> bool {
        self.conditions
            .last()
            .is_none_or(|c| c.status == Status::True)
    }

    /// The records this plan stores, in order.
    #[cfg(test)]
    pub(super) fn records(&self) -> impl Iterator<Item = &SteeringRecord> {
        self.steps().filter_map(|s| match s {
            Step::Record(r) => Some(r),
            _ => None,
        })
    }
}
