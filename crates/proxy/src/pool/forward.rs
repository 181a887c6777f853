//! A pod's request as a stream on a pooled HTTP/2 connection: the request
//! head rewritten for HTTP/2 (pure, below), the body pumped under the
//! stream's flow control, the response streamed back as it arrives (a
//! watch is a response that does not end).

use std::{
    future::poll_fn,
    pin::Pin,
    task::{Context, Poll, ready},
};

use bytes::Bytes;
use h2::{RecvStream, SendStream};
use http::{
    HeaderMap, HeaderName, HeaderValue, Method, Request, Response, Uri, Version,
    header::{CONNECTION, HOST, TE, TRANSFER_ENCODING, UPGRADE},
    request::Parts,
};
use http_body::{Body as _, Frame};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::{
    dial::{Body, BoxError, PoolError},
    upstream::Lease,
};

/// Whether a request needs its own connection: an HTTP/1.1 upgrade
/// (WebSocket, SPDY) or a CONNECT tunnel.
pub fn is_upgrade<B>(req: &Request<B>) -> bool {
    req.method() == Method::CONNECT
        || (req.version() <= Version::HTTP_11 && req.headers().contains_key(UPGRADE))
}

/// Remove the headers that describe one hop (RFC 9110 section 7.6.1): those
/// listed in `Connection`, and the connection-specific ones HTTP/2 forbids.
/// `TE: trailers` is the one `TE` value HTTP/2 allows. Everything else,
/// `Authorization` above all, passes untouched.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in [
        CONNECTION,
        TRANSFER_ENCODING,
        UPGRADE,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
    ] {
        headers.remove(name);
    }
    let te_trailers = headers
        .get_all(TE)
        .iter()
        .any(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    headers.remove(TE);
    if te_trailers {
        headers.insert(TE, HeaderValue::from_static("trailers"));
    }
}

/// The authority a request is for: its URI's (HTTP/2 `:authority`), else
/// its Host header (HTTP/1.1), else `fallback`.
pub fn authority(parts: &Parts, fallback: &str) -> String {
    parts
        .uri
        .authority()
        .map(|a| a.as_str().to_string())
        .or_else(|| {
            parts
                .headers
                .get(HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_string)
        })
        .unwrap_or_else(|| fallback.to_string())
}

/// The HTTP/2 head of a pod's request: `https://<authority><path>`, the
/// same method, the end-to-end headers.
pub fn h2_head(parts: &Parts, fallback: &str) -> Result<Request<()>, http::Error> {
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let uri: Uri = format!("https://{}{path}", authority(parts, fallback)).parse()?;
    let mut headers = parts.headers.clone();
    strip_hop_by_hop(&mut headers);
    // `:authority` carries it in HTTP/2.
    headers.remove(HOST);
    // The pod's 100-continue is answered on its own hop (hyper does so as
    // the body is read); HTTP/2 upstream it would only add a round trip.
    headers.remove(http::header::EXPECT);
    let mut req = Request::builder()
        .method(parts.method.clone())
        .uri(uri)
        .version(Version::HTTP_2)
        .body(())?;
    *req.headers_mut() = headers;
    Ok(req)
}

/// Why a request failed on the pool.
pub enum Failed {
    /// Nothing was sent (the connection was gone): safe to try another.
    Unsent(Box<Request<Incoming>>, PoolError),
    /// Failed after the request left.
    Sent(PoolError),
}

/// Send `req` as a stream on the leased connection; the response streams
/// back, holding the lease until its end.
pub async fn forward(
    req: Request<Incoming>,
    lease: Lease,
    fallback: &str,
) -> Result<Response<Body>, Failed> {
    let (parts, body) = req.into_parts();
    let head = h2_head(&parts, fallback).map_err(|e| Failed::Sent(e.into()))?;
    let end = body.is_end_stream();
    let sent = match lease.sender().ready().await {
        Ok(mut sender) => sender.send_request(head, end),
        Err(e) => Err(e),
    };
    let (response, send) = match sent {
        Ok(v) => v,
        Err(e) => {
            lease.broken();
            let req = Box::new(Request::from_parts(parts, body));
            return Err(Failed::Unsent(req, e.into()));
        }
    };
    if !end {
        tokio::spawn(pump(body, send));
    }
    let response = response.await.map_err(|e| Failed::Sent(e.into()))?;
    let (head, recv) = response.into_parts();
    let mut out = Response::new(
        RecvBody {
            recv,
            data_done: false,
            _lease: lease,
        }
        .boxed(),
    );
    *out.status_mut() = head.status;
    *out.headers_mut() = head.headers;
    Ok(out)
}

