//! One test per row of the steering table (docs/architecture.md): the
//! world before, the plan `decide` makes.

use std::time::Duration;

use super::super::error::WorkloadError;
use super::fixture::{
    NOW, ProxyAt, ServiceAt, World, api_server_record, condition, describe, final_record,
};
use crate::{
    api::Steering,
    controller::{
        apply,
        status::{Desired, Status, types},
        workload::{
            decide::Removal,
            plan::{Acted, Step},
        },
    },
    render::workload::{HANDOVER_PAUSE, SteeringRecord},
};

const ADDRESS: Steering = Steering::AdvertiseAddress;
const SERVICE: Steering = Steering::Service;

fn steered_with(mode: Steering) -> Option<SteeringRecord> {
    Some(SteeringRecord {
        applied: Some(mode),
        service_proxy_beside_service: mode == SERVICE,
        ..SteeringRecord::default()
    })
}

fn steers(plan: &super::Plan) -> (Status, String) {
    condition(plan, types::ENDPOINTS_STEERED).expect("EndpointsSteered")
}

fn writes_to_default(plan: &super::Plan) -> Vec<String> {
    describe(plan)
        .into_iter()
        .filter(|s| s.contains(" default/kubernetes") || s.starts_with("PatchService"))
        .collect()
}

#[test]
fn a_first_install_waits_for_the_proxy_before_steering() {
    let plan = World::new(ADDRESS).decide();
    assert_eq!(steers(&plan), (Status::False, "WaitingForProxy".into()));
    assert_eq!(writes_to_default(&plan), Vec::<String>::new());
    // The record of what default/kubernetes held, then the proxy.
    let steps = describe(&plan);
    assert_eq!(steps[0], "Record(applied None, leaving None)");
    assert!(
        steps[1..]
            .iter()
            .any(|s| s == "Apply DaemonSet kube-system/hcp-ingress-proxy"),
        "{steps:?}"
    );
    assert_eq!(plan.requeue, Some(Duration::from_secs(30)));
}

#[test]
fn a_rolled_out_proxy_is_steered_at_after_the_record() {
    let world = World {
        proxy: ProxyAt::RolledOut { nodes: 2 },
        ..World::new(ADDRESS)
    };
    let plan = world.decide();
    assert_eq!(steers(&plan), (Status::True, "AdvertiseAddress".into()));
    assert_eq!(
        writes_to_default(&plan),
        [
            "Apply EndpointSlice default/kubernetes",
            "Apply Endpoints default/kubernetes"
        ]
    );
    let records: Vec<_> = plan.records().map(|r| r.applied).collect();
    assert_eq!(
        records,
        [None, Some(ADDRESS)],
        "recorded before, marked after"
    );
    assert_eq!(
        condition(&plan, types::PROXY_READY),
        Some((Status::True, "AllNodesReady".into()))
    );
}

#[test]
fn a_cluster_without_nodes_is_steered_at_once() {
    let world = World {
        any_node: false,
        ..World::new(ADDRESS)
    };
    let plan = world.decide();
    assert_eq!(steers(&plan), (Status::True, "AdvertiseAddress".into()));
    assert_eq!(
        final_record(&plan, &world.facts()).unwrap().applied,
        Some(ADDRESS)
    );
}

#[test]
fn a_proxy_whose_template_this_pass_rewrites_is_not_rolled_out() {
    let world = World {
        proxy: ProxyAt::Stale { nodes: 2 },
        ..World::new(ADDRESS)
    };
    assert_eq!(
        steers(&world.decide()),
        (Status::False, "WaitingForProxy".into())
    );
}

