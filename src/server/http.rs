//! HTTP routes: the AG-UI-compatible run endpoint, the agent list, health
//! and metrics.
//!
//! `POST /v1/agents/{agent}/run` is a drop-in AG-UI endpoint: a stock
//! `HttpAgent` pointed at it gets the agent's events, verified and with chunks
//! expanded, as `data: <json>\n\n` frames, plus `: keepalive` comments while
//! the agent is quiet — or, asked with `Accept:
//! application/vnd.ag-ui.event+proto`, as AG-UI protobuf frames
//! ([`super::encode`]).

use super::commands::{self, Requester, RunCommand};
use super::encode::{self, Encoder};
use super::error::{ApiError, ErrorCode};
use super::extract::{Authenticated, read_body};
use super::sse::{Next, pump, stream_response};
use super::state::AppState;
use crate::auth::Principal;
use crate::protocol::hooks::RunInput;
use crate::protocol::{EventType, RunAgentInput};
use crate::thread::branch::BaseRequest;
use crate::thread::fanout::{OutboxReceiver, Outgoing, outbox};
use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::sync::Arc;

/// `GET /v1/agents`: the agents the caller's roles may run.
pub async fn list_agents(
    State(state): State<Arc<AppState>>,
    Authenticated(who): Authenticated,
) -> Response {
    let agents: Vec<_> = state
        .agents()
        .visible_to(&who)
        .map(|a| a.listing(&who))
        .collect();
    Json(json!({ "agents": agents })).into_response()
}

/// `GET /readyz`: ready when the journal answers and has not failed a write.
pub async fn ready(State(state): State<Arc<AppState>>) -> Response {
    if state.is_draining() {
        return ApiError::new(ErrorCode::Unavailable, "draining: this node is stopping")
            .into_response();
    }
    let store = state.threads.store().clone();
    if !store.healthy() {
        return ApiError::new(ErrorCode::Unavailable, "journal writes are failing").into_response();
    }
    match tokio::task::spawn_blocking(move || store.ping()).await {
        Ok(Ok(())) => Json(json!({"status": "ready"})).into_response(),
        _ => ApiError::new(ErrorCode::Unavailable, "journal unreachable").into_response(),
    }
}

/// Threads `agui_thread_resident_bytes` names: enough to see where a
/// budget goes, few enough to keep the scrape's series bounded.
const BIGGEST_THREADS: usize = 10;

/// `GET /metrics`: every metric (see [`crate::metrics`]), with the gauges
/// that are cheaper to read than to maintain read now.
pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let m = crate::metrics::metrics();
    m.resident_threads.set(state.threads.resident() as i64);
    for (kind, bytes) in state.threads.resident_bytes() {
        m.resident_bytes
            .get_or_create(&crate::metrics::ResidentKindLabel { kind })
            .set(bytes as i64);
    }
    if let Some(rss) = crate::thread::memory_ceiling::process_rss() {
        m.process_resident_bytes.set(rss as i64);
    }
    m.spilled_page_bytes
        .set(crate::protocol::page_spill::held_bytes() as i64);
    // The biggest threads now (the family is emptied first: a thread that
    // left memory or shrank out of the top must not linger as a series).
    m.thread_resident_bytes.clear();
    for (key, bytes) in state.threads.biggest(BIGGEST_THREADS) {
        m.thread_resident_bytes
            .get_or_create(&crate::metrics::ThreadLabel {
                tenant: key.tenant,
                thread: key.thread_id,
            })
            .set(bytes as i64);
    }
    m.active_runs.set(state.threads.runs_here() as i64);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        m.render(),
    )
        .into_response()
}

/// `POST /v1/agents/{agent}/run`: a stock AG-UI run (or resume, when the
/// input answers interrupts), its events streamed back as SSE.
pub async fn run_agent(
    State(state): State<Arc<AppState>>,
    Path(agent_id): Path<String>,
    Authenticated(who): Authenticated,
    request: Request,
) -> Response {
    serve_run(state, who, Some(&agent_id), request).await
}

/// `POST /v1/run`: a stock AG-UI run like [`run_agent`]'s, to the agent the
/// thread routes a plain run to (its active agent after a handoff, see
/// [`commands::routed_agent`]).
pub async fn run_routed(
    State(state): State<Arc<AppState>>,
    Authenticated(who): Authenticated,
    request: Request,
) -> Response {
    serve_run(state, who, None, request).await
}

