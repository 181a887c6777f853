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
mod error;
mod observe;
mod outcome;
mod plan;
mod read;
mod steering;
mod tls;
mod upstream;

pub(crate) use ccm::find_ccm_workloads;

pub use cleanup::{Removal, cleanup};
pub use error::WorkloadError;
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
        Err(failed) => Outcome {
            conditions: vec![Desired::failed(
                types::ENDPOINTS_STEERED,
                "RestoreFailed",
                failed.to_string(),
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
) -> Result<Outcome, WorkloadError> {
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
    let plan = decide::decide(&given, &facts)?;
    let acted = act::act(ctx, client, &plan).await?;
    Ok(report(ctx, cpi, &facts, plan, acted).await)
}

/// Report a plan acted on: the conditions `decide::reported` gives, and
/// the log lines, Events and drift memory that go with them.
async fn report(
    ctx: &Context,
    cpi: &ControlPlaneIngress,
    facts: &observe::Facts,
    plan: plan::Plan,
    acted: plan::Acted,
) -> Outcome {
    let object = crate::render::describe(cpi);
    if let Some(tls) = facts.credentials.as_ref().ok().and_then(|c| c.tls.as_ref()) {
        ctx.metrics.proxy_certificate(cpi, &tls.cert_pem);
    }
    let (conditions, requeue) = decide::reported(&plan, &acted, ctx.settings.retry);
    if let Some(failed) = &acted.switch_failed {
        tracing::warn!(%object, reason = failed.reason(), message = %failed, "steering switch failed");
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
