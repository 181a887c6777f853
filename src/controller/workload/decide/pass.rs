//! What the stages of `decide` share: what it is given, the objects
//! wanted and seen as the writes compare them, the proxy's rollout, and the
//! steering record as the plan leaves it.

use std::time::Duration;

use kube::{ResourceExt, api::DynamicObject};

use crate::{
    api::{ControlPlaneIngress, Steering, UpstreamObject},
    controller::{
        apply,
        status::{Desired, types},
        workload::{
            observe::{Facts, LiveProxy, rollout},
            plan::{Plan, Step},
        },
    },
    render::workload::{
        self, ProxyObjects, SteeringObjects, SteeringRecord, WorkloadError, WorkloadInputs,
    },
};

/// What a workload reconcile is asked for, besides the facts.
#[derive(Clone, Debug)]
pub(in crate::controller::workload) struct Given<'a> {
    /// The ControlPlaneIngress.
    pub(in crate::controller::workload) cpi: &'a ControlPlaneIngress,
    /// What the workload cluster does not tell: image, cluster domain.
    pub(in crate::controller::workload) base: WorkloadInputs,
    /// How soon to look again at something under way.
    pub(in crate::controller::workload) retry: Duration,
    /// Now, in Unix seconds, as the steering record keeps times.
    pub(in crate::controller::workload) now: i64,
}

/// The provider's node proxy, when `cpi` takes it over.
pub(super) fn taken_over(cpi: &ControlPlaneIngress) -> Option<&UpstreamObject> {
    cpi.spec
        .upstream
        .as_ref()
        .filter(|u| u.take_over_node_proxy)
        .and_then(|u| u.node_proxy.as_ref())
}

/// One pass's inputs, for the stages of `decide`.
pub(super) struct Pass<'a> {
    pub(super) given: &'a Given<'a>,
    pub(super) facts: &'a Facts,
    pub(super) objects: &'a ProxyObjects,
    pub(super) wanted: &'a Wanted,
    pub(super) seen: &'a Seen,
    pub(super) proxy: &'a ProxyState,
    /// This pass released the Service from a provider's proxy.
    pub(super) released_now: bool,
}

impl Pass<'_> {
    /// The steering mode the spec asks for.
    pub(super) fn mode(&self) -> Steering {
        workload::proxy_spec(self.given.cpi).steering
    }
}

/// The objects we want, as applied.
pub(super) struct Wanted {
    /// ConfigMap, Secret (when present) and DaemonSet, in apply order.
    pub(super) proxy: Vec<DynamicObject>,
    /// The steering objects, in apply order.
    pub(super) steering: Vec<DynamicObject>,
    /// With address steering: our Endpoints and EndpointSlice.
    pub(super) endpoints: Option<DynamicObject>,
    pub(super) endpoint_slice: Option<DynamicObject>,
}

impl Wanted {
    pub(super) fn of(objects: &ProxyObjects) -> Result<Wanted, WorkloadError> {
        let (endpoints, endpoint_slice) = match &objects.steering {
            SteeringObjects::AdvertiseAddress {
                endpoints,
                endpoint_slice,
            } => (
                Some(workload::dynamic(endpoints.as_ref(), "Endpoints")?),
                Some(workload::dynamic(endpoint_slice.as_ref(), "EndpointSlice")?),
            ),
            SteeringObjects::Service { .. } => (None, None),
        };
        Ok(Wanted {
            proxy: objects.proxy_to_dynamic()?,
            steering: objects.steering_to_dynamic()?,
            endpoints,
            endpoint_slice,
        })
    }

    /// The proxy's objects to apply, each with its live form.
    pub(super) fn proxy_writes(&self, live: &LiveProxy) -> Vec<Step> {
        self.proxy
            .iter()
            .map(|object| Step::Apply {
                object: object.clone(),
                live: live_of(object, live),
            })
            .collect()
    }

    fn daemon_set(&self) -> Option<&DynamicObject> {
        self.proxy.iter().find(|o| kind_of(o) == "DaemonSet")
    }
}

/// The live form of one of the proxy's objects.
pub(super) fn live_of(object: &DynamicObject, live: &LiveProxy) -> Option<DynamicObject> {
    match kind_of(object) {
        "ConfigMap" => live.config_map.clone(),
        "Secret" => live.secret.clone(),
        "DaemonSet" => live.daemon_set.clone(),
        _ => None,
    }
}

pub(super) fn kind_of(object: &DynamicObject) -> &str {
    object.types.as_ref().map_or("", |t| t.kind.as_str())
}

