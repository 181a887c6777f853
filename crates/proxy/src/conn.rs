//! One client connection: ClientHello → path decision → upstream → copy.
//! [`hello`] reads the ClientHello and decides the path, [`dial`] reaches
//! the upstream; this module runs a connection through them and the copy.

mod accept;
mod dial;
mod hello;
mod pooled;

use std::{future::Future, io, net::SocketAddr, sync::Arc};

use prometheus_client::metrics::counter::Counter;
use tokio::{
    net::TcpStream,
    sync::OwnedSemaphorePermit,
    time::{Instant, timeout},
};
use tracing::{debug, warn};

pub use dial::{connect_failure_reason, keepalive, tune};
use dial::{connect_l4, connect_tls};
use hello::read_hello;
pub use hello::{Path, decide};

use super::{
    copy::{CopyEnd, CopyError, Side, copy_bidirectional},
    metrics::{BytesLabel, PathLabel},
    state::{Shared, State},
    tlsio::ServerTls,
};

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

/// Serve one accepted connection to its end; `slot` (its place under
/// `limits.maxConnections`) is released when it ends.
///
/// The future is the connection's task for its whole life, so it is kept
/// small: an `async move` block, not an `async fn`, which would hold its
/// arguments twice (as passed, and as the locals its body moves them into).
#[allow(clippy::manual_async_fn)]
pub fn handle(
    shared: Arc<Shared>,
    mut client: TcpStream,
    peer: SocketAddr,
    slot: OwnedSemaphorePermit,
) -> impl Future<Output = ()> + Send + 'static {
    async move {
        // Owned by the future (not moved into a local of it): released when
        // the connection's task ends.
        let _slot = &slot;
        let state = shared.state.load_full();
        let cfg = &state.cfg;
        let m = &shared.metrics;
        let deadline = Instant::now() + cfg.timeouts.handshake;
        if cfg.timeouts.tcp_keepalive != shared.listener_keepalive {
            tune(&client, cfg.timeouts.tcp_keepalive);
        }

        // What is borrowed here stays in this future for as long as its
        // scope lasts, and the copy below lasts as long as the connection:
        // the ClientHello and the metric label live in inner scopes.
        let (hello_bytes, path, alpn) = match Box::pin(timeout(
            cfg.timeouts.handshake,
            read_hello(&mut client, cfg.max_client_hello_bytes),
        ))
        .await
        {
            Ok(Ok((bytes, hello))) => {
                let path = decide(&hello, &cfg.passthrough_server_names, cfg.mode);
                let sni = hello.sni.as_deref().unwrap_or("");
                debug!(%peer, sni, path = path.label(), "routing");
                // Only the reencrypt path needs the pod's ALPN list, for
                // its own offer upstream.
                (bytes, path, hello.alpn)
            }
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
        {
            let label = PathLabel { path: path.label() };
            m.connections.get_or_create(&label).inc();
            m.active.get_or_create(&label).inc();
        }
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

        match path {
            Path::SniPassthrough | Path::Passthrough | Path::ProxyProtocol => {
                // Only the PROXY v2 header needs it: a syscall saved elsewhere.
                let local = if path == Path::ProxyProtocol {
                    client.local_addr().unwrap_or(cfg.listen.addr)
                } else {
                    cfg.listen.addr
                };
                drop(alpn);
                let Some((mut up, _guard)) =
                    Box::pin(connect_l4(&shared, &state, path, hello_bytes, peer, local)).await
                else {
                    warn!(%peer, "no upstream accepted the connection");
                    return;
                };
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
                let pod = Box::new(PodHello {
                    client,
                    hello_bytes,
                    alpn,
                    deadline,
                });
                Box::pin(reencrypt(&shared, &state, pod, peer, io)).await;
            }
            Path::Pooled => {
                drop((up_bytes, down_bytes, alpn));
                // Boxed for the same reason as reencrypt.
                let (shared, state) = (shared.clone(), state.clone());
                Box::pin(pooled::serve(
                    shared,
                    state,
                    client,
                    peer,
                    hello_bytes,
                    deadline,
                ))
                .await;
            }
        }
    }
}

/// Byte counters of one connection.
struct Counters<'a> {
    up: &'a Counter,
    down: &'a Counter,
}

/// What the reencrypt path needs of the pod until its handshake is done:
/// boxed, and freed then (a future keeps room for its captures for its
/// whole life).
struct PodHello {
    client: TcpStream,
    /// The ClientHello already read: where the handshake starts.
    hello_bytes: Vec<u8>,
    /// Its ALPN list, for our own offer upstream.
    alpn: Vec<Vec<u8>>,
    /// When the pod's handshake must be complete.
    deadline: Instant,
}

