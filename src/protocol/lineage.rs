//! Runs as commits: a thread's run tree, folded from its journal.
//!
//! AG-UI's serialization concept describes a thread as "a git-like
//! append-only log" in which a run may start from any earlier run
//! (`parentRunId`). The gateway keeps one gapless journal per thread and
//! records the tree *in* it: every `RUN_STARTED` it journals carries, in its
//! `"agui-gateway"` object ([`super::authorship`]), the run's base
//! (`parentRunId`), its [`RunKind`], who started it and when. So this table
//! is a fold like the messages are — every node, every reload and every
//! replay derives the same runs and the same head from the events alone, and
//! persisting it is persisting the journal (plus the compacted base, which
//! stores the table).
//!
//! The **head** is the newest run started: the run the next plain run
//! continues from, and the branch a late joiner sees. A run whose base is
//! not the head journals the history it was given as snapshots right after
//! its `RUN_STARTED`, so the journal stays a valid linear AG-UI stream that
//! ends on the head's branch (see [`crate::protocol::fold`]).
//!
//! Each ended run keeps a [`Checkpoint`] — its messages, state and pending
//! interrupts — so the input of a branch from it, or the view "as it was at
//! the end of run R", costs a clone instead of a replay. Checkpoints are
//! bounded by bytes per thread (the oldest go first); a run without one is
//! rebuilt by replaying the journal from its nearest ancestor that has one
//! (`thread::lineage`).

use super::authorship::{GATEWAY_FIELD, RunAgent};
pub use super::checkpoint::Checkpoint;
use super::checkpoint::{Pools, checkpoint_from_json};
use super::event::{Event, EventType};
use super::id_list::IdList;
use super::message::Message;
use super::message_list::MessageList;
use super::run_list::RunList;
use super::sealed::IdStr;
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::Arc;

/// Where the thread's latest run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Finished,
    Interrupted,
    Cancelled,
    Error,
}

impl RunStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Finished => "finished",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Error => "error",
        }
    }
}

/// How a run relates to its base.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunKind {
    /// On top of the head (the usual next turn).
    Continue,
    /// From another run than the head (`parentRunId`).
    Branch,
    /// Answers an assistant message again: a sibling of the run that produced it.
    Regenerate,
    /// A user message with new content (same id): a sibling of the run that introduced it.
    Edit,
    /// Answers the head's pending interrupts.
    Resume,
    /// Another agent takes the thread over from the run that handed it on.
    Handoff,
}

impl RunKind {
    pub const ALL: [RunKind; 6] = [
        RunKind::Continue,
        RunKind::Branch,
        RunKind::Regenerate,
        RunKind::Edit,
        RunKind::Resume,
        RunKind::Handoff,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Continue => "continue",
            RunKind::Branch => "branch",
            RunKind::Regenerate => "regenerate",
            RunKind::Edit => "edit",
            RunKind::Resume => "resume",
            RunKind::Handoff => "handoff",
        }
    }

    pub fn parse(s: &str) -> Option<RunKind> {
        RunKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// True for the kinds whose base may be other than the head: their
    /// journaled opening restates the history ([`LINEAGE_EVENT`]), and the
    /// fold takes that restatement exactly.
    pub fn forks(self) -> bool {
        matches!(
            self,
            RunKind::Branch | RunKind::Regenerate | RunKind::Edit | RunKind::Handoff
        )
    }
}

/// The `CUSTOM` event name a forked run journals after its snapshots.
pub const LINEAGE_EVENT: &str = "agui-gateway/lineage";

/// What the journaled `RUN_STARTED` says of its run's place in the tree
/// (beside the agent, in the same `"agui-gateway"` object).
#[derive(Debug, Clone, PartialEq)]
pub struct Stamp {
    pub agent: String,
    pub parent: Option<String>,
    pub kind: RunKind,
    /// The subject of the principal who started it.
    pub by: Option<String>,
    /// Milliseconds since the epoch, when the gateway journaled it.
    pub at: u64,
    /// For a fork, whose journaled input restates the whole branch (so a
    /// stock client's reducer, which appends what it lacks, keeps the
    /// branch's order): how many of its last messages are new.
    pub new_messages: Option<usize>,
}

