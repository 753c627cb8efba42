//! The Vercel AI SDK face: `POST /v1/agents/{agent}/chat` takes what the AI
//! SDK's `DefaultChatTransport` sends (`id` = thread, `messages:
//! UIMessage[]`, `trigger`, `messageId`, body extras) and answers with the UI
//! message stream protocol `v1` (SSE, `x-vercel-ai-ui-message-stream: v1`,
//! ending with `data: [DONE]`); `GET /v1/agents/{agent}/chat/{id}/stream`
//! is the transport's reconnect (204 when no run is active, else the active
//! run's stream from its start, read from the journal).
//!
//! A chat request is an ordinary run: [`commands::run`] (or
//! [`commands::resume`] for approval answers) with this response as the
//! requester's outbox, so policy, ACLs, journal and fan-out are those of the
//! AG-UI faces, and a WebSocket viewer of the thread sees the run as AG-UI
//! events. Only the newest UIMessage reaches the run; the history is the
//! thread's. The translation is [`crate::protocol::export::ui_stream`].
//!
//! `ai` 5, 6 and 7 speak the same protocol `v1` but not the same chunks: 5
//! refuses `tool-approval-request` (the whole chat goes to error), and the
//! transport sends nothing that tells the versions apart. So the stream is
//! what every version accepts unless the client says, with the
//! [`VERSION_HEADER`] header, that it runs 6 or later.

use super::access::{AccessError, thread_for, visibility_on};
use super::commands::{self, Requester, ResumeCommand, RunCommand};
use super::encode::sse::SSE;
use super::error::{ApiError, ErrorCode};
use super::extract::{Authenticated, read_body};
use super::sse::{Next, pump, stream_response};
use super::state::AppState;
use crate::auth::{Permission, Principal};
use crate::protocol::export::ai_sdk::{ChatTurn, answer_id, chat_turn};
use crate::protocol::export::ui_stream::UiStream;
use crate::protocol::hooks::RunInput;
use crate::protocol::sse::encode_data;
use crate::thread::branch::BaseRequest;
use crate::thread::fanout::{OutboxReceiver, Outgoing, outbox};
use crate::thread::{Start, Thread};
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The header that tells the AI SDK which stream protocol the body speaks.
pub const STREAM_HEADER: &str = "x-vercel-ai-ui-message-stream";

/// The request header in which a client names the major version of `ai` it
/// runs (`5`, `6`, `7`…); 6 and later also get `tool-approval-request`.
pub const VERSION_HEADER: &str = "x-ai-sdk-version";

/// Whether the client accepts `tool-approval-request` chunks, from
/// [`VERSION_HEADER`] (absent: no, the chunks every version accepts).
fn approval_requests(headers: &axum::http::HeaderMap) -> Result<bool, ApiError> {
    let Some(v) = headers.get(VERSION_HEADER) else {
        return Ok(false);
    };
    let major = v
        .to_str()
        .ok()
        .and_then(|s| s.trim().split('.').next()?.parse::<u32>().ok())
        .filter(|m| *m >= 5)
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::Invalid,
                format!("'{VERSION_HEADER}' must be the major version of the AI SDK (`ai`) the client runs: 5, 6, 7…"),
            )
        })?;
    Ok(major >= 6)
}

/// Body fields of a chat request that are not passed on as `forwardedProps`.
const CHAT_FIELDS: &[&str] = &[
    "id",
    "messages",
    "trigger",
    "messageId",
    "tools",
    "context",
    "resume",
];

/// `POST /v1/agents/{agent}/chat`.
pub async fn chat(
    State(state): State<Arc<AppState>>,
    Path(agent_id): Path<String>,
    Authenticated(who): Authenticated,
    request: Request,
) -> Response {
    match start_chat(&state, &who, &agent_id, request).await {
        Ok((rx, translator, metas)) => chat_response(&state, rx, translator, (None, metas)),
        Err(e) => e.into_response(),
    }
}