#[test]
fn service_steering_from_the_start_hands_over_step_by_step() {
    let rolled_out = World {
        proxy: ProxyAt::RolledOut { nodes: 2 },
        ..World::new(SERVICE)
    };
    // 1. The Service selects the proxy pods, its policy untouched; first our
    // EndpointSlice with the provider's addresses, which carries the traffic
    // once the selector makes the mirroring controller delete its slice.
    let plan = rolled_out.decide();
    assert_eq!(steers(&plan), (Status::False, "WaitingForProxy".into()));
    assert_eq!(
        writes_to_default(&plan),
        [
            "Apply EndpointSlice default/kubernetes",
            "ApplyFields Service default/kubernetes"
        ]
    );
    let Some(Step::Apply { object: bridge, .. }) = plan.steps().find(
        |s| matches!(s, Step::Apply { object, .. } if object.data["addressType"].is_string()),
    ) else {
        panic!("no EndpointSlice write");
    };
    assert_eq!(
        bridge.data["endpoints"][0]["addresses"],
        serde_json::json!(["192.0.2.10"])
    );
    assert_eq!(bridge.data["ports"][0]["port"], 6443);
    let Some(Step::ApplyFields { object, .. }) =
        plan.steps().find(|s| matches!(s, Step::ApplyFields { .. }))
    else {
        panic!("no Service write");
    };
    assert_eq!(object.data.pointer("/spec/internalTrafficPolicy"), None);
    // 2. Its slices list one of two proxies: wait.
    let listing = World {
        service: ServiceAt::Handover,
        listed: 1,
        record: Some(SteeringRecord::default()),
        ..rolled_out.clone()
    };
    let plan = listing.decide();
    assert!(steers(&plan).1 == "WaitingForProxy" && writes_to_default(&plan).is_empty());
    // 3. Every proxy listed: the time is recorded, the pause begins.
    let listed = World {
        listed: 2,
        ..listing
    };
    let plan = listed.decide();
    assert_eq!(
        final_record(&plan, &listed.facts())
            .unwrap()
            .proxies_listed_at,
        Some(NOW)
    );
    assert!(writes_to_default(&plan).is_empty());
    // 4. After the pause: Local, and the record says service steering holds.
    let paused = World {
        record: Some(SteeringRecord {
            proxies_listed_at: Some(NOW - 6),
            ..SteeringRecord::default()
        }),
        ..listed
    };
    let plan = paused.decide();
    assert_eq!(steers(&plan), (Status::True, "ServiceSelector".into()));
    let record = final_record(&plan, &paused.facts()).unwrap();
    assert_eq!(
        (record.applied, record.proxies_listed_at),
        (Some(SERVICE), None)
    );
    // Our bridging slice goes in the same pass, after `Local`.
    let mut facts = paused.facts();
    facts.as_read.endpoint_slice = Some(bridge.clone());
    let cpi = paused.cpi();
    let plan = super::decide(&paused.given(&cpi), &facts).expect("a plan");
    assert_eq!(
        writes_to_default(&plan),
        [
            "ApplyFields Service default/kubernetes",
            "Delete EndpointSlice default/kubernetes"
        ]
    );
}

#[test]
fn a_switch_waits_for_the_new_proxy_and_says_so_in_the_record() {
    let world = World {
        record: steered_with(ADDRESS),
        address_steered: true,
        ..World::new(SERVICE)
    };
    let plan = world.decide();
    assert_eq!(steers(&plan), (Status::True, "SwitchPending".into()));
    assert!(writes_to_default(&plan).is_empty());
    let record = final_record(&plan, &world.facts()).unwrap();
    assert_eq!(
        (record.applied, record.leaving),
        (Some(ADDRESS), Some(SERVICE))
    );
}

/// Address steering, the spec now service, the proxy pods listed for longer
/// than the handover pause: the switch's last pass.
fn switching_to_service() -> World {
    World {
        record: Some(SteeringRecord {
            leaving: Some(SERVICE),
            proxies_listed_at: Some(NOW - 60),
            ..steered_with(ADDRESS).unwrap()
        }),
        address_steered: true,
        proxy: ProxyAt::RolledOut { nodes: 2 },
        service: ServiceAt::Handover,
        listed: 2,
        ..World::new(SERVICE)
    }
}

