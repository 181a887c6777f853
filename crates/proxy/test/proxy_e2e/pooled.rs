//! Pooled mode end to end: pods (HTTP/1.1 and HTTP/2 clients) in the pod
//! namespace, the proxy in the node namespace, HAProxy routing by SNI in
//! the lb namespace, and in place of tenant A's nginx a real HTTP/2 and
//! HTTP/1.1 TLS server (hyper) that counts the connections its requests
//! arrive on, streams watch-like responses and accepts upgrades.
//!
//! The helper processes (tenant, pod clients) are this test binary run
//! again inside a namespace (`pooled_helper`, selected by environment).

use std::{
    io::{BufRead, BufReader, Write},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
};

use serde_json::Value;

use super::world::{self, API_A, INGRESS, Ingress, SERVICE_IP, World};

const ROLE: &str = "HCP_E2E_POOLED_ROLE";
const DIR: &str = "HCP_E2E_POOLED_DIR";
const SCENARIO: &str = "HCP_E2E_POOLED_SCENARIO";
/// Tenant A's address behind the ingress (the world's nginx listens there).
const TENANT: &str = "127.0.0.1:9001";
/// The tenant's plain-HTTP control endpoint: `/stats`, `/release`.
const CONTROL: &str = "127.0.0.1:9100";
/// What the tenant advertises as SETTINGS_MAX_CONCURRENT_STREAMS: 200
/// concurrent watches need two pooled connections.
const TENANT_MAX_STREAMS: u32 = 100;
/// Bytes of the tenant's `/big` response.
const BIG: usize = 3_000_000;

/// The helper processes' entry point: the tenant or a pod client, chosen by
/// `HCP_E2E_POOLED_ROLE`; a no-op otherwise.
#[test]
#[ignore = "helper process of the pooled tests, started by them"]
fn pooled_helper() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    match role.as_str() {
        "tenant" => rt.block_on(tenant::run()),
        "client" => rt.block_on(client::run()),
        other => panic!("unknown role {other}"),
    }
}

/// A helper process with its stdin and the `@@`-prefixed JSON lines of its
/// stdout.
struct Helper {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Helper {
    fn start(w: &World, ns: &str, role: &str, scenario: &str) -> Helper {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "pooled::pooled_helper",
                "--nocapture",
            ])
            .env(ROLE, role)
            .env(DIR, &w.dir)
            .env(SCENARIO, scenario)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Helper {
            child,
            stdin,
            stdout,
        }
    }

    /// The next report line.
    fn report(&mut self) -> Value {
        loop {
            let mut l = String::new();
            let n = self.stdout.read_line(&mut l).unwrap();
            assert!(n > 0, "helper exited without a report");
            if let Some(json) = l.strip_prefix("@@") {
                return serde_json::from_str(json).unwrap();
            }
        }
    }

    /// Tell the helper to go on.
    fn proceed(&mut self) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A world whose tenant A is the hyper tenant, with the proxy in pooled mode
/// (`extra`: YAML lines appended to its config).
fn pooled_world(extra: &str) -> (World, Helper) {
    let mut w = World::new(Ingress::Haproxy);
    // The nginx stand-ins make way for the tenant on tenant A's address.
    w.signal("backends", "TERM");
    let lb = w.lb.clone();
    let mut tenant = Helper::start(&w, &lb, "tenant", "");
    assert_eq!(tenant.report()["listening"], TENANT);
    w.start_proxy("pooled", &INGRESS, extra);
    (w, tenant)
}

/// GET on the tenant's control endpoint.
fn control(w: &World, path: &str) -> Value {
    let out = world::run(&[
        "ip",
        "netns",
        "exec",
        &w.lb,
        "curl",
        "-s",
        "-m",
        "10",
        &format!("http://{CONTROL}{path}"),
    ]);
    serde_json::from_str(&out).unwrap_or_else(|_| panic!("control {path}: {out:?}"))
}

