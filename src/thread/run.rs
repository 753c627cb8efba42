//! Runs on a thread: at most one active, the others rejected, queued, or
//! pre-empting it, per the agent's strategy.
//!
//! A run's task owns the upstream stream. It appends what the agent sends in
//! small batches (whatever arrived together), so a busy run costs one durable
//! write per read rather than per event. The journal's `RUN_STARTED` carries
//! the run's input with the messages already in history left out, so the fold
//! (and every late joiner) sees the user's new messages too; the HTTP
//! requester still gets the agent's own `RUN_STARTED`, unchanged.

use super::fanout::{Outbox, Outgoing};
use super::{Entry, Inner, Thread};
use crate::protocol::event::run_error;
use crate::protocol::{Event, EventType, RunAgentInput};
use crate::upstream::{Agent, RunStream};
use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use serde_json::{Map, Value, json};
use std::collections::VecDeque;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub use crate::config::Strategy;

/// The input a run request carries.
#[derive(Debug, Clone)]
pub enum RunInput {
    /// WebSocket: only new messages; the gateway adds history and state.
    Incremental {
        messages: Vec<Value>,
        tools: Vec<Value>,
        context: Vec<Value>,
        state: Option<Value>,
        forwarded_props: Option<Value>,
        resume: Option<Value>,
    },
    /// HTTP face: a complete `RunAgentInput` from an AG-UI client, forwarded as is.
    Complete(RunAgentInput),
}

impl RunInput {
    fn has_resume(&self) -> bool {
        match self {
            RunInput::Incremental { resume, .. } => resume
                .as_ref()
                .is_some_and(|r| r.as_array().is_some_and(|a| !a.is_empty())),
            RunInput::Complete(i) => i.resume.as_ref().is_some_and(|r| !r.is_empty()),
        }
    }
}

/// A request to run an agent on a thread.
pub struct RunRequest {
    pub agent: Arc<Agent>,
    pub run_id: String,
    pub input: RunInput,
    /// The HTTP requester's stream: this run's events only.
    pub starter: Option<Arc<Outbox>>,
}

/// How a request was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    Now,
    /// Queued behind this many runs (active one included).
    Queued(usize),
}

/// Why a request was refused (`conflict`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RunConflict(pub String);

struct ActiveRun {
    run_id: String,
    cancel: CancellationToken,
    /// The agent's `on_disconnect = "cancel"`.
    cancel_when_unwatched: bool,
}

/// The thread's run state.
#[derive(Default)]
pub(super) struct RunSlot {
    active: Option<ActiveRun>,
    queue: VecDeque<RunRequest>,
}

impl RunSlot {
    /// No run active or waiting.
    pub(super) fn is_idle(&self) -> bool {
        self.active.is_none() && self.queue.is_empty()
    }
}

impl Thread {
    /// Starts `req` now, queues it, or refuses it, per `strategy`.
    pub fn start_run(
        self: &Arc<Self>,
        req: RunRequest,
        strategy: Strategy,
    ) -> Result<Started, RunConflict> {
        let mut inner = self.lock();
        let pending: Vec<&str> = inner
            .fold
            .interrupts()
            .iter()
            .filter_map(|i| i.get("id").and_then(Value::as_str))
            .collect();
        if !pending.is_empty() && !req.input.has_resume() {
            return Err(RunConflict(format!(
                "the thread has pending interrupts ({}); answer them with resume",
                pending.join(", ")
            )));
        }
        let Some(active) = &inner.runs.active else {
            self.launch(&mut inner, req);
            return Ok(Started::Now);
        };
        match strategy {
            Strategy::Reject => Err(RunConflict(format!(
                "run '{}' is still active on this thread",
                active.run_id
            ))),
            Strategy::Enqueue => {
                inner.runs.queue.push_back(req);
                Ok(Started::Queued(inner.runs.queue.len()))
            }
            Strategy::Interrupt => {
                active.cancel.cancel();
                inner.runs.queue.push_front(req);
                Ok(Started::Queued(1))
            }
        }
    }

    /// Cancels the active run (only `run_id`'s, when given, so a stale cancel
    /// never stops a newer run). Returns the cancelled run's id.
    pub fn cancel_run(&self, run_id: Option<&str>) -> Option<String> {
        let inner = self.lock();
        let active = inner.runs.active.as_ref()?;
        if run_id.is_some_and(|r| r != active.run_id) {
            return None;
        }
        active.cancel.cancel();
        Some(active.run_id.clone())
    }

    /// Called when a viewer left: cancels the active run if nobody watches
    /// any more and its agent says `on_disconnect = "cancel"`.
    pub fn viewer_left(&self) {
        let mut inner = self.lock();
        inner.viewers.retain(|v| !v.outbox.is_closed());
        if inner.viewers.is_empty()
            && let Some(active) = inner
                .runs
                .active
                .as_ref()
                .filter(|a| a.cancel_when_unwatched)
        {
            tracing::info!(thread = %self.key.thread_id, run = %active.run_id, "last viewer left: cancelling (on_disconnect = cancel)");
            active.cancel.cancel();
        }
    }

