//! Unit tests of the workload render: the node proxy and its steering here,
//! the patches to workloads that are not ours (cloud-controller-manager,
//! konnectivity-agent) in [`ccm`]. Every object kind and mode gets its own
//! readable fixture.

mod ccm;

use std::net::IpAddr;

use serde_json::json;

use super::*;
use crate::{
    api::{ControlPlaneIngress, ProxyMode},
    proxy::config as proxy_config_file,
};

fn cpi(proxy: serde_json::Value, ccm: serde_json::Value) -> ControlPlaneIngress {
    serde_json::from_value(json!({
        "apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
        "metadata": {"name": "tenant-01", "namespace": "tenants"},
        "spec": {
            "clusterName": "tenant-01",
            "ingress": {"apiHost": "api.tenant-01.example.com", "konnectivityHost": "konnectivity.tenant-01.example.com", "port": 8443},
            "backend": {"serviceName": "kmc-tenant-01", "apiPort": 30443, "konnectivityPort": 30132},
            "proxy": proxy,
            "ccm": ccm,
        },
    }))
    .unwrap()
}

fn inputs() -> WorkloadInputs {
    WorkloadInputs {
        ca_cert_pem: Some("-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n".into()),
        tls: Some(ProxyTls {
            cert_pem: "CERT".into(),
            key_pem: "KEY".into(),
        }),
        ..WorkloadInputs::default()
    }
}

/// The rendered config is read by the proxy's own parser and validator.
fn proxy_reads(cpi: &ControlPlaneIngress, inputs: &WorkloadInputs) -> proxy_config_file::Config {
    let text = proxy_config(cpi, inputs);
    proxy_config_file::validate(proxy_config_file::parse(&text).unwrap())
        .unwrap_or_else(|e| panic!("the proxy rejects the rendered config: {e}\n{text}"))
}

#[test]
fn every_mode_and_steering_renders_a_config_the_proxy_accepts() {
    for mode in ["reencrypt", "passthrough", "proxy-protocol", "pooled"] {
        for steering in ["advertise-address", "service"] {
            let c = cpi(
                json!({"mode": mode, "steering": steering, "upstreams": ["192.0.2.10", "2001:db8::10"]}),
                json!({}),
            );
            let cfg = proxy_reads(&c, &inputs());
            assert_eq!(cfg.mode.as_str(), mode);
            assert_eq!(cfg.upstream.server_name, "api.tenant-01.example.com");
            assert_eq!(cfg.upstream.port, 8443, "the shared ingress's port");
            assert_eq!(
                cfg.upstream.addresses,
                [
                    "192.0.2.10".parse::<IpAddr>().unwrap(),
                    "2001:db8::10".parse().unwrap()
                ]
            );
            assert_eq!(
                cfg.upstream.ca_file.to_str(),
                Some("/etc/hcp-ingress/config/ca.crt")
            );
            assert_eq!(cfg.passthrough_server_names, ["api.tenant-01.example.com"]);
            assert_eq!(
                cfg.admin,
                Some(
                    format!(
                        "127.0.0.1:{}",
                        if steering == "service" {
                            SERVICE_STEERING_ADMIN_PORT
                        } else {
                            ADMIN_PORT
                        }
                    )
                    .parse()
                    .unwrap()
                )
            );
            assert_eq!(cfg.tls.is_some(), matches!(mode, "reencrypt" | "pooled"));
            if steering == "advertise-address" {
                assert_eq!(cfg.listen.addr, "240.0.0.1:443".parse().unwrap());
                assert!(cfg.listen.manage_address);
                assert_eq!(cfg.listen.interface, "lo");
            } else {
                assert_eq!(cfg.listen.addr, "0.0.0.0:6443".parse().unwrap());
                assert!(!cfg.listen.manage_address);
            }
        }
    }
}

/// The steering objects' one address and the EndpointSlice's family.
fn steered_at(c: &ControlPlaneIngress, i: &WorkloadInputs) -> (String, String, String) {
    let objects = proxy(c, i).unwrap().unwrap();
    let (endpoints, endpoint_slice) = objects.steering.advertise_address();
    let subset = &endpoints.subsets.as_ref().unwrap()[0];
    (
        subset.addresses.as_ref().unwrap()[0].ip.clone(),
        endpoint_slice.endpoints[0].addresses[0].clone(),
        endpoint_slice.address_type.clone(),
    )
}