/// Negotiates the encoding, starts the run (see [`start_run`]) and streams
/// its events back.
async fn serve_run(
    state: Arc<AppState>,
    who: Principal,
    agent_id: Option<&str>,
    request: Request,
) -> Response {
    let enc = match encode::negotiate(request.headers()) {
        Ok(enc) => enc,
        Err(e) => return e.into_response(),
    };
    match start_run(&state, &who, agent_id, request).await {
        Ok(rx) => run_response(state, enc, rx),
        Err(e) => e.into_response(),
    }
}

/// Checks the agent, then reads the body (an unknown or forbidden agent is
/// refused unread) and starts (or queues) the run on its thread; the
/// returned receiver gets this run's events, as the thread journals them.
/// No agent: the thread's routed one, once the body named the thread.
async fn start_run(
    state: &AppState,
    who: &Principal,
    agent_id: Option<&str>,
    request: Request,
) -> Result<OutboxReceiver, ApiError> {
    let named = agent_id
        .map(|id| commands::runnable_agent(state, who, id))
        .transpose()?;
    let traceparent = crate::upstream::trace::from_headers(request.headers()).map(str::to_owned);
    let body = read_body(request, state).await?;
    let input = RunAgentInput::from_json(&body)
        .map_err(|e| ApiError::new(ErrorCode::Invalid, format!("invalid RunAgentInput: {e}")))?;
    let agent = match named {
        Some(agent) => agent,
        None => commands::routed_agent(state, who, &input.thread_id).await?,
    };
    let (starter, rx) = outbox(state.config.threads.viewer_queue_bytes);
    // A named base wins; otherwise a client that cut or edited its list
    // (CopilotKit's reload) branches, when the agent allows it.
    let base = match &input.parent_run_id {
        Some(parent) => BaseRequest::Run(parent.clone()),
        None if agent.branching.implicit => BaseRequest::Detect,
        None => BaseRequest::Head,
    };
    let cmd = RunCommand {
        agent: agent.clone(),
        thread_id: input.thread_id.clone(),
        run_id: input.run_id.clone(),
        input: RunInput::Complete(input),
        strategy: None,
        traceparent,
        base,
    };
    commands::run(state, who, cmd, Requester::Feed(starter)).await?;
    tracing::info!(agent = %agent.id, user = %who.subject, tenant = %who.tenant, "run requested over HTTP");
    Ok(rx)
}

/// How long a run's response waits after `RUN_FINISHED` for a late
/// `RUN_ERROR` before it ends (see [`run_response`]).
const LATE_RUN_ERROR_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The run's events in the negotiated format (SSE: `id: <seq>` + `data:`,
/// keepalives while quiet), ending after the terminal event. Dropping the
/// response tells the run its requester left.
fn run_response(state: Arc<AppState>, enc: &'static dyn Encoder, rx: OutboxReceiver) -> Response {
    let keepalive = state.config.server.keepalive;
    let metrics = crate::metrics::metrics();
    let events_out = metrics.events_out_counter("http");
    let counted = metrics.connection("http");
    // Set when the run hands the thread over: the response goes on with
    // the next agent's run after this one's RUN_FINISHED.
    let mut continues = false;
    let stream = pump(rx, enc, keepalive, move |item, chunk| {
        let _counted = &counted;
        match item {
            Some(Outgoing::Continues) => {
                continues = true;
                Next::More
            }
            Some(Outgoing::Event(e)) => {
                events_out.inc();
                enc.write_entry(&e, chunk);
                match e.event.kind() {
                    EventType::RunError => Next::End,
                    EventType::RunFinished if std::mem::take(&mut continues) => Next::More,
                    // A late RUN_ERROR may follow (AG-UI 1.1, `events/
                    // lifecycle`: "A producer MAY emit RUN_ERROR after
                    // RUN_FINISHED"); the run journals it in the same batch,
                    // so it is queued right behind, and the run's task ends
                    // (closing this outbox) right after. The bound is for a
                    // requester reading from the journal, whose outbox may
                    // close later.
                    EventType::RunFinished => Next::Linger(LATE_RUN_ERROR_WAIT),
                    _ => Next::More,
                }
            }
            _ => Next::More,
        }
    });
    stream_response(enc, stream)
}
