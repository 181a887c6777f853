//! The domain annotation: on a CAPI `Cluster` (ours, `hcp-ingress.dev/domain`)
//! it asks for hosts `NS-N.k8s.<domain>` and `NS-N.konnectivity.<domain>`, the
//! scheme of Kamaji's ingress addon. Also the pieces the TenantControlPlane
//! adapters share: the annotations that pick a route, the standalone
//! kubeconfig.

use std::collections::BTreeMap;

use super::{
    source::{Source, SourceError},
    tenant::Tenant,
};
use crate::api::{
    BackendSpec, ControlPlaneIngressSpec, DEFAULT_INGRESS_PORT, Flavor, IngressSpec, RouteSpec,
    SecretKeyRef,
    upstream::CapiCluster,
    validation::{FieldError, FieldErrors, check_dns1123_subdomain},
};

/// Opt-in annotation: its value is the domain suffix.
pub const DOMAIN_ANNOTATION: &str = "hcp-ingress.dev/domain";
/// Optional ingress class for annotated objects.
pub const CLASS_ANNOTATION: &str = "hcp-ingress.dev/class-name";
/// Optional controller flavor for annotated objects.
pub const CONTROLLER_ANNOTATION: &str = "hcp-ingress.dev/controller";
pub(super) const DOMAIN_FIELD: &str = "metadata.annotations[hcp-ingress.dev/domain]";

/// Kamaji's default API server and konnectivity ports (its CAPI provider's too).
const API_PORT: i64 = 6443;
const KONNECTIVITY_PORT: i32 = 8132;
/// The default of a TenantControlPlane's `spec.addons.konnectivity.server.port`.
const TCP_KONNECTIVITY_PORT: i64 = KONNECTIVITY_PORT as i64;

/// A CAPI `Cluster` with [`DOMAIN_ANNOTATION`]: the Kamaji addon's host
/// scheme, the Service Kamaji's CAPI provider creates for its control plane.
pub(super) fn spec(source: &Source<'_>) -> Result<ControlPlaneIngressSpec, SourceError> {
    // Kamaji's CAPI provider names the TenantControlPlane (and its Service) after the control plane object.
    let cluster = CapiCluster::read(source.obj).map_err(|m| source.malformed(m))?;
    let backend = BackendSpec {
        service_name: cluster
            .control_plane_ref
            .unwrap_or_else(|| source.name().to_string()),
        api_port: API_PORT as i32,
        konnectivity_port: Some(KONNECTIVITY_PORT),
    };
    annotated(source, &[DOMAIN_ANNOTATION], None, backend)
}

/// A TenantControlPlane opted in with a domain annotation under one of
/// `keys`: its own Service, `spec.networkProfile.port`, and the konnectivity
/// host only with the konnectivity addon. Standalone ones are reached through
/// the admin kubeconfig.
pub(super) fn tenant(
    source: &Source<'_>,
    tenant: &Tenant,
    keys: &[&str],
    default_class: Option<&str>,
) -> Result<ControlPlaneIngressSpec, SourceError> {
    let backend = tenant_backend(source, tenant)?;
    Ok(ControlPlaneIngressSpec {
        kubeconfig_secret: standalone_kubeconfig(source),
        ..annotated(source, keys, default_class, backend)?
    })
}

/// A TenantControlPlane's Service (its own name), `spec.networkProfile.port`
/// and, with the konnectivity addon, the konnectivity server's port.
pub(super) fn tenant_backend(
    source: &Source<'_>,
    tenant: &Tenant,
) -> Result<BackendSpec, SourceError> {
    Ok(BackendSpec {
        service_name: source.name().to_string(),
        api_port: source.port(
            tenant.port.map(i64::from),
            API_PORT,
            "spec.networkProfile.port",
        )?,
        konnectivity_port: konnectivity_port(source, tenant)?,
    })
}

/// Hosts `<ns>-<name>.k8s.<domain>` and, when the backend has a konnectivity
/// port, `<ns>-<name>.konnectivity.<domain>`, from the domain annotation
/// under the first of `keys` the object carries; the route from our class and
/// controller annotations.
fn annotated(
    source: &Source<'_>,
    keys: &[&str],
    default_class: Option<&str>,
    backend: BackendSpec,
) -> Result<ControlPlaneIngressSpec, SourceError> {
    let annotations = source.obj.metadata.annotations.clone().unwrap_or_default();
    let domain = requested_domain(source, &annotations, keys)?;
    let (controller, class_name) = route_choice(source, &annotations)?;
    let prefix = format!("{}-{}", source.namespace(), source.name());
    let ingress = IngressSpec {
        api_host: format!("{prefix}.k8s.{domain}"),
        konnectivity_host: backend
            .konnectivity_port
            .map(|_| format!("{prefix}.konnectivity.{domain}")),
        class_name: class_name.or_else(|| default_class.map(str::to_string)),
        port: DEFAULT_INGRESS_PORT,
        annotations: Default::default(),
        deploy: true,
    };
    Ok(assemble(source, ingress, controller, backend))
}

