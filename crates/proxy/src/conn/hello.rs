//! The first bytes of a connection: read the ClientHello, decide the path,
//! and hand the bytes read back to whoever forwards them.

use std::io;

use tokio::{io::AsyncReadExt, net::TcpStream};

use crate::{
    clienthello::{self, ClientHello, HelloError, Parsed},
    config::Mode,
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
    /// Terminate TLS, carry the requests over the pooled HTTP/2 connections.
    Pooled,
}

impl Path {
    /// Metric label value.
    pub fn label(self) -> &'static str {
        match self {
            Path::SniPassthrough => "sni-passthrough",
            Path::Reencrypt => "reencrypt",
            Path::Passthrough => "passthrough",
            Path::ProxyProtocol => "proxy-protocol",
            Path::Pooled => "pooled",
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
        Mode::Pooled => Path::Pooled,
    }
}

/// Why reading the ClientHello failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum ReadHelloError {
    #[error(transparent)]
    Hello(#[from] HelloError),
    #[error("failed to read ClientHello: connection closed early")]
    Eof,
    #[error("failed to read ClientHello: {0}")]
    Io(#[from] io::Error),
}

impl ReadHelloError {
    pub(super) fn reason(&self) -> &'static str {
        match self {
            ReadHelloError::Hello(h) => h.reason(),
            ReadHelloError::Eof => "eof",
            ReadHelloError::Io(_) => "io",
        }
    }
}

/// Read until a complete ClientHello (or an error): a message of at most
/// `max` bytes, in at most [`clienthello::wire_limit`] bytes of records.
pub(super) async fn read_hello(
    s: &mut TcpStream,
    max: usize,
) -> Result<(Vec<u8>, ClientHello), ReadHelloError> {
    let limit = clienthello::wire_limit(max);
    let mut buf = Vec::with_capacity(1536.min(limit));
    loop {
        if buf.len() == buf.capacity() {
            buf.reserve((buf.len()).min(limit - buf.len()).max(512));
        }
        let room = limit.saturating_sub(buf.len());
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
