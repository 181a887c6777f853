//! Taking `default/kubernetes` over and giving it back (the I/O around
//! `render::workload::steering`): the record of what it held is written
//! before the first steering write, a steering switch gives back what the
//! previous mode took, and removal gives everything back before the proxy goes
//! (the record itself is removed last, with the proxy's objects).

use std::{net::IpAddr, time::Duration};

use k8s_openapi::api::{
    core::v1::{ConfigMap, Endpoints, Pod, Service},
    discovery::v1::EndpointSlice,
};
use kube::{Api, Client, ResourceExt, api::DynamicObject};

use super::failure::{Unreachable, api_error, apply_failed, resource_of};
use crate::{
    api::{MANAGED_BY_LABEL, MANAGER, Steering},
    controller::{apply, context::Context},
    render::workload::{
        self, FINISH_WITHOUT_RESTORE_ANNOTATION, Live, NAMESPACE, RECORD_NAME, SteeringRecord,
        parse_record, record_config_map,
    },
};

fn record_failed(message: String) -> Unreachable {
    Unreachable {
        reason: "SteeringRecordInvalid",
        message,
    }
}

pub(super) async fn read_record(client: &Client) -> Result<Option<SteeringRecord>, Unreachable> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let Some(cm) = api
        .get_opt(RECORD_NAME)
        .await
        .map_err(|e| api_error(&format!("read ConfigMap {NAMESPACE}/{RECORD_NAME}"), e))?
    else {
        return Ok(None);
    };
    parse_record(&cm).map(Some).map_err(record_failed)
}

/// Write the record. Only ever called with a changed record (the first one,
/// a switch, a new mode applied, a give-back), so there is nothing to compare against.
pub(super) async fn write_record(
    ctx: &Context,
    client: &Client,
    record: &SteeringRecord,
) -> Result<(), Unreachable> {
    let cm = record_config_map(record).map_err(|e| record_failed(e.to_string()))?;
    let object: DynamicObject = serde_json::to_value(&cm)
        .and_then(serde_json::from_value)
        .map_err(|e| record_failed(e.to_string()))?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &resource_of(&object));
    apply::apply(ctx, &api, object, None)
        .await
        .map(drop)
        .map_err(apply_failed)
}

/// The EndpointSlice controller's slices of the `kubernetes` Service.
pub(super) const CONTROLLER_SLICES: &str = "kubernetes.io/service-name=kubernetes,endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io";

/// The EndpointSlice controller leaves the slices it made for a selector
/// that is gone (it skips selector-less Services): while they stay,
/// kube-proxy still sends part of the traffic to the pods they name. They
/// have no manager any more; a selector given back makes it create them anew.
async fn drop_abandoned_slices(ctx: &Context, client: &Client) -> Result<(), Unreachable> {
    let slices = dynamic_api::<EndpointSlice>(client);
    let abandoned = slices
        .list(&kube::api::ListParams::default().labels(CONTROLLER_SLICES))
        .await
        .map_err(|e| api_error("list EndpointSlices of Service default/kubernetes", e))?;
    for slice in abandoned.items {
        apply::delete(ctx, &slices, &slice)
            .await
            .map_err(apply_failed)?;
    }
    Ok(())
}

fn dynamic_api<K>(client: &Client) -> Api<DynamicObject>
where
    K: kube::Resource<DynamicType = ()>,
{
    Api::namespaced_with(
        client.clone(),
        "default",
        &kube::api::ApiResource::erase::<K>(&()),
    )
}

/// Delete `default/kubernetes` of this kind when it is ours.
async fn delete_ours(
    ctx: &Context,
    api: &Api<DynamicObject>,
    kind: &str,
) -> Result<(), Unreachable> {
    if let Some(live) = api
        .get_opt("kubernetes")
        .await
        .map_err(|e| api_error(&format!("read {kind} default/kubernetes"), e))?
        && is_ours(live.labels())
    {
        apply::delete(ctx, api, &live).await.map_err(apply_failed)?;
    }
    Ok(())
}

/// What a give-back did.
pub enum GiveBack {
    /// Nothing (more) to give back: the proxy can go. What was given back.
    Done(String),
    /// Given back (in this pass or a recent one): the proxy goes once
    /// kube-proxy had the handover pause to take the given-back endpoints
    /// in (a proxy pod stops accepting when told to terminate). What was
    /// given back, and how long the proxy still stays.
    Settling(String, Duration),
}

