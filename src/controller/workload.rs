//! The workload side of a reconciliation, through Secret `<cluster>-kubeconfig`:
//! install the node proxy, steer `kubernetes.default.svc` to it, point the
//! cloud-controller-manager at the ingress by name, and report what happened.
//! Decisions come from `render::workload` and `pki`; this module does the I/O.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::Mutex,
    time::{Duration, SystemTime},
};

use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{Endpoints, Secret, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind},
    config::{KubeConfigOptions, Kubeconfig},
};
use md5::{Digest, Md5};

mod client;
mod steering;

use super::{
    Context, apply, redact,
    status::{Desired, types},
};
use crate::{
    api::ControlPlaneIngress,
    pki::{self, CertificateAuthority, Renewal},
    render::workload::{
        self as ccm, self, NAME, NAMESPACE, OverrideTarget, ProxyObjects, ProxyTls,
        SteeringObjects, WorkloadInputs,
    },
};

/// What the workload side found, for the status.
pub struct Outcome {
    /// WorkloadReachable, ProxyReady, EndpointsSteered, CCMConfigured.
    pub conditions: Vec<Desired>,
    /// Desired and ready nodes of the proxy DaemonSet.
    pub proxy: Option<(i32, i32)>,
    /// When to look again at the latest (certificate renewal, drift checks).
    pub requeue: Option<Duration>,
}

/// Workload clients, one per cluster, rebuilt when its kubeconfig changes.
#[derive(Default)]
pub struct Clients {
    clients: Mutex<HashMap<String, (String, Client)>>,
    /// Per cluster: the last steering rewrite seen, and when.
    drift: Mutex<HashMap<String, (std::time::Instant, Vec<String>)>>,
}

/// Why a workload cluster cannot be reached: a condition reason and message.
struct Unreachable {
    reason: &'static str,
    message: String,
}

impl Clients {
    /// Keep a steering rewrite in the status for `window` after it was last
    /// seen: an API server's endpoint reconciler rewrites every few seconds and
    /// we re-steer at once, so a single look would make the condition flap.
    fn remember_drift(&self, key: &str, drift: Vec<String>, window: Duration) -> Vec<String> {
        let mut seen = self.drift.lock().expect("drift memory");
        if !drift.is_empty() {
            seen.insert(key.to_string(), (std::time::Instant::now(), drift.clone()));
            return drift;
        }
        match seen.get(key) {
            Some((at, last)) if at.elapsed() < window => {
                let ago = at.elapsed().as_secs();
                last.iter().map(|d| format!("{d} ({ago} s ago)")).collect()
            }
            _ => {
                seen.remove(key);
                Vec::new()
            }
        }
    }

    async fn get(
        &self,
        mgmt: &Client,
        namespace: &str,
        cluster: &str,
    ) -> Result<Client, Unreachable> {
        let name = format!("{cluster}-kubeconfig");
        let secrets: Api<Secret> = Api::namespaced(mgmt.clone(), namespace);
        let secret = secrets.get_opt(&name).await.map_err(|e| Unreachable {
            reason: "KubeconfigUnreadable",
            message: format!("failed to read Secret {namespace}/{name}: {e}"),
        })?;
        let Some(value) = secret
            .and_then(|s| s.data)
            .and_then(|mut d| d.remove("value"))
        else {
            return Err(Unreachable {
                reason: "KubeconfigMissing",
                message: format!(
                    "Secret {namespace}/{name} with key `value` not found: CAPI writes it once the control plane is up"
                ),
            });
        };
        let digest: String = Md5::digest(&value.0)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let key = format!("{namespace}/{cluster}");
        if let Some((seen, client)) = self.clients.lock().expect("client cache").get(&key)
            && *seen == digest
        {
            return Ok(client.clone());
        }
        let invalid = |e: String| Unreachable {
            reason: "KubeconfigInvalid",
            message: format!("Secret {namespace}/{name}: {e}"),
        };
        let text =
            String::from_utf8(value.0).map_err(|_| invalid("`value` is not UTF-8".into()))?;
        // Parser messages quote the kubeconfig: scrub them before they are shown.
        let kubeconfig = Kubeconfig::from_yaml(&text)
            .map_err(|e| invalid(redact::scrub(&e.to_string(), &text)))?;
        let mut config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| invalid(redact::scrub(&e.to_string(), &text)))?;
        // An unreachable cluster must cost a bounded time, not a reconcile slot for minutes.
        config.connect_timeout = Some(Duration::from_secs(5));
        config.read_timeout = Some(Duration::from_secs(15));
        // No retry layer (kube's default retries 503s up to 15 times with
        // growing delays): this controller has its own per-cluster backoff and
        // must report the failure promptly.
        let client =
            client::build(config).map_err(|e| invalid(redact::scrub(&e.to_string(), &text)))?;
        tracing::info!(cluster = %key, "built a workload client from the kubeconfig Secret");
        self.clients
            .lock()
            .expect("client cache")
            .insert(key, (digest, client.clone()));
        Ok(client)
    }
}

