//! The workload clusters' clients: one per cluster, from Secret
//! `<cluster>-kubeconfig`, rebuilt when its content changes.
//!
//! Each is built the way kube builds its default client (TLS and credentials from the
//! kubeconfig, its auth layer refreshing tokens), with two differences that
//! matter when one controller serves a thousand clusters:
//! - an idle connection is closed after [`IDLE`]: a reconciliation makes its
//!   requests back to back and the next one comes minutes later, so a pooled
//!   connection per cluster would only hold memory here, a connection slot on
//!   the shared ingress and a TLS session on the tenant API server;
//! - the TLS session cache holds the one server the client talks to, not the
//!   256 of rustls' default;
//! - a client unused for [`KEEP`] is dropped: a cluster's reconciliations
//!   come in a burst and then once per resync, minutes apart, and a kept
//!   client holds kube's request buffer, its trust anchors, the HTTP client
//!   and TLS session cache, thousands of times over, where building one
//!   again costs a kubeconfig parse (docs/architecture.md has the figures).

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use hyper_util::{
    client::legacy::{Client as HttpClient, connect::HttpConnector},
    rt::{TokioExecutor, TokioTimer},
};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client, Config, ResourceExt,
    client::ConfigExt,
    config::{KubeConfigOptions, Kubeconfig},
};
use md5::{Digest, Md5};
use tower::{BoxError, ServiceBuilder};

use super::error::WorkloadError;
use crate::{api::ControlPlaneIngress, controller::redact};

/// How long a connection may stay idle before it is closed.
pub const IDLE: Duration = Duration::from_secs(5);

/// How long an unused client is kept.
pub const KEEP: Duration = Duration::from_secs(15);

/// TLS 1.3 tickets kept for resuming sessions: enough for one server.
const SESSION_TICKETS: usize = 8;

/// A client for `config` (see the module docs); its connect and read timeouts
/// are the config's.
pub fn build(config: Config) -> kube::Result<Client> {
    let mut tls = config.rustls_client_config()?;
    tls.resumption = rustls::client::Resumption::in_memory_sessions(SESSION_TICKETS);
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let builder = match &config.tls_server_name {
        Some(name) => {
            let name = rustls::pki_types::ServerName::try_from(name.clone()).map_err(|e| {
                kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e))
            })?;
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => builder,
    };
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let mut connector =
        hyper_timeout::TimeoutConnector::new(builder.enable_http1().wrap_connector(http));
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    let http = HttpClient::builder(TokioExecutor::new())
        .pool_idle_timeout(IDLE)
        .pool_timer(TokioTimer::new())
        .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http);
    Ok(Client::new(service, config.default_namespace))
}

/// Workload clients, one per cluster, rebuilt when its kubeconfig changes.
#[derive(Default)]
pub struct Clients {
    clients: Mutex<Cached>,
    /// Per cluster: the last steering rewrite seen, and when.
    drift: Mutex<HashMap<String, (Instant, Vec<String>)>>,
}

/// The clients by cluster: the kubeconfig's digest each was built from,
/// and when it was last handed out.
#[derive(Default)]
struct Cached {
    by_cluster: HashMap<String, (String, Client, Instant)>,
    /// When clients unused for [`KEEP`] were last dropped.
    swept: Option<Instant>,
}

impl Cached {
    /// Drops the clients unused for [`KEEP`], at most once per tenth of it:
    /// a look through every cluster on every call would cost more than the
    /// clients.
    fn sweep(&mut self, now: Instant) {
        if self
            .swept
            .is_some_and(|at| now.duration_since(at) < KEEP / 10)
        {
            return;
        }
        self.swept = Some(now);
        self.by_cluster
            .retain(|_, (_, _, used)| now.duration_since(*used) < KEEP);
    }
}

impl Clients {
    /// The steering rewrite last seen within `window`, with how long ago:
    /// an API server's endpoint reconciler rewrites every few seconds and we
    /// re-steer at once, so a single look would make the condition flap.
    pub(super) fn recent_drift(&self, key: &str, window: Duration) -> Vec<String> {
        let mut seen = self.drift.lock().expect("drift memory");
        match seen.get(key) {
            Some((at, last)) if at.elapsed() < window => {
                let ago = at.elapsed().as_secs();
                last.iter().map(|d| format!("{d} ({ago} s ago)")).collect()
            }
            _ => {
                seen.remove(key);
                Vec::new()
            }
        }
    }

    /// Remember a steering rewrite seen now (see [`Clients::recent_drift`]).
    pub(super) fn note_drift(&self, key: &str, drift: Vec<String>) {
        let mut seen = self.drift.lock().expect("drift memory");
        seen.insert(key.to_string(), (Instant::now(), drift));
    }

