//! One WebSocket connection's reader: authenticates (before the upgrade or
//! with a first `auth` frame), enforces the connection limits, the token's
//! expiry and the read timeout, and hands each text frame to its client.

use super::client::Client;
use super::writer::{reply, write_loop};
use crate::auth::Principal;
use crate::server::error::{ApiError, ErrorCode};
use crate::server::state::AppState;
use crate::thread::fanout::{Outbox, outbox};
use axum::extract::ws::{Message, WebSocket};
use futures::StreamExt;
use futures::future::{self, Either};
use futures::stream::SplitStream;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

// Close codes from the contract (docs/protocol.md).
/// No valid token in time, or the token expired.
pub const CLOSE_UNAUTHENTICATED: u16 = 4001;
/// The client broke the protocol.
pub const CLOSE_PROTOCOL: u16 = 4009;
/// A frame over `ws.max_frame_bytes`.
pub const CLOSE_TOO_LARGE: u16 = 1009;
/// Going away: nothing read within `ws.read_timeout`.
pub const CLOSE_GOING_AWAY: u16 = 1001;
/// A connection limit refused the caller.
pub const CLOSE_POLICY: u16 = 1008;
/// RFC 6455: the peer broke the WebSocket framing (reserved bits, an
/// unmasked client frame, an unknown opcode, a bad fragment sequence).
pub const CLOSE_WS_PROTOCOL: u16 = 1002;
/// RFC 6455: a text frame that is not UTF-8.
pub const CLOSE_INVALID_PAYLOAD: u16 = 1007;

/// Who the upgrade request authenticated (`None`: the first frame must),
/// and the connection-limit slot it took.
///
/// Boxed on its way in: it waits in the upgrade task while the handshake
/// completes, and what a future captures keeps its room for the future's
/// whole life — a `Principal` by value would weigh on every idle socket.
pub(super) struct Caller {
    pub(super) principal: Option<Principal>,
    pub(super) slot: Option<crate::policy::rate::ConnectionSlot>,
}

/// Serves one upgraded socket until either side ends it.
///
/// One task per connection: the reader and the writer are two futures this
/// task polls together, not two tasks. Both wait on their own (the reader
/// on a frame or a command in progress, the writer on the outbox or a slow
/// socket), so neither holds the other up, and an idle connection pays for
/// one task instead of two (docs/benchmarks.md, "Idle connections"). Each
/// half is boxed once, at its own size: an `async fn` taking them by value
/// would keep room for both twice (its arguments and its locals).
pub(super) fn serve(
    state: Arc<AppState>,
    socket: WebSocket,
    caller: Box<Caller>,
) -> impl Future<Output = ()> + Send + 'static {
    let counted = crate::metrics::metrics().connection("ws");
    let (sink, stream) = socket.split();
    let (outbox, rx) = outbox(state.config.threads.viewer_queue_bytes);
    let writer = Box::pin(write_loop(sink, rx, state.config.ws.ping_interval));
    let reader = Box::pin(read_loop(state, stream, caller, outbox));
    async move {
        let _counted = counted;
        match future::select(reader, writer).await {
            // The reader dropped its outbox: the writer sends what is left
            // (a close last), within a bound.
            Either::Left(((), writer)) => {
                let _ = tokio::time::timeout(WRITER_GRACE, writer).await;
            }
            // The socket failed or a close went out: the reader sees the
            // stream end (or the outbox closed) and leaves its threads.
            Either::Right(((), reader)) => reader.await,
        }
    }
}

/// How long the writer may still take, once the reader is done, to send what
/// is queued (the close frame last).
const WRITER_GRACE: Duration = Duration::from_secs(5);

/// The reading half: authenticates when the upgrade carried no token, then
/// hands each text frame to the connection's [`Client`] until the socket,
/// the token or the gateway ends it. Every reply goes through `outbox`.
///
/// What runs only now and then (the first-frame authentication, a command)
/// runs boxed: its future lives on the heap while it runs, instead of
/// sizing this future — kept for the connection's whole life — by the
/// largest command (a `run` is several KiB of state).
async fn read_loop(
    state: Arc<AppState>,
    mut stream: SplitStream<WebSocket>,
    caller: Box<Caller>,
    outbox: Arc<Outbox>,
) {
    let (auth_timeout, read_timeout) = (state.config.ws.auth_timeout, state.config.ws.read_timeout);
    let Caller {
        principal,
        mut slot,
    } = *caller;
    let principal = match principal {
        Some(p) => p,
        None => match Box::pin(first_frame_auth(&state, &mut stream, auth_timeout)).await {
            Ok(p) => match Box::pin(crate::policy::rate::connect_shared(
                state.policy().rules(),
                &p.0,
                state.counters.as_ref(),
            ))
            .await
            {
                Ok(s) => {
                    slot = Some(s);
                    outbox.push(reply(json!({"type": "ack", "id": p.1})));
                    p.0
                }
                Err(l) => {
                    let e = ApiError::from(l);
                    outbox.push(reply(json!({"type": "error", "code": e.code.as_str(), "message": e.message, "retryAfter": e.retry_after})));
                    outbox.close(CLOSE_POLICY, "connection limit reached");
                    return;
                }
            },
            Err(reason) => {
                outbox.close(CLOSE_UNAUTHENTICATED, &reason);
                return;
            }
        },
    };
    let _session = crate::metrics::metrics().session();
    let shutdown = state.shutdown.clone();
    let mut client = Client::new(state, principal, outbox.clone());
    let expiry = tokio::time::sleep_until(deadline(client.expires_at()));
    tokio::pin!(expiry);
    loop {
        let next = tokio::select! {
            _ = &mut expiry => {
                outbox.close(CLOSE_UNAUTHENTICATED, "token expired");
                break;
            }
            // After everything queued for it: the close goes out last.
            _ = shutdown.cancelled() => {
                outbox.close(CLOSE_GOING_AWAY, "gateway shutting down");
                break;
            }
            n = tokio::time::timeout(read_timeout, stream.next()) => n,
        };
        match next {
            Err(_) => {
                outbox.close(CLOSE_GOING_AWAY, "no traffic within read_timeout");
                break;
            }
            Ok(None) | Ok(Some(Ok(Message::Close(_)))) => break,
            Ok(Some(Err(e))) => {
                if let Some((code, reason)) = close_for(&e.to_string()) {
                    outbox.close(code, reason);
                }
                break;
            }
            Ok(Some(Ok(Message::Text(text)))) => {
                if let Some(new_exp) = Box::pin(client.handle(&text)).await {
                    expiry.as_mut().reset(deadline(new_exp));
                }
            }
            Ok(Some(Ok(Message::Binary(_)))) => {
                client.error(
                    None,
                    ApiError::new(
                        ErrorCode::Invalid,
                        "binary frames are not supported; send JSON text",
                    ),
                );
            }
            Ok(Some(Ok(_))) => {} // ping/pong
        }
        if outbox.is_closed() {
            break;
        }
    }
    client.leave_all();
    drop(client);
    drop(slot);
}