/// Whether CAPI says the control plane is initialized (v1beta2 and v1beta1
/// fields); `None` when there is no Cluster to ask.
pub fn control_plane_initialized(cluster: Option<&DynamicObject>) -> Option<bool> {
    let status = cluster?.data.get("status");
    let v1beta2 = status
        .and_then(|s| s.pointer("/initialization/controlPlaneInitialized"))
        .and_then(|v| v.as_bool());
    let v1beta1 = status
        .and_then(|s| s.get("controlPlaneReady"))
        .and_then(|v| v.as_bool());
    let condition = status
        .and_then(|s| s.get("conditions"))
        .and_then(|c| c.as_array())
        .and_then(|conditions| {
            conditions
                .iter()
                .find(|c| c["type"] == "ControlPlaneInitialized")
                .map(|c| c["status"] == "True")
        });
    Some(v1beta2.or(v1beta1).or(condition).unwrap_or(false))
}

/// Bring the workload cluster to the desired state.
pub async fn reconcile(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
    cluster: Option<&DynamicObject>,
) -> Outcome {
    let spec = workload::proxy_spec(cpi);
    if !spec.enabled {
        return match cpi.status.as_ref().and_then(|s| s.proxy.as_ref()) {
            // Installed before: opting out gives default/kubernetes back, then removes the proxy.
            Some(_) => opt_out(ctx, cpi).await,
            None => Outcome {
                conditions: disabled(),
                proxy: None,
                requeue: None,
            },
        };
    }
    if control_plane_initialized(cluster) == Some(false) {
        let waiting = "waiting for the control plane to be initialized (Cluster status)";
        return Outcome {
            conditions: vec![Desired::unknown(
                types::WORKLOAD_REACHABLE,
                "ControlPlaneNotInitialized",
                waiting,
            )],
            proxy: None,
            requeue: Some(ctx.settings.retry),
        };
    }
    let namespace = cpi.namespace().unwrap_or_default();
    let client = match ctx
        .workload_clients
        .get(&ctx.client, &namespace, &cpi.spec.cluster_name)
        .await
    {
        Ok(client) => client,
        Err(u) => return unreachable(ctx, cpi, u),
    };
    match install(ctx, cpi, cluster, &client).await {
        Ok(outcome) => {
            ctx.backoff.reset(&workload_key(cpi));
            outcome
        }
        Err(u) => unreachable(ctx, cpi, u),
    }
}