#[test]
fn a_switch_to_service_releases_the_advertise_address_once_the_pods_carry_traffic() {
    let world = switching_to_service();
    let plan = world.decide();
    assert_eq!(steers(&plan), (Status::True, "ServiceSelector".into()));
    assert_eq!(
        writes_to_default(&plan),
        [
            "Delete EndpointSlice default/kubernetes",
            "Force Endpoints default/kubernetes",
            "ApplyFields Service default/kubernetes",
        ]
    );
    let switch = plan.switch.clone().expect("a switch");
    assert_eq!(
        (switch.from, switch.to, switch.steps.len()),
        (ADDRESS, SERVICE, 2)
    );
    let record = final_record(&plan, &world.facts()).unwrap();
    assert_eq!(
        (record.applied, record.leaving, record.replaced_at),
        (Some(SERVICE), Some(ADDRESS), Some(NOW))
    );
    assert_eq!(plan.requeue, Some(HANDOVER_PAUSE));
    assert!(
        !describe(&plan).iter().any(|s| s.starts_with("RemoveProxy")),
        "the old proxy goes later"
    );
}

#[test]
fn a_switch_to_the_advertise_address_writes_it_before_the_selector_goes() {
    let world = World {
        record: Some(SteeringRecord {
            leaving: Some(ADDRESS),
            ..steered_with(SERVICE).unwrap()
        }),
        proxy: ProxyAt::RolledOut { nodes: 2 },
        service: ServiceAt::Steered,
        listed: 2,
        ..World::new(ADDRESS)
    };
    let plan = world.decide();
    assert_eq!(
        writes_to_default(&plan),
        [
            "Apply EndpointSlice default/kubernetes",
            "Force Service default/kubernetes",
            "Apply Endpoints default/kubernetes",
        ]
    );
    assert_eq!(steers(&plan), (Status::True, "AdvertiseAddress".into()));
}

/// After a switch away from service steering, the proxy pods' slices outlive
/// the selector (the EndpointSlice controller leaves them): kube-proxy must
/// have taken the Service's new policy in before they go, and must have let
/// them go before their proxies do.
#[test]
fn away_from_service_steering_the_pods_slices_go_a_pause_after_the_switch_and_the_proxies_a_pause_later()
 {
    let world = |record: SteeringRecord, listed: i32| World {
        record: Some(record),
        address_steered: true,
        proxy: ProxyAt::RolledOut { nodes: 2 },
        listed,
        ..World::new(ADDRESS)
    };
    let switched = SteeringRecord {
        leaving: Some(SERVICE),
        replaced_at: Some(NOW - 2),
        ..steered_with(ADDRESS).unwrap()
    };
    let drops_slices = |plan: &super::Plan| {
        writes_to_default(plan)
            .iter()
            .any(|w| w == "Delete EndpointSlice default/kubernetes-abcde")
    };
    // Within the pause: nothing goes.
    let plan = world(switched.clone(), 2).decide();
    assert!(!drops_slices(&plan), "{:?}", describe(&plan));
    assert!(!plan.steps().any(|s| *s == Step::RemoveProxy(SERVICE)));

    // After it: the slices go, the proxies stay for another pause.
    let paused = world(
        SteeringRecord {
            replaced_at: Some(NOW - 60),
            ..switched
        },
        2,
    );
    let plan = paused.decide();
    assert!(drops_slices(&plan), "{:?}", describe(&plan));
    assert!(!plan.steps().any(|s| *s == Step::RemoveProxy(SERVICE)));
    assert_eq!(plan.requeue, Some(HANDOVER_PAUSE));
    let record = final_record(&plan, &paused.facts()).unwrap();
    assert_eq!(
        (record.leaving, record.replaced_at),
        (Some(SERVICE), Some(NOW))
    );

    // The slices gone and the pause over: the proxies go.
    let plan = world(
        SteeringRecord {
            replaced_at: Some(NOW - 60),
            ..record
        },
        0,
    )
    .decide();
    assert!(plan.steps().any(|s| *s == Step::RemoveProxy(SERVICE)));
}

#[test]
fn the_proxy_switched_away_from_goes_after_the_handover_pause() {
    let leaving = |ago: i64| World {
        record: Some(SteeringRecord {
            leaving: Some(SERVICE),
            replaced_at: Some(NOW - ago),
            ..steered_with(ADDRESS).unwrap()
        }),
        address_steered: true,
        proxy: ProxyAt::RolledOut { nodes: 2 },
        ..World::new(ADDRESS)
    };
    let plan = leaving(2).decide();
    assert!(!plan.steps().any(|s| *s == Step::RemoveProxy(SERVICE)));
    assert_eq!(plan.requeue, Some(Duration::from_secs(3)));
    let world = leaving(60);
    let plan = world.decide();
    assert!(plan.steps().any(|s| *s == Step::RemoveProxy(SERVICE)));
    assert_eq!(final_record(&plan, &world.facts()).unwrap().leaving, None);
}

