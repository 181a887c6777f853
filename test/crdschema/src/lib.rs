//! Validate JSON objects against a CustomResourceDefinition's
//! `spec.versions[].schema.openAPIV3Schema`, the way the Kubernetes API server does.
//!
//! Test support for the root crate's schema tests and for `memkube`.
//!
//! # What is checked
//! - `type` (object, array, string, integer, number, boolean), `nullable`, `properties`,
//!   `additionalProperties` (bool or schema), `required`, `enum`, `pattern` (`regex` crate,
//!   RE2-compatible syntax), `format` (date-time, date, byte, hostname, ipv4, ipv6, cidr,
//!   uri, uuid, mac on strings; int32/int64 ranges on integers; unknown formats pass),
//!   `minimum`/`maximum`/`exclusiveMinimum`/`exclusiveMaximum`/`multipleOf`,
//!   `minLength`/`maxLength` (characters), `minItems`/`maxItems`,
//!   `minProperties`/`maxProperties`, `uniqueItems`, `items`, `allOf`/`anyOf`/`oneOf`/`not`,
//!   `x-kubernetes-int-or-string`, `x-kubernetes-preserve-unknown-fields`,
//!   `x-kubernetes-embedded-resource` (apiVersion and kind required, metadata an object),
//!   `x-kubernetes-list-type` set/map (duplicates; map keys use item defaults),
//!   and `x-kubernetes-validations` CEL rules.
//! - The object's `apiVersion` (group and a served version) and `kind`. Root `metadata`
//!   is only checked to be an object: the API server validates it itself.
//! - Defaults are applied to a copy before validating, as the API server does, so a
//!   missing required field that has a default passes and CEL rules see defaults.
//!
//! # CEL
//! Rules run with the `cel` crate (0.13, the version `kube-cel` 0.8 is built on) plus the
//! Kubernetes library from `kube-cel` (isIP, isCIDR, quantity, url, format.*, ...), with
//! `self` bound to the node's value. Property names are escaped like Kubernetes does
//! (`namespace` is `__namespace__`, `-` is `__dash__`, ...). `number` fields are doubles.
//! - A rule that returns false fails with its `messageExpression`, `message`, or
//!   `failed rule: <rule>`, at the node's path plus `fieldPath`.
//! - A runtime error (e.g. a missing field without `has()`) is a violation
//!   `rule evaluation error: ...`, like the API server's.
//! - Rules referencing `oldSelf` (transition rules) are never evaluated and never fail:
//!   they are listed in [`Report::skipped`].
//! - Rules that do not parse or call a function we lack are skipped and listed in
//!   [`Report::skipped`]; with [`UnsupportedCel::Fail`] (in [`Options::strict`]) they are
//!   violations instead. [`Crd::cel_rules`] lists every rule with its static status.
//! - Not modelled: CEL cost limits, `optionalOldSelf`, `reason`, typed
//!   timestamps/durations for `format: date-time`/`duration` strings (they are strings).
//!
//! # Unknown fields
//! [`Options::default`] rejects fields the schema does not declare (`unknown field "x"`),
//! for tests. [`Options::api_server`] ignores them and accepts non-nullable nulls (the API
//! server drops both); [`Crd::prune`] removes them.
//!
//! # Example
//! ```
//! let crd = crdschema::Crd::from_yaml(r#"
//! apiVersion: apiextensions.k8s.io/v1
//! kind: CustomResourceDefinition
//! metadata: {name: widgets.example.com}
//! spec:
//!   group: example.com
//!   names: {kind: Widget, plural: widgets}
//!   scope: Namespaced
//!   versions:
//!   - name: v1
//!     served: true
//!     storage: true
//!     schema:
//!       openAPIV3Schema:
//!         type: object
//!         properties:
//!           spec: {type: object, properties: {size: {type: integer, minimum: 1}}}
//! "#).unwrap();
//! let obj = serde_json::json!({"apiVersion": "example.com/v1", "kind": "Widget",
//!     "metadata": {"name": "w"}, "spec": {"size": 0}});
//! let errs = crd.validate(&obj).unwrap_err();
//! assert_eq!(errs[0].path, ".spec.size");
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cel;
mod format;
mod structural;
mod validate;

