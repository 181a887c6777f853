//! Hostile TLS clients against the reencrypt path, where the proxy
//! terminates the pod's TLS itself: a pod's TLS stack that misbehaves, by
//! bug or on purpose, must cost that one connection (ended with the alert
//! RFC 8446 or rustls gives it) and never the process every other pod on
//! the node goes through, nor its memory.
//!
//! The client is `hostile.py`, on tlslite-ng (the library tlsfuzzer is
//! built on), in its own virtualenv installed by `hack/install-test-deps.sh`
//! (`hack/tls-test-requirements.txt`); without it these tests fail, like
//! the rest of the data-path tests without their peers. After each hostile
//! case the proxy must still run, have logged no panic (a panic ends only
//! its connection, but it is a bug a peer can reach; built with
//! `panic = "abort"`, as releases were, it ended the process) and serve a
//! normal request.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::world::{self, INGRESS, Ingress, SERVICE_IP, World};

/// tlslite-ng's interpreter, by path: its virtualenv is the tests' own.
const TLS_PYTHON: &str = "/opt/hcp-ingress-tls/bin/python3";
const DRIVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/test/proxy_e2e/hostile.py");

fn require_tlslite() {
    let ok = Command::new(TLS_PYTHON)
        .args(["-c", "import tlslite, kyber_py"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "{TLS_PYTHON} with tlslite-ng and kyber-py is missing: run hack/install-test-deps.sh"
    );
}

/// A world whose proxy reencrypts: the pod's TLS ends at the proxy.
fn world() -> World {
    require_tlslite();
    let mut w = World::new(Ingress::Haproxy);
    w.start_proxy("reencrypt", &INGRESS, "");
    w
}

fn driver(w: &World, case: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args([
        "netns", "exec", &w.pod, TLS_PYTHON, DRIVER, case, SERVICE_IP, "443",
    ])
    .args(args);
    c
}

/// Run one case of the driver from the pod; its JSON report.
fn hostile(w: &World, case: &str, args: &[&str]) -> Value {
    let out = driver(w, case, args).output().unwrap();
    let report = serde_json::from_slice::<Value>(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "{case} {args:?}: driver output: {}\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            w.logs()
        )
    });
    eprintln!("{report}");
    report
}

/// One hostile case, then the check that the proxy survived it.
fn attack(w: &mut World, case: &str, args: &[&str]) -> Value {
    let r = hostile(w, case, args);
    assert_survived(w, &format!("{}: {r}", [&[case], args].concat().join(" ")));
    r
}

/// The process runs and never panicked: checked first after each hostile
/// connection, as the failure that matters most.
fn assert_survived(w: &mut World, after: &str) {
    assert!(
        w.running("proxy"),
        "the proxy died after {after}\n{}",
        w.logs()
    );
    let log = w.log("proxy");
    assert!(
        !log.contains("panicked"),
        "the proxy panicked after {after} (a build that aborts would have died):\n{}",
        w.logs()
    );
}

/// After the hostile connections: the process serves both a fresh
/// tlslite client and the ordinary pod client.
fn still_serving(w: &mut World, after: &str) {
    assert_survived(w, after);
    let r = hostile(w, "get", &[]);
    assert_eq!(r["status"], 200, "a request after {after}: {r}");
    let r = w.get_service();
    assert_eq!(r["status"], 200, "a request after {after}: {r}");
}

/// How the proxy ended a hostile connection.
fn end(r: &Value) -> &Value {
    &r["end"]
}

/// What a sub-case expects of the driver's report: `Err` says what
/// happened instead, so that a test reports all its failing sub-cases.
type Expect = Result<(), String>;

/// Ended by this fatal alert after a complete handshake.
fn alert(r: &Value, alert: &str) -> Expect {
    if r["handshake"] != true {
        return Err(format!("the handshake failed: {r}"));
    }
    let e = end(r);
    if e["kind"] != "alert" || e["alert"] != alert || e["level"] != "fatal" {
        return Err(format!("expected a fatal {alert} alert: {r}"));
    }
    Ok(())
}

