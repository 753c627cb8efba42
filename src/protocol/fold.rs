//! The fold: a thread's messages, state, pending interrupts and run status,
//! kept up to date one event at a time.
//!
//! The journal is the source of truth and this is its running summary, so a
//! late joiner gets a snapshot without anyone re-reading the journal. The
//! rules follow the AG-UI client's reducer (`apply/default.ts`): text and
//! reasoning deltas append to their message, tool calls attach to their parent
//! assistant message (created when missing), tool results go right after the
//! assistant message that made the call, `MESSAGES_SNAPSHOT` merges (messages
//! it names are replaced, client-only activity/reasoning kept, new ones
//! appended), state follows `STATE_SNAPSHOT` and RFC 6902 `STATE_DELTA`
//! (atomically: a failing patch leaves state unchanged, as the client does).
//! Lookups scan from the newest message, so the usual event (one touching the
//! message being streamed) costs O(1).

use super::authorship::{Authors, RunAgent};
use super::event::{Event, EventType};
use super::handoff::ActiveAgent;
use super::lineage::{Checkpoint, RunTable};
use super::message::Message;
use super::message_list::MessageList;
use super::sealed::Page;
use serde_json::{Map, Value, json};
use std::borrow::Cow;

pub use super::lineage::RunStatus;

/// The latest run of a thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInfo {
    pub run_id: String,
    pub status: RunStatus,
    /// The run's agent, as its journaled `RUN_STARTED` names it.
    pub agent: RunAgent,
}

/// What a JSON value costs in memory per byte of its text, about: a
/// `serde_json::Value` tree spends a tag and a pointer on every value and
/// a node per object key, so a message of short fields takes two to three
/// times its text (an estimate that errs high).
pub const VALUE_BYTES_PER_JSON_BYTE: usize = 3;

/// Largest folded state, in serialized bytes. A `STATE_DELTA` that would
/// grow the state past it is refused like a failing patch (state unchanged): `copy` operations can double the state each time, and forty tiny
/// deltas copying the root would grow it past 2 GB (found by the `fold`
/// fuzz target), whatever the per-event size limits say.
pub const MAX_STATE_BYTES: usize = 32 << 20;

/// A thread's folded view.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fold {
    /// Last seq folded in (0 = nothing yet).
    pub seq: u64,
    /// Shared with the checkpoints of the runs that ended with them
    /// ([`super::lineage`]): changing one copies it first.
    messages: MessageList,
    state: Value,
    interrupts: Vec<Value>,
    run: Option<RunInfo>,
    state_bytes: SizeEstimate,
    /// Which run introduced each message and wrote the state (what a
    /// viewer's snapshot may show depends on it; not part of the snapshot).
    authors: Authors,
    /// The thread's runs and head ([`super::lineage`]).
    runs: RunTable,
    /// The run just started forked from another run than the head: its
    /// next `MESSAGES_SNAPSHOT` restates the whole history and replaces the
    /// messages exactly (no client-only message of the abandoned branch
    /// stays, as the stock reducer's merge would keep).
    restating: bool,
    /// Who speaks on the thread and who the turn began with: where its
    /// next plain run goes ([`super::handoff`]).
    agents: ActiveAgent,
    /// How finished messages are packed into sealed pages.
    pages: PageSize,
}

/// The text a sealed page is filled to (the process's
/// [`super::sealed::page_text`] unless a test or fuzz target sets another).
/// Not part of the fold's value: a fold reads the same however it packs.
#[derive(Debug, Clone, Copy)]
struct PageSize(usize);

impl Default for PageSize {
    fn default() -> Self {
        PageSize(super::sealed::page_text())
    }
}

impl PartialEq for PageSize {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// An upper estimate of the state's serialized size (exact after a reload
/// or a recount), and the cap it is held to. Not part of the fold's value:
/// two folds of the same events are equal whatever their estimates.
#[derive(Debug, Clone, Copy)]
struct SizeEstimate {
    bytes: usize,
    cap: usize,
}

impl Default for SizeEstimate {
    fn default() -> Self {
        SizeEstimate {
            bytes: 2,
            cap: MAX_STATE_BYTES,
        }
    }
}

impl PartialEq for SizeEstimate {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Fold {
    /// An empty fold (state `{}`).
    pub fn new() -> Fold {
        Fold {
            state: json!({}),
            ..Default::default()
        }
    }

    /// Messages, in conversation order (AG-UI `Message` objects).
    pub fn messages(&self) -> &MessageList {
        &self.messages
    }

    /// The shared state.
    pub fn state(&self) -> &Value {
        &self.state
    }

    /// Who speaks on the thread now, and who its turn began with.
    pub fn agents(&self) -> &ActiveAgent {
        &self.agents
    }

    /// Interrupts raised by the last run and not answered yet.
    pub fn interrupts(&self) -> &[Value] {
        &self.interrupts
    }

    /// The latest run, if any.
    pub fn run(&self) -> Option<&RunInfo> {
        self.run.as_ref()
    }

    /// The message with this id, if the conversation holds one.
    pub fn message(&self, id: &str) -> Option<Cow<'_, Message>> {
        self.find(id).and_then(|i| self.messages.get(i))
    }

    /// True when a message with this id is already in the conversation.
    pub fn has_message(&self, id: &str) -> bool {
        self.find(id).is_some()
    }

    /// Which run introduced each message and wrote the state.
    pub fn authors(&self) -> &Authors {
        &self.authors
    }

    /// The thread's runs and head.
    pub fn runs(&self) -> &RunTable {
        &self.runs
    }

    /// What this fold holds in memory, estimated (a node's budget counts
    /// it, docs/operations.md "Sizing by bytes"): its messages and state
    /// at [`VALUE_BYTES_PER_JSON_BYTE`] times their JSON, its run table
    /// and checkpoints. O(the conversation): taken once per run's end.
    pub fn approx_bytes(&self) -> usize {
        let value = |v: &Value| json_len(v) * VALUE_BYTES_PER_JSON_BYTE;
        self.messages.approx_bytes(VALUE_BYTES_PER_JSON_BYTE)
            + self.state_bytes.bytes * VALUE_BYTES_PER_JSON_BYTE
            + self.authors.approx_bytes()
            + self.runs.approx_bytes(value)
    }

    /// Gives up the end views of older runs (the head's stays): a node
    /// short of memory (a view at such a run is rebuilt from the journal).
    pub fn shed_checkpoints(&mut self) {
        self.runs.keep_checkpoints(1);
    }

    /// This fold as a checkpoint (what a run ending now leaves): its
    /// messages shared, its state shared with `previous` when unchanged.
    pub fn checkpoint(&self, previous: Option<&Checkpoint>) -> Checkpoint {
        Checkpoint::new(
            self.seq,
            (&self.messages, &self.state, &self.interrupts),
            &self.authors,
            previous,
        )
    }

    /// A fold standing at `checkpoint` (a run's end), to replay from.
    pub fn at_checkpoint(checkpoint: &Checkpoint) -> Fold {
        Fold {
            seq: checkpoint.seq,
            messages: {
                let mut messages = MessageList::from(checkpoint.shared_messages());
                messages.freeze();
                messages
            },
            state_bytes: SizeEstimate {
                bytes: json_len(checkpoint.state()),
                cap: MAX_STATE_BYTES,
            },
            state: checkpoint.state().clone(),
            interrupts: checkpoint.interrupts.clone(),
            authors: checkpoint.authors(),
            ..Fold::new()
        }
    }

    /// Folds in one event with its journal seq; answers the run it belongs
    /// to (see [`RunAgent`]): its `RUN_STARTED`'s agent from there up to
    /// and including its terminal event, [`RunAgent::Outside`] between runs.
    pub fn apply(&mut self, seq: u64, event: &Event) -> RunAgent {
        self.seq = seq;
        let kind = event.kind();
        let in_run = *kind == EventType::RunStarted
            || self
                .run
                .as_ref()
                .is_some_and(|r| r.status == RunStatus::Running);
        let before = self.messages.len();
        // An agent's own MESSAGES_SNAPSHOT may bring the run's messages
        // under new ids (ag-ui-langgraph restates its checkpoint's).
        let known_ids: Option<std::collections::HashSet<String>> =
            (*kind == EventType::MessagesSnapshot && in_run).then(|| {
                self.messages
                    .iter()
                    .filter_map(|m| Some(m.id()?.to_string()))
                    .collect()
            });
        let restating = std::mem::take(&mut self.restating) && *kind == EventType::MessagesSnapshot;
        if restating {
            self.restate(event);
        } else {
            self.fold_in(event);
        }
        if matches!(kind, EventType::RunStarted | EventType::Custom) {
            self.agents.observe(event);
        }
        let origin = match (&self.run, in_run) {
            (Some(run), true) => run.agent.clone(),
            (None, true) => RunAgent::Unknown,
            (_, false) => RunAgent::Outside,
        };
        self.note_authors(event, before, &origin);
        self.note_run(seq, event, before);
        if let Some(known) = known_ids.filter(|_| !restating) {
            for m in self.messages.iter() {
                if let Some(id) = m.id()
                    && !known.contains(&*id)
                    && m.role() != "user"
                {
                    self.runs.produced(&id);
                }
            }
        }
        origin
    }

