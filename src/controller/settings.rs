//! How the controller runs: its flags, the settings made from them (or by a
//! test), and the timing every reconciliation reads.

use std::{net::SocketAddr, time::Duration};

use super::leader::LeaseConfig;
use crate::{sources::SourceKind, telemetry::LogFormat};

/// Flags of `hcp-ingress controller`.
#[derive(clap::Args, Debug, Clone)]
pub struct ControllerArgs {
    /// Watch only this namespace (`*` or empty: all namespaces; `*` is
    /// what an installer writes when it cannot leave the flag out).
    #[arg(long, env = "WATCH_NAMESPACE", default_value = "")]
    pub namespace: String,
    /// Reconcile only objects matching this label selector.
    #[arg(long)]
    pub watch_filter: Option<String>,
    /// ControlPlaneIngresses reconciled at once.
    #[arg(long, default_value_t = 10)]
    pub concurrency: u16,
    /// Source kinds to derive ControlPlaneIngresses from, comma-separated
    /// (k0smotron-controlplane, k0smotron-cluster, k0rdent, capi-cluster, kamaji, steward),
    /// `all` for every installed one, `none` for none.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub sources: Vec<String>,
    /// Elect a leader among replicas through a Lease; only the leader writes.
    #[arg(long)]
    pub leader_elect: bool,
    /// Namespace of the Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "hcp-ingress-system")]
    pub leader_election_namespace: String,
    /// Name of the Lease.
    #[arg(long, default_value = "hcp-ingress-controller")]
    pub leader_election_id: String,
    /// Seconds a lease lasts without renewal.
    #[arg(long, default_value_t = 15)]
    pub lease_duration_seconds: u64,
    /// Address of `/healthz` and `/readyz`.
    #[arg(long, default_value = "0.0.0.0:9440")]
    pub health_addr: SocketAddr,
    /// Address of `/metrics`.
    #[arg(long, default_value = "0.0.0.0:8443")]
    pub metrics_addr: SocketAddr,
    /// Check each endpoint with a TLS handshake through the ingress.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub probe_endpoints: bool,
    /// Image of the node proxy when `spec.proxy.image` is empty: the
    /// controller's own image, so one setting serves air-gapped mirrors.
    #[arg(long, env = "HCP_INGRESS_IMAGE", default_value = crate::render::workload::DEFAULT_IMAGE)]
    pub proxy_image: String,
    /// Seconds between re-checks of a healthy ControlPlaneIngress.
    #[arg(long, default_value_t = 300)]
    pub resync_seconds: u64,
    /// Seconds between re-checks of an object that waits on something
    /// outside it: a route the ingress controller does not serve yet, a
    /// Gateway that has not accepted it yet, a workload cluster not
    /// reachable yet, a CRD not installed yet.
    #[arg(long, default_value_t = 30)]
    pub retry_seconds: u64,
    /// Log format.
    #[arg(long, value_enum, default_value_t)]
    pub log_format: LogFormat,
    /// Log level (`RUST_LOG` overrides).
    #[arg(long, default_value = "info")]
    pub log_level: String,
}

/// How reconciliations behave: timing, probes, the proxy image.
#[derive(Clone, Debug)]
pub struct Tuning {
    /// Re-check interval of a healthy object.
    pub resync: Duration,
    /// Re-check interval of an object waiting on something outside (ingress, CRD).
    pub retry: Duration,
    /// TLS probe timeout.
    pub probe_timeout: Duration,
    /// Whether to probe endpoints at all.
    pub probe_endpoints: bool,
    /// Node proxy image when the spec names none.
    pub proxy_image: String,
}

/// Everything `run` needs, from flags or from a test.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Watch only this namespace.
    pub namespace: Option<String>,
    /// Label selector on ControlPlaneIngresses and source objects.
    pub watch_filter: Option<String>,
    /// Reconciliations at once.
    pub concurrency: u16,
    /// Source kinds enabled (those not installed are skipped).
    pub sources: Vec<SourceKind>,
    /// Leader election; `None`: this replica always writes.
    pub lease: Option<LeaseConfig>,
    /// `/healthz` and `/readyz`.
    pub health_addr: Option<SocketAddr>,
    /// `/metrics`.
    pub metrics_addr: Option<SocketAddr>,
    /// Timing.
    pub timing: Tuning,
    /// How often discovery is repeated even without CRD events.
    pub rediscover: Duration,
}

