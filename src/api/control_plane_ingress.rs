//! The hub API: one `ControlPlaneIngress` per workload cluster, in one
//! file because the CRD's schema is generated from these types and their
//! docs: it reads as the API reference, top to bottom.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::rules::{dns1123_subdomain_schema, port_schema};

/// Desired state: how one hosted control plane is exposed through the shared
/// ingress, and how its workload cluster reaches it.
#[derive(CustomResource, KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[kube(
    group = "hcp-ingress.dev",
    version = "v1alpha1",
    kind = "ControlPlaneIngress",
    namespaced,
    shortname = "cpi",
    category = "cluster-api",
    status = "ControlPlaneIngressStatus",
    doc = "Exposes a hosted control plane through a shared SNI-passthrough ingress and makes kubernetes.default.svc work through it",
    // Columns readable before convergence: Ready and its reason are written
    // on the first reconcile (Unknown comes with a reason saying what is
    // still unchecked); the proxy count only once a DaemonSet exists.
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterName"),
    printcolumn(name = "API host", type_ = "string", json_path = ".spec.ingress.apiHost"),
    printcolumn(name = "Flavor", type_ = "string", json_path = ".status.flavor"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Proxy nodes",
        type_ = "integer",
        description = "Nodes of the workload cluster whose node proxy is ready",
        json_path = ".status.proxy.readyNodes"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        priority = 1,
        json_path = ".status.endpoint"
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        priority = 1,
        json_path = ".status.conditions[?(@.type==\"Ready\")].message"
    ),
    cel,
    validation = Rule::new("!has(self.spec.ingress.konnectivityHost) || self.spec.ingress.konnectivityHost != self.spec.ingress.apiHost")
        .message("must differ from spec.ingress.apiHost: the shared ingress routes by host name")
        .field_path(".spec.ingress.konnectivityHost"),
    validation = Rule::new("!has(self.spec.ingress.konnectivityHost) || has(self.spec.backend.konnectivityPort)")
        .message("is required when spec.ingress.konnectivityHost is set")
        .field_path(".spec.backend.konnectivityPort"),
    validation = Rule::new("!has(self.spec.route) || !has(self.spec.route.controller) || self.spec.route.controller != 'gateway' || (has(self.spec.route.gateway) && size(self.spec.route.gateway.parentRefs) > 0)")
        .message("needs at least one Gateway when spec.route.controller is gateway")
        .field_path(".spec.route.gateway.parentRefs"),
    validation = Rule::new("!has(self.spec.upstream) || !has(self.spec.upstream.takeOverNodeProxy) || !self.spec.upstream.takeOverNodeProxy || (self.spec.upstream.provider == 'k0smotron' && has(self.spec.upstream.nodeProxy) && (!has(self.spec.proxy) || !has(self.spec.proxy.steering) || self.spec.proxy.steering == 'advertise-address'))")
        .message("takes over only k0smotron's node proxy (spec.upstream.provider k0smotron, spec.upstream.nodeProxy set), with spec.proxy.steering advertise-address")
        .field_path(".spec.upstream.takeOverNodeProxy"),
)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneIngressSpec {
    /// Name of the CAPI `Cluster` in the same namespace.
    #[schemars(length(min = 1, max = 63))]
    pub cluster_name: String,

    /// The ingress block, with exactly the shape of k0smotron's `spec.ingress`.
    pub ingress: IngressSpec,

    /// Which ingress controller serves the route and its options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<RouteSpec>,

    /// The control plane Service the route points at.
    pub backend: BackendSpec,

    /// The node-local proxy in the workload cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxySpec>,

    /// Cloud-controller-manager override (breaks the `--cloud-provider=external` deadlock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ccm: Option<CcmSpec>,

    /// For a workload cluster whose dataplane replaces kube-proxy (Cilium's
    /// kube-proxy replacement, Calico's eBPF dataplane): its agents implement
    /// Services, so they need the API server's address before any Service works.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_proxy_replacement: Option<KubeProxyReplacementSpec>,

    /// The Secret with the workload cluster's kubeconfig; default `<clusterName>-kubeconfig`, key `value` (CAPI's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_secret: Option<SecretKeyRef>,

    /// What the control plane's own provider does itself: hcp-ingress never
    /// becomes a second owner of those parts. Set by the source adapters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<UpstreamSpec>,
}

/// A key of a Secret in the ControlPlaneIngress's namespace.
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Secret name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key in `data`.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// The parts of the path the control plane's provider (k0smotron, Kamaji,
/// Steward) creates itself. hcp-ingress leaves them to it, reports on them,
/// and does the rest (CCM override, probes, status).
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamSpec {
    /// The provider: `k0smotron`, `kamaji` or `steward`.
    #[schemars(length(min = 1, max = 63))]
    pub provider: String,
    /// The route object the provider creates for `ingress.apiHost`; hcp-ingress
    /// then routes only what it leaves out (`ingress.konnectivityHost`, unless
    /// `routeIncludesKonnectivity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<UpstreamObject>,
    /// The provider's route carries `ingress.konnectivityHost` too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub route_includes_konnectivity: bool,
    /// The node proxy the provider ships into the workload cluster; hcp-ingress
    /// then installs none and leaves `default/kubernetes` to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_proxy: Option<UpstreamObject>,
    /// Replace the provider's node proxy by hcp-ingress's: install ours beside
    /// it, steer `default/kubernetes` to ours once it is ready on every node,
    /// then ask the user to tell the provider to remove its own (k0smotron
    /// only; steering `advertiseAddress`). Pods keep the API throughout.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub take_over_node_proxy: bool,
}

