//! Each validation keyword on a small inline schema.

use crdschema::{Crd, Options, UnknownFields, UnsupportedCel};
use serde_json::{Value, json};

/// A CRD whose `spec` has the given schema.
fn crd(spec: Value) -> Crd {
    Crd::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                    "metadata": {"type": "object"}, "spec": spec}}}}]
        }
    }))
    .unwrap()
}

fn obj(spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec})
}

/// Violations as (path, message) for `spec` under schema `s`.
fn check(s: Value, spec: Value) -> Vec<(String, String)> {
    check_with(s, spec, &Options::default())
}

fn check_with(s: Value, spec: Value, opts: &Options) -> Vec<(String, String)> {
    match crd(s).validate_with(&obj(spec), opts) {
        Ok(()) => vec![],
        Err(v) => v.into_iter().map(|v| (v.path, v.message)).collect(),
    }
}

fn v(path: &str, msg: &str) -> Vec<(String, String)> {
    vec![(path.to_string(), msg.to_string())]
}

#[test]
fn types() {
    for (ty, good, bad, got) in [
        ("object", json!({}), json!([]), "array"),
        ("array", json!([]), json!({}), "object"),
        ("string", json!("x"), json!(1), "integer"),
        ("integer", json!(1), json!(1.5), "number"),
        ("number", json!(1.5), json!("1"), "string"),
        ("boolean", json!(false), json!(0), "integer"),
    ] {
        let s = json!({"type": "object", "properties": {"f": {"type": ty, "items": {"type": "string"}}}});
        assert_eq!(check(s.clone(), json!({"f": good})), vec![], "{ty}");
        assert_eq!(
            check(s, json!({"f": bad})),
            v(".spec.f", &format!("must be of type {ty}: \"{got}\"")),
            "{ty}"
        );
    }
    // 2.0 is an integer in JSON terms, as for the API server.
    let s = json!({"type": "object", "properties": {"f": {"type": "integer"}}});
    assert_eq!(check(s, json!({"f": 2.0})), vec![]);
}

#[test]
fn nullable() {
    let s = json!({"type": "object", "properties": {
        "a": {"type": "string", "nullable": true}, "b": {"type": "string"}}});
    assert_eq!(check(s.clone(), json!({"a": null})), vec![]);
    assert_eq!(
        check(s.clone(), json!({"b": null})),
        v(".spec.b", "must be of type string: \"null\"")
    );
    // The API server drops non-nullable nulls instead of failing.
    assert_eq!(
        check_with(s, json!({"b": null}), &Options::api_server()),
        vec![]
    );
}

