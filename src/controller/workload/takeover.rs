//! Taking the node proxy over from the provider (k0smotron's
//! `k0smotron-haproxy`), the I/O around `render::workload::service_release`:
//! our proxy is installed beside theirs and must be ready on every node
//! before anything steers to it; then the record says the Service was
//! released, our EndpointSlice is written, and one Service update hands the
//! traffic over. The provider's proxy is removed by the provider itself, once
//! the user tells it to (the condition and the Event say how).

use k8s_openapi::api::core::v1::Service;
use kube::{
    Api, Client,
    api::{DynamicObject, Patch},
};

use super::{
    failure::{Unreachable, api_error, apply_failed, render_failed},
    objects::{apply_object, proxy_ready},
    steering, upstream,
};
use kube::runtime::events::EventType;

use crate::{
    api::{ControlPlaneIngress, UpstreamObject},
    controller::{
        apply,
        context::Context,
        status::{Desired, Status, types},
    },
    render::workload::{self, ProxyObjects, ServiceRelease, SteeringObjects, service_release},
};

/// Where the take-over stands after [`prepare`].
pub(super) enum Prepared {
    /// Our proxy is not ready on every node yet: the provider's still steers.
    Waiting(Vec<Desired>, (i32, i32)),
    /// `default/kubernetes` is released to address steering; steer now.
    /// `released_now`: this pass made the Service update.
    Steer { released_now: bool },
}

/// Install our proxy beside the provider's and, once it is ready on every
/// node, release `default/kubernetes` from the provider's proxy.
pub(super) async fn prepare(
    ctx: &Context,
    client: &Client,
    objects: &ProxyObjects,
    theirs: &UpstreamObject,
) -> Result<Prepared, Unreachable> {
    let SteeringObjects::AdvertiseAddress { endpoint_slice, .. } = &objects.steering else {
        // Validation admits no other steering with a take-over.
        return Err(Unreachable {
            reason: "InvalidSpec",
            message: "spec.upstream.takeOverNodeProxy needs spec.proxy.steering advertise-address"
                .into(),
        });
    };
    let services: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &kube::api::ApiResource::erase::<Service>(&()),
    );
    let service = Api::<Service>::namespaced(client.clone(), "default")
        .get_opt("kubernetes")
        .await
        .map_err(|e| api_error("read Service default/kubernetes", e))?;
    let release = service.as_ref().map(service_release).unwrap_or_default();
    if release == ServiceRelease::default() {
        // Released in an earlier pass: our steering holds the Service now,
        // whatever the readiness of a node that joined since.
        steering::drop_abandoned_slices(ctx, client).await?;
        return Ok(Prepared::Steer {
            released_now: false,
        });
    }

    // Our proxy first, without steering: DaemonSet, its ConfigMap and Secret.
    for object in objects.proxy_to_dynamic().map_err(render_failed)? {
        apply_object(ctx, client, object).await?;
    }
    let (ready_condition, (desired, ready), _) = proxy_ready(client, workload::NAMESPACE).await?;
    if desired == 0 || ready < desired {
        let provider = upstream::rollout(client, theirs).await?;
        let theirs_state =
            provider.map_or("missing".to_string(), |(d, r)| format!("{r}/{d} ready"));
        return Ok(Prepared::Waiting(
            vec![
                ready_condition,
                Desired::ok(
                    types::ENDPOINTS_STEERED,
                    "ManagedByUpstream",
                    format!(
                        "{theirs} ({theirs_state}) steers default/kubernetes until hcp-ingress's proxy is ready on every node ({ready}/{desired}): taking the node proxy over"
                    ),
                ),
            ],
            (desired, ready),
        ));
    }

    // The record says the Service is released before anything is written.
    steering::record_service_release(ctx, client).await?;
    // Out of k0s's stack first: its prune must never delete the Service.
    if let Some(unlabel) = release.unlabel {
        apply::patch_fields(
            ctx,
            &services,
            "Service",
            "kubernetes",
            &Patch::Merge(unlabel),
        )
        .await
        .map_err(apply_failed)?;
    }
    let Some(patch) = release.release else {
        steering::drop_abandoned_slices(ctx, client).await?;
        return Ok(Prepared::Steer {
            released_now: false,
        });
    };
    // Our EndpointSlice while the Service still selects theirs: with
    // `internalTrafficPolicy: Local` kube-proxy ignores it (no node name).
    apply_object(
        ctx,
        client,
        workload::dynamic(endpoint_slice.as_ref(), "EndpointSlice").map_err(render_failed)?,
    )
    .await?;
    apply::patch_fields(
        ctx,
        &services,
        "Service",
        "kubernetes",
        &Patch::Merge(patch),
    )
    .await
    .map_err(apply_failed)?;
    steering::drop_abandoned_slices(ctx, client).await?;
    Ok(Prepared::Steer { released_now: true })
}

/// After our steering was applied: EndpointsSteered says whether the
/// provider's proxy is still to be removed, and how; the pass that released
/// the Service says so in an Event.
pub(super) async fn report(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
    conditions: &mut [Desired],
    theirs: &UpstreamObject,
    still_deployed: Option<(i32, i32)>,
    released_now: bool,
) {
    let Some(steered) = conditions
        .iter_mut()
        .rev()
        .find(|c| c.type_ == types::ENDPOINTS_STEERED && c.status == Status::True)
    else {
        return;
    };
    let theirs_name = theirs.to_string();
    match workload::pending(still_deployed, &theirs_name) {
        Some(pending) => {
            steered.reason = "TakeOverPending".into();
            steered.message = format!("{}; {pending}", steered.message);
            if released_now {
                ctx.event(
                    cpi,
                    EventType::Normal,
                    "NodeProxyTakenOver",
                    "Workload",
                    pending,
                )
                .await;
            }
        }
        None => {
            steered.message = format!(
                "{} (taken over from {theirs_name}, which is gone)",
                steered.message
            );
        }
    }
}