use std::fmt;
use std::path::Path;

use serde_json::Value;

pub use cel::{CelRule, RuleStatus};
pub use structural::structural_problems;

/// Errors from loading or parsing CRDs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or folder could not be read.
    #[error("failed to read {path}: {source}")]
    Io {
        /// The path that failed.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The text is not valid YAML.
    #[error("failed to parse yaml: {0}")]
    Yaml(#[from] serde_saphyr::Error),
    /// A YAML document could not be turned into JSON.
    #[error("failed to convert yaml to json: {0}")]
    Json(#[from] serde_json::Error),
    /// The document is not a usable CustomResourceDefinition.
    #[error("failed to read crd: {0}")]
    Invalid(String),
}

/// One reason an object does not match a schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Where in the object, e.g. `.spec.routes[0].match`; `.` is the root.
    /// Keys of maps (additionalProperties) are written `[key]`.
    pub path: String,
    /// What is wrong, worded close to the API server's messages.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// What to do with fields the schema does not declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnknownFields {
    /// Report each as a violation `unknown field "name"` (like `kubectl --validate=strict`).
    #[default]
    Reject,
    /// Accept them silently; the API server would prune them (see [`Crd::prune`]).
    Ignore,
}

/// What to do with `x-kubernetes-validations` rules that cannot be evaluated here
/// (parse error, or a function this CEL implementation lacks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnsupportedCel {
    /// Skip the rule and record it in [`Report::skipped`] (default).
    #[default]
    Skip,
    /// Report the rule as a violation, so nothing passes unchecked.
    Fail,
}

/// Options for [`Crd::validate_with`] and [`Crd::validate_report`].
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Unknown fields: reject (default) or ignore.
    pub unknown_fields: UnknownFields,
    /// Do not evaluate `x-kubernetes-validations` rules at all (default false).
    pub skip_cel: bool,
    /// Rules that cannot be evaluated: skip and record (default) or fail.
    pub unsupported_cel: UnsupportedCel,
}

impl Options {
    /// Options like the API server's: unknown fields are ignored (it prunes them).
    pub fn api_server() -> Options {
        Options {
            unknown_fields: UnknownFields::Ignore,
            ..Options::default()
        }
    }

    /// Strict options: unknown fields and unevaluable CEL rules are violations.
    pub fn strict() -> Options {
        Options {
            unknown_fields: UnknownFields::Reject,
            skip_cel: false,
            unsupported_cel: UnsupportedCel::Fail,
        }
    }
}

/// A CEL rule that was not evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedRule {
    /// Path of the node the rule sits on.
    pub path: String,
    /// The rule text.
    pub rule: String,
    /// Why it was skipped (transition rule, parse error, unsupported function...).
    pub reason: String,
}

/// Full outcome of a validation: violations plus the CEL rules that were skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Violations found; empty means valid.
    pub violations: Vec<Violation>,
    /// Rules not evaluated (rules referencing `oldSelf` are always skipped: there is no old object).
    pub skipped: Vec<SkippedRule>,
    /// Number of CEL rules evaluated.
    pub evaluated_rules: usize,
}

impl Report {
    /// `Ok(())` when there are no violations.
    pub fn into_result(self) -> Result<(), Vec<Violation>> {
        if self.violations.is_empty() {
            Ok(())
        } else {
            Err(self.violations)
        }
    }
}

/// A parsed CustomResourceDefinition (`apiextensions.k8s.io/v1`).
#[derive(Debug, Clone)]
pub struct Crd {
    raw: Value,
    group: String,
    kind: String,
    plural: String,
    scope: String,
}

fn str_at<'a>(v: &'a Value, ptr: &str) -> Result<&'a str, Error> {
    v.pointer(ptr)
        .and_then(Value::as_str)
        .ok_or_else(|| Error::Invalid(format!("missing string {ptr}")))
}

