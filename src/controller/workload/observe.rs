//! Observe: everything a workload reconcile decides on, read once, before
//! any write, into [`Facts`]: the `kubernetes` Service and what steers it,
//! the steering record, our proxy's objects and their rollout, whether a Node
//! exists, the provider's proxy when we take it over, the CCM workloads, and
//! the proxy's certificate (the live one while valid, else one minted from
//! the cluster CA, the only edge here that is not a read).

use std::time::{Duration, SystemTime};

use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment},
    core::v1::{ConfigMap, Endpoints, Namespace, Node, Secret, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, ListParams},
};

use super::{
    ccm::{self, CcmFacts},
    error::{WorkloadError, api_error},
    outcome::workload_key,
    read::get,
    steering::{CONTROLLER_SLICES, read_record},
    tls,
};
use crate::{
    api::{ControlPlaneIngress, Steering, UpstreamObject},
    controller::context::Context,
    render::workload::{self, EndpointLocation, NAME, ProxyTls, SteeringRecord, WorkloadInputs},
};

/// What the workload cluster holds, as read at the start of a reconcile.
#[derive(Clone, Debug)]
pub(super) struct Facts {
    /// Service `default/kubernetes`.
    pub service: Option<Service>,
    /// Endpoints `default/kubernetes`.
    pub endpoints: Option<Endpoints>,
    /// EndpointSlice `default/kubernetes` (ours when address steering holds).
    pub endpoint_slice: Option<EndpointSlice>,
    /// The same three exactly as the API server sent them, for the writes
    /// to compare with (a typed copy drops what its types do not know).
    pub as_read: AsRead,
    /// The EndpointSlice controller's slices of the `kubernetes` Service:
    /// read while a hand-over or a take-over may need them (else empty).
    pub controller_slices: Vec<EndpointSlice>,
    /// The steering record, as stored; `None` before the first steering.
    pub record: Option<SteeringRecord>,
    /// Our proxy's objects in the namespace of the spec's steering mode.
    pub proxy: LiveProxy,
    /// Whether the workload cluster has a Node. A DaemonSet rolled out on a
    /// node proves one, so the Nodes are only listed when it is not.
    pub any_node: bool,
    /// Desired and ready pods of the provider's node proxy we take over;
    /// `None` when it is gone or there is no take-over.
    pub provider_proxy: Option<(i32, i32)>,
    /// The CCM and konnectivity-agent workloads `spec.ccm` targets.
    pub ccm: CcmFacts,
    /// What is where `spec.kubeProxyReplacement` publishes the endpoint.
    pub published: Vec<PublishedAt>,
    /// The proxy's certificate material, or why the cluster CA is not available.
    pub credentials: Result<Credentials, WorkloadError>,
    /// A rewrite of `default/kubernetes` by someone else seen in a recent
    /// pass, in words: the status keeps it for a while (see `Clients`).
    pub recent_drift: Vec<String>,
}

/// Service, Endpoints and EndpointSlice `default/kubernetes` as read.
#[derive(Clone, Debug, Default)]
pub(super) struct AsRead {
    /// The Service.
    pub service: Option<DynamicObject>,
    /// The Endpoints.
    pub endpoints: Option<DynamicObject>,
    /// The EndpointSlice.
    pub endpoint_slice: Option<DynamicObject>,
}

/// Our proxy's objects as they are in the workload cluster.
#[derive(Clone, Debug, Default)]
pub(super) struct LiveProxy {
    /// Its ConfigMap.
    pub config_map: Option<DynamicObject>,
    /// Its Secret (reencrypt mode).
    pub secret: Option<DynamicObject>,
    /// Its DaemonSet, with the status the rollout is read from.
    pub daemon_set: Option<DynamicObject>,
}

/// One place the endpoint of `spec.kubeProxyReplacement` is published, as read.
#[derive(Clone, Debug)]
pub(super) struct PublishedAt {
    /// Where.
    pub location: EndpointLocation,
    /// The ConfigMap there, whoever wrote it.
    pub live: Option<DynamicObject>,
    /// Whether its namespace exists (read only with the opt-in: we write
    /// into a namespace, never create it).
    pub namespace_exists: bool,
}

