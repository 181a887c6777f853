//! One client connection: ClientHello → path decision → upstream → copy.

use std::{
    io,
    net::SocketAddr,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use prometheus_client::metrics::counter::Counter;
use rustls_pki_types::ServerName;
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf},
    net::TcpStream,
    time::{Instant, timeout},
};
use tokio_rustls::{TlsAcceptor, TlsConnector, client::TlsStream};
use tracing::{debug, warn};

use super::{
    clienthello::{self, ClientHello, HelloError, Parsed},
    config::Mode,
    copy::{CopyEnd, CopyError, Side, copy_bidirectional},
    metrics::{BytesLabel, PathLabel},
    proxy_protocol,
    state::{Shared, State},
    upstream::{ActiveGuard, Backend},
};

/// The path a connection takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// SNI is a passthrough name: L4 untouched.
    SniPassthrough,
    /// Terminate and re-originate TLS.
    Reencrypt,
    /// L4 (mode passthrough).
    Passthrough,
    /// PROXY v2 header, then L4.
    ProxyProtocol,
}

impl Path {
    /// Metric label value.
    pub fn label(self) -> &'static str {
        match self {
            Path::SniPassthrough => "sni-passthrough",
            Path::Reencrypt => "reencrypt",
            Path::Passthrough => "passthrough",
            Path::ProxyProtocol => "proxy-protocol",
        }
    }
}

/// Pure routing decision.
pub fn decide(hello: &ClientHello, passthrough_names: &[String], mode: Mode) -> Path {
    if let Some(sni) = &hello.sni
        && passthrough_names.iter().any(|n| n == sni)
    {
        return Path::SniPassthrough;
    }
    match mode {
        Mode::Reencrypt => Path::Reencrypt,
        Mode::Passthrough => Path::Passthrough,
        Mode::ProxyProtocol => Path::ProxyProtocol,
    }
}

