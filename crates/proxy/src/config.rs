//! Proxy configuration: the YAML contract with the controller.
//!
//! [`file`] is the schema of the file, shared with the controller's render
//! ([`RawConfig`], every key optional where a default exists); [`validate`]
//! turns it into a [`Config`] whose values are all checked, with errors that
//! name the key at fault: one function per section of the file, in the
//! file's order, so that each error message sits next to the key it names.

pub mod file;

pub use file::{
    Balance, LogFormatKey, Mode, RESTART_ONLY_KEYS, RawAdmin, RawConfig, RawDns, RawHealth,
    RawLimits, RawListen, RawLog, RawPool, RawReload, RawTimeouts, RawTls, RawUpstream,
};

use std::{
    fmt,
    net::{IpAddr, SocketAddr},
    path::PathBuf,
    time::Duration,
};

/// Errors of config parsing and validation.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("failed to read {path}: {source}")]
    Read {
        /// File path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The YAML does not match the schema.
    #[error("failed to parse config: {0}")]
    Parse(String),
    /// A value is out of range or inconsistent; `key` is the dotted path.
    #[error("{key}: {message}")]
    Invalid {
        /// Dotted key path, e.g. `upstream.port`.
        key: String,
        /// What is wrong.
        message: String,
    },
}

impl ConfigError {
    fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// Where and how to listen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listen {
    /// Socket address bound (IPv4 or IPv6).
    pub addr: SocketAddr,
    /// Interface that gets the address (`lo` by default).
    pub interface: String,
    /// Whether the proxy adds the address to `interface` (needs NET_ADMIN).
    pub manage_address: bool,
    /// How often the address is re-ensured.
    pub ensure_interval: Duration,
    /// Listen backlog.
    pub backlog: u32,
}

/// Upstream (shared ingress) settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// SNI sent and certificate name verified.
    pub server_name: String,
    /// Port of every address.
    pub port: u16,
    /// Fixed addresses; empty means "resolve `server_name`".
    pub addresses: Vec<IpAddr>,
    /// CA bundle that signs the upstream certificate.
    pub ca_file: PathBuf,
    /// Balancing strategy.
    pub balance: Balance,
    /// Active health check period.
    pub health_interval: Duration,
    /// Active health check timeout (connect + TLS handshake).
    pub health_timeout: Duration,
    /// Lower bound of a DNS answer's TTL before re-resolving.
    pub dns_min_ttl: Duration,
    /// Upper bound of a DNS answer's TTL before re-resolving.
    pub dns_max_ttl: Duration,
}

/// Serving certificate (reencrypt mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    /// PEM certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// PEM private key (PKCS#8, SEC1 or PKCS#1).
    pub key_file: PathBuf,
}

/// Timeouts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeouts {
    /// From accept to a complete ClientHello (and the TLS handshake after it).
    pub handshake: Duration,
    /// One upstream connect attempt, TLS included.
    pub connect: Duration,
    /// A connection with no byte in either direction for this long is closed.
    pub idle: Duration,
    /// How long SIGTERM waits for established connections.
    pub drain: Duration,
    /// TCP keepalive idle time on both sockets.
    pub tcp_keepalive: Duration,
}

/// The validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Listener.
    pub listen: Listen,
    /// Mode for names that are not passed through.
    pub mode: Mode,
    /// Upstream.
    pub upstream: Upstream,
    /// Serving certificate; required in reencrypt mode.
    pub tls: Option<Tls>,
    /// SNI values forwarded untouched (lowercase, no trailing dot).
    pub passthrough_server_names: Vec<String>,
    /// Admin endpoint address; `None` disables it.
    pub admin: Option<SocketAddr>,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// Maximum concurrent client connections.
    pub max_connections: usize,
    /// Maximum bytes read while waiting for a complete ClientHello.
    pub max_client_hello_bytes: usize,
    /// Config and certificate files poll period.
    pub reload_interval: Duration,
    /// Log format.
    pub log_format: LogFormatKey,
    /// Default log level (RUST_LOG overrides).
    pub log_level: String,
    /// Tokio worker threads; 1 runs a single-threaded runtime.
    pub worker_threads: usize,
    /// Pooled HTTP/2 upstream connections at most (pooled mode).
    pub pool_max_connections: usize,
}