impl Crd {
    /// Parse one CRD YAML document.
    pub fn from_yaml(text: &str) -> Result<Crd, Error> {
        let v: Value = serde_saphyr::from_str(text)?;
        Crd::from_value(v)
    }

    /// Build from an already parsed CRD document.
    pub fn from_value(v: Value) -> Result<Crd, Error> {
        let kind = v.get("kind").and_then(Value::as_str).unwrap_or_default();
        if kind != "CustomResourceDefinition" {
            return Err(Error::Invalid(format!(
                "kind is {kind:?}, want CustomResourceDefinition"
            )));
        }
        let group = str_at(&v, "/spec/group")?.to_string();
        let crd_kind = str_at(&v, "/spec/names/kind")?.to_string();
        let plural = str_at(&v, "/spec/names/plural")?.to_string();
        let scope = str_at(&v, "/spec/scope")?.to_string();
        let versions = v
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .ok_or_else(|| Error::Invalid("missing spec.versions".into()))?;
        for ver in versions {
            str_at(ver, "/name")?;
        }
        Ok(Crd {
            group,
            kind: crd_kind,
            plural,
            scope,
            raw: v,
        })
    }

    /// `spec.group`.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// `spec.names.kind`.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// `spec.names.plural`.
    pub fn plural(&self) -> &str {
        &self.plural
    }

    /// `spec.scope`: `Namespaced` or `Cluster`.
    pub fn scope(&self) -> &str {
        &self.scope
    }

    fn versions(&self) -> impl Iterator<Item = &Value> {
        self.raw
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
    }

    /// Names of the versions with `served: true`, in CRD order.
    pub fn served_versions(&self) -> Vec<&str> {
        self.versions()
            .filter(|v| v.get("served").and_then(Value::as_bool) == Some(true))
            .filter_map(|v| v.get("name").and_then(Value::as_str))
            .collect()
    }

    /// Name of the version with `storage: true`.
    pub fn storage_version(&self) -> Option<&str> {
        self.versions()
            .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
            .and_then(|v| v.get("name").and_then(Value::as_str))
    }

    /// The `openAPIV3Schema` of a version (served or not).
    pub fn schema(&self, version: &str) -> Option<&Value> {
        self.versions()
            .find(|v| v.get("name").and_then(Value::as_str) == Some(version))
            .and_then(|v| v.pointer("/schema/openAPIV3Schema"))
    }

    /// The whole CRD document.
    pub fn raw(&self) -> &Value {
        &self.raw
    }

    /// Validate an object (apiVersion/kind/metadata included) against the schema of
    /// the version in its apiVersion, rejecting unknown fields.
    pub fn validate(&self, obj: &Value) -> Result<(), Vec<Violation>> {
        self.validate_with(obj, &Options::default())
    }

    /// Same as [`Crd::validate`] with options.
    pub fn validate_with(&self, obj: &Value, opts: &Options) -> Result<(), Vec<Violation>> {
        self.validate_report(obj, opts).into_result()
    }

    /// Validate and also tell which CEL rules were skipped and how many ran.
    pub fn validate_report(&self, obj: &Value, opts: &Options) -> Report {
        let mut report = Report::default();
        let version = match self.check_header(obj, &mut report.violations) {
            Some(v) => v,
            None => return report,
        };
        let Some(schema) = self.schema(version) else {
            report.violations.push(Violation {
                path: ".apiVersion".into(),
                message: format!("version {version:?} not found in the CRD"),
            });
            return report;
        };
        // The API server defaults before it validates (required fields and CEL rules see defaults).
        let mut defaulted = obj.clone();
        validate::apply_defaults(schema, &mut defaulted, true);
        validate::validate_root(schema, &defaulted, opts, &mut report);
        report
    }

    /// Apply the schema's `default` values in place, as the API server does on create
    /// and update (absent properties and non-nullable nulls get their default).
    /// Uses the version in the object's apiVersion; does nothing if it is unknown.
    pub fn apply_defaults(&self, obj: &mut Value) {
        if let Some(schema) = self.version_schema_of(obj) {
            validate::apply_defaults(schema, obj, true);
        }
    }