#[test]
fn at_steady_state_every_write_is_already_made() {
    for (mode, service) in [
        (ADDRESS, ServiceAt::ApiServer),
        (SERVICE, ServiceAt::Steered),
    ] {
        let world = World {
            record: steered_with(mode),
            address_steered: mode == ADDRESS,
            proxy: ProxyAt::RolledOut { nodes: 3 },
            service,
            ..World::new(mode)
        };
        let plan = world.decide();
        for step in plan.steps() {
            let made = match step {
                Step::Apply { object, live } => {
                    apply::up_to_date(object, &apply::digest(object), live.as_ref())
                }
                Step::ApplyFields { object, live } => live.as_ref().is_some_and(|live| {
                    apply::is_subset(
                        &serde_json::to_value(object).unwrap()["spec"],
                        &serde_json::to_value(live).unwrap()["spec"],
                    )
                }),
                _ => false,
            };
            assert!(made, "{mode:?}: {step:?} would write");
        }
        assert_eq!(plan.requeue, None, "{mode:?}");
    }
}

#[test]
fn a_rewrite_by_someone_else_is_reported_and_steered_again() {
    let world = World {
        record: steered_with(ADDRESS),
        address_steered: true,
        proxy: ProxyAt::RolledOut { nodes: 1 },
        ..World::new(ADDRESS)
    };
    let mut facts = world.facts();
    // The API server's endpoint reconciler wrote its own address back.
    let endpoints = facts.as_read.endpoints.as_mut().unwrap();
    endpoints.data["subsets"][0]["addresses"][0]["ip"] = "192.0.2.10".into();
    let cpi = world.cpi();
    let plan = super::decide(&world.given(&cpi), &facts).expect("a plan");
    assert_eq!(
        steers(&plan),
        (Status::False, "EndpointsOverwritten".into())
    );
    assert!(plan.drift[0].contains("192.0.2.10"), "{:?}", plan.drift);
    // A rewrite seen a pass ago stays in the status for a while.
    let remembered = World {
        recent_drift: vec!["Endpoints default/kubernetes holds 192.0.2.10 (3 s ago)".into()],
        ..world
    }
    .decide();
    assert_eq!(
        steers(&remembered),
        (Status::False, "EndpointsOverwritten".into())
    );
    assert!(remembered.drift.is_empty(), "nothing new to remember");
}

#[test]
fn an_advertise_address_of_the_other_family_writes_nothing() {
    let world = World::new(ADDRESS);
    let mut cpi = world.cpi();
    cpi.spec.proxy.as_mut().unwrap().advertise_address = Some("240.0.0.9".into());
    let mut facts = world.facts();
    facts
        .service
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .cluster_ip = Some("fd00:10:96::1".into());
    let plan = super::decide(&world.given(&cpi), &facts).expect("a plan");
    assert!(plan.is_empty(), "{:?}", describe(&plan));
    assert_eq!(
        steers(&plan),
        (Status::False, "AddressFamilyMismatch".into())
    );
    assert_eq!(
        condition(&plan, types::PROXY_READY),
        Some((Status::False, "InvalidSpec".into()))
    );
}

#[test]
fn without_the_cluster_ca_nothing_is_written() {
    let world = World::new(ADDRESS);
    let mut facts = world.facts();
    facts.credentials = Err(WorkloadError::CaNotAvailable(
        "Secret tenants/tenant-01-ca not found".into(),
    ));
    let cpi = world.cpi();
    let plan = super::decide(&world.given(&cpi), &facts).expect("a plan");
    assert!(plan.is_empty());
    assert_eq!(
        condition(&plan, types::PROXY_READY),
        Some((Status::False, "CANotAvailable".into()))
    );
    assert_eq!(plan.requeue, Some(Duration::from_secs(30)));
}

