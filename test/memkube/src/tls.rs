//! Optional HTTPS: a throwaway CA and a server certificate for 127.0.0.1 and
//! localhost, made with rcgen at start-up. The CA goes into the kubeconfig as
//! `certificate-authority-data`, so kube and kubectl verify the server.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::error::Error;

/// The server's TLS material.
#[derive(Clone)]
pub struct Tls {
    /// Acceptor for incoming connections.
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// The CA certificate, PEM.
    pub ca_pem: String,
    /// The CA certificate, DER.
    pub ca_der: Vec<u8>,
}

fn tls_err(e: impl std::fmt::Display) -> Error {
    Error::Tls(e.to_string())
}

/// Generates a CA and a server certificate signed by it.
pub fn generate() -> Result<Tls, Error> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(tls_err)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "memkube-ca");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().map_err(tls_err)?)
        .map_err(tls_err)?;

    let key = KeyPair::generate().map_err(tls_err)?;
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .map_err(tls_err)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "memkube");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let cert = params.signed_by(&key, &ca).map_err(tls_err)?;

    let chain: Vec<CertificateDer<'static>> = vec![cert.der().clone(), ca.der().clone()];
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(tls_err)?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(tls_err)?;
    // Only HTTP/1.1 is served; clients that offer h2 fall back to it.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Tls {
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        ca_pem: ca.pem(),
        ca_der: ca.der().to_vec(),
    })
}
