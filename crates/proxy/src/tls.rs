//! rustls configurations built from the config and its files.
//!
//! One [`TlsMaterial`] is built per (re)load and swapped atomically: new
//! connections take the current one, established connections keep theirs.

use std::{path::Path, sync::Arc};

use rustls::{
    ClientConfig, NamedGroup, RootCertStore, ServerConfig,
    client::{
        ClientSessionMemoryCache, ClientSessionStore, Resumption, Tls12ClientSessionValue,
        Tls13ClientSessionValue,
    },
    crypto::CryptoProvider,
    server::NoServerSessionStorage,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};

use super::config::Config;

/// Errors of building TLS configurations.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("failed to read {path}: {source}")]
    Read {
        /// File path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// PEM content is unusable.
    #[error("failed to load {path}: {message}")]
    Pem {
        /// File path.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// rustls refused the material (e.g. key does not match certificate).
    #[error("failed to build TLS config: {0}")]
    Rustls(#[from] rustls::Error),
}

/// ALPN names the proxy pre-builds configs for.
const H2: &[u8] = b"h2";
const HTTP11: &[u8] = b"http/1.1";

/// Everything TLS a new connection needs.
pub struct TlsMaterial {
    /// Serving configs (reencrypt mode), by the ALPN to select.
    server: Option<ServerConfigs>,
    /// Upstream client config with the client's full ALPN offer
    /// `[h2, http/1.1]`, `[http/1.1]`, `[h2]`, or none.
    client_base: Arc<ClientConfig>,
    client_h2_h11: Arc<ClientConfig>,
    client_h11: Arc<ClientConfig>,
    client_h2: Arc<ClientConfig>,
    /// `upstream.serverName`: the SNI sent and the name verified.
    upstream_name: ServerName<'static>,
    /// The serving certificate file and its leaf's `notAfter` (Unix
    /// seconds), for the expiry metric.
    pub leaf_not_after: Option<(String, i64)>,
}

struct ServerConfigs {
    none: Arc<ServerConfig>,
    h2: Arc<ServerConfig>,
    h11: Arc<ServerConfig>,
}

/// The proxy's crypto provider, on both legs: aws-lc, rustls's default,
/// with its key exchange groups as rustls orders them — the hybrid
/// post-quantum X25519MLKEM768 first (Go >= 1.24 clients and kube-apiserver
/// offer and prefer it too), then X25519, P-256, P-384. The
/// AES-128-GCM/SHA-256 suites come first: as safe as AES-256/SHA-384 (every
/// TLS 1.3 stack must implement it; Go prefers it), and its handshake hash
/// runs on the CPU's SHA extensions, which SHA-384 has none of.
pub fn provider() -> Arc<CryptoProvider> {
    use rustls::crypto::aws_lc_rs::cipher_suite as cs;
    let mut p = rustls::crypto::aws_lc_rs::default_provider();
    let preferred = [
        cs::TLS13_AES_128_GCM_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ];
    // A stable sort keeps the provider's order among the others.
    p.cipher_suites
        .sort_by_key(|s| !preferred.iter().any(|x| x.suite() == s.suite()));
    Arc::new(p)
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn pem_err(path: &Path, message: impl Into<String>) -> TlsError {
    TlsError::Pem {
        path: path.display().to_string(),
        message: message.into(),
    }
}

/// Parse a PEM certificate chain.
pub fn certs(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err(path, e.to_string()))?;
    if certs.is_empty() {
        return Err(pem_err(path, "no CERTIFICATE block"));
    }
    Ok(certs)
}

/// TLS 1.3 tickets kept per upstream name. A ticket is used once and a
/// connection takes one as it starts, so the stock must cover the
/// connections a node opens at once: rustls's memory cache keeps 8 per
/// server, fewer than a burst of new connections takes (docs/proxy.md).
/// A ticket is a few hundred bytes (the certificate chain is shared).
const TLS13_TICKETS: usize = 128;

/// The upstream session store: rustls's memory cache for key-exchange hints
/// and TLS 1.2 sessions, a deeper stock of TLS 1.3 tickets, newest used
/// first (the oldest expire first).
#[derive(Debug)]
pub(crate) struct SessionStore {
    inner: ClientSessionMemoryCache,
    tickets: std::sync::Mutex<
        std::collections::HashMap<
            ServerName<'static>,
            std::collections::VecDeque<Tls13ClientSessionValue>,
        >,
    >,
}

impl Default for SessionStore {
    fn default() -> Self {
        Self {
            inner: ClientSessionMemoryCache::new(64),
            tickets: Default::default(),
        }
    }
}

impl ClientSessionStore for SessionStore {
    fn set_kx_hint(&self, server_name: ServerName<'static>, group: NamedGroup) {
        self.inner.set_kx_hint(server_name, group);
    }

    fn kx_hint(&self, server_name: &ServerName<'_>) -> Option<NamedGroup> {
        self.inner.kx_hint(server_name)
    }

    /// A server that settled on TLS 1.2 ignores the TLS 1.3 key share our
    /// ClientHello still carries, so it gets the cheapest one (X25519)
    /// from then on instead of the hybrid post-quantum one (an ML-KEM key
    /// pair made for nothing). rustls keeps X25519MLKEM768 first in the
    /// groups offered, and replaces this hint with the group agreed as soon
    /// as the server speaks TLS 1.3.
    fn set_tls12_session(&self, server_name: ServerName<'static>, value: Tls12ClientSessionValue) {
        if self.inner.kx_hint(&server_name).is_none() {
            self.inner
                .set_kx_hint(server_name.clone(), NamedGroup::X25519);
        }
        self.inner.set_tls12_session(server_name, value);
    }

    fn tls12_session(&self, server_name: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
        self.inner.tls12_session(server_name)
    }

    fn remove_tls12_session(&self, server_name: &ServerName<'static>) {
        self.inner.remove_tls12_session(server_name);
    }

    fn insert_tls13_ticket(
        &self,
        server_name: ServerName<'static>,
        value: Tls13ClientSessionValue,
    ) {
        let mut all = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        // One upstream name per config; a bound anyway, in case of many.
        if all.len() >= 8 && !all.contains_key(&server_name) {
            all.clear();
        }
        let stock = all.entry(server_name).or_default();
        if stock.len() >= TLS13_TICKETS {
            stock.pop_front();
        }
        stock.push_back(value);
    }

    fn take_tls13_ticket(
        &self,
        server_name: &ServerName<'static>,
    ) -> Option<Tls13ClientSessionValue> {
        let mut all = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        all.get_mut(server_name)?.pop_back()
    }
}

/// Upstream client config with a session cache shared by the ALPN variants:
/// resumed upstream handshakes are most of the new-connection cost saved.
fn client_configs(
    cfg: &Config,
    provider: &Arc<CryptoProvider>,
) -> Result<[Arc<ClientConfig>; 4], TlsError> {
    let path = &cfg.upstream.ca_file;
    let mut roots = RootCertStore::empty();
    for c in certs(path, &read(path)?)? {
        roots.add(c).map_err(|e| pem_err(path, e.to_string()))?;
    }
    let mut base = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    base.resumption = Resumption::store(Arc::new(SessionStore::default()));
    let with = |alpn: &[&[u8]]| {
        let mut c = base.clone();
        c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(c)
    };
    Ok([with(&[]), with(&[H2, HTTP11]), with(&[HTTP11]), with(&[H2])])
}

fn server_configs(
    cert_path: &Path,
    cert_pem: &[u8],
    key_path: &Path,
    key_pem: &[u8],
    provider: &Arc<CryptoProvider>,
) -> Result<ServerConfigs, TlsError> {
    let chain = certs(cert_path, cert_pem)?;
    let key =
        PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| pem_err(key_path, e.to_string()))?;
    let mut base = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    // No session tickets and no session cache towards pods: Kubernetes
    // clients (client-go, and most HTTP stacks by default) never resume, so
    // tickets cost two encrypted records and a cache entry per connection
    // for nothing.
    base.send_tls13_tickets = 0;
    base.session_storage = Arc::new(NoServerSessionStorage {});
    // Our suite order, not the client's: OpenSSL clients put AES-256/SHA-384
    // first, which costs more and protects no better.
    base.ignore_client_order = true;
    let with = |alpn: &[u8]| {
        let mut c = base.clone();
        if !alpn.is_empty() {
            c.alpn_protocols = vec![alpn.to_vec()];
        }
        Arc::new(c)
    };
    Ok(ServerConfigs {
        none: with(b""),
        h2: with(H2),
        h11: with(HTTP11),
    })
}

/// `notAfter` of the first certificate of a PEM chain (the leaf): rustls
/// has already accepted the chain, so only an unreadable date gives `None`.
/// Extensions are left unparsed: the date is all the proxy needs, and a deep
/// parse runs (and keeps resident) much of x509-parser's code.
fn leaf_not_after(pem: &[u8]) -> Option<i64> {
    use x509_parser::{certificate::X509CertificateParser, nom::Parser};
    let der = CertificateDer::pem_slice_iter(pem).next()?.ok()?;
    let mut parser = X509CertificateParser::new().with_deep_parse_extensions(false);
    let (_, cert) = parser.parse(&der).ok()?;
    Some(cert.validity().not_after.timestamp())
}

impl TlsMaterial {
    /// Build from the config, reading the files now.
    pub fn load(cfg: &Config) -> Result<Self, TlsError> {
        let provider = provider();
        let [client_base, client_h2_h11, client_h11, client_h2] = client_configs(cfg, &provider)?;
        let (server, leaf_not_after) = match &cfg.tls {
            Some(t) => {
                let cert_pem = read(&t.cert_file)?;
                let configs = server_configs(
                    &t.cert_file,
                    &cert_pem,
                    &t.key_file,
                    &read(&t.key_file)?,
                    &provider,
                )?;
                let expiry =
                    leaf_not_after(&cert_pem).map(|at| (t.cert_file.display().to_string(), at));
                (Some(configs), expiry)
            }
            None => (None, None),
        };
        let upstream_name = ServerName::try_from(cfg.upstream.server_name.clone())
            .map_err(|e| rustls::Error::General(format!("upstream.serverName: {e}")))?;
        Ok(Self {
            leaf_not_after,
            upstream_name,
            server,
            client_base,
            client_h2_h11,
            client_h11,
            client_h2,
        })
    }

    /// `upstream.serverName` as rustls takes it.
    pub fn upstream_name(&self) -> &ServerName<'static> {
        &self.upstream_name
    }

    /// Upstream client config offering `alpn` (the client's offer).
    pub fn client_for(&self, alpn: &[Vec<u8>]) -> Arc<ClientConfig> {
        match alpn {
            [] => self.client_base.clone(),
            [a, b] if a == H2 && b == HTTP11 => self.client_h2_h11.clone(),
            [a] if a == HTTP11 => self.client_h11.clone(),
            [a] if a == H2 => self.client_h2.clone(),
            other => {
                let mut c = (*self.client_base).clone();
                c.alpn_protocols = other.to_vec();
                Arc::new(c)
            }
        }
    }

    /// Serving config that selects exactly `alpn` (what the upstream chose).
    pub fn server_for(&self, alpn: Option<&[u8]>) -> Option<Arc<ServerConfig>> {
        let s = self.server.as_ref()?;
        Some(match alpn {
            None => s.none.clone(),
            Some(H2) => s.h2.clone(),
            Some(HTTP11) => s.h11.clone(),
            Some(other) => {
                let mut c = (*s.none).clone();
                c.alpn_protocols = vec![other.to_vec()];
                Arc::new(c)
            }
        })
    }
}

