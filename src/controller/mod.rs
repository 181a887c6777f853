//! The management-cluster controller: `hcp-ingress controller`.
//!
//! `run` wires watches, leader election and the admin endpoints; `reconcile`
//! holds the stages of one reconciliation; `sources` derives
//! ControlPlaneIngresses from other projects' objects; `apply`, `status` and
//! `probe` are the pieces the stages use.

mod apply;
mod discovery;
mod endpoint;
mod leader;
mod metrics;
pub mod probe;
mod reconcile;
pub(crate) mod redact;
mod route;
mod run;
mod sources;
pub mod status;
mod workload;

use std::{
    collections::HashMap,
    net::SocketAddr,
    process::ExitCode,
    sync::{Arc, Mutex},
    time::Duration,
};

use kube::{
    Api, Client, Resource, ResourceExt,
    api::{ApiResource, DynamicObject},
    runtime::{
        events::{Event, EventType, Recorder},
        reflector::{ObjectRef, Store},
    },
};

pub use leader::{Leader, LeaseConfig, campaign};
pub use metrics::Metrics;
pub use reconcile::PAUSED_ANNOTATION;
pub use run::{Settings, run};
pub(crate) use workload::find_ccm_workloads;

use crate::{
    api::ControlPlaneIngress,
    render::{RenderError, RouteKind},
    telemetry::{LogFormat, init_logging},
};

/// Flags of `hcp-ingress controller`.
#[derive(clap::Args, Debug, Clone)]
pub struct ControllerArgs {
    /// Watch only this namespace (empty: all namespaces).
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
    /// Log format.
    #[arg(long, value_enum, default_value_t)]
    pub log_format: LogFormat,
    /// Log level (`RUST_LOG` overrides).
    #[arg(long, default_value = "info")]
    pub log_level: String,
}

/// Entry point of `hcp-ingress controller`.
pub fn main(args: ControllerArgs) -> ExitCode {
    init_logging(args.log_format, &args.log_level);
    let settings = match Settings::from_args(&args) {
        Ok(settings) => settings,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime starts");
    runtime.block_on(async move {
        let client = match Client::try_default().await {
            Ok(client) => client,
            Err(error) => {
                tracing::error!(%error, "failed to build a Kubernetes client (in-cluster config or KUBECONFIG)");
                return ExitCode::from(1);
            }
        };
        let shutdown = tokio_util::sync::CancellationToken::new();
        tokio::spawn(run::cancel_on_signal(shutdown.clone()));
        let code = match run(client, settings, shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                tracing::error!(%error, "controller stopped");
                ExitCode::from(1)
            }
        };
        crate::telemetry::shutdown();
        code
    })
}

/// Why a reconciliation (or the controller) failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Server-side apply was refused.
    #[error("failed to apply {kind} {name}: {source}")]
    Apply {
        kind: String,
        name: String,
        source: kube::Error,
    },
    /// A delete was refused.
    #[error("failed to delete {kind} {name}: {source}")]
    Delete {
        kind: String,
        name: String,
        source: kube::Error,
    },
    /// The status write was refused.
    #[error("failed to update the status of {object}: {source}")]
    Status { object: String, source: kube::Error },
    /// The owner reference to the Cluster could not be set.
    #[error("failed to set the Cluster owner reference on {object}: {source}")]
    Owner { object: String, source: kube::Error },
    /// This replica lost the lease: it must not write.
    #[error("failed to write: this replica does not hold the leader lease")]
    NotLeader,
    /// A rendered object did not serialize.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// The cached object was older than the server's; try again shortly.
    #[error("failed to update the object: the cached copy was stale")]
    Stale,
    /// The finalizer could not be added or removed.
    #[error("failed to manage the finalizer: {0}")]
    Finalizer(String),
    /// Workload clean-up failed; the finalizer stays until it succeeds.
    #[error("failed to clean up the workload cluster: {0}")]
    Cleanup(String),
    /// A watch cache has not synced yet.
    #[error("failed to reconcile: the {0} watch has not synced yet")]
    CacheNotReady(String),
    /// The API server could not be reached at start-up.
    #[error("failed to start: {0}")]
    Start(String),
}