#[test]
fn an_unset_advertise_address_follows_the_family_of_the_kubernetes_service() {
    let defaults = cpi(json!({}), json!({}));
    // IPv4, or dual-stack IPv4-primary (the Service is single-stack IPv4).
    assert_eq!(
        steered_at(&defaults, &inputs()),
        ("240.0.0.1".into(), "240.0.0.1".into(), "IPv4".into())
    );
    // IPv6-only, or dual-stack IPv6-primary: an IPv4 slice would be ignored
    // by kube-proxy, so the address is IPv6, from the discard prefix.
    let v6 = WorkloadInputs {
        service_ip: "fd00:10:96::1".parse().unwrap(),
        ..inputs()
    };
    assert_eq!(
        steered_at(&defaults, &v6),
        ("100::1".into(), "100::1".into(), "IPv6".into())
    );
    let cfg = proxy_reads(&defaults, &v6);
    assert_eq!(cfg.listen.addr, "[100::1]:443".parse().unwrap());
    // The proxy's certificate names the address pods are steered at.
    let leaf = proxy_leaf_spec(&defaults, &v6, std::time::SystemTime::now()).unwrap();
    assert!(
        leaf.ip_addresses
            .contains(&"100::1".parse::<IpAddr>().unwrap()),
        "{:?}",
        leaf.ip_addresses
    );
    // Nothing of the default lands in the stored object.
    let stored = serde_json::to_value(&defaults.spec).unwrap();
    assert!(
        stored["proxy"].get("advertiseAddress").is_none(),
        "{stored}"
    );
}

#[test]
fn a_chosen_advertise_address_must_be_of_the_service_family() {
    let v6 = WorkloadInputs {
        service_ip: "fd00:10:96::1".parse().unwrap(),
        ..inputs()
    };
    let chosen = cpi(json!({"advertiseAddress": "fd00::1"}), json!({}));
    assert_eq!(
        steered_at(&chosen, &v6),
        ("fd00::1".into(), "fd00::1".into(), "IPv6".into())
    );
    assert_eq!(
        proxy_reads(&chosen, &v6).listen.addr,
        "[fd00::1]:443".parse().unwrap()
    );

    for (address, service_ip, families) in [
        ("240.0.0.1", v6.service_ip, ("IPv4", "IPv6")),
        ("fd00::1", inputs().service_ip, ("IPv6", "IPv4")),
    ] {
        let i = WorkloadInputs {
            service_ip,
            ..inputs()
        };
        let c = cpi(json!({"advertiseAddress": address}), json!({}));
        let err = proxy(&c, &i).unwrap_err().to_string();
        assert!(
            err.starts_with("ControlPlaneIngress tenants/tenant-01: spec.proxy.advertiseAddress: ")
                && err.contains(&format!("{address} is {}", families.0))
                && err.contains(&format!(
                    "kubernetes Service is {} ({service_ip})",
                    families.1
                )),
            "{err}"
        );
    }
}

#[test]
fn service_steering_listens_on_every_address_of_the_service_family() {
    let c = cpi(json!({"steering": "service"}), json!({}));
    let v6 = WorkloadInputs {
        service_ip: "fd00:10:96::1".parse().unwrap(),
        ..inputs()
    };
    assert_eq!(
        proxy_reads(&c, &v6).listen.addr,
        "[::]:6443".parse().unwrap()
    );
}

#[test]
fn empty_upstreams_resolve_the_api_host() {
    let cfg = proxy_reads(&cpi(json!({}), json!({})), &inputs());
    assert!(cfg.upstream.addresses.is_empty());
}

#[test]
fn proxy_port_input_wins() {
    let c = cpi(json!({"steering": "service"}), json!({}));
    let i = WorkloadInputs {
        proxy_port: Some(16443),
        ..inputs()
    };
    assert_eq!(proxy_reads(&c, &i).listen.addr.port(), 16443);
}

#[test]
fn capabilities_are_exactly_what_the_proxy_needs() {
    let spec = |steering: &str| proxy_spec(&cpi(json!({"steering": steering}), json!({})));
    assert_eq!(
        proxy_capabilities(&spec("advertise-address"), 443),
        ["NET_ADMIN", "NET_BIND_SERVICE"]
    );
    assert_eq!(
        proxy_capabilities(&spec("advertise-address"), 8443),
        ["NET_ADMIN"]
    );
    assert_eq!(
        proxy_capabilities(&spec("service"), 443),
        ["NET_BIND_SERVICE"]
    );
    assert!(proxy_capabilities(&spec("service"), 6443).is_empty());
}

