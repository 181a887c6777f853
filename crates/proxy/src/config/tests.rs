//! Parser and validator tests: each error names its key, printing round-trips.

use super::*;

const ISSUE_EXAMPLE: &str = r#"
listen: {address: 240.0.0.1, port: 443, interface: hcp-ingress0}
mode: reencrypt
upstream:
  serverName: api.tenant-01.example.com
  port: 443
  addresses: ["192.0.2.10", "192.0.2.11"]
  caFile: /etc/hcp-ingress/ca.crt
tls: {certFile: /etc/hcp-ingress/tls.crt, keyFile: /etc/hcp-ingress/tls.key}
passthroughServerNames: [api.tenant-01.example.com]
admin: {address: "127.0.0.1:9445"}
"#;

fn err_of(text: &str) -> String {
    validate(parse(text).unwrap()).unwrap_err().to_string()
}

#[test]
fn accepts_the_issue_example() {
    let c = validate(parse(ISSUE_EXAMPLE).unwrap()).unwrap();
    assert_eq!(c.listen.addr, "240.0.0.1:443".parse().unwrap());
    assert_eq!(c.listen.interface, "hcp-ingress0");
    assert!(c.listen.manage_address);
    assert_eq!(c.mode, Mode::Reencrypt);
    assert_eq!(c.upstream.addresses.len(), 2);
    assert_eq!(c.max_connections, 10_000);
    assert_eq!(c.admin, Some("127.0.0.1:9445".parse().unwrap()));
    // The printed effective config parses back to the same config.
    let again = validate(parse(&c.to_string()).unwrap()).unwrap();
    assert_eq!(again, c);
}

#[test]
fn ipv6_everywhere() {
    let c = validate(
        parse(
            r#"
listen: {address: "fd00::1", port: 6443}
mode: passthrough
upstream: {serverName: "api.x.example.com", addresses: ["2001:db8::10", "[2001:db8::11]"], caFile: /ca}
admin: {address: "[::1]:9445"}
"#,
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(c.listen.addr, "[fd00::1]:6443".parse().unwrap());
    assert_eq!(
        c.upstream.addresses[1],
        "2001:db8::11".parse::<IpAddr>().unwrap()
    );
    assert_eq!(c.admin, Some("[::1]:9445".parse().unwrap()));
    assert_eq!(c.listen.interface, "lo");
    assert_eq!(c.passthrough_server_names, vec!["api.x.example.com"]);
    assert_eq!(validate(parse(&c.to_string()).unwrap()).unwrap(), c);
}

#[test]
fn printed_config_escapes_what_yaml_cannot_carry_raw() {
    // Found by fuzzing: a NEL in listen.interface was printed raw and read
    // back as a space. DEL, LS and U+FEFF are as bad (rejected or folded).
    let c = validate(
        parse(
            r#"
mode: passthrough
upstream: {serverName: a.example.com, caFile: "/ca\x7f\u2029"}
listen: {interface: "e\u0085\u2028\ufeff"}
log: {level: "a\x7fb\"c\\d\te"}
"#,
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(c.log_level, "a\u{7f}b\"c\\d\te");
    assert_eq!(validate(parse(&c.to_string()).unwrap()).unwrap(), c);
}

#[test]
fn errors_name_the_key() {
    let base = "upstream: {serverName: a.example.com, caFile: /ca}\nmode: passthrough\n";
    assert_eq!(
        err_of(&format!("{base}listen: {{port: 70000}}")),
        "listen.port: 70000 is out of range 1-65535"
    );
    assert_eq!(
        err_of(
            "upstream: {serverName: a.example.com, caFile: /ca, port: 70000}\nmode: passthrough"
        ),
        "upstream.port: 70000 is out of range 1-65535"
    );
    assert!(err_of("mode: passthrough").starts_with("upstream:"));
    assert!(err_of("upstream: {caFile: /ca}").starts_with("upstream.serverName:"));
    assert!(err_of("upstream: {serverName: a.example.com}").starts_with("upstream.caFile:"));
    assert!(err_of("upstream: {serverName: a.example.com, caFile: /ca}").starts_with("tls:"));
    assert!(err_of(&format!("{base}timeouts: {{idle: 5x}}")).starts_with("timeouts.idle:"));
    assert!(err_of(&format!("{base}timeouts: {{idle: 0s}}")).starts_with("timeouts.idle:"));
    assert!(
        err_of("upstream: {serverName: a.example.com, caFile: /ca, addresses: [nope]}\nmode: passthrough")
            .starts_with("upstream.addresses[0]:")
    );
    assert!(err_of(&format!("{base}admin: {{address: nope}}")).starts_with("admin.address:"));
    assert!(
        err_of(&format!("{base}passthroughServerNames: [\"a b\"]"))
            .starts_with("passthroughServerNames[0]:")
    );
}

#[test]
fn unknown_keys_and_bad_enums_are_parse_errors() {
    assert!(
        parse("lisen: {}")
            .unwrap_err()
            .to_string()
            .contains("lisen")
    );
    assert!(
        parse("mode: tunnel")
            .unwrap_err()
            .to_string()
            .contains("tunnel")
    );
}

#[test]
fn durations() {
    assert_eq!(
        parse_duration("k", "500ms").unwrap(),
        Duration::from_millis(500)
    );
    assert_eq!(parse_duration("k", "2m").unwrap(), Duration::from_secs(120));
    assert_eq!(
        parse_duration("k", "1h").unwrap(),
        Duration::from_secs(3600)
    );
    assert!(parse_duration("k", "").is_err());
    assert!(parse_duration("k", "s").is_err());
    assert!(parse_duration("k", "99999999999999999999h").is_err());
    assert_eq!(
        parse_duration("k", "1m30s").unwrap(),
        Duration::from_secs(90)
    );
    assert_eq!(parse_duration("k", " 5s ").unwrap(), Duration::from_secs(5));
    // No unit, a negative length, a unit of no fixed length.
    for refused in ["5", "-5s", "1d", "5 parsecs"] {
        assert!(parse_duration("k", refused).is_err(), "{refused:?}");
    }
}

#[test]
fn pooled_mode_needs_tls_and_owns_the_pool_key() {
    let pooled = ISSUE_EXAMPLE.replace("mode: reencrypt", "mode: pooled");
    let c = validate(parse(&pooled).unwrap()).unwrap();
    assert_eq!(c.mode, Mode::Pooled);
    assert_eq!(c.pool_max_connections, 4);
    assert_eq!(validate(parse(&c.to_string()).unwrap()).unwrap(), c);
    let two = format!("{pooled}pool: {{maxConnections: 2}}\n");
    assert_eq!(
        validate(parse(&two).unwrap()).unwrap().pool_max_connections,
        2
    );

    let no_tls: String = pooled
        .lines()
        .filter(|l| !l.starts_with("tls:"))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(err_of(&no_tls), "tls: is required in mode pooled");
    assert_eq!(
        err_of(&format!("{pooled}pool: {{maxConnections: 0}}\n")),
        "pool.maxConnections: 0 is out of range 1-64"
    );
    assert_eq!(
        err_of(&format!("{ISSUE_EXAMPLE}pool: {{maxConnections: 2}}\n")),
        "pool: applies to mode pooled only, not reencrypt"
    );
}