#[test]
fn a_take_over_installs_beside_the_provider_until_ours_is_ready() {
    let waiting = World {
        take_over: true,
        service: ServiceAt::Provider,
        proxy: ProxyAt::Rolling {
            desired: 2,
            ready: 1,
        },
        provider_proxy: Some((2, 2)),
        ..World::new(ADDRESS)
    };
    let plan = waiting.decide();
    assert_eq!(steers(&plan), (Status::True, "ManagedByUpstream".into()));
    assert!(writes_to_default(&plan).is_empty());
    assert_eq!(plan.records().count(), 0);

    let ready = World {
        proxy: ProxyAt::RolledOut { nodes: 2 },
        ..waiting
    };
    let plan = ready.decide();
    let writes = writes_to_default(&plan);
    assert!(
        writes[0].starts_with("PatchService {\"metadata\""),
        "unlabel first: {writes:?}"
    );
    assert_eq!(writes[1], "Apply EndpointSlice default/kubernetes");
    assert!(
        writes[2].starts_with("PatchService {\"spec\""),
        "{writes:?}"
    );
    assert!(
        final_record(&plan, &ready.facts())
            .unwrap()
            .service_released
    );
    assert_eq!(steers(&plan), (Status::True, "TakeOverPending".into()));
    assert_eq!(plan.events.len(), 1, "NodeProxyTakenOver");
}

/// The switch of `switching_to_service`, made to fail at its first write: the
/// old mode still steers, EndpointsSteered says so (before ProxyReady, as
/// the plan's own would stand) and the pass looks again after `retry`.
#[test]
fn a_failed_switch_is_reported_in_place_of_the_steering() {
    let world = switching_to_service();
    let plan = world.decide();
    assert!(plan.switch.is_some());
    let retry = Duration::from_secs(7);
    let (conditions, requeue) = super::reported(&plan, &Acted::default(), retry);
    assert_eq!(
        (conditions, requeue),
        (plan.conditions.clone(), plan.requeue)
    );

    let failed = Acted {
        switch_failed: Some(WorkloadError::ApplyFailed(
            "failed to delete EndpointSlice kubernetes: refused".into(),
        )),
    };
    let (conditions, requeue) = super::reported(&plan, &failed, retry);
    let types: Vec<&str> = conditions.iter().map(|c| c.type_).collect();
    let steered: Vec<_> = conditions
        .iter()
        .filter(|c| c.type_ == types::ENDPOINTS_STEERED)
        .collect();
    assert_eq!(steered.len(), 1, "{types:?}");
    assert_eq!(
        (steered[0].status, steered[0].reason.as_str()),
        (Status::False, "SteeringSwitchFailed")
    );
    assert!(
        steered[0].message.contains("AdvertiseAddress still steers")
            && steered[0].message.contains("refused"),
        "{}",
        steered[0].message
    );
    let at = |t: &str| types.iter().position(|x| *x == t).unwrap();
    assert!(at(types::ENDPOINTS_STEERED) < at(types::PROXY_READY));
    assert_eq!(requeue, Some(retry));
}

/// Removal of address steering: the give-back first, recorded; the proxy
/// and the record only in a later pass, after the handover pause.
#[test]
fn a_removal_gives_back_first_and_removes_the_proxy_after_the_pause() {
    let world = World {
        record: Some(SteeringRecord {
            applied: Some(ADDRESS),
            ..api_server_record()
        }),
        address_steered: true,
        proxy: ProxyAt::RolledOut { nodes: 1 },
        ..World::new(ADDRESS)
    };
    let (plan, removal) = super::removal(&world.removal_facts(false, true)).unwrap();
    assert!(
        matches!(removal, Removal::Restoring(_, wait) if wait == HANDOVER_PAUSE),
        "{removal:?}"
    );
    let steps = describe(&plan);
    assert!(steps.iter().all(|s| !s.contains("DaemonSet")), "{steps:?}");
    assert!(
        steps.last().unwrap().starts_with("Record(applied None"),
        "{steps:?}"
    );

    // The pass after the pause: the record says it was given back.
    let given_back = World {
        record: Some(SteeringRecord {
            applied: None,
            restored: Some("Endpoints default/kubernetes restored".into()),
            replaced_at: Some(NOW - 60),
            ..SteeringRecord::default()
        }),
        ..world
    };
    let (plan, removal) = super::removal(&given_back.removal_facts(false, true)).unwrap();
    let Removal::Removed(note) = removal else {
        panic!("{removal:?}");
    };
    let steps = describe(&plan);
    assert!(steps.iter().any(|s| s.contains("DaemonSet")), "{steps:?}");
    assert_eq!(
        steps.last().map(String::as_str),
        Some("Delete ConfigMap kube-system/hcp-ingress-steering"),
        "{steps:?}"
    );
    assert!(
        note.starts_with("restored Endpoints default/kubernetes restored"),
        "{note}"
    );
}

