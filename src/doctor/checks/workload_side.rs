//! The workload-side hops: the API through the kubeconfig, the steering of
//! `default/kubernetes`, the node proxy, the CCM environment, the
//! konnectivity agents.

use std::net::IpAddr;

use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{Endpoints, Pod, Service},
    discovery::v1::EndpointSlice,
};
use kube::api::DynamicObject;

use super::verdict::*;
use crate::{
    api::{ControlPlaneIngress, Steering},
    render::workload::{self, NAME, OverrideTarget, SteeringObjects},
};

/// The `default/kubernetes` steering: as the controller would write it
/// (`wanted`, `None` when the proxy is disabled) against what the workload
/// cluster holds.
pub fn steering(
    cpi: &ControlPlaneIngress,
    wanted: Option<&SteeringObjects>,
    endpoints: Option<&Endpoints>,
    slice: Option<&EndpointSlice>,
    service: Option<&Service>,
) -> Check {
    if let Some(upstream) = cpi.spec.upstream.as_ref()
        && let Some(proxy) = upstream.kept_node_proxy()
    {
        return Check::new(
            "steering",
            Verdict::Skip,
            format!(
                "default/kubernetes is steered by {}'s node proxy ({proxy}), not by hcp-ingress",
                upstream.provider
            ),
        );
    }
    let Some(wanted) = wanted else {
        return Check::new(
            "steering",
            Verdict::Skip,
            "spec.proxy.enabled is false: default/kubernetes is not steered by hcp-ingress",
        );
    };
    let drift = workload::steering_drift(wanted, endpoints, slice, service);
    let mode = workload::proxy_spec(cpi).steering;
    match (mode, drift.is_empty()) {
        (Steering::AdvertiseAddress, true) => Check::new(
            "steering",
            Verdict::Pass,
            format!(
                "Endpoints and EndpointSlice default/kubernetes point at the node proxy ({})",
                workload::advertise_address(
                    &workload::proxy_spec(cpi),
                    workload::service_ip(service)
                )
            ),
        ),
        (Steering::Service, true) => Check::new(
            "steering",
            Verdict::Pass,
            "Service default/kubernetes selects the node proxy (internalTrafficPolicy Local)",
        ),
        (Steering::AdvertiseAddress, false) => Check::new(
            "steering",
            Verdict::Fail,
            format!(
                "not steered: {}. Pods reach the API server directly, without the proxy. Fix: run the tenant API server with --endpoint-reconciler-type=none (it rewrites default/kubernetes otherwise), then let the controller re-steer (its next reconcile; see the EndpointsSteered condition), or set spec.proxy.steering: service",
                drift.join("; ")
            ),
        ),
        (Steering::Service, false) => Check::new(
            "steering",
            Verdict::Fail,
            format!(
                "not steered: {}. Fix: something else manages Service default/kubernetes spec.selector/internalTrafficPolicy; stop it, and the controller re-applies them on its next reconcile",
                drift.join("; ")
            ),
        ),
    }
}

/// The steering of a ControlPlaneIngress the controller refuses for this
/// workload cluster (an advertise address of the other family than the
/// `kubernetes` Service's): it steers nothing, and `why` says what to fix.
pub fn steering_refused(why: &str) -> Check {
    Check::new(
        "steering",
        Verdict::Fail,
        format!("the controller does not steer default/kubernetes: {why}"),
    )
}