    /// Keeps the runs table in step with `event`.
    fn note_run(&mut self, seq: u64, event: &Event, before: usize) {
        use EventType::*;
        match event.kind() {
            RunStarted => {
                self.runs.started(seq, event);
                self.restating = self.runs.head().is_some_and(|h| h.kind.forks());
            }
            RunFinished | RunError => {
                // What the run wrote is finished: kept as text from here
                // (before the checkpoint, which shares these very messages).
                for m in self.messages.loose_mut() {
                    m.close();
                }
                self.seal_pages();
                let status = self.run.as_ref().map_or(RunStatus::Error, |r| r.status);
                let checkpoint = self.checkpoint(self.runs.base_checkpoint());
                self.runs.ended(seq, event, status, checkpoint);
            }
            MessagesSnapshot => {}
            _ if self.messages.len() != before => {
                for key in ["messageId", "parentMessageId", "toolCallId"] {
                    if let Some(id) = event.str_field(key)
                        && self.find(id).is_some()
                    {
                        self.runs.produced(id);
                        break;
                    }
                }
            }
            _ => {}
        }
    }

    /// A forked run's restatement of the history: the messages become
    /// exactly the snapshot's, attributed as they were at the base's end
    /// where the base's checkpoint says (the rest to this run).
    fn restate(&mut self, event: &Event) {
        let Some(snap) = event.body().get("messages").and_then(Value::as_array) else {
            return;
        };
        self.messages = snap
            .iter()
            .cloned()
            .map(|m| Message::open(without_null_subagent(m)))
            .collect();
        let base = self
            .runs
            .head()
            .and_then(|h| h.parent.as_deref())
            .and_then(|p| self.runs.get(p))
            .and_then(|p| p.checkpoint());
        if let Some(base) = base {
            self.authors = base.authors();
        }
    }

    /// Attributes what `event` added to the conversation or the state.
    fn note_authors(&mut self, event: &Event, before: usize, origin: &RunAgent) {
        use EventType::*;
        match event.kind() {
            RunStarted | MessagesSnapshot => {
                let ids = self.messages.ids().flatten();
                self.authors.keep_only(ids, self.messages.len());
                // Pages whose every message it attributes already hold
                // nothing to note: passed over, their bodies unread (they
                // may be in the spill file).
                let whole = self.authors.whole_pages();
                let ids = (self.messages)
                    .ids_but(|page| whole.contains(&std::sync::Arc::as_ptr(page)))
                    .flatten();
                self.authors.note_messages(ids, origin);
            }
            StateSnapshot | StateDelta => self.authors.note_state(origin),
            _ if self.messages.len() != before => {
                // One message was added: the one the event names (a tool
                // result may be inserted before the tail, so look it up).
                for key in ["messageId", "parentMessageId", "toolCallId"] {
                    if let Some(id) = event.str_field(key)
                        && let Some(i) = self.find(id)
                    {
                        self.authors.note_messages(self.messages.id_at(i), origin);
                    }
                }
            }
            _ => {}
        }
    }

    fn fold_in(&mut self, event: &Event) {
        use EventType::*;
        // The streaming events (most of any run) are folded from the fields
        // the scan kept, without parsing the event's body.
        match event.kind() {
            TextMessageContent | ReasoningMessageContent => {
                if let (Some(id), Some(delta)) =
                    (event.str_field("messageId"), event.str_field("delta"))
                    && let Some(i) = self.find(id)
                    && let Some(m) = self.messages.get_mut(i)
                {
                    append_str(m.make_mut(), "content", delta);
                }
                return;
            }
            ToolCallArgs => {
                if let (Some(call_id), Some(delta)) =
                    (event.str_field("toolCallId"), event.str_field("delta"))
                    && let Some((mi, ci)) = self.find_tool_call(call_id)
                    && let Some(f) = self.function_mut(mi, ci)
                {
                    match f.get_mut("arguments") {
                        Some(Value::String(args)) => args.push_str(delta),
                        _ => {
                            f.insert("arguments".into(), delta.into());
                        }
                    }
                }
                return;
            }
            TextMessageEnd | ToolCallEnd | ReasoningMessageEnd | ReasoningStart | ReasoningEnd
            | StepStarted | StepFinished => return,
            _ => {}
        }
        let b = event.body();
        let s = |k: &str| event.str_field(k);
        match event.kind() {
            RunStarted => {
                self.run = Some(RunInfo {
                    run_id: s("runId").unwrap_or_default().to_owned(),
                    status: RunStatus::Running,
                    agent: RunAgent::of_run_started(event),
                });
                self.interrupts.clear();
                if let Some(msgs) = b
                    .get("input")
                    .and_then(|i| i.get("messages"))
                    .and_then(Value::as_array)
                {
                    for m in msgs {
                        if let Some(id) = m.get("id").and_then(Value::as_str)
                            && !self.has_message(id)
                        {
                            self.messages
                                .push(Message::open(without_null_subagent(m.clone())));
                        }
                    }
                }
            }
            RunFinished => {
                let outcome = b.get("outcome");
                let kind = outcome.and_then(|o| o.get("type")).and_then(Value::as_str);
                let status = match kind {
                    Some("interrupt") => {
                        self.interrupts = outcome
                            .and_then(|o| o.get("interrupts"))
                            .and_then(Value::as_array)
                            .cloned()
                            .unwrap_or_default();
                        RunStatus::Interrupted
                    }
                    Some("cancelled") => RunStatus::Cancelled,
                    _ => RunStatus::Finished,
                };
                if status != RunStatus::Interrupted {
                    self.interrupts.clear();
                }
                self.set_status(status);
            }
            RunError => {
                // A failed run waits for nothing, even one whose RUN_FINISHED
                // (followed by a late RUN_ERROR) reported an interrupt.
                self.interrupts.clear();
                self.set_status(RunStatus::Error);
            }
            TextMessageStart => {
                let Some(id) = s("messageId") else { return };
                if self.find(id).is_none() {
                    let mut m = Map::new();
                    m.insert("id".into(), id.into());
                    m.insert("role".into(), s("role").unwrap_or("assistant").into());
                    m.insert("content".into(), "".into());
                    copy(b, &mut m, "name");
                    copy(b, &mut m, "subagentRunId");
                    self.messages.push(Message::open(Value::Object(m)));
                }
            }
            ReasoningMessageStart => {
                let Some(id) = s("messageId") else { return };
                if self.find(id).is_none() {
                    let mut m = Map::new();
                    m.insert("id".into(), id.into());
                    m.insert("role".into(), "reasoning".into());
                    m.insert("content".into(), "".into());
                    copy(b, &mut m, "subagentRunId");
                    self.messages.push(Message::open(Value::Object(m)));
                }
            }
            ToolCallStart => {
                let (Some(call_id), Some(name)) = (s("toolCallId"), s("toolCallName")) else {
                    return;
                };
                if let Some((mi, ci)) = self.find_tool_call(call_id) {
                    if let Some(f) = self.function_mut(mi, ci) {
                        f.insert("name".into(), name.into());
                    }
                    return;
                }
                let target = s("parentMessageId").unwrap_or(call_id);
                let mi = match self.find(target) {
                    Some(i) if self.messages.role_at(i) == "assistant" => i,
                    _ => {
                        let mut m = Map::new();
                        m.insert("id".into(), target.into());
                        m.insert("role".into(), "assistant".into());
                        copy(b, &mut m, "subagentRunId");
                        self.messages.push(Message::open(Value::Object(m)));
                        self.messages.len() - 1
                    }
                };
                let call = json!({"id": call_id, "type": "function", "function": {"name": name, "arguments": ""}});
                let calls = self.messages.get_mut(mi).map(Message::make_mut);
                match calls.and_then(|m| field_mut(m, "toolCalls")) {
                    Some(Value::Array(calls)) => calls.push(call),
                    Some(other) => *other = json!([call]),
                    None => {}
                }
            }
            ToolCallResult => {
                let (Some(id), Some(call_id)) = (s("messageId"), s("toolCallId")) else {
                    return;
                };
                let mut m = Map::new();
                m.insert("id".into(), id.into());
                m.insert("toolCallId".into(), call_id.into());
                m.insert("role".into(), s("role").unwrap_or("tool").into());
                m.insert(
                    "content".into(),
                    b.get("content").cloned().unwrap_or(Value::Null),
                );
                copy(b, &mut m, "subagentRunId");
                match self.find_tool_call(call_id) {
                    Some((owner, _)) => {
                        let mut at = owner + 1;
                        while at < self.messages.len() && self.messages.role_at(at) == "tool" {
                            at += 1;
                        }
                        self.messages.insert(at, Message::open(Value::Object(m)));
                    }
                    None => self.messages.push(Message::open(Value::Object(m))),
                }
            }
            StateSnapshot => {
                self.state = b.get("snapshot").cloned().unwrap_or(Value::Null);
                // The event's own size bounds its snapshot's.
                self.state_bytes.bytes = event.json().len();
            }
            StateDelta => {
                if let Some(ops) = b
                    .get("delta")
                    .cloned()
                    .and_then(|d| serde_json::from_value::<json_patch::Patch>(d).ok())
                {
                    self.apply_delta(ops);
                }
            }
            MessagesSnapshot => {
                if let Some(snap) = b.get("messages").and_then(Value::as_array) {
                    self.merge_snapshot(snap);
                }
            }
            ActivitySnapshot => {
                let Some(id) = s("messageId") else { return };
                let replace = b.get("replace").and_then(Value::as_bool) != Some(false);
                let mut m = Map::new();
                m.insert("id".into(), id.into());
                m.insert("role".into(), "activity".into());
                copy(b, &mut m, "activityType");
                m.insert(
                    "content".into(),
                    b.get("content").cloned().unwrap_or(json!({})),
                );
                copy(b, &mut m, "subagentRunId");
                match self.find(id) {
                    Some(i) if self.messages.role_at(i) != "activity" => {}
                    Some(i) if replace => {
                        if let Some(slot) = self.messages.get_mut(i) {
                            *slot = Message::open(Value::Object(m));
                        }
                    }
                    Some(_) => {}
                    None => self.messages.push(Message::open(Value::Object(m))),
                }
            }
            ActivityDelta => {
                if let Some(id) = s("messageId")
                    && let Some(i) = self.find(id)
                    && self.messages.role_at(i) == "activity"
                    && let Some(ops) = b
                        .get("patch")
                        .cloned()
                        .and_then(|p| serde_json::from_value::<json_patch::Patch>(p).ok())
                    && let Some(message) = self.messages.get_mut(i)
                    && let Some(content) = field_mut(message.make_mut(), "content")
                {
                    super::json_patch_atomic::apply(content, &ops);
                }
            }
            ReasoningEncryptedValue => {
                let (Some(entity), Some(value)) = (s("entityId"), s("encryptedValue")) else {
                    return;
                };
                let kind = s("encryptedValueType");
                let target = if s("subtype") == Some("tool-call") {
                    self.find_tool_call(entity)
                        .and_then(|(mi, ci)| self.tool_call_mut(mi, ci))
                } else {
                    self.find(entity)
                        .and_then(|i| self.messages.get_mut(i))
                        .map(Message::make_mut)
                };
                if let Some(Value::Object(target)) = target {
                    store_encrypted(target, value, kind);
                }
            }
            _ => {}
        }
    }