/// The close code for a read error, from the WebSocket library's message
/// (axum wraps its error type in a box of its own; the `Display` prefixes are
/// the library's stable error kinds). `None` for errors after which nothing
/// can be sent (I/O, a reset connection). A client that breaks the framing
/// learns why from the code instead of seeing the socket simply go away.
fn close_for(error: &str) -> Option<(u16, &'static str)> {
    if error.starts_with("Space limit exceeded") || error.contains("Message too long") {
        Some((CLOSE_TOO_LARGE, "frame too large"))
    } else if error.starts_with("UTF-8 encoding error") {
        Some((CLOSE_INVALID_PAYLOAD, "text frame is not valid UTF-8"))
    } else if error.starts_with("WebSocket protocol error")
        && !error.contains("without closing handshake")
    {
        Some((CLOSE_WS_PROTOCOL, "websocket protocol error"))
    } else {
        None
    }
}

/// When a token expiring at `exp_secs` (Unix seconds) must close the socket.
/// A token's `exp` is client data: a far-future one is capped (ten years)
/// instead of overflowing `Instant`.
fn deadline(exp_secs: u64) -> Instant {
    const FAR: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let left = Duration::from_secs(exp_secs.saturating_sub(now)).min(FAR);
    Instant::now() + left
}

/// Waits for `{"type":"auth","token":…}` as the first frame.
async fn first_frame_auth(
    state: &AppState,
    stream: &mut SplitStream<WebSocket>,
    limit: Duration,
) -> Result<(Principal, Value), String> {
    let frame = match tokio::time::timeout(limit, stream.next()).await {
        Err(_) => {
            crate::metrics::metrics().auth_failed("missing_token", "ws");
            return Err("no token within auth_timeout".into());
        }
        Ok(Some(Ok(Message::Text(t)))) => t,
        Ok(_) => return Err("authenticate first: send {\"type\":\"auth\",\"token\":…}".into()),
    };
    let v: Value =
        serde_json::from_str(&frame).map_err(|_| "first frame is not JSON".to_owned())?;
    if v.get("type").and_then(Value::as_str) != Some("auth") {
        return Err("authenticate first: send {\"type\":\"auth\",\"token\":…}".into());
    }
    let token = v
        .get("token")
        .and_then(Value::as_str)
        .ok_or("auth frame has no token")?;
    let p = state.auth.verify(token).await.map_err(|f| {
        crate::metrics::metrics().auth_failed(f.reason(), "ws");
        format!("{} ({})", f, f.reason())
    })?;
    Ok((p, v.get("id").cloned().unwrap_or(Value::Null)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn far_future_token_expiry_does_not_overflow() {
        // Before: `Instant + Duration::from_secs(u64::MAX - now)` panicked.
        let d = deadline(u64::MAX);
        assert!(d > Instant::now() + Duration::from_secs(365 * 24 * 3600));
        assert!(deadline(0) <= Instant::now());
    }
}

#[cfg(test)]
mod sizes {
    use super::*;

    fn returned3<A, B, C, F>(_: fn(A, B, C) -> F) -> usize {
        std::mem::size_of::<F>()
    }
    fn returned4<A, B, C, D, F>(_: fn(A, B, C, D) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every idle socket keeps these futures for its whole life (issue 22
    /// item 6: ≤ 8 KiB per idle socket). A command or a first-frame
    /// authentication awaited inline instead of boxed makes the reader
    /// several KiB (the connection task was ~10 KB that way); deterministic,
    /// unlike an RSS figure. Sizes of this (debug) build, with headroom.
    #[test]
    fn an_idle_connection_keeps_small_futures() {
        let reader = returned4(read_loop);
        let writer = returned3(super::super::writer::write_loop);
        let task = returned3(serve);
        assert!(reader <= 2048, "read_loop's future is {reader} bytes");
        assert!(writer <= 1024, "write_loop's future is {writer} bytes");
        assert!(task <= 512, "serve's future is {task} bytes");
    }
}
