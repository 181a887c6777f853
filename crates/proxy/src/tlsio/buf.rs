//! The buffers of a TLS stream: memory that exists only while bytes are in
//! flight. A buffer is taken from a small per-thread pool when bytes arrive
//! or records are made, and given back as soon as it is empty, so that an
//! idle connection holds none. Kept apart from the stream because it knows
//! nothing of TLS: it only hands out room and takes back bytes consumed.

use std::cell::RefCell;

/// Pooled buffer size: one TLS 1.2 record at its largest (header, 16 KiB of
/// plaintext, 2 KiB of expansion), so one read or one encrypted 16 KiB write
/// always fits.
pub(super) const BUF_SIZE: usize = 5 + 16 * 1024 + 2048;

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
/// every idle connection holds four (the offsets never exceed
/// [`MAX_RX`](super::MAX_RX)).
#[derive(Default)]
pub(super) struct Buf {
    /// Visible to the stream's tests, which check that an idle stream
    /// holds no memory.
    pub(super) buf: Box<[u8]>,
    start: u32,
    end: u32,
}

impl Buf {
    pub(super) fn is_empty(&self) -> bool {
        self.start == self.end
    }

    fn start(&self) -> usize {
        self.start as usize
    }

    pub(super) fn end(&self) -> usize {
        self.end as usize
    }

    /// Bytes of room after the content.
    pub(super) fn free(&self) -> usize {
        self.buf.len() - self.end()
    }

    pub(super) fn bytes(&self) -> &[u8] {
        &self.buf[self.start()..self.end()]
    }

    pub(super) fn bytes_mut(&mut self) -> &mut [u8] {
        let (start, end) = (self.start(), self.end());
        &mut self.buf[start..end]
    }

    pub(super) fn len(&self) -> usize {
        self.end() - self.start()
    }

    /// At least `n` writable bytes after the content.
    pub(super) fn room(&mut self, n: usize) -> &mut [u8] {
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
    pub(super) fn spare(&mut self) -> &mut [u8] {
        self.room(1)
    }

    pub(super) fn filled(&mut self, n: usize) {
        self.end += n as u32;
    }

    /// Drop `n` bytes from the front; give the memory back once empty.
    pub(super) fn consume(&mut self, n: usize) {
        self.start += n as u32;
        if self.start >= self.end {
            self.start = 0;
            self.end = 0;
            give_buf(std::mem::take(&mut self.buf));
        }
    }

    /// Move the content to the front of the buffer.
    pub(super) fn compact(&mut self) {
        if self.start > 0 {
            let (start, end) = (self.start(), self.end());
            self.buf.copy_within(start..end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }

    pub(super) fn clear(&mut self) {
        self.consume(self.end() - self.start());
    }
}
