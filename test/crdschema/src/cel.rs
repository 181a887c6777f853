//! `x-kubernetes-validations` CEL rules, evaluated with the `cel` crate plus the
//! Kubernetes library functions from `kube-cel`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::{Arc, Mutex, OnceLock};

use kube_cel::KubeCelExt;
use kube_cel::cel::{self, Context, Program, Value as CelValue, objects::Key};
use serde_json::Value;

use crate::validate::child;
use crate::{Options, Report, SkippedRule, UnsupportedCel, Violation};

/// Static status of one rule, from [`crate::Crd::cel_rules`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleStatus {
    /// Parses and uses only functions we have: it is evaluated.
    Evaluated,
    /// References `oldSelf`: a transition rule, never evaluated (there is no old object).
    Transition,
    /// Does not parse with the `cel` crate.
    ParseError(String),
    /// Calls functions this implementation does not have.
    Unsupported(Vec<String>),
}

/// One `x-kubernetes-validations` rule found in a schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CelRule {
    /// Schema path of the node, in object-path form (`.spec.rules[*]`, `.spec.labels[*]`).
    pub path: String,
    /// The rule text.
    pub rule: String,
    /// Whether it would be evaluated.
    pub status: RuleStatus,
}

/// Names the parser turns into operators or macros: never registered functions.
fn builtin(name: &str) -> bool {
    name.starts_with('_')
        || name.starts_with('!')
        || name.starts_with('@')
        || matches!(
            name,
            "has" | "all" | "exists" | "exists_one" | "map" | "filter" | "in" | "dyn"
        )
}

fn new_context() -> Context<'static> {
    Context::default().with_all()
}

/// Whether a function name is registered, probed once by calling it with no arguments.
fn registered(ctx: &Context<'static>, name: &str) -> bool {
    static CACHE: OnceLock<Mutex<HashMap<String, bool>>> = OnceLock::new();
    if builtin(name) {
        return true;
    }
    let cache = CACHE.get_or_init(Default::default);
    if let Some(b) = cache.lock().ok().and_then(|c| c.get(name).copied()) {
        return b;
    }
    let known = match Program::compile(&format!("{name}()")) {
        // A dotted name that does not parse as a call: assume known, the run will tell.
        Err(_) => true,
        Ok(p) => match catch_unwind(AssertUnwindSafe(|| p.execute(ctx))) {
            Ok(Err(cel::ExecutionError::UndeclaredReference(r))) => r.as_str() != name,
            _ => true,
        },
    };
    if let Ok(mut c) = cache.lock() {
        c.insert(name.to_string(), known);
    }
    known
}

fn status(ctx: &Context<'static>, rule: &str) -> (RuleStatus, Option<Program>) {
    let program = match catch_unwind(|| Program::compile(rule)) {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => return (RuleStatus::ParseError(e.to_string()), None),
        Err(_) => return (RuleStatus::ParseError("parser panicked".into()), None),
    };
    let refs = program.references();
    if refs.has_variable("oldSelf") {
        return (RuleStatus::Transition, None);
    }
    let mut missing: Vec<String> = refs
        .functions()
        .into_iter()
        .filter(|f| !registered(ctx, f))
        .map(str::to_string)
        .collect();
    missing.sort();
    if !missing.is_empty() {
        return (RuleStatus::Unsupported(missing), None);
    }
    (RuleStatus::Evaluated, Some(program))
}

