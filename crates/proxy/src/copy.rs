//! Bidirectional copy whose buffers exist only while data flows.
//!
//! A read buffer is taken just before a read and given back as soon as the
//! read would block with nothing left to write, so an idle connection holds
//! no copy buffer at all (a naive loop holds two 8 KB buffers forever).

use std::{
    future::Future,
    io,
    pin::Pin,
    task::{Context, Poll, ready},
    time::Duration,
};

use prometheus_client::metrics::counter::Counter;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    time::{Instant, Sleep},
};

/// Size of a copy buffer while data flows (one TLS record of plaintext).
pub const BUF_SIZE: usize = 16 * 1024;

/// Buffers kept for reuse per thread: enough for the connections that are
/// busy at the same moment, bounded so idle memory stays small (128 KiB).
const POOL_MAX: usize = 8;

thread_local! {
    static POOL: std::cell::RefCell<Vec<Box<[u8]>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A buffer from the thread's pool (no zeroing) or a fresh one.
fn take_buf() -> Box<[u8]> {
    POOL.with(|p| p.borrow_mut().pop())
        .unwrap_or_else(|| vec![0u8; BUF_SIZE].into_boxed_slice())
}

/// Give a buffer back: pooled if there is room, freed otherwise.
fn give_buf(b: Box<[u8]>) {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < POOL_MAX {
            p.push(b);
        }
    });
}

/// An error of one half of the copy: on its read side or its write side.
enum HalfError {
    Read(io::Error),
    Write(io::Error),
}

struct Half {
    buf: Option<Box<[u8]>>,
    /// Offsets into `buf` (at most `BUF_SIZE`): 32-bit, so that the copy
    /// state of every idle connection stays small.
    pos: u32,
    cap: u32,
    read_done: bool,
    need_flush: bool,
    done: bool,
}

impl Half {
    fn new() -> Self {
        Self {
            buf: None,
            pos: 0,
            cap: 0,
            read_done: false,
            need_flush: false,
            done: false,
        }
    }

    /// Copy from `r` to `w` until EOF; `Ready(Ok(()))` after the write side
    /// is shut down. `moved` is set when any byte was read.
    fn poll_copy<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        mut r: Pin<&mut R>,
        mut w: Pin<&mut W>,
        counter: &Counter,
        moved: &mut bool,
    ) -> Poll<Result<(), HalfError>>
    where
        R: AsyncRead + ?Sized,
        W: AsyncWrite + ?Sized,
    {
        loop {
            if self.pos == self.cap && !self.read_done {
                let buf = self.buf.get_or_insert_with(take_buf);
                let mut rb = ReadBuf::new(buf);
                match r.as_mut().poll_read(cx, &mut rb) {
                    Poll::Pending => {
                        // Nothing buffered: give the memory back while idle.
                        if let Some(b) = self.buf.take() {
                            give_buf(b);
                        }
                        if self.need_flush {
                            ready!(w.as_mut().poll_flush(cx)).map_err(HalfError::Write)?;
                            self.need_flush = false;
                        }
                        return Poll::Pending;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(HalfError::Read(e))),
                    Poll::Ready(Ok(())) => {
                        let n = rb.filled().len();
                        if n == 0 {
                            self.read_done = true;
                            if let Some(b) = self.buf.take() {
                                give_buf(b);
                            }
                        } else {
                            self.pos = 0;
                            self.cap = n as u32;
                            counter.inc_by(n as u64);
                            *moved = true;
                        }
                    }
                }
            }
            while self.pos < self.cap {
                let Some(buf) = self.buf.as_ref() else {
                    break;
                };
                let n = ready!(
                    w.as_mut()
                        .poll_write(cx, &buf[self.pos as usize..self.cap as usize])
                )
                .map_err(HalfError::Write)?;
                if n == 0 {
                    return Poll::Ready(Err(HalfError::Write(io::ErrorKind::WriteZero.into())));
                }
                self.pos += n as u32;
                self.need_flush = true;
            }
            if self.read_done {
                // A shutdown flushes first (AsyncWrite's contract): a TLS
                // stream sends its last records and close_notify at once.
                ready!(w.as_mut().poll_shutdown(cx)).map_err(HalfError::Write)?;
                self.need_flush = false;
                self.done = true;
                return Poll::Ready(Ok(()));
            }
        }
    }
}

