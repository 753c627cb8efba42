//! One AG-UI event, kept lossless.
//!
//! The gateway forwards events it did not write, so an [`Event`] keeps the exact
//! JSON text it arrived as (the object is parsed only when something needs
//! it; see [`Event`]). Forwarding an event that
//! nothing changed writes those bytes back out untouched; only an event the
//! gateway rewrites (chunk expansion, policy) is serialized again, and then from
//! the full parsed object, so fields the gateway does not know survive either way.

mod scan;

use bytes::Bytes;
use serde_json::{Map, Value};
use std::fmt;
use std::sync::OnceLock;

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
        // The streaming types first: this runs for every event, and most
        // are these (the table below answers the rest).
        match name {
            "TEXT_MESSAGE_CONTENT" => return EventType::TextMessageContent,
            "TOOL_CALL_ARGS" => return EventType::ToolCallArgs,
            "REASONING_MESSAGE_CONTENT" => return EventType::ReasoningMessageContent,
            _ => {}
        }
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

/// An AG-UI event: the exact JSON text, its type, and the few fields the data
/// path reads for every event.
///
/// Why not a parsed object: building a `serde_json` map for each event was a
/// quarter of the gateway's CPU on the memory-store path (SipHash of every key,
/// an allocation per key and string) and most of what a retained journal entry
/// cost in memory, while the run loop only ever reads a handful of fields
/// (`type`, the ids, `delta`). [`Event::parse`] scans the text once and keeps,
/// for each field in [`HEAD`], where its string lies in the text (or a decoded
/// copy when it has escapes): nothing is allocated for an event without
/// escapes. The full object is parsed on first use of [`Event::body`] /
/// [`Event::get`] — by the code that folds an event structurally or rewrites
/// it (snapshots, `RUN_STARTED`, policy) — and cached.
///
/// The scan accepts exactly what `serde_json` accepts as a `Value` (it walks
/// the text with the same `deserialize_any` paths: the same number ranges, the
/// same nesting limit), so an event that parses here always has a body, and
/// the errors are the same ([`tests/fuzz/fuzz_targets/event.rs`] checks both
/// against the plain parse).
#[derive(Clone)]
pub struct Event {
    kind: EventType,
    json: Bytes,
    head: Head,
    body: OnceLock<Box<Map<String, Value>>>,
}

/// The fields [`Event::str_field`] answers from the scan, without the body:
/// what the verifier, the fold, chunk normalization, open-entity tracking and
/// handoff signals read for every event. Any other field is read from the
/// body.
pub const HEAD: [&str; 12] = [
    "messageId",
    "toolCallId",
    "delta",
    "subagentRunId",
    "parentMessageId",
    "runId",
    "threadId",
    "role",
    "name",
    "toolCallName",
    "stepName",
    "clientEventId",
];

/// Where one [`HEAD`] field's value is: a string's bytes inside the event's
/// text (between its quotes, no escapes), or a marker.
///
/// Sixteen-bit offsets: four bytes a field, for an entry the journal keeps
/// (most events are far under 64 KiB); a string beyond them is kept as a
/// decoded copy instead, like one with escapes.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Span {
    start: u16,
    len: u16,
}

impl Span {
    const ABSENT: Span = Span::marker(u16::MAX);
    const NULL: Span = Span::marker(u16::MAX - 1);
    /// Present, not a string and not `null`.
    const OTHER: Span = Span::marker(u16::MAX - 2);
    /// A decoded copy: `start` indexes [`Head::decoded`].
    const DECODED: u16 = u16::MAX - 3;

    const fn marker(len: u16) -> Span {
        Span { start: 0, len }
    }
}

/// The scanned [`HEAD`] fields of one event.
#[derive(Clone)]
struct Head {
    spans: [Span; HEAD.len()],
    /// Decoded copies of the head strings that had escapes (rare for ids,
    /// common enough for a `delta`); `None` when there were none.
    decoded: Option<Box<[Box<str>]>>,
}

