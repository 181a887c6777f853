//! Admin endpoint: `/healthz`, `/readyz`, `/metrics` over plain HTTP/1.1.
//!
//! Hand-written on purpose: three GET routes for probes and a scraper do not
//! justify an HTTP stack in a per-node binary that must stay small.

use std::{sync::Arc, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

use super::server::Shared;

/// Route a request line to (status, content type, body). Pure.
pub fn respond(
    request_line: &str,
    ready: bool,
    metrics: impl FnOnce() -> String,
) -> (u16, &'static str, String) {
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or("");
    let target = parts.next().unwrap_or("");
    let path = target.split('?').next().unwrap_or("");
    if method != "GET" && method != "HEAD" {
        return (405, "text/plain", "method not allowed\n".into());
    }
    match path {
        "/healthz" | "/livez" => (200, "text/plain", "ok\n".into()),
        "/readyz" if ready => (200, "text/plain", "ready\n".into()),
        "/readyz" => (
            503,
            "text/plain",
            "not ready: not listening or no healthy upstream\n".into(),
        ),
        "/metrics" => (
            200,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics(),
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

async fn serve_one(mut s: TcpStream, shared: Arc<Shared>) -> std::io::Result<()> {
    let mut buf = [0u8; 2048];
    let mut n = 0;
    // Read until the end of the request head; probes send tiny requests.
    loop {
        let m = s.read(&mut buf[n..]).await?;
        if m == 0 {
            return Ok(());
        }
        n += m;
        if buf[..n].windows(4).any(|w| w == b"\r\n\r\n")
            || buf[..n].windows(2).any(|w| w == b"\n\n")
        {
            break;
        }
        if n == buf.len() {
            s.write_all(b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n")
                .await?;
            return Ok(());
        }
    }
    let head = String::from_utf8_lossy(&buf[..n]);
    let line = head.lines().next().unwrap_or("");
    let (status, ctype, body) = respond(line, shared.is_ready(), || shared.metrics.encode());
    let head_only = line.starts_with("HEAD ");
    let resp = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        reason(status),
        body.len()
    );
    s.write_all(resp.as_bytes()).await?;
    if !head_only {
        s.write_all(body.as_bytes()).await?;
    }
    s.shutdown().await
}

/// Serve until the process ends. Each request has 5 s to complete.
pub async fn run(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((s, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(5), serve_one(s, shared)).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(respond("GET /healthz HTTP/1.1", false, String::new).0, 200);
        assert_eq!(respond("GET /readyz HTTP/1.1", false, String::new).0, 503);
        assert_eq!(
            respond("GET /readyz?verbose HTTP/1.1", true, String::new).0,
            200
        );
        let (s, _, body) = respond("GET /metrics HTTP/1.1", true, || "x 1\n".into());
        assert_eq!((s, body.as_str()), (200, "x 1\n"));
        assert_eq!(respond("POST /healthz HTTP/1.1", true, String::new).0, 405);
        assert_eq!(respond("GET /nope HTTP/1.1", true, String::new).0, 404);
        assert_eq!(respond("", true, String::new).0, 405);
    }
}
