//! The workload side of a reconciliation, through Secret `<cluster>-kubeconfig`:
//! install the node proxy, steer `kubernetes.default.svc` to it, point the
//! cloud-controller-manager at the ingress by name, and report what happened.
//! Decisions come from `render::workload` and `pki`; this module does the I/O.

use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::{Api, Client, api::DynamicObject};

mod ccm;
mod cleanup;
pub(super) mod client;
mod failure;
mod objects;
mod outcome;
mod steering;
mod takeover;
mod tls;
mod upstream;

pub(crate) use ccm::find_ccm_workloads;
use steering::HANDOVER_PAUSE;

pub use cleanup::{Removal, cleanup};
use failure::{Unreachable, api_error, render_failed};
use objects::{apply_object, proxy_ready};
pub use outcome::{Outcome, control_plane_initialized};
use outcome::{not_initialized, unreachable, workload_key};

use super::{
    context::Context,
    status::{Desired, types},
};
use crate::{
    api::{ControlPlaneIngress, upstream::CapiCluster},
    render::workload::{self, WorkloadInputs},
};

/// Bring the workload cluster to the desired state.
pub async fn reconcile(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
    cluster: Option<&DynamicObject>,
) -> Outcome {
    let spec = workload::proxy_spec(cpi);
    let upstream_proxy = cpi.spec.upstream.as_ref().and_then(|u| u.kept_node_proxy());
    // The provider's node proxy, when we take it over.
    let taken_over = cpi
        .spec
        .upstream
        .as_ref()
        .filter(|u| u.take_over_node_proxy)
        .and_then(|u| u.node_proxy.as_ref());
    if !spec.enabled || upstream_proxy.is_some() {
        return match cpi.status.as_ref().and_then(|s| s.proxy.as_ref()) {
            // Installed before: opting out gives default/kubernetes back, then removes the proxy.
            Some(_) => opt_out(ctx, cpi).await,
            None => match upstream_proxy {
                Some(upstream) => upstream::complement(ctx, cpi, cluster, upstream).await,
                None => Outcome {
                    conditions: disabled(),
                    proxy: None,
                    requeue: None,
                },
            },
        };
    }
    if let Some(waiting) = not_initialized(ctx, cluster) {
        return waiting;
    }
    let client = match ctx.workload_clients.of(&ctx.client, cpi).await {
        Ok(client) => client,
        Err(u) => return unreachable(ctx, cpi, u),
    };
    match install(ctx, cpi, cluster, &client, taken_over).await {
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
        Ok(Removal::Restoring(note, wait)) => Outcome {
            conditions: vec![Desired::ok(
                types::ENDPOINTS_STEERED,
                "Restored",
                format!("{note}; the proxy is removed next"),
            )],
            proxy: installed,
            requeue: Some(wait),
        },
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

async fn install(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
    cluster: Option<&DynamicObject>,
    client: &Client,
    taken_over: Option<&crate::api::UpstreamObject>,
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
    let base = WorkloadInputs {
        image: if spec.image.is_empty() {
            ctx.settings.proxy_image.clone()
        } else {
            spec.image.clone()
        },
        cluster_domain: cluster
            .and_then(|c| CapiCluster::lenient(c).service_domain)
            .unwrap_or_else(|| workload::DEFAULT_CLUSTER_DOMAIN.to_string()),
        ..WorkloadInputs::default()
    };
    let mut inputs = workload::inputs_from_service(spec.steering, kubernetes.as_ref(), base);
    // An advertise address of the other family than the live Service's
    // would look steered while kube-proxy ignores it: refused before any write.
    if let Err(refused) = workload::check_advertise_family(cpi, inputs.service_ip) {
        let message = refused.to_string();
        conditions.push(Desired::failed(
            types::ENDPOINTS_STEERED,
            "AddressFamilyMismatch",
            format!("default/kubernetes is left as it is: {message}"),
        ));
        return Ok(stopped(conditions, "InvalidSpec", message, None));
    }

    // The dedicated proxy certificate, from the cluster CA; the API server's key is never read.
    let ca = match tls::cluster_ca(ctx, cpi).await {
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
    if let Some((tls, renew_in)) = tls::proxy_certificate(cpi, client, &inputs, &ca).await? {
        ctx.metrics.proxy_certificate(cpi, &tls.cert_pem);
        inputs.tls = Some(tls);
        requeue = renew_in;
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

    // Taking over a provider's node proxy: ours ready on every node and the
    // Service released from theirs before our steering is applied.
    let mut released_now = false;
    if let Some(theirs) = taken_over {
        match takeover::prepare(ctx, client, &objects, theirs).await? {
            takeover::Prepared::Waiting(waiting, proxy) => {
                conditions.extend(waiting);
                conditions.push(ccm::configure_ccm(ctx, cpi, client).await?);
                return Ok(Outcome {
                    conditions,
                    proxy: Some(proxy),
                    requeue: Some(ctx.settings.retry),
                });
            }
            takeover::Prepared::Steer { released_now: now } => released_now = now,
        }
    }

    // The record of what default/kubernetes holds, before any steering write.
    let mut record = steering::ensure_record(ctx, client).await?;
    let steered_before = record.applied == Some(spec.steering);
    // The proxy first, steering only at a proxy that is ready.
    for object in objects.proxy_to_dynamic().map_err(render_failed)? {
        apply_object(ctx, client, object).await?;
    }
    let namespace = workload::proxy_namespace(spec.steering);
    let (ready_condition, (desired, ready), rolled_out) = proxy_ready(client, namespace).await?;
    // With no Node nothing can lose the API: steering goes first, and the
    // first node's pods find the path as soon as its proxy runs.
    let no_nodes = !rolled_out && !objects::any_node(client).await?;
    let proxy_up = rolled_out || no_nodes || taken_over.is_some();
    let mut switched = None;
    let mut steer = steered_before;
    match record.applied {
        Some(previous) if previous != spec.steering => {
            if record.leaving != Some(spec.steering) {
                // Should the switch be called off, this proxy is to go.
                record.leaving = Some(spec.steering);
                steering::write_record(ctx, client, &record).await?;
            }
            if proxy_up {
                match steering::switch(ctx, client, &mut record, &objects, ready, no_nodes).await {
                    Ok(steering::Switch::Done(summary)) => {
                        tracing::info!(object = %crate::render::describe(cpi), %summary, "steering switched");
                        switched = Some(summary);
                        steer = true;
                    }
                    Ok(steering::Switch::Waiting(step)) => {
                        conditions.push(Desired::ok(
                            types::ENDPOINTS_STEERED,
                            "SwitchInProgress",
                            format!("switching from {previous:?} to {:?}: {step}", spec.steering),
                        ));
                        requeue = Some(ctx.settings.retry);
                    }
                    Err(u) => {
                        tracing::warn!(object = %crate::render::describe(cpi), reason = u.reason, message = %u.message, "steering switch failed");
                        conditions.push(Desired::failed(
                            types::ENDPOINTS_STEERED,
                            "SteeringSwitchFailed",
                            format!(
                                "cannot switch steering from {previous:?} to {:?}, {previous:?} still steers: {}",
                                spec.steering, u.message
                            ),
                        ));
                        requeue = Some(ctx.backoff.next(&workload_key(cpi)));
                    }
                }
            } else {
                conditions.push(Desired::ok(
                    types::ENDPOINTS_STEERED,
                    "SwitchPending",
                    format!(
                        "{previous:?} steers default/kubernetes until the {:?} proxy in {namespace} is ready on every node ({ready}/{desired})",
                        spec.steering
                    ),
                ));
                requeue = Some(ctx.settings.retry);
            }
        }
        None if proxy_up && spec.steering == crate::api::Steering::Service && !no_nodes => {
            // Whatever reached the API before keeps carrying traffic until
            // the proxy pods are the Service's endpoints.
            match steering::service_handover(ctx, client, &mut record, ready, no_nodes).await? {
                None => steer = true,
                Some(step) => {
                    conditions.push(Desired::failed(
                        types::ENDPOINTS_STEERED,
                        "WaitingForProxy",
                        format!("{step}; then default/kubernetes is steered"),
                    ));
                    requeue = Some(ctx.settings.retry);
                }
            }
        }
        None if !proxy_up => {
            conditions.push(Desired::failed(
                types::ENDPOINTS_STEERED,
                "WaitingForProxy",
                format!(
                    "default/kubernetes is steered once the proxy is ready on every node ({ready}/{desired}): steering at a proxy that does not answer would cut pods off the API"
                ),
            ));
            requeue = Some(ctx.settings.retry);
        }
        _ => steer = true,
    }
    if steer {
        // Steering first looks at what is there: a rewrite by someone else is news.
        let service_drift = if steered_before {
            steering::service_drift(client, &objects).await?
        } else {
            Vec::new()
        };
        let mut seen = Vec::new();
        for object in objects.steering_to_dynamic().map_err(render_failed)? {
            let was = apply_object(ctx, client, object.clone()).await?;
            seen.push((object, was));
        }
        steering::mark_applied(ctx, client, &mut record, spec.steering).await?;
        let mut drift = if steered_before {
            steering::endpoints_drift(&objects, &seen)
        } else {
            Vec::new()
        };
        drift.extend(service_drift);
        let drift =
            ctx.workload_clients
                .remember_drift(&workload_key(cpi), drift, ctx.settings.retry * 10);
        conditions.push(steering::steered(&objects, drift, switched.clone()));
        if switched.is_some() {
            // The old path goes in a later pass, once kube-proxy has taken
            // the new one in.
            requeue = Some(HANDOVER_PAUSE);
        } else if spec.steering == crate::api::Steering::Service
            && !record.service_proxy_beside_service
        {
            // Steered by a release that ran this proxy in kube-system, where
            // the Service selects nothing: that one goes, once.
            cleanup::remove_proxy_of(ctx, client, crate::api::Steering::AdvertiseAddress)
                .await
                .map_err(|message| Unreachable {
                    reason: "ApplyFailed",
                    message,
                })?;
            record.service_proxy_beside_service = true;
            steering::write_record(ctx, client, &record).await?;
        } else if let Some(leaving) = record.leaving.filter(|m| *m != spec.steering) {
            if let Some(wait) = record.handover_wait(steering::unix_now(), HANDOVER_PAUSE) {
                requeue = Some(wait);
            } else {
                cleanup::remove_proxy_of(ctx, client, leaving)
                    .await
                    .map_err(|message| Unreachable {
                        reason: "ApplyFailed",
                        message,
                    })?;
                steering::left(ctx, client, &mut record).await?;
            }
        }
    }
    if let Some(theirs) = taken_over {
        let still = upstream::rollout(client, theirs).await?;
        if still.is_some() {
            // The provider removes its proxy when told to: look again.
            requeue = Some(ctx.settings.retry);
        }
        takeover::report(ctx, cpi, &mut conditions, theirs, still, released_now).await;
    }
    if conditions
        .last()
        .is_some_and(|c| c.status != super::status::Status::True)
    {
        requeue = Some(ctx.settings.retry);
    }

    conditions.push(ready_condition);
    if desired == 0 || ready < desired {
        requeue = Some(ctx.settings.retry);
    }

    conditions.push(ccm::configure_ccm(ctx, cpi, client).await?);
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