    /// Applies an RFC 6902 patch atomically (a failing one leaves the state
    /// as it was, as the client does), refusing one that would grow the state
    /// past [`MAX_STATE_BYTES`].
    fn apply_delta(&mut self, ops: json_patch::Patch) {
        use json_patch::PatchOperation::{Add, Copy, Replace};
        let has_copy = ops.0.iter().any(|op| matches!(op, Copy(_)));
        if !has_copy {
            // Growth is bounded by the values the event carries.
            let growth: usize = ops
                .0
                .iter()
                .map(|op| match op {
                    Add(a) => json_len(&a.value),
                    Replace(r) => json_len(&r.value),
                    _ => 0,
                })
                .sum();
            if !self.fits(&self.state, self.state_bytes.bytes, growth) {
                return;
            }
            if super::json_patch_atomic::apply(&mut self.state, &ops) {
                self.state_bytes.bytes += growth;
            }
            return;
        }
        // A copy grows the state by its source as it stands when the copy
        // runs: apply one operation at a time, on a working copy.
        let mut work = self.state.clone();
        let mut size = self.state_bytes.bytes;
        for op in ops.0 {
            let growth = match &op {
                Add(a) => json_len(&a.value),
                Replace(r) => json_len(&r.value),
                Copy(c) => work.pointer(&c.from.to_string()).map(json_len).unwrap_or(0),
                _ => 0,
            };
            if !self.fits(&work, size, growth) {
                return;
            }
            size += growth;
            if !super::json_patch_atomic::apply(&mut work, &json_patch::Patch(vec![op])) {
                return;
            }
        }
        self.state = work;
        self.state_bytes.bytes = size;
    }

    /// True when a state of (estimated) `size` bytes may grow by `growth`;
    /// an estimate over the cap is recounted exactly before refusing.
    fn fits(&self, state: &Value, size: usize, growth: usize) -> bool {
        let cap = self.state_bytes.cap;
        size.saturating_add(growth) <= cap || json_len(state).saturating_add(growth) <= cap
    }

    /// The same fold with another state cap than [`MAX_STATE_BYTES`] (tests
    /// and the fuzz target use a small one, so hitting it stays cheap).
    pub fn with_state_cap(mut self, cap: usize) -> Fold {
        self.state_bytes.cap = cap;
        self
    }

    /// The text a sealed page is filled to (see [`super::sealed`]);
    /// `usize::MAX` never seals. For tests and fuzz targets comparing the
    /// two: what a fold reads never depends on it.
    pub fn with_page_text(mut self, bytes: usize) -> Fold {
        self.pages = PageSize(bytes);
        self
    }

    fn set_status(&mut self, status: RunStatus) {
        if let Some(run) = &mut self.run {
            run.status = status;
        }
    }

    /// Tool call `ci` of message `mi` (indices from [`Fold::find_tool_call`]).
    fn tool_call_mut(&mut self, mi: usize, ci: usize) -> Option<&mut Value> {
        self.messages
            .get_mut(mi)?
            .make_mut()
            .get_mut("toolCalls")?
            .as_array_mut()?
            .get_mut(ci)
    }

    /// The `function` object of a tool call, made an object when an agent's
    /// snapshot sent something else there (untrusted JSON never panics).
    fn function_mut(&mut self, mi: usize, ci: usize) -> Option<&mut Map<String, Value>> {
        let f = field_mut(self.tool_call_mut(mi, ci)?, "function")?;
        if !f.is_object() {
            *f = json!({});
        }
        f.as_object_mut()
    }

    /// Packs the oldest finished messages not on a page yet into sealed
    /// pages ([`super::sealed`]) once there are two pages' worth of them:
    /// the newest page's worth stays as it is (what a late tool result or
    /// an agent's restatement most likely touches). Runs at a run's end,
    /// before its checkpoint, so the checkpoint shares the pages.
    fn seal_pages(&mut self) {
        let PageSize(page_text) = self.pages;
        let page_cap = page_text.min(super::sealed::MAX_PAGE_TEXT);
        let loose = self.messages.loose_mut();
        let from = loose
            .iter()
            .position(|m| !m.is_sealed())
            .unwrap_or(loose.len());
        loop {
            let loose = self.messages.loose_mut();
            let waiting: usize = loose[from..]
                .iter()
                .filter(|m| m.sealable())
                .map(Message::json_len)
                .sum();
            if waiting < page_text.saturating_mul(2) {
                break;
            }
            let mut filled = 0;
            let authors = &mut self.authors;
            let page: Vec<(&mut Message, Option<RunAgent>)> = loose[from..]
                .iter_mut()
                .filter(|m| m.sealable())
                .take_while(|m| {
                    let room = filled < page_cap;
                    filled += m.json_len();
                    room
                })
                .take(super::sealed::MAX_PAGE_MESSAGES)
                .map(|m| {
                    let origin = authors.take_for_page(m.id().as_deref());
                    (m, origin)
                })
                .collect();
            let page = Message::seal(page);
            self.runs.share_inputs(&page);
            self.authors.seal(page);
        }
        self.messages.freeze();
    }

