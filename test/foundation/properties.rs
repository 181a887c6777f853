//! Property tests of the management-side render: any valid
//! ControlPlaneIngress renders objects that pass their schemas and carry the
//! ownership metadata, and a spec broken in one field is rejected naming it.

use hcp_ingress::{
    api::{
        BackendSpec, CLUSTER_NAME_LABEL, ControlPlaneIngress, ControlPlaneIngressSpec, Flavor,
        GatewayRoute, IngressSpec, ParentRef, ProxySpec, RouteSpec, TraefikRoute,
    },
    render::{self, RenderError, RouteKind},
};
use k8s_openapi::api::networking::v1::Ingress;
use proptest::{prelude::*, test_runner::Config};
use serde_json::Value;

use crate::schema::{check, crd_for, upstream};

/// Enough to reach every flavor × option combination many times, and fast in debug.
const CASES: u32 = 512;

fn label() -> impl Strategy<Value = String> {
    "[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?"
}

/// RFC 1123 subdomain: 1-4 labels.
fn host() -> impl Strategy<Value = String> {
    prop::collection::vec(label(), 1..=4).prop_map(|l| l.join("."))
}

/// A host name the shared ingress can route by SNI: a subdomain that does
/// not read as an IP address (`0.0.0.0` is a valid subdomain, not a name).
fn sni_host() -> impl Strategy<Value = String> {
    host().prop_filter("SNI carries host names, never addresses", |h| {
        h.parse::<std::net::IpAddr>().is_err()
    })
}

fn port() -> impl Strategy<Value = i32> {
    1..=65535i32
}

fn bad_port() -> impl Strategy<Value = i32> {
    prop_oneof![i32::MIN..=0, 65536..=i32::MAX]
}

/// `[prefix/]name` annotation keys, mixed case allowed in the name part.
fn annotation_key() -> impl Strategy<Value = String> {
    (
        prop::option::of(host()),
        "[A-Za-z0-9]([-A-Za-z0-9_.]{0,12}[A-Za-z0-9])?",
    )
        .prop_map(|(prefix, name)| match prefix {
            Some(p) => format!("{p}/{name}"),
            None => name,
        })
}

/// How the flavor is chosen: `route.controller`, or only `ingress.className`.
#[derive(Debug, Clone)]
enum Selection {
    Controller(Flavor),
    ClassName(String),
}

fn selection() -> impl Strategy<Value = Selection> {
    prop_oneof![
        prop::sample::select(Flavor::ALL.to_vec()).prop_map(Selection::Controller),
        prop::sample::select(vec![
            "haproxy",
            "haproxy-ingress",
            "nginx",
            "traefik",
            "custom"
        ])
        .prop_map(|c| Selection::ClassName(c.to_string())),
    ]
}

fn parent_ref() -> impl Strategy<Value = ParentRef> {
    (
        label(),
        prop::option::of(label()),
        prop::option::of(label()),
        prop::option::of(port()),
    )
        .prop_map(|(name, namespace, section_name, port)| ParentRef {
            name,
            namespace,
            section_name,
            port,
        })
}

/// One to two references, each to a different Gateway: the TLSRoute CRD's
/// rules for a Gateway named twice (sectionName or port set alike, never the
/// same listener twice) are broken on purpose by the ParentRef breaks below.
fn parent_refs() -> impl Strategy<Value = Vec<ParentRef>> {
    prop::collection::vec(parent_ref(), 1..3).prop_map(|mut refs| {
        let mut seen = std::collections::BTreeSet::new();
        refs.retain(|r| seen.insert((r.name.clone(), r.namespace.clone())));
        refs
    })
}

/// An IPv4 address: a valid RFC 1123 subdomain, but no SNI host name.
fn ipv4() -> impl Strategy<Value = String> {
    any::<[u8; 4]>().prop_map(|o| std::net::Ipv4Addr::from(o).to_string())
}

fn ip() -> impl Strategy<Value = String> {
    prop_oneof![
        ipv4(),
        any::<[u16; 8]>().prop_map(|s| std::net::Ipv6Addr::from(s).to_string()),
    ]
}