/// Whether the `kubernetes` Service's EndpointSlices (`slices`, every slice
/// labelled with its name) really hold the proxy: a Service's fields can be
/// right while no endpoint reaches the proxy (a selector in the wrong
/// namespace, a slice that still names someone else). Applies to a passed
/// `steering` check only; anything else is returned as it is.
pub fn steering_reaches_proxy(
    cpi: &ControlPlaneIngress,
    steering: Check,
    service: Option<&Service>,
    slices: &[EndpointSlice],
) -> Check {
    if steering.verdict != Verdict::Pass {
        return steering;
    }
    let spec = workload::proxy_spec(cpi);
    let advertise = workload::advertise_address(&spec, workload::service_ip(service));
    let endpoints: Vec<_> = slices
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .collect();
    let namespace = workload::proxy_namespace(spec.steering);
    let is_proxy = |e: &k8s_openapi::api::discovery::v1::Endpoint| match spec.steering {
        Steering::AdvertiseAddress => e
            .addresses
            .iter()
            .any(|a| a.parse::<IpAddr>().ok() == Some(advertise)),
        Steering::Service => e.target_ref.as_ref().is_some_and(|r| {
            r.kind.as_deref() == Some("Pod")
                && r.namespace.as_deref() == Some(namespace)
                && r.name
                    .as_deref()
                    .is_some_and(|n| n.starts_with(&format!("{NAME}-")))
        }),
    };
    let proxy = endpoints.iter().filter(|e| is_proxy(e)).count();
    let others: Vec<String> = endpoints
        .iter()
        .filter(|e| !is_proxy(e))
        .flat_map(|e| e.addresses.clone())
        .collect();
    let fix = match spec.steering {
        Steering::AdvertiseAddress => format!(
            "Fix: the controller writes EndpointSlice default/kubernetes with {advertise} once its proxy is ready (see the EndpointsSteered condition); delete any other EndpointSlice labelled kubernetes.io/service-name=kubernetes"
        ),
        Steering::Service => format!(
            "Fix: the proxy DaemonSet must run in {namespace} (a Service selects pods of its own namespace only; an hcp-ingress before this fix installed it in kube-system), with ready pods, and kube-controller-manager must run its endpointslice controller; let the controller reconcile (see the EndpointsSteered and ProxyReady conditions)"
        ),
    };
    if proxy == 0 {
        return Check::new(
            "steering",
            Verdict::Fail,
            format!(
                "the kubernetes Service's fields are set, but its EndpointSlices hold no ready node proxy endpoint ({}): pods reach no proxy through kubernetes.default.svc. {fix}",
                if others.is_empty() {
                    "they hold no ready endpoint at all".to_string()
                } else {
                    format!("they hold {}", others.join(", "))
                }
            ),
        );
    }
    if !others.is_empty() && spec.steering == Steering::AdvertiseAddress {
        return Check::new(
            "steering",
            Verdict::Fail,
            format!(
                "the kubernetes Service's EndpointSlices hold {} besides the proxy's {advertise}: part of the traffic bypasses the proxy. {fix}",
                others.join(", "),
            ),
        );
    }
    Check::new(
        "steering",
        Verdict::Pass,
        format!(
            "{}; its EndpointSlices hold {proxy} ready proxy endpoint(s)",
            steering.detail
        ),
    )
}

/// The node proxy DaemonSet: every desired node runs a ready proxy.
pub fn proxy(cpi: &ControlPlaneIngress, enabled: bool, ds: Option<&DaemonSet>) -> Check {
    let name = "node proxy";
    let namespace = workload::proxy_namespace(workload::proxy_spec(cpi).steering);
    let object = format!("DaemonSet {namespace}/{NAME}");
    if let Some(upstream) = cpi.spec.upstream.as_ref()
        && let Some(proxy) = upstream.kept_node_proxy()
    {
        return Check::new(
            name,
            Verdict::Skip,
            format!(
                "{}'s {proxy} is the node proxy (see the ProxyReady condition); hcp-ingress installs none",
                upstream.provider
            ),
        );
    }
    if !enabled {
        return Check::new(name, Verdict::Skip, "spec.proxy.enabled is false");
    }
    let Some(ds) = ds else {
        return Check::new(
            name,
            Verdict::Fail,
            format!(
                "{object} does not exist in the workload cluster: the controller installs it; see the WorkloadReachable and ProxyReady conditions"
            ),
        );
    };
    let (desired, ready) = ds
        .status
        .as_ref()
        .map(|s| (s.desired_number_scheduled, s.number_ready))
        .unwrap_or((0, 0));
    if desired == 0 {
        Check::new(
            name,
            Verdict::Warn,
            format!(
                "{object} is scheduled on no node (status.desiredNumberScheduled 0): no node has joined yet, or a nodeSelector excludes them all"
            ),
        )
    } else if ready < desired {
        Check::new(
            name,
            Verdict::Fail,
            format!(
                "{ready}/{desired} nodes run a ready proxy: see `kubectl -n {namespace} get pods -l app.kubernetes.io/name={NAME} -o wide` and their logs (certificate, config, upstream unreachable)"
            ),
        )
    } else {
        Check::new(
            name,
            Verdict::Pass,
            format!("{ready}/{desired} nodes run a ready proxy"),
        )
    }
}

