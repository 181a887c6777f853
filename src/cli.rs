//! The `render` and `crd` subcommands: read files, call the pure render
//! functions, print. Exit codes: 0 ok, 1 I/O failure, 2 invalid input.

use std::{
    io::{Read, Write},
    path::PathBuf,
    process::ExitCode,
};

use kube::{CustomResourceExt, api::DynamicObject};
use serde::Deserialize;

use crate::{
    api::ControlPlaneIngress,
    render::{self, RenderError},
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
}

/// Why `render` failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The input file could not be read.
    #[error("failed to read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    /// A document is not YAML, or not an object with apiVersion and kind.
    #[error("{path}: document {index}: failed to parse: {message}")]
    Parse { path: String, index: usize, message: String },
    /// A ControlPlaneIngress does not have the shape of the CRD.
    #[error("{object}: {field}: {message}")]
    Shape { object: String, field: String, message: String },
    /// A source object yields no ControlPlaneIngress.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A ControlPlaneIngress is invalid.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// Not a kind hcp-ingress reads.
    #[error("{object}: failed to render: {api_version} {kind} is neither a ControlPlaneIngress nor a supported source ({sources})")]
    UnknownKind { object: String, api_version: String, kind: String, sources: String },
}

impl CliError {
    /// 2 for bad input, 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Read { .. } => 1,
            CliError::Render(RenderError::Serialize { .. }) => 1,
            _ => 2,
        }
    }
}

/// Entry point of `hcp-ingress render`.
pub fn render(args: RenderArgs) -> ExitCode {
    let result = read_input(&args.file).and_then(|(path, text)| render_documents(&path, &text));
    match result {
        Ok(rendered) => {
            for note in &rendered.notes {
                eprintln!("note: {note}");
            }
            let mut stdout = std::io::stdout().lock();
            let text = match args.output {
                Output::Yaml => to_yaml_stream(&rendered.objects),
                Output::Json => to_json_list(&rendered.objects),
            };
            // A closed pipe (`| head`) is not an error worth a message.
            let _ = stdout.write_all(text.as_bytes());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}

/// Entry point of `hcp-ingress crd`.
pub fn crd() -> ExitCode {
    print!("{}", crd_yaml());
    ExitCode::SUCCESS
}

/// The ControlPlaneIngress CRD as YAML (the content of `config/crd/bases/`).
pub fn crd_yaml() -> String {
    serde_yaml_ng::to_string(&ControlPlaneIngress::crd()).expect("a CRD serializes to YAML")
}

fn read_input(file: &PathBuf) -> Result<(String, String), CliError> {
    let path = file.display().to_string();
    let mut text = String::new();
    let read = if path == "-" {
        std::io::stdin().read_to_string(&mut text).map(drop)
    } else {
        std::fs::read_to_string(file).map(|t| text = t)
    };
    read.map_err(|source| CliError::Read { path: path.clone(), source })?;
    Ok((path, text))
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
    for (index, document) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let index = index + 1;
        let parse_error = |message: String| CliError::Parse { path: path.to_string(), index, message };
        let value = serde_json::Value::deserialize(document).map_err(|e| parse_error(e.to_string()))?;
        if value.is_null() {
            continue; // empty document (`---` at the end)
        }
        let obj: DynamicObject = serde_json::from_value(value.clone()).map_err(|e| parse_error(e.to_string()))?;
        let types = obj.types.clone().ok_or_else(|| parse_error("apiVersion and kind are required".into()))?;
        let cpi = if types.kind == "ControlPlaneIngress" {
            read_cpi(value)?
        } else if SourceKind::of(&types.api_version, &types.kind).is_some() {
            let cpi = sources::derive(&obj)?;
            rendered.objects.push(to_value(&cpi)?);
            cpi
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
        CliError::Shape { object, field, message: e.into_inner().to_string() }
    })
}

fn to_value<T: serde::Serialize>(obj: &T) -> Result<serde_json::Value, CliError> {
    serde_json::to_value(obj)
        .map_err(|source| CliError::Render(RenderError::Serialize { kind: "object", source }))
}

fn to_yaml_stream(objects: &[serde_json::Value]) -> String {
    objects
        .iter()
        .map(|o| format!("---\n{}", serde_yaml_ng::to_string(o).expect("JSON values serialize to YAML")))
        .collect()
}

fn to_json_list(objects: &[serde_json::Value]) -> String {
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
    serde_json::to_string_pretty(&list).expect("JSON values serialize") + "\n"
}
