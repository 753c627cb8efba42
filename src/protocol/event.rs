//! One AG-UI event, kept lossless.
//!
//! The gateway forwards events it did not write, so an [`Event`] keeps the exact
//! JSON text it arrived as next to the parsed object. Forwarding an event that
//! nothing changed writes those bytes back out untouched; only an event the
//! gateway rewrites (chunk expansion, policy) is serialized again, and then from
//! the full parsed object, so fields the gateway does not know survive either way.

use bytes::Bytes;
use serde_json::{Map, Value};
use std::fmt;

/// Every event type the gateway can name, plus [`EventType::Other`] for the rest.
///
/// Unknown types are not an error: they pass through (a newer agent may speak a
/// newer protocol), and the verifier lets them be.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EventType {
    RunStarted,
    RunFinished,
    RunError,
    StepStarted,
    StepFinished,
    TextMessageStart,
    TextMessageContent,
    TextMessageEnd,
    TextMessageChunk,
    ToolCallStart,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallChunk,
    ToolCallResult,
    StateSnapshot,
    StateDelta,
    MessagesSnapshot,
    ActivitySnapshot,
    ActivityDelta,
    ReasoningStart,
    ReasoningMessageStart,
    ReasoningMessageContent,
    ReasoningMessageEnd,
    ReasoningMessageChunk,
    ReasoningEnd,
    ReasoningEncryptedValue,
    SubagentStarted,
    SubagentFinished,
    SubagentError,
    Raw,
    Custom,
    /// Deprecated pre-1.0 reasoning events; still emitted by older agents.
    ThinkingStart,
    ThinkingEnd,
    ThinkingTextMessageStart,
    ThinkingTextMessageContent,
    ThinkingTextMessageEnd,
    /// Draft meta-events proposal (feedback, notes, tags).
    Meta,
    /// A type this build does not know; carried verbatim.
    Other(String),
}

/// Wire names, in one table so parsing and printing cannot disagree.
const NAMES: &[(&str, EventType)] = &[
    ("RUN_STARTED", EventType::RunStarted),
    ("RUN_FINISHED", EventType::RunFinished),
    ("RUN_ERROR", EventType::RunError),
    ("STEP_STARTED", EventType::StepStarted),
    ("STEP_FINISHED", EventType::StepFinished),
    ("TEXT_MESSAGE_START", EventType::TextMessageStart),
    ("TEXT_MESSAGE_CONTENT", EventType::TextMessageContent),
    ("TEXT_MESSAGE_END", EventType::TextMessageEnd),
    ("TEXT_MESSAGE_CHUNK", EventType::TextMessageChunk),
    ("TOOL_CALL_START", EventType::ToolCallStart),
    ("TOOL_CALL_ARGS", EventType::ToolCallArgs),
    ("TOOL_CALL_END", EventType::ToolCallEnd),
    ("TOOL_CALL_CHUNK", EventType::ToolCallChunk),
    ("TOOL_CALL_RESULT", EventType::ToolCallResult),
    ("STATE_SNAPSHOT", EventType::StateSnapshot),
    ("STATE_DELTA", EventType::StateDelta),
    ("MESSAGES_SNAPSHOT", EventType::MessagesSnapshot),
    ("ACTIVITY_SNAPSHOT", EventType::ActivitySnapshot),
    ("ACTIVITY_DELTA", EventType::ActivityDelta),
    ("REASONING_START", EventType::ReasoningStart),
    ("REASONING_MESSAGE_START", EventType::ReasoningMessageStart),
    (
        "REASONING_MESSAGE_CONTENT",
        EventType::ReasoningMessageContent,
    ),
    ("REASONING_MESSAGE_END", EventType::ReasoningMessageEnd),
    ("REASONING_MESSAGE_CHUNK", EventType::ReasoningMessageChunk),
    ("REASONING_END", EventType::ReasoningEnd),
    (
        "REASONING_ENCRYPTED_VALUE",
        EventType::ReasoningEncryptedValue,
    ),
    ("SUBAGENT_STARTED", EventType::SubagentStarted),
    ("SUBAGENT_FINISHED", EventType::SubagentFinished),
    ("SUBAGENT_ERROR", EventType::SubagentError),
    ("RAW", EventType::Raw),
    ("CUSTOM", EventType::Custom),
    ("THINKING_START", EventType::ThinkingStart),
    ("THINKING_END", EventType::ThinkingEnd),
    (
        "THINKING_TEXT_MESSAGE_START",
        EventType::ThinkingTextMessageStart,
    ),
    (
        "THINKING_TEXT_MESSAGE_CONTENT",
        EventType::ThinkingTextMessageContent,
    ),
    (
        "THINKING_TEXT_MESSAGE_END",
        EventType::ThinkingTextMessageEnd,
    ),
    ("META", EventType::Meta),
];

