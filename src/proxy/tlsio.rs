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
//! whole so that its reading, writing and closing can be followed in one
//! place.

use std::{
    cell::RefCell,
    io,
    ops::DerefMut,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
};

use rustls::{
    ClientConfig, HandshakeKind, NamedGroup, ServerConfig,
    client::{ClientConnectionData, UnbufferedClientConnection},
    server::{ServerConnectionData, UnbufferedServerConnection},
    unbuffered::{
        ConnectionState, EncodeError, EncryptError, UnbufferedConnectionCommon, UnbufferedStatus,
    },
};
use rustls_pki_types::ServerName;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
};

/// Pooled buffer size: one TLS 1.2 record at its largest (header, 16 KiB of
/// plaintext, 2 KiB of expansion), so one read or one encrypted 16 KiB write
/// always fits.
const BUF_SIZE: usize = 5 + 16 * 1024 + 2048;

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

/// Buffers kept for reuse per thread: the ones in flight at one moment,
/// bounded so that idle memory stays small (8 x 18 KiB).
const POOL_MAX: usize = 8;

thread_local! {
    static POOL: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

/// A buffer of `BUF_SIZE` initialised bytes (zeroed once, when first
/// allocated; pooled buffers are reused as they are).
fn take_buf() -> Box<[u8]> {
    POOL.with(|p| p.borrow_mut().pop())
        .unwrap_or_else(|| vec![0u8; BUF_SIZE].into_boxed_slice())
}

/// Release a buffer: pooled when it has the usual size, freed otherwise.
fn give_buf(b: Box<[u8]>) {
    if b.len() != BUF_SIZE {
        return;
    }
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < POOL_MAX {
            p.push(b);
        }
    });
}

/// A buffer that exists only while it holds bytes: `buf[start..end]` is the
/// content; `buf` is empty (unallocated) while there is none. 24 bytes:
/// every idle connection holds four (the offsets never exceed `MAX_RX`).
#[derive(Default)]
struct Buf {
    buf: Box<[u8]>,
    start: u32,
    end: u32,
}

impl Buf {
    fn is_empty(&self) -> bool {
        self.start == self.end
    }

    fn start(&self) -> usize {
        self.start as usize
    }

    fn end(&self) -> usize {
        self.end as usize
    }

    /// Bytes of room after the content.
    fn free(&self) -> usize {
        self.buf.len() - self.end()
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[self.start()..self.end()]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        let (start, end) = (self.start(), self.end());
        &mut self.buf[start..end]
    }

    fn len(&self) -> usize {
        self.end() - self.start()
    }

    /// At least `n` writable bytes after the content.
    fn room(&mut self, n: usize) -> &mut [u8] {
        if self.buf.is_empty() {
            self.buf = take_buf();
        }
        let end = self.end();
        if self.free() < n {
            // Doubling: a message joined from many records is copied a few
            // times, not once per record.
            let size = (end + n).max(2 * self.buf.len());
            let mut bigger = vec![0u8; size].into_boxed_slice();
            bigger[..end].copy_from_slice(&self.buf[..end]);
            give_buf(std::mem::replace(&mut self.buf, bigger));
        }
        &mut self.buf[end..]
    }

    /// Whatever room there is (a fresh buffer if none is held).
    fn spare(&mut self) -> &mut [u8] {
        self.room(1)
    }

    fn filled(&mut self, n: usize) {
        self.end += n as u32;
    }

    /// Drop `n` bytes from the front; give the memory back once empty.
    fn consume(&mut self, n: usize) {
        self.start += n as u32;
        if self.start >= self.end {
            self.start = 0;
            self.end = 0;
            give_buf(std::mem::take(&mut self.buf));
        }
    }