impl Event {
    /// Parses one event from its JSON text, keeping the text as the wire form.
    pub fn parse(json: impl Into<Bytes>) -> Result<Event, EventError> {
        let json = json.into();
        let (kind, head) = scan(&json)?;
        Ok(Event {
            kind,
            json,
            head,
            body: OnceLock::new(),
        })
    }

    /// Builds an event from an object the gateway composed or changed
    /// (serialized once, here).
    pub fn from_body(body: Map<String, Value>) -> Result<Event, EventError> {
        if !matches!(body.get("type"), Some(Value::String(_))) {
            return Err(EventError::MissingType);
        }
        let json = Bytes::from(serde_json::to_vec(&body).expect("a JSON map always serializes"));
        let (kind, head) = scan(&json)?;
        Ok(Event {
            kind,
            json,
            head,
            body: OnceLock::from(Box::new(body)),
        })
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

    /// The parsed object (read-only; use [`Event::modify`] to change it),
    /// parsed on first use.
    pub fn body(&self) -> &Map<String, Value> {
        self.body.get_or_init(|| {
            // Cannot fail: `scan` accepted this text, and it accepts exactly
            // what the plain parse accepts (see the type's docs).
            Box::new(serde_json::from_slice(&self.json).unwrap_or_default())
        })
    }

    /// Consumes the event, returning its object.
    pub fn into_body(self) -> Map<String, Value> {
        match self.body.into_inner() {
            Some(body) => *body,
            None => serde_json::from_slice(&self.json).unwrap_or_default(),
        }
    }

    /// A field's value, if present (from the body).
    pub fn get(&self, field: &str) -> Option<&Value> {
        self.body().get(field)
    }

    /// A string field, if present and a string: a [`HEAD`] field without
    /// touching the body.
    pub fn str_field(&self, field: &str) -> Option<&str> {
        match head_index(field) {
            Some(i) => self.head_str(i),
            None => self.get(field).and_then(Value::as_str),
        }
    }

    /// True when the field is present and explicitly `null` (the verifier
    /// rejects `null` where the protocol says "omit it").
    pub fn is_null(&self, field: &str) -> bool {
        match head_index(field) {
            Some(i) => self.head.spans[i] == Span::NULL,
            None => matches!(self.get(field), Some(Value::Null)),
        }
    }

    /// True when the field is present (any value, `null` included).
    pub fn has(&self, field: &str) -> bool {
        match head_index(field) {
            Some(i) => self.head.spans[i] != Span::ABSENT,
            None => self.get(field).is_some(),
        }
    }

    /// The subagent this event is attributed to, if any.
    pub fn subagent_run_id(&self) -> Option<&str> {
        self.str_field("subagentRunId")
    }

    /// Returns a changed copy, serialized once; untouched fields are kept.
    pub fn modify(&self, change: impl FnOnce(&mut Map<String, Value>)) -> Event {
        let mut body = self.body().clone();
        change(&mut body);
        Event::from_body(body).unwrap_or_else(|_| self.clone())
    }

    fn head_str(&self, i: usize) -> Option<&str> {
        let span = self.head.spans[i];
        if span.len == Span::DECODED {
            return Some(&self.head.decoded.as_ref()?[span.start as usize]);
        }
        if span.len >= Span::OTHER.len {
            return None;
        }
        let bytes = self
            .json
            .get(span.start as usize..span.start as usize + span.len as usize)?;
        // Checking the bytes again here was 2.3 % of a long run's time
        // (the fold and the verifier read these fields for every event).
        debug_assert!(std::str::from_utf8(bytes).is_ok(), "a span is UTF-8");
        // SAFETY: a span is only made by `scan`, from a `&str` serde_json
        // borrowed from (and validated in) this very text, which is never
        // changed: `json` and `head` are private and always built together
        // by `scan` (`Event::parse`, `Event::from_body`). The fuzz target
        // `event` runs this with the assertion above on.
        Some(unsafe { std::str::from_utf8_unchecked(bytes) })
    }
}

impl PartialEq for Event {
    /// Two events are equal when their texts are: the text is what the
    /// gateway forwards, and the rest is read from it.
    fn eq(&self, other: &Self) -> bool {
        self.json == other.json
    }
}

/// The index of `field` in [`HEAD`] (a `match`: this runs for every field
/// read and every key scanned).
pub(crate) fn head_index(field: &str) -> Option<usize> {
    Some(match field {
        "messageId" => 0,
        "toolCallId" => 1,
        "delta" => 2,
        "subagentRunId" => 3,
        "parentMessageId" => 4,
        "runId" => 5,
        "threadId" => 6,
        "role" => 7,
        "name" => 8,
        "toolCallName" => 9,
        "stepName" => 10,
        "clientEventId" => 11,
        _ => return None,
    })
}

/// Scans an event's text: its type and [`HEAD`] fields, nothing built.
fn scan(json: &[u8]) -> Result<(EventType, Head), EventError> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let visitor = scan::TopVisitor {
        base: json.as_ptr() as usize,
    };
    let top = serde::Deserializer::deserialize_any(&mut de, visitor)
        .and_then(|top| de.end().map(|()| top))
        .map_err(|e| EventError::NotJson(e.to_string()))?;
    let scan::Top::Object(found) = top else {
        return Err(EventError::NotObject);
    };
    let kind = match &found.kind {
        Some(scan::Text::Borrowed(s)) => EventType::from_wire(s),
        Some(scan::Text::Owned(s)) => EventType::from_wire(s),
        None => return Err(EventError::MissingType),
    };
    let head = Head {
        spans: found.spans,
        decoded: (!found.decoded.is_empty()).then(|| found.decoded.into_boxed_slice()),
    };
    Ok((kind, head))
}

