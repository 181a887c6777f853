//! `memkube`: run the in-memory API server standalone, for the local run,
//! kubectl and the benchmarks.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

/// In-memory Kubernetes API server for tests and local runs.
#[derive(Debug, Parser)]
#[command(name = "memkube", version)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Write a kubeconfig pointing at this server to FILE.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Load CustomResourceDefinitions from YAML files or folders (repeatable).
    #[arg(long, value_name = "PATH")]
    crds: Vec<PathBuf>,
    /// Cluster/context name in the kubeconfig.
    #[arg(long, default_value = "memkube")]
    name: String,
    /// Watch events kept per resource; older resourceVersions get 410 Gone.
    #[arg(long, default_value_t = 1000)]
    history: usize,
    /// Serve HTTPS with a generated CA (written into the kubeconfig).
    #[arg(long)]
    tls: bool,
}

#[derive(Debug, thiserror::Error)]
enum MainError {
    #[error(transparent)]
    Memkube(#[from] memkube::Error),
    #[error("failed to write the kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        source: std::io::Error,
    },
}

#[tokio::main]
async fn main() -> Result<(), MainError> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let opts = memkube::Options {
        listen: args.listen,
        name: args.name,
        history: args.history,
        tls: args.tls,
        ..Default::default()
    };
    let api = memkube::TestApi::start_with(opts).await?;
    for path in &args.crds {
        let n = api.load_crds(path)?;
        eprintln!("memkube: loaded {n} CRDs from {}", path.display());
    }
    if let Some(path) = &args.kubeconfig {
        std::fs::write(path, api.kubeconfig_yaml()).map_err(|source| MainError::Kubeconfig {
            path: path.display().to_string(),
            source,
        })?;
    }
    // The URL on stdout lets scripts and tests find a random port.
    println!("{}", api.url());
    let _ = tokio::signal::ctrl_c().await;
    Ok(())
}
