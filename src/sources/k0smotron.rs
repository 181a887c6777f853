//! K0smotronControlPlane and k0smotron `Cluster`: `.spec.ingress`, backend
//! Service named the way k0smotron names it.
//!
//! Since v1.10 k0smotron does two parts of the path itself whenever
//! `spec.ingress` is set: it creates the Ingress `kmc-<name>` (unless `deploy`
//! is false) and ships, through the k0s manifest deployer, the
//! `default/k0smotron-haproxy` DaemonSet with a selector-based `kubernetes`
//! Service into the workload cluster. hcp-ingress never owns those a second
//! time: the derived ControlPlaneIngress names them in `spec.upstream`, and
//! hcp-ingress adds the rest (the route when k0smotron was told `deploy:
//! false`, the CCM override, probes, status).

use md5::{Digest, Md5};

use super::source::{Source, SourceError, SourceKind};
use crate::api::{
    BackendSpec, ControlPlaneIngressSpec, IngressSpec, UpstreamObject, UpstreamSpec,
    upstream::{
        k0smotron_cluster::{ClusterIngress, ClusterService, ClusterSpec},
        k0smotron_control_plane::{
            K0smotronControlPlaneIngress, K0smotronControlPlaneService, K0smotronControlPlaneSpec,
        },
    },
};

/// k0smotron's default service ports.
const API_PORT: i64 = 30443;
const KONNECTIVITY_PORT: i64 = 30132;
/// The node proxy k0smotron ships into the workload cluster.
pub const HAPROXY_NAMESPACE: &str = "default";
/// Name of k0smotron's node proxy DaemonSet.
pub const HAPROXY_NAME: &str = "k0smotron-haproxy";

/// `.spec.ingress` of K0smotronControlPlane and k0smotron Cluster (the same
/// schema in both, and the block k0rdent's templates copy into the former).
pub(super) type UpstreamIngress = K0smotronControlPlaneIngress;
/// `.spec.service` of the same kinds (and of k0rdent's `config.k0smotron.service`).
pub(super) type UpstreamService = K0smotronControlPlaneService;

/// The k0smotron Cluster's blocks as the K0smotronControlPlane's: k0smotron
/// generates both from one Go type, field for field.
fn from_cluster(spec: ClusterSpec) -> K0smotronControlPlaneSpec {
    K0smotronControlPlaneSpec {
        ingress: spec.ingress.map(|i: ClusterIngress| UpstreamIngress {
            annotations: i.annotations,
            api_host: i.api_host,
            class_name: i.class_name,
            deploy: i.deploy,
            konnectivity_host: i.konnectivity_host,
            port: i.port,
        }),
        service: spec.service.map(|s: ClusterService| UpstreamService {
            api_port: s.api_port,
            konnectivity_port: s.konnectivity_port,
            r#type: s.r#type,
        }),
    }
}

pub(super) fn spec(source: &Source<'_>) -> Result<ControlPlaneIngressSpec, SourceError> {
    let spec = match source.kind {
        SourceKind::K0smotronControlPlane => source.spec::<K0smotronControlPlaneSpec>()?,
        _ => from_cluster(source.spec::<ClusterSpec>()?),
    };
    let ingress = spec.ingress.ok_or_else(|| {
        source.not_requested("spec.ingress", "missing: the object asks for no ingress")
    })?;
    // A K0smotronControlPlane makes a k0smotron Cluster with its own spec and
    // an owner reference to itself: the control plane object describes it.
    if let Some(kcp) = source
        .obj
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| {
            o.kind == "K0smotronControlPlane"
                && o.api_version.starts_with("controlplane.cluster.x-k8s.io/")
        })
    {
        return Err(source.not_requested(
            "metadata.ownerReferences",
            &format!(
                "made by K0smotronControlPlane {}, which describes the cluster",
                kcp.name
            ),
        ));
    }
    let service = spec.service.unwrap_or_default();
    // A K0smotronControlPlane makes a k0smotron `Cluster` named after its CAPI
    // Cluster, and that name is in every object k0smotron creates.
    let kmc = match source.kind {
        SourceKind::K0smotronControlPlane => source.cluster_name(),
        _ => source.name().to_string(),
    };
    let backend = backend(
        source,
        &kmc,
        &service,
        Defaults {
            service_type: "ClusterIP",
            api_port: API_PORT,
            konnectivity_port: KONNECTIVITY_PORT,
        },
        "spec.service",
    )?;
    let upstream = upstream(source, &kmc, &ingress)?;
    Ok(assemble(
        source.cluster_name(),
        ingress_spec(source, ingress, "spec.ingress")?,
        backend,
        upstream,
    ))
}

