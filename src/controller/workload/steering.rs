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

use super::{
    failure::{Unreachable, api_error, apply_failed, render_failed, resource_of},
    objects::apply_object,
};
use crate::{
    api::{MANAGED_BY_LABEL, MANAGER, Steering},
    controller::{
        apply,
        context::Context,
        status::{Desired, types},
    },
    render::workload::{
        self, FINISH_WITHOUT_RESTORE_ANNOTATION, Live, NAMESPACE, ProxyObjects, RECORD_NAME,
        SteeringObjects, SteeringRecord, parse_record, record_config_map,
    },
};

fn record_failed(message: String) -> Unreachable {
    Unreachable {
        reason: "SteeringRecordInvalid",
        message,
    }
}

async fn read_record(client: &Client) -> Result<Option<SteeringRecord>, Unreachable> {
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
/// a switch, a new mode applied), so there is nothing to compare against.
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

/// Record what `default/kubernetes` holds now and store the record.
async fn record_now(ctx: &Context, client: &Client) -> Result<SteeringRecord, Unreachable> {
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let service = services
        .get_opt("kubernetes")
        .await
        .map_err(|e| api_error("read Service default/kubernetes", e))?;
    let live_endpoints = endpoints
        .get_opt("kubernetes")
        .await
        .map_err(|e| api_error("read Endpoints default/kubernetes", e))?;
    let slice = slices
        .get_opt("kubernetes")
        .await
        .map_err(|e| api_error("read EndpointSlice default/kubernetes", e))?;
    let record = workload::record(service.as_ref(), live_endpoints.as_ref(), slice.as_ref());
    write_record(ctx, client, &record).await?;
    Ok(record)
}

/// Before address steering takes the Service's selector from a provider's
/// node proxy: the record exists and says so, so that a give-back selects
/// the provider's proxy again.
pub(super) async fn record_service_release(
    ctx: &Context,
    client: &Client,
) -> Result<(), Unreachable> {
    let mut record = match read_record(client).await? {
        Some(record) => record,
        None => record_now(ctx, client).await?,
    };
    if !record.service_released {
        record.service_released = true;
        write_record(ctx, client, &record).await?;
    }
    Ok(())
}

/// The record of what `default/kubernetes` held before our first steering
/// write: read, or made now (before any steering write of this pass).
pub(super) async fn ensure_record(
    ctx: &Context,
    client: &Client,
) -> Result<SteeringRecord, Unreachable> {
    match read_record(client).await? {
        Some(record) => Ok(record),
        None => record_now(ctx, client).await,
    }
}

/// After steering with `mode` was applied: remember it, and the mode it
/// replaced, whose proxy is still to go.
pub(super) async fn mark_applied(
    ctx: &Context,
    client: &Client,
    record: &mut SteeringRecord,
    mode: Steering,
) -> Result<(), Unreachable> {
    if record.applied == Some(mode) {
        return Ok(());
    }
    if record.applied.is_some() {
        // A switch: the path it replaced keeps its proxy for a while.
        record.replaced_at = Some(unix_now());
    }
    record.leaving = record.applied.or(record.leaving).filter(|m| *m != mode);
    record.applied = Some(mode);
    record.proxies_listed_at = None;
    record.service_proxy_beside_service |= mode == Steering::Service;
    // Steered again after a give-back whose removal never came.
    record.restored = None;
    write_record(ctx, client, record).await
}

/// The proxy of the mode switched away from is removed: forget it.
pub(super) async fn left(
    ctx: &Context,
    client: &Client,
    record: &mut SteeringRecord,
) -> Result<(), Unreachable> {
    record.leaving = None;
    write_record(ctx, client, record).await
}

/// Where a steering switch stands after [`switch`].
pub(super) enum Switch {
    /// The new path carries the traffic and the old steering is released,
    /// in words; the old proxy goes in a later pass.
    Done(String),
    /// A step was written, the next waits for the cluster to take it in.
    Waiting(String),
}

/// Hand `default/kubernetes` over from the mode the record says is applied
/// to the mode of `objects`,
/// whose proxy is ready: the new path carries traffic before the old one is
/// released, so pods never lack an endpoint. Recorded addresses are not
/// needed: they are only given back when leaving hcp-ingress.
/// `no_nodes`: no Node exists, so there is nothing to wait for.
pub(super) async fn switch(
    ctx: &Context,
    client: &Client,
    record: &mut SteeringRecord,
    objects: &ProxyObjects,
    ready_proxies: i32,
    no_nodes: bool,
) -> Result<Switch, Unreachable> {
    let slices = dynamic_api::<EndpointSlice>(client);
    match &objects.steering {
        SteeringObjects::Service { .. } => {
            if let Some(step) =
                service_handover(ctx, client, record, ready_proxies, no_nodes).await?
            {
                return Ok(Switch::Waiting(format!(
                    "{step}; the advertise address steers until then"
                )));
            }
            // 3. The advertise address goes: our slice, our Endpoints fields
            // (the endpoints controller writes the Endpoints of a selected
            // Service from now on). The full Service patch follows with the
            // steering apply.
            delete_ours(ctx, &slices, "EndpointSlice").await?;
            let endpoints = dynamic_api::<Endpoints>(client);
            let ours = endpoints
                .get_opt("kubernetes")
                .await
                .map_err(|e| api_error("read Endpoints default/kubernetes", e))?
                .is_some_and(|e| is_ours(e.labels()));
            if ours {
                apply::force_fields(ctx, &endpoints, workload::bare_endpoints())
                    .await
                    .map_err(apply_failed)?;
            }
            Ok(Switch::Done(
                "switched from advertise-address: the proxy pods' EndpointSlices carry the traffic, the advertise address is released".into(),
            ))
        }
        SteeringObjects::AdvertiseAddress {
            endpoints,
            endpoint_slice,
        } => {
            // 1. Our Endpoints and slice next to the pods' slices: with
            // `internalTrafficPolicy: Local` kube-proxy ignores a slice
            // without a node name, so nothing changes yet.
            apply_object(
                ctx,
                client,
                workload::dynamic(endpoint_slice.as_ref(), "EndpointSlice")
                    .map_err(render_failed)?,
            )
            .await?;
            // 2. ONE Service update drops our selector and restores the
            // recorded policy: kube-proxy balances over the advertise
            // address and the pods' slices, both of which work.
            let service = dynamic_api::<Service>(client);
            apply::force_fields(ctx, &service, workload::service_release_for_switch(record))
                .await
                .map_err(apply_failed)?;
            // 3. The slices the EndpointSlice controller leaves behind for a
            // selector that is gone; then our Endpoints, which the endpoints
            // controller rewrote while the selector was there.
            drop_abandoned_slices(ctx, client).await?;
            apply_object(
                ctx,
                client,
                workload::dynamic(endpoints.as_ref(), "Endpoints").map_err(render_failed)?,
            )
            .await?;
            Ok(Switch::Done(
                "switched from service: the advertise address carries the traffic, the Service's selector is released".into(),
            ))
        }
    }
}

/// The steps before service steering's `internalTrafficPolicy: Local`,
/// whatever steered before (our advertise address, the API server's own
/// endpoints): the Service selects the proxy pods with its traffic policy
/// untouched, so kube-proxy balances over what was there and the proxy pods
/// (both work) while the EndpointSlice controller writes their slices (with
/// `Local` it would ignore a node-less endpoint at once). `None` once its
/// slices have listed every ready proxy for the handover pause (or no Node
/// exists); else the step waited on.
pub(super) async fn service_handover(
    ctx: &Context,
    client: &Client,
    record: &mut SteeringRecord,
    ready_proxies: i32,
    no_nodes: bool,
) -> Result<Option<String>, Unreachable> {
    let live = Api::<Service>::namespaced(client.clone(), "default")
        .get_opt("kubernetes")
        .await
        .map_err(|e| api_error("read Service default/kubernetes", e))?;
    let selects = live
        .as_ref()
        .and_then(|s| s.spec.as_ref()?.selector.as_ref())
        .is_some_and(|s| *s == workload::selector_labels());
    if !selects {
        let service = dynamic_api::<Service>(client);
        apply::apply_fields(ctx, &service, workload::service_handover_patch(), None)
            .await
            .map_err(apply_failed)?;
        if !no_nodes {
            return Ok(Some(
                "the kubernetes Service selects the proxy pods; waiting for their EndpointSlice"
                    .into(),
            ));
        }
    }
    if !no_nodes {
        let selected = controller_slice_endpoints(client).await?;
        if selected < ready_proxies.max(1) {
            if record.proxies_listed_at.take().is_some() {
                write_record(ctx, client, record).await?;
            }
            return Ok(Some(format!(
                "the EndpointSlice controller lists {selected} of {ready_proxies} ready proxy pods for the kubernetes Service"
            )));
        }
        let now = unix_now();
        let since = match record.proxies_listed_at {
            Some(since) => since,
            None => {
                record.proxies_listed_at = Some(now);
                write_record(ctx, client, record).await?;
                now
            }
        };
        if let Some(wait) = workload::wait_since(since, now, HANDOVER_PAUSE) {
            return Ok(Some(format!(
                "the EndpointSlice controller lists every ready proxy pod; kube-proxy takes them in before the Service turns internalTrafficPolicy Local (another {}s)",
                wait.as_secs()
            )));
        }
    }
    Ok(None)
}

/// Ready endpoints with a node name in the EndpointSlice controller's
/// slices of the `kubernetes` Service.
async fn controller_slice_endpoints(client: &Client) -> Result<i32, Unreachable> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let list = slices
        .list(&kube::api::ListParams::default().labels(CONTROLLER_SLICES))
        .await
        .map_err(|e| api_error("list EndpointSlices of Service default/kubernetes", e))?;
    let ready = list
        .items
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .filter(|e| {
            e.node_name.is_some() && e.conditions.as_ref().and_then(|c| c.ready) != Some(false)
        })
        .count();
    Ok(i32::try_from(ready).unwrap_or(i32::MAX))
}