    fn find(&self, id: &str) -> Option<usize> {
        self.messages.rfind_id(id)
    }

    fn find_tool_call(&self, call_id: &str) -> Option<(usize, usize)> {
        let on_page = |page: &Page| page.may_name_tool_call(call_id);
        self.messages.rev_where(on_page).find_map(|(mi, m)| {
            // A closed message is parsed only if its text names the call.
            if !m.may_name_tool_call(call_id) {
                return None;
            }
            m.value()
                .get("toolCalls")
                .and_then(Value::as_array)?
                .iter()
                .position(|c| c.get("id").and_then(Value::as_str) == Some(call_id))
                .map(|ci| (mi, ci))
        })
    }

    fn merge_snapshot(&mut self, snap: &[Value]) {
        let snap: Vec<Value> = snap.iter().cloned().map(without_null_subagent).collect();
        let id_of = |m: &Value| m.get("id").and_then(Value::as_str).map(str::to_owned);
        let by_id: std::collections::HashMap<String, &Value> = snap
            .iter()
            .filter_map(|m| id_of(m).map(|id| (id, m)))
            .collect();
        let has_role = |role: &str| snap.iter().any(|m| m["role"] == role);
        let (snap_activity, snap_reasoning) = (has_role("activity"), has_role("reasoning"));
        let kept: Vec<Message> = self
            .messages
            .take_all()
            .into_iter()
            .filter_map(|m| {
                let id = m.id()?.to_string();
                if let Some(replacement) = by_id.get(&id) {
                    // Unchanged: still shared with the checkpoints holding it.
                    if m == **replacement {
                        return Some(m);
                    }
                    return Some(Message::open((*replacement).clone()));
                }
                let client_only = (m.role() == "activity" && !snap_activity)
                    || (m.role() == "reasoning" && !snap_reasoning);
                client_only.then_some(m)
            })
            .collect();
        let present: std::collections::HashSet<String> = kept
            .iter()
            .filter_map(|m| Some(m.id()?.to_string()))
            .collect();
        self.messages = kept.into();
        for m in snap {
            if id_of(&m).is_some_and(|id| !present.contains(&id)) {
                self.messages.push(Message::open(m));
            }
        }
    }

    /// The snapshot fields (`messages`, `state`, `interrupts`) as JSON.
    pub fn to_json(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("seq".into(), self.seq.into());
        m.insert(
            "messages".into(),
            Value::Array(self.messages.iter().map(|m| m.to_value()).collect()),
        );
        m.insert("state".into(), self.state.clone());
        m.insert("interrupts".into(), Value::Array(self.interrupts.clone()));
        m.insert("activeAgent".into(), self.agents.active.clone().into());
        m.insert("activeAgentBy".into(), self.agents.by.clone().into());
        m
    }

    /// The stored form of a compacted base: [`Fold::to_json`] plus what the
    /// fold knows beyond the snapshot (which run introduced each message).
    pub fn to_stored_json(&self) -> Map<String, Value> {
        let mut m = self.to_json();
        m.insert("authors".into(), self.authors.to_json());
        m.insert("runs".into(), self.runs.to_json());
        m.insert("agents".into(), self.agents.to_json());
        if self.restating {
            m.insert("restating".into(), true.into());
        }
        m
    }

    /// [`Fold::to_stored_json`] with `extra` entries after it, serialized
    /// straight from the fold: the messages are written where they are,
    /// not copied into a new `Value` first (a long run's message can be
    /// megabytes, and this runs when the run ends).
    pub fn stored_json_bytes(&self, extra: &[(&str, Value)]) -> Vec<u8> {
        use serde::ser::{SerializeMap, Serializer};
        let mut out = Vec::new();
        let mut ser = serde_json::Serializer::new(&mut out);
        let write = |ser: &mut serde_json::Serializer<&mut Vec<u8>>| -> serde_json::Result<()> {
            let mut m = ser.serialize_map(None)?;
            m.serialize_entry("seq", &self.seq)?;
            m.serialize_entry("messages", &self.messages)?;
            m.serialize_entry("state", &self.state)?;
            m.serialize_entry("interrupts", &self.interrupts)?;
            m.serialize_entry("activeAgent", &self.agents.active)?;
            m.serialize_entry("activeAgentBy", &self.agents.by)?;
            m.serialize_entry("authors", &self.authors.to_json())?;
            m.serialize_entry("runs", &self.runs.to_json())?;
            m.serialize_entry("agents", &self.agents.to_json())?;
            if self.restating {
                m.serialize_entry("restating", &true)?;
            }
            for (k, v) in extra {
                m.serialize_entry(k, v)?;
            }
            m.end()
        };
        write(&mut ser).expect("a fold serializes");
        out
    }

    /// Rebuilds a fold from its [`Fold::to_stored_json`] form plus the run info
    /// (used when a thread is reloaded from a stored snapshot). The stored
    /// form may carry `authors`; without it (an older base) every
    /// message's origin is unknown (its visibility fails closed).
    pub fn from_json(v: &Value, run: Option<RunInfo>) -> Fold {
        let mut fold = Fold {
            authors: v.get("authors").map(Authors::from_json).unwrap_or_default(),
            runs: RunTable::default(),
            restating: v.get("restating") == Some(&Value::Bool(true)),
            agents: v
                .get("agents")
                .map(ActiveAgent::from_json)
                .unwrap_or_default(),
            seq: v.get("seq").and_then(Value::as_u64).unwrap_or(0),
            messages: v
                .get("messages")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(Message::closed)
                .collect(),
            state_bytes: SizeEstimate {
                bytes: v.get("state").map(json_len).unwrap_or(2),
                cap: MAX_STATE_BYTES,
            },
            state: v.get("state").cloned().unwrap_or(json!({})),
            interrupts: v
                .get("interrupts")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            run,
            pages: PageSize::default(),
        };
        fold.seal_pages();
        // After sealing, so the run records share the sealed messages.
        if let Some(runs) = v.get("runs") {
            fold.runs = RunTable::from_json_sharing(runs, &fold.messages);
        }
        fold
    }
}

/// Stores an encrypted reasoning artefact on the message or tool call it
/// names, with its type. AG-UI 1.1 (`events/reasoning`,
/// "encryptedValueType"): "The type describes one value and is replaced with
/// it. A consumer that stores a new `encryptedValue` MUST store the event's
/// `encryptedValueType` with it, and MUST remove the stored type when the
/// event carries none. An old type left on new bytes would mislabel them."
fn store_encrypted(target: &mut Map<String, Value>, value: &str, kind: Option<&str>) {
    target.insert("encryptedValue".into(), value.into());
    match kind {
        Some(kind) => target.insert("encryptedValueType".into(), kind.into()),
        None => target.remove("encryptedValueType"),
    };
}

fn copy(from: &Map<String, Value>, to: &mut Map<String, Value>, key: &str) {
    if let Some(v) = from.get(key).filter(|v| !v.is_null()) {
        to.insert(key.into(), v.clone());
    }
}

/// The serialized size of `v`, without allocating it.
fn json_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, v);
    count.0
}

/// `v[key]`, inserted as null when missing; `None` when `v` is not an
/// object (indexing untrusted JSON that way would panic).
fn field_mut<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Value> {
    let obj = v.as_object_mut()?;
    // `entry` would allocate the key on every call, and this runs per delta.
    if !obj.contains_key(key) {
        obj.insert(key.to_owned(), Value::Null);
    }
    obj.get_mut(key)
}

fn append_str(target: &mut Value, key: &str, delta: &str) {
    let Some(obj) = target.as_object_mut() else {
        return;
    };
    // One lookup for the usual case (this runs per delta).
    if let Some(Value::String(s)) = obj.get_mut(key) {
        s.push_str(delta);
        return;
    }
    // Absent, or not a string: replaced where it is (or added last).
    obj.insert(key.to_owned(), delta.into());
}