impl UpstreamSpec {
    /// The provider's node proxy that hcp-ingress leaves in place: none when
    /// the provider ships none, or when hcp-ingress takes it over.
    pub fn kept_node_proxy(&self) -> Option<&UpstreamObject> {
        self.node_proxy
            .as_ref()
            .filter(|_| !self.take_over_node_proxy)
    }
}

/// An object created by the control plane's provider.
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamObject {
    /// Kind (`Ingress`, `IngressRouteTCP`, `DaemonSet`, `Deployment`).
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Namespace; default: the ControlPlaneIngress's (management side) or `default` (workload side).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl std::fmt::Display for UpstreamObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// Same shape as K0smotronControlPlane `spec.ingress`, so it can be copied across.
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct IngressSpec {
    /// Host name of the tenant API server on the shared ingress (RFC 1123, lower case).
    #[schemars(schema_with = "dns1123_subdomain_schema")]
    pub api_host: String,

    /// Host name of the tenant konnectivity server; no konnectivity route when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "dns1123_subdomain_schema")]
    pub konnectivity_host: Option<String>,

    /// Ingress class; also selects the controller flavor when `route.controller` is not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_name: Option<String>,

    /// Port of the shared ingress that clients dial.
    #[serde(default = "default_ingress_port")]
    #[schemars(schema_with = "port_schema")]
    pub port: i32,

    /// Extra annotations on the route objects; they win over the flavor's defaults.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,

    /// Create the management-side route (false: workload side only).
    #[serde(default = "default_true")]
    pub deploy: bool,
}

/// The ingress controller that carries the route.
#[derive(JsonSchema, Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum Flavor {
    /// HAProxy Kubernetes Ingress Controller (haproxy.org).
    Haproxy,
    /// jcmoraisjr/haproxy-ingress.
    HaproxyIngress,
    /// ingress-nginx.
    Nginx,
    /// Traefik `IngressRouteTCP`.
    Traefik,
    /// Gateway API `TLSRoute` on a passthrough listener.
    Gateway,
    /// A plain Ingress; passthrough is configured by the user's annotations.
    Generic,
}

impl Flavor {
    /// Every flavor, in documentation order.
    pub const ALL: [Flavor; 6] = [
        Flavor::Haproxy,
        Flavor::HaproxyIngress,
        Flavor::Nginx,
        Flavor::Traefik,
        Flavor::Gateway,
        Flavor::Generic,
    ];

    /// The spelling used in the API (`haproxy-ingress`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Flavor::Haproxy => "haproxy",
            Flavor::HaproxyIngress => "haproxy-ingress",
            Flavor::Nginx => "nginx",
            Flavor::Traefik => "traefik",
            Flavor::Gateway => "gateway",
            Flavor::Generic => "generic",
        }
    }

    /// The flavor an ingress class name implies: k0smotron users set only
    /// `className`, so `haproxy`, `nginx`, ... pick their flavor.
    pub fn from_class_name(class: Option<&str>) -> Flavor {
        Flavor::ALL
            .into_iter()
            .find(|f| *f != Flavor::Gateway && class == Some(f.as_str()))
            .unwrap_or(Flavor::Generic)
    }
}

impl std::fmt::Display for Flavor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Route options per flavor.
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RouteSpec {
    /// The ingress controller; default: implied by `ingress.className`, else `generic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<Flavor>,

    /// Options for `controller: gateway`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<GatewayRoute>,

    /// Options for `controller: traefik`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traefik: Option<TraefikRoute>,
}

/// Gateway API options.
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct GatewayRoute {
    /// Gateways (with a TLS passthrough listener) the TLSRoutes attach to.
    #[serde(default)]
    pub parent_refs: Vec<ParentRef>,
}

/// A Gateway API `ParentReference` (the subset a TLSRoute needs).
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ParentRef {
    /// Gateway name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Gateway namespace; default: the route's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Listener name on the Gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    /// Listener port on the Gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
}

/// Traefik options.
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TraefikRoute {
    /// Entry points of the IngressRouteTCP; default `[websecure]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entry_points: Vec<String>,
}

/// The control plane Service in the management cluster.
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct BackendSpec {
    /// Service name, same namespace.
    #[schemars(length(min = 1, max = 63))]
    pub service_name: String,
    /// Service port of the API server.
    #[schemars(schema_with = "port_schema")]
    pub api_port: i32,
    /// Service port of the konnectivity server (required with `ingress.konnectivityHost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "port_schema")]
    pub konnectivity_port: Option<i32>,
}

/// How pods reach the node proxy.
#[derive(JsonSchema, Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Steering {
    /// `default/kubernetes` endpoints point at an address bound on every node.
    #[default]
    AdvertiseAddress,
    /// The `kubernetes` Service selects the proxy pods (no NET_ADMIN needed).
    Service,
}

