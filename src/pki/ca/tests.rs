use std::{
    net::IpAddr,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, KeyUsagePurpose};
use x509_parser::{certificate::X509Certificate, extensions::ParsedExtension, prelude::FromDer};

use super::*;
use crate::pki::{RenewReason, Renewal, renewal_due};

/// kubeadm/k0s style: RSA 2048, PKCS#1 key (openssl genrsa -traditional).
const RSA_CA_CERT: &str = include_str!("../../../test/workload/fixtures/ca.crt");
const RSA_CA_KEY: &str = include_str!("../../../test/workload/fixtures/ca.key");
/// EC P-256 with a SEC1 key.
const EC_CA_CERT: &str = include_str!("../../../test/workload/fixtures/ec-ca.crt");
const EC_CA_KEY: &str = include_str!("../../../test/workload/fixtures/ec-ca.key");

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn rsa_ca() -> CertificateAuthority {
    CertificateAuthority::from_pem(RSA_CA_CERT, RSA_CA_KEY).unwrap()
}

fn spec() -> LeafSpec {
    LeafSpec::proxy("cluster.local", ip("10.96.0.1"), ip("240.0.0.1"), now())
}

/// A CA made by rcgen, PKCS#8 key.
fn pkcs8_ca() -> (String, String) {
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn parse(pem: &str) -> Vec<u8> {
    first_certificate(pem).unwrap()
}

#[test]
fn minted_leaf_parses_chains_to_the_ca_and_carries_the_sans() {
    for ca in [
        rsa_ca(),
        CertificateAuthority::from_pem(EC_CA_CERT, EC_CA_KEY).unwrap(),
    ] {
        let leaf = mint_leaf(&ca, &spec()).unwrap();
        let der = parse(&leaf.cert_pem);
        let (_, cert) = X509Certificate::from_der(&der).unwrap();
        let (_, ca_cert) = X509Certificate::from_der(ca.cert_der()).unwrap();
        cert.verify_signature(Some(ca_cert.public_key()))
            .expect("signed by the CA");
        assert_eq!(cert.issuer().as_raw(), ca_cert.subject().as_raw());
        assert_eq!(
            cert_sans(&cert).unwrap(),
            [
                "DNS:kubernetes",
                "DNS:kubernetes.default",
                "DNS:kubernetes.default.svc",
                "DNS:kubernetes.default.svc.cluster.local",
                "IP:10.96.0.1",
                "IP:240.0.0.1",
            ]
        );
        // ECDSA P-256 key, serverAuth only, not a CA.
        assert_eq!(
            cert.public_key().algorithm.algorithm.to_id_string(),
            "1.2.840.10045.2.1"
        );
        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.server_auth && !eku.client_auth);
        let is_ca = cert
            .basic_constraints()
            .unwrap()
            .is_some_and(|bc| bc.value.ca);
        assert!(!is_ca);
        let has_aki = cert.extensions().iter().any(|e| {
            matches!(
                e.parsed_extension(),
                ParsedExtension::AuthorityKeyIdentifier(_)
            )
        });
        assert!(has_aki, "authority key identifier helps chain building");
        assert!(key_matches(&leaf.cert_pem, &leaf.key_pem));
        assert!(
            leaf.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"),
            "PKCS#8 for the proxy"
        );
    }
}

#[test]
fn the_leaf_is_accepted_by_rustls_webpki_as_a_server_certificate() {
    use rustls::{RootCertStore, client::WebPkiServerVerifier, client::danger::ServerCertVerifier};
    use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
    let ca = rsa_ca();
    let leaf = mint_leaf(&ca, &spec()).unwrap();
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from(ca.cert_der().to_vec()))
        .unwrap();
    let verifier =
        WebPkiServerVerifier::builder_with_provider(roots.into(), crate::proxy::tls::provider())
            .build()
            .unwrap();
    let end_entity = CertificateDer::from(parse(&leaf.cert_pem));
    let at = UnixTime::since_unix_epoch(now().duration_since(UNIX_EPOCH).unwrap());
    for name in [
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        "10.96.0.1",
        "240.0.0.1",
    ] {
        let name = ServerName::try_from(name).unwrap();
        verifier
            .verify_server_cert(&end_entity, &[], &name, &[], at)
            .unwrap_or_else(|e| panic!("{name:?}: {e}"));
    }
    let wrong = ServerName::try_from("api.tenant.example.com").unwrap();
    assert!(
        verifier
            .verify_server_cert(&end_entity, &[], &wrong, &[], at)
            .is_err()
    );
}

