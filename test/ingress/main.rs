//! Real ingress controllers read the routes the hcp-ingress controller
//! writes, and carry a tenant's TLS by SNI, passed through, to its real
//! kube-apiserver.
//!
//! Each test runs a management cluster and a tenant cluster (realkube: etcd
//! and kube-apiserver), the hcp-ingress controller in-process as the
//! ServiceAccount and RBAC of `config/`, and one real ingress controller as
//! a process against the management API server. The test creates only the
//! ControlPlaneIngress and what a tenant's provider would (the tenant's
//! Service and EndpointSlice); the route is the controller's. Through the
//! ingress controller the test then checks what a user of the tenant depends
//! on: the tenant's own certificate (its CA, its host name), a client
//! certificate that authenticates (SelfSubjectReview), the konnectivity host
//! on its own backend port, and an unknown SNI reaching no tenant.
//!
//! The consumers are built by `hack/consumers/build.sh` (Traefik,
//! haproxy-ingress; versions in `hack/consumers/versions.env`); haproxy-ingress
//! runs the system's `haproxy` with `lua-json`. The tests need root (a
//! network namespace and a veth for the backends' addresses). What is
//! missing fails the test under `CI=true` and is a note otherwise.
//!
//! kube-apiserver refuses loopback addresses in EndpointSlices, so the
//! backends are reached at TEST-NET-3 addresses (203.0.113.0/24) on a veth
//! pair whose other end lives in a network namespace of the test.

mod bed;
mod consumers;
mod haproxy_ingress;
mod haproxytech;
mod k0smotron;
mod konnectivity;
mod node;
#[path = "../support/proxy_bin.rs"]
mod proxy_bin;
mod tls;
mod traefik;
mod whole_path;
