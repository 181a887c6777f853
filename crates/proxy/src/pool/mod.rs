//! The pooled mode: the node proxy terminates the pods' TLS, speaks
//! HTTP/1.1 or HTTP/2 with them (ALPN), and carries their requests over a
//! few HTTP/2 connections to the API server, so the shared ingress and the
//! API server see a handful of connections per node instead of one per pod
//! connection.
//!
//! [`upstream`] keeps the HTTP/2 connections (opened on demand, one more
//! when the server's concurrent stream limit is reached, never more than
//! `pool.maxConnections`); [`forward`] turns a pod's request into a stream on
//! one of them; [`dedicated`] carries what a multiplexed stream cannot:
//! upgrades (exec, attach, port-forward over SPDY or WebSocket) and requests
//! beyond the pool's capacity, each on its own HTTP/1.1 connection.
//!
//! The module uses nothing else of the proxy: the connection handler hands
//! it the client's TLS stream and a [`Dial`] that reaches the upstream.

pub mod dedicated;
pub mod dial;
pub mod forward;
pub mod idle;
pub mod metrics;
pub mod upstream;

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode, body::Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::debug;

pub use dial::{Body, BoxError, Dial, Dialed, H2, HTTP11, PoolError, Upstream};
pub use metrics::PoolMetrics;
pub use upstream::Pool;

/// What serving one pod connection needs.
#[derive(Clone)]
pub struct Ctx {
    /// The node's pool.
    pub pool: Arc<Pool>,
    /// How to reach the upstream.
    pub dial: Arc<dyn Dial>,
    /// Identity of the config in force: pooled connections opened under
    /// another one (before a reload: other CA, addresses) take no new
    /// streams and close once idle.
    pub epoch: usize,
    /// `pool.maxConnections`.
    pub max_connections: usize,
    /// `:authority` for HTTP/1.0 requests without a Host header.
    pub authority: Arc<str>,
    /// `timeouts.idle`: a pod connection with no byte either way for this
    /// long is closed.
    pub idle: std::time::Duration,
}

/// Serve one pod connection (TLS already terminated, `alpn` as negotiated)
/// to its end.
pub async fn serve<S>(io: S, alpn: Option<Vec<u8>>, ctx: Ctx)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let idle = ctx.idle;
    let svc = hyper::service::service_fn(move |req| {
        let ctx = ctx.clone();
        async move { Ok::<_, std::convert::Infallible>(route(req, ctx).await) }
    });
    let b = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    // The client said which protocol it speaks; no need to sniff a preface.
    let b = match alpn.as_deref() {
        Some(H2) => b.http2_only(),
        _ => b.http1_only(),
    };
    let clock = idle::Clock::new();
    let io = idle::Active::new(io, clock.clone());
    // An upgraded session leaves hyper (the future ends) and with it this
    // timeout: exec and attach sessions may be quiet for long.
    tokio::select! {
        r = b.serve_connection_with_upgrades(TokioIo::new(io), svc) => {
            if let Err(e) = r {
                debug!(error = %e, "pod connection ended by an error");
            }
        }
        () = clock.idle_for(idle) => debug!("pod connection idle: closed"),
    }
}

/// One request: upgrades on a dedicated connection, the rest on the pool,
/// on a dedicated connection when the pool has no room.
async fn route(mut req: Request<Incoming>, ctx: Ctx) -> Response<Body> {
    let m = &ctx.pool.metrics;
    let dial = &*ctx.dial;
    if forward::is_upgrade(&req) {
        m.request("upgrade");
        return answer(dedicated::forward(req, dial, m, &ctx.authority).await);
    }
    // A pooled connection the server closed (idle timeout, GOAWAY) is found
    // out only when used: the request was not sent, so it takes another.
    for _ in 0..2 {
        let lease = match ctx.pool.lease(ctx.epoch, ctx.max_connections, dial).await {
            Ok(l) => l,
            Err(no_room) => {
                debug!(
                    reason = no_room.reason(),
                    "no room on the pool: dedicated connection"
                );
                m.request("dedicated");
                return answer(dedicated::forward(req, dial, m, &ctx.authority).await);
            }
        };
        m.request("pooled");
        match forward::forward(req, lease, &ctx.authority).await {
            Ok(resp) => return resp,
            Err(forward::Failed::Sent(e)) => return answer(Err(e)),
            Err(forward::Failed::Unsent(r, e)) => {
                debug!(error = %e, "pooled connection gone before the request left: retrying");
                req = *r;
            }
        }
    }
    m.request("dedicated");
    answer(dedicated::forward(req, dial, m, &ctx.authority).await)
}

/// A response, or 502 naming the failure (the pod's client retries as it
/// would on any gateway error).
fn answer(r: Result<Response<Body>, PoolError>) -> Response<Body> {
    match r {
        Ok(resp) => resp,
        Err(e) => {
            debug!(error = %e, "request failed upstream");
            let mut resp = Response::new(
                Full::new(Bytes::from(format!("hcp-ingress proxy: {e}\n")))
                    .map_err(|never| match never {})
                    .boxed(),
            );
            *resp.status_mut() = StatusCode::BAD_GATEWAY;
            resp
        }
    }
}
