//! Event-stream responses (the HTTP run endpoint, the join stream and the
//! AI SDK's stream): the headers every such route sends, and the pump that
//! turns a connection's outbox into the response body. The bytes are SSE or
//! AG-UI protobuf, whichever [`Encoder`] the request's `Accept` chose
//! ([`super::encode::negotiate`]); the pump itself knows no format.

use super::encode::Encoder;
use crate::thread::fanout::{OutboxReceiver, Outgoing};
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::BytesMut;

/// A `200` event-stream response over `stream`, in the format of `enc`
/// (its content type; no caching, no proxy buffering).
pub fn stream_response(
    enc: &'static dyn Encoder,
    stream: impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static,
) -> Response {
    let mut resp = Response::new(Body::from_stream(stream));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(enc.content_type()),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// Most bytes of queued events coalesced into one chunk (one write): a busy
/// stream is written in large chunks instead of one per event.
pub const SSE_CHUNK: usize = 64 * 1024;

/// Whether an SSE stream goes on after an item ([`pump`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    More,
    End,
    /// Goes on for at most this long (or until the outbox closes, or an
    /// item says [`Next::End`]), then ends: a stream whose end is likely but
    /// not certain (a run's `RUN_FINISHED`, which a late `RUN_ERROR` may
    /// still follow).
    Linger(std::time::Duration),
}

/// A connection's outbox as a response body: until `write` says
/// [`Next::End`] or the outbox closes, whatever is queued goes out as one
/// chunk (one write, at most about [`SSE_CHUNK`] bytes), and `enc`'s
/// keepalive frame (if its format has one) every `keepalive` while quiet.
/// `write` appends an item's frames to the chunk; it is called once more
/// with `None` when the stream ends otherwise than by its own
/// [`Next::End`] (the outbox closed, a [`Next::Linger`] ran out), to add
/// closing frames.
///
/// Why no task: the body itself reads the outbox when the server asks for
/// the next chunk. A task feeding a channel cost two more hand-offs per
/// chunk (outbox → task → channel → body), and hid up to a channel's worth
/// of chunks from the outbox's byte budget; dropping the body (the client
/// left) drops the outbox's receiver, which is how the run notices.
pub fn pump<W>(
    rx: OutboxReceiver,
    enc: &'static dyn Encoder,
    keepalive: std::time::Duration,
    write: W,
) -> impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static
where
    W: FnMut(Option<Outgoing>, &mut BytesMut) -> Next + Send + 'static,
{
    let pump = Pump {
        rx,
        ticker: tokio::time::interval_at(tokio::time::Instant::now() + keepalive, keepalive),
        idle_frame: enc.keepalive(),
        lingering: None,
        ended: false,
        write,
    };
    futures::stream::unfold(pump, |mut pump| async move {
        let chunk = pump.next_chunk().await?;
        Some((Ok(chunk), pump))
    })
}

/// The state of one [`pump`].
struct Pump<W> {
    rx: OutboxReceiver,
    ticker: tokio::time::Interval,
    idle_frame: Option<Bytes>,
    /// Set by [`Next::Linger`]: when the stream ends unless told otherwise.
    lingering: Option<tokio::time::Instant>,
    ended: bool,
    write: W,
}

impl<W: FnMut(Option<Outgoing>, &mut BytesMut) -> Next> Pump<W> {
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.ended {
            return None;
        }
        loop {
            let lingering = self.lingering;
            let first = tokio::select! {
                item = self.rx.recv() => item,
                _ = async { tokio::time::sleep_until(lingering.unwrap_or_else(tokio::time::Instant::now)).await }, if lingering.is_some() => None,
                _ = self.ticker.tick(), if self.idle_frame.is_some() => {
                    if let Some(frame) = &self.idle_frame {
                        return Some(frame.clone());
                    }
                    continue;
                }
            };
            let mut chunk = BytesMut::new();
            let Some(first) = first else {
                self.ended = true;
                (self.write)(None, &mut chunk);
                return (!chunk.is_empty()).then(|| chunk.freeze());
            };
            let mut item = Some(first);
            while let Some(queued) = item.take() {
                let next = match queued {
                    Outgoing::Close(..) => Next::End,
                    queued => (self.write)(Some(queued), &mut chunk),
                };
                if next == Next::End {
                    self.ended = true;
                    break;
                }
                if let Next::Linger(at_most) = next
                    && self.lingering.is_none()
                {
                    self.lingering = Some(tokio::time::Instant::now() + at_most);
                }
                if chunk.len() < SSE_CHUNK {
                    item = self.rx.try_recv();
                }
            }
            if !chunk.is_empty() {
                return Some(chunk.freeze());
            }
            if self.ended {
                return None;
            }
        }
    }
}
