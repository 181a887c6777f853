//! The management-cluster controller: `hcp-ingress controller`.
//!
//! `run` wires watches, leader election and the admin endpoints; `reconcile`
//! holds the stages of one reconciliation; `sources` derives
//! ControlPlaneIngresses from other projects' objects; `apply`, `status` and
//! `probe` are the pieces the stages use.

mod apply;
mod context;
mod discovery;
mod endpoint;
mod error;
mod index;
mod leader;
mod metrics;
pub mod probe;
mod reconcile;
pub(crate) mod redact;
mod route;
mod run;
mod settings;
mod sources;
pub mod status;
mod workload;

use std::process::ExitCode;

use kube::Client;

pub use context::{Backoff, Cache, Context, EVENT_NOTE_LIMIT, event_note};
pub use error::Error;
pub use leader::{Leader, LeaseConfig, campaign};
pub use metrics::Metrics;
pub use reconcile::PAUSED_ANNOTATION;
pub use run::run;
pub use settings::{
    ControllerArgs, DEFAULT_LEASE, Settings, SettingsError, Tuning, WATCH_FILTER_LABEL,
    WatchFilter, lease_name,
};
pub(crate) use workload::find_ccm_workloads;

use crate::telemetry::init_logging;

/// Entry point of `hcp-ingress controller`.
pub fn main(args: ControllerArgs) -> ExitCode {
    init_logging(args.log_format, &args.log_level);
    let settings = match Settings::from_args(&args) {
        Ok(settings) => settings,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime starts");
    runtime.block_on(async move {
        let client = match Client::try_default().await {
            Ok(client) => client,
            Err(error) => {
                tracing::error!(%error, "failed to build a Kubernetes client (in-cluster config or KUBECONFIG)");
                return ExitCode::from(1);
            }
        };
        let shutdown = tokio_util::sync::CancellationToken::new();
        tokio::spawn(run::cancel_on_signal(shutdown.clone()));
        let code = match run(client, settings, shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                tracing::error!(%error, "controller stopped");
                ExitCode::from(1)
            }
        };
        crate::telemetry::shutdown();
        code
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_source_kind_runs_once_however_often_it_is_named() {
        let parse = |values: &[&str]| {
            super::settings::parse_sources(
                &values.iter().map(|v| v.to_string()).collect::<Vec<_>>(),
            )
        };
        let all = parse(&["all", "k0rdent", "kamaji"]).unwrap();
        assert_eq!(all, crate::sources::SourceKind::ALL.to_vec());
        assert_eq!(
            parse(&["k0rdent", "kamaji", "k0rdent"]).unwrap(),
            [
                crate::sources::SourceKind::ClusterDeployment,
                crate::sources::SourceKind::KamajiTenantControlPlane
            ]
        );
        assert!(parse(&["none"]).unwrap().is_empty());
        let unknown = parse(&["kamajii"]).unwrap_err().to_string();
        assert!(unknown.contains("\"kamajii\""), "{unknown}");
    }

    use std::time::Duration;

    use super::{Backoff, EVENT_NOTE_LIMIT, event_note};

    /// Retries wait longer after each failure of one object, never another
    /// object's failures, up to 256 s; a success starts over.
    #[test]
    fn backoff_grows_per_key_is_capped_and_resets() {
        let backoff = Backoff::default();
        let secs = |d: Duration| d.as_secs();
        let a = "source/k0smotron-cluster/team-a/tenant";
        let b = "source/k0smotron-cluster/team-b/tenant";
        assert_eq!(
            [backoff.next(a), backoff.next(a), backoff.next(a)].map(secs),
            [1, 2, 4]
        );
        assert_eq!(secs(backoff.next(b)), 1, "another namespace counts apart");
        for _ in 0..20 {
            backoff.next(a);
        }
        assert_eq!(secs(backoff.next(a)), 256, "capped at 256 s");
        backoff.reset(a);
        assert_eq!(secs(backoff.next(a)), 1);
    }

    #[test]
    fn event_notes_fit_the_api_limit_and_keep_their_start() {
        let short = "ServiceOverwritten: re-applied".to_string();
        assert_eq!(event_note(short.clone()), short);
        let exact = "a".repeat(EVENT_NOTE_LIMIT);
        assert_eq!(event_note(exact.clone()), exact);
        let long = format!("failed to apply EndpointSlice: {}", "x".repeat(4000));
        let cut = event_note(long);
        assert_eq!(cut.len(), EVENT_NOTE_LIMIT);
        assert!(cut.starts_with("failed to apply EndpointSlice: xxx"));
        assert!(cut.ends_with('…'));
        // A multi-byte character across the limit is never split.
        for offset in 0..4 {
            let text = format!("{}{}", "a".repeat(offset + 1010), "é€𝄞".repeat(20));
            let cut = event_note(text.clone());
            assert!(cut.len() <= EVENT_NOTE_LIMIT, "{}", cut.len());
            assert!(text.starts_with(cut.trim_end_matches('…')));
        }
    }
}
