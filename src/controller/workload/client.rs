//! The HTTP client of one workload cluster.
//!
//! Built the way kube builds its default client (TLS and credentials from the
//! kubeconfig, its auth layer refreshing tokens), with two differences that
//! matter when one controller serves a thousand clusters:
//! - an idle connection is closed after [`IDLE`]: a reconciliation makes its
//!   requests back to back and the next one comes minutes later, so a pooled
//!   connection per cluster would only hold memory here, a connection slot on
//!   the shared ingress and a TLS session on the tenant API server;
//! - the TLS session cache holds the one server the client talks to, not the
//!   256 of rustls' default (14 KiB per client before the first connection).

use std::time::Duration;

use hyper_util::{
    client::legacy::{Client as HttpClient, connect::HttpConnector},
    rt::{TokioExecutor, TokioTimer},
};
use kube::{Client, Config, client::ConfigExt};
use tower::{BoxError, ServiceBuilder};

/// How long a connection may stay idle before it is closed.
pub const IDLE: Duration = Duration::from_secs(5);

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
