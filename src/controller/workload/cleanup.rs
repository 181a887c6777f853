//! Removal of the workload side, in the order that keeps the in-cluster API
//! path: `default/kubernetes` given back first, then what we patched, then
//! the proxy's own objects.

use k8s_openapi::api::{apps::v1::DaemonSet, core::v1::Secret};
use kube::{
    Api, ResourceExt,
    api::{ApiResource, DynamicObject},
};

use super::{ccm::release_patched_workloads, steering};
use crate::{
    api::ControlPlaneIngress,
    controller::{apply, context::Context},
    render::workload::{self, NAME, NAMESPACE},
};

/// What a removal did.
pub enum Removal {
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
    let restored = match steering::give_back(ctx, &client)
        .await
        .map_err(|u| u.message)?
    {
        Ok(summary) => summary,
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
    let config_map = || ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    // The steering record goes last: a removal cut short is resumed with it.
    for (resource, kind, name) in [
        (ApiResource::erase::<DaemonSet>(&()), "DaemonSet", NAME),
        (ApiResource::erase::<Secret>(&()), "Secret", NAME),
        (config_map(), "ConfigMap", NAME),
        (config_map(), "ConfigMap", workload::RECORD_NAME),
    ] {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &resource);
        let live = api
            .get_opt(name)
            .await
            .map_err(|e| format!("failed to read {kind} {NAMESPACE}/{name}: {e}"))?;
        // Only objects we created carry our labels.
        if let Some(live) = live.filter(|o| {
            o.labels()
                .get(crate::api::MANAGED_BY_LABEL)
                .map(String::as_str)
                == Some(crate::api::MANAGER)
        }) {
            apply::delete(ctx, &api, &live)
                .await
                .map_err(|e| e.to_string())?;
            removed.push(format!("{kind} {NAMESPACE}/{name}"));
        }
    }
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