impl Error {
    /// Short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Apply { .. } => "apply",
            Error::Delete { .. } => "delete",
            Error::Status { .. } => "status",
            Error::Owner { .. } => "owner",
            Error::NotLeader => "not_leader",
            Error::Render(_) => "render",
            Error::Start(_) => "start",
            Error::CacheNotReady(_) => "cache_not_ready",
            Error::Finalizer(_) => "finalizer",
            Error::Stale => "stale",
            Error::Cleanup(_) => "cleanup",
        }
    }

    /// Event reason for the failure.
    pub fn metric_label_camel(&self) -> &'static str {
        match self {
            Error::Apply { .. } => "ApplyFailed",
            Error::Delete { .. } => "DeleteFailed",
            Error::Status { .. } => "StatusUpdateFailed",
            Error::Owner { .. } => "OwnerReferenceFailed",
            Error::NotLeader => "NotLeader",
            Error::Render(_) => "RenderFailed",
            Error::Start(_) => "StartFailed",
            Error::CacheNotReady(_) => "CacheNotReady",
            Error::Finalizer(_) => "FinalizerFailed",
            Error::Stale => "StaleCache",
            Error::Cleanup(_) => "CleanupFailed",
        }
    }
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

/// Per-object exponential backoff after errors: 1 s, 2 s, 4 s ... 256 s.
#[derive(Default)]
pub struct Backoff(Mutex<HashMap<String, u32>>);

impl Backoff {
    /// The delay before the next attempt for `key`, counting this failure.
    pub fn next(&self, key: &str) -> Duration {
        let mut failures = self.0.lock().expect("backoff lock");
        let n = failures.entry(key.to_string()).or_default();
        *n = n.saturating_add(1);
        Duration::from_secs(1u64 << (*n - 1).min(8))
    }

    /// Forget failures of `key` after a success.
    pub fn reset(&self, key: &str) {
        self.0.lock().expect("backoff lock").remove(key);
    }
}

/// A watch cache and whether its first full list has arrived. Derefs to the
/// kube-runtime [`Store`].
#[derive(Clone)]
pub struct Cache<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store: Store<K>,
    synced: tokio::sync::watch::Receiver<bool>,
}

impl<K> Cache<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    /// A cache over `store`; `synced` turns true after the first full list.
    pub fn new(store: Store<K>, synced: tokio::sync::watch::Receiver<bool>) -> Self {
        Cache { store, synced }
    }

    /// Resolves once the first full list is in (false if the watch ended first).
    pub async fn synced(&self) -> bool {
        let mut synced = self.synced.clone();
        synced.wait_for(|s| *s).await.is_ok()
    }
}

impl<K> std::ops::Deref for Cache<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    type Target = Store<K>;
    fn deref(&self) -> &Store<K> {
        &self.store
    }
}

/// What every reconciliation shares.
pub struct Context {
    /// Management cluster client.
    pub client: Client,
    /// Route objects we manage, per installed kind (watch caches).
    pub routes: HashMap<RouteKind, Cache<DynamicObject>>,
    /// CAPI Clusters, when CAPI is installed.
    pub clusters: Option<(Cache<DynamicObject>, ApiResource)>,
    /// Every ControlPlaneIngress (source adapters compare against it).
    pub cpis: Cache<ControlPlaneIngress>,
    /// Event recorder.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Write gate.
    pub leader: Leader,
    /// Timing.
    pub settings: Tuning,
    /// Error backoff.
    pub backoff: Backoff,
    /// Workload cluster clients.
    pub workload_clients: workload::Clients,
    /// The source adapters' watch caches: what a derived ControlPlaneIngress came from.
    pub sources: Arc<sources::SourceCaches>,
}

impl Context {
    /// The CAPI Cluster a ControlPlaneIngress names, from the cache.
    pub fn cluster_of(&self, cpi: &ControlPlaneIngress) -> Option<Arc<DynamicObject>> {
        let (store, resource) = self.clusters.as_ref()?;
        let key =
            ObjectRef::new_with(&cpi.spec.cluster_name, resource.clone()).within(&cpi.namespace()?);
        store.get(&key)
    }

