//! Watch streams: newline-delimited JSON events, selector transitions turned
//! into ADDED/DELETED as the API server's watch cache does, bookmarks, and
//! `410 Gone` for a resourceVersion older than the history ring.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, watch};

use crate::discovery;
use crate::error::ApiError;
use crate::registry::ResourceSpec;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Event, EventType, Store, Subscription};

/// What one watch request asked for.
#[derive(Debug, Clone)]
pub struct WatchRequest {
    /// Resource watched.
    pub spec: ResourceSpec,
    /// Namespace, or all.
    pub namespace: Option<String>,
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
    /// `allowWatchBookmarks`.
    pub bookmarks: bool,
    /// `sendInitialEvents`: end the initial ADDED events with a bookmark.
    pub initial_events_end: bool,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
    /// Render objects as single-row Tables (`kubectl get -w`).
    pub table: bool,
    /// Render objects as PartialObjectMetadata.
    pub metadata_only: bool,
    /// How often to send bookmarks.
    pub bookmark_interval: Duration,
}

/// Starts the task that writes the watch stream; returns the body chunks.
pub fn start(
    store: Arc<Store>,
    req: WatchRequest,
    sub: Result<Subscription, ApiError>,
    mut drops: watch::Receiver<u64>,
) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    tokio::spawn(async move {
        let mut sub = match sub {
            Ok(s) => s,
            Err(e) => {
                // An expired resourceVersion is reported in-stream, as the watch cache does.
                let _ = tx.send(line("ERROR", e.to_status())).await;
                return;
            }
        };
        let mut w = Writer {
            req: &req,
            tx: &tx,
            first: true,
        };
        for ev in std::mem::take(&mut sub.initial) {
            if !w.event(&ev).await {
                return;
            }
        }
        if req.initial_events_end && !w.bookmark(store.current_rv(), true).await {
            return;
        }
        let deadline = req.timeout.map(|t| tokio::time::Instant::now() + t);
        let mut tick = tokio::time::interval(req.bookmark_interval);
        tick.tick().await;
        drops.mark_unchanged();
        loop {
            tokio::select! {
                ev = sub.rx.recv() => match ev {
                    Ok(ev) => {
                        if ev.rv > sub.rv && !w.event(&ev).await {
                            return;
                        }
                    }
                    // A watcher that fell behind is closed; the client resumes or relists.
                    Err(broadcast::error::RecvError::Lagged(_)) | Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = tick.tick(), if req.bookmarks => {
                    // Everything up to `rv` was sent to the channel before we read it.
                    let rv = store.current_rv();
                    while let Ok(ev) = sub.rx.try_recv() {
                        if ev.rv > sub.rv && !w.event(&ev).await {
                            return;
                        }
                    }
                    if !w.bookmark(rv, false).await {
                        return;
                    }
                }
                _ = sleep_until(deadline) => return,
                _ = drops.changed() => return,
                _ = tx.closed() => return,
            }
        }
    });
    rx
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

struct Writer<'a> {
    req: &'a WatchRequest,
    tx: &'a mpsc::Sender<Bytes>,
    first: bool,
}

impl Writer<'_> {
    fn matches(&self, obj: &Value) -> bool {
        let ns_ok =
            self.req.namespace.as_deref().is_none_or(|n| {
                obj.pointer("/metadata/namespace").and_then(Value::as_str) == Some(n)
            });
        ns_ok && self.req.labels.matches(obj) && self.req.fields.matches(obj)
    }

    /// Sends one event; false when the client is gone.
    async fn event(&mut self, ev: &Event) -> bool {
        let now = self.matches(&ev.object);
        let before = ev.previous.as_deref().is_some_and(|p| self.matches(p));
        let kind = match ev.kind {
            EventType::Added if now => "ADDED",
            EventType::Modified if now && before => "MODIFIED",
            EventType::Modified if now => "ADDED",
            EventType::Modified if before => "DELETED",
            EventType::Deleted if now || before => "DELETED",
            _ => return true,
        };
        let obj = self.render(&ev.object);
        self.tx.send(line(kind, obj)).await.is_ok()
    }

    fn render(&mut self, obj: &Value) -> Value {
        let mut obj = obj.clone();
        let api_version = self.req.spec.api_version();
        if obj.get("apiVersion").and_then(Value::as_str) != Some(api_version.as_str()) {
            obj["apiVersion"] = json!(api_version);
        }
        if self.req.table {
            let first = std::mem::replace(&mut self.first, false);
            return discovery::table(&self.req.spec, &[&obj], None, None, first);
        }
        if self.req.metadata_only {
            return crate::http::partial_metadata(&obj);
        }
        obj
    }

    async fn bookmark(&mut self, rv: u64, initial_end: bool) -> bool {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"kind": self.req.spec.kind, "apiVersion": self.req.spec.api_version(), "metadata": meta});
        self.tx.send(line("BOOKMARK", obj)).await.is_ok()
    }
}

fn line(kind: &str, object: Value) -> Bytes {
    let mut s = json!({"type": kind, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}