#[test]
fn pooled_mode_carries_200_pod_connections_on_at_most_4_upstream_connections() {
    let (w, _tenant) = pooled_world("");
    let node = w.node.clone();

    // 200 pod connections, half HTTP/2 and half HTTP/1.1, each holding a
    // watch open: 200 concurrent streams, twice what one connection of the
    // tenant carries.
    let mut pods = Helper::start(&w, &w.pod.clone(), "client", "watch 200");
    let opened = pods.report();
    assert_eq!(opened["watching"], 200, "{opened}\n{}", w.logs());
    assert_eq!(opened["h2"], 100, "{opened}");
    assert_eq!(opened["http/1.1"], 100, "{opened}");
    assert_eq!(
        w.metric("hcp_proxy_connections_active{path=\"pooled\"}"),
        200.0
    );

    // Counted where the streams arrive: at the tenant, behind the ingress.
    let stats = control(&w, "/stats");
    let open = stats["open"].as_u64().unwrap();
    assert!(
        (2..=4).contains(&open),
        "200 watches over a limit of {TENANT_MAX_STREAMS} streams need 2 connections, at most 4: {stats}"
    );
    assert_eq!(
        stats["open_http2"], open,
        "pooled connections speak h2: {stats}"
    );
    assert_eq!(stats["streams_open"], 200, "{stats}");
    // The proxy's own count agrees.
    assert_eq!(w.metric("hcp_proxy_pool_upstream_connections"), open as f64);
    assert_eq!(w.metric("hcp_proxy_pool_streams"), 200.0);
    let sockets_to = |ingress: &str| {
        world::run(&[
            "ip",
            "netns",
            "exec",
            &node,
            "ss",
            "-Htn",
            "state",
            "established",
            "dst",
            &format!("{ingress}:443"),
        ])
        .lines()
        .count()
    };
    let upstream_conns = sockets_to(INGRESS[0]) + sockets_to(INGRESS[1]);
    // Health checks may hold one more for an instant.
    assert!(upstream_conns <= 4 + 2, "{upstream_conns} upstream sockets");

    // The watches stream: every pod already read its first event; the
    // second comes when the tenant is told to send it.
    let released = control(&w, "/release");
    assert_eq!(released["released"], true);
    pods.proceed();
    let ended = pods.report();
    assert_eq!(ended["ended"], 200, "{ended}");
    assert_eq!(ended["second_event"], 200, "{ended}");

    // Plain requests both ways, bodies beyond one flow-control window, and
    // the bearer token untouched.
    let mut one = Helper::start(&w, &w.pod.clone(), "client", "get");
    let r = one.report();
    for proto in ["h2", "http/1.1"] {
        let got = &r[proto];
        assert_eq!(got["status"], 200, "{r}");
        assert_eq!(got["tenant"], "a", "{r}");
        assert_eq!(
            got["authorization"], "Bearer e2e-token.Zm9v.YmFy",
            "the token arrives untouched: {r}"
        );
        // The tenant saw the request over the pool: HTTP/2.
        assert_eq!(got["upstream_version"], "HTTP/2.0", "{r}");
        assert_eq!(got["posted"], 300_000, "{r}");
        assert_eq!(got["big"], BIG, "{r}");
    }
    let after = control(&w, "/stats");
    assert!(after["used"].as_u64().unwrap() <= 4, "{after}");

    // A client certificate cannot ride a shared connection: SNI = apiHost
    // passes through, and the tenant authenticates the client itself.
    let ca = w.pki.path("ca-a.crt");
    let (cert, key) = (w.pki.path("client.crt"), w.pki.path("client.key"));
    let r = w.get(&[
        SERVICE_IP, "443", "--sni", API_A, "--ca", &ca, "--cert", &cert, "--key", &key,
    ]);
    assert_eq!(r["status"], 200, "{r}");
    let t: Value = serde_json::from_str(r["body"].as_str().unwrap()).unwrap();
    assert_eq!(t["verify"], "SUCCESS", "{r}");
    assert_eq!(t["client"], "CN=e2e-client", "{r}");
    assert!(w.metric("hcp_proxy_connections_total{path=\"sni-passthrough\"}") >= 1.0);
}

