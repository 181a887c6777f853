//! k0rdent `ClusterDeployment`: `.spec.config.ingress`, as the hosted-cp
//! ClusterTemplates read it.

use serde::Deserialize;

use super::{
    Source, SourceError,
    k0smotron::{self, Defaults, UpstreamIngress, UpstreamService},
};
use crate::api::ControlPlaneIngressSpec;

/// `.spec.config.ingress` of the hosted-cp templates.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct TemplateIngress {
    #[serde(default)]
    enabled: bool,
    #[serde(flatten)]
    ingress: UpstreamIngress,
}

pub(super) fn spec(source: &Source<'_>) -> Result<ControlPlaneIngressSpec, SourceError> {
    let block: TemplateIngress = source.read("/spec/config/ingress")?.ok_or_else(|| {
        source.not_requested(
            "spec.config.ingress",
            "missing: the object asks for no ingress",
        )
    })?;
    if !block.enabled {
        return Err(source.not_requested(
            "spec.config.ingress.enabled",
            "false: the ingress is disabled",
        ));
    }
    let has = |host: &Option<String>| host.as_deref().is_some_and(|h| !h.is_empty());
    if block.ingress.api_host.is_empty() || !has(&block.ingress.konnectivity_host) {
        return Err(source.not_requested(
            "spec.config.ingress",
            "enabled, but apiHost and konnectivityHost are not both set: the hosted-cp templates create no ingress then",
        ));
    }
    // The templates name the K0smotronControlPlane `<name>-cp` and default to a LoadBalancer.
    let service: UpstreamService = source
        .read("/spec/config/k0smotron/service")?
        .unwrap_or_default();
    let backend = k0smotron::backend(
        source,
        &format!("{}-cp", source.name()),
        &service,
        Defaults {
            service_type: "LoadBalancer",
            api_port: 6443,
            konnectivity_port: 8132,
        },
        "spec.config.k0smotron.service",
    )?;
    Ok(ControlPlaneIngressSpec {
        cluster_name: source.name().to_string(),
        ingress: k0smotron::ingress_spec(source, block.ingress, "spec.config.ingress")?,
        route: None,
        backend,
        proxy: None,
        ccm: None,
    })
}
