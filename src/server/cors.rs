//! CORS for browser apps on other origins (a `HttpAgent` in a web page, the
//! SSE join stream from `EventSource`).
//!
//! Only the configured origins get `Access-Control-*` headers; any other
//! origin's preflight is answered without them, which is how a browser is
//! told no. Tokens travel in `Authorization`, never cookies, so credentials
//! mode is not needed and not enabled.

use crate::auth::access::glob_match;
use crate::config::CorsConfig;
use axum::http::{HeaderName, HeaderValue, Method, header, request::Parts};
use tower_http::cors::{AllowOrigin, CorsLayer};

/// The CORS layer for `config` (a no-op for an empty origin list).
pub fn layer(config: &CorsConfig) -> CorsLayer {
    let patterns = config.allowed_origins.clone();
    let origin = AllowOrigin::predicate(move |origin: &HeaderValue, _: &Parts| {
        origin
            .to_str()
            .is_ok_and(|o| patterns.iter().any(|p| p == "*" || glob_match(p, o)))
    });
    CorsLayer::new()
        .allow_origin(origin)
        .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header::ACCEPT,
            HeaderName::from_static("last-event-id"),
            HeaderName::from_static("x-request-id"),
        ])
        .expose_headers([header::RETRY_AFTER, header::WWW_AUTHENTICATE])
        .max_age(config.max_age)
}
