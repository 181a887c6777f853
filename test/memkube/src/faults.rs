//! Testing hooks: the request log and fault injection (failed requests,
//! latency, dropped watch streams).

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

/// One served request, as recorded in the request log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// Kubernetes verb: get, list, watch, create, update, patch, apply, delete,
    /// deletecollection, or `discovery` for everything else.
    pub verb: String,
    /// HTTP method.
    pub method: String,
    /// URL path.
    pub path: String,
    /// Raw query string.
    pub query: String,
    /// `fieldManager` of a write, if given.
    pub field_manager: Option<String>,
    /// `User-Agent` header.
    pub user_agent: String,
    /// Response status code.
    pub status: u16,
}

impl RequestRecord {
    /// Whether the request asked to change something (even if it failed or was a no-op).
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "apply" | "delete" | "deletecollection"
        )
    }
}

/// Which requests a fault applies to: a verb (`*` for any) and a path substring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestMatch {
    /// Verb as in [`RequestRecord::verb`], or `*`.
    pub verb: String,
    /// Substring the path must contain (empty matches all).
    pub path_contains: String,
}

impl RequestMatch {
    /// Matches `verb` (or `*`) on paths containing `path_contains`.
    pub fn new(verb: &str, path_contains: &str) -> Self {
        Self {
            verb: verb.to_string(),
            path_contains: path_contains.to_string(),
        }
    }

    fn matches(&self, verb: &str, path: &str) -> bool {
        (self.verb == "*" || self.verb == verb) && path.contains(&self.path_contains)
    }
}

#[derive(Debug)]
struct Failure {
    matcher: RequestMatch,
    remaining: usize,
    code: u16,
}

/// Request log and active faults of one server.
#[derive(Debug)]
pub struct Hooks {
    log: Mutex<Vec<RequestRecord>>,
    failures: Mutex<Vec<Failure>>,
    latency: Mutex<Vec<(RequestMatch, Duration)>>,
    drop_watches: watch::Sender<u64>,
}

impl Default for Hooks {
    fn default() -> Self {
        Self {
            log: Mutex::default(),
            failures: Mutex::default(),
            latency: Mutex::default(),
            drop_watches: watch::channel(0).0,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Hooks {
    /// Appends to the request log.
    pub fn record(&self, r: RequestRecord) {
        lock(&self.log).push(r);
    }

    /// A copy of the request log.
    pub fn log(&self) -> Vec<RequestRecord> {
        lock(&self.log).clone()
    }

    /// Empties the request log.
    pub fn clear_log(&self) {
        lock(&self.log).clear();
    }

    /// Fails the next `n` matching requests with `code`.
    pub fn fail_next(&self, n: usize, matcher: RequestMatch, code: u16) {
        lock(&self.failures).push(Failure {
            matcher,
            remaining: n,
            code,
        });
    }

    /// Delays every matching request by `delay`.
    pub fn add_latency(&self, matcher: RequestMatch, delay: Duration) {
        lock(&self.latency).push((matcher, delay));
    }

    /// Removes all failures and latencies.
    pub fn clear_faults(&self) {
        lock(&self.failures).clear();
        lock(&self.latency).clear();
    }

    /// Closes every open watch stream (clients see the connection end).
    pub fn drop_watches(&self) {
        self.drop_watches.send_modify(|n| *n += 1);
    }

    /// A receiver that changes when [`Hooks::drop_watches`] is called.
    pub fn watch_drops(&self) -> watch::Receiver<u64> {
        self.drop_watches.subscribe()
    }

    /// The injected failure for this request, consuming one use of it.
    pub fn take_failure(&self, verb: &str, path: &str) -> Option<u16> {
        let mut f = lock(&self.failures);
        let hit = f
            .iter_mut()
            .find(|f| f.remaining > 0 && f.matcher.matches(verb, path))?;
        hit.remaining -= 1;
        let code = hit.code;
        f.retain(|f| f.remaining > 0);
        Some(code)
    }

    /// Total injected latency for this request.
    pub fn latency(&self, verb: &str, path: &str) -> Duration {
        lock(&self.latency)
            .iter()
            .filter(|(m, _)| m.matches(verb, path))
            .map(|(_, d)| *d)
            .sum()
    }
}
