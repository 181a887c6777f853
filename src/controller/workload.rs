//! The workload side of a reconciliation, through Secret `<cluster>-kubeconfig`:
//! install the node proxy, steer `kubernetes.default.svc` to it, point the
//! cloud-controller-manager at the ingress by name, and report what happened.
//! A reconcile reads the workload cluster once (`observe`), decides what to
//! write in one pure function (`decide`), makes the writes in order (`act`)
//! and reports (`report`, here).

use kube::{Client, api::DynamicObject};

mod act;
mod ccm;
mod cleanup;
pub(super) mod client;
mod decide;
mod failure;
mod observe;
mod outcome;
mod plan;
mod steering;
mod tls;
mod upstream;

pub(crate) use ccm::find_ccm_workloads;

pub use cleanup::{Removal, cleanup};
use failure::Unreachable;
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
    if !spec.enabled || upstream_proxy.is_some() {
        return match cpi.status.as_ref().and_then(|s| s.proxy.as_ref()) {
            // Installed before: opting out gives default/kubernetes back, then removes the proxy.
            Some(_) => opt_out(ctx, cpi).await,
            None => match upstream_proxy {
                Some(upstream) => upstream::complement(ctx, cpi, cluster, upstream).await,
                None => Outcome {
                    conditions: decide::disabled(),
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

/// Observe, decide, act, report: the proxy installed, `default/kubernetes`
/// steered to it, the CCM pointed at the ingress.
async fn install(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
    cluster: Option<&DynamicObject>,
    client: &Client,
) -> Result<Outcome, Unreachable> {
    let spec = workload::proxy_spec(cpi);
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
    let facts = observe::observe(ctx, cpi, client, &base).await?;
    let given = decide::Given {
        cpi,
        base,
        retry: ctx.settings.retry,
        now: steering::unix_now(),
    };
    let plan = decide::decide(&given, &facts);
    if let Some(why) = plan.unreachable {
        return Err(why);
    }
    let acted = act::act(ctx, client, &plan).await?;
    Ok(report(ctx, cpi, &facts, plan, acted).await)
}

/// The outcome of a plan acted on: a failed switch replaces
/// EndpointsSteered; else the switch, a rewrite seen and the take-over's
/// Events are told.
async fn report(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
    facts: &observe::Facts,
    plan: plan::Plan,
    acted: act::Acted,
) -> Outcome {
    let object = crate::render::describe(cpi);
    if let Some(tls) = facts.credentials.as_ref().ok().and_then(|c| c.tls.as_ref()) {
        ctx.metrics.proxy_certificate(cpi, &tls.cert_pem);
    }
    let mut conditions = plan.conditions;
    let mut requeue = plan.requeue;
    if let (Some(failed), Some(switch)) = (acted.switch_failed, &plan.switch) {
        tracing::warn!(%object, reason = failed.reason, message = %failed.message, "steering switch failed");
        let (from, to) = (switch.from, switch.to);
        let failed = Desired::failed(
            types::ENDPOINTS_STEERED,
            "SteeringSwitchFailed",
            format!(
                "cannot switch steering from {from:?} to {to:?}, {from:?} still steers: {}",
                failed.message
            ),
        );
        conditions.retain(|c| c.type_ != types::ENDPOINTS_STEERED);
        let at = conditions
            .iter()
            .position(|c| c.type_ == types::PROXY_READY)
            .unwrap_or(conditions.len());
        conditions.insert(at, failed);
        requeue = Some(ctx.settings.retry);
    } else {
        if let Some(summary) = &plan.switched {
            tracing::info!(%object, %summary, "steering switched");
        }
        if !plan.drift.is_empty() {
            ctx.workload_clients
                .note_drift(&workload_key(cpi), plan.drift.clone());
        }
        for (reason, note) in plan.events {
            ctx.event(
                cpi,
                kube::runtime::events::EventType::Normal,
                reason,
                "Workload",
                note,
            )
            .await;
        }
    }
    Outcome {
        conditions,
        proxy: plan.proxy,
        requeue,
    }
}