#[test]
fn properties_required_and_unknown_fields() {
    let s =
        json!({"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}});
    assert_eq!(check(s.clone(), json!({"name": "x"})), vec![]);
    assert_eq!(
        check(s.clone(), json!({})),
        v(".spec.name", "Required value")
    );
    assert_eq!(
        check(s.clone(), json!({"name": "x", "extra": 1})),
        v(".spec.extra", "unknown field \"extra\"")
    );
    let ignore = Options {
        unknown_fields: UnknownFields::Ignore,
        ..Options::default()
    };
    assert_eq!(
        check_with(s, json!({"name": "x", "extra": 1}), &ignore),
        vec![]
    );
}

#[test]
fn additional_properties() {
    let map = json!({"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}});
    assert_eq!(check(map.clone(), json!({"a": 1, "b": 2})), vec![]);
    assert_eq!(
        check(map, json!({"a": -1})),
        v(".spec[a]", "should be greater than or equal to 0")
    );
    let closed = json!({"type": "object", "additionalProperties": false});
    assert_eq!(
        check(closed, json!({"a": 1})),
        v(".spec.a", "is a forbidden property")
    );
    let open = json!({"type": "object", "additionalProperties": true});
    assert_eq!(check(open, json!({"a": {"b": 1}})), vec![]);
}

#[test]
fn enum_and_pattern() {
    let s = json!({"type": "object", "properties": {
        "e": {"type": "string", "enum": ["a", "b"]},
        "n": {"type": "integer", "enum": [1, 2]},
        "p": {"type": "string", "pattern": "^[a-z]+$"}}});
    assert_eq!(
        check(s.clone(), json!({"e": "a", "n": 2, "p": "abc"})),
        vec![]
    );
    assert_eq!(
        check(s.clone(), json!({"e": "c"})),
        v(
            ".spec.e",
            "Unsupported value: \"c\": supported values: \"a\", \"b\""
        )
    );
    assert_eq!(
        check(s.clone(), json!({"n": 3})),
        v(".spec.n", "Unsupported value: 3: supported values: 1, 2")
    );
    assert_eq!(
        check(s, json!({"p": "aB"})),
        v(".spec.p", "should match '^[a-z]+$'")
    );
}

#[test]
fn formats() {
    let cases = [
        ("date-time", "2024-01-02T03:04:05Z", "2024-13-02T03:04:05Z"),
        ("date-time", "2024-01-02T03:04:05.123+02:00", "2024-01-02"),
        ("byte", "aGVsbG8=", "not base64!"),
        ("hostname", "abc.example.com", "-abc.example.com"),
        ("ipv4", "10.0.0.1", "10.0.0.256"),
        ("ipv6", "fd00::1", "10.0.0.1"),
        ("uri", "https://example.com/x", "not a uri"),
        ("uri", "/relative/path", ""),
        ("cidr", "10.0.0.0/8", "10.0.0.0/33"),
        ("uuid", "123e4567-e89b-12d3-a456-426614174000", "123"),
    ];
    for (f, good, bad) in cases {
        let s = json!({"type": "object", "properties": {"f": {"type": "string", "format": f}}});
        assert_eq!(check(s.clone(), json!({"f": good})), vec![], "{f} {good}");
        assert_eq!(
            check(s, json!({"f": bad})),
            v(".spec.f", &format!("must be of type {f}: {bad:?}")),
            "{f} {bad}"
        );
    }
    // Unknown formats are ignored.
    let s = json!({"type": "object", "properties": {"f": {"type": "string", "format": "no-such"}}});
    assert_eq!(check(s, json!({"f": "anything"})), vec![]);
    // Integer formats: range checks.
    let s = json!({"type": "object", "properties": {
        "a": {"type": "integer", "format": "int32"}, "b": {"type": "integer", "format": "int64"}}});
    assert_eq!(
        check(
            s.clone(),
            json!({"a": 2147483647, "b": 9223372036854775807i64})
        ),
        vec![]
    );
    assert_eq!(
        check(s.clone(), json!({"a": 2147483648i64})),
        v(".spec.a", "must be of type int32: 2147483648")
    );
    assert_eq!(
        check(s, json!({"b": 18446744073709551615u64})),
        v(".spec.b", "must be of type int64: 18446744073709551615")
    );
}

#[test]
fn numeric_bounds() {
    let s = json!({"type": "object", "properties": {
        "a": {"type": "integer", "minimum": 1, "maximum": 10},
        "b": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 1, "exclusiveMaximum": true},
        "c": {"type": "integer", "multipleOf": 5}}});
    assert_eq!(check(s.clone(), json!({"a": 1, "b": 0.5, "c": 10})), vec![]);
    assert_eq!(
        check(s.clone(), json!({"a": 0})),
        v(".spec.a", "should be greater than or equal to 1")
    );
    assert_eq!(
        check(s.clone(), json!({"a": 11})),
        v(".spec.a", "should be less than or equal to 10")
    );
    assert_eq!(
        check(s.clone(), json!({"b": 0})),
        v(".spec.b", "should be greater than 0")
    );
    assert_eq!(
        check(s.clone(), json!({"b": 1})),
        v(".spec.b", "should be less than 1")
    );
    assert_eq!(
        check(s, json!({"c": 7})),
        v(".spec.c", "should be a multiple of 5")
    );
}

#[test]
fn string_lengths_count_characters() {
    let s = json!({"type": "object", "properties": {"s": {"type": "string", "minLength": 2, "maxLength": 3}}});
    assert_eq!(check(s.clone(), json!({"s": "äöü"})), vec![]);
    assert_eq!(
        check(s.clone(), json!({"s": "abcd"})),
        v(".spec.s", "Too long: may not be more than 3 characters")
    );
    assert_eq!(
        check(s, json!({"s": "a"})),
        v(".spec.s", "Too short: may not be less than 2 characters")
    );
}

#[test]
fn item_and_property_counts() {
    let s = json!({"type": "object", "properties": {
        "l": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "integer"}},
        "m": {"type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": {"type": "string"}}}});
    assert_eq!(check(s.clone(), json!({"l": [1], "m": {"a": "b"}})), vec![]);
    assert_eq!(
        check(s.clone(), json!({"l": []})),
        v(".spec.l", "Too few: must have at least 1 items")
    );
    assert_eq!(
        check(s.clone(), json!({"l": [1, 2, 3]})),
        v(".spec.l", "Too many: must have at most 2 items")
    );
    assert_eq!(
        check(s.clone(), json!({"m": {}})),
        v(".spec.m", "Too few: must have at least 1 properties")
    );
    assert_eq!(
        check(s.clone(), json!({"m": {"a": "1", "b": "2"}})),
        v(".spec.m", "Too many: must have at most 1 properties")
    );
    assert_eq!(
        check(s, json!({"l": ["x"]})),
        v(".spec.l[0]", "must be of type integer: \"string\"")
    );
}

#[test]
fn unique_items_and_list_type_set() {
    for key in ["uniqueItems", "x-kubernetes-list-type"] {
        let val = if key == "uniqueItems" {
            json!(true)
        } else {
            json!("set")
        };
        let s = json!({"type": "object", "properties": {"l": {"type": "array", key: val, "items": {"type": "string"}}}});
        assert_eq!(check(s.clone(), json!({"l": ["a", "b"]})), vec![], "{key}");
        assert_eq!(
            check(s, json!({"l": ["a", "b", "a"]})),
            v(".spec.l[2]", "Duplicate value: \"a\""),
            "{key}"
        );
    }
}

#[test]
fn list_type_map() {
    let s = json!({"type": "object", "properties": {"ports": {
        "type": "array", "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["port", "protocol"],
        "items": {"type": "object", "required": ["port"], "properties": {
            "port": {"type": "integer"}, "protocol": {"type": "string", "default": "TCP"}}}}}});
    assert_eq!(
        check(
            s.clone(),
            json!({"ports": [{"port": 1}, {"port": 1, "protocol": "UDP"}]})
        ),
        vec![]
    );
    // The defaulted key counts: {port: 1} is {port: 1, protocol: TCP}.
    assert_eq!(
        check(
            s,
            json!({"ports": [{"port": 1}, {"port": 1, "protocol": "TCP"}]})
        ),
        v(
            ".spec.ports[1]",
            "Duplicate value: {\"port\":1,\"protocol\":\"TCP\"}"
        )
    );
}

#[test]
fn items_nested() {
    let s = json!({"type": "object", "properties": {"l": {"type": "array", "items": {
        "type": "object", "required": ["n"], "properties": {"n": {"type": "string"}}}}}});
    assert_eq!(
        check(s.clone(), json!({"l": [{"n": "a"}, {"n": "b"}]})),
        vec![]
    );
    assert_eq!(
        check(s, json!({"l": [{"n": "a"}, {}]})),
        v(".spec.l[1].n", "Required value")
    );
}

#[test]
fn junctors() {
    let s = json!({"type": "object", "properties": {
        "all": {"type": "integer", "allOf": [{"minimum": 1}, {"maximum": 5}]},
        "any": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
            "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
        "one": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
            "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
        "not": {"type": "string", "not": {"enum": ["forbidden"]}}}});
    assert_eq!(
        check(
            s.clone(),
            json!({"all": 3, "any": {"b": "x"}, "one": {"a": "x"}, "not": "ok"})
        ),
        vec![]
    );
    assert_eq!(
        check(s.clone(), json!({"all": 6})),
        v(".spec.all", "should be less than or equal to 5")
    );
    assert_eq!(
        check(s.clone(), json!({"any": {}})),
        v(
            ".spec.any",
            "must validate at least one schema (anyOf): .spec.any.a: Required value; .spec.any.b: Required value"
        )
    );
    assert_eq!(
        check(s.clone(), json!({"one": {"a": "x", "b": "y"}})),
        v(
            ".spec.one",
            "must validate one and only one schema (oneOf), matched 2"
        )
    );
    assert_eq!(
        check(s, json!({"not": "forbidden"})),
        v(".spec.not", "must not validate the schema (not)")
    );
}

#[test]
fn int_or_string() {
    let s = json!({"type": "object", "properties": {"p": {
        "x-kubernetes-int-or-string": true,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": "^[0-9]+%$"}}});
    assert_eq!(check(s.clone(), json!({"p": 80})), vec![]);
    assert_eq!(check(s.clone(), json!({"p": "50%"})), vec![]);
    assert_eq!(
        check(s.clone(), json!({"p": "50"})),
        v(".spec.p", "should match '^[0-9]+%$'")
    );
    assert_eq!(
        check(s, json!({"p": 1.5})),
        v(".spec.p", "must be of type int-or-string: \"number\"")
    );
}

#[test]
fn preserve_unknown_fields_and_embedded_resource() {
    let s = json!({"type": "object", "properties": {
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"known": {"type": "integer"}}},
        "any": {"x-kubernetes-preserve-unknown-fields": true},
        "emb": {"type": "object", "x-kubernetes-embedded-resource": true,
            "x-kubernetes-preserve-unknown-fields": true}}});
    let good = json!({"free": {"known": 1, "x": {"y": [1]}}, "any": [1, "a"],
        "emb": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}});
    assert_eq!(check(s.clone(), good), vec![]);
    assert_eq!(
        check(s.clone(), json!({"free": {"known": "x"}})),
        v(".spec.free.known", "must be of type integer: \"string\"")
    );
    assert_eq!(
        check(s, json!({"emb": {"apiVersion": "v1"}})),
        v(".spec.emb.kind", "Required value")
    );
    // Embedded resource with properties: apiVersion/kind/metadata are implicit fields.
    let s = json!({"type": "object", "properties": {"emb": {"type": "object",
        "x-kubernetes-embedded-resource": true, "properties": {"data": {"type": "object"}}}}});
    assert_eq!(
        check(
            s.clone(),
            json!({"emb": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}, "data": {}}})
        ),
        vec![]
    );
    assert_eq!(
        check(
            s,
            json!({"emb": {"apiVersion": "v1", "kind": "ConfigMap", "x": 1}})
        ),
        v(".spec.emb.x", "unknown field \"x\"")
    );
}

