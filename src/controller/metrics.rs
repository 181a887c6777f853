//! Controller metrics (Prometheus text on `--metrics-addr`).

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::Mutex,
    time::Duration,
};

use kube::{ResourceExt, runtime::reflector::Store};

use crate::api::ControlPlaneIngress;
use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    kind: String,
    verb: &'static str,
}

/// The `reason`s of `reconcile_errors` (`Error::metric_label`), created at 0.
const ERROR_REASONS: [&str; 11] = [
    "apply",
    "delete",
    "status",
    "owner",
    "not_leader",
    "render",
    "finalizer",
    "cleanup",
    "stale",
    "cache_not_ready",
    "start",
];

/// Labels as (name, value) pairs: `type` is a Rust keyword, so the condition
/// labels cannot be struct fields of a derived label set.
type Pairs = Vec<(&'static str, String)>;

/// Every metric the controller exports.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ResultLabels, Counter>,
    errors: Family<ReasonLabels, Counter>,
    duration: Histogram,
    in_flight: Gauge,
    writes: Family<WriteLabels, Counter>,
    /// ControlPlaneIngresses per condition (type, status, reason), counted
    /// from the watch cache at each scrape: what the API server holds, and
    /// deleted objects drop out without bookkeeping.
    conditions: Family<Pairs, Gauge>,
    /// `notAfter` of each node proxy certificate, by ControlPlaneIngress.
    certificate_expiry: Family<Pairs, Gauge>,
    /// The ControlPlaneIngress cache of the running controllers (`None` on a
    /// standby replica, which reports no condition counts).
    cpis: Mutex<Option<Store<ControlPlaneIngress>>>,
    /// `namespace/name` → certificate `notAfter` (Unix seconds).
    certificates: Mutex<HashMap<String, i64>>,
    /// One scrape at a time: a scrape clears and refills the families above.
    scrape: Mutex<()>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("hcp_ingress_controller");
        let reconciles = Family::<ResultLabels, Counter>::default();
        let errors = Family::<ReasonLabels, Counter>::default();
        let duration = Histogram::new([
            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ]);
        let in_flight = Gauge::default();
        let writes = Family::<WriteLabels, Counter>::default();
        registry.register(
            "reconciles",
            "Reconciliations by result",
            reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Failed reconciliations by reason",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time spent in one reconciliation",
            duration.clone(),
        );
        registry.register(
            "reconciles_in_flight",
            "Reconciliations running now (queue depth)",
            in_flight.clone(),
        );
        registry.register("writes", "API writes by kind and verb", writes.clone());
        // Present at 0 from the start: a rate() alert sees the first error,
        // and a dashboard shows "none" rather than "no data".
        for reason in ERROR_REASONS {
            let _ = errors.get_or_create(&ReasonLabels {
                reason: reason.to_string(),
            });
        }
        for result in ["success", "error"] {
            let _ = reconciles.get_or_create(&ResultLabels { result });
        }
        let conditions = Family::<Pairs, Gauge>::default();
        registry.register(
            "controlplaneingress_conditions",
            "ControlPlaneIngresses by condition type, status and reason",
            conditions.clone(),
        );
        let certificate_expiry = Family::<Pairs, Gauge>::default();
        registry.register(
            "proxy_certificate_expiry_timestamp_seconds",
            "End of validity (Unix seconds) of the node proxy certificate of each ControlPlaneIngress",
            certificate_expiry.clone(),
        );
        Metrics {
            registry,
            reconciles,
            errors,
            duration,
            in_flight,
            writes,
            conditions,
            certificate_expiry,
            cpis: Mutex::new(None),
            certificates: Mutex::new(HashMap::new()),
            scrape: Mutex::new(()),
        }
    }
}

impl Metrics {
    /// Count a reconciliation; `Err(reason)` also counts an error.
    pub fn reconciled(&self, elapsed: Duration, outcome: Result<(), &str>) {
        self.duration.observe(elapsed.as_secs_f64());
        let result = if outcome.is_ok() { "success" } else { "error" };
        self.reconciles
            .get_or_create(&ResultLabels { result })
            .inc();
        if let Err(reason) = outcome {
            self.errors
                .get_or_create(&ReasonLabels {
                    reason: reason.to_string(),
                })
                .inc();
        }
    }

