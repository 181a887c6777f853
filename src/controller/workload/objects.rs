//! Our objects in the workload cluster, one at a time: applying one, and
//! the proxy DaemonSet's own report. Shared by the install and the take-over.

use k8s_openapi::api::{apps::v1::DaemonSet, core::v1::Node};
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, ListParams},
};

use super::failure::{Unreachable, api_error, apply_failed, resource_of};
use crate::{
    controller::{
        apply,
        context::Context,
        status::{Desired, types},
    },
    render::workload::NAME,
};

/// Whether the workload cluster has any Node.
pub(super) async fn any_node(client: &Client) -> Result<bool, Unreachable> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list_metadata(&ListParams::default().limit(1))
        .await
        .map_err(|e| api_error("list Nodes", e))?;
    Ok(!list.items.is_empty())
}

/// The proxy DaemonSet's own report: ProxyReady, its desired and ready
/// nodes, and whether it is rolled out (the DaemonSet controller saw the
/// current template, and every scheduled node runs an updated, ready pod).
pub(super) async fn proxy_ready(
    client: &Client,
    namespace: &str,
) -> Result<(Desired, (i32, i32), bool), Unreachable> {
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), namespace);
    let ds = daemon_sets
        .get_opt(NAME)
        .await
        .map_err(|e| api_error("read the proxy DaemonSet", e))?;
    let generation = ds.as_ref().and_then(|d| d.metadata.generation);
    let status = ds.and_then(|d| d.status);
    let rolled_out = status.as_ref().is_some_and(|s| {
        s.observed_generation >= generation
            && s.desired_number_scheduled > 0
            && s.number_ready >= s.desired_number_scheduled
            && s.updated_number_scheduled.unwrap_or(0) >= s.desired_number_scheduled
    });
    let (desired, ready) = status
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
    Ok((condition, (desired, ready), rolled_out))
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
