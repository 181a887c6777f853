//! A TLS stream whose buffers exist only while bytes are in flight, and
//! whose records, once the handshake is done, are this proxy's to seal and
//! open.
//!
//! rustls's buffered connections (what tokio-rustls wraps) keep a 4 KiB
//! receive buffer each for their whole life: on the reencrypt path that is
//! 8 KiB of every idle connection, more than everything else it holds. Here
//! the caller owns the buffers: the receive buffer is taken from a small
//! per-thread pool only once the socket is readable and given back as soon
//! as no partial record is left in it; the send buffer holds records until
//! the next flush, read, close or the end of the handshake sends them
//! (several records, or the last data and close_notify, leave in one
//! segment) and is given back once the socket took them.
//!
//! The handshake runs on rustls's unbuffered API. At its end rustls hands
//! the traffic keys over (its kernel-TLS interface) and keeps what still
//! needs its state: TLS 1.3 key updates and the session tickets an upstream
//! server sends after the handshake. From then on [`super::record`] opens
//! each record in place in the receive buffer and seals each write straight
//! into the send buffer; this module acts on what the records carry besides
//! data (alerts, key updates, tickets, renegotiation requests) the way
//! rustls does.

use std::{
    cell::RefCell,
    io,
    ops::DerefMut,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
};

use rustls::{
    AlertDescription, ClientConfig, ContentType, ExtractedSecrets, HandshakeKind, HandshakeType,
    ServerConfig,
    client::{ClientConnectionData, UnbufferedClientConnection},
    kernel::KernelConnection,
    server::{ServerConnectionData, UnbufferedServerConnection},
    unbuffered::{ConnectionState, EncodeError, UnbufferedConnectionCommon, UnbufferedStatus},
};
use rustls_pki_types::ServerName;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
};

use super::record::{MAX_OVERHEAD, MAX_PLAINTEXT, RecordError, Records};

/// Pooled buffer size: one TLS 1.2 record at its largest (header, 16 KiB of
/// plaintext, 2 KiB of expansion), so one read or one encrypted 16 KiB write
/// always fits.
const BUF_SIZE: usize = 5 + 16 * 1024 + 2048;

/// A handshake message may span several records; rustls's own buffered
/// connections allow 64 KiB for one, and so do we.
const MAX_RX: usize = 0xffff + BUF_SIZE;

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

    /// At least `n` writable bytes after the content.
    fn room(&mut self, n: usize) -> &mut [u8] {
        if self.buf.is_empty() {
            self.buf = take_buf();
        }
        let end = self.end();
        if self.free() < n {
            let mut bigger = vec![0u8; end + n].into_boxed_slice();
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

/// The two kinds of unbuffered connection, driven by the same handshake
/// code.
pub trait Side: DerefMut<Target = UnbufferedConnectionCommon<Self::Data>> + Unpin + Sized {
    /// rustls's per-side connection data.
    type Data: Tickets;
    /// Process the records of `incoming` (see rustls's `process_tls_records`).
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data>;
    /// Hand the traffic keys over once the handshake is done, keeping what
    /// key updates and tickets need.
    fn into_kernel(self)
    -> Result<(ExtractedSecrets, KernelConnection<Self::Data>), rustls::Error>;
}

// rustls implements these once per side, not generically.
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
            fn into_kernel(
                self,
            ) -> Result<(ExtractedSecrets, KernelConnection<$data>), rustls::Error> {
                self.dangerous_into_kernel_connection()
            }
        }
    };
}
side!(UnbufferedServerConnection, ServerConnectionData);
side!(UnbufferedClientConnection, ClientConnectionData);

/// What a side does with a session ticket that arrives after the
/// handshake (TLS 1.3 servers send them then).
pub trait Tickets: Sized + Unpin {
    /// Keep it for resumption (a client), or refuse it (a server, to whom
    /// no peer may send one).
    fn ticket(conn: &mut KernelConnection<Self>, body: &[u8]) -> Result<(), rustls::Error>;
}

impl Tickets for ClientConnectionData {
    fn ticket(conn: &mut KernelConnection<Self>, body: &[u8]) -> Result<(), rustls::Error> {
        conn.handle_new_session_ticket(body)
    }
}

