//! The decisions of `doctor`, pure: what was observed in, a verdict with the
//! fix out. Every function here takes what the I/O edge (`probe.rs`) read and
//! names the object and field to change when something is wrong.

use std::{
    net::IpAddr,
    time::{Duration, SystemTime},
};

use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{Endpoints, Service},
    discovery::v1::EndpointSlice,
};
use kube::{ResourceExt, api::DynamicObject};

use crate::{
    api::{ControlPlaneIngress, Steering},
    controller::probe::{Handshake, ProbeFailure},
    pki::{self, CertificateFacts},
    render::{
        RouteKind,
        workload::{self, NAME, NAMESPACE, OverrideTarget, SteeringObjects},
    },
};

/// A certificate that ends sooner than this is reported (it still works).
pub const EXPIRY_WARNING: Duration = Duration::from_secs(7 * 24 * 3600);

/// The verdict of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// As it should be.
    Pass,
    /// Works, but worth a look (not a failure: the exit code stays 0).
    Warn,
    /// Broken: the detail says what to fix.
    Fail,
    /// Does not apply (disabled in the spec, or an earlier hop failed).
    Skip,
}

impl Verdict {
    /// The word in the table.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "SKIP",
        }
    }
}

/// One row of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// What was checked (`dns api.example.com`, `route`, ...).
    pub name: String,
    /// The verdict.
    pub verdict: Verdict,
    /// What was seen and, on a failure, what to fix.
    pub detail: String,
}

impl Check {
    fn new(name: impl Into<String>, verdict: Verdict, detail: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            verdict,
            detail: detail.into(),
        }
    }
}

/// The host names of a ControlPlaneIngress: `apiHost`, then `konnectivityHost`.
pub fn hosts(cpi: &ControlPlaneIngress) -> Vec<String> {
    let ingress = &cpi.spec.ingress;
    std::iter::once(ingress.api_host.clone())
        .chain(ingress.konnectivity_host.clone())
        .collect()
}

/// Where the shared ingress's address came from, and the address as given
/// (an IP, or a host name still to be resolved).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IngressAddress {
    /// `--ingress-address`, or the route object and field that reported it.
    pub source: String,
    /// IP addresses or host names.
    pub addresses: Vec<String>,
}

/// The addresses a route's status reports for the shared ingress: Ingress
/// `status.loadBalancer.ingress[].ip/hostname`; a Gateway's
/// `status.addresses[].value` (the TLSRoute itself reports none).
pub fn status_addresses(object: &DynamicObject) -> Vec<String> {
    let status = object.data.get("status");
    let from_ingress = status
        .and_then(|s| s.pointer("/loadBalancer/ingress"))
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            entry
                .get("ip")
                .or_else(|| entry.get("hostname"))
                .and_then(|v| v.as_str())
        });
    let from_gateway = status
        .and_then(|s| s.get("addresses"))
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.get("value").and_then(|v| v.as_str()));
    from_ingress
        .chain(from_gateway)
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect()
}

/// The shared ingress's address is a host name (a cloud load balancer's)
/// that does not resolve: clients following it reach nothing.
pub fn ingress_unresolved(ingress: &IngressAddress, failures: &[(String, String)]) -> Check {
    Check::new(
        "ingress address",
        Verdict::Fail,
        format!(
            "{} (from {}) does not resolve: check the load balancer of the ingress controller, or pass the address with --ingress-address",
            failures
                .iter()
                .map(|(address, why)| format!("{address}: {why}"))
                .collect::<Vec<_>>()
                .join("; "),
            ingress.source
        ),
    )
}

