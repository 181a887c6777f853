//! `render --workload`: the workload-cluster objects of every document (or
//! their ClusterResourceSet), with the proxy certificate minted from the CA
//! files given on the command line. The key is read, never printed.

use std::{
    path::PathBuf,
    time::{Duration, SystemTime},
};

use super::documents::{CliError, RenderArgs, Rendered, control_plane_ingresses, to_value};
use crate::{
    api::ControlPlaneIngress,
    pki::{self, CertificateAuthority},
    render::{
        self, crs,
        workload::{self, WorkloadError, WorkloadInputs},
    },
};

/// The cluster CA as given to `render --workload`: PEM text and the file it
/// came from (errors name the file, never the content).
#[derive(Clone)]
pub struct CaInput {
    /// Where the certificate came from.
    pub cert_path: String,
    /// The certificate, PEM.
    pub cert_pem: String,
    /// Where the key came from and the key, PEM; without it nothing is minted.
    pub key: Option<(String, String)>,
}

impl std::fmt::Debug for CaInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaInput")
            .field("cert_path", &self.cert_path)
            .field("key_path", &self.key.as_ref().map(|(path, _)| path))
            .finish_non_exhaustive()
    }
}

/// Everything `render --workload` needs besides the documents.
#[derive(Debug, Clone)]
pub struct WorkloadOptions {
    /// Image, port, service IP and cluster domain (the certificate fields are filled from `ca`).
    pub inputs: WorkloadInputs,
    /// The cluster CA.
    pub ca: Option<CaInput>,
    /// Life of the minted certificate.
    pub validity: Duration,
    /// The clock for minting.
    pub now: SystemTime,
    /// Wrap the objects in a ClusterResourceSet.
    pub as_cluster_resource_set: bool,
}

impl Default for WorkloadOptions {
    fn default() -> Self {
        WorkloadOptions {
            inputs: WorkloadInputs::default(),
            ca: None,
            validity: pki::DEFAULT_VALIDITY,
            now: SystemTime::now(),
            as_cluster_resource_set: false,
        }
    }
}

/// Read the CA files and the clock from the flags (the I/O edge).
pub(super) fn workload_options(args: &RenderArgs) -> Result<WorkloadOptions, CliError> {
    let read = |file: &PathBuf| {
        let path = file.display().to_string();
        std::fs::read_to_string(file)
            .map(|text| (path.clone(), text))
            .map_err(|source| CliError::CaRead { path, source })
    };
    let ca = match &args.ca_cert {
        Some(cert) => {
            let (cert_path, cert_pem) = read(cert)?;
            let key = args.ca_key.as_ref().map(read).transpose()?;
            Some(CaInput {
                cert_path,
                cert_pem,
                key,
            })
        }
        None => None,
    };
    let now = match &args.now {
        Some(text) => {
            time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
                .map(SystemTime::from)
                .map_err(|e| {
                    CliError::Usage(format!("--now: {text:?} is not an RFC 3339 time: {e}"))
                })?
        }
        None => SystemTime::now(),
    };
    Ok(WorkloadOptions {
        inputs: WorkloadInputs {
            image: args.image.clone(),
            proxy_port: args.proxy_port,
            service_ip: args.service_ip,
            cluster_domain: args.cluster_domain.clone(),
            ca_cert_pem: None,
            tls: None,
        },
        ca,
        validity: Duration::from_secs(u64::from(args.cert_validity_days) * 24 * 3600),
        now,
        as_cluster_resource_set: args.as_clusterresourceset,
    })
}