/// Steered at the proxy, and the record is gone: nothing is written
/// without the user's word.
#[test]
fn a_removal_without_the_record_keeps_a_steered_proxy() {
    let world = World {
        address_steered: true,
        proxy: ProxyAt::RolledOut { nodes: 1 },
        ..World::new(ADDRESS)
    };
    let (plan, removal) = super::removal(&world.removal_facts(false, true)).unwrap();
    assert!(
        matches!(&removal, Removal::Kept(why) if why.contains("finish-without-restore")),
        "{removal:?}"
    );
    assert!(plan.is_empty());
    let (plan, removal) = super::removal(&world.removal_facts(true, true)).unwrap();
    assert!(matches!(removal, Removal::Removed(_)), "{removal:?}");
    assert!(!plan.is_empty());
}

/// Service steering whose selector someone took away goes through the
/// hand-over again instead of writing `Local` at once: kube-proxy would
/// drop the endpoints that carry the traffic (the mirror of the API
/// server's Endpoints) before the proxy pods' slices are back.
#[test]
fn service_steering_taken_away_is_handed_over_again() {
    let world = World {
        record: steered_with(SERVICE),
        service: ServiceAt::ApiServer,
        proxy: ProxyAt::RolledOut { nodes: 1 },
        ..World::new(SERVICE)
    };
    let plan = world.decide();
    let Some(Desired {
        reason, message, ..
    }) = plan
        .conditions
        .iter()
        .rev()
        .find(|c| c.type_ == types::ENDPOINTS_STEERED)
    else {
        panic!("EndpointsSteered")
    };
    assert_eq!(reason, "ServiceOverwritten");
    assert!(
        message.contains("handing it over to the proxy pods again"),
        "{message}"
    );
    assert!(!plan.drift.is_empty(), "the rewrite is remembered");
    let writes = writes_to_default(&plan);
    assert_eq!(
        writes,
        [
            "Apply EndpointSlice default/kubernetes",
            "ApplyFields Service default/kubernetes"
        ]
    );
    let service = plan
        .steps()
        .find_map(|s| match s {
            Step::ApplyFields { object, .. } => Some(object.data["spec"].clone()),
            _ => None,
        })
        .expect("the Service's selector");
    assert!(
        service.get("internalTrafficPolicy").is_none(),
        "no Local before the pods' slices list the proxies: {service}"
    );

    // The pods' slices list the proxy, the pause has passed: `Local`, and
    // the bridge goes.
    let mut record = steered_with(SERVICE).unwrap();
    record.proxies_listed_at = Some(NOW - 60);
    let handed_over = World {
        record: Some(record),
        service: ServiceAt::Handover,
        listed: 1,
        ..world
    };
    let mut facts = handed_over.facts();
    let bridge = plan
        .steps()
        .find_map(|s| match s {
            Step::Apply { object, .. } if object.metadata.name.as_deref() == Some("kubernetes") => {
                Some(object.clone())
            }
            _ => None,
        })
        .unwrap();
    facts.as_read.endpoint_slice = Some(bridge);
    let cpi = handed_over.cpi();
    let plan = super::decide(&handed_over.given(&cpi), &facts).expect("a plan");
    assert_eq!(steers(&plan), (Status::True, "ServiceSelector".into()));
    assert_eq!(
        writes_to_default(&plan),
        [
            "ApplyFields Service default/kubernetes",
            "Delete EndpointSlice default/kubernetes"
        ]
    );
    // The next hand-over waits its own pause.
    assert_eq!(
        final_record(&plan, &facts).and_then(|r| r.proxies_listed_at),
        None
    );
}

