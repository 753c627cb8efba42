//! AG-UI Server-Sent Events: `id: <seq>` (journal events only) and
//! `data: <event JSON>` lines, `\n\n` between frames, `: keepalive` comments
//! while idle. The event JSON passes byte for byte.

use super::Encoder;
use crate::protocol::sse::{KEEPALIVE, encode_data};
use crate::thread::FrameSlot;
use bytes::{Bytes, BytesMut};

/// The SSE format.
pub struct Sse;

/// The one SSE encoder.
pub static SSE: Sse = Sse;

impl Encoder for Sse {
    fn content_type(&self) -> &'static str {
        "text/event-stream"
    }

    fn slot(&self) -> Option<FrameSlot> {
        None
    }

    fn event(&self, _thread_id: &str, json: &[u8], seq: Option<u64>, out: &mut BytesMut) {
        encode_data(json, seq, out);
    }

    fn keepalive(&self) -> Option<Bytes> {
        Some(Bytes::from_static(KEEPALIVE))
    }
}
