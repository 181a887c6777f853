//! The management-cluster controller (not built yet).

use std::process::ExitCode;

/// Flags of `hcp-ingress controller`.
#[derive(clap::Args, Debug)]
pub struct ControllerArgs {}

/// Entry point of `hcp-ingress controller`.
pub fn main(_args: ControllerArgs) -> ExitCode {
    eprintln!("error: `hcp-ingress controller` is not built yet");
    ExitCode::from(3)
}
