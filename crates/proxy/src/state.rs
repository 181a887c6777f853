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

    /// Publish an address's health, while it is one of the pool's.
    pub fn set_health_gauge(&self, addr: SocketAddr, healthy: bool) {
        let label = AddressLabel {
            address: addr.to_string(),
        };
        self.metrics
            .upstream_healthy
            .get_or_create(&label)
            .set(i64::from(healthy));
        // A health check or dial that began before a reload can end after
        // its address left the pool and `set_addresses` removed its series:
        // take it out again, or a gone address stays "healthy" in the
        // metrics for good. Checked after the write, so whichever of the two
        // runs last, the series ends removed.
        if !self.pool.backends().iter().any(|b| b.addr == addr) {
            self.metrics.upstream_healthy.remove(&label);
        }
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

#[cfg(test)]
mod tests {
    use std::{net::SocketAddr, sync::Arc};

    use super::{Shared, State};
    use crate::metrics::AddressLabel;

    fn shared() -> Shared {
        let dir = tempfile::tempdir().unwrap();
        let ca = rcgen::generate_simple_self_signed(vec!["ca".to_string()]).unwrap();
        std::fs::write(dir.path().join("ca.crt"), ca.cert.pem()).unwrap();
        let text = format!(
            "mode: passthrough\nupstream: {{serverName: a.example.com, caFile: {}/ca.crt}}\n",
            dir.path().display()
        );
        let cfg = crate::config::validate(crate::config::parse(&text).unwrap()).unwrap();
        let tls = crate::tls::TlsMaterial::load(&cfg).unwrap();
        let metrics = crate::metrics::Metrics::new();
        let listener_keepalive = cfg.timeouts.tcp_keepalive;
        Shared {
            pooled: Arc::new(crate::pool::Pool::new(metrics.pool.clone())),
            metrics,
            state: arc_swap::ArcSwap::from_pointee(State { cfg, tls }),
            pool: crate::upstream::Pool::new(),
            listening: Default::default(),
            reloaded: Default::default(),
            revision: None,
            listener_keepalive,
        }
    }

    fn series(shared: &Shared, addr: SocketAddr) -> Option<i64> {
        shared
            .metrics
            .upstream_healthy
            .get(&AddressLabel {
                address: addr.to_string(),
            })
            .map(|g| g.get())
    }

    /// A reload wakes the health checks and the address task together: a
    /// check of the old address that ends after the new addresses are in
    /// must not bring the old address's series back.
    #[test]
    fn a_health_result_for_an_address_no_longer_in_the_pool_leaves_no_series() {
        let shared = shared();
        let (old, new): (SocketAddr, SocketAddr) = (
            "198.51.100.1:443".parse().unwrap(),
            "198.51.100.2:443".parse().unwrap(),
        );
        shared.set_addresses(&[old]);
        assert_eq!(series(&shared, old), Some(1));
        shared.set_addresses(&[new]);
        // The check that was under way when the reload came.
        shared.set_health_gauge(old, true);
        assert_eq!(series(&shared, old), None, "a gone address is reported");
        assert_eq!(series(&shared, new), Some(1));
        shared.set_health_gauge(new, false);
        assert_eq!(series(&shared, new), Some(0));
    }
}
