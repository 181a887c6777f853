//! Removal of the workload side: read what is there, decide the writes
//! (`decide::removal`, in the order that keeps the in-cluster API path) and
//! make them with `act`, as an install does.

use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{ConfigMap, Endpoints, Pod, Secret, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, ListParams},
};

pub use super::decide::Removal;
use super::{
    act, decide,
    decide::RemovalFacts,
    error::{WorkloadError, api_error},
    read::{get, list, typed},
    steering::{self, CONTROLLER_SLICES, read_record, unix_now},
};
use crate::{
    api::{ControlPlaneIngress, MANAGER, Steering},
    controller::context::Context,
    render::workload::{self, NAME, NAMESPACE, RECORD_NAME},
};

/// Remove what we installed, in the order that keeps the in-cluster API path:
/// first give `default/kubernetes` back what steering took (from the record
/// made before the first steering write), then the CCM workloads we
/// patched and the endpoint we published, then the DaemonSet, Secret and
/// ConfigMap, last the record. When nothing safe can be given back the proxy
/// stays: a cluster is never left steered at a proxy that is gone.
pub async fn cleanup(ctx: &Context, cpi: &ControlPlaneIngress) -> Result<Removal, WorkloadError> {
    let client = match ctx.workload_clients.of(&ctx.client, cpi).await {
        Ok(client) => client,
        // No kubeconfig: the cluster is gone or was never reachable; nothing of ours to remove.
        Err(WorkloadError::KubeconfigMissing(_)) => {
            return Ok(Removal::Removed("no workload cluster to clean up".into()));
        }
        Err(other) => return Err(other),
    };
    let facts = observe(cpi, &client).await?;
    let (plan, removal) = decide::removal(&facts)?;
    act::act(ctx, &client, &plan).await?;
    Ok(removal)
}

/// What a removal reads: `default/kubernetes` and the record, what our
/// field manager patched, and our own objects.
async fn observe(
    cpi: &ControlPlaneIngress,
    client: &Client,
) -> Result<RemovalFacts, WorkloadError> {
    let spec = workload::proxy_spec(cpi);
    let finish_anyway = cpi
        .annotations()
        .get(workload::FINISH_WITHOUT_RESTORE_ANNOTATION)
        .is_some_and(|v| v == "true");
    let advertise_address = steering::advertise_address(client, &spec).await?;
    let endpoints_object = get::<Endpoints>(client, "default", "kubernetes").await?;
    let endpoints = endpoints_object.as_ref().map(typed).transpose()?;
    let record = read_record(client).await?;
    let service = get::<Service>(client, "default", "kubernetes")
        .await?
        .as_ref()
        .map(typed::<Service>)
        .transpose()?;
    let service_steered = service.as_ref().is_some_and(workload::selects_proxy_pods);
    let recorded_selector_ready = match &record {
        Some(r) if r.service_released => match &r.service.selector {
            Some(selector) => Some(selects_a_ready_pod(client, selector).await?),
            None => None,
        },
        _ => None,
    };
    let our_slice = get::<EndpointSlice>(client, "default", "kubernetes")
        .await?
        .filter(is_ours);
    let controller_slices = list::<EndpointSlice>(client, "default", CONTROLLER_SLICES).await?;
    let patched = patched_workloads(cpi, client).await?;
    let mut published = Vec::new();
    for location in workload::ENDPOINT_LOCATIONS {
        published.extend(get::<ConfigMap>(client, location.namespace, location.name).await?);
    }
    let mut proxy_objects = Vec::new();
    for mode in [Steering::AdvertiseAddress, Steering::Service] {
        let namespace = workload::proxy_namespace(mode);
        proxy_objects.extend(get::<DaemonSet>(client, namespace, NAME).await?);
        proxy_objects.extend(get::<Secret>(client, namespace, NAME).await?);
        proxy_objects.extend(get::<ConfigMap>(client, namespace, NAME).await?);
    }
    proxy_objects.retain(is_ours);
    let record_object = get::<ConfigMap>(client, NAMESPACE, RECORD_NAME)
        .await?
        .filter(is_ours);
    Ok(RemovalFacts {
        endpoints,
        endpoints_object,
        record,
        record_object,
        advertise_address,
        finish_anyway,
        service_steered,
        recorded_selector_ready,
        our_slice,
        controller_slices,
        patched,
        published,
        proxy_objects,
        now: unix_now(),
    })
}

/// Every Deployment and DaemonSet we patched (CCM env, konnectivity-agent
/// args) in the namespaces `spec.ccm` can name: found by our field manager,
/// so a target renamed or unselected since is not missed.
async fn patched_workloads(
    cpi: &ControlPlaneIngress,
    client: &Client,
) -> Result<Vec<(workload::WorkloadKind, DynamicObject)>, WorkloadError> {
    let mut namespaces: Vec<String> = workload::ccm_targets(cpi)
        .into_iter()
        .map(|t| t.namespace)
        .chain([workload::CCM_NAMESPACE.to_string()])
        .collect();
    namespaces.sort();
    namespaces.dedup();
    let mut patched = Vec::new();
    for namespace in &namespaces {
        for kind in [
            workload::WorkloadKind::Deployment,
            workload::WorkloadKind::DaemonSet,
        ] {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &kind.api_resource());
            let list = api
                .list(&ListParams::default())
                .await
                .map_err(|e| api_error(&format!("list {}s in {namespace}", kind.as_str()), e))?;
            for live in list {
                let patched_by_us = live
                    .managed_fields()
                    .iter()
                    .any(|f| f.manager.as_deref() == Some(MANAGER));
                if !is_ours(&live) && patched_by_us {
                    patched.push((kind, live));
                }
            }
        }
    }
    Ok(patched)
}

/// Whether a pod in `default` matching `selector` is Ready.
async fn selects_a_ready_pod(
    client: &Client,
    selector: &std::collections::BTreeMap<String, String>,
) -> Result<bool, WorkloadError> {
    let labels = selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let list = pods
        .list(&ListParams::default().labels(&labels))
        .await
        .map_err(|e| api_error(&format!("list pods {labels} in default"), e))?;
    Ok(list.items.iter().any(|pod| {
        pod.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    }))
}

fn is_ours(object: &DynamicObject) -> bool {
    workload::is_ours(object.labels())
}