/// Parse a duration such as `500ms`, `5s`, `2m`, `1h` or `1m30s`: jiff's
/// friendly format (which also reads ISO 8601, `PT5S`). Units stop at hours,
/// since a day has no fixed length; negative durations are refused.
pub fn parse_duration(key: &str, s: &str) -> Result<Duration, ConfigError> {
    let s = s.trim();
    let bad = || {
        ConfigError::invalid(
            key,
            format!("{s:?} is not a duration (e.g. 500ms, 5s, 2m, 1h)"),
        )
    };
    let signed: jiff::SignedDuration = s.parse().map_err(|_| bad())?;
    Duration::try_from(signed).map_err(|_| bad())
}

fn duration(key: &str, v: Option<&String>, default: Duration) -> Result<Duration, ConfigError> {
    let d = match v {
        Some(s) => parse_duration(key, s)?,
        None => default,
    };
    if d.is_zero() {
        return Err(ConfigError::invalid(key, "must be greater than zero"));
    }
    Ok(d)
}

fn ranged(key: &str, v: Option<u64>, default: u64, lo: u64, hi: u64) -> Result<u64, ConfigError> {
    let v = v.unwrap_or(default);
    if v < lo || v > hi {
        return Err(ConfigError::invalid(
            key,
            format!("{v} is out of range {lo}-{hi}"),
        ));
    }
    Ok(v)
}

/// Normalise a host name for comparison: lowercase, no trailing dot.
pub fn normalize_name(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn check_hostname(key: &str, name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && (name.parse::<IpAddr>().is_ok()
            || name.trim_end_matches('.').split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'*')
            }));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::invalid(
            key,
            format!("{name:?} is not a valid host name"),
        ))
    }
}

fn parse_ip(key: &str, s: &str) -> Result<IpAddr, ConfigError> {
    // Accept "[::1]" as well as "::1".
    let t = s.trim().trim_start_matches('[').trim_end_matches(']');
    t.parse()
        .map_err(|_| ConfigError::invalid(key, format!("{s:?} is not an IP address")))
}

/// Parse YAML text into the raw view.
pub fn parse(text: &str) -> Result<RawConfig, ConfigError> {
    if text.trim().is_empty() {
        return Ok(RawConfig::default());
    }
    serde_saphyr::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))
}

/// Read, parse and validate a config file.
pub fn load(path: &std::path::Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    validate(parse(&text)?)
}

/// Check every value and fill defaults, section by section in the file's order.
pub fn validate(raw: RawConfig) -> Result<Config, ConfigError> {
    let listen = validate_listen(raw.listen.unwrap_or_default())?;
    let mode = raw.mode.unwrap_or_default();
    let upstream = validate_upstream(raw.upstream)?;
    let tls = validate_tls(raw.tls, mode)?;
    let passthrough_server_names =
        validate_passthrough_server_names(raw.passthrough_server_names, &upstream)?;
    let admin = validate_admin(raw.admin)?;
    let timeouts = validate_timeouts(raw.timeouts.unwrap_or_default())?;
    let (max_connections, max_client_hello_bytes) =
        validate_limits(raw.limits.unwrap_or_default())?;
    let reload_interval = duration(
        "reload.interval",
        raw.reload.and_then(|r| r.interval).as_ref(),
        Duration::from_secs(2),
    )?;
    let log = raw.log.unwrap_or_default();
    let worker_threads = ranged("workerThreads", raw.worker_threads, 1, 1, 64)? as usize;
    let pool_max_connections = validate_pool(raw.pool, mode)?;

    Ok(Config {
        listen,
        mode,
        upstream,
        tls,
        passthrough_server_names,
        admin,
        timeouts,
        max_connections,
        max_client_hello_bytes,
        reload_interval,
        log_format: log.format.unwrap_or_default(),
        log_level: log.level.unwrap_or_else(|| "info".to_string()),
        worker_threads,
        pool_max_connections,
    })
}

