//! A throw-away PKI per control plane: a CA, the API server's serving
//! certificate for 127.0.0.1, localhost and any extra names, the ServiceAccount signing key and
//! the admin token.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose, SanType};

pub struct Pki {
    pub ca_pem: String,
    pub ca_key_pem: String,
    pub serving_cert_pem: String,
    pub serving_key_pem: String,
    pub service_account_key_pem: String,
    pub service_account_public_pem: String,
    pub admin_token: String,
    /// The API server's client certificate for kubelets (CN
    /// `kube-apiserver-kubelet-client`, O `system:masters`, as kubeadm's).
    pub kubelet_client_cert_pem: String,
    pub kubelet_client_key_pem: String,
}

pub fn generate(extra_sans: &[String]) -> Result<Pki, rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name
        .push(DnType::CommonName, "realkube-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = rcgen::Issuer::from_params(&ca, &ca_key);

    let serving_key = KeyPair::generate()?;
    let mut names = vec!["localhost".to_string()];
    names.extend(extra_sans.iter().cloned());
    let mut serving = CertificateParams::new(names)?;
    serving
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    serving
        .subject_alt_names
        .push(SanType::IpAddress([127, 0, 0, 1].into()));
    serving.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let serving_cert = serving.signed_by(&serving_key, &issuer)?;

    let kubelet_client_key = KeyPair::generate()?;
    let mut kubelet_client = CertificateParams::new(Vec::<String>::new())?;
    kubelet_client
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver-kubelet-client");
    kubelet_client
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    kubelet_client.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let kubelet_client_cert = kubelet_client.signed_by(&kubelet_client_key, &issuer)?;

    let service_account_key = KeyPair::generate()?;
    // 32 random bytes from a fresh key's DER are as good a token as any here.
    let token: String = KeyPair::generate()?
        .serialize_der()
        .iter()
        .rev()
        .take(24)
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(Pki {
        ca_pem: ca_cert.pem(),
        ca_key_pem: ca_key.serialize_pem(),
        serving_cert_pem: serving_cert.pem(),
        serving_key_pem: serving_key.serialize_pem(),
        service_account_key_pem: service_account_key.serialize_pem(),
        service_account_public_pem: service_account_key.public_key_pem(),
        admin_token: token,
        kubelet_client_cert_pem: kubelet_client_cert.pem(),
        kubelet_client_key_pem: kubelet_client_key.serialize_pem(),
    })
}
