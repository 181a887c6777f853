//! `memkube`: a small in-memory Kubernetes API server for tests, benchmarks
//! and the local run. It speaks the Kubernetes REST protocol (JSON) over HTTP
//! on loopback, so a real `kube::Client`, `kube::runtime` watchers and
//! `kubectl` work against it.
//!
//! ```no_run
//! # async fn demo() {
//! let api = memkube::TestApi::start().await;
//! let client = api.client();
//! # let _ = client;
//! # }
//! ```
//!
//! Modules, in the order a request meets them: [`http`] (routing, content
//! negotiation, hooks), [`discovery`], [`store`] (objects, resourceVersions,
//! finalizers, garbage collection), [`apply`] (server-side apply, managed
//! fields, patches) with [`fieldpath`] and [`typeinfo`], [`watch`], [`crd`],
//! [`faults`], [`kubeconfig`], [`tls`]; [`host`] serves many API servers
//! behind one listener.
#![forbid(unsafe_code)]

pub mod apply;
pub mod crd;
pub mod discovery;
pub mod error;
pub mod faults;
pub mod fieldpath;
pub mod host;
pub mod http;
pub mod kubeconfig;
pub mod registry;
pub mod selector;
pub mod stand_in;
pub mod store;
pub mod tls;
pub mod typeinfo;
pub mod validate;
pub mod watch;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch as signal;

pub use error::{ApiError, Error};
pub use faults::{FaultCounts, RandomFaults, RequestMatch, RequestRecord};
pub use host::{Host, Tenant};
pub use registry::{ResourceSpec, Scope};

/// How to start a server.
#[derive(Debug, Clone)]
pub struct Options {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Cluster, user and context name in the kubeconfig.
    pub name: String,
    /// Events kept per resource for watches; older resourceVersions get 410 Gone.
    pub history: usize,
    /// How often watches that allow bookmarks receive one.
    pub bookmark_interval: Duration,
    /// Serve HTTPS with a generated CA (in the kubeconfig) instead of HTTP.
    pub tls: bool,
    /// Events a watch may fall behind by before it is ended (see
    /// [`store::Store::with_watch_buffer`]).
    pub watch_buffer: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            name: "memkube".into(),
            history: 1000,
            bookmark_interval: Duration::from_secs(1),
            tls: false,
            watch_buffer: store::WATCH_BUFFER,
        }
    }
}

/// A running server; stops when dropped.
pub struct TestApi {
    shared: Arc<http::Shared>,
    name: String,
    served: Served,
}

/// A listener serving a router, over TLS when asked; stops when dropped.
/// What a [`TestApi`] and a [`Host`] share.
pub(crate) struct Served {
    /// Listening address.
    pub(crate) addr: SocketAddr,
    /// `http://127.0.0.1:PORT` (or `https://`).
    pub(crate) base: String,
    /// The generated CA and certificate, with `Options::tls`.
    pub(crate) tls: Option<tls::Tls>,
    shutdown: signal::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Served {
    /// Binds `opts.listen` and serves the router `router` makes of the
    /// base URL.
    pub(crate) async fn start(
        opts: &Options,
        router: impl FnOnce(&str) -> http::Router,
    ) -> Result<Served, Error> {
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
        let base = format!("{scheme}://{addr}");
        let (shutdown, rx) = signal::channel(false);
        let acceptor = tls.as_ref().map(|t| t.acceptor.clone());
        let task = tokio::spawn(http::serve(listener, router(&base), acceptor, rx));
        Ok(Served {
            addr,
            base,
            tls,
            shutdown,
            task,
        })
    }

    /// A `kube::Client` for `url` on this listener, trusting its CA.
    ///
    /// # Panics
    /// If kube cannot build a client for a loopback URL (a bug).
    pub(crate) fn client(&self, url: &str) -> kube::Client {
        let url = url.parse().expect("memkube URLs are valid");
        let mut config = kube::Config::new(url);
        config.root_cert = self.tls.as_ref().map(|t| vec![t.ca_der.clone()]);
        kube::Client::try_from(config).expect("failed to build a kube client for memkube")
    }

    /// A kubeconfig named `name` for `url` on this listener.
    pub(crate) fn kubeconfig(&self, name: &str, url: &str) -> String {
        kubeconfig::render(name, url, self.tls.as_ref().map(|t| t.ca_pem.as_str()))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        self.task.abort();
    }
}

impl TestApi {
    /// Starts a server on a random loopback port.
    ///
    /// # Panics
    /// If no loopback port can be bound, which a test cannot recover from.
    pub async fn start() -> Self {
        Self::start_with(Options::default())
            .await
            .expect("failed to start memkube on loopback")
    }

