//! What a run has opened and not closed yet: steps, text and reasoning
//! messages, reasoning spans, tool calls, subagents.
//!
//! Two places need this bookkeeping and must agree on it: a cancelled run
//! closes whatever the agent left open before its `RUN_FINISHED` (the AG-UI
//! client refuses a run that finishes with anything still open), and the SSE
//! join stream re-opens what a viewer joining mid-run never saw opened.

use super::event::{Event, EventType};
use serde_json::{Value, json};

/// Something a run opens with a `*_START` event and closes with an `*_END`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entity {
    Step,
    TextMessage,
    ToolCall,
    ReasoningMessage,
    Reasoning,
    Subagent,
}

/// What an event does to its entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Opens,
    /// Needs the entity open (a delta).
    Continues,
    Closes,
}

impl Entity {
    /// The entity an event of `kind` acts on, and how (`None`: no entity).
    pub fn of(kind: &EventType) -> Option<(Entity, Role)> {
        use EventType::*;
        Some(match kind {
            StepStarted => (Entity::Step, Role::Opens),
            StepFinished => (Entity::Step, Role::Closes),
            TextMessageStart => (Entity::TextMessage, Role::Opens),
            TextMessageContent => (Entity::TextMessage, Role::Continues),
            TextMessageEnd => (Entity::TextMessage, Role::Closes),
            ToolCallStart => (Entity::ToolCall, Role::Opens),
            ToolCallArgs => (Entity::ToolCall, Role::Continues),
            ToolCallEnd => (Entity::ToolCall, Role::Closes),
            ReasoningMessageStart => (Entity::ReasoningMessage, Role::Opens),
            ReasoningMessageContent => (Entity::ReasoningMessage, Role::Continues),
            ReasoningMessageEnd => (Entity::ReasoningMessage, Role::Closes),
            ReasoningStart => (Entity::Reasoning, Role::Opens),
            ReasoningEnd => (Entity::Reasoning, Role::Closes),
            SubagentStarted => (Entity::Subagent, Role::Opens),
            SubagentFinished | SubagentError => (Entity::Subagent, Role::Closes),
            _ => return None,
        })
    }

    /// The field naming the entity.
    pub fn id_field(self) -> &'static str {
        match self {
            Entity::Step => "stepName",
            Entity::TextMessage | Entity::ReasoningMessage | Entity::Reasoning => "messageId",
            Entity::ToolCall => "toolCallId",
            Entity::Subagent => "subagentRunId",
        }
    }

    /// A minimal event that opens this entity. `tool_name` is the tool
    /// call's name (required by the schema; the id when unknown).
    pub fn opener(self, id: &str, subagent: Option<&str>, tool_name: Option<&str>) -> Value {
        let mut e = match self {
            Entity::Step => json!({"type": "STEP_STARTED", "stepName": id}),
            Entity::TextMessage => {
                json!({"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"})
            }
            Entity::ToolCall => json!({"type": "TOOL_CALL_START", "toolCallId": id,
                "toolCallName": tool_name.unwrap_or(id)}),
            Entity::ReasoningMessage => {
                json!({"type": "REASONING_MESSAGE_START", "messageId": id, "role": "reasoning"})
            }
            Entity::Reasoning => json!({"type": "REASONING_START", "messageId": id}),
            Entity::Subagent => {
                json!({"type": "SUBAGENT_STARTED", "subagentRunId": id, "name": id})
            }
        };
        with_subagent(&mut e, self, subagent);
        e
    }

    /// A minimal event that closes this entity.
    pub fn closer(self, id: &str, subagent: Option<&str>) -> Value {
        let mut e = match self {
            Entity::Step => json!({"type": "STEP_FINISHED", "stepName": id}),
            Entity::TextMessage => json!({"type": "TEXT_MESSAGE_END", "messageId": id}),
            Entity::ToolCall => json!({"type": "TOOL_CALL_END", "toolCallId": id}),
            Entity::ReasoningMessage => json!({"type": "REASONING_MESSAGE_END", "messageId": id}),
            Entity::Reasoning => json!({"type": "REASONING_END", "messageId": id}),
            Entity::Subagent => json!({"type": "SUBAGENT_FINISHED", "subagentRunId": id}),
        };
        with_subagent(&mut e, self, subagent);
        e
    }
}