impl PodHello {
    /// What the pod's handshake takes; the box and the ALPN list are freed
    /// here, not when the connection ends (the point of taking the box).
    #[allow(clippy::boxed_local)]
    fn into_handshake(self: Box<Self>) -> (TcpStream, Vec<u8>, Instant) {
        let PodHello {
            client,
            hello_bytes,
            deadline,
            ..
        } = *self;
        (client, hello_bytes, deadline)
    }
}

/// Reencrypt path: upstream TLS first (its ALPN choice decides ours), then
/// the client handshake, then copy.
///
/// An `async move` block rather than an `async fn`: an async fn keeps its
/// arguments in its future twice (as passed, and as the locals the body
/// moves them into), and this future lives as long as the connection.
#[allow(clippy::manual_async_fn)]
fn reencrypt<'a>(
    shared: &'a Shared,
    state: &'a State,
    pod: Box<PodHello>,
    peer: SocketAddr,
    io: Counters<'a>,
) -> impl Future<Output = ()> + 'a {
    async move {
        // Both handshakes are boxed: their futures (a TLS connection inline
        // each) are freed once done instead of staying in the space this
        // future keeps for the whole life of the connection.
        let upstream = Box::pin(connect_tls(shared, state, &pod.alpn));
        let Some((mut up, _guard)) = upstream.await else {
            warn!(%peer, "no upstream accepted the connection");
            return;
        };
        let Some(server_cfg) = state.tls.server_for(up.alpn_protocol()) else {
            return;
        };
        let (client, hello_bytes, deadline) = pod.into_handshake();
        let accept = Box::pin(ServerTls::accept(server_cfg, client, hello_bytes));
        let m = &shared.metrics;
        let Some(mut down) = accept::within_deadline(m, peer, deadline, accept).await else {
            return;
        };
        let idle = state.cfg.timeouts.idle;
        let r = copy_bidirectional(&mut down, &mut up, io.up, io.down, idle).await;
        copy_ended(shared, peer, r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::{clienthello::ClientHello, config::Mode};

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
        let cfg = crate::config::validate(crate::config::parse(&text).unwrap()).unwrap();
        let tls = crate::tls::TlsMaterial::load(&cfg).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let metrics = crate::metrics::Metrics::new();
        let listener_keepalive = cfg.timeouts.tcp_keepalive;
        Arc::new(super::Shared {
            pooled: Arc::new(crate::pool::Pool::new(metrics.pool.clone())),
            metrics,
            state: arc_swap::ArcSwap::from_pointee(super::State { cfg, tls }),
            pool: crate::upstream::Pool::new(),
            listening: Default::default(),
            reloaded: Default::default(),
            revision: None,
            listener_keepalive,
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
        let shared = shared();
        let slot = Arc::new(tokio::sync::Semaphore::new(1))
            .try_acquire_owned()
            .unwrap();
        let f = super::handle(shared.clone(), s, a, slot);
        let size = std::mem::size_of_val(&f);
        eprintln!("connection future {size} B");
        // tokio's task cell is 128-byte aligned and adds 104 bytes (header,
        // scheduler, id, stage, trailer): up to 408 bytes of future the task
        // is 512 bytes (a size class of mimalloc's, the proxy's allocator),
        // beyond that 640.
        assert!(size <= 408, "connection future is {size} bytes");
        drop(f);

        // The reencrypt future lives as long as the connection: its two TLS
        // connections and the copy, not the handshake futures (boxed).
        let s = std::net::TcpStream::connect(a).unwrap();
        s.set_nonblocking(true).unwrap();
        let s = tokio::net::TcpStream::from_std(s).unwrap();
        let state = shared.state.load_full();
        let (up, down) = (Default::default(), Default::default());
        let io = super::Counters {
            up: &up,
            down: &down,
        };
        let deadline = tokio::time::Instant::now();
        let pod = Box::new(super::PodHello {
            client: s,
            hello_bytes: Vec::new(),
            alpn: Vec::new(),
            deadline,
        });
        let f = super::reencrypt(&shared, &state, pod, a, io);
        let size = std::mem::size_of_val(&f);
        let tls = std::mem::size_of::<crate::tlsio::ServerTls>()
            + std::mem::size_of::<crate::tlsio::ClientTls>();
        eprintln!("reencrypt future {size} B, its TLS connections {tls} B");
        assert!(size <= tls + 512, "reencrypt future is {size} bytes");
        // mimalloc (the proxy's allocator) serves 2,049 to 2,560 bytes
        // from one size class: both rustls connections live inline (their
        // record layers and key schedules), so this one is the floor.
        assert!(size <= 2560, "reencrypt future is {size} bytes");
    }
}