impl Tickets for ServerConnectionData {
    fn ticket(_: &mut KernelConnection<Self>, _: &[u8]) -> Result<(), rustls::Error> {
        Err(unexpected("a session ticket sent by a client"))
    }
}

fn tls_err(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

fn eof(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, what.to_string())
}

fn unexpected(what: &str) -> rustls::Error {
    rustls::Error::General(format!("TLS: unexpected {what} after the handshake"))
}

/// The socket and its two buffers.
struct Wire {
    io: TcpStream,
    /// Received ciphertext not processed yet (a partial record).
    rx: Buf,
    /// Encrypted records the socket has not taken yet.
    tx: Buf,
}

impl Wire {
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
}

/// A handshake in progress: rustls's connection (boxed: it is large and
/// lives only this long) over the wire.
struct Handshake<C> {
    conn: Box<C>,
    wire: Wire,
    /// Application data that came with the peer's last flight.
    plain: Vec<u8>,
}

/// The outcome of one handshake step.
enum Step {
    /// Go on processing.
    Again,
    /// The handshake is done (once rustls no longer says it is handshaking).
    Done,
    /// More ciphertext is needed first.
    Read,
    /// The peer closed.
    Closed,
}

impl<C: Side> Handshake<C> {
    fn new(conn: C, io: TcpStream) -> Self {
        Self {
            conn: Box::new(conn),
            wire: Wire {
                io,
                rx: Buf::default(),
                tx: Buf::default(),
            },
            plain: Vec::new(),
        }
    }

    /// One step: process what was received and queue rustls's records. No
    /// I/O: the caller sends and reads.
    fn step(&mut self) -> io::Result<Step> {
        let Self { conn, wire, plain } = self;
        let status = conn.process(wire.rx.bytes_mut());
        let discard = status.discard;
        let step = match status.state {
            Err(e) => {
                wire.rx.consume(discard);
                return Err(self.fail(e));
            }
            // A peer may send data right behind its Finished.
            Ok(ConnectionState::ReadTraffic(mut records)) => {
                while let Some(record) = records.next_record() {
                    plain.extend_from_slice(record.map_err(tls_err)?.payload);
                }
                Step::Again
            }
            Ok(ConnectionState::EncodeTlsData(mut enc)) => {
                let tx = &mut wire.tx;
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
                // The records stay in `tx` and leave with the next send:
                // before the next read (`poll_fill`) or at the end of the
                // handshake.
                t.done();
                Step::Again
            }
            Ok(ConnectionState::BlockedHandshake) => Step::Read,
            Ok(ConnectionState::WriteTraffic(_)) => Step::Done,
            Ok(ConnectionState::PeerClosed | ConnectionState::Closed) => Step::Closed,
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "unexpected TLS state (early data)",
                ));
            }
        };
        wire.rx.consume(discard);
        Ok(step)
    }

    /// Turn a TLS error into an I/O error, sending the alert rustls queued
    /// for the peer if the socket takes it at once.
    fn fail(&mut self, e: rustls::Error) -> io::Error {
        if let Ok(ConnectionState::EncodeTlsData(mut enc)) = self.conn.process(&mut []).state {
            let mut alert = [0u8; 64];
            if let Ok(n) = enc.encode(&mut alert) {
                let _ = self.wire.io.try_write(&alert[..n]);
            }
        }
        self.wire.rx.clear();
        self.wire.tx.clear();
        tls_err(e)
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            match self.step()? {
                Step::Again => {}
                // A TLS 1.3 server may send before the client's Finished;
                // the handshake is complete only once that has arrived.
                // Its last flight leaves now rather than with the first data:
                // held back, it would keep a send buffer per connection
                // while the other side's handshake runs.
                Step::Done if !self.conn.is_handshaking() => {
                    ready!(self.wire.poll_send(cx))?;
                    return Poll::Ready(Ok(()));
                }
                Step::Done | Step::Read => {
                    if !ready!(self.wire.poll_fill(cx))? {
                        return Poll::Ready(Err(eof(
                            "TLS handshake: the peer closed the connection",
                        )));
                    }
                }
                Step::Closed => {
                    return Poll::Ready(Err(eof("TLS handshake: the peer closed the connection")));
                }
            }
        }
    }

    /// Run the handshake, then take the keys over from rustls.
    async fn run(mut self) -> io::Result<TlsIo<C::Data>> {
        std::future::poll_fn(|cx| self.poll(cx)).await?;
        let Self { conn, wire, plain } = self;
        let alpn = conn.alpn_protocol().map(Box::from);
        let resumed = conn.handshake_kind() == Some(HandshakeKind::Resumed);
        let (secrets, kernel) = (*conn).into_kernel().map_err(tls_err)?;
        let records = Records::new(
            kernel.protocol_version(),
            kernel.negotiated_cipher_suite(),
            secrets.tx,
            secrets.rx,
        )
        .ok_or_else(|| io::Error::other("TLS: negotiated a cipher the proxy does not know"))?;
        Ok(TlsIo {
            wire,
            plain,
            plain_pos: 0,
            records,
            kernel,
            hs: Vec::new(),
            alpn,
            resumed,
            budget: Budget::default(),
            peer_closed: false,
            close_sent: false,
        })
    }
}