/// The EndpointSlice controller's slices of the `kubernetes` Service.
const CONTROLLER_SLICES: &str = "kubernetes.io/service-name=kubernetes,endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io";

/// The EndpointSlice controller leaves the slices it made for a selector
/// that is gone (it skips selector-less Services): while they stay,
/// kube-proxy still sends part of the traffic to the pods they name. They
/// have no manager any more; a selector given back makes it create them anew.
pub(super) async fn drop_abandoned_slices(
    ctx: &Context,
    client: &Client,
) -> Result<(), Unreachable> {
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

/// How long a path that was just replaced (a steering switch, a give-back)
/// keeps its proxy: kube-proxy programs a change within a second or two.
pub const HANDOVER_PAUSE: Duration = Duration::from_secs(5);

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
        // Never steered, or the record was deleted: what still points at
        // the proxy cannot be given back, and our slice never outlives it.
        let steered =
            steered_without_record(client, live_endpoints.as_ref(), advertise_address).await?;
        if !steered {
            // Endpoints we wrote that someone rewrote since: theirs, as
            // they are, our labels and slice gone (as with a record).
            if let Some(now) = live_endpoints.as_ref().filter(|e| is_ours(e.labels()))
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
            endpoints: live_endpoints.as_ref(),
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
        return Ok(write_restore(ctx, client, restore)
            .await?
            .map(GiveBack::Done));
    };
    let mut record = record;
    let Some(mode) = record.applied else {
        if let Some(restored) = &record.restored {
            return Ok(Ok(match record.handover_wait(unix_now(), HANDOVER_PAUSE) {
                Some(wait) => GiveBack::Settling(restored.clone(), wait),
                None => GiveBack::Done(restored.clone()),
            }));
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
    Ok(Ok(GiveBack::Settling(summary, HANDOVER_PAUSE)))
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

/// What someone else changed in the `kubernetes` Service (service steering),
/// read before we re-apply our fields.
pub(super) async fn service_drift(
    client: &Client,
    objects: &ProxyObjects,
) -> Result<Vec<String>, Unreachable> {
    if !matches!(objects.steering, SteeringObjects::Service { .. }) {
        return Ok(Vec::new());
    }
    let service = Api::<Service>::namespaced(client.clone(), "default")
        .get_opt("kubernetes")
        .await
        .map_err(|e| api_error("read Service default/kubernetes", e))?;
    Ok(match &service {
        Some(live) => workload::steering_drift(&objects.steering, None, None, Some(live)),
        None => Vec::new(),
    })
}

/// What someone else changed in the Endpoints and EndpointSlice we applied,
/// from the very objects the apply was decided on (no race with a rewrite).
pub(super) fn endpoints_drift(
    objects: &ProxyObjects,
    seen: &[(DynamicObject, Option<DynamicObject>)],
) -> Vec<String> {
    let rewritten = |kind: &str| {
        seen.iter()
            .find(|(want, was)| {
                want.types.as_ref().is_some_and(|t| t.kind == kind)
                    && apply::rewritten_by_others(want, was.as_ref())
            })
            .and_then(|(_, was)| serde_json::to_value(was.as_ref()?).ok())
    };
    let SteeringObjects::AdvertiseAddress {
        endpoints: wanted_endpoints,
        endpoint_slice: wanted_slice,
    } = &objects.steering
    else {
        return Vec::new();
    };
    let endpoints: Option<Endpoints> =
        rewritten("Endpoints").and_then(|v| serde_json::from_value(v).ok());
    let slice: Option<EndpointSlice> =
        rewritten("EndpointSlice").and_then(|v| serde_json::from_value(v).ok());
    if endpoints.is_none() && slice.is_none() {
        return Vec::new();
    }
    // What was not rewritten compares as wanted.
    workload::steering_drift(
        &objects.steering,
        Some(endpoints.as_ref().unwrap_or(wanted_endpoints)),
        Some(slice.as_ref().unwrap_or(wanted_slice)),
        None,
    )
}

pub(super) fn steered(
    objects: &ProxyObjects,
    drift: Vec<String>,
    switched: Option<String>,
) -> Desired {
    let switched = switched.map(|s| format!(" ({s})")).unwrap_or_default();
    match (&objects.steering, drift.is_empty()) {
        (SteeringObjects::AdvertiseAddress { .. }, true) => Desired::ok(
            types::ENDPOINTS_STEERED,
            "AdvertiseAddress",
            format!(
                "default/kubernetes Endpoints and EndpointSlice point at the node-local proxy address{switched}"
            ),
        ),
        (SteeringObjects::Service { .. }, true) => Desired::ok(
            types::ENDPOINTS_STEERED,
            "ServiceSelector",
            format!(
                "the kubernetes Service selects the node proxy (internalTrafficPolicy: Local){switched}"
            ),
        ),
        (SteeringObjects::AdvertiseAddress { .. }, false) => Desired::failed(
            types::ENDPOINTS_STEERED,
            "EndpointsOverwritten",
            format!(
                "something else rewrote default/kubernetes ({}): run the API server with --endpoint-reconciler-type=none; re-steered for now",
                drift.join("; ")
            ),
        ),
        (SteeringObjects::Service { .. }, false) => Desired::failed(
            types::ENDPOINTS_STEERED,
            "ServiceOverwritten",
            format!(
                "something else changed the kubernetes Service ({}); re-applied",
                drift.join("; ")
            ),
        ),
    }
}
