//! AG-UI protobuf (`application/vnd.ag-ui.event+proto`): each event is a
//! 4-byte big-endian length, then one `ag_ui.Event` message — the framing of
//! the official `@ag-ui/encoder` (`EventEncoder.encodeProtobuf`), read by the
//! stock `@ag-ui/client` when the response has this content type.
//!
//! **Schema and build.** The schema is vendored as `proto/ag_ui/events.proto`
//! (matching the wire format of npm `@ag-ui/proto` 1.0.0) and compiled at
//! build time by `protox`, a pure-Rust protobuf compiler, into a descriptor
//! set (`build.rs`); events are encoded with `prost-reflect` over that
//! descriptor. Why not prost-build: it needs `protoc` on every build machine
//! (or generated code checked in and a drift test), and typed structs would
//! still need a hand-written JSON→struct mapping for each of the 31 event
//! types. The journal holds AG-UI JSON, and protobuf's JSON mapping *is* that
//! mapping (camelCase names, `google.protobuf.Value`/`Struct` for free-form
//! JSON, enums by name), so one generic path — reshape the JSON the way the
//! official encoder reshapes its event objects, then deserialize it as the
//! `Event` message — covers every type the schema has, and a schema update is
//! a `.proto` change only.
//!
//! **What the schema cannot carry**, and how it travels instead (the other
//! transports stay lossless; these rules are this format's alone):
//! - fields the schema does not name (extensions, fields of a later AG-UI)
//!   are dropped, as the official encoder drops them; `null` optional fields
//!   are omitted (`omitOptionalNulls`); `metadata` that is not an object is
//!   dropped;
//! - the reshapes of the official encoder apply: `RUN_FINISHED.outcome` (and
//!   `SUBAGENT_FINISHED.outcome`) travel as a type name plus its
//!   interrupts/pending tool calls, JSON-Patch `op`s as enum values, array
//!   `content` as content parts, an activity message's `content` as its map;
//! - `META` (no arm in the schema; the official encoder would write an empty
//!   frame that its own decoder rejects) travels as `CUSTOM` named
//!   `agui-gateway/meta` whose `value` is the meta event without `type` — the
//!   shape the SSE join stream already uses;
//! - any other event type the schema lacks, and an event the schema cannot
//!   hold (a field of the wrong type), travels whole as `RAW` with
//!   `source: "agui-gateway"` and the original event as `event`;
//! - `encryptedValueType` (AG-UI 1.1; on `REASONING_ENCRYPTED_VALUE`, on
//!   messages and on tool calls) has no field in `@ag-ui/proto` 1.0.0, so
//!   the event travels without it — and, because the 1.1 reasoning page
//!   says a consumer that cannot preserve it "is losing content and MUST
//!   warn", and the versioning page that a lossy downgrade "MUST emit a
//!   warning that names what was lost and why", the event's frame is
//!   followed by a `CUSTOM` named `agui-gateway/lossy` whose `value` names
//!   the event type, every dropped field (its JSON path in the event and its
//!   value, so a gateway-aware reader can restore it) and the reason. A
//!   stock client passes it to `onCustomEvent` and changes nothing else; a
//!   reader that needs the types reads the SSE or WebSocket transport,
//!   which carry them;
//! - there are no SSE ids: a proto reader resumes a join stream with `?after=`
//!   from a seq it learned elsewhere (the snapshot route); idle streams get no
//!   keepalive bytes (the format has no comment frame).

use super::Encoder;
use crate::thread::FrameSlot;
use bytes::{BufMut, Bytes, BytesMut};
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, MessageDescriptor};
use serde_json::{Map, Value, json};
use std::sync::OnceLock;

/// The media type, as `@ag-ui/proto` names it (`AGUI_MEDIA_TYPE`).
pub const MEDIA_TYPE: &str = "application/vnd.ag-ui.event+proto";

/// The compiled schema (see `build.rs`).
static DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ag_ui.bin"));

/// The protobuf format.
pub struct Proto;

/// The one protobuf encoder.
pub static PROTO: Proto = Proto;

impl Encoder for Proto {
    fn content_type(&self) -> &'static str {
        MEDIA_TYPE
    }

    fn slot(&self) -> Option<FrameSlot> {
        Some(FrameSlot::PROTO)
    }

    fn event(&self, _thread_id: &str, json: &[u8], _seq: Option<u64>, out: &mut BytesMut) {
        for message in encode_frames(json) {
            out.reserve(4 + message.len());
            out.put_u32(message.len() as u32);
            out.put_slice(&message);
        }
    }

    fn keepalive(&self) -> Option<Bytes> {
        None
    }
}

