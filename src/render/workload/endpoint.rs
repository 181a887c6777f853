//! The API server's address for dataplanes that replace kube-proxy, pure.
//!
//! Cilium's kube-proxy replacement and Calico's eBPF dataplane implement
//! Services themselves, so their agents cannot reach the API server through
//! one: each reads the address from a ConfigMap at start. Calico's
//! calico-node and tigera-operator take `KUBERNETES_SERVICE_HOST/PORT` from
//! `kubernetes-services-endpoint` (`envFrom`, optional): manifest installs in
//! `kube-system`, operator installs in `tigera-operator`. Cilium's Helm chart
//! reads the host from the ConfigMap its `k8sServiceHostRef` names; we publish
//! `kube-system/control-plane-endpoint` with k0smotron's keys, the name
//! Cilium users of hosted control planes already point it at. The address is
//! `ingress.apiHost:ingress.port`: the name the API server's certificate
//! carries, reached through the shared ingress.

use std::collections::BTreeMap;

use k8s_openapi::{api::core::v1::ConfigMap, apimachinery::pkg::apis::meta::v1::ObjectMeta};

use super::{
    ccm::{SERVICE_HOST_ENV, SERVICE_PORT_ENV},
    shared::{NAMESPACE, own_labels},
};
use crate::api::ControlPlaneIngress;

/// Calico's ConfigMap, read in `kube-system` by manifest installs
/// (calico-node) and in [`OPERATOR_NAMESPACE`] by operator installs (the
/// operator passes it on to calico-node).
pub const CALICO_ENDPOINT_NAME: &str = "kubernetes-services-endpoint";
/// The ConfigMap Cilium's `k8sServiceHostRef` names (k0smotron's), in
/// `kube-system`, Cilium's namespace in its default install.
pub const CILIUM_ENDPOINT_NAME: &str = "control-plane-endpoint";
/// The namespace an operator install of Calico creates: our ConfigMap waits
/// for it rather than create it (its removal would take the operator along).
pub const OPERATOR_NAMESPACE: &str = "tigera-operator";

/// One place the address is published: a ConfigMap and its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointLocation {
    /// Namespace of the ConfigMap.
    pub namespace: &'static str,
    /// Its name.
    pub name: &'static str,
    /// The key of the host.
    pub host_key: &'static str,
    /// The key of the port.
    pub port_key: &'static str,
}

impl std::fmt::Display for EndpointLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ConfigMap {}/{}", self.namespace, self.name)
    }
}

/// Every place the address is published, in the order it is written.
pub const ENDPOINT_LOCATIONS: [EndpointLocation; 3] = [
    EndpointLocation {
        namespace: NAMESPACE,
        name: CALICO_ENDPOINT_NAME,
        host_key: SERVICE_HOST_ENV,
        port_key: SERVICE_PORT_ENV,
    },
    EndpointLocation {
        namespace: OPERATOR_NAMESPACE,
        name: CALICO_ENDPOINT_NAME,
        host_key: SERVICE_HOST_ENV,
        port_key: SERVICE_PORT_ENV,
    },
    EndpointLocation {
        namespace: NAMESPACE,
        name: CILIUM_ENDPOINT_NAME,
        host_key: "apiServerHost",
        port_key: "apiServerPort",
    },
];

/// Whether `cpi` asks for the address to be published.
pub fn publishes_endpoint(cpi: &ControlPlaneIngress) -> bool {
    cpi.spec
        .kube_proxy_replacement
        .as_ref()
        .is_some_and(|k| k.publish_endpoint)
}

/// The ConfigMap with the address at `location`, ours by its labels.
pub fn endpoint_config_map(cpi: &ControlPlaneIngress, location: &EndpointLocation) -> ConfigMap {
    let ingress = &cpi.spec.ingress;
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(location.name.to_string()),
            namespace: Some(location.namespace.to_string()),
            labels: Some(own_labels()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([
            (location.host_key.to_string(), ingress.api_host.clone()),
            (location.port_key.to_string(), ingress.port.to_string()),
        ])),
        ..ConfigMap::default()
    }
}

/// Every published ConfigMap `cpi` asks for, with its location; none
/// without the opt-in.
pub fn endpoint_config_maps(cpi: &ControlPlaneIngress) -> Vec<(EndpointLocation, ConfigMap)> {
    if !publishes_endpoint(cpi) {
        return Vec::new();
    }
    ENDPOINT_LOCATIONS
        .iter()
        .map(|l| (*l, endpoint_config_map(cpi, l)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{super::shared::is_ours, *};
    use crate::api::{
        BackendSpec, ControlPlaneIngressSpec, IngressSpec, KubeProxyReplacementSpec,
        MANAGED_BY_LABEL,
    };

    fn cpi(publish: Option<bool>) -> ControlPlaneIngress {
        ControlPlaneIngress::new(
            "tenant-01",
            ControlPlaneIngressSpec {
                cluster_name: "tenant-01".into(),
                ingress: IngressSpec {
                    api_host: "api.tenant-01.example.com".into(),
                    port: 8443,
                    ..IngressSpec::default()
                },
                route: None,
                backend: BackendSpec {
                    service_name: "kmc-tenant-01".into(),
                    api_port: 30443,
                    konnectivity_port: None,
                },
                proxy: None,
                ccm: None,
                kube_proxy_replacement: publish
                    .map(|publish_endpoint| KubeProxyReplacementSpec { publish_endpoint }),
                kubeconfig_secret: None,
                upstream: None,
            },
        )
    }

    #[test]
    fn nothing_is_published_without_the_opt_in() {
        assert!(endpoint_config_maps(&cpi(None)).is_empty());
        assert!(endpoint_config_maps(&cpi(Some(false))).is_empty());
    }

    #[test]
    fn calico_and_cilium_read_the_api_host_and_the_ingress_port() {
        let maps = endpoint_config_maps(&cpi(Some(true)));
        let found: Vec<(String, String, BTreeMap<String, String>)> = maps
            .iter()
            .map(|(_, cm)| {
                (
                    cm.metadata.namespace.clone().unwrap(),
                    cm.metadata.name.clone().unwrap(),
                    cm.data.clone().unwrap(),
                )
            })
            .collect();
        let calico = BTreeMap::from([
            (
                "KUBERNETES_SERVICE_HOST".to_string(),
                "api.tenant-01.example.com".to_string(),
            ),
            ("KUBERNETES_SERVICE_PORT".to_string(), "8443".to_string()),
        ]);
        let cilium = BTreeMap::from([
            (
                "apiServerHost".to_string(),
                "api.tenant-01.example.com".to_string(),
            ),
            ("apiServerPort".to_string(), "8443".to_string()),
        ]);
        assert_eq!(
            found,
            [
                (
                    "kube-system".into(),
                    "kubernetes-services-endpoint".into(),
                    calico.clone()
                ),
                (
                    "tigera-operator".into(),
                    "kubernetes-services-endpoint".into(),
                    calico
                ),
                (
                    "kube-system".into(),
                    "control-plane-endpoint".into(),
                    cilium
                ),
            ]
        );
        // Ours, so a removal takes them back and nobody else's is touched.
        for (_, cm) in &maps {
            let labels = cm.metadata.labels.clone().unwrap();
            assert!(is_ours(&labels), "{labels:?}");
            assert!(labels.contains_key(MANAGED_BY_LABEL));
        }
    }
}
