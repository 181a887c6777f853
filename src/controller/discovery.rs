//! Discovery of the kinds we watch: the route kinds, the source kinds and
//! CAPI's Cluster, as installed in the management cluster right now, and a
//! restart signal when that set changes (a CRD installed or removed).

use std::{collections::HashMap, sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client,
    api::ApiResource,
    discovery,
    runtime::{WatchStreamExt, watcher},
};
use tokio_util::sync::CancellationToken;

use super::settings::Settings;
use crate::{render::RouteKind, sources::SourceKind};

/// The kinds installed in the management cluster that we watch.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Installed {
    /// The route kinds, by kind.
    pub routes: HashMap<RouteKind, ApiResource>,
    /// The source kinds that are both wanted (`--sources`) and installed.
    pub sources: Vec<(SourceKind, ApiResource)>,
    /// CAPI's Cluster, when installed.
    pub cluster: Option<ApiResource>,
}

/// The installed kinds, and whether every lookup answered: `false` when a
/// group failed to answer (not a 404), so the result may miss kinds that are
/// in fact installed.
pub(super) async fn discover(client: &Client, wanted: &[SourceKind]) -> (Installed, bool) {
    let mut cache = HashMap::new();
    let mut routes = HashMap::new();
    for kind in RouteKind::ALL {
        let gvk = kind.gvk();
        if let Some(g) = group(client, &mut cache, &gvk.group).await
            && let Some((resource, _)) = g
                .versioned_resources(&gvk.version)
                .into_iter()
                .find(|(r, _)| r.kind == gvk.kind)
        {
            routes.insert(kind, resource);
        }
    }
    let mut sources = Vec::new();
    for kind in wanted {
        let (group_name, kind_name) = kind.group_kind();
        if let Some(g) = group(client, &mut cache, group_name).await
            && let Some((resource, _)) = g.recommended_kind(kind_name)
        {
            sources.push((*kind, resource));
        }
    }
    let cluster = match group(client, &mut cache, "cluster.x-k8s.io").await {
        Some(g) => g.recommended_kind("Cluster").map(|(r, _)| r),
        None => None,
    };
    let complete = cache.values().all(Result::is_ok);
    let installed = Installed {
        routes,
        sources,
        cluster,
    };
    (installed, complete)
}

/// One API group from discovery, looked up once per discovery round:
/// Ok(None) when it is not installed, Err(()) when discovery failed.
type GroupLookup = Result<Option<Arc<discovery::ApiGroup>>, ()>;

/// One API group from discovery, looked up once per discovery round.
async fn group(
    client: &Client,
    cache: &mut HashMap<String, GroupLookup>,
    name: &str,
) -> Option<Arc<discovery::ApiGroup>> {
    if let Some(found) = cache.get(name) {
        return found.clone().ok().flatten();
    }
    let found = match discovery::group(client, name).await {
        Ok(group) => Ok(Some(Arc::new(group))),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(error) => {
            tracing::warn!(%error, group = name, "discovery failed; looking again soon");
            Err(())
        }
    };
    cache.insert(name.to_string(), found.clone());
    found.ok().flatten()
}

/// Cancel `generation` when the set of installed kinds changes: on CRD
/// events of the groups we care about, and every `rediscover` anyway. A
/// discovery that failed is never taken for a change (a kind would look
/// removed); after one, discovery is repeated every `retry` until it answers.
pub(super) async fn restart_on_change(
    client: Client,
    settings: Settings,
    (installed, mut complete): (Installed, bool),
    generation: CancellationToken,
) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut events = watcher(crds, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut synced = false;
    let period = |complete: bool| {
        if complete {
            settings.rediscover
        } else {
            settings.timing.retry
        }
    };
    let mut deadline = tokio::time::Instant::now() + period(complete);
    loop {
        // How many looks: a CRD event asks for a few (a new CRD shows up in
        // discovery once established), the periodic check for one.
        let looks = tokio::select! {
            _ = generation.cancelled() => return,
            _ = tokio::time::sleep_until(deadline) => 1,
            event = events.next() => match event {
                Some(Ok(watcher::Event::InitDone)) => { synced = true; 0 }
                Some(Ok(watcher::Event::Apply(crd) | watcher::Event::Delete(crd))) if synced && relevant_group(&crd) => 10,
                Some(_) => 0,
                None => return,
            },
        };
        if looks == 0 {
            continue;
        }
        for _ in 0..looks {
            let (now, answered) = discover(&client, &settings.sources).await;
            complete = answered;
            if answered && now != installed {
                tracing::info!("installed kinds changed: restarting the watches");
                generation.cancel();
                return;
            }
            if !answered {
                break;
            }
            tokio::select! {
                _ = generation.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
        deadline = tokio::time::Instant::now() + period(complete);
    }
}

fn relevant_group(crd: &CustomResourceDefinition) -> bool {
    let group = crd.spec.group.as_str();
    RouteKind::ALL.iter().any(|k| k.gvk().group == group)
        || SourceKind::ALL.iter().any(|k| k.group_kind().0 == group)
        || group == "cluster.x-k8s.io"
}
