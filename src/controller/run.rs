//! Wiring: the watches, leader election, the admin endpoints, and restarts
//! when a relevant CRD comes or goes (`discovery` finds them).

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use futures::{StreamExt, future::join_all};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject},
    runtime::{
        Controller, Predicate, WatchStreamExt,
        controller::Config,
        events::{Recorder, Reporter},
        predicates,
        reflector::{self, ObjectRef},
        watcher,
    },
};
use tokio_util::sync::CancellationToken;

use super::{
    context::{Backoff, Cache, Context, SourceCaches},
    discovery::{Installed, discover, restart_on_change},
    error::Error,
    index::Index,
    leader::{self, Leader},
    metrics::Metrics,
    reconcile::{error_policy, reconcile},
    settings::Settings,
    sources,
};
use crate::{
    api::ControlPlaneIngress,
    render::{RouteKind, conflict},
    sources::SourceKind,
    telemetry::health,
};

/// What the admin endpoints see.
struct AdminState {
    synced: AtomicBool,
    leader: std::sync::OnceLock<Leader>,
    metrics: Arc<Metrics>,
}

impl health::Health for AdminState {
    fn ready(&self) -> bool {
        // A standby replica is healthy and ready to take over; the leader is
        // ready once its watch caches are filled.
        self.synced.load(Ordering::Acquire) || self.leader.get().is_some_and(|l| !l.is_leader())
    }
    fn not_ready_reason(&self) -> String {
        "not ready: the initial watches have not synced\n".into()
    }
    fn metrics(&self) -> String {
        self.metrics.encode()
    }
}

/// Cancel `token` on SIGTERM or Ctrl-C.
pub async fn cancel_on_signal(token: CancellationToken) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("signal handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down");
    token.cancel();
}

/// Run the controller until `shutdown` is cancelled.
pub async fn run(
    client: Client,
    settings: Settings,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let metrics = Arc::new(Metrics::default());
    let state = Arc::new(AdminState {
        synced: AtomicBool::new(false),
        leader: Default::default(),
        metrics: metrics.clone(),
    });
    for addr in [settings.health_addr, settings.metrics_addr]
        .into_iter()
        .flatten()
    {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| Error::Start(format!("failed to listen on {addr}: {e}")))?;
        tokio::spawn(health::serve(
            listener,
            state.clone(),
            shutdown.clone().cancelled_owned(),
        ));
    }
    let election_token = CancellationToken::new();
    let (leader, election) = match settings.lease.clone() {
        Some(config) => {
            let (leader, task) = leader::campaign(client.clone(), config, election_token.clone());
            (leader, Some(task))
        }
        None => (Leader::always(), None),
    };
    let _ = state.leader.set(leader.clone());

    while !shutdown.is_cancelled() {
        tokio::select! {
            _ = leader.acquired() => {}
            _ = shutdown.cancelled() => break,
        }
        let (installed, complete) = discover(&client, &settings.sources).await;
        tracing::info!(routes = ?installed.routes.keys().collect::<Vec<_>>(), sources = ?installed.sources.iter().map(|s| s.0).collect::<Vec<_>>(), capi = installed.cluster.is_some(), "starting watches");
        let generation = shutdown.child_token();
        let rediscovery = tokio::spawn(restart_on_change(
            client.clone(),
            settings.clone(),
            (installed.clone(), complete),
            generation.clone(),
        ));
        let lost = {
            let (leader, generation) = (leader.clone(), generation.clone());
            tokio::spawn(async move {
                tokio::select! { _ = leader.lost() => generation.cancel(), _ = generation.cancelled() => {} }
            })
        };
        run_controllers(
            &client,
            &installed,
            &settings,
            &metrics,
            &leader,
            &state,
            generation.clone(),
        )
        .await;
        generation.cancel();
        metrics.forget_controlplaneingresses();
        let _ = rediscovery.await;
        let _ = lost.await;
        state.synced.store(false, Ordering::Release);
    }
    election_token.cancel();
    if let Some(task) = election {
        let _ = task.await;
    }
    Ok(())
}

/// What a cached object need not keep: the field sets of its managed
/// fields, which are often larger than the object itself and which no
/// reconciliation reads (who manages it, which a conflict message names,
/// is kept). Thousands of clusters mean thousands of each cached kind.
fn lighten<K: kube::Resource>(object: &mut K) {
    for entry in object.meta_mut().managed_fields.iter_mut().flatten() {
        entry.fields_v1 = None;
    }
}

