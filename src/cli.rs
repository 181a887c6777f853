//! The `render` and `crd` subcommands: read files, call the pure render
//! functions, print. Exit codes: 0 ok, 1 I/O failure, 2 invalid input.

use std::{
    io::{Read, Write},
    path::PathBuf,
    process::ExitCode,
};

use kube::CustomResourceExt;

use crate::api::ControlPlaneIngress;

mod documents;
mod render_workload;

pub use documents::{CliError, Output, RenderArgs, Rendered, render_documents};
use render_workload::workload_options;
pub use render_workload::{CaInput, WorkloadOptions, render_workload_documents};

/// Entry point of `hcp-ingress render`.
pub fn render(args: RenderArgs) -> ExitCode {
    let result = read_input(&args.file).and_then(|(path, text)| {
        if args.workload || args.as_clusterresourceset {
            render_workload_documents(&path, &text, &workload_options(&args)?)
        } else if args.ca_cert.is_some() {
            Err(CliError::Usage(
                "--ca-cert and --ca-key need --workload or --as-clusterresourceset".into(),
            ))
        } else {
            render_documents(&path, &text)
        }
    });
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
    serde_saphyr::to_string(&ControlPlaneIngress::crd()).expect("a CRD serializes to YAML")
}

fn read_input(file: &PathBuf) -> Result<(String, String), CliError> {
    let path = file.display().to_string();
    let mut text = String::new();
    let read = if path == "-" {
        std::io::stdin().read_to_string(&mut text).map(drop)
    } else {
        std::fs::read_to_string(file).map(|t| text = t)
    };
    read.map_err(|source| CliError::Read {
        path: path.clone(),
        source,
    })?;
    Ok((path, text))
}

fn to_yaml_stream(objects: &[serde_json::Value]) -> String {
    objects
        .iter()
        .map(|o| {
            format!(
                "---\n{}",
                serde_saphyr::to_string(o).expect("JSON values serialize to YAML")
            )
        })
        .collect()
}

fn to_json_list(objects: &[serde_json::Value]) -> String {
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
    serde_json::to_string_pretty(&list).expect("JSON values serialize") + "\n"
}
