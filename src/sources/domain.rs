//! The Kamaji-style domain annotation on a CAPI `Cluster` or a Kamaji /
//! Steward `TenantControlPlane`: hosts `NS-N.k8s.<domain>` and
//! `NS-N.konnectivity.<domain>`.

use serde::Deserialize;

use super::{Source, SourceError, SourceKind};
use crate::api::{
    BackendSpec, ControlPlaneIngressSpec, DEFAULT_INGRESS_PORT, Flavor, IngressSpec, RouteSpec,
    validation::{FieldError, FieldErrors, check_dns1123_subdomain},
};

/// Opt-in annotation: its value is the domain suffix.
pub const DOMAIN_ANNOTATION: &str = "hcp-ingress.dev/domain";
/// Optional ingress class for annotated objects.
pub const CLASS_ANNOTATION: &str = "hcp-ingress.dev/class-name";
/// Optional controller flavor for annotated objects.
pub const CONTROLLER_ANNOTATION: &str = "hcp-ingress.dev/controller";
pub(super) const DOMAIN_FIELD: &str = "metadata.annotations[hcp-ingress.dev/domain]";

/// Kamaji's and Steward's default API server and konnectivity ports.
const API_PORT: i64 = 6443;
const KONNECTIVITY_PORT: i32 = 8132;

#[derive(Deserialize)]
struct ControlPlaneRef {
    name: String,
}

pub(super) fn spec(source: &Source<'_>) -> Result<ControlPlaneIngressSpec, SourceError> {
    let annotations = source.obj.metadata.annotations.clone().unwrap_or_default();
    let domain = annotations.get(DOMAIN_ANNOTATION).ok_or_else(|| {
        source.not_requested(DOMAIN_FIELD, "missing: the object asks for no ingress")
    })?;
    let invalid = |field: &str, message: String| SourceError::Invalid {
        object: source.object.clone(),
        errors: FieldErrors(vec![FieldError {
            field: field.into(),
            message,
        }]),
    };
    check_dns1123_subdomain(domain)
        .map_err(|why| invalid(DOMAIN_FIELD, format!("domain {why}")))?;
    let controller = annotations
        .get(CONTROLLER_ANNOTATION)
        .map(|value| {
            Flavor::ALL
                .into_iter()
                .find(|f| f.as_str() == value)
                .ok_or_else(|| {
                    invalid(
                        &format!("metadata.annotations[{CONTROLLER_ANNOTATION}]"),
                        format!("unknown controller {value:?}: use one of {}", flavor_list()),
                    )
                })
        })
        .transpose()?;

    let prefix = format!("{}-{}", source.namespace(), source.name());
    let (service_name, api_port) = match source.kind {
        SourceKind::CapiCluster => {
            // Kamaji's CAPI provider names the TenantControlPlane (and its Service) after the control plane object.
            let cp: Option<ControlPlaneRef> = source.read("/spec/controlPlaneRef")?;
            (
                cp.map_or_else(|| source.name().to_string(), |r| r.name),
                API_PORT,
            )
        }
        _ => (
            source.name().to_string(),
            source
                .read("/spec/networkProfile/port")?
                .unwrap_or(API_PORT),
        ),
    };
    Ok(ControlPlaneIngressSpec {
        cluster_name: source.cluster_name(),
        ingress: IngressSpec {
            api_host: format!("{prefix}.k8s.{domain}"),
            konnectivity_host: Some(format!("{prefix}.konnectivity.{domain}")),
            class_name: annotations.get(CLASS_ANNOTATION).cloned(),
            port: DEFAULT_INGRESS_PORT,
            annotations: Default::default(),
            deploy: true,
        },
        route: controller.map(|c| RouteSpec {
            controller: Some(c),
            ..RouteSpec::default()
        }),
        backend: BackendSpec {
            service_name,
            api_port: source.port(Some(api_port), API_PORT, "spec.networkProfile.port")?,
            konnectivity_port: Some(KONNECTIVITY_PORT),
        },
        proxy: None,
        ccm: None,
    })
}

fn flavor_list() -> String {
    Flavor::ALL.map(Flavor::as_str).join(", ")
}