/// Checks the agent (unread body when it is unknown or forbidden), reads the
/// request and starts the run or resume it asks for.
async fn start_chat(
    state: &AppState,
    who: &Principal,
    agent_id: &str,
    request: Request,
) -> Result<(OutboxReceiver, UiStream, Option<MetaGuard>), ApiError> {
    let agent = commands::runnable_agent(state, who, agent_id)?;
    let approvals = approval_requests(request.headers())?;
    let traceparent = crate::upstream::trace::from_headers(request.headers()).map(str::to_owned);
    let body = read_body(request, state).await?;
    let invalid = |m: String| ApiError::new(ErrorCode::Invalid, m);
    let body: Map<String, Value> = serde_json::from_slice(&body)
        .map_err(|e| invalid(format!("the chat request must be a JSON object: {e}")))?;
    let thread_id = body
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("'id' (the chat id, used as threadId) must be a string".into()))?
        .to_owned();
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| invalid("'messages' must be a non-empty array of UIMessages".into()))?;
    match body.get("trigger").and_then(Value::as_str) {
        None | Some("submit-message" | "regenerate-message") => {}
        Some(other) => {
            return Err(invalid(format!(
                "'trigger' must be 'submit-message' or 'regenerate-message', not '{other}'"
            )));
        }
    }
    let regenerate = body.get("trigger").and_then(Value::as_str) == Some("regenerate-message");
    let last = messages.last().unwrap_or(&Value::Null);
    // The thread as the caller sees it before the run: the run's state
    // deltas apply to its state, its messages are not sent again, and its
    // pending interrupts are what tool outputs in the request may answer.
    let before = match thread_for(state, who, &thread_id, Permission::View, false).await {
        Ok(t) => Value::Object(t.snapshot(&visibility_on(state, who, &t))),
        Err(_) => json!({}),
    };
    let pending = before["interrupts"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    // An explicit `resume` (answers to `data-interrupt` parts) wins.
    let turn = match body.get("resume") {
        Some(Value::Array(entries)) if !entries.is_empty() => ChatTurn::Approvals(entries.clone()),
        Some(Value::Array(_)) | Some(Value::Null) | None => {
            chat_turn(last, pending).map_err(|e| invalid(format!("messages[-1]: {e}")))?
        }
        Some(_) => return Err(invalid("'resume' must be an array of ResumeEntry".into())),
    };
    let array = |k: &str| -> Result<Vec<Value>, ApiError> {
        match body.get(k) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(a)) => Ok(a.clone()),
            Some(_) => Err(invalid(format!("'{k}' must be an array"))),
        }
    };
    let extras: Map<String, Value> = body
        .iter()
        .filter(|(k, _)| !CHAT_FIELDS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let forwarded_props = (!extras.is_empty()).then_some(Value::Object(extras));
    let run_id = format!("aisdk-{}", uuid::Uuid::new_v4());
    // Who the response's metadata names: the caller started it, or answered
    // the interrupts it continues from.
    let mut answered = false;
    let by_run = run_id.clone();
    let (starter, rx) = outbox(state.config.threads.viewer_queue_bytes);
    let listener = starter.clone();
    let chat_thread = thread_id.clone();
    let requester = Requester::Feed(starter);
    // The tool calls of the message an approval's answer continues.
    let mut open_calls = Vec::new();
    let message_id = match turn {
        ChatTurn::User(message) => {
            // The answer is named after the question, as in the export.
            let answer = message["id"].as_str().map(answer_id);
            serde_json::from_value::<crate::protocol::input::Message>(message.clone())
                .map_err(|e| invalid(format!("messages[-1]: {e}")))?;
            let base = chat_base(regenerate, &message, &before);
            let cmd = RunCommand {
                agent: agent.clone(),
                thread_id,
                run_id,
                input: RunInput::Incremental {
                    messages: vec![message],
                    tools: array("tools")?,
                    context: array("context")?,
                    state: None,
                    forwarded_props,
                    resume: None,
                },
                strategy: None,
                traceparent,
                base,
            };
            commands::run(state, who, cmd, requester).await?;
            answer
        }
        ChatTurn::Approvals(entries) => {
            answered = true;
            let cmd = ResumeCommand {
                thread_id,
                agent_id: Some(agent.id.clone()),
                run_id,
                input: RunInput::Incremental {
                    messages: Vec::new(),
                    tools: array("tools")?,
                    context: array("context")?,
                    state: None,
                    forwarded_props,
                    resume: Some(Value::Array(entries)),
                },
            };
            commands::resume(state, who, cmd, requester).await?;
            if last["role"] == "assistant" {
                open_calls = tool_calls_of(last);
            }
            // The answer continues the assistant message that asked.
            (last["role"] == "assistant")
                .then(|| last["id"].as_str().map(str::to_owned))
                .flatten()
        }
    };
    tracing::info!(agent = %agent.id, user = %who.subject, tenant = %who.tenant, "run requested over the AI SDK chat face");
    let mut translator = UiStream::new(message_id)
        .with_approval_requests(approvals)
        .with_agent(&agent.id)
        .with_open_calls(open_calls);
    translator = if answered {
        translator.with_answer(&by_run, &who.subject)
    } else {
        translator.with_started_by(&who.subject)
    };
    translator.before_run_snapshot(&before);
    // Meta events posted while the stream is open reach it (`data-meta`).
    let metas = match thread_for(state, who, &chat_thread, Permission::View, false).await {
        Ok(thread) => {
            let id = state.next_connection_id();
            thread.listen_meta(id, listener, visibility_on(state, who, &thread));
            Some(MetaGuard { thread, id })
        }
        Err(_) => None,
    };
    Ok((rx, translator, metas))
}

