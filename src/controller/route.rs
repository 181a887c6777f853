//! The route stage of a reconciliation: apply the route objects of the
//! flavor, unless the control plane's provider makes the route itself or
//! another object already routes our hosts, and delete the ones no longer
//! wanted. Decisions come from `render` (what to route, what conflicts);
//! this is the I/O around them.

use std::{collections::BTreeSet, sync::Arc};

use kube::{
    ResourceExt,
    api::DynamicObject,
    runtime::{events::EventType, reflector::ObjectRef},
};

use super::{
    apply,
    context::Context,
    error::Error,
    status::{Desired, Status, types},
};
use crate::{
    api::{ControlPlaneIngress, UpstreamObject},
    render::{self, RouteKind, conflict},
};

/// Apply the route, unless it is not ours to make: the control plane's
/// provider makes it (`spec.upstream.route`), or another object already routes
/// one of our hosts on the same ingress, or holds the name. Those are
/// reported, never overwritten and never doubled.
pub(super) async fn apply(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
    desired: &[DynamicObject],
) -> Result<Desired, Error> {
    let flavor = cpi.spec.flavor();
    let kind = RouteKind::of(flavor);
    let upstream = render::upstream_route(cpi).map(|u| upstream_route(ctx, cpi, u));
    if desired.is_empty()
        && let Some(upstream) = upstream
    {
        return Ok(upstream);
    }
    if !cpi.spec.ingress.deploy {
        return Ok(Desired::ok(
            types::ROUTE_READY,
            "DeployDisabled",
            "spec.ingress.deploy is false: no route is managed",
        ));
    }
    let Some(store) = ctx.routes.get(&kind) else {
        let gvk = kind.gvk();
        let message = format!(
            "{} ({}/{}) is not installed in the management cluster: install its CRD for the {flavor} flavor; the route is created as soon as it is",
            gvk.kind, gvk.group, gvk.version
        );
        ctx.event(
            cpi,
            EventType::Warning,
            "RouteKindNotInstalled",
            "Apply",
            message.clone(),
        )
        .await;
        return Ok(Desired::failed(
            types::ROUTE_READY,
            "RouteKindNotInstalled",
            message,
        ));
    };
    // The routes filed under one of our hosts: the only ones that can
    // conflict (looked up, not looked through: thousands of routes share
    // the ingress).
    let mut candidates: Vec<Arc<DynamicObject>> = conflict::candidate_keys(cpi)
        .iter()
        .flat_map(|key| store.indexed(key))
        .collect();
    candidates.sort_by_key(|o| o.metadata.uid.clone());
    candidates.dedup_by_key(|o| o.metadata.uid.clone());
    let mut conflicts = conflict::route_conflicts(cpi, kind, candidates.iter().map(|o| o.as_ref()));
    for object in desired {
        if let Some(existing) = store.get(&ObjectRef::from_obj_with(object, kind.api_resource()))
            && !conflict::controlled_by(&existing, cpi)
        {
            conflicts.push(format!(
                "{} {}/{} exists and is controlled by {}: it is not ours to overwrite",
                kind.gvk().kind,
                existing.namespace().unwrap_or_default(),
                existing.name_any(),
                conflict::controller_of(&existing)
            ));
        }
    }
    if !conflicts.is_empty() {
        let message = format!(
            "no route was applied: {}; remove the other route or change spec.ingress.apiHost",
            conflicts.join("; ")
        );
        ctx.event(
            cpi,
            EventType::Warning,
            "RouteConflict",
            "Apply",
            message.clone(),
        )
        .await;
        return Ok(Desired::failed(
            types::ROUTE_READY,
            "RouteConflict",
            message,
        ));
    }
    let api = ctx.route_api(kind, cpi);
    // Each route as the store holds it, with the status its ingress
    // controller wrote; none for a route just written: its controller has
    // yet to see the new version (our write requeues us through the watch).
    let mut stored = Vec::new();
    for object in desired.iter().cloned() {
        let name = object.name_any();
        let existing = store.get(&ObjectRef::from_obj_with(&object, kind.api_resource()));
        let written = apply::apply(ctx, &api, object, existing.as_deref()).await?;
        stored.push((name, existing.filter(|_| !written)));
    }
    let names: Vec<&str> = stored.iter().map(|(name, _)| name.as_str()).collect();
    let applied = format!("{} {} ({flavor})", kind.gvk().kind, names.join(", "));
    if kind == RouteKind::TlsRoute && upstream.is_none() {
        let namespace = cpi.namespace().unwrap_or_default();
        let verdict = gateway_verdict(&namespace, &stored, &applied);
        // Refused by a Gateway's controller: the only verdict that fails.
        if verdict.status == Status::False {
            ctx.event(
                cpi,
                EventType::Warning,
                "RouteNotAccepted",
                "Apply",
                verdict.message.clone(),
            )
            .await;
        }
        return Ok(verdict);
    }
    Ok(match upstream {
        // The provider routes the API host, we the rest: both must be there.
        Some(mut upstream) => {
            upstream.message = format!(
                "{applied} routes the hosts it leaves out; {}",
                upstream.message
            );
            upstream
        }
        None => Desired::ok(types::ROUTE_READY, "Applied", applied),
    })
}

