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

use tokio::sync::watch as signal;

use crate::{
    Error, Options, RequestRecord, faults, http,
    http::{Router, TENANT_PREFIX},
    kubeconfig, store, tls,
};

/// A running host; stops when dropped.
pub struct Host {
    opts: Options,
    base: String,
    addr: SocketAddr,
    tls: Option<tls::Tls>,
    tenants: Arc<http::Tenants>,
    hooks: Arc<faults::Hooks>,
    shutdown: signal::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// One API server of a [`Host`].
#[derive(Clone)]
pub struct Tenant {
    name: String,
    shared: Arc<http::Shared>,
    ca: Option<(String, Vec<u8>)>,
}

impl Host {
    /// Starts a host with no tenants; `opts` apply to every tenant (the
    /// kubeconfig's names are the tenant's).
    pub async fn start(opts: Options) -> Result<Host, Error> {
        let bind = |source| Error::Bind {
            addr: opts.listen.to_string(),
            source,
        };
        let listener = tokio::net::TcpListener::bind(opts.listen)
            .await
            .map_err(bind)?;
        let addr = listener.local_addr().map_err(bind)?;
        let tls = if opts.tls {
            Some(tls::generate()?)
        } else {
            None
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let tenants = Arc::new(http::Tenants::default());
        let (shutdown, rx) = signal::channel(false);
        let acceptor = tls.as_ref().map(|t| t.acceptor.clone());
        let router = Router::Tenants(tenants.clone());
        let task = tokio::spawn(http::serve(listener, router, acceptor, rx));
        Ok(Host {
            opts,
            base: format!("{scheme}://{addr}"),
            addr,
            tls,
            tenants,
            hooks: Arc::new(faults::Hooks::default()),
            shutdown,
            task,
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
                    url: format!("{}/{TENANT_PREFIX}/{name}", self.base),
                    bookmark_interval: self.opts.bookmark_interval,
                })
            })
            .clone();
        Tenant {
            name: name.to_string(),
            shared,
            ca: self
                .tls
                .as_ref()
                .map(|t| (t.ca_pem.clone(), t.ca_der.clone())),
        }
    }

    /// Listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
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

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        self.task.abort();
    }
}

impl Tenant {
    /// Base URL, `https://127.0.0.1:PORT/clusters/<name>`.
    pub fn url(&self) -> String {
        self.shared.url.clone()
    }

    /// A kubeconfig for this tenant (usable in a Secret's `value` key).
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig::render(
            &self.name,
            &self.url(),
            self.ca.as_ref().map(|(pem, _)| pem.as_str()),
        )
    }

    /// A `kube::Client` for this tenant, default namespace `default`.
    ///
    /// # Panics
    /// If kube cannot build a client for a loopback URL (a bug).
    pub fn client(&self) -> kube::Client {
        let url = self.url().parse().expect("memkube URLs are valid");
        let mut config = kube::Config::new(url);
        config.root_cert = self.ca.as_ref().map(|(_, der)| vec![der.clone()]);
        kube::Client::try_from(config).expect("failed to build a kube client for memkube")
    }

    /// The objects, for a stand-in that works on them in-process.
    pub fn store(&self) -> Arc<store::Store> {
        self.shared.store.clone()
    }
}