struct Schema {
    event: MessageDescriptor,
    types: DescriptorPool,
}

fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let pool = DescriptorPool::decode(DESCRIPTOR_SET).expect("the built-in AG-UI schema");
        Schema {
            event: pool
                .get_message_by_name("ag_ui.Event")
                .expect("ag_ui.Event"),
            types: pool,
        }
    })
}

/// Whether the schema has an arm for AG-UI event type `name`.
fn schema_has(name: &str) -> bool {
    schema()
        .types
        .get_enum_by_name("ag_ui.EventType")
        .is_some_and(|e| e.get_value_by_name(name).is_some())
}

/// The name of the warning that follows an event the schema carried only
/// in part (see the module doc).
pub const LOSSY: &str = "agui-gateway/lossy";

/// Why `encryptedValueType` is dropped, as the warning says it.
const NO_ENCRYPTED_VALUE_TYPE: &str = "the AG-UI protobuf schema (@ag-ui/proto 1.0.0) has no encryptedValueType field; the SSE and WebSocket transports carry it";

/// One event's `Event` messages (no length prefixes): the event, then the
/// `agui-gateway/lossy` warning when the schema could not carry all of it.
pub fn encode_frames(json: &[u8]) -> Vec<Vec<u8>> {
    let mut frames = vec![encode_event(json)];
    if let Ok(Value::Object(event)) = serde_json::from_slice::<Value>(json)
        && let Some(kind) = event.get("type").and_then(Value::as_str)
        && schema_has(kind)
    {
        let mut lost = Vec::new();
        encrypted_value_types(&Value::Object(event.clone()), "", &mut lost);
        if !lost.is_empty() {
            let warning = json!({"type": "CUSTOM", "name": LOSSY, "value": {
                "event": kind, "lost": lost, "reason": NO_ENCRYPTED_VALUE_TYPE}});
            frames.extend(to_message(&warning));
        }
    }
    frames
}

/// Every `encryptedValueType` in `v` where AG-UI puts one (the event
/// itself, its messages, their tool calls; `RUN_STARTED.input` included),
/// as `{path, value}`.
fn encrypted_value_types(v: &Value, path: &str, lost: &mut Vec<Value>) {
    let Some(obj) = v.as_object() else { return };
    if let Some(kind) = obj.get("encryptedValueType").filter(|k| !k.is_null()) {
        let at = if path.is_empty() {
            "encryptedValueType".to_owned()
        } else {
            format!("{path}.encryptedValueType")
        };
        lost.push(json!({"path": at, "value": kind}));
    }
    for key in ["input", "messages", "toolCalls"] {
        let inner = if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        };
        match obj.get(key) {
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    encrypted_value_types(item, &format!("{inner}[{i}]"), lost);
                }
            }
            Some(nested @ Value::Object(_)) => encrypted_value_types(nested, &inner, lost),
            _ => {}
        }
    }
}

/// One event's `Event` message bytes (no length prefix), following the
/// rules in the module doc.
pub fn encode_event(json: &[u8]) -> Vec<u8> {
    let event: Map<String, Value> = match serde_json::from_slice(json) {
        Ok(Value::Object(event)) => event,
        // The journal only holds JSON objects; anything else goes whole.
        Ok(other) => return raw(&other),
        Err(_) => return raw(&Value::from(String::from_utf8_lossy(json).into_owned())),
    };
    let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
    if kind == "META" {
        let mut value = event.clone();
        value.remove("type");
        let custom = json!({"type": "CUSTOM", "name": "agui-gateway/meta", "value": value});
        if let Some(bytes) = to_message(&custom) {
            return bytes;
        }
    } else if schema_has(kind)
        && let Some(bytes) = to_message(&Value::Object(event.clone()))
    {
        return bytes;
    }
    tracing::debug!(kind, "event not in the AG-UI proto schema; sent as RAW");
    raw(&Value::Object(event))
}

/// `RAW` carrying `event` whole.
fn raw(event: &Value) -> Vec<u8> {
    to_message(&json!({"type": "RAW", "source": "agui-gateway", "event": event}))
        .unwrap_or_default()
}

