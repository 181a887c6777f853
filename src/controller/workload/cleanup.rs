//! Removal of the workload side, in the order that keeps the in-cluster API
//! path: `default/kubernetes` given back first, then what we patched, then
//! the proxy's own objects.

use std::time::Duration;

use k8s_openapi::api::{apps::v1::DaemonSet, core::v1::Secret};
use kube::{
    Api, ResourceExt,
    api::{ApiResource, DynamicObject},
};

use super::{ccm::release_patched_workloads, steering};
use crate::{
    api::{ControlPlaneIngress, Steering},
    controller::{apply, context::Context},
    render::workload::{self, NAME, NAMESPACE},
};

/// What a removal did.
pub enum Removal {
    /// default/kubernetes was given back; the proxy goes in a later pass,
    /// once kube-proxy had the handover pause to take the given-back
    /// endpoints in: what was given back, and how long until then.
    Restoring(String, Duration),
    /// default/kubernetes was given back and the proxy removed: what was done.
    Removed(String),
    /// Nothing safe could be given back: the proxy stays, and why.
    Kept(String),
}

/// Remove what we installed, in the order that keeps the in-cluster API path:
/// first give `default/kubernetes` back what steering took (from the record
/// made before the first steering write), then remove the DaemonSet, Secret
/// and ConfigMap, last the record. When nothing safe can be given back the
/// proxy stays: a cluster is never left steered at a proxy that is gone.
pub async fn cleanup(ctx: &Context, cpi: &ControlPlaneIngress) -> Result<Removal, String> {
    let client = match ctx.workload_clients.of(&ctx.client, cpi).await {
        Ok(client) => client,
        // No kubeconfig: the cluster is gone or was never reachable; nothing of ours to remove.
        Err(u) if u.reason == "KubeconfigMissing" => {
            return Ok(Removal::Removed("no workload cluster to clean up".into()));
        }
        Err(u) => return Err(u.message),
    };
    let spec = workload::proxy_spec(cpi);
    let finish_anyway = cpi
        .annotations()
        .get(workload::FINISH_WITHOUT_RESTORE_ANNOTATION)
        .is_some_and(|v| v == "true");
    let advertise = steering::advertise_address(&client, &spec)
        .await
        .map_err(|u| u.message)?;
    let restored = match steering::give_back(ctx, &client, advertise, finish_anyway)
        .await
        .map_err(|u| u.message)?
    {
        Ok(steering::GiveBack::Done(summary)) => summary,
        Ok(steering::GiveBack::Settling(summary, wait)) => {
            return Ok(Removal::Restoring(summary, wait));
        }
        Err(why) => {
            return Ok(Removal::Kept(format!(
                "kept the node proxy, default/kubernetes still points at it: {why}"
            )));
        }
    };
    // The CCM env and konnectivity-agent args point at the ingress, whose
    // route goes with this object: give them back while the API path we just
    // restored is there for the pods they restart.
    let released = release_patched_workloads(ctx, cpi, &client)
        .await
        .map_err(|u| u.message)?;
    let mut removed = Vec::new();
    for mode in [Steering::AdvertiseAddress, Steering::Service] {
        removed.extend(remove_proxy_of(ctx, &client, mode).await?);
    }
    // The steering record goes last: a removal cut short is resumed with it.
    removed
        .extend(remove_ours(ctx, &client, config_map(), NAMESPACE, workload::RECORD_NAME).await?);
    let list = |items: Vec<String>| {
        if items.is_empty() {
            "nothing".to_string()
        } else {
            items.join(", ")
        }
    };
    Ok(Removal::Removed(format!(
        "restored {restored}; gave back {}; removed {}",
        list(released),
        list(removed)
    )))
}

fn config_map() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
}

/// Remove the proxy of a steering mode (its DaemonSet, Secret and
/// ConfigMap, in its namespace), where they are ours: after a switch, and
/// at removal. Returns what was removed.
pub(super) async fn remove_proxy_of(
    ctx: &Context,
    client: &kube::Client,
    mode: Steering,
) -> Result<Vec<String>, String> {
    let namespace = workload::proxy_namespace(mode);
    let mut removed = Vec::new();
    for resource in [
        ApiResource::erase::<DaemonSet>(&()),
        ApiResource::erase::<Secret>(&()),
        config_map(),
    ] {
        removed.extend(remove_ours(ctx, client, resource, namespace, NAME).await?);
    }
    Ok(removed)
}

/// Delete one object if it is ours (only objects we created carry our labels).
async fn remove_ours(
    ctx: &Context,
    client: &kube::Client,
    resource: ApiResource,
    namespace: &str,
    name: &str,
) -> Result<Option<String>, String> {
    let kind = resource.kind.clone();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let live = api
        .get_opt(name)
        .await
        .map_err(|e| format!("failed to read {kind} {namespace}/{name}: {e}"))?;
    let Some(live) = live.filter(|o| {
        o.labels()
            .get(crate::api::MANAGED_BY_LABEL)
            .map(String::as_str)
            == Some(crate::api::MANAGER)
    }) else {
        return Ok(None);
    };
    apply::delete(ctx, &api, &live)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Some(format!("{kind} {namespace}/{name}")))
}
