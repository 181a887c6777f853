//! `networking.k8s.io/v1` Ingress for the Ingress-based flavors.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule,
    IngressServiceBackend, IngressSpec, ServiceBackendPort,
};

use super::shared::{host_routes, owned_meta, route_name};
use crate::api::{ControlPlaneIngress, Flavor};

/// The annotations that turn on SSL passthrough for a flavor.
pub fn passthrough_annotations(flavor: Flavor) -> &'static [(&'static str, &'static str)] {
    match flavor {
        Flavor::Haproxy => &[("haproxy.org/ssl-passthrough", "true")],
        Flavor::HaproxyIngress => &[("haproxy-ingress.github.io/ssl-passthrough", "true")],
        Flavor::Nginx => &[
            ("nginx.ingress.kubernetes.io/ssl-passthrough", "true"),
            ("nginx.ingress.kubernetes.io/backend-protocol", "HTTPS"),
        ],
        Flavor::Traefik | Flavor::Gateway | Flavor::Generic => &[],
    }
}

pub(super) fn render(cpi: &ControlPlaneIngress) -> Ingress {
    let spec = &cpi.spec;
    let mut metadata = owned_meta(cpi, route_name(cpi));
    metadata.annotations = Some(merged_annotations(
        passthrough_annotations(spec.flavor()),
        &spec.ingress.annotations,
    ));
    let rules = host_routes(cpi)
        .into_iter()
        .map(|route| IngressRule {
            host: Some(route.host.to_string()),
            http: Some(HTTPIngressRuleValue {
                paths: vec![HTTPIngressPath {
                    path: Some("/".into()),
                    path_type: "Prefix".into(),
                    backend: IngressBackend {
                        service: Some(IngressServiceBackend {
                            name: spec.backend.service_name.clone(),
                            port: Some(ServiceBackendPort {
                                number: Some(route.port),
                                name: None,
                            }),
                        }),
                        resource: None,
                    },
                }],
            }),
        })
        .collect();
    Ingress {
        metadata,
        spec: Some(IngressSpec {
            ingress_class_name: spec.ingress.class_name.clone(),
            rules: Some(rules),
            ..IngressSpec::default()
        }),
        status: None,
    }
}

/// The flavor's defaults, then the user's annotations over them: the user wins.
pub(super) fn merged_annotations(
    defaults: &[(&str, &str)],
    user: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut merged: BTreeMap<String, String> = defaults
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    merged.extend(user.iter().map(|(k, v)| (k.clone(), v.clone())));
    merged
}
