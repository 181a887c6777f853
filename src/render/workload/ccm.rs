//! Overrides on workloads we do not own: `KUBERNETES_SERVICE_HOST/PORT` on
//! the cloud-controller-manager (it sets the node addresses the proxy's
//! endpoints need, so it must reach the API by name: k0smotron #1396), and,
//! off by default, konnectivity-agent's `--proxy-server-host/port`.
//!
//! Each is a partial object for server-side apply with our field manager:
//! containers and env are lists keyed by name, so the apply owns exactly
//! these entries and every other field stays with its owner.

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;

use crate::api::ControlPlaneIngress;

/// Namespace of the well-known targets and default of explicit ones.
pub const CCM_NAMESPACE: &str = "kube-system";
/// The env var client-go reads for the API server's host.
pub const SERVICE_HOST_ENV: &str = "KUBERNETES_SERVICE_HOST";
/// The env var client-go reads for the API server's port.
pub const SERVICE_PORT_ENV: &str = "KUBERNETES_SERVICE_PORT";

/// A kind of workload an override patches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkloadKind {
    /// `apps/v1` Deployment.
    Deployment,
    /// `apps/v1` DaemonSet.
    DaemonSet,
}

impl WorkloadKind {
    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::DaemonSet => "DaemonSet",
        }
    }

    /// `Deployment` or `DaemonSet`; anything else is `None` (the API rejects it).
    pub fn parse(kind: &str) -> Option<WorkloadKind> {
        match kind {
            "Deployment" => Some(WorkloadKind::Deployment),
            "DaemonSet" => Some(WorkloadKind::DaemonSet),
            _ => None,
        }
    }

    /// The API resource, for a dynamic `Api`.
    pub fn api_resource(self) -> ApiResource {
        let plural = match self {
            WorkloadKind::Deployment => "deployments",
            WorkloadKind::DaemonSet => "daemonsets",
        };
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apps", "v1", self.as_str()),
            plural,
        )
    }
}

/// A cloud-controller-manager as its usual installation names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WellKnownCcm {
    /// The kind of its most common installation. Both kinds are looked up:
    /// charts and manifests of one provider differ (OpenStack's chart ships
    /// a DaemonSet, other manifests a Deployment).
    pub kind: WorkloadKind,
    /// Its name in `kube-system`.
    pub name: &'static str,
    /// Which cloud.
    pub provider: &'static str,
}

const fn ccm(kind: WorkloadKind, name: &'static str, provider: &'static str) -> WellKnownCcm {
    WellKnownCcm {
        kind,
        name,
        provider,
    }
}

/// The cloud-controller-managers looked for when `spec.ccm.targets` is empty,
/// from the providers' own manifests and charts. Those not found are skipped.
pub const WELL_KNOWN_CCMS: &[WellKnownCcm] = &[
    ccm(
        WorkloadKind::DaemonSet,
        "aws-cloud-controller-manager",
        "AWS",
    ),
    ccm(
        WorkloadKind::Deployment,
        "cloud-controller-manager",
        "Azure",
    ),
    ccm(
        WorkloadKind::DaemonSet,
        "cloud-controller-manager",
        "GCE and generic",
    ),
    ccm(
        WorkloadKind::DaemonSet,
        "openstack-cloud-controller-manager",
        "OpenStack",
    ),
    ccm(
        WorkloadKind::DaemonSet,
        "vsphere-cloud-controller-manager",
        "vSphere",
    ),
    ccm(
        WorkloadKind::Deployment,
        "hcloud-cloud-controller-manager",
        "Hetzner Cloud",
    ),
    ccm(
        WorkloadKind::Deployment,
        "digitalocean-cloud-controller-manager",
        "DigitalOcean",
    ),
    ccm(
        WorkloadKind::DaemonSet,
        "oci-cloud-controller-manager",
        "Oracle Cloud",
    ),
    ccm(WorkloadKind::DaemonSet, "ccm-linode", "Linode (Akamai)"),
    ccm(
        WorkloadKind::Deployment,
        "exoscale-cloud-controller-manager",
        "Exoscale",
    ),
    ccm(
        WorkloadKind::Deployment,
        "scaleway-cloud-controller-manager",
        "Scaleway",
    ),
    ccm(
        WorkloadKind::Deployment,
        "cloud-provider-equinix-metal",
        "Equinix Metal",
    ),
    ccm(
        WorkloadKind::Deployment,
        "proxmox-cloud-controller-manager",
        "Proxmox",
    ),
];