    /// The client of `cpi`'s workload cluster.
    pub(super) async fn of(
        &self,
        mgmt: &Client,
        cpi: &ControlPlaneIngress,
    ) -> Result<Client, WorkloadError> {
        let namespace = cpi.namespace().unwrap_or_default();
        let (name, data_key) = kubeconfig_secret(cpi);
        self.get(mgmt, &namespace, &cpi.spec.cluster_name, &name, &data_key)
            .await
    }

    async fn get(
        &self,
        mgmt: &Client,
        namespace: &str,
        cluster: &str,
        name: &str,
        data_key: &str,
    ) -> Result<Client, WorkloadError> {
        let secrets: Api<Secret> = Api::namespaced(mgmt.clone(), namespace);
        let secret = secrets.get_opt(name).await.map_err(|e| {
            WorkloadError::KubeconfigUnreadable(format!(
                "failed to read Secret {namespace}/{name}: {e}"
            ))
        })?;
        let Some(value) = secret
            .and_then(|s| s.data)
            .and_then(|mut d| d.remove(data_key))
        else {
            return Err(WorkloadError::KubeconfigMissing(format!(
                "Secret {namespace}/{name} with key `{data_key}` not found: the control plane's provider writes it once the control plane is up"
            )));
        };
        let digest = format!("{:x}", Md5::digest(&value.0));
        let key = format!("{namespace}/{cluster}");
        {
            let mut cached = self.clients.lock().expect("client cache");
            let now = Instant::now();
            cached.sweep(now);
            if let Some((seen, client, used)) = cached.by_cluster.get_mut(&key)
                && *seen == digest
            {
                *used = now;
                return Ok(client.clone());
            }
        }
        let invalid =
            |e: String| WorkloadError::KubeconfigInvalid(format!("Secret {namespace}/{name}: {e}"));
        let text =
            String::from_utf8(value.0).map_err(|_| invalid("`value` is not UTF-8".into()))?;
        // Parser messages quote the kubeconfig: scrub them before they are shown.
        let kubeconfig = Kubeconfig::from_yaml(&text)
            .map_err(|e| invalid(redact::scrub(&e.to_string(), &text)))?;
        let mut config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| invalid(redact::scrub(&e.to_string(), &text)))?;
        // An unreachable cluster must cost a bounded time, not a reconcile slot for minutes.
        config.connect_timeout = Some(Duration::from_secs(5));
        config.read_timeout = Some(Duration::from_secs(15));
        // No retry layer (kube's default retries 503s up to 15 times with
        // growing delays): this controller has its own per-cluster backoff and
        // must report the failure promptly.
        let client = build(config).map_err(|e| invalid(redact::scrub(&e.to_string(), &text)))?;
        tracing::info!(cluster = %key, "built a workload client from the kubeconfig Secret");
        self.clients
            .lock()
            .expect("client cache")
            .by_cluster
            .insert(key, (digest, client.clone(), Instant::now()));
        Ok(client)
    }
}

/// The Secret and key holding `cpi`'s workload kubeconfig: `spec.kubeconfigSecret`,
/// else CAPI's `<cluster>-kubeconfig`, key `value`.
pub(crate) fn kubeconfig_secret(cpi: &ControlPlaneIngress) -> (String, String) {
    match &cpi.spec.kubeconfig_secret {
        Some(secret) => (secret.name.clone(), secret.key.clone()),
        None => (
            format!("{}-kubeconfig", cpi.spec.cluster_name),
            "value".to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> Client {
        build(Config::new("https://127.0.0.1:6443".parse().unwrap())).unwrap()
    }

    #[tokio::test]
    async fn clients_unused_for_keep_are_dropped_at_most_every_tenth_of_it() {
        let now = Instant::now();
        let Some(long_ago) = now.checked_sub(KEEP + Duration::from_secs(1)) else {
            return; // a machine up for less than a minute
        };
        let mut cached = Cached::default();
        cached
            .by_cluster
            .insert("ns/old".into(), ("d".into(), client(), long_ago));
        cached
            .by_cluster
            .insert("ns/recent".into(), ("d".into(), client(), now));
        cached.sweep(now);
        let mut kept: Vec<&String> = cached.by_cluster.keys().collect();
        kept.sort();
        assert_eq!(kept, ["ns/recent"]);

        // Until a tenth of KEEP has passed, no other sweep runs.
        cached
            .by_cluster
            .insert("ns/old".into(), ("d".into(), client(), long_ago));
        cached.sweep(now + KEEP / 20);
        assert_eq!(cached.by_cluster.len(), 2);
        cached.sweep(now + KEEP / 10);
        assert_eq!(cached.by_cluster.len(), 1);
    }
}
