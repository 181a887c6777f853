//! What every reconciliation shares: the clients, the watch caches, the
//! write gate, metrics and backoff, and how Events are published.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{ApiResource, DynamicObject},
    runtime::{
        events::{Event, EventType, Recorder},
        reflector::{ObjectRef, Store},
    },
};

use super::{
    error::Error, index::Index, leader::Leader, metrics::Metrics, settings::Tuning,
    workload::client::Clients,
};
use crate::{api::ControlPlaneIngress, render::RouteKind, sources::SourceKind};

/// Per-object exponential backoff after errors: 1 s, 2 s, 4 s ... 256 s, as
/// controller-runtime's per-item limiter does. The delays are backon's;
/// what is ours is that every object counts its own failures, so one
/// object that keeps failing never slows another.
#[derive(Default)]
pub struct Backoff(Mutex<HashMap<String, ExponentialBackoff>>);

impl Backoff {
    /// The longest delay between two attempts.
    const MAX_DELAY: Duration = Duration::from_secs(256);

    fn schedule() -> ExponentialBackoff {
        ExponentialBuilder::new()
            .with_min_delay(Duration::from_secs(1))
            .with_factor(2.0)
            .with_max_delay(Self::MAX_DELAY)
            .without_max_times()
            .build()
    }

    /// The delay before the next attempt for `key`, counting this failure.
    pub fn next(&self, key: &str) -> Duration {
        let mut failures = self.0.lock().expect("backoff lock");
        failures
            .entry(key.to_string())
            .or_insert_with(Self::schedule)
            .next()
            // Without a limit on attempts the schedule never ends; were it
            // to, the longest delay is the safe answer.
            .unwrap_or(Self::MAX_DELAY)
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
    index: Option<Arc<Index<K>>>,
}

impl<K> Cache<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    /// A cache over `store`; `synced` turns true after the first full list.
    pub fn new(store: Store<K>, synced: tokio::sync::watch::Receiver<bool>) -> Self {
        Cache {
            store,
            synced,
            index: None,
        }
    }

    /// This cache with `index` over it (filled by the same watch).
    pub fn with_index(mut self, index: Arc<Index<K>>) -> Self {
        self.index = Some(index);
        self
    }

    /// The cached objects the index files under `key` (none without an
    /// index). The index may lag the cache by an event: callers check each
    /// object as a full look would.
    pub fn indexed(&self, key: &str) -> Vec<Arc<K>> {
        self.index
            .iter()
            .flat_map(|index| index.get(key))
            .filter_map(|object| self.store.get(&object))
            .collect()
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
    pub workload_clients: Clients,
    /// The source adapters' watch caches: what a derived ControlPlaneIngress came from.
    pub sources: Arc<SourceCaches>,
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
    pub fn source_of(&self, cpi: &ControlPlaneIngress) -> Option<(SourceKind, Arc<DynamicObject>)> {
        let kind = SourceKind::of_derived(cpi)?;
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

/// The watch caches of every running source adapter, by kind.
pub type SourceCaches = std::collections::HashMap<SourceKind, (Cache<DynamicObject>, ApiResource)>;
