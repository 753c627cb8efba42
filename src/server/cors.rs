//! CORS for browser apps on other origins (a `HttpAgent` in a web page, the
//! SSE join stream from `EventSource`).
//!
//! Only the configured origins (`cors.allowed_origins`) get `Access-Control-*`
//! headers. Any other origin gets none at all — not even the method and
//! header lists, which `tower-http` sends to every preflight — and its
//! preflight is answered `403 forbidden`, which is how a browser is told no
//! (the body says why, for whoever reads the network panel). Requests
//! without `Origin` (servers, same-origin GETs) pass untouched.
//!
//! The request headers a page may send are `cors.allowed_headers`: by
//! default the ones the gateway reads plus the W3C trace context and baggage
//! (`traceparent`, `tracestate`, `baggage`), which OpenTelemetry's browser
//! instrumentation adds to every fetch — refusing them failed the preflight
//! of every traced app, though the gateway continues a client's
//! `traceparent`. `"*"` allows whatever a preflight asks for.
//!
//! Tokens travel in `Authorization`, never cookies, so credentials mode is
//! not needed and not enabled.

use super::error::{ApiError, ErrorCode};
use crate::auth::access::glob_match;
use crate::config::CorsConfig;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use tower::{Layer, ServiceExt};
use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};

/// The CORS answer for the configured origins.
pub struct Cors {
    origins: Vec<String>,
    layer: CorsLayer,
}

impl Cors {
    /// From `config` (header names were checked with the config; a name
    /// that still does not parse is skipped).
    pub fn new(config: &CorsConfig) -> Cors {
        let headers = if config.allowed_headers.iter().any(|h| h == "*") {
            AllowHeaders::mirror_request()
        } else {
            AllowHeaders::list(
                config
                    .allowed_headers
                    .iter()
                    .filter_map(|h| HeaderName::from_bytes(h.as_bytes()).ok()),
            )
        };
        let layer = CorsLayer::new()
            // Only allowed origins reach the layer (see [`gate`]).
            .allow_origin(AllowOrigin::mirror_request())
            .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
            .allow_headers(headers)
            .expose_headers([
                header::RETRY_AFTER,
                header::WWW_AUTHENTICATE,
                super::access_log::REQUEST_ID,
            ])
            .max_age(config.max_age);
        Cors {
            origins: config.allowed_origins.clone(),
            layer,
        }
    }

    /// Whether pages of `origin` may call the gateway.
    pub fn allows(&self, origin: &HeaderValue) -> bool {
        origin
            .to_str()
            .is_ok_and(|o| self.origins.iter().any(|p| p == "*" || glob_match(p, o)))
    }
}

/// The middleware: CORS headers for allowed origins, none for the others.
pub async fn gate(State(cors): State<Arc<Cors>>, req: Request, next: Next) -> Response {
    let Some(origin) = req.headers().get(header::ORIGIN).cloned() else {
        return next.run(req).await;
    };
    if cors.allows(&origin) {
        return match cors.layer.layer(next).oneshot(req).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
    }
    let preflight = req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut response = if preflight {
        ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "origin '{}' is not in cors.allowed_origins",
                String::from_utf8_lossy(origin.as_bytes()).escape_default()
            ),
        )
        .into_response()
    } else {
        next.run(req).await
    };
    // The answer depends on the origin: caches must not reuse it for another.
    response
        .headers_mut()
        .append(header::VARY, HeaderValue::from_static("origin"));
    response
}
