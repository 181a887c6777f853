//! Reaching the upstream: dial with failover across addresses, TCP tuning,
//! and the metric reasons of failed attempts.

use std::{io, net::SocketAddr, time::Duration};

use tokio::{
    io::AsyncWriteExt,
    net::TcpStream,
    time::{Instant, timeout},
};
use tracing::{debug, warn};

use super::hello::Path;
use crate::{
    proxy_protocol,
    state::{Shared, State},
    tlsio::ClientTls,
    upstream::{ActiveGuard, Backend},
};

/// TCP options on both sides: no Nagle (API requests are small and
/// latency-bound), keepalive to notice dead peers on long watches.
pub fn tune(s: &TcpStream, keepalive: Duration) {
    let _ = s.set_nodelay(true);
    let _ = socket2::SockRef::from(s).set_tcp_keepalive(&self::keepalive(keepalive));
}

/// Keepalive probes after `time` idle, then every 10 s (or `time`, if shorter).
pub fn keepalive(time: Duration) -> socket2::TcpKeepalive {
    socket2::TcpKeepalive::new()
        .with_time(time)
        .with_interval(Duration::from_secs(10).min(time))
}

/// Open a TCP connection to `addr` and send `first` (the ClientHello, PROXY
/// header in front when needed) before the stream is handed back.
pub(super) async fn dial(
    addr: SocketAddr,
    keepalive: Duration,
    first: &[u8],
) -> io::Result<TcpStream> {
    let mut s = TcpStream::connect(addr).await?;
    tune(&s, keepalive);
    if !first.is_empty() {
        s.write_all(first).await?;
    }
    Ok(s)
}

fn mark(shared: &Shared, b: &Backend, healthy: bool) {
    if b.set_healthy(healthy) {
        shared.set_health_gauge(b.addr, healthy);
        if healthy {
            tracing::info!(upstream = %b.addr, "upstream reachable again");
        } else {
            warn!(upstream = %b.addr, "upstream marked down after a failed connection");
        }
    }
}

/// Metric reason of a failed upstream attempt at `stage` (`connect`, `tls`).
/// A certificate the CA does not verify is `certificate`, apart from other
/// TLS failures: it needs an operator, not a retry.
pub fn connect_failure_reason(stage: &str, e: &io::Error) -> &'static str {
    match (stage, e.kind()) {
        ("connect", io::ErrorKind::ConnectionRefused) => "refused",
        ("connect", _) => "connect",
        _ => match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            Some(rustls::Error::InvalidCertificate(_)) => "certificate",
            _ => "tls",
        },
    }
}

/// Try every address in balance order; the first whose `attempt` succeeds
/// within the connect timeout wins. Failures are counted by stage (`refused`,
/// `connect`, `tls`, `timeout`) and mark the address down; nothing has been
/// forwarded yet, so the next address is safe to try.
pub(super) async fn with_failover<T, F, Fut>(
    shared: &Shared,
    state: &State,
    mut attempt: F,
) -> Option<(T, ActiveGuard)>
where
    F: FnMut(SocketAddr) -> Fut,
    Fut: std::future::Future<Output = Result<T, (&'static str, io::Error)>>,
{
    let cfg = &state.cfg;
    let started = Instant::now();
    for b in shared.pool.attempt_order(cfg.upstream.balance) {
        match timeout(cfg.timeouts.connect, attempt(b.addr)).await {
            Ok(Ok(s)) => {
                shared
                    .metrics
                    .connect_seconds
                    .observe(started.elapsed().as_secs_f64());
                mark(shared, &b, true);
                return Some((s, ActiveGuard::new(b)));
            }
            Ok(Err((stage, e))) => {
                let reason = connect_failure_reason(stage, &e);
                if reason == "certificate" {
                    // Not a transient fault: the ingress serves a certificate
                    // our CA does not sign (wrong CA bundle, rotated CA).
                    warn!(upstream = %b.addr, error = %e, "upstream certificate rejected");
                } else {
                    debug!(upstream = %b.addr, error = %e, stage, "failed to connect upstream");
                }
                shared.metrics.upstream_error(reason);
                mark(shared, &b, false);
            }
            Err(_) => {
                shared.metrics.upstream_error("timeout");
                mark(shared, &b, false);
            }
        }
    }
    shared.metrics.upstream_error("exhausted");
    None
}

/// L4 (passthrough, proxy-protocol): TCP, then the buffered ClientHello
/// (behind a PROXY v2 header in proxy-protocol mode).
pub(super) async fn connect_l4(
    shared: &Shared,
    state: &State,
    path: Path,
    hello: Vec<u8>,
    client: SocketAddr,
    local: SocketAddr,
) -> Option<(TcpStream, ActiveGuard)> {
    let cfg = &state.cfg;
    let first = if path == Path::ProxyProtocol {
        let mut h = proxy_protocol::header(client, local, &cfg.upstream.server_name);
        h.extend_from_slice(&hello);
        h
    } else {
        hello
    };
    let first = &first;
    with_failover(shared, state, |addr| async move {
        dial(addr, cfg.timeouts.tcp_keepalive, first)
            .await
            .map_err(|e| ("connect", e))
    })
    .await
}

/// Reencrypt: TCP + TLS to the upstream with the client's ALPN offer.
/// Counts whether the handshake resumed a session: a resumed one skips the
/// certificate chain and its verification on both ends.
pub(super) async fn connect_tls(
    shared: &Shared,
    state: &State,
    alpn: &[Vec<u8>],
) -> Option<(ClientTls, ActiveGuard)> {
    let cfg = &state.cfg;
    let config = &state.tls.client_for(alpn);
    let name = state.tls.upstream_name();
    let up = with_failover(shared, state, |addr| async move {
        let s = dial(addr, cfg.timeouts.tcp_keepalive, &[])
            .await
            .map_err(|e| ("connect", e))?;
        ClientTls::connect(config.clone(), name.clone(), s)
            .await
            .map_err(|e| ("tls", e))
    })
    .await?;
    shared.metrics.upstream_handshake(up.0.resumed());
    shared.metrics.key_exchange("upstream", up.0.kx_group());
    Some(up)
}
