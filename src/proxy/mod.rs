//! The node-local proxy (not built yet).

use std::{path::PathBuf, process::ExitCode};

/// Flags of `hcp-ingress proxy`.
#[derive(clap::Args, Debug)]
pub struct ProxyArgs {
    /// Proxy configuration file (YAML).
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// Entry point of `hcp-ingress proxy`.
pub fn main(_args: ProxyArgs) -> ExitCode {
    eprintln!("error: `hcp-ingress proxy` is not built yet");
    ExitCode::from(3)
}
