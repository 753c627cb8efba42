//! The access log: one `info` line per HTTP request when its response is
//! sent (method, path, status, latency), inside a `request` span that every
//! log line of the request inherits, with its request id (the client's
//! `X-Request-Id` when it sent one, else a fresh UUID; echoed in the
//! response) and, once known, the tenant, thread and run.
//!
//! With OpenTelemetry export on, the span is exported (as the trace's root on
//! this side) and continues the client's `traceparent` when it sent one.
//!
//! The query string is never logged (it can carry `access_token`), nor are
//! headers or bodies.

use axum::Router;
use axum::http::{HeaderName, Request, Response};
use std::time::Duration;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use tracing::Span;

/// The request id header.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Wraps `router` with request ids and the access log.
pub fn layer<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    router
        // Outermost first: the id exists before the span is made.
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|req: &Request<_>| {
                    let id = req
                        .headers()
                        .get(&REQUEST_ID)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("");
                    let span = tracing::info_span!(
                        "request",
                        method = %req.method(),
                        path = %req.uri().path(),
                        request_id = %id,
                        tenant = tracing::field::Empty,
                        thread = tracing::field::Empty,
                        run = tracing::field::Empty,
                    );
                    if crate::telemetry::enabled()
                        && let Some(parent) = crate::upstream::trace::from_headers(req.headers())
                            .filter(|v| crate::upstream::trace::trace_id_of(v).is_some())
                    {
                        use tracing_opentelemetry::OpenTelemetrySpanExt;
                        let _ = span.set_parent(crate::upstream::trace::remote_context(parent));
                    }
                    span
                })
                .on_request(())
                .on_response(|res: &Response<_>, latency: Duration, _: &Span| {
                    tracing::info!(
                        status = res.status().as_u16(),
                        latency_ms = latency.as_secs_f64() * 1000.0,
                        "access"
                    );
                })
                .on_failure(()),
        )
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
}

/// Records the caller's tenant on the current request's span.
pub fn record_tenant(tenant: &str) {
    Span::current().record("tenant", tracing::field::display(tenant));
}

/// Records the thread (and run) a request is about on its span.
pub fn record_thread(thread: &str, run: Option<&str>) {
    let span = Span::current();
    span.record("thread", tracing::field::display(thread));
    if let Some(run) = run {
        span.record("run", tracing::field::display(run));
    }
}
