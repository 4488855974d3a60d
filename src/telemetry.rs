//! Logging and tracing. `init` is called once, first thing in `serve` (inside the Tokio
//! runtime, because the OTLP exporter's channel lives on it), with the filter, format and OTLP
//! endpoint from [`crate::config`] (this module reads no environment itself), and returns a
//! [`TelemetryGuard`] that is dropped last.
//!
//! Spans: every RPC runs in a span named after it with `target.key`; Recommend records
//! `decision.desired`, `decision.current` and `decision.path` once decided
//! (`Span::current().record`, as kube-runtime does for late fields).
//!
//! OpenTelemetry: with `--otlp-endpoint`, a `tracing_opentelemetry` layer exports the same
//! spans through an OTLP/gRPC batch exporter (service name `autoscaled`). A caller's W3C trace
//! context (`traceparent` in the gRPC metadata) becomes the parent of the per-request `grpc`
//! span ([`grpc_span`]), so a caller's trace continues through the server.

use opentelemetry::{propagation::TextMapPropagator, trace::TracerProvider as _};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::{Resource, propagation::TraceContextPropagator, trace::SdkTracerProvider};
use thiserror::Error;
use tonic::codegen::http::{HeaderMap, Request};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::{
    EnvFilter, Layer,
    filter::{LevelFilter, Targets},
    fmt,
    layer::SubscriberExt,
    util::SubscriberInitExt,
};

use crate::config::LogFormat;

/// The `service.name` resource attribute of exported spans.
pub(crate) const SERVICE_NAME: &str = "autoscaled";

/// Why logging could not start.
#[derive(Debug, Error)]
pub(crate) enum TelemetryError {
    /// The filter does not parse.
    #[error("invalid log filter {filter:?}: {message}")]
    Filter { filter: String, message: String },
    /// A global subscriber is already installed.
    #[error("a tracing subscriber is already installed")]
    AlreadyInstalled,
    /// The OTLP exporter could not be built (for example a malformed endpoint).
    #[error("invalid OTLP endpoint {endpoint:?}: {message}")]
    Otlp { endpoint: String, message: String },
}

/// Keeps the span export alive. Dropping it (or [`TelemetryGuard::shutdown`]) shuts the tracer
/// provider down, which exports the spans still queued. Drop it after the server's final
/// flush and while the Tokio runtime still runs (the exporter's channel is driven by it), and
/// not on a runtime worker thread: the shutdown blocks until the export is done.
#[must_use = "dropping the guard stops span export"]
#[derive(Debug, Default)]
pub(crate) struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl TelemetryGuard {
    /// Exports the queued spans and stops the exporter; a failure is logged, not returned,
    /// because exit continues either way.
    pub(crate) fn shutdown(mut self) {
        self.shutdown_provider();
    }

    fn shutdown_provider(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            tracing::warn!(error = %e, "span export shutdown failed");
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        self.shutdown_provider();
    }
}

/// Installs the global subscriber: `filter` in `EnvFilter` syntax, lines to stderr (ANSI
/// colours only when `colour`: see [`crate::config::log_colour`]; stdout
/// carries only the `autoscaled listening on ADDR` line that clients wait for), and, when
/// `otlp_endpoint` is set (e.g. `http://127.0.0.1:4317`), an OTLP/gRPC span exporter. Must be
/// called within a Tokio runtime when `otlp_endpoint` is set.
pub(crate) fn init(
    filter: &str,
    format: LogFormat,
    colour: bool,
    otlp_endpoint: Option<&str>,
) -> Result<TelemetryGuard, TelemetryError> {
    let env_filter = EnvFilter::try_new(filter).map_err(|e| TelemetryError::Filter {
        filter: filter.to_owned(),
        message: e.to_string(),
    })?;
    let provider = otlp_endpoint.map(otlp_provider).transpose()?;
    let otel_layer = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer(SERVICE_NAME))
            .with_filter(not_the_exporters_own())
            .boxed()
    });
    let fmt_layer = match format {
        LogFormat::Text => fmt::layer()
            .with_ansi(colour)
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => fmt::layer()
            .json()
            .with_ansi(false)
            .with_writer(std::io::stderr)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(env_filter)
        .with(fmt_layer)
        .with(otel_layer)
        .try_init()
        .map_err(|_| TelemetryError::AlreadyInstalled)?;
    Ok(TelemetryGuard { provider })
}

fn otlp_provider(endpoint: &str) -> Result<SdkTracerProvider, TelemetryError> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| TelemetryError::Otlp {
            endpoint: endpoint.to_owned(),
            message: e.to_string(),
        })?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name(SERVICE_NAME).build())
        .build())
}

/// The exporter's own stack (tonic, hyper, h2, tower, the OpenTelemetry SDK) is never
/// exported: with a `debug` log filter its spans would otherwise be exported by the very
/// export they describe, without end. Levels are left to the global filter.
fn not_the_exporters_own() -> Targets {
    ["tonic", "hyper", "h2", "tower", "opentelemetry"]
        .into_iter()
        .fold(
            Targets::new().with_default(LevelFilter::TRACE),
            |targets, crate_name| targets.with_target(crate_name, LevelFilter::OFF),
        )
}

/// Reads W3C trace context from gRPC metadata (HTTP/2 headers; keys are lowercase there).
struct MetadataExtractor<'a>(&'a HeaderMap);

impl opentelemetry::propagation::Extractor for MetadataExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// The span every gRPC request runs in (tonic's `trace_fn`). When the request carries a
/// `traceparent`, the W3C trace context becomes its parent, so the RPC's spans join the
/// caller's trace (style guide habit 14). Without the OpenTelemetry layer this is a plain span.
pub(crate) fn grpc_span<B>(request: &Request<B>) -> Span {
    // The target the span had when it was created in `server` (log filters name it).
    let span =
        tracing::info_span!(target: "autoscaled::server", "grpc", rpc = %request.uri().path());
    if request.headers().contains_key("traceparent") {
        let parent = TraceContextPropagator::new().extract(&MetadataExtractor(request.headers()));
        // Err only when no OpenTelemetry layer is installed: nothing to continue then.
        let _ = span.set_parent(parent);
    }
    span
}
