//! No input makes validation, pruning, defaulting or the structural check panic.

use std::path::Path;
use std::sync::OnceLock;

use crdschema::{Crd, Options, load_dir, structural_problems};
use proptest::prelude::*;
use serde_json::{Value, json};

fn crds() -> &'static Vec<Crd> {
    static C: OnceLock<Vec<Crd>> = OnceLock::new();
    C.get_or_init(|| {
        load_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/schemas")).unwrap()
    })
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        any::<u64>().prop_map(|i| json!(i)),
        (-1e9f64..1e9).prop_map(|f| json!(f)),
        "[a-zA-Z0-9*.:/_ -]{0,12}".prop_map(Value::String),
        prop::sample::select(vec![
            "object", "array", "string", "integer", "self", "TCP", "Service", ""
        ])
        .prop_map(|s| Value::String(s.to_string())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let keys = prop::sample::select(vec![
            "type",
            "properties",
            "items",
            "spec",
            "name",
            "port",
            "hostnames",
            "rules",
            "parentRefs",
            "routes",
            "match",
            "services",
            "required",
            "enum",
            "anyOf",
            "not",
            "pattern",
            "minimum",
            "x-kubernetes-validations",
            "rule",
            "x-kubernetes-list-type",
            "additionalProperties",
            "kind",
        ]);
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(keys.prop_map(str::to_string), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_objects_never_panic(spec in json_value(), pick in 0usize..64) {
        let crd = &crds()[pick % crds().len()];
        for v in crd.served_versions() {
            let mut obj = json!({"apiVersion": format!("{}/{v}", crd.group()), "kind": crd.kind(),
                "metadata": {"name": "x"}, "spec": spec.clone()});
            let _ = crd.validate(&obj);
            let _ = crd.validate_with(&obj, &Options::strict());
            crd.apply_defaults(&mut obj);
            crd.prune(&mut obj);
        }
        let _ = crd.validate(&spec);
    }

    #[test]
    fn random_schemas_never_panic(schema in json_value(), value in json_value()) {
        let _ = structural_problems(&schema);
        let crd = Crd::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "spec": {"group": "g.io", "scope": "Cluster", "names": {"kind": "K", "plural": "ks"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": schema}}]}}));
        if let Ok(crd) = crd {
            let mut obj = json!({"apiVersion": "g.io/v1", "kind": "K", "spec": value});
            let _ = crd.validate_with(&obj, &Options::strict());
            crd.apply_defaults(&mut obj);
            crd.prune(&mut obj);
            let _ = crd.cel_rules("v1");
        }
    }

    #[test]
    fn random_yaml_never_panics(text in "[a-z:{}\\[\\]\\- \n\"']{0,64}") {
        let _ = Crd::from_yaml(&text);
        let _ = crdschema::load_str(&text);
    }
}
