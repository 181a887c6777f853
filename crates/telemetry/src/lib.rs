//! Logging set-up shared by the controller's subcommands and the node proxy,
//! (cargo feature `otlp`, the controller's `telemetry`) OpenTelemetry trace
//! export over OTLP, and the admin server both serve probes on ([`health`]).
//!
//! A crate of its own because both sides use it: the node proxy's crate
//! depends on it and on nothing of the controller's.
#![forbid(unsafe_code)]

use tracing_subscriber::{EnvFilter, Layer, Registry, filter::Targets, fmt, prelude::*};

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
    install(format, filter.boxed());
}

/// The node proxy's subscriber: `RUST_LOG` or `default_level` filter by
/// target and level only (`warn,rustls=error`). EnvFilter's span and field
/// filters compile regexes at start, code and memory that a process running
/// on every node would keep for filters nobody sets there.
pub fn init_node_logging(format: LogFormat, default_level: &str) {
    let spec = std::env::var("RUST_LOG")
        .ok()
        .filter(|s| !s.trim().is_empty());
    let filter = match spec.as_deref().map(str::parse::<Targets>) {
        Some(Ok(filter)) => filter,
        Some(Err(e)) => {
            eprintln!("warning: RUST_LOG ignored ({e}): logging at {default_level}");
            default_level.parse().unwrap_or_default()
        }
        None => default_level.parse().unwrap_or_default(),
    };
    install(format, filter.boxed());
}

fn install(format: LogFormat, filter: Box<dyn Layer<Registry> + Send + Sync>) {
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(otlp::layer());
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

pub mod health;

/// The trace id of the current span when traces are exported (the
/// `otlp` feature and `OTEL_EXPORTER_OTLP_ENDPOINT`), for log lines and
/// Events that point at the trace.
pub fn trace_id() -> Option<String> {
    otlp::trace_id()
}

/// Flush and stop trace export (a no-op without the `otlp` feature).
pub fn shutdown() {
    otlp::shutdown();
}

#[cfg(feature = "otlp")]
mod otlp {
    use std::sync::OnceLock;

    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::SdkTracerProvider;

    static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

    /// The export layer when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (the exporter
    /// reads it and the other standard `OTEL_*` variables itself).
    pub fn layer<S>() -> Option<impl tracing_subscriber::Layer<S>>
    where
        S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    {
        std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT")?;
        let exporter = match opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()
        {
            Ok(exporter) => exporter,
            Err(error) => {
                eprintln!("warning: failed to set up OTLP trace export: {error}");
                return None;
            }
        };
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name("hcp-ingress")
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("hcp-ingress");
        let _ = PROVIDER.set(provider);
        Some(tracing_opentelemetry::layer().with_tracer(tracer))
    }

    pub fn shutdown() {
        if let Some(provider) = PROVIDER.get() {
            let _ = provider.shutdown();
        }
    }

    /// The OpenTelemetry trace id of the current span, when traces are exported.
    pub fn trace_id() -> Option<String> {
        use opentelemetry::trace::TraceContextExt as _;
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        PROVIDER.get()?;
        let context = tracing::Span::current().context();
        let span = context.span();
        let id = span.span_context().trace_id();
        (id != opentelemetry::trace::TraceId::INVALID).then(|| id.to_string())
    }
}

#[cfg(not(feature = "otlp"))]
mod otlp {
    /// No export without the `otlp` feature.
    pub fn layer() -> Option<tracing_subscriber::layer::Identity> {
        None
    }

    pub fn shutdown() {}

    /// No trace ids without the `otlp` feature.
    pub fn trace_id() -> Option<String> {
        None
    }
}
