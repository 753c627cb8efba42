//! The seams between the run loop and operator policy, as protocol-level
//! hooks: the run loop (`thread`) calls them, the policy layer implements
//! them, and neither needs the other — so policy can sit after threads in
//! the data path without threads reaching forward into it.

use super::authorship::{Authors, RunAgent};
use super::{Event, EventType, RunAgentInput};
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

    /// True for a viewer no rule applies to: nothing to judge.
    pub fn sees_everything(&self) -> bool {
        self.scope.is_none()
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

    /// True for the event types that can restate what other runs
    /// introduced — messages (`RUN_STARTED.input.messages`,
    /// `MESSAGES_SNAPSHOT`) or the state (`RUN_STARTED.input.state`,
    /// `STATE_SNAPSHOT`, `STATE_DELTA`) — and so must be judged part by
    /// part ([`SeenBy::judge`]). Only they pay for it: the faces ask this
    /// first and hand [`SeenBy::judge`] the thread's [`Authors`] only then.
    pub fn restates(kind: &EventType) -> bool {
        matches!(
            kind,
            EventType::RunStarted
                | EventType::MessagesSnapshot
                | EventType::StateSnapshot
                | EventType::StateDelta
        )
    }

    /// What this viewer gets of `event`, of run `origin`: the one rule
    /// every face applies (WebSocket and SSE viewers, live or replaying, the
    /// run's requester, and so the proto and AI SDK encodings of them).
    ///
    /// An event this viewer's rules hide by type is [`Shown::Hidden`]. An
    /// event that restates history ([`SeenBy::restates`]) is judged part by
    /// part, because it carries what *other* runs introduced — a fork's
    /// `RUN_STARTED` restates its branch, an agent's `MESSAGES_SNAPSHOT` its
    /// whole conversation: each message must pass the rules of every run
    /// known to have introduced it (`authors`, each layer asked;
    /// unattributed: every agent's, failing closed) and those of `origin`;
    /// the state (a whole snapshot, a change to it, or a run's input state)
    /// those of every run that wrote it. Judging such an event by its sender
    /// alone showed a guest another agent's hidden reasoning.
    pub fn judge(&mut self, origin: &RunAgent, event: &Event, authors: &[&Authors]) -> Shown {
        if self.scope.is_none() {
            return Shown::Whole;
        }
        if self.hides(origin, event) {
            return Shown::Hidden;
        }
        match event.kind() {
            EventType::StateSnapshot | EventType::StateDelta => {
                if self.hides_state_written_by(origin, authors) {
                    Shown::Hidden
                } else {
                    Shown::Whole
                }
            }
            EventType::MessagesSnapshot => {
                let Some(messages) = event.get("messages").and_then(Value::as_array) else {
                    return Shown::Whole;
                };
                match self.visible_messages(messages, authors, origin) {
                    Some(kept) => Shown::Redacted(event.modify(|b| {
                        b.insert("messages".into(), Value::Array(kept));
                    })),
                    None => Shown::Whole,
                }
            }
            EventType::RunStarted => self.judge_run_input(origin, event, authors),
            _ => Shown::Whole,
        }
    }

    /// A `RUN_STARTED`'s `input`: its messages one by one, its state by
    /// the rules of the state's writers.
    fn judge_run_input(&mut self, origin: &RunAgent, event: &Event, authors: &[&Authors]) -> Shown {
        let Some(input) = event.get("input").and_then(Value::as_object) else {
            return Shown::Whole;
        };
        let messages = input
            .get("messages")
            .and_then(Value::as_array)
            .and_then(|m| self.visible_messages(m, authors, origin));
        let state_hidden = input.get("state").is_some_and(|s| !is_empty_state(s))
            && self.hides_state_written_by(origin, authors);
        if messages.is_none() && !state_hidden {
            return Shown::Whole;
        }
        let mut input = input.clone();
        if let Some(kept) = messages {
            input.insert("messages".into(), Value::Array(kept));
        }
        if state_hidden {
            input.insert("state".into(), Value::Null);
        }
        Shown::Redacted(event.modify(|b| {
            b.insert("input".into(), Value::Object(input));
        }))
    }

    /// `messages` without what this viewer may not see (`None`: all of it
    /// as is). Each is judged by the rules of its author in every layer of
    /// `authors` and by those of `restater`, the run that sends it again.
    fn visible_messages(
        &mut self,
        messages: &[Value],
        authors: &[&Authors],
        restater: &RunAgent,
    ) -> Option<Vec<Value>> {
        let mut changed = false;
        let mut kept = Vec::with_capacity(messages.len());
        for original in messages {
            let mut m = original.clone();
            let id = original.get("id").and_then(Value::as_str);
            let mut shown = true;
            let judges = authors.iter().map(|a| a.of_message(id)).chain([restater]);
            for who in judges {
                if let Some(v) = self.visibility(who) {
                    shown = shown && v.shows_message(&mut m);
                }
            }
            changed |= !shown || m != *original;
            if shown {
                kept.push(m);
            }
        }
        changed.then_some(kept)
    }

    /// True when the rules of a writer of the state hide it: `origin` and
    /// every writer `authors` record. A state no recorded run wrote has an
    /// unknown writer (fail closed).
    fn hides_state_written_by(&mut self, origin: &RunAgent, authors: &[&Authors]) -> bool {
        static UNKNOWN: RunAgent = RunAgent::Unknown;
        let recorded = authors.iter().flat_map(|a| a.of_state());
        let unknown = authors
            .iter()
            .all(|a| a.of_state().is_empty())
            .then_some(&UNKNOWN);
        recorded
            .chain(unknown)
            .chain([origin])
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

/// What one viewer gets of one event ([`SeenBy::judge`]).
#[derive(Debug)]
pub enum Shown {
    /// Nothing.
    Hidden,
    /// The event as journaled.
    Whole,
    /// Its own copy, without what it may not see.
    Redacted(Event),
}

/// An input state that says nothing (absent from a snapshot's point of
/// view): `null` or `{}`.
fn is_empty_state(s: &Value) -> bool {
    s.is_null() || s.as_object().is_some_and(Map::is_empty)
}

/// Equal origins, comparing agent names by pointer first (entries of one
/// run share their agent's `Arc`).
fn same_origin(a: &RunAgent, b: &RunAgent) -> bool {
    match (a, b) {
        (RunAgent::Agent(x), RunAgent::Agent(y)) => Arc::ptr_eq(x, y) || x == y,
        _ => a == b,
    }
}