prop_compose! {
    /// A ControlPlaneIngress that passes validation.
    fn valid_cpi()(
        (name, namespace, uid) in (
            label(),
            label(),
            prop::option::of("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),
        ),
        (cluster_name, api_host, konnectivity) in (host(), sni_host(), prop::option::of((sni_host(), port()))),
        (class_name, selection, ingress_port, deploy) in (
            prop::option::of(label()),
            selection(),
            port(),
            any::<bool>(),
        ),
        annotations in prop::collection::btree_map(annotation_key(), "\\PC{0,16}", 0..4),
        (service_name, api_port) in (label(), port()),
        (entry_points, parent_refs, proxy) in (
            prop::collection::vec(label(), 0..3),
            parent_refs(),
            prop::option::of((ip(), prop::collection::vec(ip(), 0..3))),
        ),
    ) -> ControlPlaneIngress {
        // The konnectivity host must differ from the API host (a CEL rule).
        let konnectivity = konnectivity.map(|(h, p)| (format!("konnectivity.{h}"), p));
        let (class_name, controller) = match selection {
            Selection::Controller(f) => (class_name, Some(f)),
            Selection::ClassName(c) => (Some(c), None),
        };
        let flavor = controller.unwrap_or_else(|| Flavor::from_class_name(class_name.as_deref()));
        let route = controller.map(|controller| RouteSpec {
            controller: Some(controller),
            gateway: (flavor == Flavor::Gateway).then_some(GatewayRoute { parent_refs }),
            traefik: (flavor == Flavor::Traefik).then_some(TraefikRoute { entry_points }),
        });
        let spec = ControlPlaneIngressSpec {
            cluster_name,
            ingress: IngressSpec {
                api_host,
                konnectivity_host: konnectivity.as_ref().map(|(h, _)| h.clone()),
                class_name,
                port: ingress_port,
                annotations,
                deploy,
            },
            route,
            backend: BackendSpec {
                service_name,
                api_port,
                konnectivity_port: konnectivity.as_ref().map(|(_, p)| *p),
            },
            proxy: proxy.map(|(advertise_address, upstreams)| ProxySpec {
                advertise_address: Some(advertise_address),
                upstreams,
                ..ProxySpec::default()
            }),
            ccm: None,
            kube_proxy_replacement: None,
            kubeconfig_secret: None,
            upstream: None,
        };
        let mut cpi = ControlPlaneIngress::new(&name, spec);
        cpi.metadata.namespace = Some(namespace);
        cpi.metadata.uid = uid;
        cpi
    }
}

/// The host names a spec routes, in render order.
fn spec_hosts(cpi: &ControlPlaneIngress) -> Vec<String> {
    let i = &cpi.spec.ingress;
    std::iter::once(i.api_host.clone())
        .chain(i.konnectivity_host.clone())
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|s| s.as_str().expect("a string").to_string())
        .collect()
}

/// Ingress: every field is one k8s-openapi knows (deserialize, serialize
/// back, nothing lost), and the rules route exactly the spec's hosts.
fn check_ingress(cpi: &ControlPlaneIngress, obj: &Value) -> Vec<String> {
    let typed: Ingress = serde_json::from_value(obj.clone()).expect("deserializes as an Ingress");
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(&back, obj, "fields k8s-openapi does not know were dropped");
    let annotations = typed.metadata.annotations.unwrap_or_default();
    for (k, v) in &cpi.spec.ingress.annotations {
        assert_eq!(annotations.get(k), Some(v), "user annotation {k} lost");
    }
    let rules = typed.spec.unwrap().rules.unwrap();
    for rule in &rules {
        let paths = &rule.http.as_ref().unwrap().paths;
        assert_eq!(paths.len(), 1);
        let backend = paths[0].backend.service.as_ref().unwrap();
        assert_eq!(backend.name, cpi.spec.backend.service_name);
    }
    rules.into_iter().map(|r| r.host.unwrap()).collect()
}

