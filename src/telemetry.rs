//! Optional OpenTelemetry traces: with `[tracing] otlp_endpoint` set, the
//! gateway's own spans — `request` (the access log's), `run` and `upstream`
//! — are exported over OTLP/HTTP (protobuf), and the upstream request's
//! `traceparent` is the exported `upstream` span's context, so the agent's
//! spans join the same trace. Off (the default), nothing is exported and
//! [`enabled`] is false: `traceparent` is made as [`crate::upstream::trace`]
//! always did.
//!
//! Only spans are exported, never log events (those stay in the log, which
//! carries the `trace_id`), and only the gateway's own spans, whose fields
//! are ids, names and methods: no token, secret, header or message content.
//!
//! The exporter runs on the SDK's batch thread with a blocking reqwest
//! client (rustls), independent of the tokio runtime; [`Telemetry::shutdown`]
//! flushes what is still queued and is called when `serve` returns.

use crate::config::TracingConfig;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use std::sync::atomic::{AtomicBool, Ordering};
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// True once [`init`] set up an exporter: spans carry OpenTelemetry contexts
/// and the upstream `traceparent` is taken from them.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The running exporter; [`Telemetry::shutdown`] flushes it.
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// Exports every span still queued (waiting up to the export timeout)
    /// and stops the exporter. Call it outside async code (it blocks).
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("agui-gateway: flushing traces at shutdown: {e}");
        }
    }
}

/// The collector URL for traces: `endpoint` with `/v1/traces` appended
/// unless it already ends with it.
pub fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    }
}

/// The exporter and the tracing layer that feeds it, when `config` sets an
/// endpoint; `Ok(None)` when tracing export is off.
#[allow(clippy::type_complexity)]
pub fn init<S>(
    config: &TracingConfig,
) -> Result<Option<(Box<dyn Layer<S> + Send + Sync>, Telemetry)>, String>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    if config.otlp_endpoint.is_empty() {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces_url(&config.otlp_endpoint))
        .build()
        .map_err(|e| format!("tracing.otlp_endpoint: {e}"))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            config.sample_ratio,
        ))))
        .with_resource(
            Resource::builder()
                .with_service_name(config.service_name.clone())
                .build(),
        )
        .build();
    let tracer = provider.tracer("agui-gateway");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        // Spans only, and only the gateway's own: log events stay in the log.
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
            meta.is_span() && meta.target().starts_with("agui_gateway")
        }));
    ENABLED.store(true, Ordering::Relaxed);
    Ok(Some((Box::new(layer), Telemetry { provider })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_is_appended_once() {
        assert_eq!(
            traces_url("http://c:4318"),
            "http://c:4318/v1/traces".to_owned()
        );
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(
            traces_url("http://c:4318/v1/traces"),
            "http://c:4318/v1/traces"
        );
        assert_eq!(traces_url("https://c/otel"), "https://c/otel/v1/traces");
    }
}