    fn version_schema_of(&self, obj: &Value) -> Option<&Value> {
        let version = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .and_then(|av| av.split_once('/'))
            .map(|(_, v)| v)?;
        self.schema(version)
    }

    /// Check apiVersion, kind and metadata; returns the version on success.
    fn check_header<'a>(&self, obj: &'a Value, out: &mut Vec<Violation>) -> Option<&'a str> {
        let Some(map) = obj.as_object() else {
            out.push(Violation {
                path: ".".into(),
                message: format!("must be of type object: {:?}", validate::type_name(obj)),
            });
            return None;
        };
        let mut version = None;
        match map.get("apiVersion").and_then(Value::as_str) {
            None => out.push(Violation {
                path: ".apiVersion".into(),
                message: "Required value".into(),
            }),
            Some(av) => match av.split_once('/') {
                Some((g, v)) if g == self.group => {
                    if self.served_versions().contains(&v) {
                        version = Some(v);
                    } else {
                        out.push(Violation {
                            path: ".apiVersion".into(),
                            message: format!("version {v:?} is not served by this CRD"),
                        });
                    }
                }
                _ => out.push(Violation {
                    path: ".apiVersion".into(),
                    message: format!("Invalid value: {av:?}: group must be {:?}", self.group),
                }),
            },
        }
        match map.get("kind").and_then(Value::as_str) {
            Some(k) if k == self.kind => {}
            Some(k) => out.push(Violation {
                path: ".kind".into(),
                message: format!("Invalid value: {k:?}: must be {:?}", self.kind),
            }),
            None => out.push(Violation {
                path: ".kind".into(),
                message: "Required value".into(),
            }),
        }
        if let Some(m) = map.get("metadata")
            && !m.is_object()
        {
            out.push(Violation {
                path: ".metadata".into(),
                message: format!("must be of type object: {:?}", validate::type_name(m)),
            });
        }
        if out.is_empty() { version } else { None }
    }

    /// Remove fields the schema does not know, like the API server's pruning:
    /// honours `x-kubernetes-preserve-unknown-fields` and `x-kubernetes-embedded-resource`;
    /// root `apiVersion`, `kind` and `metadata` are kept. Uses the version in the
    /// object's apiVersion; does nothing if that version is unknown.
    pub fn prune(&self, obj: &mut Value) {
        if let Some(schema) = self.version_schema_of(obj) {
            let schema = schema.clone();
            validate::prune(&schema, obj, true);
        }
    }

    /// Every `x-kubernetes-validations` rule of a version with its static status
    /// (evaluable, transition rule, parse error, unsupported function).
    pub fn cel_rules(&self, version: &str) -> Vec<CelRule> {
        self.schema(version)
            .map(cel::collect_rules)
            .unwrap_or_default()
    }
}

/// Load every CRD document from a multi-document YAML file (empty documents skipped).
pub fn load_file(path: &Path) -> Result<Vec<Crd>, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.display().to_string(),
        source,
    })?;
    load_str(&text)
}

/// Load every CRD document from multi-document YAML text (empty documents skipped).
pub fn load_str(text: &str) -> Result<Vec<Crd>, Error> {
    let mut out = Vec::new();
    for v in serde_saphyr::from_multiple::<Value>(text)? {
        if v.is_null() {
            continue;
        }
        out.push(Crd::from_value(v)?);
    }
    Ok(out)
}

/// Load every `*.yaml` / `*.yml` file in a folder (not recursive), sorted by file name.
pub fn load_dir(path: &Path) -> Result<Vec<Crd>, Error> {
    let io = |source| Error::Io {
        path: path.display().to_string(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(io)? {
        let p = entry.map_err(io)?.path();
        let ext = p.extension().and_then(|e| e.to_str()).unwrap_or_default();
        if p.is_file() && (ext == "yaml" || ext == "yml") {
            files.push(p);
        }
    }
    files.sort();
    let mut out = Vec::new();
    for f in files {
        out.extend(load_file(&f)?);
    }
    Ok(out)
}
