//! What a run is sent, and what its journal says about it.
//!
//! Two things come out of a run request and its resolved [`Base`]:
//!
//! - the upstream body: a `RunAgentInput` whose `messages` is the complete
//!   history the agent is shown (AG-UI 1.1, run-input: "a producer MUST
//!   treat it as the complete history … the protocol has no side channel
//!   through which earlier turns arrive") — the head's conversation for a
//!   plain run, the base run's end plus the new input for a branch;
//! - the journal's opening: `RUN_STARTED` with the input normalized to
//!   the messages new to the thread, stamped with the run's agent and
//!   lineage ([`Stamp`]); then, when the history the agent got is not what
//!   the journal's fold holds (a branch, or a client that edited a known
//!   message), that history restated as snapshots, so every reader of the
//!   journal follows.
//!
//! History the gateway builds never carries what AG-UI 1.1 says must not go
//! back upstream: `activity` messages (UI-only) and another agent's
//! `encryptedValue` ("only its producer can read it"; see [`for_upstream`]).

use super::Inner;
use super::branch::{Base, is_edit, lineage_event};
use super::request::RunRequest;
use crate::config::BranchMode;
use crate::protocol::authorship::{Authors, RunAgent};
use crate::protocol::event::now_millis;
use crate::protocol::hooks::RunInput;
use crate::protocol::lineage::Stamp;
use crate::protocol::message::Message;
use crate::protocol::{Event, PROTOCOL_VERSION};
use bytes::Bytes;
use serde_json::{Map, Value, json};
use std::collections::HashSet;

/// What a run sends upstream and what its journal says about its input.
pub(super) struct PreparedInput {
    /// The upstream request body: the full history.
    pub body: Bytes,
    /// The journal's `RUN_STARTED.input`: messages new to the thread only;
    /// no `forwardedProps` or `state` (per-request, possibly private: the
    /// verified identity travels there, and viewers need not see either).
    pub journal_input: Value,
    /// The run's agent and lineage, stamped on its journaled `RUN_STARTED`.
    pub stamp: Stamp,
    /// What the journal says right after `RUN_STARTED`: the history the
    /// agent got, when it differs from the fold's (a `MESSAGES_SNAPSHOT`;
    /// for a branch also the base's `STATE_SNAPSHOT` and the lineage event).
    pub restated: Vec<Event>,
    /// The thread id the agent was sent instead of the thread's own
    /// (`branching.mode = "fork-thread"`); mapped back on what it sends.
    pub upstream_thread: Option<String>,
}

/// Keys of `RunAgentInput` that are not journaled (see [`PreparedInput`]).
const UNJOURNALED_INPUT: [&str; 2] = ["forwardedProps", "state"];

pub(super) fn build_input(
    thread_id: &str,
    inner: &Inner,
    req: &RunRequest,
    base: &Base,
) -> PreparedInput {
    let stamp = Stamp {
        agent: req.agent.id.clone(),
        parent: base.parent.clone(),
        kind: base.kind,
        by: req.started_by.clone(),
        at: now_millis(),
        new_messages: None,
    };
    let mut prepared = if base.forks() {
        fork_input(thread_id, inner, req, base, stamp)
    } else {
        linear_input(thread_id, inner, req, stamp)
    };
    if req.agent.branching.mode == BranchMode::ForkThread
        && let Some(root) = branch_root(inner, req, base)
    {
        let alias = format!("{thread_id}~{root}");
        if let Ok(mut body) = serde_json::from_slice::<Value>(&prepared.body) {
            body["threadId"] = alias.clone().into();
            prepared.body = Bytes::from(serde_json::to_vec(&body).expect("input serializes"));
        }
        prepared.upstream_thread = Some(alias);
    }
    if let Some(body) = upstream_adjusted(&prepared.body, inner, req) {
        prepared.body = body;
    }
    prepared
}

