//! Taking `default/kubernetes` over and giving it back (the I/O around
//! `render::workload::steering`): the record of what it held is written
//! before the first steering write, a steering switch gives back what the
//! previous mode took, and removal gives everything back before the proxy goes
//! (the record itself is removed last, with the proxy's objects).

use k8s_openapi::api::{
    core::v1::{ConfigMap, Endpoints, Pod, Service},
    discovery::v1::EndpointSlice,
};
use kube::{Api, Client, ResourceExt, api::DynamicObject};

use super::failure::{Unreachable, api_error, apply_failed, resource_of};
use crate::{
    api::{MANAGED_BY_LABEL, MANAGER, Steering},
    controller::{
        apply,
        context::Context,
        status::{Desired, types},
    },
    render::workload::{
        self, NAMESPACE, ProxyObjects, RECORD_NAME, SteeringObjects, SteeringRecord, parse_record,
        record_config_map,
    },
};

/// What the controller knows before it applies a steering mode.
pub struct TakeOver {
    /// The record, as stored.
    record: SteeringRecord,
    /// The mode was already applied by us: a difference now is someone else's doing.
    pub steered_before: bool,
    /// A previous mode given back in this pass (a switch), in words.
    pub switched: Option<String>,
}

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
async fn write_record(
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

/// Before steering with `mode`: record what `default/kubernetes` holds (once,
/// before our first write) and, when another mode was applied, give back
/// what that one took.
pub async fn take_over(
    ctx: &Context,
    client: &Client,
    mode: Steering,
) -> Result<TakeOver, Unreachable> {
    let mut record = match read_record(client).await? {
        Some(record) => record,
        None => record_now(ctx, client).await?,
    };
    let mut switched = None;
    if let Some(previous) = record.applied.filter(|p| *p != mode) {
        // Our own change: give back what the previous mode took, then steer anew.
        let summary = give_back_mode(ctx, client, &record, previous)
            .await?
            .map_err(|why| Unreachable {
                reason: "SteeringSwitchFailed",
                message: format!("cannot switch steering from {previous:?} to {mode:?}: {why}"),
            })?;
        switched = Some(format!("switched from {previous:?}: {summary}"));
        record.applied = None;
        write_record(ctx, client, &record).await?;
    }
    Ok(TakeOver {
        steered_before: record.applied == Some(mode),
        record,
        switched,
    })
}

/// After steering with `mode` was applied: remember it.
pub async fn applied(
    ctx: &Context,
    client: &Client,
    take_over: TakeOver,
    mode: Steering,
) -> Result<(), Unreachable> {
    if take_over.record.applied == Some(mode) {
        return Ok(());
    }
    let mut record = take_over.record;
    record.applied = Some(mode);
    write_record(ctx, client, &record).await
}

/// Give back what the applied steering took. `Ok(Ok(summary))` when done (or
/// nothing was steered), `Ok(Err(why))` when nothing safe can be given back.
pub async fn give_back(
    ctx: &Context,
    client: &Client,
) -> Result<Result<String, String>, Unreachable> {
    let Some(record) = read_record(client).await? else {
        return Ok(if steered_without_record(client).await? {
            Err(format!(
                "default/kubernetes is steered at the proxy but ConfigMap {NAMESPACE}/{RECORD_NAME}, the record of what it held before, is gone"
            ))
        } else {
            Ok("nothing was steered".into())
        });
    };
    match record.applied {
        Some(mode) => give_back_mode(ctx, client, &record, mode).await,
        None => Ok(Ok("nothing was steered".into())),
    }
}

async fn steered_without_record(client: &Client) -> Result<bool, Unreachable> {
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let ours = endpoints
        .get_opt("kubernetes")
        .await
        .map_err(|e| api_error("read Endpoints default/kubernetes", e))?
        .is_some_and(|e| is_ours(e.labels()));
    let selected = services
        .get_opt("kubernetes")
        .await
        .map_err(|e| api_error("read Service default/kubernetes", e))?
        .and_then(|s| s.spec?.selector)
        .is_some_and(|s| s == workload::selector_labels());
    Ok(ours || selected)
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

async fn give_back_mode(
    ctx: &Context,
    client: &Client,
    record: &SteeringRecord,
    mode: Steering,
) -> Result<Result<String, String>, Unreachable> {
    let restore = match workload::restore(record, mode) {
        Ok(restore) => restore,
        Err(why) => return Ok(Err(why)),
    };
    if record.service_released
        && let Some(selector) = &record.service.selector
        && !selects_a_ready_pod(client, selector).await?
    {
        // The provider's proxy is gone (it was told to stop): giving its
        // selector back would leave the Service without a single endpoint.
        return Ok(Err(format!(
            "the recorded selector {selector:?} of Service default/kubernetes selects no ready pod: the provider's node proxy is gone, and giving the selector back would cut pods off the API; have the provider deploy its proxy again (remove the spec.patches entry that stopped it), then delete again"
        )));
    }
    for object in restore.apply {
        let resource = resource_of(&object);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
        apply::force_fields(ctx, &api, object)
            .await
            .map_err(|e| Unreachable {
                reason: "RestoreFailed",
                message: e.to_string(),
            })?;
    }
    if restore.delete_endpoint_slice {
        let resource = kube::api::ApiResource::erase::<EndpointSlice>(&());
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
        if let Some(live) = api
            .get_opt("kubernetes")
            .await
            .map_err(|e| api_error("read EndpointSlice default/kubernetes", e))?
            && is_ours(live.labels())
        {
            apply::delete(ctx, &api, &live)
                .await
                .map_err(|e| Unreachable {
                    reason: "RestoreFailed",
                    message: e.to_string(),
                })?;
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
