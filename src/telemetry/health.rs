//! A minimal HTTP/1.1 admin server for `/healthz`, `/readyz` and `/metrics`:
//! three GET routes for probes and a scraper do not justify an HTTP stack.

use std::{future::Future, sync::Arc, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

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

/// Route a request line to (status, content type, body). Pure.
pub fn respond(request_line: &str, health: &dyn Health) -> (u16, &'static str, String) {
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or("");
    let path = parts.next().unwrap_or("").split('?').next().unwrap_or("");
    if method != "GET" && method != "HEAD" {
        return (405, "text/plain", "method not allowed\n".into());
    }
    match path {
        "/healthz" | "/livez" => (200, "text/plain", "ok\n".into()),
        "/readyz" if health.ready() => (200, "text/plain", "ready\n".into()),
        "/readyz" => (503, "text/plain", health.not_ready_reason()),
        // Two revisions of a hostNetwork pod share the admin port during a
        // surge rollout (SO_REUSEPORT) and the kernel hands a probe to either:
        // only the process of the revision asked for may answer ready.
        revision if revision.starts_with("/readyz/") => {
            let asked = &revision["/readyz/".len()..];
            match health.revision() {
                Some(own) if own == asked && health.ready() => {
                    (200, "text/plain", "ready\n".into())
                }
                Some(own) if own == asked => (503, "text/plain", health.not_ready_reason()),
                own => (
                    503,
                    "text/plain",
                    format!(
                        "revision {asked} is not this process (revision {})\n",
                        own.unwrap_or("none")
                    ),
                ),
            }
        }
        "/metrics" => (
            200,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            health.metrics(),
        ),
        _ => (404, "text/plain", "not found\n".into()),
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        503 => "Service Unavailable",
        _ => "Bad Request",
    }
}

/// Serve until `shutdown` resolves. Each request has 5 s to complete.
pub async fn serve(
    listener: TcpListener,
    health: Arc<dyn Health>,
    shutdown: impl Future<Output = ()>,
) {
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
                let health = health.clone();
                tokio::spawn(async move {
                    // A client that stalls must not hold a task forever.
                    let _ = tokio::time::timeout(Duration::from_secs(5), serve_one(stream, health)).await;
                });
            }
        }
    }
}

async fn serve_one(mut stream: TcpStream, health: Arc<dyn Health>) -> std::io::Result<()> {
    let mut buf = [0u8; 2048];
    let mut len = 0;
    // Read the request head; probes and scrapers send tiny ones.
    loop {
        let n = stream.read(&mut buf[len..]).await?;
        if n == 0 {
            return Ok(());
        }
        len += n;
        let head = &buf[..len];
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            break;
        }
        if len == buf.len() {
            let refusal = "HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
            return stream.write_all(refusal.as_bytes()).await;
        }
    }
    let head = String::from_utf8_lossy(&buf[..len]);
    let request_line = head.lines().next().unwrap_or("");
    let (status, content_type, body) = respond(request_line, health.as_ref());
    let head_only = request_line.starts_with("HEAD ");
    let response = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
        reason(status),
        body.len(),
        if head_only { "" } else { body.as_str() }
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn routes() {
        assert_eq!(respond("GET /healthz HTTP/1.1", &Fixed(false)).0, 200);
        assert_eq!(respond("GET /readyz HTTP/1.1", &Fixed(false)).0, 503);
        assert_eq!(respond("GET /readyz?verbose HTTP/1.1", &Fixed(true)).0, 200);
        assert_eq!(respond("GET /metrics HTTP/1.1", &Fixed(true)).2, "m 1\n");
        assert_eq!(respond("POST /healthz HTTP/1.1", &Fixed(true)).0, 405);
        assert_eq!(respond("GET /nope HTTP/1.1", &Fixed(true)).0, 404);
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
        let (code, _, body) = respond("GET /readyz/bbb HTTP/1.1", &old);
        assert_eq!(code, 503);
        assert!(body.contains("revision bbb is not this process (revision aaa)"));
        assert_eq!(respond("GET /readyz/aaa HTTP/1.1", &old).0, 200);
        assert_eq!(
            respond("GET /readyz/aaa HTTP/1.1", &Revision("aaa", false)).0,
            503
        );
        // A process started without a revision never vouches for one.
        assert_eq!(respond("GET /readyz/aaa HTTP/1.1", &Fixed(true)).0, 503);
    }
}