#[test]
fn without_capabilities_the_proxy_runs_as_non_root() {
    let objects = proxy(&cpi(json!({"steering": "service"}), json!({})), &inputs())
        .unwrap()
        .unwrap();
    let pod = objects.daemon_set.spec.unwrap().template.spec.unwrap();
    let sc = pod.security_context.unwrap();
    assert_eq!(
        (sc.run_as_non_root, sc.run_as_user, sc.fs_group),
        (Some(true), Some(65532), Some(65532))
    );
    let caps = pod.containers[0]
        .security_context
        .clone()
        .unwrap()
        .capabilities
        .unwrap();
    assert_eq!(caps.drop, Some(vec!["ALL".to_string()]));
    // No `add: []`: the API server drops an empty list, and an object that
    // never matches the live one is written on every pass.
    assert_eq!(caps.add, None);
    // fsGroup reads them: group-readable, nobody else.
    assert!(pod.volumes.unwrap().iter().all(|v| {
        v.config_map
            .as_ref()
            .is_none_or(|c| c.default_mode == Some(0o440))
    }));
}

#[test]
fn restart_hash_ignores_certificates_and_hot_reloaded_settings() {
    let hash = |c: &ControlPlaneIngress, i: &WorkloadInputs| {
        let ds = proxy(c, i).unwrap().unwrap().daemon_set;
        ds.spec
            .unwrap()
            .template
            .metadata
            .unwrap()
            .annotations
            .unwrap()[RESTART_HASH_ANNOTATION]
            .clone()
    };
    let base = cpi(json!({}), json!({}));
    let h = hash(&base, &inputs());
    let rotated = WorkloadInputs {
        tls: Some(ProxyTls {
            cert_pem: "NEW".into(),
            key_pem: "NEWKEY".into(),
        }),
        ca_cert_pem: Some("other CA".into()),
        ..inputs()
    };
    assert_eq!(
        hash(&base, &rotated),
        h,
        "a re-minted certificate must not roll the nodes"
    );
    let upstreams = cpi(json!({"upstreams": ["192.0.2.99"]}), json!({}));
    assert_eq!(hash(&upstreams, &inputs()), h, "upstreams hot-reload");
    let moved = cpi(json!({"advertiseAddress": "240.0.0.2"}), json!({}));
    assert_ne!(
        hash(&moved, &inputs()),
        h,
        "the listen address needs a restart"
    );
}

#[test]
fn secret_only_in_reencrypt_mode_with_a_certificate() {
    let reencrypt = cpi(json!({}), json!({}));
    let objects = proxy(&reencrypt, &inputs()).unwrap().unwrap();
    let secret = objects.secret.unwrap();
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let keys: Vec<_> = secret.data.unwrap().into_keys().collect();
    assert_eq!(keys, ["tls.crt", "tls.key"]);
    assert!(
        proxy(
            &reencrypt,
            &WorkloadInputs {
                tls: None,
                ..inputs()
            }
        )
        .unwrap()
        .unwrap()
        .secret
        .is_none()
    );
    let passthrough = cpi(json!({"mode": "passthrough"}), json!({}));
    let objects = proxy(&passthrough, &inputs()).unwrap().unwrap();
    assert!(objects.secret.is_none());
    let pod = objects.daemon_set.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.volumes.unwrap().len(), 1, "no TLS volume without TLS");
    assert_eq!(proxy_spec(&passthrough).mode, ProxyMode::Passthrough);

    // Pooled mode terminates the pods' TLS too: the same Secret and mount,
    // and a leaf to mint.
    let pooled = cpi(json!({"mode": "pooled"}), json!({}));
    let objects = proxy(&pooled, &inputs()).unwrap().unwrap();
    assert!(objects.secret.is_some());
    let pod = objects.daemon_set.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.volumes.unwrap().len(), 2, "config and TLS volumes");
    assert!(proxy_leaf_spec(&pooled, &inputs(), std::time::SystemTime::now()).is_some());
}

#[test]
fn disabled_proxy_renders_nothing() {
    assert!(
        proxy(&cpi(json!({"enabled": false}), json!({})), &inputs())
            .unwrap()
            .is_none()
    );
}

#[test]
fn invalid_input_names_the_field() {
    let bad = cpi(json!({"advertiseAddress": "nope"}), json!({}));
    let err = proxy(&bad, &inputs()).unwrap_err().to_string();
    assert_eq!(
        err,
        "ControlPlaneIngress tenants/tenant-01: spec.proxy.advertiseAddress: \"nope\" is not an IP address"
    );
}

#[test]
fn image_from_spec_else_the_controllers() {
    let image = |c: &ControlPlaneIngress| {
        let ds = proxy(
            c,
            &WorkloadInputs {
                image: "mirror.local/hcp-ingress:v9".into(),
                ..inputs()
            },
        )
        .unwrap()
        .unwrap()
        .daemon_set;
        ds.spec.unwrap().template.spec.unwrap().containers[0]
            .image
            .clone()
            .unwrap()
    };
    assert_eq!(
        image(&cpi(json!({}), json!({}))),
        "mirror.local/hcp-ingress:v9"
    );
    assert_eq!(
        image(&cpi(
            json!({"image": "registry.example/proxy:1"}),
            json!({})
        )),
        "registry.example/proxy:1"
    );
}