    /// Track a reconciliation in flight until the guard drops.
    pub fn in_flight(&self) -> InFlight<'_> {
        self.in_flight.inc();
        InFlight(&self.in_flight)
    }

    /// Count one API write.
    pub fn write(&self, kind: &str, verb: &'static str) {
        self.writes
            .get_or_create(&WriteLabels {
                kind: kind.to_string(),
                verb,
            })
            .inc();
    }

    /// Count conditions from `cpis` (the running controllers' cache) at each scrape.
    pub fn count_conditions_of(&self, cpis: Store<ControlPlaneIngress>) {
        *self.cpis.lock().expect("metrics lock") = Some(cpis);
    }

    /// This replica stopped reconciling (lease lost, shutdown): its cache
    /// and certificate readings go stale, the leader reports them now.
    pub fn forget_controlplaneingresses(&self) {
        *self.cpis.lock().expect("metrics lock") = None;
        self.certificates.lock().expect("metrics lock").clear();
    }

    /// The node proxy certificate of `cpi` is `cert_pem` (live or just minted).
    pub fn proxy_certificate(&self, cpi: &ControlPlaneIngress, cert_pem: &str) {
        if let Some(not_after) = crate::pki::not_after_unix(cert_pem) {
            self.certificates
                .lock()
                .expect("metrics lock")
                .insert(object_key(cpi), not_after);
        }
    }

    /// Refill the families computed from state: condition counts from the
    /// cache, and certificate expiry of the ControlPlaneIngresses that still
    /// exist and still run the proxy (a stuck renewal keeps its last reading:
    /// that is what the alert is for).
    fn refresh(&self) {
        let Some(store) = self.cpis.lock().expect("metrics lock").clone() else {
            self.conditions.clear();
            self.certificate_expiry.clear();
            return;
        };
        let cpis = store.state();
        let mut counts: BTreeMap<(String, String, String), i64> = BTreeMap::new();
        for cpi in &cpis {
            for c in cpi.status.iter().flat_map(|s| &s.conditions) {
                *counts
                    .entry((c.type_.clone(), c.status.clone(), c.reason.clone()))
                    .or_default() += 1;
            }
        }
        self.conditions.clear();
        for ((type_, status, reason), n) in counts {
            self.conditions
                .get_or_create(&vec![
                    ("type", type_),
                    ("status", status),
                    ("reason", reason),
                ])
                .set(n);
        }
        let proxied: HashSet<String> = cpis
            .iter()
            .filter(|c| crate::render::workload::proxy_spec(c).enabled)
            .map(|c| object_key(c))
            .collect();
        let mut certificates = self.certificates.lock().expect("metrics lock");
        certificates.retain(|key, _| proxied.contains(key));
        self.certificate_expiry.clear();
        for (key, not_after) in certificates.iter() {
            self.certificate_expiry
                .get_or_create(&vec![("controlplaneingress", key.clone())])
                .set(*not_after);
        }
    }

    /// Total writes so far (benchmarks: writes per resync).
    pub fn total_writes(&self) -> u64 {
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("metrics encode");
        text.lines()
            .filter(|l| l.starts_with("hcp_ingress_controller_writes_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// Prometheus text exposition.
    pub fn encode(&self) -> String {
        let _one_scrape = self.scrape.lock().expect("metrics lock");
        self.refresh();
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("metrics encode");
        text
    }
}

/// `namespace/name`: one label value per ControlPlaneIngress (bounded by
/// their number; an alert on a certificate must say which tenant).
fn object_key(cpi: &ControlPlaneIngress) -> String {
    format!("{}/{}", cpi.namespace().unwrap_or_default(), cpi.name_any())
}

/// Decrements the in-flight gauge on drop.
pub struct InFlight<'a>(&'a Gauge);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use kube::runtime::{reflector::store::Writer, watcher::Event};

    use super::*;

    fn cpi(name: &str, proxy: bool, conditions: &[(&str, &str, &str)]) -> ControlPlaneIngress {
        let conditions: Vec<_> = conditions
            .iter()
            .map(|(t, s, r)| {
                serde_json::json!({"type": t, "status": s, "reason": r, "message": "m",
                                   "lastTransitionTime": "2026-01-01T00:00:00Z"})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "hcp-ingress.dev/v1alpha1", "kind": "ControlPlaneIngress",
            "metadata": {"name": name, "namespace": "tenants"},
            "spec": {"clusterName": name, "ingress": {"apiHost": "api.example.com"},
                     "backend": {"serviceName": "kmc", "apiPort": 30443},
                     "proxy": {"enabled": proxy}},
            "status": {"conditions": conditions}
        }))
        .unwrap()
    }

    fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .collect()
    }

    #[test]
    fn conditions_are_counted_per_type_status_and_reason_from_the_cache() {
        let metrics = Metrics::default();
        let name = "hcp_ingress_controller_controlplaneingress_conditions";
        // A standby replica has no cache: no counts, not zeros.
        assert!(samples(&metrics.encode(), name).is_empty());
        let mut writer = Writer::<ControlPlaneIngress>::default();
        for object in [
            cpi("a", true, &[("Ready", "True", "AllConditionsTrue")]),
            cpi(
                "b",
                true,
                &[
                    ("Ready", "False", "KubeconfigNotFound"),
                    ("WorkloadReachable", "False", "KubeconfigNotFound"),
                ],
            ),
            cpi(
                "c",
                true,
                &[
                    ("Ready", "False", "KubeconfigNotFound"),
                    ("WorkloadReachable", "False", "KubeconfigNotFound"),
                ],
            ),
        ] {
            writer.apply_watcher_event(&Event::Apply(object));
        }
        metrics.count_conditions_of(writer.as_reader());
        let text = metrics.encode();
        let mut got = samples(&text, name);
        got.sort();
        assert_eq!(
            got,
            [
                r#"hcp_ingress_controller_controlplaneingress_conditions{type="Ready",status="False",reason="KubeconfigNotFound"} 2"#,
                r#"hcp_ingress_controller_controlplaneingress_conditions{type="Ready",status="True",reason="AllConditionsTrue"} 1"#,
                r#"hcp_ingress_controller_controlplaneingress_conditions{type="WorkloadReachable",status="False",reason="KubeconfigNotFound"} 2"#,
            ]
        );
        // A deleted object drops out at the next scrape; a reason gone is no series at 0.
        writer.apply_watcher_event(&Event::Delete(cpi("b", true, &[])));
        writer.apply_watcher_event(&Event::Delete(cpi("c", true, &[])));
        let text = metrics.encode();
        assert_eq!(
            samples(&text, name),
            [
                r#"hcp_ingress_controller_controlplaneingress_conditions{type="Ready",status="True",reason="AllConditionsTrue"} 1"#
            ]
        );
        metrics.forget_controlplaneingresses();
        assert!(samples(&metrics.encode(), name).is_empty());
    }

    #[test]
    fn proxy_certificate_expiry_per_controlplaneingress_while_it_runs_the_proxy() {
        // The EC test CA of the workload fixtures.
        let ca = crate::pki::CertificateAuthority::from_pem(
            include_str!("../../test/workload/fixtures/ec-ca.crt"),
            include_str!("../../test/workload/fixtures/ec-ca.key"),
        )
        .unwrap();
        let (service_ip, advertise) = ("10.96.0.1".parse().unwrap(), "240.0.0.1".parse().unwrap());
        let spec =
            crate::pki::LeafSpec::proxy("cluster.local", service_ip, advertise, SystemTime::now());
        let leaf = crate::pki::mint_leaf(&ca, &spec).unwrap();
        let not_after = leaf
            .not_after
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let metrics = Metrics::default();
        let mut writer = Writer::<ControlPlaneIngress>::default();
        let (on, off) = (cpi("on", true, &[]), cpi("off", false, &[]));
        writer.apply_watcher_event(&Event::Apply(on.clone()));
        writer.apply_watcher_event(&Event::Apply(off.clone()));
        metrics.count_conditions_of(writer.as_reader());
        metrics.proxy_certificate(&on, &leaf.cert_pem);
        metrics.proxy_certificate(&off, &leaf.cert_pem);
        let name = "hcp_ingress_controller_proxy_certificate_expiry_timestamp_seconds";
        assert_eq!(
            samples(&metrics.encode(), name),
            [format!(
                r#"{name}{{controlplaneingress="tenants/on"}} {not_after}"#
            )],
            "only ControlPlaneIngresses that run the proxy"
        );
        writer.apply_watcher_event(&Event::Delete(on));
        assert!(
            samples(&metrics.encode(), name).is_empty(),
            "deleted: forgotten"
        );
    }
}
