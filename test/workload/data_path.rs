//! The rendered config and the minted certificate carry real traffic: the
//! command the rendered DaemonSet names (`hcp-ingress-proxy`) runs with
//! exactly what `render --workload` printed (mount paths moved to a
//! temporary directory, the admin port to an ephemeral one), a pod-like
//! client dials it as `kubernetes.default.svc` and verifies the minted leaf
//! against the cluster CA, and the proxy re-encrypts to a TLS "ingress" with
//! SNI = apiHost, verified against the same CA: byte for byte in reencrypt
//! mode, as HTTP/2 streams to an HTTP/2-only API server in pooled mode.

use std::{
    net::{SocketAddr, TcpListener as StdListener},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use hcp_ingress::{
    cli::render_workload_documents,
    pki::{self, CertificateAuthority, LeafSpec},
    render::workload::{CONFIG_DIR, CONFIG_FILE, PROXY_COMMAND},
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::{TcpListener, TcpStream},
};

use crate::{fixture, mount_proxy_files, object, options, under};

const API_HOST: &str = "api.tenant-09.example.com";

fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// The tenant API server's TLS: a certificate for API_HOST from the cluster
/// CA, offering `alpn`.
fn api_server_tls(ca: &CertificateAuthority, alpn: &[&[u8]]) -> rustls::ServerConfig {
    let leaf = pki::mint_leaf(
        ca,
        &LeafSpec {
            dns_names: vec![API_HOST.into()],
            ip_addresses: vec![],
            validity: Duration::from_secs(3600),
            now: std::time::SystemTime::now(),
        },
    )
    .unwrap();
    let chain = vec![CertificateDer::from_pem_slice(leaf.cert_pem.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

type ServerTls = tokio_rustls::server::TlsStream<TcpStream>;

/// A TLS server on an ephemeral loopback port: `serve(id, sni, stream)` for
/// every connection whose handshake completes (the proxy's health checks
/// hand-shake and leave), `id` counting the connections accepted.
async fn tls_server<F, Fut>(config: rustls::ServerConfig, serve: F) -> SocketAddr
where
    F: Fn(usize, String, ServerTls) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        for id in 0.. {
            let Ok((socket, _)) = listener.accept().await else {
                continue;
            };
            let (acceptor, serve) = (acceptor.clone(), serve.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(socket).await {
                    let sni = tls.get_ref().1.server_name().unwrap_or_default();
                    let sni = sni.to_string();
                    serve(id, sni, tls).await;
                }
            });
        }
    });
    addr
}

/// The shared ingress, passthrough to the tenant API server: a TLS server
/// for API_HOST with a certificate from the cluster CA. Answers `pong` and
/// records the SNI it saw.
async fn ingress(ca: &CertificateAuthority, seen: Arc<Mutex<Vec<String>>>) -> SocketAddr {
    tls_server(api_server_tls(ca, &[]), move |_, sni, tls| {
        let seen = seen.clone();
        async move {
            let mut tls = BufReader::new(tls);
            let mut line = String::new();
            if tls.read_line(&mut line).await.is_ok() && line == "ping\n" {
                seen.lock().unwrap().push(sni);
                let _ = tls.get_mut().write_all(b"pong\n").await;
                let _ = tls.get_mut().shutdown().await;
            }
        }
    })
    .await
}

/// A pod's TLS connection to the proxy: SNI `kubernetes.default.svc`,
/// trusting only the cluster CA, offering `alpn`.
async fn pod_tls(
    ca: &CertificateAuthority,
    proxy: SocketAddr,
    alpn: &[&[u8]],
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(ca.cert_der().to_vec()))
        .map_err(|e| e.to_string())?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tcp = TcpStream::connect(proxy)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let name = ServerName::try_from("kubernetes.default.svc").unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("tls: {e}"))
}