/// A CA-less pair for tests: a server speaking `server_versions` with a
/// self-signed leaf for `api.example.com`, on the proxy's provider, and a
/// client speaking `client_versions` that trusts it.
#[cfg(test)]
pub(crate) fn test_pair(
    server_versions: &[&'static rustls::SupportedProtocolVersion],
    client_versions: &[&'static rustls::SupportedProtocolVersion],
) -> (ServerConfig, ClientConfig) {
    let provider = provider();
    let leaf = rcgen::generate_simple_self_signed(vec!["api.example.com".to_string()]).unwrap();
    let der = leaf.cert.der().clone();
    let key = rustls_pki_types::PrivatePkcs8KeyDer::from(leaf.signing_key.serialize_der());
    let server = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(server_versions)
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![der.clone()], key.into())
        .unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(der).unwrap();
    let client = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(client_versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (server, client)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;

    fn write_pki(dir: &Path) {
        let ca = rcgen::generate_simple_self_signed(vec!["ca.example.com".to_string()]).unwrap();
        let leaf =
            rcgen::generate_simple_self_signed(vec!["kubernetes.default.svc".to_string()]).unwrap();
        let other = rcgen::KeyPair::generate().unwrap();
        std::fs::write(dir.join("ca.crt"), ca.cert.pem()).unwrap();
        std::fs::write(dir.join("tls.crt"), leaf.cert.pem()).unwrap();
        std::fs::write(dir.join("tls.key"), leaf.signing_key.serialize_pem()).unwrap();
        std::fs::write(dir.join("other.key"), other.serialize_pem()).unwrap();
        std::fs::write(dir.join("empty.crt"), "").unwrap();
    }

    fn cfg(dir: &Path, ca: &str, key: &str) -> Config {
        let d = dir.display();
        let text = format!(
            "upstream: {{serverName: api.example.com, caFile: {d}/{ca}}}\ntls: {{certFile: {d}/tls.crt, keyFile: {d}/{key}}}\n"
        );
        config::validate(config::parse(&text).unwrap()).unwrap()
    }

    /// AES-128-GCM/SHA-256 first in both TLS versions, nothing dropped.
    #[test]
    fn provider_prefers_aes128_sha256_and_keeps_every_suite() {
        use rustls::CipherSuite as S;
        let ours: Vec<S> = provider().cipher_suites.iter().map(|s| s.suite()).collect();
        let all = rustls::crypto::aws_lc_rs::default_provider().cipher_suites;
        assert_eq!(ours.len(), all.len());
        assert_eq!(ours[0], S::TLS13_AES_128_GCM_SHA256);
        let tls12 = ours
            .iter()
            .position(|s| *s == S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256);
        let tls12_256 = ours
            .iter()
            .position(|s| *s == S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384);
        assert!(tls12 < tls12_256, "{ours:?}");
    }

    /// A TLS 1.2 server's resumed handshakes carry an X25519 key share,
    /// not a hybrid one it would ignore; a group a TLS 1.3 server agreed
    /// stays the hint.
    #[test]
    fn a_tls12_server_gets_the_cheapest_key_share() {
        let (server_cfg, mut client) =
            test_pair(&[&rustls::version::TLS12], rustls::DEFAULT_VERSIONS);
        let server_cfg = Arc::new(server_cfg);
        let store = Arc::new(SessionStore::default());
        client.resumption = Resumption::store(store.clone());
        let client = Arc::new(client);
        let name = ServerName::try_from("api.example.com").unwrap();
        let mut hellos = Vec::new();
        for _ in 0..2 {
            let mut c = rustls::ClientConnection::new(client.clone(), name.clone()).unwrap();
            let mut s = rustls::ServerConnection::new(server_cfg.clone()).unwrap();
            let mut hello = Vec::new();
            c.write_tls(&mut hello).unwrap();
            hellos.push(hello.clone());
            // Run the handshake to its end in memory.
            let mut wire = hello;
            while c.is_handshaking() || s.is_handshaking() {
                s.read_tls(&mut &wire[..]).unwrap();
                s.process_new_packets().unwrap();
                wire.clear();
                s.write_tls(&mut wire).unwrap();
                c.read_tls(&mut &wire[..]).unwrap();
                c.process_new_packets().unwrap();
                wire.clear();
                c.write_tls(&mut wire).unwrap();
            }
        }
        assert_eq!(store.kx_hint(&name), Some(NamedGroup::X25519));
        // Key share entries: group, then length. The hybrid one (0x11ec)
        // is 1,216 bytes, X25519's (0x001d) 32; the hybrid group stays
        // offered in supported_groups, so the entries are what to look for.
        let hybrid_share = [0x11, 0xec, 0x04, 0xc0];
        assert!(hellos[0].windows(4).any(|w| w == hybrid_share));
        assert!(
            !hellos[1].windows(4).any(|w| w == hybrid_share),
            "a hybrid share sent to a TLS 1.2 server"
        );
        assert!(hellos[1].windows(4).any(|w| w == [0x00, 0x1d, 0x00, 0x20]));
        store.set_kx_hint(name.clone(), NamedGroup::X25519MLKEM768);
        store.set_tls12_session(name.clone(), store.tls12_session(&name).unwrap());
        assert_eq!(store.kx_hint(&name), Some(NamedGroup::X25519MLKEM768));
    }

    /// The hybrid post-quantum group is offered first, X25519 next.
    #[test]
    fn provider_offers_x25519mlkem768_first() {
        let groups: Vec<NamedGroup> = provider().kx_groups.iter().map(|g| g.name()).collect();
        assert_eq!(
            groups[..2],
            [NamedGroup::X25519MLKEM768, NamedGroup::X25519]
        );
    }

    #[test]
    fn loads_and_selects_alpn_variants() {
        let dir = std::env::temp_dir().join(format!("hcp-proxy-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write_pki(&dir);
        let m = TlsMaterial::load(&cfg(&dir, "ca.crt", "tls.key")).unwrap();
        let (file, not_after) = m.leaf_not_after.clone().expect("the leaf's notAfter");
        assert_eq!(file, dir.join("tls.crt").display().to_string());
        assert!(not_after > 1_700_000_000, "{not_after}");
        assert!(m.client_for(&[]).alpn_protocols.is_empty());
        assert_eq!(
            m.client_for(&[H2.to_vec(), HTTP11.to_vec()])
                .alpn_protocols
                .len(),
            2
        );
        assert_eq!(
            m.client_for(&[b"acme-tls/1".to_vec()]).alpn_protocols,
            vec![b"acme-tls/1".to_vec()]
        );
        assert_eq!(
            m.server_for(Some(H2)).unwrap().alpn_protocols,
            vec![H2.to_vec()]
        );
        assert!(m.server_for(None).unwrap().alpn_protocols.is_empty());

        // A key that does not match the certificate, an empty CA bundle.
        assert!(matches!(
            TlsMaterial::load(&cfg(&dir, "ca.crt", "other.key")),
            Err(TlsError::Rustls(_))
        ));
        assert!(matches!(
            TlsMaterial::load(&cfg(&dir, "empty.crt", "tls.key")),
            Err(TlsError::Pem { .. })
        ));
        assert!(matches!(
            TlsMaterial::load(&cfg(&dir, "missing.crt", "tls.key")),
            Err(TlsError::Read { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The error about a broken or mismatched key names the file, never its
    /// contents: it is logged and counted as a reload failure.
    #[test]
    fn key_errors_do_not_quote_the_key() {
        let dir = std::env::temp_dir().join(format!("hcp-proxy-tls-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write_pki(&dir);
        let body = "TOPSECRETKEYMATERIALx0123456789abcdefghijklmn";
        std::fs::write(
            dir.join("broken.key"),
            format!("-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n"),
        )
        .unwrap();
        let other_key = std::fs::read_to_string(dir.join("other.key")).unwrap();
        for (file, secret_lines) in [
            ("broken.key", vec![body.to_string()]),
            (
                "other.key",
                other_key
                    .lines()
                    .filter(|l| !l.starts_with("-----"))
                    .map(str::to_string)
                    .collect(),
            ),
        ] {
            let message = match TlsMaterial::load(&cfg(&dir, "ca.crt", file)) {
                Err(e) => format!("{e} {e:?}"),
                Ok(_) => panic!("{file} must be refused"),
            };
            for line in secret_lines {
                assert!(
                    !message.contains(&line),
                    "{file}: the error quotes the key: {message}"
                );
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
