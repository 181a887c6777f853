//! Source adapters at runtime: watch each enabled, installed source kind and
//! server-side apply the ControlPlaneIngress it implies, owned by the source
//! (so it is garbage-collected with it). One reconcile path for all sources.

use std::sync::Arc;

use futures::StreamExt;
use kube::{
    Api, Resource, ResourceExt,
    api::{ApiResource, DynamicObject, TypeMeta},
    runtime::{
        Controller,
        controller::{Action, Config},
        events::EventType,
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use tokio_util::sync::CancellationToken;

use super::{
    apply,
    context::{Context, SourceCaches},
    error::Error,
    reconcile::cluster_reference,
};
use crate::{
    api::{ControlPlaneIngress, MANAGED_BY_LABEL, MANAGER},
    sources::{self, SourceKind},
};

struct SourceContext {
    ctx: Arc<Context>,
    kind: SourceKind,
    resource: ApiResource,
    /// Every running adapter's cache: a source of higher precedence for the
    /// same cluster is seen before its ControlPlaneIngress exists.
    all: Arc<SourceCaches>,
}

/// Run the adapter of one source kind until `token` is cancelled, from a
/// watch cache and its stream of changes (whose task ends with `token`).
pub async fn run(
    ctx: Arc<Context>,
    kind: SourceKind,
    resource: ApiResource,
    (store, changes): (
        Store<DynamicObject>,
        impl futures::Stream<Item = Result<DynamicObject, watcher::Error>> + Send + 'static,
    ),
    all: Arc<SourceCaches>,
    concurrency: u16,
    token: CancellationToken,
) {
    let source_ctx = Arc::new(SourceContext {
        ctx,
        kind,
        resource: resource.clone(),
        all,
    });
    Controller::for_stream_with(changes, store, resource)
        .with_config(Config::default().concurrency(concurrency))
        .graceful_shutdown_on(token.cancelled_owned())
        .run(reconcile, error_policy, source_ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "source adapter event");
            }
        })
        .await;
}

fn error_policy(obj: Arc<DynamicObject>, _: &Error, ctx: Arc<SourceContext>) -> Action {
    Action::requeue(ctx.ctx.backoff.next(&backoff_key(&ctx, &obj)))
}

/// A source object's failures, counted apart from every other object's: the
/// same name in two namespaces, or of two kinds, is two objects.
fn backoff_key(sctx: &SourceContext, obj: &DynamicObject) -> String {
    format!(
        "source/{}/{}/{}",
        sctx.kind.flag_name(),
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}

#[tracing::instrument(
    name = "derive",
    skip_all,
    fields(source = %backoff_key(&sctx, &obj), generation = obj.metadata.generation)
)]
async fn reconcile(obj: Arc<DynamicObject>, sctx: Arc<SourceContext>) -> Result<Action, Error> {
    let key = backoff_key(&sctx, &obj);
    let result = derive_and_apply(obj, &sctx).await;
    // A success starts the next failure's backoff from the shortest delay again.
    if result.is_ok() {
        sctx.ctx.backoff.reset(&key);
    }
    result
}