/// What a peer may send after the handshake before it counts as abuse,
/// as rustls (and BoringSSL) allow.
struct Budget {
    /// Warning alerts (TLS 1.2; `user_canceled` in TLS 1.3).
    warnings: u8,
    /// Renegotiation requests, each refused with a `no_renegotiation`
    /// warning (TLS 1.2).
    renegotiations: u8,
    /// Key updates since the last application data (TLS 1.3).
    key_updates: u8,
}

const KEY_UPDATES: u8 = 32;

impl Default for Budget {
    fn default() -> Self {
        Self {
            warnings: 4,
            renegotiations: 1,
            key_updates: KEY_UPDATES,
        }
    }
}

/// Take one from a budget, or fail with `err`.
fn spend(left: &mut u8, err: &str) -> Result<(), rustls::Error> {
    *left = left
        .checked_sub(1)
        .ok_or_else(|| rustls::Error::General(format!("TLS: {err}")))?;
    Ok(())
}

/// Largest post-handshake handshake message accepted (a session ticket,
/// usually a few hundred bytes).
const MAX_HANDSHAKE_MSG: usize = 0xffff;

/// A TLS connection over a TCP stream, after its handshake.
pub struct TlsIo<D> {
    wire: Wire,
    /// Decrypted bytes the reader's buffer had no room for.
    plain: Vec<u8>,
    plain_pos: u32,
    records: Records,
    /// rustls's part after the handshake: key schedule and tickets.
    kernel: KernelConnection<D>,
    /// A handshake message that spans records, so far.
    hs: Vec<u8>,
    alpn: Option<Box<[u8]>>,
    resumed: bool,
    budget: Budget,
    /// The peer sent close_notify: the reader sees EOF.
    peer_closed: bool,
    /// Our close_notify is queued.
    close_sent: bool,
}

/// Server side (client-facing).
pub type ServerTls = TlsIo<ServerConnectionData>;
/// Client side (upstream-facing).
pub type ClientTls = TlsIo<ClientConnectionData>;

impl ServerTls {
    /// Complete the server handshake on `io`; `first` holds the bytes
    /// already read from it (the ClientHello).
    pub async fn accept(
        config: Arc<ServerConfig>,
        io: TcpStream,
        first: Vec<u8>,
    ) -> io::Result<Self> {
        let conn = UnbufferedServerConnection::new(config).map_err(tls_err)?;
        let mut h = Handshake::new(conn, io);
        h.wire.rx.room(first.len())[..first.len()].copy_from_slice(&first);
        h.wire.rx.filled(first.len());
        drop(first);
        h.run().await
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
        Handshake::new(conn, io).run().await
    }
}

/// What opening the received records came to.
enum Got {
    /// Plaintext was delivered.
    Data,
    /// A whole record is needed first.
    More,
    /// The peer sent close_notify.
    Closed,
}

