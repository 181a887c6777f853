//! `timeouts.idle` for pod connections in pooled mode: a connection with no
//! byte either way for that long is closed, as the copy loop of the other
//! modes does. hyper has no such timeout of its own for HTTP/1.1 keep-alive
//! connections, so the pod's stream is wrapped and its last activity read.

use std::{
    io,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    time::Instant,
};

/// When a connection last moved a byte.
#[derive(Clone)]
pub struct Clock {
    base: Instant,
    /// Milliseconds after `base`.
    last: Arc<AtomicU64>,
}

impl Clock {
    /// A clock whose last activity is now.
    pub fn new() -> Self {
        Self {
            base: Instant::now(),
            last: Arc::new(AtomicU64::new(0)),
        }
    }

    fn touch(&self) {
        self.touch_at(Instant::now());
    }

    fn touch_at(&self, now: Instant) {
        let ms = now.saturating_duration_since(self.base).as_millis() as u64;
        self.last.fetch_max(ms, Ordering::Relaxed);
    }

    /// How long until the connection has been idle for `idle` at `now`;
    /// `None` once it has.
    pub fn remaining(&self, idle: Duration, now: Instant) -> Option<Duration> {
        let deadline = self.base + Duration::from_millis(self.last.load(Ordering::Relaxed)) + idle;
        let left = deadline.saturating_duration_since(now);
        (!left.is_zero()).then_some(left)
    }

    /// Resolves once `idle` has passed with no activity.
    pub async fn idle_for(&self, idle: Duration) {
        while let Some(left) = self.remaining(idle, Instant::now()) {
            tokio::time::sleep(left).await;
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// A stream that records its activity on a [`Clock`].
pub struct Active<S> {
    inner: S,
    clock: Clock,
}

impl<S> Active<S> {
    /// Wrap `inner`.
    pub fn new(inner: S, clock: Clock) -> Self {
        Self { inner, clock }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Active<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.clock.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Active<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.clock.touch();
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_counts_from_the_last_byte() {
        let clock = Clock::new();
        let (base, idle) = (clock.base, Duration::from_secs(60));
        let at = |s| base + Duration::from_secs(s);
        assert_eq!(clock.remaining(idle, at(50)), Some(Duration::from_secs(10)));
        assert_eq!(clock.remaining(idle, at(60)), None);
        clock.touch_at(at(50));
        assert_eq!(clock.remaining(idle, at(80)), Some(Duration::from_secs(30)));
        assert_eq!(clock.remaining(idle, at(110)), None);
        // An older touch never moves it back.
        clock.touch_at(at(20));
        assert_eq!(
            clock.remaining(idle, at(100)),
            Some(Duration::from_secs(10))
        );
    }
}
