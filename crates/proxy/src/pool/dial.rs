//! What the pooled mode's parts share: the upstream they reach through a
//! [`Dial`], the body type of the responses they return, and their errors.

use std::{any::Any, future::Future, net::SocketAddr, pin::Pin};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use tokio::io::{AsyncRead, AsyncWrite};

/// ALPN of the pooled upstream connections.
pub const H2: &[u8] = b"h2";
/// ALPN of the dedicated upstream connections.
pub const HTTP11: &[u8] = b"http/1.1";

/// The body of every response the pooled mode returns.
pub type Body = BoxBody<Bytes, BoxError>;
/// Errors inside bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Errors of the pooled mode's upstream side.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// No upstream address accepted a connection.
    #[error("no upstream accepted the connection")]
    Unreachable,
    /// The upstream did not select the ALPN protocol asked for.
    #[error("the upstream did not select ALPN {0}")]
    Alpn(&'static str),
    /// HTTP/2 failed on a pooled connection.
    #[error("HTTP/2: {0}")]
    H2(#[from] h2::Error),
    /// HTTP/1.1 failed on a dedicated connection.
    #[error("HTTP/1.1: {0}")]
    Http1(#[from] hyper::Error),
    /// The request could not be expressed upstream.
    #[error("invalid request: {0}")]
    Request(#[from] http::Error),
}

/// An upstream connection, verified TLS, with whatever must live as long as
/// it does (the balancer's count of connections on its address).
pub struct Dialed {
    /// The TLS stream, whatever TLS implementation the caller uses.
    pub io: Box<dyn Upstream>,
    /// The ALPN protocol the upstream selected.
    pub alpn: Option<Vec<u8>>,
    /// The upstream address, for logs.
    pub peer: Option<SocketAddr>,
    /// Dropped when the connection ends.
    pub hold: Box<dyn Any + Send + Sync>,
}

/// A byte stream to the upstream.
pub trait Upstream: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Upstream for T {}

/// Reaches the upstream: TCP, then TLS with SNI = the API host, ALPN `alpn`,
/// verified against the cluster CA (the caller's failover and health
/// marking included).
pub trait Dial: Send + Sync {
    /// Open one connection offering `alpn`; `None` when no address accepted.
    fn dial(&self, alpn: &'static [u8]) -> Pin<Box<dyn Future<Output = Option<Dialed>> + Send>>;
}