/// DNS: `host` must resolve, and only to the shared ingress (`expected`,
/// already resolved to IPs; `None` when no address is known to compare with).
pub fn dns(
    host: &str,
    resolved: &Result<Vec<IpAddr>, String>,
    expected: Option<(&IngressAddress, &[IpAddr])>,
) -> Check {
    let name = format!("dns {host}");
    let ips = match resolved {
        Err(why) => {
            let target = expected
                .map(|(_, ips)| join(ips))
                .unwrap_or_else(|| "the shared ingress's address".into());
            return Check::new(
                name,
                Verdict::Fail,
                format!("{host} does not resolve ({why}): create a DNS record {host} -> {target}"),
            );
        }
        Ok(ips) if ips.is_empty() => {
            return Check::new(
                name,
                Verdict::Fail,
                format!(
                    "{host} resolves to no address: add an A/AAAA record pointing at the shared ingress"
                ),
            );
        }
        Ok(ips) => ips,
    };
    let Some((source, want)) = expected else {
        return Check::new(
            name,
            Verdict::Warn,
            format!(
                "resolves to {}; the shared ingress's address is unknown (no address in the route's status): pass --ingress-address to compare",
                join(ips)
            ),
        );
    };
    let elsewhere: Vec<IpAddr> = ips
        .iter()
        .filter(|ip| !want.contains(ip))
        .copied()
        .collect();
    if elsewhere.is_empty() {
        Check::new(
            name,
            Verdict::Pass,
            format!(
                "resolves to {}, the shared ingress ({})",
                join(ips),
                source.source
            ),
        )
    } else {
        Check::new(
            name,
            Verdict::Fail,
            format!(
                "resolves to {}, but the shared ingress is {} ({}): point the DNS record of {host} at {}",
                join(ips),
                join(want),
                source.source,
                join(want)
            ),
        )
    }
}

/// The route objects the controller renders for `cpi`, each with what the
/// management cluster holds under that name.
pub fn routes(
    cpi: &ControlPlaneIngress,
    wanted: &[(RouteKind, String)],
    live: &[Option<DynamicObject>],
) -> Vec<Check> {
    let namespace = cpi.namespace().unwrap_or_default();
    if !cpi.spec.ingress.deploy {
        return vec![Check::new(
            "route",
            Verdict::Skip,
            "spec.ingress.deploy is false: you manage the route to the control plane yourself",
        )];
    }
    wanted
        .iter()
        .zip(live)
        .map(|((kind, name), live)| {
            let kind_name = kind.gvk().kind;
            let object = format!("{kind_name} {namespace}/{name}");
            let check = format!("route {kind_name} {name}");
            let Some(live) = live else {
                if let Some(upstream) = crate::render::upstream_route(cpi).filter(|u| &u.name == name) {
                    let provider = cpi.spec.upstream.as_ref().map_or("", |u| u.provider.as_str());
                    return Check::new(
                        check,
                        Verdict::Fail,
                        format!(
                            "{object} does not exist: {provider} creates it ({upstream} in spec.upstream.route), hcp-ingress makes no second one; check {provider}'s controller and the ingress block of its object"
                        ),
                    );
                }
                return Check::new(
                    check,
                    Verdict::Fail,
                    format!(
                        "{object} does not exist: the controller creates it; check that hcp-ingress-controller-manager runs and the RouteReady condition of ControlPlaneIngress {namespace}/{}{}",
                        cpi.name_any(),
                        if *kind == RouteKind::Ingress {
                            ""
                        } else {
                            " (it names a missing CRD)"
                        }
                    ),
                );
            };
            match kind {
                RouteKind::Ingress => {
                    let addresses = status_addresses(live);
                    if addresses.is_empty() {
                        Check::new(
                            check,
                            Verdict::Fail,
                            format!(
                                "{object} exists but is not admitted (no status.loadBalancer.ingress): no ingress controller serves class {:?}; fix spec.ingress.className of the ControlPlaneIngress or start that ingress controller",
                                cpi.spec.ingress.class_name.as_deref().unwrap_or("<none>")
                            ),
                        )
                    } else {
                        Check::new(
                            check,
                            Verdict::Pass,
                            format!("{object} admitted, ingress at {}", addresses.join(", ")),
                        )
                    }
                }
                RouteKind::TlsRoute => tls_route(check, &object, live),
                RouteKind::IngressRouteTcp => Check::new(
                    check,
                    Verdict::Pass,
                    format!("{object} exists (Traefik reports no status: the TLS check below is the proof)"),
                ),
            }
        })
        .collect()
}

