//! HTTP routes: the AG-UI-compatible run endpoint, the agent list, health.
//!
//! `POST /v1/agents/{agent}/run` is a drop-in AG-UI endpoint: a stock
//! `HttpAgent` pointed at it gets the agent's events, verified and with chunks
//! expanded, as `data: <json>\n\n` frames, plus `: keepalive` comments while
//! the agent is quiet.

use super::AppState;
use super::error::{ApiError, ErrorCode};
use crate::auth::Principal;
use crate::protocol::sse::{KEEPALIVE, encode_data};
use crate::protocol::{Event, EventType, RunAgentInput};
use crate::upstream::RunStream;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::BytesMut;
use futures::StreamExt;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

/// All routes, with JSON errors for unknown paths and methods.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/agents", get(list_agents))
        .route("/v1/agents/{agent}/run", post(run_agent))
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route(
            "/readyz",
            get(|| async { Json(json!({"status": "ready"})) }),
        )
        .route("/metrics", get(metrics))
        .fallback(|| async { ApiError::new(ErrorCode::NotFound, "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(ErrorCode::Invalid, "method not allowed on this route")
        })
        // We read bodies ourselves so an oversize one gets our JSON 413.
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

/// Verifies the bearer token of a request.
pub async fn authenticate(state: &AppState, headers: &HeaderMap) -> Result<Principal, ApiError> {
    let result = match bearer(headers) {
        None => Err(crate::auth::AuthFailure::MissingToken),
        Some(token) => state.auth.verify(token).await,
    };
    result.map_err(|f| {
        state.metrics.auth_failures.fetch_add(1, Relaxed);
        tracing::info!(reason = f.reason(), "authentication refused");
        ApiError::from(f)
    })
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

async fn list_agents(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let who = match authenticate(&state, &headers).await {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let agents: Vec<_> = state
        .agents
        .visible_to(&who)
        .map(|a| json!({"id": a.id, "description": a.description}))
        .collect();
    Json(json!({ "agents": agents })).into_response()
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

/// Reads a body up to `limit` bytes; larger → `too_large` (checked against
/// `Content-Length` first, so an honest oversize client is refused unread).
async fn read_body(request: Request, limit: usize) -> Result<Bytes, ApiError> {
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
    axum::body::to_bytes(request.into_body(), limit)
        .await
        .map_err(|_| too_large())
}

async fn run_agent(
    State(state): State<Arc<AppState>>,
    Path(agent_id): Path<String>,
    request: Request,
) -> Response {
    match start_run(&state, &agent_id, request).await {
        Ok(stream) => sse_response(state, stream),
        Err(e) => e.into_response(),
    }
}

async fn start_run(
    state: &AppState,
    agent_id: &str,
    request: Request,
) -> Result<RunStream, ApiError> {
    let who = authenticate(state, request.headers()).await?;
    let agent = state
        .agents
        .get(agent_id)
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound, format!("no agent '{agent_id}'")))?;
    if !agent.allows(&who) {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            format!("your roles may not run agent '{agent_id}'"),
        ));
    }
    let body = read_body(request, state.config.server.max_body_bytes).await?;
    let input = RunAgentInput::from_json(&body)
        .map_err(|e| ApiError::new(ErrorCode::Invalid, format!("invalid RunAgentInput: {e}")))?;
    tracing::info!(agent = %agent.id, thread = %input.thread_id, run = %input.run_id, user = %who.subject, tenant = %who.tenant, "run started");
    state.metrics.runs_started.fetch_add(1, Relaxed);
    let body = Bytes::from(serde_json::to_vec(&input).expect("input serializes"));
    Ok(RunStream::start(agent, body))
}

/// What a run's terminal event says, for logs and metrics.
fn outcome_label(event: &Event) -> String {
    match event.kind() {
        EventType::RunError => event.str_field("code").unwrap_or("run_error").to_owned(),
        _ => event
            .get("outcome")
            .and_then(|o| o.get("type"))
            .and_then(|t| t.as_str())
            .unwrap_or("success")
            .to_owned(),
    }
}

fn sse_response(state: Arc<AppState>, run: RunStream) -> Response {
    let keepalive = state.config.server.keepalive;
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + keepalive, keepalive);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let frames = futures::stream::unfold(
        (run, ticker, state, false),
        |(mut run, mut ticker, state, done)| async move {
            if done {
                return None;
            }
            tokio::select! {
                event = run.next() => {
                    let event = event?;
                    state.metrics.events_forwarded.fetch_add(1, Relaxed);
                    let terminal = event.kind().is_terminal();
                    if terminal {
                        state.metrics.run_ended(&outcome_label(&event));
                    }
                    let mut buf = BytesMut::new();
                    encode_data(event.json(), None, &mut buf);
                    ticker.reset();
                    Some((Ok::<_, std::convert::Infallible>(buf.freeze()), (run, ticker, state, terminal)))
                }
                _ = ticker.tick() => Some((Ok(Bytes::from_static(KEEPALIVE)), (run, ticker, state, false))),
            }
        },
    );
    let mut resp = Response::new(Body::from_stream(frames));
    *resp.status_mut() = StatusCode::OK;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

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
