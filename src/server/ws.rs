//! `GET /v1/ws`: shared sessions over WebSocket.
//!
//! Each connection has two halves. The reader (this task) authenticates,
//! parses commands and acts on threads. The writer drains the connection's
//! [`Outbox`](crate::thread::fanout::Outbox), which threads push to directly,
//! and sends pings; it is the only place that writes to the socket, so a slow
//! socket backs up one outbox and nothing else.

use super::access::{AccessError, thread_for, visibility_on};
use super::commands::{self, Requester, ResumeCommand, RunCommand, Viewer};
use super::error::{ApiError, ErrorCode};
use super::extract::bearer;
use super::fields::{opt_array, opt_str, req_str};
use super::state::AppState;
use crate::auth::{Permission, Principal};
use crate::config::Strategy;
use crate::protocol::hooks::{RunInput, ViewerVisibility};
use crate::protocol::input::{Message as AguiMessage, ResumeEntry};
use crate::store::ThreadKey;
use crate::thread::fanout::{Outbox, OutboxReceiver, Outgoing, outbox};
use crate::thread::{Entry, FrameSlot, Start, Thread};
use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The subprotocol the gateway speaks (and answers with).
pub const SUBPROTOCOL: &str = "agui-gateway.v1";
/// Close codes from the contract.
pub const CLOSE_UNAUTHENTICATED: u16 = 4001;
pub const CLOSE_PROTOCOL: u16 = 4009;
pub const CLOSE_TOO_LARGE: u16 = 1009;
pub const CLOSE_GOING_AWAY: u16 = 1001;
pub const CLOSE_POLICY: u16 = 1008;

/// The upgrade handler: origin check, token from header / subprotocol /
/// (opt-in) query, then the connection.
pub async fn upgrade(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
    ws: WebSocketUpgrade,
) -> Response {
    let cfg = &state.config.ws;
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok())
        && !cfg.allowed_origins.is_empty()
        && !cfg
            .allowed_origins
            .iter()
            .any(|p| crate::auth::access::glob_match(p, origin))
    {
        return ApiError::new(
            ErrorCode::Forbidden,
            format!("origin '{origin}' is not allowed"),
        )
        .into_response();
    }
    let offered = headers
        .get(header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let token = bearer(&headers)
        .map(str::to_owned)
        .or_else(|| {
            offered
                .split(',')
                .map(str::trim)
                .find_map(|p| p.strip_prefix("bearer."))
                .map(str::to_owned)
        })
        .or_else(|| {
            cfg.query_token
                .then(|| query.get("access_token").cloned())
                .flatten()
        });
    let principal = match token {
        Some(t) => match state.auth.verify(&t).await {
            Ok(p) => Some(p),
            Err(f) => return ApiError::from(f).into_response(),
        },
        None => None,
    };
    // Connection limits, checked before the upgrade when the caller is known.
    let slot = match &principal {
        Some(p) => match crate::policy::rate::connect(&state.policy().rates, p) {
            Ok(slot) => Some(slot),
            Err(l) => return ApiError::from(l).into_response(),
        },
        None => None,
    };
    let limit = cfg.max_frame_bytes;
    ws.protocols([SUBPROTOCOL])
        .max_message_size(limit)
        .max_frame_size(limit)
        // Small buffers: an idle socket should cost little (see docs/benchmarks.md).
        .read_buffer_size(1024)
        // Frames queued together go out in one write (see `write_loop`);
        // the buffer only grows for sockets that are sent bursts.
        .write_buffer_size(8 * 1024)
        .on_upgrade(move |socket| connection(state, socket, principal, slot))
}

/// A connection after authentication.
struct Conn {
    state: Arc<AppState>,
    principal: Principal,
    /// Where replies go; the threads it watches feed the same outbox.
    outbox: Arc<Outbox>,
    subs: Subscriptions,
}

/// The threads a connection watches, all feeding its one outbox.
struct Subscriptions {
    /// The connection's viewer id on every thread.
    id: u64,
    outbox: Arc<Outbox>,
    threads: HashMap<ThreadKey, Arc<Thread>>,
}

impl Subscriptions {
    /// Watches `thread` from `start` (again, if it already did).
    fn add(&mut self, thread: Arc<Thread>, start: Start, visibility: ViewerVisibility) {
        thread.subscribe(self.id, self.outbox.clone(), start, visibility);
        self.threads.insert(thread.key.clone(), thread);
    }

    /// Stops watching the thread `key`, if it did.
    fn leave(&mut self, key: &ThreadKey) {
        if let Some(thread) = self.threads.remove(key) {
            thread.unsubscribe(self.id);
            thread.viewer_left();
        }
    }

    fn leave_all(&mut self) {
        for (_, thread) in self.threads.drain() {
            thread.unsubscribe(self.id);
            thread.viewer_left();
        }
    }
}

