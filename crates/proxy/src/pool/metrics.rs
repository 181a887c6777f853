//! Metrics of the pooled mode, registered with the proxy's others.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

use crate::registry::register;

/// Label: how a request reached the upstream.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabel {
    /// `pooled` (a stream on a pooled HTTP/2 connection), `upgrade` or
    /// `dedicated` (its own HTTP/1.1 connection: an upgrade, or no room
    /// on the pool).
    pub route: &'static str,
}

/// The pool's metrics.
#[derive(Clone, Default)]
pub struct PoolMetrics {
    /// Pooled HTTP/2 connections open now.
    pub connections: Gauge,
    /// Pooled HTTP/2 connections opened.
    pub connections_opened: Counter,
    /// Streams in flight on the pool.
    pub streams: Gauge,
    /// Requests by route.
    pub requests: Family<RouteLabel, Counter>,
    /// Dedicated HTTP/1.1 connections open now (upgrades, overflow).
    pub dedicated: Gauge,
}

impl PoolMetrics {
    /// Register every metric (prefix of `registry`: `hcp_proxy`).
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        register! { registry, m;
            connections, "pool_upstream_connections",
                "Pooled HTTP/2 upstream connections open now";
            connections_opened, "pool_upstream_connections_opened",
                "Pooled HTTP/2 upstream connections opened";
            streams, "pool_streams",
                "Requests in flight on the pooled connections";
            requests, "pool_requests",
                "Requests of pooled mode by route: pooled, upgrade, dedicated";
            dedicated, "pool_dedicated_connections",
                "Dedicated HTTP/1.1 upstream connections open now (upgrades, no room on the pool)";
        }
        for route in ["pooled", "upgrade", "dedicated"] {
            let _ = m.requests.get_or_create(&RouteLabel { route });
        }
        m
    }

    /// Count a request by route.
    pub fn request(&self, route: &'static str) {
        self.requests.get_or_create(&RouteLabel { route }).inc();
    }
}
