//! The A2A face: every gateway agent is an A2A v1.0 agent for A2A clients
//! (docs/a2a.md, "The gateway's agents for A2A clients").
//!
//! - `GET /a2a/{agent}/.well-known/agent-card.json`: its card ([`card`]).
//! - `POST /a2a/{agent}`: JSON-RPC — `SendStreamingMessage` (the task's
//!   events as SSE), `SendMessage` (the finished or paused task),
//!   `CancelTask`.
//!
//! Both take the same bearer tokens as every other route, and an A2A
//! message is an ordinary run ([`commands::run`], or [`commands::resume`]
//! when it answers the thread's pending interrupts): policy, ACLs, limits,
//! the journal and its viewers are those of the AG-UI faces, and people
//! watch and steer the thread like any other. The A2A `contextId` is the
//! thread id (threads are per tenant, so is a context); the task id is
//! `<runId>@<threadId>` of the run that opened the task, so a `CancelTask`
//! finds its thread on any node without a table.

pub mod card;
pub mod message;
pub mod task;

use super::commands::{self, Requester, ResumeCommand, RunCommand};
use super::encode::sse::SSE;
use super::error::{ApiError, ErrorCode};
use super::extract::{Authenticated, read_body};
use super::sse::{Next, pump, stream_response};
use super::state::AppState;
use crate::auth::{Permission, Principal};
use crate::protocol::hooks::RunInput;
use crate::protocol::sse::encode_data;
use crate::thread::branch::BaseRequest;
use crate::thread::fanout::{OutboxReceiver, Outgoing, outbox};
use crate::upstream::Agent;
use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use serde_json::{Value, json};
use std::sync::Arc;
use task::TaskStream;

/// The face's two routes (merged into [`super::router`]).
pub fn routes() -> axum::Router<Arc<AppState>> {
    use axum::routing::{get, post};
    axum::Router::new()
        .route("/a2a/{agent}", post(post_rpc))
        .route("/a2a/{agent}/.well-known/agent-card.json", get(get_card))
}

/// JSON-RPC and A2A error codes the face answers with.
mod codes {
    pub const PARSE: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32603;
    pub const TASK_NOT_FOUND: i64 = -32001;
    pub const TASK_NOT_CANCELABLE: i64 = -32002;
    pub const UNSUPPORTED: i64 = -32004;
    pub const VERSION_NOT_SUPPORTED: i64 = -32009;
}