impl Viewer for Subscriptions {
    fn watches(&self, thread: &Thread) -> bool {
        self.threads.contains_key(&thread.key)
    }

    fn watch(&mut self, thread: &Arc<Thread>, visibility: ViewerVisibility) {
        self.add(thread.clone(), Start::Live, visibility);
    }

    fn unwatch(&mut self, thread: &Thread) {
        self.threads.remove(&thread.key);
        thread.unsubscribe(self.id);
    }
}

async fn connection(
    state: Arc<AppState>,
    socket: WebSocket,
    principal: Option<Principal>,
    mut slot: Option<crate::policy::rate::ConnectionSlot>,
) {
    let (sink, mut stream) = socket.split();
    let (outbox, rx) = outbox(state.config.threads.viewer_queue_bytes);
    let writer = tokio::spawn(write_loop(sink, rx, state.config.ws.ping_interval));
    let cfg = state.config.ws.clone();

    let principal = match principal {
        Some(p) => p,
        None => match first_frame_auth(&state, &mut stream, cfg.auth_timeout).await {
            Ok(p) => match crate::policy::rate::connect(&state.policy().rates, &p.0) {
                Ok(s) => {
                    slot = Some(s);
                    outbox.push(reply(json!({"type": "ack", "id": p.1})));
                    p.0
                }
                Err(l) => {
                    let e = ApiError::from(l);
                    outbox.push(reply(json!({"type": "error", "code": e.code.as_str(), "message": e.message, "retryAfter": e.retry_after})));
                    outbox.close(CLOSE_POLICY, "connection limit reached");
                    drop(outbox);
                    let _ = writer.await;
                    return;
                }
            },
            Err(reason) => {
                outbox.close(CLOSE_UNAUTHENTICATED, &reason);
                drop(outbox);
                let _ = writer.await;
                return;
            }
        },
    };
    let subs = Subscriptions {
        id: state.next_connection_id(),
        outbox: outbox.clone(),
        threads: HashMap::new(),
    };
    let mut conn = Conn {
        state,
        principal,
        outbox: outbox.clone(),
        subs,
    };
    let expiry = tokio::time::sleep_until(deadline(conn.principal.expires_at));
    tokio::pin!(expiry);
    loop {
        let next = tokio::select! {
            _ = &mut expiry => {
                outbox.close(CLOSE_UNAUTHENTICATED, "token expired");
                break;
            }
            n = tokio::time::timeout(cfg.read_timeout, stream.next()) => n,
        };
        match next {
            Err(_) => {
                outbox.close(CLOSE_GOING_AWAY, "no traffic within read_timeout");
                break;
            }
            Ok(None) | Ok(Some(Ok(Message::Close(_)))) => break,
            Ok(Some(Err(e))) => {
                let text = e.to_string();
                if text.contains("Space limit exceeded")
                    || text.contains("too long")
                    || text.contains("Capacity")
                {
                    outbox.close(CLOSE_TOO_LARGE, "frame too large");
                }
                break;
            }
            Ok(Some(Ok(Message::Text(text)))) => {
                if let Some(new_exp) = conn.handle(&text).await {
                    expiry.as_mut().reset(deadline(new_exp));
                }
            }
            Ok(Some(Ok(Message::Binary(_)))) => {
                conn.error(
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
    conn.subs.leave_all();
    drop(conn);
    drop(slot);
    drop(outbox);
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
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
    stream: &mut futures::stream::SplitStream<WebSocket>,
    limit: Duration,
) -> Result<(Principal, Value), String> {
    let frame = match tokio::time::timeout(limit, stream.next()).await {
        Err(_) => return Err("no token within auth_timeout".into()),
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
    let p = state
        .auth
        .verify(token)
        .await
        .map_err(|f| format!("{} ({})", f, f.reason()))?;
    Ok((p, v.get("id").cloned().unwrap_or(Value::Null)))
}

async fn write_loop(
    mut sink: futures::stream::SplitSink<WebSocket, Message>,
    mut rx: OutboxReceiver,
    ping_every: Duration,
) {
    let mut ping = tokio::time::interval_at(Instant::now() + ping_every, ping_every);
    'connection: loop {
        let first = tokio::select! {
            item = rx.recv() => item,
            _ = ping.tick() => {
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
                Some(Outgoing::Event(e)) => Message::Text(event_frame(&e)),
                Some(Outgoing::Message(m)) => Message::Text(text(m)),
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
            if sink.feed(message).await.is_err() {
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

fn reply(v: Value) -> Outgoing {
    Outgoing::Message(Bytes::from(v.to_string()))
}

/// A journal entry's `event` message, built once per entry and shared by
/// every WebSocket viewer.
fn event_frame(entry: &Entry) -> Utf8Bytes {
    text(entry.frame(FrameSlot::WEBSOCKET, |e| {
        let json = std::str::from_utf8(e.event.json()).unwrap_or("{}");
        Bytes::from(format!(
            "{{\"type\":\"event\",\"threadId\":{},\"seq\":{},\"event\":{json}}}",
            Value::from(&*e.thread_id),
            e.seq
        ))
    }))
}

/// Contract messages are JSON text, so always UTF-8.
fn text(bytes: Bytes) -> Utf8Bytes {
    Utf8Bytes::try_from(bytes).unwrap_or_else(|_| Utf8Bytes::from_static("{}"))
}

/// A frame [`decode_command`] refused: the error to answer with, and the
/// frame's `id` (when the frame was an object that had one) for the answer
/// to echo, so the client can match it to its command.
#[derive(Debug)]
pub struct Refusal {
    /// The frame's `id`, echoed in the error answer.
    pub id: Option<Value>,
    /// Why the frame is not a command (always `invalid`).
    pub error: ApiError,
}

/// Decodes one client text frame into its command object and `type`.
///
/// This is the whole of a frame's decoding that needs no connection state,
/// kept pure and public so it can be fuzzed without a socket (`tests/fuzz`,
/// target `ws_command`). The refusal is boxed: it is the rare path, and large.
pub fn decode_command(text: &str) -> Result<(Value, String), Box<Refusal>> {
    let v: Value = match serde_json::from_str(text) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            let error = ApiError::new(ErrorCode::Invalid, "frame is not a JSON object");
            return Err(Box::new(Refusal { id: None, error }));
        }
    };
    match req_str(&v, "type") {
        Ok(kind) => {
            let kind = kind.to_owned();
            Ok((v, kind))
        }
        Err(error) => Err(Box::new(Refusal {
            id: v.get("id").cloned(),
            error,
        })),
    }
}

impl Conn {
    fn error(&self, id: Option<&Value>, e: ApiError) {
        let mut v = json!({"type": "error", "code": e.code.as_str(), "message": e.message});
        if let Some(s) = e.retry_after {
            v["retryAfter"] = s.into();
        }
        if let Some(id) = id.filter(|i| !i.is_null()) {
            v["id"] = id.clone();
        }
        self.outbox.push(reply(v));
    }

    fn ack(&self, id: Option<&Value>, extra: Map<String, Value>) {
        let mut v = Map::new();
        v.insert("type".into(), "ack".into());
        v.insert("id".into(), id.cloned().unwrap_or(Value::Null));
        v.extend(extra);
        self.outbox.push(reply(Value::Object(v)));
    }

    /// Handles one command; returns a new token expiry after a refresh.
    async fn handle(&mut self, text: &str) -> Option<u64> {
        let (v, kind) = match decode_command(text) {
            Ok(command) => command,
            Err(refusal) => {
                let Refusal { id, error } = *refusal;
                self.error(id.as_ref(), error);
                return None;
            }
        };
        let id = v.get("id");
        let result = match kind.as_str() {
            "ping" => {
                let mut pong = json!({"type": "pong"});
                if let Some(id) = id {
                    pong["id"] = id.clone();
                }
                self.outbox.push(reply(pong));
                Ok(None)
            }
            "auth" => self.refresh(&v).await.map(Some),
            "subscribe" => self.subscribe(&v).await.map(|_| None),
            "unsubscribe" => self.unsubscribe(&v).map(|_| None),
            "run" => self.run(&v).await.map(|_| None),
            "cancel" => self.cancel(&v).await.map(|_| None),
            "resume" => self.resume(&v).await.map(|_| None),
            "meta" => self.meta(&v).await.map(|_| None),
            other => Err(ApiError::new(
                ErrorCode::Invalid,
                format!("unknown command type '{other}'"),
            )),
        };
        match result {
            Ok(exp) => exp,
            Err(e) => {
                self.error(id, e);
                None
            }
        }
    }

    async fn refresh(&mut self, v: &Value) -> Result<u64, ApiError> {
        let token = req_str(v, "token")?;
        let p = self
            .state
            .auth
            .verify(token)
            .await
            .map_err(ApiError::from)?;
        if p.subject != self.principal.subject || p.tenant != self.principal.tenant {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                "a refreshed token must name the same user and tenant",
            ));
        }
        let exp = p.expires_at;
        self.principal = p;
        self.ack(v.get("id"), Map::new());
        Ok(exp)
    }

    async fn subscribe(&mut self, v: &Value) -> Result<(), ApiError> {
        let thread_id = req_str(v, "threadId")?;
        let start = match v.get("after") {
            None | Some(Value::Null) => Start::Snapshot,
            Some(a) => Start::After(a.as_u64().ok_or_else(|| {
                ApiError::new(ErrorCode::Invalid, "'after' must be a non-negative integer")
            })?),
        };
        let thread = thread_for(
            &self.state,
            &self.principal,
            thread_id,
            Permission::View,
            false,
        )
        .await
        .map_err(AccessError::into_api)?;
        if v.get("id").is_some() {
            let mut extra = Map::new();
            extra.insert("threadId".into(), thread_id.into());
            self.ack(v.get("id"), extra);
        }
        let visibility = visibility_on(&self.state, &self.principal, &thread);
        self.subs.add(thread, start, visibility);
        Ok(())
    }

    fn unsubscribe(&mut self, v: &Value) -> Result<(), ApiError> {
        let thread_id = req_str(v, "threadId")?;
        self.subs
            .leave(&ThreadKey::new(self.principal.tenant.clone(), thread_id));
        let mut extra = Map::new();
        extra.insert("threadId".into(), thread_id.into());
        self.ack(v.get("id"), extra);
        Ok(())
    }

    /// `run`: new messages for the thread; the connection watches it (live)
    /// from before the run starts.
    async fn run(&mut self, v: &Value) -> Result<(), ApiError> {
        let agent_id = req_str(v, "agent")?;
        let thread_id = req_str(v, "threadId")?;
        let run_id = run_id(v)?;
        let agent = commands::runnable_agent(&self.state, &self.principal, agent_id)?;
        let strategy = opt_str(v, "strategy")?.map(strategy).transpose()?;
        let messages = opt_array(v, "messages")?;
        for (i, m) in messages.iter().enumerate() {
            serde_json::from_value::<AguiMessage>(m.clone())
                .map_err(|e| ApiError::new(ErrorCode::Invalid, format!("messages[{i}]: {e}")))?;
        }
        let input = RunInput::Incremental {
            messages,
            tools: opt_array(v, "tools")?,
            context: opt_array(v, "context")?,
            state: v.get("state").cloned().filter(|s| !s.is_null()),
            forwarded_props: v.get("forwardedProps").cloned().filter(|s| !s.is_null()),
            resume: None,
        };
        let cmd = RunCommand {
            agent,
            thread_id: thread_id.to_owned(),
            run_id,
            input,
            strategy,
        };
        let requester = Requester::Viewer(&mut self.subs);
        let ack = commands::run(&self.state, &self.principal, cmd, requester).await?;
        self.ack(v.get("id"), ack);
        Ok(())
    }

    /// `resume`: answers to the thread's pending interrupts, as a run.
    async fn resume(&mut self, v: &Value) -> Result<(), ApiError> {
        let thread_id = req_str(v, "threadId")?;
        let entries = match v.get("resume") {
            Some(Value::Array(a)) if !a.is_empty() => a.clone(),
            _ => {
                return Err(ApiError::new(
                    ErrorCode::Invalid,
                    "'resume' must be a non-empty array",
                ));
            }
        };
        for (i, e) in entries.iter().enumerate() {
            serde_json::from_value::<ResumeEntry>(e.clone())
                .map_err(|err| ApiError::new(ErrorCode::Invalid, format!("resume[{i}]: {err}")))?;
        }
        let cmd = ResumeCommand {
            thread_id: thread_id.to_owned(),
            agent_id: opt_str(v, "agent")?.map(str::to_owned),
            run_id: run_id(v)?,
            input: RunInput::Incremental {
                messages: opt_array(v, "messages")?,
                tools: opt_array(v, "tools")?,
                context: opt_array(v, "context")?,
                state: None,
                forwarded_props: v.get("forwardedProps").cloned().filter(|s| !s.is_null()),
                resume: Some(Value::Array(entries)),
            },
        };
        let requester = Requester::Viewer(&mut self.subs);
        let ack = commands::resume(&self.state, &self.principal, cmd, requester).await?;
        self.ack(v.get("id"), ack);
        Ok(())
    }

    async fn cancel(&mut self, v: &Value) -> Result<(), ApiError> {
        let thread_id = req_str(v, "threadId")?;
        let run_id = opt_str(v, "runId")?;
        let ack = commands::cancel(&self.state, &self.principal, thread_id, run_id).await?;
        self.ack(v.get("id"), ack);
        Ok(())
    }

    async fn meta(&mut self, v: &Value) -> Result<(), ApiError> {
        let thread_id = req_str(v, "threadId")?;
        let ack = commands::meta(&self.state, &self.principal, thread_id, v).await?;
        self.ack(v.get("id"), ack);
        Ok(())
    }
}

/// A frame's `runId`, or a fresh one.
fn run_id(v: &Value) -> Result<String, ApiError> {
    Ok(opt_str(v, "runId")?
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()))
}

/// A frame's `strategy`, by its wire name.
fn strategy(name: &str) -> Result<Strategy, ApiError> {
    serde_json::from_value(Value::from(name)).map_err(|_| {
        ApiError::new(
            ErrorCode::Invalid,
            "'strategy' must be reject, enqueue or interrupt",
        )
    })
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