/// The upstream body with what the gateway adds or withholds, when there
/// is any: the run's transfer tools join the client's (in the body only:
/// the journal and clients never see them); a run taking the thread over
/// gets the history and state its source's handoff settings give it (the
/// journal keeps everything); and a client's complete history loses the
/// `encryptedValue`s another agent's runs produced (AG-UI 1.1: only the
/// producer may be fed one), as the history the gateway builds does.
fn upstream_adjusted(body: &Bytes, inner: &Inner, req: &RunRequest) -> Option<Bytes> {
    let plan = &req.handoff;
    let foreign_secrets = matches!(req.input, RunInput::Complete(_))
        && body.windows(14).any(|w| w == b"encryptedValue");
    if plan.tools.is_empty() && plan.incoming.is_none() && !foreign_secrets && !plan.withhold_resume
    {
        return None;
    }
    let mut value: Value = serde_json::from_slice(body).ok()?;
    let obj = value.as_object_mut()?;
    if !plan.tools.is_empty() {
        let tools = obj
            .entry("tools")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(tools) = tools {
            let name = |t: &Value| t.get("name").and_then(Value::as_str).map(str::to_owned);
            let offered: Vec<String> = tools.iter().filter_map(name).collect();
            // A client's own tool of the same name stays the client's.
            tools.extend(
                plan.tools
                    .iter()
                    .filter(|t| name(t).is_some_and(|n| !offered.contains(&n)))
                    .cloned(),
            );
        }
    }
    if foreign_secrets && let Some(Value::Array(messages)) = obj.get_mut("messages") {
        let authors = inner.fold.authors();
        for m in messages.iter_mut() {
            let id = message_id(m);
            if matches!(authors.of_message(id), RunAgent::Agent(a) if **a != *req.agent.id) {
                *m = without_encrypted_values(m.take());
            }
        }
    }
    if plan.withhold_resume {
        obj.remove("resume");
    }
    if let Some(incoming) = &plan.incoming {
        if let Some(Value::Array(messages)) = obj.remove("messages") {
            obj.insert(
                "messages".into(),
                Value::Array(incoming.history.apply(messages)),
            );
        }
        if !incoming.carry_state {
            obj.insert("state".into(), json!({}));
        }
    }
    Some(Bytes::from(
        serde_json::to_vec(&value).expect("input serializes"),
    ))
}

/// The run that began the branch a run is on (itself, when it forks); `None`
/// on the thread's original line.
fn branch_root(inner: &Inner, req: &RunRequest, base: &Base) -> Option<String> {
    if base.forks() {
        return Some(req.run_id.clone());
    }
    let parent = base.parent.as_deref()?;
    inner
        .fold
        .runs()
        .path(parent)
        .into_iter()
        .find(|r| r.kind.forks())
        .map(|r| r.run_id.clone())
}

/// `event` with the thread id the agent was sent (`alias`) replaced by the
/// thread's own, so the journal names one thread whatever the agent saw.
pub(super) fn restore_thread_id(event: Event, alias: &str, thread_id: &str) -> Event {
    if event.str_field("threadId") == Some(alias) {
        event.modify(|b| {
            b.insert("threadId".into(), thread_id.into());
        })
    } else {
        event
    }
}

/// History for agent `agent` without what must not go back upstream:
/// `activity` messages, and `encryptedValue`s another agent's run produced.
pub(super) fn for_upstream(
    messages: &[Value],
    authors: &Authors,
    agent: &str,
) -> Vec<Sent<'static>> {
    messages
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) != Some("activity"))
        .map(|m| {
            let id = m.get("id").and_then(Value::as_str);
            let own = matches!(authors.of_message(id), RunAgent::Agent(a) if &**a == agent);
            Sent::Value(if own {
                m.clone()
            } else {
                without_encrypted_values(m.clone())
            })
        })
        .collect()
}

/// A message of the history a run sends upstream: the fold's own (its text
/// written as it is kept) or a value built for this run.
///
/// Why not values throughout: the history is the whole conversation, sent
/// at every run's start; parsing each kept message into a tree and cloning
/// it again to filter it cost two trees of the conversation per run start
/// (five times its text each) before the body was written, O(the
/// conversation) of memory a long thread's run start took for nothing.
pub(super) enum Sent<'a> {
    Kept(std::borrow::Cow<'a, Message>),
    Value(Value),
}

impl Sent<'_> {
    fn into_value(self) -> Value {
        match self {
            Sent::Kept(m) => m.to_value(),
            Sent::Value(v) => v,
        }
    }
}

