//! Many in-memory API servers behind one listener: a rig for thousands of
//! workload clusters in one process.
//!
//! Each tenant is a whole API server of its own (its objects, resource
//! versions, watches and discovery), reached at `<base>/clusters/<name>`;
//! they share the listener, the TLS certificate and the request log. A
//! tenant costs its store and nothing per connection until a client
//! connects, where a [`TestApi`](crate::TestApi) each costs a listener, a
//! key pair and a task.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::{
    Error, Options, RequestRecord, Served, faults, http,
    http::{Router, TENANT_PREFIX},
    store,
};

/// A running host; stops when it and every [`Tenant`] handle are dropped.
pub struct Host {
    opts: Options,
    served: Arc<Served>,
    tenants: Arc<http::Tenants>,
    hooks: Arc<faults::Hooks>,
}

/// One API server of a [`Host`].
#[derive(Clone)]
pub struct Tenant {
    name: String,
    shared: Arc<http::Shared>,
    served: Arc<Served>,
}

impl Host {
    /// Starts a host with no tenants; `opts` apply to every tenant (the
    /// kubeconfig's names are the tenant's).
    pub async fn start(opts: Options) -> Result<Host, Error> {
        let tenants = Arc::new(http::Tenants::default());
        let served = Served::start(&opts, |_| Router::Tenants(tenants.clone())).await?;
        Ok(Host {
            opts,
            served: Arc::new(served),
            tenants,
            hooks: Arc::new(faults::Hooks::default()),
        })
    }

    /// Adds tenant `name` (a DNS label), or returns the one of that name.
    pub fn add(&self, name: &str) -> Tenant {
        let mut tenants = self.tenants.write().expect("tenants");
        let shared = tenants
            .entry(name.to_string())
            .or_insert_with(|| {
                Arc::new(http::Shared {
                    store: Arc::new(store::Store::with_watch_buffer(
                        self.opts.history,
                        self.opts.watch_buffer,
                    )),
                    hooks: self.hooks.clone(),
                    url: format!("{}/{TENANT_PREFIX}/{name}", self.served.base),
                    bookmark_interval: self.opts.bookmark_interval,
                })
            })
            .clone();
        Tenant {
            name: name.to_string(),
            shared,
            served: self.served.clone(),
        }
    }

    /// Listening address.
    pub fn addr(&self) -> SocketAddr {
        self.served.addr
    }

    /// Every request served so far, to any tenant (paths without the
    /// tenant's prefix).
    pub fn request_log(&self) -> Vec<RequestRecord> {
        self.hooks.log()
    }

    /// Empties the request log.
    pub fn clear_request_log(&self) {
        self.hooks.clear_log();
    }
}

impl Tenant {
    /// Base URL, `https://127.0.0.1:PORT/clusters/<name>`.
    pub fn url(&self) -> String {
        self.shared.url.clone()
    }

    /// A kubeconfig for this tenant (usable in a Secret's `value` key).
    pub fn kubeconfig_yaml(&self) -> String {
        self.served.kubeconfig(&self.name, &self.url())
    }

    /// A `kube::Client` for this tenant, default namespace `default`.
    ///
    /// # Panics
    /// If kube cannot build a client for a loopback URL (a bug).
    pub fn client(&self) -> kube::Client {
        self.served.client(&self.url())
    }

    /// The objects, for a stand-in that works on them in-process.
    pub fn store(&self) -> Arc<store::Store> {
        self.shared.store.clone()
    }
}
