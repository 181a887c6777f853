//! A TLS stream over rustls's unbuffered API whose buffers exist only while
//! bytes are in flight.
//!
//! rustls's buffered connections (what tokio-rustls wraps) keep a 4 KiB
//! receive buffer each for their whole life: on the reencrypt path that is
//! 8 KiB of every idle connection, more than everything else it holds. Here
//! the caller owns the buffers: the receive buffer is taken from a small
//! per-thread pool only once the socket is readable and given back as soon
//! as no partial record is left in it; the send buffer holds records until
//! the next flush, read, close or the end of the handshake sends them
//! (several records, or the last data and close_notify, leave in one
//! segment) and is given back once the socket took them. Everything TLS —
//! the handshake, record protection, alerts, key updates, tickets — is
//! rustls's own: this module only moves bytes between the socket, rustls
//! and the reader.
//!
//! rustls's unbuffered API has one rule a caller must keep: bytes it has
//! processed but not yet told us to discard (a handshake message spanning
//! several records is joined in place) must be handed back to it, at the
//! same offsets, on every later call. Every call here passes the whole
//! unconsumed receive buffer, errors included (the call after an error
//! fetches the alert rustls queued); after that the connection stays
//! failed and rustls is not called again.
//!
//! One state machine over rustls's unbuffered states, for both sides, kept
//! whole in this module so that its reading, writing and closing can be
//! followed in one place. Beside it, what it uses that is not TLS: [`buf`],
//! the buffers and their per-thread pool, and [`side`], rustls's server and
//! client connections behind one trait.

mod buf;
mod side;

use std::{
    io,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
};

use rustls::{
    ClientConfig, HandshakeKind, NamedGroup, ServerConfig,
    client::UnbufferedClientConnection,
    server::UnbufferedServerConnection,
    unbuffered::{ConnectionState, EncodeError, EncryptError},
};
use rustls_pki_types::ServerName;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
};

use buf::{BUF_SIZE, Buf};
pub use side::Side;

/// Largest plaintext encrypted per write: one full record.
const MAX_PLAINTEXT: usize = 16 * 1024;

/// What a record adds to its plaintext at most (TLS 1.2 AES-GCM: header,
/// explicit nonce and tag; TLS 1.3: header, content type and tag), rounded
/// up.
const MAX_OVERHEAD: usize = 64;

/// A handshake message may span several records; rustls's own buffered
/// connections allow 64 KiB for one, and so do we.
const MAX_RX: usize = 0xffff + BUF_SIZE;

/// Most bytes a connection queues for a peer that does not read. Writes
/// wait for the socket once a record is pending (back-pressure); what
/// rustls produces while reading (a handshake flight, an alert, a key
/// update reply: at most one pending, RFC 8446 4.6.3) is bounded by rustls
/// itself. This cap makes the bound ours too: a peer that makes us queue
/// more ends its own connection, never the process's memory.
const MAX_TX: usize = 4 * BUF_SIZE;

fn tls_err(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

fn eof(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, what.to_string())
}

/// A TLS connection over a TCP stream.
pub struct TlsIo<C> {
    conn: C,
    io: TcpStream,
    /// Received ciphertext not processed yet (a partial record).
    rx: Buf,
    /// Encrypted records the socket has not taken yet.
    tx: Buf,
    /// Decrypted bytes the reader's buffer had no room for.
    plain: Vec<u8>,
    plain_pos: u32,
    /// The peer sent close_notify: the reader sees EOF.
    peer_closed: bool,
    /// Our close_notify is queued.
    close_sent: bool,
    /// A TLS error ended the connection: every later call fails too, and
    /// rustls is never called again.
    failed: bool,
}

/// Server side (client-facing).
pub type ServerTls = TlsIo<UnbufferedServerConnection>;
/// Client side (upstream-facing).
pub type ClientTls = TlsIo<UnbufferedClientConnection>;