#[test]
fn cel_rules() {
    let s = json!({"type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.min <= self.max", "message": "min must not exceed max"},
            {"rule": "!has(self.name) || self.name.startsWith('hcp-')", "fieldPath": ".name"},
            {"rule": "self.min >= 0", "messageExpression": "'min is ' + string(self.min)"},
            {"rule": "!has(self.__namespace__) || self.__namespace__ != 'kube-system'", "message": "ns"},
            {"rule": "self.min == oldSelf.min", "message": "immutable"}],
        "properties": {"min": {"type": "integer"}, "max": {"type": "integer"},
            "name": {"type": "string"}, "namespace": {"type": "string"},
            "ips": {"type": "array", "items": {"type": "string"},
                "x-kubernetes-validations": [{"rule": "self.all(i, isIP(i))", "message": "bad ip"}]}}});
    assert_eq!(
        check(
            s.clone(),
            json!({"min": 1, "max": 2, "name": "hcp-a", "ips": ["::1"]})
        ),
        vec![]
    );
    assert_eq!(
        check(s.clone(), json!({"min": 3, "max": 2})),
        v(".spec", "min must not exceed max")
    );
    assert_eq!(
        check(s.clone(), json!({"min": 1, "max": 2, "name": "x"})),
        v(
            ".spec.name",
            "failed rule: !has(self.name) || self.name.startsWith('hcp-')"
        )
    );
    assert_eq!(
        check(s.clone(), json!({"min": -1, "max": 2})),
        v(".spec", "min is -1")
    );
    assert_eq!(
        check(
            s.clone(),
            json!({"min": 1, "max": 2, "namespace": "kube-system"})
        ),
        v(".spec", "ns")
    );
    assert_eq!(
        check(s.clone(), json!({"min": 1, "max": 2, "ips": ["nope"]})),
        v(".spec.ips", "bad ip")
    );
    // A runtime error (missing field) is a violation, like the API server's.
    let e = check(s.clone(), json!({"max": 2}));
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0].1.starts_with("rule evaluation error: "), "{e:?}");
    // The transition rule is skipped and recorded, never failed.
    let r = crd(s.clone()).validate_report(&obj(json!({"min": 1, "max": 2})), &Options::strict());
    assert_eq!(r.violations, vec![]);
    assert_eq!(r.skipped.len(), 1);
    assert_eq!(r.skipped[0].rule, "self.min == oldSelf.min");
    assert_eq!(r.evaluated_rules, 4);
    // skip_cel turns every rule off.
    let off = Options {
        skip_cel: true,
        ..Options::default()
    };
    assert_eq!(check_with(s, json!({"min": 3, "max": 2}), &off), vec![]);
}

