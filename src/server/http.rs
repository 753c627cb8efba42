//! HTTP routes: the AG-UI-compatible run endpoint, the agent list, health.
//!
//! `POST /v1/agents/{agent}/run` is a drop-in AG-UI endpoint: a stock
//! `HttpAgent` pointed at it gets the agent's events, verified and with chunks
//! expanded, as `data: <json>\n\n` frames, plus `: keepalive` comments while
//! the agent is quiet.

use super::AppState;
use super::access::{AccessError, thread_for};
use super::error::{ApiError, ErrorCode};
use super::sse::{SSE_CHUNK, async_stream, sse_response};
use crate::auth::{Permission, Principal};
use crate::protocol::hooks::RunInput;
use crate::protocol::sse::KEEPALIVE;
use crate::protocol::{Event, EventType, RunAgentInput};
use crate::thread::fanout::{OutboxReceiver, Outgoing, outbox};
use crate::thread::run::RunRequest;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::BytesMut;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

/// All routes, with JSON errors for unknown paths and methods, and CORS for
/// the configured browser origins.
pub fn router(state: Arc<AppState>) -> Router {
    let cors = super::cors::layer(&state.config.cors);
    Router::new()
        .route("/v1/agents", get(list_agents))
        .route("/v1/agents/{agent}/run", post(run_agent))
        .route("/v1/ws", get(super::ws::upgrade))
        .route("/v1/threads", get(super::threads::list))
        .route("/v1/threads/{thread}", get(super::threads::snapshot))
        .route("/v1/threads/{thread}/events", get(super::threads::join))
        .route(
            "/v1/threads/{thread}/ticket",
            post(super::threads::issue_ticket),
        )
        .route(
            "/v1/threads/{thread}/meta",
            post(super::sideband::post_meta),
        )
        .route(
            "/v1/threads/{thread}/cancel",
            post(super::sideband::post_cancel),
        )
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics))
        .fallback(|| async { ApiError::new(ErrorCode::NotFound, "no such route") })
        // We read bodies ourselves so an oversize one gets our JSON 413.
        .layer(DefaultBodyLimit::disable())
        // Whatever answers with an error (a framework rejection, a wrong
        // method, a failed upgrade) answers with the documented JSON shape.
        .layer(axum::middleware::map_response(super::error::json_errors))
        .layer(cors)
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

/// The bearer token of an `Authorization` header.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
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
        .agents()
        .visible_to(&who)
        .map(|a| json!({"id": a.id, "description": a.description}))
        .collect();
    Json(json!({ "agents": agents })).into_response()
}

/// Ready when the journal answers and has not failed a write.
async fn ready(State(state): State<Arc<AppState>>) -> Response {
    let store = state.threads.store().clone();
    if !store.healthy() {
        return ApiError::new(ErrorCode::Unavailable, "journal writes are failing").into_response();
    }
    match tokio::task::spawn_blocking(move || store.ping()).await {
        Ok(Ok(())) => Json(json!({"status": "ready"})).into_response(),
        _ => ApiError::new(ErrorCode::Unavailable, "journal unreachable").into_response(),
    }
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
pub async fn read_body(request: Request, limit: usize) -> Result<Bytes, ApiError> {
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
        Ok(rx) => run_response(state, rx),
        Err(e) => e.into_response(),
    }
}

/// Authenticates, validates and starts (or queues) the run on its thread; the
/// returned receiver gets this run's events, as the thread journals them.
async fn start_run(
    state: &AppState,
    agent_id: &str,
    request: Request,
) -> Result<OutboxReceiver, ApiError> {
    let who = authenticate(state, request.headers()).await?;
    let agent = state
        .agents()
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
    let need = if input.resume.as_ref().is_some_and(|r| !r.is_empty()) {
        Permission::Resume
    } else {
        Permission::Run
    };
    let thread_id = input.thread_id.clone();
    let run_id = input.run_id.clone();
    let mut input = RunInput::Complete(input);
    // Policy first: a refused run creates no thread.
    let prepared = state
        .policy()
        .prepare_run(&who, &agent.id, &thread_id, &mut input)?;
    let thread = thread_for(state, &who, &thread_id, need, need == Permission::Run)
        .await
        .map_err(AccessError::into_api)?;
    let (starter, rx) = outbox(state.config.threads.viewer_queue_bytes);
    let req = RunRequest {
        agent: agent.clone(),
        run_id,
        input,
        starter: Some(starter),
        starter_visibility: state
            .policy()
            .visibility_for(&who, &agent.id, &thread.key.thread_id),
        filter: prepared.filter,
        upstream_headers: prepared.upstream_headers,
    };
    thread
        .start_run(req, agent.strategy)
        .map_err(ApiError::from)?;
    tracing::info!(agent = %agent.id, user = %who.subject, tenant = %who.tenant, "run requested over HTTP");
    state.metrics.runs_started.fetch_add(1, Relaxed);
    Ok(rx)
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

/// The run's events as SSE (`id: <seq>` + `data:`), keepalives while quiet,
/// ending after the terminal event. Dropping the response tells the run its
/// requester left.
fn run_response(state: Arc<AppState>, rx: OutboxReceiver) -> Response {
    let keepalive = state.config.server.keepalive;
    let stream = async_stream(move |tx| async move {
        let mut rx = rx;
        let mut ticker =
            tokio::time::interval_at(tokio::time::Instant::now() + keepalive, keepalive);
        loop {
            let first = tokio::select! {
                item = rx.recv() => item,
                _ = ticker.tick() => {
                    if tx.send(Bytes::from_static(KEEPALIVE)).await.is_err() { break; }
                    continue;
                }
            };
            let Some(first) = first else { break };
            // What is queued goes out as one chunk (one write), not one per event.
            let mut chunk = BytesMut::new();
            let mut item = Some(first);
            let mut ended = false;
            while let Some(next) = item {
                match next {
                    Outgoing::Event(e) => {
                        state.metrics.events_forwarded.fetch_add(1, Relaxed);
                        chunk.extend_from_slice(&super::sse::entry_frame(&e));
                        if e.event.kind().is_terminal() {
                            state.metrics.run_ended(&outcome_label(&e.event));
                            ended = true;
                            break;
                        }
                    }
                    Outgoing::Message(_) => {}
                    Outgoing::Close(..) => {
                        ended = true;
                        break;
                    }
                }
                if chunk.len() >= SSE_CHUNK {
                    break;
                }
                item = rx.try_recv();
            }
            if (!chunk.is_empty() && tx.send(chunk.freeze()).await.is_err()) || ended {
                break;
            }
        }
    });
    sse_response(stream)
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
