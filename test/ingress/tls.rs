//! The TLS ends of the tests: the client a tenant's user runs (strict: the
//! tenant's CA, a client certificate), a client that only records what
//! certificate it was shown, the konnectivity stand-in, and the L4 hop from
//! a backend address to the tenant's API server on loopback.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use rcgen::{
    Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::{
    ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::CryptoProvider,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime, pem::PemObject};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// What the konnectivity stand-in says first: proof the bytes came from it.
pub const KONNECTIVITY_GREETING: &[u8] = b"konnectivity stand-in\n";

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// The DER of the first certificate of a PEM text.
pub fn der(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("a PEM certificate")
        .to_vec()
}

/// A client certificate signed by the tenant's CA, as kubeadm makes
/// `admin.conf`: the API server maps its CN to the user and O to the groups.
pub struct ClientCert {
    pub cert_pem: String,
    pub key_pem: String,
}

pub fn client_cert(ca_pem: &str, ca_key_pem: &str, user: &str, group: &str) -> ClientCert {
    let ca_key = KeyPair::from_pem(ca_key_pem).expect("the tenant CA key");
    let issuer = Issuer::from_ca_cert_pem(ca_pem, ca_key).expect("the tenant CA");
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, user);
    params
        .distinguished_name
        .push(DnType::OrganizationName, group);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &issuer).unwrap();
    ClientCert {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

/// What a user of the tenant runs: trusts only the tenant's CA and
/// authenticates with `client`.
pub fn strict_client(ca_pem: &str, client: &ClientCert) -> ClientConfig {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let chain = vec![CertificateDer::from_pem_slice(client.cert_pem.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(client.key_pem.as_bytes()).unwrap();
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}

/// A verifier that accepts any certificate and keeps the leaf it was
/// shown: to learn WHO answered an SNI, not whether we trust it.
#[derive(Debug)]
struct Recorder {
    leaf: Mutex<Option<Vec<u8>>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        *self.leaf.lock().unwrap() = Some(end_entity.to_vec());
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// What answered a TLS handshake with `sni` at `addr`.
pub struct Seen {
    /// The leaf certificate shown, if the handshake got that far.
    pub leaf: Option<Vec<u8>>,
    /// The bytes the server sent first after the handshake (empty when the
    /// handshake failed or nothing came within a second).
    pub first_bytes: Vec<u8>,
    /// Why the handshake failed, if it did.
    pub error: Option<String>,
}

/// For failure messages: whose certificate, not its bytes.
impl std::fmt::Debug for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let subject = self.leaf.as_ref().map(|der| {
            x509_parser::parse_x509_certificate(der)
                .map(|(_, cert)| cert.subject().to_string())
                .unwrap_or_else(|e| format!("unparsable certificate: {e}"))
        });
        f.debug_struct("Seen")
            .field("leaf_subject", &subject)
            .field("first_bytes", &String::from_utf8_lossy(&self.first_bytes))
            .field("error", &self.error)
            .finish()
    }
}

/// Handshake with `sni` and record the leaf and the first bytes, trusting anything.
pub async fn look(addr: SocketAddr, sni: &str) -> Seen {
    let provider = provider();
    let recorder = Arc::new(Recorder {
        leaf: Mutex::new(None),
        provider: provider.clone(),
    });
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(recorder.clone())
        .with_no_client_auth();
    let result = tokio::time::timeout(Duration::from_secs(10), async {
        let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let name = ServerName::try_from(sni.to_string()).map_err(|e| e.to_string())?;
        let mut tls = TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; 256];
        let n = tokio::time::timeout(Duration::from_secs(1), tls.read(&mut buf))
            .await
            .ok()
            .and_then(|r| r.ok())
            .unwrap_or(0);
        buf.truncate(n);
        Ok::<_, String>(buf)
    })
    .await
    .unwrap_or_else(|_| Err("timed out".into()));
    let leaf = recorder.leaf.lock().unwrap().clone();
    match result {
        Ok(first_bytes) => Seen {
            leaf,
            first_bytes,
            error: None,
        },
        Err(error) => Seen {
            leaf,
            first_bytes: Vec::new(),
            error: Some(error),
        },
    }
}

/// One HTTP/1.1 request through `config` with `sni` to `addr`: (status, raw response).
pub async fn request(
    addr: SocketAddr,
    sni: &str,
    config: ClientConfig,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, String), String> {
    tokio::time::timeout(Duration::from_secs(15), async {
        let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let name = ServerName::try_from(sni.to_string()).map_err(|e| e.to_string())?;
        let mut tls = TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS handshake with SNI {sni}: {e}"))?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {sni}\r\nAccept: application/json\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        tls.write_all(head.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        tls.write_all(body.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut response = Vec::new();
        // A peer that closes without close_notify (as Go's server may on
        // Connection: close) still sent the whole response.
        let _ = tls.read_to_end(&mut response).await;
        let text = String::from_utf8_lossy(&response).into_owned();
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no HTTP response: {text:?}"))?;
        Ok((status, text))
    })
    .await
    .unwrap_or_else(|_| Err("timed out".into()))
}

/// The tenant's konnectivity server, stood in for by a TLS server with a
/// leaf of the tenant's CA that says [`KONNECTIVITY_GREETING`] to anyone.
pub struct Konnectivity {
    /// Its certificate (DER): what a client must see for the konnectivity host.
    pub leaf: Vec<u8>,
    task: JoinHandle<()>,
}

/// A konnectivity server's serving certificate for `host`, of the tenant's
/// CA: what an agent verifies (it sends `host` as SNI and checks the name),
/// and its key.
pub fn konnectivity_leaf(host: &str, ca_pem: &str, ca_key_pem: &str) -> (Certificate, KeyPair) {
    let ca_key = KeyPair::from_pem(ca_key_pem).unwrap();
    let issuer = Issuer::from_ca_cert_pem(ca_pem, ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec![host.to_string()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "konnectivity-server");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    (params.signed_by(&key, &issuer).unwrap(), key)
}

impl Konnectivity {
    pub async fn start(addr: SocketAddr, host: &str, ca_pem: &str, ca_key_pem: &str) -> Self {
        let (cert, key) = konnectivity_leaf(host, ca_pem, ca_key_pem);
        let leaf = cert.der().to_vec();
        let config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap(),
            )
            .unwrap();
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind(addr)
            .await
            .unwrap_or_else(|e| panic!("konnectivity stand-in on {addr}: {e}"));
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    if let Ok(mut tls) = acceptor.accept(tcp).await {
                        let _ = tls.write_all(KONNECTIVITY_GREETING).await;
                        let _ = tls.shutdown().await;
                    }
                });
            }
        });
        Konnectivity { leaf, task }
    }
}

impl Drop for Konnectivity {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Bytes from `listen` to `to`, both ways, untouched: the tenant's API
/// server binds loopback only, and an EndpointSlice may not name loopback.
/// TLS stays end to end (this is what kube-proxy or a pod network does).
pub struct Forward {
    task: JoinHandle<()>,
}

impl Forward {
    pub async fn start(listen: SocketAddr, to: SocketAddr) -> Self {
        let listener = TcpListener::bind(listen)
            .await
            .unwrap_or_else(|e| panic!("forwarder on {listen}: {e}"));
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Forward { task }
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        self.task.abort();
    }
}