impl Span {
    /// Where a scanned field's value is: `base` is the address of the
    /// text it was read from; a string that cannot be a span (escaped,
    /// or beyond 16 bits) is pushed to `decoded`.
    fn of(field: scan::Field<'_>, base: usize, decoded: &mut Vec<Box<str>>) -> Span {
        let mut keep = |s: Box<str>| {
            decoded.push(s);
            Span {
                start: (decoded.len() - 1) as u16,
                len: Span::DECODED,
            }
        };
        match field {
            scan::Field::Null => Span::NULL,
            scan::Field::Other => Span::OTHER,
            scan::Field::Text(scan::Text::Borrowed(s)) => {
                let start = s.as_ptr() as usize - base;
                match (u16::try_from(start), u16::try_from(s.len())) {
                    (Ok(start), Ok(len)) if len < Span::DECODED => Span { start, len },
                    _ => keep(Box::from(s)),
                }
            }
            scan::Field::Text(scan::Text::Owned(s)) => keep(s.into_boxed_str()),
        }
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
    fn head_index_matches_the_head_table() {
        for (i, field) in HEAD.iter().enumerate() {
            assert_eq!(head_index(field), Some(i), "{field}");
        }
        assert_eq!(head_index("type"), None);
    }

    #[test]
    fn head_fields_are_read_without_the_body() {
        let e = Event::parse(
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi","subagentRunId":null,"role":3}"#,
        )
        .unwrap();
        assert_eq!(e.str_field("messageId"), Some("m1"));
        assert_eq!(e.str_field("delta"), Some("hi"));
        assert!(e.is_null("subagentRunId") && e.has("subagentRunId"));
        assert_eq!(e.str_field("subagentRunId"), None);
        assert_eq!(e.str_field("role"), None, "a number is not a string");
        assert!(e.has("role") && !e.is_null("role"));
        assert!(!e.has("toolCallId") && !e.is_null("toolCallId"));
        assert!(e.body.get().is_none(), "nothing above parsed the body");
        assert_eq!(e.get("role"), Some(&json!(3)));
        assert!(e.body.get().is_some());
    }

    #[test]
    fn escaped_and_repeated_fields_read_as_a_map_would() {
        let text = r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"a","delta":"line\n\"q\" \u00e9","mess\u0061geId":"b","type":"TEXT_MESSAGE_CONTENT"}"#;
        let e = Event::parse(text).unwrap();
        let plain: Map<String, Value> = serde_json::from_str(text).unwrap();
        assert_eq!(e.str_field("delta"), plain["delta"].as_str());
        assert_eq!(e.str_field("delta"), Some("line\n\"q\" é"));
        assert_eq!(e.str_field("messageId"), Some("b"), "the last one wins");
        assert_eq!(e.body(), &plain);
        assert_eq!(&e.json()[..], text.as_bytes());
    }

