//! API types: the `ControlPlaneIngress` CRD and the rules its fields obey.

mod control_plane_ingress;
mod rules;
pub mod upstream;
pub mod validation;

pub use control_plane_ingress::*;

/// Label CAPI puts on every object of a cluster.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// Label marking objects hcp-ingress manages.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`] and the server-side apply field manager.
pub const MANAGER: &str = "hcp-ingress";