#[test]
fn a_full_pool_sends_further_requests_on_dedicated_connections() {
    // One pooled connection of 100 streams for 150 watches: the other 50
    // get their own connection instead of waiting behind watches that may
    // never end.
    let (w, _tenant) = pooled_world("pool: {maxConnections: 1}\n");
    let mut pods = Helper::start(&w, &w.pod.clone(), "client", "watch 150");
    let opened = pods.report();
    assert_eq!(opened["watching"], 150, "{opened}\n{}", w.logs());
    let stats = control(&w, "/stats");
    assert_eq!(stats["open_http2"], 1, "{stats}");
    assert_eq!(stats["open_http1"], 50, "{stats}");
    assert_eq!(w.metric("hcp_proxy_pool_upstream_connections"), 1.0);
    assert_eq!(w.metric("hcp_proxy_pool_dedicated_connections"), 50.0);
    assert_eq!(
        w.metric("hcp_proxy_pool_requests_total{route=\"dedicated\"}"),
        50.0
    );
    control(&w, "/release");
    pods.proceed();
    let ended = pods.report();
    assert_eq!(ended["second_event"], 150, "{ended}");
}

#[test]
fn an_idle_pod_connection_is_closed_and_the_pooled_one_stays() {
    let (w, _tenant) = pooled_world("timeouts: {idle: 1s}\n");
    let mut pod = Helper::start(&w, &w.pod.clone(), "client", "idle");
    let r = pod.report();
    assert_eq!(r["status"], 200, "{r}");
    // The proxy closed the quiet connection (the client saw its end).
    assert_eq!(pod.report()["closed_by_proxy"], true);
    assert_eq!(w.metric("hcp_proxy_pool_upstream_connections"), 1.0);
}

#[test]
fn losing_the_ingress_of_the_pooled_connection_moves_requests_to_another() {
    let (mut w, _tenant) = pooled_world("");
    let ok = |w: &World| {
        let mut pod = Helper::start(w, &w.pod.clone(), "client", "get");
        let r = pod.report();
        r["h2"]["status"] == 200 && r["http/1.1"]["status"] == 200
    };
    assert!(ok(&w));
    assert_eq!(
        w.metric("hcp_proxy_pool_upstream_connections_opened_total"),
        1.0
    );
    // The ingress instance the pooled connection goes through dies. Its
    // socket is the upstream one that carried the responses (megabytes; a
    // health check's carries a handshake).
    let node = w.node.clone();
    let ss = world::run(&[
        "ip",
        "netns",
        "exec",
        &node,
        "ss",
        "-Htni",
        "state",
        "established",
        "dport",
        "=",
        ":443",
    ]);
    let mut sockets: Vec<(u64, String)> = Vec::new();
    for line in ss.lines() {
        match line
            .split_whitespace()
            .find_map(|f| f.strip_prefix("bytes_received:"))
        {
            Some(n) => {
                if let Some(last) = sockets.last_mut() {
                    last.0 = n.parse().unwrap();
                }
            }
            None if !line.starts_with(char::is_whitespace) => sockets.push((0, line.to_string())),
            None => {}
        }
    }
    let (received, busiest) = sockets.iter().max().cloned().expect("upstream sockets");
    assert!(received > 1_000_000, "{ss}");
    let through = (0..2)
        .find(|&i| busiest.contains(&format!("{}:443", INGRESS[i])))
        .unwrap_or_else(|| panic!("no ingress address in {busiest}"));
    w.signal(&format!("ingress{through}"), "KILL");
    w.eventually("the pooled connection is gone", || {
        w.metric("hcp_proxy_pool_upstream_connections") == 0.0
    });
    // The next requests open a pooled connection through the other one.
    assert!(ok(&w), "{}", w.logs());
    assert_eq!(
        w.metric("hcp_proxy_pool_upstream_connections_opened_total"),
        2.0
    );
    assert_eq!(w.metric("hcp_proxy_pool_upstream_connections"), 1.0);
}