/// `spec.proxy.enabled` turned false on an installed proxy: the same removal as a deletion.
async fn opt_out(ctx: &Context, cpi: &ControlPlaneIngress) -> Outcome {
    // Until the removal is done the status keeps the proxy, so it is retried.
    let installed = cpi
        .status
        .as_ref()
        .and_then(|s| s.proxy.as_ref())
        .map(|p| (p.desired_nodes, p.ready_nodes));
    match cleanup(ctx, cpi).await {
        Ok(Removal::Removed(note)) => {
            ctx.event(
                cpi,
                kube::runtime::events::EventType::Normal,
                "SteeringRestored",
                "Workload",
                note.clone(),
            )
            .await;
            let off = "spec.proxy.enabled is false";
            Outcome {
                conditions: vec![
                    Desired::ok(
                        types::PROXY_READY,
                        "ProxyDisabled",
                        format!("{off}: {note}"),
                    ),
                    Desired::ok(types::ENDPOINTS_STEERED, "Restored", note),
                ],
                proxy: None,
                requeue: None,
            }
        }
        Ok(Removal::Kept(note)) => Outcome {
            conditions: vec![Desired::failed(
                types::ENDPOINTS_STEERED,
                "RestoreNotPossible",
                note,
            )],
            proxy: installed,
            requeue: Some(ctx.settings.retry * 10),
        },
        Err(message) => Outcome {
            conditions: vec![Desired::failed(
                types::ENDPOINTS_STEERED,
                "RestoreFailed",
                message,
            )],
            proxy: installed,
            requeue: Some(ctx.backoff.next(&workload_key(cpi))),
        },
    }
}

fn disabled() -> Vec<Desired> {
    let off = "spec.proxy.enabled is false: nothing is installed in the workload cluster";
    vec![
        Desired::ok(types::PROXY_READY, "ProxyDisabled", off),
        Desired::ok(types::ENDPOINTS_STEERED, "ProxyDisabled", off),
    ]
}

fn workload_key(cpi: &ControlPlaneIngress) -> String {
    format!(
        "workload/{}/{}",
        cpi.namespace().unwrap_or_default(),
        cpi.name_any()
    )
}

fn unreachable(ctx: &Context, cpi: &ControlPlaneIngress, u: Unreachable) -> Outcome {
    // Backoff per cluster: never a hot loop, and other clusters go on meanwhile.
    let delay = ctx
        .backoff
        .next(&workload_key(cpi))
        .max(Duration::from_secs(1));
    Outcome {
        conditions: vec![Desired::failed(
            types::WORKLOAD_REACHABLE,
            u.reason,
            u.message,
        )],
        proxy: None,
        requeue: Some(delay),
    }
}

fn api_error(what: &str, e: kube::Error) -> Unreachable {
    let reason = match &e {
        kube::Error::Api(_) => "WorkloadAPIError",
        _ => "WorkloadUnreachable",
    };
    Unreachable {
        reason,
        message: format!("failed to {what} in the workload cluster: {e}"),
    }
}