/// A pass cut short between the steering write and the record's mark
/// leaves the record saying nothing was applied: the removal still gives
/// back what the record holds, before the proxy goes.
#[test]
fn a_removal_gives_back_steering_the_record_never_marked() {
    let world = World {
        record: Some(api_server_record()),
        address_steered: true,
        proxy: ProxyAt::RolledOut { nodes: 1 },
        ..World::new(ADDRESS)
    };
    let (plan, removal) = super::removal(&world.removal_facts(false, true)).unwrap();
    assert!(
        matches!(&removal, Removal::Restoring(what, _) if what.contains("192.0.2.10")),
        "{removal:?}"
    );
    let steps = describe(&plan);
    assert!(steps.iter().all(|s| !s.contains("DaemonSet")), "{steps:?}");
    assert!(
        steps
            .iter()
            .any(|s| s == "Force Endpoints default/kubernetes"),
        "{steps:?}"
    );
}

/// A deletion in the middle of service steering's hand-over (the Service
/// selects the proxy pods, our slice bridges the provider's addresses, the
/// record not yet marked): the selector goes, the provider's Endpoints are
/// given back, and our slice only a pause later (kube-proxy has the
/// given-back Service by then) and once another slice carries them.
#[test]
fn a_removal_during_the_service_hand_over_gives_the_service_back() {
    let world = World {
        record: Some(api_server_record()),
        service: ServiceAt::Handover,
        listed: 1,
        proxy: ProxyAt::RolledOut { nodes: 1 },
        ..World::new(SERVICE)
    };
    let cpi = world.cpi();
    let bridge = super::decide(
        &world.given(&cpi),
        &World {
            service: ServiceAt::ApiServer,
            ..world.clone()
        }
        .facts(),
    )
    .expect("a plan")
    .steps()
    .find_map(|s| match s {
        Step::Apply { object, .. } if object.metadata.name.as_deref() == Some("kubernetes") => {
            Some(object.clone())
        }
        _ => None,
    })
    .expect("the hand-over's bridge");
    let mut facts = world.removal_facts(false, true);
    facts.our_slice = Some(bridge);
    let (plan, removal) = super::removal(&facts).unwrap();
    assert!(
        matches!(&removal, Removal::Restoring(what, _) if what.contains("selector removed")),
        "{removal:?}"
    );
    let steps = describe(&plan);
    assert_eq!(steps[0], "Force Service default/kubernetes", "{steps:?}");
    assert!(
        !steps.iter().any(|s| s.starts_with("Delete")),
        "nothing goes in the pass that gives back: {steps:?}"
    );
    let given_back = recorded(&plan).expect("the record of the give-back");
    assert_eq!(given_back.replaced_at, Some(NOW));

    // A pause later: the bridge goes, once another slice carries the
    // addresses; the proxy a pause after that.
    facts.record = Some(SteeringRecord {
        replaced_at: Some(NOW - 60),
        ..given_back
    });
    let (plan, removal) = super::removal(&facts).unwrap();
    assert!(
        matches!(&removal, Removal::Restoring(_, wait) if *wait == HANDOVER_PAUSE),
        "{removal:?}"
    );
    let steps = describe(&plan);
    let waits = steps.iter().position(|s| s == "AwaitOtherSlice");
    let bridge_goes = steps
        .iter()
        .position(|s| s == "Delete EndpointSlice default/kubernetes");
    assert!(
        waits.is_some() && bridge_goes.is_some() && waits < bridge_goes,
        "{steps:?}"
    );
    let settled = recorded(&plan).expect("the record of the deletions");
    assert_eq!((settled.deferred, settled.replaced_at), (None, Some(NOW)));
    facts.record = Some(SteeringRecord {
        replaced_at: Some(NOW - 60),
        ..settled
    });
    let (_, removal) = super::removal(&facts).unwrap();
    assert!(matches!(removal, Removal::Removed(_)), "{removal:?}");
}

