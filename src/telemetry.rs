//! Logging and tracing. `init` is called once, first thing in `serve`, with the filter and
//! format from [`crate::config`] (this module reads no environment itself).
//!
//! Spans: every RPC runs in a span named after it with `target.key`; Recommend records
//! `decision.desired`, `decision.current` and `decision.path` once decided
//! (`Span::current().record`, as kube-runtime does for late fields).
//!
//! OpenTelemetry hook: to export spans, add a `tracing_opentelemetry::layer()` built from an
//! OTLP `SdkTracerProvider` to the registry in [`init`] (see docs/tooling.md §7); the spans
//! and their dotted fields need no change. Not wired yet.

use thiserror::Error;
use tracing_subscriber::{EnvFilter, fmt, layer::SubscriberExt, util::SubscriberInitExt};

use crate::config::LogFormat;

/// Why logging could not start.
#[derive(Debug, Error)]
pub enum TelemetryError {
    /// The filter does not parse.
    #[error("invalid log filter {filter:?}: {message}")]
    Filter { filter: String, message: String },
    /// A global subscriber is already installed.
    #[error("a tracing subscriber is already installed")]
    AlreadyInstalled,
}

/// Installs the global subscriber: `filter` in `EnvFilter` syntax, lines to stderr (stdout
/// carries only the `autoscaled listening on ADDR` line that clients wait for).
pub fn init(filter: &str, format: LogFormat) -> Result<(), TelemetryError> {
    let env_filter = EnvFilter::try_new(filter).map_err(|e| TelemetryError::Filter {
        filter: filter.to_owned(),
        message: e.to_string(),
    })?;
    let registry = tracing_subscriber::registry().with(env_filter);
    let result = match format {
        LogFormat::Text => registry
            .with(fmt::layer().with_writer(std::io::stderr))
            .try_init(),
        LogFormat::Json => registry
            .with(fmt::layer().json().with_writer(std::io::stderr))
            .try_init(),
    };
    result.map_err(|_| TelemetryError::AlreadyInstalled)
}
