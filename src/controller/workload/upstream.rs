//! A workload cluster whose control plane provider ships its own node
//! proxy (k0smotron's HAProxy, Steward's tcp-proxy): hcp-ingress installs no
//! second one and never writes `default/kubernetes`; it reports on the
//! provider's proxy and applies the CCM override.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use kube::{
    Api,
    api::{ApiResource, DynamicObject},
};

use super::{
    act, ccm,
    failure::{Unreachable, api_error},
    outcome::{Outcome, not_initialized, unreachable, workload_key},
};
use crate::api::{ControlPlaneIngress, UpstreamObject};
use crate::controller::{
    context::Context,
    status::{Desired, types},
};

/// The control plane's provider runs its own node proxy and owns
/// `default/kubernetes`: leave both to it, report on its proxy, and do what
/// it does not (the CCM override).
pub(super) async fn complement(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
    cluster: Option<&DynamicObject>,
    upstream: &UpstreamObject,
) -> Outcome {
    if let Some(waiting) = not_initialized(ctx, cluster) {
        return waiting;
    }
    let provider = cpi
        .spec
        .upstream
        .as_ref()
        .map_or("the provider", |u| u.provider.as_str());
    let result = async {
        let client = ctx.workload_clients.of(&ctx.client, cpi).await?;
        let mut conditions = vec![Desired::ok(
            types::WORKLOAD_REACHABLE,
            "Connected",
            "the workload API answers through the kubeconfig Secret",
        )];
        let live = rollout(&client, upstream).await?;
        let (desired, ready) = live.unwrap_or((0, 0));
        let leave = format!("hcp-ingress installs no node proxy and leaves default/kubernetes to {provider}");
        let mut requeue = None;
        conditions.push(match live {
            Some(_) if desired > 0 && ready == desired => Desired::ok(
                types::PROXY_READY,
                "ManagedByUpstream",
                format!("{provider}'s {upstream} runs the node proxy: {ready}/{desired} ready; {leave}"),
            ),
            Some(_) => {
                requeue = Some(ctx.settings.retry);
                Desired::failed(
                    types::PROXY_READY,
                    "UpstreamProxyNotReady",
                    format!("{provider}'s {upstream}: {ready}/{desired} ready; {leave}"),
                )
            }
            None => {
                requeue = Some(ctx.settings.retry);
                Desired::failed(
                    types::PROXY_READY,
                    "UpstreamProxyMissing",
                    format!("waiting for {provider} to create {upstream} in the workload cluster; {leave}"),
                )
            }
        });
        conditions.push(Desired::ok(
            types::ENDPOINTS_STEERED,
            "ManagedByUpstream",
            format!("default/kubernetes is steered by {provider}'s node proxy, not by hcp-ingress"),
        ));
        let (steps, configured) = ccm::plan(cpi, &ccm::observe(&client, cpi).await?);
        act::run_all(ctx, &client, &steps).await?;
        conditions.push(configured);
        Ok::<_, Unreachable>(Outcome {
            conditions,
            proxy: None,
            requeue,
        })
    }
    .await;
    match result {
        Ok(outcome) => {
            ctx.backoff.reset(&workload_key(cpi));
            outcome
        }
        Err(u) => unreachable(ctx, cpi, u),
    }
}

/// Desired and ready pods of the provider's node proxy; `None` when it does not exist.
pub(super) async fn rollout(
    client: &kube::Client,
    upstream: &UpstreamObject,
) -> Result<Option<(i32, i32)>, Unreachable> {
    let namespace = upstream.namespace.as_deref().unwrap_or("default");
    let resource = match upstream.kind.as_str() {
        "Deployment" => ApiResource::erase::<Deployment>(&()),
        _ => ApiResource::erase::<DaemonSet>(&()),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let live = api
        .get_opt(&upstream.name)
        .await
        .map_err(|e| api_error(&format!("read {upstream}"), e))?;
    Ok(live.as_ref().map(|o| upstream_rollout(&upstream.kind, o)))
}

/// Desired and ready pods of an upstream node proxy (DaemonSet or Deployment).
fn upstream_rollout(kind: &str, object: &DynamicObject) -> (i32, i32) {
    let number = |field: &str| {
        object
            .data
            .pointer(&format!("/status/{field}"))
            .and_then(|v| v.as_i64())
            .unwrap_or(0) as i32
    };
    match kind {
        "Deployment" => (
            object
                .data
                .pointer("/spec/replicas")
                .and_then(|v| v.as_i64())
                .unwrap_or(1) as i32,
            number("readyReplicas"),
        ),
        _ => (number("desiredNumberScheduled"), number("numberReady")),
    }
}