    /// Move the content to the front of the buffer.
    fn compact(&mut self) {
        if self.start > 0 {
            let (start, end) = (self.start(), self.end());
            self.buf.copy_within(start..end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }

    fn clear(&mut self) {
        self.consume(self.end() - self.start());
    }
}

/// The two kinds of unbuffered connection, driven by the same code.
pub trait Side: DerefMut<Target = UnbufferedConnectionCommon<Self::Data>> + Unpin {
    /// rustls's per-side connection data.
    type Data;
    /// Process the records of `incoming` (see rustls's `process_tls_records`).
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data>;
}

// rustls implements `process_tls_records` once per side, not generically.
macro_rules! side {
    ($conn:ty, $data:ty) => {
        impl Side for $conn {
            type Data = $data;
            fn process<'c, 'i>(
                &'c mut self,
                incoming: &'i mut [u8],
            ) -> UnbufferedStatus<'c, 'i, $data> {
                (**self).process_tls_records(incoming)
            }
        }
    };
}
side!(UnbufferedServerConnection, ServerConnectionData);
side!(UnbufferedClientConnection, ClientConnectionData);

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
mod tests {
    use super::*;
    use std::time::Duration;

    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpListener,
    };

    /// A CA-less pair: the client trusts the server's self-signed leaf.
    fn configs() -> (Arc<ServerConfig>, Arc<ClientConfig>) {
        configs_for(rustls::DEFAULT_VERSIONS)
    }

    /// `configs()` speaking only `versions`.
    fn configs_for(
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> (Arc<ServerConfig>, Arc<ClientConfig>) {
        let (mut server, client) = crate::proxy::tls::test_pair(versions, versions);
        server.send_tls13_tickets = 2;
        (Arc::new(server), Arc::new(client))
    }

    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap());
        let (c, s) = tokio::join!(c, l.accept());
        (c.unwrap(), s.unwrap().0)
    }