/// Why reading the ClientHello failed.
#[derive(Debug, thiserror::Error)]
enum ReadHelloError {
    #[error(transparent)]
    Hello(#[from] HelloError),
    #[error("failed to read ClientHello: connection closed early")]
    Eof,
    #[error("failed to read ClientHello: {0}")]
    Io(#[from] io::Error),
}

impl ReadHelloError {
    fn reason(&self) -> &'static str {
        match self {
            ReadHelloError::Hello(h) => h.reason(),
            ReadHelloError::Eof => "eof",
            ReadHelloError::Io(_) => "io",
        }
    }
}

/// Read until a complete ClientHello (or an error), never more than `max`.
async fn read_hello(
    s: &mut TcpStream,
    max: usize,
) -> Result<(Vec<u8>, ClientHello), ReadHelloError> {
    let mut buf = Vec::with_capacity(1536.min(max));
    loop {
        if buf.len() == buf.capacity() {
            buf.reserve((buf.len()).min(max - buf.len()).max(512));
        }
        let room = max.saturating_sub(buf.len());
        if room == 0 {
            return Err(HelloError::Oversized.into());
        }
        let n = (&mut *s).take(room as u64).read_buf(&mut buf).await?;
        if n == 0 {
            return Err(ReadHelloError::Eof);
        }
        if let Parsed::Done(h) = clienthello::parse(&buf, max)? {
            return Ok((buf, h));
        }
    }
}

/// A stream that first yields bytes already read from it.
pub struct Rewind<S> {
    prefix: Option<Vec<u8>>,
    pos: usize,
    inner: S,
}

impl<S> Rewind<S> {
    /// Wrap `inner`, replaying `prefix` first.
    pub fn new(inner: S, prefix: Vec<u8>) -> Self {
        Self {
            prefix: Some(prefix),
            pos: 0,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(p) = &this.prefix {
            let n = (p.len() - this.pos).min(buf.remaining());
            buf.put_slice(&p[this.pos..this.pos + n]);
            this.pos += n;
            if this.pos == p.len() {
                // Free the ClientHello copy once replayed.
                this.prefix = None;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// TCP options on both sides: no Nagle (API requests are small and
/// latency-bound), keepalive to notice dead peers on long watches.
pub fn tune(s: &TcpStream, keepalive: Duration) {
    let _ = s.set_nodelay(true);
    let ka = socket2::TcpKeepalive::new()
        .with_time(keepalive)
        .with_interval(Duration::from_secs(10).min(keepalive));
    let _ = socket2::SockRef::from(s).set_tcp_keepalive(&ka);
}

/// Open a TCP connection to `addr` and send `first` (the ClientHello, PROXY
/// header in front when needed) before the stream is handed back.
async fn dial(addr: SocketAddr, keepalive: Duration, first: &[u8]) -> io::Result<TcpStream> {
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

/// Metric reason of an error that ended a forwarding connection.
pub fn stream_error_reason(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe => "reset",
        // A TLS peer that closed without close_notify.
        io::ErrorKind::UnexpectedEof => "truncated",
        // TCP keepalive gave up on a dead peer.
        io::ErrorKind::TimedOut => "timeout",
        io::ErrorKind::InvalidData => "tls",
        _ => "io",
    }
}

/// Count and log how a copy ended. The client was `a`, the upstream `b`.
fn copy_ended(shared: &Shared, peer: SocketAddr, r: Result<CopyEnd, CopyError>) {
    match r {
        Ok(end) => debug!(%peer, ?end, "connection closed"),
        Err(e) => {
            let side = match e.side {
                Side::A => "client",
                Side::B => "upstream",
            };
            let reason = stream_error_reason(&e.source);
            shared.metrics.stream_error(side, reason);
            // Dropping both streams closes the other side at once: its
            // client (or upstream) sees the end instead of hanging.
            debug!(%peer, side, reason, error = %e.source, "connection ended by an error");
        }
    }
}

/// Try every address in balance order; the first whose `attempt` succeeds
/// within the connect timeout wins. Failures are counted by stage (`refused`,
/// `connect`, `tls`, `timeout`) and mark the address down; nothing has been
/// forwarded yet, so the next address is safe to try.
async fn with_failover<T, F, Fut>(
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
async fn connect_l4(
    shared: &Shared,
    state: &State,
    path: Path,
    hello: &[u8],
    client: SocketAddr,
    local: SocketAddr,
) -> Option<(TcpStream, ActiveGuard)> {
    let cfg = &state.cfg;
    let first = if path == Path::ProxyProtocol {
        let mut h = proxy_protocol::header(client, local, &cfg.upstream.server_name);
        h.extend_from_slice(hello);
        h
    } else {
        hello.to_vec()
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
async fn connect_tls(
    shared: &Shared,
    state: &State,
    alpn: &[Vec<u8>],
) -> Option<(TlsStream<TcpStream>, ActiveGuard)> {
    let cfg = &state.cfg;
    let connector = &TlsConnector::from(state.tls.client_for(alpn));
    let name = &ServerName::try_from(cfg.upstream.server_name.clone()).ok()?;
    with_failover(shared, state, |addr| async move {
        let s = dial(addr, cfg.timeouts.tcp_keepalive, &[])
            .await
            .map_err(|e| ("connect", e))?;
        connector
            .connect(name.clone(), s)
            .await
            .map_err(|e| ("tls", e))
    })
    .await
}

/// Decrements the active gauge of a path on drop.
struct ActivePath<'a>(&'a Shared, Path);

impl Drop for ActivePath<'_> {
    fn drop(&mut self) {
        self.0
            .metrics
            .active
            .get_or_create(&PathLabel {
                path: self.1.label(),
            })
            .dec();
    }
}

/// Serve one accepted connection to its end.
pub async fn handle(shared: Arc<Shared>, mut client: TcpStream, peer: SocketAddr) {
    let state = shared.state.load_full();
    let cfg = &state.cfg;
    let m = &shared.metrics;
    let deadline = Instant::now() + cfg.timeouts.handshake;
    tune(&client, cfg.timeouts.tcp_keepalive);
    let local = client.local_addr().unwrap_or(cfg.listen.addr);

    let (hello_bytes, hello) = match Box::pin(timeout(
        cfg.timeouts.handshake,
        read_hello(&mut client, cfg.max_client_hello_bytes),
    ))
    .await
    {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            m.handshake_error(e.reason());
            debug!(%peer, error = %e, "closing connection before forwarding");
            return;
        }
        Err(_) => {
            m.handshake_error("timeout");
            debug!(%peer, "ClientHello timed out");
            return;
        }
    };
    let path = decide(&hello, &cfg.passthrough_server_names, cfg.mode);
    let label = PathLabel { path: path.label() };
    m.connections.get_or_create(&label).inc();
    m.active.get_or_create(&label).inc();
    let _active = ActivePath(&shared, path);
    let up_bytes = m
        .bytes
        .get_or_create(&BytesLabel {
            path: path.label(),
            direction: "upstream",
        })
        .clone();
    let down_bytes = m
        .bytes
        .get_or_create(&BytesLabel {
            path: path.label(),
            direction: "downstream",
        })
        .clone();
    debug!(%peer, sni = hello.sni.as_deref().unwrap_or(""), path = path.label(), "routing");

    match path {
        Path::SniPassthrough | Path::Passthrough | Path::ProxyProtocol => {
            let Some((mut up, _guard)) =
                Box::pin(connect_l4(&shared, &state, path, &hello_bytes, peer, local)).await
            else {
                warn!(%peer, "no upstream accepted the connection");
                return;
            };
            drop(hello_bytes);
            let r = copy_bidirectional(
                &mut client,
                &mut up,
                &up_bytes,
                &down_bytes,
                cfg.timeouts.idle,
            )
            .await;
            copy_ended(&shared, peer, r);
        }
        Path::Reencrypt => {
            // Boxed: the two TLS streams live only in reencrypt tasks, so
            // passthrough tasks stay a few hundred bytes.
            let io = Counters {
                up: &up_bytes,
                down: &down_bytes,
            };
            Box::pin(reencrypt(
                &shared,
                &state,
                client,
                peer,
                hello_bytes,
                &hello.alpn,
                deadline,
                io,
            ))
            .await;
        }
    }
}

/// Byte counters of one connection.
struct Counters<'a> {
    up: &'a Counter,
    down: &'a Counter,
}

/// Reencrypt path: upstream TLS first (its ALPN choice decides ours), then
/// the client handshake, then copy.
#[allow(clippy::too_many_arguments)]
async fn reencrypt(
    shared: &Shared,
    state: &State,
    client: TcpStream,
    peer: SocketAddr,
    hello_bytes: Vec<u8>,
    alpn: &[Vec<u8>],
    deadline: Instant,
    io: Counters<'_>,
) {
    let m = &shared.metrics;
    let Some((mut up, _guard)) = connect_tls(shared, state, alpn).await else {
        warn!(%peer, "no upstream accepted the connection");
        return;
    };
    let chosen = up.get_ref().1.alpn_protocol().map(|p| p.to_vec());
    let Some(server_cfg) = state.tls.server_for(chosen.as_deref()) else {
        return;
    };
    let accept = TlsAcceptor::from(server_cfg).accept(Rewind::new(client, hello_bytes));
    let mut down = match tokio::time::timeout_at(
        deadline.max(Instant::now() + Duration::from_secs(1)),
        accept,
    )
    .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            m.handshake_error("tls");
            debug!(%peer, error = %e, "client TLS handshake failed");
            return;
        }
        Err(_) => {
            m.handshake_error("timeout");
            return;
        }
    };
    let r = copy_bidirectional(&mut down, &mut up, io.up, io.down, state.cfg.timeouts.idle).await;
    copy_ended(shared, peer, r);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing() {
        let names = vec!["api.t.example.com".to_string()];
        let h = |sni: Option<&str>| ClientHello {
            sni: sni.map(str::to_string),
            alpn: vec![],
        };
        assert_eq!(
            decide(&h(Some("api.t.example.com")), &names, Mode::Reencrypt),
            Path::SniPassthrough
        );
        assert_eq!(decide(&h(None), &names, Mode::Reencrypt), Path::Reencrypt);
        assert_eq!(
            decide(
                &h(Some("kubernetes.default.svc")),
                &names,
                Mode::ProxyProtocol
            ),
            Path::ProxyProtocol
        );
        assert_eq!(
            decide(&h(None), &names, Mode::Passthrough),
            Path::Passthrough
        );
    }

    #[test]
    fn failure_reasons() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert_eq!(connect_failure_reason("connect", &refused), "refused");
        let bad_cert = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        assert_eq!(connect_failure_reason("tls", &bad_cert), "certificate");
        let alert = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::General("x".into()),
        );
        assert_eq!(connect_failure_reason("tls", &alert), "tls");
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert_eq!(stream_error_reason(&reset), "reset");
        let eof = io::Error::from(io::ErrorKind::UnexpectedEof);
        assert_eq!(stream_error_reason(&eof), "truncated");
    }

