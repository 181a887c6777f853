//! The invariants of steering, checked on every plan `decide` makes for
//! generated workload clusters (spec, observed objects, record, clock):
//! - the record is stored before the first steering write;
//! - steering starts only at a proxy rolled out on every node (or with no
//!   Node, or a provider's proxy taken over with ours ready);
//! - a switch is a hand-over: `Local` only once the EndpointSlice
//!   controller has listed every ready proxy pod for the handover pause, our
//!   EndpointSlice deleted only once the Service selects the proxy pods, the
//!   Service's selector dropped only once our EndpointSlice is written;
//! - a proxy is removed only when nothing steers at it any more and the
//!   handover pause has passed since it was replaced;
//! - a stored record never names one mode as both applied and leaving;
//! - after each step, `default/kubernetes` still has a slice kube-proxy
//!   serves for the Service's family, if it had one before the plan, on
//!   the worst timing of the cluster's controllers (see [`Served`]), and
//!   in whatever order kube-proxy's two watches (Services, EndpointSlices)
//!   deliver the plan's writes.

use kube::api::DynamicObject;
use proptest::prelude::*;
use serde_json::Value;

use super::fixture::{
    NOW, ProxyAt, ServiceAt, World, api_server_record, describe, final_record, name,
};
use crate::{
    api::Steering,
    controller::workload::decide::{Removal, RemovalFacts},
    controller::workload::{
        observe::Facts,
        plan::{Plan, Step},
    },
    render::workload::{self, HANDOVER_PAUSE, ServiceRelease, SteeringRecord},
};

fn steering() -> impl Strategy<Value = Steering> {
    prop_oneof![Just(Steering::AdvertiseAddress), Just(Steering::Service)]
}

/// Seconds before [`NOW`]: within the handover pause, or long past it.
fn ago() -> impl Strategy<Value = Option<i64>> {
    prop::option::of(prop_oneof![0..=6i64, Just(3600)].prop_map(|s| NOW - s))
}

