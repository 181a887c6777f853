//! Value validation and pruning against an openAPIV3Schema node.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use regex::Regex;
use serde_json::{Map, Value};

use crate::cel::CelEnv;
use crate::{Options, Report, UnknownFields, Violation, format};

/// JSON type name as the API server prints it.
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

pub(crate) fn child(path: &str, key: &str) -> String {
    if path == "." {
        format!(".{key}")
    } else {
        format!("{path}.{key}")
    }
}

fn index(path: &str, i: usize) -> String {
    if path == "." {
        format!("[{i}]")
    } else {
        format!("{path}[{i}]")
    }
}

fn map_key(path: &str, key: &str) -> String {
    if path == "." {
        format!("[{key}]")
    } else {
        format!("{path}[{key}]")
    }
}

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool) == Some(true)
}

/// Compiled `pattern` regexes, shared across calls: patterns repeat a lot.
pub(crate) fn regex(pattern: &str) -> Result<Regex, regex::Error> {
    static CACHE: OnceLock<Mutex<std::collections::HashMap<String, Regex>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(r) = cache.lock().ok().and_then(|c| c.get(pattern).cloned()) {
        return Ok(r);
    }
    let r = Regex::new(pattern)?;
    if let Ok(mut c) = cache.lock() {
        c.insert(pattern.to_string(), r.clone());
    }
    Ok(r)
}

fn as_f64(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// Numbers compare by value (1 == 1.0), everything else structurally.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, a)| y.get(k).is_some_and(|b| json_eq(a, b)))
        }
        _ => a == b,
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 80 {
        let cut: String = s.chars().take(77).collect();
        format!("{cut}...")
    } else {
        s
    }
}

struct Validator<'a> {
    opts: &'a Options,
    report: &'a mut Report,
    cel: Option<CelEnv>,
}

/// Whether the keywords of a node apply fully (unknown fields, CEL) or only as a
/// value validation inside allOf/anyOf/oneOf/not.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Full,
    Junctor,
}

pub(crate) fn validate_root(schema: &Value, obj: &Value, opts: &Options, report: &mut Report) {
    let mut v = Validator {
        opts,
        report,
        cel: None,
    };
    let mut out = Vec::new();
    v.node(schema, obj, ".", Mode::Full, true, &mut out);
    v.report.violations.extend(out);
}

