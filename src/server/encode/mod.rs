//! Wire formats over the journal: how a journaled entry (or an event the
//! gateway adds, such as the join stream's synthetic run) becomes the bytes
//! one transport sends. Every transport reads the same [`Entry`]s; each
//! format is one file implementing [`Encoder`]:
//!
//! - [`sse`]: AG-UI Server-Sent Events (`text/event-stream`), `id: <seq>` lines;
//! - [`ws`]: the WebSocket `event` envelope of the client contract;
//! - [`proto`]: AG-UI protobuf (`application/vnd.ag-ui.event+proto`),
//!   length-prefixed `Event` messages.
//!
//! A format builds an entry's frame once and caches it in the entry's own
//! slot ([`Encoder::entry`]), shared by every reader in that format. The HTTP
//! streams (the run endpoint and the join stream) pick the format from the
//! request's `Accept` ([`negotiate`]); a new format is a new file here plus
//! a line in [`STREAMED`].

pub mod proto;
pub mod sse;
pub mod ws;

use super::error::{ApiError, ErrorCode};
use crate::thread::{Entry, FrameSlot};
use axum::http::{HeaderMap, header};
use bytes::{Bytes, BytesMut};

/// One wire format for AG-UI events.
pub trait Encoder: Send + Sync + 'static {
    /// The media type of a response (or message) in this format.
    fn content_type(&self) -> &'static str;

    /// The entry frame cache slot this format owns; `None` for a format
    /// whose frame costs no more to write than to copy (SSE: a line prefix
    /// and the event's text), which is written afresh for each reader
    /// rather than kept in every journal entry.
    fn slot(&self) -> Option<FrameSlot>;

    /// Appends one event (its AG-UI JSON text) of thread `thread_id` to
    /// `out`. `seq` is the journal position, `None` for an event the journal
    /// does not hold (the gateway's own framing events, or a `RUN_ERROR` the
    /// journal could not store): a reconnecting client must never resume
    /// from those.
    fn event(&self, thread_id: &str, json: &[u8], seq: Option<u64>, out: &mut BytesMut);

    /// What an idle stream sends so proxies keep it open, if the format has
    /// such a frame.
    fn keepalive(&self) -> Option<Bytes>;

    /// A journal entry's frame: built by [`Encoder::event`] the first time
    /// any reader in this format needs it, then shared ([`Entry::frame`]),
    /// or built each time for a format without a slot.
    fn entry(&self, e: &Entry) -> Bytes {
        let build = |e: &Entry| {
            let mut out = BytesMut::with_capacity(e.event.json().len() + 48);
            self.write_fresh(e, &mut out);
            out.freeze()
        };
        match self.slot() {
            Some(slot) => e.frame(slot, build),
            None => build(e),
        }
    }

    /// Appends a journal entry's frame to `out` (a response body's chunk):
    /// the cached frame, or, for a format without a slot, written in place.
    fn write_entry(&self, e: &Entry, out: &mut BytesMut) {
        match self.slot() {
            Some(_) => out.extend_from_slice(&self.entry(e)),
            None => self.write_fresh(e, out),
        }
    }

    /// [`Encoder::event`] for a journal entry.
    fn write_fresh(&self, e: &Entry, out: &mut BytesMut) {
        let seq = Some(e.seq).filter(|s| *s > 0);
        self.event(&e.thread_id, e.event.json(), seq, out);
    }
}