/// The `listen` section.
fn validate_listen(l: RawListen) -> Result<Listen, ConfigError> {
    let address = match &l.address {
        Some(a) => parse_ip("listen.address", a)?,
        None => IpAddr::from([240, 0, 0, 1]),
    };
    let port = ranged("listen.port", l.port, 443, 1, 65535)? as u16;
    let interface = l.interface.unwrap_or_else(|| "lo".to_string());
    if interface.is_empty() || interface.len() > 15 || interface.contains(['/', ' ']) {
        return Err(ConfigError::invalid(
            "listen.interface",
            format!("{interface:?} is not an interface name (1-15 characters, no '/' or space)"),
        ));
    }
    Ok(Listen {
        addr: SocketAddr::new(address, port),
        interface,
        // Unspecified and loopback addresses are already local.
        manage_address: l
            .manage_address
            .unwrap_or(!address.is_unspecified() && !address.is_loopback()),
        ensure_interval: duration(
            "listen.ensureInterval",
            l.ensure_interval.as_ref(),
            Duration::from_secs(30),
        )?,
        backlog: ranged("listen.backlog", l.backlog, 1024, 1, 65535)? as u32,
    })
}

/// The `upstream` section, required.
fn validate_upstream(raw: Option<RawUpstream>) -> Result<Upstream, ConfigError> {
    let u = raw.ok_or_else(|| ConfigError::invalid("upstream", "is required"))?;
    let server_name = validate_server_name(u.server_name)?;
    let mut addresses = Vec::new();
    for (i, a) in u.addresses.iter().flatten().enumerate() {
        let ip = parse_ip(&format!("upstream.addresses[{i}]"), a)?;
        if !addresses.contains(&ip) {
            addresses.push(ip);
        }
    }
    let ca_file = u.ca_file.ok_or_else(|| {
        ConfigError::invalid(
            "upstream.caFile",
            "is required (the upstream certificate is always verified)",
        )
    })?;
    let h = u.health_check.unwrap_or_default();
    let (dns_min_ttl, dns_max_ttl) = validate_dns(u.dns.unwrap_or_default())?;
    Ok(Upstream {
        port: ranged("upstream.port", u.port, 443, 1, 65535)? as u16,
        server_name: normalize_name(&server_name),
        addresses,
        ca_file,
        balance: u.balance.unwrap_or_default(),
        health_interval: duration(
            "upstream.healthCheck.interval",
            h.interval.as_ref(),
            Duration::from_secs(2),
        )?,
        health_timeout: duration(
            "upstream.healthCheck.timeout",
            h.timeout.as_ref(),
            Duration::from_secs(2),
        )?,
        dns_min_ttl,
        dns_max_ttl,
    })
}

/// `upstream.serverName`, required: a host name, not a wildcard.
fn validate_server_name(raw: Option<String>) -> Result<String, ConfigError> {
    let server_name =
        raw.ok_or_else(|| ConfigError::invalid("upstream.serverName", "is required"))?;
    check_hostname("upstream.serverName", &server_name)?;
    if server_name.contains('*') {
        return Err(ConfigError::invalid(
            "upstream.serverName",
            "must not be a wildcard",
        ));
    }
    Ok(server_name)
}

