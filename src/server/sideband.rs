//! Side-band commands, the same over WebSocket and HTTP: meta events
//! (feedback, notes, tags) and cancel. Resume is a run (see `thread::run`).

use super::AppState;
use super::access::{AccessError, thread_for};
use super::error::{ApiError, ErrorCode};
use super::http::{authenticate, read_body};
use crate::auth::{Permission, Principal};
use axum::Json;
use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// Posts a META event: checks `meta` permission, the type allow-list and
/// payload size; `payload.userId` is always the caller. Returns the ack fields.
pub async fn meta(
    state: &AppState,
    who: &Principal,
    thread_id: &str,
    cmd: &Value,
) -> Result<Map<String, Value>, ApiError> {
    let invalid = |m: &str| ApiError::new(ErrorCode::Invalid, m);
    let meta_type = cmd
        .get("metaType")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| invalid("'metaType' must be a non-empty string"))?;
    let cfg = &state.config.meta;
    if !cfg.allowed_types.is_empty() && !cfg.allowed_types.iter().any(|t| t == meta_type) {
        return Err(ApiError::new(
            ErrorCode::Invalid,
            format!(
                "metaType '{meta_type}' is not allowed (allowed: {})",
                cfg.allowed_types.join(", ")
            ),
        ));
    }
    let payload = match cmd.get("payload") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(invalid("'payload' must be an object")),
    };
    let size = serde_json::to_vec(&payload)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if size > cfg.max_payload_bytes {
        return Err(ApiError::new(
            ErrorCode::TooLarge,
            format!(
                "payload is {size} bytes; the limit is {}",
                cfg.max_payload_bytes
            ),
        ));
    }
    let client_event_id = match cmd.get("clientEventId") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 128 => Some(s.clone()),
        Some(_) => {
            return Err(invalid(
                "'clientEventId' must be a string of 1-128 characters",
            ));
        }
    };
    let thread = thread_for(state, who, thread_id, Permission::Meta, false)
        .await
        .map_err(AccessError::into_api)?;
    let (event_id, duplicate) = thread
        .append_meta(&who.subject, meta_type, payload, client_event_id)
        .await;
    let mut ack = Map::new();
    ack.insert("threadId".into(), thread_id.into());
    ack.insert("eventId".into(), event_id.into());
    ack.insert("duplicate".into(), duplicate.into());
    Ok(ack)
}

/// Cancels the thread's active run (only `run_id`'s when given). Returns the ack fields.
pub async fn cancel(
    state: &AppState,
    who: &Principal,
    thread_id: &str,
    run_id: Option<&str>,
) -> Result<Map<String, Value>, ApiError> {
    let thread = thread_for(state, who, thread_id, Permission::Cancel, false)
        .await
        .map_err(AccessError::into_api)?;
    let cancelled = thread.cancel_run(run_id).ok_or_else(|| {
        ApiError::new(
            ErrorCode::Conflict,
            match run_id {
                Some(r) => format!("run '{r}' is not the active run"),
                None => "no active run".into(),
            },
        )
    })?;
    let mut ack = Map::new();
    ack.insert("threadId".into(), thread_id.into());
    ack.insert("runId".into(), cancelled.into());
    Ok(ack)
}

async fn json_body(state: &AppState, request: Request) -> Result<Value, ApiError> {
    let body = read_body(request, state.config.server.max_body_bytes).await?;
    if body.is_empty() {
        return Ok(json!({}));
    }
    match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => Ok(v),
        _ => Err(ApiError::new(
            ErrorCode::Invalid,
            "body must be a JSON object",
        )),
    }
}

/// `POST /v1/threads/{threadId}/meta`: `{metaType, payload, clientEventId?}`.
pub async fn post_meta(
    State(state): State<Arc<AppState>>,
    Path(thread_id): Path<String>,
    request: Request,
) -> Response {
    let result = async {
        let who = authenticate(&state, request.headers()).await?;
        let body = json_body(&state, request).await?;
        meta(&state, &who, &thread_id, &body).await
    }
    .await;
    match result {
        Ok(ack) => Json(Value::Object(ack)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `POST /v1/threads/{threadId}/cancel`: `{runId?}`.
pub async fn post_cancel(
    State(state): State<Arc<AppState>>,
    Path(thread_id): Path<String>,
    request: Request,
) -> Response {
    let result = async {
        let who = authenticate(&state, request.headers()).await?;
        let body = json_body(&state, request).await?;
        let run_id = match body.get("runId") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                return Err(ApiError::new(
                    ErrorCode::Invalid,
                    "'runId' must be a string",
                ));
            }
        };
        cancel(&state, &who, &thread_id, run_id.as_deref()).await
    }
    .await;
    match result {
        Ok(ack) => Json(Value::Object(ack)).into_response(),
        Err(e) => e.into_response(),
    }
}
