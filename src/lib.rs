//! hcp-ingress: a Cluster API add-on provider that exposes hosted control
//! planes through one shared SNI-passthrough ingress and makes
//! `kubernetes.default.svc` work through it in every workload cluster.
//!
//! The folders follow the flow of data:
//! `api` (types) → `sources` (objects that become a ControlPlaneIngress) →
//! `render` (pure: spec → objects) → `controller` (I/O: watch, apply, status);
//! `pki` mints certificates; `doctor` checks a live tenant's path hop by hop.
//!
//! The node-local data path is a crate of its own (`crates/proxy`, re-exported
//! here as [`proxy`]), which depends on no Kubernetes crate; logging and
//! traces are `crates/telemetry` ([`telemetry`]), which both use.
#![forbid(unsafe_code)]

pub mod api;
pub mod cli;
pub mod controller;
pub mod doctor;
pub mod pki;
pub mod render;
pub mod sources;

/// The node proxy's library: its config-file contract (`proxy::config`), which
/// [`render`] writes, is defined once, there.
pub use hcp_ingress_proxy as proxy;
/// Logging, OTLP traces and the admin HTTP server, shared with the node proxy.
pub use hcp_ingress_telemetry as telemetry;