/// The tool calls (id, tool name) of a `UIMessage`'s tool parts.
fn tool_calls_of(message: &Value) -> Vec<(String, String)> {
    let parts = message["parts"].as_array().into_iter().flatten();
    parts
        .filter_map(|p| {
            let kind = p["type"].as_str()?;
            let name = match kind.strip_prefix("tool-") {
                Some(name) => name,
                None if kind == "dynamic-tool" => p["toolName"].as_str()?,
                None => return None,
            };
            Some((p["toolCallId"].as_str()?.to_owned(), name.to_owned()))
        })
        .collect()
}

/// One UI message stream chunk as an SSE frame.
fn chunk_frame(chunk: &Value, out: &mut BytesMut) {
    encode_data(chunk.to_string().as_bytes(), None, out);
}

/// The run's events as a UI message stream: chunks as the events come,
/// `data: [DONE]` after the terminal event. `skip_to` (reconnect) skips the
/// thread's events before that run's `RUN_STARTED`.
fn chat_response(
    state: &AppState,
    rx: OutboxReceiver,
    mut translator: UiStream,
    (guard, metas): (Option<ViewerGuard>, Option<MetaGuard>),
) -> Response {
    let keepalive = state.config.server.keepalive;
    let metrics = crate::metrics::metrics();
    let events_out = metrics.events_out_counter("ai-sdk");
    let counted = metrics.connection("ai-sdk");
    let mut skip_to = guard.as_ref().map(|g| g.run_id.clone());
    // The UI message stream is SSE: the AG-UI SSE encoder gives the
    // keepalive comment; the frames are this translator's.
    let stream = pump(rx, &SSE, keepalive, move |item, out| {
        let (_counted, _guard, _metas) = (&counted, &guard, &metas);
        let Some(item) = item else {
            // The run handed over but the next one never started: the
            // message still ends.
            let closing = translator.close();
            if !closing.is_empty() {
                closing.iter().for_each(|c| chunk_frame(c, out));
                out.extend_from_slice(b"data: [DONE]\n\n");
            }
            return Next::End;
        };
        {
            match item {
                // The run hands the thread over: the next agent's run goes
                // on in this message (see `UiStream::continues`).
                Outgoing::Continues => translator.continues(),
                Outgoing::Event(e) => {
                    if let Some(run) = &skip_to {
                        if e.event.kind() != &crate::protocol::EventType::RunStarted
                            || e.event.str_field("runId") != Some(run)
                        {
                            // History: the state and messages before the run.
                            translator.before_run(&e.event);
                            return Next::More;
                        }
                        skip_to = None;
                    }
                    events_out.inc();
                    for c in translator.event(&e.event) {
                        chunk_frame(&c, out);
                    }
                }
                Outgoing::Message(m) if skip_to.is_some() => {
                    // A compacted journal starts with a snapshot: the run's
                    // start is gone, follow it from here.
                    if let Ok(v) = serde_json::from_slice::<Value>(&m)
                        && v["type"] == "snapshot"
                    {
                        skip_to = None;
                        translator.before_run_snapshot(&v);
                        for c in translator.open() {
                            chunk_frame(&c, out);
                        }
                    }
                }
                _ => {}
            }
            if translator.done() {
                out.extend_from_slice(b"data: [DONE]\n\n");
                Next::End
            } else {
                Next::More
            }
        }
    });
    let mut resp = stream_response(&SSE, stream);
    resp.headers_mut()
        .insert(STREAM_HEADER, HeaderValue::from_static("v1"));
    resp
}

