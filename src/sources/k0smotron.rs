//! K0smotronControlPlane and k0smotron `Cluster`: `.spec.ingress`, backend
//! Service named the way k0smotron names it.

use std::collections::BTreeMap;

use md5::{Digest, Md5};
use serde::Deserialize;

use super::{Source, SourceError};
use crate::api::{BackendSpec, ControlPlaneIngressSpec, IngressSpec};

/// k0smotron's default service ports.
const API_PORT: i64 = 30443;
const KONNECTIVITY_PORT: i64 = 30132;

/// `.spec.ingress` of K0smotronControlPlane / k0smotron Cluster (v1beta1 and v1beta2).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct UpstreamIngress {
    #[serde(default)]
    pub api_host: String,
    pub konnectivity_host: Option<String>,
    pub class_name: Option<String>,
    pub port: Option<i64>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    pub deploy: Option<bool>,
}

/// `.spec.service` of the same kinds (and of k0rdent's `config.k0smotron.service`).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct UpstreamService {
    #[serde(rename = "type")]
    pub type_: Option<String>,
    pub api_port: Option<i64>,
    pub konnectivity_port: Option<i64>,
}

pub(super) fn spec(source: &Source<'_>) -> Result<ControlPlaneIngressSpec, SourceError> {
    let ingress: UpstreamIngress = source.read("/spec/ingress")?.ok_or_else(|| {
        source.not_requested("spec.ingress", "missing: the object asks for no ingress")
    })?;
    let service: UpstreamService = source.read("/spec/service")?.unwrap_or_default();
    let backend = backend(
        source,
        source.name(),
        &service,
        Defaults {
            service_type: "ClusterIP",
            api_port: API_PORT,
            konnectivity_port: KONNECTIVITY_PORT,
        },
        "spec.service",
    )?;
    Ok(ControlPlaneIngressSpec {
        cluster_name: source.cluster_name(),
        ingress: ingress_spec(source, ingress, "spec.ingress")?,
        route: None,
        backend,
        proxy: None,
        ccm: None,
    })
}

/// The k0smotron ingress block as ours: same field names by design.
pub(super) fn ingress_spec(
    source: &Source<'_>,
    ingress: UpstreamIngress,
    field: &str,
) -> Result<IngressSpec, SourceError> {
    Ok(IngressSpec {
        api_host: ingress.api_host,
        konnectivity_host: ingress.konnectivity_host.filter(|h| !h.is_empty()),
        class_name: ingress.class_name.filter(|c| !c.is_empty()),
        port: source.port(
            ingress.port,
            crate::api::DEFAULT_INGRESS_PORT.into(),
            &format!("{field}.port"),
        )?,
        annotations: ingress.annotations,
        deploy: ingress.deploy.unwrap_or(true),
    })
}

/// Defaults of the k0smotron service block where it comes from.
pub(super) struct Defaults {
    pub service_type: &'static str,
    pub api_port: i64,
    pub konnectivity_port: i64,
}

/// The Service k0smotron creates for the control plane `name` and its ports.
pub(super) fn backend(
    source: &Source<'_>,
    name: &str,
    service: &UpstreamService,
    defaults: Defaults,
    field: &str,
) -> Result<BackendSpec, SourceError> {
    let service_type = service.type_.as_deref().unwrap_or(defaults.service_type);
    Ok(BackendSpec {
        service_name: service_name(name, service_type),
        api_port: source.port(
            service.api_port,
            defaults.api_port,
            &format!("{field}.apiPort"),
        )?,
        konnectivity_port: Some(source.port(
            service.konnectivity_port,
            defaults.konnectivity_port,
            &format!("{field}.konnectivityPort"),
        )?),
    })
}

/// k0smotron's Service name for a control plane and Service type.
pub(super) fn service_name(name: &str, service_type: &str) -> String {
    let suffix = match service_type {
        "NodePort" => "-nodeport",
        "LoadBalancer" => "-lb",
        _ => "",
    };
    shorten(format!("kmc-{name}{suffix}"))
}

/// Names over 63 characters are shortened as k0smotron does: the first 57
/// characters, `-`, and the first 5 hex digits of the MD5 of the full name.
pub(super) fn shorten(name: String) -> String {
    if name.len() <= 63 {
        return name;
    }
    let hex = format!("{:x}", Md5::digest(name.as_bytes()));
    format!("{}-{}", &name[..57], &hex[..5])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_names_follow_k0smotron() {
        assert_eq!(service_name("tenant", "ClusterIP"), "kmc-tenant");
        assert_eq!(service_name("tenant", "NodePort"), "kmc-tenant-nodeport");
        assert_eq!(service_name("tenant", "LoadBalancer"), "kmc-tenant-lb");
    }

    #[test]
    fn long_names_are_shortened_with_an_md5_suffix() {
        let long = "a".repeat(70);
        let full = format!("kmc-{long}-lb");
        let short = service_name(&long, "LoadBalancer");
        assert_eq!(short.len(), 63);
        assert_eq!(&short[..57], &full[..57]);
        // md5 of the full name, computed independently with coreutils' md5sum.
        let expected = format!("{:x}", Md5::digest(full.as_bytes()));
        assert_eq!(&short[58..], &expected[..5]);
        assert_eq!(service_name("short", "ClusterIP").len(), "kmc-short".len());
    }
}