/// A derived spec of `ingress`, `controller` and `backend`, with the
/// defaults for the rest.
pub(super) fn assemble(
    source: &Source<'_>,
    ingress: IngressSpec,
    controller: Option<Flavor>,
    backend: BackendSpec,
) -> ControlPlaneIngressSpec {
    ControlPlaneIngressSpec {
        cluster_name: source.cluster_name(),
        ingress,
        route: controller.map(|c| RouteSpec {
            controller: Some(c),
            ..RouteSpec::default()
        }),
        backend,
        proxy: None,
        ccm: None,
        kube_proxy_replacement: None,
        kubeconfig_secret: None,
        upstream: None,
    }
}

/// The domain suffix of the first of `keys` the object carries, checked.
pub(super) fn requested_domain(
    source: &Source<'_>,
    annotations: &BTreeMap<String, String>,
    keys: &[&str],
) -> Result<String, SourceError> {
    let (key, domain) = keys
        .iter()
        .find_map(|key| annotations.get(*key).map(|d| (*key, d)))
        .ok_or_else(|| {
            let field = format!("metadata.annotations[{}]", keys.join(" or "));
            source.not_requested(&field, "missing: the object asks for no ingress")
        })?;
    check_dns1123_subdomain(domain).map_err(|why| {
        invalid(
            source,
            &format!("metadata.annotations[{key}]"),
            format!("domain {why}"),
        )
    })?;
    Ok(domain.clone())
}

/// The flavor and ingress class an annotated object asks for.
pub(super) fn route_choice(
    source: &Source<'_>,
    annotations: &BTreeMap<String, String>,
) -> Result<(Option<Flavor>, Option<String>), SourceError> {
    let controller = annotations
        .get(CONTROLLER_ANNOTATION)
        .map(|value| {
            Flavor::ALL
                .into_iter()
                .find(|f| f.as_str() == value)
                .ok_or_else(|| {
                    invalid(
                        source,
                        &format!("metadata.annotations[{CONTROLLER_ANNOTATION}]"),
                        format!("unknown controller {value:?}: use one of {}", flavor_list()),
                    )
                })
        })
        .transpose()?;
    Ok((controller, annotations.get(CLASS_ANNOTATION).cloned()))
}

/// A TenantControlPlane that no CAPI control plane controls is standalone:
/// no `<cluster>-kubeconfig` exists, and Kamaji and Steward write the admin
/// kubeconfig as `<name>-admin-kubeconfig`, key `admin.conf`.
pub(super) fn standalone_kubeconfig(source: &Source<'_>) -> Option<SecretKeyRef> {
    let meta = &source.obj.metadata;
    let controlled = meta
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true));
    let labelled = meta
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(crate::api::CLUSTER_NAME_LABEL));
    (!controlled && !labelled).then(|| SecretKeyRef {
        name: format!("{}-admin-kubeconfig", source.name()),
        key: "admin.conf".into(),
    })
}

/// The konnectivity server's port when the TenantControlPlane's konnectivity
/// addon is on (`spec.addons.konnectivity` present); `None` when it is off.
pub(super) fn konnectivity_port(
    source: &Source<'_>,
    tenant: &Tenant,
) -> Result<Option<i32>, SourceError> {
    tenant
        .konnectivity
        .as_ref()
        .map(|k| {
            source.port(
                k.server_port.map(i64::from),
                TCP_KONNECTIVITY_PORT,
                "spec.addons.konnectivity.server.port",
            )
        })
        .transpose()
}

/// One invalid field of `source`.
pub(super) fn invalid(source: &Source<'_>, field: &str, message: String) -> SourceError {
    SourceError::Invalid {
        object: source.object.clone(),
        errors: FieldErrors(vec![FieldError {
            field: field.into(),
            message,
        }]),
    }
}

fn flavor_list() -> String {
    Flavor::ALL.map(Flavor::as_str).join(", ")
}
