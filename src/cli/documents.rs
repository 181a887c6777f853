//! What both `render` modes share: the arguments, the errors, and the
//! documents read into ControlPlaneIngresses.

use std::{net::IpAddr, path::PathBuf};

use kube::api::DynamicObject;

use crate::{
    api::ControlPlaneIngress,
    pki::PkiError,
    render::{
        self, RenderError,
        crs::CrsError,
        workload::{self, WorkloadError},
    },
    sources::{self, SourceError, SourceKind},
};

/// Output format of `render`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Output {
    /// Multi-document YAML.
    #[default]
    Yaml,
    /// A `v1` `List` in JSON.
    Json,
}

/// Flags of `hcp-ingress render`.
#[derive(clap::Args, Debug)]
pub struct RenderArgs {
    /// File with ControlPlaneIngress or source objects (multi-document YAML or JSON); `-` reads stdin.
    #[arg(short = 'f', long = "filename")]
    pub file: PathBuf,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: Output,
    /// Print the workload-cluster objects (node proxy, steering, CCM override, published endpoint) instead of the management-side ones.
    #[arg(long)]
    pub workload: bool,
    /// Wrap the workload objects in a ConfigMap, a Secret and a ClusterResourceSet (implies --workload; see docs/clusterresourceset.md).
    #[arg(long)]
    pub as_clusterresourceset: bool,
    /// Cluster CA certificate (`tls.crt` of Secret `<cluster>-ca`): the proxy verifies the ingress with it.
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// Cluster CA key (`tls.key` of Secret `<cluster>-ca`): mints the proxy certificate; the key itself is never printed.
    #[arg(long, value_name = "FILE", requires = "ca_cert")]
    pub ca_key: Option<PathBuf>,
    /// Proxy image when `spec.proxy.image` is empty.
    #[arg(long, default_value = workload::DEFAULT_IMAGE)]
    pub image: String,
    /// Port the proxy listens on [default: 443 with advertise-address steering; with service steering, the kubernetes Service's targetPort, usually 6443].
    #[arg(long)]
    pub proxy_port: Option<u16>,
    /// First address of the workload cluster's service CIDR.
    #[arg(long, default_value_t = workload::DEFAULT_SERVICE_IP)]
    pub service_ip: IpAddr,
    /// The workload cluster's DNS domain.
    #[arg(long, default_value = workload::DEFAULT_CLUSTER_DOMAIN)]
    pub cluster_domain: String,
    /// Life of the minted proxy certificate, in days.
    #[arg(long, value_name = "DAYS", default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..=3650))]
    pub cert_validity_days: u32,
    /// The clock for minting, RFC 3339 (tests).
    #[arg(long, hide = true)]
    pub now: Option<String>,
}

/// Why `render` failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The input file could not be read.
    #[error("failed to read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// The input is not YAML.
    #[error("{path}: failed to parse YAML: {message}")]
    Yaml { path: String, message: String },
    /// A document is not an object with apiVersion and kind.
    #[error("{path}: document {index}: failed to parse: {message}")]
    Parse {
        path: String,
        index: usize,
        message: String,
    },
    /// A ControlPlaneIngress does not have the shape of the CRD.
    #[error("{object}: {field}: {message}")]
    Shape {
        object: String,
        field: String,
        message: String,
    },
    /// A source object yields no ControlPlaneIngress.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A ControlPlaneIngress is invalid.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// Not a kind hcp-ingress reads.
    #[error(
        "{object}: failed to render: {api_version} {kind} is neither a ControlPlaneIngress nor a supported source ({sources})"
    )]
    UnknownKind {
        object: String,
        api_version: String,
        kind: String,
        sources: String,
    },
    /// A CA file could not be read.
    #[error("failed to read {path}: {source}")]
    CaRead {
        path: String,
        source: std::io::Error,
    },
    /// A CA file holds no usable certificate or key (its content is never printed).
    #[error("{path}: {source}")]
    Ca { path: String, source: PkiError },
    /// Minting the proxy certificate failed.
    #[error("{object}: {source}")]
    Mint { object: String, source: PkiError },
    /// A ControlPlaneIngress cannot yield workload objects.
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    /// The workload objects cannot go into a ClusterResourceSet.
    #[error(transparent)]
    Crs(#[from] CrsError),
    /// A flag is wrong.
    #[error("{0}")]
    Usage(String),
}