impl Settings {
    /// Settings from command-line flags; an error names the bad flag value.
    pub fn from_args(args: &ControllerArgs) -> Result<Settings, String> {
        let sources = parse_sources(&args.sources)?;
        let identity = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| format!("hcp-ingress-{}", std::process::id()));
        let lease_duration = Duration::from_secs(args.lease_duration_seconds.max(2));
        Ok(Settings {
            namespace: watch_namespace(&args.namespace),
            watch_filter: args.watch_filter.clone().filter(|f| !f.is_empty()),
            concurrency: args.concurrency.max(1),
            sources,
            lease: args.leader_elect.then(|| LeaseConfig {
                name: args.leader_election_id.clone(),
                namespace: args.leader_election_namespace.clone(),
                identity,
                lease_duration,
                renew_deadline: lease_duration * 2 / 3,
                retry_period: lease_duration / 7,
            }),
            health_addr: Some(args.health_addr),
            metrics_addr: Some(args.metrics_addr),
            timing: Tuning {
                resync: Duration::from_secs(args.resync_seconds.max(1)),
                retry: Duration::from_secs(args.retry_seconds.max(1)),
                probe_timeout: Duration::from_secs(5),
                probe_endpoints: args.probe_endpoints,
                proxy_image: args.proxy_image.clone(),
            },
            rediscover: Duration::from_secs(60),
        })
    }

    /// Settings for tests and benchmarks: no admin ports, no election, no probes.
    pub fn for_tests() -> Settings {
        Settings {
            namespace: None,
            watch_filter: None,
            concurrency: 10,
            sources: SourceKind::ALL.to_vec(),
            lease: None,
            health_addr: None,
            metrics_addr: None,
            timing: Tuning {
                resync: Duration::from_secs(300),
                retry: Duration::from_secs(2),
                probe_timeout: Duration::from_secs(2),
                probe_endpoints: false,
                proxy_image: crate::render::workload::DEFAULT_IMAGE.to_string(),
            },
            rediscover: Duration::from_secs(60),
        }
    }
}

/// `--namespace` to the one namespace watched; `None` (every namespace) for
/// an empty value or `*`, which is never a namespace name.
pub fn watch_namespace(value: &str) -> Option<String> {
    match value.trim() {
        "" | "*" => None,
        name => Some(name.to_string()),
    }
}

/// `--sources` values to kinds.
pub fn parse_sources(values: &[String]) -> Result<Vec<SourceKind>, String> {
    let mut kinds: Vec<SourceKind> = Vec::new();
    for value in values.iter().map(|v| v.trim()).filter(|v| !v.is_empty()) {
        let named = match value {
            "all" => SourceKind::ALL.to_vec(),
            "none" => Vec::new(),
            name => vec![
                SourceKind::ALL
                    .into_iter()
                    .find(|k| k.flag_name() == name)
                    .ok_or_else(|| {
                        let known: Vec<_> = SourceKind::ALL.iter().map(|k| k.flag_name()).collect();
                        format!(
                            "--sources: unknown source {name:?}: use all, none or any of {}",
                            known.join(", ")
                        )
                    })?,
            ],
        };
        // One adapter per kind, however often it is named (`all,k0rdent`).
        for kind in named {
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
    }
    Ok(kinds)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{ControllerArgs, Settings, watch_namespace};

    #[test]
    fn star_and_empty_watch_every_namespace() {
        assert_eq!(watch_namespace("*"), None);
        assert_eq!(watch_namespace(""), None);
        assert_eq!(watch_namespace("tenants"), Some("tenants".to_string()));
    }

    /// The re-check intervals come from their flags; zero is not a busy
    /// loop but one second.
    #[test]
    fn resync_and_retry_follow_their_flags() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: ControllerArgs,
        }
        let settings = |argv: &[&str]| {
            let cli = Cli::try_parse_from([&["controller"], argv].concat()).unwrap();
            Settings::from_args(&cli.args).unwrap().timing
        };
        let defaults = settings(&[]);
        assert_eq!(defaults.resync, Duration::from_secs(300));
        assert_eq!(defaults.retry, Duration::from_secs(30));
        let set = settings(&["--resync-seconds", "5", "--retry-seconds", "2"]);
        assert_eq!(
            (set.resync, set.retry),
            (Duration::from_secs(5), Duration::from_secs(2))
        );
        assert_eq!(
            settings(&["--retry-seconds", "0"]).retry,
            Duration::from_secs(1)
        );
    }
}