/// Attributes an event to its subagent (a subagent's own events carry it
/// as their id already).
fn with_subagent(e: &mut Value, entity: Entity, subagent: Option<&str>) {
    if let (Some(s), Some(obj), false) = (subagent, e.as_object_mut(), entity == Entity::Subagent) {
        obj.insert("subagentRunId".into(), s.into());
    }
}

/// One open entity.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Open {
    entity: Entity,
    id: String,
    subagent: Option<String>,
}

/// Entities opened and not yet closed, in the order they were opened.
#[derive(Debug, Clone, Default)]
pub struct OpenEntities {
    open: Vec<Open>,
}

impl OpenEntities {
    /// Follows one event: a start opens, an end closes.
    pub fn track(&mut self, e: &Event) {
        let Some((entity, role)) = Entity::of(e.kind()) else {
            return;
        };
        let id = e.str_field(entity.id_field()).unwrap_or_default();
        let subagent = e.subagent_run_id().filter(|_| entity != Entity::Subagent);
        match role {
            Role::Opens => self.open.push(Open {
                entity,
                id: id.to_owned(),
                subagent: subagent.map(str::to_owned),
            }),
            Role::Closes => {
                if let Some(i) = self.position(entity, id, subagent) {
                    self.open.remove(i);
                }
            }
            Role::Continues => {}
        }
    }

    /// True when `entity` `id` (of `subagent`, for steps) is open.
    pub fn is_open(&self, entity: Entity, id: &str, subagent: Option<&str>) -> bool {
        self.position(entity, id, subagent).is_some()
    }

    fn position(&self, entity: Entity, id: &str, subagent: Option<&str>) -> Option<usize> {
        // Steps are named per agent: the same name may be open in a subagent.
        self.open.iter().rposition(|o| {
            o.entity == entity
                && o.id == id
                && (entity != Entity::Step || o.subagent.as_deref() == subagent)
        })
    }

    /// True when nothing is open.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// Forgets everything (a new run starts).
    pub fn clear(&mut self) {
        self.open.clear();
    }

    /// End events for everything still open, innermost (latest) first.
    pub fn closing(&self) -> Vec<Event> {
        self.open
            .iter()
            .rev()
            .map(|o| Event::build(o.entity.closer(&o.id, o.subagent.as_deref())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(v: Value) -> Event {
        Event::build(v)
    }

    #[test]
    fn closes_in_reverse_order_with_subagents() {
        let mut o = OpenEntities::default();
        for e in [
            json!({"type":"STEP_STARTED","stepName":"s"}),
            json!({"type":"SUBAGENT_STARTED","subagentRunId":"sa","name":"helper"}),
            json!({"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant","subagentRunId":"sa"}),
            json!({"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"t"}),
            json!({"type":"TOOL_CALL_END","toolCallId":"c"}),
        ] {
            o.track(&ev(e));
        }
        assert!(o.is_open(Entity::TextMessage, "m", None));
        assert!(!o.is_open(Entity::ToolCall, "c", None));
        assert!(
            !o.is_open(Entity::Step, "s", Some("sa")),
            "steps are per agent"
        );
        let types: Vec<Value> = o.closing().iter().map(|e| json!(e.body())).collect();
        assert_eq!(
            types,
            [
                json!({"type":"TEXT_MESSAGE_END","messageId":"m","subagentRunId":"sa"}),
                json!({"type":"SUBAGENT_FINISHED","subagentRunId":"sa"}),
                json!({"type":"STEP_FINISHED","stepName":"s"}),
            ]
        );
    }
}
