//! Conditions: pure functions that build `metav1.Condition`s with a stable
//! `lastTransitionTime` (it moves only when the status flips).

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};

/// Condition types, in the order `kubectl describe` shows them.
pub mod types {
    /// Summary: everything this ControlPlaneIngress asks for works.
    pub const READY: &str = "Ready";
    /// The route object exists in the management cluster.
    pub const ROUTE_READY: &str = "RouteReady";
    /// A TLS handshake through the ingress to apiHost:port with that SNI succeeds.
    pub const ENDPOINT_REACHABLE: &str = "EndpointReachable";
    /// The served certificate names the hosts and chains to the cluster CA.
    pub const CERTIFICATE_COVERS_HOSTS: &str = "CertificateCoversHosts";
    /// Reconciliation is paused (CAPI pause).
    pub const PAUSED: &str = "Paused";
    /// The workload cluster's API answers through `<cluster>-kubeconfig`.
    pub const WORKLOAD_REACHABLE: &str = "WorkloadReachable";
    /// The node proxy runs on every node.
    pub const PROXY_READY: &str = "ProxyReady";
    /// `kubernetes.default.svc` goes to the node proxy.
    pub const ENDPOINTS_STEERED: &str = "EndpointsSteered";
    /// The cloud-controller-manager dials the ingress by name.
    pub const CCM_CONFIGURED: &str = "CCMConfigured";
    /// The API server's address is published where dataplanes that replace
    /// kube-proxy read it (only with `spec.kubeProxyReplacement.publishEndpoint`).
    pub const ENDPOINT_PUBLISHED: &str = "EndpointPublished";
    /// The control plane's own spec (the source object) has what the path needs.
    pub const PREFLIGHT: &str = "Preflight";
    /// Conditions the workload side owns.
    pub const ALL_WORKLOAD: [&str; 5] = [
        WORKLOAD_REACHABLE,
        PROXY_READY,
        ENDPOINTS_STEERED,
        CCM_CONFIGURED,
        ENDPOINT_PUBLISHED,
    ];
}

/// One condition to set: type, status, reason (CamelCase) and a message that says what to fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    /// Condition type.
    pub type_: &'static str,
    /// True or False (Unknown when not checked).
    pub status: Status,
    /// Machine-readable reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

/// The three condition statuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// The condition holds.
    True,
    /// It does not.
    False,
    /// Not checked (yet).
    Unknown,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

impl Desired {
    /// A condition that holds.
    pub fn ok(type_: &'static str, reason: &str, message: impl Into<String>) -> Self {
        Desired {
            type_,
            status: Status::True,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A condition that does not hold.
    pub fn failed(type_: &'static str, reason: &str, message: impl Into<String>) -> Self {
        Desired {
            type_,
            status: Status::False,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A condition that was not checked.
    pub fn unknown(type_: &'static str, reason: &str, message: impl Into<String>) -> Self {
        Desired {
            type_,
            status: Status::Unknown,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

impl Desired {
    /// The desired form of an existing condition (to summarize conditions another stage wrote).
    pub fn from_condition(c: &Condition) -> Desired {
        let status = match c.status.as_str() {
            "True" => Status::True,
            "False" => Status::False,
            _ => Status::Unknown,
        };
        // Condition types are static in this controller; unknown ones summarize as "Other".
        let type_ = types::ALL_WORKLOAD
            .iter()
            .find(|t| **t == c.type_)
            .copied()
            .unwrap_or("Other");
        Desired {
            type_,
            status,
            reason: c.reason.clone(),
            message: c.message.clone(),
        }
    }
}

/// The `Ready` summary: True only when every other condition is True.
pub fn summarize(conditions: &[Desired]) -> Desired {
    match conditions
        .iter()
        .find(|c| c.type_ != types::READY && c.status != Status::True)
    {
        None => Desired::ok(
            types::READY,
            "AllConditionsTrue",
            "the control plane is reachable through the shared ingress",
        ),
        Some(first) => Desired {
            type_: types::READY,
            status: if first.status == Status::False {
                Status::False
            } else {
                Status::Unknown
            },
            reason: first.reason.clone(),
            message: format!("{}: {}", first.type_, first.message),
        },
    }
}

/// Merge `desired` into `current`: unchanged conditions keep their
/// `lastTransitionTime`, changed ones get `now`; conditions not in `desired`
/// are kept only when `keep` says so (another stage of the controller owns them).
pub fn merge(
    current: &[Condition],
    desired: &[Desired],
    generation: Option<i64>,
    now: Timestamp,
    keep: impl Fn(&str) -> bool,
) -> Vec<Condition> {
    let mut merged: Vec<Condition> = desired
        .iter()
        .map(|d| {
            let previous = current.iter().find(|c| c.type_ == d.type_);
            let last_transition_time = match previous {
                Some(p) if p.status == d.status.as_str() => p.last_transition_time.clone(),
                _ => Time(now),
            };
            Condition {
                type_: d.type_.to_string(),
                status: d.status.as_str().to_string(),
                reason: d.reason.clone(),
                message: d.message.clone(),
                observed_generation: generation,
                last_transition_time,
            }
        })
        .collect();
    merged.extend(
        current
            .iter()
            .filter(|c| keep(&c.type_) && !desired.iter().any(|d| d.type_ == c.type_))
            .cloned(),
    );
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap()
    }

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let first = merge(
            &[],
            &[Desired::ok("RouteReady", "Applied", "ok")],
            Some(1),
            at(100),
            |_| false,
        );
        assert_eq!(first[0].last_transition_time, Time(at(100)));

        // Same status, new message and generation: the time stays.
        let again = merge(
            &first,
            &[Desired::ok("RouteReady", "Applied", "still ok")],
            Some(2),
            at(200),
            |_| false,
        );
        assert_eq!(again[0].last_transition_time, Time(at(100)));
        assert_eq!(again[0].observed_generation, Some(2));
        assert_eq!(again[0].message, "still ok");

        let flipped = merge(
            &again,
            &[Desired::failed("RouteReady", "Err", "x")],
            Some(2),
            at(300),
            |_| false,
        );
        assert_eq!(flipped[0].last_transition_time, Time(at(300)));
    }

    #[test]
    fn conditions_owned_elsewhere_are_kept() {
        let current = merge(
            &[],
            &[
                Desired::ok("ProxyReady", "Ready", "3/3"),
                Desired::ok("Stale", "x", "y"),
            ],
            Some(1),
            at(1),
            |_| false,
        );
        let merged = merge(
            &current,
            &[Desired::ok("RouteReady", "Applied", "ok")],
            Some(1),
            at(2),
            |t| t == "ProxyReady",
        );
        let types: Vec<_> = merged.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["RouteReady", "ProxyReady"]);
    }

    #[test]
    fn ready_summarizes_the_first_failure() {
        let ready = summarize(&[
            Desired::ok("RouteReady", "Applied", "ok"),
            Desired::failed("EndpointReachable", "Timeout", "no answer"),
        ]);
        assert_eq!(ready.status, Status::False);
        assert_eq!(ready.reason, "Timeout");
        assert_eq!(ready.message, "EndpointReachable: no answer");
        assert_eq!(
            summarize(&[Desired::ok("RouteReady", "Applied", "ok")]).status,
            Status::True
        );
        assert_eq!(
            summarize(&[Desired::unknown("EndpointReachable", "NotChecked", "")]).status,
            Status::Unknown
        );
    }
}
