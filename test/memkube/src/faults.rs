//! Testing hooks: the request log and fault injection (failed requests,
//! latency, dropped watch streams, and a seeded random mix of them).

use std::collections::HashMap;
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
    /// When it was answered (`None` for records read from elsewhere, such as
    /// a real API server's audit log): retries and their spacing can be told.
    pub at: Option<std::time::Instant>,
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

/// Seeded random faults on reads (get, list, watch) and writes; discovery is
/// never touched. Each request's fate is a hash of the seed, its verb and path
/// and how many requests of that verb and path came before: the same requests
/// meet the same faults however concurrent clients interleave.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomFaults {
    /// Seed of every decision.
    pub seed: u64,
    /// Share (0 to 1) of reads failed before they run.
    pub reads: f64,
    /// Share of writes failed before they run.
    pub writes: f64,
    /// Share of writes that run but whose reply is replaced by an error, as
    /// when a connection breaks after the commit: the client cannot tell.
    pub lost_replies: f64,
    /// Status codes the failures pick from, evenly (500 when empty).
    pub codes: Vec<u16>,
    /// Share of requests delayed, each by up to `max_latency`.
    pub slow: f64,
    /// Longest injected delay.
    pub max_latency: Duration,
}

/// What the random faults decided for one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fate {
    /// Delay before the request is handled.
    pub delay: Duration,
    /// Fail with this code without running the request.
    pub fail: Option<u16>,
    /// Run the request, then answer with this code instead of the result.
    pub lose_reply: Option<u16>,
}

/// How many random faults a server injected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Requests failed before they ran.
    pub failed: u64,
    /// Writes that ran but whose reply was replaced by an error.
    pub lost_replies: u64,
    /// Requests delayed.
    pub delayed: u64,
}

#[derive(Debug, Default)]
struct RandomState {
    faults: Option<RandomFaults>,
    seen: HashMap<(String, String), u64>,
    counts: FaultCounts,
}

/// SplitMix64: small, well mixed, enough for test decisions.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// FNV-1a of the request's identity, so the fate does not depend on HashMap seeds.
fn identity(verb: &str, path: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in verb.bytes().chain([0]).chain(path.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl RandomFaults {
    /// The fate of the `n`-th request (from 0) of `verb` on `path`.
    pub fn fate(&self, verb: &str, path: &str, n: u64) -> Fate {
        let write = matches!(
            verb,
            "create" | "update" | "patch" | "apply" | "delete" | "deletecollection"
        );
        let read = matches!(verb, "get" | "list" | "watch");
        if !write && !read {
            return Fate::default();
        }
        let mut state = mix(self.seed ^ mix(identity(verb, path) ^ mix(n)));
        let mut draw = || {
            state = mix(state);
            // 53 random bits as a float in [0, 1).
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let (slow, delay, fail, code, lose) = (draw(), draw(), draw(), draw(), draw());
        let code = match self.codes.len() {
            0 => 500,
            len => self.codes[((code * len as f64) as usize).min(len - 1)],
        };
        let fail_share = if write { self.writes } else { self.reads };
        let fail = fail < fail_share;
        Fate {
            delay: if slow < self.slow {
                self.max_latency.mul_f64(delay)
            } else {
                Duration::ZERO
            },
            fail: fail.then_some(code),
            lose_reply: (write && !fail && lose < self.lost_replies).then_some(code),
        }
    }
}

/// Request log and active faults of one server.
#[derive(Debug)]
pub struct Hooks {
    log: Mutex<Vec<RequestRecord>>,
    failures: Mutex<Vec<Failure>>,
    latency: Mutex<Vec<(RequestMatch, Duration)>>,
    random: Mutex<RandomState>,
    drop_watches: watch::Sender<u64>,
}

impl Default for Hooks {
    fn default() -> Self {
        Self {
            log: Mutex::default(),
            failures: Mutex::default(),
            latency: Mutex::default(),
            random: Mutex::default(),
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

    /// Removes all failures and latencies, the random ones included.
    pub fn clear_faults(&self) {
        lock(&self.failures).clear();
        lock(&self.latency).clear();
        lock(&self.random).faults = None;
    }

    /// Turns random faults on (or changes them); `None` turns them off.
    /// Counts and per-request numbering go on across changes.
    pub fn set_random_faults(&self, faults: Option<RandomFaults>) {
        lock(&self.random).faults = faults;
    }

    /// How many random faults were injected so far.
    pub fn random_fault_counts(&self) -> FaultCounts {
        lock(&self.random).counts
    }

    /// The random fate of this request (nothing when random faults are off).
    pub fn random_fate(&self, verb: &str, path: &str) -> Fate {
        let mut random = lock(&self.random);
        let RandomState {
            faults,
            seen,
            counts,
        } = &mut *random;
        let Some(faults) = faults else {
            return Fate::default();
        };
        let n = seen
            .entry((verb.to_string(), path.to_string()))
            .or_default();
        let fate = faults.fate(verb, path, *n);
        *n += 1;
        counts.failed += u64::from(fate.fail.is_some());
        counts.lost_replies += u64::from(fate.lose_reply.is_some());
        counts.delayed += u64::from(!fate.delay.is_zero());
        fate
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

#[cfg(test)]
mod tests {
    use super::*;

    fn faults() -> RandomFaults {
        RandomFaults {
            seed: 7,
            reads: 0.2,
            writes: 0.2,
            lost_replies: 0.1,
            codes: vec![500, 429],
            slow: 0.5,
            max_latency: Duration::from_millis(10),
        }
    }

    #[test]
    fn the_same_request_meets_the_same_fate() {
        let f = faults();
        for n in 0..100 {
            assert_eq!(f.fate("apply", "/a", n), f.fate("apply", "/a", n));
        }
        let other = RandomFaults {
            seed: 8,
            ..f.clone()
        };
        assert!((0..100).any(|n| f.fate("get", "/a", n) != other.fate("get", "/a", n)));
    }

    #[test]
    fn shares_are_roughly_respected_and_discovery_is_spared() {
        let f = faults();
        let fates: Vec<Fate> = (0..10_000).map(|n| f.fate("apply", "/x", n)).collect();
        let failed = fates.iter().filter(|f| f.fail.is_some()).count();
        let lost = fates.iter().filter(|f| f.lose_reply.is_some()).count();
        assert!((1_700..2_300).contains(&failed), "{failed}");
        assert!((500..1_100).contains(&lost), "{lost}");
        assert!(fates.iter().all(|f| f.delay <= Duration::from_millis(10)));
        assert!(
            fates
                .iter()
                .filter_map(|f| f.fail)
                .all(|c| c == 500 || c == 429)
        );
        assert!((0..1_000).all(|n| f.fate("get", "/x", n).lose_reply.is_none()));
        assert!((0..1_000).all(|n| f.fate("discovery", "/apis", n) == Fate::default()));
    }

    #[test]
    fn hooks_count_what_they_inject() {
        let hooks = Hooks::default();
        assert_eq!(hooks.random_fate("get", "/a"), Fate::default());
        hooks.set_random_faults(Some(faults()));
        let fates: Vec<Fate> = (0..200).map(|_| hooks.random_fate("patch", "/a")).collect();
        let counts = hooks.random_fault_counts();
        assert_eq!(
            counts.failed,
            fates.iter().filter(|f| f.fail.is_some()).count() as u64
        );
        assert_eq!(fates[5], faults().fate("patch", "/a", 5));
        hooks.clear_faults();
        assert_eq!(hooks.random_fate("patch", "/a"), Fate::default());
    }
}