/// The spec of a cluster k0smotron runs: its route and node proxy are
/// k0smotron's (`upstream`), the rest defaults.
pub(super) fn assemble(
    cluster_name: String,
    ingress: IngressSpec,
    backend: BackendSpec,
    upstream: UpstreamSpec,
) -> ControlPlaneIngressSpec {
    ControlPlaneIngressSpec {
        cluster_name,
        ingress,
        route: None,
        backend,
        proxy: None,
        ccm: None,
        kube_proxy_replacement: None,
        kubeconfig_secret: None,
        upstream: Some(upstream),
    }
}

/// Annotation on the object a user writes (K0smotronControlPlane, k0smotron
/// Cluster, ClusterDeployment): `node-proxy` asks hcp-ingress to take the node
/// proxy over from k0smotron (docs/ownership.md, the migration).
pub const TAKE_OVER_ANNOTATION: &str = "hcp-ingress.dev/take-over";
/// The one value of [`TAKE_OVER_ANNOTATION`].
pub const TAKE_OVER_NODE_PROXY: &str = "node-proxy";

/// What k0smotron does itself for the k0smotron `Cluster` `name`: its
/// Ingress carries both hosts.
pub(super) fn upstream(
    source: &Source<'_>,
    name: &str,
    ingress: &UpstreamIngress,
) -> Result<UpstreamSpec, SourceError> {
    let take_over = match source
        .obj
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TAKE_OVER_ANNOTATION))
    {
        None => false,
        Some(v) if v == TAKE_OVER_NODE_PROXY => true,
        Some(v) => {
            return Err(super::domain::invalid(
                source,
                &format!("metadata.annotations[{TAKE_OVER_ANNOTATION}]"),
                format!("{v:?}: the only value is {TAKE_OVER_NODE_PROXY:?}"),
            ));
        }
    };
    Ok(UpstreamSpec {
        take_over_node_proxy: take_over,
        provider: "k0smotron".into(),
        route: ingress.deploy.unwrap_or(true).then(|| UpstreamObject {
            kind: "Ingress".into(),
            name: shorten(format!("kmc-{name}")),
            namespace: Some(source.namespace().to_string()),
        }),
        route_includes_konnectivity: true,
        node_proxy: Some(UpstreamObject {
            kind: "DaemonSet".into(),
            name: HAPROXY_NAME.into(),
            namespace: Some(HAPROXY_NAMESPACE.into()),
        }),
    })
}

/// The k0smotron ingress block as ours: same field names by design.
pub(super) fn ingress_spec(
    source: &Source<'_>,
    ingress: UpstreamIngress,
    field: &str,
) -> Result<IngressSpec, SourceError> {
    Ok(IngressSpec {
        api_host: ingress.api_host.unwrap_or_default(),
        konnectivity_host: ingress.konnectivity_host.filter(|h| !h.is_empty()),
        class_name: ingress.class_name.filter(|c| !c.is_empty()),
        port: source.port(
            ingress.port,
            crate::api::DEFAULT_INGRESS_PORT.into(),
            &format!("{field}.port"),
        )?,
        annotations: ingress.annotations.unwrap_or_default(),
        // `deploy` tells k0smotron whether IT creates the Ingress; either way
        // the host needs a route, and `spec.upstream.route` says whose it is.
        deploy: true,
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
    let service_type = service.r#type.as_deref().unwrap_or(defaults.service_type);
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