fn check_valid(cpi: &ControlPlaneIngress, crds: &[crdschema::Crd]) {
    let objects = render::management(cpi).expect("a valid spec renders");
    if !cpi.spec.ingress.deploy {
        assert!(objects.is_empty(), "deploy: false rendered {objects:?}");
        return;
    }
    let kind = RouteKind::of(cpi.spec.flavor());
    let hosts = spec_hosts(cpi);
    let expected_objects = if kind == RouteKind::TlsRoute {
        hosts.len()
    } else {
        1
    };
    assert_eq!(objects.len(), expected_objects);
    let owner = render::owner_reference(cpi);
    assert_eq!(owner.is_some(), cpi.metadata.uid.is_some());
    let mut routed = Vec::new();
    for obj in &objects {
        let meta = &obj.metadata;
        assert_eq!(meta.namespace, cpi.metadata.namespace);
        assert_eq!(
            meta.labels.as_ref().and_then(|l| l.get(CLUSTER_NAME_LABEL)),
            Some(&cpi.spec.cluster_name)
        );
        assert_eq!(meta.owner_references, owner.clone().map(|o| vec![o]));
        if let Some(o) = &owner {
            assert_eq!(Some(&o.uid), cpi.metadata.uid.as_ref());
            assert_eq!(o.controller, Some(true));
        }
        let value = serde_json::to_value(obj).unwrap();
        let gvk = kind.gvk();
        assert_eq!(value["kind"], gvk.kind.as_str());
        match kind {
            RouteKind::Ingress => routed.extend(check_ingress(cpi, &value)),
            RouteKind::IngressRouteTcp | RouteKind::TlsRoute => {
                let crd = crd_for(crds, &value).expect("an upstream CRD for the kind");
                check(crd, &value, &format!("{} of {cpi:?}", gvk.kind));
                if kind == RouteKind::TlsRoute {
                    routed.extend(strings(&value["spec"]["hostnames"]));
                } else {
                    for route in value["spec"]["routes"].as_array().unwrap() {
                        let m = route["match"].as_str().unwrap();
                        let host = m
                            .strip_prefix("HostSNI(`")
                            .and_then(|m| m.strip_suffix("`)"))
                            .unwrap_or_else(|| panic!("unexpected match {m}"));
                        routed.push(host.to_string());
                    }
                }
            }
        }
    }
    assert_eq!(routed, hosts, "routed hosts differ from the spec's");
}

#[test]
fn every_valid_spec_renders_schema_valid_owned_routes() {
    let crds = upstream();
    let mut runner = proptest::test_runner::TestRunner::new(Config::with_cases(CASES));
    runner
        .run(&valid_cpi(), |cpi| {
            check_valid(&cpi, &crds);
            Ok(())
        })
        .unwrap();
}

/// One field to break, and the field path the error must name.
#[derive(Debug, Clone)]
enum Break {
    ClusterName(String),
    ApiHost(String),
    KonnectivityHost(String),
    KonnectivityHostEqualsApiHost,
    KonnectivityHostWithoutPort,
    IngressPort(i32),
    AnnotationKey(String),
    ServiceName(String),
    ApiPort(i32),
    KonnectivityPort(i32),
    GatewayWithoutParents,
    ParentRefPort(i32),
    /// The first parentRef once more: the same listener named twice.
    ParentRefRepeated,
    AdvertiseAddress(String),
}

/// Not an RFC 1123 subdomain, derived from a valid one.
fn bad_host() -> impl Strategy<Value = String> {
    (host(), 0..7usize).prop_map(|(h, how)| match how {
        0 => String::new(),
        1 => h.to_ascii_uppercase() + "X",
        2 => format!("{h}_x"),
        3 => format!("-{h}"),
        4 => format!("{h}."),
        5 => format!("{h}..x"),
        _ => format!("{}.{h}", "a".repeat(253)),
    })
}

fn bad_label() -> impl Strategy<Value = String> {
    prop_oneof![
        bad_host().prop_filter("not a label", |h| !h.is_empty()),
        Just("a".repeat(64)),
        host().prop_map(|h| format!("{h}.x")),
    ]
}

fn bad_annotation_key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        annotation_key().prop_map(|k| format!("{k}/")),
        annotation_key().prop_map(|k| format!("-{k}")),
        annotation_key().prop_map(|k| format!("{k} x")),
        annotation_key().prop_map(|k| format!("Bad_Prefix/{k}")),
        Just("a".repeat(64)),
    ]
}

fn breaks() -> impl Strategy<Value = Break> {
    prop_oneof![
        bad_host().prop_map(Break::ClusterName),
        prop_oneof![bad_host(), ipv4()].prop_map(Break::ApiHost),
        prop_oneof![bad_host(), ipv4()].prop_map(Break::KonnectivityHost),
        Just(Break::KonnectivityHostEqualsApiHost),
        Just(Break::KonnectivityHostWithoutPort),
        bad_port().prop_map(Break::IngressPort),
        bad_annotation_key().prop_map(Break::AnnotationKey),
        bad_label().prop_map(Break::ServiceName),
        bad_port().prop_map(Break::ApiPort),
        bad_port().prop_map(Break::KonnectivityPort),
        Just(Break::GatewayWithoutParents),
        bad_port().prop_map(Break::ParentRefPort),
        Just(Break::ParentRefRepeated),
        "[a-z0-9.:]{0,12}"
            .prop_filter("not an IP", |s| s.parse::<std::net::IpAddr>().is_err())
            .prop_map(Break::AdvertiseAddress),
    ]
}

