//! Upstream addresses: balancing, passive and active health, DNS.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use arc_swap::ArcSwap;

use super::config::Balance;

/// One upstream address and its live state.
#[derive(Debug)]
pub struct Backend {
    /// Address dialed.
    pub addr: SocketAddr,
    healthy: AtomicBool,
    active: AtomicUsize,
}

impl Backend {
    fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            // Optimistic until the first check: a fresh proxy must not refuse
            // traffic while its first check runs.
            healthy: AtomicBool::new(true),
            active: AtomicUsize::new(0),
        }
    }

    /// Result of the last check or connection attempt.
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Record a check or connection result; returns whether it changed.
    pub fn set_healthy(&self, healthy: bool) -> bool {
        self.healthy.swap(healthy, Ordering::Relaxed) != healthy
    }

    /// Connections currently open to this address.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }
}

/// Counts a connection against its backend while alive.
pub struct ActiveGuard(Arc<Backend>);

impl ActiveGuard {
    /// Start counting.
    pub fn new(b: Arc<Backend>) -> Self {
        b.active.fetch_add(1, Ordering::Relaxed);
        Self(b)
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The current set of upstream addresses.
pub struct Pool {
    backends: ArcSwap<Vec<Arc<Backend>>>,
    next: AtomicUsize,
}

impl Default for Pool {
    fn default() -> Self {
        Self::new()
    }
}

impl Pool {
    /// An empty pool.
    pub fn new() -> Self {
        Self {
            backends: ArcSwap::from_pointee(Vec::new()),
            next: AtomicUsize::new(0),
        }
    }

    /// Replace the address set, keeping the state of addresses that stay.
    /// Returns the addresses removed.
    pub fn set(&self, addrs: &[SocketAddr]) -> Vec<SocketAddr> {
        let old = self.backends.load_full();
        let new: Vec<Arc<Backend>> = addrs
            .iter()
            .map(|a| {
                old.iter()
                    .find(|b| b.addr == *a)
                    .cloned()
                    .unwrap_or_else(|| Arc::new(Backend::new(*a)))
            })
            .collect();
        let removed = old
            .iter()
            .filter(|b| !addrs.contains(&b.addr))
            .map(|b| b.addr)
            .collect();
        self.backends.store(Arc::new(new));
        removed
    }

    /// Snapshot of the backends.
    pub fn backends(&self) -> Arc<Vec<Arc<Backend>>> {
        self.backends.load_full()
    }

    /// Whether any address is healthy.
    pub fn any_healthy(&self) -> bool {
        self.backends.load().iter().any(|b| b.is_healthy())
    }

    /// The addresses to try for a new connection, in order.
    pub fn attempt_order(&self, balance: Balance) -> Vec<Arc<Backend>> {
        let backends = self.backends.load();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let view: Vec<(bool, usize)> = backends
            .iter()
            .map(|b| (b.is_healthy(), b.active()))
            .collect();
        order(&view, balance, start)
            .into_iter()
            .map(|i| backends[i].clone())
            .collect()
    }
}

/// Pure balancing decision: indexes of `backends` (healthy?, active
/// connections) in the order to try. Healthy ones come first in strategy
/// order; unhealthy ones follow so that a stale health view never refuses a
/// connection that one of them could serve.
pub fn order(backends: &[(bool, usize)], balance: Balance, start: usize) -> Vec<usize> {
    let n = backends.len();
    if n == 0 {
        return Vec::new();
    }
    let rotated: Vec<usize> = (0..n).map(|i| (start + i) % n).collect();
    let mut healthy: Vec<usize> = rotated.iter().copied().filter(|&i| backends[i].0).collect();
    let unhealthy = rotated.iter().copied().filter(|&i| !backends[i].0);
    if balance == Balance::LeastConnections {
        // Stable sort: ties keep the rotation, so equal loads still spread.
        healthy.sort_by_key(|&i| backends[i].1);
    }
    healthy.extend(unhealthy);
    healthy
}

/// Errors of name resolution.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The lookup failed.
    #[error("failed to resolve {name}: {source}")]
    Lookup {
        /// Name looked up.
        name: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The lookup succeeded with no address.
    #[error("failed to resolve {name}: no address")]
    Empty {
        /// Name looked up.
        name: String,
    },
}

/// Resolve `name` to addresses with `port`, sorted and deduplicated, with
/// the answer's TTL when known (`None`: the system resolver answered).
pub async fn resolve(
    name: &str,
    port: u16,
) -> Result<(Vec<SocketAddr>, Option<Duration>), ResolveError> {
    let (mut addrs, ttl) = match super::dns::resolve_with_ttl(name).await {
        Some((ips, ttl)) => (
            ips.into_iter()
                .map(|ip| SocketAddr::new(ip, port))
                .collect::<Vec<_>>(),
            Some(ttl),
        ),
        None => {
            let found = tokio::net::lookup_host((name, port))
                .await
                .map_err(|source| ResolveError::Lookup {
                    name: name.to_string(),
                    source,
                })?;
            (found.collect(), None)
        }
    };
    addrs.sort();
    addrs.dedup();
    if addrs.is_empty() {
        return Err(ResolveError::Empty {
            name: name.to_string(),
        });
    }
    Ok((addrs, ttl))
}

/// Clamp a TTL into the configured bounds.
pub fn clamp_ttl(ttl: Duration, min: Duration, max: Duration) -> Duration {
    ttl.clamp(min, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_rotates_over_healthy_then_unhealthy() {
        let v = [(true, 0), (false, 0), (true, 0)];
        assert_eq!(order(&v, Balance::RoundRobin, 0), vec![0, 2, 1]);
        assert_eq!(order(&v, Balance::RoundRobin, 1), vec![2, 0, 1]);
        assert_eq!(order(&v, Balance::RoundRobin, 2), vec![2, 0, 1]);
        assert_eq!(order(&v, Balance::RoundRobin, 3), vec![0, 2, 1]);
        assert!(order(&[], Balance::RoundRobin, 5).is_empty());
    }

    #[test]
    fn least_connections_prefers_idle_healthy() {
        let v = [(true, 5), (true, 1), (false, 0), (true, 1)];
        assert_eq!(order(&v, Balance::LeastConnections, 0), vec![1, 3, 0, 2]);
        assert_eq!(order(&v, Balance::LeastConnections, 2), vec![3, 1, 0, 2]);
    }

    #[test]
    fn pool_keeps_state_across_updates() {
        let p = Pool::new();
        let a: SocketAddr = "192.0.2.10:443".parse().unwrap();
        let b: SocketAddr = "[2001:db8::1]:443".parse().unwrap();
        p.set(&[a, b]);
        p.backends()[0].set_healthy(false);
        let removed = p.set(&[a]);
        assert_eq!(removed, vec![b]);
        assert!(!p.backends()[0].is_healthy());
        assert!(!p.any_healthy());
        let _g = ActiveGuard::new(p.backends()[0].clone());
        assert_eq!(p.backends()[0].active(), 1);
    }

    #[test]
    fn ttl_is_clamped() {
        let s = Duration::from_secs;
        assert_eq!(clamp_ttl(s(1), s(5), s(300)), s(5));
        assert_eq!(clamp_ttl(s(86400), s(5), s(300)), s(300));
    }
}