/// `upstream.dns`: the bounds of a DNS answer's TTL, (min, max).
fn validate_dns(dns: RawDns) -> Result<(Duration, Duration), ConfigError> {
    let dns_min_ttl = duration(
        "upstream.dns.minTtl",
        dns.min_ttl.as_ref(),
        Duration::from_secs(5),
    )?;
    let dns_max_ttl = duration(
        "upstream.dns.maxTtl",
        dns.max_ttl.as_ref(),
        Duration::from_secs(300),
    )?;
    if dns_max_ttl < dns_min_ttl {
        return Err(ConfigError::invalid(
            "upstream.dns.maxTtl",
            "must not be below upstream.dns.minTtl",
        ));
    }
    Ok((dns_min_ttl, dns_max_ttl))
}

/// The `tls` section: both files when set, and set in a mode that
/// terminates TLS.
fn validate_tls(raw: Option<RawTls>, mode: Mode) -> Result<Option<Tls>, ConfigError> {
    let tls = match raw {
        Some(t) => Some(Tls {
            cert_file: t.cert_file.ok_or_else(|| {
                ConfigError::invalid("tls.certFile", "is required when tls is set")
            })?,
            key_file: t.key_file.ok_or_else(|| {
                ConfigError::invalid("tls.keyFile", "is required when tls is set")
            })?,
        }),
        None => None,
    };
    if mode.terminates_tls() && tls.is_none() {
        return Err(ConfigError::invalid(
            "tls",
            format!("is required in mode {}", mode.as_str()),
        ));
    }
    Ok(tls)
}

/// `passthroughServerNames`, normalised.
fn validate_passthrough_server_names(
    raw: Option<Vec<String>>,
    upstream: &Upstream,
) -> Result<Vec<String>, ConfigError> {
    match raw {
        Some(names) => {
            let mut out = Vec::new();
            for (i, n) in names.iter().enumerate() {
                check_hostname(&format!("passthroughServerNames[{i}]"), n)?;
                out.push(normalize_name(n));
            }
            Ok(out)
        }
        // A client that already names the API host keeps its end-to-end TLS.
        None => Ok(vec![upstream.server_name.clone()]),
    }
}

/// `admin.address`: `None` when set empty.
fn validate_admin(raw: Option<RawAdmin>) -> Result<Option<SocketAddr>, ConfigError> {
    Ok(match raw.and_then(|a| a.address) {
        Some(a) if a.is_empty() => None,
        Some(a) => Some(a.parse::<SocketAddr>().map_err(|_| {
            ConfigError::invalid("admin.address", format!("{a:?} is not an address:port"))
        })?),
        None => Some(SocketAddr::from(([127, 0, 0, 1], 9445))),
    })
}

/// The `timeouts` section.
fn validate_timeouts(t: RawTimeouts) -> Result<Timeouts, ConfigError> {
    Ok(Timeouts {
        handshake: duration(
            "timeouts.handshake",
            t.handshake.as_ref(),
            Duration::from_secs(10),
        )?,
        connect: duration(
            "timeouts.connect",
            t.connect.as_ref(),
            Duration::from_secs(5),
        )?,
        idle: duration("timeouts.idle", t.idle.as_ref(), Duration::from_secs(3600))?,
        drain: duration("timeouts.drain", t.drain.as_ref(), Duration::from_secs(30))?,
        tcp_keepalive: duration(
            "timeouts.tcpKeepalive",
            t.tcp_keepalive.as_ref(),
            Duration::from_secs(30),
        )?,
    })
}

/// The `limits` section: (maxConnections, maxClientHelloBytes).
fn validate_limits(lim: RawLimits) -> Result<(usize, usize), ConfigError> {
    let max_connections = ranged(
        "limits.maxConnections",
        lim.max_connections,
        10_000,
        1,
        1_000_000,
    )? as usize;
    // The default is the largest a ClientHello can be (its extensions'
    // length is 16 bits) and what rustls accepts: valid hellos are never
    // refused; the buffer grows only as bytes arrive, within
    // timeouts.handshake and limits.maxConnections.
    let max_client_hello_bytes = ranged(
        "limits.maxClientHelloBytes",
        lim.max_client_hello_bytes,
        64 * 1024,
        512,
        64 * 1024,
    )? as usize;
    Ok((max_connections, max_client_hello_bytes))
}

