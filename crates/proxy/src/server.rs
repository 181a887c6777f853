//! The running proxy: listener, accept loop, background tasks, drain.
//! It starts [`conn`], [`reload`] and [`admin`]; all of them share
//! [`super::state`], which depends on none of them.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use arc_swap::ArcSwap;
use tokio::{
    io::AsyncWriteExt,
    net::{TcpListener, TcpStream},
    sync::{Notify, Semaphore},
    time::timeout,
};
use tracing::{error, info, warn};

use super::{
    admin,
    config::Mode,
    conn,
    metrics::Metrics,
    netlink, proxy_protocol, reload,
    state::{Shared, State},
    tlsio::ClientTls,
    upstream::{self, Pool},
};

/// Errors that stop the proxy at start-up.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The listener could not be bound.
    #[error("failed to listen on {addr}: {source}")]
    Listen {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// The listen address could not be put on its interface.
    #[error("failed to set up the listen address: {0}")]
    Address(#[from] netlink::NetlinkError),
}

/// Bind the client listener. FREEBIND lets it start before the address is
/// on the interface; an unspecified IPv6 address also accepts IPv4.
/// SO_REUSEPORT lets the next proxy pod bind next to the running one during a
/// rolling update (maxSurge 1), so a node is never without a listener.
/// With `keepalive`, the listener carries the TCP options of a proxied
/// connection (`dial::tune`): Linux copies them into every accepted socket,
/// which saves four setsockopt calls per connection.
pub fn bind(
    addr: SocketAddr,
    backlog: u32,
    keepalive: Option<std::time::Duration>,
) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    if addr.is_ipv6() {
        if addr.ip().is_unspecified() {
            s.set_only_v6(false)?;
        }
        let _ = s.set_freebind_v6(true);
    } else {
        let _ = s.set_freebind_v4(true);
    }
    s.set_nonblocking(true)?;
    if let Some(keepalive) = keepalive {
        s.set_tcp_nodelay(true)?;
        s.set_tcp_keepalive(&super::conn::keepalive(keepalive))?;
    }
    s.bind(&addr.into())?;
    s.listen(backlog as i32)?;
    TcpListener::from_std(s.into())
}

/// One health check: TCP connect (+ PROXY header) + a full TLS handshake
/// with the SNI, verified against the CA.
pub async fn check(state: &State, addr: SocketAddr) -> Result<(), String> {
    let cfg = &state.cfg;
    let attempt = async {
        let mut s = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let _ = s.set_nodelay(true);
        if cfg.mode == Mode::ProxyProtocol {
            let local = s.local_addr().map_err(|e| e.to_string())?;
            let h = proxy_protocol::header(local, addr, &cfg.upstream.server_name);
            s.write_all(&h)
                .await
                .map_err(|e| format!("proxy header: {e}"))?;
        }
        // The data path's TLS stream: one TLS client's code in the process.
        let name = state.tls.upstream_name().clone();
        let mut tls = ClientTls::connect(state.tls.client_for(&[]), name, s)
            .await
            .map_err(|e| format!("tls: {e}"))?;
        let _ = tls.shutdown().await;
        Ok::<(), String>(())
    };
    match timeout(cfg.upstream.health_timeout, attempt).await {
        Ok(r) => r,
        Err(_) => Err("timeout".into()),
    }
}

async fn health_loop(shared: Arc<Shared>) {
    loop {
        let state = shared.state.load_full();
        let backends = shared.pool.backends();
        let results =
            futures::future::join_all(backends.iter().map(|b| check(&state, b.addr))).await;
        for (b, r) in backends.iter().zip(results) {
            let ok = r.is_ok();
            if b.set_healthy(ok) {
                match &r {
                    Ok(()) => info!(upstream = %b.addr, "upstream healthy"),
                    Err(e) => warn!(upstream = %b.addr, error = %e, "upstream unhealthy"),
                }
            }
            if !ok {
                shared.metrics.upstream_error("health_check");
            }
            shared.set_health_gauge(b.addr, ok);
        }
        tokio::select! {
            _ = tokio::time::sleep(state.cfg.upstream.health_interval) => {}
            _ = shared.reloaded.notified() => {}
        }
    }
}

