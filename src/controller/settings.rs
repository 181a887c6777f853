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
    /// Reconcile only the objects of one shard: a value, as Cluster API's
    /// controllers take it (objects labelled
    /// `cluster.x-k8s.io/watch-filter=<value>`), or a label selector
    /// (`hcp-ingress.dev/shard=a`); empty or `*`: every object.
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
    /// Name of the Lease; with `--watch-filter` the default gets the
    /// shard's name appended, so each shard elects its own leader.
    #[arg(long, default_value = DEFAULT_LEASE)]
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
    /// The shard this instance reconciles (`--watch-filter`): the selector
    /// of its watches of ControlPlaneIngresses and sources, and the labels a
    /// derived ControlPlaneIngress copies from its source; `None`: every
    /// object.
    pub shard: Option<WatchFilter>,
}

/// Everything `run` needs, from flags or from a test.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Watch only this namespace.
    pub namespace: Option<String>,
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

/// A flag value the controller cannot start with; the message names the flag.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum SettingsError {
    /// `--sources` names a source that does not exist.
    #[error("--sources: unknown source {name:?}: use all, none or any of {known}")]
    UnknownSource {
        /// The value given.
        name: String,
        /// The sources that exist, comma-separated.
        known: String,
    },
    /// `--watch-filter` is neither a label value nor a readable selector.
    #[error("--watch-filter {value:?}: {requirement:?} names no label key")]
    WatchFilter {
        /// The value given.
        value: String,
        /// Its requirement without a key.
        requirement: String,
    },
}

impl Settings {
    /// Settings from command-line flags; an error names the bad flag value.
    pub fn from_args(args: &ControllerArgs) -> Result<Settings, SettingsError> {
        let sources = parse_sources(&args.sources)?;
        let identity = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| format!("hcp-ingress-{}", std::process::id()));
        let lease_duration = Duration::from_secs(args.lease_duration_seconds.max(2));
        let watch_filter = match args.watch_filter.as_deref().map(str::trim) {
            // `*`: what an installer writes when it cannot leave the flag
            // out (clusterctl's variables need a non-empty default).
            None | Some("" | "*") => None,
            Some(value) => Some(WatchFilter::parse(value)?),
        };
        let lease_name = lease_name(&args.leader_election_id, watch_filter.as_ref());
        Ok(Settings {
            namespace: watch_namespace(&args.namespace),
            concurrency: args.concurrency.max(1),
            sources,
            lease: args.leader_elect.then(|| LeaseConfig {
                name: lease_name,
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
                shard: watch_filter,
            },
            rediscover: Duration::from_secs(60),
        })
    }

    /// These settings for the shard `filter` (`--watch-filter`): its
    /// selector on every watch of ControlPlaneIngresses and sources, and
    /// the labels derived ControlPlaneIngresses copy from their sources.
    pub fn in_shard(mut self, filter: WatchFilter) -> Settings {
        self.timing.shard = Some(filter);
        self
    }

    /// Settings for tests and benchmarks: no admin ports, no election, no probes.
    pub fn for_tests() -> Settings {
        Settings {
            namespace: None,
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
                shard: None,
            },
            rediscover: Duration::from_secs(60),
        }
    }
}

/// The default `--leader-election-id`.
pub const DEFAULT_LEASE: &str = "hcp-ingress-controller";

/// The label Cluster API's controllers shard by: `--watch-filter=<value>`
/// reconciles the objects that carry it with that value.
pub const WATCH_FILTER_LABEL: &str = "cluster.x-k8s.io/watch-filter";

/// The shard an instance reconciles (`--watch-filter`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchFilter {
    /// The label selector of every watch of ControlPlaneIngresses and
    /// source objects.
    pub selector: String,
    /// The label keys the selector names: a ControlPlaneIngress derived
    /// from a source object copies them, so it lands in the same shard.
    pub keys: Vec<String>,
    /// The shard's name in its Lease's name: the value itself when it is
    /// a DNS label, else a digest of the filter.
    pub name: String,
}

impl WatchFilter {
    /// A filter from `--watch-filter`: a label value is Cluster API's form
    /// (`cluster.x-k8s.io/watch-filter=<value>`); anything else is a label
    /// selector, whose keys must be readable.
    pub fn parse(value: &str) -> Result<WatchFilter, SettingsError> {
        let value = value.trim();
        if is_label_value(value) {
            return Ok(WatchFilter {
                selector: format!("{WATCH_FILTER_LABEL}={value}"),
                keys: vec![WATCH_FILTER_LABEL.to_string()],
                name: shard_name(value),
            });
        }
        let keys = selector_keys(value)?;
        Ok(WatchFilter {
            selector: value.to_string(),
            keys,
            name: shard_name(value),
        })
    }
}

/// The Lease of an instance: `id`, or with a watch filter and the default
/// id, `<id>-<shard>`, so that shards do not wait on one another's leader.
pub fn lease_name(id: &str, filter: Option<&WatchFilter>) -> String {
    match filter {
        Some(filter) if id == DEFAULT_LEASE => format!("{id}-{}", filter.name),
        _ => id.to_string(),
    }
}

/// A label value: at most 63 characters, alphanumeric at both ends, `-`,
/// `_` and `.` between.
fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(b))
}

