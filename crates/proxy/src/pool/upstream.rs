//! The node's pooled HTTP/2 connections to the API server.
//!
//! A request takes a stream on the oldest connection with room under the
//! server's `SETTINGS_MAX_CONCURRENT_STREAMS`; when none has room, one more
//! connection is opened (one dial at a time, so a burst of pods opens one
//! connection, not one each), up to `pool.maxConnections`. Beyond that the
//! caller uses a dedicated connection rather than queueing behind watches
//! that may never end.

use std::{
    any::Any,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};

use bytes::Bytes;
use h2::client::SendRequest;
use rustls::ServerConfig;
use tracing::{debug, info};

use super::{
    dial::{Dial, Dialed, H2, HTTP11, PoolError},
    metrics::PoolMetrics,
};

/// HTTP/2 flow control windows of pooled connections. A stream's window
/// bounds what one slow pod makes the node buffer (its unread response);
/// the connection window covers many streams at once, so a slow reader
/// does not stall the others.
const STREAM_WINDOW: u32 = 256 * 1024;
const CONNECTION_WINDOW: u32 = 16 * 1024 * 1024;
/// Streams a new connection takes before the server has said its limit.
const INITIAL_MAX_STREAMS: usize = 100;

/// One pooled connection.
pub struct Conn {
    send: SendRequest<Bytes>,
    epoch: usize,
    streams: AtomicUsize,
    closed: AtomicBool,
}

impl Conn {
    fn limit(&self) -> usize {
        self.send.current_max_send_streams()
    }
}

/// A stream slot taken on a pooled connection; released on drop (when the
/// response has been read to its end, or abandoned).
pub struct Lease {
    conn: Arc<Conn>,
    metrics: PoolMetrics,
}

impl Lease {
    /// A handle to send the request on.
    pub fn sender(&self) -> SendRequest<Bytes> {
        self.conn.send.clone()
    }

    /// The connection failed under this request: take no more streams on it.
    pub fn broken(&self) {
        self.conn.closed.store(true, Ordering::Relaxed);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.conn.streams.fetch_sub(1, Ordering::Relaxed);
        self.metrics.streams.dec();
    }
}

/// Why a request gets no stream on the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRoom {
    /// Every connection is at the server's stream limit and the pool at
    /// `pool.maxConnections`.
    Full,
    /// A new connection could not be opened (or does not speak HTTP/2).
    Unavailable,
}

impl NoRoom {
    /// Log value.
    pub fn reason(self) -> &'static str {
        match self {
            NoRoom::Full => "full",
            NoRoom::Unavailable => "unavailable",
        }
    }
}

/// Which connection takes the next stream: the first (oldest) of the live
/// ones with room, so streams pack onto few connections. `loads` is
/// `(streams, limit)` per live connection.
pub fn pick(loads: impl IntoIterator<Item = (usize, usize)>) -> Option<usize> {
    loads
        .into_iter()
        .position(|(streams, limit)| streams < limit)
}

/// The node's pool.
pub struct Pool {
    conns: Mutex<Vec<Arc<Conn>>>,
    dialing: tokio::sync::Mutex<()>,
    /// Metrics of the pooled mode.
    pub metrics: PoolMetrics,
    /// The serving config with `h2` and `http/1.1`, derived once per
    /// serving config in force (keyed by its address).
    serving: Mutex<Option<(usize, Arc<ServerConfig>)>>,
}

impl Pool {
    /// An empty pool.
    pub fn new(metrics: PoolMetrics) -> Self {
        Self {
            conns: Mutex::new(Vec::new()),
            dialing: tokio::sync::Mutex::new(()),
            metrics,
            serving: Mutex::new(None),
        }
    }

    /// The serving config `base` offering `h2` and `http/1.1` to pods.
    pub fn serving_config(&self, base: &Arc<ServerConfig>) -> Arc<ServerConfig> {
        let key = Arc::as_ptr(base) as usize;
        let mut cached = self
            .serving
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((k, c)) = &*cached
            && *k == key
        {
            return c.clone();
        }
        let mut c = (**base).clone();
        c.alpn_protocols = vec![H2.to_vec(), HTTP11.to_vec()];
        let c = Arc::new(c);
        *cached = Some((key, c.clone()));
        c
    }