impl Validator<'_> {
    fn push(out: &mut Vec<Violation>, path: &str, message: String) {
        out.push(Violation {
            path: path.to_string(),
            message,
        });
    }

    /// Validate `v` against `s`; `root` marks the object root (metadata is the API server's).
    fn node(
        &mut self,
        s: &Value,
        v: &Value,
        path: &str,
        mode: Mode,
        root: bool,
        out: &mut Vec<Violation>,
    ) {
        if !s.is_object() {
            // `true`/`false` or junk instead of a schema: nothing we can check.
            return;
        }
        let sv = s;
        let ty = s.get("type").and_then(Value::as_str).unwrap_or("");
        if v.is_null() {
            if flag(sv, "nullable") {
                return;
            }
            // The API server drops non-nullable nulls; only the strict mode complains.
            if mode == Mode::Full && self.opts.unknown_fields == UnknownFields::Ignore {
                return;
            }
            if !ty.is_empty() {
                Self::push(out, path, format!("must be of type {ty}: \"null\""));
                return;
            }
            if flag(sv, "x-kubernetes-int-or-string") {
                Self::push(out, path, "must be of type int-or-string: \"null\"".into());
                return;
            }
        }
        if flag(sv, "x-kubernetes-int-or-string") && !(v.is_string() || is_integer(v)) {
            Self::push(
                out,
                path,
                format!("must be of type int-or-string: {:?}", type_name(v)),
            );
            return;
        }
        let type_ok = match ty {
            "" => true,
            "object" => v.is_object(),
            "array" => v.is_array(),
            "string" => v.is_string(),
            "integer" => is_integer(v),
            "number" => v.is_number(),
            "boolean" => v.is_boolean(),
            _ => true,
        };
        if !type_ok {
            Self::push(
                out,
                path,
                format!("must be of type {ty}: {:?}", type_name(v)),
            );
            return;
        }
        if let Some(en) = s.get("enum").and_then(Value::as_array)
            && !en.iter().any(|e| json_eq(e, v))
        {
            let list: Vec<String> = en.iter().map(short).collect();
            Self::push(
                out,
                path,
                format!(
                    "Unsupported value: {}: supported values: {}",
                    short(v),
                    list.join(", ")
                ),
            );
        }
        match v {
            Value::String(st) => Self::string(sv, st, ty, path, out),
            Value::Number(_) => Self::number(sv, v, path, out),
            Value::Array(items) => self.array(sv, items, path, mode, out),
            Value::Object(map) => self.object(sv, map, path, mode, root, out),
            _ => {}
        }
        self.junctors(sv, v, path, out);
        // Like the API server, rules run even when nested fields have schema errors;
        // only a type mismatch at this node (returned above) stops them.
        if mode == Mode::Full && !self.opts.skip_cel {
            self.rules(sv, v, path, root, out);
        }
    }

    fn string(s: &Value, st: &str, ty: &str, path: &str, out: &mut Vec<Violation>) {
        let n = st.chars().count() as u64;
        if let Some(max) = s.get("maxLength").and_then(Value::as_u64)
            && n > max
        {
            Self::push(
                out,
                path,
                format!("Too long: may not be more than {max} characters"),
            );
        }
        if let Some(min) = s.get("minLength").and_then(Value::as_u64)
            && n < min
        {
            Self::push(
                out,
                path,
                format!("Too short: may not be less than {min} characters"),
            );
        }
        if let Some(p) = s.get("pattern").and_then(Value::as_str) {
            match regex(p) {
                Ok(re) if !re.is_match(st) => {
                    Self::push(out, path, format!("should match '{p}'"));
                }
                Ok(_) => {}
                Err(e) => Self::push(out, path, format!("invalid pattern '{p}': {e}")),
            }
        }
        // Formats only apply to strings, as in the API server (int-or-string values too).
        if let Some(f) = s.get("format").and_then(Value::as_str)
            && (ty == "string" || ty.is_empty())
            && !format::check_string(f, st)
        {
            Self::push(out, path, format!("must be of type {f}: {st:?}"));
        }
    }

    fn number(s: &Value, v: &Value, path: &str, out: &mut Vec<Violation>) {
        let Some(x) = as_f64(v) else { return };
        if let Some(min) = s.get("minimum").and_then(as_f64) {
            if flag(s, "exclusiveMinimum") {
                if x <= min {
                    Self::push(out, path, format!("should be greater than {}", num(min)));
                }
            } else if x < min {
                Self::push(
                    out,
                    path,
                    format!("should be greater than or equal to {}", num(min)),
                );
            }
        }
        if let Some(max) = s.get("maximum").and_then(as_f64) {
            if flag(s, "exclusiveMaximum") {
                if x >= max {
                    Self::push(out, path, format!("should be less than {}", num(max)));
                }
            } else if x > max {
                Self::push(
                    out,
                    path,
                    format!("should be less than or equal to {}", num(max)),
                );
            }
        }
        if let Some(m) = s.get("multipleOf").and_then(as_f64)
            && m > 0.0
        {
            let q = x / m;
            if (q - q.round()).abs() > 1e-9 {
                Self::push(out, path, format!("should be a multiple of {}", num(m)));
            }
        }
        // Integer formats: range checks the API server skips (it only checks string formats),
        // kept because an out-of-range int32 breaks every Go controller reading the object.
        if let Some(f) = s.get("format").and_then(Value::as_str) {
            let ok = match f {
                "int32" => v.as_i64().is_some_and(|i| i32::try_from(i).is_ok()),
                "int64" => {
                    v.as_i64().is_some()
                        || v.as_f64()
                            .is_some_and(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
                }
                _ => true,
            };
            if !ok && is_integer(v) {
                Self::push(out, path, format!("must be of type {f}: {}", short(v)));
            }
        }
    }

    fn array(
        &mut self,
        s: &Value,
        items: &[Value],
        path: &str,
        mode: Mode,
        out: &mut Vec<Violation>,
    ) {
        let n = items.len() as u64;
        if let Some(max) = s.get("maxItems").and_then(Value::as_u64)
            && n > max
        {
            Self::push(
                out,
                path,
                format!("Too many: must have at most {max} items"),
            );
        }
        if let Some(min) = s.get("minItems").and_then(Value::as_u64)
            && n < min
        {
            Self::push(
                out,
                path,
                format!("Too few: must have at least {min} items"),
            );
        }
        let list_type = s.get("x-kubernetes-list-type").and_then(Value::as_str);
        if flag(s, "uniqueItems") || list_type == Some("set") {
            for (i, it) in items.iter().enumerate() {
                if items[..i].iter().any(|p| json_eq(p, it)) {
                    Self::push(
                        out,
                        &index(path, i),
                        format!("Duplicate value: {}", short(it)),
                    );
                }
            }
        }
        if list_type == Some("map") {
            let keys: Vec<&str> = s
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let item_schema = s.get("items");
            let mut seen: Vec<Vec<Value>> = Vec::new();
            for (i, it) in items.iter().enumerate() {
                let Some(obj) = it.as_object() else { continue };
                let key: Vec<Value> = keys
                    .iter()
                    .map(|k| {
                        obj.get(*k)
                            .cloned()
                            // Missing keys take their default, as after API-server defaulting.
                            .or_else(|| {
                                item_schema
                                    .and_then(|is| is.pointer(&format!("/properties/{k}/default")))
                                    .cloned()
                            })
                            .unwrap_or(Value::Null)
                    })
                    .collect();
                if seen
                    .iter()
                    .any(|p| p.iter().zip(&key).all(|(a, b)| json_eq(a, b)))
                {
                    let shown: Map<String, Value> = keys
                        .iter()
                        .zip(&key)
                        .map(|(k, v)| (k.to_string(), v.clone()))
                        .collect();
                    Self::push(
                        out,
                        &index(path, i),
                        format!("Duplicate value: {}", short(&Value::Object(shown))),
                    );
                } else {
                    seen.push(key);
                }
            }
        }
        if let Some(is) = s.get("items") {
            for (i, it) in items.iter().enumerate() {
                self.node(is, it, &index(path, i), mode, false, out);
            }
        }
    }

    fn object(
        &mut self,
        s: &Value,
        map: &Map<String, Value>,
        path: &str,
        mode: Mode,
        root: bool,
        out: &mut Vec<Violation>,
    ) {
        let n = map.len() as u64;
        if let Some(max) = s.get("maxProperties").and_then(Value::as_u64)
            && n > max
        {
            Self::push(
                out,
                path,
                format!("Too many: must have at most {max} properties"),
            );
        }
        if let Some(min) = s.get("minProperties").and_then(Value::as_u64)
            && n < min
        {
            Self::push(
                out,
                path,
                format!("Too few: must have at least {min} properties"),
            );
        }
        if let Some(req) = s.get("required").and_then(Value::as_array) {
            for r in req.iter().filter_map(Value::as_str) {
                if !map.contains_key(r) {
                    Self::push(out, &child(path, r), "Required value".into());
                }
            }
        }
        let embedded = flag(s, "x-kubernetes-embedded-resource");
        if embedded && mode == Mode::Full {
            for k in ["apiVersion", "kind"] {
                match map.get(k) {
                    Some(Value::String(x)) if !x.is_empty() => {}
                    Some(Value::String(_)) | None => {
                        Self::push(out, &child(path, k), "Required value".into())
                    }
                    Some(o) => Self::push(
                        out,
                        &child(path, k),
                        format!("must be of type string: {:?}", type_name(o)),
                    ),
                }
            }
            if let Some(m) = map.get("metadata")
                && !m.is_object()
            {
                Self::push(
                    out,
                    &child(path, "metadata"),
                    format!("must be of type object: {:?}", type_name(m)),
                );
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        let additional = s.get("additionalProperties");
        let preserve = flag(s, "x-kubernetes-preserve-unknown-fields");
        for (k, val) in map {
            // The API server validates metadata (and apiVersion/kind) of roots and embedded objects.
            let implicit =
                (root || embedded) && matches!(k.as_str(), "apiVersion" | "kind" | "metadata");
            if root && k == "metadata" {
                continue;
            }
            if let Some(ps) = props.and_then(|p| p.get(k)) {
                self.node(ps, val, &child(path, k), mode, false, out);
                continue;
            }
            match additional {
                Some(Value::Bool(false)) => {
                    Self::push(out, &child(path, k), "is a forbidden property".into())
                }
                Some(Value::Bool(true)) => {}
                Some(a @ Value::Object(_)) => {
                    self.node(a, val, &map_key(path, k), mode, false, out)
                }
                _ => {
                    if mode == Mode::Full
                        && !preserve
                        && !implicit
                        && self.opts.unknown_fields == UnknownFields::Reject
                    {
                        Self::push(out, &child(path, k), format!("unknown field \"{k}\""));
                    }
                }
            }
        }
    }

    /// allOf/anyOf/oneOf/not: value validations without unknown-field checks or CEL.
    fn junctors(&mut self, s: &Value, v: &Value, path: &str, out: &mut Vec<Violation>) {
        let branches = |k: &str| -> Vec<Value> {
            s.get(k)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        for b in branches("allOf") {
            self.node(&b, v, path, Mode::Junctor, false, out);
        }
        let any = branches("anyOf");
        if !any.is_empty() {
            let mut errs = Vec::new();
            let mut ok = false;
            for b in &any {
                let mut e = Vec::new();
                self.node(b, v, path, Mode::Junctor, false, &mut e);
                if e.is_empty() {
                    ok = true;
                    break;
                }
                errs.extend(e);
            }
            if !ok {
                let detail: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
                Self::push(
                    out,
                    path,
                    format!(
                        "must validate at least one schema (anyOf): {}",
                        detail.join("; ")
                    ),
                );
            }
        }
        let one = branches("oneOf");
        if !one.is_empty() {
            let mut matched = 0;
            for b in &one {
                let mut e = Vec::new();
                self.node(b, v, path, Mode::Junctor, false, &mut e);
                if e.is_empty() {
                    matched += 1;
                }
            }
            if matched != 1 {
                Self::push(
                    out,
                    path,
                    format!("must validate one and only one schema (oneOf), matched {matched}"),
                );
            }
        }
        if let Some(n) = s.get("not") {
            let mut e = Vec::new();
            self.node(n, v, path, Mode::Junctor, false, &mut e);
            if e.is_empty() {
                Self::push(out, path, "must not validate the schema (not)".into());
            }
        }
    }

    fn rules(&mut self, s: &Value, v: &Value, path: &str, root: bool, out: &mut Vec<Violation>) {
        let Some(rules) = s.get("x-kubernetes-validations").and_then(Value::as_array) else {
            return;
        };
        if rules.is_empty() {
            return;
        }
        let env = self.cel.get_or_insert_with(CelEnv::new);
        let _ = root;
        env.run(rules, s, v, path, self.opts, self.report, out);
    }
}

fn is_integer(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            n.is_i64()
                || n.is_u64()
                || n.as_f64()
                    .is_some_and(|f| f.fract() == 0.0 && f.is_finite())
        }
        _ => false,
    }
}

fn num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// Prune unknown fields in place (see [`crate::Crd::prune`]).
pub(crate) fn prune(s: &Value, v: &mut Value, root: bool) {
    match v {
        Value::Object(map) => {
            if !matches!(s.get("type").and_then(Value::as_str), Some("object") | None) {
                return;
            }
            let props = s.get("properties").and_then(Value::as_object);
            let additional = s.get("additionalProperties");
            let preserve = flag(s, "x-kubernetes-preserve-unknown-fields");
            let embedded = flag(s, "x-kubernetes-embedded-resource");
            let keep_all = preserve || matches!(additional, Some(Value::Bool(true)));
            let mut drop = HashSet::new();
            for (k, val) in map.iter_mut() {
                let implicit =
                    (root || embedded) && matches!(k.as_str(), "apiVersion" | "kind" | "metadata");
                if root && k == "metadata" {
                    continue;
                }
                if let Some(ps) = props.and_then(|p| p.get(k)) {
                    if !val.is_null() || flag(ps, "nullable") {
                        prune(ps, val, false);
                        continue;
                    }
                    // Non-nullable nulls are dropped like the API server does.
                    drop.insert(k.clone());
                    continue;
                }
                match additional {
                    Some(a @ Value::Object(_)) => prune(a, val, false),
                    _ if keep_all || implicit => {}
                    _ => {
                        drop.insert(k.clone());
                    }
                }
            }
            map.retain(|k, _| !drop.contains(k));
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items") {
                for it in items {
                    prune(is, it, false);
                }
            }
        }
        _ => {}
    }
}

/// Fill in `default` values of absent (or non-nullable null) properties, like the API server
/// does before validating; defaults are themselves defaulted.
pub(crate) fn apply_defaults(s: &Value, v: &mut Value, root: bool) {
    match v {
        Value::Object(map) => {
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                for (k, ps) in props {
                    if root && k == "metadata" {
                        continue;
                    }
                    let Some(d) = ps.get("default") else { continue };
                    match map.get(k) {
                        None => {
                            map.insert(k.clone(), d.clone());
                        }
                        Some(Value::Null) if !flag(ps, "nullable") => {
                            map.insert(k.clone(), d.clone());
                        }
                        _ => {}
                    }
                }
                for (k, val) in map.iter_mut() {
                    if root && k == "metadata" {
                        continue;
                    }
                    if let Some(ps) = props.get(k) {
                        apply_defaults(ps, val, false);
                    }
                }
            } else if let Some(a) = s.get("additionalProperties").filter(|a| a.is_object()) {
                for val in map.values_mut() {
                    apply_defaults(a, val, false);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items") {
                for it in items {
                    apply_defaults(is, it, false);
                }
            }
        }
        _ => {}
    }
}