/// Ended as TLS ends a connection: a fatal alert or a close, never a bare
/// reset with nothing before it, never left open.
fn ended_cleanly(r: &Value) -> Expect {
    let kind = end(r)["kind"].as_str().unwrap_or_default();
    let clean = match kind {
        "alert" => end(r)["level"] == "fatal",
        "eof" | "close_notify" => true,
        _ => false,
    };
    if clean {
        Ok(())
    } else {
        Err(format!("ended by {kind}, not a TLS alert or close: {r}"))
    }
}

/// Ended after a complete handshake, by `alert` or by a close without one:
/// for the two violations rustls ends without an alert (its own buffered
/// connections do the same), a close or a reset (the peer was still
/// sending) is the answer; never left open, never a crash.
fn alert_or_closed(r: &Value, alert: &str) -> Expect {
    if r["handshake"] != true {
        return Err(format!("the handshake failed: {r}"));
    }
    let e = end(r);
    match e["kind"].as_str().unwrap_or_default() {
        "alert" if e["alert"] == alert && e["level"] == "fatal" => Ok(()),
        "eof" | "reset" => Ok(()),
        _ => Err(format!("expected a fatal {alert} alert or a close: {r}")),
    }
}

/// Handshake in `version`, then a GET answered.
fn works(r: &Value, version: &str) -> Expect {
    if r["handshake"] != true {
        return Err(format!("the handshake failed: {r}"));
    }
    if r["version"] != version || r["status"] != 200 {
        return Err(format!("expected {version} and a 200: {r}"));
    }
    Ok(())
}

/// Every sub-case's verdict, failing with all those that failed.
fn verdict(results: Vec<(String, Expect)>) {
    let failed: Vec<String> = results
        .into_iter()
        .filter_map(|(what, e)| e.err().map(|e| format!("{what}: {e}")))
        .collect();
    assert!(failed.is_empty(), "\n{}", failed.join("\n"));
}

/// Resident memory of a process in KiB (`VmRSS`).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A Finished whose declared length passes 0xFFFF, over five full records
/// (tlsfuzzer test-tls13-finished). rustls refuses it while deframing; a
/// proxy that then asks rustls for the queued alert with nothing more to
/// read made rustls panic, and a build that aborted on a panic died.
#[test]
fn an_oversized_fragmented_finished_ends_that_connection_only() {
    let mut w = world();
    let r = attack(&mut w, "oversized-finished", &[]);
    verdict(vec![(
        "an oversized Finished".into(),
        if r["handshake"] == true {
            ended_cleanly(&r)
        } else {
            Err(format!("the handshake failed before the Finished: {r}"))
        },
    )]);
    still_serving(&mut w, "an oversized Finished");
}

/// A KeyUpdate in two records in the same segment as the Finished: rustls
/// may hold the first half when the handshake ends, and the record layer
/// after it must get it (tlsfuzzer test-tls13-keyupdate).
#[test]
fn a_fragmented_key_update_with_the_finished() {
    let mut w = world();
    // Whole and legal: the GET behind it is answered.
    let whole = attack(&mut w, "keyupdate-fragmented", &[]);
    // Application data between its halves: a violation (RFC 8446, 5.1: no
    // other record type inside a fragmented handshake message) that rustls
    // ends without an alert.
    let split = attack(&mut w, "keyupdate-fragmented-appdata", &[]);
    verdict(vec![
        ("a fragmented KeyUpdate".into(), works(&whole, "TLS 1.3")),
        (
            "a fragmented KeyUpdate, appdata between".into(),
            alert_or_closed(&split, "unexpected_message"),
        ),
    ]);
    still_serving(&mut w, "fragmented KeyUpdates");
}