    /// The source object a derived ControlPlaneIngress came from, and its kind, from the caches.
    pub fn source_of(
        &self,
        cpi: &ControlPlaneIngress,
    ) -> Option<(crate::sources::SourceKind, Arc<DynamicObject>)> {
        let kind = crate::sources::SourceKind::of_derived(cpi)?;
        let owner = cpi
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))?;
        let (cache, resource) = self.sources.get(&kind)?;
        let key = ObjectRef::new_with(&owner.name, resource.clone()).within(&cpi.namespace()?);
        cache.get(&key).map(|obj| (kind, obj))
    }

    /// Wait until every watch cache holds its first full list: deciding on a
    /// half-filled cache would re-apply objects that exist (steady-state writes).
    pub async fn caches_ready(&self) -> Result<(), Error> {
        let caches = self
            .routes
            .iter()
            .map(|(kind, store)| (kind.gvk().kind, store))
            .chain(
                self.clusters
                    .iter()
                    .map(|(store, _)| ("Cluster".to_string(), store)),
            )
            // Preflight reads the source objects: a half-filled cache would
            // drop the condition and write the status twice.
            .chain(
                self.sources
                    .values()
                    .map(|(store, resource)| (resource.kind.clone(), store)),
            );
        for (kind, store) in caches {
            if tokio::time::timeout(Duration::from_secs(10), store.synced())
                .await
                .is_err()
            {
                return Err(Error::CacheNotReady(kind));
            }
        }
        Ok(())
    }

    /// Whether CAPI's Cluster kind is installed.
    pub fn capi_installed(&self) -> bool {
        self.clusters.is_some()
    }

    /// Api for a route kind in the ControlPlaneIngress's namespace.
    pub fn route_api(&self, kind: RouteKind, cpi: &ControlPlaneIngress) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            &cpi.namespace().unwrap_or_default(),
            &kind.api_resource(),
        )
    }

    /// Publish an Event on `obj`; failures to publish are logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        if !self.leader.is_leader() {
            return;
        }
        self.publish(obj.object_ref(&()), type_, reason, action, note)
            .await;
    }

    /// Publish an Event on an object given by reference.
    pub async fn publish(
        &self,
        reference: k8s_openapi::api::core::v1::ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(event_note(note)),
            action: action.into(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(%error, "failed to publish an event");
        }
    }
}

/// The API server's limit on an Event's note, in bytes.
pub const EVENT_NOTE_LIMIT: usize = 1024;

/// A note the API server accepts: longer ones (an API error quoting a whole
/// object, say) are cut to their first, most useful part, on a character
/// boundary, marked with an ellipsis; an Event over the limit would be
/// rejected and only a log line would remain.
pub fn event_note(note: String) -> String {
    if note.len() <= EVENT_NOTE_LIMIT {
        return note;
    }
    const MARK: &str = "…";
    let mut end = EVENT_NOTE_LIMIT - MARK.len();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARK}", &note[..end])
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_source_kind_runs_once_however_often_it_is_named() {
        let parse = |values: &[&str]| {
            super::run::parse_sources(&values.iter().map(|v| v.to_string()).collect::<Vec<_>>())
        };
        let all = parse(&["all", "k0rdent", "kamaji"]).unwrap();
        assert_eq!(all, crate::sources::SourceKind::ALL.to_vec());
        assert_eq!(
            parse(&["k0rdent", "kamaji", "k0rdent"]).unwrap(),
            [
                crate::sources::SourceKind::ClusterDeployment,
                crate::sources::SourceKind::KamajiTenantControlPlane
            ]
        );
        assert!(parse(&["none"]).unwrap().is_empty());
        let unknown = parse(&["kamajii"]).unwrap_err();
        assert!(unknown.contains("\"kamajii\""), "{unknown}");
    }

    use std::time::Duration;

    use super::{Backoff, EVENT_NOTE_LIMIT, event_note};

    /// Retries wait longer after each failure of one object, never another
    /// object's failures, up to 256 s; a success starts over.
    #[test]
    fn backoff_grows_per_key_is_capped_and_resets() {
        let backoff = Backoff::default();
        let secs = |d: Duration| d.as_secs();
        let a = "source/k0smotron-cluster/team-a/tenant";
        let b = "source/k0smotron-cluster/team-b/tenant";
        assert_eq!(
            [backoff.next(a), backoff.next(a), backoff.next(a)].map(secs),
            [1, 2, 4]
        );
        assert_eq!(secs(backoff.next(b)), 1, "another namespace counts apart");
        for _ in 0..20 {
            backoff.next(a);
        }
        assert_eq!(secs(backoff.next(a)), 256, "capped at 256 s");
        backoff.reset(a);
        assert_eq!(secs(backoff.next(a)), 1);
    }

    #[test]
    fn event_notes_fit_the_api_limit_and_keep_their_start() {
        let short = "ServiceOverwritten: re-applied".to_string();
        assert_eq!(event_note(short.clone()), short);
        let exact = "a".repeat(EVENT_NOTE_LIMIT);
        assert_eq!(event_note(exact.clone()), exact);
        let long = format!("failed to apply EndpointSlice: {}", "x".repeat(4000));
        let cut = event_note(long);
        assert_eq!(cut.len(), EVENT_NOTE_LIMIT);
        assert!(cut.starts_with("failed to apply EndpointSlice: xxx"));
        assert!(cut.ends_with('…'));
        // A multi-byte character across the limit is never split.
        for offset in 0..4 {
            let text = format!("{}{}", "a".repeat(offset + 1010), "é€𝄞".repeat(20));
            let cut = event_note(text.clone());
            assert!(cut.len() <= EVENT_NOTE_LIMIT, "{}", cut.len());
            assert!(text.starts_with(cut.trim_end_matches('…')));
        }
    }
}