#[test]
fn cel_unsupported_rules_are_visible() {
    let s = json!({"type": "object", "properties": {"a": {"type": "string",
        "x-kubernetes-validations": [
            {"rule": "self.noSuchFunction()"},
            {"rule": "self ==== 'x'"}]}}});
    let c = crd(s.clone());
    let r = c.validate_report(&obj(json!({"a": "x"})), &Options::default());
    assert_eq!(r.violations, vec![]);
    assert_eq!(r.skipped.len(), 2, "{:?}", r.skipped);
    assert!(
        r.skipped[0].reason.contains("noSuchFunction"),
        "{:?}",
        r.skipped
    );
    assert!(
        r.skipped[1].reason.starts_with("parse error"),
        "{:?}",
        r.skipped
    );
    let fail = Options {
        unsupported_cel: UnsupportedCel::Fail,
        ..Options::default()
    };
    let e = check_with(s, json!({"a": "x"}), &fail);
    assert_eq!(e.len(), 2);
    assert_eq!(e[0].0, ".spec.a");
    assert!(
        e[0].1
            .starts_with("rule not evaluated (unsupported functions: noSuchFunction)"),
        "{e:?}"
    );
    let rules = c.cel_rules("v1");
    assert_eq!(rules.len(), 2);
    assert_eq!(rules[0].path, ".spec.a");
}