    /// Pooled connections open now.
    pub fn len(&self) -> usize {
        self.conns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// Whether no pooled connection is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Take a stream slot on a live connection of `epoch` with room.
    fn take(&self, epoch: usize, max: usize) -> Result<Lease, NoRoom> {
        let mut conns = self
            .conns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Connections of an older config that carry nothing are let go: the
        // last handle dropped, h2 closes them with a GOAWAY.
        conns.retain(|c| {
            !c.closed.load(Ordering::Relaxed)
                && (c.epoch == epoch || c.streams.load(Ordering::Relaxed) > 0)
        });
        let live = || conns.iter().filter(|c| c.epoch == epoch);
        let loads = live().map(|c| (c.streams.load(Ordering::Relaxed), c.limit()));
        match pick(loads) {
            Some(i) => {
                let conn = live().nth(i).expect("picked among the live").clone();
                conn.streams.fetch_add(1, Ordering::Relaxed);
                self.metrics.streams.inc();
                Ok(Lease {
                    conn,
                    metrics: self.metrics.clone(),
                })
            }
            None if live().count() >= max => Err(NoRoom::Full),
            // Room for one more connection: the caller dials.
            None => Err(NoRoom::Unavailable),
        }
    }

    /// A stream slot for one request, opening a connection when needed.
    pub async fn lease(&self, epoch: usize, max: usize, dial: &dyn Dial) -> Result<Lease, NoRoom> {
        match self.take(epoch, max) {
            Ok(l) => return Ok(l),
            Err(NoRoom::Full) => return Err(NoRoom::Full),
            Err(NoRoom::Unavailable) => {}
        }
        // One dial at a time: whoever waited here finds the connection the
        // previous holder opened.
        let _dialing = self.dialing.lock().await;
        match self.take(epoch, max) {
            Ok(l) => return Ok(l),
            Err(NoRoom::Full) => return Err(NoRoom::Full),
            Err(NoRoom::Unavailable) => {}
        }
        let conn = self.open(epoch, dial).await.map_err(|e| {
            debug!(error = %e, "failed to open a pooled connection");
            NoRoom::Unavailable
        })?;
        conn.streams.fetch_add(1, Ordering::Relaxed);
        self.metrics.streams.inc();
        self.conns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(conn.clone());
        Ok(Lease {
            conn,
            metrics: self.metrics.clone(),
        })
    }

    /// Dial, TLS with ALPN h2, HTTP/2 handshake; the connection's driver
    /// runs in its own task and marks it closed when it ends.
    async fn open(&self, epoch: usize, dial: &dyn Dial) -> Result<Arc<Conn>, PoolError> {
        let Dialed {
            io,
            alpn,
            peer: upstream,
            hold,
        } = dial.dial(H2).await.ok_or(PoolError::Unreachable)?;
        if alpn.as_deref() != Some(H2) {
            return Err(PoolError::Alpn("h2"));
        }
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            // Pods never push; refuse it.
            .enable_push(false)
            // Until the server's SETTINGS arrive, assume the 100 streams
            // RFC 9113 asks servers to allow, not h2's "unlimited": a burst
            // of requests on a new connection must not queue behind the
            // server's real limit (a watch queued there waits forever).
            .initial_max_send_streams(INITIAL_MAX_STREAMS)
            .handshake::<_, Bytes>(io)
            .await?;
        let send = send.ready().await?;
        let conn = Arc::new(Conn {
            send,
            epoch,
            streams: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&conn);
        let metrics = self.metrics.clone();
        metrics.connections.inc();
        metrics.connections_opened.inc();
        info!(
            upstream = ?upstream,
            max_streams = conn.limit(),
            "pooled upstream connection opened"
        );
        tokio::spawn(async move {
            let _hold: Box<dyn Any + Send + Sync> = hold;
            let r = connection.await;
            if let Some(c) = weak.upgrade() {
                c.closed.store(true, Ordering::Relaxed);
            }
            metrics.connections.dec();
            match r {
                Ok(()) => info!(upstream = ?upstream, "pooled upstream connection closed"),
                Err(e) => {
                    info!(upstream = ?upstream, error = %e, "pooled upstream connection ended")
                }
            }
        });
        Ok(conn)
    }
}

#[cfg(test)]
mod tests {
    use super::pick;

    #[test]
    fn streams_pack_onto_the_oldest_connection_with_room() {
        assert_eq!(pick([]), None);
        assert_eq!(pick([(3, 100), (0, 100)]), Some(0));
        assert_eq!(pick([(100, 100), (7, 100)]), Some(1));
        // A server that lowered its limit below what is in flight.
        assert_eq!(pick([(120, 100), (128, 128)]), None);
    }
}