/// A JSON-RPC error: code, message, and the gateway's stable code in `data`.
#[derive(Debug)]
struct RpcError(i64, String, Option<&'static str>);

impl RpcError {
    /// An error of the protocol itself (no gateway code in `data`).
    fn plain(code: i64, message: impl Into<String>) -> RpcError {
        RpcError(code, message.into(), None)
    }
}

impl From<ApiError> for RpcError {
    fn from(e: ApiError) -> RpcError {
        let code = match e.code {
            ErrorCode::Invalid => codes::INVALID_PARAMS,
            _ => codes::INTERNAL,
        };
        RpcError(code, e.message, Some(e.code.as_str()))
    }
}

fn error_body(id: &Value, e: RpcError) -> Value {
    let mut error = json!({"code": e.0, "message": e.1});
    if let Some(c) = e.2 {
        error["data"] = json!({"code": c});
    }
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

fn result_body(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// `GET /a2a/{agent}/.well-known/agent-card.json`.
pub async fn get_card(
    State(state): State<Arc<AppState>>,
    Path(agent_id): Path<String>,
    Authenticated(who): Authenticated,
    headers: HeaderMap,
) -> Response {
    let agent = match commands::runnable_agent(&state, &who, &agent_id) {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    let base = card::public_base(&headers, state.config.server.tls.is_some());
    Json(card::of(&agent, &format!("{base}/a2a/{}", agent.id))).into_response()
}

/// `POST /a2a/{agent}`: one JSON-RPC request.
pub async fn post_rpc(
    State(state): State<Arc<AppState>>,
    Path(agent_id): Path<String>,
    Authenticated(who): Authenticated,
    request: Request,
) -> Response {
    let agent = match commands::runnable_agent(&state, &who, &agent_id) {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    let version = request
        .headers()
        .get(crate::upstream::a2a::client::VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let traceparent = crate::upstream::trace::from_headers(request.headers()).map(str::to_owned);
    let body = match read_body(request, &state).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let (id, method, params) = match parse(&body, version.as_deref()) {
        Ok(parsed) => parsed,
        Err((id, e)) => return reply(&id, Err(e)),
    };
    let run = Started {
        state: &state,
        who: &who,
        agent: &agent,
        traceparent,
    };
    match method.as_str() {
        "SendStreamingMessage" => match run.start(&params).await {
            Ok((rx, stream)) => streamed(&state, id, rx, stream),
            Err(e) => reply(&id, Err(e)),
        },
        "SendMessage" => {
            let result = match run.start(&params).await {
                Ok((rx, stream)) => Ok(json!({"task": blocking(rx, stream).await})),
                Err(e) => Err(e),
            };
            reply(&id, result)
        }
        "CancelTask" => reply(&id, cancel(&state, &who, &params).await),
        "GetTask"
        | "ListTasks"
        | "SubscribeToTask"
        | "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig"
        | "GetExtendedAgentCard" => reply(
            &id,
            Err(RpcError::plain(
                codes::UNSUPPORTED,
                "not supported by the gateway: read the thread (GET /v1/threads/{contextId}) instead",
            )),
        ),
        other => reply(
            &id,
            Err(RpcError::plain(
                codes::METHOD_NOT_FOUND,
                format!("unknown method '{other}'"),
            )),
        ),
    }
}

/// A request's id, method and params; or the error to answer (with the
/// id, when there was one).
fn parse(body: &[u8], version: Option<&str>) -> Result<(Value, String, Value), (Value, RpcError)> {
    let Ok(rpc @ Value::Object(_)) = serde_json::from_slice::<Value>(body) else {
        let e = RpcError::plain(codes::PARSE, "not a JSON-RPC request object");
        return Err((Value::Null, e));
    };
    // JSON-RPC 2.0: an id is a string, a number or null; a request with
    // any other is invalid, and its answer's id is null (echoing it would
    // answer with an id no client can match, and break the response's own
    // shape).
    let id = match rpc.get("id") {
        None => Value::Null,
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => id.clone(),
        Some(_) => {
            let e = RpcError::plain(
                codes::INVALID_REQUEST,
                "'id' must be a string, a number or null",
            );
            return Err((Value::Null, e));
        }
    };
    // Without the header a client speaks 0.3 by A2A's rule; the a2a-sdk
    // clients send it, and a 1.0 request without it is served the same.
    if let Some(v) = version.filter(|v| v.trim() != "1" && !v.trim().starts_with("1.")) {
        let e = RpcError::plain(
            codes::VERSION_NOT_SUPPORTED,
            format!("A2A version '{v}' is not supported: this agent speaks 1.0"),
        );
        return Err((id, e));
    }
    let Some(method) = rpc.get("method").and_then(Value::as_str) else {
        return Err((
            id,
            RpcError::plain(codes::INVALID_REQUEST, "'method' is required"),
        ));
    };
    let params = rpc.get("params").cloned().unwrap_or(Value::Null);
    Ok((id, method.to_owned(), params))
}

fn reply(id: &Value, result: Result<Value, RpcError>) -> Response {
    let body = match result {
        Ok(r) => result_body(id, r),
        Err(e) => error_body(id, e),
    };
    Json(body).into_response()
}

/// What starting a run from an A2A message needs.
struct Started<'a> {
    state: &'a AppState,
    who: &'a Principal,
    agent: &'a Arc<Agent>,
    traceparent: Option<String>,
}

impl Started<'_> {
    /// Starts the run (or resume) the message asks for; the receiver gets
    /// its events as the thread journals them.
    async fn start(&self, params: &Value) -> Result<(OutboxReceiver, TaskStream), RpcError> {
        let invalid = |m: &str| RpcError(codes::INVALID_PARAMS, m.into(), Some("invalid"));
        let msg = params
            .get("message")
            .filter(|m| m.is_object())
            .ok_or_else(|| invalid("params.message is required"))?;
        let context_id = match msg.get("contextId").and_then(Value::as_str) {
            Some(c) if !c.is_empty() => c.to_owned(),
            _ => format!("a2a-{}", uuid::Uuid::new_v4()),
        };
        let run_id = format!("a2a-{}", uuid::Uuid::new_v4());
        let pending = self.pending_interrupts(&context_id).await;
        let given_task = msg
            .get("taskId")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty());
        let (starter, rx) = outbox(self.state.config.threads.viewer_queue_bytes);
        let requester = Requester::Feed(starter);
        let task_id = match given_task {
            // An answer to the task that asked for input: a resume of the
            // thread's pending interrupts, the task goes on.
            Some(task) if !pending.is_empty() => {
                let answer = message::answer(msg);
                let entries: Vec<Value> = pending
                    .iter()
                    .map(|i| json!({"interruptId": i, "status": "resolved", "payload": answer}))
                    .collect();
                let cmd = ResumeCommand {
                    thread_id: context_id.clone(),
                    agent_id: Some(self.agent.id.clone()),
                    run_id,
                    input: incremental(Vec::new(), Some(Value::Array(entries))),
                };
                commands::resume(self.state, self.who, cmd, requester).await?;
                task.to_owned()
            }
            _ => {
                let user = message::user_message(msg).map_err(|e| invalid(&e))?;
                let task = format!("{run_id}@{context_id}");
                let cmd = RunCommand {
                    agent: self.agent.clone(),
                    thread_id: context_id.clone(),
                    run_id,
                    input: incremental(vec![user], None),
                    strategy: None,
                    traceparent: self.traceparent.clone(),
                    base: BaseRequest::Head,
                };
                commands::run(self.state, self.who, cmd, requester).await?;
                task
            }
        };
        tracing::info!(agent = %self.agent.id, user = %self.who.subject, tenant = %self.who.tenant, "run requested over A2A");
        Ok((rx, TaskStream::new(&task_id, &context_id)))
    }

    /// The ids of the thread's pending interrupts (none for a new thread or
    /// one the caller may not see: the run then decides).
    async fn pending_interrupts(&self, thread_id: &str) -> Vec<String> {
        let Ok(thread) =
            super::access::thread_for(self.state, self.who, thread_id, Permission::View, false)
                .await
        else {
            return Vec::new();
        };
        thread.refresh().await;
        let snap = thread.snapshot(&super::access::visibility_on(self.state, self.who, &thread));
        snap.get("interrupts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|i| i.get("id").and_then(Value::as_str).map(str::to_owned))
            .collect()
    }
}

fn incremental(messages: Vec<Value>, resume: Option<Value>) -> RunInput {
    RunInput::Incremental {
        messages,
        tools: Vec::new(),
        context: Vec::new(),
        state: None,
        forwarded_props: None,
        resume,
    }
}

/// One JSON-RPC response as an SSE frame.
fn frame(id: &Value, result: Value, out: &mut BytesMut) {
    encode_data(result_body(id, result).to_string().as_bytes(), None, out);
}

/// `SendStreamingMessage`: the task, then its updates as the run goes,
/// ending with the state that ends or pauses it.
fn streamed(state: &AppState, id: Value, rx: OutboxReceiver, mut stream: TaskStream) -> Response {
    let mut first = BytesMut::new();
    frame(&id, stream.submitted(), &mut first);
    let counted = crate::metrics::metrics().connection("a2a");
    let updates = pump(rx, &SSE, state.config.server.keepalive, move |item, out| {
        let _counted = &counted;
        let results = match item {
            Some(Outgoing::Continues) => {
                stream.continues();
                return Next::More;
            }
            Some(Outgoing::Event(e)) => stream.event(&e.event),
            Some(_) => return Next::More,
            // The run's feed closed before its end (it should not).
            None => stream.event(&crate::protocol::event::run_error(
                "incomplete",
                "the run's stream ended early",
            )),
        };
        for r in results {
            frame(&id, r, out);
        }
        if stream.done() { Next::End } else { Next::More }
    });
    let body =
        futures::stream::once(async move { Ok::<Bytes, std::convert::Infallible>(first.freeze()) })
            .chain(updates);
    stream_response(&SSE, body)
}

/// `SendMessage`: waits for the task to end or pause, returns it whole.
async fn blocking(mut rx: OutboxReceiver, mut stream: TaskStream) -> Value {
    let mut results = vec![stream.submitted()];
    while !stream.done() {
        match rx.recv().await {
            Some(Outgoing::Continues) => stream.continues(),
            Some(Outgoing::Event(e)) => results.extend(stream.event(&e.event)),
            Some(_) => {}
            None => {
                let end =
                    crate::protocol::event::run_error("incomplete", "the run's stream ended early");
                results.extend(stream.event(&end));
            }
        }
    }
    task::fold(&results)
}

/// `CancelTask`: cancels the active run of the task's thread.
async fn cancel(state: &AppState, who: &Principal, params: &Value) -> Result<Value, RpcError> {
    let task = params.get("id").and_then(Value::as_str).unwrap_or("");
    let Some((_, thread_id)) = task.split_once('@') else {
        return Err(RpcError(
            codes::TASK_NOT_FOUND,
            format!("no task '{task}'"),
            None,
        ));
    };
    match commands::cancel(state, who, thread_id, None).await {
        Ok(_) => {
            Ok(json!({"id": task, "contextId": thread_id, "status": {"state": task::CANCELED}}))
        }
        Err(e) if e.code == ErrorCode::Conflict => Err(RpcError(
            codes::TASK_NOT_CANCELABLE,
            e.message,
            Some("conflict"),
        )),
        Err(e) if e.code == ErrorCode::NotFound => Err(RpcError(
            codes::TASK_NOT_FOUND,
            e.message,
            Some("not_found"),
        )),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    /// Found by schemathesis: an array id was echoed into the answer.
    #[test]
    fn a_request_whose_id_is_not_a_string_number_or_null_is_invalid_and_answered_with_null() {
        for id in [json!([]), json!({}), json!(true)] {
            let body = json!({"jsonrpc": "2.0", "id": id, "method": "SendMessage"}).to_string();
            let (answer_id, e) = super::parse(body.as_bytes(), Some("1.0")).expect_err("invalid");
            assert_eq!(answer_id, Value::Null);
            assert_eq!(e.0, super::codes::INVALID_REQUEST);
        }
        for id in [json!("a"), json!(7), json!(1.5), Value::Null] {
            let body = json!({"jsonrpc": "2.0", "id": id, "method": "SendMessage"}).to_string();
            let (answer_id, ..) = super::parse(body.as_bytes(), Some("1.0")).expect("valid");
            assert_eq!(answer_id, id);
        }
    }
}