/// Copy the pod's request body onto the stream, no faster than the
/// server's window opens.
async fn pump(mut body: Incoming, mut send: SendStream<Bytes>) {
    loop {
        let frame = match body.frame().await {
            None => {
                let _ = send.send_data(Bytes::new(), true);
                return;
            }
            Some(Err(_)) => {
                // The pod went away mid-body: the server must not take a
                // truncated body for a whole one.
                send.send_reset(h2::Reason::CANCEL);
                return;
            }
            Some(Ok(f)) => f,
        };
        let frame = match frame.into_data() {
            Ok(mut data) => {
                while !data.is_empty() {
                    send.reserve_capacity(data.len());
                    match poll_fn(|cx| send.poll_capacity(cx)).await {
                        Some(Ok(0)) => continue,
                        Some(Ok(n)) => {
                            let chunk = data.split_to(n.min(data.len()));
                            if send.send_data(chunk, false).is_err() {
                                return;
                            }
                        }
                        // The stream was reset or the connection ended.
                        _ => return,
                    }
                }
                continue;
            }
            Err(frame) => frame,
        };
        if let Ok(trailers) = frame.into_trailers() {
            let _ = send.send_trailers(trailers);
            return;
        }
    }
}

/// A response body read from an HTTP/2 stream. Capacity is released as the
/// pod's side takes the data, so a pod that stops reading stops its stream
/// at one window, not the connection.
struct RecvBody {
    recv: RecvStream,
    data_done: bool,
    _lease: Lease,
}

impl http_body::Body for RecvBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if !this.data_done {
            match ready!(this.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = this.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e.into()))),
                None => this.data_done = true,
            }
        }
        match ready!(this.recv.poll_trailers(cx)) {
            Ok(Some(t)) => Poll::Ready(Some(Ok(Frame::trailers(t)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e.into()))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(req: Request<()>) -> Parts {
        req.into_parts().0
    }

    #[test]
    fn http1_request_becomes_an_http2_head_with_its_end_to_end_headers() {
        let p = parts(
            Request::get("/api/v1/pods?watch=1")
                .header(HOST, "kubernetes.default.svc")
                .header("authorization", "Bearer abc.def")
                .header(CONNECTION, "keep-alive, x-hop")
                .header("keep-alive", "timeout=5")
                .header("x-hop", "1")
                .header(TRANSFER_ENCODING, "chunked")
                .header(TE, "trailers")
                .header("accept", "application/json")
                .body(())
                .unwrap(),
        );
        let h = h2_head(&p, "api.example.com").unwrap();
        assert_eq!(
            h.uri().to_string(),
            "https://kubernetes.default.svc/api/v1/pods?watch=1"
        );
        assert_eq!(h.version(), Version::HTTP_2);
        let mut names: Vec<&str> = h.headers().keys().map(|k| k.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["accept", "authorization", "te"]);
        assert_eq!(h.headers()["authorization"], "Bearer abc.def");
    }

    #[test]
    fn authority_comes_from_the_uri_then_host_then_the_fallback() {
        let h2 = parts(Request::get("https://10.96.0.1/version").body(()).unwrap());
        assert_eq!(authority(&h2, "f"), "10.96.0.1");
        let bare = parts(
            Request::get("/")
                .version(Version::HTTP_10)
                .body(())
                .unwrap(),
        );
        assert_eq!(authority(&bare, "api.example.com"), "api.example.com");
        let te = parts(Request::get("/").header(TE, "gzip").body(()).unwrap());
        assert!(h2_head(&te, "f").unwrap().headers().get(TE).is_none());
    }

    #[test]
    fn upgrades_and_connect_need_their_own_connection() {
        let ws = Request::get("/exec")
            .header(CONNECTION, "Upgrade")
            .header(UPGRADE, "websocket")
            .body(())
            .unwrap();
        assert!(is_upgrade(&ws));
        let spdy = Request::post("/exec")
            .header(UPGRADE, "SPDY/3.1")
            .body(())
            .unwrap();
        assert!(is_upgrade(&spdy));
        assert!(is_upgrade(&Request::connect("x:1").body(()).unwrap()));
        assert!(!is_upgrade(&Request::get("/api").body(()).unwrap()));
    }
}