#[test]
fn pooled_mode_gives_upgrades_a_dedicated_connection_with_bytes_both_ways() {
    let (w, _tenant) = pooled_world("");
    for proto in ["websocket", "SPDY/3.1"] {
        let before = control(&w, "/stats")["used"].as_u64().unwrap();
        let mut pod = Helper::start(&w, &w.pod.clone(), "client", &format!("upgrade {proto}"));
        let r = pod.report();
        assert_eq!(r["status"], 101, "{r}\n{}", w.logs());
        assert_eq!(r["upgrade"], proto, "{r}");
        // Tenant to pod, then pod to tenant and back, after the 101.
        assert!(
            r["greeting"]
                .as_str()
                .unwrap()
                .starts_with(&format!("hello {proto} over HTTP/1.1")),
            "{r}"
        );
        assert_eq!(r["echo"], "ping from the pod\n", "{r}");
        // Its own upstream connection, open while the session is.
        assert_eq!(w.metric("hcp_proxy_pool_dedicated_connections"), 1.0);
        let stats = control(&w, "/stats");
        assert_eq!(stats["used"].as_u64().unwrap(), before + 1, "{stats}");
        assert_eq!(stats["open_http1"], 1, "{stats}");
        pod.proceed();
        assert_eq!(pod.report()["closed"], true);
        w.eventually("the dedicated connection closes", || {
            w.metric("hcp_proxy_pool_dedicated_connections") == 0.0
        });
    }
    assert_eq!(
        w.metric("hcp_proxy_pool_requests_total{route=\"upgrade\"}"),
        2.0
    );
}

#[test]
fn pooled_mode_through_an_nginx_stream_ingress_to_nginx_speaking_http2() {
    // The world's own tenants: Debian's nginx with `http2`, behind nginx
    // `stream` + `ssl_preread`.
    let mut w = World::new(Ingress::NginxStream);
    w.start_proxy("pooled", &INGRESS, "");
    // Separate pod connections (python's ssl, HTTP/1.1), no SNI, verifying
    // the service IP against the cluster CA.
    for _ in 0..6 {
        let r = w.get_service();
        assert_eq!(r["status"], 200, "{r}\n{}", w.logs());
        let t: Value = serde_json::from_str(r["body"].as_str().unwrap()).unwrap();
        assert_eq!(t["tenant"], "a", "{r}");
        assert_eq!(t["verify"], "NONE", "{r}");
    }
    assert_eq!(
        w.metric("hcp_proxy_pool_upstream_connections_opened_total"),
        1.0,
        "six pod connections, one pooled connection"
    );
    assert_eq!(
        w.metric("hcp_proxy_pool_requests_total{route=\"pooled\"}"),
        6.0
    );
    assert_eq!(
        w.metric("hcp_proxy_connections_total{path=\"pooled\"}"),
        6.0
    );
}

