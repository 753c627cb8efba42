//! The journal's opening of a run.
//!
//! A run's first journaled events are the gateway's, not the agent's: the
//! `RUN_STARTED` carries the normalized input and the gateway's stamp (its
//! agent, its place in the run tree), a fork restates its branch, and a run
//! that takes the thread over in a handoff carries the handoff's record. The
//! opening is journaled with the agent's first batch, or on its own when the
//! run ends before the agent said anything (so the user's input is never
//! lost).

use super::request::Incoming;
use super::staged::{ForRequester, Staged};
use crate::protocol::handoff::HANDOFF_EVENT;
use crate::protocol::{Event, PROTOCOL_VERSION};
use serde_json::{Value, json};

/// The journal's opening of a run: `RUN_STARTED` with the normalized input
/// (the agent's own, when it sent one, goes to the requester), then the
/// edited history, if the client changed a known message, and, for a run
/// that takes the thread over, the handoff's record.
pub(super) struct Opening {
    pub(super) thread_id: String,
    pub(super) run_id: String,
    pub(super) journal_input: Value,
    pub(super) stamp: crate::protocol::lineage::Stamp,
    pub(super) restated: Vec<Event>,
    pub(super) incoming: Option<Incoming>,
}

impl Opening {
    /// The opening's events, each with what the requester gets for it:
    /// `agent_start` is the agent's own `RUN_STARTED` when it sent one,
    /// `result` the handoff record's result (`accepted`, `failed`, …).
    pub(super) fn events(&self, agent_start: Option<&Event>, result: &str) -> Staged {
        let start = match agent_start {
            Some(e) => e.modify(|b| {
                b.insert("input".into(), self.journal_input.clone());
            }),
            None => Event::build(
                json!({"type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.run_id,
                    "protocolVersion": PROTOCOL_VERSION, "input": self.journal_input}),
            ),
        };
        // The journal names the run's agent (every reader of the journal
        // judges the run's events by that agent's visibility rules) and its
        // place in the run tree.
        let start = self.stamp.apply(&start);
        // A requester whose run handed over did not send this input: it gets
        // the journal's (it carries the transfer call's result).
        let for_requester = match agent_start {
            Some(_) if self.incoming.is_some() => ForRequester::Same,
            Some(e) => ForRequester::Instead(e.clone()),
            None => ForRequester::Nothing,
        };
        let mut staged: Staged = vec![(start, for_requester)];
        staged.extend(
            self.restated
                .iter()
                .map(|e| (e.clone(), ForRequester::Nothing)),
        );
        if let Some(incoming) = &self.incoming {
            let mut value = incoming.record.clone();
            value["result"] = result.into();
            let record =
                Event::build(json!({"type": "CUSTOM", "name": HANDOFF_EVENT, "value": value}));
            staged.push((record, ForRequester::Same));
        }
        staged
    }

    /// The agent taking the thread over never started (`why`): the transfer
    /// call's result in the journaled input says so, so the next turn's
    /// agent reads a failure, not a transfer that never happened.
    pub(super) fn handoff_failed(&mut self, why: &str) {
        let Some(incoming) = &self.incoming else {
            return;
        };
        let Some(call) = &incoming.tool_call_id else {
            return;
        };
        let to = incoming.record["toAgent"].as_str().unwrap_or_default();
        if let Some(Value::Array(messages)) = self.journal_input.get_mut("messages") {
            for m in messages.iter_mut() {
                if m.get("toolCallId").and_then(Value::as_str) == Some(call) {
                    m["content"] = format!("The transfer to '{to}' failed: {why}").into();
                }
            }
        }
    }
}