    #[test]
    fn the_scan_refuses_exactly_what_the_plain_parse_refuses() {
        let deep = format!(
            r#"{{"type":"RAW","event":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let cases = [
            r#"{"type":"RAW","n":1e400}"#.to_owned(),
            r#"{"type":"RAW","n":-1e400}"#.to_owned(),
            r#"{"type":"RAW","s":"\ud800"}"#.to_owned(),
            r#"{"type":"RAW","messageId":"\ud800"}"#.to_owned(),
            r#"{"type":"RAW","s":"\x"}"#.to_owned(),
            "{\"type\":\"RAW\",\"s\":\"\u{1}\"}".to_owned(),
            r#"{"type":"RAW"} x"#.to_owned(),
            r#"[1, 2"#.to_owned(),
            r#"[1] 2"#.to_owned(),
            r#""s""#.to_owned(),
            r#"{"type":"RAW","n":12345678901234567890123}"#.to_owned(),
            r#"{"type":"RAW","n":1.7976931348623157e308}"#.to_owned(),
            r#"{"type":7,"x":[{"type":"RAW"}]}"#.to_owned(),
            deep,
        ];
        for text in cases {
            let plain = serde_json::from_str::<Value>(&text);
            let ours = Event::parse(text.clone());
            match (&plain, &ours) {
                (Err(p), Err(EventError::NotJson(o))) => assert_eq!(&p.to_string(), o, "{text}"),
                (Ok(Value::Object(m)), Ok(e)) => assert_eq!(e.body(), m, "{text}"),
                (Ok(Value::Object(_)), Err(EventError::MissingType)) => {}
                (Ok(v), Err(EventError::NotObject)) if !v.is_object() => {}
                _ => panic!("{text}: plain {plain:?}, ours {ours:?}"),
            }
        }
    }

    #[test]
    fn fields_past_64_kib_or_longer_than_it_are_read_as_copies() {
        let long = "x".repeat(70_000);
        let text = format!(
            r#"{{"type":"TEXT_MESSAGE_CONTENT","pad":"{long}","messageId":"m","delta":"{long}"}}"#
        );
        let e = Event::parse(text).unwrap();
        assert_eq!(e.str_field("messageId"), Some("m"));
        assert_eq!(e.str_field("delta"), Some(long.as_str()));
        assert!(e.body.get().is_none());
    }

    #[test]
    fn a_built_event_reads_its_head_from_its_text() {
        let e =
            Event::build(json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c\\1", "delta": "{}"}));
        assert_eq!(e.str_field("toolCallId"), Some("c\\1"));
        assert_eq!(e.str_field("delta"), Some("{}"));
        let m = e.modify(|b| {
            b.insert("delta".into(), json!("x"));
        });
        assert_eq!(m.str_field("delta"), Some("x"));
    }

    #[test]
    fn run_error_has_code_and_no_fields_a_stock_client_strips() {
        let e = run_error("upstream_timeout", "idle for 5s");
        let keys: Vec<_> = e.body().keys().cloned().collect();
        assert_eq!(keys, ["type", "message", "code", "timestamp"]);
        assert_eq!(e.kind(), &EventType::RunError);
    }
}
