//! Act: make a plan's writes in the workload cluster, phase by phase. The
//! first that fails stops the reconcile, except inside a steering switch: a
//! failed switch leaves the old mode steering, and the CCM override still runs.

use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{ConfigMap, Secret},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, Patch},
};

use super::{
    error::{WorkloadError, resource_of},
    plan::{Acted, Plan, Step},
    read::get,
    steering::{self, write_record},
};
use crate::{
    api::Steering,
    controller::{apply, context::Context},
    render::workload,
};

/// Make the writes of `plan`, phase by phase.
pub(super) async fn act(
    ctx: &Context,
    client: &Client,
    plan: &Plan,
) -> Result<Acted, WorkloadError> {
    run_all(ctx, client, &plan.prepare).await?;
    let switch_failed = match &plan.switch {
        Some(switch) => run_all(ctx, client, &switch.steps).await.err(),
        None => None,
    };
    // A failed switch leaves the old mode steering: nothing is steered
    // on top of a hand-over that did not happen.
    if switch_failed.is_none() {
        run_all(ctx, client, &plan.steer).await?;
    }
    run_all(ctx, client, &plan.ccm).await?;
    run_all(ctx, client, &plan.remove).await?;
    Ok(Acted { switch_failed })
}

/// Make every write of `steps`, in order; the first failure stops them.
async fn run_all(ctx: &Context, client: &Client, steps: &[Step]) -> Result<(), WorkloadError> {
    for step in steps {
        run(ctx, client, step).await?;
    }
    Ok(())
}

/// Make one write.
async fn run(ctx: &Context, client: &Client, step: &Step) -> Result<(), WorkloadError> {
    match step {
        Step::Record(record) => write_record(ctx, client, record).await,
        Step::Apply { object, live } => {
            apply::apply(ctx, &api_of(client, object), object.clone(), live.as_ref())
                .await
                .map(drop)
                .map_err(WorkloadError::from)
        }
        Step::ApplyFields { object, live } => {
            apply::apply_fields(ctx, &api_of(client, object), object.clone(), live.as_ref())
                .await
                .map(drop)
                .map_err(WorkloadError::from)
        }
        Step::Force(object) => apply::force_fields(ctx, &api_of(client, object), object.clone())
            .await
            .map_err(WorkloadError::from),
        Step::PatchService(patch) => {
            let services: Api<DynamicObject> = Api::namespaced_with(
                client.clone(),
                "default",
                &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&()),
            );
            let patch = Patch::Merge(patch.clone());
            apply::patch_fields(ctx, &services, "Service", "kubernetes", &patch)
                .await
                .map_err(WorkloadError::from)
        }
        Step::Delete(object) => apply::delete(ctx, &api_of(client, object), object)
            .await
            .map_err(WorkloadError::from),
        Step::AwaitOtherSlice => steering::await_other_slice(client).await,
        Step::RemoveProxy(mode) => remove_proxy_of(ctx, client, *mode).await,
    }
}

/// Remove the proxy of a steering mode (its DaemonSet, Secret and
/// ConfigMap, in its namespace), where they are ours: after a switch.
async fn remove_proxy_of(
    ctx: &Context,
    client: &Client,
    mode: Steering,
) -> Result<(), WorkloadError> {
    let namespace = workload::proxy_namespace(mode);
    let objects = [
        get::<DaemonSet>(client, namespace, workload::NAME).await?,
        get::<Secret>(client, namespace, workload::NAME).await?,
        get::<ConfigMap>(client, namespace, workload::NAME).await?,
    ];
    // Only objects we created carry our labels.
    for object in objects
        .into_iter()
        .flatten()
        .filter(|o| workload::is_ours(o.labels()))
    {
        apply::delete(ctx, &api_of(client, &object), &object).await?;
    }
    Ok(())
}

/// The API of an object's kind, in its namespace.
fn api_of(client: &Client, object: &DynamicObject) -> Api<DynamicObject> {
    let namespace = object.namespace().unwrap_or_else(|| "default".into());
    Api::namespaced_with(client.clone(), &namespace, &resource_of(object))
}