/// A pod's line protocol through the proxy: `ping`, the answer.
async fn pod_request(ca: &CertificateAuthority, proxy: SocketAddr) -> Result<String, String> {
    let mut tls = pod_tls(ca, proxy, &[]).await?;
    tls.write_all(b"ping\n").await.map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(tls)
        .read_line(&mut line)
        .await
        .map_err(|e| format!("read: {e}"))?;
    Ok(line)
}

/// The rendered proxy, running: the binary the DaemonSet names, with the
/// ConfigMap and Secret `render --workload` printed for `cpi` mounted under
/// a temporary directory (the admin port moved to an ephemeral one).
struct RenderedProxy {
    child: std::process::Child,
    dir: std::path::PathBuf,
    port: u16,
}

impl RenderedProxy {
    fn start(cpi: &str, tag: &str) -> Self {
        let port = free_port();
        let mut opts = options(false);
        opts.inputs.proxy_port = Some(port);
        // The certificate must be valid now, not at the fixed clock of the goldens.
        opts.now = std::time::SystemTime::now();
        let rendered = render_workload_documents("tenant-09.yaml", cpi, &opts).unwrap();

        let dir = std::env::temp_dir().join(format!(
            "hcp-ingress-data-path-{tag}-{}",
            std::process::id()
        ));
        mount_proxy_files(&rendered, &dir, &[("127.0.0.1:9445", "127.0.0.1:0")]);
        let mount = |path: &str| under(&dir, path);

        // The command the DaemonSet runs, with its paths under the mount: the
        // image's proxy-only binary is the one cargo built.
        let daemon_set = object(&rendered, "DaemonSet", "hcp-ingress-proxy");
        let container = &daemon_set["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["command"], serde_json::json!([PROXY_COMMAND]));
        let args: Vec<String> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                let a = a.as_str().unwrap();
                match a.starts_with('/') {
                    true => mount(a).display().to_string(),
                    false => a.to_string(),
                }
            })
            .collect();
        assert_eq!(
            args.last(),
            Some(&mount(CONFIG_DIR).join(CONFIG_FILE).display().to_string())
        );
        let child = std::process::Command::new(crate::proxy_bin::proxy_bin())
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        Self { child, dir, port }
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Stop it; its log.
    fn stop(mut self) -> String {
        use std::io::Read;
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut log = String::new();
        if let Some(mut stderr) = self.child.stderr.take() {
            let _ = stderr.read_to_string(&mut log);
        }
        log
    }
}

impl Drop for RenderedProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `call` until it answers: the proxy needs a moment to listen and to find
/// its upstream healthy.
async fn first_answer<F, Fut>(call: F) -> Result<String, String>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<String, String>>,
{
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match call().await {
            Ok(answer) => return Ok(answer),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The tenant's ControlPlaneIngress with `proxy.mode: mode`. Service steering
/// listens on the node's addresses, so no NET_ADMIN is needed here.
fn tenant(mode: &str, ingress_port: u16) -> String {
    format!(
        "apiVersion: hcp-ingress.dev/v1alpha1
kind: ControlPlaneIngress
metadata: {{name: tenant-09, namespace: tenants}}
spec:
  clusterName: tenant-09
  ingress: {{apiHost: {API_HOST}, port: {ingress_port}}}
  backend: {{serviceName: kmc-tenant-09, apiPort: 30443}}
  proxy: {{mode: {mode}, steering: service, upstreams: [127.0.0.1]}}
"
    )
}

fn ca() -> CertificateAuthority {
    let read = |n: &str| std::fs::read_to_string(fixture(n)).unwrap();
    CertificateAuthority::from_pem(&read("ca.crt"), &read("ca.key")).unwrap()
}

#[tokio::test]
async fn a_pod_reaches_the_ingress_through_the_rendered_proxy() {
    let ca = ca();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let ingress = ingress(&ca, seen.clone()).await;
    let cpi = tenant("reencrypt", ingress.port());
    let proxy = RenderedProxy::start(&cpi, "reencrypt");
    let result = first_answer(|| pod_request(&ca, proxy.addr())).await;
    let log = proxy.stop();
    let answer =
        result.unwrap_or_else(|e| panic!("no answer through the proxy: {e}\nproxy log:\n{log}"));
    assert_eq!(answer, "pong\n");
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        [API_HOST],
        "the ingress saw SNI = apiHost"
    );
}

/// What the HTTP/2 ingress saw: per TLS connection that carried requests,
/// its SNI, and every request's Authorization header.
#[derive(Default)]
struct H2Seen {
    connections: std::collections::BTreeMap<usize, String>,
    authorization: Vec<String>,
}

/// The shared ingress passing through to an API server that speaks HTTP/2
/// only (ALPN h2), as a kube-apiserver can: answers every request `pong`.
async fn h2_ingress(ca: &CertificateAuthority, seen: Arc<Mutex<H2Seen>>) -> SocketAddr {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    tls_server(api_server_tls(ca, &[b"h2"]), move |id, sni, tls| {
        let seen = seen.clone();
        let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let mut seen = seen.lock().unwrap();
            seen.connections.insert(id, sni.clone());
            let auth = req.headers().get("authorization");
            let auth = auth.and_then(|a| a.to_str().ok()).unwrap_or("");
            seen.authorization.push(auth.to_string());
            let body = http_body_util::Full::new(hyper::body::Bytes::from_static(b"pong"));
            std::future::ready(Ok::<_, std::convert::Infallible>(hyper::Response::new(
                body,
            )))
        });
        async move {
            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tls), svc)
                .await;
        }
    })
    .await
}

