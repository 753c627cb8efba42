//! What one attempt at an upstream backend yields, whatever protocol it
//! speaks (AG-UI over SSE in [`super::client`], A2A in [`super::a2a`]):
//! the events it hands over, read by read, and the stable codes of the
//! failures that end a run. Below both clients, so neither imports the
//! other.

use crate::protocol::Event;
use crate::protocol::sse::{SseDecoder, SseFrame};
use bytes::Bytes;

/// Stable `RUN_ERROR.code`s for runs the gateway had to end itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamCode {
    /// Connection refused, DNS failure, TLS failure, connect timeout.
    Unavailable,
    /// A non-2xx status (the code carries it: `upstream_http_503`).
    Http(u16),
    /// The stream ended (or broke) before `RUN_FINISHED`/`RUN_ERROR`.
    Incomplete,
    /// `first_event`, `idle` or `total` time limit passed.
    Timeout,
    /// The agent broke the AG-UI rules (strict verification).
    ProtocolViolation,
    /// One SSE frame exceeded `max_frame_bytes`.
    FrameTooLarge,
}

impl UpstreamCode {
    /// The wire code, e.g. `upstream_timeout`.
    pub fn as_string(&self) -> String {
        match self {
            UpstreamCode::Unavailable => "upstream_unavailable".into(),
            UpstreamCode::Http(status) => format!("upstream_http_{status}"),
            UpstreamCode::Incomplete => "upstream_incomplete".into(),
            UpstreamCode::Timeout => "upstream_timeout".into(),
            UpstreamCode::ProtocolViolation => "upstream_protocol_violation".into(),
            UpstreamCode::FrameTooLarge => "upstream_frame_too_large".into(),
        }
    }
}

impl UpstreamCode {
    /// A refusal of the request as it is (malformed, too large, of a type
    /// the agent does not take, unprocessable: 400, 413, 415, 422): every
    /// backend of the agent would answer it the same, and it says nothing
    /// of this backend's health. It is neither failed over nor counted
    /// toward ejection, so a client sending bad input cannot get healthy
    /// backends ejected. Every other failure before the first event is.
    pub(super) fn refuses_the_request(self) -> bool {
        matches!(self, UpstreamCode::Http(400 | 413 | 415 | 422))
    }
}

/// What the upstream task hands over: the events one read of the agent's
/// response held, in order (never empty). A `RUN_FINISHED` and the late
/// `RUN_ERROR` that followed it travel together (see the module doc).
///
/// Why per read and not per event: the run loop journals what arrived
/// together as one batch anyway, and a channel send per event (a permit, a
/// wake-up) was a measurable part of forwarding one.
pub(super) type Handed = Vec<Event>;

/// `Err(Some(..))`: end the run with this code; `Err(None)`: the consumer left.
pub(super) type Failure = Option<(UpstreamCode, String)>;

pub(super) fn fail(code: UpstreamCode, message: impl Into<String>) -> Failure {
    Some((code, message.into()))
}

/// One read of the agent's response, copied into a buffer of its own size:
/// its events are slices of it (see [`crate::protocol::sse`]), one
/// allocation per read instead of one per event.
///
/// Why a copy: the read is a slice of the HTTP client's read buffer, and an
/// event kept in the journal would keep that whole buffer alive — and the
/// client, unable to reuse a buffer still referenced, would allocate a new
/// one for the next read. An agent that flushes each event by itself made
/// every retained event hold about 8 KiB (`tests/alloc_count.rs` measured
/// it) before this copy.
pub(super) fn own_copy(read: &Bytes) -> Bytes {
    Bytes::copy_from_slice(read)
}

/// Error text without the request URL (it may carry credentials in its
/// query string): a category, then the chain of underlying causes.
pub(super) fn describe(e: &reqwest::Error) -> String {
    let mut text = String::from(if e.is_connect() {
        "connection failed"
    } else if e.is_timeout() {
        "timed out"
    } else if e.is_body() || e.is_decode() {
        "response body failed"
    } else {
        "request failed"
    });
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Feeds one read of an agent's SSE body into `decoder`, for every
/// protocol spoken over SSE: a read that failed ends the run
/// `upstream_incomplete`, a frame past `max_frame_bytes` ends it
/// `upstream_frame_too_large`. The read is copied first ([`own_copy`]).
pub(super) fn feed_read(
    agent: &str,
    read: Result<Bytes, reqwest::Error>,
    decoder: &mut SseDecoder,
    frames: &mut Vec<SseFrame>,
) -> Result<(), Failure> {
    let bytes = read.map_err(|e| {
        fail(
            UpstreamCode::Incomplete,
            format!("agent '{agent}' stream broke: {}", describe(&e)),
        )
    })?;
    decoder
        .feed_bytes(&own_copy(&bytes), frames)
        .map_err(|e| fail(UpstreamCode::FrameTooLarge, format!("agent '{agent}': {e}")))
}