impl<D: Tickets> TlsIo<D> {
    /// The protocol agreed by ALPN, if any.
    pub fn alpn_protocol(&self) -> Option<&[u8]> {
        self.alpn.as_deref()
    }

    /// Whether the handshake resumed an earlier session.
    pub fn resumed(&self) -> bool {
        self.resumed
    }

    /// The socket under the TLS (peer and local addresses).
    pub fn tcp(&self) -> &TcpStream {
        &self.wire.io
    }

    /// Seal one record of `typ` into the send buffer. A TLS 1.3 key that
    /// sealed all it may is replaced first (a key update tells the peer);
    /// a TLS 1.2 connection has no such thing and ends, as rustls's do.
    fn seal(&mut self, typ: ContentType, plain: &[u8]) -> Result<(), rustls::Error> {
        if self.records.tx_worn_out() {
            if !self.records.is_tls13() {
                return Err(rustls::Error::General(
                    "TLS 1.2: the connection sent as many records as its key may seal".into(),
                ));
            }
            self.update_tx_key()?;
        }
        let n = self.records.sealed_len(plain.len());
        let out = self.wire.tx.room(n);
        let n = self.records.seal(typ, plain, out).map_err(record_err)?;
        self.wire.tx.filled(n);
        Ok(())
    }

    /// Send a key update (not asking for the peer's) and switch to the
    /// new sending key.
    fn update_tx_key(&mut self) -> Result<(), rustls::Error> {
        // handshake type key_update (24), length 1, update_not_requested.
        const KEY_UPDATE: [u8; 5] = [24, 0, 0, 1, 0];
        let n = self.records.sealed_len(KEY_UPDATE.len());
        let out = self.wire.tx.room(n);
        let n = self
            .records
            .seal(ContentType::Handshake, &KEY_UPDATE, out)
            .map_err(record_err)?;
        self.wire.tx.filled(n);
        let next = self.kernel.update_tx_secret()?;
        if !self.records.set_tx(next) {
            return Err(rustls::Error::General("TLS: key update failed".into()));
        }
        Ok(())
    }

    /// Open the whole records received so far and act on them: data into
    /// `out` (what does not fit waits in `plain`), alerts, key updates,
    /// tickets. Stops once `out` has data and the next record might not fit.
    fn read_records(&mut self, out: &mut ReadBuf<'_>) -> Result<Got, rustls::Error> {
        let mut delivered = false;
        loop {
            let Some(len) = self
                .records
                .next_len(self.wire.rx.bytes())
                .map_err(record_err)?
            else {
                return Ok(if delivered { Got::Data } else { Got::More });
            };
            if delivered && out.remaining() < len {
                return Ok(Got::Data);
            }
            let rec = &mut self.wire.rx.bytes_mut()[..len];
            let opened = self.records.open(rec).map_err(record_err)?;
            let plain = &rec[opened.plain];
            if opened.typ != ContentType::Handshake && !self.hs.is_empty() {
                return Err(unexpected("record inside a handshake message"));
            }
            let mut closed = false;
            match opened.typ {
                ContentType::ApplicationData => {
                    self.budget.key_updates = KEY_UPDATES;
                    let n = plain.len().min(out.remaining());
                    out.put_slice(&plain[..n]);
                    self.plain.extend_from_slice(&plain[n..]);
                    delivered |= !plain.is_empty();
                }
                ContentType::Alert => {
                    let body = <[u8; 2]>::try_from(plain).ok();
                    closed = self.alert(body)?;
                }
                ContentType::Handshake => {
                    // Copied out: handling it may seal records.
                    let mut msg = std::mem::take(&mut self.hs);
                    msg.extend_from_slice(plain);
                    self.wire.rx.consume(len);
                    self.handshake(msg)?;
                    continue;
                }
                _ => return Err(unexpected("record type")),
            }
            self.wire.rx.consume(len);
            if closed {
                self.peer_closed = true;
                return Ok(if delivered { Got::Data } else { Got::Closed });
            }
        }
    }