/// `render --workload`: the workload-cluster objects of every document, or
/// their ClusterResourceSet. All or nothing, like [`render_documents`].
pub fn render_workload_documents(
    path: &str,
    text: &str,
    options: &WorkloadOptions,
) -> Result<Rendered, CliError> {
    let ca_error = |path: &str| {
        let path = path.to_string();
        move |source| CliError::Ca {
            path: path.clone(),
            source,
        }
    };
    // Load the CA once; a key that does not match is reported against the key file.
    let (ca_cert_pem, authority) = match &options.ca {
        None => (None, None),
        Some(ca) => {
            let cert_pem =
                pki::ca_certificate_pem(&ca.cert_pem).map_err(ca_error(&ca.cert_path))?;
            let authority = match &ca.key {
                Some((key_path, key_pem)) => Some(
                    CertificateAuthority::from_pem(&ca.cert_pem, key_pem)
                        .map_err(ca_error(key_path))?,
                ),
                None => None,
            };
            (Some(cert_pem), authority)
        }
    };
    let mut rendered = Rendered::default();
    for (cpi, _) in control_plane_ingresses(path, text)? {
        let object = render::describe(&cpi);
        crate::api::validation::validate(&cpi).map_err(|errors| WorkloadError::Invalid {
            object: object.clone(),
            errors,
        })?;
        let mut inputs = options.inputs.clone();
        inputs.ca_cert_pem = ca_cert_pem.clone();
        let leaf_spec = workload::proxy_leaf_spec(&cpi, &inputs, options.now);
        let reencrypt = leaf_spec.is_some();
        if let (Some(mut leaf_spec), Some(ca)) = (leaf_spec, &authority) {
            leaf_spec.validity = options.validity;
            let leaf = pki::mint_leaf(ca, &leaf_spec).map_err(|source| CliError::Mint {
                object: object.clone(),
                source,
            })?;
            inputs.tls = Some((&leaf).into());
        }
        let proxy = workload::proxy(&cpi, &inputs)?;
        if options.as_cluster_resource_set {
            for obj in crs::cluster_resource_set(&cpi, proxy.as_ref())? {
                rendered.objects.push(to_value(&obj)?);
            }
            if !workload::ccm_targets(&cpi).is_empty() {
                rendered.notes.push(format!(
                    "{object}: a ClusterResourceSet cannot patch the cloud-controller-manager; set {} in its manifest",
                    env_text(&cpi)
                ));
            }
            if proxy.is_some() && workload::publishes_endpoint(&cpi) {
                rendered.notes.push(format!(
                    "{object}: the ClusterResourceSet does not carry the endpoint of spec.kubeProxyReplacement (its tigera-operator ConfigMap needs that namespace); render without --as-cluster-resource-set prints those ConfigMaps"
                ));
            }
        } else {
            for obj in proxy
                .as_ref()
                .map(|p| p.to_dynamic())
                .transpose()?
                .unwrap_or_default()
            {
                rendered.objects.push(to_value(&obj)?);
            }
            // Written where the proxy is: the controller publishes the
            // endpoint in the same passes as the proxy and the CCM override.
            if proxy.is_some() {
                for (_, config_map) in workload::endpoint_config_maps(&cpi) {
                    rendered.objects.push(to_value(&config_map)?);
                }
                if workload::publishes_endpoint(&cpi) {
                    rendered.notes.push(format!(
                        "{object}: the controller writes ConfigMap {}/{} only once that namespace exists (Calico's operator creates it)",
                        workload::OPERATOR_NAMESPACE,
                        workload::CALICO_ENDPOINT_NAME
                    ));
                }
            }
            for target in workload::ccm_targets(&cpi) {
                if target.containers.is_empty() {
                    continue;
                }
                let patch = workload::ccm_patch(
                    &cpi,
                    target.kind,
                    &target.namespace,
                    &target.name,
                    &target.containers,
                );
                rendered.objects.push(to_value(&patch)?);
            }
            if workload::ccm_targets(&cpi)
                .iter()
                .any(|t| t.containers.is_empty())
            {
                rendered.notes.push(format!(
                    "{object}: the CCM override ({}) goes on containers the controller finds in the workload cluster; render prints only targets that name their containers",
                    env_text(&cpi)
                ));
            }
        }
        if proxy.is_some() && ca_cert_pem.is_none() {
            rendered.notes.push(format!(
                "{object}: no --ca-cert, so the ConfigMap has no ca.crt and the proxy cannot start as printed"
            ));
        }
        if reencrypt && authority.is_none() {
            rendered.notes.push(format!(
                "{object}: no --ca-key, so the proxy's TLS Secret is not printed (the controller mints it from <cluster>-ca)"
            ));
        }
        if reencrypt && authority.is_some() {
            rendered.notes.push(format!(
                "{object}: the output holds the proxy's private key: handle it as a Secret; the certificate expires in {} days",
                options.validity.as_secs() / 86_400
            ));
        }
    }
    Ok(rendered)
}

fn env_text(cpi: &ControlPlaneIngress) -> String {
    workload::service_host_env(cpi)
        .iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}