/// Why a copy ended.
#[derive(Debug, PartialEq, Eq)]
pub enum CopyEnd {
    /// Both sides closed cleanly.
    Closed,
    /// No byte moved for the idle timeout.
    Idle,
}

/// Which of the two streams an error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The first stream (`a`).
    A,
    /// The second stream (`b`).
    B,
}

/// A copy that ended with an I/O error, and the stream it came from: the
/// caller tells a client that went away from an upstream that reset.
#[derive(Debug, thiserror::Error)]
#[error("failed to copy: {source} (side {side:?})")]
pub struct CopyError {
    /// Stream whose read or write failed.
    pub side: Side,
    /// Cause.
    #[source]
    pub source: io::Error,
}

impl CopyError {
    /// `from` is the stream a half reads, `to` the one it writes.
    fn of(e: HalfError, from: Side, to: Side) -> Self {
        match e {
            HalfError::Read(source) => Self { side: from, source },
            HalfError::Write(source) => Self { side: to, source },
        }
    }
}

/// Copy `a` ⇄ `b` until both directions reached EOF, an error, or nothing
/// moved for `idle` (the copy ends less than a quarter of it later).
/// `a_to_b` and `b_to_a` count bytes.
pub struct CopyBidi<'a, A: ?Sized, B: ?Sized> {
    a: &'a mut A,
    b: &'a mut B,
    ab: Half,
    ba: Half,
    a_to_b: &'a Counter,
    b_to_a: &'a Counter,
    /// A tick: the idle timeout over [`TICKS`].
    tick: Duration,
    /// Ticks in a row without a byte moved.
    quiet: u32,
    /// A byte moved since the last tick.
    moved: bool,
    /// The timer has been polled once (which registers it).
    armed: bool,
    /// Fires every tick. Boxed: inline, its 112 bytes would take the
    /// reencrypt path's future past an allocator size class (see its size
    /// test).
    timer: Pin<Box<Sleep>>,
}

/// Ticks per idle timeout. Moving bytes only sets a flag (no clock read,
/// no timer touched per chunk); a tick with no byte moved since the one
/// before counts as quiet, and a copy ends after `TICKS` quiet ticks in a
/// row: between 1 and 1 + 1/TICKS idle timeouts after its last byte.
const TICKS: u32 = 4;

/// Build the copy future.
pub fn copy_bidirectional<'a, A, B>(
    a: &'a mut A,
    b: &'a mut B,
    a_to_b: &'a Counter,
    b_to_a: &'a Counter,
    idle: Duration,
) -> CopyBidi<'a, A, B>
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let tick = idle / TICKS;
    CopyBidi {
        a,
        b,
        ab: Half::new(),
        ba: Half::new(),
        a_to_b,
        b_to_a,
        tick,
        quiet: 0,
        moved: false,
        armed: false,
        timer: Box::pin(tokio::time::sleep(tick)),
    }
}