    /// An alert: `Ok(true)` for close_notify, `Ok(false)` for a warning
    /// that may be ignored; any other ends the connection.
    fn alert(&mut self, body: Option<[u8; 2]>) -> Result<bool, rustls::Error> {
        let Some([level, desc]) = body else {
            return Err(rustls::Error::General(
                "TLS: malformed alert after the handshake".into(),
            ));
        };
        let desc = AlertDescription::from(desc);
        if desc == AlertDescription::CloseNotify {
            return Ok(true);
        }
        // Warnings are allowed in TLS 1.2; TLS 1.3 keeps only user_canceled.
        let tolerated = !self.records.is_tls13() || desc == AlertDescription::UserCanceled;
        if level == 1 && tolerated {
            spend(&mut self.budget.warnings, "too many warning alerts")?;
            return Ok(false);
        }
        Err(rustls::Error::AlertReceived(desc))
    }

    /// The handshake messages of one record (with the start of one that
    /// spanned the records before it).
    fn handshake(&mut self, msg: Vec<u8>) -> Result<(), rustls::Error> {
        let mut rest = &msg[..];
        while let [typ, a, b, c, body @ ..] = rest {
            let len = u32::from_be_bytes([0, *a, *b, *c]) as usize;
            if len > MAX_HANDSHAKE_MSG {
                return Err(unexpected("handshake message size"));
            }
            if body.len() < len {
                break;
            }
            let (body, after) = body.split_at(len);
            let typ = HandshakeType::from(*typ);
            match (self.records.is_tls13(), typ) {
                (true, HandshakeType::KeyUpdate) => {
                    // It must end its record: the next record uses the new key.
                    if !after.is_empty() {
                        return Err(unexpected("message after a key update"));
                    }
                    self.key_update(body)?;
                }
                (true, HandshakeType::NewSessionTicket) => D::ticket(&mut self.kernel, body)?,
                (false, HandshakeType::HelloRequest | HandshakeType::ClientHello) => {
                    spend(
                        &mut self.budget.renegotiations,
                        "renegotiation requested again",
                    )?;
                    self.seal(
                        ContentType::Alert,
                        &[1, u8::from(AlertDescription::NoRenegotiation)],
                    )?;
                }
                _ => return Err(unexpected("handshake message")),
            }
            rest = after;
        }
        if !rest.is_empty() {
            self.hs = rest.to_vec();
        }
        Ok(())
    }

    /// The peer's TLS 1.3 key update: its next records use a new key; if
    /// it asks, ours do too.
    fn key_update(&mut self, body: &[u8]) -> Result<(), rustls::Error> {
        spend(&mut self.budget.key_updates, "too many key updates")?;
        let requested = match body {
            [0] => false,
            [1] => true,
            _ => return Err(unexpected("key update value")),
        };
        let next = self.kernel.update_rx_secret()?;
        if !self.records.set_rx(next) {
            return Err(rustls::Error::General("TLS: key update failed".into()));
        }
        if requested {
            self.update_tx_key()?;
        }
        Ok(())
    }

    /// Turn a TLS error into an I/O error, sending the peer the fatal alert
    /// that says why if the socket takes it at once.
    fn fail(&mut self, e: rustls::Error, alert: AlertDescription) -> io::Error {
        self.wire.rx.clear();
        self.wire.tx.clear();
        let mut rec = [0u8; 2 + MAX_OVERHEAD];
        if !self.records.tx_worn_out()
            && let Ok(n) = self
                .records
                .seal(ContentType::Alert, &[2, u8::from(alert)], &mut rec)
        {
            let _ = self.wire.io.try_write(&rec[..n]);
        }
        tls_err(e)
    }
}

/// The alert that goes with an error of ours.
fn alert_for(e: &rustls::Error) -> AlertDescription {
    match e {
        rustls::Error::InvalidMessage(_) => AlertDescription::DecodeError,
        rustls::Error::DecryptError => AlertDescription::BadRecordMac,
        rustls::Error::PeerSentOversizedRecord => AlertDescription::RecordOverflow,
        _ => AlertDescription::UnexpectedMessage,
    }
}