/// What the caller of one step wants done when rustls is ready for
/// application data.
enum Want<'a, 'b> {
    Handshake,
    Read(&'a mut ReadBuf<'b>),
    Write(&'a [u8]),
    Close,
}

/// The outcome of one step.
enum Step {
    /// Go on processing.
    Again,
    /// Done what was wanted (handshake complete, plaintext delivered,
    /// plaintext or close_notify encrypted).
    Done,
    /// More ciphertext is needed first.
    Read,
    /// The peer closed cleanly (reading), or both sides did.
    Closed,
}

impl ServerTls {
    /// Complete the server handshake on `io`; `first` holds the bytes
    /// already read from it (the ClientHello).
    pub async fn accept(
        config: Arc<ServerConfig>,
        io: TcpStream,
        first: Vec<u8>,
    ) -> io::Result<Self> {
        let conn = UnbufferedServerConnection::new(config).map_err(tls_err)?;
        let mut s = Self::new(conn, io);
        s.rx.room(first.len())[..first.len()].copy_from_slice(&first);
        s.rx.filled(first.len());
        drop(first);
        std::future::poll_fn(|cx| s.poll_handshake(cx)).await?;
        Ok(s)
    }
}

impl ClientTls {
    /// Complete a client handshake with `name` on `io`.
    pub async fn connect(
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
        io: TcpStream,
    ) -> io::Result<Self> {
        let conn = UnbufferedClientConnection::new(config, name).map_err(tls_err)?;
        let mut s = Self::new(conn, io);
        std::future::poll_fn(|cx| s.poll_handshake(cx)).await?;
        Ok(s)
    }
}

impl<C: Side> TlsIo<C> {
    fn new(conn: C, io: TcpStream) -> Self {
        Self {
            conn,
            io,
            rx: Buf::default(),
            tx: Buf::default(),
            plain: Vec::new(),
            plain_pos: 0,
            peer_closed: false,
            close_sent: false,
            failed: false,
        }
    }

    /// The protocol agreed by ALPN, if any.
    pub fn alpn_protocol(&self) -> Option<&[u8]> {
        self.conn.alpn_protocol()
    }

    /// Whether the handshake resumed an earlier session.
    pub fn resumed(&self) -> bool {
        self.conn.handshake_kind() == Some(HandshakeKind::Resumed)
    }

    /// The key exchange group the handshake agreed (e.g. X25519MLKEM768).
    pub fn kx_group(&self) -> Option<NamedGroup> {
        self.conn.negotiated_key_exchange_group().map(|g| g.name())
    }

    /// The socket under the TLS (peer and local addresses).
    pub fn tcp(&self) -> &TcpStream {
        &self.io
    }