/// KeyUpdates asking for ours from a client that never reads: each makes
/// the proxy owe it a KeyUpdate it cannot deliver. Back to back they are
/// cut off (32 without data in between, as rustls and BoringSSL). With a
/// byte of data every 31, which resets that budget, what the proxy holds
/// for the client must stay bounded all the same: it stops reading or
/// closes. The node's TCP send buffers are made small (64 KiB at most, a
/// per-namespace setting) so that what the proxy owes shows in its memory
/// within seconds instead of hiding in the kernel's megabytes.
#[test]
fn a_key_update_flood_from_a_client_that_never_reads_is_bounded() {
    let mut w = world();
    let r = attack(&mut w, "keyupdate-flood", &["5", "0"]);
    assert_eq!(r["handshake"], true, "{r}");
    // rustls sends no alert for this one: any end will do, but an end.
    let kind = end(&r)["kind"].as_str().unwrap_or_default();
    assert!(
        !matches!(kind, "open" | "error"),
        "KeyUpdates without data, not cut off: {r}"
    );

    world::run(&[
        "ip",
        "netns",
        "exec",
        &w.node,
        "sh",
        "-c",
        "echo '4096 16384 65536' > /proc/sys/net/ipv4/tcp_wmem",
    ]);
    let pid = w.pid("proxy");
    let before = rss_kib(pid);
    let mut flood = driver(&w, "keyupdate-flood", &["40", "31"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The driver reports its progress on stderr once a second.
    let progress = BufReader::new(flood.stderr.take().unwrap());
    let reader = std::thread::spawn(move || progress.lines().map_while(Result::ok).last());
    let mut peak = before;
    let deadline = Instant::now() + Duration::from_secs(120);
    while flood.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the flood did not stop");
        peak = peak.max(rss_kib(pid));
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = flood.wait_with_output().unwrap();
    let last = reader.join().unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "flood driver: {}\n{last:?}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert_survived(&mut w, &format!("a KeyUpdate flood: {r}"));
    let growth = peak.saturating_sub(before);
    eprintln!("{r}\nVmRSS {before} KiB before, peak {peak} KiB (+{growth} KiB)");
    assert_eq!(r["handshake"], true, "{r}");
    let sent = r["sent"].as_u64().unwrap_or(0);
    // A proxy that stopped reading (our writes blocked) or closed has
    // bounded what it holds; one that read on must have read enough for
    // the bound below to mean something: 20,000 KeyUpdates owed are
    // 540 KB of records, past the node's send buffer many times over.
    if r["blocked"] != true && r["send_error"].is_null() {
        assert!(sent >= 20_000, "only {sent} KeyUpdates sent: {r}");
    }
    assert!(
        growth < 4 * 1024,
        "the proxy grew by {growth} KiB for one client's {sent} KeyUpdates \
         it could not answer: {r}"
    );
    let kind = end(&r)["kind"].as_str().unwrap_or_default();
    assert_ne!(kind, "error", "{r}");
    still_serving(&mut w, "a KeyUpdate flood");
}

/// When a hostile record comes: right behind the client's Finished, where
/// the proxy may still be in its handshake code when it reads it, or once
/// a request was answered, where it surely is past it. Both must behave.
const WHEN: [&str; 2] = ["now", "settled"];

/// Zero-length application data records are legal one at a time and a
/// way to keep a peer opening records for nothing in bulk: after 32 in a
/// row (rustls's limit) the connection ends, without an alert from rustls.
#[test]
fn a_flood_of_empty_records_ends_the_connection() {
    let mut w = world();
    let mut results = Vec::new();
    for when in WHEN {
        let r = attack(&mut w, "empty-appdata", &["1000", when]);
        results.push((
            format!("1000 empty records ({when})"),
            alert_or_closed(&r, "unexpected_message"),
        ));
    }
    verdict(results);
    still_serving(&mut w, "1000 empty records");
}

/// KeyUpdate values and lengths that are not KeyUpdates (RFC 8446, 4.6.3;
/// tlsfuzzer test-tls13-keyupdate): illegal_parameter for a
/// request_update other than 0 or 1, decode_error for a body not one byte.
#[test]
fn bad_key_updates_get_their_alerts() {
    let mut w = world();
    let mut results = Vec::new();
    for (msg, expect, what) in [
        ("1800000102", "illegal_parameter", "request_update 2"),
        ("18000001ff", "illegal_parameter", "request_update 255"),
        ("180000020000", "decode_error", "a two-byte KeyUpdate"),
        ("18000000", "decode_error", "an empty KeyUpdate"),
    ] {
        for when in WHEN {
            let r = attack(&mut w, "keyupdate-raw", &[msg, when]);
            results.push((format!("{what} ({when})"), alert(&r, expect)));
        }
    }
    verdict(results);
    still_serving(&mut w, "bad KeyUpdates");
}

/// Version numbers a server must tolerate (tlsfuzzer test-version-numbers
/// and test-tls13-legacy-version): any 0x03XX record version on the
/// ClientHello, and a ClientHello legacy_version above TLS 1.2, which
/// means "TLS 1.2 or what supported_versions says" (RFC 8446, 4.2.1 and
/// appendix D). The proxy's own look at the ClientHello must not be
/// stricter than its TLS stack.
#[test]
fn client_hello_version_numbers_are_tolerated() {
    let mut w = world();
    let mut results = Vec::new();
    for (tls, rec, hello, expect) in [
        ("1.3", "3.4", "3.3", "TLS 1.3"),
        ("1.3", "3.1", "4.1", "TLS 1.3"),
        ("1.3", "3.1", "6.3", "TLS 1.3"),
        ("1.3", "3.1", "254.254", "TLS 1.3"),
        ("1.2", "3.4", "3.3", "TLS 1.2"),
        ("1.2", "3.3", "3.4", "TLS 1.2"),
        ("1.2", "3.3", "4.1", "TLS 1.2"),
        ("1.2", "3.3", "254.254", "TLS 1.2"),
    ] {
        let what = format!("TLS {tls} offered, record version {rec}, legacy_version {hello}");
        let r = attack(&mut w, "hello-version", &[tls, rec, hello]);
        results.push((what, works(&r, expect)));
    }
    verdict(results);
    still_serving(&mut w, "odd version numbers");
}

/// ClientHellos at the record layer's edges: one that fills a record to
/// its 16 KiB limit, and one cut into many small records (RFC 8446, 5.1
/// allows both).
#[test]
fn a_maximal_and_a_fragmented_client_hello_complete() {
    let mut w = world();
    let r = attack(&mut w, "hello-max", &[]);
    assert_eq!(r["hello_bytes"], 16384, "{r}");
    let mut results = vec![(
        "a ClientHello filling one record".to_string(),
        works(&r, "TLS 1.3"),
    )];
    for size in ["100", "7"] {
        let r = attack(&mut w, "hello-fragmented", &[size]);
        results.push((
            format!("a ClientHello in {size}-byte records"),
            works(&r, "TLS 1.3"),
        ));
    }
    verdict(results);
    still_serving(&mut w, "large and fragmented ClientHellos");
}

/// A browser's post-quantum key share (X25519MLKEM768, 1216 bytes, beside
/// X25519): whichever group the proxy picks, the handshake completes.
#[test]
fn a_post_quantum_key_share_completes() {
    let mut w = world();
    let r = attack(&mut w, "pq", &[]);
    assert!(r["hello_bytes"].as_u64().unwrap_or(0) > 1216, "{r}");
    verdict(vec![(
        "X25519MLKEM768 and X25519 key shares".into(),
        works(&r, "TLS 1.3"),
    )]);
    still_serving(&mut w, "a post-quantum key share");
}

/// Bytes that are no ClientHello end the connection at once (no wait for
/// the handshake timeout), without a panic.
#[test]
fn garbage_instead_of_a_client_hello_is_closed_at_once() {
    let mut w = world();
    let mut results = Vec::new();
    for kind in ["http", "zeros", "random", "sslv2", "bad-handshake"] {
        let r = attack(&mut w, "garbage", &[kind]);
        let how = end(&r)["kind"].as_str().unwrap_or_default();
        let closed = matches!(how, "eof" | "reset" | "alert");
        let quick = r["seconds"].as_f64().unwrap_or(99.0) < 3.0;
        results.push((
            format!("garbage ({kind})"),
            if closed && quick {
                Ok(())
            } else {
                Err(format!("not closed at once: {r}"))
            },
        ));
    }
    verdict(results);
    still_serving(&mut w, "garbage");
}
