//! The plan a workload reconcile decided on: the ordered writes and
//! deletes, and what to report once they are made. Built by `decide`,
//! carried out by `act`, reported by `report`.

use std::{ops::Range, time::Duration};

use kube::api::DynamicObject;
use serde_json::Value;

use super::failure::Unreachable;
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
    /// Remove the proxy of a steering mode: its DaemonSet, Secret and
    /// ConfigMap, where they are ours.
    RemoveProxy(Steering),
}

/// What `act` does and `report` says.
#[derive(Clone, Debug, Default)]
pub(super) struct Plan {
    /// The writes, in order.
    pub steps: Vec<Step>,
    /// The steps of a steering switch: one that fails makes the switch
    /// fail (the old mode still steers) and `act` goes on with the CCM.
    pub switch: Option<Switch>,
    /// The first step that configures the CCM.
    pub ccm_from: usize,
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
    /// The reconcile cannot go on: WorkloadReachable says why.
    pub unreachable: Option<Unreachable>,
}

/// The part of a plan that switches steering from one mode to another.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Switch {
    /// The mode that steers until the switch is done.
    pub from: Steering,
    /// The mode switched to.
    pub to: Steering,
    /// Its steps.
    pub steps: Range<usize>,
}

impl Plan {
    /// Add a step.
    pub(super) fn push(&mut self, step: Step) {
        self.steps.push(step);
    }

    /// Apply `object` unless this plan already applies it as it is (a
    /// switch step and the steering that follows write the same object).
    pub(super) fn apply(&mut self, object: DynamicObject, live: Option<DynamicObject>) {
        let again = self
            .steps
            .iter()
            .any(|s| matches!(s, Step::Apply { object: o, .. } if *o == object));
        if !again {
            self.steps.push(Step::Apply { object, live });
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
        self.steps.iter().filter_map(|s| match s {
            Step::Record(r) => Some(r),
            _ => None,
        })
    }
}
