//! Act: make a plan's writes in the workload cluster, in order. The first
//! that fails stops the reconcile, except inside a steering switch: a
//! failed switch leaves the old mode steering, and the CCM override still runs.

use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, Patch},
};

use super::{
    cleanup,
    failure::{Unreachable, apply_failed, resource_of},
    plan::{Plan, Step},
    steering::write_record,
};
use crate::controller::{apply, context::Context};

/// What acting on a plan came to, when it got to the end.
pub(super) struct Acted {
    /// The switch's step that failed, and why: the rest of the switch and
    /// of the steering was skipped.
    pub switch_failed: Option<Unreachable>,
}

/// Make the writes of `plan`, in order.
pub(super) async fn act(ctx: &Context, client: &Client, plan: &Plan) -> Result<Acted, Unreachable> {
    let mut switch_failed = None;
    let mut next = 0;
    while let Some(step) = plan.steps.get(next) {
        match run(ctx, client, step).await {
            Ok(()) => next += 1,
            Err(failed) => match &plan.switch {
                Some(switch) if switch.steps.contains(&next) => {
                    switch_failed = Some(failed);
                    next = plan.ccm_from;
                }
                _ => return Err(failed),
            },
        }
    }
    Ok(Acted { switch_failed })
}

/// Make every write of `steps`, in order; the first failure stops them.
pub(super) async fn run_all(
    ctx: &Context,
    client: &Client,
    steps: &[Step],
) -> Result<(), Unreachable> {
    for step in steps {
        run(ctx, client, step).await?;
    }
    Ok(())
}

/// Make one write.
async fn run(ctx: &Context, client: &Client, step: &Step) -> Result<(), Unreachable> {
    match step {
        Step::Record(record) => write_record(ctx, client, record).await,
        Step::Apply { object, live } => {
            apply::apply(ctx, &api_of(client, object), object.clone(), live.as_ref())
                .await
                .map(drop)
                .map_err(apply_failed)
        }
        Step::ApplyFields { object, live } => {
            apply::apply_fields(ctx, &api_of(client, object), object.clone(), live.as_ref())
                .await
                .map(drop)
                .map_err(apply_failed)
        }
        Step::Force(object) => apply::force_fields(ctx, &api_of(client, object), object.clone())
            .await
            .map_err(apply_failed),
        Step::PatchService(patch) => {
            let services: Api<DynamicObject> = Api::namespaced_with(
                client.clone(),
                "default",
                &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&()),
            );
            let patch = Patch::Merge(patch.clone());
            apply::patch_fields(ctx, &services, "Service", "kubernetes", &patch)
                .await
                .map_err(apply_failed)
        }
        Step::Delete(object) => apply::delete(ctx, &api_of(client, object), object)
            .await
            .map_err(apply_failed),
        Step::RemoveProxy(mode) => cleanup::remove_proxy_of(ctx, client, *mode)
            .await
            .map(drop)
            .map_err(|message| Unreachable {
                reason: "ApplyFailed",
                message,
            }),
    }
}

/// The API of an object's kind, in its namespace.
fn api_of(client: &Client, object: &DynamicObject) -> Api<DynamicObject> {
    let namespace = object.namespace().unwrap_or_else(|| "default".into());
    Api::namespaced_with(client.clone(), &namespace, &resource_of(object))
}
