//! What a stopped node left open on a thread, and how it is closed.
//!
//! A node can stop at any step of a run (a `kill -9`, a machine gone, a
//! pause past its lease; the steps are named in [`crate::fault`]). The
//! journal is then the only witness of how far it got, and whoever takes
//! the thread next — another node's sweeper, a node granted the thread for a
//! new run, this process after a restart — must end what it left before
//! anything else is journaled, or the journal holds a `RUN_STARTED` inside
//! an open run (which a stock client replaying it rejects), a tool call no
//! result ever answers, or a thread listed `running` for ever.
//!
//! What the journal can have left open, and how each is closed:
//! - **a run** (its `RUN_STARTED` without a terminal): its open messages,
//!   tool calls, reasoning and steps are ended, each transfer call it made
//!   is answered (the transfer did not happen), then `RUN_ERROR code`;
//! - **a handoff** decided and passed on (the source's `RUN_FINISHED` is
//!   journaled and the thread stays `running` for the target) whose target
//!   never started: the target's leg is journaled as failed, exactly as a
//!   target that never answered leaves it ([`super::drive`]) — its
//!   `RUN_STARTED` (kind `handoff`) whose input answers each transfer call
//!   with the failure, the `agui-gateway/handoff` record with `failed`, and
//!   `RUN_ERROR code` — so the next turn's agent reads a failed transfer and
//!   the thread's active agent stays the source;
//! - **only the status** (the store still lists the thread `running` though
//!   the journal has nothing open: a handoff signalled by a custom event,
//!   which leaves no call to answer): a `agui-gateway/handoff` record with
//!   `failed` is journaled in a batch that settles the status.

use super::Thread;
use crate::protocol::event::{now_millis, run_error};
use crate::protocol::fold::RunStatus;
use crate::protocol::handoff::{HANDOFF_EVENT, target_of, transfer_not_made};
use crate::protocol::lineage::{RunKind, Stamp};
use crate::protocol::message_list::MessageList;
use crate::protocol::open::OpenEntities;
use crate::protocol::{Event, PROTOCOL_VERSION};
use crate::store::StoreError;
use serde_json::{Value, json};
use std::sync::Arc;

/// Why a closer ends what it found: the code of its `RUN_ERROR` and the
/// words of its message.
#[derive(Debug, Clone, Copy)]
pub struct Abandoned<'a> {
    pub code: &'a str,
    pub message: &'a str,
}

/// Another node stopped (its lease expired with the thread still running).
pub const NODE_LOST: Abandoned<'static> = Abandoned {
    code: "gateway_node_lost",
    message: "the gateway node running this run stopped; the run was not resumed",
};

/// This process stopped and started again.
pub const RESTARTED: Abandoned<'static> = Abandoned {
    code: "gateway_restarted",
    message: "the gateway restarted while this run was active; the run was not resumed",
};

/// What a closer journals, and whether the batch settles the thread's
/// status by itself (it carries no run event that would).
pub(super) struct Closing {
    pub events: Vec<Event>,
    pub settles: bool,
}

