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
use serde_json::{Map, Value, json};
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
    let notes = snap.get("meta").and_then(Value::as_object);
    let out = match format {
        "ai-sdk" => {
            let out = ai_sdk::ui_messages(&messages, &interrupts, &speakers(&thread));
            with_meta(out, &messages, notes, "meta")
        }
        "agentscope" => {
            let agent = thread.meta().agent.unwrap_or_else(|| "assistant".into());
            let out = agentscope::msgs(&messages, &interrupts, &agent, &speakers(&thread));
            with_meta(out, &messages, notes, "agui_meta")
        }
        _ => messages,
    };
    Json(
        json!({"threadId": thread_id, "format": format, "seq": snap.get("seq"),
        "messages": out}),
    )
    .into_response()
}

/// Puts each message's meta events (the snapshot's `meta`: `{id, metaType,
/// by, at, payload?}`, `by` who posted it) in its `metadata` under `key`.
/// AG-UI messages have no metadata: the `ag-ui` export leaves them as they
/// are (the snapshot has `meta`).
fn with_meta(
    mut out: Vec<Value>,
    messages: &[Value],
    notes: Option<&Map<String, Value>>,
    key: &str,
) -> Vec<Value> {
    let Some(notes) = notes else { return out };
    for (agui, at) in exported_as(&out, messages) {
        let (Some(list), Some(m)) = (notes.get(agui), out.get_mut(at)) else {
            continue;
        };
        if !m.get("metadata").is_some_and(Value::is_object) {
            m["metadata"] = json!({});
        }
        let kept = m["metadata"][key].as_array_mut();
        match kept {
            Some(kept) => kept.extend(list.as_array().into_iter().flatten().cloned()),
            None => m["metadata"][key] = list.clone(),
        }
    }
    out
}

/// Which exported message each AG-UI message went into: the one with its
/// id, else (an answer's assistant, tool and reasoning messages are merged
/// into one exported message named after the question) the first
/// non-user message after the last one matched by id.
fn exported_as<'a>(out: &[Value], messages: &'a [Value]) -> Vec<(&'a str, usize)> {
    let id_of = |m: &Value| m.get("id").and_then(Value::as_str).map(str::to_owned);
    let mut at: Option<usize> = None;
    let mut found = Vec::new();
    for m in messages {
        let Some(id) = m.get("id").and_then(Value::as_str) else {
            continue;
        };
        let exact = out.iter().position(|o| id_of(o).as_deref() == Some(id));
        let target = exact.or_else(|| {
            let from = at.map_or(0, |a| a + usize::from(out[a]["role"] == "user"));
            (from..out.len()).find(|&i| out[i]["role"] != "user")
        });
        if let Some(t) = target {
            at = Some(t);
            found.push((id, t));
        }
    }
    found
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