/// The tenant: TLS (ALPN h2 and http/1.1, client certificates optional),
/// `/` and `/echo` answer who asked and how, `/watch` streams two events,
/// `/upgrade` switches protocols and echoes.
mod tenant {
    use std::{
        collections::BTreeMap,
        convert::Infallible,
        sync::{Arc, Mutex},
    };

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
    use hyper::{Request, Response, StatusCode, body::Frame};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use rustls::{RootCertStore, ServerConfig, server::WebPkiClientVerifier};
    use rustls_pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
    use serde_json::json;
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpListener,
        sync::watch,
    };

    type Body = BoxBody<Bytes, Infallible>;

    #[derive(Default)]
    struct Conn {
        open: bool,
        http2: bool,
        requests: usize,
        streams: usize,
        /// Handed over to an upgraded session, which ends it.
        upgraded: bool,
    }

    struct St {
        conns: Mutex<BTreeMap<usize, Conn>>,
        release: watch::Sender<u64>,
    }

    fn full(s: String) -> Body {
        Full::new(Bytes::from(s)).boxed()
    }

    pub async fn run() {
        let dir = std::path::PathBuf::from(std::env::var(super::DIR).unwrap());
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(dir.join("tenant-a.crt"))
                .unwrap()
                .map(Result::unwrap)
                .collect();
        let key = PrivateKeyDer::from_pem_file(dir.join("tenant-a.key")).unwrap();
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(dir.join("ca-a.crt")).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider.clone())
            .allow_unauthenticated()
            .build()
            .unwrap();
        let mut cfg = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs, key)
            .unwrap();
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
        let st = Arc::new(St {
            conns: Mutex::new(BTreeMap::new()),
            release: watch::channel(0).0,
        });
        let tls = TcpListener::bind(super::TENANT).await.unwrap();
        let ctl = TcpListener::bind(super::CONTROL).await.unwrap();
        tokio::spawn(control(ctl, st.clone()));
        println!("@@{}", json!({"listening": super::TENANT}));
        let mut next = 0usize;
        loop {
            let (s, _) = tls.accept().await.unwrap();
            next += 1;
            let id = next;
            let (acceptor, st) = (acceptor.clone(), st.clone());
            tokio::spawn(async move {
                // Health checks handshake and leave: not counted until a
                // request arrives.
                let Ok(tls) = acceptor.accept(s).await else {
                    return;
                };
                let (_, session) = tls.get_ref();
                let http2 = session.alpn_protocol() == Some(b"h2");
                let client = session
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .map(|c| {
                        use x509_parser::prelude::FromDer;
                        let (_, cert) =
                            x509_parser::certificate::X509Certificate::from_der(c).unwrap();
                        cert.subject().to_string()
                    });
                let svc_st = st.clone();
                let svc = hyper::service::service_fn(move |req| {
                    let (st, client) = (svc_st.clone(), client.clone());
                    async move { Ok::<_, Infallible>(serve(req, id, http2, client, st).await) }
                });
                let mut b = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                b.http2().max_concurrent_streams(super::TENANT_MAX_STREAMS);
                let _ = b
                    .serve_connection_with_upgrades(TokioIo::new(tls), svc)
                    .await;
                if let Some(c) = st.conns.lock().unwrap().get_mut(&id) {
                    c.open = c.upgraded;
                }
            });
        }
    }

    /// Streams of a connection counted from the request to the end of its
    /// response body.
    struct StreamGuard(Arc<St>, usize);
    impl Drop for StreamGuard {
        fn drop(&mut self) {
            if let Some(c) = self.0.conns.lock().unwrap().get_mut(&self.1) {
                c.streams -= 1;
            }
        }
    }

    async fn serve(
        mut req: Request<hyper::body::Incoming>,
        id: usize,
        http2: bool,
        client: Option<String>,
        st: Arc<St>,
    ) -> Response<Body> {
        {
            let mut conns = st.conns.lock().unwrap();
            let c = conns.entry(id).or_insert_with(|| Conn {
                open: true,
                http2,
                ..Conn::default()
            });
            c.requests += 1;
            c.streams += 1;
        }
        let guard = StreamGuard(st.clone(), id);
        let version = format!("{:?}", req.version());
        let watch = req.uri().query().is_some_and(|q| q.contains("watch=1"));
        match req.uri().path() {
            _ if watch => {
                let rx = st.release.subscribe();
                let events = futures::stream::unfold(0u8, move |step| {
                    let mut rx = rx.clone();
                    async move {
                        match step {
                            0 => Some((Ok(Frame::data(Bytes::from("{\"type\":\"ADDED\"}\n"))), 1)),
                            1 => {
                                let _ = rx.wait_for(|g| *g > 0).await;
                                Some((Ok(Frame::data(Bytes::from("{\"type\":\"DELETED\"}\n"))), 2))
                            }
                            _ => None,
                        }
                    }
                });
                let body = StreamBody::new(futures::StreamExt::map(events, move |f| {
                    let _ = &guard;
                    f
                }));
                Response::new(BodyExt::boxed(body))
            }
            "/upgrade" => {
                let proto = req
                    .headers()
                    .get(hyper::header::UPGRADE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                let on = hyper::upgrade::on(&mut req);
                if let Some(c) = st.conns.lock().unwrap().get_mut(&id) {
                    c.upgraded = true;
                }
                let session = st.clone();
                let greeting = format!("hello {proto} over {version} on connection {id}\n");
                tokio::spawn(async move {
                    let _guard = guard;
                    if let Ok(up) = on.await {
                        let mut io = TokioIo::new(up);
                        io.write_all(greeting.as_bytes()).await.unwrap();
                        let mut buf = [0u8; 4096];
                        loop {
                            match io.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => {
                                    if io.write_all(&buf[..n]).await.is_err() {
                                        break;
                                    }
                                }
                            }
                        }
                    }
                    if let Some(c) = session.conns.lock().unwrap().get_mut(&id) {
                        c.open = false;
                    }
                });
                Response::builder()
                    .status(StatusCode::SWITCHING_PROTOCOLS)
                    .header(hyper::header::CONNECTION, "Upgrade")
                    .header(hyper::header::UPGRADE, proto)
                    .body(full(String::new()))
                    .unwrap()
            }
            "/big" => {
                drop(guard);
                // A list response far beyond one stream window (256 KiB).
                Response::new(full("x".repeat(super::BIG)))
            }
            _ => {
                let authorization = req
                    .headers()
                    .get(hyper::header::AUTHORIZATION)
                    .map(|v| v.to_str().unwrap().to_string());
                let posted = req.into_body().collect().await.unwrap().to_bytes().len();
                drop(guard);
                let body = json!({
                    "tenant": "a",
                    "verify": if client.is_some() { "SUCCESS" } else { "NONE" },
                    "client": client.unwrap_or_default(),
                    "authorization": authorization,
                    "version": version,
                    "connection": id,
                    "posted": posted,
                });
                Response::builder()
                    .header("content-type", "application/json")
                    .body(full(body.to_string()))
                    .unwrap()
            }
        }
    }

    /// Plain HTTP: `/stats` counts connections that carried requests,
    /// `/release` sends the watches their second event.
    async fn control(l: TcpListener, st: Arc<St>) {
        loop {
            let (s, _) = l.accept().await.unwrap();
            let st = st.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<_>| {
                    let st = st.clone();
                    async move {
                        let body = match req.uri().path() {
                            "/release" => {
                                st.release.send_modify(|g| *g += 1);
                                json!({"released": true})
                            }
                            _ => {
                                let conns = st.conns.lock().unwrap();
                                let open = conns.values().filter(|c| c.open);
                                json!({
                                    "used": conns.len(),
                                    "open": open.clone().count(),
                                    "open_http2": open.clone().filter(|c| c.http2).count(),
                                    "open_http1": open.clone().filter(|c| !c.http2).count(),
                                    "streams_open": open.clone().map(|c| c.streams).sum::<usize>(),
                                    "requests": conns.values().map(|c| c.requests).sum::<usize>(),
                                })
                            }
                        };
                        Ok::<_, Infallible>(Response::new(full(body.to_string())))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    }
}

/// The pods: `watch N` (N connections, alternately h2 and http/1.1, one
/// watch each), `get` (one request per protocol), `upgrade PROTO`.
mod client {
    use std::sync::Arc;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper::{Request, Response, body::Incoming};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use rustls::{ClientConfig, RootCertStore};
    use rustls_pki_types::{CertificateDer, ServerName, pem::PemObject};
    use serde_json::{Value, json};
    use tokio::{
        io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
        net::TcpStream,
    };

    const TOKEN: &str = "Bearer e2e-token.Zm9v.YmFy";

    enum Sender {
        H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
        H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
    }

    impl Sender {
        async fn send(&mut self, req: Request<Full<Bytes>>) -> Response<Incoming> {
            match self {
                Sender::H1(s) => {
                    s.ready().await.unwrap();
                    s.send_request(req).await.unwrap()
                }
                Sender::H2(s) => {
                    s.ready().await.unwrap();
                    s.send_request(req).await.unwrap()
                }
            }
        }
    }

    fn config(alpn: &[u8]) -> Arc<ClientConfig> {
        let dir = std::path::PathBuf::from(std::env::var(super::DIR).unwrap());
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(dir.join("ca-a.crt")).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let mut c = ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        c.alpn_protocols = vec![alpn.to_vec()];
        Arc::new(c)
    }

    /// A pod's connection to the service IP (no SNI, as pods dial it).
    async fn connect(cfg: Arc<ClientConfig>) -> tokio_rustls::client::TlsStream<TcpStream> {
        let tcp = TcpStream::connect((super::SERVICE_IP, 443)).await.unwrap();
        let name = ServerName::IpAddress(
            super::SERVICE_IP
                .parse::<std::net::IpAddr>()
                .unwrap()
                .into(),
        );
        tokio_rustls::TlsConnector::from(cfg)
            .connect(name, tcp)
            .await
            .unwrap()
    }

    async fn open(cfg: Arc<ClientConfig>, h2: bool) -> Sender {
        let io = TokioIo::new(connect(cfg).await);
        if h2 {
            let (s, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .unwrap();
            tokio::spawn(conn);
            Sender::H2(s)
        } else {
            let (s, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(conn.with_upgrades());
            Sender::H1(s)
        }
    }

    fn request(method: &str, path: &str, body: Bytes) -> Request<Full<Bytes>> {
        Request::builder()
            .method(method)
            .uri(format!("https://kubernetes.default.svc{path}"))
            .header("host", "kubernetes.default.svc")
            .header("authorization", TOKEN)
            .body(Full::new(body))
            .unwrap()
    }

    fn origin_form(mut r: Request<Full<Bytes>>) -> Request<Full<Bytes>> {
        *r.uri_mut() = r.uri().path_and_query().unwrap().as_str().parse().unwrap();
        r
    }

    async fn stdin_line() {
        let mut l = String::new();
        let _ = BufReader::new(tokio::io::stdin()).read_line(&mut l).await;
    }

    fn report(v: Value) {
        println!("@@{v}");
    }

    pub async fn run() {
        let scenario = std::env::var(super::SCENARIO).unwrap();
        let (cmd, arg) = scenario.split_once(' ').unwrap_or((&scenario, ""));
        let h2 = config(b"h2");
        let h11 = config(b"http/1.1");
        match cmd {
            "watch" => {
                let n: usize = arg.parse().unwrap();
                let tasks: Vec<_> = (0..n)
                    .map(|i| {
                        let (cfg, is_h2) = if i % 2 == 0 {
                            (h2.clone(), true)
                        } else {
                            (h11.clone(), false)
                        };
                        tokio::spawn(async move {
                            let mut s = open(cfg, is_h2).await;
                            let mut req = request("GET", "/api/v1/pods?watch=1", Bytes::new());
                            if !is_h2 {
                                req = origin_form(req);
                            }
                            let resp = s.send(req).await;
                            assert_eq!(resp.status(), 200);
                            let mut body = resp.into_body();
                            let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
                            assert!(first.starts_with(b"{\"type\":\"ADDED\"}"));
                            (is_h2, s, body)
                        })
                    })
                    .collect();
                let mut watches = Vec::new();
                for t in tasks {
                    watches.push(t.await.unwrap());
                }
                let h2n = watches.iter().filter(|w| w.0).count();
                report(
                    json!({"watching": watches.len(), "h2": h2n, "http/1.1": watches.len() - h2n}),
                );
                stdin_line().await;
                let mut ended = 0;
                let mut second = 0;
                for (_, _s, body) in watches {
                    let rest = body.collect().await.unwrap().to_bytes();
                    ended += 1;
                    if rest.starts_with(b"{\"type\":\"DELETED\"}") {
                        second += 1;
                    }
                }
                report(json!({"ended": ended, "second_event": second}));
            }
            "get" => {
                let mut out = serde_json::Map::new();
                for (name, cfg, is_h2) in [("h2", h2, true), ("http/1.1", h11, false)] {
                    let mut s = open(cfg, is_h2).await;
                    let body = Bytes::from(vec![b'x'; 300_000]);
                    let mut req = request("POST", "/echo", body);
                    if !is_h2 {
                        req = origin_form(req);
                    }
                    let resp = s.send(req).await;
                    let status = resp.status().as_u16();
                    let got: Value = serde_json::from_slice(
                        &resp.into_body().collect().await.unwrap().to_bytes(),
                    )
                    .unwrap();
                    let mut big = request("GET", "/big", Bytes::new());
                    if !is_h2 {
                        big = origin_form(big);
                    }
                    let big = s.send(big).await.into_body().collect().await.unwrap();
                    out.insert(
                        name.into(),
                        json!({"status": status, "tenant": got["tenant"], "authorization": got["authorization"],
                               "upstream_version": got["version"], "posted": got["posted"],
                               "big": big.to_bytes().len()}),
                    );
                }
                report(Value::Object(out));
            }
            "idle" => {
                let io = TokioIo::new(connect(h11).await);
                let (mut s, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
                let conn = tokio::spawn(conn);
                let resp = s
                    .send_request(origin_form(request("GET", "/echo", Bytes::new())))
                    .await
                    .unwrap();
                let status = resp.status().as_u16();
                resp.into_body().collect().await.unwrap();
                report(json!({"status": status}));
                // Nothing more from this side: the connection ends when
                // the proxy closes it.
                let _ = conn.await;
                report(json!({"closed_by_proxy": true}));
            }
            "upgrade" => {
                let mut s = open(h11, false).await;
                let mut req = origin_form(request("GET", "/upgrade", Bytes::new()));
                let h = req.headers_mut();
                h.insert("connection", "Upgrade".parse().unwrap());
                h.insert("upgrade", arg.parse().unwrap());
                h.insert(
                    "sec-websocket-key",
                    "dGhlIHNhbXBsZSBub25jZQ==".parse().unwrap(),
                );
                h.insert("sec-websocket-version", "13".parse().unwrap());
                let resp = s.send(req).await;
                let status = resp.status().as_u16();
                let upgrade = resp
                    .headers()
                    .get("upgrade")
                    .map(|v| v.to_str().unwrap().to_string());
                let io = hyper::upgrade::on(resp).await.unwrap();
                let mut io = TokioIo::new(io);
                let mut greeting = Vec::new();
                let mut b = [0u8; 1];
                while !greeting.ends_with(b"\n") {
                    io.read_exact(&mut b).await.unwrap();
                    greeting.push(b[0]);
                }
                io.write_all(b"ping from the pod\n").await.unwrap();
                let mut echo = vec![0u8; b"ping from the pod\n".len()];
                io.read_exact(&mut echo).await.unwrap();
                report(json!({"status": status, "upgrade": upgrade,
                              "greeting": String::from_utf8_lossy(&greeting),
                              "echo": String::from_utf8_lossy(&echo)}));
                stdin_line().await;
                let _ = io.shutdown().await;
                drop(io);
                report(json!({"closed": true}));
            }
            other => panic!("unknown scenario {other}"),
        }
    }
}