fn tls_route(check: String, object: &str, live: &DynamicObject) -> Check {
    let parents: Vec<&serde_json::Value> = live
        .data
        .pointer("/status/parents")
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
        .collect();
    let accepted = |p: &serde_json::Value| {
        p.get("conditions")
            .and_then(|c| c.as_array())
            .and_then(|c| c.iter().find(|c| c["type"] == "Accepted"))
            .cloned()
    };
    if parents
        .iter()
        .any(|p| accepted(p).is_some_and(|c| c["status"] == "True"))
    {
        return Check::new(
            check,
            Verdict::Pass,
            format!("{object} accepted by its Gateway"),
        );
    }
    let why: Vec<String> = parents
        .iter()
        .map(|p| {
            let gateway = p
                .pointer("/parentRef/name")
                .and_then(|v| v.as_str())
                .unwrap_or("?");
            match accepted(p) {
                Some(c) => format!(
                    "Gateway {gateway}: Accepted={} ({}): {}",
                    c["status"].as_str().unwrap_or("?"),
                    c["reason"].as_str().unwrap_or(""),
                    c["message"].as_str().unwrap_or("")
                ),
                None => format!("Gateway {gateway}: no Accepted condition"),
            }
        })
        .collect();
    Check::new(
        check,
        Verdict::Fail,
        if why.is_empty() {
            format!(
                "{object} is not accepted by any Gateway (no status.parents): check spec.route.gateway.parentRefs names a Gateway whose controller runs"
            )
        } else {
            format!(
                "{object} is not accepted: {}; the Gateway listener must be protocol TLS, tls.mode Passthrough, and allow routes from this namespace",
                why.join("; ")
            )
        },
    )
}

/// The ControlPlaneIngress's own conditions, as the controller last wrote
/// them: a warning naming each one that is not True (the checks of the
/// doctor decide the exit code; the status may be stale).
pub fn conditions(cpi: &ControlPlaneIngress) -> Check {
    let Some(status) = &cpi.status else {
        return Check::new(
            "conditions",
            Verdict::Warn,
            "the ControlPlaneIngress has no status: is hcp-ingress-controller-manager running?",
        );
    };
    let not_true: Vec<String> = status
        .conditions
        .iter()
        .filter(|c| {
            use crate::controller::status::types::{PAUSED, READY};
            // Ready is the sum of the others; Paused is the one that is good when False.
            c.type_ != READY && (c.status != "True") != (c.type_ == PAUSED)
        })
        .map(|c| format!("{}={} ({}): {}", c.type_, c.status, c.reason, c.message))
        .collect();
    let stale = match (status.observed_generation, cpi.metadata.generation) {
        (Some(seen), Some(current)) if seen < current => {
            format!(" (status is of generation {seen}, the spec is at {current})")
        }
        _ => String::new(),
    };
    if not_true.is_empty() {
        Check::new(
            "conditions",
            Verdict::Pass,
            format!("every condition is True{stale}"),
        )
    } else {
        Check::new(
            "conditions",
            Verdict::Warn,
            format!("{}{stale}", not_true.join("; ")),
        )
    }
}

/// The cluster CA the served certificate must chain to: where it came from
/// and its certificate (PEM), or why none could be read (not checked then).
pub type ClusterCa = Result<(String, String), String>;

/// TLS through the ingress for `host`: the handshake, the certificate it
/// presented (SANs must name `host`), its expiry at `now`, and whether it
/// chains to the cluster CA (with passthrough the tenant API server's own
/// certificate comes through; anything else is the ingress's own).
pub fn tls(
    host: &str,
    handshake: &Result<Handshake, ProbeFailure>,
    ca: &ClusterCa,
    now: SystemTime,
) -> Check {
    let name = format!("tls {host}");
    let handshake = match handshake {
        Ok(h) => h,
        Err(failure) => {
            return Check::new(
                name,
                Verdict::Fail,
                format!("{} ({})", failure.message, failure.reason),
            );
        }
    };
    let Some(leaf) = handshake.chain.first() else {
        return Check::new(
            name,
            Verdict::Fail,
            format!(
                "{} presented no certificate for SNI {host}",
                handshake.address
            ),
        );
    };
    let facts = match pki::certificate_facts(leaf) {
        Ok(facts) => facts,
        Err(why) => {
            return Check::new(
                name,
                Verdict::Fail,
                format!(
                    "{} presented an unreadable certificate for SNI {host}: {why}",
                    handshake.address
                ),
            );
        }
    };
    tls_facts(&name, host, handshake, &facts, ca, now)
}

