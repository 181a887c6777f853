//! The real controller against the in-memory API server (memkube): the
//! management side of every source kind and flavor, switches, pause, bad
//! input, missing CRDs, API faults, leader election, steady state, deletion.

mod data_path;
mod doctor;
mod families;
mod faults;
mod harness;
mod management;
mod no_kube_proxy;
#[path = "../support/proxy_bin.rs"]
mod proxy_bin;
mod secrets;
mod shards;
mod steering_path;
mod takeover;
mod upstreams;
mod workload;