/// A watch cache filled by its own task, and the stream of its changes for
/// the Controller. The cache must not depend on the Controller polling it:
/// reconciliations wait for the caches, and a Controller with every slot busy
/// stops polling its trigger streams.
fn reflect<K>(
    api: Api<K>,
    config: watcher::Config,
    dyntype: K::DynamicType,
    index: Option<Arc<Index<K>>>,
    token: CancellationToken,
) -> (
    Cache<K>,
    impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
{
    let writer = reflector::store::Writer::new(dyntype);
    let filed = index.clone();
    let store = writer.as_reader();
    let (synced_tx, synced_rx) = tokio::sync::watch::channel(false);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let events = watcher(api, config)
            .default_backoff()
            .modify(lighten)
            .reflect(writer);
        futures::pin_mut!(events);
        loop {
            tokio::select! {
                _ = token.cancelled() => break,
                event = events.next() => match event.inspect(|e| {
                    if let (Some(index), Ok(e)) = (&filed, e) { index.observe(e) }
                }) {
                    Some(Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object) | watcher::Event::Delete(object))) => {
                        let _ = tx.send(object);
                    }
                    Some(Ok(watcher::Event::InitDone)) => { synced_tx.send_replace(true); }
                    Some(Ok(watcher::Event::Init)) => {}
                    Some(Err(error)) => tracing::debug!(%error, "watch error; retrying with backoff"),
                    None => break,
                },
            }
        }
    });
    let changes = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|object| (Ok(object), rx))
    });
    let cache = Cache::new(store, synced_rx);
    let cache = match index {
        Some(index) => cache.with_index(index),
        None => cache,
    };
    (cache, changes)
}

fn watch_config(settings: &Settings) -> watcher::Config {
    let config = watcher::Config::default();
    match &settings.timing.shard {
        Some(filter) => config.labels(&filter.selector),
        None => config,
    }
}

