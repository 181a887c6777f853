//! Controller metrics (Prometheus text on `--metrics-addr`).

use std::time::Duration;

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

/// Every metric the controller exports.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ResultLabels, Counter>,
    errors: Family<ReasonLabels, Counter>,
    duration: Histogram,
    in_flight: Gauge,
    writes: Family<WriteLabels, Counter>,
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
        Metrics {
            registry,
            reconciles,
            errors,
            duration,
            in_flight,
            writes,
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
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("metrics encode");
        text
    }
}

/// Decrements the in-flight gauge on drop.
pub struct InFlight<'a>(&'a Gauge);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}
