//! The cluster CA and the leaves it signs: loading, minting, facts read
//! back from a certificate.

use std::{
    fmt,
    net::IpAddr,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, PublicKeyData, SanType,
};
use rustls_pki_types::{PrivateKeyDer, pem::PemObject};
use time::OffsetDateTime;
use x509_parser::{certificate::X509Certificate, extensions::GeneralName, prelude::FromDer};

/// Default life of a proxy certificate.
pub const DEFAULT_VALIDITY: Duration = Duration::from_secs(7 * 24 * 3600);
/// How far `notBefore` is set in the past, so nodes whose clocks run a little
/// behind the controller's accept a certificate minted a moment ago.
pub const BACKDATE: Duration = Duration::from_secs(5 * 60);
/// Common name of the proxy certificate (clients check the SANs, not this).
pub const LEAF_COMMON_NAME: &str = "hcp-ingress-proxy";

/// Why a CA or a certificate is unusable.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// The CA certificate PEM holds no parsable certificate.
    #[error("failed to parse the CA certificate: {0}")]
    CaCertificate(String),
    /// The CA certificate is not marked as a CA.
    #[error(
        "failed to use the CA certificate: it is not a CA (basicConstraints CA:TRUE is missing)"
    )]
    NotACa,
    /// The CA key PEM holds no usable private key (the key itself is never printed).
    #[error("failed to parse the CA key: {0}")]
    CaKey(String),
    /// Key and certificate belong to different key pairs.
    #[error("failed to use the CA: the key does not match the certificate's public key")]
    KeyMismatch,
    /// A requested name cannot go into a certificate.
    #[error("failed to mint the certificate: {0}")]
    Name(String),
    /// rcgen refused to build or sign.
    #[error("failed to mint the certificate: {0}")]
    Mint(String),
}

/// A cluster CA able to sign leaves. `Debug` never shows the key.
pub struct CertificateAuthority {
    cert_pem: String,
    pub(super) cert_der: Vec<u8>,
    issuer: Issuer<'static, KeyPair>,
}

impl fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    /// Load a CA from the `tls.crt` / `tls.key` of a `<cluster>-ca` Secret.
    /// The key may be PKCS#8, PKCS#1 (RSA, as kubeadm and k0s write it) or
    /// SEC1 (EC); it must match the certificate, which must be a CA.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, PkiError> {
        let cert_der = ca_certificate_der(cert_pem)?;
        let (_, cert) =
            X509Certificate::from_der(&cert_der).expect("checked by ca_certificate_der");
        let key = load_key(key_pem)?;
        if key.subject_public_key_info() != cert.public_key().raw {
            return Err(PkiError::KeyMismatch);
        }
        let issuer = Issuer::from_ca_cert_der(&cert_der.clone().into(), key)
            .map_err(|e| PkiError::CaCertificate(e.to_string()))?;
        let cert_pem = pem_encode("CERTIFICATE", &cert_der);
        Ok(CertificateAuthority {
            cert_pem,
            cert_der,
            issuer,
        })
    }

    /// The CA certificate (first certificate of the input, re-encoded), for `ca.crt`.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }
}

/// Check a CA certificate without its key (the proxy only verifies with it)
/// and return its first certificate, PEM.
pub fn ca_certificate_pem(cert_pem: &str) -> Result<String, PkiError> {
    Ok(pem_encode("CERTIFICATE", &ca_certificate_der(cert_pem)?))
}

fn ca_certificate_der(cert_pem: &str) -> Result<Vec<u8>, PkiError> {
    let cert_der = first_certificate(cert_pem).map_err(PkiError::CaCertificate)?;
    let (_, cert) = X509Certificate::from_der(&cert_der)
        .map_err(|e| PkiError::CaCertificate(format!("not X.509: {e}")))?;
    let is_ca = cert
        .basic_constraints()
        .ok()
        .flatten()
        .is_some_and(|bc| bc.value.ca);
    if !is_ca {
        return Err(PkiError::NotACa);
    }
    Ok(cert_der)
}

/// What to put in a leaf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafSpec {
    /// DNS subject alternative names.
    pub dns_names: Vec<String>,
    /// IP subject alternative names.
    pub ip_addresses: Vec<IpAddr>,
    /// Life from `now` ([`DEFAULT_VALIDITY`] for the proxy).
    pub validity: Duration,
    /// The clock.
    pub now: SystemTime,
}

