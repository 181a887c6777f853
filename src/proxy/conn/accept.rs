//! The pod's side of a TLS handshake, bounded by the connection's deadline:
//! one place that counts how handshakes fail, for every path that
//! terminates TLS.

use std::{future::Future, io, net::SocketAddr, time::Duration};

use tokio::time::Instant;
use tracing::debug;

use crate::proxy::metrics::Metrics;

/// Run `handshake` until `deadline` (at least one second from now, so a
/// ClientHello read late still gets its chance); a failure is counted by
/// reason (`tls`, `timeout`) and yields `None`.
pub(super) async fn within_deadline<S>(
    metrics: &Metrics,
    peer: SocketAddr,
    deadline: Instant,
    handshake: impl Future<Output = io::Result<S>>,
) -> Option<S> {
    let deadline = deadline.max(Instant::now() + Duration::from_secs(1));
    // Boxed with its timer: this future shares its space in the
    // connection's future with the copy that follows, which is smaller.
    match Box::pin(tokio::time::timeout_at(deadline, handshake)).await {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(e)) => {
            metrics.handshake_error("tls");
            debug!(%peer, error = %e, "client TLS handshake failed");
            None
        }
        Err(_) => {
            metrics.handshake_error("timeout");
            None
        }
    }
}
