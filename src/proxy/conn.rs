//! One client connection: ClientHello → path decision → upstream → copy.
//! [`hello`] reads the ClientHello and decides the path, [`dial`] reaches
//! the upstream; this module runs a connection through them and the copy.

mod accept;
mod dial;
mod hello;
mod pooled;

use std::{io, net::SocketAddr, sync::Arc};

use prometheus_client::metrics::counter::Counter;
use tokio::{
    net::TcpStream,
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

/// Serve one accepted connection to its end.
pub async fn handle(shared: Arc<Shared>, mut client: TcpStream, peer: SocketAddr) {
    let state = shared.state.load_full();
    let cfg = &state.cfg;
    let m = &shared.metrics;
    let deadline = Instant::now() + cfg.timeouts.handshake;
    if cfg.timeouts.tcp_keepalive != shared.listener_keepalive {
        tune(&client, cfg.timeouts.tcp_keepalive);
    }

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
            // Only the PROXY v2 header needs it: a syscall saved elsewhere.
            let local = if path == Path::ProxyProtocol {
                client.local_addr().unwrap_or(cfg.listen.addr)
            } else {
                cfg.listen.addr
            };
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
        Path::Pooled => {
            drop((up_bytes, down_bytes));
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
    // Both handshakes are boxed: their futures (a TLS connection inline
    // each) are freed once done instead of staying in the space this future
    // keeps for the whole life of the connection.
    let Some((mut up, _guard)) = Box::pin(connect_tls(shared, state, alpn)).await else {
        warn!(%peer, "no upstream accepted the connection");
        return;
    };
    let Some(server_cfg) = state.tls.server_for(up.conn().alpn_protocol()) else {
        return;
    };
    // The ClientHello already read is where the handshake starts.
    let accept = Box::pin(ServerTls::accept(server_cfg, client, hello_bytes));
    let Some(mut down) = accept::within_deadline(m, peer, deadline, accept).await else {
        return;
    };
    let r = copy_bidirectional(&mut down, &mut up, io.up, io.down, state.cfg.timeouts.idle).await;
    copy_ended(shared, peer, r);
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::proxy::{clienthello::ClientHello, config::Mode};

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
        let cfg =
            crate::proxy::config::validate(crate::proxy::config::parse(&text).unwrap()).unwrap();
        let tls = crate::proxy::tls::TlsMaterial::load(&cfg).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let metrics = crate::proxy::metrics::Metrics::new();
        let listener_keepalive = cfg.timeouts.tcp_keepalive;
        Arc::new(super::Shared {
            pooled: Arc::new(crate::proxy::pool::Pool::new(metrics.pool.clone())),
            metrics,
            state: arc_swap::ArcSwap::from_pointee(super::State { cfg, tls }),
            pool: crate::proxy::upstream::Pool::new(),
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
        let f = super::handle(shared.clone(), s, a);
        let size = std::mem::size_of_val(&f);
        eprintln!("connection future {size} B");
        assert!(size <= 1024, "connection future is {size} bytes");
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
        let f = super::reencrypt(&shared, &state, s, a, Vec::new(), &[], deadline, io);
        let size = std::mem::size_of_val(&f);
        let tls = std::mem::size_of::<crate::proxy::tlsio::ServerTls>()
            + std::mem::size_of::<crate::proxy::tlsio::ClientTls>();
        eprintln!("reencrypt future {size} B, its TLS connections {tls} B");
        assert!(size <= tls + 512, "reencrypt future is {size} bytes");
    }
}
