//! Event-stream responses (the HTTP run endpoint and the join stream): a
//! task-fed byte stream, the headers every such route sends, and the pump
//! that drains a connection's outbox into it. The bytes are SSE or AG-UI
//! protobuf, whichever [`Encoder`] the request's `Accept` chose
//! ([`super::encode::negotiate`]); the pump itself knows no format.

use super::encode::Encoder;
use crate::thread::fanout::{OutboxReceiver, Outgoing};
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::BytesMut;

/// A byte stream fed by a task; ends when the task returns. Dropping the
/// stream (the client left) aborts the task, running its destructors.
pub fn async_stream<F, Fut>(
    task: F,
) -> impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Bytes>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let guard = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(task(tx)));
    futures::stream::unfold((rx, guard), |(mut rx, guard)| async move {
        let b = rx.recv().await?;
        Some((Ok(b), (rx, guard)))
    })
}

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

/// Streams a connection's outbox until `write` says [`Next::End`] or the
/// outbox closes: whatever is queued goes out as one chunk (one write, at
/// most about [`SSE_CHUNK`] bytes), and `enc`'s keepalive frame (if its
/// format has one) every `keepalive` while quiet. `write` appends an item's
/// frames to the chunk.
pub async fn pump(
    mut rx: OutboxReceiver,
    tx: tokio::sync::mpsc::Sender<Bytes>,
    enc: &'static dyn Encoder,
    keepalive: std::time::Duration,
    mut write: impl FnMut(Outgoing, &mut BytesMut) -> Next,
) {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + keepalive, keepalive);
    let idle_frame = enc.keepalive();
    // Set by [`Next::Linger`]: when the stream ends unless told otherwise.
    let mut lingering: Option<tokio::time::Instant> = None;
    loop {
        let first = tokio::select! {
            item = rx.recv() => item,
            _ = async { tokio::time::sleep_until(lingering.unwrap_or_else(tokio::time::Instant::now)).await }, if lingering.is_some() => return,
            _ = ticker.tick(), if idle_frame.is_some() => {
                if let Some(frame) = &idle_frame
                    && tx.send(frame.clone()).await.is_err()
                {
                    return;
                }
                continue;
            }
        };
        let Some(first) = first else { return };
        let mut chunk = BytesMut::new();
        let mut item = Some(first);
        let mut next = Next::More;
        while let Some(queued) = item.take() {
            next = match queued {
                Outgoing::Close(..) => Next::End,
                queued => write(queued, &mut chunk),
            };
            if next == Next::End {
                break;
            }
            if let Next::Linger(at_most) = next
                && lingering.is_none()
            {
                lingering = Some(tokio::time::Instant::now() + at_most);
            }
            if chunk.len() < SSE_CHUNK {
                item = rx.try_recv();
            }
        }
        if (!chunk.is_empty() && tx.send(chunk.freeze()).await.is_err()) || next == Next::End {
            return;
        }
    }
}