impl EventType {
    /// Parses a wire name; never fails (unknown names become [`EventType::Other`]).
    pub fn from_wire(name: &str) -> EventType {
        NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| t.clone())
            .unwrap_or_else(|| EventType::Other(name.to_owned()))
    }

    /// The wire name, e.g. `"RUN_STARTED"`.
    pub fn as_str(&self) -> &str {
        match self {
            EventType::Other(name) => name,
            known => NAMES
                .iter()
                .find(|(_, t)| t == known)
                .map(|(n, _)| *n)
                .expect("every known variant is in NAMES"),
        }
    }

    /// The wire name of a known type as a `'static` string (`None` for [`EventType::Other`]).
    pub fn static_name(&self) -> Option<&'static str> {
        NAMES.iter().find(|(_, t)| t == self).map(|(n, _)| *n)
    }

    /// Every type this build knows, in protocol order (for docs and tests).
    pub fn known() -> impl Iterator<Item = EventType> {
        NAMES.iter().map(|(_, t)| t.clone())
    }

    /// `TEXT_MESSAGE_CHUNK`, `TOOL_CALL_CHUNK` or `REASONING_MESSAGE_CHUNK`.
    pub fn is_chunk(&self) -> bool {
        matches!(
            self,
            EventType::TextMessageChunk
                | EventType::ToolCallChunk
                | EventType::ReasoningMessageChunk
        )
    }

    /// `RUN_FINISHED` or `RUN_ERROR`: the events that end a run.
    pub fn is_terminal(&self) -> bool {
        matches!(self, EventType::RunFinished | EventType::RunError)
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a payload is not an AG-UI event.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EventError {
    #[error("event is not valid JSON: {0}")]
    NotJson(String),
    #[error("event is not a JSON object")]
    NotObject,
    #[error("event has no string `type` field")]
    MissingType,
}

/// An AG-UI event: the exact JSON text plus its parsed object.
#[derive(Clone, PartialEq)]
pub struct Event {
    kind: EventType,
    json: Bytes,
    body: Map<String, Value>,
}

impl Event {
    /// Parses one event from its JSON text, keeping the text as the wire form.
    pub fn parse(json: impl Into<Bytes>) -> Result<Event, EventError> {
        let json = json.into();
        let value: Value =
            serde_json::from_slice(&json).map_err(|e| EventError::NotJson(e.to_string()))?;
        let Value::Object(body) = value else {
            return Err(EventError::NotObject);
        };
        let kind = match body.get("type") {
            Some(Value::String(t)) => EventType::from_wire(t),
            _ => return Err(EventError::MissingType),
        };
        Ok(Event { kind, json, body })
    }

    /// Builds an event from an object the gateway composed or changed
    /// (serialized once, here).
    pub fn from_body(body: Map<String, Value>) -> Result<Event, EventError> {
        let kind = match body.get("type") {
            Some(Value::String(t)) => EventType::from_wire(t),
            _ => return Err(EventError::MissingType),
        };
        let json = Bytes::from(serde_json::to_vec(&body).expect("a JSON map always serializes"));
        Ok(Event { kind, json, body })
    }

    /// Builds an event from a `json!` object literal; panics on a non-object
    /// or missing `type`, so use it only for shapes the gateway itself writes.
    pub fn build(value: Value) -> Event {
        match value {
            Value::Object(body) => Event::from_body(body).expect("gateway-built event has a type"),
            _ => panic!("Event::build needs a JSON object"),
        }
    }

    /// The event's type.
    pub fn kind(&self) -> &EventType {
        &self.kind
    }

    /// The exact JSON text to put on the wire.
    pub fn json(&self) -> &Bytes {
        &self.json
    }

    /// The parsed object (read-only; use [`Event::modify`] to change it).
    pub fn body(&self) -> &Map<String, Value> {
        &self.body
    }

    /// Consumes the event, returning its object.
    pub fn into_body(self) -> Map<String, Value> {
        self.body
    }

    /// A field's value, if present.
    pub fn get(&self, field: &str) -> Option<&Value> {
        self.body.get(field)
    }

    /// A string field, if present and a string.
    pub fn str_field(&self, field: &str) -> Option<&str> {
        self.body.get(field).and_then(Value::as_str)
    }

    /// True when the field is present and explicitly `null` (the verifier
    /// rejects `null` where the protocol says "omit it").
    pub fn is_null(&self, field: &str) -> bool {
        matches!(self.body.get(field), Some(Value::Null))
    }

    /// The subagent this event is attributed to, if any.
    pub fn subagent_run_id(&self) -> Option<&str> {
        self.str_field("subagentRunId")
    }

    /// Returns a changed copy, serialized once; untouched fields are kept.
    pub fn modify(&self, change: impl FnOnce(&mut Map<String, Value>)) -> Event {
        let mut body = self.body.clone();
        change(&mut body);
        Event::from_body(body).unwrap_or_else(|_| self.clone())
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Event({})", String::from_utf8_lossy(&self.json))
    }
}

/// Builds the `RUN_ERROR` the gateway emits when it ends a run itself; `code`
/// is one of the stable `upstream_*` / `gateway_*` codes in the README.
pub fn run_error(code: &str, message: impl Into<String>) -> Event {
    Event::build(serde_json::json!({
        "type": "RUN_ERROR",
        "message": message.into(),
        "code": code,
        "timestamp": now_millis(),
    }))
}

/// Milliseconds since the Unix epoch, the unit every AG-UI SDK uses for `timestamp`.
pub fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_known_name_round_trips() {
        for t in EventType::known() {
            assert_eq!(EventType::from_wire(t.as_str()), t);
            assert!(!matches!(t, EventType::Other(_)));
        }
        assert_eq!(EventType::known().count(), 37);
    }

    #[test]
    fn unknown_type_is_kept() {
        let e = Event::parse(r#"{"type":"FUTURE_THING","x":1}"#).unwrap();
        assert_eq!(e.kind(), &EventType::Other("FUTURE_THING".into()));
        assert_eq!(e.kind().as_str(), "FUTURE_THING");
        assert_eq!(&e.json()[..], br#"{"type":"FUTURE_THING","x":1}"#);
    }

    #[test]
    fn parse_keeps_exact_bytes_including_whitespace() {
        let text = "{ \"type\" : \"RAW\", \"event\": {\"n\": 1.50}, \"zz\": [1,2] }";
        let e = Event::parse(text).unwrap();
        assert_eq!(e.json(), &Bytes::from(text));
        assert_eq!(e.get("zz"), Some(&json!([1, 2])));
    }

    #[test]
    fn bad_payloads_are_named() {
        assert!(matches!(Event::parse("nope"), Err(EventError::NotJson(_))));
        assert_eq!(Event::parse("[1]"), Err(EventError::NotObject));
        assert_eq!(Event::parse(r#"{"x":1}"#), Err(EventError::MissingType));
        assert_eq!(Event::parse(r#"{"type":3}"#), Err(EventError::MissingType));
    }

    #[test]
    fn modify_keeps_unknown_fields_and_order() {
        let e = Event::parse(r#"{"type":"CUSTOM","name":"a","value":1,"vendor":{"k":[true]}}"#)
            .unwrap();
        let m = e.modify(|b| {
            b.insert("value".into(), json!(2));
        });
        assert_eq!(
            std::str::from_utf8(m.json()).unwrap(),
            r#"{"type":"CUSTOM","name":"a","value":2,"vendor":{"k":[true]}}"#
        );
    }

    #[test]
    fn run_error_has_code_and_no_fields_a_stock_client_strips() {
        let e = run_error("upstream_timeout", "idle for 5s");
        let keys: Vec<_> = e.body().keys().cloned().collect();
        assert_eq!(keys, ["type", "message", "code", "timestamp"]);
        assert_eq!(e.kind(), &EventType::RunError);
    }
}
