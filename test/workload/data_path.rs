//! The rendered config and the minted certificate carry real traffic: the
//! `hcp-ingress proxy` binary runs with exactly what `render --workload`
//! printed (mount paths moved to a temporary directory, the admin port to
//! an ephemeral one), a pod-like client dials it as `kubernetes.default.svc`
//! and verifies the minted leaf against the cluster CA, and the proxy
//! re-encrypts to a TLS "ingress" with SNI = apiHost, verified against the
//! same CA.

use std::{
    net::{SocketAddr, TcpListener as StdListener},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use hcp_ingress::{
    cli::render_workload_documents,
    pki::{self, CertificateAuthority, LeafSpec},
    render::workload::{CONFIG_DIR, CONFIG_FILE, PROXY_COMMAND, TLS_DIR},
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::{TcpListener, TcpStream},
};

use crate::{fixture, object, options, secret_text};

const API_HOST: &str = "api.tenant-09.example.com";

fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The shared ingress, passthrough to the tenant API server: a TLS server
/// for API_HOST with a certificate from the cluster CA. Answers `pong` and
/// records the SNI it saw.
async fn ingress(ca: &CertificateAuthority, seen: Arc<Mutex<Vec<String>>>) -> SocketAddr {
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
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                continue;
            };
            let (acceptor, seen) = (acceptor.clone(), seen.clone());
            tokio::spawn(async move {
                // Health checks hand-shake and leave: errors are expected.
                let Ok(tls) = acceptor.accept(socket).await else {
                    return;
                };
                let sni = tls
                    .get_ref()
                    .1
                    .server_name()
                    .unwrap_or_default()
                    .to_string();
                let mut tls = BufReader::new(tls);
                let mut line = String::new();
                if tls.read_line(&mut line).await.is_ok() && line == "ping\n" {
                    seen.lock().unwrap().push(sni);
                    let _ = tls.get_mut().write_all(b"pong\n").await;
                    let _ = tls.get_mut().shutdown().await;
                }
            });
        }
    });
    addr
}

/// A pod: dials the proxy with SNI `kubernetes.default.svc`, trusting only the cluster CA.
async fn pod_request(ca: &CertificateAuthority, proxy: SocketAddr) -> Result<String, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(ca.cert_der().to_vec()))
        .map_err(|e| e.to_string())?;
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(proxy)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let name = ServerName::try_from("kubernetes.default.svc").unwrap();
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("tls: {e}"))?;
    tls.write_all(b"ping\n").await.map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(tls)
        .read_line(&mut line)
        .await
        .map_err(|e| format!("read: {e}"))?;
    Ok(line)
}

#[tokio::test]
async fn a_pod_reaches_the_ingress_through_the_rendered_proxy() {
    let read = |n: &str| std::fs::read_to_string(fixture(n)).unwrap();
    let ca = CertificateAuthority::from_pem(&read("ca.crt"), &read("ca.key")).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let ingress = ingress(&ca, seen.clone()).await;

    // Service steering listens on the node's addresses, so no NET_ADMIN is needed here.
    let cpi = format!(
        "apiVersion: hcp-ingress.dev/v1alpha1
kind: ControlPlaneIngress
metadata: {{name: tenant-09, namespace: tenants}}
spec:
  clusterName: tenant-09
  ingress: {{apiHost: {API_HOST}, port: {}}}
  backend: {{serviceName: kmc-tenant-09, apiPort: 30443}}
  proxy: {{mode: reencrypt, steering: service, upstreams: [127.0.0.1]}}
",
        ingress.port()
    );
    let proxy_port = free_port();
    let mut opts = options(false);
    opts.inputs.proxy_port = Some(proxy_port);
    // The certificate must be valid now, not at the fixed clock of the goldens.
    opts.now = std::time::SystemTime::now();
    let rendered = render_workload_documents("tenant-09.yaml", &cpi, &opts).unwrap();

    let dir = std::env::temp_dir().join(format!("hcp-ingress-data-path-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mount = |path: &str| dir.join(path.trim_start_matches('/'));
    std::fs::create_dir_all(mount(CONFIG_DIR)).unwrap();
    std::fs::create_dir_all(mount(TLS_DIR)).unwrap();
    let config_map = object(&rendered, "ConfigMap", "hcp-ingress-proxy");
    for (key, value) in config_map["data"].as_object().unwrap() {
        let text = value
            .as_str()
            .unwrap()
            .replace(
                "/etc/hcp-ingress",
                dir.join("etc/hcp-ingress").to_str().unwrap(),
            )
            .replace("127.0.0.1:9445", "127.0.0.1:0");
        std::fs::write(mount(CONFIG_DIR).join(key), text).unwrap();
    }
    let secret = object(&rendered, "Secret", "hcp-ingress-proxy");
    for key in ["tls.crt", "tls.key"] {
        std::fs::write(mount(TLS_DIR).join(key), secret_text(secret, key)).unwrap();
    }

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
    let mut proxy = std::process::Command::new(env!("CARGO_BIN_EXE_hcp-ingress-proxy"))
        .args(&args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();

    // The proxy needs a moment to listen and to find its upstream healthy.
    let target: SocketAddr = format!("127.0.0.1:{proxy_port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let result = loop {
        match pod_request(&ca, target).await {
            Ok(answer) => break Ok(answer),
            Err(e) if Instant::now() > deadline => break Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    proxy.kill().unwrap();
    let output = proxy.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let answer = result.unwrap_or_else(|e| {
        panic!(
            "no answer through the proxy: {e}\nproxy log:\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert_eq!(answer, "pong\n");
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        [API_HOST],
        "the ingress saw SNI = apiHost"
    );
}