fn api_for(client: &Client, settings: &Settings, resource: &ApiResource) -> Api<DynamicObject> {
    match &settings.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

/// One generation of the controllers: the watches of what `installed`
/// holds, the ControlPlaneIngress Controller they trigger and one adapter
/// per source kind, until `token` is cancelled.
async fn run_controllers(
    client: &Client,
    installed: &Installed,
    settings: &Settings,
    metrics: &Arc<Metrics>,
    leader: &Leader,
    state: &Arc<AdminState>,
    token: CancellationToken,
) {
    let (cpis, controller) = watch_controlplaneingresses(client, settings, metrics, &token);
    let (routes, controller) =
        watch_routes(client, settings, &installed.routes, &token, controller);
    let (clusters, controller) = watch_clusters(
        client,
        settings,
        installed.cluster.clone(),
        &cpis,
        &token,
        controller,
    );
    let watched = watch_sources(client, settings, &installed.sources, &token);
    let reporter = Reporter {
        controller: "hcp-ingress".into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let ctx = Arc::new(Context {
        client: client.clone(),
        routes: routes.clone(),
        clusters: clusters.clone(),
        cpis: cpis.clone(),
        recorder: Recorder::new(client.clone(), reporter),
        metrics: metrics.clone(),
        leader: leader.clone(),
        settings: settings.timing.clone(),
        backoff: Backoff::default(),
        workload_clients: Default::default(),
        sources: Arc::new(
            watched
                .iter()
                .map(|w| (w.kind, (w.cache.clone(), w.resource.clone())))
                .collect::<SourceCaches>(),
        ),
    });
    ready_once_synced(state, &token, &cpis, &routes, &clusters);
    drive(controller, watched, ctx, settings, token).await;
}

/// The ControlPlaneIngress watch, and the Controller its changes trigger.
fn watch_controlplaneingresses(
    client: &Client,
    settings: &Settings,
    metrics: &Metrics,
    token: &CancellationToken,
) -> (Cache<ControlPlaneIngress>, Controller<ControlPlaneIngress>) {
    let cpi_api: Api<ControlPlaneIngress> = match &settings.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let (cpis, cpi_changes) = reflect(cpi_api, watch_config(settings), (), None, token.clone());
    metrics.count_conditions_of((*cpis).clone());
    // Our own status writes come back through the watch: only a change to
    // what is reconciled from (spec, labels, annotations, finalizers,
    // deletion) asks for another pass.
    let cpi_changes = cpi_changes.predicate_filter(
        predicates::generation
            .combine(predicates::labels)
            .combine(predicates::annotations)
            .combine(predicates::finalizers),
        Default::default(),
    );
    let controller = Controller::for_stream(cpi_changes, (*cpis).clone());
    (cpis, controller)
}

/// Route objects: one watch per installed kind, cached for the diff. Every
/// object of the kind, not only ours: a route someone else made for one of
/// our hosts is a conflict to report, and a provider's own route is what
/// a ControlPlaneIngress that leaves the route to it reports on.
fn watch_routes(
    client: &Client,
    settings: &Settings,
    installed: &HashMap<RouteKind, ApiResource>,
    token: &CancellationToken,
    mut controller: Controller<ControlPlaneIngress>,
) -> (
    HashMap<RouteKind, Cache<DynamicObject>>,
    Controller<ControlPlaneIngress>,
) {
    let mut routes = HashMap::new();
    for (kind, resource) in installed {
        // Filed by the hosts each routes and the object that controls it:
        // what every reconciliation asks of this cache.
        let kind_of = *kind;
        let index = Index::new(resource.clone(), move |object: &DynamicObject| {
            conflict::index_keys(kind_of, object)
        });
        let (store, changes) = reflect(
            api_for(client, settings, resource),
            watcher::Config::default(),
            resource.clone(),
            Some(index),
            token.clone(),
        );
        routes.insert(*kind, store);
        controller = controller.owns_stream_with(changes, resource.clone());
    }
    (routes, controller)
}

/// CAPI Clusters, when installed: pause, owner reference, and reconcile
/// when they change.
fn watch_clusters(
    client: &Client,
    settings: &Settings,
    installed: Option<ApiResource>,
    cpis: &Cache<ControlPlaneIngress>,
    token: &CancellationToken,
    controller: Controller<ControlPlaneIngress>,
) -> (
    Option<(Cache<DynamicObject>, ApiResource)>,
    Controller<ControlPlaneIngress>,
) {
    let Some(resource) = installed else {
        return (None, controller);
    };
    let (store, changes) = reflect(
        api_for(client, settings, &resource),
        watcher::Config::default(),
        resource.clone(),
        None,
        token.clone(),
    );
    let index = cpis.clone();
    // Every Cluster event looks through every ControlPlaneIngress: with
    // thousands of each, the comparison must not allocate.
    let to_cpis = move |cluster: DynamicObject| {
        let (namespace, name) = (
            cluster.metadata.namespace.as_deref(),
            cluster.metadata.name.as_deref(),
        );
        index
            .state()
            .into_iter()
            .filter(|c| {
                c.metadata.namespace.as_deref() == namespace
                    && Some(c.spec.cluster_name.as_str()) == name
            })
            .map(|c| ObjectRef::from_obj(&*c))
            .collect::<Vec<_>>()
    };
    // CAPI rewrites a Cluster's status often; only what a reconcile reads from it counts.
    let changes = changes.predicate_filter(
        predicates::generation
            .combine(predicates::annotations)
            .combine(|c: &DynamicObject| {
                super::workload::control_plane_initialized(Some(c)).map(u64::from)
            }),
        Default::default(),
    );
    let controller = controller.watches_stream_with(changes, to_cpis, resource.clone());
    (Some((store, resource)), controller)
}

/// A source kind's watch: its cache, and the stream of its changes that
/// the kind's adapter runs on.
struct SourceWatch<S> {
    kind: SourceKind,
    resource: ApiResource,
    cache: Cache<DynamicObject>,
    changes: S,
}

/// One watch per installed source kind, for its adapter. The adapters'
/// caches come from `reflect` too: a kube Controller that owns its watcher
/// never ends a graceful shutdown that arrives before its first list (its
/// runner waits for a store nothing fills any more), and the watches would
/// never restart after a lost lease.
fn watch_sources(
    client: &Client,
    settings: &Settings,
    installed: &[(SourceKind, ApiResource)],
    token: &CancellationToken,
) -> Vec<
    SourceWatch<
        impl futures::Stream<Item = Result<DynamicObject, watcher::Error>> + Send + 'static,
    >,
> {
    installed
        .iter()
        .map(|(kind, resource)| {
            let (store, changes) = reflect(
                api_for(client, settings, resource),
                watch_config(settings),
                resource.clone(),
                None,
                token.clone(),
            );
            SourceWatch {
                kind: *kind,
                resource: resource.clone(),
                cache: store,
                changes,
            }
        })
        .collect()
}

/// Ready once every cache has its first full list.
fn ready_once_synced(
    state: &Arc<AdminState>,
    token: &CancellationToken,
    cpis: &Cache<ControlPlaneIngress>,
    routes: &HashMap<RouteKind, Cache<DynamicObject>>,
    clusters: &Option<(Cache<DynamicObject>, ApiResource)>,
) {
    let (state, token) = (state.clone(), token.clone());
    let stores: Vec<_> = routes
        .values()
        .cloned()
        .chain(clusters.iter().map(|c| c.0.clone()))
        .collect();
    let cpis = cpis.clone();
    tokio::spawn(async move {
        let synced = async {
            cpis.synced().await;
            tracing::debug!("ControlPlaneIngress cache synced");
            for store in stores {
                store.synced().await;
            }
            tracing::debug!("route and Cluster caches synced");
        };
        tokio::select! {
            _ = synced => state.synced.store(true, Ordering::Release),
            _ = token.cancelled() => {}
        }
    });
}

/// Run the ControlPlaneIngress Controller and the source adapters until
/// `token` is cancelled and each has ended.
async fn drive(
    controller: Controller<ControlPlaneIngress>,
    watched: Vec<
        SourceWatch<
            impl futures::Stream<Item = Result<DynamicObject, watcher::Error>> + Send + 'static,
        >,
    >,
    ctx: Arc<Context>,
    settings: &Settings,
    token: CancellationToken,
) {
    let main = controller
        .with_config(Config::default().concurrency(settings.concurrency))
        .graceful_shutdown_on(token.clone().cancelled_owned())
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "controller event");
            }
        });
    let adapters = watched.into_iter().map(|watch| {
        sources::run(
            ctx.clone(),
            watch.kind,
            watch.resource,
            ((*watch.cache).clone(), watch.changes),
            ctx.sources.clone(),
            settings.concurrency,
            token.clone(),
        )
    });
    futures::join!(main, join_all(adapters));
}
