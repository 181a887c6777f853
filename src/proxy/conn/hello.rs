//! The first bytes of a connection: read the ClientHello, decide the path,
//! and hand the bytes read back to whoever forwards them.

use std::{
    io,
    pin::Pin,
    task::{Context, Poll},
};

use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf},
    net::TcpStream,
};

use crate::proxy::{
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

/// Read until a complete ClientHello (or an error), never more than `max`.
pub(super) async fn read_hello(
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
