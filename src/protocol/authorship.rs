//! Which agent's run each journal event and each folded message belongs to.
//!
//! Operator visibility rules are scoped to agents (`agents = ["full"]`), and
//! one thread holds runs of different agents. So what a viewer may see is
//! decided per event by the agent of the run that event belongs to, never by
//! "the thread's agent" at some moment: that was stale as soon as the next
//! run used another agent, and differed between nodes.
//!
//! The journal itself says which agent ran: the gateway stamps every
//! `RUN_STARTED` it journals with `"agui-gateway": {"agent": "<id>"}` (an
//! extra field: stock clients keep or ignore it). Everything that reads the
//! journal — live fan-out, replay, a reload on another node, a copy fed by
//! another node's announcements — therefore derives the same attribution
//! from the events alone, with no side table to keep in step.

use super::Event;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::Arc;

/// The field of a journaled `RUN_STARTED` that names the run's agent.
pub const GATEWAY_FIELD: &str = "agui-gateway";

/// The run an event belongs to, by its agent.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum RunAgent {
    /// Between runs (a meta event): only rules not scoped to agents apply.
    Outside,
    /// A run of this agent.
    Agent(Arc<str>),
    /// A run whose agent the journal does not name (journaled before runs
    /// were stamped, or never attributed): the rules of every agent apply,
    /// so an unknown origin can only hide more, never leak.
    #[default]
    Unknown,
}

impl RunAgent {
    /// The agent a journaled `RUN_STARTED` names, if any.
    pub fn of_run_started(event: &Event) -> RunAgent {
        match event
            .body()
            .get(GATEWAY_FIELD)
            .and_then(|g| g.get("agent"))
            .and_then(Value::as_str)
        {
            Some(agent) => RunAgent::Agent(Arc::from(agent)),
            None => RunAgent::Unknown,
        }
    }

    /// Stored as the agent's id, `false` outside a run, `null` unknown.
    pub fn to_json(&self) -> Value {
        match self {
            RunAgent::Agent(a) => Value::String(a.to_string()),
            RunAgent::Outside => Value::Bool(false),
            RunAgent::Unknown => Value::Null,
        }
    }

    /// Reads [`RunAgent::to_json`]'s form (anything else: unknown).
    pub fn from_json(v: &Value) -> RunAgent {
        match v {
            Value::String(a) => RunAgent::Agent(Arc::from(a.as_str())),
            Value::Bool(false) => RunAgent::Outside,
            _ => RunAgent::Unknown,
        }
    }
}

/// Which run introduced each folded message, and which runs wrote the
/// state: a snapshot shows a viewer each message as the rules of its own
/// run's agent allow.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Authors {
    /// Message id → the run that introduced it.
    messages: HashMap<String, RunAgent>,
    /// Every distinct origin of a state change (the state is one value
    /// shared by all runs, so it is hidden if any of its writers' rules hide it).
    state: Vec<RunAgent>,
}

impl Authors {
    /// The run that introduced message `id` (unknown if none is recorded).
    pub fn of_message(&self, id: Option<&str>) -> &RunAgent {
        static UNKNOWN: RunAgent = RunAgent::Unknown;
        id.and_then(|id| self.messages.get(id)).unwrap_or(&UNKNOWN)
    }

    /// Authors from their parts: message id → origin, and the state's origins.
    pub fn from_parts(
        messages: impl IntoIterator<Item = (String, RunAgent)>,
        state: Vec<RunAgent>,
    ) -> Authors {
        Authors {
            messages: messages.into_iter().collect(),
            state,
        }
    }

    /// The origins of the state.
    pub fn of_state(&self) -> &[RunAgent] {
        &self.state
    }

    /// Records `origin` for every message in `messages` not attributed yet.
    pub(super) fn note_messages<'a>(
        &mut self,
        ids: impl IntoIterator<Item = &'a str>,
        origin: &RunAgent,
    ) {
        for id in ids {
            if !self.messages.contains_key(id) {
                self.messages.insert(id.to_owned(), origin.clone());
            }
        }
    }

    /// Forgets messages the conversation (`ids`, `len` of them) no longer
    /// holds (after an agent's `MESSAGES_SNAPSHOT`), so the map stays as
    /// large as the conversation.
    pub(super) fn keep_only<'a>(&mut self, ids: impl IntoIterator<Item = &'a str>, len: usize) {
        if self.messages.len() > len {
            let present: std::collections::HashSet<&str> = ids.into_iter().collect();
            self.messages.retain(|id, _| present.contains(id.as_str()));
        }
    }

    /// Records that a run of `origin` changed the state.
    pub(super) fn note_state(&mut self, origin: &RunAgent) {
        if !self.state.contains(origin) {
            self.state.push(origin.clone());
        }
    }

    /// The stored form (part of a compacted base, never of a snapshot).
    pub fn to_json(&self) -> Value {
        let messages: Map<String, Value> = self
            .messages
            .iter()
            .map(|(id, a)| (id.clone(), a.to_json()))
            .collect();
        let state: Vec<Value> = self.state.iter().map(RunAgent::to_json).collect();
        json!({ "messages": messages, "state": state })
    }

    /// Reads [`Authors::to_json`]'s form; anything missing is unknown.
    pub fn from_json(v: &Value) -> Authors {
        Authors {
            messages: v
                .get("messages")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(id, a)| (id.clone(), RunAgent::from_json(a)))
                .collect(),
            state: v
                .get("state")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(RunAgent::from_json)
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message_id(m: &Value) -> Option<&str> {
        m.get("id").and_then(Value::as_str)
    }

    #[test]
    fn authors_round_trip_and_unknown_is_the_default() {
        let mut a = Authors::default();
        let msgs = [json!({"id": "m1"}), json!({"id": "m2"})];
        a.note_messages(
            msgs[..1].iter().filter_map(message_id),
            &RunAgent::Agent("echo".into()),
        );
        a.note_messages(
            msgs.iter().filter_map(message_id),
            &RunAgent::Agent("full".into()),
        );
        a.note_state(&RunAgent::Agent("full".into()));
        let back = Authors::from_json(&a.to_json());
        assert_eq!(back, a);
        assert_eq!(back.of_message(Some("m1")), &RunAgent::Agent("echo".into()));
        assert_eq!(back.of_message(Some("m2")), &RunAgent::Agent("full".into()));
        assert_eq!(back.of_message(Some("nope")), &RunAgent::Unknown);
        a.keep_only(msgs[1..].iter().filter_map(message_id), msgs.len() - 1);
        assert_eq!(a.of_message(Some("m1")), &RunAgent::Unknown);
    }
}
