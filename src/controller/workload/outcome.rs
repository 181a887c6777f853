//! What the workload side reports: the outcome, and the ones for a cluster
//! not initialized yet or not reachable.

use std::time::Duration;

use kube::{ResourceExt, api::DynamicObject};

use super::error::WorkloadError;
use crate::{
    api::{ControlPlaneIngress, upstream::CapiCluster},
    controller::{
        context::Context,
        status::{Desired, types},
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

/// Whether CAPI says the control plane is initialized (v1beta2 and v1beta1
/// fields); `None` when there is no Cluster to ask.
pub fn control_plane_initialized(cluster: Option<&DynamicObject>) -> Option<bool> {
    cluster.map(|c| CapiCluster::lenient(c).control_plane_initialized)
}

/// Until CAPI says the control plane is initialized there is no workload API to talk to.
pub(super) fn not_initialized(ctx: &Context, cluster: Option<&DynamicObject>) -> Option<Outcome> {
    (control_plane_initialized(cluster) == Some(false)).then(|| {
        let waiting = "waiting for the control plane to be initialized (Cluster status)";
        Outcome {
            conditions: vec![Desired::unknown(
                types::WORKLOAD_REACHABLE,
                "ControlPlaneNotInitialized",
                waiting,
            )],
            proxy: None,
            requeue: Some(ctx.settings.retry),
        }
    })
}

pub(super) fn workload_key(cpi: &ControlPlaneIngress) -> String {
    format!(
        "workload/{}/{}",
        cpi.namespace().unwrap_or_default(),
        cpi.name_any()
    )
}

pub(super) fn unreachable(ctx: &Context, cpi: &ControlPlaneIngress, u: WorkloadError) -> Outcome {
    // Backoff per cluster: never a hot loop, and other clusters go on meanwhile.
    let delay = ctx
        .backoff
        .next(&workload_key(cpi))
        .max(Duration::from_secs(1));
    Outcome {
        conditions: vec![Desired::failed(
            types::WORKLOAD_REACHABLE,
            u.reason(),
            u.to_string(),
        )],
        proxy: None,
        requeue: Some(delay),
    }
}
