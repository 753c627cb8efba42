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
use crate::protocol::interrupts::InterruptNormalizer;
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
    /// The resume entries, as JSON.
    fn resume_entries(&self) -> Vec<Value> {
        match self {
            RunInput::Incremental { resume, .. } => resume
                .as_ref()
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            RunInput::Complete(i) => i
                .resume
                .iter()
                .flatten()
                .map(|r| serde_json::to_value(r).expect("serializes"))
                .collect(),
        }
    }

    /// LangGraph answers interrupts through `forwardedProps.command.resume`:
    /// the single answer's payload, or a map of interrupt id → payload.
    fn set_langgraph_command(&mut self) {
        let entries = self.resume_entries();
        let answer = match entries.as_slice() {
            [one] => one.get("payload").cloned().unwrap_or(Value::Null),
            many => Value::Object(
                many.iter()
                    .filter_map(|e| {
                        Some((
                            e.get("interruptId")?.as_str()?.to_owned(),
                            e.get("payload").cloned().unwrap_or(Value::Null),
                        ))
                    })
                    .collect(),
            ),
        };
        let props = match self {
            RunInput::Incremental {
                forwarded_props, ..
            } => forwarded_props.get_or_insert_with(|| json!({})),
            RunInput::Complete(i) => i.forwarded_props.get_or_insert_with(|| json!({})),
        };
        if !props.is_object() {
            *props = json!({});
        }
        props["command"]["resume"] = answer;
    }

    fn has_resume(&self) -> bool {
        match self {
            RunInput::Incremental { resume, .. } => resume
                .as_ref()
                .is_some_and(|r| r.as_array().is_some_and(|a| !a.is_empty())),
            RunInput::Complete(i) => i.resume.as_ref().is_some_and(|r| !r.is_empty()),
        }
    }
}

/// A hook on a run's upstream events, applied before they are journaled.
///
/// `thread` defines it and never looks inside: the policy layer (further down
/// the pipeline) implements it, so operator rules can drop, rewrite or fail
/// events without the journal ever holding what they removed.
pub trait EventFilter: Send {
    /// What to journal instead of `event`: any number of events, or `Err`
    /// with a terminal event (e.g. `RUN_ERROR policy_violation`) that ends the run.
    fn filter(&mut self, event: Event) -> Result<Vec<Event>, Box<Event>>;
}

/// A request to run an agent on a thread.
pub struct RunRequest {
    pub agent: Arc<Agent>,
    pub run_id: String,
    pub input: RunInput,
    /// The HTTP requester's stream: this run's events only.
    pub starter: Option<Arc<Outbox>>,
    /// What the HTTP requester may see.
    pub starter_visibility: super::ViewerVisibility,
    /// Operator rules on the run's events, if any.
    pub filter: Option<Box<dyn EventFilter>>,
    /// Extra upstream request headers (the verified identity, when configured).
    pub upstream_headers: reqwest::header::HeaderMap,
}

/// How a request was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    Now,
    /// Queued behind this many runs (active one included).
    Queued(usize),
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunRefused {
    /// `conflict`: a run is active, interrupts are pending, or they were already answered.
    #[error("{0}")]
    Conflict(String),
    /// `invalid`: a resume that does not answer the pending interrupts.
    #[error("{0}")]
    Invalid(String),
}

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
    /// The run that answered the pending interrupts, until it ends.
    resume_claimed: Option<String>,
}

impl RunSlot {
    /// No run active or waiting.
    pub(super) fn is_idle(&self) -> bool {
        self.active.is_none() && self.queue.is_empty()
    }
}

