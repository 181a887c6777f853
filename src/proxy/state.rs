//! What every task of the running proxy shares: the live config with its
//! TLS material, the upstream pool, metrics and readiness. The server, the
//! connections, reload and admin all use it; it uses none of them, so the
//! module graph has no cycle (`server` → `conn`/`reload`/`admin` → `state`).

use std::{
    net::SocketAddr,
    sync::atomic::{AtomicBool, Ordering},
};

use arc_swap::ArcSwap;
use tokio::sync::Notify;
use tracing::info;

use super::{
    config::{self, Config},
    metrics::{AddressLabel, Metrics},
    tls::{TlsError, TlsMaterial},
    upstream::Pool,
};

/// A config with the TLS material built from it.
pub struct State {
    /// Validated config.
    pub cfg: Config,
    /// TLS configs for new connections.
    pub tls: TlsMaterial,
}

/// State shared by every task.
pub struct Shared {
    /// Metrics registry and handles.
    pub metrics: Metrics,
    /// Current config + TLS; swapped on reload.
    pub state: ArcSwap<State>,
    /// Upstream addresses.
    pub pool: Pool,
    /// True while the listener accepts.
    pub listening: AtomicBool,
    /// Wakes the address task after a reload.
    pub reloaded: Notify,
    /// The pod template revision (`--revision`), for `/readyz/<revision>`.
    pub revision: Option<String>,
    /// Pooled HTTP/2 upstream connections (pooled mode).
    pub pooled: std::sync::Arc<super::pool::Pool>,
    /// The TCP keepalive time the client listener was bound with: accepted
    /// sockets inherit the listener's options, so a connection needs its own
    /// only once a reload has changed `timeouts.tcpKeepalive`.
    pub listener_keepalive: std::time::Duration,
}

impl Shared {
    /// Ready: listening with at least one healthy upstream.
    pub fn is_ready(&self) -> bool {
        self.listening.load(Ordering::Relaxed) && self.pool.any_healthy()
    }

    /// Publish an address's health.
    pub fn set_health_gauge(&self, addr: SocketAddr, healthy: bool) {
        self.metrics
            .upstream_healthy
            .get_or_create(&AddressLabel {
                address: addr.to_string(),
            })
            .set(i64::from(healthy));
    }

    /// Replace the pool's addresses, keeping the health gauges in step.
    pub fn set_addresses(&self, addrs: &[SocketAddr]) {
        let before: Vec<SocketAddr> = self.pool.backends().iter().map(|b| b.addr).collect();
        for gone in self.pool.set(addrs) {
            self.metrics.upstream_healthy.remove(&AddressLabel {
                address: gone.to_string(),
            });
        }
        for b in self.pool.backends().iter() {
            if !before.contains(&b.addr) {
                self.set_health_gauge(b.addr, b.is_healthy());
            }
        }
        if before != addrs {
            info!(upstreams = ?addrs, "upstream addresses");
        }
    }
}

impl State {
    /// Load config and TLS, with errors prefixed by the key at fault.
    pub fn load(path: &std::path::Path) -> Result<State, String> {
        let cfg = config::load(path).map_err(|e| e.to_string())?;
        let tls = TlsMaterial::load(&cfg).map_err(|e| format!("{}: {e}", tls_key(&cfg, &e)))?;
        Ok(State { cfg, tls })
    }
}

/// Name the config key a TLS loading error is about.
fn tls_key(cfg: &Config, err: &TlsError) -> &'static str {
    let path = match err {
        TlsError::Read { path, .. } | TlsError::Pem { path, .. } => path.as_str(),
        TlsError::Rustls(_) => return "tls.keyFile",
    };
    let is = |p: &std::path::Path| p.display().to_string() == path;
    match &cfg.tls {
        Some(t) if is(&t.cert_file) => "tls.certFile",
        Some(t) if is(&t.key_file) => "tls.keyFile",
        _ => "upstream.caFile",
    }
}
