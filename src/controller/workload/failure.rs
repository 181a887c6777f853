//! Why the workload side stopped before anything was applied: a condition
//! reason and message, apart from the outcome so the client and the parts
//! that apply objects report it without the reconcile context.

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};

use crate::controller::error::Error;

/// Why a workload cluster cannot be reached: a condition reason and message.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Unreachable {
    pub(super) reason: &'static str,
    pub(super) message: String,
}

pub(super) fn apply_failed(e: Error) -> Unreachable {
    Unreachable {
        reason: "ApplyFailed",
        message: e.to_string(),
    }
}

pub(super) fn render_failed(e: crate::render::workload::WorkloadError) -> Unreachable {
    Unreachable {
        reason: "RenderFailed",
        message: e.to_string(),
    }
}

pub(super) fn api_error(what: &str, e: kube::Error) -> Unreachable {
    let reason = match &e {
        kube::Error::Api(_) => "WorkloadAPIError",
        _ => "WorkloadUnreachable",
    };
    Unreachable {
        reason,
        message: format!("failed to {what} in the workload cluster: {e}"),
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