fn record_err(e: RecordError) -> rustls::Error {
    match e {
        RecordError::Decrypt => rustls::Error::DecryptError,
        RecordError::Overflow(_) => rustls::Error::PeerSentOversizedRecord,
        e => rustls::Error::General(e.to_string()),
    }
}

impl<D: Tickets> AsyncRead for TlsIo<D> {
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
                // At most one record's worth: fits in 32 bits.
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
            match this.read_records(buf) {
                Err(e) => {
                    let alert = alert_for(&e);
                    return Poll::Ready(Err(this.fail(e, alert)));
                }
                Ok(Got::Data | Got::Closed) => return Poll::Ready(Ok(())),
                Ok(Got::More) => {
                    if !ready!(this.wire.poll_fill(cx))? {
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

impl<D: Tickets> AsyncWrite for TlsIo<D> {
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
        if !this.wire.tx.is_empty() && this.wire.tx.free() < n + MAX_OVERHEAD {
            ready!(this.wire.poll_send(cx))?;
        }
        if let Err(e) = this.seal(ContentType::ApplicationData, &buf[..n]) {
            return Poll::Ready(Err(this.fail(e, AlertDescription::InternalError)));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.wire.poll_send(cx))?;
        Pin::new(&mut this.wire.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // close_notify queues behind the pending records: one send for all.
        if !this.close_sent {
            this.close_sent = true;
            let close_notify = [1, u8::from(AlertDescription::CloseNotify)];
            if let Err(e) = this.seal(ContentType::Alert, &close_notify) {
                return Poll::Ready(Err(tls_err(e)));
            }
        }
        ready!(this.wire.poll_send(cx))?;
        Pin::new(&mut this.wire.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::{RootCertStore, pki_types::PrivatePkcs8KeyDer};
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
        let provider = crate::proxy::tls::provider();
        let leaf = rcgen::generate_simple_self_signed(vec!["api.example.com".to_string()]).unwrap();
        let der = leaf.cert.der().clone();
        let key = PrivatePkcs8KeyDer::from(leaf.signing_key.serialize_der()).into();
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![der.clone()], key)
            .unwrap();
        server.send_tls13_tickets = 2;
        server.enable_secret_extraction = true;
        let mut roots = RootCertStore::empty();
        roots.add(der).unwrap();
        let mut client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.enable_secret_extraction = true;
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
                t.wire.rx.buf.is_empty() && t.wire.tx.buf.is_empty(),
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
            t.wire.rx.buf.is_empty() && t.wire.tx.buf.is_empty(),
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
        assert_eq!(kinds, vec![false, true]);

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

    /// TLS 1.3 key updates both ways, with a rustls peer: the peer renews
    /// its key and asks for ours (rustls's `refresh_traffic_keys`), and we
    /// renew ours on our own when a key has sealed all it may; data flows
    /// on through every change.
    #[tokio::test]
    async fn key_updates_both_ways() {
        let (server_cfg, client_cfg) = configs_for(&[&rustls::version::TLS13]);
        let acceptor = tokio_rustls::TlsAcceptor::from(server_cfg);
        let (c, s) = pair().await;
        let server = tokio::spawn(async move {
            let mut p = acceptor.accept(s).await.unwrap();
            let mut buf = [0u8; 5];
            for round in 0..3u8 {
                p.get_mut().1.refresh_traffic_keys().unwrap();
                p.write_all(&[b'p', round]).await.unwrap();
                p.flush().await.unwrap();
                p.read_exact(&mut buf[..2]).await.unwrap();
                assert_eq!(buf[..2], [b'o', round], "our data after the update");
            }
            // Five records from us, sealed with three keys.
            p.read_exact(&mut buf).await.unwrap();
            assert_eq!(&buf, b"abcde");
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
        t.records.set_tx_limit(2);
        for b in b"abcde" {
            t.write_all(&[*b]).await.unwrap();
            t.flush().await.unwrap();
        }
        let mut rest = Vec::new();
        t.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"bye");
        server.await.unwrap();
    }

    /// TLS 1.2 has no key update: a connection whose key sealed all it may
    /// refuses to write more, as rustls's do.
    #[tokio::test]
    async fn tls12_stops_at_its_key_limit() {
        let (server_cfg, client_cfg) = configs_for(&[&rustls::version::TLS12]);
        let (c, s) = pair().await;
        let server = tokio::spawn(async move {
            let mut t = ServerTls::accept(server_cfg, s, Vec::new()).await.unwrap();
            let mut got = Vec::new();
            let _ = t.read_to_end(&mut got).await;
            got
        });
        let mut t = ClientTls::connect(client_cfg, name(), c).await.unwrap();
        t.records.set_tx_limit(2);
        t.write_all(b"12").await.unwrap();
        t.write_all(b"34").await.unwrap();
        t.flush().await.unwrap();
        let e = t.write_all(b"56").await.unwrap_err();
        assert!(e.to_string().contains("TLS 1.2"), "{e}");
        drop(t);
        assert_eq!(server.await.unwrap(), b"1234");
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
                t.read(&mut buf).await.unwrap_err()
            });
            let mut p = connector.connect(name(), c).await.unwrap();
            // A well-formed record under no key we share.
            let mut forged = vec![23, 3, 3, 0, 40];
            forged.extend_from_slice(&[0x5a; 40]);
            p.get_mut().0.write_all(&forged).await.unwrap();
            let e = server.await.unwrap();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{version:?}");
            let mut buf = [0u8; 16];
            let alert = p.read(&mut buf).await.unwrap_err().to_string();
            assert!(alert.contains("BadRecordMac"), "{version:?}: {alert}");
        }
    }

    /// TLS 1.2 renegotiation is refused with a no_renegotiation warning
    /// and the connection goes on; a second request ends it.
    #[tokio::test]
    async fn tls12_renegotiation_is_refused() {
        let (server_cfg, client_cfg) = configs_for(&[&rustls::version::TLS12]);
        let (c, s) = pair().await;
        let server = tokio::spawn(async move {
            let mut t = ServerTls::accept(server_cfg, s, Vec::new()).await.unwrap();
            // hello_request: type 0, empty body.
            t.seal(ContentType::Handshake, &[0, 0, 0, 0]).unwrap();
            t.write_all(b"one").await.unwrap();
            t.flush().await.unwrap();
            let mut buf = [0u8; 3];
            // The client's no_renegotiation warning is ignored.
            t.read_exact(&mut buf).await.unwrap();
            assert_eq!(&buf, b"two");
            t.seal(ContentType::Handshake, &[0, 0, 0, 0]).unwrap();
            t.flush().await.unwrap();
            let mut rest = Vec::new();
            t.read_to_end(&mut rest).await.unwrap_err()
        });
        let mut t = ClientTls::connect(client_cfg, name(), c).await.unwrap();
        let mut buf = [0u8; 3];
        t.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"one");
        t.write_all(b"two").await.unwrap();
        t.flush().await.unwrap();
        let e = t.read(&mut buf).await.unwrap_err();
        assert!(e.to_string().contains("renegotiation"), "{e}");
        let e = server.await.unwrap();
        assert!(e.to_string().contains("UnexpectedMessage"), "{e}");
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
    /// streams (the rest is rustls's boxed key schedule): kept in check so
    /// that a rustls upgrade that grows it shows up here.
    #[test]
    fn tls_streams_stay_small() {
        let server = std::mem::size_of::<super::ServerTls>();
        let client = std::mem::size_of::<super::ClientTls>();
        let kernel = std::mem::size_of::<
            rustls::kernel::KernelConnection<rustls::client::ClientConnectionData>,
        >();
        let records = std::mem::size_of::<super::Records>();
        eprintln!(
            "ServerTls {server} B, ClientTls {client} B (rustls {kernel} B, keys {records} B)"
        );
        assert!(server + client <= 1792, "{server} + {client} bytes");
        // What we add to rustls's part and the keys: socket, two buffer
        // handles, the plaintext overflow, ALPN, counters and flags.
        let ours = client - kernel - records;
        assert!(
            ours <= 176,
            "ClientTls adds {ours} bytes to rustls's part and the keys"
        );
    }
}
