//! The seams between the run loop and operator policy, as protocol-level
//! hooks: the run loop (`thread`) calls them, the policy layer implements
//! them, and neither needs the other — so policy can sit after threads in
//! the data path without threads reaching forward into it.

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

/// What one viewer may see. The policy layer implements it; threads only ask,
/// so neither module needs the other.
pub trait Visibility: Send + Sync {
    /// True when this viewer must not receive `event`.
    fn hides(&self, event: &Event) -> bool;
    /// Removes from a snapshot what this viewer may not see.
    fn redact_snapshot(&self, snapshot: &mut Map<String, Value>);
}

/// A viewer's visibility (`None`: sees everything).
pub type ViewerVisibility = Option<Arc<dyn Visibility>>;
