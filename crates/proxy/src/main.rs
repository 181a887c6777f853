//! `hcp-ingress-proxy`: the node proxy alone, the same code as
//! `hcp-ingress proxy` without the controller, renderer and doctor linked in.
//!
//! It runs on every workload node, so its resident memory counts once per
//! node: the kernel maps a binary's pages around each one touched, and in the
//! multi-subcommand binary the proxy's code lies spread among the
//! controller's. Linked alone, the binary holds only what the proxy reaches
//! (docs/proxy.md, "Runtime and resources"); built from this crate, which
//! depends on no Kubernetes crate, its embedded dependency list (cargo
//! auditable) names only that too.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use hcp_ingress_proxy::{self as proxy, ProxyArgs};

/// mimalloc instead of the libc's allocator: a new connection's handshakes
/// allocate and free a few hundred small objects, which musl's allocator
/// (the image's libc) serves slowly (docs/proxy.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The per-node proxy for a hosted control plane's API server.
#[derive(Parser)]
#[command(name = "hcp-ingress-proxy", version)]
struct Cli {
    #[command(flatten)]
    args: ProxyArgs,
}

fn main() -> ExitCode {
    proxy::main(Cli::parse().args)
}