/// The label keys of a selector's requirements (`k=v`, `k!=v`, `k in (..)`,
/// `k notin (..)`, `k`, `!k`), in order; an error for a requirement that
/// names none.
fn selector_keys(selector: &str) -> Result<Vec<String>, SettingsError> {
    let mut keys: Vec<String> = Vec::new();
    let mut depth = 0usize;
    let mut requirements = vec![String::new()];
    for c in selector.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                requirements.push(String::new());
                continue;
            }
            _ => {}
        }
        requirements.last_mut().expect("one at least").push(c);
    }
    for requirement in &requirements {
        let text = requirement.trim().trim_start_matches('!').trim_start();
        let key: String = text
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "-_./".contains(*c))
            .collect();
        if key.is_empty() {
            return Err(SettingsError::WatchFilter {
                value: selector.to_string(),
                requirement: requirement.trim().to_string(),
            });
        }
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    Ok(keys)
}

/// A shard's name for its Lease: a lowercase DNS label as it is, else the
/// first 10 hex digits of its MD5.
fn shard_name(value: &str) -> String {
    let dns_label = value.len() <= 40
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if dns_label {
        return value.to_string();
    }
    use md5::{Digest, Md5};
    Md5::digest(value.as_bytes())
        .iter()
        .take(5)
        .map(|b| format!("{b:02x}"))
        .collect()
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
pub fn parse_sources(values: &[String]) -> Result<Vec<SourceKind>, SettingsError> {
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
                        SettingsError::UnknownSource {
                            name: name.to_string(),
                            known: known.join(", "),
                        }
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

    use super::{
        ControllerArgs, DEFAULT_LEASE, Settings, SettingsError, WatchFilter, lease_name,
        watch_namespace,
    };

    fn settings_from(argv: &[&str]) -> Result<Settings, SettingsError> {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: ControllerArgs,
        }
        let cli = Cli::try_parse_from([&["controller"], argv].concat()).unwrap();
        Settings::from_args(&cli.args)
    }

    /// A bare value is Cluster API's form: the objects labelled
    /// `cluster.x-k8s.io/watch-filter=<value>`, and derived objects copy
    /// that label.
    #[test]
    fn a_watch_filter_value_selects_cluster_apis_label() {
        let filter = WatchFilter::parse("shard-a").unwrap();
        assert_eq!(filter.selector, "cluster.x-k8s.io/watch-filter=shard-a");
        assert_eq!(filter.keys, ["cluster.x-k8s.io/watch-filter"]);
        let settings = settings_from(&["--watch-filter", "shard-a"]).unwrap();
        assert_eq!(settings.timing.shard, Some(filter));
    }

    /// A selector stays a selector; derived objects copy every label it
    /// names, whatever the operator.
    #[test]
    fn a_watch_filter_selector_is_kept_and_its_keys_are_copied() {
        let filter =
            WatchFilter::parse("hcp-ingress.dev/shard in (a, b),!legacy,tier=gold").unwrap();
        assert_eq!(
            filter.selector,
            "hcp-ingress.dev/shard in (a, b),!legacy,tier=gold"
        );
        assert_eq!(filter.keys, ["hcp-ingress.dev/shard", "legacy", "tier"]);
        let error = settings_from(&["--watch-filter", "a=b,=c"])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("--watch-filter") && error.contains("\"=c\" names no label key"),
            "{error}"
        );
        assert_eq!(
            settings_from(&["--watch-filter", ""]).unwrap().timing.shard,
            None
        );
    }

    /// Each shard elects its own leader: the default Lease name gets the
    /// shard's name (or a digest of a selector); a name given is kept.
    #[test]
    fn each_shard_has_its_own_lease() {
        let a = WatchFilter::parse("a").unwrap();
        let b = WatchFilter::parse("b").unwrap();
        assert_eq!(
            lease_name(DEFAULT_LEASE, Some(&a)),
            "hcp-ingress-controller-a"
        );
        assert_eq!(
            lease_name(DEFAULT_LEASE, Some(&b)),
            "hcp-ingress-controller-b"
        );
        assert_eq!(lease_name(DEFAULT_LEASE, None), DEFAULT_LEASE);
        assert_eq!(lease_name("mine", Some(&a)), "mine");
        let selector = WatchFilter::parse("hcp-ingress.dev/shard=a").unwrap();
        let other = WatchFilter::parse("hcp-ingress.dev/shard=b").unwrap();
        assert_ne!(selector.name, other.name);
        assert!(selector.name.len() == 10 && selector.name.bytes().all(|b| b.is_ascii_hexdigit()));
        let upper = WatchFilter::parse("Shard_A").unwrap();
        assert_eq!(upper.selector, "cluster.x-k8s.io/watch-filter=Shard_A");
        assert_eq!(
            upper.name.len(),
            10,
            "not a DNS label: a digest in the Lease's name"
        );
        let settings = settings_from(&["--watch-filter", "a", "--leader-elect"]).unwrap();
        assert_eq!(settings.lease.unwrap().name, "hcp-ingress-controller-a");
    }

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
        let settings = |argv: &[&str]| settings_from(argv).unwrap().timing;
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
