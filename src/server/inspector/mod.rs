//! The inspector: a page to watch and steer shared threads live, served by
//! the gateway itself (`[inspector] enabled`, at `inspector.path`). Its
//! assets are compiled into the binary (no build step), served under a
//! strict Content-Security-Policy with no third-party origin, and the page
//! speaks only the public contract — `/v1/ws`, `/v1/agents`, `/v1/threads` —
//! so nothing it does is unavailable to any other client.
//!
//! One addition, for development only: when the gateway runs on the public
//! development secret (`auth.hs_secret` from the shipped config), the page
//! offers a "mint dev token" form backed by `POST {path}/dev-token`. With
//! any real secret or key that route does not exist. Its tokens carry a
//! grant on every thread of their tenant ([`crate::auth::dev_thread_grants`]),
//! so two people trying the page together see each other's threads; real
//! tokens get only what their issuer and `[[grants]]` give them.

use super::error::{ApiError, ErrorCode};
use super::state::AppState;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::sync::Arc;

const INDEX: &str = include_str!("index.html");
const SCRIPT: &str = include_str!("app.js");
const STYLE: &str = include_str!("app.css");
/// The client package's core module (npm `@agui-gateway/client`), which the
/// page imports: one client implementation for the page and for apps, and
/// it has no imports of its own, so it is served as it is.
const CLIENT: &str = include_str!("../../../clients/typescript/src/index.js");

/// Nothing but this origin: no inline script or style, no framing, no
/// third-party hosts; the page talks to its own gateway only.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; font-src 'self'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The inspector's routes under `path`, when enabled.
pub fn routes(state: &AppState) -> Option<Router<Arc<AppState>>> {
    let cfg = &state.config.inspector;
    if !cfg.enabled {
        return None;
    }
    let base = cfg.path.trim_end_matches('/').to_owned();
    // The page's relative URLs (app.js, config.json) need the trailing slash.
    let slash = format!("{base}/");
    let to_slash = slash.clone();
    let mut router = Router::new()
        .route(
            &base,
            get(move || async move { axum::response::Redirect::permanent(&to_slash) }),
        )
        .route(&slash, get(index))
        .route(&format!("{base}/app.js"), get(script))
        .route(&format!("{base}/app.css"), get(style))
        .route(&format!("{base}/agui-gateway-client.js"), get(client))
        .route(&format!("{base}/config.json"), get(page_config));
    if dev_tokens(state) {
        router = router.route(&format!("{base}/dev-token"), post(dev_token));
    }
    Some(router)
}

/// True when the gateway runs on the public development secret.
fn dev_tokens(state: &AppState) -> bool {
    state.config.auth.hs_secret.as_deref() == Some(crate::config::DEV_SECRET)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (
                header::HeaderName::from_static("x-content-type-options"),
                HeaderValue::from_static("nosniff"),
            ),
        ],
        body,
    )
        .into_response();
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    response.headers_mut().insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

async fn client() -> Response {
    asset("text/javascript; charset=utf-8", CLIENT)
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// What the page needs to know about this gateway.
async fn page_config(State(state): State<Arc<AppState>>) -> Response {
    axum::Json(json!({
        "devTokens": dev_tokens(&state),
        "ws": "/v1/ws",
    }))
    .into_response()
}

/// `POST {path}/dev-token` `{sub, roles?, tenant?}`: a one-hour token signed
/// with the development secret (the route exists only with that secret),
/// sharing every thread of its tenant.
async fn dev_token(State(state): State<Arc<AppState>>, body: axum::body::Bytes) -> Response {
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let sub = v.get("sub").and_then(Value::as_str).unwrap_or("").trim();
    if sub.is_empty() || sub.len() > 128 {
        return ApiError::new(ErrorCode::Invalid, "'sub' must be 1-128 characters").into_response();
    }
    let roles = v
        .get("roles")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let request = crate::auth::MintRequest {
        subject: sub.to_owned(),
        roles,
        tenant: v.get("tenant").and_then(Value::as_str).map(str::to_owned),
        ttl_secs: 3600,
        threads: Some(crate::auth::dev_thread_grants()),
    };
    match crate::auth::mint(&state.config.auth, &request) {
        Ok(token) => axum::Json(json!({"token": token, "expiresIn": 3600})).into_response(),
        Err(e) => ApiError::new(ErrorCode::Internal, e).into_response(),
    }
}
