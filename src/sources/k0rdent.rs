//! k0rdent `ClusterDeployment`: `.spec.config.ingress`, as the hosted-cp
//! ClusterTemplates read it. `spec.config` is free-form in the CRD (the
//! template's values): the hosted-cp templates copy `config.ingress` into
//! their K0smotronControlPlane's `spec.ingress` and `config.k0smotron.service`
//! into its `spec.service`, so those blocks are read as that kind's types.

use serde::{Deserialize, de::DeserializeOwned};
use serde_json::Value;

use super::{
    k0smotron::{self, Defaults, UpstreamIngress, UpstreamService},
    source::{Source, SourceError},
};
use crate::api::{ControlPlaneIngressSpec, upstream::cluster_deployment::ClusterDeploymentSpec};

/// The hosted-cp templates' `ingress.className` default.
const TEMPLATE_CLASS: &str = "haproxy";
/// The hosted-cp templates' `ingress.annotations` default.
const TEMPLATE_ANNOTATIONS: &[(&str, &str)] = &[("haproxy.org/ssl-passthrough", "true")];

/// `.spec.config.ingress` of the hosted-cp templates: their switch, and the
/// block they pass on.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct TemplateIngress {
    #[serde(default)]
    enabled: bool,
    #[serde(flatten)]
    ingress: UpstreamIngress,
}

pub(super) fn spec(source: &Source<'_>) -> Result<ControlPlaneIngressSpec, SourceError> {
    let config = source
        .spec::<ClusterDeploymentSpec>()?
        .config
        .unwrap_or_default();
    let block: TemplateIngress =
        template_value(source, &config, &["ingress"])?.ok_or_else(|| {
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
    if !has(&block.ingress.api_host) || !has(&block.ingress.konnectivity_host) {
        return Err(source.not_requested(
            "spec.config.ingress",
            "enabled, but apiHost and konnectivityHost are not both set: the hosted-cp templates create no ingress then",
        ));
    }
    // The templates make CAPI Cluster `<name>` with K0smotronControlPlane
    // `<name>-cp`, which names its k0smotron Cluster (and so the Service and
    // Ingress) after the CAPI Cluster; the Service defaults to a LoadBalancer.
    let service: UpstreamService =
        template_value(source, &config, &["k0smotron", "service"])?.unwrap_or_default();
    let control_plane = source.name().to_string();
    let backend = k0smotron::backend(
        source,
        &control_plane,
        &service,
        Defaults {
            service_type: "LoadBalancer",
            api_port: 6443,
            konnectivity_port: 8132,
        },
        "spec.config.k0smotron.service",
    )?;
    let mut ingress = block.ingress;
    // The hosted-cp templates' defaults: HAProxy with SSL passthrough.
    if ingress.class_name.as_deref().is_none_or(str::is_empty) {
        ingress.class_name = Some(TEMPLATE_CLASS.into());
    }
    if ingress.annotations.as_ref().is_none_or(|a| a.is_empty()) {
        ingress.annotations = Some(
            TEMPLATE_ANNOTATIONS
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
    }
    let upstream = k0smotron::upstream(source, &control_plane, &ingress)?;
    Ok(k0smotron::assemble(
        source.name().to_string(),
        k0smotron::ingress_spec(source, ingress, "spec.config.ingress")?,
        backend,
        upstream,
    ))
}

/// The template value at `path` under `spec.config`, as `T`; `None` when absent.
fn template_value<T: DeserializeOwned>(
    source: &Source<'_>,
    config: &Value,
    path: &[&str],
) -> Result<Option<T>, SourceError> {
    let Some(value) = path
        .iter()
        .try_fold(config, |v, key| v.get(key))
        .filter(|v| !v.is_null())
    else {
        return Ok(None);
    };
    let at = format!("spec.config.{}", path.join("."));
    serde_path_to_error::deserialize(value)
        .map(Some)
        .map_err(|e| {
            let inner = e.path().to_string();
            SourceError::Malformed {
                object: source.object.clone(),
                field: if inner == "." {
                    at
                } else {
                    format!("{at}.{inner}")
                },
                source: e.into_inner(),
            }
        })
}
