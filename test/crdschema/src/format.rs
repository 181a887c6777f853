//! String `format` checks, following the API server's (kube-openapi strfmt) rules.
//! Unknown formats pass.

use std::net::{Ipv4Addr, Ipv6Addr};

use base64::Engine;

use crate::validate::regex;

/// Whether `s` is valid for format `f`.
pub(crate) fn check_string(f: &str, s: &str) -> bool {
    match f {
        "date-time" | "datetime" => date_time(s),
        "date" => date(s),
        "byte" => base64::engine::general_purpose::STANDARD.decode(s).is_ok(),
        "hostname" => hostname(s),
        "ipv4" => s.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => s.contains(':') && s.parse::<Ipv6Addr>().is_ok(),
        "cidr" => cidr(s),
        "uri" => uri(s),
        "uuid" => matches_re(
            r"^(?i)[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
            s,
        ),
        "mac" => matches_re(r"^([0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}$", s),
        // Numeric formats on a string (int-or-string) and unknown formats are not checked.
        _ => true,
    }
}

fn matches_re(re: &str, s: &str) -> bool {
    regex(re).map(|r| r.is_match(s)).unwrap_or(true)
}

fn date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let num = |r: std::ops::Range<usize>| s.get(r).and_then(|x| x.parse::<u32>().ok());
    match (num(0..4), num(5..7), num(8..10)) {
        (Some(_), Some(m), Some(d)) => (1..=12).contains(&m) && (1..=31).contains(&d),
        _ => false,
    }
}

/// RFC 3339 date-time (Go's strfmt also accepts a space or lowercase t/z).
fn date_time(s: &str) -> bool {
    let Some(re) = regex(
        r"^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))$",
    )
    .ok() else {
        return true;
    };
    let Some(c) = re.captures(s) else {
        return false;
    };
    let n = |i: usize| {
        c.get(i)
            .and_then(|m| m.as_str().parse::<u32>().ok())
            .unwrap_or(0)
    };
    date(&c[1]) && n(2) < 24 && n(3) < 60 && n(4) < 61 && n(7) < 24 && n(8) < 60
}

/// RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens.
fn hostname(s: &str) -> bool {
    if s.is_empty() || s.len() > 255 {
        return false;
    }
    s.split('.').all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_alphanumeric() || c == '-')
    })
}

fn cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    if ip.parse::<Ipv4Addr>().is_ok() {
        bits <= 32
    } else {
        ip.parse::<Ipv6Addr>().is_ok() && bits <= 128
    }
}

/// Like Go's url.ParseRequestURI: an absolute URI or an absolute path, no spaces.
fn uri(s: &str) -> bool {
    if s.is_empty() || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return false;
    }
    s.starts_with('/') || matches_re(r"^[a-zA-Z][a-zA-Z0-9+.\-]*:.+", s)
}
