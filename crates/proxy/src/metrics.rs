//! Prometheus metrics of the proxy (OpenMetrics text on `/metrics`).

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

use super::registry::register;

/// Label: the path a connection took.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabel {
    /// `reencrypt`, `passthrough`, `proxy-protocol` or `sni-passthrough`.
    pub path: &'static str,
}

/// Label: path and direction of bytes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BytesLabel {
    /// As [`PathLabel::path`].
    pub path: &'static str,
    /// `upstream` (client to upstream) or `downstream`.
    pub direction: &'static str,
}

/// Label: an error reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// Short reason, e.g. `timeout`, `malformed`.
    pub reason: &'static str,
}

/// Label: an established connection that ended with an error.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StreamLabel {
    /// `client` or `upstream`: the side whose read or write failed.
    pub side: &'static str,
    /// `reset`, `truncated`, `timeout`, `tls` or `io`.
    pub reason: &'static str,
}

/// Label: an upstream address.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AddressLabel {
    /// `ip:port`.
    pub address: String,
}

/// Label: a certificate file.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FileLabel {
    /// Its path (`tls.certFile`).
    pub file: String,
}

/// Label: how an upstream TLS handshake went.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// `full` or `resumed`.
    pub kind: &'static str,
}

/// Label: the key exchange a TLS handshake agreed, per leg.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KxLabel {
    /// `client` (the pod's handshake) or `upstream`.
    pub leg: &'static str,
    /// `X25519MLKEM768`, `X25519`, `secp256r1`, `secp384r1`, `other`, or
    /// `none` (a TLS 1.2 resumption exchanges no key).
    pub group: &'static str,
}

/// The metric label of a key exchange group.
pub fn kx_group_label(group: Option<rustls::NamedGroup>) -> &'static str {
    use rustls::NamedGroup as G;
    match group {
        None => "none",
        Some(G::X25519MLKEM768) => "X25519MLKEM768",
        Some(G::X25519) => "X25519",
        Some(G::secp256r1) => "secp256r1",
        Some(G::secp384r1) => "secp384r1",
        Some(_) => "other",
    }
}

/// Label: outcome of a reload.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// `success` or `failure`.
    pub result: &'static str,
}

/// Every metric of the proxy.
pub struct Metrics {
    /// Registry rendered by `/metrics`.
    pub registry: Registry,
    /// Accepted connections by path.
    pub connections: Family<PathLabel, Counter>,
    /// Open connections by path.
    pub active: Family<PathLabel, Gauge>,
    /// Bytes forwarded.
    pub bytes: Family<BytesLabel, Counter>,
    /// Client-side handshake failures by reason.
    pub handshake_errors: Family<ReasonLabel, Counter>,
    /// Upstream failures by reason.
    pub upstream_errors: Family<ReasonLabel, Counter>,
    /// Connections accepted and closed at once, by reason (`limit`).
    pub refused: Family<ReasonLabel, Counter>,
    /// Failed `accept` calls by reason (`fds`, `memory`, `other`).
    pub accept_errors: Family<ReasonLabel, Counter>,
    /// Forwarding connections ended by an error, by side and reason.
    pub stream_errors: Family<StreamLabel, Counter>,
    /// 1 when the address passed its last check.
    pub upstream_healthy: Family<AddressLabel, Gauge>,
    /// Time to a usable upstream connection (TCP, plus TLS in reencrypt mode).
    pub connect_seconds: Histogram,
    /// Upstream TLS handshakes of the reencrypt path, full or resumed.
    pub upstream_handshakes: Family<KindLabel, Counter>,
    /// TLS handshakes of the reencrypt and pooled paths by leg and key
    /// exchange group: how much of the traffic is post-quantum protected.
    pub tls_key_exchanges: Family<KxLabel, Counter>,
    /// Connections ended by a panic: a bug reached by what a peer sent. The
    /// panic ends that connection's task only; every other goes on.
    pub connection_panics: Counter,
    /// Config and certificate reloads.
    pub reloads: Family<ResultLabel, Counter>,
    /// `notAfter` of the serving certificate in force; no series without
    /// one (passthrough modes), so an expiry alert never sees a 0.
    pub certificate_expiry: Family<FileLabel, Gauge>,
    /// The pooled mode's metrics.
    pub pool: super::pool::PoolMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Create and register every metric. The groups register in the order
    /// `/metrics` lists them, each with its series that start at 0.
    pub fn new() -> Self {
        let mut m = Self::unregistered();
        m.register_traffic();
        m.register_failures();
        m.register_upstream();
        m.register_process();
        m.pool = super::pool::PoolMetrics::register(&mut m.registry);
        m
    }

