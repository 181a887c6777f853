//! Label and field selectors, parsed from the `labelSelector` and
//! `fieldSelector` query parameters with the API server's syntax.

use serde_json::Value;

use crate::error::{ApiError, ApiResult};

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; all requirements must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<LabelReq>);

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (f,g),h notin (i),j,!k`.
    pub fn parse(s: &str) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        for part in split_top_level(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            reqs.push(parse_label_req(part)?);
        }
        Ok(Self(reqs))
    }

    /// Whether the object's labels satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            // As in Kubernetes, `!=` also matches objects without the label.
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn parse_label_req(part: &str) -> ApiResult<LabelReq> {
    let bad = || {
        ApiError::bad_request(format!(
            "unable to parse requirement: invalid label selector: {part:?}"
        ))
    };
    if let Some(k) = part.strip_prefix('!') {
        return Ok(LabelReq::NotExists(k.trim().to_string()));
    }
    if let Some((k, v)) = part.split_once("!=") {
        return Ok(LabelReq::NotEq(k.trim().into(), v.trim().into()));
    }
    if let Some((k, v)) = part.split_once("==") {
        return Ok(LabelReq::Eq(k.trim().into(), v.trim().into()));
    }
    if let Some((k, v)) = part.split_once('=') {
        return Ok(LabelReq::Eq(k.trim().into(), v.trim().into()));
    }
    let words: Vec<&str> = part.splitn(2, char::is_whitespace).collect();
    if words.len() == 2 {
        let rest = words[1].trim();
        let (op, set) = if let Some(r) = rest.strip_prefix("notin") {
            ("notin", r)
        } else if let Some(r) = rest.strip_prefix("in") {
            ("in", r)
        } else {
            return Err(bad());
        };
        let set = set
            .trim()
            .strip_prefix('(')
            .and_then(|s| s.strip_suffix(')'))
            .ok_or_else(bad)?;
        let values: Vec<String> = set
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect();
        let key = words[0].to_string();
        return Ok(if op == "in" {
            LabelReq::In(key, values)
        } else {
            LabelReq::NotIn(key, values)
        });
    }
    if part.contains(char::is_whitespace) {
        return Err(bad());
    }
    Ok(LabelReq::Exists(part.to_string()))
}

/// A parsed field selector: `path=value` / `path!=value` terms on dotted paths.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(Vec<String>, bool, String)>);

impl FieldSelector {
    /// Parses `metadata.name=x,status.phase!=Running`.
    pub fn parse(s: &str) -> ApiResult<Self> {
        let mut terms = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (path, eq, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector: {part:?}"
                )));
            };
            terms.push((
                path.trim().split('.').map(String::from).collect(),
                eq,
                value.trim().to_string(),
            ));
        }
        Ok(Self(terms))
    }

    /// The name this selector pins with `metadata.name=`, if any.
    pub fn pinned_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(p, eq, _)| *eq && p.len() == 2 && p[0] == "metadata" && p[1] == "name")
            .map(|(_, _, v)| v.as_str())
    }

    /// Whether every term holds; missing fields compare as the empty string.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let mut cur = Some(obj);
            for seg in path {
                cur = cur.and_then(|c| c.get(seg));
            }
            let have = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(v) => v.to_string(),
            };
            (have == *want) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_set_based_syntax() {
        let o = json!({"metadata": {"labels": {"app": "web", "tier": "fe"}}});
        for (sel, want) in [
            ("app=web", true),
            ("app==web,tier=fe", true),
            ("app!=db", true),
            ("app in (web, db)", true),
            ("app notin (web)", false),
            ("tier", true),
            ("!tier", false),
            ("missing!=x", true),
            ("missing notin (x)", true),
            ("missing in (x)", false),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&o),
                want,
                "{sel}"
            );
        }
    }

    #[test]
    fn field_selector_on_dotted_paths() {
        let o =
            json!({"metadata": {"name": "a", "namespace": "ns"}, "status": {"phase": "Running"}});
        assert!(
            FieldSelector::parse("metadata.name=a,metadata.namespace=ns")
                .unwrap()
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("status.phase!=Running")
                .unwrap()
                .matches(&o)
        );
        assert_eq!(
            FieldSelector::parse("metadata.name=a")
                .unwrap()
                .pinned_name(),
            Some("a")
        );
    }
}