/// Convert JSON to a CEL value; `number` fields become doubles as in Kubernetes.
fn to_cel(v: &Value, s: Option<&Value>) -> CelValue {
    let ty = s.and_then(|s| s.get("type")).and_then(Value::as_str);
    match v {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => {
            if ty == Some("number") {
                CelValue::Float(n.as_f64().unwrap_or_default())
            } else if let Some(i) = n.as_i64() {
                CelValue::Int(i)
            } else if let Some(u) = n.as_u64() {
                CelValue::UInt(u)
            } else {
                CelValue::Float(n.as_f64().unwrap_or_default())
            }
        }
        Value::String(st) => CelValue::String(Arc::new(st.clone())),
        Value::Array(a) => {
            let is = s.and_then(|s| s.get("items"));
            CelValue::List(Arc::new(a.iter().map(|x| to_cel(x, is)).collect()))
        }
        Value::Object(m) => {
            let props = s.and_then(|s| s.get("properties"));
            let add = s.and_then(|s| s.get("additionalProperties"));
            // Declared property names are CEL fields and get escaped; map keys do not.
            let fields = props.is_some() && add.is_none();
            let map: HashMap<Key, CelValue> = m
                .iter()
                .map(|(k, x)| {
                    let cs = props.and_then(|p| p.get(k)).or(add);
                    let name = if fields { escape(k) } else { k.clone() };
                    (Key::String(Arc::new(name)), to_cel(x, cs))
                })
                .collect();
            CelValue::Map(map.into())
        }
    }
}

/// Kubernetes' escaping of property names in CEL: reserved words become `__word__`,
/// and `__`, `.`, `-`, `/` become `__underscores__`, `__dot__`, `__dash__`, `__slash__`.
fn escape(name: &str) -> String {
    const RESERVED: [&str; 21] = [
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ];
    if RESERVED.contains(&name) {
        return format!("__{name}__");
    }
    name.replace("__", "__underscores__")
        .replace('.', "__dot__")
        .replace('-', "__dash__")
        .replace('/', "__slash__")
}

/// Evaluation state kept for one validation: building the context is the costly part.
pub(crate) struct CelEnv {
    ctx: Rc<Context<'static>>,
}

type Compiled = Rc<(RuleStatus, Option<Program>)>;

thread_local! {
    // Registering the Kubernetes library is the costly part of a validation; do it once per thread.
    static CONTEXT: Rc<Context<'static>> = Rc::new(new_context());
    // Rules repeat across objects of a kind: parse each once per thread.
    static COMPILED: RefCell<HashMap<String, Compiled>> = RefCell::new(HashMap::new());
}

fn compiled(ctx: &Context<'static>, rule: &str) -> Compiled {
    if let Some(c) = COMPILED.with(|c| c.borrow().get(rule).cloned()) {
        return c;
    }
    let c = Rc::new(status(ctx, rule));
    COMPILED.with(|m| {
        let mut m = m.borrow_mut();
        // Bounded so random rule texts (fuzzing) cannot grow it without limit.
        if m.len() > 10_000 {
            m.clear();
        }
        m.insert(rule.to_string(), c.clone());
    });
    c
}