/// The `Event` message for an AG-UI event object, or `None` when the schema
/// cannot hold it.
fn to_message(event: &Value) -> Option<Vec<u8>> {
    let wire = wire_event(event.as_object()?)?;
    let options = DeserializeOptions::new().deny_unknown_fields(false);
    let message = DynamicMessage::deserialize_with_options(schema().event.clone(), wire, &options)
        .map_err(|e| tracing::debug!("proto encoding failed: {e}"))
        .ok()?;
    Some(prost::Message::encode_to_vec(&message))
}

/// The event in protobuf's JSON mapping of `ag_ui.Event`: `{<camelType>:
/// {baseEvent, ...fields}}`, reshaped as the official encoder reshapes it.
fn wire_event(event: &Map<String, Value>) -> Option<Value> {
    let mut rest: Map<String, Value> = event
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let kind = rest.remove("type")?.as_str()?.to_owned();
    let mut base = Map::new();
    base.insert("type".into(), kind.clone().into());
    for field in ["timestamp", "rawEvent"] {
        if let Some(v) = rest.remove(field) {
            base.insert(field.into(), v);
        }
    }
    if let Some(m) = rest.remove("metadata").filter(Value::is_object) {
        base.insert("metadata".into(), m);
    }
    match kind.as_str() {
        "MESSAGES_SNAPSHOT" => map_array(&mut rest, "messages", wire_message),
        "RUN_FINISHED" => {
            let outcome = rest.remove("outcome");
            let outcome = outcome.as_ref().and_then(Value::as_object);
            let name = outcome
                .and_then(|o| o.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("");
            rest.insert("outcome".into(), name.into());
            let field = |f: &str| {
                outcome
                    .and_then(|o| o.get(f))
                    .filter(|v| v.is_array())
                    .cloned()
            };
            match name {
                "success" => put(&mut rest, "pendingToolCallIds", field("pendingToolCallIds")),
                "interrupt" => put(&mut rest, "interrupts", field("interrupts")),
                _ => {}
            }
        }
        "SUBAGENT_FINISHED" => {
            let outcome = rest.remove("outcome");
            let outcome = outcome.as_ref().and_then(Value::as_object);
            let name = outcome
                .and_then(|o| o.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("");
            rest.insert("outcome".into(), name.into());
            if name == "suspended" {
                let ids = outcome.and_then(|o| o.get("interruptIds")).cloned();
                put(&mut rest, "interruptIds", ids.filter(Value::is_array));
            }
        }
        "STATE_DELTA" => map_array(&mut rest, "delta", wire_patch_op),
        "ACTIVITY_DELTA" => map_array(&mut rest, "patch", wire_patch_op),
        "TOOL_CALL_RESULT" => {
            if let Some(Value::Array(parts)) = rest.get("content") {
                let parts = parts.iter().filter_map(wire_content_part).collect();
                rest.remove("content");
                rest.insert("contentParts".into(), Value::Array(parts));
            }
        }
        "RUN_STARTED" => {
            if let Some(input) = rest.remove("input") {
                put(&mut rest, "input", wire_run_input(&input));
            }
        }
        _ => {}
    }
    rest.insert("baseEvent".into(), Value::Object(base));
    let mut envelope = Map::new();
    envelope.insert(camel(&kind), Value::Object(rest));
    Some(Value::Object(envelope))
}

fn put(map: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(v) = value {
        map.insert(key.into(), v);
    }
}

/// Replaces array `key` of `map` by its items mapped through `f`.
fn map_array(map: &mut Map<String, Value>, key: &str, f: fn(&Value) -> Option<Value>) {
    if let Some(Value::Array(items)) = map.get(key) {
        let items = items.iter().filter_map(f).collect();
        map.insert(key.into(), Value::Array(items));
    }
}

/// `TEXT_MESSAGE_START` → `textMessageStart` (the oneof arm's JSON name).
fn camel(kind: &str) -> String {
    let mut out = String::with_capacity(kind.len());
    let mut upper = false;
    for c in kind.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// A JSON-Patch operation with its `op` as the enum name (`add` → `ADD`).
fn wire_patch_op(op: &Value) -> Option<Value> {
    let mut op = op.as_object()?.clone();
    let name = op.get("op")?.as_str()?.to_ascii_uppercase();
    op.insert("op".into(), name.into());
    Some(Value::Object(op))
}

/// `metadata` is an object or absent.
fn object_metadata(item: &Value) -> Option<Value> {
    let mut item = item.as_object()?.clone();
    if item.get("metadata").is_some_and(|m| !m.is_object()) {
        item.remove("metadata");
    }
    Some(Value::Object(item))
}

/// A message as the schema's one `Message` (the union of every role's
/// fields): array content becomes content parts, an activity's content its
/// map.
fn wire_message(message: &Value) -> Option<Value> {
    let Value::Object(mut m) = object_metadata(message)? else {
        return None;
    };
    m.retain(|_, v| !v.is_null());
    if let Some(Value::Array(calls)) = m.get("toolCalls") {
        let calls = calls.iter().filter_map(object_metadata).collect();
        m.insert("toolCalls".into(), Value::Array(calls));
    }
    match m.get("content") {
        Some(Value::Array(parts)) => {
            let parts = parts.iter().filter_map(wire_content_part).collect();
            m.remove("content");
            m.insert("contentParts".into(), Value::Array(parts));
        }
        Some(content) if m.get("role").and_then(Value::as_str) == Some("activity") => {
            let content = content.clone();
            m.remove("content");
            if content.is_object() {
                m.insert("activityContent".into(), content);
            } else {
                m.insert("activityContent".into(), json!({}));
            }
        }
        _ => {}
    }
    Some(Value::Object(m))
}

/// One input content part as the schema's `InputContent` oneof.
fn wire_content_part(part: &Value) -> Option<Value> {
    let p = part.as_object()?;
    let kind = p.get("type")?.as_str()?;
    let pick = |keys: &[&str]| -> Map<String, Value> {
        keys.iter()
            .filter_map(|k| Some((k.to_string(), p.get(*k).filter(|v| !v.is_null())?.clone())))
            .collect()
    };
    match kind {
        "text" => Some(json!({"text": pick(&["id", "text", "metadata"])})),
        "image" | "audio" | "video" | "document" => {
            let mut arm = pick(&["id", "metadata"]);
            if let Some(source) = p.get("source").and_then(wire_source) {
                arm.insert("source".into(), source);
            }
            Some(json!({ kind: arm }))
        }
        "binary" => {
            let mime = p.get("mimeType").cloned().unwrap_or(Value::Null);
            let source = if let Some(data) = p.get("data").filter(|v| !v.is_null()) {
                json!({"data": {"value": data, "mimeType": mime}})
            } else {
                let url = p
                    .get("url")
                    .or_else(|| p.get("id"))
                    .filter(|v| !v.is_null())?;
                json!({"url": {"value": url, "mimeType": mime}})
            };
            let mut metadata = json!({"legacyBinary": true});
            for k in ["filename", "id"] {
                if let Some(v) = p.get(k).filter(|v| !v.is_null()) {
                    metadata[k] = v.clone();
                }
            }
            Some(json!({"document": {"source": source, "metadata": metadata}}))
        }
        _ => None,
    }
}

/// A content source (`{type: data|url|file, ...}`) as the schema's oneof.
fn wire_source(source: &Value) -> Option<Value> {
    let s = source.as_object()?;
    let kind = s.get("type")?.as_str()?;
    if !matches!(kind, "data" | "url" | "file") {
        return None;
    }
    let arm: Map<String, Value> = s
        .iter()
        .filter(|(k, v)| k.as_str() != "type" && !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Some(json!({ kind: arm }))
}

/// `RUN_STARTED.input` as the schema's `RunAgentInput`.
fn wire_run_input(input: &Value) -> Option<Value> {
    let mut i = input.as_object()?.clone();
    i.retain(|_, v| !v.is_null());
    map_array(&mut i, "messages", wire_message);
    map_array(&mut i, "tools", object_metadata);
    map_array(&mut i, "resume", object_metadata);
    Some(Value::Object(i))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8]) -> Value {
        let message = DynamicMessage::decode(schema().event.clone(), bytes).unwrap();
        serde_json::to_value(&message).unwrap()
    }

    #[test]
    fn frame_is_a_big_endian_length_then_the_event() {
        let mut out = BytesMut::new();
        let json = br#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi"}"#;
        PROTO.event("t", json, Some(3), &mut out);
        let len = u32::from_be_bytes(out[..4].try_into().unwrap()) as usize;
        assert_eq!(len, out.len() - 4);
        assert_eq!(
            decode(&out[4..]),
            json!({"textMessageContent": {"baseEvent": {"type": "TEXT_MESSAGE_CONTENT"},
                   "messageId": "m1", "delta": "hi"}})
        );
    }

    #[test]
    fn reshapes_follow_the_official_encoder() {
        let finished = encode_event(
            br#"{"type":"RUN_FINISHED","threadId":"t","runId":"r","timestamp":5,
                "outcome":{"type":"interrupt","interrupts":[{"id":"i1","reason":"approve"}]},
                "unknownField":1,"metadata":[1]}"#,
        );
        assert_eq!(
            decode(&finished),
            json!({"runFinished": {"baseEvent": {"type": "RUN_FINISHED", "timestamp": "5"},
                   "threadId": "t", "runId": "r", "outcome": "interrupt",
                   "interrupts": [{"id": "i1", "reason": "approve"}]}})
        );
        let delta = encode_event(
            br#"{"type":"STATE_DELTA","delta":[{"op":"replace","path":"/a","value":{"b":[1,null]}}]}"#,
        );
        assert_eq!(
            decode(&delta)["stateDelta"]["delta"],
            json!([{"op": "REPLACE", "path": "/a", "value": {"b": [1.0, null]}}])
        );
    }

    #[test]
    fn an_encrypted_value_type_is_dropped_with_a_warning_naming_it() {
        let event = br#"{"type":"REASONING_ENCRYPTED_VALUE","subtype":"message","entityId":"r1",
            "encryptedValue":"sig","encryptedValueType":"anthropic.redacted_thinking"}"#;
        let frames: Vec<Value> = encode_frames(event).iter().map(|f| decode(f)).collect();
        assert_eq!(
            frames[0],
            json!({"reasoningEncryptedValue": {"baseEvent": {"type": "REASONING_ENCRYPTED_VALUE"},
                   "subtype": "message", "entityId": "r1", "encryptedValue": "sig"}})
        );
        let warning = &frames[1]["custom"];
        assert_eq!(warning["name"], LOSSY);
        assert_eq!(warning["value"]["event"], "REASONING_ENCRYPTED_VALUE");
        assert_eq!(
            warning["value"]["lost"],
            json!([{"path": "encryptedValueType", "value": "anthropic.redacted_thinking"}])
        );
        // In a snapshot: the message's and its tool call's.
        let snapshot =
            br#"{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u","role":"user","content":"hi"},
            {"id":"a","role":"assistant","encryptedValue":"x","encryptedValueType":"t1",
             "toolCalls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"},
                           "encryptedValue":"y","encryptedValueType":"t2"}]}]}"#;
        let frames: Vec<Value> = encode_frames(snapshot).iter().map(|f| decode(f)).collect();
        assert_eq!(
            frames[1]["custom"]["value"]["lost"],
            json!([{"path": "messages[1].encryptedValueType", "value": "t1"},
                   {"path": "messages[1].toolCalls[0].encryptedValueType", "value": "t2"}])
        );
        // Nothing lost, no warning.
        let plain = br#"{"type":"REASONING_ENCRYPTED_VALUE","subtype":"message","entityId":"r1","encryptedValue":"sig"}"#;
        assert_eq!(encode_frames(plain).len(), 1);
    }

    #[test]
    fn meta_is_custom_and_unknown_types_are_raw() {
        let meta = encode_event(
            br#"{"type":"META","id":"e1","metaType":"thumbs_up","payload":{"userId":"u"}}"#,
        );
        assert_eq!(
            decode(&meta),
            json!({"custom": {"baseEvent": {"type": "CUSTOM"}, "name": "agui-gateway/meta",
                   "value": {"id": "e1", "metaType": "thumbs_up", "payload": {"userId": "u"}}}})
        );
        let future = br#"{"type":"SOMETHING_NEW","x":1}"#;
        assert_eq!(
            decode(&encode_event(future)),
            json!({"raw": {"baseEvent": {"type": "RAW"}, "source": "agui-gateway",
                   "event": {"type": "SOMETHING_NEW", "x": 1.0}}})
        );
        // A known type the schema cannot hold (a field of the wrong type).
        let bad = br#"{"type":"TEXT_MESSAGE_CONTENT","messageId":{"not":"a string"},"delta":"x"}"#;
        assert_eq!(
            decode(&encode_event(bad))["raw"]["event"]["messageId"]["not"],
            "a string"
        );
    }
}