/// Apply `b` to a valid `cpi`; the field path the error must name.
fn apply(cpi: &mut ControlPlaneIngress, b: Break) -> String {
    let spec = &mut cpi.spec;
    let konnectivity = |spec: &mut ControlPlaneIngressSpec| {
        if spec.ingress.konnectivity_host.is_none() {
            spec.ingress.konnectivity_host =
                Some(format!("konnectivity.{}", spec.ingress.api_host));
            spec.backend.konnectivity_port = Some(8132);
        }
    };
    fn gateway(spec: &mut ControlPlaneIngressSpec) -> &mut GatewayRoute {
        let route = spec.route.get_or_insert_default();
        route.controller = Some(Flavor::Gateway);
        route.gateway.get_or_insert_default()
    }
    let field = match b {
        Break::ClusterName(v) => {
            spec.cluster_name = v;
            "spec.clusterName"
        }
        Break::ApiHost(v) => {
            // Keep the konnectivity host valid and different.
            spec.ingress.konnectivity_host = None;
            spec.backend.konnectivity_port = None;
            spec.ingress.api_host = v;
            "spec.ingress.apiHost"
        }
        Break::KonnectivityHost(v) => {
            konnectivity(spec);
            spec.ingress.konnectivity_host = Some(v);
            "spec.ingress.konnectivityHost"
        }
        Break::KonnectivityHostEqualsApiHost => {
            konnectivity(spec);
            spec.ingress.konnectivity_host = Some(spec.ingress.api_host.clone());
            "spec.ingress.konnectivityHost"
        }
        Break::KonnectivityHostWithoutPort => {
            konnectivity(spec);
            spec.backend.konnectivity_port = None;
            "spec.backend.konnectivityPort"
        }
        Break::IngressPort(p) => {
            spec.ingress.port = p;
            "spec.ingress.port"
        }
        Break::AnnotationKey(k) => {
            spec.ingress.annotations.insert(k, "v".into());
            "spec.ingress.annotations"
        }
        Break::ServiceName(v) => {
            spec.backend.service_name = v;
            "spec.backend.serviceName"
        }
        Break::ApiPort(p) => {
            spec.backend.api_port = p;
            "spec.backend.apiPort"
        }
        Break::KonnectivityPort(p) => {
            konnectivity(spec);
            spec.backend.konnectivity_port = Some(p);
            "spec.backend.konnectivityPort"
        }
        Break::GatewayWithoutParents => {
            gateway(spec).parent_refs.clear();
            "spec.route.gateway.parentRefs"
        }
        Break::ParentRefPort(p) => {
            let g = gateway(spec);
            if g.parent_refs.is_empty() {
                g.parent_refs.push(ParentRef {
                    name: "gw".into(),
                    ..ParentRef::default()
                });
            }
            let last = g.parent_refs.len() - 1;
            g.parent_refs[last].port = Some(p);
            return format!("spec.route.gateway.parentRefs[{last}].port");
        }
        Break::ParentRefRepeated => {
            let g = gateway(spec);
            if g.parent_refs.is_empty() {
                g.parent_refs.push(ParentRef {
                    name: "gw".into(),
                    ..ParentRef::default()
                });
            }
            g.parent_refs.push(g.parent_refs[0].clone());
            return format!("spec.route.gateway.parentRefs[{}]", g.parent_refs.len() - 1);
        }
        Break::AdvertiseAddress(a) => {
            spec.proxy.get_or_insert_default().advertise_address = Some(a);
            "spec.proxy.advertiseAddress"
        }
    };
    field.to_string()
}

#[test]
fn a_spec_broken_in_one_field_is_rejected_naming_that_field() {
    let mut runner = proptest::test_runner::TestRunner::new(Config::with_cases(CASES));
    runner
        .run(&(valid_cpi(), breaks()), |(mut cpi, b)| {
            let field = apply(&mut cpi, b.clone());
            match render::management(&cpi) {
                Err(RenderError::Invalid { errors, .. }) => {
                    prop_assert!(!errors.0.is_empty());
                    for e in &errors.0 {
                        prop_assert_eq!(&e.field, &field, "{:?} gave {}", b, e);
                    }
                }
                other => prop_assert!(false, "{:?} was not rejected: {:?}", b, other),
            }
            Ok(())
        })
        .unwrap();
}