/// The `pool` section, in pooled mode only: its maxConnections.
fn validate_pool(raw: Option<RawPool>, mode: Mode) -> Result<usize, ConfigError> {
    if raw.is_some() && mode != Mode::Pooled {
        return Err(ConfigError::invalid(
            "pool",
            format!("applies to mode pooled only, not {}", mode.as_str()),
        ));
    }
    // Four connections carry hundreds of concurrent streams each; more
    // would defeat the point of pooling (O(nodes) upstream connections).
    Ok(ranged(
        "pool.maxConnections",
        raw.and_then(|p| p.max_connections),
        4,
        1,
        64,
    )? as usize)
}

fn dur(d: Duration) -> Option<String> {
    let ms = d.as_millis();
    Some(if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    })
}

/// The file that validates to this config, every default written out.
impl From<&Config> for RawConfig {
    fn from(c: &Config) -> Self {
        let path = |p: &std::path::Path| Some(p.to_path_buf());
        RawConfig {
            listen: Some(RawListen {
                address: Some(c.listen.addr.ip().to_string()),
                port: Some(c.listen.addr.port().into()),
                interface: Some(c.listen.interface.clone()),
                manage_address: Some(c.listen.manage_address),
                ensure_interval: dur(c.listen.ensure_interval),
                backlog: Some(c.listen.backlog.into()),
            }),
            mode: Some(c.mode),
            upstream: Some(RawUpstream {
                server_name: Some(c.upstream.server_name.clone()),
                port: Some(c.upstream.port.into()),
                addresses: Some(c.upstream.addresses.iter().map(|a| a.to_string()).collect()),
                ca_file: path(&c.upstream.ca_file),
                balance: Some(c.upstream.balance),
                health_check: Some(RawHealth {
                    interval: dur(c.upstream.health_interval),
                    timeout: dur(c.upstream.health_timeout),
                }),
                dns: Some(RawDns {
                    min_ttl: dur(c.upstream.dns_min_ttl),
                    max_ttl: dur(c.upstream.dns_max_ttl),
                }),
            }),
            tls: c.tls.as_ref().map(|t| RawTls {
                cert_file: path(&t.cert_file),
                key_file: path(&t.key_file),
            }),
            passthrough_server_names: Some(c.passthrough_server_names.clone()),
            // An empty address is how the file says "no admin endpoint".
            admin: Some(RawAdmin {
                address: Some(c.admin.map(|a| a.to_string()).unwrap_or_default()),
            }),
            timeouts: Some(RawTimeouts {
                handshake: dur(c.timeouts.handshake),
                connect: dur(c.timeouts.connect),
                idle: dur(c.timeouts.idle),
                drain: dur(c.timeouts.drain),
                tcp_keepalive: dur(c.timeouts.tcp_keepalive),
            }),
            limits: Some(RawLimits {
                max_connections: Some(c.max_connections as u64),
                max_client_hello_bytes: Some(c.max_client_hello_bytes as u64),
            }),
            reload: Some(RawReload {
                interval: dur(c.reload_interval),
            }),
            log: Some(RawLog {
                format: Some(c.log_format),
                level: Some(c.log_level.clone()),
            }),
            worker_threads: Some(c.worker_threads as u64),
            pool: (c.mode == Mode::Pooled).then_some(RawPool {
                max_connections: Some(c.pool_max_connections as u64),
            }),
        }
    }
}

/// The effective config as YAML, every default filled in (`--check-config`),
/// written by the same schema the file is read with.
impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let yaml = serde_saphyr::to_string(&RawConfig::from(self)).map_err(|_| fmt::Error)?;
        f.write_str(&yaml)
    }
}

#[cfg(test)]
mod tests;