fn without_null_subagent(mut m: Value) -> Value {
    if let Some(obj) = m.as_object_mut()
        && obj.get("subagentRunId") == Some(&Value::Null)
    {
        obj.remove("subagentRunId");
    }
    m
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::authorship::GATEWAY_FIELD;

    fn fold(events: &[Value]) -> Fold {
        let mut f = Fold::new();
        for (i, e) in events.iter().enumerate() {
            f.apply(i as u64 + 1, &Event::build(e.clone()));
        }
        f
    }

    #[test]
    fn text_tool_call_and_result_fold_like_the_client() {
        let f = fold(&[
            json!({"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"messages":[{"id":"u1","role":"user","content":"hi"}]}}),
            json!({"type":"TEXT_MESSAGE_START","messageId":"a1","role":"assistant"}),
            json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"a1","delta":"Hel"}),
            json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"a1","delta":"lo"}),
            json!({"type":"TEXT_MESSAGE_END","messageId":"a1"}),
            json!({"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"f","parentMessageId":"a1"}),
            json!({"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"{\"x\":"}),
            json!({"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"1}"}),
            json!({"type":"TOOL_CALL_END","toolCallId":"c1"}),
            json!({"type":"TEXT_MESSAGE_START","messageId":"a2"}),
            json!({"type":"TOOL_CALL_RESULT","messageId":"t1","toolCallId":"c1","content":"ok"}),
            json!({"type":"RUN_FINISHED","threadId":"t","runId":"r"}),
        ]);
        assert_eq!(
            f.to_json()["messages"].as_array().unwrap(),
            &[
                json!({"id":"u1","role":"user","content":"hi"}),
                json!({"id":"a1","role":"assistant","content":"Hello","toolCalls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]}),
                json!({"id":"t1","toolCallId":"c1","role":"tool","content":"ok"}),
                json!({"id":"a2","role":"assistant","content":""}),
            ]
        );
        assert_eq!(f.run().unwrap().status, RunStatus::Finished);
        assert_eq!(f.seq, 12);
    }

    /// Run `i` of a conversation: a question, an answer with a tool call,
    /// its result and a second answer (also folded by the spill file's
    /// tests, `crate::store::page_file`).
    pub(crate) fn demo_run(i: usize) -> Vec<Value> {
        let r = format!("r{i}");
        let text = format!("run {i} answers the same question as the run before it did");
        vec![
            json!({"type":"RUN_STARTED","threadId":"t","runId":r,"input":{"messages":[{"id":format!("u{i}"),"role":"user","content":format!("question {i}")}]}}),
            json!({"type":"TEXT_MESSAGE_START","messageId":format!("a{i}"),"role":"assistant"}),
            json!({"type":"TEXT_MESSAGE_CONTENT","messageId":format!("a{i}"),"delta":text}),
            json!({"type":"TOOL_CALL_START","toolCallId":format!("c{i}"),"toolCallName":"lookup","parentMessageId":format!("a{i}")}),
            json!({"type":"TOOL_CALL_ARGS","toolCallId":format!("c{i}"),"delta":"{\"q\":1}"}),
            json!({"type":"TOOL_CALL_RESULT","messageId":format!("t{i}"),"toolCallId":format!("c{i}"),"content":"ok"}),
            json!({"type":"TEXT_MESSAGE_START","messageId":format!("b{i}"),"role":"assistant"}),
            json!({"type":"TEXT_MESSAGE_CONTENT","messageId":format!("b{i}"),"delta":text}),
            json!({"type":"RUN_FINISHED","threadId":"t","runId":r}),
        ]
    }

    /// A thread whose runs each write many messages remembers fewer runs,
    /// by what their records weigh: the newest ones, together within
    /// [`RUN_TABLE_BYTES`](super::super::lineage::RUN_TABLE_BYTES); and a
    /// fold read back from its stored form remembers the very same runs
    /// (every node drops the same ones). Before the byte bound all 120
    /// stayed, 2.4 MB of ids.
    #[test]
    fn heavy_runs_are_remembered_by_what_they_weigh() {
        use crate::protocol::lineage::{RUN_TABLE_BYTES, RunRecord};
        let id = |i: usize, k: usize| format!("{}-{i}-{k}", "m".repeat(1000));
        let mut events = Vec::new();
        for i in 0..120 {
            events.push(json!({"type":"RUN_STARTED","threadId":"t","runId":format!("r{i}")}));
            for k in 0..20 {
                let m = id(i, k);
                events.push(json!({"type":"TEXT_MESSAGE_START","messageId":m,"role":"assistant"}));
                events.push(json!({"type":"TEXT_MESSAGE_CONTENT","messageId":m,"delta":"x"}));
                events.push(json!({"type":"TEXT_MESSAGE_END","messageId":m}));
            }
            events.push(json!({"type":"RUN_FINISHED","threadId":"t","runId":format!("r{i}")}));
        }
        let f = fold(&events);
        let runs: Vec<&str> = f.runs().iter().map(|r| r.run_id.as_str()).collect();
        let first: usize = runs[0][1..].parse().unwrap();
        let newest: Vec<String> = (first..120).map(|i| format!("r{i}")).collect();
        assert_eq!(runs, newest, "the newest runs, in order");
        assert!((10..120).contains(&runs.len()), "{} runs kept", runs.len());
        let weight: usize = f.runs().iter().map(RunRecord::weight).sum();
        let each = f.runs().head().unwrap().weight();
        assert!(weight <= RUN_TABLE_BYTES, "{weight} bytes kept");
        assert!(
            weight + each > RUN_TABLE_BYTES,
            "no more dropped than needed"
        );

        let reloaded = Fold::from_json(&Value::Object(f.to_stored_json()), None);
        assert_eq!(reloaded.runs(), f.runs());
    }

    #[test]
    fn a_long_conversation_is_sealed_into_pages_and_reads_as_before() {
        let mut events: Vec<Value> = (0..400).flat_map(demo_run).collect();
        // Late events touching a message long sealed: args appended to an
        // old call, a result for it, a delta to an old answer.
        events.push(json!({"type":"RUN_STARTED","threadId":"t","runId":"late"}));
        events.push(json!({"type":"TOOL_CALL_ARGS","toolCallId":"c3","delta":" "}));
        events.push(json!({"type":"TOOL_CALL_RESULT","messageId":"t3b","toolCallId":"c3","content":"again"}));
        events.push(json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"b5","delta":"!"}));
        events.push(json!({"type":"RUN_FINISHED","threadId":"t","runId":"late"}));
        let mut sealed = Fold::new();
        let mut plain = Fold::new().with_page_text(usize::MAX);
        for (i, e) in events.iter().enumerate() {
            let e = Event::build(e.clone());
            assert_eq!(
                sealed.apply(i as u64 + 1, &e),
                plain.apply(i as u64 + 1, &e)
            );
        }
        let on_pages = sealed.messages().iter().filter(|m| m.is_sealed()).count();
        assert!(
            on_pages > 1000,
            "{on_pages} of {} sealed",
            sealed.messages().len()
        );
        assert_eq!(plain.messages().iter().filter(|m| m.is_sealed()).count(), 0);
        assert_eq!(sealed, plain);
        assert_eq!(sealed.to_json(), plain.to_json());
        // The late events landed where they would have.
        let at = |f: &Fold, id: &str| {
            f.messages()
                .iter()
                .position(|m| m.id().as_deref() == Some(id))
        };
        assert_eq!(at(&sealed, "t3b"), Some(at(&sealed, "t3").unwrap() + 1));
        assert_eq!(
            sealed.message("b5").unwrap().value()["content"]
                .as_str()
                .unwrap()
                .chars()
                .last(),
            Some('!')
        );
        assert!(
            sealed.message("a3").unwrap().value()["toolCalls"][0]["function"]["arguments"]
                .as_str()
                .unwrap()
                .ends_with(' ')
        );
        // Packed, the conversation holds well under its text.
        let text: usize = sealed.messages().iter().map(|m| m.json_len()).sum();
        let held: usize = sealed
            .messages()
            .iter()
            .map(|m| m.approx_bytes(VALUE_BYTES_PER_JSON_BYTE))
            .sum();
        assert!(held < text, "{held} bytes held for {text} of text");
        // A checkpoint shares the pages, and a fold at it reads the same.
        let at_end = Fold::at_checkpoint(sealed.runs().get("r399").unwrap().checkpoint().unwrap());
        let plain_end =
            Fold::at_checkpoint(plain.runs().get("r399").unwrap().checkpoint().unwrap());
        assert_eq!(at_end.messages(), plain_end.messages());
        assert!(at_end.messages().iter().any(|m| m.is_sealed()));
    }

    #[test]
    fn sealed_messages_keep_their_origins_on_their_pages() {
        // Runs of two agents in turn, then an agent's snapshot that drops
        // an old message, and a later run bringing a message under its id
        // again: each message's origin reads as a fold that never seals says.
        let mut events = Vec::new();
        for i in 0..300 {
            let mut run = demo_run(i);
            let agent = if i % 3 == 0 { "full" } else { "echo" };
            run[0][GATEWAY_FIELD] = json!({"agent": agent});
            events.extend(run);
        }
        let snapshot: Vec<Value> = fold(&events)
            .messages()
            .iter()
            .filter(|m| m.id().as_deref() != Some("u7"))
            .map(|m| m.to_value())
            .collect();
        events.push(json!({"type":"RUN_STARTED","threadId":"t","runId":"s","agui-gateway":{"agent":"full"}}));
        events.push(json!({"type":"MESSAGES_SNAPSHOT","messages":snapshot}));
        events.push(json!({"type":"RUN_FINISHED","threadId":"t","runId":"s"}));
        events.push(json!({"type":"RUN_STARTED","threadId":"t","runId":"back","agui-gateway":{"agent":"full"},
            "input":{"messages":[{"id":"u7","role":"user","content":"again"}]}}));
        events.push(json!({"type":"RUN_FINISHED","threadId":"t","runId":"back"}));
        let mut sealed = Fold::new().with_page_text(512);
        let mut plain = Fold::new().with_page_text(usize::MAX);
        let mut sealed_mid = None;
        for (i, e) in events.iter().enumerate() {
            let e = Event::build(e.clone());
            assert_eq!(
                sealed.apply(i as u64 + 1, &e),
                plain.apply(i as u64 + 1, &e)
            );
            if i == 300 * 9 - 1 {
                sealed_mid = Some(sealed.clone());
            }
        }
        assert_eq!(sealed, plain);
        let sealed_mid = sealed_mid.unwrap();
        assert!(
            sealed_mid
                .messages()
                .iter()
                .filter(|m| m.is_sealed())
                .count()
                > 1000
        );
        for m in sealed.messages().iter() {
            let id = m.id();
            assert_eq!(
                sealed.authors().of_message(id.as_deref()),
                plain.authors().of_message(id.as_deref()),
                "{id:?}"
            );
        }
        // u7 was echo's, left the conversation, and came back with a run of full's.
        assert_eq!(
            sealed.authors().of_message(Some("u7")),
            &RunAgent::Agent("full".into())
        );
        assert_eq!(
            sealed.authors().of_message(Some("a3")),
            &RunAgent::Agent("full".into())
        );
        assert_eq!(
            sealed.authors().of_message(Some("a4")),
            &RunAgent::Agent("echo".into())
        );
        assert_eq!(sealed.authors().to_json(), plain.authors().to_json());
        // The map keeps only what is not on a page.
        assert!(
            sealed_mid.authors().approx_bytes() * 20 < plain.authors().approx_bytes(),
            "{} against {}",
            sealed_mid.authors().approx_bytes(),
            plain.authors().approx_bytes()
        );
        // A stored base reads back the same origins.
        let back = Fold::from_json(&Value::Object(sealed_mid.to_stored_json()), None);
        assert_eq!(back.authors(), sealed_mid.authors());
    }

    #[test]
    fn sealed_duplicate_ids_do_not_make_origins_forgotten_early() {
        // Three tool results under one id (an agent may send that), then a
        // snapshot without "x": a fold that never seals keeps x's origin
        // (its map holds no more ids than the conversation has messages),
        // so one that seals must too, counting ids and not page entries
        // (found by the `fold` fuzz target).
        let a = json!({"agent": "a"});
        let events = [
            json!({"type":"RUN_STARTED","threadId":"t","runId":"r1","agui-gateway":a,
                "input":{"messages":[{"id":"u","role":"user","content":"q"}]}}),
            json!({"type":"TOOL_CALL_RESULT","messageId":"c","toolCallId":"k","content":"1"}),
            json!({"type":"TOOL_CALL_RESULT","messageId":"c","toolCallId":"k","content":"2"}),
            json!({"type":"TOOL_CALL_RESULT","messageId":"c","toolCallId":"k","content":"3"}),
            json!({"type":"TOOL_CALL_RESULT","messageId":"x","toolCallId":"k","content":"4"}),
            json!({"type":"RUN_FINISHED","threadId":"t","runId":"r1"}),
            json!({"type":"RUN_STARTED","threadId":"t","runId":"r2","agui-gateway":a}),
            json!({"type":"MESSAGES_SNAPSHOT","messages":[
                {"id":"u","role":"user","content":"q"},
                {"id":"c","role":"tool","toolCallId":"k","content":"1"}]}),
            json!({"type":"RUN_FINISHED","threadId":"t","runId":"r2"}),
            json!({"type":"RUN_STARTED","threadId":"t","runId":"r3","agui-gateway":{"agent":"b"},
                "input":{"messages":[{"id":"x","role":"user","content":"again"}]}}),
            json!({"type":"RUN_FINISHED","threadId":"t","runId":"r3"}),
        ];
        let mut sealed = Fold::new().with_page_text(1);
        let mut plain = Fold::new().with_page_text(usize::MAX);
        for (i, e) in events.iter().enumerate() {
            let e = Event::build(e.clone());
            sealed.apply(i as u64 + 1, &e);
            plain.apply(i as u64 + 1, &e);
        }
        assert!(sealed.messages().iter().any(|m| m.is_sealed()));
        assert_eq!(
            plain.authors().of_message(Some("x")),
            &RunAgent::Agent("a".into())
        );
        assert_eq!(
            sealed.authors().of_message(Some("x")),
            &RunAgent::Agent("a".into())
        );
        assert_eq!(sealed, plain);
    }

    #[test]
    fn a_conversation_restated_changed_every_run_does_not_pile_up_pages() {
        // An agent that restates the whole conversation, changed, at every
        // run's end: every message is sealed again under its id. What the
        // fold keeps for origins must stay as large as the conversation.
        let restated = |run: usize| -> Vec<Value> {
            let messages: Vec<Value> = (0..40)
                .map(|i| {
                    json!({"id": format!("m{i}"), "role": "assistant",
                    "content": format!("message {i} as run {run} tells it")})
                })
                .collect();
            vec![
                json!({"type":"RUN_STARTED","threadId":"t","runId":format!("r{run}"),
                    "agui-gateway":{"agent":"a"}}),
                json!({"type":"MESSAGES_SNAPSHOT","messages":messages}),
                json!({"type":"RUN_FINISHED","threadId":"t","runId":format!("r{run}")}),
            ]
        };
        let mut sealed = Fold::new().with_page_text(256);
        let mut plain = Fold::new().with_page_text(usize::MAX);
        let mut seq = 0;
        let mut held_at_100 = 0;
        for run in 0..300 {
            for e in restated(run) {
                seq += 1;
                let e = Event::build(e);
                sealed.apply(seq, &e);
                plain.apply(seq, &e);
            }
            if run == 100 {
                held_at_100 = sealed.authors().pages_held();
            }
        }
        assert_eq!(sealed, plain);
        let held = sealed.authors().pages_held();
        assert!(held_at_100 > 0);
        assert!(
            held <= held_at_100 + 2,
            "{held} pages held after 300 runs, {held_at_100} after 100"
        );
    }

    #[test]
    fn a_delta_whose_move_fails_after_an_add_leaves_state_alone() {
        // `json_patch::patch` panics undoing it (found by the fuzz target).
        let f = fold(&[
            json!({"type":"STATE_SNAPSHOT","snapshot":{"k":1}}),
            json!({"type":"STATE_DELTA","delta":[
                {"op":"add","path":"/-","value":1},
                {"op":"add","path":"/~0","value":[null,2]},
                {"op":"move","from":"/~0","path":"/x/y"}]}),
            json!({"type":"ACTIVITY_SNAPSHOT","messageId":"act","activityType":"a","content":{"n":1}}),
            json!({"type":"ACTIVITY_DELTA","messageId":"act","activityType":"a","patch":[
                {"op":"add","path":"/~0","value":2},
                {"op":"move","from":"/~0","path":"/x/y"}]}),
        ]);
        assert_eq!(*f.state(), json!({"k": 1}));
        assert_eq!(
            f.message("act").unwrap().value()["content"],
            json!({"n": 1})
        );
    }

    #[test]
    fn tool_call_without_parent_creates_assistant_message() {
        let f = fold(&[json!({"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"g"})]);
        assert_eq!(f.messages().get(0).unwrap().value()["id"], "c");
        assert_eq!(
            f.messages().get(0).unwrap().value()["toolCalls"][0]["function"]["name"],
            "g"
        );
    }

    #[test]
    fn state_snapshot_and_atomic_delta() {
        let f = fold(&[
            json!({"type":"STATE_SNAPSHOT","snapshot":{"a":1,"l":[1]}}),
            json!({"type":"STATE_DELTA","delta":[{"op":"replace","path":"/a","value":2},{"op":"add","path":"/l/-","value":2}]}),
            // Second op fails: the whole patch is reverted.
            json!({"type":"STATE_DELTA","delta":[{"op":"replace","path":"/a","value":3},{"op":"remove","path":"/missing"}]}),
        ]);
        assert_eq!(f.state(), &json!({"a":2,"l":[1,2]}));
    }

    #[test]
    fn interrupts_are_pending_until_the_next_run() {
        let mut f = fold(&[
            json!({"type":"RUN_STARTED","threadId":"t","runId":"r1"}),
            json!({"type":"RUN_FINISHED","threadId":"t","runId":"r1","outcome":{"type":"interrupt","interrupts":[{"id":"i1","reason":"tool_call"}]}}),
        ]);
        assert_eq!(f.run().unwrap().status, RunStatus::Interrupted);
        assert_eq!(f.interrupts()[0]["id"], "i1");
        f.apply(
            3,
            &Event::build(json!({"type":"RUN_STARTED","threadId":"t","runId":"r2"})),
        );
        assert!(f.interrupts().is_empty());
        f.apply(4, &Event::build(json!({"type":"RUN_FINISHED","threadId":"t","runId":"r2","outcome":{"type":"cancelled"}})));
        assert_eq!(f.run().unwrap().status, RunStatus::Cancelled);
    }

    #[test]
    fn a_late_run_error_after_run_finished_fails_the_run() {
        // AG-UI 1.1 `events/lifecycle`: "A consumer MUST treat the run as
        // failed in that case" — and a failed run waits for nothing.
        let f = fold(&[
            json!({"type":"RUN_STARTED","threadId":"t","runId":"r"}),
            json!({"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt","interrupts":[{"id":"i1","reason":"tool_call"}]}}),
            json!({"type":"RUN_ERROR","message":"flush failed"}),
        ]);
        assert_eq!(f.run().unwrap().status, RunStatus::Error);
        assert_eq!(f.run().unwrap().run_id, "r");
        assert!(f.interrupts().is_empty());
    }

    #[test]
    fn messages_snapshot_merges_and_keeps_client_only_reasoning() {
        let f = fold(&[
            json!({"type":"REASONING_MESSAGE_START","messageId":"r","role":"reasoning"}),
            json!({"type":"REASONING_MESSAGE_CONTENT","messageId":"r","delta":"hmm"}),
            json!({"type":"TEXT_MESSAGE_START","messageId":"a"}),
            json!({"type":"TEXT_MESSAGE_START","messageId":"gone"}),
            json!({"type":"MESSAGES_SNAPSHOT","messages":[{"id":"a","role":"assistant","content":"final"},{"id":"new","role":"user","content":"x","subagentRunId":null}]}),
        ]);
        assert_eq!(
            f.to_json()["messages"].as_array().unwrap(),
            &[
                json!({"id":"r","role":"reasoning","content":"hmm"}),
                json!({"id":"a","role":"assistant","content":"final"}),
                json!({"id":"new","role":"user","content":"x"}),
            ]
        );
    }

    #[test]
    fn activity_snapshot_and_delta() {
        let f = fold(&[
            json!({"type":"ACTIVITY_SNAPSHOT","messageId":"p","activityType":"plan","content":{"steps":["a"]}}),
            json!({"type":"ACTIVITY_DELTA","messageId":"p","activityType":"plan","patch":[{"op":"add","path":"/steps/-","value":"b"}]}),
            json!({"type":"ACTIVITY_SNAPSHOT","messageId":"p","activityType":"plan","content":{"steps":[]},"replace":false}),
        ]);
        assert_eq!(
            f.messages().get(0).unwrap().value()["content"],
            json!({"steps":["a","b"]})
        );
    }

    #[test]
    fn stored_bytes_are_the_stored_json() {
        let f = fold(&[
            json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r1", "input": {"messages": [{"id": "u1", "role": "user", "content": "hi"}]}}),
            json!({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"}),
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "yo"}),
            json!({"type": "TEXT_MESSAGE_END", "messageId": "m1"}),
            json!({"type": "STATE_SNAPSHOT", "snapshot": {"k": [1, 2]}}),
            json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r1"}),
        ]);
        let mut expected = f.to_stored_json();
        expected.insert("runIds".into(), json!(["r1"]));
        let bytes = f.stored_json_bytes(&[("runIds", json!(["r1"]))]);
        assert_eq!(
            serde_json::from_slice::<Value>(&bytes).unwrap(),
            Value::Object(expected)
        );
    }

    #[test]
    fn json_form_round_trips() {
        let f = fold(&[
            json!({"type":"TEXT_MESSAGE_START","messageId":"a"}),
            json!({"type":"STATE_SNAPSHOT","snapshot":{"k":true}}),
        ]);
        let back = Fold::from_json(&Value::Object(f.to_stored_json()), f.run().cloned());
        assert_eq!(back, f);
    }

    #[test]
    fn each_event_and_message_belongs_to_its_own_runs_agent() {
        let mut f = Fold::new();
        let start = |run: &str, agent: &str| {
            Event::build(json!({"type":"RUN_STARTED","threadId":"t","runId":run,
                "agui-gateway": {"agent": agent},
                "input":{"messages":[{"id":format!("u-{run}"),"role":"user","content":"hi"}]}}))
        };
        let echo = RunAgent::Agent("echo".into());
        let full = RunAgent::Agent("full".into());
        let events = [
            (start("r1", "echo"), echo.clone()),
            (
                Event::build(
                    json!({"type":"REASONING_MESSAGE_START","messageId":"think1","role":"reasoning"}),
                ),
                echo.clone(),
            ),
            (
                Event::build(json!({"type":"RUN_FINISHED","threadId":"t","runId":"r1"})),
                echo.clone(),
            ),
            (
                Event::build(json!({"type":"META","id":"m"})),
                RunAgent::Outside,
            ),
            (start("r2", "full"), full.clone()),
            (
                Event::build(
                    json!({"type":"REASONING_MESSAGE_START","messageId":"think2","role":"reasoning"}),
                ),
                full.clone(),
            ),
            (
                Event::build(json!({"type":"STATE_SNAPSHOT","snapshot":{"a":1}})),
                full.clone(),
            ),
            (
                Event::build(json!({"type":"RUN_ERROR","message":"x"})),
                full.clone(),
            ),
        ];
        for (seq, (e, origin)) in events.iter().enumerate() {
            assert_eq!(&f.apply(seq as u64 + 1, e), origin, "event {seq}");
        }
        let a = f.authors();
        assert_eq!(a.of_message(Some("u-r1")), &echo);
        assert_eq!(a.of_message(Some("think1")), &echo);
        assert_eq!(a.of_message(Some("u-r2")), &full);
        assert_eq!(a.of_message(Some("think2")), &full);
        assert_eq!(a.of_state(), std::slice::from_ref(&full));
        // A RUN_STARTED the gateway did not stamp (an older journal): unknown.
        let bare = Event::build(json!({"type":"RUN_STARTED","threadId":"t","runId":"r3"}));
        assert_eq!(f.apply(9, &bare), RunAgent::Unknown);
        // The stored base keeps the attribution.
        let back = Fold::from_json(&Value::Object(f.to_stored_json()), f.run().cloned());
        assert_eq!(back.authors(), f.authors());
    }

    #[test]
    fn malformed_agent_snapshots_never_panic() {
        // An agent's MESSAGES_SNAPSHOT is untrusted: `function`, `toolCalls`
        // and messages of the wrong JSON type must not make later events panic.
        let f = fold(&[
            json!({"type":"MESSAGES_SNAPSHOT","messages":[
                {"id":"a","role":"assistant","toolCalls":[{"id":"c1","function":"oops"},{"id":"c2","function":7}]},
                {"id":"b","role":"assistant","toolCalls":"nope"},
                "not an object", 42, null
            ]}),
            json!({"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"n"}),
            json!({"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"{}"}),
            json!({"type":"TOOL_CALL_ARGS","toolCallId":"c2","delta":"{"}),
            json!({"type":"TOOL_CALL_START","toolCallId":"c3","toolCallName":"m","parentMessageId":"b"}),
            json!({"type":"REASONING_ENCRYPTED_VALUE","subtype":"tool-call","entityId":"c2","encryptedValue":"x"}),
            json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"a","delta":"hi"}),
            json!({"type":"ACTIVITY_SNAPSHOT","messageId":"p","activityType":"plan","content":3}),
            json!({"type":"ACTIVITY_DELTA","messageId":"p","patch":[{"op":"add","path":"/x","value":1}]}),
        ]);
        let a = f.messages().get(0).unwrap().to_value();
        assert_eq!(
            a["toolCalls"][0]["function"],
            json!({"name":"n","arguments":"{}"})
        );
        assert_eq!(a["toolCalls"][1]["function"], json!({"arguments":"{"}));
        assert_eq!(a["toolCalls"][1]["encryptedValue"], "x");
        assert_eq!(a["content"], "hi");
        assert_eq!(
            f.messages().get(1).unwrap().value()["toolCalls"][0]["id"],
            "c3"
        );
    }

    #[test]
    fn an_encrypted_value_carries_its_type_and_a_new_value_without_one_clears_it() {
        let value = |subtype: &str, entity: &str, v: &str, kind: Option<&str>| {
            let mut e = json!({"type":"REASONING_ENCRYPTED_VALUE","subtype":subtype,"entityId":entity,"encryptedValue":v});
            if let Some(k) = kind {
                e["encryptedValueType"] = k.into();
            }
            e
        };
        let mut events = vec![
            json!({"type":"REASONING_MESSAGE_START","messageId":"r","role":"reasoning"}),
            json!({"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"f","parentMessageId":"a"}),
            value("message", "r", "sig", Some("anthropic.signature")),
            value("tool-call", "c", "enc", Some("openai.encrypted_content")),
        ];
        let f = fold(&events);
        assert_eq!(
            f.messages().get(0).unwrap().value()["encryptedValue"],
            "sig"
        );
        assert_eq!(
            f.messages().get(0).unwrap().value()["encryptedValueType"],
            "anthropic.signature"
        );
        let second = f.messages().get(1).unwrap().to_value();
        let call = &second["toolCalls"][0];
        assert_eq!(call["encryptedValue"], "enc");
        assert_eq!(call["encryptedValueType"], "openai.encrypted_content");
        // New bytes of another kind replace both; new bytes without a type
        // leave none (the old one would mislabel them).
        events.push(value(
            "message",
            "r",
            "redacted",
            Some("anthropic.redacted_thinking"),
        ));
        events.push(value("tool-call", "c", "enc2", None));
        let f = fold(&events);
        assert_eq!(
            f.messages().get(0).unwrap().value()["encryptedValue"],
            "redacted"
        );
        assert_eq!(
            f.messages().get(0).unwrap().value()["encryptedValueType"],
            "anthropic.redacted_thinking"
        );
        let message = f.messages().get(1).unwrap().to_value();
        let call = message["toolCalls"][0].as_object().unwrap();
        assert_eq!(call["encryptedValue"], "enc2");
        assert!(!call.contains_key("encryptedValueType"), "{call:?}");
    }

    #[test]
    fn copy_deltas_cannot_grow_the_state_without_bound() {
        // The fuzz target's reproducer, in spirit: each delta copies the root.
        let mut events = vec![json!({"type":"STATE_SNAPSHOT","snapshot":{"k":"x".repeat(1000)}})];
        for i in 0..40 {
            events.push(json!({"type":"STATE_DELTA","delta":[{"op":"copy","from":"","path":format!("/a{i}")}]}));
        }
        // And one delta doubling forty times on its own.
        let doubling: Vec<Value> = (0..40)
            .map(|i| json!({"op":"copy","from":"","path":format!("/b{i}")}))
            .collect();
        events.push(json!({"type":"STATE_DELTA","delta": doubling}));
        let cap = 1 << 20;
        let mut f = Fold::new().with_state_cap(cap);
        for (i, e) in events.iter().enumerate() {
            f.apply(i as u64 + 1, &Event::build(e.clone()));
        }
        let size = json_len(f.state());
        assert!(size <= cap, "{size}");
        assert!(size > cap / 4, "grew until the cap: {size}");
        // Ordinary deltas still apply.
        let f = fold(&[
            json!({"type":"STATE_SNAPSHOT","snapshot":{"a":1}}),
            json!({"type":"STATE_DELTA","delta":[{"op":"copy","from":"/a","path":"/b"},{"op":"add","path":"/c","value":[1,2]}]}),
        ]);
        assert_eq!(f.state(), &json!({"a":1,"b":1,"c":[1,2]}));
    }

    /// A run's checkpoint shares every message its base's holds unchanged:
    /// a thousand turns cost a pointer per message per kept checkpoint, not
    /// a copy of the conversation per run.
    #[test]
    fn checkpoints_share_what_did_not_change() {
        let mut f = Fold::new();
        let mut seq = 0;
        let mut next = |f: &mut Fold, v: Value| {
            seq += 1;
            f.apply(seq, &Event::build(v));
        };
        for r in 0..5 {
            let run = format!("r{r}");
            next(
                &mut f,
                json!({"type": "RUN_STARTED", "threadId": "t", "runId": run,
                "agui-gateway": {"agent": "a", "kind": "continue", "parentRunId": if r == 0 { Value::Null } else { json!(format!("r{}", r - 1)) }},
                "input": {"messages": [{"id": format!("u{r}"), "role": "user", "content": "q"}]}}),
            );
            next(
                &mut f,
                json!({"type": "TEXT_MESSAGE_START", "messageId": format!("a{r}"), "role": "assistant"}),
            );
            next(
                &mut f,
                json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": format!("a{r}"), "delta": "x"}),
            );
            next(
                &mut f,
                json!({"type": "TEXT_MESSAGE_END", "messageId": format!("a{r}")}),
            );
            next(
                &mut f,
                json!({"type": "RUN_FINISHED", "threadId": "t", "runId": run}),
            );
        }
        let c3 = f.runs().get("r3").unwrap().checkpoint().unwrap().clone();
        let c4 = f.runs().get("r4").unwrap().checkpoint().unwrap().clone();
        assert_eq!(c4.shared_messages().len(), 10);
        let shared = c4
            .shared_messages()
            .iter()
            .filter(|m| c3.shared_messages().iter().any(|p| Message::ptr_eq(p, m)))
            .count();
        assert_eq!(shared, 8, "all but r4's own two messages are shared");
        assert!(c3.shares_state_with(&c4));
        // The stored form writes each message once and reads back equal.
        let stored = f.runs().to_json();
        assert_eq!(stored["messages"].as_array().unwrap().len(), 10);
        assert_eq!(
            crate::protocol::lineage::RunTable::from_json(&stored),
            *f.runs()
        );
    }

    /// What a run wrote is kept as text once it ends (the tree it was
    /// written in is freed), and reads back the same; a message changed
    /// later (a tool result's owner, a late encrypted value) opens again.
    #[test]
    fn a_run_s_messages_are_closed_at_its_end() {
        let run = |r: &str| {
            vec![
                json!({"type":"RUN_STARTED","threadId":"t","runId":r,"input":{"messages":[{"id":format!("u-{r}"),"role":"user","content":"hi"}]}}),
                json!({"type":"TEXT_MESSAGE_START","messageId":format!("a-{r}"),"role":"assistant"}),
                json!({"type":"TEXT_MESSAGE_CONTENT","messageId":format!("a-{r}"),"delta":"hel"}),
                json!({"type":"TEXT_MESSAGE_CONTENT","messageId":format!("a-{r}"),"delta":"lo"}),
                json!({"type":"TEXT_MESSAGE_END","messageId":format!("a-{r}")}),
            ]
        };
        let mut events = run("r1");
        let open = fold(&events);
        assert!(
            open.messages().iter().all(|m| m.is_open()),
            "open while the run writes"
        );
        events.push(json!({"type":"RUN_FINISHED","threadId":"t","runId":"r1"}));
        let mut f = fold(&events);
        assert!(f.messages().iter().all(|m| !m.is_open()));
        assert_eq!(f.to_json()["messages"], open.to_json()["messages"]);
        assert_eq!(f.message("a-r1").unwrap().value()["content"], "hello");
        let closed = f.messages().get(1).unwrap().clone();
        let checkpoint = f.runs().get("r1").unwrap().checkpoint().unwrap().clone();
        assert!(
            checkpoint.messages().any(|m| Message::ptr_eq(&m, &closed)),
            "the run's end view shares the closed message"
        );
        f.apply(
            99,
            &Event::build(json!({"type":"REASONING_ENCRYPTED_VALUE","subtype":"message","entityId":"a-r1","encryptedValue":"e"})),
        );
        assert!(f.messages().get(1).unwrap().is_open());
        assert_eq!(f.messages().get(1).unwrap().value()["encryptedValue"], "e");
        assert!(
            checkpoint
                .messages()
                .all(|m| m.value().get("encryptedValue").is_none())
        );
    }
}
