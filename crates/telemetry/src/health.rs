//! The admin server for `/healthz`, `/livez`, `/readyz` and `/metrics`:
//! hyper's HTTP/1.1 server (linked already for the proxy's pooled mode),
//! one request a connection, as probes and scrapers make them.

use std::{convert::Infallible, future::Future, sync::Arc, time::Duration};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::{body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

/// What the admin endpoints report.
pub trait Health: Send + Sync + 'static {
    /// `/readyz` answers 200 only when this is true.
    fn ready(&self) -> bool;
    /// Why not ready (the body of a 503).
    fn not_ready_reason(&self) -> String {
        "not ready\n".into()
    }
    /// Prometheus text exposition for `/metrics`.
    fn metrics(&self) -> String;
    /// The pod template revision this process runs (`/readyz/<revision>`).
    fn revision(&self) -> Option<&str> {
        None
    }
}

/// Route a request's method and path (without its query) to (status,
/// content type, body). Pure.
pub fn respond(
    method: &Method,
    path: &str,
    health: &dyn Health,
) -> (StatusCode, &'static str, String) {
    if method != Method::GET && method != Method::HEAD {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "method not allowed\n".into(),
        );
    }
    match path {
        "/healthz" | "/livez" => (StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" if health.ready() => (StatusCode::OK, "text/plain", "ready\n".into()),
        "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            health.not_ready_reason(),
        ),
        // Two revisions of a hostNetwork pod share the admin port during a
        // surge rollout (SO_REUSEPORT) and the kernel hands a probe to either:
        // only the process of the revision asked for may answer ready.
        revision if revision.starts_with("/readyz/") => {
            let asked = &revision["/readyz/".len()..];
            match health.revision() {
                Some(own) if own == asked && health.ready() => {
                    (StatusCode::OK, "text/plain", "ready\n".into())
                }
                Some(own) if own == asked => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    health.not_ready_reason(),
                ),
                own => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    format!(
                        "revision {asked} is not this process (revision {})\n",
                        own.unwrap_or("none")
                    ),
                ),
            }
        }
        "/metrics" => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            health.metrics(),
        ),
        _ => (StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

/// How long one connection may take, from accept to the answer sent.
const DEADLINE: Duration = Duration::from_secs(5);

/// The largest request head (request line and headers) read: probes and
/// scrapers send a few hundred bytes; a larger head is refused with 431.
const MAX_HEAD: usize = 2048;

/// Serve until `shutdown` resolves. Each request has 5 s to complete.
pub async fn serve(
    listener: TcpListener,
    health: Arc<dyn Health>,
    shutdown: impl Future<Output = ()>,
) {
    serve_within(listener, health, shutdown, DEADLINE).await
}

async fn serve_within(
    listener: TcpListener,
    health: Arc<dyn Health>,
    shutdown: impl Future<Output = ()>,
    deadline: Duration,
) {
    let mut http = http1::Builder::new();
    http.keep_alive(false)
        .max_header_size(MAX_HEAD)
        // `deadline` bounds the whole connection, the head included; hyper's
        // own header timeout would need a timer for nothing more.
        .header_read_timeout(None)
        .auto_date_header(false);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    // Out of file descriptors, say: back off instead of spinning.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                tokio::spawn(serve_one(http.clone(), stream, health.clone(), deadline));
            }
        }
    }
}

/// Answer the one request of a connection. A client that stalls, sending
/// its request or reading the answer, ends its own connection at `deadline`.
async fn serve_one(
    http: http1::Builder,
    stream: TcpStream,
    health: Arc<dyn Health>,
    deadline: Duration,
) {
    let service = service_fn(move |request: Request<Incoming>| {
        let response = response(&request, health.as_ref());
        async move { Ok::<_, Infallible>(response) }
    });
    let connection = http.serve_connection(TokioIo::new(stream), service);
    let _ = tokio::time::timeout(deadline, connection).await;
}

