//! `GET /v1/threads/{threadId}/messages?format=ag-ui|ai-sdk|agentscope`:
//! the thread's conversation, folded from the journal, as the caller may see
//! it (the snapshot's policy visibility and redaction), in another
//! framework's message shape (conversions in [`crate::protocol::export`],
//! rules in `docs/exports.md`).

use super::access::{AccessError, thread_for, visibility_on};
use super::error::{ApiError, ErrorCode};
use super::extract::Authenticated;
use super::state::AppState;
use crate::auth::Permission;
use crate::protocol::export::{Speakers, agentscope, ai_sdk};
use crate::thread::Thread;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

/// Query of the export route.
#[derive(Debug, Deserialize)]
pub struct ExportQuery {
    format: Option<String>,
    /// The conversation at the end of this run (default: the head).
    #[serde(rename = "runId")]
    run_id: Option<String>,
}

/// The export formats.
pub const FORMATS: &[&str] = &["ag-ui", "ai-sdk", "agentscope"];

/// `GET /v1/threads/{threadId}/messages`: `{threadId, format, seq,
/// messages}`, `messages` in the asked format (default `ag-ui`).
pub async fn messages(
    State(state): State<Arc<AppState>>,
    Path(thread_id): Path<String>,
    Query(q): Query<ExportQuery>,
    Authenticated(who): Authenticated,
) -> Response {
    let format = q.format.as_deref().unwrap_or("ag-ui");
    if !FORMATS.contains(&format) {
        return ApiError::new(
            ErrorCode::Invalid,
            format!("unknown format '{format}' (one of: {})", FORMATS.join(", ")),
        )
        .into_response();
    }
    let thread = match thread_for(&state, &who, &thread_id, Permission::View, false).await {
        Ok(t) => t,
        Err(e) => return AccessError::into_api(e).into_response(),
    };
    let snap = match thread.snapshot_at(q.run_id.as_deref(), &visibility_on(&state, &who, &thread))
    {
        Ok(snap) => snap,
        Err(refused) => return ApiError::from(refused).into_response(),
    };
    let list = |k: &str| {
        snap.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (messages, interrupts) = (list("messages"), list("interrupts"));
    let out = match format {
        "ai-sdk" => ai_sdk::ui_messages(&messages, &interrupts, &speakers(&thread)),
        "agentscope" => {
            let agent = thread.meta().agent.unwrap_or_else(|| "assistant".into());
            agentscope::msgs(&messages, &interrupts, &agent, &speakers(&thread))
        }
        _ => messages,
    };
    Json(
        json!({"threadId": thread_id, "format": format, "seq": snap.get("seq"),
        "messages": out}),
    )
    .into_response()
}

/// Which agent produced each message, from the thread's run table (one
/// page at a time: the table is bounded, a page is a cheap copy of ids).
fn speakers(thread: &Thread) -> Speakers {
    const PAGE: usize = 500;
    let mut speakers = Speakers::default();
    let mut cursor = Some(0);
    while let Some(at) = cursor {
        let page = thread.runs_page(at, PAGE);
        speakers.note_runs(page["runs"].as_array().into_iter().flatten());
        cursor = page["nextCursor"].as_u64().map(|n| n as usize);
    }
    speakers
}
