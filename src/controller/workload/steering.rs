//! The I/O around `render::workload::steering`: the record of what
//! `default/kubernetes` held, written before the first steering write and
//! read back at removal, the advertise address in force, and the bounded
//! wait of a give-back for another EndpointSlice to carry the addresses.

use std::{net::IpAddr, time::Duration};

use k8s_openapi::api::{
    core::v1::{ConfigMap, Service},
    discovery::v1::EndpointSlice,
};
use kube::{Api, Client, ResourceExt, api::DynamicObject};

use super::error::{WorkloadError, api_error, resource_of};
use crate::{
    controller::{apply, context::Context},
    render::workload::{
        self, NAMESPACE, RECORD_NAME, SteeringRecord, parse_record, record_config_map,
    },
};

fn record_failed(message: String) -> WorkloadError {
    WorkloadError::SteeringRecordInvalid(message)
}

pub(super) async fn read_record(client: &Client) -> Result<Option<SteeringRecord>, WorkloadError> {
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
) -> Result<(), WorkloadError> {
    let cm = record_config_map(record).map_err(|e| record_failed(e.to_string()))?;
    let object: DynamicObject = serde_json::to_value(&cm)
        .and_then(serde_json::from_value)
        .map_err(|e| record_failed(e.to_string()))?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &resource_of(&object));
    apply::apply(ctx, &api, object, None)
        .await
        .map(drop)
        .map_err(WorkloadError::from)
}

/// The EndpointSlice controller's slices of the `kubernetes` Service.
pub(super) const CONTROLLER_SLICES: &str = "kubernetes.io/service-name=kubernetes,endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io";

/// Now, in Unix seconds, as the steering record keeps times.
pub(super) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// How long a give-back waits for another EndpointSlice of the `kubernetes`
/// Service before ours goes anyway: the mirroring controller answers within
/// a second; without it (no kube-controller-manager) nothing will come.
const OTHER_SLICE_WAIT: Duration = Duration::from_secs(10);

/// Wait (bounded) until an EndpointSlice of the `kubernetes` Service that is
/// not ours holds a ready endpoint.
pub(super) async fn await_other_slice(client: &Client) -> Result<(), WorkloadError> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let deadline = tokio::time::Instant::now() + OTHER_SLICE_WAIT;
    loop {
        let list = slices
            .list(&kube::api::ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
            .await
            .map_err(|e| api_error("list EndpointSlices of Service default/kubernetes", e))?;
        let other = list.items.iter().any(|s| {
            !workload::is_ours(s.labels())
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
) -> Result<IpAddr, WorkloadError> {
    let service = Api::<Service>::namespaced(client.clone(), "default")
        .get_opt("kubernetes")
        .await
        .map_err(|e| api_error("read Service default/kubernetes", e))?;
    Ok(workload::advertise_address(
        spec,
        workload::service_ip(service.as_ref()),
    ))
}