    /// Write pending records to the socket; the send buffer is released
    /// once empty.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.tx.is_empty() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, self.tx.bytes()))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.tx.consume(n);
        }
        Poll::Ready(Ok(()))
    }

    /// Read more ciphertext once the socket is readable: the buffer is
    /// taken only then. `Ok(false)`: the peer closed the TCP stream.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        // What the peer may be waiting for goes first (a handshake flight,
        // an alert, a key update), without waiting for the socket to take
        // it: a peer that reads only once it could write must not stall our
        // reading.
        if let Poll::Ready(Err(e)) = self.poll_send(cx) {
            return Poll::Ready(Err(e));
        }
        ready!(self.io.poll_read_ready(cx))?;
        self.rx.compact();
        if self.rx.end() >= MAX_RX {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "TLS handshake message too large",
            )));
        }
        let room = if self.rx.free() > 0 {
            self.rx.spare()
        } else {
            // A record or handshake message larger than what is held.
            self.rx.room(BUF_SIZE.min(MAX_RX - self.rx.end()))
        };
        // TcpStream's own poll_read: after a short read it forgets the
        // readiness, which saves the read that would only say EAGAIN.
        let mut rb = ReadBuf::new(room);
        let r = Pin::new(&mut self.io).poll_read(cx, &mut rb);
        let n = rb.filled().len();
        self.rx.filled(n);
        if self.rx.is_empty() {
            self.rx.clear();
        }
        match r {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(n > 0)),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// One step: process what was received and act on the state rustls is
    /// in: queue its records, hand out plaintext, or do what `want` asks
    /// once application data may flow. No I/O: the caller sends and reads.
    fn step(&mut self, want: Want<'_, '_>) -> io::Result<Step> {
        if self.failed {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "TLS connection failed earlier",
            ));
        }
        let Self {
            conn,
            rx,
            tx,
            plain,
            peer_closed,
            ..
        } = self;
        let status = conn.process(rx.bytes_mut());
        let discard = status.discard;
        let step = match status.state {
            Err(e) => {
                rx.consume(discard);
                return Err(self.fail(e));
            }
            // What rustls queues while reading is bounded by rustls; this
            // bound is ours (see MAX_TX).
            Ok(ConnectionState::EncodeTlsData(_)) if tx.len() >= MAX_TX => {
                rx.consume(discard);
                return Err(self.fail_without_alert("TLS: the peer does not read what it asks for"));
            }
            Ok(ConnectionState::ReadTraffic(mut records)) => {
                let mut out = match want {
                    Want::Read(out) => Some(out),
                    _ => None,
                };
                let mut delivered = false;
                while let Some(record) = records.next_record() {
                    let mut payload = match record {
                        Ok(record) => record.payload,
                        Err(e) => {
                            rx.consume(discard);
                            return Err(self.fail(e));
                        }
                    };
                    if let Some(out) = out.as_deref_mut() {
                        let n = payload.len().min(out.remaining());
                        out.put_slice(&payload[..n]);
                        payload = &payload[n..];
                        delivered = true;
                    }
                    plain.extend_from_slice(payload);
                }
                if delivered { Step::Done } else { Step::Again }
            }
            Ok(ConnectionState::EncodeTlsData(mut enc)) => {
                let n = match enc.encode(tx.spare()) {
                    Ok(n) => n,
                    Err(EncodeError::InsufficientSize(s)) => {
                        enc.encode(tx.room(s.required_size))
                            .map_err(|e| io::Error::other(e.to_string()))?
                    }
                    Err(e) => return Err(io::Error::other(e.to_string())),
                };
                tx.filled(n);
                Step::Again
            }
            Ok(ConnectionState::TransmitTlsData(t)) => {
                // The records stay in `tx` and leave with the next send: before
                // the next read (`poll_fill`), at the end of the handshake,
                // with application data on flush, or with close_notify (a
                // response and close_notify leave in one segment).
                t.done();
                Step::Again
            }
            Ok(ConnectionState::BlockedHandshake) => Step::Read,
            Ok(ConnectionState::WriteTraffic(mut w)) => match want {
                Want::Handshake => Step::Done,
                Want::Read(_) => Step::Read,
                Want::Write(data) => {
                    let n = match w.encrypt(data, tx.spare()) {
                        Ok(n) => n,
                        Err(EncryptError::InsufficientSize(s)) => w
                            .encrypt(data, tx.room(s.required_size))
                            .map_err(|e| io::Error::other(e.to_string()))?,
                        Err(e) => return Err(io::Error::other(e.to_string())),
                    };
                    tx.filled(n);
                    Step::Done
                }
                Want::Close => {
                    let n = match w.queue_close_notify(tx.spare()) {
                        Ok(n) => n,
                        Err(EncryptError::InsufficientSize(s)) => w
                            .queue_close_notify(tx.room(s.required_size))
                            .map_err(|e| io::Error::other(e.to_string()))?,
                        Err(e) => return Err(io::Error::other(e.to_string())),
                    };
                    tx.filled(n);
                    Step::Done
                }
            },
            Ok(ConnectionState::PeerClosed) => {
                *peer_closed = true;
                match want {
                    Want::Read(_) | Want::Handshake => Step::Closed,
                    // The peer's half-close does not stop our sending.
                    Want::Write(_) | Want::Close => Step::Again,
                }
            }
            Ok(ConnectionState::Closed) => {
                *peer_closed = true;
                Step::Closed
            }
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "unexpected TLS state (early data)",
                ));
            }
        };
        rx.consume(discard);
        Ok(step)
    }

    /// Turn a TLS error into an I/O error, sending the peer what is queued
    /// for it and the alert rustls queued, as far as the socket takes them
    /// at once: records already made (a ServerHello flight the same read
    /// produced) go first, or the peer could not read the alert. rustls
    /// gets the rest of the receive buffer, as its contract asks (a
    /// handshake message it was joining still lives there); called with
    /// less, it panics. The connection is failed from here on.
    fn fail(&mut self, e: rustls::Error) -> io::Error {
        let status = self.conn.process(self.rx.bytes_mut());
        if let Ok(ConnectionState::EncodeTlsData(mut enc)) = status.state {
            let mut alert = [0u8; 64];
            if let Ok(n) = enc.encode(&mut alert) {
                self.tx.room(n)[..n].copy_from_slice(&alert[..n]);
                self.tx.filled(n);
            }
        }
        while !self.tx.is_empty() {
            match self.io.try_write(self.tx.bytes()) {
                Ok(n) if n > 0 => self.tx.consume(n),
                _ => break,
            }
        }
        self.end_failed();
        tls_err(e)
    }

    /// End the connection for a reason of ours (no alert: rustls has none
    /// to queue for it).
    fn fail_without_alert(&mut self, why: &'static str) -> io::Error {
        self.end_failed();
        io::Error::new(io::ErrorKind::InvalidData, why)
    }

    /// Failed for good: the buffers go back, and no later call reaches
    /// rustls.
    fn end_failed(&mut self) {
        self.failed = true;
        self.rx.clear();
        self.tx.clear();
    }

    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            match self.step(Want::Handshake)? {
                Step::Again => {}
                // A TLS 1.3 server may send before the client's Finished;
                // the handshake is complete only once that has arrived.
                // Its last flight leaves now rather than with the first data:
                // held back, it would keep a send buffer per connection
                // while the other side's handshake runs.
                Step::Done if !self.conn.is_handshaking() => {
                    ready!(self.poll_send(cx))?;
                    return Poll::Ready(Ok(()));
                }
                Step::Done | Step::Read => {
                    if !ready!(self.poll_fill(cx))? {
                        return Poll::Ready(Err(eof(
                            "TLS handshake: the peer closed the connection",
                        )));
                    }
                }
                // A peer may finish its handshake and close at once (its
                // Finished and close_notify in one read): the handshake is
                // done, and the reader sees the end.
                Step::Closed if !self.conn.is_handshaking() => {
                    ready!(self.poll_send(cx))?;
                    return Poll::Ready(Ok(()));
                }
                Step::Closed => {
                    return Poll::Ready(Err(eof("TLS handshake: the peer closed the connection")));
                }
            }
        }
    }
}