    fn name() -> ServerName<'static> {
        ServerName::try_from("api.example.com").unwrap()
    }

    /// Our server and our client: data both ways, records larger than one
    /// read, a reader with a tiny buffer, a clean close seen as EOF, and no
    /// buffer held while idle.
    #[tokio::test]
    async fn our_client_and_server_talk_and_hold_no_buffer_while_idle() {
        let (server_cfg, client_cfg) = configs();
        let (c, s) = pair().await;
        let server = tokio::spawn(async move {
            let mut t = ServerTls::accept(server_cfg, s, Vec::new()).await.unwrap();
            let mut got = vec![0u8; 100_000];
            t.read_exact(&mut got).await.unwrap();
            assert!(
                t.rx.buf.is_empty() && t.tx.buf.is_empty(),
                "idle server holds a buffer"
            );
            t.write_all(&got).await.unwrap();
            t.flush().await.unwrap();
            // One byte at a time: the rest of a record waits in the stash.
            let mut small = [0u8; 1];
            let mut line = Vec::new();
            while line.last() != Some(&b'\n') {
                t.read_exact(&mut small).await.unwrap();
                line.push(small[0]);
            }
            assert_eq!(line, b"hello, tiny reader\n");
            t.shutdown().await.unwrap();
            let mut rest = Vec::new();
            t.read_to_end(&mut rest).await.unwrap();
            assert!(rest.is_empty());
        });
        let mut t = ClientTls::connect(client_cfg, name(), c).await.unwrap();
        let payload: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        t.write_all(&payload).await.unwrap();
        t.flush().await.unwrap();
        let mut back = vec![0u8; payload.len()];
        t.read_exact(&mut back).await.unwrap();
        assert_eq!(back, payload);
        assert!(
            t.rx.buf.is_empty() && t.tx.buf.is_empty(),
            "idle client holds a buffer"
        );
        t.write_all(b"hello, tiny reader\n").await.unwrap();
        t.flush().await.unwrap();
        let mut rest = Vec::new();
        t.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        t.shutdown().await.unwrap();
        server.await.unwrap();
    }

    /// Interoperates with rustls's buffered connections (tokio-rustls) on
    /// the other side, and the second upstream connection resumes the
    /// session with the ticket the server issued on the first.
    /// Records wait in the send buffer for a flush, but a peer that writes
    /// first (and waits for our Finished before it can) must not stall:
    /// with TLS 1.2 and TLS 1.3.
    #[tokio::test]
    async fn a_server_that_speaks_first_gets_our_last_flight() {
        for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
            let (server_cfg, client) = configs_for(&[version]);
            let acceptor = tokio_rustls::TlsAcceptor::from(server_cfg.clone());
            let (c, s) = pair().await;
            let server = tokio::spawn(async move {
                let mut t = acceptor.accept(s).await.unwrap();
                t.write_all(b"hello").await.unwrap();
                t.flush().await.unwrap();
                t.get_ref().1.protocol_version()
            });
            let client = async {
                let mut t = ClientTls::connect(client, name(), c).await?;
                let mut got = [0u8; 5];
                t.read_exact(&mut got).await.map(|_| got)
            };
            let got = tokio::time::timeout(std::time::Duration::from_secs(5), client)
                .await
                .expect("stalled: the server never got our handshake's last flight")
                .unwrap();
            assert_eq!(&got, b"hello");
            let spoken = server.await.unwrap();
            assert_eq!(spoken, Some(version.version), "{version:?}");
        }
    }

    #[tokio::test]
    async fn interoperates_with_tokio_rustls_and_resumes() {
        let (server_cfg, client_cfg) = configs();
        let acceptor = tokio_rustls::TlsAcceptor::from(server_cfg.clone());
        let mut kinds = Vec::new();
        for _ in 0..2 {
            let (c, s) = pair().await;
            let acceptor = acceptor.clone();
            let server = tokio::spawn(async move {
                let mut t = acceptor.accept(s).await.unwrap();
                let mut buf = [0u8; 4];
                t.read_exact(&mut buf).await.unwrap();
                t.write_all(b"pong").await.unwrap();
                t.shutdown().await.unwrap();
                buf
            });
            let mut t = ClientTls::connect(client_cfg.clone(), name(), c)
                .await
                .unwrap();
            t.write_all(b"ping").await.unwrap();
            let mut got = Vec::new();
            t.read_to_end(&mut got).await.unwrap();
            assert_eq!(got, b"pong");
            assert_eq!(&server.await.unwrap(), b"ping");
            kinds.push(t.resumed());
        }
        assert_eq!(kinds, vec![false, true], "resumed");

        // tokio-rustls client against our server, the ClientHello already
        // read by the caller (as the proxy reads it to route).
        let (c, s) = pair().await;
        let server = tokio::spawn(async move {
            let mut s = s;
            let mut first = vec![0u8; 5];
            s.read_exact(&mut first).await.unwrap();
            let mut t = ServerTls::accept(server_cfg, s, first).await.unwrap();
            let mut buf = [0u8; 4];
            t.read_exact(&mut buf).await.unwrap();
            t.write_all(b"pong").await.unwrap();
            t.shutdown().await.unwrap();
        });
        let connector = tokio_rustls::TlsConnector::from(client_cfg);
        let mut t = connector.connect(name(), c).await.unwrap();
        t.write_all(b"ping").await.unwrap();
        let mut got = Vec::new();
        t.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"pong");
        server.await.unwrap();
    }

    /// With tickets issued one per handshake (as Go's TLS stack does), the
    /// proxy's session store keeps enough of them that connections opened
    /// together all resume, not only the first eight.
    #[tokio::test]
    async fn concurrent_upstream_connections_all_resume() {
        let (server_cfg, client_cfg) = configs();
        let mut server_cfg = (*server_cfg).clone();
        server_cfg.send_tls13_tickets = 1;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_cfg));
        let mut client_cfg = (*client_cfg).clone();
        client_cfg.resumption =
            rustls::client::Resumption::store(Arc::new(crate::proxy::tls::SessionStore::default()));
        let client_cfg = Arc::new(client_cfg);
        let round = |n: usize| {
            let (acceptor, client_cfg) = (acceptor.clone(), client_cfg.clone());
            async move {
                let mut open = Vec::new();
                for _ in 0..n {
                    let (c, s) = pair().await;
                    let acceptor = acceptor.clone();
                    tokio::spawn(async move {
                        let mut t = acceptor.accept(s).await.unwrap();
                        t.write_all(b"pong").await.unwrap();
                        let mut rest = Vec::new();
                        let _ = t.read_to_end(&mut rest).await;
                    });
                    open.push(ClientTls::connect(client_cfg.clone(), name(), c));
                }
                let mut conns = futures::future::try_join_all(open).await.unwrap();
                let mut resumed = 0;
                for t in &mut conns {
                    let mut buf = [0u8; 4];
                    t.read_exact(&mut buf).await.unwrap();
                    resumed += usize::from(t.resumed());
                }
                resumed
            }
        };
        // rustls's own memory cache resumes 8 of these 20 (its stock per
        // server), ours all of them.
        assert_eq!(round(20).await, 0);
        assert_eq!(round(20).await, 20);
    }

    /// TLS 1.3 key updates from a rustls peer that asks for ours too: data
    /// flows on through every change, both ways.
    #[tokio::test]
    async fn key_updates_from_the_peer() {
        let (server_cfg, client_cfg) = configs_for(&[&rustls::version::TLS13]);
        let acceptor = tokio_rustls::TlsAcceptor::from(server_cfg);
        let (c, s) = pair().await;
        let server = tokio::spawn(async move {
            let mut p = acceptor.accept(s).await.unwrap();
            let mut buf = [0u8; 2];
            for round in 0..3u8 {
                p.get_mut().1.refresh_traffic_keys().unwrap();
                p.write_all(&[b'p', round]).await.unwrap();
                p.flush().await.unwrap();
                p.read_exact(&mut buf).await.unwrap();
                assert_eq!(buf, [b'o', round], "our data after the update");
            }
            p.write_all(b"bye").await.unwrap();
            p.shutdown().await.unwrap();
        });
        let mut t = ClientTls::connect(client_cfg, name(), c).await.unwrap();
        let mut buf = [0u8; 2];
        for round in 0..3u8 {
            t.read_exact(&mut buf).await.unwrap();
            assert_eq!(buf, [b'p', round], "the peer's data after its update");
            t.write_all(&[b'o', round]).await.unwrap();
            t.flush().await.unwrap();
        }
        let mut rest = Vec::new();
        t.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"bye");
        server.await.unwrap();
    }

    /// A record that does not decrypt ends the connection with an error,
    /// and the peer is told why (bad_record_mac), in TLS 1.2 and 1.3.
    #[tokio::test]
    async fn a_forged_record_is_an_error_and_the_peer_learns_why() {
        for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
            let (server_cfg, client_cfg) = configs_for(&[version]);
            let connector = tokio_rustls::TlsConnector::from(client_cfg);
            let (c, s) = pair().await;
            let server = tokio::spawn(async move {
                let mut t = ServerTls::accept(server_cfg, s, Vec::new()).await.unwrap();
                let mut buf = [0u8; 16];
                let first = t.read(&mut buf).await.unwrap_err();
                // Failed for good: a second read does not drive rustls again.
                let again = t.read(&mut buf).await.unwrap_err();
                (first, again)
            });
            let mut p = connector.connect(name(), c).await.unwrap();
            // A well-formed record under no key we share.
            let mut forged = vec![23, 3, 3, 0, 40];
            forged.extend_from_slice(&[0x5a; 40]);
            p.get_mut().0.write_all(&forged).await.unwrap();
            let (e, again) = server.await.unwrap();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{version:?}");
            assert_eq!(again.kind(), io::ErrorKind::InvalidData, "{version:?}");
            let mut buf = [0u8; 16];
            let alert = p.read(&mut buf).await.unwrap_err().to_string();
            assert!(alert.contains("BadRecordMac"), "{version:?}: {alert}");
        }
    }

    /// A handshake message declared larger than 64 KiB, spread over full
    /// records, fails that connection with an alert. rustls joins such a
    /// message in the caller's buffer: handing it less than what it still
    /// holds there made it panic, which took the whole proxy down.
    #[tokio::test]
    async fn an_oversized_fragmented_handshake_message_fails_only_its_connection() {
        let (server_cfg, _) = configs();
        let (mut c, s) = pair().await;
        let server = tokio::spawn(ServerTls::accept(server_cfg, s, Vec::new()));
        let mut record = vec![22, 3, 1, 0x40, 0];
        // client_hello, declared length 0x010000, then zeros.
        record.extend_from_slice(&[1, 1, 0, 0]);
        record.resize(5 + 0x4000, 0);
        let mut more = vec![22, 3, 1, 0x40, 0];
        more.resize(5 + 0x4000, 0);
        c.write_all(&record).await.unwrap();
        let _ = c.write_all(&more).await;
        let e = server.await.expect("the server task panicked").err();
        assert_eq!(
            e.expect("an oversized ClientHello was accepted").kind(),
            io::ErrorKind::InvalidData
        );
        // Closed: rustls has no alert for this one (its own buffered
        // connections close the same way), and nothing else comes back.
        let mut reply = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut reply)).await;
        assert!(read.is_ok(), "the connection was left open");
        assert!(reply.is_empty() || reply[0] == 21, "{reply:?}");
    }

    /// An error in the read that also made the server's flight (a
    /// ClientHello and a bad ChangeCipherSpec in one segment): the flight
    /// goes out before the alert, or the peer could not read the alert.
    #[tokio::test]
    async fn the_flight_made_before_an_error_goes_out_before_its_alert() {
        let (server_cfg, client_cfg) = configs_for(&[&rustls::version::TLS13]);
        let mut hello = Vec::new();
        rustls::ClientConnection::new(client_cfg, name())
            .unwrap()
            .write_tls(&mut hello)
            .unwrap();
        // Two ChangeCipherSpec messages in one record: never valid.
        hello.extend_from_slice(&[20, 3, 3, 0, 2, 1, 1]);
        let (mut c, s) = pair().await;
        c.write_all(&hello).await.unwrap();
        let e = ServerTls::accept(server_cfg, s, Vec::new()).await.err();
        assert!(e.is_some(), "two CCS in one record were accepted");
        let mut reply = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut reply)).await;
        assert_eq!(reply.first(), Some(&22), "no ServerHello first: {reply:?}");
        // The records: ServerHello, then (TLS 1.3) encrypted ones, the last
        // of them the alert.
        let mut types = Vec::new();
        let mut rest = &reply[..];
        while rest.len() >= 5 {
            let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
            types.push(rest[0]);
            rest = &rest[(5 + len).min(rest.len())..];
        }
        assert!(types.len() >= 3, "{types:?}");
    }

    /// A peer that keeps asking for key updates and never reads ends its
    /// own connection (rustls allows 32 requests between data records, and
    /// keeps one reply pending), holding a bounded send buffer meanwhile.
    #[tokio::test]
    async fn a_key_update_flood_ends_the_connection() {
        let (server_cfg, client_cfg) = configs_for(&[&rustls::version::TLS13]);
        let connector = tokio_rustls::TlsConnector::from(client_cfg);
        let (c, s) = pair().await;
        let server = tokio::spawn(async move {
            let mut t = ServerTls::accept(server_cfg, s, Vec::new()).await.unwrap();
            let mut buf = [0u8; 16];
            loop {
                match t.read(&mut buf).await {
                    Ok(0) => return (Ok(()), t.tx.len()),
                    Ok(_) => {}
                    Err(e) => return (Err(e), t.tx.len()),
                }
            }
        });
        let mut p = connector.connect(name(), c).await.unwrap();
        for _ in 0..100 {
            p.get_mut().1.refresh_traffic_keys().unwrap();
            if p.flush().await.is_err() {
                break;
            }
        }
        let (r, held) = server.await.unwrap();
        let e = r.expect_err("100 key update requests in a row were accepted");
        assert!(e.to_string().contains("KeyUpdate"), "{e}");
        assert!(held <= MAX_TX, "{held} bytes queued");
    }

    /// A TCP close without close_notify is an error (truncation), not EOF;
    /// a client that is not TLS fails the handshake.
    #[tokio::test]
    async fn truncation_and_garbage_are_errors() {
        let (server_cfg, client_cfg) = configs();
        let (c, s) = pair().await;
        let server = tokio::spawn(async move {
            let t = ServerTls::accept(server_cfg.clone(), s, Vec::new())
                .await
                .unwrap();
            drop(t);
            let (mut c, s) = pair().await;
            c.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
            ServerTls::accept(server_cfg, s, Vec::new()).await.err()
        });
        let mut t = ClientTls::connect(client_cfg, name(), c).await.unwrap();
        let mut buf = [0u8; 16];
        let e = t.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        let e = server.await.unwrap().expect("plain HTTP is refused");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }
}

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