    /// Starts a server with options.
    pub async fn start_with(opts: Options) -> Result<Self, Error> {
        let mut shared = None;
        let served = Served::start(&opts, |base| {
            let one = Arc::new(http::Shared {
                store: Arc::new(store::Store::with_watch_buffer(
                    opts.history,
                    opts.watch_buffer,
                )),
                hooks: Arc::new(faults::Hooks::default()),
                url: base.to_string(),
                bookmark_interval: opts.bookmark_interval,
            });
            shared = Some(one.clone());
            http::Router::One(one)
        })
        .await?;
        Ok(Self {
            shared: shared.expect("the router is made at start"),
            name: opts.name,
            served,
        })
    }

    /// Base URL, `http://127.0.0.1:PORT` (or `https://`).
    pub fn url(&self) -> String {
        self.shared.url.clone()
    }

    /// Listening address.
    pub fn addr(&self) -> SocketAddr {
        self.served.addr
    }

    /// A kubeconfig pointing at this server (usable in a Secret's `value` key).
    pub fn kubeconfig_yaml(&self) -> String {
        self.served.kubeconfig(&self.name, &self.url())
    }

    /// A `kube::Client` for this server, default namespace `default`.
    ///
    /// # Panics
    /// If kube cannot build a client for a loopback URL (a bug).
    pub fn client(&self) -> kube::Client {
        self.served.client(&self.url())
    }

    /// The CA certificate (PEM) of an HTTPS server.
    pub fn ca_pem(&self) -> Option<String> {
        self.served.tls.as_ref().map(|t| t.ca_pem.clone())
    }

    /// The objects, for a stand-in that works on them in-process.
    pub fn store(&self) -> Arc<store::Store> {
        self.shared.store.clone()
    }

    /// Every request served so far.
    pub fn request_log(&self) -> Vec<RequestRecord> {
        self.shared.hooks.log()
    }

    /// Empties the request log (for example once a test reached steady state).
    pub fn clear_request_log(&self) {
        self.shared.hooks.clear_log();
    }

    /// Fails the next `n` requests matching `matcher` with status `code`.
    pub fn fail_next(&self, n: usize, matcher: RequestMatch, code: u16) {
        self.shared.hooks.fail_next(n, matcher, code);
    }

    /// Delays matching requests by `delay` until [`TestApi::clear_faults`].
    pub fn add_latency(&self, matcher: RequestMatch, delay: Duration) {
        self.shared.hooks.add_latency(matcher, delay);
    }

    /// Removes injected failures and latency, random faults included.
    pub fn clear_faults(&self) {
        self.shared.hooks.clear_faults();
    }

    /// Turns seeded random faults on (`Some`) or off (`None`); see [`RandomFaults`].
    pub fn set_random_faults(&self, faults: Option<RandomFaults>) {
        self.shared.hooks.set_random_faults(faults);
    }

    /// How many random faults this server injected so far.
    pub fn random_fault_counts(&self) -> FaultCounts {
        self.shared.hooks.random_fault_counts()
    }

    /// Ends every open watch stream; clients reconnect from their last resourceVersion.
    pub fn drop_watches(&self) {
        self.shared.hooks.drop_watches();
    }

    /// Registers (or replaces) a resource.
    pub fn register(&self, spec: ResourceSpec) {
        self.shared.store.register(spec);
    }

    /// Creates a CustomResourceDefinition object, which serves its resource.
    pub fn add_crd(&self, crd: Value) -> Result<(), Error> {
        add_crd(&self.shared.store, crd)
    }

    /// Loads the CRDs of a YAML file or folder; returns how many were added.
    pub fn load_crds(&self, path: impl AsRef<Path>) -> Result<usize, Error> {
        load_crds(&self.shared.store, path.as_ref())
    }

    /// The current global resourceVersion (the last write's).
    pub fn resource_version(&self) -> u64 {
        self.shared.store.current_rv()
    }
}

/// Creates one CRD object in a store; an existing CRD of that name is kept.
pub fn add_crd(store: &store::Store, crd: Value) -> Result<(), Error> {
    let spec = store
        .resolve("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        .expect("customresourcedefinitions are built in");
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let opts = store::WriteOptions {
        manager: "memkube".into(),
        ..Default::default()
    };
    match store.create(&spec, "", crd, &opts) {
        Ok(_) => Ok(()),
        Err(e) if e.code == 409 => Ok(()),
        Err(source) => Err(Error::Api {
            what: format!("CustomResourceDefinition {name}"),
            source,
        }),
    }
}

/// Loads every CRD of a YAML file or folder into a store.
pub fn load_crds(store: &store::Store, path: &Path) -> Result<usize, Error> {
    let crds = crd::read_crds(path)?;
    let n = crds.len();
    for c in crds {
        add_crd(store, c)?;
    }
    Ok(n)
}
