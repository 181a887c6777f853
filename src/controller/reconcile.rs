//! One reconciliation of a ControlPlaneIngress, as stages:
//! fetch (stores, no API reads) → validate and build (pure, `render`) →
//! apply (server-side apply, only what differs) → status. The stages stay
//! in one file, in the order they run.

use std::{sync::Arc, time::Instant};

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::OwnerReference, jiff::Timestamp};
use kube::{
    Api, Resource, ResourceExt,
    api::{DynamicObject, Patch, PatchParams},
    runtime::{controller::Action, events::EventType},
};
use serde_json::json;

use super::{
    context::Context,
    endpoint,
    error::Error,
    route,
    status::{self, Desired, types},
    workload,
};
use crate::{
    api::{
        ControlPlaneIngress, ControlPlaneIngressStatus, MANAGER, ProxyStatus, upstream::CapiCluster,
    },
    render::{self, RenderError},
};

/// CAPI's pause annotation.
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";
/// What `clusterctl move` puts on each object it deletes from the source
/// management cluster once the object exists in the target.
pub const DELETE_FOR_MOVE_ANNOTATION: &str = "clusterctl.cluster.x-k8s.io/delete-for-move";

/// Entry point for the kube-runtime Controller. Every log line of a
/// reconciliation carries the object, its generation and, when traces are
/// exported, the trace id.
#[tracing::instrument(
    name = "reconcile",
    skip_all,
    fields(object = %key(&cpi), generation = cpi.metadata.generation, trace_id = tracing::field::Empty)
)]
pub async fn reconcile(cpi: Arc<ControlPlaneIngress>, ctx: Arc<Context>) -> Result<Action, Error> {
    if let Some(trace_id) = crate::telemetry::trace_id() {
        tracing::Span::current().record("trace_id", tracing::field::display(trace_id));
    }
    let _in_flight = ctx.metrics.in_flight();
    let started = Instant::now();
    let result = with_finalizer(cpi.clone(), &ctx).await;
    ctx.metrics.reconciled(
        started.elapsed(),
        result.as_ref().map(drop).map_err(Error::metric_label),
    );
    match &result {
        Ok(_) => ctx.backoff.reset(&key(&cpi)),
        Err(Error::NotLeader | Error::Stale) => {}
        Err(error) => {
            tracing::warn!(object = %render::describe(&cpi), %error, "reconcile failed");
            ctx.event(
                cpi.as_ref(),
                EventType::Warning,
                error.metric_label_camel(),
                "Reconcile",
                error.to_string(),
            )
            .await;
        }
    }
    result
}

/// kube-runtime's error policy: per-object exponential backoff.
pub fn error_policy(cpi: Arc<ControlPlaneIngress>, _error: &Error, ctx: Arc<Context>) -> Action {
    Action::requeue(ctx.backoff.next(&key(&cpi)))
}

fn key(cpi: &ControlPlaneIngress) -> String {
    format!("{}/{}", cpi.namespace().unwrap_or_default(), cpi.name_any())
}

/// Finalizer that holds deletion until the workload side is cleaned up.
pub const FINALIZER: &str = "hcp-ingress.dev/workload-cleanup";