#[test]
fn validity_is_backdated_and_seven_days_by_default() {
    let leaf = mint_leaf(&rsa_ca(), &spec()).unwrap();
    assert_eq!(leaf.not_before, now() - BACKDATE);
    assert_eq!(leaf.not_after, now() + Duration::from_secs(7 * 24 * 3600));
    let der = parse(&leaf.cert_pem);
    let (_, cert) = X509Certificate::from_der(&der).unwrap();
    let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
    assert_eq!(
        cert.validity().not_before.timestamp(),
        secs(leaf.not_before)
    );
    assert_eq!(cert.validity().not_after.timestamp(), secs(leaf.not_after));
    assert_eq!(
        leaf.renew_at(),
        leaf.not_before + (leaf.not_after.duration_since(leaf.not_before).unwrap() * 2 / 3)
    );
}

#[test]
fn fresh_leaf_is_valid_until_two_thirds_of_its_life() {
    let ca = rsa_ca();
    let leaf = mint_leaf(&ca, &spec()).unwrap();
    let renew = leaf.renew_at();
    assert_eq!(
        renewal_due(&leaf.cert_pem, now(), &ca, &spec()),
        Renewal::Valid { renew_at: renew }
    );
    let just_before = renew - Duration::from_secs(1);
    assert_eq!(
        renewal_due(&leaf.cert_pem, just_before, &ca, &spec()),
        Renewal::Valid { renew_at: renew }
    );
    assert_eq!(
        renewal_due(&leaf.cert_pem, renew, &ca, &spec()),
        Renewal::Due(RenewReason::LifeElapsed {
            renew_at: renew,
            not_after: leaf.not_after
        })
    );
    let expired = leaf.not_after + Duration::from_secs(3600);
    assert!(matches!(
        renewal_due(&leaf.cert_pem, expired, &ca, &spec()),
        Renewal::Due(RenewReason::LifeElapsed { .. })
    ));
}

#[test]
fn renewal_reasons() {
    let ca = rsa_ca();
    let leaf = mint_leaf(&ca, &spec()).unwrap();

    // Unparsable.
    for bad in [
        "",
        "not pem",
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    ] {
        let r = renewal_due(bad, now(), &ca, &spec());
        assert!(
            matches!(r, Renewal::Due(RenewReason::Unparsable(_))),
            "{bad:?}: {r:?}"
        );
    }

    // Another CA (rotation): same subject name as nothing, different key.
    let (other_cert, other_key) = pkcs8_ca();
    let other = CertificateAuthority::from_pem(&other_cert, &other_key).unwrap();
    assert_eq!(
        renewal_due(&leaf.cert_pem, now(), &other, &spec()),
        Renewal::Due(RenewReason::OtherIssuer)
    );
    // A CA rotated to a new key under the same name is caught by the signature.
    let same_name = {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kubernetes");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        CertificateAuthority::from_pem(&cert.pem(), &key.serialize_pem()).unwrap()
    };
    assert_eq!(
        renewal_due(&leaf.cert_pem, now(), &same_name, &spec()),
        Renewal::Due(RenewReason::OtherIssuer)
    );

    // SANs differ: a new advertise address and cluster domain.
    let moved = LeafSpec::proxy("tenant.local", ip("10.96.0.1"), ip("240.0.0.2"), now());
    match renewal_due(&leaf.cert_pem, now(), &ca, &moved) {
        Renewal::Due(RenewReason::SansDiffer {
            missing,
            unexpected,
        }) => {
            assert_eq!(
                missing,
                ["DNS:kubernetes.default.svc.tenant.local", "IP:240.0.0.2"]
            );
            assert_eq!(
                unexpected,
                ["DNS:kubernetes.default.svc.cluster.local", "IP:240.0.0.1"]
            );
        }
        other => panic!("{other:?}"),
    }

    // Minted by a clock far ahead.
    let ahead = LeafSpec {
        now: now() + Duration::from_secs(86_400),
        ..spec()
    };
    let future = mint_leaf(&ca, &ahead).unwrap();
    assert_eq!(
        renewal_due(&future.cert_pem, now(), &ca, &spec()),
        Renewal::Due(RenewReason::NotYetValid {
            not_before: future.not_before
        })
    );
    // ...but the backdating covers a few minutes of skew.
    let skewed = mint_leaf(
        &ca,
        &LeafSpec {
            now: now() + Duration::from_secs(120),
            ..spec()
        },
    )
    .unwrap();
    assert!(matches!(
        renewal_due(&skewed.cert_pem, now(), &ca, &spec()),
        Renewal::Valid { .. }
    ));
}