async fn install(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
    cluster: Option<&DynamicObject>,
    client: &Client,
) -> Result<Outcome, Unreachable> {
    let mut conditions = vec![Desired::ok(
        types::WORKLOAD_REACHABLE,
        "Connected",
        "the workload API answers through the kubeconfig Secret",
    )];
    let mut requeue = None;
    let spec = workload::proxy_spec(cpi);

    // Facts about the workload cluster.
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let kubernetes = services
        .get_opt("kubernetes")
        .await
        .map_err(|e| api_error("read Service default/kubernetes", e))?;
    let mut inputs = WorkloadInputs {
        image: if spec.image.is_empty() {
            ctx.settings.proxy_image.clone()
        } else {
            spec.image.clone()
        },
        cluster_domain: cluster
            .and_then(|c| c.data.pointer("/spec/clusterNetwork/serviceDomain"))
            .and_then(|v| v.as_str())
            .unwrap_or(workload::DEFAULT_CLUSTER_DOMAIN)
            .to_string(),
        ..WorkloadInputs::default()
    };
    if let Some(ip) = kubernetes
        .as_ref()
        .and_then(|s| s.spec.as_ref()?.cluster_ip.as_ref()?.parse::<IpAddr>().ok())
    {
        inputs.service_ip = ip;
    }
    if spec.steering == crate::api::Steering::Service {
        // The API server owns the Service's ports: listen where they point.
        inputs.proxy_port = kubernetes
            .as_ref()
            .and_then(|s| {
                s.spec
                    .as_ref()?
                    .ports
                    .as_ref()?
                    .first()?
                    .target_port
                    .clone()
            })
            .and_then(|p| match p {
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n) => {
                    u16::try_from(n).ok()
                }
                _ => None,
            });
    }

    // The dedicated proxy certificate, from the cluster CA; the API server's key is never read.
    let ca = match cluster_ca(ctx, cpi).await {
        Ok(ca) => ca,
        Err(message) => {
            return Ok(stopped(
                conditions,
                "CANotAvailable",
                message,
                Some(ctx.settings.retry),
            ));
        }
    };
    inputs.ca_cert_pem = Some(ca.cert_pem().to_string());
    if let Some(leaf_spec) = workload::proxy_leaf_spec(cpi, &inputs, SystemTime::now()) {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
        let live = secrets
            .get_opt(NAME)
            .await
            .map_err(|e| api_error("read the proxy Secret", e))?;
        let live_tls = live.and_then(|s| s.data).and_then(|d| {
            let cert = String::from_utf8(d.get("tls.crt")?.0.clone()).ok()?;
            let key = String::from_utf8(d.get("tls.key")?.0.clone()).ok()?;
            Some(ProxyTls {
                cert_pem: cert,
                key_pem: key,
            })
        });
        let renewal = live_tls
            .as_ref()
            .map(|t| pki::renewal_due(&t.cert_pem, leaf_spec.now, &ca, &leaf_spec))
            .unwrap_or(Renewal::Due(pki::RenewReason::Unparsable(
                "no certificate yet".into(),
            )));
        let tls = match (renewal, live_tls) {
            (Renewal::Valid { renew_at }, Some(tls)) => {
                requeue = renew_at.duration_since(SystemTime::now()).ok();
                tls
            }
            (due, _) => {
                let leaf = pki::mint_leaf(&ca, &leaf_spec).map_err(|e| Unreachable {
                    reason: "CertificateMintFailed",
                    message: format!("failed to mint the proxy certificate: {e}"),
                })?;
                if let Renewal::Due(reason) = due {
                    tracing::info!(object = %crate::render::describe(cpi), %reason, "minting the proxy certificate");
                }
                requeue = leaf.renew_at().duration_since(SystemTime::now()).ok();
                ProxyTls::from(&leaf)
            }
        };
        inputs.tls = Some(tls);
    }

    let objects = match workload::proxy(cpi, &inputs) {
        Ok(Some(objects)) => objects,
        Ok(None) => {
            return Ok(Outcome {
                conditions: disabled(),
                proxy: None,
                requeue: None,
            });
        }
        Err(e) => return Ok(stopped(conditions, "InvalidSpec", e.to_string(), None)),
    };

    // Record what default/kubernetes holds before our first steering write,
    // and give back what another steering mode took (a switch is our change).
    let take_over = steering::take_over(ctx, client, spec.steering).await?;
    // Steering first looks at what is there: a rewrite by someone else is news.
    let service_drift = if take_over.steered_before {
        service_drift(client, &objects).await?
    } else {
        Vec::new()
    };
    let mut seen = Vec::new();
    for object in objects.to_dynamic().map_err(|e| Unreachable {
        reason: "RenderFailed",
        message: e.to_string(),
    })? {
        let was = apply_object(ctx, client, object.clone()).await?;
        seen.push((object, was));
    }
    let switched = take_over.switched.clone();
    steering::applied(ctx, client, take_over, spec.steering).await?;
    if let Some(switched) = &switched {
        tracing::info!(object = %crate::render::describe(cpi), %switched, "steering switched");
    }
    let mut drift = endpoints_drift(&objects, &seen);
    drift.extend(service_drift);
    let drift =
        ctx.workload_clients
            .remember_drift(&workload_key(cpi), drift, ctx.settings.retry * 10);
    conditions.push(steered(&objects, drift, switched));
    if conditions
        .last()
        .is_some_and(|c| c.status != super::status::Status::True)
    {
        requeue = Some(ctx.settings.retry);
    }

    // The DaemonSet's own report.
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let ds = daemon_sets
        .get_opt(NAME)
        .await
        .map_err(|e| api_error("read the proxy DaemonSet", e))?;
    let (desired, ready) = ds
        .and_then(|d| d.status)
        .map(|s| (s.desired_number_scheduled, s.number_ready))
        .unwrap_or((0, 0));
    conditions.push(if desired > 0 && ready == desired {
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
    });
    if desired == 0 || ready < desired {
        requeue = Some(ctx.settings.retry);
    }

    conditions.push(configure_ccm(ctx, cpi, client).await?);
    Ok(Outcome {
        conditions,
        proxy: Some((desired, ready)),
        requeue,
    })
}