async fn with_finalizer(cpi: Arc<ControlPlaneIngress>, ctx: &Context) -> Result<Action, Error> {
    // The pause is read from the Cluster cache: a cache still filling would
    // take a paused Cluster for an absent one and write.
    ctx.caches_ready().await?;
    // Paused objects get no writes at all, the finalizer included.
    if cpi.metadata.deletion_timestamp.is_none()
        && let Some(reason) = paused(&cpi, ctx.cluster_of(&cpi).as_deref())
    {
        let conditions = vec![Desired::ok(types::PAUSED, "Paused", reason)];
        write_status(ctx, &cpi, &conditions, None, true).await?;
        return Ok(Action::await_change());
    }
    ctx.leader.ensure_leader()?;
    let api: Api<ControlPlaneIngress> =
        Api::namespaced(ctx.client.clone(), &cpi.namespace().unwrap_or_default());
    let ours = cpi.finalizers().iter().any(|f| f == FINALIZER);
    if cpi.metadata.deletion_timestamp.is_some() {
        if !ours {
            return Ok(Action::await_change());
        }
        // Moved, not removed: the target management cluster's controller
        // carries on with the same workload cluster, so nothing there is
        // given back or removed, and the object is not written either:
        // clusterctl drops every finalizer right after its delete (a write
        // of ours could race it and recreate the object).
        if moved_away(&cpi) {
            let note = format!(
                "clusterctl move deletes this copy: workload cluster {} is left as it is for the target management cluster",
                cpi.spec.cluster_name
            );
            tracing::info!("{note}");
            ctx.event(cpi.as_ref(), EventType::Normal, "MovedAway", "Delete", note)
                .await;
            return Ok(Action::await_change());
        }
        let (action, finished) = cleanup(&cpi, ctx).await?;
        if finished {
            set_finalizer(&api, &cpi, false).await?;
        }
        return Ok(action);
    }
    // One per cluster: a derived one that another one outranks goes, even
    // when it was made before the other's source was seen.
    // Only a derived one can be outranked: the cache is not copied for the others.
    let all = match crate::sources::SourceKind::of_derived(&cpi) {
        Some(_) => ctx.cpis.state(),
        None => Vec::new(),
    };
    if let Some(winner) = crate::sources::superseded_by(&cpi, all.iter().map(|c| c.as_ref())) {
        let note = format!(
            "cluster {} is described by {}: this derived ControlPlaneIngress is deleted",
            cpi.spec.cluster_name,
            render::describe(winner)
        );
        tracing::info!(object = %render::describe(&cpi), %note, "superseded");
        ctx.event(&*cpi, EventType::Normal, "Superseded", "Delete", note)
            .await;
        ctx.metrics.write("ControlPlaneIngress", "delete");
        return match api.delete(&cpi.name_any(), &Default::default()).await {
            Ok(_) => Ok(Action::await_change()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(Action::await_change()),
            Err(source) => Err(Error::Delete {
                kind: "ControlPlaneIngress".into(),
                name: key(&cpi),
                source,
            }),
        };
    }
    if !ours {
        set_finalizer(&api, &cpi, true).await?;
    }
    reconcile_stages(&cpi, ctx).await
}

/// Field manager of our finalizer alone: applying it with [`MANAGER`] would
/// drop the spec fields a source adapter applied with that manager.
pub const FINALIZER_MANAGER: &str = "hcp-ingress-finalizer";

/// Add or remove our finalizer with server-side apply: a set-list entry owned
/// by its own manager, so a stale cached copy can neither conflict nor
/// remove anyone else's finalizer.
async fn set_finalizer(
    api: &Api<ControlPlaneIngress>,
    cpi: &ControlPlaneIngress,
    present: bool,
) -> Result<(), Error> {
    let finalizers: Vec<&str> = if present { vec![FINALIZER] } else { Vec::new() };
    let patch = json!({
        "apiVersion": ControlPlaneIngress::api_version(&()),
        "kind": ControlPlaneIngress::kind(&()),
        "metadata": {"name": cpi.name_any(), "finalizers": finalizers},
    });
    let name = cpi.name_any();
    let applied = api
        .patch(
            &name,
            &PatchParams::apply(FINALIZER_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await;
    match applied {
        Ok(live) if present || !live.finalizers().iter().any(|f| f == FINALIZER) => Ok(()),
        // Added by an earlier version with a JSON patch (another manager owns
        // it): remove it by position, checked by value.
        Ok(live) => {
            let index = live.finalizers().iter().position(|f| f == FINALIZER);
            let Some(index) = index else { return Ok(()) };
            let path = format!("/metadata/finalizers/{index}");
            let ops: json_patch::Patch = serde_json::from_value(json!([
                {"op": "test", "path": path, "value": FINALIZER},
                {"op": "remove", "path": path},
            ]))
            .expect("a valid JSON patch");
            api.patch(&name, &PatchParams::default(), &Patch::<()>::Json(ops))
                .await
                .map(drop)
                .map_err(|e| Error::Finalizer(e.to_string()))
        }
        // Gone already: nothing holds it.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        // Server-side apply creates what is missing: for an object deleted
        // meanwhile it tries to create one without a spec, which the schema
        // refuses. Gone is what a removal wants.
        Err(_) if !present && matches!(api.get_opt(&name).await, Ok(None)) => Ok(()),
        Err(e) => Err(Error::Finalizer(e.to_string())),
    }
}

/// The removal of the workload side; `true` with the action when it is
/// finished (the finalizer may go).
async fn cleanup(cpi: &ControlPlaneIngress, ctx: &Context) -> Result<(Action, bool), Error> {
    // The workload side is per cluster: while another ControlPlaneIngress
    // describes the cluster, what is installed there is its to keep.
    let all = ctx.cpis.state();
    if let Some(other) = all
        .iter()
        .find(|o| crate::sources::same_cluster(o, cpi) && o.metadata.deletion_timestamp.is_none())
    {
        let note = format!(
            "the workload cluster is left as it is: {} describes cluster {}",
            render::describe(other),
            cpi.spec.cluster_name
        );
        ctx.event(cpi, EventType::Normal, "WorkloadKept", "Delete", note)
            .await;
        return Ok((Action::await_change(), true));
    }
    match workload::cleanup(ctx, cpi)
        .await
        .map_err(|e| Error::Cleanup(e.to_string()))?
    {
        workload::Removal::Removed(note) => {
            ctx.event(cpi, EventType::Normal, "WorkloadCleanedUp", "Delete", note)
                .await;
            Ok((Action::await_change(), true))
        }
        // Given back: the proxy goes in a later pass, once kube-proxy had
        // the handover pause to take the given-back endpoints in.
        workload::Removal::Restoring(_, wait) => Ok((Action::requeue(wait), false)),
        // The deletion waits: removing the route and the proxy now would cut
        // every pod of the workload cluster off its API server.
        workload::Removal::Kept(note) => {
            let conditions = vec![Desired::failed(
                types::ENDPOINTS_STEERED,
                "RestoreNotPossible",
                note.clone(),
            )];
            write_status(ctx, cpi, &conditions, None, true).await?;
            Err(Error::Cleanup(note))
        }
    }
}

async fn reconcile_stages(cpi: &ControlPlaneIngress, ctx: &Context) -> Result<Action, Error> {
    // Fetch: everything from the watch caches (filled: see with_finalizer).
    let cluster = ctx.cluster_of(cpi);

    // Validate and build: pure.
    let desired = match render::management(cpi) {
        Ok(objects) => objects,
        Err(RenderError::Invalid { errors, .. }) => {
            let message = format!("invalid spec, nothing was changed: {errors}");
            ctx.event(
                cpi,
                EventType::Warning,
                "InvalidSpec",
                "Validate",
                message.clone(),
            )
            .await;
            let conditions = vec![Desired::failed(types::ROUTE_READY, "InvalidSpec", message)];
            write_status(ctx, cpi, &conditions, None, true).await?;
            return Ok(Action::await_change());
        }
        Err(other) => return Err(other.into()),
    };

    // Apply.
    let mut conditions = Vec::new();
    let mut blockers = Vec::new();
    if let Some(owner) = cluster_owner(cpi, cluster.as_deref()) {
        ensure_owner(ctx, cpi, owner).await?;
    } else if ctx.capi_installed() && cluster.is_none() {
        blockers.push(Desired::failed(
            "Cluster",
            "ClusterNotFound",
            format!(
                "Cluster {} not found in namespace {}",
                cpi.spec.cluster_name,
                cpi.namespace().unwrap_or_default()
            ),
        ));
    }
    conditions.push(route::apply(ctx, cpi, &desired).await?);
    if let Some(condition) = preflight(ctx, cpi).await {
        conditions.push(condition);
    }
    route::delete_stale(ctx, cpi, &desired).await?;

    // Check through the ingress.
    let route_ok = conditions.iter().all(|c| c.status == status::Status::True);
    conditions.extend(endpoint::conditions(ctx, cpi, route_ok).await);

    // The workload cluster.
    let outcome = workload::reconcile(ctx, cpi, cluster.as_deref()).await;
    for c in outcome
        .conditions
        .iter()
        .filter(|c| c.status == status::Status::False)
    {
        ctx.event(
            cpi,
            EventType::Warning,
            &c.reason,
            "Workload",
            c.message.clone(),
        )
        .await;
    }
    conditions.extend(outcome.conditions);

    let healthy =
        conditions.iter().all(|c| c.status == status::Status::True) && blockers.is_empty();
    conditions.extend(blockers);
    write_status(ctx, cpi, &conditions, outcome.proxy, false).await?;
    let next = if healthy {
        ctx.settings.resync
    } else {
        ctx.settings.retry
    };
    Ok(Action::requeue(
        outcome.requeue.map_or(next, |r| r.min(next)),
    ))
}

/// What the control plane's own spec lacks for the path to work, for a
/// ControlPlaneIngress derived from it (none for one a user wrote).
async fn preflight(ctx: &Context, cpi: &ControlPlaneIngress) -> Option<Desired> {
    let (kind, source) = ctx.source_of(cpi)?;
    let missing = crate::sources::preflight::preflight(kind, &source, cpi);
    let (_, kind_name) = kind.group_kind();
    let object = crate::sources::describe(kind_name, &source.metadata);
    if missing.is_empty() {
        return Some(Desired::ok(
            types::PREFLIGHT,
            "Passed",
            format!("{object} has what the path through the shared ingress needs"),
        ));
    }
    let message = format!(
        "{object} needs: {}",
        missing
            .iter()
            .map(|m| format!("{}: {}", m.field, m.message))
            .collect::<Vec<_>>()
            .join("; ")
    );
    ctx.event(
        cpi,
        EventType::Warning,
        "PreflightFailed",
        "Preflight",
        message.clone(),
    )
    .await;
    Some(Desired::failed(
        types::PREFLIGHT,
        "MissingSettings",
        message,
    ))
}

/// Whether this deletion is `clusterctl move` taking the object away.
pub fn moved_away(cpi: &ControlPlaneIngress) -> bool {
    cpi.annotations().contains_key(DELETE_FOR_MOVE_ANNOTATION)
}

/// Why reconciliation is paused, if it is: the Cluster's `spec.paused` or the
/// CAPI pause annotation on the Cluster or the ControlPlaneIngress.
pub fn paused(cpi: &ControlPlaneIngress, cluster: Option<&DynamicObject>) -> Option<String> {
    if cpi.annotations().contains_key(PAUSED_ANNOTATION) {
        return Some(format!(
            "the ControlPlaneIngress carries {PAUSED_ANNOTATION}"
        ));
    }
    let cluster = cluster?;
    if cluster.annotations().contains_key(PAUSED_ANNOTATION) {
        return Some(format!(
            "Cluster {} carries {PAUSED_ANNOTATION}",
            cluster.name_any()
        ));
    }
    CapiCluster::lenient(cluster)
        .paused
        .then(|| format!("Cluster {} has spec.paused: true", cluster.name_any()))
}

/// The owner reference to the CAPI Cluster (GC and `clusterctl move`), when it
/// is missing. A ControlPlaneIngress derived from a source gets it from the
/// source adapter instead, which owns its metadata.
fn cluster_owner(
    cpi: &ControlPlaneIngress,
    cluster: Option<&DynamicObject>,
) -> Option<OwnerReference> {
    let cluster = cluster?;
    let uid = cluster.uid()?;
    let owners = cpi.owner_references();
    let derived = owners.iter().any(|o| o.controller == Some(true));
    if derived || owners.iter().any(|o| o.uid == uid) {
        return None;
    }
    Some(cluster_reference(cluster, uid))
}

/// A non-controller owner reference to a CAPI Cluster.
pub fn cluster_reference(cluster: &DynamicObject, uid: String) -> OwnerReference {
    let types = cluster.types.clone().unwrap_or_default();
    OwnerReference {
        api_version: types.api_version,
        kind: types.kind,
        name: cluster.name_any(),
        uid,
        controller: Some(false),
        block_owner_deletion: Some(true),
    }
}

async fn ensure_owner(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
    owner: OwnerReference,
) -> Result<(), Error> {
    ctx.leader.ensure_leader()?;
    let api: Api<ControlPlaneIngress> =
        Api::namespaced(ctx.client.clone(), &cpi.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": ControlPlaneIngress::api_version(&()),
        "kind": ControlPlaneIngress::kind(&()),
        "metadata": {"name": cpi.name_any(), "ownerReferences": [owner]},
    });
    ctx.metrics.write("ControlPlaneIngress", "apply");
    api.patch(
        &cpi.name_any(),
        &PatchParams::apply(MANAGER),
        &Patch::Apply(&patch),
    )
    .await
    .map(drop)
    .map_err(|source| Error::Owner {
        object: render::describe(cpi),
        source,
    })
}

/// Merge the conditions into the status and write it, only when it changed.
/// `partial`: a stage stopped early (pause, invalid spec): conditions it did
/// not recompute keep their last value.
async fn write_status(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
    desired: &[Desired],
    proxy: Option<(i32, i32)>,
    partial: bool,
) -> Result<(), Error> {
    let current = cpi.status.clone().unwrap_or_default();
    let paused = desired
        .iter()
        .any(|c| c.type_ == types::PAUSED && c.status == status::Status::True);
    let mut all = desired.to_vec();
    if !paused {
        all.push(Desired::failed(types::PAUSED, "NotPaused", "reconciling"));
    }
    let summary = if paused {
        Desired::unknown(types::READY, "Paused", "reconciliation is paused")
    } else {
        let mut inputs = all.clone();
        if partial {
            inputs.extend(
                current
                    .conditions
                    .iter()
                    .filter(|c| !all.iter().any(|d| d.type_ == c.type_) && c.type_ != types::READY)
                    .map(Desired::from_condition),
            );
        }
        inputs.retain(|c| c.type_ != types::PAUSED);
        status::summarize(&inputs)
    };
    all.push(summary);
    // Blockers ("Cluster") feed the summary only.
    all.retain(|c| c.type_ != "Cluster");
    let conditions = status::merge(
        &current.conditions,
        &all,
        cpi.metadata.generation,
        Timestamp::now(),
        |_| partial,
    );
    let spec = &cpi.spec;
    let new = ControlPlaneIngressStatus {
        observed_generation: cpi.metadata.generation,
        conditions,
        flavor: Some(spec.flavor()),
        endpoint: Some(format!(
            "https://{}:{}",
            spec.ingress.api_host, spec.ingress.port
        )),
        proxy: match proxy {
            Some((desired_nodes, ready_nodes)) => Some(ProxyStatus {
                desired_nodes,
                ready_nodes,
            }),
            None if partial => current.proxy.clone(),
            None => None,
        },
    };
    if current == new {
        return Ok(());
    }
    ctx.leader.ensure_leader()?;
    let api: Api<ControlPlaneIngress> =
        Api::namespaced(ctx.client.clone(), &cpi.namespace().unwrap_or_default());
    ctx.metrics.write("ControlPlaneIngress", "status");
    api.patch_status(
        &cpi.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": new})),
    )
    .await
    .map(drop)
    .map_err(|source| Error::Status {
        object: render::describe(cpi),
        source,
    })
}