/// The record a removal's plan stores.
fn recorded(plan: &super::Plan) -> Option<SteeringRecord> {
    plan.steps().find_map(|s| match s {
        Step::Record(r) => Some(r.clone()),
        _ => None,
    })
}

/// The removal gives back the published endpoint with the CCM override:
/// the ConfigMaps that are ours go, one of the same name that is not ours
/// stays as it is.
#[test]
fn a_removal_deletes_the_published_endpoint_only_where_it_is_ours() {
    let world = World {
        record: Some(SteeringRecord {
            applied: None,
            restored: Some("Endpoints default/kubernetes restored".into()),
            replaced_at: Some(NOW - 60),
            ..SteeringRecord::default()
        }),
        proxy: ProxyAt::RolledOut { nodes: 1 },
        ..World::new(ADDRESS)
    };
    let config_map = |namespace: &str, name: &str, ours: bool| {
        let labels = if ours {
            serde_json::json!({crate::api::MANAGED_BY_LABEL: crate::api::MANAGER})
        } else {
            serde_json::json!({"app.kubernetes.io/managed-by": "Helm"})
        };
        serde_json::from_value::<kube::api::DynamicObject>(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
        }))
        .unwrap()
    };
    let mut facts = world.removal_facts(false, true);
    facts.published = vec![
        config_map("kube-system", "kubernetes-services-endpoint", true),
        config_map("tigera-operator", "kubernetes-services-endpoint", false),
        config_map("kube-system", "control-plane-endpoint", true),
    ];
    let (plan, removal) = super::removal(&facts).unwrap();
    let Removal::Removed(note) = removal else {
        panic!("{removal:?}");
    };
    let deleted: Vec<String> = describe(&plan)
        .into_iter()
        .filter(|s| s.contains("endpoint"))
        .collect();
    assert_eq!(
        deleted,
        [
            "Delete ConfigMap kube-system/kubernetes-services-endpoint",
            "Delete ConfigMap kube-system/control-plane-endpoint",
        ]
    );
    assert!(
        note.contains("kube-system/kubernetes-services-endpoint")
            && !note.contains("tigera-operator"),
        "{note}"
    );
}

/// Beside a provider's own node proxy the endpoint is published as the CCM
/// override is applied: nothing of the proxy is needed for it.
#[test]
fn beside_a_providers_node_proxy_the_endpoint_is_published() {
    let cpi: crate::api::ControlPlaneIngress = serde_json::from_value(serde_json::json!({
        "apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
        "metadata": {"name": "tenant-01", "namespace": "tenants"},
        "spec": {
            "clusterName": "tenant-01",
            "ingress": {"apiHost": "api.tenant-01.example.com"},
            "backend": {"serviceName": "kmc-tenant-01", "apiPort": 30443},
            "upstream": {"provider": "k0smotron",
                "nodeProxy": {"kind": "DaemonSet", "namespace": "default", "name": "k0smotron-haproxy"}},
            "kubeProxyReplacement": {"publishEndpoint": true},
        },
    }))
    .unwrap();
    let upstream = cpi.spec.upstream.clone().unwrap().node_proxy.unwrap();
    let published: Vec<_> = crate::render::workload::ENDPOINT_LOCATIONS
        .iter()
        .map(|location| super::super::observe::PublishedAt {
            location: *location,
            live: None,
            namespace_exists: true,
        })
        .collect();
    let plan = super::complement(
        &cpi,
        &upstream,
        Some((1, 1)),
        &Default::default(),
        &published,
        Duration::from_secs(30),
    )
    .unwrap();
    assert_eq!(
        describe(&plan),
        [
            "Apply ConfigMap kube-system/kubernetes-services-endpoint",
            "Apply ConfigMap tigera-operator/kubernetes-services-endpoint",
            "Apply ConfigMap kube-system/control-plane-endpoint",
        ]
    );
    assert_eq!(
        condition(&plan, types::ENDPOINT_PUBLISHED),
        Some((Status::True, "Published".into()))
    );
    assert_eq!(
        condition(&plan, types::ENDPOINTS_STEERED),
        Some((Status::True, "ManagedByUpstream".into()))
    );
}
