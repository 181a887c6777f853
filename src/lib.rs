//! hcp-ingress: a Cluster API add-on provider that exposes hosted control
//! planes through one shared SNI-passthrough ingress and makes
//! `kubernetes.default.svc` work through it in every workload cluster.
//!
//! The folders follow the flow of data:
//! `api` (types) → `sources` (objects that become a ControlPlaneIngress) →
//! `render` (pure: spec → objects) → `controller` (I/O: watch, apply, status);
//! `proxy` is the node-local data path, `pki` mints certificates and
//! `telemetry` sets up logs and traces; `doctor` checks a live tenant's
//! path hop by hop.
#![forbid(unsafe_code)]

pub mod api;
pub mod cli;
pub mod controller;
pub mod doctor;
pub mod pki;
pub mod proxy;
pub mod render;
pub mod sources;
pub mod telemetry;