impl LeafSpec {
    /// The proxy's serving certificate: every name a pod uses for the API
    /// (`kubernetes`, `kubernetes.default`, `kubernetes.default.svc`,
    /// `kubernetes.default.svc.<cluster domain>`), the first service IP and
    /// the advertise address; [`DEFAULT_VALIDITY`].
    pub fn proxy(
        cluster_domain: &str,
        service_ip: IpAddr,
        advertise_address: IpAddr,
        now: SystemTime,
    ) -> Self {
        let domain = cluster_domain.trim_end_matches('.');
        let mut ip_addresses = vec![service_ip];
        if advertise_address != service_ip {
            ip_addresses.push(advertise_address);
        }
        LeafSpec {
            dns_names: vec![
                "kubernetes".into(),
                "kubernetes.default".into(),
                "kubernetes.default.svc".into(),
                format!("kubernetes.default.svc.{domain}"),
            ],
            ip_addresses,
            validity: DEFAULT_VALIDITY,
            now,
        }
    }

    /// The SANs as they are compared: `DNS:name` and `IP:address`, sorted.
    pub(super) fn sans(&self) -> Vec<String> {
        let mut sans: Vec<String> = self
            .dns_names
            .iter()
            .map(|d| format!("DNS:{}", d.to_ascii_lowercase()))
            .chain(self.ip_addresses.iter().map(|ip| format!("IP:{ip}")))
            .collect();
        sans.sort();
        sans.dedup();
        sans
    }
}

/// A freshly minted leaf. `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct Leaf {
    /// The certificate, PEM (`tls.crt`).
    pub cert_pem: String,
    /// The PKCS#8 private key, PEM (`tls.key`).
    pub key_pem: String,
    /// Start of validity (backdated by [`BACKDATE`]).
    pub not_before: SystemTime,
    /// End of validity.
    pub not_after: SystemTime,
}

impl fmt::Debug for Leaf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leaf")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .finish()
    }
}

impl Leaf {
    /// When this leaf should be replaced: two thirds into its life.
    pub fn renew_at(&self) -> SystemTime {
        renew_at(self.not_before, self.not_after)
    }
}

/// Mint an ECDSA P-256 server leaf signed by `ca`: serverAuth, not a CA,
/// valid from `now - BACKDATE` to `now + validity`.
pub fn mint_leaf(ca: &CertificateAuthority, spec: &LeafSpec) -> Result<Leaf, PkiError> {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, LEAF_COMMON_NAME);
    params.distinguished_name = dn;
    for name in &spec.dns_names {
        let ia5 = name
            .clone()
            .try_into()
            .map_err(|_| PkiError::Name(format!("{name:?} is not a valid DNS name")))?;
        params.subject_alt_names.push(SanType::DnsName(ia5));
    }
    params
        .subject_alt_names
        .extend(spec.ip_addresses.iter().copied().map(SanType::IpAddress));
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let not_before = spec.now.checked_sub(BACKDATE).unwrap_or(UNIX_EPOCH);
    let not_after = spec
        .now
        .checked_add(spec.validity)
        .ok_or_else(|| PkiError::Mint("validity is too long".into()))?;
    params.not_before = to_offset(not_before)?;
    params.not_after = to_offset(not_after)?;
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
        .map_err(|e| PkiError::Mint(e.to_string()))?;
    let cert = params
        .signed_by(&key, &ca.issuer)
        .map_err(|e| PkiError::Mint(e.to_string()))?;
    // The encoded times are whole seconds: report what the certificate says.
    let (not_before, not_after) = (truncate(not_before), truncate(not_after));
    Ok(Leaf {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        not_before,
        not_after,
    })
}

/// The end of validity (`notAfter`, Unix seconds) of the first certificate
/// in `cert_pem`, for the expiry metrics; `None` when it does not parse.
pub fn not_after_unix(cert_pem: &str) -> Option<i64> {
    let der = first_certificate(cert_pem).ok()?;
    let (_, cert) = X509Certificate::from_der(&der).ok()?;
    Some(cert.validity().not_after.timestamp())
}

/// Whether `key_pem` is the private key of `cert_pem` (a Secret whose two
/// halves disagree makes the proxy refuse to load it: re-mint).
pub fn key_matches(cert_pem: &str, key_pem: &str) -> bool {
    let Ok(der) = first_certificate(cert_pem) else {
        return false;
    };
    let Ok((_, cert)) = X509Certificate::from_der(&der) else {
        return false;
    };
    load_key(key_pem).is_ok_and(|key| key.subject_public_key_info() == cert.public_key().raw)
}

/// Two thirds of the way from `not_before` to `not_after`.
pub fn renew_at(not_before: SystemTime, not_after: SystemTime) -> SystemTime {
    let life = not_after.duration_since(not_before).unwrap_or_default();
    not_before + life * 2 / 3
}

/// RFC 3339 in UTC, for messages.
pub fn rfc3339(t: SystemTime) -> String {
    OffsetDateTime::from(t)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| format!("{t:?}"))
}

/// What a served certificate says about itself: subject, subjectAltNames
/// (`DNS:…`, `IP:…`, sorted) and notAfter. For checking a certificate some
/// other party serves (the tenant API server through the ingress).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateFacts {
    /// The subject, as `CN=…, O=…`.
    pub subject: String,
    /// subjectAltNames, `DNS:` lower case.
    pub sans: Vec<String>,
    /// End of validity.
    pub not_after: SystemTime,
}

