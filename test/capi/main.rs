//! Cluster API's own programs read what hcp-ingress ships, on real API
//! servers: clusterctl installs, deletes and moves it, and the Cluster API
//! core manager applies its ClusterResourceSet. The binaries come from
//! hack/capi/build.sh (built once per version from the Go module proxy);
//! missing, a test fails and says how to build them.

// Shared with the controller tests; this target uses part of it.
#[allow(dead_code)]
#[path = "../controller/harness.rs"]
mod harness;

mod capi;
mod hosted;
mod install;
mod manager;
mod moving;
mod resource_set;
