//! Logging set-up shared by every subcommand.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Log output format.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Install the global tracing subscriber. `RUST_LOG` overrides `default_level`.
/// Logs go to stderr so that stdout stays clean for command output.
pub fn init_logging(format: LogFormat, default_level: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        LogFormat::Text => registry
            .with(fmt::layer().with_writer(std::io::stderr))
            .try_init(),
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
    // A second call (tests) keeps the first subscriber.
    let _ = result;
}

pub mod admin;