/// Now, in Unix seconds, as the steering record keeps times.
pub(super) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Give back what the applied steering took. `Ok(Ok(..))` when done (or
/// nothing was steered), `Ok(Err(why))` when nothing safe can be given back.
/// `finish_anyway`: the user's opt-in to finish without a give-back.
pub async fn give_back(
    ctx: &Context,
    client: &Client,
    advertise_address: IpAddr,
    finish_anyway: bool,
) -> Result<Result<GiveBack, String>, Unreachable> {
    let live_endpoints = Api::<Endpoints>::namespaced(client.clone(), "default")
        .get_opt("kubernetes")
        .await
        .map_err(|e| api_error("read Endpoints default/kubernetes", e))?;
    let Some(record) = read_record(client).await? else {
        return give_back_without_record(
            ctx,
            client,
            live_endpoints.as_ref(),
            advertise_address,
            finish_anyway,
        )
        .await;
    };
    let mut record = record;
    let Some(mode) = record.applied else {
        if let Some(restored) = &record.restored {
            return Ok(Ok(
                match record.handover_wait(unix_now(), workload::HANDOVER_PAUSE) {
                    Some(wait) => GiveBack::Settling(restored.clone(), wait),
                    None => GiveBack::Done(restored.clone()),
                },
            ));
        }
        // Recorded, never steered (the proxy never became ready): nothing to give back.
        let slices = dynamic_api::<EndpointSlice>(client);
        delete_ours(ctx, &slices, "EndpointSlice").await?;
        return Ok(Ok(GiveBack::Done("nothing was steered".into())));
    };
    let live = Live {
        endpoints: live_endpoints.as_ref(),
        advertise_address,
        finish_anyway,
    };
    let restore = match workload::restore(&record, mode, &live) {
        Ok(restore) => restore,
        Err(why) => return Ok(Err(why)),
    };
    if record.service_released
        && let Some(selector) = &record.service.selector
        && !selects_a_ready_pod(client, selector).await?
        && !finish_anyway
    {
        // The provider's proxy is gone (it was told to stop): giving its
        // selector back would leave the Service without a single endpoint.
        return Ok(Err(format!(
            "the recorded selector {selector:?} of Service default/kubernetes selects no ready pod: the provider's node proxy is gone, and giving the selector back would cut pods off the API; have the provider deploy its proxy again (remove the spec.patches entry that stopped it), or annotate the ControlPlaneIngress {FINISH_WITHOUT_RESTORE_ANNOTATION}=true to remove the proxy anyway"
        )));
    }
    let summary = match write_restore(ctx, client, restore).await? {
        Ok(summary) => summary,
        Err(why) => return Ok(Err(why)),
    };
    // Given back: remembered, so a later pass removes the proxy.
    record.applied = None;
    record.restored = Some(summary.clone());
    record.replaced_at = Some(unix_now());
    write_record(ctx, client, &record).await?;
    Ok(Ok(GiveBack::Settling(summary, workload::HANDOVER_PAUSE)))
}

/// A give-back without the record (never steered, or the record was
/// deleted): what still points at the proxy cannot be given back without
/// the user's word, and our slice never outlives the proxy.
async fn give_back_without_record(
    ctx: &Context,
    client: &Client,
    live_endpoints: Option<&Endpoints>,
    advertise_address: IpAddr,
    finish_anyway: bool,
) -> Result<Result<GiveBack, String>, Unreachable> {
    let steered = steered_without_record(client, live_endpoints, advertise_address).await?;
    if !steered {
        // Endpoints we wrote that someone rewrote since: theirs, as
        // they are, our labels and slice gone (as with a record).
        if let Some(now) = live_endpoints.filter(|e| is_ours(e.labels()))
            && let Ok(restore) = workload::restore(
                &SteeringRecord::default(),
                Steering::AdvertiseAddress,
                &Live {
                    endpoints: Some(now),
                    advertise_address,
                    finish_anyway: false,
                },
            )
        {
            return Ok(write_restore(ctx, client, restore)
                .await?
                .map(GiveBack::Done));
        }
        delete_ours(ctx, &dynamic_api::<EndpointSlice>(client), "EndpointSlice").await?;
        return Ok(Ok(GiveBack::Done("nothing was steered".into())));
    }
    if !finish_anyway {
        return Ok(Err(format!(
            "default/kubernetes is steered at the proxy but ConfigMap {NAMESPACE}/{RECORD_NAME}, the record of what it held before, is gone. To finish: write Endpoints default/kubernetes with the API server's own address, or annotate the ControlPlaneIngress {FINISH_WITHOUT_RESTORE_ANNOTATION}=true to remove the proxy anyway"
        )));
    }
    let record = SteeringRecord {
        service_unknown: true,
        ..SteeringRecord::default()
    };
    let live = Live {
        endpoints: live_endpoints,
        advertise_address,
        finish_anyway,
    };
    // Both modes' traces: our slice, our Service fields, the pods' slices.
    let mode = if steered_service(client).await? {
        Steering::Service
    } else {
        Steering::AdvertiseAddress
    };
    let restore = workload::restore(&record, mode, &live).map_err(|why| Unreachable {
        reason: "RestoreFailed",
        message: why,
    })?;
    Ok(write_restore(ctx, client, restore)
        .await?
        .map(GiveBack::Done))
}

/// How long a give-back waits for another EndpointSlice of the `kubernetes`
/// Service before ours goes anyway: the mirroring controller answers within
/// a second; without it (no kube-controller-manager) nothing will come.
const OTHER_SLICE_WAIT: Duration = Duration::from_secs(10);

/// Wait (bounded) until an EndpointSlice of the `kubernetes` Service that is
/// not ours holds a ready endpoint.
async fn await_other_slice(client: &Client) -> Result<(), Unreachable> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let deadline = tokio::time::Instant::now() + OTHER_SLICE_WAIT;
    loop {
        let list = slices
            .list(&kube::api::ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
            .await
            .map_err(|e| api_error("list EndpointSlices of Service default/kubernetes", e))?;
        let other = list.items.iter().any(|s| {
            !is_ours(s.labels())
                && s.labels()
                    .get("endpointslice.kubernetes.io/managed-by")
                    .map(String::as_str)
                    != Some("endpointslice-controller.k8s.io")
                && s.endpoints.iter().any(|e| {
                    !e.addresses.is_empty()
                        && e.conditions.as_ref().and_then(|c| c.ready) != Some(false)
                })
        });
        if other || tokio::time::Instant::now() >= deadline {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The advertise address in force in the workload cluster: the user's, or
/// the default of the family of its live `kubernetes` Service.
pub async fn advertise_address(
    client: &Client,
    spec: &crate::api::ProxySpec,
) -> Result<IpAddr, Unreachable> {
    let service = Api::<Service>::namespaced(client.clone(), "default")
        .get_opt("kubernetes")
        .await
        .map_err(|e| api_error("read Service default/kubernetes", e))?;
    Ok(workload::advertise_address(
        spec,
        workload::service_ip(service.as_ref()),
    ))
}

async fn steered_service(client: &Client) -> Result<bool, Unreachable> {
    Ok(Api::<Service>::namespaced(client.clone(), "default")
        .get_opt("kubernetes")
        .await
        .map_err(|e| api_error("read Service default/kubernetes", e))?
        .and_then(|s| s.spec?.selector)
        .is_some_and(|s| s == workload::selector_labels()))
}

async fn steered_without_record(
    client: &Client,
    live_endpoints: Option<&Endpoints>,
    advertise_address: IpAddr,
) -> Result<bool, Unreachable> {
    let ours = live_endpoints.is_some_and(|e| workload::points_at_proxy(e, advertise_address));
    Ok(ours || steered_service(client).await?)
}

/// Whether a pod in `default` matching `selector` is Ready.
async fn selects_a_ready_pod(
    client: &Client,
    selector: &std::collections::BTreeMap<String, String>,
) -> Result<bool, Unreachable> {
    let labels = selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let list = pods
        .list(&kube::api::ListParams::default().labels(&labels))
        .await
        .map_err(|e| api_error(&format!("list pods {labels} in default"), e))?;
    Ok(list.items.iter().any(|pod| {
        pod.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    }))
}

fn is_ours(labels: &std::collections::BTreeMap<String, String>) -> bool {
    labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGER)
}

async fn write_restore(
    ctx: &Context,
    client: &Client,
    restore: workload::Restore,
) -> Result<Result<String, String>, Unreachable> {
    let failed = |e: crate::controller::error::Error| Unreachable {
        reason: "RestoreFailed",
        message: e.to_string(),
    };
    for object in restore.apply {
        let resource = resource_of(&object);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
        apply::force_fields(ctx, &api, object)
            .await
            .map_err(failed)?;
    }
    if restore.await_other_slice
        && (restore.delete_abandoned_slices || restore.delete_endpoint_slice)
    {
        await_other_slice(client).await?;
    }
    if restore.delete_abandoned_slices {
        drop_abandoned_slices(ctx, client).await?;
    }
    if restore.delete_endpoint_slice {
        delete_ours(ctx, &dynamic_api::<EndpointSlice>(client), "EndpointSlice").await?;
    }
    if restore.delete_endpoints {
        let api = dynamic_api::<Endpoints>(client);
        if let Some(live) = api
            .get_opt("kubernetes")
            .await
            .map_err(|e| api_error("read Endpoints default/kubernetes", e))?
        {
            apply::delete(ctx, &api, &live).await.map_err(failed)?;
        }
    }
    Ok(Ok(restore.summary))
}
