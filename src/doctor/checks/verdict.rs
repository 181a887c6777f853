//! The verdicts themselves: one checked hop and its fix, the table they
//! print as, and the exit code they add up to.

use std::time::Duration;

use crate::api::ControlPlaneIngress;

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
    pub(super) fn new(
        name: impl Into<String>,
        verdict: Verdict,
        detail: impl Into<String>,
    ) -> Check {
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
