//! The node proxy in front of a real kube-apiserver (realkube, on loopback):
//! pooled mode with kubectl and watches, and a Go client's post-quantum key
//! exchange. Here in the controller's package rather than with the proxy's
//! own end-to-end tests (crates/proxy/test/proxy_e2e): realkube depends on
//! kube, which the proxy crate's dependencies, dev-dependencies included,
//! stay without; the node binary is built for them (`proxy_bin`).

mod apiserver_front;
mod pooled_kube;
mod post_quantum;
#[path = "../support/proxy_bin.rs"]
mod proxy_bin;