    /// The active run's id, if any.
    pub fn active_run(&self) -> Option<String> {
        self.lock().runs.active.as_ref().map(|a| a.run_id.clone())
    }

    fn launch(self: &Arc<Self>, inner: &mut Inner, req: RunRequest) {
        let (body, journal_input) = build_input(&self.key.thread_id, inner, &req);
        inner.meta.agent = Some(req.agent.id.clone());
        let cancel = CancellationToken::new();
        inner.runs.active = Some(ActiveRun {
            run_id: req.run_id.clone(),
            cancel: cancel.clone(),
            cancel_when_unwatched: req.agent.on_disconnect == crate::config::OnDisconnect::Cancel,
        });
        tracing::info!(tenant = %self.key.tenant, thread = %self.key.thread_id, run = %req.run_id, agent = %req.agent.id, "run started");
        tokio::spawn(drive(self.clone(), req, body, journal_input, cancel));
    }

    fn run_ended(self: &Arc<Self>, run_id: &str) {
        let mut inner = self.lock();
        if inner
            .runs
            .active
            .as_ref()
            .is_some_and(|a| a.run_id == run_id)
        {
            inner.runs.active = None;
        }
        if inner.runs.active.is_none()
            && let Some(next) = inner.runs.queue.pop_front()
        {
            self.launch(&mut inner, next);
        }
    }
}

/// The upstream body (full history) and the journal's normalized input (new messages only).
fn build_input(thread_id: &str, inner: &Inner, req: &RunRequest) -> (Bytes, Value) {
    let fold = &inner.fold;
    let is_new = |m: &Value| {
        m.get("id")
            .and_then(Value::as_str)
            .is_none_or(|id| !fold.has_message(id))
    };
    match &req.input {
        RunInput::Complete(input) => {
            let body = Bytes::from(serde_json::to_vec(input).expect("input serializes"));
            let mut journal = serde_json::to_value(input).expect("input serializes");
            if let Some(Value::Array(msgs)) = journal.get_mut("messages") {
                msgs.retain(is_new);
            }
            (body, journal)
        }
        RunInput::Incremental {
            messages,
            tools,
            context,
            state,
            forwarded_props,
            resume,
        } => {
            let new: Vec<Value> = messages.iter().filter(|m| is_new(m)).cloned().collect();
            let mut input = Map::new();
            input.insert("threadId".into(), thread_id.into());
            input.insert("runId".into(), req.run_id.clone().into());
            input.insert("protocolVersion".into(), "1.0".into());
            input.insert(
                "state".into(),
                state.clone().unwrap_or_else(|| fold.state().clone()),
            );
            input.insert("tools".into(), Value::Array(tools.clone()));
            input.insert("context".into(), Value::Array(context.clone()));
            input.insert(
                "forwardedProps".into(),
                forwarded_props.clone().unwrap_or_else(|| json!({})),
            );
            if let Some(r) = resume {
                input.insert("resume".into(), r.clone());
            }
            let mut journal = input.clone();
            journal.insert("messages".into(), Value::Array(new.clone()));
            let mut all = fold.messages().to_vec();
            all.extend(new);
            input.insert("messages".into(), Value::Array(all));
            (
                Bytes::from(serde_json::to_vec(&input).expect("input serializes")),
                Value::Object(journal),
            )
        }
    }
}

/// Entities a run opened and has not closed, so a cancel can close them.
#[derive(Default)]
struct OpenEntities {
    started: bool,
    steps: Vec<String>,
    messages: Vec<String>,
    tool_calls: Vec<String>,
    reasoning_messages: Vec<String>,
    reasoning_spans: Vec<String>,
}

impl OpenEntities {
    fn track(&mut self, e: &Event) {
        let id = |f: &str| e.str_field(f).unwrap_or_default().to_owned();
        use EventType::*;
        match e.kind() {
            RunStarted => self.started = true,
            StepStarted => self.steps.push(id("stepName")),
            StepFinished => self.steps.retain(|s| *s != id("stepName")),
            TextMessageStart => self.messages.push(id("messageId")),
            TextMessageEnd => self.messages.retain(|s| *s != id("messageId")),
            ToolCallStart => self.tool_calls.push(id("toolCallId")),
            ToolCallEnd => self.tool_calls.retain(|s| *s != id("toolCallId")),
            ReasoningMessageStart => self.reasoning_messages.push(id("messageId")),
            ReasoningMessageEnd => self.reasoning_messages.retain(|s| *s != id("messageId")),
            ReasoningStart => self.reasoning_spans.push(id("messageId")),
            ReasoningEnd => self.reasoning_spans.retain(|s| *s != id("messageId")),
            _ => {}
        }
    }