/// The cloud-controller-manager override: each CCM found (`found`, with the
/// target that found it) has `KUBERNETES_SERVICE_HOST/PORT` as the controller
/// sets them; `missing` are targets named in `spec.ccm.targets` that do not exist.
pub fn ccm(
    cpi: &ControlPlaneIngress,
    found: &[(OverrideTarget, DynamicObject)],
    missing: &[String],
) -> Check {
    let name = "ccm env";
    if workload::ccm_targets(cpi).is_empty() {
        return Check::new(name, Verdict::Skip, "spec.ccm.enabled is false");
    }
    let want = workload::service_host_env(cpi);
    let mut problems: Vec<String> = missing
        .iter()
        .map(|m| format!("{m} (in spec.ccm.targets) does not exist"))
        .collect();
    let mut good = Vec::new();
    for (target, live) in found {
        let object = format!(
            "{} {}/{}",
            target.kind.as_str(),
            target.namespace,
            target.name
        );
        let containers = live
            .data
            .pointer("/spec/template/spec/containers")
            .and_then(|c| c.as_array())
            .cloned()
            .unwrap_or_default();
        for container in containers {
            let cname = container["name"].as_str().unwrap_or_default();
            if !target.containers.is_empty() && !target.containers.iter().any(|c| c == cname) {
                continue;
            }
            let env = container["env"].as_array().cloned().unwrap_or_default();
            let wrong: Vec<String> = want
                .iter()
                .filter_map(|(var, value)| {
                    let live = env
                        .iter()
                        .find(|e| e["name"] == *var)
                        .map(|e| e["value"].as_str().unwrap_or("<from a reference>"));
                    match live {
                        Some(v) if v == value.as_str() => None,
                        Some(v) => Some(format!("{var}={v} (want {value})")),
                        None => Some(format!("{var} missing (want {value})")),
                    }
                })
                .collect();
            if wrong.is_empty() {
                good.push(format!("{object} container {cname}"));
            } else {
                problems.push(format!(
                    "{object} spec.template.spec.containers[name={cname}].env: {}",
                    wrong.join(", ")
                ));
            }
        }
    }
    let env_text = want
        .iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join(" ");
    if !problems.is_empty() {
        return Check::new(
            name,
            Verdict::Fail,
            format!(
                "{}. Fix: the controller sets {env_text} on its next reconcile (see the CCMConfigured condition); if something else (a Helm upgrade) removed it, set it in that manifest too",
                problems.join("; ")
            ),
        );
    }
    if good.is_empty() {
        return Check::new(
            name,
            Verdict::Skip,
            "no well-known cloud-controller-manager in kube-system; if yours has another name, list it in spec.ccm.targets",
        );
    }
    Check::new(
        name,
        Verdict::Pass,
        format!("{env_text} on {}", good.join(", ")),
    )
}

/// The label selector of the konnectivity agents in `kube-system`: what
/// k0s, k0smotron and Kamaji's konnectivity addon label their DaemonSet's
/// pods with, as the upstream manifests do.
pub const KONNECTIVITY_AGENT_SELECTOR: &str = "k8s-app=konnectivity-agent";
/// The agent's health port, which also serves its metrics
/// (`--health-server-port`, default 8093).
pub const KONNECTIVITY_AGENT_HEALTH_PORT: u16 = 8093;
/// How many agent pods are read at most: each read crosses the tunnel.
pub const KONNECTIVITY_AGENTS_READ: usize = 5;

/// A konnectivity agent pod of the workload cluster, and what the workload
/// API server answered when asked for its metrics through the pod proxy.
/// That request takes the path of `kubectl logs`, `exec` and
/// `port-forward` (API server, konnectivity server, the agent's tunnel).
#[derive(Clone, Debug)]
pub struct KonnectivityAgent {
    /// The pod's name, in `kube-system`.
    pub pod: String,
    /// Its metrics in Prometheus text, or why they could not be read.
    pub metrics: Result<String, String>,
}

/// The port an agent pod serves its metrics on: its
/// `--health-server-port` flag, else the agent's default.
pub fn konnectivity_agent_port(pod: &Pod) -> u16 {
    let containers = pod.spec.iter().flat_map(|s| &s.containers);
    let words = containers.flat_map(|c| c.command.iter().chain(&c.args).flatten());
    let mut next_is_port = false;
    for word in words {
        if next_is_port {
            return word.parse().unwrap_or(KONNECTIVITY_AGENT_HEALTH_PORT);
        }
        if word == "--health-server-port" {
            next_is_port = true;
        } else if let Some(port) = word.strip_prefix("--health-server-port=") {
            return port.parse().unwrap_or(KONNECTIVITY_AGENT_HEALTH_PORT);
        }
    }
    KONNECTIVITY_AGENT_HEALTH_PORT
}

