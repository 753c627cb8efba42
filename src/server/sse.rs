//! Server-Sent Event responses: a task-fed byte stream and the headers every
//! SSE route sends (no caching, no proxy buffering).

use crate::protocol::sse::{KEEPALIVE, encode_data};
use crate::thread::fanout::{OutboxReceiver, Outgoing};
use crate::thread::{Entry, FrameSlot};
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

/// A `200 text/event-stream` response over `stream`.
pub fn sse_response(
    stream: impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static,
) -> Response {
    let mut resp = Response::new(Body::from_stream(stream));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// Most bytes of queued events coalesced into one SSE chunk (one write):
/// a busy stream is written in large chunks instead of one per event.
pub const SSE_CHUNK: usize = 64 * 1024;

/// A journal entry's SSE frame (`id: <seq>` + `data: <event>`), built once
/// per entry and shared by every SSE reader. An event the journal does not
/// hold (seq 0: the gateway's own `RUN_ERROR` when the journal failed)
/// has no `id`, so a reconnecting client never resumes from it.
pub fn entry_frame(entry: &Entry) -> Bytes {
    entry.frame(FrameSlot::SSE, |e| {
        let mut buf = BytesMut::with_capacity(e.event.json().len() + 32);
        encode_data(e.event.json(), Some(e.seq).filter(|s| *s > 0), &mut buf);
        buf.freeze()
    })
}

/// Whether an SSE stream goes on after an item ([`pump`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    More,
    End,
}

/// Streams a connection's outbox as SSE until `write` says [`Next::End`] or
/// the outbox closes: whatever is queued goes out as one chunk (one write,
/// at most about [`SSE_CHUNK`] bytes), keepalive comments while quiet.
/// `write` appends an item's frames to the chunk.
pub async fn pump(
    mut rx: OutboxReceiver,
    tx: tokio::sync::mpsc::Sender<Bytes>,
    keepalive: std::time::Duration,
    mut write: impl FnMut(Outgoing, &mut BytesMut) -> Next,
) {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + keepalive, keepalive);
    loop {
        let first = tokio::select! {
            item = rx.recv() => item,
            _ = ticker.tick() => {
                if tx.send(Bytes::from_static(KEEPALIVE)).await.is_err() { return; }
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
            if chunk.len() < SSE_CHUNK {
                item = rx.try_recv();
            }
        }
        if (!chunk.is_empty() && tx.send(chunk.freeze()).await.is_err()) || next == Next::End {
            return;
        }
    }
}
