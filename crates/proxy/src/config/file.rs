//! The proxy config file as written: the one schema the controller renders
//! (`render::workload::proxy`) and the proxy parses, and the keys that only
//! take effect at start-up. Every key is optional where the proxy has a
//! default; [`super::validate`] checks the values. Unknown keys are
//! rejected, so a typo never passes silently.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The keys the proxy reads only at start (dotted paths): the proxy keeps
/// the running values on reload and warns, and the controller rolls the pods
/// when one of them changes. Anything else hot-reloads.
pub const RESTART_ONLY_KEYS: [&str; 5] = [
    "listen",
    "admin",
    "limits.maxConnections",
    "workerThreads",
    "log",
];

/// What the proxy does with a connection whose SNI is not a passthrough name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Terminate TLS with the serving certificate, re-originate TLS upstream.
    #[default]
    Reencrypt,
    /// Forward bytes untouched.
    Passthrough,
    /// Send a PROXY v2 header with the authority TLV, then forward bytes.
    ProxyProtocol,
    /// Terminate TLS as `reencrypt` does, and carry the HTTP requests over
    /// a few pooled HTTP/2 connections to the upstream.
    Pooled,
}

impl Mode {
    /// Name used in logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Reencrypt => "reencrypt",
            Mode::Passthrough => "passthrough",
            Mode::ProxyProtocol => "proxy-protocol",
            Mode::Pooled => "pooled",
        }
    }

    /// Whether the proxy terminates the clients' TLS with `tls`.
    pub fn terminates_tls(self) -> bool {
        matches!(self, Mode::Reencrypt | Mode::Pooled)
    }
}

/// How upstream addresses are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Balance {
    /// Each new connection takes the next healthy address.
    #[default]
    RoundRobin,
    /// The healthy address with the fewest active connections.
    LeastConnections,
}

/// Log output format in the config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormatKey {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The whole file. Absent keys are not written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawConfig {
    /// `listen`: where clients connect (restart-only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<RawListen>,
    /// `mode`: what happens to names that are not passed through.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// `upstream`: the shared ingress (required).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<RawUpstream>,
    /// `tls`: the serving certificate (reencrypt mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<RawTls>,
    /// `passthroughServerNames`: SNIs forwarded untouched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passthrough_server_names: Option<Vec<String>>,
    /// `admin`: the probes and metrics endpoint (restart-only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin: Option<RawAdmin>,
    /// `timeouts`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<RawTimeouts>,
    /// `limits`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<RawLimits>,
    /// `reload`: how often the files are polled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reload: Option<RawReload>,
    /// `log` (restart-only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<RawLog>,
    /// `workerThreads` (restart-only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_threads: Option<u64>,
    /// `pool`: the pooled mode's upstream connections.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<RawPool>,
}

/// `pool`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawPool {
    /// `maxConnections`: pooled HTTP/2 connections per proxy, at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u64>,
}

/// `listen`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawListen {
    /// `address`: an IP address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// `port`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u64>,
    /// `interface` that gets the address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// `manageAddress`: whether the proxy puts the address on the interface.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manage_address: Option<bool>,
    /// `ensureInterval`: a duration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ensure_interval: Option<String>,
    /// `backlog`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backlog: Option<u64>,
}

/// `upstream`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawUpstream {
    /// `serverName`: SNI sent and certificate name verified.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
    /// `port`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u64>,
    /// `addresses`: fixed IP addresses instead of resolving `serverName`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addresses: Option<Vec<String>>,
    /// `caFile`: the CA bundle of the upstream certificate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// `balance`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub balance: Option<Balance>,
    /// `healthCheck`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_check: Option<RawHealth>,
    /// `dns`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns: Option<RawDns>,
}

/// `upstream.healthCheck`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawHealth {
    /// `interval`: a duration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// `timeout`: a duration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// `upstream.dns`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawDns {
    /// `minTtl`: a duration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_ttl: Option<String>,
    /// `maxTtl`: a duration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ttl: Option<String>,
}

/// `tls`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawTls {
    /// `certFile`: PEM chain, leaf first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// `keyFile`: PEM private key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
}

/// `admin`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawAdmin {
    /// `address`: `IP:port`, empty for none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// `timeouts`, each a duration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawTimeouts {
    /// `handshake`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handshake: Option<String>,
    /// `connect`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect: Option<String>,
    /// `idle`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle: Option<String>,
    /// `drain`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain: Option<String>,
    /// `tcpKeepalive`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_keepalive: Option<String>,
}

/// `limits`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawLimits {
    /// `maxConnections` (restart-only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u64>,
    /// `maxClientHelloBytes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_client_hello_bytes: Option<u64>,
}

/// `reload`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawReload {
    /// `interval`: a duration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
}

/// `log`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawLog {
    /// `format`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<LogFormatKey>,
    /// `level`: a tracing filter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
}