impl Thread {
    /// Starts `req` now, queues it, or refuses it, per `strategy`.
    ///
    /// A resume must answer exactly the pending interrupts (AG-UI has no
    /// partial resume); the first valid answer claims them, so a second one
    /// gets `conflict` even before the resumed run has started.
    pub fn start_run(
        self: &Arc<Self>,
        mut req: RunRequest,
        strategy: Strategy,
    ) -> Result<Started, RunRefused> {
        let mut inner = self.lock();
        let pending: Vec<String> = inner
            .fold
            .interrupts()
            .iter()
            .filter_map(|i| i.get("id").and_then(Value::as_str).map(str::to_owned))
            .collect();
        if req.input.has_resume() {
            if inner.runs.resume_claimed.is_some() {
                return Err(RunRefused::Conflict(
                    "the interrupts were already answered".into(),
                ));
            }
            if pending.is_empty() {
                return Err(RunRefused::Conflict(
                    "the thread has no pending interrupts".into(),
                ));
            }
            let langgraph = check_resume(&req.input, inner.fold.interrupts())?;
            if langgraph {
                req.input.set_langgraph_command();
            }
        } else if !pending.is_empty() {
            return Err(RunRefused::Conflict(format!(
                "the thread has pending interrupts ({}); answer them with resume",
                pending.join(", ")
            )));
        }
        if inner.runs.active.is_some() && strategy == Strategy::Reject {
            let active = inner
                .runs
                .active
                .as_ref()
                .map(|a| a.run_id.clone())
                .unwrap_or_default();
            return Err(RunRefused::Conflict(format!(
                "run '{active}' is still active on this thread"
            )));
        }
        if req.input.has_resume() {
            inner.runs.resume_claimed = Some(req.run_id.clone());
        }
        let Some(active) = &inner.runs.active else {
            self.launch(&mut inner, req);
            return Ok(Started::Now);
        };
        match strategy {
            Strategy::Reject => unreachable!("refused above"),
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
        if inner.runs.resume_claimed.as_deref() == Some(run_id) {
            inner.runs.resume_claimed = None;
        }
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

/// Checks that `input`'s resume answers exactly the `pending` interrupts,
/// none expired; returns whether any came from LangGraph's legacy form.
fn check_resume(input: &RunInput, pending: &[Value]) -> Result<bool, RunRefused> {
    let invalid = |m: String| Err(RunRefused::Invalid(m));
    let entries = input.resume_entries();
    let now = crate::protocol::event::now_millis();
    let mut answered = std::collections::HashSet::new();
    for (n, e) in entries.iter().enumerate() {
        let Some(id) = e.get("interruptId").and_then(Value::as_str) else {
            return invalid(format!("resume[{n}].interruptId is missing"));
        };
        if !matches!(
            e.get("status").and_then(Value::as_str),
            Some("resolved" | "cancelled")
        ) {
            return invalid(format!("resume[{n}].status must be resolved or cancelled"));
        }
        let Some(interrupt) = pending
            .iter()
            .find(|i| i.get("id").and_then(Value::as_str) == Some(id))
        else {
            return invalid(format!(
                "resume[{n}].interruptId '{id}' is not a pending interrupt"
            ));
        };
        if crate::protocol::interrupts::is_expired(interrupt, now) {
            return invalid(format!("interrupt '{id}' has expired"));
        }
        if !answered.insert(id.to_owned()) {
            return invalid(format!("interrupt '{id}' is answered twice"));
        }
    }
    let missing: Vec<&str> = pending
        .iter()
        .filter_map(|i| i.get("id").and_then(Value::as_str))
        .filter(|id| !answered.contains(*id))
        .collect();
    if !missing.is_empty() {
        return invalid(format!(
            "resume must answer every pending interrupt; missing: {}",
            missing.join(", ")
        ));
    }
    Ok(pending
        .iter()
        .any(crate::protocol::interrupts::is_langgraph))
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
        mut filter,
        starter_visibility,
        upstream_headers,
        ..
    } = req;
    let thread_id = thread.key.thread_id.clone();
    let mut stream = Some(RunStream::start(agent.clone(), body, upstream_headers));
    let mut open = OpenEntities::default();
    let mut interrupts = InterruptNormalizer::new(agent.interrupts);
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
                forward(&starter, &starter_visibility, &entries, Vec::new());
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
                forward(&starter, &starter_visibility, &entries, Vec::new());
                break;
            }
            Step::Events(batch) => {
                // 1. What the journal gets (input on RUN_STARTED, canonical
                //    interrupts), and what the HTTP requester gets instead:
                //    `None` nothing, `Some(None)` the same, `Some(Some(e))` `e`.
                let mut staged: Staged = Vec::with_capacity(batch.len() + 1);
                for event in batch {
                    if *event.kind() == EventType::RunStarted
                        && !open.started
                        && event.get("input").is_none()
                    {
                        let journaled = event.modify(|b| {
                            b.insert("input".into(), journal_input.clone());
                        });
                        staged.push((journaled, Some(Some(event))));
                        open.started = true;
                        continue;
                    }
                    if !open.started && *event.kind() != EventType::RunStarted {
                        // Journal the user's input even when the agent failed before starting.
                        let start = Event::build(
                            json!({"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id, "input": journal_input}),
                        );
                        staged.push((start, None));
                    }
                    open.started = true;
                    match interrupts.apply(&event) {
                        Some(canonical) => staged.push((canonical, Some(Some(event)))),
                        None => staged.push((event, Some(None))),
                    }
                }
                // 2. Operator rules, last, over exactly what would be journaled.
                let (staged, failed) = apply_filter(&mut filter, staged);
                if failed {
                    drop(stream.take()); // a policy ended the run: stop reading the agent
                }
                let terminal = failed || staged.iter().any(|(e, _)| e.kind().is_terminal());
                let mut journal = Vec::with_capacity(staged.len());
                let mut originals = Vec::with_capacity(staged.len());
                for (event, original) in staged {
                    open.track(&event);
                    journal.push(event);
                    originals.push(original);
                }
                let entries = thread.append(journal).await;
                forward(&starter, &starter_visibility, &entries, originals);
                if terminal {
                    break;
                }
            }
        }
    }
    thread.maybe_compact().await;
    thread.run_ended(&run_id);
}

/// What the HTTP requester gets for a journaled event: `None` nothing (journal
/// only), `Some(None)` the same event, `Some(Some(e))` the agent's own `e`.
type ForRequester = Option<Option<Event>>;

/// Events about to be journaled, each with what the requester gets for it.
type Staged = Vec<(Event, ForRequester)>;

/// Runs staged events through the run's filter; `true` when the filter ended
/// the run (its terminal event is then the last one). An event the filter
/// left unchanged keeps what the requester gets for it; anything the filter
/// changed or added is sent to the requester as journaled.
fn apply_filter(filter: &mut Option<Box<dyn EventFilter>>, staged: Staged) -> (Staged, bool) {
    let Some(filter) = filter else {
        return (staged, false);
    };
    let mut out = Vec::with_capacity(staged.len());
    for (event, original) in staged {
        let before = event.json().clone();
        match filter.filter(event) {
            Ok(events) => {
                for e in events {
                    let keep = if *e.json() == before {
                        original.clone()
                    } else {
                        Some(None)
                    };
                    out.push((e, keep));
                }
            }
            Err(end) => {
                out.push((*end, Some(None)));
                return (out, true);
            }
        }
    }
    (out, false)
}

/// Sends a run's entries to its HTTP requester, `originals[i]` deciding what
/// it gets for entry `i` (see [`ForRequester`]; missing items mean the entry).
fn forward(
    starter: &Option<Arc<Outbox>>,
    visibility: &super::ViewerVisibility,
    entries: &[Arc<Entry>],
    originals: Vec<ForRequester>,
) {
    let Some(outbox) = starter else { return };
    let mut originals = originals.into_iter();
    for e in entries {
        let item = match originals.next().unwrap_or(Some(None)) {
            None => continue,
            Some(None) => e.clone(),
            Some(Some(original)) => Arc::new(Entry::new("", e.seq, original)),
        };
        if visibility.as_ref().is_some_and(|v| v.hides(&item.event)) {
            continue;
        }
        outbox.push(Outgoing::Event(item));
    }
}
