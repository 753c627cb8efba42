//! What HTTP handlers take from a request, as axum extractors: the caller
//! ([`Authenticated`]) and a bounded JSON object body ([`JsonObject`]). A
//! refusal is the contract's JSON error, so a handler that lists them never
//! writes the checks itself.

use super::error::{ApiError, ErrorCode};
use super::state::AppState;
use crate::auth::Principal;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use serde_json::{Value, json};
use std::sync::Arc;

/// The caller, verified from the request's bearer token; a missing or bad
/// token answers `unauthenticated` (and counts as an authentication failure).
pub struct Authenticated(pub Principal);

impl FromRequestParts<Arc<AppState>> for Authenticated {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, ApiError> {
        authenticate(state, &parts.headers).await.map(Authenticated)
    }
}

/// Verifies the bearer token of a request: what [`Authenticated`] does, for
/// the routes that accept another credential first (a stream ticket).
pub async fn authenticate(state: &AppState, headers: &HeaderMap) -> Result<Principal, ApiError> {
    let result = match bearer(headers) {
        None => Err(crate::auth::AuthFailure::MissingToken),
        Some(token) => state.auth.verify(token).await,
    };
    if let Ok(p) = &result {
        super::access_log::record_tenant(&p.tenant);
    }
    result.map_err(|f| {
        crate::metrics::metrics().auth_failed(f.reason(), "http");
        tracing::info!(reason = f.reason(), "authentication refused");
        ApiError::from(f)
    })
}

/// The bearer token of an `Authorization` header.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// A body that is a JSON object (an empty body reads as `{}`), at most
/// `server.max_body_bytes`: larger → `too_large`, anything else → `invalid`.
pub struct JsonObject(pub Value);

impl FromRequest<Arc<AppState>> for JsonObject {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let body = read_body(request, state).await?;
        if body.is_empty() {
            return Ok(JsonObject(json!({})));
        }
        match serde_json::from_slice(&body) {
            Ok(v @ Value::Object(_)) => Ok(JsonObject(v)),
            _ => Err(ApiError::new(
                ErrorCode::Invalid,
                "body must be a JSON object",
            )),
        }
    }
}

/// Reads a body up to `limit` bytes; larger → `too_large` (checked against
/// `Content-Length` first, so an honest oversize client is refused unread).
/// A function, not an extractor, for the route that must check its path
/// before it reads (the run endpoint: an unknown agent is refused unread).
pub async fn read_body(request: Request, state: &AppState) -> Result<Bytes, ApiError> {
    let limit = state.config.server.max_body_bytes;
    let deadline = state.config.server.body_read_timeout;
    let too_large = || {
        ApiError::new(
            ErrorCode::TooLarge,
            format!("request body exceeds {limit} bytes"),
        )
    };
    if let Some(len) = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        && len > limit
    {
        return Err(too_large());
    }
    // The head's deadline (`server.header_read_timeout`) ends where the body
    // begins: without this one a body dripped a byte at a time held the
    // request, and its descriptor, for as long as the client liked.
    match tokio::time::timeout(deadline, axum::body::to_bytes(request.into_body(), limit)).await {
        Ok(Ok(body)) => Ok(body),
        Ok(Err(_)) => Err(too_large()),
        Err(_) => Err(ApiError::new(
            ErrorCode::Invalid,
            format!(
                "the request body did not arrive within {deadline:?} (server.body_read_timeout)"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn bearer_parsing() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer  abc "),
        );
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(bearer(&h), None);
    }
}