async fn derive_and_apply(obj: Arc<DynamicObject>, sctx: &SourceContext) -> Result<Action, Error> {
    let ctx = &sctx.ctx;
    ctx.caches_ready().await?;
    ctx.cpis.synced().await;
    let mut obj = (*obj).clone();
    // List items may come without apiVersion/kind; the adapter needs them.
    obj.types = Some(TypeMeta {
        api_version: sctx.resource.api_version.clone(),
        kind: sctx.resource.kind.clone(),
    });
    let namespace = obj.namespace().unwrap_or_default();
    let existing = ctx
        .cpis
        .get(&ObjectRef::new(&obj.name_any()).within(&namespace));
    let ours = |cpi: &ControlPlaneIngress| {
        cpi.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGER)
            && cpi
                .owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && Some(&o.uid) == obj.metadata.uid.as_ref())
    };
    match sources::derive(&obj) {
        Ok(mut cpi) => {
            // In a shard, the derived object carries the source's shard
            // labels: this instance's watch selects it, and no other's.
            if let Some(shard) = &ctx.settings.shard {
                let labels = cpi.metadata.labels.get_or_insert_default();
                labels.extend(sources::shard_labels(&shard.keys, obj.labels()));
            }
            if let Some(existing) = existing.as_deref().filter(|e| !ours(e)) {
                let note = format!(
                    "{} already exists and is not derived from this object: it is left alone; delete it or rename one of them",
                    crate::render::describe(existing)
                );
                publish(sctx, &obj, "ControlPlaneIngressExists", note).await;
                return Ok(Action::await_change());
            }
            if let Some(winner) =
                described_elsewhere(sctx, &obj, &cpi, existing.as_deref().filter(|e| ours(e)))
            {
                // One ControlPlaneIngress per cluster: this source yields.
                let note = format!(
                    "cluster {} is described by {winner}: no ControlPlaneIngress is derived from this object",
                    cpi.spec.cluster_name
                );
                if let Some(existing) = existing.as_deref().filter(|e| ours(e)) {
                    tracing::info!(source = %sources::describe(&sctx.resource.kind, &obj.metadata), %winner, "another source describes the cluster: deleting the derived ControlPlaneIngress");
                    delete_cpi(ctx, &namespace, existing).await?;
                }
                publish_as(
                    sctx,
                    &obj,
                    EventType::Normal,
                    "ClusterDescribedElsewhere",
                    note,
                )
                .await;
                return Ok(Action::await_change());
            }
            let cluster = ctx.cluster_of(&cpi);
            if let Some(cluster) = &cluster
                && let Some(uid) = cluster.uid()
                && !cpi.owner_references().iter().any(|o| o.uid == uid)
            {
                cpi.metadata
                    .owner_references
                    .get_or_insert_default()
                    .push(cluster_reference(cluster, uid));
            }
            let desired: DynamicObject =
                serde_json::from_value(serde_json::to_value(&cpi).expect("serializes"))
                    .expect("a ControlPlaneIngress is an object");
            let current = existing.map(|e| {
                serde_json::from_value::<DynamicObject>(
                    serde_json::to_value(&*e).expect("serializes"),
                )
                .expect("object")
            });
            let api = Api::namespaced_with(
                ctx.client.clone(),
                &namespace,
                &ApiResource::erase::<ControlPlaneIngress>(&()),
            );
            apply::apply(ctx, &api, desired, current.as_ref()).await?;
            // Derived ones of lower precedence for the same cluster go.
            for other in ctx.cpis.state().iter().filter(|other| {
                sources::same_cluster(other, &cpi)
                    && SourceKind::of_derived(other).is_some()
                    && !sources::yields_to(sctx.kind, other, Some(&cpi))
            }) {
                tracing::info!(cluster = %cpi.spec.cluster_name, superseded = %other.name_any(), "a source of higher precedence describes the cluster: deleting the other derived ControlPlaneIngress");
                delete_cpi(ctx, &namespace, other).await?;
            }
            // Nothing here watches Clusters: one created after its source (k0rdent
            // creates it from the ClusterDeployment) would get its owner
            // reference only at the next resync. Look again soon instead.
            if ctx.capi_installed() && cluster.is_none() {
                return Ok(Action::requeue(ctx.settings.retry));
            }
            Ok(Action::requeue(ctx.settings.resync))
        }
        Err(error) if error.is_not_requested() => {
            // The object no longer asks for an ingress: remove only what we derived from it.
            if let Some(existing) = existing.filter(|e| ours(e)) {
                tracing::info!(source = %sources::describe(&sctx.resource.kind, &obj.metadata), "ingress no longer requested: deleting the derived ControlPlaneIngress");
                delete_cpi(ctx, &namespace, &existing).await?;
            }
            Ok(Action::await_change())
        }
        Err(error) => {
            // Invalid: say so on the source object; keep whatever exists.
            tracing::warn!(%error, "source object asks for an invalid ingress");
            publish(
                sctx,
                &obj,
                "InvalidIngress",
                format!("{error}; nothing was changed"),
            )
            .await;
            Ok(Action::await_change())
        }
    }
}

/// Another ControlPlaneIngress, or a source of higher precedence, that
/// describes the same cluster as `cpi` (derived from `obj`): `Kind ns/name`.
fn described_elsewhere(
    sctx: &SourceContext,
    obj: &DynamicObject,
    cpi: &ControlPlaneIngress,
    ours: Option<&ControlPlaneIngress>,
) -> Option<String> {
    let namespace = obj.namespace();
    let cpis = sctx.ctx.cpis.state();
    let other = cpis.iter().find(|other| {
        sources::same_cluster(other, cpi) && sources::yields_to(sctx.kind, other, ours)
    });
    if let Some(other) = other {
        return Some(crate::render::describe(other));
    }
    // A ClusterDeployment is named after its cluster: k0rdent's own source
    // is found before its ControlPlaneIngress exists.
    let k0rdent = SourceKind::ClusterDeployment;
    if k0rdent.precedence() < sctx.kind.precedence()
        && let Some((store, resource)) = sctx.all.get(&k0rdent)
    {
        let key = ObjectRef::new_with(&cpi.spec.cluster_name, resource.clone())
            .within(&namespace.clone().unwrap_or_default());
        if let Some(deployment) = store.get(&key) {
            let mut deployment = (*deployment).clone();
            deployment.types = Some(TypeMeta {
                api_version: resource.api_version.clone(),
                kind: resource.kind.clone(),
            });
            if sources::derive(&deployment).is_ok() {
                return Some(sources::describe(&resource.kind, &deployment.metadata));
            }
        }
    }
    None
}

async fn delete_cpi(
    ctx: &Context,
    namespace: &str,
    existing: &ControlPlaneIngress,
) -> Result<(), Error> {
    let api = Api::namespaced_with(
        ctx.client.clone(),
        namespace,
        &ApiResource::erase::<ControlPlaneIngress>(&()),
    );
    let current: DynamicObject =
        serde_json::from_value(serde_json::to_value(existing).expect("serializes"))
            .expect("object");
    apply::delete(ctx, &api, &current).await
}

async fn publish(sctx: &SourceContext, obj: &DynamicObject, reason: &str, note: String) {
    publish_as(sctx, obj, EventType::Warning, reason, note).await;
}

async fn publish_as(
    sctx: &SourceContext,
    obj: &DynamicObject,
    type_: EventType,
    reason: &str,
    note: String,
) {
    if sctx.ctx.leader.is_leader() {
        sctx.ctx
            .publish(
                obj.object_ref(&sctx.resource),
                type_,
                reason,
                "Derive",
                note,
            )
            .await;
    }
}
