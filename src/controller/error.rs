//! The controller's error: what failed in a reconciliation or at start,
//! with its metric label and Event reason.

use crate::render::RenderError;

/// Why a reconciliation (or the controller) failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Server-side apply was refused.
    #[error("failed to apply {kind} {name}: {source}")]
    Apply {
        kind: String,
        name: String,
        source: kube::Error,
    },
    /// A delete was refused.
    #[error("failed to delete {kind} {name}: {source}")]
    Delete {
        kind: String,
        name: String,
        source: kube::Error,
    },
    /// The status write was refused.
    #[error("failed to update the status of {object}: {source}")]
    Status { object: String, source: kube::Error },
    /// The owner reference to the Cluster could not be set.
    #[error("failed to set the Cluster owner reference on {object}: {source}")]
    Owner { object: String, source: kube::Error },
    /// This replica lost the lease: it must not write.
    #[error("failed to write: this replica does not hold the leader lease")]
    NotLeader,
    /// A rendered object did not serialize.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// The cached object was older than the server's; try again shortly.
    #[error("failed to update the object: the cached copy was stale")]
    Stale,
    /// The finalizer could not be added or removed.
    #[error("failed to manage the finalizer: {0}")]
    Finalizer(String),
    /// Workload clean-up failed; the finalizer stays until it succeeds.
    #[error("failed to clean up the workload cluster: {0}")]
    Cleanup(String),
    /// A watch cache has not synced yet.
    #[error("failed to reconcile: the {0} watch has not synced yet")]
    CacheNotReady(String),
    /// The API server could not be reached at start-up.
    #[error("failed to start: {0}")]
    Start(String),
}

impl Error {
    /// Short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Apply { .. } => "apply",
            Error::Delete { .. } => "delete",
            Error::Status { .. } => "status",
            Error::Owner { .. } => "owner",
            Error::NotLeader => "not_leader",
            Error::Render(_) => "render",
            Error::Start(_) => "start",
            Error::CacheNotReady(_) => "cache_not_ready",
            Error::Finalizer(_) => "finalizer",
            Error::Stale => "stale",
            Error::Cleanup(_) => "cleanup",
        }
    }

    /// Event reason for the failure.
    pub fn metric_label_camel(&self) -> &'static str {
        match self {
            Error::Apply { .. } => "ApplyFailed",
            Error::Delete { .. } => "DeleteFailed",
            Error::Status { .. } => "StatusUpdateFailed",
            Error::Owner { .. } => "OwnerReferenceFailed",
            Error::NotLeader => "NotLeader",
            Error::Render(_) => "RenderFailed",
            Error::Start(_) => "StartFailed",
            Error::CacheNotReady(_) => "CacheNotReady",
            Error::Finalizer(_) => "FinalizerFailed",
            Error::Stale => "StaleCache",
            Error::Cleanup(_) => "CleanupFailed",
        }
    }
}
