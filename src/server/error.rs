//! The error every route answers with: `{"error":{"code","message"}}`.
//!
//! `code` is one of the spec's stable codes; the HTTP status follows from it,
//! so a handler cannot pair a code with the wrong status. Authentication
//! failures add `reason` (e.g. `token_expired`) so clients can tell a refresh
//! from a re-login without parsing prose.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Stable error codes from the client contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    Unauthenticated,
    Forbidden,
    NotFound,
    Invalid,
    /// The route exists, the method does not (405, with `Allow`).
    MethodNotAllowed,
    /// No format the client accepts (406): an event stream asked for with an
    /// `Accept` the gateway cannot serve.
    NotAcceptable,
    Conflict,
    RateLimited,
    TooLarge,
    Unavailable,
    Internal,
}

impl ErrorCode {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Invalid => "invalid",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::NotAcceptable => "not_acceptable",
            ErrorCode::Conflict => "conflict",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
        }
    }

    /// The HTTP status that goes with the code.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorCode::Unauthenticated => StatusCode::UNAUTHORIZED,
            ErrorCode::Forbidden => StatusCode::FORBIDDEN,
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::Invalid => StatusCode::BAD_REQUEST,
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::NotAcceptable => StatusCode::NOT_ACCEPTABLE,
            ErrorCode::Conflict => StatusCode::CONFLICT,
            ErrorCode::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    /// Finer, stable sub-code (authentication only, for now).
    pub reason: Option<&'static str>,
    /// Seconds to wait before retrying (`rate_limited`): `Retry-After` on HTTP.
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error with `code` and a human-readable `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            reason: None,
            retry_after: None,
        }
    }
}

impl From<crate::auth::AuthFailure> for ApiError {
    fn from(f: crate::auth::AuthFailure) -> ApiError {
        ApiError {
            code: ErrorCode::Unauthenticated,
            message: f.to_string(),
            reason: Some(f.reason()),
            retry_after: None,
        }
    }
}

impl From<crate::thread::run::RunRefused> for ApiError {
    fn from(r: crate::thread::run::RunRefused) -> ApiError {
        use crate::thread::run::RunRefused;
        match r {
            RunRefused::Conflict(m) => ApiError::new(ErrorCode::Conflict, m),
            RunRefused::Invalid(m) => ApiError::new(ErrorCode::Invalid, m),
            RunRefused::Unavailable(m) => ApiError::new(ErrorCode::Unavailable, m),
            RunRefused::NotFound(m) => ApiError::new(ErrorCode::NotFound, m),
            RunRefused::TooLarge(m) => ApiError::new(ErrorCode::TooLarge, m),
        }
    }
}

impl From<crate::policy::limits::Refusal> for ApiError {
    fn from(r: crate::policy::limits::Refusal) -> ApiError {
        let code = if r.too_large {
            ErrorCode::TooLarge
        } else {
            ErrorCode::Forbidden
        };
        ApiError::new(code, r.message)
    }
}

impl From<crate::policy::rate::Limited> for ApiError {
    fn from(l: crate::policy::rate::Limited) -> ApiError {
        let secs = l.retry_after.as_secs().max(1);
        ApiError {
            retry_after: Some(secs),
            ..ApiError::new(
                ErrorCode::RateLimited,
                format!("rate limit '{}' reached; retry after {secs} s", l.rule),
            )
        }
    }
}

impl From<crate::policy::Refused> for ApiError {
    fn from(r: crate::policy::Refused) -> ApiError {
        match r {
            crate::policy::Refused::Limit(r) => r.into(),
            crate::policy::Refused::Rate(l) => l.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = json!({"code": self.code.as_str(), "message": self.message});
        if let Some(r) = self.reason {
            error["reason"] = r.into();
        }
        if let Some(s) = self.retry_after {
            error["retryAfter"] = s.into();
        }
        let mut resp = (self.code.status(), axum::Json(json!({ "error": error }))).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if self.code == ErrorCode::Unauthenticated {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer error=\"invalid_token\""),
            );
        }
        resp
    }
}

/// The stable code for an error status that did not come from an [`ApiError`].
fn code_for(status: StatusCode) -> &'static str {
    match status {
        StatusCode::UNAUTHORIZED => ErrorCode::Unauthenticated.as_str(),
        StatusCode::FORBIDDEN => ErrorCode::Forbidden.as_str(),
        StatusCode::NOT_FOUND => ErrorCode::NotFound.as_str(),
        StatusCode::METHOD_NOT_ALLOWED => ErrorCode::MethodNotAllowed.as_str(),
        StatusCode::NOT_ACCEPTABLE => ErrorCode::NotAcceptable.as_str(),
        StatusCode::CONFLICT => ErrorCode::Conflict.as_str(),
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::TooLarge.as_str(),
        StatusCode::TOO_MANY_REQUESTS => ErrorCode::RateLimited.as_str(),
        StatusCode::SERVICE_UNAVAILABLE => ErrorCode::Unavailable.as_str(),
        s if s.is_server_error() => ErrorCode::Internal.as_str(),
        _ => ErrorCode::Invalid.as_str(),
    }
}

/// Response middleware: an error response that is not already JSON (the
/// framework's own rejections — bad query, wrong method, a failed WebSocket
/// upgrade) becomes `{"error":{"code","message"}}` with the same status and
/// headers (`Allow` on 405), its text as the message.
pub async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let mut message: String = String::from_utf8_lossy(&text)
        .trim()
        .chars()
        .take(300)
        .collect();
    if message.is_empty() {
        message = status.canonical_reason().unwrap_or("error").to_lowercase();
    }
    let body = json!({"error": {"code": code_for(status), "message": message}});
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(body.to_string()))
}
