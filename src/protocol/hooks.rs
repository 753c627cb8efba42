//! The seams between the run loop and operator policy, as protocol-level
//! hooks: the run loop (`thread`) calls them, the policy layer implements
//! them, and neither needs the other — so policy can sit after threads in
//! the data path without threads reaching forward into it.

use super::authorship::{Authors, RunAgent};
use super::{Event, RunAgentInput};
use serde_json::{Map, Value, json};
use std::sync::Arc;

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
    pub fn resume_entries(&self) -> Vec<Value> {
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
    ///
    /// This alters `forwardedProps`, which AG-UI 1.1 (`basic/run-input`)
    /// says intermediaries must not: it is a per-agent compatibility switch
    /// (`agents[].langgraph_resume_command`), applied only to a resume of
    /// interrupts raised in LangGraph's legacy shape.
    pub fn set_langgraph_command(&mut self) {
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
        // Client JSON: `forwardedProps` or its `command` may be any type.
        let Some(props) = props.as_object_mut() else {
            *props = json!({"command": {"resume": answer}});
            return;
        };
        match props.get_mut("command").and_then(Value::as_object_mut) {
            Some(command) => {
                command.insert("resume".into(), answer);
            }
            None => {
                props.insert("command".into(), json!({"resume": answer}));
            }
        }
    }

    /// True when the request answers interrupts.
    pub fn has_resume(&self) -> bool {
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
/// The run loop (`thread`) calls it and never looks inside: the policy layer
/// implements it, so operator rules can drop, rewrite or fail
/// events without the journal ever holding what they removed.
pub trait EventFilter: Send {
    /// What to journal instead of `event`: any number of events, or `Err`
    /// with a terminal event (e.g. `RUN_ERROR policy_violation`) that ends the run.
    fn filter(&mut self, event: Event) -> Result<Vec<Event>, Box<Event>>;
}

/// What one viewer may see of the events of one agent's runs. The policy
/// layer implements it; threads only ask, so neither module needs the other.
pub trait Visibility: Send + Sync {
    /// True when this viewer must not receive `event`.
    fn hides(&self, event: &Event) -> bool;
    /// False when this viewer may not see the folded `message` at all;
    /// otherwise removes from it the parts it may not see (tool calls).
    fn shows_message(&self, message: &mut Value) -> bool;
    /// True when this viewer may not see the thread's state.
    fn hides_state(&self) -> bool;
}

/// What one viewer may see, run by run.
///
/// Visibility rules are scoped to agents and a thread's runs may each use
/// another agent, so a viewer has no single visibility: every event is
/// judged by the rules of the agent of the run it belongs to
/// ([`RunAgent`]), whenever and on whichever node it is read. Resolving per
/// origin (rather than once at subscribe) also follows a policy reload.
pub trait ViewerScope: Send + Sync {
    /// Changes whenever [`ViewerScope::visibility`]'s answers may change (a
    /// policy reload): until then they may be cached ([`SeenBy`]).
    fn generation(&self) -> u64;
    /// The rules for events of `origin` (`None`: it sees all of them).
    fn visibility(&self, origin: &RunAgent) -> Option<Arc<dyn Visibility>>;
}

/// A viewer's visibility (`None`: sees everything).
pub type ViewerVisibility = Option<Arc<dyn ViewerScope>>;

/// How many origins a [`SeenBy`] remembers (a thread's runs use few agents).
const ORIGINS_KEPT: usize = 8;

/// A viewer's visibility with its latest answers kept, so fan-out asks the
/// policy once per origin and policy generation, not once per event: the
/// per-event cost is an atomic load and a pointer comparison.
pub struct SeenBy {
    scope: ViewerVisibility,
    generation: u64,
    answers: Vec<(RunAgent, Option<Arc<dyn Visibility>>)>,
}

impl SeenBy {
    /// The visibility of a viewer with `scope`.
    pub fn new(scope: ViewerVisibility) -> SeenBy {
        SeenBy {
            scope,
            generation: 0,
            answers: Vec::new(),
        }
    }

    /// The scope itself (to hand the same viewer's rules on).
    pub fn scope(&self) -> &ViewerVisibility {
        &self.scope
    }

    /// The rules for events of `origin` (`None`: all visible).
    pub fn visibility(&mut self, origin: &RunAgent) -> Option<Arc<dyn Visibility>> {
        let scope = self.scope.as_ref()?;
        let generation = scope.generation();
        if generation != self.generation {
            self.generation = generation;
            self.answers.clear();
        }
        if let Some((_, v)) = self.answers.iter().find(|(o, _)| same_origin(o, origin)) {
            return v.clone();
        }
        let v = scope.visibility(origin);
        if self.answers.len() == ORIGINS_KEPT {
            self.answers.remove(0);
        }
        self.answers.push((origin.clone(), v.clone()));
        v
    }

    /// True when this viewer must not receive `event` of run `origin`.
    pub fn hides(&mut self, origin: &RunAgent, event: &Event) -> bool {
        self.scope.is_some() && self.visibility(origin).is_some_and(|v| v.hides(event))
    }

    /// `event` (a `MESSAGES_SNAPSHOT` of run `origin`) without the messages
    /// this viewer may not see, or `None` when it may see all of it. Such a
    /// snapshot restates messages other runs introduced (a branch restates
    /// its base's history, an agent its whole conversation), so each
    /// message must pass the rules of the run that introduced it
    /// (`authors`; unattributed: every agent's, failing closed) and those
    /// of the run that sent the snapshot — judging it by the sender alone
    /// showed another agent's hidden reasoning to the viewer.
    pub fn redact_messages_snapshot(
        &mut self,
        origin: &RunAgent,
        event: &Event,
        authors: &Authors,
    ) -> Option<Event> {
        if self.scope.is_none() || *event.kind() != super::EventType::MessagesSnapshot {
            return None;
        }
        let messages = event.get("messages")?.as_array()?;
        let mut changed = false;
        let mut kept = Vec::with_capacity(messages.len());
        for m in messages {
            let mut m = m.clone();
            let before = m.clone();
            let id = m.get("id").and_then(Value::as_str).map(str::to_owned);
            let mut shown = true;
            for who in [authors.of_message(id.as_deref()).clone(), origin.clone()] {
                if let Some(v) = self.visibility(&who) {
                    shown = shown && v.shows_message(&mut m);
                }
            }
            changed |= !shown || m != before;
            if shown {
                kept.push(m);
            }
        }
        changed.then(|| {
            event.modify(|b| {
                b.insert("messages".into(), Value::Array(kept));
            })
        })
    }

    /// True when the rules of any of the state's `writers` hide the state
    /// from this viewer.
    pub fn hides_state_of(&mut self, writers: &[RunAgent]) -> bool {
        self.scope.is_some()
            && writers
                .iter()
                .any(|w| self.visibility(w).is_some_and(|v| v.hides_state()))
    }

    /// Removes from a snapshot what this viewer may not see: each message by
    /// the rules of the run that introduced it, the state if the rules of
    /// any run that wrote it hide it.
    pub fn redact_snapshot(&mut self, snapshot: &mut Map<String, Value>, authors: &Authors) {
        if self.scope.is_none() {
            return;
        }
        if let Some(Value::Array(messages)) = snapshot.get_mut("messages") {
            messages.retain_mut(|m| {
                let id = m.get("id").and_then(Value::as_str);
                match self.visibility(authors.of_message(id)) {
                    Some(v) => v.shows_message(m),
                    None => true,
                }
            });
        }
        // A state no recorded run wrote (a base from an older gateway) has
        // an unknown origin.
        let unknown = [RunAgent::Unknown];
        let writers = match authors.of_state() {
            [] if snapshot
                .get("state")
                .is_some_and(|s| !s.is_null() && s.as_object().is_none_or(|o| !o.is_empty())) =>
            {
                &unknown[..]
            }
            w => w,
        };
        let state_hidden = writers
            .iter()
            .any(|origin| self.visibility(origin).is_some_and(|v| v.hides_state()));
        if state_hidden {
            snapshot.insert("state".into(), Value::Null);
        }
    }
}

/// Equal origins, comparing agent names by pointer first (entries of one
/// run share their agent's `Arc`).
fn same_origin(a: &RunAgent, b: &RunAgent) -> bool {
    match (a, b) {
        (RunAgent::Agent(x), RunAgent::Agent(y)) => Arc::ptr_eq(x, y) || x == y,
        _ => a == b,
    }
}
