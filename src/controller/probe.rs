//! Checks through the shared ingress: a real TLS handshake to `apiHost:port`
//! with that SNI (EndpointReachable), and whether the certificate served for
//! each tenant host names it and chains to the cluster CA (CertificateCoversHosts).

use std::{net::SocketAddr, sync::Arc, time::Duration};

use rustls::{
    ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
    client::{
        WebPkiServerVerifier,
        danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    },
    crypto::CryptoProvider,
    pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject},
};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// What one handshake saw.
#[derive(Debug)]
pub struct Handshake {
    /// The served chain, leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The address that answered.
    pub address: SocketAddr,
}

/// Why a handshake failed, as a condition reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeFailure {
    /// CamelCase reason.
    pub reason: &'static str,
    /// What happened and what to check.
    pub message: String,
}

/// Handshake with SNI `host` against `addresses` (or `host:port` resolved by DNS
/// when empty), trying each address until one answers.
pub async fn handshake(
    host: &str,
    port: u16,
    addresses: &[String],
    timeout: Duration,
) -> Result<Handshake, ProbeFailure> {
    let targets: Vec<SocketAddr> = if addresses.is_empty() {
        match tokio::time::timeout(timeout, tokio::net::lookup_host((host, port))).await {
            Ok(Ok(found)) => found.collect(),
            Ok(Err(e)) => {
                return Err(ProbeFailure {
                    reason: "DNSFailed",
                    message: format!(
                        "failed to resolve {host}: {e}: point {host} at the shared ingress, or list its addresses in spec.proxy.upstreams"
                    ),
                });
            }
            Err(_) => {
                return Err(ProbeFailure {
                    reason: "DNSFailed",
                    message: format!("resolving {host} timed out"),
                });
            }
        }
    } else {
        addresses
            .iter()
            .filter_map(|a| a.parse::<std::net::IpAddr>().ok())
            .map(|ip| SocketAddr::new(ip, port))
            .collect()
    };
    let mut last = ProbeFailure {
        reason: "NoAddress",
        message: format!("{host} has no address"),
    };
    for address in targets {
        match tokio::time::timeout(timeout, handshake_one(host, address)).await {
            Ok(Ok(chain)) => return Ok(Handshake { chain, address }),
            Ok(Err(failure)) => last = failure,
            Err(_) => {
                last = ProbeFailure {
                    reason: "Timeout",
                    message: format!(
                        "TLS handshake with {address} (SNI {host}) timed out after {timeout:?}"
                    ),
                }
            }
        }
    }
    Err(last)
}

async fn handshake_one(
    host: &str,
    address: SocketAddr,
) -> Result<Vec<CertificateDer<'static>>, ProbeFailure> {
    let tcp = TcpStream::connect(address)
        .await
        .map_err(|e| ProbeFailure {
            reason: "ConnectFailed",
            message: format!("failed to connect to the ingress at {address}: {e}"),
        })?;
    let name = ServerName::try_from(host.to_string()).map_err(|e| ProbeFailure {
        reason: "InvalidHost",
        message: format!("{host} is not a valid server name: {e}"),
    })?;
    // Accept any certificate here: reachability is one question, whether the
    // certificate is right is another (CertificateCoversHosts) with its own answer.
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAny(provider())))
        .with_no_client_auth();
    let tls = TlsConnector::from(Arc::new(config)).connect(name, tcp).await.map_err(|e| ProbeFailure {
        reason: "HandshakeFailed",
        message: format!(
            "TLS handshake with {address} for SNI {host} failed: {e}: is SSL passthrough enabled for this host on the ingress controller?"
        ),
    })?;
    let chain = tls
        .get_ref()
        .1
        .peer_certificates()
        .unwrap_or_default()
        .iter()
        .map(|c| c.clone().into_owned())
        .collect();
    Ok(chain)
}

/// Why a served certificate does not check out against the cluster CA,
/// in words (CertificateCoversHosts' message).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotCovered(String);

/// Does `chain` name `host` and chain to one of the CA certificates in `ca_pem`?
pub fn covers(
    chain: &[CertificateDer<'static>],
    host: &str,
    ca_pem: &[u8],
) -> Result<(), NotCovered> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        let cert = cert
            .map_err(|e| NotCovered(format!("failed to read the cluster CA certificate: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| NotCovered(format!("failed to use the cluster CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(NotCovered(
            "the cluster CA Secret holds no certificate in tls.crt".into(),
        ));
    }
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|e| {
            NotCovered(format!(
                "failed to build a verifier from the cluster CA: {e}"
            ))
        })?;
    let (leaf, intermediates) = chain
        .split_first()
        .ok_or_else(|| NotCovered("the ingress served no certificate".into()))?;
    let name = ServerName::try_from(host.to_string()).map_err(|e| NotCovered(e.to_string()))?;
    verifier
        .verify_server_cert(leaf, intermediates, &name, &[], UnixTime::now())
        .map(drop)
        .map_err(|e| {
            NotCovered(format!(
                "the certificate served for {host} does not verify against the cluster CA: {e}"
            ))
        })
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

#[derive(Debug)]
struct AcceptAny(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
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
            &self.0.signature_verification_algorithms,
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
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