/// The formats the HTTP event streams offer, in order of preference when
/// the client accepts several equally (`*/*` or no `Accept`: SSE).
pub const STREAMED: [&'static dyn Encoder; 2] = [&sse::SSE, &proto::PROTO];

/// The stream format for a request's `Accept`, as HTTP content negotiation
/// does it (the same rules as the official encoder's): each offered type
/// takes the quality of the most specific range that matches it; the best
/// quality above 0 wins, ties going to the more specific match, then to the
/// order of [`STREAMED`]. No `Accept` (or an empty one) means SSE. Nothing
/// acceptable is `406 not_acceptable`.
pub fn negotiate(headers: &HeaderMap) -> Result<&'static dyn Encoder, ApiError> {
    let accept: Vec<&str> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let accept = accept.join(",");
    if accept.trim().is_empty() {
        return Ok(&sse::SSE);
    }
    let ranges: Vec<Range> = accept.split(',').filter_map(Range::parse).collect();
    let mut best: Option<(f32, u8, &'static dyn Encoder)> = None;
    for enc in STREAMED {
        let Some((q, specificity)) = ranges
            .iter()
            .filter_map(|r| r.matches(enc.content_type()).map(|s| (r.q, s)))
            .max_by_key(|(_, s)| *s)
        else {
            continue;
        };
        if q > 0.0 && best.is_none_or(|(bq, bs, _)| q > bq || (q == bq && specificity > bs)) {
            best = Some((q, specificity, enc));
        }
    }
    best.map(|(_, _, enc)| enc).ok_or_else(|| {
        ApiError::new(
            ErrorCode::NotAcceptable,
            format!(
                "cannot answer with any type in Accept: {}; this stream is {}",
                accept.trim(),
                STREAMED
                    .iter()
                    .map(|e| e.content_type())
                    .collect::<Vec<_>>()
                    .join(" or ")
            ),
        )
    })
}

/// One media range of an `Accept` header.
struct Range {
    kind: String,
    subtype: String,
    q: f32,
}

impl Range {
    fn parse(s: &str) -> Option<Range> {
        let mut parts = s.split(';');
        let (kind, subtype) = parts.next()?.trim().split_once('/')?;
        let mut q = 1.0;
        for p in parts {
            if let Some((k, v)) = p.split_once('=')
                && k.trim().eq_ignore_ascii_case("q")
            {
                q = v.trim().parse().unwrap_or(0.0);
            }
        }
        Some(Range {
            kind: kind.trim().to_ascii_lowercase(),
            subtype: subtype.trim().to_ascii_lowercase(),
            q,
        })
    }

    /// How specifically this range names `media` (2 exact, 1 `type/*`,
    /// 0 `*/*`), or `None` when it does not match.
    fn matches(&self, media: &str) -> Option<u8> {
        let (kind, subtype) = media.split_once('/')?;
        match (self.kind.as_str(), self.subtype.as_str()) {
            ("*", "*") => Some(0),
            (k, "*") if k == kind => Some(1),
            (k, s) if k == kind && s == subtype => Some(2),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn pick(accept: Option<&str>) -> Result<&'static str, ErrorCode> {
        let mut h = HeaderMap::new();
        if let Some(a) = accept {
            h.insert(header::ACCEPT, HeaderValue::from_str(a).unwrap());
        }
        negotiate(&h).map(|e| e.content_type()).map_err(|e| e.code)
    }

    #[test]
    fn accept_picks_the_stream_format() {
        let (sse, proto) = ("text/event-stream", proto::MEDIA_TYPE);
        assert_eq!(pick(None), Ok(sse));
        assert_eq!(pick(Some("")), Ok(sse));
        assert_eq!(pick(Some("*/*")), Ok(sse));
        assert_eq!(pick(Some("text/event-stream")), Ok(sse));
        assert_eq!(pick(Some("application/vnd.ag-ui.event+proto")), Ok(proto));
        assert_eq!(pick(Some("Application/VND.AG-UI.Event+Proto")), Ok(proto));
        assert_eq!(pick(Some("application/*")), Ok(proto));
        assert_eq!(
            pick(Some(
                "text/event-stream;q=0.5, application/vnd.ag-ui.event+proto"
            )),
            Ok(proto)
        );
        assert_eq!(
            pick(Some(
                "application/vnd.ag-ui.event+proto;q=0.5, text/event-stream"
            )),
            Ok(sse)
        );
        // A specific match outranks a wildcard at the same quality.
        assert_eq!(
            pick(Some("*/*, application/vnd.ag-ui.event+proto")),
            Ok(proto)
        );
        assert_eq!(pick(Some("*/*;q=0.1, text/event-stream;q=0")), Ok(proto));
        assert_eq!(
            pick(Some("application/json")),
            Err(ErrorCode::NotAcceptable)
        );
        assert_eq!(
            pick(Some("text/event-stream;q=0")),
            Err(ErrorCode::NotAcceptable)
        );
        assert_eq!(pick(Some("garbage")), Err(ErrorCode::NotAcceptable));
    }
}