    #[tokio::test]
    async fn rewind_replays_prefix() {
        let (mut a, b) = tokio::io::duplex(64);
        a.write_all(b" world").await.unwrap();
        drop(a);
        let mut r = Rewind::new(b, b"hello".to_vec());
        let mut s = String::new();
        r.read_to_string(&mut s).await.unwrap();
        assert_eq!(s, "hello world");
    }
}

#[cfg(test)]
mod size_tests {
    use std::sync::Arc;

    fn shared() -> Arc<super::Shared> {
        let dir = std::env::temp_dir().join(format!("hcp-proxy-size-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = rcgen::generate_simple_self_signed(vec!["ca".to_string()]).unwrap();
        std::fs::write(dir.join("ca.crt"), ca.cert.pem()).unwrap();
        std::fs::write(dir.join("ca.key"), ca.signing_key.serialize_pem()).unwrap();
        let d = dir.display();
        let text = format!(
            "upstream: {{serverName: a.example.com, caFile: {d}/ca.crt}}\ntls: {{certFile: {d}/ca.crt, keyFile: {d}/ca.key}}\n"
        );
        let cfg =
            crate::proxy::config::validate(crate::proxy::config::parse(&text).unwrap()).unwrap();
        let tls = crate::proxy::tls::TlsMaterial::load(&cfg).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        Arc::new(super::Shared {
            metrics: crate::proxy::metrics::Metrics::new(),
            state: arc_swap::ArcSwap::from_pointee(super::State { cfg, tls }),
            pool: crate::proxy::upstream::Pool::new(),
            listening: Default::default(),
            reloaded: Default::default(),
            revision: None,
        })
    }

    /// Every idle connection holds its task: the per-connection future must
    /// stay small (the TLS streams of the reencrypt path are boxed apart).
    #[test]
    fn connection_task_is_small() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _g = rt.enter();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        let s = std::net::TcpStream::connect(a).unwrap();
        s.set_nonblocking(true).unwrap();
        let s = tokio::net::TcpStream::from_std(s).unwrap();
        let f = super::handle(shared(), s, a);
        let size = std::mem::size_of_val(&f);
        assert!(size <= 1024, "connection future is {size} bytes");
    }
}