impl CelEnv {
    pub(crate) fn new() -> CelEnv {
        CelEnv {
            ctx: CONTEXT.with(Rc::clone),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run(
        &mut self,
        rules: &[Value],
        s: &Value,
        v: &Value,
        path: &str,
        opts: &Options,
        report: &mut Report,
        out: &mut Vec<Violation>,
    ) {
        let this = to_cel(v, Some(s));
        for r in rules {
            let Some(rule) = r.get("rule").and_then(Value::as_str) else {
                continue;
            };
            let skip = |reason: String, report: &mut Report, out: &mut Vec<Violation>| {
                if opts.unsupported_cel == UnsupportedCel::Fail {
                    out.push(Violation {
                        path: path.to_string(),
                        message: format!("rule not evaluated ({reason}): {rule}"),
                    });
                }
                report.skipped.push(SkippedRule {
                    path: path.to_string(),
                    rule: rule.to_string(),
                    reason,
                });
            };
            let c = compiled(&self.ctx, rule);
            let program = match (&c.0, &c.1) {
                (RuleStatus::Evaluated, Some(p)) => p,
                (RuleStatus::Transition, _) => {
                    // Not an error in any mode: on create there is no oldSelf.
                    report.skipped.push(SkippedRule {
                        path: path.to_string(),
                        rule: rule.to_string(),
                        reason: "transition rule (oldSelf)".into(),
                    });
                    continue;
                }
                (RuleStatus::ParseError(e), _) => {
                    skip(format!("parse error: {e}"), report, out);
                    continue;
                }
                (RuleStatus::Unsupported(f), _) => {
                    skip(
                        format!("unsupported functions: {}", f.join(", ")),
                        report,
                        out,
                    );
                    continue;
                }
                (RuleStatus::Evaluated, None) => continue,
            };
            report.evaluated_rules += 1;
            let mut scope = self.ctx.new_inner_scope();
            scope.add_variable_from_value("self", this.clone());
            let result = catch_unwind(AssertUnwindSafe(|| program.execute(&scope)));
            let at = match r.get("fieldPath").and_then(Value::as_str) {
                Some(fp) if !fp.is_empty() => {
                    let fp = fp.strip_prefix('.').unwrap_or(fp);
                    child(path, fp)
                }
                _ => path.to_string(),
            };
            match result {
                Ok(Ok(CelValue::Bool(true))) => {}
                Ok(Ok(CelValue::Bool(false))) => {
                    let msg = self.message(r, &this, rule);
                    out.push(Violation {
                        path: at,
                        message: msg,
                    });
                }
                Ok(Ok(other)) => out.push(Violation {
                    path: at,
                    message: format!("rule did not evaluate to a bool ({other:?}): {rule}"),
                }),
                Ok(Err(cel::ExecutionError::UndeclaredReference(name)))
                    if name.as_str() != "self" =>
                {
                    skip(format!("undeclared reference to {name}"), report, out);
                }
                Ok(Err(e)) => out.push(Violation {
                    path: at,
                    message: format!("rule evaluation error: {e}: {rule}"),
                }),
                Err(_) => skip("evaluator panicked".into(), report, out),
            }
        }
    }

    /// `messageExpression` if it evaluates to a string, else `message`, else the API
    /// server's default `failed rule: <rule>`.
    fn message(&self, r: &Value, this: &CelValue, rule: &str) -> String {
        if let Some(expr) = r.get("messageExpression").and_then(Value::as_str)
            && let Ok(p) = Program::compile(expr)
        {
            let mut scope = self.ctx.new_inner_scope();
            scope.add_variable_from_value("self", this.clone());
            if let Ok(Ok(CelValue::String(s))) =
                catch_unwind(AssertUnwindSafe(|| p.execute(&scope)))
            {
                return s.to_string();
            }
        }
        match r.get("message").and_then(Value::as_str) {
            Some(m) if !m.is_empty() => m.to_string(),
            _ => format!("failed rule: {rule}"),
        }
    }
}

/// Every rule in a schema with its static status.
pub(crate) fn collect_rules(schema: &Value) -> Vec<CelRule> {
    let ctx = CONTEXT.with(Rc::clone);
    let mut out = Vec::new();
    walk(schema, ".", &ctx, &mut out);
    out
}

fn walk(s: &Value, path: &str, ctx: &Context<'static>, out: &mut Vec<CelRule>) {
    if let Some(rules) = s.get("x-kubernetes-validations").and_then(Value::as_array) {
        for r in rules {
            if let Some(rule) = r.get("rule").and_then(Value::as_str) {
                out.push(CelRule {
                    path: path.to_string(),
                    rule: rule.to_string(),
                    status: compiled(ctx, rule).0.clone(),
                });
            }
        }
    }
    if let Some(p) = s.get("properties").and_then(Value::as_object) {
        for (k, ps) in p {
            walk(ps, &child(path, k), ctx, out);
        }
    }
    if let Some(a) = s.get("additionalProperties").filter(|a| a.is_object()) {
        walk(
            a,
            &format!("{}[*]", if path == "." { "" } else { path }),
            ctx,
            out,
        );
    }
    if let Some(is) = s.get("items") {
        walk(
            is,
            &format!("{}[*]", if path == "." { "" } else { path }),
            ctx,
            out,
        );
    }
}