/// The cluster CA's certificate and the proxy's serving certificate.
#[derive(Clone, Debug)]
pub(super) struct Credentials {
    /// The cluster CA certificate the proxy trusts.
    pub ca_cert_pem: String,
    /// The proxy's certificate and key, where its mode terminates TLS.
    pub tls: Option<ProxyTls>,
    /// When that certificate is to be renewed.
    pub renew_in: Option<Duration>,
}

/// Read what a workload reconcile of `cpi` decides on. `base`: the inputs
/// the cluster's objects do not give (image, cluster domain).
pub(super) async fn observe(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
    client: &Client,
    base: &WorkloadInputs,
) -> Result<Facts, WorkloadError> {
    let spec = workload::proxy_spec(cpi);
    let (service, service_read) = read::<Service>(client, "default", "kubernetes").await?;
    let (endpoints, endpoints_read) = read::<Endpoints>(client, "default", "kubernetes").await?;
    let (endpoint_slice, endpoint_slice_read) =
        read::<EndpointSlice>(client, "default", "kubernetes").await?;
    let record = read_record(client).await?;
    let taken_over = cpi
        .spec
        .upstream
        .as_ref()
        .filter(|u| u.take_over_node_proxy)
        .and_then(|u| u.node_proxy.as_ref());
    let controller_slices = if reads_controller_slices(
        record.as_ref(),
        spec.steering,
        taken_over.is_some(),
        service.as_ref(),
    ) {
        controller_slices(client).await?
    } else {
        Vec::new()
    };
    let namespace = workload::proxy_namespace(spec.steering);
    let proxy = live_proxy(client, namespace).await?;
    // A DaemonSet rolled out on every scheduled node proves a Node.
    let (_, _, rolled_out) = rollout(proxy.daemon_set.as_ref());
    let any_node = rolled_out || any_node(client).await?;
    let provider_proxy = match taken_over {
        Some(theirs) => provider_rollout(client, theirs).await?,
        None => None,
    };
    let ccm = ccm::observe(client, cpi).await?;
    let published = published(client, cpi).await?;
    let inputs = workload::inputs_from_service(spec.steering, service.as_ref(), base.clone());
    let credentials = credentials(ctx, cpi, &inputs, proxy.secret.as_ref()).await?;
    let recent_drift = ctx
        .workload_clients
        .recent_drift(&workload_key(cpi), ctx.settings.retry * 10);
    Ok(Facts {
        service,
        endpoints,
        endpoint_slice,
        as_read: AsRead {
            service: service_read,
            endpoints: endpoints_read,
            endpoint_slice: endpoint_slice_read,
        },
        controller_slices,
        record,
        proxy,
        any_node,
        provider_proxy,
        ccm,
        published,
        credentials,
        recent_drift,
    })
}

/// What is at each place the endpoint is published. Without the opt-in only
/// the ConfigMaps are read (ours go); namespaces are read only where a
/// ConfigMap is missing and would be written.
pub(super) async fn published(
    client: &Client,
    cpi: &ControlPlaneIngress,
) -> Result<Vec<PublishedAt>, WorkloadError> {
    let wanted = workload::publishes_endpoint(cpi);
    let mut seen = Vec::new();
    for location in workload::ENDPOINT_LOCATIONS {
        let live = get::<ConfigMap>(client, location.namespace, location.name).await?;
        let namespace_exists =
            live.is_some() || (wanted && namespace_exists(client, location.namespace).await?);
        seen.push(PublishedAt {
            location,
            live,
            namespace_exists,
        });
    }
    Ok(seen)
}

/// Whether the namespace `name` exists in the workload cluster.
async fn namespace_exists(client: &Client, name: &str) -> Result<bool, WorkloadError> {
    Api::<Namespace>::all(client.clone())
        .get_opt(name)
        .await
        .map(|n| n.is_some())
        .map_err(|e| api_error(&format!("read Namespace {name}"), e))
}

/// The cluster CA (from the management cluster) and the proxy certificate
/// in force: the live one while valid, else one minted now.
async fn credentials(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
    inputs: &WorkloadInputs,
    live_secret: Option<&DynamicObject>,
) -> Result<Result<Credentials, WorkloadError>, WorkloadError> {
    let ca = match tls::cluster_ca(ctx, cpi).await {
        Ok(ca) => ca,
        Err(unavailable) => return Ok(Err(unavailable)),
    };
    let certificate = tls::proxy_certificate(cpi, live_secret, inputs, &ca, SystemTime::now())?;
    let (tls, renew_in) = certificate.map_or((None, None), |(tls, renew)| (Some(tls), renew));
    Ok(Ok(Credentials {
        ca_cert_pem: ca.cert_pem().to_string(),
        tls,
        renew_in,
    }))
}