#[test]
fn root_metadata_is_only_checked_to_be_an_object() {
    let s = json!({"type": "object"});
    let c = crd(s);
    let mut o = obj(json!({}));
    o["metadata"] = json!({"name": "w", "labels": {"a": "b"}, "whatever": 1});
    assert_eq!(c.validate(&o), Ok(()));
    o["metadata"] = json!([]);
    let e = c.validate(&o).unwrap_err();
    assert_eq!(
        e[0].to_string(),
        ".metadata: must be of type object: \"array\""
    );
}

#[test]
fn prune_and_defaults() {
    let s = json!({"type": "object", "properties": {
        "keep": {"type": "string"},
        "d": {"type": "string", "default": "dflt"},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "nested": {"type": "object", "properties": {"a": {"type": "integer"}}},
        "list": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "string"}}}}}});
    let c = crd(s);
    let mut o = obj(json!({"keep": "k", "gone": 1, "free": {"any": 1},
        "nested": {"a": 1, "b": 2}, "list": [{"x": "1", "y": 2}]}));
    o["status"] = json!({"x": 1});
    c.prune(&mut o);
    assert_eq!(
        o,
        obj(json!({"keep": "k", "free": {"any": 1}, "nested": {"a": 1}, "list": [{"x": "1"}]}))
    );
    c.apply_defaults(&mut o);
    assert_eq!(o["spec"]["d"], json!("dflt"));
}
