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
    crate::policy::rate::check(
        &state.policy().rates,
        crate::policy::rate::Action::Meta,
        who,
        "",
        thread_id,
    )?;
    let (event_id, entry) = thread
        .append_meta(&who.subject, meta_type, payload, client_event_id)
        .await;
    if let (Some(entry), Some(url)) = (&entry, &cfg.webhook_url) {
        let body = json!({
            "tenant": who.tenant,
            "threadId": thread_id,
            "seq": entry.seq,
            "event": entry.event.body(),
        });
        tokio::spawn(deliver(
            url.clone(),
            cfg.webhook_headers.clone(),
            cfg.webhook_attempts,
            body,
        ));
    }
    let mut ack = Map::new();
    ack.insert("threadId".into(), thread_id.into());
    ack.insert("eventId".into(), event_id.into());
    ack.insert("duplicate".into(), entry.is_none().into());
    Ok(ack)
}

/// Posts one meta event to the analytics webhook, retrying non-2xx answers
/// and connection errors with exponential backoff; gives up after `attempts`.
async fn deliver(
    url: String,
    headers: std::collections::BTreeMap<String, String>,
    attempts: u32,
    body: Value,
) {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    let client = CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .expect("HTTP client builds")
    });
    let mut delay = std::time::Duration::from_millis(200);
    for attempt in 1..=attempts.max(1) {
        let mut req = client.post(&url).json(&body);
        for (k, v) in &headers {
            if let Ok(v) = crate::config::expand_env(v) {
                req = req.header(k, v);
            }
        }
        match req.send().await {
            Ok(r) if r.status().is_success() => return,
            Ok(r) => tracing::warn!(
                attempt,
                status = r.status().as_u16(),
                "meta webhook refused the event"
            ),
            Err(e) => tracing::warn!(attempt, "meta webhook unreachable: {}", e.without_url()),
        }
        if attempt < attempts {
            tokio::time::sleep(delay).await;
            delay *= 2;
        }
    }
    tracing::error!(seq = %body["seq"], "meta webhook: event dropped after {attempts} attempts");
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