impl<C: Side> AsyncRead for TlsIo<C> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            let pos = this.plain_pos as usize;
            if pos < this.plain.len() {
                let n = (this.plain.len() - pos).min(buf.remaining());
                buf.put_slice(&this.plain[pos..pos + n]);
                // At most one handshake message's worth: fits in 32 bits.
                this.plain_pos += n as u32;
                if this.plain_pos as usize == this.plain.len() {
                    this.plain = Vec::new();
                    this.plain_pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.peer_closed {
                return Poll::Ready(Ok(()));
            }
            match this.step(Want::Read(buf))? {
                Step::Again => {}
                Step::Done | Step::Closed => return Poll::Ready(Ok(())),
                Step::Read => {
                    if !ready!(this.poll_fill(cx))? {
                        // TCP closed without close_notify: a peer that
                        // crashed or a truncation, never a clean end.
                        return Poll::Ready(Err(eof(
                            "peer closed connection without sending TLS close_notify",
                        )));
                    }
                }
            }
        }
    }
}

impl<C: Side> AsyncWrite for TlsIo<C> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if this.close_sent {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let n = buf.len().min(MAX_PLAINTEXT);
        // A record queues behind the pending ones while the buffer has room
        // for it, and the caller's flush sends them together; otherwise the
        // pending ones go first: back-pressure.
        if !this.tx.is_empty() && this.tx.free() < n + MAX_OVERHEAD {
            ready!(this.poll_send(cx))?;
        }
        loop {
            match this.step(Want::Write(&buf[..n]))? {
                Step::Again => {}
                Step::Done => break,
                Step::Read => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::NotConnected,
                        "TLS write before the handshake completed",
                    )));
                }
                Step::Closed => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
            }
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // close_notify queues behind the pending records: one send for all.
        while !this.close_sent {
            match this.step(Want::Close)? {
                Step::Again => {}
                Step::Done | Step::Closed | Step::Read => this.close_sent = true,
            }
        }
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod size_tests {
    /// What an idle reencrypt connection holds inline for its two TLS
    /// streams (the rest is rustls's boxed state and keys): kept in check
    /// so that a rustls upgrade that grows it shows up here.
    #[test]
    fn tls_streams_stay_small() {
        let server = std::mem::size_of::<super::ServerTls>();
        let client = std::mem::size_of::<super::ClientTls>();
        eprintln!("ServerTls {server} B, ClientTls {client} B");
        assert!(server + client <= 4096, "{server} + {client} bytes");
        // What we add to rustls's connection: socket, two buffer handles,
        // the plaintext overflow and flags.
        let ours = server - std::mem::size_of::<rustls::server::UnbufferedServerConnection>();
        assert!(
            ours <= 120,
            "ServerTls adds {ours} bytes to rustls's connection"
        );
    }
}