#[test]
fn debug_never_shows_keys() {
    let shown = format!("{:?}", inputs());
    assert!(
        !shown.contains("KEY") && shown.contains("<redacted>"),
        "{shown}"
    );
}

#[test]
fn leaf_spec_only_where_a_certificate_is_served() {
    let now = std::time::UNIX_EPOCH;
    let spec = proxy_leaf_spec(
        &cpi(json!({"advertiseAddress": "240.0.0.9"}), json!({})),
        &inputs(),
        now,
    )
    .unwrap();
    assert_eq!(
        spec.ip_addresses,
        [
            "10.96.0.1".parse::<IpAddr>().unwrap(),
            "240.0.0.9".parse().unwrap()
        ]
    );
    assert_eq!(spec.dns_names[3], "kubernetes.default.svc.cluster.local");
    assert_eq!(spec.validity, crate::pki::DEFAULT_VALIDITY);
    assert!(
        proxy_leaf_spec(
            &cpi(json!({"mode": "passthrough"}), json!({})),
            &inputs(),
            now
        )
        .is_none()
    );
    assert!(proxy_leaf_spec(&cpi(json!({"enabled": false}), json!({})), &inputs(), now).is_none());
}

#[test]
fn steering_drift_spots_a_rewrite() {
    let objects = proxy(&cpi(json!({}), json!({})), &inputs())
        .unwrap()
        .unwrap();
    let (endpoints, endpoint_slice) = objects.steering.advertise_address();
    assert!(
        steering_drift(
            &objects.steering,
            Some(endpoints),
            Some(endpoint_slice),
            None
        )
        .is_empty()
    );
    // The API server's own reconciler put its address back.
    let mut rewritten = endpoints.clone();
    rewritten.subsets.as_mut().unwrap()[0]
        .addresses
        .as_mut()
        .unwrap()[0]
        .ip = "192.0.2.50".into();
    let drift = steering_drift(
        &objects.steering,
        Some(&rewritten),
        Some(endpoint_slice),
        None,
    );
    assert_eq!(drift.len(), 1);
    assert!(drift[0].contains("192.0.2.50"), "{drift:?}");
    assert_eq!(steering_drift(&objects.steering, None, None, None).len(), 2);

    let service = proxy(&cpi(json!({"steering": "service"}), json!({})), &inputs())
        .unwrap()
        .unwrap();
    let live: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
        "metadata": {"name": "kubernetes", "namespace": "default"},
        "spec": {"selector": {"app.kubernetes.io/name": "hcp-ingress-proxy"}, "internalTrafficPolicy": "Local", "publishNotReadyAddresses": true, "clusterIP": "10.96.0.1"},
    }))
    .unwrap();
    assert!(steering_drift(&service.steering, None, None, Some(&live)).is_empty());
    let mut reset = live.clone();
    reset.spec.as_mut().unwrap().selector = None;
    assert_eq!(
        steering_drift(&service.steering, None, None, Some(&reset)).len(),
        1
    );
}

#[test]
fn service_steering_runs_the_proxy_next_to_the_kubernetes_service() {
    // A Service selects pods of its own namespace only.
    let service = proxy(&cpi(json!({"steering": "service"}), json!({})), &inputs())
        .unwrap()
        .unwrap();
    for namespace in [
        service.config_map.metadata.namespace.as_deref(),
        service.daemon_set.metadata.namespace.as_deref(),
        service
            .secret
            .as_ref()
            .unwrap()
            .metadata
            .namespace
            .as_deref(),
    ] {
        assert_eq!(namespace, Some("default"));
    }
    let advertise = proxy(&cpi(json!({}), json!({})), &inputs())
        .unwrap()
        .unwrap();
    assert_eq!(
        advertise.daemon_set.metadata.namespace.as_deref(),
        Some("kube-system")
    );
    // Both run on every node during a switch: their readiness probes must
    // not reach each other's admin listener.
    let probe_port = |o: &ProxyObjects| {
        let pod = o.daemon_set.spec.clone().unwrap().template.spec.unwrap();
        let probe = pod.containers[0].readiness_probe.clone().unwrap();
        probe.http_get.unwrap().port
    };
    assert_ne!(probe_port(&service), probe_port(&advertise));
}

#[test]
fn the_handover_patch_selects_the_proxy_without_the_local_policy() {
    let patch = serde_json::to_value(service_handover_patch()).unwrap();
    assert_eq!(patch["spec"]["selector"], json!(selector_labels()));
    assert!(
        patch["spec"].get("internalTrafficPolicy").is_none(),
        "{patch}"
    );
}