/// A pod's HTTP/1.1 request with its ServiceAccount token, on a connection
/// of its own (ALPN http/1.1, verifying the cluster CA); the response.
async fn pod_http_request(ca: &CertificateAuthority, proxy: SocketAddr) -> Result<String, String> {
    let mut tls = pod_tls(ca, proxy, &[b"http/1.1"]).await?;
    tls.write_all(
        b"GET /version HTTP/1.1\r\nHost: kubernetes.default.svc\r\nAuthorization: Bearer pod-token\r\nConnection: close\r\n\r\n",
    )
    .await
    .map_err(|e| e.to_string())?;
    let mut response = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut tls, &mut response)
        .await
        .map_err(|e| format!("read: {e}"))?;
    Ok(response)
}

/// `proxy.mode: pooled` as rendered: pods' HTTP/1.1 connections, each its
/// own, reach an HTTP/2-only API server as streams of at most
/// `pool.maxConnections` (4) upstream connections, with SNI = apiHost and
/// the pods' tokens untouched.
#[tokio::test]
async fn pooled_mode_as_rendered_carries_pod_connections_over_few_http2_connections() {
    let ca = ca();
    let seen = Arc::new(Mutex::new(H2Seen::default()));
    let ingress = h2_ingress(&ca, seen.clone()).await;
    let cpi = tenant("pooled", ingress.port());
    let proxy = RenderedProxy::start(&cpi, "pooled");
    let first = first_answer(|| pod_http_request(&ca, proxy.addr())).await;
    let answers =
        futures::future::join_all((0..30).map(|_| pod_http_request(&ca, proxy.addr()))).await;
    let log = proxy.stop();
    let first =
        first.unwrap_or_else(|e| panic!("no answer through the proxy: {e}\nproxy log:\n{log}"));
    for answer in std::iter::once(Ok(first)).chain(answers) {
        let answer =
            answer.unwrap_or_else(|e| panic!("a pod got no answer: {e}\nproxy log:\n{log}"));
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("pong"), "{answer}");
    }
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.authorization.len(),
        31,
        "every pod request reached the API server"
    );
    assert!(
        seen.authorization.iter().all(|a| a == "Bearer pod-token"),
        "tokens pass untouched: {:?}",
        seen.authorization
    );
    let connections = seen.connections.len();
    assert!(
        (1..=4).contains(&connections),
        "31 pod connections took {connections} upstream connections"
    );
    assert!(
        seen.connections.values().all(|sni| sni == API_HOST),
        "SNI = apiHost"
    );
}