/// Records the controller can have stored.
fn record() -> impl Strategy<Value = Option<SteeringRecord>> {
    let fields = (
        prop::option::of(steering()),
        prop::option::of(steering()),
        any::<bool>(),
        ago(),
        ago(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    );
    prop::option::of(fields.prop_map(
        |(applied, leaving, beside, replaced_at, listed_at, released, restored, recorded)| {
            // What default/kubernetes held before: the API server's own
            // Endpoints, or nothing to give back.
            let before = if recorded {
                api_server_record()
            } else {
                SteeringRecord::default()
            };
            let mut record = SteeringRecord {
                applied,
                leaving: leaving.filter(|l| Some(*l) != applied),
                service_proxy_beside_service: beside || applied == Some(Steering::Service),
                replaced_at,
                proxies_listed_at: listed_at,
                service_released: released,
                restored: (restored && applied.is_none()).then(|| "given back".to_string()),
                ..before
            };
            // A release before the service proxy moved next to the Service
            // left a record of service steering with nothing else going on.
            if applied == Some(Steering::Service) && !beside {
                record.service_proxy_beside_service = false;
                record.leaving = None;
                record.replaced_at = None;
            }
            record
        },
    ))
}

fn proxy() -> impl Strategy<Value = ProxyAt> {
    prop_oneof![
        Just(ProxyAt::Absent),
        (0..4i32, 0..4i32).prop_map(|(desired, ready)| ProxyAt::Rolling {
            desired,
            ready: ready.min(desired),
        }),
        (1..4i32).prop_map(|nodes| ProxyAt::RolledOut { nodes }),
        (1..4i32).prop_map(|nodes| ProxyAt::Stale { nodes }),
    ]
}

fn service() -> impl Strategy<Value = ServiceAt> {
    prop_oneof![
        Just(ServiceAt::ApiServer),
        Just(ServiceAt::Handover),
        Just(ServiceAt::Steered),
        Just(ServiceAt::Provider),
    ]
}

prop_compose! {
    fn world()(
        steering in steering(),
        take_over in any::<bool>(),
        record in record(),
        proxy in proxy(),
        any_node in any::<bool>(),
        service in service(),
        address_steered in any::<bool>(),
        listed in 0..4i32,
        provider_proxy in prop::option::of((1..3i32, 0..3i32)),
        drift in any::<bool>(),
    ) -> World {
        World {
            // The CRD admits a take-over with address steering only.
            steering: if take_over { Steering::AdvertiseAddress } else { steering },
            take_over,
            record,
            proxy,
            any_node,
            service,
            address_steered,
            listed,
            provider_proxy,
            recent_drift: if drift { vec!["Endpoints rewritten".into()] } else { Vec::new() },
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    #[test]
    fn every_plan_keeps_the_steering_invariants(world in world()) {
        let facts = world.facts();
        let cpi = world.cpi();
        // A plan that stops (an invalid spec, say) writes nothing: its
        // type holds no steps.
        let Ok(plan) = super::decide(&world.given(&cpi), &facts) else {
            return Ok(());
        };
        if let Err(broken) = check(&world, &facts, &plan) {
            prop_assert!(false, "{broken}\nworld: {world:#?}\nsteps: {:#?}", describe(&plan));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    /// Removal, at a deletion or an opt-out (`spec.proxy.enabled: false`),
    /// from any state an install can leave.
    #[test]
    fn every_removal_gives_the_api_path_back_before_the_proxy_goes(
        world in world(),
        finish_anyway in any::<bool>(),
        selector_ready in any::<bool>(),
    ) {
        let facts = world.removal_facts(finish_anyway, selector_ready);
        let Ok((plan, removal)) = super::removal(&facts) else {
            return Ok(());
        };
        // Unless the user said to finish without a give-back.
        let served = if finish_anyway {
            Ok(())
        } else {
            always_served(&world, &world.facts(), &plan)
                .map_err(|Broken(b)| Broken(format!("{b} (removal)")))
        };
        if let Err(broken) = check_removal(&facts, &plan, &removal).and(served) {
            prop_assert!(false, "{broken}\nworld: {world:#?}\nremoval: {removal:?}\nsteps: {:#?}", describe(&plan));
        }
    }
}

/// An invariant a plan breaks, in words.
#[derive(Debug)]
struct Broken(String);

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The first invariant a removal's plan breaks.
fn check_removal(facts: &RemovalFacts, plan: &Plan, removal: &Removal) -> Result<(), Broken> {
    let steps: Vec<&Step> = plan.steps().collect();
    let is_ours_removed = |s: &Step| {
        matches!(s, Step::Delete(o) if facts.proxy_objects.contains(o)
            || facts.record_object.as_ref() == Some(o))
    };
    let removes = steps.iter().any(|s| is_ours_removed(s));
    match removal {
        Removal::Kept(_) if !steps.is_empty() => {
            return Err(Broken("a removal that keeps the proxy writes".into()));
        }
        Removal::Restoring(..) if removes => {
            return Err(Broken(
                "the proxy goes in the pass that gives default/kubernetes back".into(),
            ));
        }
        _ => {}
    }
    // Steering recorded as applied is given back, and the record says so,
    // before anything of the proxy can go (in a later pass).
    if facts.record.as_ref().is_some_and(|r| r.applied.is_some()) {
        if removes {
            return Err(Broken(
                "the proxy goes while the record says it steers".into(),
            ));
        }
        if matches!(removal, Removal::Restoring(..))
            && !matches!(steps.last(), Some(Step::Record(r)) if r.applied.is_none() && r.restored.is_some())
        {
            return Err(Broken(
                "a give-back is not recorded as its last step".into(),
            ));
        }
    }
    // Without the record, steering seen at the proxy is given back only
    // with the user's word; without it, nothing is written.
    let steered = facts.service_steered
        || facts
            .endpoints
            .as_ref()
            .is_some_and(|e| workload::points_at_proxy(e, facts.advertise_address));
    if facts.record.is_none()
        && steered
        && !facts.finish_anyway
        && !matches!(removal, Removal::Kept(_))
    {
        return Err(Broken(
            "steered without a record, removed without the user's word".into(),
        ));
    }
    // The proxy's objects go after every write to default/kubernetes, the
    // record last of all.
    if let Some(first) = steps.iter().position(|s| is_ours_removed(s))
        && steps[first..]
            .iter()
            .any(|s| is_steering_write(s) && !is_ours_removed(s))
    {
        return Err(Broken(format!(
            "step {first} removes the proxy before a steering write"
        )));
    }
    if let Some(record) = &facts.record_object
        && let Some(at) = steps
            .iter()
            .position(|s| matches!(s, Step::Delete(o) if o == record))
        && at + 1 != steps.len()
    {
        return Err(Broken("the record is not removed last".into()));
    }
    // No slice of the kubernetes Service goes before another carries the
    // addresses given back (unless the user said to finish without them).
    if let Some(first_delete) = steps.iter().position(|s| {
        matches!(s, Step::Delete(o) if o.types.as_ref().is_some_and(|t| t.kind == "EndpointSlice"))
    }) && facts.record.as_ref().is_some_and(|r| r.applied.is_some())
        && !facts.finish_anyway
        && !steps[..first_delete].iter().any(|s| matches!(s, Step::AwaitOtherSlice))
        && steps[..first_delete].iter().any(|s| matches!(s, Step::Force(_)))
    {
        return Err(Broken(format!("step {first_delete} deletes a slice before another carries the addresses")));
    }
    Ok(())
}

/// The first invariant `plan` breaks for `world`.
fn check(world: &World, facts: &Facts, plan: &Plan) -> Result<(), Broken> {
    let steps: Vec<&Step> = plan.steps().collect();
    if facts.record.is_none()
        && let Some(first) = steps.iter().position(|s| is_steering_write(s))
        && !steps[..first].iter().any(|s| matches!(s, Step::Record(_)))
    {
        return Err(Broken(format!(
            "step {first} steers before the record is stored"
        )));
    }
    for record in plan.records() {
        if record.applied.is_some() && record.applied == record.leaving {
            return Err(Broken(format!(
                "a record names {:?} applied and leaving",
                record.applied
            )));
        }
    }
    only_at_a_ready_proxy(world, facts, plan)?;
    handed_over(world, facts, plan)?;
    removed_only_when_unused(world, facts, plan)?;
    always_served(world, facts, plan)
}

/// What kube-proxy serves the `kubernetes` Service from, as each step of a
/// plan leaves it, on the worst timing of the cluster's own controllers:
/// a slice they must delete goes at once, one they must make comes only
/// after the plan (the EndpointSlice controller's for a new selector, the
/// mirroring controller's for Endpoints given back).
#[derive(Clone, Debug)]
struct Served {
    /// The Service's selector, and the one it had before the plan.
    selector: Option<Value>,
    selector_before: Option<Value>,
    /// `internalTrafficPolicy: Local`: kube-proxy takes only endpoints of
    /// its own node, so none of a slice without node names.
    local: bool,
    /// The mirroring controller's slice of the Endpoints: it has one while
    /// the Endpoints lack the skip-mirror label and the Service has no
    /// selector, lost at once when either changes, made again only once a
    /// step awaits it ([`Step::AwaitOtherSlice`]).
    mirrored: bool,
    /// The Endpoints have addresses and lack the skip-mirror label.
    mirrorable: bool,
    /// The Endpoints have addresses.
    addresses: bool,
    /// Our EndpointSlice `default/kubernetes`: its address type, whether it
    /// has an endpoint, and whether they carry node names.
    ours: Option<(String, bool, bool)>,
    /// Ready endpoints with a node in the pods' slices: the EndpointSlice
    /// controller's for our selector, the provider's pods for its own.
    /// They stay while the selector does (or is dropped: they are left).
    pod_endpoints: bool,
}

/// The address type of the `kubernetes` Service in the fixtures.
const FAMILY: &str = "IPv4";

impl Served {
    fn before(world: &World, facts: &Facts) -> Served {
        let selector = facts
            .service
            .as_ref()
            .and_then(|s| s.spec.as_ref()?.selector.as_ref())
            .map(|s| serde_json::json!(s));
        let local = facts
            .service
            .as_ref()
            .and_then(|s| s.spec.as_ref()?.internal_traffic_policy.as_deref())
            == Some("Local");
        let addresses = facts.endpoints.as_ref().is_some_and(|e| {
            e.subsets
                .iter()
                .flatten()
                .any(|s| s.addresses.as_ref().is_some_and(|a| !a.is_empty()))
        });
        let mirrorable = addresses
            && facts
                .endpoints
                .as_ref()
                .is_some_and(|e| !skips_mirror(e.metadata.labels.as_ref()));
        let mirrored = selector.is_none() && mirrorable;
        let ours = facts.endpoint_slice.as_ref().map(|s| {
            (
                s.address_type.clone(),
                !s.endpoints.is_empty(),
                s.endpoints.iter().all(|e| e.node_name.is_some()),
            )
        });
        let pod_endpoints = match world.service {
            ServiceAt::Provider => world.provider_proxy.is_some_and(|(_, ready)| ready > 0),
            _ => facts
                .controller_slices
                .iter()
                .flat_map(|s| s.endpoints.iter())
                .any(|e| e.node_name.is_some()),
        };
        Served {
            selector_before: selector.clone(),
            selector,
            local,
            mirrored,
            mirrorable,
            addresses,
            ours,
            pod_endpoints,
        }
    }

    /// Whether kube-proxy has an endpoint for the Service.
    fn any(&self) -> bool {
        let ours = self.ours.as_ref().is_some_and(|(family, any, nodes)| {
            family == FAMILY && *any && (*nodes || !self.local)
        });
        let mirrored = self.mirrored && self.selector.is_none() && !self.local;
        let pods = self.pod_endpoints
            && (self.selector.is_none() || self.selector == self.selector_before);
        ours || mirrored || pods
    }

    /// The state `step` leaves; `false` when the API server refuses it and
    /// the plan stops there.
    fn after(&mut self, step: &Step) -> bool {
        match step {
            Step::ApplyFields { object, .. } if self.conflicts(object) => return false,
            Step::Apply { object, .. } | Step::ApplyFields { object, .. } | Step::Force(object) => {
                self.write(object)
            }
            Step::PatchService(patch) => self.service(patch),
            Step::Delete(object) => match name(object).as_str() {
                "EndpointSlice default/kubernetes" => self.ours = None,
                "Endpoints default/kubernetes" => {
                    self.mirrored = false;
                    self.mirrorable = false;
                    self.addresses = false;
                }
                n if n.starts_with("EndpointSlice default/") => self.pod_endpoints = false,
                _ => {}
            },
            // The act waits for the mirroring controller's slice, and
            // stops the plan when none comes.
            Step::AwaitOtherSlice => {
                if !(self.mirrorable && self.selector.is_none()) {
                    return false;
                }
                self.mirrored = true;
            }
            Step::Record(_) | Step::RemoveProxy(_) => {}
        }
        true
    }

    /// A server-side apply without force that sets a selector another
    /// manager owns (a provider's): the API server answers with a conflict.
    fn conflicts(&self, object: &DynamicObject) -> bool {
        let ours = serde_json::json!(workload::selector_labels());
        name(object) == "Service default/kubernetes"
            && object.data.pointer("/spec/selector").is_some()
            && self.selector.as_ref().is_some_and(|s| *s != ours)
    }

    fn write(&mut self, object: &DynamicObject) {
        match name(object).as_str() {
            "Service default/kubernetes" => {
                // Our field manager drops the selector and policy it owned
                // by leaving them out (the policy defaults to `Cluster`);
                // another manager's stay.
                let ours = self.selector == Some(serde_json::json!(workload::selector_labels()));
                let mut fields = object.data.clone();
                if ours && fields.pointer("/spec/selector").is_none() {
                    fields["spec"]["selector"] = Value::Null;
                }
                if ours && fields.pointer("/spec/internalTrafficPolicy").is_none() {
                    fields["spec"]["internalTrafficPolicy"] = serde_json::json!("Cluster");
                }
                self.service(&fields);
            }
            "Endpoints default/kubernetes" => {
                // Endpoints written anew get a mirror only later: one that
                // is gone stays gone until a step awaits it.
                // A partial write (our labels dropped) keeps the addresses.
                let addresses = match object.data.get("subsets") {
                    Some(subsets) => subsets
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|s| s["addresses"].as_array().is_some_and(|a| !a.is_empty())),
                    None => self.addresses,
                };
                self.addresses = addresses;
                self.mirrorable = addresses && !skips_mirror(object.metadata.labels.as_ref());
                if !self.mirrorable {
                    self.mirrored = false;
                }
            }
            "EndpointSlice default/kubernetes" => {
                let endpoints = object.data["endpoints"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                self.ours = Some((
                    object.data["addressType"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                    !endpoints.is_empty(),
                    endpoints.iter().all(|e| e["nodeName"].is_string()),
                ));
            }
            _ => {}
        }
    }

    /// The fields of the Service a write or a merge patch names.
    fn service(&mut self, fields: &Value) {
        if let Some(selector) = fields.pointer("/spec/selector") {
            let selector = (!selector.is_null()).then(|| selector.clone());
            if selector.is_some() {
                // The mirroring controller drops its slice at once.
                self.mirrored = false;
            }
            self.selector = selector;
        }
        if let Some(policy) = fields.pointer("/spec/internalTrafficPolicy") {
            self.local = policy == "Local";
        }
    }
}

/// The skip-mirror label: the mirroring controller makes no slice of these
/// Endpoints.
fn skips_mirror(labels: Option<&std::collections::BTreeMap<String, String>>) -> bool {
    labels
        .and_then(|l| l.get("endpointslice.kubernetes.io/skip-mirror"))
        .is_some_and(|v| v == "true")
}

/// After each step, kube-proxy still serves the Service from some slice of
/// its family, if it did before the plan (a removal's plan too). It reads
/// the Service and the EndpointSlices on two watches, each in order but
/// not in step with the other: it may act on the slices of any step with
/// the Service's `internalTrafficPolicy` of any other, and must still have
/// an endpoint. (The Service's selector acts through the slices the
/// cluster's controllers write, which the slices' state holds.)
fn always_served(world: &World, facts: &Facts, plan: &Plan) -> Result<(), Broken> {
    let mut served = Served::before(world, facts);
    // Without a Node no kube-proxy runs: nothing to serve, nothing to lose.
    if !facts.any_node || !served.any() {
        return Ok(());
    }
    let mut states = vec![served.clone()];
    for step in plan.steps() {
        if !served.after(step) {
            break;
        }
        states.push(served.clone());
    }
    let mut policies: Vec<bool> = states.iter().map(|s| s.local).collect();
    policies.dedup();
    for (i, state) in states.iter().enumerate().skip(1) {
        for local in &policies {
            let seen = Served {
                local: *local,
                ..state.clone()
            };
            if !seen.any() {
                let order = if *local == state.local {
                    String::new()
                } else {
                    format!(
                        " (kube-proxy seeing the slices of this step with the Service's policy of another: Local {local})"
                    )
                };
                return Err(Broken(format!(
                    "after step {} no slice kube-proxy serves carries an endpoint of the Service's family{order}: {seen:?}",
                    i - 1
                )));
            }
        }
    }
    Ok(())
}

/// What the facts say about our proxy, as steering needs it.
struct Readiness {
    rolled_out: bool,
    no_nodes: bool,
    ready: i32,
    ready_everywhere: bool,
}

fn readiness(world: &World, facts: &Facts) -> Readiness {
    let (desired, ready) = match world.proxy {
        ProxyAt::Absent => (0, 0),
        ProxyAt::Rolling { desired, ready } => (desired, ready),
        ProxyAt::RolledOut { nodes } | ProxyAt::Stale { nodes } => (nodes, nodes),
    };
    // Every scheduled node runs a ready pod of the current template.
    let current = !matches!(world.proxy, ProxyAt::Stale { .. });
    let rolled_out = current && desired > 0 && ready >= desired;
    Readiness {
        rolled_out,
        no_nodes: !rolled_out && !facts.any_node,
        ready,
        ready_everywhere: desired > 0 && ready >= desired,
    }
}

/// Steering starts (or a switch steps) only at a proxy that answers on every node.
fn only_at_a_ready_proxy(world: &World, facts: &Facts, plan: &Plan) -> Result<(), Broken> {
    let r = readiness(world, facts);
    let released = world.take_over
        && facts.service.as_ref().map(workload::service_release) == Some(ServiceRelease::default());
    let up = r.rolled_out || r.no_nodes || (world.take_over && (released || r.ready_everywhere));
    let before = facts.record.as_ref().and_then(|r| r.applied);
    let after = final_record(plan, facts).and_then(|r| r.applied);
    if after == Some(world.steering) && before != after && !up {
        return Err(Broken(format!(
            "steers with {after:?} at a proxy that is not up"
        )));
    }
    if let Some(switch) = plan.switch.as_ref().filter(|s| !s.steps.is_empty())
        && !up
    {
        return Err(Broken(format!(
            "switch steps {:?} at a proxy that is not up",
            switch.steps
        )));
    }
    Ok(())
}

/// Service steering's `Local`, and the release of either path, wait for the
/// other path to carry traffic.
fn handed_over(world: &World, facts: &Facts, plan: &Plan) -> Result<(), Broken> {
    let r = readiness(world, facts);
    let listed_all = world.listed >= r.ready.max(1);
    let paused = facts
        .record
        .as_ref()
        .and_then(|rec| rec.proxies_listed_at)
        .is_some_and(|t| NOW - t >= HANDOVER_PAUSE.as_secs() as i64);
    let selected_before = matches!(world.service, ServiceAt::Handover | ServiceAt::Steered);
    // Service steering that holds already is re-applied at once after a
    // rewrite by someone else: the hand-over is for a start or a switch.
    let starting = facts.record.as_ref().and_then(|rec| rec.applied) != Some(Steering::Service);
    let steps: Vec<&Step> = plan.steps().collect();
    for (i, step) in steps.iter().copied().enumerate() {
        let earlier = &steps[..i];
        match step {
            Step::ApplyFields { object, .. }
                if object.data.pointer("/spec/internalTrafficPolicy")
                    == Some(&serde_json::json!("Local"))
                    && world.service != ServiceAt::Steered
                    && starting
                    && !r.no_nodes
                    && !(listed_all && paused) =>
            {
                return Err(Broken(format!(
                    "step {i} turns the Service Local before the pods' slices carry it"
                )));
            }
            Step::Delete(object) if name(object) == "EndpointSlice default/kubernetes" => {
                let selects = selected_before || earlier.iter().any(|s| is_selector_write(s));
                if !selects || !(r.no_nodes || listed_all) {
                    return Err(Broken(format!(
                        "step {i} deletes our EndpointSlice before the proxy pods carry the traffic"
                    )));
                }
            }
            Step::Force(object)
                if name(object).starts_with("Service ")
                    && !earlier.iter().any(|s| {
                        matches!(s, Step::Apply { object, .. }
                            if name(object) == "EndpointSlice default/kubernetes")
                    }) =>
            {
                return Err(Broken(format!(
                    "step {i} releases the Service's selector before our EndpointSlice is written"
                )));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A proxy goes only when nothing steers at it and the pause has passed.
fn removed_only_when_unused(world: &World, facts: &Facts, plan: &Plan) -> Result<(), Broken> {
    let mut in_force = facts.record.clone().unwrap_or_default();
    let after = final_record(plan, facts).unwrap_or_default();
    for (i, step) in plan.steps().enumerate() {
        match step {
            Step::Record(record) => in_force = record.clone(),
            Step::RemoveProxy(mode) => {
                if *mode == world.steering
                    || in_force.applied == Some(*mode)
                    || after.applied == Some(*mode)
                {
                    return Err(Broken(format!(
                        "step {i} removes the {mode:?} proxy while it steers"
                    )));
                }
                if let Some(wait) = in_force.handover_wait(NOW, HANDOVER_PAUSE) {
                    return Err(Broken(format!(
                        "step {i} removes the {mode:?} proxy {wait:?} before the handover pause ends"
                    )));
                }
                // The EndpointSlice controller's slices of the proxy pods
                // outlive a selector that is gone: while they are there,
                // kube-proxy still sends calls to those pods.
                // (A live selector's slices follow its pods.)
                let selector = facts
                    .service
                    .as_ref()
                    .and_then(|s| s.spec.as_ref()?.selector.as_ref());
                if *mode == Steering::Service
                    && world.listed > 0
                    && selector.is_none()
                    && !world.take_over
                {
                    return Err(Broken(format!(
                        "step {i} removes the Service proxy while the EndpointSlice controller's slices still name its pods"
                    )));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// A write to what steers `default/kubernetes`.
fn is_steering_write(step: &Step) -> bool {
    match step {
        Step::Apply { object, .. }
        | Step::ApplyFields { object, .. }
        | Step::Force(object)
        | Step::Delete(object) => object.metadata.namespace.as_deref() == Some("default"),
        Step::PatchService(_) => true,
        Step::Record(_) | Step::RemoveProxy(_) | Step::AwaitOtherSlice => false,
    }
}

/// A write that makes the Service select the proxy pods.
fn is_selector_write(step: &Step) -> bool {
    matches!(step, Step::ApplyFields { object, .. }
        if name(object) == "Service default/kubernetes"
            && object.data.pointer("/spec/selector").is_some_and(|s| !s.is_null()))
}
