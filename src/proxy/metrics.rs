//! Prometheus metrics of the proxy (OpenMetrics text on `/metrics`).

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

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

/// Label: an upstream address.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AddressLabel {
    /// `ip:port`.
    pub address: String,
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
    /// 1 when the address passed its last check.
    pub upstream_healthy: Family<AddressLabel, Gauge>,
    /// Time to a usable upstream connection (TCP, plus TLS in reencrypt mode).
    pub connect_seconds: Histogram,
    /// Config and certificate reloads.
    pub reloads: Family<ResultLabel, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Create and register every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("hcp_proxy");
        let connections = Family::<PathLabel, Counter>::default();
        let active = Family::<PathLabel, Gauge>::default();
        let bytes = Family::<BytesLabel, Counter>::default();
        let handshake_errors = Family::<ReasonLabel, Counter>::default();
        let upstream_errors = Family::<ReasonLabel, Counter>::default();
        let upstream_healthy = Family::<AddressLabel, Gauge>::default();
        // 100 µs .. ~3.3 s.
        let connect_seconds = Histogram::new(
            prometheus_client::metrics::histogram::exponential_buckets(0.0001, 2.0, 16),
        );
        let reloads = Family::<ResultLabel, Counter>::default();
        registry.register(
            "connections",
            "Accepted client connections by path",
            connections.clone(),
        );
        registry.register(
            "connections_active",
            "Open client connections by path",
            active.clone(),
        );
        registry.register(
            "bytes",
            "Bytes forwarded by path and direction",
            bytes.clone(),
        );
        registry.register(
            "handshake_errors",
            "Client connections closed before forwarding, by reason",
            handshake_errors.clone(),
        );
        registry.register(
            "upstream_errors",
            "Failed upstream attempts by reason",
            upstream_errors.clone(),
        );
        registry.register(
            "upstream_healthy",
            "1 when the upstream address passed its last health check",
            upstream_healthy.clone(),
        );
        registry.register(
            "upstream_connect_seconds",
            "Time to a usable upstream connection",
            connect_seconds.clone(),
        );
        registry.register(
            "reloads",
            "Config and certificate reloads by result",
            reloads.clone(),
        );
        for path in [
            "reencrypt",
            "passthrough",
            "proxy-protocol",
            "sni-passthrough",
        ] {
            let _ = connections.get_or_create(&PathLabel { path });
            let _ = active.get_or_create(&PathLabel { path });
        }
        Self {
            registry,
            connections,
            active,
            bytes,
            handshake_errors,
            upstream_errors,
            upstream_healthy,
            connect_seconds,
            reloads,
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

    /// Render the OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut s = String::with_capacity(4096);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut s, &self.registry);
        s
    }
}