impl<A, B> Future for CopyBidi<'_, A, B>
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    type Output = Result<CopyEnd, CopyError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if !this.ab.done
            && let Poll::Ready(r) = this.ab.poll_copy(
                cx,
                Pin::new(&mut *this.a),
                Pin::new(&mut *this.b),
                this.a_to_b,
                &mut this.moved,
            )
        {
            r.map_err(|e| CopyError::of(e, Side::A, Side::B))?;
        }
        if !this.ba.done
            && let Poll::Ready(r) = this.ba.poll_copy(
                cx,
                Pin::new(&mut *this.b),
                Pin::new(&mut *this.a),
                this.b_to_a,
                &mut this.moved,
            )
        {
            r.map_err(|e| CopyError::of(e, Side::B, Side::A))?;
        }
        if this.ab.done && this.ba.done {
            return Poll::Ready(Ok(CopyEnd::Closed));
        }
        // Once registered, the timer keeps this task's waker until it fires:
        // it needs polling only then.
        if this.armed && !this.timer.is_elapsed() {
            return Poll::Pending;
        }
        this.armed = true;
        while this.timer.as_mut().poll(cx).is_ready() {
            if std::mem::take(&mut this.moved) {
                this.quiet = 0;
            } else {
                this.quiet += 1;
                if this.quiet >= TICKS {
                    return Poll::Ready(Ok(CopyEnd::Idle));
                }
            }
            this.timer.as_mut().reset(Instant::now() + this.tick);
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    #[tokio::test]
    async fn copies_both_ways_and_half_closes() {
        let (mut client, mut a) = duplex(64);
        let (mut b, mut server) = duplex(64);
        let (c1, c2) = (Counter::default(), Counter::default());
        let t = tokio::spawn(async move {
            let (c1, c2) = (c1, c2);
            let r = copy_bidirectional(&mut a, &mut b, &c1, &c2, Duration::from_secs(5)).await;
            (r.unwrap(), c1.get(), c2.get())
        });
        let payload: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let p2 = payload.clone();
        let w = tokio::spawn(async move {
            client.write_all(&p2).await.unwrap();
            client.shutdown().await.unwrap();
            let mut back = Vec::new();
            client.read_to_end(&mut back).await.unwrap();
            back
        });
        let mut got = Vec::new();
        server.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, payload);
        server.write_all(b"reply").await.unwrap();
        server.shutdown().await.unwrap();
        assert_eq!(w.await.unwrap(), b"reply");
        let (end, up, down) = t.await.unwrap();
        assert_eq!(end, CopyEnd::Closed);
        assert_eq!((up, down), (100_000, 5));
    }

    #[tokio::test]
    async fn idle_timeout() {
        let (_client, mut a) = duplex(64);
        let (mut b, _server) = duplex(64);
        let (c1, c2) = (Counter::default(), Counter::default());
        let r = copy_bidirectional(&mut a, &mut b, &c1, &c2, Duration::from_millis(100)).await;
        assert_eq!(r.unwrap(), CopyEnd::Idle);
    }

    /// Traffic keeps a copy alive well past its idle timeout; once it
    /// stops, the copy ends after one timeout, not much later.
    #[tokio::test]
    async fn traffic_defers_the_idle_timeout() {
        // A second, with a byte every tenth of one: a loaded machine must
        // stall this task for a whole second to break it.
        let idle = Duration::from_secs(1);
        let (mut client, mut a) = duplex(64);
        let (mut b, mut server) = duplex(64);
        let copy = tokio::spawn(async move {
            let (c1, c2) = (Counter::default(), Counter::default());
            copy_bidirectional(&mut a, &mut b, &c1, &c2, idle).await
        });
        let started = Instant::now();
        let mut last = started;
        let mut buf = [0u8; 1];
        while started.elapsed() < idle * 3 {
            client.write_all(b"x").await.unwrap();
            server.read_exact(&mut buf).await.unwrap();
            last = Instant::now();
            tokio::time::sleep(idle / 10).await;
        }
        let end = copy.await.unwrap().unwrap();
        let quiet = last.elapsed();
        assert_eq!(end, CopyEnd::Idle);
        assert!(quiet >= idle, "ended {quiet:?} after the last byte");
        assert!(quiet < idle * 2, "ended {quiet:?} after the last byte");
    }

    /// A stream whose reads fail with a reset (an upstream that sent RST).
    struct Reset;

    impl AsyncRead for Reset {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()))
        }
    }

    impl AsyncWrite for Reset {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// Copy until the error, with a 5 s idle timeout.
    async fn copy_err<A, B>(a: &mut A, b: &mut B) -> CopyError
    where
        A: AsyncRead + AsyncWrite + Unpin,
        B: AsyncRead + AsyncWrite + Unpin,
    {
        let (c1, c2) = (Counter::default(), Counter::default());
        let idle = Duration::from_secs(5);
        copy_bidirectional(a, b, &c1, &c2, idle).await.unwrap_err()
    }

    #[tokio::test]
    async fn an_error_names_the_stream_it_came_from() {
        let (_client, mut a) = duplex(64);
        let e = copy_err(&mut a, &mut Reset).await;
        assert_eq!(e.side, Side::B);
        assert_eq!(e.source.kind(), io::ErrorKind::ConnectionReset);
        let e = copy_err(&mut Reset, &mut a).await;
        assert_eq!(e.side, Side::A);
    }
}
