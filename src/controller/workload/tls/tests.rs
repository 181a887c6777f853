use std::time::SystemTime;

use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::api::DynamicObject;
use serde_json::json;

use super::{ClusterCa, Failure, proxy_certificate};
use crate::{
    api::ControlPlaneIngress,
    pki::{self, CaCertificate, CertificateAuthority, Renewal},
    render::workload::{self, WorkloadInputs},
};

const CA_CRT: &str = include_str!("../../../../test/workload/fixtures/ca.crt");
const CA_KEY: &str = include_str!("../../../../test/workload/fixtures/ca.key");

/// A ControlPlaneIngress whose proxy terminates the pods' TLS (reencrypt,
/// the default).
fn cpi() -> ControlPlaneIngress {
    serde_json::from_value(json!({
        "apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
        "metadata": {"name": "tenant-01", "namespace": "tenants"},
        "spec": {"clusterName": "tenant-01",
                 "ingress": {"apiHost": "api.tenant-01.example.com", "port": 443},
                 "backend": {"serviceName": "kmc-tenant-01", "apiPort": 30443}},
    }))
    .expect("a valid ControlPlaneIngress")
}

fn cluster_ca(key_pem: &str) -> ClusterCa {
    ClusterCa {
        certificate: CaCertificate::from_pem(CA_CRT).unwrap(),
        key_pem: key_pem.into(),
        secret: "tenants/tenant-01-ca".into(),
    }
}

/// The proxy's Secret in the workload cluster, as observed.
fn live_secret(cert_pem: &str, key_pem: &str) -> DynamicObject {
    let data = [("tls.crt", cert_pem), ("tls.key", key_pem)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
        .collect();
    let secret = Secret {
        data: Some(data),
        ..Default::default()
    };
    serde_json::from_value(serde_json::to_value(secret).unwrap()).unwrap()
}

#[test]
fn a_valid_proxy_certificate_needs_only_the_ca_certificate_and_minting_needs_the_key() {
    let (cpi, inputs, now) = (cpi(), WorkloadInputs::default(), SystemTime::now());
    let spec = workload::proxy_leaf_spec(&cpi, &inputs, now).expect("reencrypt mints a leaf");
    let ca = CertificateAuthority::from_pem(CA_CRT, CA_KEY).unwrap();
    let leaf = pki::mint_leaf(&ca, &spec).unwrap();
    let live = live_secret(&leaf.cert_pem, &leaf.key_pem);

    // The live certificate is kept whatever the CA's key: it is not read.
    let broken = cluster_ca("-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n");
    let Ok(Some((kept, renew_in))) = proxy_certificate(&cpi, Some(&live), &inputs, &broken, now)
    else {
        panic!("a valid live certificate is kept without the CA's key");
    };
    assert_eq!(kept.cert_pem, leaf.cert_pem);
    assert!(
        renew_in.is_some(),
        "a kept certificate says when to look again"
    );

    // Without one, minting needs the key: the error names the Secret and
    // never echoes the key.
    match proxy_certificate(&cpi, None, &inputs, &broken, now) {
        Err(Failure::Ca(message)) => {
            assert!(
                message.starts_with("Secret tenants/tenant-01-ca: failed to parse the CA key"),
                "{message}"
            );
            assert!(!message.contains("c2VjcmV0"), "{message}");
        }
        Err(Failure::Mint(e)) => panic!("a bad CA key is the CA's failure: {}", e.message),
        Ok(_) => panic!("a certificate minted with a broken CA key"),
    }

    // With the key, a new certificate, signed by the CA and valid.
    let Ok(Some((minted, _))) = proxy_certificate(&cpi, None, &inputs, &cluster_ca(CA_KEY), now)
    else {
        panic!("minting with the CA's key failed");
    };
    assert!(matches!(
        pki::renewal_due(&minted.cert_pem, now, &ca, &spec),
        Renewal::Valid { .. }
    ));
}