/// `GET /v1/agents/{agent}/chat/{id}/stream`: the AI SDK's reconnect. 204
/// when the thread has no active run (or does not exist, or is not visible:
/// a new chat reconnects before its first message), else the active run's
/// UI message stream from its start.
pub async fn reconnect(
    State(state): State<Arc<AppState>>,
    Path((agent_id, thread_id)): Path<(String, String)>,
    Authenticated(who): Authenticated,
    headers: axum::http::HeaderMap,
) -> Response {
    if let Err(e) = commands::runnable_agent(&state, &who, &agent_id) {
        return e.into_response();
    }
    let approvals = match approval_requests(&headers) {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    let thread = match thread_for(&state, &who, &thread_id, Permission::View, false).await {
        Ok(t) => t,
        Err(AccessError::NotFound) => return StatusCode::NO_CONTENT.into_response(),
        Err(e) => return e.into_api().into_response(),
    };
    thread.refresh().await;
    let Some(run_id) = thread.open_run() else {
        return StatusCode::NO_CONTENT.into_response();
    };
    let visibility = visibility_on(&state, &who, &thread);
    let (ob, rx) = outbox(state.config.threads.viewer_queue_bytes);
    let viewer = state.next_connection_id();
    // From the start: the events before the run tell the translator the
    // state and messages the run starts from (`UiStream::before_run`).
    thread.subscribe(viewer, ob, Start::After(0), visibility);
    let guard = ViewerGuard {
        thread,
        viewer,
        run_id,
    };
    let translator = UiStream::new(None).with_approval_requests(approvals);
    chat_response(&state, rx, translator, (Some(guard), None))
}

/// Stops a chat stream's meta listener when the stream ends.
struct MetaGuard {
    thread: Arc<Thread>,
    id: u64,
}

impl Drop for MetaGuard {
    fn drop(&mut self) {
        self.thread.stop_meta(self.id);
    }
}

/// Unsubscribes a reconnected reader when its stream ends.
struct ViewerGuard {
    thread: Arc<Thread>,
    viewer: u64,
    run_id: String,
}

impl Drop for ViewerGuard {
    fn drop(&mut self) {
        self.thread.unsubscribe(self.viewer);
        self.thread.viewer_left();
    }
}

/// Where a chat turn starts from. The AI SDK cuts its own list before it
/// sends: `regenerate-message` ends on the question whose answer is to be
/// replaced (a sibling of the run that answered it), and a `submit-message`
/// whose user message reuses a known id with new text is an edit. Either
/// way the agent no longer sees the replaced answer.
fn chat_base(regenerate: bool, message: &Value, before: &Value) -> BaseRequest {
    let id = message.get("id").and_then(Value::as_str);
    if regenerate {
        return BaseRequest::Regenerate(id.map(str::to_owned));
    }
    let known = id.and_then(|id| {
        before["messages"]
            .as_array()?
            .iter()
            .find(|m| m.get("id").and_then(Value::as_str) == Some(id))
    });
    match (id, known) {
        (Some(id), Some(known)) if known.get("content") != message.get("content") => {
            BaseRequest::Edit {
                message_id: id.to_owned(),
                message: message.clone(),
            }
        }
        _ => BaseRequest::Head,
    }
}