/// The install stopped before the proxy: ProxyReady says why.
fn stopped(
    mut conditions: Vec<Desired>,
    reason: &str,
    message: String,
    requeue: Option<Duration>,
) -> Outcome {
    conditions.push(Desired::failed(types::PROXY_READY, reason, message));
    Outcome {
        conditions,
        proxy: None,
        requeue,
    }
}

/// The cluster CA from Secret `<cluster>-ca` in the management cluster.
async fn cluster_ca(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
) -> Result<CertificateAuthority, String> {
    let namespace = cpi.namespace().unwrap_or_default();
    let name = format!("{}-ca", cpi.spec.cluster_name);
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let secret = api
        .get_opt(&name)
        .await
        .map_err(|e| format!("failed to read Secret {namespace}/{name}: {e}"))?
        .ok_or_else(|| format!("Secret {namespace}/{name} not found: the proxy certificate is minted from the cluster CA"))?;
    let data = secret.data.unwrap_or_default();
    let field = |key: &str| {
        data.get(key)
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
            .ok_or_else(|| format!("Secret {namespace}/{name} has no {key}"))
    };
    let key = field("tls.key")?;
    CertificateAuthority::from_pem(&field("tls.crt")?, &key).map_err(|e| {
        format!(
            "Secret {namespace}/{name}: {}",
            redact::scrub(&e.to_string(), &key)
        )
    })
}

/// The plural of each kind the workload side writes.
fn resource_of(obj: &DynamicObject) -> ApiResource {
    let types = obj.types.clone().unwrap_or_default();
    let (group, version) = types
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", &types.api_version));
    let plural = match types.kind.as_str() {
        "ConfigMap" => "configmaps",
        "Secret" => "secrets",
        "DaemonSet" => "daemonsets",
        "Deployment" => "deployments",
        "Endpoints" => "endpoints",
        "EndpointSlice" => "endpointslices",
        "Service" => "services",
        other => return ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, other)),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, &types.kind), plural)
}

/// Apply one object; returns what was there before (what the write was decided on).
async fn apply_object(
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
    result.map(|_| existing).map_err(|e| Unreachable {
        reason: "ApplyFailed",
        message: e.to_string(),
    })
}

