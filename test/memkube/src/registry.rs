//! Which resources the server knows: built-in kinds registered by
//! GroupVersionResource, and kinds added by CustomResourceDefinitions.

use std::sync::Arc;

use serde_json::Value;

/// Whether objects of a resource live in a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Namespaced resource (`/namespaces/{ns}/{resource}`).
    Namespaced,
    /// Cluster-scoped resource.
    Cluster,
}

/// A resource as served at one group version.
#[derive(Debug, Clone)]
pub struct ResourceSpec {
    /// API group, empty for the core group.
    pub group: String,
    /// Version, for example `v1`.
    pub version: String,
    /// Plural resource name used in URLs.
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub scope: Scope,
    /// Subresources served, for example `status`.
    pub subresources: Vec<String>,
    /// Short names shown by discovery.
    pub short_names: Vec<String>,
    /// Whether `metadata.generation` is maintained (bumped on spec changes).
    pub generation: bool,
    /// The CRD's schema, for validation and list types (CRD-backed kinds only).
    pub schema: Option<Arc<CrdSchema>>,
    /// Name of the CRD that registered this resource.
    pub crd: Option<String>,
    /// The CRD version's `additionalPrinterColumns`, for `kubectl get` tables.
    pub printer_columns: Vec<Value>,
}

/// Schema data of a CRD version: the crdschema validator and the raw schema.
pub struct CrdSchema {
    /// Validator from the sibling crate.
    pub validator: Option<Arc<crdschema::Crd>>,
    /// `openAPIV3Schema` of this version, for list types.
    pub openapi: Value,
    /// Whether unknown fields are kept at the root.
    pub preserve_unknown: bool,
}

impl std::fmt::Debug for CrdSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrdSchema")
            .field("validator", &self.validator.is_some())
            .finish()
    }
}

impl ResourceSpec {
    /// A resource with no subresources.
    pub fn new(group: &str, version: &str, plural: &str, kind: &str, scope: Scope) -> Self {
        Self {
            group: group.to_string(),
            version: version.to_string(),
            plural: plural.to_string(),
            singular: kind.to_ascii_lowercase(),
            kind: kind.to_string(),
            scope,
            subresources: Vec::new(),
            short_names: Vec::new(),
            generation: false,
            schema: None,
            crd: None,
            printer_columns: Vec::new(),
        }
    }

    /// Adds a `status` subresource; such kinds also keep `metadata.generation`.
    pub fn with_status(mut self) -> Self {
        self.subresources.push("status".into());
        self.generation = true;
        self
    }

    /// Adds short names.
    pub fn with_short_names(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    /// `apiVersion` of objects served at this version.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether the resource is namespaced.
    pub fn namespaced(&self) -> bool {
        self.scope == Scope::Namespaced
    }

    /// Whether status is a separate subresource.
    pub fn has_status(&self) -> bool {
        self.subresources.iter().any(|s| s == "status")
    }

    /// The store key: objects are shared by all versions of a group resource.
    pub fn group_resource(&self) -> (String, String) {
        (self.group.clone(), self.plural.clone())
    }
}

/// The built-in kinds pre-registered on every server.
pub fn builtins() -> Vec<ResourceSpec> {
    use Scope::{Cluster, Namespaced};
    let mut v = vec![
        ResourceSpec::new("", "v1", "namespaces", "Namespace", Cluster)
            .with_status()
            .with_short_names(&["ns"]),
        ResourceSpec::new("", "v1", "configmaps", "ConfigMap", Namespaced)
            .with_short_names(&["cm"]),
        ResourceSpec::new("", "v1", "secrets", "Secret", Namespaced),
        ResourceSpec::new("", "v1", "services", "Service", Namespaced)
            .with_status()
            .with_short_names(&["svc"]),
        ResourceSpec::new("", "v1", "endpoints", "Endpoints", Namespaced).with_short_names(&["ep"]),
        ResourceSpec::new("", "v1", "events", "Event", Namespaced).with_short_names(&["ev"]),
        ResourceSpec::new("", "v1", "pods", "Pod", Namespaced)
            .with_status()
            .with_short_names(&["po"]),
        ResourceSpec::new("", "v1", "serviceaccounts", "ServiceAccount", Namespaced)
            .with_short_names(&["sa"]),
        ResourceSpec::new("", "v1", "nodes", "Node", Cluster)
            .with_status()
            .with_short_names(&["no"]),
        ResourceSpec::new("apps", "v1", "deployments", "Deployment", Namespaced)
            .with_status()
            .with_short_names(&["deploy"]),
        ResourceSpec::new("apps", "v1", "daemonsets", "DaemonSet", Namespaced)
            .with_status()
            .with_short_names(&["ds"]),
        ResourceSpec::new("apps", "v1", "statefulsets", "StatefulSet", Namespaced)
            .with_status()
            .with_short_names(&["sts"]),
        ResourceSpec::new("apps", "v1", "replicasets", "ReplicaSet", Namespaced)
            .with_status()
            .with_short_names(&["rs"]),
        ResourceSpec::new("events.k8s.io", "v1", "events", "Event", Namespaced)
            .with_short_names(&["ev"]),
        ResourceSpec::new(
            "discovery.k8s.io",
            "v1",
            "endpointslices",
            "EndpointSlice",
            Namespaced,
        ),
        ResourceSpec::new(
            "networking.k8s.io",
            "v1",
            "ingresses",
            "Ingress",
            Namespaced,
        )
        .with_status()
        .with_short_names(&["ing"]),
        ResourceSpec::new(
            "networking.k8s.io",
            "v1",
            "ingressclasses",
            "IngressClass",
            Cluster,
        ),
        ResourceSpec::new("coordination.k8s.io", "v1", "leases", "Lease", Namespaced),
        ResourceSpec::new(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            Cluster,
        )
        .with_status()
        .with_short_names(&["crd", "crds"]),
    ];
    for (plural, kind, scope) in [
        ("roles", "Role", Namespaced),
        ("rolebindings", "RoleBinding", Namespaced),
        ("clusterroles", "ClusterRole", Cluster),
        ("clusterrolebindings", "ClusterRoleBinding", Cluster),
    ] {
        v.push(ResourceSpec::new(
            "rbac.authorization.k8s.io",
            "v1",
            plural,
            kind,
            scope,
        ));
    }
    v
}