    /// End events for everything still open, innermost first.
    fn closing(&self) -> Vec<Event> {
        let mut out = Vec::new();
        for m in &self.messages {
            out.push(Event::build(
                json!({"type": "TEXT_MESSAGE_END", "messageId": m}),
            ));
        }
        for c in &self.tool_calls {
            out.push(Event::build(
                json!({"type": "TOOL_CALL_END", "toolCallId": c}),
            ));
        }
        for r in &self.reasoning_messages {
            out.push(Event::build(
                json!({"type": "REASONING_MESSAGE_END", "messageId": r}),
            ));
        }
        for r in &self.reasoning_spans {
            out.push(Event::build(
                json!({"type": "REASONING_END", "messageId": r}),
            ));
        }
        for s in self.steps.iter().rev() {
            out.push(Event::build(
                json!({"type": "STEP_FINISHED", "stepName": s}),
            ));
        }
        out
    }
}

/// Most events appended in one batch.
const MAX_BATCH: usize = 256;

enum Step {
    Cancel,
    StarterGone,
    Events(Vec<Event>),
    Ended,
}

async fn drive(
    thread: Arc<Thread>,
    req: RunRequest,
    body: Bytes,
    journal_input: Value,
    cancel: CancellationToken,
) {
    let RunRequest {
        agent,
        run_id,
        mut starter,
        ..
    } = req;
    let thread_id = thread.key.thread_id.clone();
    let mut stream = Some(RunStream::start(agent.clone(), body));
    let mut open = OpenEntities::default();
    loop {
        let step = {
            let upstream = stream.as_mut().expect("stream present while looping");
            let starter_gone = async {
                match &starter {
                    Some(s) => s.closed().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = cancel.cancelled() => Step::Cancel,
                _ = starter_gone => Step::StarterGone,
                next = upstream.next() => match next {
                    None => Step::Ended,
                    Some(first) => {
                        let mut batch = vec![first];
                        while batch.len() < MAX_BATCH && !batch.last().is_some_and(|e| e.kind().is_terminal()) {
                            match upstream.next().now_or_never() {
                                Some(Some(e)) => batch.push(e),
                                _ => break,
                            }
                        }
                        Step::Events(batch)
                    }
                },
            }
        };
        match step {
            Step::StarterGone => {
                starter = None;
                if thread.viewer_count() == 0 {
                    tracing::info!(thread = %thread_id, run = %run_id, "requester left and nobody is watching: cancelling");
                    cancel.cancel();
                }
            }
            Step::Cancel => {
                drop(stream.take()); // drops the upstream request now
                let mut closing = Vec::new();
                if !open.started {
                    closing.push(Event::build(json!({"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id, "input": journal_input})));
                }
                closing.extend(open.closing());
                closing.push(Event::build(json!({"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id, "outcome": {"type": "cancelled"}})));
                let entries = thread.append(closing).await;
                forward(&starter, &entries, None);
                tracing::info!(thread = %thread_id, run = %run_id, "run cancelled");
                break;
            }
            Step::Ended => {
                // RunStream always ends with a terminal event; this is a bug guard.
                let entries = thread
                    .append(vec![run_error(
                        "internal",
                        "upstream stream ended without a terminal event",
                    )])
                    .await;
                forward(&starter, &entries, None);
                break;
            }
            Step::Events(batch) => {
                let terminal = batch.iter().any(|e| e.kind().is_terminal());
                let mut journal = Vec::with_capacity(batch.len() + 1);
                let mut original_start = None;
                let mut synthesized = 0;
                for event in batch {
                    if *event.kind() == EventType::RunStarted
                        && !open.started
                        && event.get("input").is_none()
                    {
                        original_start = Some(event.clone());
                        journal.push(event.modify(|b| {
                            b.insert("input".into(), journal_input.clone());
                        }));
                    } else {
                        if !open.started && *event.kind() != EventType::RunStarted {
                            // Journal the user's input even when the agent failed before starting.
                            journal.push(Event::build(json!({"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id, "input": journal_input})));
                            synthesized = 1;
                            open.started = true;
                        }
                        journal.push(event);
                    }
                    if let Some(last) = journal.last() {
                        open.track(last);
                    }
                }
                let entries = thread.append(journal).await;
                forward(&starter, &entries[synthesized..], original_start);
                if terminal {
                    break;
                }
            }
        }
    }
    thread.maybe_compact().await;
    thread.run_ended(&run_id);
}

/// Sends a run's entries to its HTTP requester, swapping in the agent's own
/// `RUN_STARTED` (without the journal's `input`).
fn forward(starter: &Option<Arc<Outbox>>, entries: &[Arc<Entry>], original_start: Option<Event>) {
    let Some(outbox) = starter else { return };
    let mut original_start = original_start;
    for e in entries {
        let item = match (&original_start, e.event.kind()) {
            (Some(_), EventType::RunStarted) => {
                let original = original_start.take().expect("checked");
                Arc::new(Entry::new("", e.seq, original))
            }
            _ => e.clone(),
        };
        outbox.push(Outgoing::Event(item));
    }
}