#[test]
fn renewal_reasons_read_well() {
    let r = RenewReason::SansDiffer {
        missing: vec!["IP:240.0.0.2".into()],
        unexpected: vec![],
    };
    assert_eq!(
        r.to_string(),
        "the certificate's names differ: missing [IP:240.0.0.2], unexpected []"
    );
    let r = RenewReason::LifeElapsed {
        renew_at: now(),
        not_after: now() + Duration::from_secs(60),
    };
    assert_eq!(
        r.to_string(),
        "two thirds of the certificate's life have passed (renew at 2027-01-15T08:00:00Z, expires 2027-01-15T08:01:00Z)"
    );
}

#[test]
fn ca_loading_accepts_pkcs1_sec1_and_pkcs8_keys() {
    rsa_ca();
    CertificateAuthority::from_pem(EC_CA_CERT, EC_CA_KEY).unwrap();
    let (cert, key) = pkcs8_ca();
    let ca = CertificateAuthority::from_pem(&cert, &key).unwrap();
    mint_leaf(&ca, &spec()).unwrap();
}

#[test]
fn ca_errors_say_what_is_wrong_without_the_key() {
    let err = |cert: &str, key: &str| {
        CertificateAuthority::from_pem(cert, key)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err("", RSA_CA_KEY),
        "failed to parse the CA certificate: no PEM CERTIFICATE block"
    );
    assert!(err(RSA_CA_KEY, RSA_CA_KEY).starts_with("failed to parse the CA certificate"));
    // The key where the certificate belongs: the message must not echo it.
    assert!(!err(RSA_CA_KEY, RSA_CA_KEY).contains("MII"));
    let e = err(RSA_CA_CERT, "garbage");
    assert!(
        e.starts_with("failed to parse the CA key: no PEM private key"),
        "{e}"
    );
    let truncated: String = RSA_CA_KEY.lines().take(5).collect::<Vec<_>>().join("\n");
    let e = err(RSA_CA_CERT, &truncated);
    assert!(e.starts_with("failed to parse the CA key"), "{e}");
    for line in RSA_CA_KEY.lines().skip(1).take(3) {
        assert!(!e.contains(line), "the error echoes key material: {e}");
    }
    assert_eq!(
        err(RSA_CA_CERT, EC_CA_KEY),
        "failed to use the CA: the key does not match the certificate's public key"
    );
    // A leaf is not a CA.
    let leaf = mint_leaf(&rsa_ca(), &spec()).unwrap();
    assert_eq!(
        err(&leaf.cert_pem, &leaf.key_pem),
        "failed to use the CA certificate: it is not a CA (basicConstraints CA:TRUE is missing)"
    );
}

#[test]
fn debug_output_never_shows_keys() {
    let ca = rsa_ca();
    let leaf = mint_leaf(&ca, &spec()).unwrap();
    let leaf_debug = format!("{leaf:?}");
    assert!(leaf_debug.contains("<redacted>") && !leaf_debug.contains("PRIVATE KEY"));
    assert!(!format!("{ca:?}").contains("PRIVATE KEY"));
}

#[test]
fn key_matches_detects_a_mismatched_pair() {
    let ca = rsa_ca();
    let a = mint_leaf(&ca, &spec()).unwrap();
    let b = mint_leaf(&ca, &spec()).unwrap();
    assert!(!key_matches(&a.cert_pem, &b.key_pem));
    assert!(!key_matches("nope", &a.key_pem));
}

#[test]
fn bad_names_are_refused() {
    let mut s = spec();
    s.dns_names.push("kübernetes".into());
    assert!(
        mint_leaf(&rsa_ca(), &s)
            .unwrap_err()
            .to_string()
            .starts_with("failed to mint the certificate")
    );
}

/// The PEM we write is what openssl writes: LF line endings, 64 columns,
/// a final newline. The fixtures are openssl's, so a certificate read from
/// one comes back byte for byte.
#[test]
fn pem_output_is_byte_for_byte_openssl_style() {
    for fixture in [RSA_CA_CERT, EC_CA_CERT] {
        assert_eq!(ca_certificate_pem(fixture).unwrap(), fixture);
    }
    let leaf = mint_leaf(&rsa_ca(), &spec()).unwrap();
    assert!(!leaf.cert_pem.contains('\r'));
    assert!(leaf.cert_pem.ends_with("-----END CERTIFICATE-----\n"));
}
