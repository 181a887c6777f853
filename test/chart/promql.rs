//! Metric names in PromQL, and metric names in a Prometheus text exposition.
//!
//! Not a PromQL parser: enough of the lexical structure to find every
//! metric name an expression selects. String literals, label matchers
//! (`{...}`), ranges and subqueries (`[...]`) and the label lists of
//! `by`/`without`/`on`/`ignoring`/`group_left`/`group_right` are removed;
//! what remains of each identifier is a metric name unless it calls a
//! function (followed by `(`) or is a keyword, an operator word or a number.

use std::collections::BTreeSet;

/// PromQL words that are not metric names: aggregation operators (they may
/// take `by (...)` before their parenthesis), modifiers, operator words.
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "atan2",
    "inf",
    "nan",
    "Inf",
    "NaN",
];

/// Label-list modifiers: the parenthesised list after them holds label names.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Every metric name `expr` selects.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let cleaned = strip_nested(&strip_strings(expr));
    let chars: Vec<char> = cleaned.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let mut skip_label_list = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '(' && skip_label_list {
            // Skip to the matching `)`: label names, not metrics.
            let mut depth = 0;
            while i < chars.len() {
                match chars[i] {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            skip_label_list = false;
            i += 1;
            continue;
        }
        if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) {
            // A number, possibly 1e-9 or 0x1f: its letters are no identifier.
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric()
                    || chars[i] == '.'
                    || ((chars[i] == '-' || chars[i] == '+') && matches!(chars[i - 1], 'e' | 'E')))
            {
                i += 1;
            }
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || matches!(chars[i], '_' | ':'))
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace());
            if LABEL_LISTS.contains(&word.as_str()) {
                skip_label_list = next == Some(&'(');
                continue;
            }
            if next == Some(&'(') || KEYWORDS.contains(&word.as_str()) {
                continue;
            }
            names.insert(word);
            continue;
        }
        if !c.is_whitespace() {
            skip_label_list = skip_label_list && c == '(';
        }
        i += 1;
    }
    names
}

/// Remove "..." and '...' literals (escapes included) and `...` raw strings.
fn strip_strings(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut chars = expr.chars();
    while let Some(c) = chars.next() {
        if matches!(c, '"' | '\'' | '`') {
            let quote = c;
            while let Some(d) = chars.next() {
                if d == '\\' && quote != '`' {
                    chars.next();
                } else if d == quote {
                    break;
                }
            }
            out.push_str("\"\"");
        } else {
            out.push(c);
        }
    }
    out
}

/// Remove the contents of `{...}` (label matchers) and `[...]` (ranges).
fn strip_nested(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut depth = 0usize;
    for c in expr.chars() {
        match c {
            '{' | '[' => {
                depth += 1;
                if depth == 1 {
                    out.push(' ');
                }
            }
            '}' | ']' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// The metric names a Prometheus or OpenMetrics text exposition offers:
/// every sample's name, and for each `# TYPE` the names its samples take
/// (a counter's `_total`, a histogram's `_bucket`, `_sum`, `_count`), so a
/// registered family with no series yet still counts as exported.
pub fn exported_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            names.insert(name.to_string());
            let suffixes: &[&str] = match kind {
                "counter" => &["_total", "_created"],
                "histogram" => &["_bucket", "_sum", "_count", "_created"],
                "summary" => &["_sum", "_count", "_created"],
                _ => &[],
            };
            for s in suffixes {
                names.insert(format!("{name}{s}"));
            }
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            let end = line
                .find(|c: char| c == '{' || c.is_whitespace())
                .unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

#[test]
fn finds_metric_names_and_skips_functions_labels_and_ranges() {
    let names = |e: &str| metric_names(e).into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(
            r#"histogram_quantile(0.99, sum by (le) (rate(hcp_a_seconds_bucket{job=~"$job", x="a{b}"}[$__rate_interval])))"#
        ),
        ["hcp_a_seconds_bucket"]
    );
    assert_eq!(
        names("min by (x) (hcp_expiry_seconds) - time() < 86400"),
        ["hcp_expiry_seconds"]
    );
    assert_eq!(
        names(
            "sum(rate(a_total[5m])) / clamp_min(sum without (pod) (rate(b_total[5m])), 1e-9) > bool 0.5 and on (instance) c == 0"
        ),
        ["a_total", "b_total", "c"]
    );
    assert_eq!(
        names(
            "max_over_time(up_like[10m:1m] offset 1h) unless ignoring(a, b) group_left(c) other:recorded"
        ),
        ["other:recorded", "up_like"]
    );
    assert_eq!(names("bare_metric"), ["bare_metric"]);
    assert_eq!(names(r#"{__name__="x"}"#), Vec::<String>::new());
}

#[test]
fn exported_names_include_the_suffixes_of_types() {
    let text = "# HELP a_requests Requests.\n# TYPE a_requests counter\na_requests_total{x=\"1\"} 3\n\
                # TYPE a_seconds histogram\n# TYPE a_level gauge\na_level 1\n# EOF\n";
    let names = exported_names(text);
    for want in [
        "a_requests_total",
        "a_seconds_bucket",
        "a_seconds_sum",
        "a_seconds_count",
        "a_level",
    ] {
        assert!(names.contains(want), "{want} not in {names:?}");
    }
    assert!(!names.contains("a_seconds_total"));
}
