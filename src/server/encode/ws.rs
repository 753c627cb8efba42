//! The WebSocket `event` envelope of the client contract:
//! `{"type":"event","threadId","seq","event":<event JSON>}`, one text frame
//! per event (the writer, `server/ws/writer.rs`, makes the frame; idle
//! sockets get WebSocket pings, not a keepalive message).

use super::Encoder;
use crate::thread::FrameSlot;
use bytes::{BufMut, Bytes, BytesMut};
use serde_json::Value;

/// The WebSocket envelope format.
pub struct Ws;

/// The one WebSocket encoder.
pub static WS: Ws = Ws;

impl Encoder for Ws {
    fn content_type(&self) -> &'static str {
        "application/json"
    }

    fn slot(&self) -> Option<FrameSlot> {
        Some(FrameSlot::WEBSOCKET)
    }

    fn event(&self, thread_id: &str, json: &[u8], seq: Option<u64>, out: &mut BytesMut) {
        let json = if std::str::from_utf8(json).is_ok() {
            json
        } else {
            b"{}"
        };
        out.put_slice(b"{\"type\":\"event\",\"threadId\":");
        out.put_slice(Value::from(thread_id).to_string().as_bytes());
        out.put_slice(b",\"seq\":");
        out.put_slice(itoa::Buffer::new().format(seq.unwrap_or(0)).as_bytes());
        out.put_slice(b",\"event\":");
        out.put_slice(json);
        out.put_u8(b'}');
    }

    fn keepalive(&self) -> Option<Bytes> {
        None
    }
}