/// One workload an override applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverrideTarget {
    /// Its kind.
    pub kind: WorkloadKind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Containers to patch; empty: every container (the controller reads them).
    pub containers: Vec<String>,
    /// Whether it came from the well-known list (absent ones are skipped
    /// quietly) rather than from `spec.ccm.targets` (absent ones are reported).
    pub well_known: bool,
}

/// The CCM workloads to patch: `spec.ccm.targets`, or every well-known one;
/// none when `spec.ccm.enabled` is false.
pub fn ccm_targets(cpi: &ControlPlaneIngress) -> Vec<OverrideTarget> {
    let ccm = cpi.spec.ccm.clone().unwrap_or_default();
    if !ccm.enabled {
        return Vec::new();
    }
    if ccm.targets.is_empty() {
        let mut names: Vec<&str> = Vec::new();
        for w in WELL_KNOWN_CCMS {
            if !names.contains(&w.name) {
                names.push(w.name);
            }
        }
        return names
            .into_iter()
            .flat_map(|name| {
                [WorkloadKind::Deployment, WorkloadKind::DaemonSet].map(|kind| OverrideTarget {
                    kind,
                    namespace: CCM_NAMESPACE.to_string(),
                    name: name.to_string(),
                    containers: Vec::new(),
                    well_known: true,
                })
            })
            .collect();
    }
    ccm.targets
        .iter()
        // validation::validate has rejected other kinds already.
        .filter_map(|t| {
            Some(OverrideTarget {
                kind: WorkloadKind::parse(&t.kind)?,
                namespace: t
                    .namespace
                    .clone()
                    .unwrap_or_else(|| CCM_NAMESPACE.to_string()),
                name: t.name.clone(),
                containers: t.containers.clone(),
                well_known: false,
            })
        })
        .collect()
}

/// `KUBERNETES_SERVICE_HOST=<apiHost>` and `KUBERNETES_SERVICE_PORT=<port>`:
/// the shared ingress by name, which needs neither the `kubernetes` Service
/// nor node addresses.
pub fn service_host_env(cpi: &ControlPlaneIngress) -> [(&'static str, String); 2] {
    [
        (SERVICE_HOST_ENV, cpi.spec.ingress.api_host.clone()),
        (SERVICE_PORT_ENV, cpi.spec.ingress.port.to_string()),
    ]
}

/// The value of `KUBERNETES_SERVICE_HOST` on `container` of `live` when
/// someone else set it (hcp-ingress has never written this object): that
/// container is theirs to point somewhere (k0rdent's openstack-hosted-cp
/// template sets it on its CCM itself), and overriding it would leave it
/// without its value when we give the object back.
pub fn foreign_service_host(live: &DynamicObject, container: &str) -> Option<String> {
    let ours = live
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .any(|m| m.manager.as_deref() == Some(crate::api::MANAGER));
    if ours {
        return None;
    }
    live.data
        .pointer("/spec/template/spec/containers")?
        .as_array()?
        .iter()
        .find(|c| c["name"] == container)?
        .get("env")?
        .as_array()?
        .iter()
        .find(|e| e["name"] == SERVICE_HOST_ENV)
        .map(|e| {
            e["value"]
                .as_str()
                .unwrap_or("<from a reference>")
                .to_string()
        })
}

/// The partial Deployment/DaemonSet that sets the two env vars on
/// `containers` (the names the controller found on the live object).
pub fn ccm_patch(
    cpi: &ControlPlaneIngress,
    kind: WorkloadKind,
    namespace: &str,
    name: &str,
    containers: &[String],
) -> DynamicObject {
    let env: Vec<_> = service_host_env(cpi)
        .iter()
        .map(|(n, v)| json!({"name": n, "value": v}))
        .collect();
    let containers: Vec<_> = containers
        .iter()
        .map(|c| json!({"name": c, "env": env}))
        .collect();
    partial(kind, namespace, name, json!({"containers": containers}))
}

/// The konnectivity agent as the usual installations name it.
pub const KONNECTIVITY_AGENT: WellKnownCcm = ccm(
    WorkloadKind::DaemonSet,
    "konnectivity-agent",
    "konnectivity",
);

/// Host and port konnectivity-agent should dial, when the ControlPlaneIngress
/// routes konnectivity: `ingress.konnectivityHost` on `ingress.port`.
pub fn konnectivity_server(cpi: &ControlPlaneIngress) -> Option<(String, i32)> {
    let ingress = &cpi.spec.ingress;
    ingress
        .konnectivity_host
        .clone()
        .map(|host| (host, ingress.port))
}

/// `current` with `--proxy-server-host` and `--proxy-server-port` set to
/// `host` and `port`, whichever way they were written (`--f=v` or `--f v`);
/// appended when absent. Every other argument keeps its place.
pub fn konnectivity_agent_args(current: &[String], host: &str, port: i32) -> Vec<String> {
    let wanted = [
        ("--proxy-server-host", host.to_string()),
        ("--proxy-server-port", port.to_string()),
    ];
    let mut out = Vec::with_capacity(current.len() + 2);
    let mut seen = [false; 2];
    let mut args = current.iter();
    while let Some(arg) = args.next() {
        let flag = arg.split_once('=').map_or(arg.as_str(), |(f, _)| f);
        match wanted.iter().position(|(f, _)| *f == flag) {
            Some(i) => {
                if !arg.contains('=') {
                    args.next(); // the value of `--flag value`
                }
                if !seen[i] {
                    out.push(format!("{}={}", wanted[i].0, wanted[i].1));
                    seen[i] = true;
                }
            }
            None => out.push(arg.clone()),
        }
    }
    for (i, (flag, value)) in wanted.iter().enumerate() {
        if !seen[i] {
            out.push(format!("{flag}={value}"));
        }
    }
    out
}

/// Annotation on the konnectivity-agent workload holding its container's
/// args as they were before our first patch (a JSON list), to give them back.
pub const ORIGINAL_ARGS_ANNOTATION: &str = "hcp-ingress.dev/original-args";

/// The partial workload that sets `container`'s args. Unlike env, `args` is
/// an atomic list: the apply owns all of it, so `args` must be the full list
/// from [`konnectivity_agent_args`] applied to the live one, and dropping our
/// ownership would delete the whole list: `original` (the args before our
/// first patch) is kept beside them for [`release_patch`].
pub fn konnectivity_agent_patch(
    kind: WorkloadKind,
    namespace: &str,
    name: &str,
    container: &str,
    args: &[String],
    original: &[String],
) -> DynamicObject {
    let mut patch = partial(
        kind,
        namespace,
        name,
        json!({"containers": [{"name": container, "args": args}]}),
    );
    let original = serde_json::to_string(original).expect("strings serialize");
    patch
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ORIGINAL_ARGS_ANNOTATION.to_string(), original);
    patch
}