impl serde::Serialize for Sent<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Sent::Kept(m) => m.serialize(s),
            Sent::Value(v) => v.serialize(s),
        }
    }
}

/// [`for_upstream`] of the fold's conversation, with `edits` (messages a
/// client re-sent under a known id) in place and `new` after it: kept
/// messages go as their text unless they need changing.
fn fold_for_upstream<'a>(
    fold: &'a crate::protocol::fold::Fold,
    edits: &[Value],
    new: &[Value],
    agent: &str,
) -> Vec<Sent<'a>> {
    let authors = fold.authors();
    let own =
        |id: Option<&str>| matches!(authors.of_message(id), RunAgent::Agent(a) if &**a == agent);
    let mut out = Vec::with_capacity(fold.messages().len() + new.len());
    for m in fold.messages().iter() {
        let id = m.id();
        let id = id.as_deref();
        if let Some(edit) = edits.iter().find(|s| id.is_some() && message_id(s) == id) {
            out.extend(for_upstream(std::slice::from_ref(edit), authors, agent));
            continue;
        }
        if m.role() == "activity" {
            continue;
        }
        // Only a message carrying an encrypted value another agent made
        // needs changing (the text is searched first: most carry none).
        let encrypted = m.is_open() || m.json_mentions("encryptedValue");
        if encrypted && !own(id) {
            out.push(Sent::Value(without_encrypted_values(m.to_value())));
        } else {
            out.push(Sent::Kept(m));
        }
    }
    out.extend(for_upstream(new, authors, agent));
    out
}

fn without_encrypted_values(mut m: Value) -> Value {
    if let Some(obj) = m.as_object_mut() {
        obj.remove("encryptedValue");
        obj.remove("encryptedValueType");
        if let Some(Value::Array(calls)) = obj.get_mut("toolCalls") {
            for call in calls.iter_mut().filter_map(Value::as_object_mut) {
                call.remove("encryptedValue");
                call.remove("encryptedValueType");
            }
        }
    }
    m
}

/// What the gateway says of a tool call a branch's history leaves without
/// a result.
pub const UNANSWERED_CALL: &str =
    "No result: the conversation was branched from before this call was answered.";