/// What someone else changed in the `kubernetes` Service (service steering),
/// read before we re-apply our fields.
async fn service_drift(
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
fn endpoints_drift(
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

fn steered(objects: &ProxyObjects, drift: Vec<String>, switched: Option<String>) -> Desired {
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

/// Set `KUBERNETES_SERVICE_HOST/PORT` on each CCM target found.
async fn configure_ccm(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
    client: &Client,
) -> Result<Desired, Unreachable> {
    let targets = ccm::ccm_targets(cpi);
    if targets.is_empty() {
        return Ok(Desired::ok(
            types::CCM_CONFIGURED,
            "Disabled",
            "spec.ccm.enabled is false",
        ));
    }
    let spec = cpi.spec.ccm.clone().unwrap_or_default();
    let mut found: Vec<(OverrideTarget, DynamicObject)> = Vec::new();
    let mut missing = Vec::new();
    // The well-known names are looked up as both kinds: one list per kind
    // answers them all, where a get per name and kind would cost dozens.
    let mut listed: HashMap<ccm::WorkloadKind, Vec<DynamicObject>> = HashMap::new();
    for target in targets {
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            &target.namespace,
            &target.kind.api_resource(),
        );
        let live = if target.well_known {
            let all = match listed.entry(target.kind) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    let items = api
                        .list(&Default::default())
                        .await
                        .map_err(|err| {
                            api_error(
                                &format!("list {}s in {}", target.kind.as_str(), target.namespace),
                                err,
                            )
                        })?
                        .items;
                    e.insert(items)
                }
            };
            all.iter().find(|o| o.name_any() == target.name).cloned()
        } else {
            api.get_opt(&target.name)
                .await
                .map_err(|e| api_error(&format!("read {}", describe(&target)), e))?
        };
        match live {
            Some(live) => found.push((target, live)),
            None if !target.well_known => missing.push(describe(&target)),
            None => {}
        }
    }
    // Selected by label: every Deployment and DaemonSet in kube-system that carries them.
    if !spec.selector.is_empty() {
        let labels: Vec<String> = spec
            .selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let params = kube::api::ListParams::default().labels(&labels.join(","));
        for kind in [ccm::WorkloadKind::Deployment, ccm::WorkloadKind::DaemonSet] {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), ccm::CCM_NAMESPACE, &kind.api_resource());
            let list = api.list(&params).await.map_err(|e| {
                api_error(
                    &format!("list {}s selected by spec.ccm.selector", kind.as_str()),
                    e,
                )
            })?;
            for live in list {
                if found
                    .iter()
                    .any(|(t, _)| t.kind == kind && t.name == live.name_any())
                {
                    continue;
                }
                let target = OverrideTarget {
                    kind,
                    namespace: ccm::CCM_NAMESPACE.to_string(),
                    name: live.name_any(),
                    containers: Vec::new(),
                    well_known: false,
                };
                found.push((target, live));
            }
        }
    }
    let mut patched = Vec::new();
    for (target, live) in found {
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            &target.namespace,
            &target.kind.api_resource(),
        );
        let containers = if target.containers.is_empty() {
            container_names(&live)
        } else {
            target.containers.clone()
        };
        let patch = ccm::ccm_patch(
            cpi,
            target.kind,
            &target.namespace,
            &target.name,
            &containers,
        );
        apply::apply_fields(ctx, &api, patch, Some(&live))
            .await
            .map_err(|e| Unreachable {
                reason: "ApplyFailed",
                message: e.to_string(),
            })?;
        patched.push(format!(
            "{} (containers: {})",
            describe(&target),
            containers.join(", ")
        ));
    }
    if spec.konnectivity_agent {
        match configure_konnectivity_agent(ctx, cpi, client).await? {
            Ok(done) => patched.push(done),
            Err(problem) => missing.push(problem),
        }
    }
    let [(_, host), (_, port)] = ccm::service_host_env(cpi);
    Ok(if !missing.is_empty() {
        Desired::failed(
            types::CCM_CONFIGURED,
            "TargetNotFound",
            format!("not found: {}", missing.join(", ")),
        )
    } else if patched.is_empty() {
        Desired::ok(
            types::CCM_CONFIGURED,
            "NoCCMFound",
            "no well-known cloud-controller-manager runs in kube-system",
        )
    } else {
        Desired::ok(
            types::CCM_CONFIGURED,
            "Patched",
            format!(
                "KUBERNETES_SERVICE_HOST={host} KUBERNETES_SERVICE_PORT={port} on {}",
                patched.join(", ")
            ),
        )
    })
}

