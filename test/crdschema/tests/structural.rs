//! structural_problems on small schemas: each rule once.

use crdschema::structural_problems;
use serde_json::{Value, json};

fn root(spec: Value) -> Value {
    json!({"type": "object", "properties": {"metadata": {"type": "object"}, "spec": spec}})
}

fn problems(spec: Value) -> Vec<String> {
    structural_problems(&root(spec))
}

fn assert_one(spec: Value, want: &str) {
    let p = problems(spec);
    assert_eq!(p, vec![want.to_string()]);
}

#[test]
fn a_good_schema_has_no_problems() {
    let p = problems(json!({"type": "object", "properties": {
        "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
        "free": {"x-kubernetes-preserve-unknown-fields": true},
        "l": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}},
        "s": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "m": {"type": "object", "x-kubernetes-map-type": "atomic", "additionalProperties": {"type": "string"}},
        "j": {"type": "object", "properties": {"a": {"type": "string"}},
            "oneOf": [{"required": ["a"]}, {"properties": {"a": {"minLength": 1}}}]}},
        "x-kubernetes-validations": [{"rule": "true"}]}));
    assert_eq!(p, Vec::<String>::new());
}

#[test]
fn type_required_and_root_object() {
    assert_one(
        json!({"properties": {"a": {"type": "string"}}}),
        ".spec: type: Required value: must not be empty for specified fields",
    );
    assert_eq!(
        structural_problems(&json!({"type": "string"})),
        vec![".: type: must be object at the root".to_string()]
    );
    assert_one(
        json!({"type": "float"}),
        ".spec: type: Unsupported value: \"float\"",
    );
}

#[test]
fn properties_and_additional_properties() {
    assert_one(
        json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}}),
        ".spec: additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive",
    );
}

#[test]
fn array_needs_items() {
    assert_one(
        json!({"type": "array"}),
        ".spec: items: Required value: must be specified for type array",
    );
    assert_one(
        json!({"type": "array", "items": [{"type": "string"}]}),
        ".spec: items: Forbidden: items must be a schema object and not an array",
    );
}

#[test]
fn junctor_restrictions() {
    assert_one(
        json!({"type": "object", "properties": {"a": {"type": "string"}},
            "anyOf": [{"properties": {"a": {"type": "string"}}}]}),
        ".spec anyOf[0].a: type: Forbidden: must not be used inside allOf, anyOf, oneOf or not",
    );
    for k in [
        "description",
        "default",
        "nullable",
        "additionalProperties",
        "x-kubernetes-preserve-unknown-fields",
    ] {
        let p = problems(json!({"type": "object", "allOf": [{k: true}]}));
        assert_eq!(
            p,
            vec![format!(
                ".spec allOf[0]: {k}: Forbidden: must not be used inside allOf, anyOf, oneOf or not"
            )]
        );
    }
    assert_one(
        json!({"type": "object", "properties": {"a": {"type": "string"}},
            "not": {"properties": {"b": {"minLength": 1}}}}),
        ".spec not.b: Required value: must be specified outside of allOf, anyOf, oneOf or not too",
    );
    // int-or-string with non-standard branches is not exempt.
    assert_one(
        json!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "boolean"}]}),
        ".spec anyOf[0]: type: Forbidden: must not be used inside allOf, anyOf, oneOf or not",
    );
}

#[test]
fn int_or_string_and_preserve() {
    assert_one(
        json!({"type": "string", "x-kubernetes-int-or-string": true}),
        ".spec: type: Forbidden: must be empty if x-kubernetes-int-or-string is true",
    );
    assert_one(
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": false}),
        ".spec: x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined",
    );
}

#[test]
fn root_metadata_only_name_and_generate_name() {
    let ok = json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 63, "pattern": "^[a-z]+$"}}}}});
    assert_eq!(structural_problems(&ok), Vec::<String>::new());
    let bad = json!({"type": "object", "properties": {"metadata": {"type": "object",
        "required": ["name"], "properties": {"labels": {"type": "object"}}}}});
    let mut p = structural_problems(&bad);
    p.sort();
    assert_eq!(
        p,
        vec![
            ".metadata.labels: Forbidden: only name and generateName may be restricted".to_string(),
            ".metadata: required: Forbidden: only name and generateName may be restricted"
                .to_string(),
        ]
    );
}

#[test]
fn list_map_keys() {
    assert_one(
        json!({"type": "array", "x-kubernetes-list-map-keys": ["name"], "items": {"type": "object",
            "required": ["name"], "properties": {"name": {"type": "string"}}}}),
        ".spec: x-kubernetes-list-map-keys: Forbidden: requires x-kubernetes-list-type: map",
    );
    assert_one(
        json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "properties": {"name": {"type": "string"}}}}),
        ".spec: x-kubernetes-list-map-keys: Invalid value: \"name\": must be required or have a default",
    );
    assert_one(
        json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["sub"],
            "items": {"type": "object", "required": ["sub"], "properties": {"sub": {"type": "object"}}}}),
        ".spec: x-kubernetes-list-map-keys: Invalid value: \"sub\": must be a scalar typed property",
    );
    assert_one(
        json!({"type": "array", "x-kubernetes-list-type": "map", "items": {"type": "object"}}),
        ".spec: x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map",
    );
    assert_one(
        json!({"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "object"}}),
        ".spec: items: Invalid value: x-kubernetes-list-type set requires scalar or atomic items",
    );
    assert_one(
        json!({"type": "array", "x-kubernetes-list-type": "list", "items": {"type": "string"}}),
        ".spec: x-kubernetes-list-type: Unsupported value: \"list\": supported values: \"atomic\", \"map\", \"set\"",
    );
}

#[test]
fn other_forbidden_things() {
    assert_one(
        json!({"type": "array", "uniqueItems": true, "items": {"type": "string"}}),
        ".spec: uniqueItems: Forbidden: cannot be set to true since the runtime complexity becomes quadratic",
    );
    assert_one(
        json!({"type": "object", "$ref": "#/definitions/x"}),
        ".spec: $ref: Forbidden: not allowed in CRD schemas",
    );
    assert_one(
        json!({"type": "string", "pattern": "(unclosed"}),
        &format!(
            ".spec: pattern: Invalid value: \"(unclosed\": {}",
            regex_err("(unclosed")
        ),
    );
    assert_one(
        json!({"type": "string", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true}),
        ".spec: type: Invalid value: \"string\": must be object if x-kubernetes-embedded-resource is true",
    );
    assert_one(
        json!({"type": "object", "x-kubernetes-validations": [{"message": "no rule"}]}),
        ".spec: x-kubernetes-validations[0].rule: Required value",
    );
}

fn regex_err(p: &str) -> String {
    // The message comes from the regex crate; only its presence matters here.
    match structural_problems(
        &json!({"type": "object", "properties": {"s": {"type": "string", "pattern": p}}}),
    )
    .first()
    {
        Some(s) => s
            .split_once(&format!("{p:?}: "))
            .map(|(_, e)| e.to_string())
            .unwrap_or_default(),
        None => String::new(),
    }
}
