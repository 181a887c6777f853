//! The pod's side of a TLS handshake, bounded by the connection's deadline:
//! one place that counts how handshakes fail, and which key exchange the
//! ones that succeed agreed, for every path that terminates TLS.

use std::{future::Future, io, net::SocketAddr, time::Duration};

use tokio::time::Instant;
use tracing::debug;

use crate::{metrics::Metrics, tlsio::ServerTls};

/// Run `handshake` until `deadline` (at least one second from now, so a
/// ClientHello read late still gets its chance); a failure is counted by
/// reason (`tls`, `timeout`) and yields `None`, a success by the key
/// exchange group it agreed.
pub(super) async fn within_deadline(
    metrics: &Metrics,
    peer: SocketAddr,
    deadline: Instant,
    handshake: impl Future<Output = io::Result<ServerTls>>,
) -> Option<ServerTls> {
    let deadline = deadline.max(Instant::now() + Duration::from_secs(1));
    // Boxed with its timer: this future shares its space in the
    // connection's future with the copy that follows, which is smaller.
    match Box::pin(tokio::time::timeout_at(deadline, handshake)).await {
        Ok(Ok(stream)) => {
            metrics.key_exchange("client", stream.kx_group());
            Some(stream)
        }
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