/// Point konnectivity-agent at `ingress.konnectivityHost:port` (`--proxy-server-host/port`).
/// Ok(Ok(what was done)) or Ok(Err(what is missing)).
async fn configure_konnectivity_agent(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
    client: &Client,
) -> Result<Result<String, String>, Unreachable> {
    let agent = ccm::KONNECTIVITY_AGENT;
    let Some((host, port)) = ccm::konnectivity_server(cpi) else {
        return Ok(Err(
            "spec.ccm.konnectivityAgent needs spec.ingress.konnectivityHost".into(),
        ));
    };
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ccm::CCM_NAMESPACE,
        &agent.kind.api_resource(),
    );
    let what = format!(
        "{} {}/{}",
        agent.kind.as_str(),
        ccm::CCM_NAMESPACE,
        agent.name
    );
    let Some(live) = api
        .get_opt(agent.name)
        .await
        .map_err(|e| api_error(&format!("read {what}"), e))?
    else {
        return Ok(Err(what));
    };
    let Some(container) = live.data.pointer("/spec/template/spec/containers/0") else {
        return Ok(Err(format!("{what} has no container")));
    };
    let name = container["name"].as_str().unwrap_or_default().to_string();
    let current: Vec<String> = container["args"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let args = ccm::konnectivity_agent_args(&current, &host, port);
    let original = ccm::original_args(&live, &current);
    // `args` is an atomic list: we apply the whole list, the other flags kept as they were.
    let patch = ccm::konnectivity_agent_patch(
        agent.kind,
        ccm::CCM_NAMESPACE,
        agent.name,
        &name,
        &args,
        &original,
    );
    apply::apply_fields(ctx, &api, patch, Some(&live))
        .await
        .map_err(|e| Unreachable {
            reason: "ApplyFailed",
            message: e.to_string(),
        })?;
    Ok(Ok(format!(
        "{what} (--proxy-server-host={host} --proxy-server-port={port})"
    )))
}

fn describe(target: &OverrideTarget) -> String {
    format!(
        "{} {}/{}",
        target.kind.as_str(),
        target.namespace,
        target.name
    )
}

fn container_names(workload: &DynamicObject) -> Vec<String> {
    workload
        .data
        .pointer("/spec/template/spec/containers")
        .and_then(|c| c.as_array())
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

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
    let namespace = cpi.namespace().unwrap_or_default();
    let client = match ctx
        .workload_clients
        .get(&ctx.client, &namespace, &cpi.spec.cluster_name)
        .await
    {
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

/// Give back every Deployment and DaemonSet we patched (CCM env,
/// konnectivity-agent args) in the namespaces `spec.ccm` can name: found by
/// our field manager, so a target renamed or unselected since is not missed.
/// Returns what was given back.
async fn release_patched_workloads(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
    client: &Client,
) -> Result<Vec<String>, Unreachable> {
    let mut namespaces: Vec<String> = ccm::ccm_targets(cpi)
        .into_iter()
        .map(|t| t.namespace)
        .chain([ccm::CCM_NAMESPACE.to_string()])
        .collect();
    namespaces.sort();
    namespaces.dedup();
    let mut released = Vec::new();
    for namespace in &namespaces {
        for kind in [ccm::WorkloadKind::Deployment, ccm::WorkloadKind::DaemonSet] {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &kind.api_resource());
            let list = api
                .list(&Default::default())
                .await
                .map_err(|e| api_error(&format!("list {}s in {namespace}", kind.as_str()), e))?;
            for live in list {
                let ours = live
                    .labels()
                    .get(crate::api::MANAGED_BY_LABEL)
                    .is_some_and(|m| m == crate::api::MANAGER);
                let patched_by_us = live
                    .managed_fields()
                    .iter()
                    .any(|f| f.manager.as_deref() == Some(crate::api::MANAGER));
                if ours || !patched_by_us {
                    continue;
                }
                apply::force_fields(ctx, &api, ccm::release_patch(kind, &live))
                    .await
                    .map_err(|e| Unreachable {
                        reason: "ApplyFailed",
                        message: e.to_string(),
                    })?;
                released.push(format!("{} {namespace}/{}", kind.as_str(), live.name_any()));
            }
        }
    }
    Ok(released)
}