/// The observed `default/kubernetes` objects, as the writes compare them.
pub(super) struct Seen {
    pub(super) service: Option<DynamicObject>,
    pub(super) endpoints: Option<DynamicObject>,
    pub(super) endpoint_slice: Option<DynamicObject>,
    pub(super) controller_slices: Vec<DynamicObject>,
}

impl Seen {
    pub(super) fn of(facts: &Facts) -> Seen {
        Seen {
            service: facts.as_read.service.clone(),
            endpoints: facts.as_read.endpoints.clone(),
            endpoint_slice: facts.as_read.endpoint_slice.clone(),
            controller_slices: facts
                .controller_slices
                .iter()
                .filter_map(|s| workload::dynamic(s, "EndpointSlice").ok())
                .collect(),
        }
    }
}

/// Whether we wrote this object (only ours carry our labels).
pub(super) fn is_ours(object: &DynamicObject) -> bool {
    workload::is_ours(object.labels())
}

/// The proxy DaemonSet's own report: ProxyReady, its desired and ready
/// nodes, and whether it is rolled out (the DaemonSet controller saw the
/// current template, and every scheduled node runs an updated, ready pod).
pub(super) struct ProxyState {
    /// ProxyReady.
    pub condition: Desired,
    /// Nodes the DaemonSet should run on.
    pub desired: i32,
    /// Nodes with a ready proxy pod.
    pub ready: i32,
    /// Rolled out, and this pass does not change its template.
    pub rolled_out: bool,
}

impl ProxyState {
    pub(super) fn of(wanted: &Wanted, live: &LiveProxy) -> ProxyState {
        // A DaemonSet whose template this pass changes is rolled out again
        // from scratch. Told by the digest of what we applied last, not by
        // comparing fields: a field the API server normalizes must never
        // hold steering back.
        let rewritten = wanted.daemon_set().is_some_and(|want| {
            let applied = live.daemon_set.as_ref().and_then(|d| {
                d.metadata
                    .annotations
                    .as_ref()?
                    .get(apply::APPLIED_DIGEST_ANNOTATION)
                    .cloned()
            });
            applied != Some(apply::digest(want))
        });
        let mut state = proxy_state(live.daemon_set.as_ref());
        state.rolled_out &= !rewritten;
        state
    }
}

/// The report of a DaemonSet as it is (see [`ProxyState`]).
pub(super) fn proxy_state(daemon_set: Option<&DynamicObject>) -> ProxyState {
    let (desired, ready, rolled_out) = rollout(daemon_set);
    let condition = if desired > 0 && ready == desired {
        Desired::ok(
            types::PROXY_READY,
            "AllNodesReady",
            format!("{ready}/{desired} nodes run a ready proxy"),
        )
    } else if desired == 0 {
        Desired::unknown(
            types::PROXY_READY,
            "NoNodes",
            "the proxy DaemonSet has no node scheduled yet",
        )
    } else {
        Desired::failed(
            types::PROXY_READY,
            "NodesNotReady",
            format!("{ready}/{desired} nodes run a ready proxy"),
        )
    };
    ProxyState {
        condition,
        desired,
        ready,
        rolled_out,
    }
}

/// The steering record as the plan leaves it, and whether it is stored.
pub(super) struct Record {
    /// The record after the plan's steps so far.
    pub now: SteeringRecord,
    stored: bool,
}

impl Record {
    /// The stored record, or the one made now of what `default/kubernetes` holds.
    pub(super) fn of(facts: &Facts) -> Record {
        match &facts.record {
            Some(record) => Record {
                now: record.clone(),
                stored: true,
            },
            None => Record {
                now: workload::record(
                    facts.service.as_ref(),
                    facts.endpoints.as_ref(),
                    facts.endpoint_slice.as_ref(),
                ),
                stored: false,
            },
        }
    }

    /// Store the record unless it is stored already.
    pub(super) fn ensure(&mut self, plan: &mut Plan) {
        if !self.stored {
            self.write(plan);
        }
    }

    /// Store the record as it is now.
    pub(super) fn write(&mut self, plan: &mut Plan) {
        plan.push(Step::Record(self.now.clone()));
        self.stored = true;
    }
}

/// Whether this pass writes the steering, and the switch or service
/// hand-over it completes.
pub(super) enum Steer {
    No,
    Yes {
        /// A switch completed, in words.
        switched: Option<String>,
        /// Service steering's hand-over completed: the proxy pods' slices
        /// carry the traffic.
        handed_over: bool,
    },
}