/// A TLSRoute is routed once its Gateway's controller says so: `RouteReady`
/// follows the routes' `status.parents`, as the controller last wrote them
/// (its status writes requeue us through the route watch). `routes` holds
/// each route's name and its stored version, none when just written; the
/// first route not yet accepted decides.
fn gateway_verdict(
    namespace: &str,
    routes: &[(String, Option<Arc<DynamicObject>>)],
    applied: &str,
) -> Desired {
    for (name, stored) in routes {
        let verdict = match stored {
            Some(route) => render::acceptance(route),
            None => {
                render::Acceptance::Pending(format!("TLSRoute {namespace}/{name} was just written"))
            }
        };
        match verdict {
            render::Acceptance::Accepted => {}
            render::Acceptance::Pending(why) => {
                return Desired::unknown(
                    types::ROUTE_READY,
                    "AwaitingGateway",
                    format!("{applied} applied; {why}"),
                );
            }
            render::Acceptance::Refused(why) => {
                return Desired::failed(types::ROUTE_READY, "RouteNotAccepted", why);
            }
        }
    }
    Desired::ok(
        types::ROUTE_READY,
        "Accepted",
        format!("{applied}, accepted by the controller of each parent Gateway"),
    )
}

/// The provider's own route: ready once it exists (our route watches see every object of the kind).
fn upstream_route(ctx: &Context, cpi: &ControlPlaneIngress, upstream: &UpstreamObject) -> Desired {
    let provider = cpi
        .spec
        .upstream
        .as_ref()
        .map_or("the control plane's provider", |u| u.provider.as_str());
    let namespace = upstream
        .namespace
        .clone()
        .or_else(|| cpi.namespace())
        .unwrap_or_default();
    let found = RouteKind::from_kind(&upstream.kind)
        .and_then(|k| ctx.routes.get(&k).map(|store| (k, store)))
        .and_then(|(k, store)| {
            store.get(&ObjectRef::new_with(&upstream.name, k.api_resource()).within(&namespace))
        });
    let what = format!("{} {namespace}/{}", upstream.kind, upstream.name);
    match found {
        Some(route) => {
            // Whether an ingress controller took it: not every controller
            // publishes an address, so its absence is said, not failed on.
            let addresses = render::status_addresses(&route);
            let admission = if addresses.is_empty() {
                "no ingress controller has published an address for it yet (status.loadBalancer)"
                    .to_string()
            } else {
                format!(
                    "admitted by the ingress controller at {}",
                    addresses.join(", ")
                )
            };
            Desired::ok(
                types::ROUTE_READY,
                "ManagedByUpstream",
                format!(
                    "{provider} routes {} with its {what}, {admission}; hcp-ingress makes no second route",
                    cpi.spec.ingress.api_host
                ),
            )
        }
        None => Desired::failed(
            types::ROUTE_READY,
            "UpstreamRouteMissing",
            format!(
                "waiting for {provider} to create its {what} (spec.upstream.route); hcp-ingress makes no second route"
            ),
        ),
    }
}

/// Delete route objects this ControlPlaneIngress controls that it no longer
/// wants (flavor switched, `deploy: false`, konnectivity host removed). Only
/// objects whose controller reference is this very object are candidates.
pub(super) async fn delete_stale(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
    desired: &[DynamicObject],
) -> Result<(), Error> {
    let Some(uid) = cpi.uid() else { return Ok(()) };
    let wanted: BTreeSet<(String, String)> = desired
        .iter()
        .map(|o| {
            (
                o.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default(),
                o.name_any(),
            )
        })
        .collect();
    for (kind, store) in &ctx.routes {
        let stale: Vec<_> = store
            .indexed(&conflict::controller_key(&uid))
            .into_iter()
            .filter(|o| {
                o.namespace() == cpi.namespace()
                    && o.owner_references()
                        .iter()
                        .any(|r| r.controller == Some(true) && r.uid == uid)
                    && !wanted.contains(&(kind.gvk().kind, o.name_any()))
            })
            .collect();
        let api = ctx.route_api(*kind, cpi);
        for object in stale {
            tracing::info!(object = %render::describe(cpi), kind = %kind.gvk().kind, name = %object.name_any(), "deleting a route object no longer wanted");
            apply::delete(ctx, &api, &object).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kube::api::DynamicObject;
    use serde_json::json;

    use super::gateway_verdict;
    use crate::controller::status::Status;

    fn route(name: &str, accepted: &str) -> Option<Arc<DynamicObject>> {
        let parent = json!({"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "shared", "namespace": "gw"});
        let condition = |type_: &str, status: &str| json!({"type": type_, "status": status, "reason": "R", "message": "m", "observedGeneration": 1});
        Some(Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "TLSRoute",
                "metadata": {"name": name, "namespace": "tenants", "generation": 1},
                "spec": {"parentRefs": [parent]},
                "status": {"parents": [{"parentRef": parent, "controllerName": "example.com/gateway",
                    "conditions": [condition("Accepted", accepted), condition("ResolvedRefs", "True")]}]},
            }))
            .unwrap(),
        ))
    }

    #[test]
    fn every_route_must_be_accepted_and_a_route_just_written_waits() {
        let verdict = |routes: &[(String, Option<Arc<DynamicObject>>)]| {
            let d = gateway_verdict("tenants", routes, "TLSRoute a, b (gateway)");
            (d.status, d.reason)
        };
        let (a, b) = ("hcp-a".to_string(), "hcp-b".to_string());
        assert_eq!(
            verdict(&[
                (a.clone(), route("hcp-a", "True")),
                (b.clone(), route("hcp-b", "True"))
            ]),
            (Status::True, "Accepted".into())
        );
        assert_eq!(
            verdict(&[
                (a.clone(), route("hcp-a", "True")),
                (b.clone(), route("hcp-b", "False"))
            ]),
            (Status::False, "RouteNotAccepted".into())
        );
        // Our write made a new version its controller has not seen: even a
        // route accepted before waits, rather than being called accepted.
        assert_eq!(
            verdict(&[(a.clone(), route("hcp-a", "True")), (b.clone(), None)]),
            (Status::Unknown, "AwaitingGateway".into())
        );
    }
}
