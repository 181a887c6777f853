//! Our objects in the workload cluster, one at a time: applying one, and
//! the proxy DaemonSet's own report. Shared by the install and the take-over.

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::{Api, Client, ResourceExt, api::DynamicObject};

use super::failure::{Unreachable, api_error, apply_failed, resource_of};
use crate::{
    controller::{
        apply,
        context::Context,
        status::{Desired, types},
    },
    render::workload::{NAME, NAMESPACE},
};

/// The proxy DaemonSet's own report: ProxyReady, and its desired and ready nodes.
pub(super) async fn proxy_ready(client: &Client) -> Result<(Desired, (i32, i32)), Unreachable> {
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let ds = daemon_sets
        .get_opt(NAME)
        .await
        .map_err(|e| api_error("read the proxy DaemonSet", e))?;
    let (desired, ready) = ds
        .and_then(|d| d.status)
        .map(|s| (s.desired_number_scheduled, s.number_ready))
        .unwrap_or((0, 0));
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
    Ok((condition, (desired, ready)))
}

/// Apply one object; returns what was there before (what the write was decided on).
pub(super) async fn apply_object(
    ctx: &Context,
    client: &Client,
    object: DynamicObject,
) -> Result<Option<DynamicObject>, Unreachable> {
    let resource = resource_of(&object);
    let namespace = object.namespace().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource);
    let name = object.name_any();
    let existing = api
        .get_opt(&name)
        .await
        .map_err(|e| api_error(&format!("read {} {namespace}/{name}", resource.kind), e))?;
    // The `kubernetes` Service is not ours: apply only our fields, no marker annotation.
    let result = if resource.kind == "Service" {
        apply::apply_fields(ctx, &api, object, existing.as_ref()).await
    } else {
        apply::apply(ctx, &api, object, existing.as_ref()).await
    };
    result.map(|_| existing).map_err(apply_failed)
}
