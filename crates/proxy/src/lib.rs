//! The node-local proxy (`hcp-ingress-proxy`, and `hcp-ingress proxy`): the
//! per-node replacement of k0smotron's HAProxy sidecar. Pods reach `kubernetes.default.svc` through
//! it; it routes each TLS connection by SNI to the shared ingress.
//!
//! Flow: [`server`] accepts → [`conn`] reads the ClientHello ([`clienthello`])
//! and picks a path → [`upstream`] picks an address → bytes flow through
//! [`copy`] (TLS configs from [`tls`], TLS streams of [`tlsio`]; PROXY v2 via
//! [`proxy_protocol`]). [`reload`]
//! swaps config and certificates, [`admin`] serves probes and [`metrics`].
//! In pooled mode [`pool`] serves the pods' HTTP over a few upstream
//! HTTP/2 connections instead of copying bytes.
//! What they share lives in [`state`].
//!
//! A crate of its own, which depends on no Kubernetes crate (kube,
//! k8s-openapi): the binary on every node links and lists (cargo auditable)
//! only what the proxy uses, and the compiler keeps the controller's code out.
//! The controller depends on this library for [`config`], the file it
//! renders and the proxy reads, and for [`dns`] (its doctor).
#![forbid(unsafe_code)]

pub mod admin;
pub mod clienthello;
pub mod config;
pub mod conn;
pub mod copy;
pub mod dns;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzz_checks;
pub mod metrics;
pub mod netlink;
pub mod pool;
pub mod proxy_protocol;
mod registry;
pub mod reload;
pub mod server;
pub mod state;
pub mod tls;
pub mod tlsio;
pub mod upstream;

use std::{path::PathBuf, process::ExitCode};

use hcp_ingress_telemetry::{LogFormat, init_node_logging};

/// Flags of `hcp-ingress-proxy` (and of `hcp-ingress proxy`).
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("file").required(true).args(["config", "check_config"])))]
pub struct ProxyArgs {
    /// Proxy configuration file (YAML); watched for changes.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Validate FILE (and the files it names), print the effective config,
    /// exit 0; or exit 2 naming the key at fault.
    #[arg(long, value_name = "FILE")]
    pub check_config: Option<PathBuf>,
    /// Log format; overrides `log.format` of the config file.
    #[arg(long, value_enum, env = "HCP_PROXY_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    /// The pod template revision this process runs: `/readyz/<revision>`
    /// answers ready only here, so that during a surge rollout the old pod,
    /// which shares the admin port, never vouches for the new one.
    #[arg(long, env = "HCP_PROXY_REVISION")]
    pub revision: Option<String>,
}

/// Descriptors `max_connections` proxied connections need: two sockets each
/// (client, upstream), plus health checks, admin and the runtime.
pub fn fds_needed(max_connections: usize) -> u64 {
    2 * max_connections as u64 + 64
}

/// The soft RLIMIT_NOFILE to set: the hard limit (`None`: unlimited, kept
/// as is) when the soft one is below it. Only the soft limit moves; raising
/// the hard one needs privileges we do not ask for.
pub fn nofile_soft_target(soft: Option<u64>, hard: Option<u64>) -> Option<u64> {
    match (soft, hard) {
        (Some(s), Some(h)) if s < h => Some(h),
        _ => None,
    }
}

/// Lift the soft descriptor limit to the hard one, as Go programs and
/// nginx's `worker_rlimit_nofile` do: container runtimes often start
/// processes at 1024 (containerd 2 no longer raises it), which would cap the
/// proxy near 500 connections whatever `limits.maxConnections` says. Warns
/// when even the hard limit is too low for the configured limit.
fn raise_nofile(max_connections: usize) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut lim = getrlimit(Resource::Nofile);
    if let Some(target) = nofile_soft_target(lim.current, lim.maximum) {
        let raised = rustix::process::Rlimit {
            current: Some(target),
            maximum: lim.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => lim = raised,
            Err(e) => tracing::warn!(error = %e, "failed to raise the open file limit"),
        }
    }
    let needed = fds_needed(max_connections);
    if let Some(soft) = lim.current.filter(|&s| s < needed) {
        tracing::warn!(
            limit = soft,
            needed,
            max_connections,
            "the open file limit is below what limits.maxConnections needs; accepts fail (counted in hcp_proxy_accept_errors_total) before the limit is reached"
        );
    }
}

/// Entry point of `hcp-ingress proxy`.
pub fn main(args: ProxyArgs) -> ExitCode {
    if let Some(path) = args.check_config {
        return match state::State::load(&path) {
            Ok(state) => {
                print!("{}", state.cfg);
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        };
    }
    let Some(path) = args.config else {
        eprintln!("error: --config or --check-config is required");
        return ExitCode::from(2);
    };
    let state = match state::State::load(&path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let format = args.log_format.unwrap_or(match state.cfg.log_format {
        config::LogFormatKey::Text => LogFormat::Text,
        config::LogFormatKey::Json => LogFormat::Json,
    });
    // rustls warns on every handshake whose SNI is an IP literal (wrk, some
    // libraries): that is a client quirk, not the operator's business.
    init_node_logging(format, &format!("{},rustls=error", state.cfg.log_level));
    raise_nofile(state.cfg.max_connections);

    // One thread is the measured default: the proxy shares a node with the
    // workloads, and one core already carries well above a node's API load
    // (docs/proxy.md). More threads only help with many busy clients.
    let threads = state.cfg.worker_threads;
    let mut builder = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    let runtime = builder.enable_all().build();
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: failed to start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(server::run(state, path, args.revision)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "proxy stopped");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn nofile_soft_limit_is_lifted_to_the_hard_one() {
        assert_eq!(
            super::nofile_soft_target(Some(1024), Some(524_288)),
            Some(524_288)
        );
        assert_eq!(super::nofile_soft_target(Some(4096), Some(4096)), None);
        assert_eq!(super::nofile_soft_target(None, None), None);
        // Unlimited hard limit: leave the soft one alone rather than guess.
        assert_eq!(super::nofile_soft_target(Some(1024), None), None);
        assert_eq!(super::fds_needed(10_000), 20_064);
    }
}
