//! The certificate `render --workload` mints: it parses, chains to the
//! cluster CA, carries the SANs, lives seven days from the clock, is due for
//! renewal at two thirds of that life, and its key matches.

use std::time::Duration;

use hcp_ingress::pki::{self, CertificateAuthority, LeafSpec, RenewReason, Renewal};
use x509_parser::{extensions::GeneralName, prelude::FromDer, prelude::X509Certificate};

use crate::{fixture, now, object, render, secret_text};

fn ca() -> CertificateAuthority {
    let read = |n: &str| std::fs::read_to_string(fixture(n)).unwrap();
    CertificateAuthority::from_pem(&read("ca.crt"), &read("ca.key")).unwrap()
}

/// Run the binary, as a user would, and return the JSON list it prints.
fn render_command(extra: &[&str]) -> serde_json::Value {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_hcp-ingress"))
        .args([
            "render",
            "--workload",
            "-o",
            "json",
            "--now",
            "2026-01-01T00:00:00Z",
            "-f",
        ])
        .arg(fixture("reencrypt-advertise-address.yaml"))
        .arg("--ca-cert")
        .arg(fixture("ca.crt"))
        .arg("--ca-key")
        .arg(fixture("ca.key"))
        .args(extra)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn tls_secret(list: &serde_json::Value) -> serde_json::Value {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "Secret")
        .expect("a TLS Secret")
        .clone()
}

#[test]
fn minted_certificate_parses_chains_to_the_ca_and_carries_the_sans() {
    let secret = tls_secret(&render_command(&[]));
    assert_eq!(secret["type"], "kubernetes.io/tls");
    let cert_pem = secret_text(&secret, "tls.crt");
    let key_pem = secret_text(&secret, "tls.key");
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).unwrap();
    let cert = pem.parse_x509().unwrap();

    let ca = ca();
    let (_, ca_cert) = X509Certificate::from_der(ca.cert_der()).unwrap();
    cert.verify_signature(Some(ca_cert.public_key()))
        .expect("chains to the cluster CA");
    assert_eq!(cert.issuer().to_string(), "CN=kubernetes");

    let sans = cert.subject_alternative_name().unwrap().unwrap();
    let mut names: Vec<String> = sans
        .value
        .general_names
        .iter()
        .map(|n| match n {
            GeneralName::DNSName(d) => d.to_string(),
            GeneralName::IPAddress(ip) => {
                std::net::IpAddr::from(<[u8; 4]>::try_from(*ip).unwrap()).to_string()
            }
            other => panic!("unexpected SAN {other:?}"),
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "10.96.0.1",
            "240.0.0.1",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local"
        ]
    );
    assert!(
        cert.extended_key_usage()
            .unwrap()
            .unwrap()
            .value
            .server_auth
    );
    assert!(
        !cert
            .basic_constraints()
            .unwrap()
            .is_some_and(|b| b.value.ca)
    );
    assert!(pki::key_matches(&cert_pem, &key_pem));
    assert!(key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));

    // 2026-01-01T00:00:00Z minus five minutes, plus seven days.
    assert_eq!(
        cert.validity().not_before.to_datetime().to_string(),
        "2025-12-31 23:55:00.0 +00:00:00"
    );
    assert_eq!(
        cert.validity().not_after.to_datetime().to_string(),
        "2026-01-08 0:00:00.0 +00:00:00"
    );
}

#[test]
fn validity_flag_and_domain_reach_the_certificate() {
    let secret = tls_secret(&render_command(&[
        "--cert-validity-days",
        "30",
        "--cluster-domain",
        "tenant.internal",
    ]));
    let cert_pem = secret_text(&secret, "tls.crt");
    let ca = ca();
    let spec = LeafSpec::proxy(
        "tenant.internal",
        "10.96.0.1".parse().unwrap(),
        "240.0.0.1".parse().unwrap(),
        now(),
    );
    // 30 days: still valid after 19 days, due after 20 (two thirds of 30 days and 5 minutes).
    let day = Duration::from_secs(86_400);
    assert!(matches!(
        pki::renewal_due(&cert_pem, now() + 19 * day, &ca, &spec),
        Renewal::Valid { .. }
    ));
    assert!(matches!(
        pki::renewal_due(&cert_pem, now() + 21 * day, &ca, &spec),
        Renewal::Due(RenewReason::LifeElapsed { .. })
    ));
}

#[test]
fn renewal_of_the_rendered_certificate() {
    let rendered = render(&fixture("reencrypt-advertise-address.yaml"), false);
    let cert_pem = secret_text(object(&rendered, "Secret", "hcp-ingress-proxy"), "tls.crt");
    let ca = ca();
    let spec = LeafSpec::proxy(
        "cluster.local",
        "10.96.0.1".parse().unwrap(),
        "240.0.0.1".parse().unwrap(),
        now(),
    );
    let Renewal::Valid { renew_at } = pki::renewal_due(&cert_pem, now(), &ca, &spec) else {
        panic!("fresh")
    };
    // Two thirds of (7 days + 5 minutes) after notBefore.
    let not_before = now() - pki::BACKDATE;
    assert_eq!(
        renew_at,
        not_before + (Duration::from_secs(7 * 86_400) + pki::BACKDATE) * 2 / 3
    );
    assert!(matches!(
        pki::renewal_due(&cert_pem, renew_at, &ca, &spec),
        Renewal::Due(RenewReason::LifeElapsed { .. })
    ));

    // The CA rotated: the other test CA did not sign it.
    let read = |n: &str| std::fs::read_to_string(fixture(n)).unwrap();
    let rotated = CertificateAuthority::from_pem(&read("ec-ca.crt"), &read("ec-ca.key")).unwrap();
    assert_eq!(
        pki::renewal_due(&cert_pem, now(), &rotated, &spec),
        Renewal::Due(RenewReason::OtherIssuer)
    );

    // The service CIDR moved.
    let moved = LeafSpec::proxy(
        "cluster.local",
        "10.128.0.1".parse().unwrap(),
        "240.0.0.1".parse().unwrap(),
        now(),
    );
    assert!(matches!(
        pki::renewal_due(&cert_pem, now(), &ca, &moved),
        Renewal::Due(RenewReason::SansDiffer { .. })
    ));
}