/// Our proxy's ConfigMap, Secret and DaemonSet in `namespace`.
async fn live_proxy(client: &Client, namespace: &str) -> Result<LiveProxy, WorkloadError> {
    Ok(LiveProxy {
        config_map: read::<ConfigMap>(client, namespace, NAME).await?.1,
        secret: read::<Secret>(client, namespace, NAME).await?.1,
        daemon_set: read::<DaemonSet>(client, namespace, NAME).await?.1,
    })
}

/// One object of kind `K`, typed and exactly as the API server sent it.
async fn read<K>(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<(Option<K>, Option<DynamicObject>), WorkloadError>
where
    K: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned,
{
    let resource = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let what = format!("read {} {namespace}/{name}", resource.kind);
    let Some(object) = api.get_opt(name).await.map_err(|e| api_error(&what, e))? else {
        return Ok((None, None));
    };
    let typed = serde_json::to_value(&object)
        .and_then(serde_json::from_value)
        .map_err(|e| {
            WorkloadError::Api(format!("failed to {what} in the workload cluster: {e}"))
        })?;
    Ok((Some(typed), Some(object)))
}

/// A DaemonSet's desired and ready nodes, and whether it is rolled out:
/// the DaemonSet controller saw its current template, and every scheduled
/// node runs an updated, ready pod.
pub(super) fn rollout(daemon_set: Option<&DynamicObject>) -> (i32, i32, bool) {
    let daemon_set: Option<DaemonSet> =
        daemon_set.and_then(|d| serde_json::from_value(serde_json::to_value(d).ok()?).ok());
    let generation = daemon_set.as_ref().and_then(|d| d.metadata.generation);
    let Some(status) = daemon_set.and_then(|d| d.status) else {
        return (0, 0, false);
    };
    let rolled_out = status.observed_generation >= generation
        && status.desired_number_scheduled > 0
        && status.number_ready >= status.desired_number_scheduled
        && status.updated_number_scheduled.unwrap_or(0) >= status.desired_number_scheduled;
    (
        status.desired_number_scheduled,
        status.number_ready,
        rolled_out,
    )
}

/// Whether the workload cluster has any Node.
async fn any_node(client: &Client) -> Result<bool, WorkloadError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list_metadata(&ListParams::default().limit(1))
        .await
        .map_err(|e| api_error("list Nodes", e))?;
    Ok(!list.items.is_empty())
}

/// Whether a pass needs the EndpointSlice controller's slices of the
/// `kubernetes` Service: not once the spec's mode steers, nothing of
/// another is left and, for service steering, the Service still selects
/// the proxy pods with `Local` (one list fewer per pass of a steady
/// cluster); but through a switch until the slices a switch away from
/// service steering left behind are gone, through a hand-over again after
/// someone took the selector or `Local` away, and through a take-over.
pub(in crate::controller::workload) fn reads_controller_slices(
    record: Option<&SteeringRecord>,
    steering: Steering,
    take_over: bool,
    service: Option<&Service>,
) -> bool {
    let steady = record.is_some_and(|r| r.applied == Some(steering) && r.leaving.is_none())
        && (steering != Steering::Service || service.is_some_and(workload::service_steering_holds));
    take_over || !steady
}

/// The EndpointSlice controller's slices of the `kubernetes` Service.
async fn controller_slices(client: &Client) -> Result<Vec<EndpointSlice>, WorkloadError> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    slices
        .list(&ListParams::default().labels(CONTROLLER_SLICES))
        .await
        .map(|list| list.items)
        .map_err(|e| api_error("list EndpointSlices of Service default/kubernetes", e))
}

/// Desired and ready pods of the provider's node proxy; `None` when it does not exist.
pub(super) async fn provider_rollout(
    client: &kube::Client,
    upstream: &UpstreamObject,
) -> Result<Option<(i32, i32)>, WorkloadError> {
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