impl Stamp {
    /// `event` (a `RUN_STARTED` about to be journaled) stamped with this:
    /// the `"agui-gateway"` object replaces whatever an upstream put there
    /// (the journal's attribution is the gateway's word, never the
    /// agent's), and a forked run's `parentRunId` is set when the agent
    /// left it empty (AG-UI's lineage pointer; a linear run needs none:
    /// the stream's order says it).
    pub fn apply(&self, event: &Event) -> Event {
        event.modify(|b| {
            b.insert(GATEWAY_FIELD.into(), self.to_json());
            if self.kind.forks()
                && let Some(parent) = &self.parent
                && b.get("parentRunId").is_none_or(Value::is_null)
            {
                b.insert("parentRunId".into(), parent.clone().into());
            }
        })
    }

    /// The `"agui-gateway"` object of a journaled `RUN_STARTED`.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("agent".into(), self.agent.clone().into());
        m.insert("kind".into(), self.kind.as_str().into());
        m.insert("parentRunId".into(), self.parent.clone().into());
        if let Some(by) = &self.by {
            m.insert("by".into(), by.clone().into());
        }
        m.insert("at".into(), self.at.into());
        if let Some(n) = self.new_messages {
            m.insert("newMessages".into(), n.into());
        }
        Value::Object(m)
    }
}

/// One run of the tree.
#[derive(Debug, Clone)]
pub struct RunRecord {
    pub run_id: String,
    /// Its base; `None` for a thread's first run.
    pub parent: Option<String>,
    pub kind: RunKind,
    pub agent: RunAgent,
    pub started_by: Option<String>,
    pub status: RunStatus,
    /// `success`, `interrupt`, `cancelled`, or the `RUN_ERROR` code.
    pub outcome: Option<String>,
    pub started_seq: u64,
    pub ended_seq: Option<u64>,
    pub created_at: Option<u64>,
    /// The messages its input brought to the thread (what a regenerate
    /// sends again, and where an edit applies), kept as text like the
    /// fold's finished messages ([`super::message`]): read only at a
    /// regenerate or an edit.
    pub input: Vec<Message>,
    /// Ids of the messages it produced.
    pub output_ids: IdList,
    checkpoint: Option<Arc<Checkpoint>>,
}

/// Two records are equal whatever checkpoint each keeps: a checkpoint is a
/// cache of what the journal says (a base stores only the newest few).
impl PartialEq for RunRecord {
    fn eq(&self, o: &Self) -> bool {
        (
            &self.run_id,
            &self.parent,
            self.kind,
            &self.agent,
            &self.started_by,
            self.status,
            &self.outcome,
        ) == (
            &o.run_id,
            &o.parent,
            o.kind,
            &o.agent,
            &o.started_by,
            o.status,
            &o.outcome,
        ) && (self.started_seq, self.ended_seq, self.created_at)
            == (o.started_seq, o.ended_seq, o.created_at)
            && self.input == o.input
            && self.output_ids == o.output_ids
    }
}

impl RunRecord {
    /// A finished run of that id and nothing else (unit tests).
    #[cfg(test)]
    pub(super) fn for_tests(run_id: &str) -> RunRecord {
        RunRecord {
            run_id: run_id.to_owned(),
            parent: None,
            kind: RunKind::Continue,
            agent: RunAgent::Unknown,
            started_by: None,
            status: RunStatus::Finished,
            outcome: None,
            started_seq: 0,
            ended_seq: None,
            created_at: None,
            input: Vec::new(),
            output_ids: IdList::default(),
            checkpoint: None,
        }
    }

    /// What it weighs against [`RUN_TABLE_BYTES`]: a fixed part and the
    /// bytes of the ids and names it keeps, as the events said them (never
    /// its allocations' sizes, which differ from node to node).
    pub fn weight(&self) -> usize {
        let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        let agent = match &self.agent {
            RunAgent::Agent(name) => name.len(),
            RunAgent::Outside | RunAgent::Unknown => 0,
        };
        RECORD_WEIGHT
            + self.run_id.len()
            + text(&self.parent)
            + text(&self.started_by)
            + text(&self.outcome)
            + agent
            + self.input.len() * INPUT_MESSAGE_WEIGHT
            + self.output_ids.len_bytes()
    }