/// Keep the pool's addresses current: fixed ones from the config, or the
/// server name re-resolved when its TTL (clamped to `dns.minTtl`..`maxTtl`)
/// expires.
async fn address_loop(shared: Arc<Shared>) {
    loop {
        let state = shared.state.load_full();
        let up = &state.cfg.upstream;
        let wait = if !up.addresses.is_empty() {
            let addrs: Vec<SocketAddr> = up
                .addresses
                .iter()
                .map(|ip| SocketAddr::new(*ip, up.port))
                .collect();
            shared.set_addresses(&addrs);
            Duration::from_secs(3600)
        } else {
            match upstream::resolve(&up.server_name, up.port).await {
                Ok((addrs, ttl)) => {
                    shared.set_addresses(&addrs);
                    upstream::clamp_ttl(
                        ttl.unwrap_or(up.dns_min_ttl),
                        up.dns_min_ttl,
                        up.dns_max_ttl,
                    )
                }
                Err(e) => {
                    warn!(error = %e, "keeping the previous upstream addresses");
                    shared.metrics.upstream_error("dns");
                    up.dns_min_ttl.min(Duration::from_secs(5))
                }
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shared.reloaded.notified() => {}
        }
    }
}

async fn address_keeper(interface: String, addr: std::net::IpAddr, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let iface = interface.clone();
        match tokio::task::spawn_blocking(move || netlink::ensure_address(&iface, addr)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => error!(error = %e, "failed to re-ensure the listen address"),
            Err(e) => error!(error = %e, "failed to re-ensure the listen address"),
        }
    }
}

/// At most one warning per this interval for a repeating condition.
const LOG_EVERY: Duration = Duration::from_secs(5);

/// Rate limit for a log line that may repeat thousands of times a second
/// (refusals at the limit, accept errors): the first occurrence logs, the
/// next ones within `every` are only counted and reported with the next line.
#[derive(Debug)]
pub struct RateLimit {
    every: Duration,
    next: Option<std::time::Instant>,
    suppressed: u64,
}

impl RateLimit {
    /// At most one line per `every`.
    pub fn new(every: Duration) -> Self {
        Self {
            every,
            next: None,
            suppressed: 0,
        }
    }

    /// Whether to log an occurrence at `now`; `Some(n)`: log it, with the
    /// `n` occurrences suppressed since the last line.
    pub fn allow(&mut self, now: std::time::Instant) -> Option<u64> {
        if self.next.is_some_and(|next| now < next) {
            self.suppressed += 1;
            return None;
        }
        self.next = Some(now + self.every);
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// Metric reason of a failed accept. Out of descriptors (EMFILE, ENFILE) is
/// the one to alert on: it is `fds`.
pub fn accept_error_reason(e: &std::io::Error) -> &'static str {
    // Linux errno values; std has no stable ErrorKind for them.
    const ENOMEM: i32 = 12;
    const ENFILE: i32 = 23;
    const EMFILE: i32 = 24;
    const ENOBUFS: i32 = 105;
    match e.raw_os_error() {
        Some(EMFILE | ENFILE) => "fds",
        Some(ENOBUFS | ENOMEM) => "memory",
        _ => "other",
    }
}

/// Serve one connection with its panics contained: a panic (a bug that
/// what a peer sent reached) ends this connection's task only — its
/// sockets close as the task unwinds — is counted and logged, and every
/// other connection goes on. What a connection shares with the others
/// (metrics, the session store, the pool) is atomics and poison-tolerant
/// locks, safe to use after an unwind.
async fn contained(
    shared: Arc<Shared>,
    s: TcpStream,
    peer: SocketAddr,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    use futures::FutureExt;
    let task = std::panic::AssertUnwindSafe(conn::handle(shared.clone(), s, peer, permit));
    if task.catch_unwind().await.is_err() {
        shared.metrics.connection_panics.inc();
        error!(%peer, "a connection panicked and was closed; the proxy goes on (a bug: please report it)");
    }
}

/// Close a connection we will not serve with a reset (SO_LINGER 0), not a
/// FIN: the client's ClientHello is usually already in our receive buffer,
/// and closing with unread data resets anyway, only later and leaving a
/// TIME_WAIT socket behind on our side for every refusal. An immediate RST
/// is deterministic, costs no kernel state, and every client treats it as
/// a failed attempt to retry, never as a response.
fn refuse(s: TcpStream) {
    let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
    drop(s);
}

/// Wait for SIGTERM or SIGINT.
async fn terminated() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("install SIGINT handler");
    tokio::select! {
        _ = term.recv() => info!("SIGTERM: draining"),
        _ = int.recv() => info!("SIGINT: draining"),
    }
}

