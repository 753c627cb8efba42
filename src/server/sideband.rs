//! Side-band commands over HTTP: meta events (feedback, notes, tags) and
//! cancel, the same [`commands`] as the WebSocket's, their ack fields
//! answered as a JSON object.

use super::commands;
use super::error::ApiError;
use super::extract::{Authenticated, JsonObject};
use super::fields::opt_str;
use super::state::AppState;
use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};
use std::sync::Arc;

/// `POST /v1/threads/{threadId}/meta`: `{metaType, payload, clientEventId?}`.
pub async fn post_meta(
    State(state): State<Arc<AppState>>,
    Path(thread_id): Path<String>,
    Authenticated(who): Authenticated,
    JsonObject(body): JsonObject,
) -> Response {
    answer(commands::meta(&state, &who, &thread_id, &body).await)
}

/// `POST /v1/threads/{threadId}/cancel`: `{runId?}`.
pub async fn post_cancel(
    State(state): State<Arc<AppState>>,
    Path(thread_id): Path<String>,
    Authenticated(who): Authenticated,
    JsonObject(body): JsonObject,
) -> Response {
    let result = async {
        let run_id = opt_str(&body, "runId")?;
        commands::cancel(&state, &who, &thread_id, run_id).await
    };
    answer(result.await)
}

/// `POST /v1/threads/{thread}/agent` `{agent}`: switches the thread's
/// active agent for its next plain run.
pub async fn post_agent(
    State(state): State<Arc<AppState>>,
    Path(thread_id): Path<String>,
    Authenticated(who): Authenticated,
    JsonObject(body): JsonObject,
) -> Response {
    let result = async {
        let agent = opt_str(&body, "agent")?.ok_or_else(|| {
            ApiError::new(super::error::ErrorCode::Invalid, "'agent' is required")
        })?;
        commands::switch_agent(&state, &who, &thread_id, agent).await
    };
    answer(result.await)
}

/// A command's ack fields as the JSON answer, or its error.
fn answer(result: Result<Map<String, Value>, ApiError>) -> Response {
    match result {
        Ok(ack) => Json(Value::Object(ack)).into_response(),
        Err(e) => e.into_response(),
    }
}
