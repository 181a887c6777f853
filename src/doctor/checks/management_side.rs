//! The management-side hops: DNS of the hosts, the route objects, the
//! ControlPlaneIngress's own conditions, TLS through the ingress.

use std::{net::IpAddr, time::SystemTime};

use kube::{ResourceExt, api::DynamicObject};

use super::verdict::*;
pub use crate::render::status_addresses;
use crate::{
    api::ControlPlaneIngress,
    controller::probe::{Handshake, ProbeFailure},
    pki::{self, CertificateFacts},
    render::RouteKind,
};

/// Where the shared ingress's address came from, and the address as given
/// (an IP, or a host name still to be resolved).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IngressAddress {
    /// `--ingress-address`, or the route object and field that reported it.
    pub source: String,
    /// IP addresses or host names.
    pub addresses: Vec<String>,
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

/// The same reading of `status.parents` as the controller's `RouteReady`.
fn tls_route(check: String, object: &str, live: &DynamicObject) -> Check {
    match crate::render::acceptance(live) {
        crate::render::Acceptance::Accepted => Check::new(
            check,
            Verdict::Pass,
            format!("{object} accepted by its Gateway"),
        ),
        crate::render::Acceptance::Pending(why) => Check::new(
            check,
            Verdict::Fail,
            format!(
                "{object} is not accepted yet: {why}; check spec.route.gateway.parentRefs names a Gateway whose controller runs"
            ),
        ),
        crate::render::Acceptance::Refused(why) => Check::new(
            check,
            Verdict::Fail,
            format!(
                "{why}; the Gateway listener must be protocol TLS, tls.mode Passthrough, and allow routes from this namespace"
            ),
        ),
    }
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

fn join(ips: &[IpAddr]) -> String {
    ips.iter()
        .map(IpAddr::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