/// The args of konnectivity-agent's `container` before our first patch: the
/// recorded ones when we patched before, else the live ones.
pub fn original_args(live: &DynamicObject, current: &[String]) -> Vec<String> {
    recorded_args(live).unwrap_or_else(|| current.to_vec())
}

/// The args recorded in [`ORIGINAL_ARGS_ANNOTATION`], if any.
fn recorded_args(live: &DynamicObject) -> Option<Vec<String>> {
    let json = live
        .metadata
        .annotations
        .as_ref()?
        .get(ORIGINAL_ARGS_ANNOTATION)?;
    serde_json::from_str(json).ok()
}

/// What to apply, with our field manager, to give a workload we patched
/// (CCM env, konnectivity-agent args) back: only the identity, so server-side
/// apply drops every field we set (our env entries go, theirs stay), except
/// that recorded original args are applied again, since dropping an atomic
/// list we own would delete it.
pub fn release_patch(kind: WorkloadKind, live: &DynamicObject) -> DynamicObject {
    let namespace = live.metadata.namespace.clone().unwrap_or_default();
    let name = live.metadata.name.clone().unwrap_or_default();
    let container = live
        .data
        .pointer("/spec/template/spec/containers/0/name")
        .and_then(|n| n.as_str());
    match (recorded_args(live), container) {
        (Some(args), Some(container)) => partial(
            kind,
            &namespace,
            &name,
            json!({"containers": [{"name": container, "args": args}]}),
        ),
        _ => identity(kind, &namespace, &name, None),
    }
}

fn partial(
    kind: WorkloadKind,
    namespace: &str,
    name: &str,
    pod_spec: serde_json::Value,
) -> DynamicObject {
    identity(kind, namespace, name, Some(pod_spec))
}

/// A workload with only its identity and, if given, a pod spec: the fields
/// we apply, nothing else.
fn identity(
    kind: WorkloadKind,
    namespace: &str,
    name: &str,
    pod_spec: Option<serde_json::Value>,
) -> DynamicObject {
    let mut value = json!({
        "apiVersion": "apps/v1", "kind": kind.as_str(),
        "metadata": {"name": name, "namespace": namespace},
    });
    if let Some(pod_spec) = pod_spec {
        value["spec"] = json!({"template": {"spec": pod_spec}});
    }
    serde_json::from_value(value).expect("a workload with metadata is a DynamicObject")
}