/// Run until SIGTERM, then drain. `config_path` is watched for reloads.
pub async fn run(
    state: State,
    config_path: std::path::PathBuf,
    revision: Option<String>,
) -> Result<(), ServerError> {
    let cfg = state.cfg.clone();
    if cfg.listen.manage_address {
        let (iface, ip) = (cfg.listen.interface.clone(), cfg.listen.addr.ip());
        tokio::task::spawn_blocking(move || netlink::ensure_address(&iface, ip))
            .await
            .expect("address task")?;
        info!(address = %cfg.listen.addr.ip(), interface = %cfg.listen.interface, "listen address ensured");
        tokio::spawn(address_keeper(
            cfg.listen.interface.clone(),
            cfg.listen.addr.ip(),
            cfg.listen.ensure_interval,
        ));
    }
    let keepalive = cfg.timeouts.tcp_keepalive;
    let listener =
        bind(cfg.listen.addr, cfg.listen.backlog, Some(keepalive)).map_err(|source| {
            ServerError::Listen {
                addr: cfg.listen.addr,
                source,
            }
        })?;
    let metrics = Metrics::new();
    let pooled = Arc::new(super::pool::Pool::new(metrics.pool.clone()));
    let shared = Arc::new(Shared {
        pooled,
        metrics,
        state: ArcSwap::from_pointee(state),
        pool: Pool::new(),
        listening: AtomicBool::new(false),
        reloaded: Notify::new(),
        revision,
        listener_keepalive: keepalive,
    });
    shared
        .metrics
        .serving_certificate(shared.state.load().tls.leaf_not_after.as_ref());
    if let Some(admin) = cfg.admin {
        let l = bind(admin, 128, None).map_err(|source| ServerError::Listen {
            addr: admin,
            source,
        })?;
        tokio::spawn(admin::run(l, shared.clone()));
        info!(%admin, "admin endpoint");
    }
    tokio::spawn(address_loop(shared.clone()));
    tokio::spawn(health_loop(shared.clone()));
    tokio::spawn(reload::run(shared.clone(), config_path));

    let limit = Arc::new(Semaphore::new(cfg.max_connections));
    shared.listening.store(true, Ordering::Relaxed);
    info!(listen = %cfg.listen.addr, mode = cfg.mode.as_str(), upstream = %cfg.upstream.server_name, "proxy listening");
    let stop = terminated();
    tokio::pin!(stop);
    let mut refusal_log = RateLimit::new(LOG_EVERY);
    let mut accept_log = RateLimit::new(LOG_EVERY);
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = &mut stop => break,
        };
        match accepted {
            // A slot is taken after accept, not before: at the limit a client
            // is refused at once and counted, instead of waiting unseen in
            // the kernel backlog until its own timeout.
            Ok((s, peer)) => match limit.clone().try_acquire_owned() {
                Ok(permit) => {
                    tokio::spawn(contained(shared.clone(), s, peer, permit));
                }
                Err(_) => {
                    refuse(s);
                    shared.metrics.refusal("limit");
                    if let Some(suppressed) = refusal_log.allow(std::time::Instant::now()) {
                        warn!(%peer, limit = cfg.max_connections, suppressed, "connection limit reached: refusing new connections");
                    }
                }
            },
            Err(e) => {
                shared.metrics.accept_error(accept_error_reason(&e));
                if let Some(suppressed) = accept_log.allow(std::time::Instant::now()) {
                    warn!(error = %e, suppressed, "failed to accept; retrying");
                }
                // EMFILE and friends: the client stays in the backlog; back
                // off instead of spinning until descriptors free up.
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                    _ = &mut stop => break,
                }
            }
        }
    }
    shared.listening.store(false, Ordering::Relaxed);
    drop(listener);
    let drain = shared.state.load().cfg.timeouts.drain;
    let open = cfg.max_connections - limit.available_permits();
    info!(open, timeout = ?drain, "stopped accepting; draining");
    let drained = timeout(drain, async {
        while limit.available_permits() < cfg.max_connections {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    match drained {
        Ok(()) => info!("drained"),
        Err(_) => warn!(
            open = cfg.max_connections - limit.available_permits(),
            "drain timeout: closing the remaining connections"
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    #[test]
    fn rate_limit_logs_once_per_interval_and_counts_the_rest() {
        let mut r = super::RateLimit::new(Duration::from_secs(5));
        let t = Instant::now();
        assert_eq!(r.allow(t), Some(0));
        assert_eq!(r.allow(t + Duration::from_secs(1)), None);
        assert_eq!(r.allow(t + Duration::from_secs(4)), None);
        assert_eq!(r.allow(t + Duration::from_secs(5)), Some(2));
        assert_eq!(r.allow(t + Duration::from_secs(6)), None);
        assert_eq!(r.allow(t + Duration::from_secs(60)), Some(1));
    }

    #[test]
    fn accept_errors_are_classified() {
        let e = |n| std::io::Error::from_raw_os_error(n);
        assert_eq!(super::accept_error_reason(&e(24)), "fds");
        assert_eq!(super::accept_error_reason(&e(23)), "fds");
        assert_eq!(super::accept_error_reason(&e(105)), "memory");
        assert_eq!(super::accept_error_reason(&e(103)), "other");
    }

    /// A surging pod binds the same address while the old one still listens.
    #[tokio::test]
    async fn two_proxies_can_listen_on_one_address() {
        let first = super::bind("127.0.0.1:0".parse().unwrap(), 16, None).unwrap();
        let addr = first.local_addr().unwrap();
        let second = super::bind(addr, 16, None).expect("the second listener binds too");
        assert_eq!(second.local_addr().unwrap(), addr);
    }

    /// Accepted sockets carry the listener's TCP options: the proxy sets no
    /// Nagle and keepalive once, on the listener, and never per connection
    /// while the configured keepalive is the one it bound with.
    #[tokio::test]
    async fn accepted_connections_inherit_nodelay_and_keepalive() {
        let ka = Duration::from_secs(37);
        let l = super::bind("127.0.0.1:0".parse().unwrap(), 16, Some(ka)).unwrap();
        let _c = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        let (s, _) = l.accept().await.unwrap();
        let s = socket2::SockRef::from(&s);
        assert!(s.tcp_nodelay().unwrap(), "no Nagle");
        assert!(s.keepalive().unwrap(), "keepalive on");
        assert_eq!(s.tcp_keepalive_time().unwrap(), ka);
        assert_eq!(s.tcp_keepalive_interval().unwrap(), Duration::from_secs(10));

        // Without options, an accepted socket has none of them.
        let plain = super::bind("127.0.0.1:0".parse().unwrap(), 16, None).unwrap();
        let _c = tokio::net::TcpStream::connect(plain.local_addr().unwrap())
            .await
            .unwrap();
        let (s, _) = plain.accept().await.unwrap();
        assert!(!socket2::SockRef::from(&s).tcp_nodelay().unwrap());
    }
}