/// What the node proxy does with a connection that does not already name the API host.
#[derive(JsonSchema, Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ProxyMode {
    /// Terminate TLS with a dedicated leaf, re-originate TLS with SNI = apiHost.
    #[default]
    Reencrypt,
    /// Plain L4 to a direct endpoint.
    Passthrough,
    /// L4 with a PROXY v2 header carrying apiHost in the authority TLV.
    ProxyProtocol,
    /// Terminate TLS as reencrypt does and carry the pods' HTTP requests over
    /// a few HTTP/2 connections per node (upgrades on their own connection),
    /// so the ingress and the API server see O(nodes) connections.
    Pooled,
}

impl ProxyMode {
    /// Whether the proxy terminates the pods' TLS with a minted leaf.
    pub fn terminates_tls(self) -> bool {
        matches!(self, ProxyMode::Reencrypt | ProxyMode::Pooled)
    }
}

/// The node-local proxy in the workload cluster.
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProxySpec {
    /// Install the proxy and steer `kubernetes.default.svc` to it.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Per-connection behaviour.
    #[serde(default)]
    pub mode: ProxyMode,
    /// How pods reach the proxy.
    #[serde(default)]
    pub steering: Steering,
    /// Node-local address the proxy binds (added to `lo` on every node), in
    /// the family of the workload cluster's `kubernetes` Service; unset:
    /// 240.0.0.1 where that Service is IPv4, 100::1 where it is IPv6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advertise_address: Option<String>,
    /// Ingress addresses; empty: resolve apiHost by DNS.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstreams: Vec<String>,
    /// Proxy image; empty: the controller's own image.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
}

impl Default for ProxySpec {
    fn default() -> Self {
        ProxySpec {
            enabled: true,
            mode: ProxyMode::default(),
            steering: Steering::default(),
            advertise_address: None,
            upstreams: Vec::new(),
            image: String::new(),
        }
    }
}

/// Which workload the CCM override targets.
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CcmTarget {
    /// `Deployment` or `DaemonSet`.
    pub kind: String,
    /// Object name in the namespace.
    pub name: String,
    /// Namespace; default `kube-system`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Containers to patch; default: every container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<String>,
}

/// Set `KUBERNETES_SERVICE_HOST/PORT` on the cloud-controller-manager.
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CcmSpec {
    /// Apply the override.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Targets; default: the well-known CCM workloads in kube-system.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<CcmTarget>,
    /// Also every Deployment and DaemonSet in kube-system carrying these labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub selector: BTreeMap<String, String>,
    /// Point konnectivity-agent at `ingress.konnectivityHost` too
    /// (`--proxy-server-host/port`); off by default.
    #[serde(default)]
    pub konnectivity_agent: bool,
}

impl Default for CcmSpec {
    fn default() -> Self {
        CcmSpec {
            enabled: true,
            selector: BTreeMap::new(),
            konnectivity_agent: false,
            targets: Vec::new(),
        }
    }
}

/// A workload cluster without kube-proxy.
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct KubeProxyReplacementSpec {
    /// Publish `ingress.apiHost` and `ingress.port` in the ConfigMaps the
    /// dataplanes' agents read before Services work: ConfigMap
    /// `kubernetes-services-endpoint` (keys `KUBERNETES_SERVICE_HOST`,
    /// `KUBERNETES_SERVICE_PORT`) in `kube-system` and, once that namespace
    /// exists, in `tigera-operator` (Calico), and ConfigMap
    /// `kube-system/control-plane-endpoint` (keys `apiServerHost`,
    /// `apiServerPort`) for Cilium's `k8sServiceHostRef`. A ConfigMap of those
    /// names that is not ours is left as it is and reported.
    #[serde(default)]
    pub publish_endpoint: bool,
}

/// Observed state.
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneIngressStatus {
    /// Generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready, RouteReady, EndpointReachable, CertificateCoversHosts, WorkloadReachable,
    /// ProxyReady, EndpointsSteered, CCMConfigured, EndpointPublished, Paused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The effective route flavor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flavor: Option<Flavor>,
    /// URL clients use: `https://<apiHost>:<port>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Node proxy roll-out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxyStatus>,
}

/// Node proxy roll-out counts from its DaemonSet.
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ProxyStatus {
    /// Nodes that should run the proxy.
    pub desired_nodes: i32,
    /// Nodes whose proxy is ready.
    pub ready_nodes: i32,
}

/// Default port of the shared ingress.
pub const DEFAULT_INGRESS_PORT: i32 = 443;

fn default_ingress_port() -> i32 {
    DEFAULT_INGRESS_PORT
}
fn default_true() -> bool {
    true
}

impl ControlPlaneIngressSpec {
    /// The flavor in force: `route.controller`, else implied by `ingress.className`.
    pub fn flavor(&self) -> Flavor {
        self.route
            .as_ref()
            .and_then(|r| r.controller)
            .unwrap_or_else(|| Flavor::from_class_name(self.ingress.class_name.as_deref()))
    }
}