/// The konnectivity path: every agent read is connected to every
/// konnectivity server it knows of. With two or more server replicas behind
/// `konnectivityHost`, an agent that holds connections to only some of
/// them breaks each call the API server sends through another one
/// (`kubectl logs` fails with "expected one server ID in the context").
/// `agents` is what the probe read (`Err`: the pods could not be listed).
pub fn konnectivity(
    cpi: &ControlPlaneIngress,
    agents: Result<&[KonnectivityAgent], &str>,
) -> Check {
    let name = "konnectivity";
    let Some(host) = cpi.spec.ingress.konnectivity_host.as_deref() else {
        return Check::new(
            name,
            Verdict::Skip,
            "spec.ingress.konnectivityHost is not set",
        );
    };
    let port = cpi.spec.ingress.port;
    let agents = match agents {
        Ok(agents) => agents,
        Err(why) => return Check::new(name, Verdict::Fail, why),
    };
    if agents.is_empty() {
        return Check::new(
            name,
            Verdict::Warn,
            format!(
                "no running pod labelled {KONNECTIVITY_AGENT_SELECTOR} in kube-system: kubectl logs, exec and port-forward, webhooks and aggregated APIs of a hosted control plane need an agent connected through {host}:{port}"
            ),
        );
    }
    const KNOWN: &str = "konnectivity_network_proxy_agent_known_server_count";
    const OPEN: &str = "konnectivity_network_proxy_agent_open_server_connections";
    let mut problems = Vec::new();
    let mut unknown = Vec::new();
    let mut servers = Vec::new();
    for agent in agents {
        let pod = &agent.pod;
        let text = match &agent.metrics {
            Ok(text) => text,
            Err(why) => {
                problems.push(format!(
                    "the API server could not reach agent {pod} through the pod proxy (the path kubectl logs and exec take): {why}"
                ));
                continue;
            }
        };
        match (sample(text, KNOWN), sample(text, OPEN)) {
            (Some(known), Some(open)) if open < known => problems.push(format!(
                "agent {pod} is connected to {open} of the {known} konnectivity servers it knows of"
            )),
            (Some(known), Some(_)) => servers.push(known),
            _ => unknown.push(pod.as_str()),
        }
    }
    if !problems.is_empty() {
        return Check::new(
            name,
            Verdict::Fail,
            format!(
                "{}. Fix: an agent dials {host}:{port} again until it holds one connection per server; one it never reaches means the route for {host} does not lead to every konnectivity server replica (the backend Service's endpoints, the ingress controller's backend for {host}), or the agent's --proxy-server-host is not {host} (without that name as SNI the shared ingress cannot route it)",
                problems.join("; ")
            ),
        );
    }
    if servers.is_empty() {
        return Check::new(
            name,
            Verdict::Warn,
            format!(
                "agent(s) {} report neither {KNOWN} nor {OPEN}: cannot tell which konnectivity servers they reach",
                unknown.join(", ")
            ),
        );
    }
    let counts: std::collections::BTreeSet<String> = servers.iter().map(f64::to_string).collect();
    let mut detail = format!(
        "{} agent(s) read through the API server's pod proxy, each connected to every konnectivity server it knows of ({})",
        servers.len(),
        counts.into_iter().collect::<Vec<_>>().join(", ")
    );
    if !unknown.is_empty() {
        detail.push_str(&format!("; {} report no server counts", unknown.join(", ")));
    }
    Check::new(name, Verdict::Pass, detail)
}

/// The value of the unlabelled sample `name` in Prometheus text exposition
/// (`name value` or `name{} value`): the two agent gauges read here carry no
/// labels. `None` when it is absent or not a number.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let rest = rest.strip_prefix("{}").unwrap_or(rest);
        if !rest.starts_with([' ', '\t']) {
            return None;
        }
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// A failure before the workload checks: they are all skipped with this reason.
pub fn workload_unreachable(why: &str) -> Check {
    Check::new(
        "workload api",
        Verdict::Fail,
        format!("{why}: steering, node proxy, ccm env and konnectivity cannot be checked"),
    )
}

/// The workload cluster answered.
pub fn workload_reachable(through: &str) -> Check {
    Check::new(
        "workload api",
        Verdict::Pass,
        format!("answers through {through}"),
    )
}