impl CliError {
    /// 2 for bad input, 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Read { .. } => 1,
            CliError::Render(RenderError::Serialize { .. }) => 1,
            CliError::Workload(WorkloadError::Serialize { .. })
            | CliError::Crs(CrsError::Workload(_)) => 1,
            CliError::Mint { .. } => 1,
            _ => 2,
        }
    }
}

/// What `render` prints, and notes for stderr.
#[derive(Debug, Default)]
pub struct Rendered {
    /// Objects in input order: for a source, its ControlPlaneIngress first.
    pub objects: Vec<serde_json::Value>,
    /// Things worth knowing that are not errors.
    pub notes: Vec<String>,
}

/// Render every document of `text`: all or nothing, so a bad document never
/// leaves half an output on stdout.
pub fn render_documents(path: &str, text: &str) -> Result<Rendered, CliError> {
    let mut rendered = Rendered::default();
    for (cpi, derived) in control_plane_ingresses(path, text)? {
        if derived {
            rendered.objects.push(to_value(&cpi)?);
        }
        if render::owner_reference(&cpi).is_none() {
            rendered.notes.push(format!(
                "{}: no metadata.uid, so the rendered objects carry no ownerReferences (render a live object to include them)",
                render::describe(&cpi)
            ));
        }
        for object in render::management(&cpi)? {
            rendered.objects.push(to_value(&object)?);
        }
    }
    Ok(rendered)
}

/// The ControlPlaneIngress of every document, read or derived from a source
/// object (`true`), in input order.
pub(super) fn control_plane_ingresses(
    path: &str,
    text: &str,
) -> Result<Vec<(ControlPlaneIngress, bool)>, CliError> {
    let mut cpis = Vec::new();
    let documents: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(text).map_err(|e| CliError::Yaml {
            path: path.to_string(),
            message: e.to_string(),
        })?;
    for (index, value) in documents.into_iter().enumerate() {
        let index = index + 1;
        let parse_error = |message: String| CliError::Parse {
            path: path.to_string(),
            index,
            message,
        };
        if value.is_null() {
            continue; // empty document (`---` at the end)
        }
        let obj: DynamicObject =
            serde_json::from_value(value.clone()).map_err(|e| parse_error(e.to_string()))?;
        let types = obj
            .types
            .clone()
            .ok_or_else(|| parse_error("apiVersion and kind are required".into()))?;
        let cpi = if types.kind == "ControlPlaneIngress" {
            (read_cpi(value)?, false)
        } else if SourceKind::of(&types.api_version, &types.kind).is_some() {
            (sources::derive(&obj)?, true)
        } else {
            return Err(CliError::UnknownKind {
                object: sources::describe(&types.kind, &obj.metadata),
                api_version: types.api_version,
                kind: types.kind,
                sources: SourceKind::ALL
                    .map(|k| k.group_kind().1.to_string() + "." + k.group_kind().0)
                    .join(", "),
            });
        };
        cpis.push(cpi);
    }
    Ok(cpis)
}

/// Deserialize a ControlPlaneIngress, naming the field at fault.
fn read_cpi(value: serde_json::Value) -> Result<ControlPlaneIngress, CliError> {
    let object = {
        let meta = &value["metadata"];
        format!(
            "ControlPlaneIngress {}/{}",
            meta["namespace"].as_str().unwrap_or_default(),
            meta["name"].as_str().unwrap_or_default()
        )
    };
    serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        CliError::Shape {
            object,
            field,
            message: e.into_inner().to_string(),
        }
    })
}

pub(super) fn to_value<T: serde::Serialize>(obj: &T) -> Result<serde_json::Value, CliError> {
    serde_json::to_value(obj).map_err(|source| {
        CliError::Render(RenderError::Serialize {
            kind: "object",
            source,
        })
    })
}
