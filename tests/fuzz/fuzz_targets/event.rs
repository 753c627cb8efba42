//! Fuzz target `event`: `protocol::Event::parse`, the one-pass scan that
//! keeps an event's text and reads only its type and head fields, against
//! the plain parse it replaced (`serde_json::from_slice::<Value>`).
//!
//! The input is one event's text as an agent would send it. It asserts:
//!
//! - the scan accepts exactly the texts the plain parse accepts as an object
//!   with a string `type`, and refuses the rest for the same reason (not
//!   JSON, with the same message; not an object; no string `type`);
//! - an accepted event keeps the text byte for byte (what the gateway
//!   forwards), names the same type, and answers every head field
//!   (`str_field`, `is_null`, `has`) as the parsed object does;
//! - its body, parsed later, is the plain parse's object;
//! - an event the gateway rewrites (`modify`) reads its head from its new
//!   text.

#![no_main]

use agui_gateway::protocol::event::{EventError, HEAD};
use agui_gateway::protocol::{Event, EventType};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let plain = serde_json::from_slice::<Value>(data);
    let ours = Event::parse(data.to_vec());
    let object = match (&plain, ours) {
        (Err(p), Err(EventError::NotJson(o))) => {
            assert_eq!(p.to_string(), o, "different refusal");
            return;
        }
        (Ok(v), Err(EventError::NotObject)) => {
            assert!(!v.is_object(), "object refused as not an object");
            return;
        }
        (Ok(Value::Object(m)), Err(EventError::MissingType)) => {
            assert!(!matches!(m.get("type"), Some(Value::String(_))));
            return;
        }
        (Ok(Value::Object(m)), Ok(event)) => (m.clone(), event),
        (plain, ours) => panic!("plain {plain:?}, scan {ours:?}"),
    };
    let (m, event) = object;
    assert_eq!(&event.json()[..], data, "the text is not kept");
    let Some(Value::String(kind)) = m.get("type") else {
        panic!("accepted without a string type");
    };
    assert_eq!(event.kind(), &EventType::from_wire(kind));
    check_head(&event, &m);
    assert_eq!(event.body(), &m, "the body is not the plain parse");

    let changed = event.modify(|b| {
        b.insert("delta".into(), Value::String("x\n\"y\"".into()));
    });
    let mut expected = m.clone();
    expected.insert("delta".into(), Value::String("x\n\"y\"".into()));
    check_head(&changed, &expected);
});

fn check_head(event: &Event, m: &serde_json::Map<String, Value>) {
    for field in HEAD {
        let value = m.get(field);
        assert_eq!(event.str_field(field), value.and_then(Value::as_str), "{field}");
        assert_eq!(event.is_null(field), value == Some(&Value::Null), "{field}");
        assert_eq!(event.has(field), value.is_some(), "{field}");
    }
}