    pub fn input_ids(&self) -> impl Iterator<Item = IdStr<'_>> {
        self.input.iter().filter_map(Message::id)
    }

    pub fn checkpoint(&self) -> Option<&Arc<Checkpoint>> {
        self.checkpoint.as_ref()
    }

    /// The public form (`GET /v1/threads/{id}/runs`).
    pub fn to_json(&self) -> Value {
        json!({
            "runId": self.run_id,
            "parentRunId": self.parent,
            "kind": self.kind.as_str(),
            "agent": self.agent.to_json(),
            "startedBy": self.started_by,
            "status": self.status.as_str(),
            "outcome": self.outcome,
            "startedSeq": self.started_seq,
            "endedSeq": self.ended_seq,
            "createdAt": self.created_at,
            "inputMessageIds": self.input_ids().collect::<Vec<_>>(),
            "outputMessageIds": self.output_ids,
        })
    }

    fn to_stored_json(&self, pools: Option<&mut Pools>) -> Value {
        let mut v = self.to_json();
        v["input"] = Value::Array(self.input.iter().map(Message::to_value).collect());
        if let (Some(c), Some(pools)) = (&self.checkpoint, pools) {
            v["checkpoint"] = pools.checkpoint(c);
        }
        v
    }

    fn from_stored_json(
        v: &Value,
        messages: &[Message],
        states: &[Arc<Value>],
        read: &impl Fn(&Value) -> Message,
        previous: Option<&Checkpoint>,
    ) -> Option<RunRecord> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let status = match v.get("status").and_then(Value::as_str)? {
            "running" => RunStatus::Running,
            "finished" => RunStatus::Finished,
            "interrupted" => RunStatus::Interrupted,
            "cancelled" => RunStatus::Cancelled,
            _ => RunStatus::Error,
        };
        Some(RunRecord {
            run_id: s("runId")?,
            parent: s("parentRunId"),
            kind: s("kind")
                .and_then(|k| RunKind::parse(&k))
                .unwrap_or(RunKind::Continue),
            agent: v.get("agent").map(RunAgent::from_json).unwrap_or_default(),
            started_by: s("startedBy"),
            status,
            outcome: s("outcome"),
            started_seq: v.get("startedSeq").and_then(Value::as_u64).unwrap_or(0),
            ended_seq: v.get("endedSeq").and_then(Value::as_u64),
            created_at: v.get("createdAt").and_then(Value::as_u64),
            input: v
                .get("input")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(read)
                .collect(),
            output_ids: v
                .get("outputMessageIds")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect(),
            checkpoint: v
                .get("checkpoint")
                .and_then(|c| checkpoint_from_json(c, messages, states, previous))
                .map(Arc::new),
        })
    }
}

/// Runs a thread remembers at most (older ones leave the table: a branch
/// from them is `not_found`), and fewer when they weigh more than
/// [`RUN_TABLE_BYTES`].
pub const RUNS_KEPT: usize = 1000;

/// Most a thread's run records may weigh together ([`RunRecord::weight`]);
/// the oldest leave first, never the head.
///
/// Why bytes beside the count: a record keeps the ids of the messages its
/// run produced and of those its input brought, so a thousand runs of an
/// agent that writes hundreds of messages a run (a tool loop, a batch of
/// results) held tens of megabytes a thread — and no node budget can shed
/// a run table, which is part of the fold every node computes alike from
/// the journal. So the bound is on what the records *say* (the lengths of
/// their ids and names, their message counts), never on what a node's
/// allocations hold: every node drops the same runs at the same event. A
/// typical record weighs 300–500 bytes, so the count binds first for
/// them and this only for heavy runs.
pub const RUN_TABLE_BYTES: usize = 1 << 20;

/// What a record weighs beyond the bytes it names (its fields, its slot).
const RECORD_WEIGHT: usize = 256;

/// What one of a record's input messages weighs (its text is the
/// conversation's, shared).
const INPUT_MESSAGE_WEIGHT: usize = 16;