/// The answer to `request`. hyper sends a HEAD's answer without its body,
/// with the length a GET's would have.
fn response(request: &Request<Incoming>, health: &dyn Health) -> Response<Full<Bytes>> {
    let (status, content_type, body) = respond(request.method(), request.uri().path(), health);
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Said to HTTP/1.0 clients too (hyper adds it for HTTP/1.1 only).
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    struct Fixed(bool);
    impl Health for Fixed {
        fn ready(&self) -> bool {
            self.0
        }
        fn metrics(&self) -> String {
            "m 1\n".into()
        }
    }

    fn get(path: &str, health: &dyn Health) -> (StatusCode, &'static str, String) {
        respond(&Method::GET, path, health)
    }

    #[test]
    fn routes() {
        assert_eq!(get("/healthz", &Fixed(false)).0, 200);
        assert_eq!(get("/readyz", &Fixed(false)).0, 503);
        assert_eq!(get("/readyz", &Fixed(true)).0, 200);
        assert_eq!(get("/metrics", &Fixed(true)).2, "m 1\n");
        assert_eq!(respond(&Method::POST, "/healthz", &Fixed(true)).0, 405);
        assert_eq!(get("/nope", &Fixed(true)).0, 404);
    }

    struct Revision(&'static str, bool);
    impl Health for Revision {
        fn ready(&self) -> bool {
            self.1
        }
        fn metrics(&self) -> String {
            String::new()
        }
        fn revision(&self) -> Option<&str> {
            Some(self.0)
        }
    }

    #[test]
    fn a_revision_probe_is_ready_only_from_the_process_of_that_revision() {
        // The old pod of a surge rollout answers the new pod's probe: not ready.
        let old = Revision("aaa", true);
        let (code, _, body) = get("/readyz/bbb", &old);
        assert_eq!(code, 503);
        assert!(body.contains("revision bbb is not this process (revision aaa)"));
        assert_eq!(get("/readyz/aaa", &old).0, 200);
        assert_eq!(get("/readyz/aaa", &Revision("aaa", false)).0, 503);
        // A process started without a revision never vouches for one.
        assert_eq!(get("/readyz/aaa", &Fixed(true)).0, 503);
    }

    /// A server on a free local port, serving until the test ends.
    async fn start(health: impl Health, deadline: Duration) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve_within(
            listener,
            Arc::new(health),
            std::future::pending(),
            deadline,
        ));
        addr
    }

    /// What the server wrote on one connection until it closed it.
    struct Answer {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    }

    impl Answer {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        }
    }

    /// Send `request` on a new connection and read until the server closes
    /// it (a reset after the answer, as when the server leaves part of an
    /// oversized head unread, ends the read too).
    async fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> Answer {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(request).await.unwrap();
        let mut raw = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
                .await
                .expect("the server answers and closes the connection");
            match read {
                Ok(0) | Err(_) => break,
                Ok(n) => raw.extend_from_slice(&chunk[..n]),
            }
        }
        let raw = String::from_utf8(raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").expect("a complete head");
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap().split(' ').nth(1).unwrap();
        Answer {
            status: status.parse().unwrap(),
            headers: lines
                .map(|l| {
                    let (n, v) = l.split_once(':').unwrap();
                    (n.to_string(), v.trim().to_string())
                })
                .collect(),
            body: body.to_string(),
        }
    }

    #[tokio::test]
    async fn answers_probes_and_scrapers_over_http() {
        let addr = start(Fixed(true), DEADLINE).await;
        let get = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: admin\r\n\r\n");

        let ok = exchange(addr, get("/healthz").as_bytes()).await;
        assert_eq!((ok.status, ok.body.as_str()), (200, "ok\n"));
        assert_eq!(ok.header("content-type"), Some("text/plain"));
        assert_eq!(ok.header("content-length"), Some("3"));
        // One request a connection: the server closes it after the answer.
        assert_eq!(ok.header("connection"), Some("close"));
        assert_eq!(exchange(addr, get("/livez").as_bytes()).await.status, 200);

        let ready = exchange(addr, get("/readyz?verbose").as_bytes()).await;
        assert_eq!((ready.status, ready.body.as_str()), (200, "ready\n"));

        let metrics = exchange(addr, get("/metrics").as_bytes()).await;
        assert_eq!((metrics.status, metrics.body.as_str()), (200, "m 1\n"));
        assert_eq!(
            metrics.header("content-type"),
            Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
        );
        // HEAD: the length of the body a GET would get, and no body.
        let head = exchange(addr, b"HEAD /metrics HTTP/1.1\r\nHost: admin\r\n\r\n").await;
        assert_eq!(head.status, 200);
        assert_eq!(head.header("content-length"), Some("4"));
        assert_eq!(head.body, "");
        // HTTP/1.0 without a Host header, as a bare scraper sends it.
        let bare = exchange(addr, b"GET /metrics HTTP/1.0\r\n\r\n").await;
        assert_eq!((bare.status, bare.body.as_str()), (200, "m 1\n"));

        let post = b"POST /healthz HTTP/1.1\r\nHost: admin\r\ncontent-length: 0\r\n\r\n";
        let refused = exchange(addr, post).await;
        assert_eq!(
            (refused.status, refused.body.as_str()),
            (405, "method not allowed\n")
        );
        let missing = exchange(addr, get("/nope").as_bytes()).await;
        assert_eq!(
            (missing.status, missing.body.as_str()),
            (404, "not found\n")
        );

        let not_ready = start(Fixed(false), DEADLINE).await;
        let answer = exchange(not_ready, get("/readyz").as_bytes()).await;
        assert_eq!((answer.status, answer.body.as_str()), (503, "not ready\n"));
    }

    #[tokio::test]
    async fn a_head_over_2048_bytes_is_refused() {
        let addr = start(Fixed(true), DEADLINE).await;
        // A complete head of `size` bytes, padded by one header.
        let head = |size: usize| {
            let opening = "GET /healthz HTTP/1.1\r\nHost: admin\r\nx-pad: ";
            let ending = "\r\n\r\n";
            format!(
                "{opening}{}{ending}",
                "a".repeat(size - opening.len() - ending.len())
            )
        };
        assert_eq!(exchange(addr, head(2048).as_bytes()).await.status, 200);
        assert_eq!(exchange(addr, head(2049).as_bytes()).await.status, 431);
        // Never ended: refused once 2048 bytes have come.
        let endless = format!("GET /healthz HTTP/1.1\r\nx-pad: {}", "a".repeat(2048));
        let answer = exchange(addr, &endless.as_bytes()[..2048]).await;
        assert_eq!(answer.status, 431);
    }

    #[tokio::test]
    async fn a_stalled_client_ends_only_its_own_connection() {
        let deadline = Duration::from_millis(300);
        let addr = start(Fixed(true), deadline).await;
        let mut stalled = TcpStream::connect(addr).await.unwrap();
        stalled
            .write_all(b"GET /healthz HTTP/1.1\r\n")
            .await
            .unwrap();
        let other = exchange(addr, b"GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n").await;
        assert_eq!(other.status, 200);
        // Past the deadline, the stalled connection is closed unanswered.
        let started = std::time::Instant::now();
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), stalled.read_to_end(&mut rest))
            .await
            .expect("the stalled connection is closed");
        assert!(read.is_err() || rest.is_empty(), "answered: {rest:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn serving_ends_with_shutdown() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, Arc::new(Fixed(true)), async {
            let _ = stopped.await;
        }));
        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("serve returns once shutdown resolves")
            .unwrap();
    }
}
