//! Why the doctor could not run its checks at all: its own error, apart so
//! the probes report it without reaching back into the entry point.

use crate::render::RenderError;

/// Why the doctor could not run its checks at all.
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    /// A file given on the command line could not be read.
    #[error("failed to read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The management kubeconfig is unusable (its content is never printed).
    #[error("{0}")]
    Kubeconfig(String),
    /// The management API server did not answer a read.
    #[error("failed to {what} in the management cluster: {source}")]
    Management {
        /// What was being read.
        what: String,
        /// Cause.
        source: kube::Error,
    },
    /// No ControlPlaneIngress matches.
    #[error("not found: {0}")]
    NotFound(String),
    /// More than one ControlPlaneIngress names the cluster.
    #[error("{} ControlPlaneIngresses have spec.clusterName {cluster} ({}): name one, with -n", found.len(), found.join(", "))]
    Ambiguous {
        /// The cluster asked for.
        cluster: String,
        /// What matched.
        found: Vec<String>,
    },
    /// The ControlPlaneIngress breaks a field rule: nothing to compare with.
    #[error(transparent)]
    Invalid(#[from] RenderError),
}

impl DoctorError {
    /// 2 for bad input (nothing to check), 1 when a cluster or file could not be read.
    pub fn exit_code(&self) -> u8 {
        match self {
            DoctorError::Read { .. } | DoctorError::Management { .. } => 1,
            DoctorError::Kubeconfig(_)
            | DoctorError::NotFound(_)
            | DoctorError::Ambiguous { .. }
            | DoctorError::Invalid(_) => 2,
        }
    }
}