/// Run ends a thread keeps checkpoints of by default (the newest ones; an
/// older run's end is rebuilt from the journal while it holds its events).
pub const CHECKPOINTS_KEPT: usize = 16;

/// Run ends a compacted base stores the checkpoints of (the newest runs').
pub const STORED_CHECKPOINTS: usize = 4;

/// A thread's runs, oldest first, and its head.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunTable {
    runs: RunList,
    /// Runs ever started on the thread (the per-thread cap counts them).
    started: u64,
}

impl RunTable {
    /// The head: the newest run started.
    pub fn head(&self) -> Option<&RunRecord> {
        self.runs.back()
    }

    pub fn get(&self, run_id: &str) -> Option<&RunRecord> {
        self.runs.get(run_id)
    }

    pub fn len(&self) -> usize {
        self.runs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Runs, oldest first.
    /// The run journal seq `seq` belongs to (started at or before it and
    /// not ended before it), while the table remembers it.
    pub fn at_seq(&self, seq: u64) -> Option<&RunRecord> {
        let i = self
            .runs
            .partition_point(|r| r.started_seq <= seq)
            .checked_sub(1)?;
        let run = self.runs.at(i)?;
        run.ended_seq.is_none_or(|end| seq <= end).then_some(run)
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &RunRecord> {
        self.runs.iter()
    }

    /// Runs whose base is not the run started just before them (a count
    /// the per-thread branch cap holds).
    pub fn branch_count(&self) -> usize {
        self.iter().filter(|r| r.kind.forks()).count()
    }

    /// The run that produced message `id` (the newest one, if several did).
    pub fn producer_of(&self, id: &str) -> Option<&RunRecord> {
        self.iter().rev().find(|r| r.output_ids.contains(id))
    }

    /// The run whose input brought message `id` (the newest one).
    pub fn introducer_of(&self, id: &str) -> Option<&RunRecord> {
        self.iter().rev().find(|r| r.input_ids().any(|i| i == id))
    }

    /// `run_id` and its ancestors, newest first (as far as the table
    /// remembers them).
    pub fn path(&self, run_id: &str) -> Vec<&RunRecord> {
        let mut path = Vec::new();
        let mut at = self.runs.get(run_id);
        while let Some(run) = at {
            if path.len() > self.runs.len() {
                break; // a cycle can only come from a hand-made journal
            }
            path.push(run);
            at = run.parent.as_deref().and_then(|p| self.runs.get(p));
        }
        path
    }

    /// A `RUN_STARTED` was folded in at `seq`.
    pub(super) fn started(&mut self, seq: u64, event: &Event) {
        let b = event.body();
        let stamp = b.get(GATEWAY_FIELD);
        let field = |k: &str| stamp.and_then(|s| s.get(k));
        let input = b.get("input");
        let resumes = input
            .and_then(|i| i.get("resume"))
            .is_some_and(|r| !r.is_null());
        let kind = field("kind")
            .and_then(Value::as_str)
            .and_then(RunKind::parse)
            .unwrap_or(if resumes {
                RunKind::Resume
            } else {
                RunKind::Continue
            });
        // A journal from before lineage was stamped: runs follow each other.
        let parent = match field("parentRunId") {
            Some(p) => p.as_str().map(str::to_owned),
            None => self.head().map(|h| h.run_id.clone()),
        };
        let run_id = b
            .get("runId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        // A second RUN_STARTED inside a run (a lenient agent's) is the same run.
        if self
            .head()
            .is_some_and(|h| h.run_id == run_id && h.status == RunStatus::Running)
        {
            return;
        }
        let record = RunRecord {
            run_id: run_id.clone(),
            parent,
            kind,
            agent: self.shared_agent(RunAgent::of_run_started(event)),
            started_by: field("by").and_then(Value::as_str).map(str::to_owned),
            status: RunStatus::Running,
            outcome: None,
            started_seq: seq,
            ended_seq: None,
            created_at: field("at")
                .and_then(Value::as_u64)
                .or_else(|| b.get("timestamp").and_then(Value::as_u64)),
            input: {
                let all: &[Value] = input
                    .and_then(|i| i.get("messages"))
                    .and_then(Value::as_array)
                    .map_or(&[], Vec::as_slice);
                // A fork's input restates its branch: only the last
                // `newMessages` are its own.
                let own = match field("newMessages").and_then(Value::as_u64) {
                    Some(n) => &all[all.len().saturating_sub(n as usize)..],
                    None => all,
                };
                own.iter().map(Message::closed).collect()
            },
            output_ids: IdList::default(),
            checkpoint: None,
        };
        self.started += 1;
        self.runs.push_back(record);
        self.evict();
    }

    /// `agent`, as the head's very name when it is the same agent (a
    /// thread's runs are mostly one agent's: one allocation for all of
    /// them rather than one a record).
    fn shared_agent(&self, agent: RunAgent) -> RunAgent {
        match self.head() {
            Some(head) if head.agent == agent => head.agent.clone(),
            _ => agent,
        }
    }

    /// The head run produced message `id`.
    pub(super) fn produced(&mut self, id: &str) {
        if let Some(head) = self.head_mut()
            && head.status == RunStatus::Running
            && !head.output_ids.contains(id)
        {
            head.output_ids.push(id);
        }
    }

    /// The head run ended at `seq` (`terminal` is its `RUN_FINISHED` or
    /// `RUN_ERROR`; a late `RUN_ERROR` after `RUN_FINISHED` updates it).
    pub(super) fn ended(
        &mut self,
        seq: u64,
        terminal: &Event,
        status: RunStatus,
        checkpoint: Checkpoint,
    ) {
        let run_id = terminal.str_field("runId");
        let Some(head) = self.head_mut() else { return };
        if run_id.is_some_and(|r| r != head.run_id) {
            return;
        }
        head.status = status;
        head.ended_seq = Some(seq);
        head.outcome = Some(match terminal.kind() {
            EventType::RunError => terminal.str_field("code").unwrap_or("error").to_owned(),
            _ => terminal
                .get("outcome")
                .and_then(|o| o.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("success")
                .to_owned(),
        });
        head.checkpoint = Some(Arc::new(checkpoint));
        head.output_ids.shrink_to_fit();
        self.evict();
    }

    fn head_mut(&mut self) -> Option<&mut RunRecord> {
        self.runs.back_mut()
    }

    /// The checkpoint a run ending now shares what it can with: its base's
    /// (usually the run just before it).
    pub(super) fn base_checkpoint(&self) -> Option<&Checkpoint> {
        let parent = self.head()?.parent.as_deref()?;
        self.runs.get(parent)?.checkpoint.as_deref()
    }

    /// Runs ever started on this thread.
    pub fn started_count(&self) -> u64 {
        self.started
    }

    /// Keeps only the newest `n` checkpoints (at least the head's): a node
    /// short of memory gives the older ones up, and a view at such a run
    /// is rebuilt from the journal when asked for.
    pub fn keep_checkpoints(&mut self, n: usize) {
        let mut kept = 0;
        for run in self.runs.iter_mut().rev() {
            if run.checkpoint.is_some() {
                kept += 1;
                if kept > n.max(1) {
                    run.checkpoint = None;
                }
            }
        }
    }

    /// What the table holds, estimated: each record (its ids and input)
    /// and each checkpoint (a pointer and an origin per message: the
    /// messages themselves are the fold's, shared).
    pub fn approx_bytes(&self, value_bytes: impl Fn(&Value) -> usize) -> usize {
        let text = |s: &Option<String>| s.as_ref().map_or(0, String::capacity);
        let records: usize = self
            .runs
            .iter()
            .map(|r| {
                let input: usize = r.input.iter().map(|m| m.approx_bytes(1)).sum();
                let checkpoint = r
                    .checkpoint
                    .as_ref()
                    .map_or(0, |c| c.own_bytes(&value_bytes));
                r.run_id.capacity()
                    + text(&r.parent)
                    + text(&r.started_by)
                    + text(&r.outcome)
                    + input
                    + r.output_ids.heap_bytes()
                    + checkpoint
            })
            .sum();
        self.runs.index_bytes() + records
    }

    /// Points the runs' copies of their input messages at `page` where it
    /// holds the same message (see [`Message::share_page`]): a run record
    /// keeps what its input brought, which the fold holds too, and once
    /// the fold has sealed it the record's own copy would be the only
    /// full-size text left of it. Only copies not on a page yet are
    /// compared (after a while, those of the newest few runs).
    pub(super) fn share_inputs(&mut self, page: &Arc<super::sealed::Page>) {
        for run in self.runs.iter_mut().rev() {
            for m in &mut run.input {
                if !m.is_sealed() {
                    m.share_page(page);
                }
            }
        }
    }

    /// Drops the oldest runs past the run bounds ([`RUNS_KEPT`],
    /// [`RUN_TABLE_BYTES`]; never the head), then the oldest checkpoints
    /// past theirs (never the head's). O(the table), at a run's start and
    /// end only.
    fn evict(&mut self) {
        let mut weight: usize = self.runs.iter().map(RunRecord::weight).sum();
        while self.runs.len() > RUNS_KEPT || (weight > RUN_TABLE_BYTES && self.runs.len() > 1) {
            let Some(gone) = self.runs.pop_front() else {
                break;
            };
            weight -= gone.weight();
        }
        self.keep_checkpoints(CHECKPOINTS_KEPT);
    }

    /// The stored form (part of a compacted base): the runs, and each
    /// distinct message and state of their checkpoints once.
    pub fn to_json(&self) -> Value {
        let mut pools = Pools::default();
        // Only the newest checkpoints are stored: each costs a list as long
        // as the conversation at every compaction, and an older run's end
        // is rebuilt from the journal while it holds that run's events.
        let stored_from = self.len().saturating_sub(STORED_CHECKPOINTS);
        let runs: Vec<Value> = self
            .iter()
            .enumerate()
            .map(|(i, r)| r.to_stored_json((i >= stored_from).then_some(&mut pools)))
            .collect();
        let (messages, states) = pools.into_json();
        json!({
            "runs": runs,
            "messages": messages,
            "states": states,
            "started": self.started,
        })
    }

    /// Reads [`RunTable::to_json`]'s form (an older base has none: empty).
    pub fn from_json(v: &Value) -> RunTable {
        RunTable::from_json_sharing(v, &MessageList::default())
    }

    /// [`RunTable::from_json`], its messages (the checkpoints' and the
    /// runs' inputs) shared with `conversation` (the reloaded fold's)
    /// where it holds the same message: read back apart, each checkpoint's
    /// message was a second copy of the conversation's, and a reloaded
    /// thread held about twice what it held live (`tests/fold_memory.rs`).
    pub fn from_json_sharing(v: &Value, conversation: &MessageList) -> RunTable {
        let by_id: HashMap<IdStr, Message> = conversation
            .ids()
            .zip(conversation.iter())
            .filter_map(|(id, m)| Some((id?, m.into_owned())))
            .collect();
        let read = |v: &Value| -> Message {
            match v
                .get("id")
                .and_then(Value::as_str)
                .and_then(|id| by_id.get(id))
            {
                Some(m) if *m == *v => m.clone(),
                _ => Message::closed(v),
            }
        };
        let pool = |k: &str| v.get(k).and_then(Value::as_array).into_iter().flatten();
        let messages: Vec<Message> = pool("messages").map(read).collect();
        let states: Vec<Arc<Value>> = pool("states").map(|s| Arc::new(s.clone())).collect();
        let mut table = RunTable {
            started: v.get("started").and_then(Value::as_u64).unwrap_or(0),
            ..RunTable::default()
        };
        let mut previous: Option<Arc<Checkpoint>> = None;
        let stored = v
            .get("runs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        for r in stored {
            let Some(mut run) =
                RunRecord::from_stored_json(r, &messages, &states, &read, previous.as_deref())
            else {
                continue;
            };
            if let Some(c) = &run.checkpoint {
                previous = Some(c.clone());
            }
            let agent = std::mem::take(&mut run.agent);
            run.agent = table.shared_agent(agent);
            table.runs.push_back(run);
        }
        table.started = table.started.max(table.runs.len() as u64);
        // A base stored under other bounds (an older version's) is held to
        // these, as the live fold is.
        table.evict();
        table
    }
}
