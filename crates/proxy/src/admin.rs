//! The proxy's admin endpoint: the shared admin server (`telemetry::health`)
//! answering with the proxy's readiness and metrics.

use std::sync::Arc;

use tokio::net::TcpListener;

use super::state::Shared;
use hcp_ingress_telemetry::health::{self, Health};

impl Health for Shared {
    fn ready(&self) -> bool {
        self.is_ready()
    }

    fn not_ready_reason(&self) -> String {
        "not ready: not listening or no healthy upstream\n".into()
    }

    fn metrics(&self) -> String {
        self.metrics.encode()
    }

    fn revision(&self) -> Option<&str> {
        self.revision.as_deref()
    }
}

/// Serve `/healthz`, `/readyz` and `/metrics` until the process ends.
pub async fn run(listener: TcpListener, shared: Arc<Shared>) {
    health::serve(listener, shared, std::future::pending()).await
}
