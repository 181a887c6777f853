//! Why the workload side stopped: one variant per condition reason, each
//! with a message that names the object. Apart from the outcome, so the
//! client and the parts that apply objects report it without the reconcile
//! context.

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};

use crate::controller::error::Error;

/// Why the workload side could not do its part. [`WorkloadError::reason`]
/// is the condition and Event reason; the message says what, naming the
/// object.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum WorkloadError {
    /// The kubeconfig Secret could not be read from the management cluster.
    #[error("{0}")]
    KubeconfigUnreadable(String),
    /// The kubeconfig Secret, or its key, does not exist (yet).
    #[error("{0}")]
    KubeconfigMissing(String),
    /// The kubeconfig does not parse or builds no client.
    #[error("{0}")]
    KubeconfigInvalid(String),
    /// The workload API answered a request with an error.
    #[error("{0}")]
    Api(String),
    /// The workload API did not answer.
    #[error("{0}")]
    Unreachable(String),
    /// A write in the workload cluster was refused.
    #[error("{0}")]
    ApplyFailed(String),
    /// The proxy's objects could not be rendered.
    #[error("{0}")]
    RenderFailed(String),
    /// The steering record does not parse or serialize.
    #[error("{0}")]
    SteeringRecordInvalid(String),
    /// A write that gives `default/kubernetes` back was refused.
    #[error("{0}")]
    RestoreFailed(String),
    /// The spec asks for something the workload side cannot do.
    #[error("{0}")]
    InvalidSpec(String),
    /// The proxy's certificate could not be minted from the cluster CA.
    #[error("{0}")]
    CertificateMintFailed(String),
    /// The cluster CA Secret is missing, unreadable or broken.
    #[error("{0}")]
    CaNotAvailable(String),
}

impl WorkloadError {
    /// The condition and Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            WorkloadError::KubeconfigUnreadable(_) => "KubeconfigUnreadable",
            WorkloadError::KubeconfigMissing(_) => "KubeconfigMissing",
            WorkloadError::KubeconfigInvalid(_) => "KubeconfigInvalid",
            WorkloadError::Api(_) => "WorkloadAPIError",
            WorkloadError::Unreachable(_) => "WorkloadUnreachable",
            WorkloadError::ApplyFailed(_) => "ApplyFailed",
            WorkloadError::RenderFailed(_) => "RenderFailed",
            WorkloadError::SteeringRecordInvalid(_) => "SteeringRecordInvalid",
            WorkloadError::RestoreFailed(_) => "RestoreFailed",
            WorkloadError::InvalidSpec(_) => "InvalidSpec",
            WorkloadError::CertificateMintFailed(_) => "CertificateMintFailed",
            WorkloadError::CaNotAvailable(_) => "CANotAvailable",
        }
    }
}

impl From<Error> for WorkloadError {
    /// A write the API refused.
    fn from(e: Error) -> Self {
        WorkloadError::ApplyFailed(e.to_string())
    }
}

impl From<crate::render::workload::WorkloadError> for WorkloadError {
    fn from(e: crate::render::workload::WorkloadError) -> Self {
        WorkloadError::RenderFailed(e.to_string())
    }
}

/// A failed request to the workload API: what was being done, and the error.
pub(super) fn api_error(what: &str, e: kube::Error) -> WorkloadError {
    let message = format!("failed to {what} in the workload cluster: {e}");
    match &e {
        kube::Error::Api(_) => WorkloadError::Api(message),
        _ => WorkloadError::Unreachable(message),
    }
}

/// The plural of each kind the workload side writes.
pub(super) fn resource_of(obj: &DynamicObject) -> ApiResource {
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
