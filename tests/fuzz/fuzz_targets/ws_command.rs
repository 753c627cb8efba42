//! Fuzz target `ws_command`: the WebSocket command decoder
//! (`server::ws::decode_command`), which turns a client text frame into a
//! command object and its `type` before the connection dispatches it.
//!
//! WebSocket text frames are UTF-8 (the socket layer rejects anything else),
//! so inputs that are not UTF-8 are skipped. For every frame it asserts:
//!
//! - a decoded command is a JSON object whose `type` is the returned string,
//!   and encoding it again decodes to the same command;
//! - a refusal is `invalid` with a message, and echoes the frame's `id` only
//!   when the frame is an object that has one, exactly as sent;
//! - the decoder agrees with a plain `serde_json` reading of the frame about
//!   which frames are commands.

#![no_main]

use agui_gateway::server::error::ErrorCode;
use agui_gateway::server::ws::{Refusal, decode_command};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let plain = serde_json::from_str::<Value>(text).ok();
    let object = plain.as_ref().and_then(Value::as_object);
    match decode_command(text) {
        Ok((command, kind)) => {
            let map = command.as_object().expect("a command is an object");
            assert_eq!(map.get("type").and_then(Value::as_str), Some(kind.as_str()));
            assert_eq!(Some(&command), plain.as_ref(), "decoded as serde_json does");
            let again = decode_command(&command.to_string()).expect("re-encoded command decodes");
            assert_eq!(again, (command, kind), "round trip");
        }
        Err(refusal) => {
            let Refusal { id, error: e } = *refusal;
            assert_eq!(e.code, ErrorCode::Invalid);
            assert!(!e.message.is_empty());
            assert_eq!(id.as_ref(), object.and_then(|o| o.get("id")), "echoed id");
            assert!(
                object.is_none_or(|o| !matches!(o.get("type"), Some(Value::String(_)))),
                "refused a JSON object with a string type: {text:?}"
            );
        }
    }
});