    /// Every metric, empty and not yet in the registry.
    fn unregistered() -> Self {
        Self {
            registry: Registry::with_prefix("hcp_proxy"),
            connections: Family::default(),
            active: Family::default(),
            bytes: Family::default(),
            handshake_errors: Family::default(),
            upstream_errors: Family::default(),
            refused: Family::default(),
            accept_errors: Family::default(),
            stream_errors: Family::default(),
            upstream_healthy: Family::default(),
            // 100 µs .. ~3.3 s.
            connect_seconds: Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(0.0001, 2.0, 16),
            ),
            upstream_handshakes: Family::default(),
            tls_key_exchanges: Family::default(),
            connection_panics: Counter::default(),
            reloads: Family::default(),
            certificate_expiry: Family::default(),
            pool: Default::default(),
        }
    }

    /// Connections and bytes by path, every path's series from the start.
    fn register_traffic(&mut self) {
        register! { self.registry, self;
            connections, "connections", "Accepted client connections by path";
            active, "connections_active", "Open client connections by path";
            bytes, "bytes", "Bytes forwarded by path and direction";
        }
        for path in [
            "reencrypt",
            "pooled",
            "passthrough",
            "proxy-protocol",
            "sni-passthrough",
        ] {
            let _ = self.connections.get_or_create(&PathLabel { path });
            let _ = self.active.get_or_create(&PathLabel { path });
            for direction in ["upstream", "downstream"] {
                let _ = self.bytes.get_or_create(&BytesLabel { path, direction });
            }
        }
    }

    /// What ended a connection or refused one, by reason. Every reason is
    /// present at 0, so an alert on its rate sees the first increment and a
    /// dashboard shows 0 rather than "no data" (the reasons of docs/metrics.md).
    fn register_failures(&mut self) {
        register! { self.registry, self;
            handshake_errors, "handshake_errors",
                "Client connections closed before forwarding, by reason";
            upstream_errors, "upstream_errors", "Failed upstream attempts by reason";
            refused, "connections_refused",
                "Client connections accepted and closed at once (reset), by reason";
            accept_errors, "accept_errors",
                "Failed accepts by reason; the client waits in the backlog";
            stream_errors, "stream_errors",
                "Forwarding connections ended by an error, by side and reason";
        }
        let _ = self.refused.get_or_create(&ReasonLabel { reason: "limit" });
        for reason in [
            "not_tls",
            "malformed",
            "oversized",
            "eof",
            "io",
            "timeout",
            "tls",
        ] {
            let _ = self.handshake_errors.get_or_create(&ReasonLabel { reason });
        }
        for reason in [
            "refused",
            "connect",
            "timeout",
            "tls",
            "certificate",
            "exhausted",
            "health_check",
            "dns",
        ] {
            let _ = self.upstream_errors.get_or_create(&ReasonLabel { reason });
        }
        for reason in ["fds", "memory", "other"] {
            let _ = self.accept_errors.get_or_create(&ReasonLabel { reason });
        }
        for side in ["client", "upstream"] {
            for reason in ["reset", "truncated", "timeout", "tls", "io"] {
                let _ = self
                    .stream_errors
                    .get_or_create(&StreamLabel { side, reason });
            }
        }
    }

    /// The upstream's health, connect time and TLS handshakes, and the key
    /// exchanges of both legs.
    fn register_upstream(&mut self) {
        register! { self.registry, self;
            upstream_healthy, "upstream_healthy",
                "1 when the upstream address passed its last health check";
            connect_seconds, "upstream_connect_seconds", "Time to a usable upstream connection";
            upstream_handshakes, "upstream_tls_handshakes",
                "Upstream TLS handshakes of the reencrypt path by kind (full, resumed)";
            tls_key_exchanges, "tls_key_exchanges",
                "TLS handshakes of the reencrypt and pooled paths by leg (client, upstream) and key exchange group";
        }
        for kind in ["full", "resumed"] {
            let _ = self.upstream_handshakes.get_or_create(&KindLabel { kind });
        }
        for leg in ["client", "upstream"] {
            for group in [
                "X25519MLKEM768",
                "X25519",
                "secp256r1",
                "secp384r1",
                "other",
                "none",
            ] {
                let _ = self
                    .tls_key_exchanges
                    .get_or_create(&KxLabel { leg, group });
            }
        }
    }

    /// The process: panics, reloads, the serving certificate's expiry.
    fn register_process(&mut self) {
        register! { self.registry, self;
            connection_panics, "connection_panics",
                "Connections ended by a panic (a bug; the process goes on)";
            reloads, "reloads", "Config and certificate reloads by result";
            certificate_expiry, "certificate_expiry_timestamp_seconds",
                "End of validity (Unix seconds) of the serving certificate in force";
        }
        for result in ["success", "failure"] {
            let _ = self.reloads.get_or_create(&ResultLabel { result });
        }
    }

    /// The serving certificate now in force: its file and `notAfter` (Unix seconds).
    pub fn serving_certificate(&self, leaf: Option<&(String, i64)>) {
        self.certificate_expiry.clear();
        if let Some((file, not_after)) = leaf {
            self.certificate_expiry
                .get_or_create(&FileLabel { file: file.clone() })
                .set(*not_after);
        }
    }

    /// Count a handshake error.
    pub fn handshake_error(&self, reason: &'static str) {
        self.handshake_errors
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// Count an upstream error.
    pub fn upstream_error(&self, reason: &'static str) {
        self.upstream_errors
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// Count a connection refused at accept.
    pub fn refusal(&self, reason: &'static str) {
        self.refused.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// Count a failed accept.
    pub fn accept_error(&self, reason: &'static str) {
        self.accept_errors
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// Count an upstream TLS handshake of the reencrypt path.
    pub fn upstream_handshake(&self, resumed: bool) {
        let kind = if resumed { "resumed" } else { "full" };
        self.upstream_handshakes
            .get_or_create(&KindLabel { kind })
            .inc();
    }

    /// Count a TLS handshake's key exchange on `leg` (`client`, `upstream`).
    pub fn key_exchange(&self, leg: &'static str, group: Option<rustls::NamedGroup>) {
        let group = kx_group_label(group);
        self.tls_key_exchanges
            .get_or_create(&KxLabel { leg, group })
            .inc();
    }

    /// Count a forwarding connection ended by an error.
    pub fn stream_error(&self, side: &'static str, reason: &'static str) {
        self.stream_errors
            .get_or_create(&StreamLabel { side, reason })
            .inc();
    }

    /// Render the OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut s = String::with_capacity(4096);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut s, &self.registry);
        s
    }
}