/// `history` with a tool result for every tool call no tool message
/// answers, right after the results its message has.
///
/// A branch's history ends where its base ended, and a run may end on a
/// call its own history never answers: a handoff's transfer call (its
/// result is the next run's input, not the source's end) or any frontend
/// tool call. Followed by a user message, that is a conversation OpenAI-
/// and Anthropic-style APIs refuse; so the branch is sent (and journaled)
/// with a result saying the call was not answered. Not for a run that
/// carries a `resume`: the call behind an interrupt is answered by the
/// agent that resumes it.
pub(super) fn with_every_call_answered(history: Vec<Value>) -> Vec<Value> {
    let answered: std::collections::HashSet<String> = history
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
        .filter_map(|m| {
            m.get("toolCallId")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect();
    let calls = |m: &Value| -> Vec<String> {
        if m.get("role").and_then(Value::as_str) != Some("assistant") {
            return Vec::new();
        }
        let ids = m
            .get("toolCalls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        ids.filter_map(|c| c.get("id").and_then(Value::as_str))
            .filter(|id| !answered.contains(*id))
            .map(str::to_owned)
            .collect()
    };
    if !history.iter().any(|m| !calls(m).is_empty()) {
        return history;
    }
    let result = |call: String| {
        json!({"id": format!("branch-result-{call}"), "role": "tool",
               "toolCallId": call, "content": UNANSWERED_CALL})
    };
    let mut out = Vec::with_capacity(history.len() + 1);
    let mut pending: Vec<String> = Vec::new();
    for m in history {
        if m.get("role").and_then(Value::as_str) != Some("tool") {
            out.extend(pending.drain(..).map(result));
        }
        pending.extend(calls(&m));
        out.push(m);
    }
    out.extend(pending.into_iter().map(result));
    out
}

fn message_id(m: &Value) -> Option<&str> {
    m.get("id").and_then(Value::as_str)
}

/// A run on top of the head: the fold's conversation plus what is new.
fn linear_input(thread_id: &str, inner: &Inner, req: &RunRequest, stamp: Stamp) -> PreparedInput {
    let fold = &inner.fold;
    let known = |m: &Value| message_id(m).and_then(|id| fold.message(id));
    let edited = |msgs: &[Value]| {
        msgs.iter()
            .any(|m| known(m).is_some_and(|k| is_edit(&k.value(), m)))
    };
    let snapshot = |history: Vec<Value>| {
        vec![Event::build(
            json!({"type": "MESSAGES_SNAPSHOT", "messages": history}),
        )]
    };
    match &req.input {
        RunInput::Complete(input) => {
            let body = Bytes::from(serde_json::to_vec(input).expect("input serializes"));
            let mut journal = serde_json::to_value(input).expect("input serializes");
            let mut restated = Vec::new();
            if let Some(obj) = journal.as_object_mut() {
                for k in UNJOURNALED_INPUT {
                    obj.remove(k);
                }
                if let Some(Value::Array(msgs)) = obj.get_mut("messages") {
                    if edited(msgs) {
                        restated = snapshot(msgs.clone());
                    }
                    msgs.retain(|m| known(m).is_none());
                }
            }
            PreparedInput {
                body,
                journal_input: journal,
                stamp,
                restated,
                upstream_thread: None,
            }
        }
        RunInput::Incremental {
            messages,
            state,
            forwarded_props,
            ..
        } => {
            let new: Vec<Value> = messages
                .iter()
                .filter(|m| known(m).is_none())
                .cloned()
                .collect();
            // History from the fold, with any message the client re-sent
            // under a known id replaced by its edit.
            let restated = if edited(messages) {
                let mut all: Vec<Value> = fold
                    .messages()
                    .iter()
                    .map(|m| {
                        let id = m.id();
                        let id = id.as_deref();
                        messages
                            .iter()
                            .find(|s| id.is_some() && message_id(s) == id)
                            .map_or_else(|| m.to_value(), Value::clone)
                    })
                    .collect();
                all.extend(new.iter().cloned());
                snapshot(all)
            } else {
                Vec::new()
            };
            let history = fold_for_upstream(fold, messages, &new, &req.agent.id);
            let state = state.clone().unwrap_or_else(|| fold.state().clone());
            let (body, journal) =
                incremental_body(thread_id, req, None, new, history, state, forwarded_props);
            PreparedInput {
                body,
                journal_input: journal,
                stamp,
                restated,
                upstream_thread: None,
            }
        }
    }
}

/// The upstream body and the journal's input of a WebSocket run.
fn incremental_body(
    thread_id: &str,
    req: &RunRequest,
    parent: Option<&str>,
    new: Vec<Value>,
    history: Vec<Sent<'_>>,
    state: Value,
    forwarded_props: &Option<Value>,
) -> (Bytes, Value) {
    let RunInput::Incremental {
        tools,
        context,
        resume,
        ..
    } = &req.input
    else {
        unreachable!("only for incremental input")
    };
    let mut journal = Map::new();
    journal.insert("threadId".into(), thread_id.into());
    journal.insert("runId".into(), req.run_id.clone().into());
    if let Some(parent) = parent {
        journal.insert("parentRunId".into(), parent.into());
    }
    journal.insert("protocolVersion".into(), PROTOCOL_VERSION.into());
    journal.insert("tools".into(), Value::Array(tools.clone()));
    journal.insert("context".into(), Value::Array(context.clone()));
    if let Some(r) = resume {
        journal.insert("resume".into(), r.clone());
    }
    let mut input = journal.clone();
    journal.insert("messages".into(), Value::Array(new));
    input.insert("state".into(), state);
    input.insert(
        "forwardedProps".into(),
        forwarded_props.clone().unwrap_or_else(|| json!({})),
    );
    let body = Bytes::from(with_messages(&input, &history));
    (body, Value::Object(journal))
}

/// `input` serialized with `messages` last (as the stock client writes it),
/// the history written message by message where it is.
fn with_messages(input: &Map<String, Value>, history: &[Sent<'_>]) -> Vec<u8> {
    use serde::ser::{SerializeMap, Serializer};
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::new(&mut out);
    let write = |ser: &mut serde_json::Serializer<&mut Vec<u8>>| -> serde_json::Result<()> {
        let mut m = ser.serialize_map(Some(input.len() + 1))?;
        for (k, v) in input {
            m.serialize_entry(k, v)?;
        }
        m.serialize_entry("messages", history)?;
        m.end()
    };
    write(&mut ser).expect("input serializes");
    out
}

/// A run from another run than the head: that run's end plus the new
/// input, restated in the journal.
fn fork_input(
    thread_id: &str,
    inner: &Inner,
    req: &RunRequest,
    base: &Base,
    stamp: Stamp,
) -> PreparedInput {
    let view = base.view.as_ref().expect("a fork has a view");
    let runs = inner.fold.runs();
    // The view's ids once (a stock client sends its whole list, so asking
    // the view message by message was O(sent × view)).
    let view_ids: HashSet<String> = view
        .messages()
        .filter_map(|m| Some(m.id()?.to_string()))
        .collect();
    let in_view = |id: &str| view_ids.contains(id);
    // Messages the thread has seen anywhere (this branch or another) are
    // not new input: a stock client sends its whole list, which holds the
    // branch it was on.
    let seen = |id: &str| {
        in_view(id)
            || inner.fold.has_message(id)
            || runs.producer_of(id).is_some()
            || runs.introducer_of(id).is_some()
    };
    let sent: Vec<Value> = match &req.input {
        RunInput::Incremental { messages, .. } => messages.clone(),
        RunInput::Complete(i) => i
            .messages
            .iter()
            .map(|m| serde_json::to_value(m).expect("message serializes"))
            .collect(),
    };
    let unseen = sent
        .into_iter()
        .filter(|m| message_id(m).is_some_and(|id| !seen(id)));
    let new: Vec<Value> = match &base.input {
        Some(input) => input.iter().cloned().chain(unseen).collect(),
        None => unseen.collect(),
    };
    let mut all = view.message_values();
    all.extend(new.iter().cloned());
    if !req.input.has_resume() {
        all = with_every_call_answered(all);
    }
    let mut stamp = stamp;
    // (A result the gateway added among the new messages counts as new.)
    let first_new = new.first().and_then(message_id);
    let new_from = all
        .iter()
        .position(|m| first_new.is_some() && message_id(m) == first_new)
        .unwrap_or(all.len() - new.len());
    stamp.new_messages = Some(all.len() - new_from);
    let history = for_upstream(&all, &view.authors(), &req.agent.id);
    let parent = base.parent.as_deref();
    let (body, journal_input, state) = match &req.input {
        RunInput::Incremental {
            state,
            forwarded_props,
            ..
        } => {
            let state = state.clone().unwrap_or_else(|| view.state().clone());
            let (body, journal) = incremental_body(
                thread_id,
                req,
                parent,
                all.clone(),
                history,
                state.clone(),
                forwarded_props,
            );
            (body, journal, state)
        }
        RunInput::Complete(input) => {
            let mut body = serde_json::to_value(input).expect("input serializes");
            let state = input.state.clone().unwrap_or_else(|| view.state().clone());
            let mut journal = body.clone();
            let set_parent = |obj: &mut Map<String, Value>| match parent {
                Some(p) => obj.insert("parentRunId".into(), p.into()),
                None => obj.remove("parentRunId"),
            };
            if let Some(obj) = body.as_object_mut() {
                let history = history.into_iter().map(Sent::into_value).collect();
                obj.insert("messages".into(), Value::Array(history));
                obj.insert("state".into(), state.clone());
                set_parent(obj);
            }
            if let Some(obj) = journal.as_object_mut() {
                for k in UNJOURNALED_INPUT {
                    obj.remove(k);
                }
                obj.insert("messages".into(), Value::Array(all.clone()));
                set_parent(obj);
            }
            let body = Bytes::from(serde_json::to_vec(&body).expect("input serializes"));
            (body, journal, state)
        }
    };
    let restated = vec![
        Event::build(json!({"type": "MESSAGES_SNAPSHOT", "messages": all})),
        Event::build(json!({"type": "STATE_SNAPSHOT", "snapshot": state})),
        lineage_event(base, &req.run_id, &req.agent.id),
    ];
    PreparedInput {
        body,
        journal_input,
        stamp,
        restated,
        upstream_thread: None,
    }
}