fn tls_facts(
    name: &str,
    host: &str,
    handshake: &Handshake,
    facts: &CertificateFacts,
    ca: &ClusterCa,
    now: SystemTime,
) -> Check {
    let expires = pki::rfc3339(facts.not_after);
    let chain = handshake.chain.len();
    if !facts.sans.iter().any(|san| san_matches(san, host)) {
        return Check::new(
            name,
            Verdict::Fail,
            format!(
                "{} presented a certificate ({}, SANs {}) that does not name {host}: add {host} to the tenant API server's certificate SANs (k0smotron: spec.k0sConfig.spec.api.sans; Kamaji/Steward: TenantControlPlane spec.networkProfile.certSANs), or, when this is the ingress's own certificate, turn SSL passthrough on for the route",
                handshake.address,
                facts.subject,
                if facts.sans.is_empty() {
                    "none".to_string()
                } else {
                    facts.sans.join(", ")
                }
            ),
        );
    }
    let Ok(left) = facts.not_after.duration_since(now) else {
        return Check::new(
            name,
            Verdict::Fail,
            format!(
                "the certificate served for {host} expired at {expires}: renew the tenant API server's serving certificate"
            ),
        );
    };
    let issuer = match ca {
        Ok((source, pem)) => {
            match crate::controller::probe::covers(&handshake.chain, host, pem.as_bytes()) {
                Ok(()) => format!(", issued by the cluster CA ({source})"),
                Err(why) => {
                    return Check::new(
                        name,
                        Verdict::Fail,
                        format!(
                            "{why} ({source}; presented: {}): the ingress answers with its own certificate instead of passing TLS through (turn SSL passthrough on for the route, see troubleshooting.md), or the tenant API server serves a certificate of another CA",
                            facts.subject
                        ),
                    );
                }
            }
        }
        Err(why) => format!("; issuer not checked: {why}"),
    };
    if left < EXPIRY_WARNING {
        return Check::new(
            name,
            Verdict::Warn,
            format!(
                "names {host}{issuer}, but expires at {expires} (in {} h): renew the tenant API server's serving certificate",
                left.as_secs() / 3600
            ),
        );
    }
    Check::new(
        name,
        Verdict::Pass,
        format!(
            "{} presented {chain} certificate(s), SANs name {host}{issuer}, expires {expires} (in {} days)",
            handshake.address,
            left.as_secs() / 86_400
        ),
    )
}

/// Whether a SAN (`DNS:…`, `IP:…`) names `host`; `*.` covers one label.
pub fn san_matches(san: &str, host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if let Some(name) = san.strip_prefix("DNS:") {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(suffix) = name.strip_prefix("*.") {
            return host
                .split_once('.')
                .is_some_and(|(label, rest)| !label.is_empty() && rest == suffix);
        }
        return name == host;
    }
    san.strip_prefix("IP:")
        .and_then(|ip| ip.parse::<IpAddr>().ok())
        .is_some_and(|ip| host.parse::<IpAddr>().ok() == Some(ip))
}

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
        && let Some(proxy) = &upstream.node_proxy
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
                workload::proxy_spec(cpi).advertise_address
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

/// The node proxy DaemonSet: every desired node runs a ready proxy.
pub fn proxy(cpi: &ControlPlaneIngress, enabled: bool, ds: Option<&DaemonSet>) -> Check {
    let name = "node proxy";
    let object = format!("DaemonSet {NAMESPACE}/{NAME}");
    if let Some(upstream) = cpi.spec.upstream.as_ref()
        && let Some(proxy) = &upstream.node_proxy
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
                "{ready}/{desired} nodes run a ready proxy: see `kubectl -n {NAMESPACE} get pods -l app.kubernetes.io/name={NAME} -o wide` and their logs (certificate, config, upstream unreachable)"
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

/// A failure before the workload checks: they are all skipped with this reason.
pub fn workload_unreachable(why: &str) -> Check {
    Check::new(
        "workload api",
        Verdict::Fail,
        format!("{why}: steering, node proxy and ccm env cannot be checked"),
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

/// The report as a table, `CHECK | RESULT | DETAIL / FIX`, columns aligned.
pub fn table(checks: &[Check]) -> String {
    let width = checks
        .iter()
        .map(|c| c.name.len())
        .chain(["CHECK".len()])
        .max()
        .unwrap_or(0);
    let mut out = format!("{:width$} | RESULT | DETAIL / FIX\n", "CHECK");
    for check in checks {
        out.push_str(&format!(
            "{:width$} | {:6} | {}\n",
            check.name,
            check.verdict.as_str(),
            check.detail
        ));
    }
    out
}

/// 0 when nothing failed, 1 when a check failed.
pub fn exit_code(checks: &[Check]) -> u8 {
    u8::from(checks.iter().any(|c| c.verdict == Verdict::Fail))
}

fn join(ips: &[IpAddr]) -> String {
    ips.iter()
        .map(IpAddr::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests;
