//! W3C Trace Context for upstream requests: every run's request to its agent
//! carries a `traceparent`, continuing the trace of the client's request when
//! it sent one (HTTP face), so an agent's own traces join the caller's. The
//! trace id is also logged with the run, to find one run across both sides.
//!
//! With OpenTelemetry export on ([`crate::telemetry`]), the `traceparent` is
//! instead the exported `upstream` span's own context ([`of_span`]): the
//! client's trace (continued by the `request` span) with that span as the
//! agent's parent.

use reqwest::header::HeaderMap;
use std::fmt::Write;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C `traceparent` a client sent, if readable: the run, chat and
/// access-log paths all continue it, so they read it here, the one place
/// that knows the header.
pub fn from_headers(headers: &HeaderMap) -> Option<&str> {
    headers.get("traceparent")?.to_str().ok()
}

/// The `traceparent` of `span`'s OpenTelemetry context, when export is on
/// and the span has one (it is enabled and valid); the sampled flag is the
/// exporter's decision.
pub fn of_span(span: &tracing::Span) -> Option<String> {
    use opentelemetry::trace::TraceContextExt;
    if !crate::telemetry::enabled() {
        return None;
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

/// The OpenTelemetry context of a client's `traceparent` header, to parent
/// the request span on (an invalid header gives an empty context).
pub fn remote_context(traceparent: &str) -> opentelemetry::Context {
    use opentelemetry::propagation::TextMapPropagator;
    let carrier = std::collections::HashMap::from([(
        "traceparent".to_owned(),
        traceparent.trim().to_owned(),
    )]);
    opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier)
}

/// A `traceparent` for a new span: in the trace of `parent` when it is a
/// valid version-00 header, else in a new trace.
pub fn child_of(parent: Option<&str>) -> String {
    let trace_id = parent
        .and_then(trace_id_of)
        .unwrap_or_else(|| hex(&random::<16>()));
    format!("00-{trace_id}-{}-01", hex(&random::<8>()))
}

/// The trace id of a `traceparent` header (`00-<32 hex>-<16 hex>-<2 hex>`),
/// if it is well formed and not all zeros.
pub fn trace_id_of(header: &str) -> Option<String> {
    let mut parts = header.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let is_hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    let valid = version == "00"
        && parts.next().is_none()
        && is_hex(trace, 32)
        && is_hex(span, 16)
        && is_hex(flags, 2)
        && trace.bytes().any(|b| b != b'0')
        && span.bytes().any(|b| b != b'0');
    valid.then(|| trace.to_ascii_lowercase())
}

fn random<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    let uuid = uuid::Uuid::new_v4();
    for (i, b) in out.iter_mut().enumerate() {
        *b = uuid.as_bytes()[i % 16] ^ (i as u8 / 16);
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continues_a_valid_parent_and_starts_afresh_otherwise() {
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let child = child_of(Some(parent));
        assert!(
            child.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
            "{child}"
        );
        assert_ne!(child, parent, "a new span id");
        assert!(trace_id_of(&child).is_some());
        for bad in [
            "",
            "garbage",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        ] {
            let fresh = child_of(Some(bad));
            assert!(trace_id_of(&fresh).is_some(), "{fresh}");
            assert!(!fresh.contains("4bf92f35"), "{fresh}");
        }
        assert_ne!(child_of(None), child_of(None));
    }
}
