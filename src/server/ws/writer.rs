//! One WebSocket connection's writer: the only code that writes to the
//! socket, draining the connection's outbox (polled by the connection's
//! task beside its reader, see [`super::connection::serve`]).

use crate::server::encode::{Encoder, ws::WS};
use crate::thread::Entry;
use crate::thread::fanout::{OutboxReceiver, Outgoing};
use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use futures::SinkExt;
use serde_json::Value;
use std::time::Duration;
use tokio::time::Instant;

/// Writes what the outbox holds (batched, one flush per batch) and pings
/// while idle; ends at a close or when the socket fails.
pub(super) async fn write_loop(
    mut sink: futures::stream::SplitSink<WebSocket, Message>,
    mut rx: OutboxReceiver,
    ping_every: Duration,
) {
    // A timer kept in this future, reset after each ping (an `Interval`
    // would box its own: one more allocation per connection).
    let ping = tokio::time::sleep(ping_every);
    tokio::pin!(ping);
    let events_out = crate::metrics::metrics().events_out_counter("ws");
    'connection: loop {
        let first = tokio::select! {
            item = rx.recv() => item,
            () = &mut ping => {
                ping.as_mut().reset(Instant::now() + ping_every);
                if sink.send(Message::Ping(Default::default())).await.is_err() { break; }
                continue;
            }
        };
        // Everything queued goes out in one flush: per-frame flushes cost a
        // syscall each and dominate a busy thread's fan-out.
        let mut item = first;
        let mut batched = 0;
        loop {
            let message = match item {
                None => break 'connection,
                Some(Outgoing::Event(e)) => {
                    events_out.inc();
                    Some(Message::Text(event_frame(&e)))
                }
                Some(Outgoing::Message(m)) => Some(Message::Text(text(m))),
                // Only an HTTP run response is told of a handoff.
                Some(Outgoing::Continues) => None,
                Some(Outgoing::Close(code, reason)) => {
                    let _ = sink
                        .send(Message::Close(Some(CloseFrame {
                            code,
                            reason: reason.into(),
                        })))
                        .await;
                    break 'connection;
                }
            };
            if let Some(message) = message
                && sink.feed(message).await.is_err()
            {
                break 'connection;
            }
            batched += 1;
            item = match rx.try_recv() {
                Some(next) if batched < WRITE_BATCH => Some(next),
                Some(next) => {
                    // A long backlog still flushes now and then.
                    if sink.flush().await.is_err() {
                        break 'connection;
                    }
                    batched = 0;
                    Some(next)
                }
                None => break,
            };
        }
        if sink.flush().await.is_err() {
            break;
        }
    }
    let _ = sink.close().await;
}

/// Most frames written between two flushes.
const WRITE_BATCH: usize = 64;

/// A contract message (ack, error, pong) as an outbox item.
pub(super) fn reply(v: Value) -> Outgoing {
    Outgoing::Message(Bytes::from(v.to_string()))
}

/// A journal entry's `event` message ([`WS`]), built once per entry and
/// shared by every WebSocket viewer.
fn event_frame(entry: &Entry) -> Utf8Bytes {
    text(WS.entry(entry))
}

/// Contract messages are JSON text, so always UTF-8.
fn text(bytes: Bytes) -> Utf8Bytes {
    Utf8Bytes::try_from(bytes).unwrap_or_else(|_| Utf8Bytes::from_static("{}"))
}
