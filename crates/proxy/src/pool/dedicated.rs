//! One request on its own HTTP/1.1 upstream connection: upgrades (exec,
//! attach, port-forward: `Upgrade: SPDY/3.1` or `websocket`), whose bytes
//! after the `101` are spliced both ways for as long as the session lasts,
//! and requests the pool has no room for.

use bytes::Bytes;
use http::{
    HeaderValue, Request, Response, StatusCode, Uri, Version,
    header::{CONNECTION, HOST, UPGRADE},
};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tracing::debug;

use super::{
    dial::{Body, Dial, Dialed, H2, HTTP11, PoolError},
    forward::{authority, is_upgrade, strip_hop_by_hop},
    metrics::PoolMetrics,
};

/// Holds what a dedicated connection keeps until both its HTTP/1.1 driver
/// and, after an upgrade, its splice are done.
struct Held {
    _hold: Box<dyn std::any::Any + Send + Sync>,
    metrics: PoolMetrics,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.metrics.dedicated.dec();
    }
}

/// Forward `req` on a new HTTP/1.1 connection.
pub async fn forward(
    mut req: Request<Incoming>,
    dial: &dyn Dial,
    metrics: &PoolMetrics,
    fallback: &str,
) -> Result<Response<Body>, PoolError> {
    let Dialed { io, alpn, hold, .. } = dial.dial(HTTP11).await.ok_or(PoolError::Unreachable)?;
    // No ALPN is fine (HTTP/1.1 is the default); h2 is not.
    if alpn.as_deref() == Some(H2) {
        return Err(PoolError::Alpn("http/1.1"));
    }
    metrics.dedicated.inc();
    let held = std::sync::Arc::new(Held {
        _hold: hold,
        metrics: metrics.clone(),
    });
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    let driver_held = held.clone();
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            debug!(error = %e, "dedicated upstream connection ended by an error");
        }
        drop(driver_held);
    });

    let upgrade = is_upgrade(&req);
    let client_side = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    let host = authority(&parts, fallback);
    if upgrade {
        // The upgrade is end to end: keep `Connection: Upgrade` and `Upgrade`.
        let connection = parts.headers.get(CONNECTION).cloned();
        let protocol = parts.headers.get(UPGRADE).cloned();
        strip_hop_by_hop(&mut parts.headers);
        parts.headers.insert(
            CONNECTION,
            connection.unwrap_or(HeaderValue::from_static("Upgrade")),
        );
        if let Some(p) = protocol {
            parts.headers.insert(UPGRADE, p);
        }
    } else {
        strip_hop_by_hop(&mut parts.headers);
    }
    // HTTP/1.1 upstream: origin-form target, the authority in Host.
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    parts.uri = path.parse::<Uri>().map_err(http::Error::from)?;
    parts.version = Version::HTTP_11;
    if let Ok(h) = HeaderValue::from_str(&host) {
        parts.headers.insert(HOST, h);
    }
    let mut resp = send.send_request(Request::from_parts(parts, body)).await?;

    if resp.status() == StatusCode::SWITCHING_PROTOCOLS
        && let Some(client_side) = client_side
    {
        let upstream_side = hyper::upgrade::on(&mut resp);
        tokio::spawn(async move {
            let _held = held;
            match tokio::join!(client_side, upstream_side) {
                (Ok(c), Ok(u)) => {
                    let (mut c, mut u) = (TokioIo::new(c), TokioIo::new(u));
                    match tokio::io::copy_bidirectional(&mut c, &mut u).await {
                        Ok((up, down)) => debug!(up, down, "upgraded session ended"),
                        Err(e) => debug!(error = %e, "upgraded session ended by an error"),
                    }
                }
                (c, u) => debug!(
                    client = c.is_ok(),
                    upstream = u.is_ok(),
                    "upgrade did not complete"
                ),
            }
        });
        let (head, _) = resp.into_parts();
        let mut out = Response::new(Empty::<Bytes>::new().map_err(|n| match n {}).boxed());
        *out.status_mut() = head.status;
        *out.headers_mut() = head.headers;
        return Ok(out);
    }

    let (mut head, body) = resp.into_parts();
    strip_hop_by_hop(&mut head.headers);
    let mut out = Response::new(body.map_err(Into::into).boxed());
    *out.status_mut() = head.status;
    *out.headers_mut() = head.headers;
    Ok(out)
}
