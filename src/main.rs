//! `hcp-ingress`: one binary, several subcommands (see `--help`).
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use hcp_ingress::{cli, controller, doctor, proxy};

/// Hosted control planes behind one shared SNI-passthrough ingress.
#[derive(Parser)]
#[command(name = "hcp-ingress", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the management-cluster controller.
    Controller(controller::ControllerArgs),
    /// Run the node-local proxy (the per-node HAProxy replacement).
    Proxy(proxy::ProxyArgs),
    /// Print every object hcp-ingress would create for the given input.
    Render(cli::RenderArgs),
    /// Check every hop of one tenant's path (DNS, route, TLS, steering, node proxy, CCM env) and say what to fix.
    Doctor(doctor::DoctorArgs),
    /// Print the ControlPlaneIngress CustomResourceDefinition.
    Crd,
    /// Print the version.
    Version,
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Controller(args) => controller::main(args),
        Command::Proxy(args) => proxy::main(args),
        Command::Render(args) => cli::render(args),
        Command::Doctor(args) => doctor::main(args),
        Command::Crd => cli::crd(),
        Command::Version => {
            println!("hcp-ingress {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
    }
}