impl Thread {
    /// The events that end what the journal leaves open (see the module
    /// docs); `still_running` says the store lists the thread as running
    /// (so a journal with nothing open still needs its status settled).
    /// `None`: nothing to close.
    pub(super) fn closing_for(&self, why: Abandoned<'_>, still_running: bool) -> Option<Closing> {
        let inner = self.lock();
        if let Some(run) = inner.fold.run().filter(|r| r.status == RunStatus::Running) {
            // The run's open entities, from its events in the journal's tail
            // (a run's events are never compacted, nor leave memory, while
            // it runs: see `tail`).
            let mut open = OpenEntities::default();
            let started_seq = inner
                .fold
                .runs()
                .get(&run.run_id)
                .map_or(0, |r| r.started_seq);
            for (_, event) in inner.journal.events_from(started_seq) {
                open.track(&event);
            }
            let mut events = open.closing();
            for (call, to) in unanswered_transfers(inner.fold.messages()) {
                events.push(transfer_not_made(&call, &to, why.message));
            }
            events.push(run_error(why.code, why.message));
            return Some(Closing {
                events,
                settles: false,
            });
        }
        if !still_running {
            return None;
        }
        let source = inner.fold.run()?.run_id.clone();
        let source_agent = match &inner.fold.run()?.agent {
            crate::protocol::authorship::RunAgent::Agent(a) => a.to_string(),
            _ => String::new(),
        };
        let calls = unanswered_transfers(inner.fold.messages());
        let thread_id = self.key.thread_id.clone();
        let reason = format!(
            "the gateway node handing the thread over stopped ({})",
            why.code
        );
        let Some((first_call, target)) = calls.first().cloned() else {
            let record = handoff_record(&source_agent, None, &source, None, None, &reason);
            return Some(Closing {
                events: vec![record],
                settles: true,
            });
        };
        let leg = uuid::Uuid::new_v4().to_string();
        let failure = format!("The transfer to '{target}' failed: {reason}");
        let messages: Vec<Value> = calls
            .iter()
            .map(|(call, _)| {
                json!({"id": format!("{call}-result"), "role": "tool", "toolCallId": call,
                       "content": failure})
            })
            .collect();
        let stamp = Stamp {
            agent: target.clone(),
            parent: Some(source.clone()),
            kind: RunKind::Handoff,
            by: None,
            at: now_millis(),
            new_messages: None,
        };
        let start = stamp.apply(&Event::build(json!({
            "type": "RUN_STARTED", "threadId": thread_id, "runId": leg,
            "protocolVersion": PROTOCOL_VERSION,
            "input": {"threadId": thread_id, "runId": leg, "parentRunId": source,
                      "messages": messages, "tools": [], "context": [], "state": {}}
        })));
        let record = handoff_record(
            &source_agent,
            Some(&target),
            &source,
            Some(&leg),
            Some(&first_call),
            &reason,
        );
        Some(Closing {
            events: vec![start, record, run_error(why.code, why.message)],
            settles: false,
        })
    }

    /// Closes what the journal leaves open (see [`Thread::closing_for`])
    /// under `fence` (the closer's lease on a shared store); `Ok(false)`
    /// when nothing was open.
    pub async fn close_abandoned(
        &self,
        why: Abandoned<'_>,
        still_running: bool,
        fence: Option<Arc<str>>,
    ) -> Result<bool, StoreError> {
        let Some(closing) = self.closing_for(why, still_running) else {
            return Ok(false);
        };
        let pending = if closing.settles {
            self.enqueue_settling(closing.events, fence)?
        } else {
            self.enqueue(closing.events, fence)?
        };
        self.settle(pending).await?;
        Ok(true)
    }
}

/// The transfer calls of the latest assistant turn that no tool result
/// answers, with their targets, in call order.
fn unanswered_transfers(messages: &MessageList) -> Vec<(String, String)> {
    let answered: std::collections::HashSet<String> = messages
        .iter()
        .filter(|m| m.role() == "tool")
        .filter_map(|m| m.value().get("toolCallId")?.as_str().map(str::to_owned))
        .collect();
    let mut calls = Vec::new();
    for m in messages.iter().rev() {
        if m.role() == "user" {
            break;
        }
        if !m.may_have_tool_calls() {
            continue;
        }
        let m = m.value();
        let Some(tool_calls) = m.get("toolCalls").and_then(Value::as_array) else {
            continue;
        };
        for call in tool_calls.iter().rev() {
            let id = call.get("id").and_then(Value::as_str);
            let name = call
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str);
            if let (Some(id), Some(target)) = (id, name.and_then(target_of))
                && !answered.contains(id)
            {
                calls.push((id.to_owned(), target.to_owned()));
            }
        }
    }
    calls.reverse();
    calls
}

/// The `agui-gateway/handoff` record of a handoff that failed because its
/// node stopped.
fn handoff_record(
    from_agent: &str,
    to_agent: Option<&str>,
    from_run: &str,
    to_run: Option<&str>,
    tool_call: Option<&str>,
    reason: &str,
) -> Event {
    Event::build(json!({"type": "CUSTOM", "name": HANDOFF_EVENT, "value": {
        "fromAgent": from_agent, "toAgent": to_agent, "fromRunId": from_run,
        "toRunId": to_run, "reason": reason, "trigger": "tool",
        "toolCallId": tool_call, "result": "failed",
    }}))
}