/// Read [`CertificateFacts`] from a DER certificate.
pub fn certificate_facts(der: &[u8]) -> Result<CertificateFacts, String> {
    let (_, cert) = X509Certificate::from_der(der).map_err(|e| format!("not X.509: {e}"))?;
    Ok(CertificateFacts {
        subject: cert.subject().to_string(),
        sans: cert_sans(&cert)?,
        not_after: from_unix(cert.validity().not_after.timestamp()),
    })
}

pub(super) fn cert_sans(cert: &X509Certificate<'_>) -> Result<Vec<String>, String> {
    let ext = cert
        .subject_alternative_name()
        .map_err(|e| format!("bad subjectAltName: {e}"))?;
    let mut sans = Vec::new();
    for name in ext
        .map(|e| e.value.general_names.as_slice())
        .unwrap_or_default()
    {
        match name {
            GeneralName::DNSName(d) => sans.push(format!("DNS:{}", d.to_ascii_lowercase())),
            GeneralName::IPAddress(bytes) => match bytes.len() {
                4 => sans.push(format!(
                    "IP:{}",
                    IpAddr::from(<[u8; 4]>::try_from(*bytes).expect("4 bytes"))
                )),
                16 => sans.push(format!(
                    "IP:{}",
                    IpAddr::from(<[u8; 16]>::try_from(*bytes).expect("16 bytes"))
                )),
                n => return Err(format!("an IP address SAN has {n} bytes")),
            },
            other => sans.push(format!("{other}")),
        }
    }
    sans.sort();
    sans.dedup();
    Ok(sans)
}

/// DER of the first `CERTIFICATE` block of a PEM text.
pub(super) fn first_certificate(pem: &str) -> Result<Vec<u8>, String> {
    use rustls_pki_types::CertificateDer;
    match CertificateDer::pem_slice_iter(pem.as_bytes()).next() {
        Some(Ok(der)) => Ok(der.to_vec()),
        Some(Err(e)) => Err(format!("bad PEM: {e}")),
        None => Err("no PEM CERTIFICATE block".into()),
    }
}

/// A private key from PEM, in any of the encodings CAs are found in.
fn load_key(pem: &str) -> Result<KeyPair, PkiError> {
    let key = PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| {
        PkiError::CaKey(format!(
            "no PEM private key (PKCS#8, PKCS#1 or SEC1) found ({})",
            describe_pem_error(&e)
        ))
    })?;
    // rcgen builds a signing key from PKCS#8: wrap the other two.
    let pkcs8 = match &key {
        PrivateKeyDer::Pkcs8(k) => k.secret_pkcs8_der().to_vec(),
        PrivateKeyDer::Pkcs1(k) => super::der::pkcs1_to_pkcs8(k.secret_pkcs1_der()),
        PrivateKeyDer::Sec1(k) => {
            super::der::sec1_to_pkcs8(k.secret_sec1_der()).ok_or_else(|| {
                PkiError::CaKey("unsupported EC key: only P-256 and P-384 are".into())
            })?
        }
        _ => return Err(PkiError::CaKey("unsupported key encoding".into())),
    };
    let pkcs8 = PrivateKeyDer::Pkcs8(pkcs8.into());
    KeyPair::try_from(&pkcs8).map_err(|_| {
        PkiError::CaKey("unsupported key type: RSA, ECDSA P-256/P-384 and Ed25519 are".into())
    })
}

/// Describe a PEM error without echoing any of the input.
fn describe_pem_error(e: &rustls_pki_types::pem::Error) -> &'static str {
    use rustls_pki_types::pem::Error;
    match e {
        Error::NoItemsFound => "no PEM block",
        Error::MissingSectionEnd { .. } => "a PEM block has no END line",
        Error::IllegalSectionStart { .. } => "a PEM BEGIN line is malformed",
        Error::Base64Decode(_) => "a PEM block is not valid base64",
        _ => "unreadable PEM",
    }
}

/// PEM with LF line endings and 64-column base64 (RFC 7468), as the
/// Secrets and files we write always had.
fn pem_encode(label: &str, der: &[u8]) -> String {
    pem::encode_config(
        &pem::Pem::new(label, der),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
}

fn to_offset(t: SystemTime) -> Result<OffsetDateTime, PkiError> {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| PkiError::Mint("time before 1970".into()))?
        .as_secs();
    OffsetDateTime::from_unix_timestamp(secs as i64).map_err(|e| PkiError::Mint(e.to_string()))
}

fn truncate(t: SystemTime) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs())
}

pub(super) fn from_unix(secs: i64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs as u64)
    } else {
        UNIX_EPOCH
    }
}

#[cfg(test)]
mod tests;
