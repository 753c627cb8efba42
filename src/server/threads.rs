//! HTTP viewer routes: list threads, read a snapshot, join the event stream.

use super::access::{AccessError, thread_for, thread_to_watch, visibility_on, visitor};
use super::encode::{self, Encoder};
use super::error::{ApiError, ErrorCode};
use super::extract::{Authenticated, authenticate};
use super::sse::{Next, pump, stream_response};
use super::state::AppState;
use crate::auth::Permission;
use crate::auth::access::permissions;
use crate::auth::ticket::StreamClaim;
use crate::protocol::join::{Cursor, Framed, JoinFramer};
use crate::thread::Start;
use crate::thread::fanout::{Outgoing, outbox};
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// Query of `GET /v1/threads`.
#[derive(Debug, Deserialize)]
pub struct ListQuery {
    agent: Option<String>,
    status: Option<String>,
    limit: Option<usize>,
    cursor: Option<usize>,
}

/// The statuses `GET /v1/threads?status=` may name (docs/openapi.json,
/// `RunStatus`). Another word is a typo: answered `invalid`, never an empty
/// page that reads like "no such threads".
const STATUSES: [&str; 6] = [
    "idle",
    "running",
    "interrupted",
    "finished",
    "cancelled",
    "error",
];

/// `limit` when given, checked against the range the description
/// publishes: out of range is `invalid`, not silently clamped (a client
/// asking for 5000 would otherwise believe it had everything).
fn page_limit(limit: Option<usize>, default: usize, max: usize) -> Result<usize, ApiError> {
    match limit {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::new(
            ErrorCode::Invalid,
            format!("limit: {n} is outside 1..={max}"),
        )),
    }
}

/// `GET /v1/threads`: threads the caller may view, newest first, paginated
/// (`limit`, default 50, at most 500; `cursor` from the previous page).
pub async fn list(
    State(state): State<Arc<AppState>>,
    Query(q): Query<ListQuery>,
    Authenticated(who): Authenticated,
) -> Response {
    let limit = match page_limit(q.limit, 50, 500) {
        Ok(n) => n,
        Err(e) => return e.into_response(),
    };
    if let Some(s) = q.status.as_deref().filter(|s| !STATUSES.contains(s)) {
        let message = format!("status: '{s}' is not one of {}", STATUSES.join(", "));
        return ApiError::new(ErrorCode::Invalid, message).into_response();
    }
    let store = state.threads.store().clone();
    let tenant = who.tenant.clone();
    let all = match tokio::task::spawn_blocking(move || store.list(&tenant)).await {
        Ok(Ok(all)) => all,
        _ => return ApiError::new(ErrorCode::Unavailable, "journal unavailable").into_response(),
    };
    let start = q.cursor.unwrap_or(0);
    let visible: Vec<_> = all
        .into_iter()
        .filter(|(k, m)| {
            permissions(&who, &k.thread_id, Some(&m.creator), &state.config.grants)
                .has(Permission::View)
        })
        .filter(|(_, m)| q.agent.as_ref().is_none_or(|a| m.agent.as_ref() == Some(a)))
        .filter(|(_, m)| q.status.as_ref().is_none_or(|s| m.status == *s))
        .collect();
    let page: Vec<Value> = visible
        .iter()
        .skip(start)
        .take(limit)
        .map(|(k, m)| {
            let mut t = json!({"threadId": k.thread_id, "agent": m.agent, "status": m.status,
                   "createdMs": m.created_ms, "updatedMs": m.updated_ms, "lastSeq": m.last_seq});
            // Viewers connected to this node, where the thread is in memory.
            if let Some(n) = state.threads.viewers_here(k) {
                t["viewers"] = n.into();
            }
            t
        })
        .collect();
    // Saturating: any cursor the description allows (no maximum) is a
    // page, the last one past the end; `cursor + limit` must not overflow.
    let end = start.saturating_add(limit);
    let next = (end < visible.len()).then_some(end);
    Json(json!({"threads": page, "nextCursor": next})).into_response()
}

/// Which run's end a view shows (`?runId=`; default: the head).
#[derive(Debug, Deserialize)]
pub struct AtRun {
    #[serde(rename = "runId")]
    pub run_id: Option<String>,
}

/// `GET /v1/threads/{threadId}`: the snapshot object; `?runId=R`: as it was
/// at the end of run R.
pub async fn snapshot(
    State(state): State<Arc<AppState>>,
    Path(thread_id): Path<String>,
    Query(at): Query<AtRun>,
    Authenticated(who): Authenticated,
) -> Response {
    let t = match thread_for(&state, &who, &thread_id, Permission::View, false).await {
        Ok(t) => t,
        Err(e) => return e.into_api().into_response(),
    };
    match t.snapshot_at(at.run_id.as_deref(), &visibility_on(&state, &who, &t)) {
        Ok(snap) => Json(Value::Object(snap)).into_response(),
        Err(refused) => ApiError::from(refused).into_response(),
    }
}

/// `GET /v1/threads/{threadId}/presence`: who is watching the thread now,
/// on every node (`viewers`: one entry per person, as the `presence`
/// frames list them). Needs `view`, also before the thread's first run
/// (see [`thread_to_watch`]).
pub async fn presence(
    State(state): State<Arc<AppState>>,
    Path(thread_id): Path<String>,
    Authenticated(who): Authenticated,
) -> Response {
    let key = match thread_to_watch(&state, &who, &thread_id).await {
        Ok(t) => t.key.clone(),
        Err(e) => return e.into_api().into_response(),
    };
    let viewers = state.presence.list(&key).await;
    state.threads.forget_if_unused(&key);
    Json(json!({"threadId": thread_id, "viewers": viewers})).into_response()
}

/// Query of the runs route.
#[derive(Debug, Deserialize)]
pub struct RunsQuery {
    cursor: Option<usize>,
    limit: Option<usize>,
}

/// `GET /v1/threads/{threadId}/runs`: the run tree in one call
/// (`headRunId`, runs oldest first with their base, kind, agent, status,
/// outcome, seqs and message ids), paginated by `cursor`.
pub async fn runs(
    State(state): State<Arc<AppState>>,
    Path(thread_id): Path<String>,
    Query(q): Query<RunsQuery>,
    Authenticated(who): Authenticated,
) -> Response {
    let limit = match page_limit(q.limit, 100, 1000) {
        Ok(n) => n,
        Err(e) => return e.into_response(),
    };
    let t = match thread_for(&state, &who, &thread_id, Permission::View, false).await {
        Ok(t) => t,
        Err(e) => return e.into_api().into_response(),
    };
    t.refresh().await;
    let mut page = t.runs_page(q.cursor.unwrap_or(0), limit);
    answered_by(&mut page);
    Json(page).into_response()
}

/// Marks each run of a page whose interrupts were answered with who
/// answered them: `answeredBy`, one `{runId, by}` per resume run from it
/// (several after a regenerate of the answer), in the page's order.
fn answered_by(page: &mut Value) {
    let Some(runs) = page.get_mut("runs").and_then(Value::as_array_mut) else {
        return;
    };
    let answers: Vec<(Value, Value)> = runs
        .iter()
        .filter(|r| r["kind"] == "resume" || r["kind"] == "regenerate")
        .map(|r| {
            (
                r["parentRunId"].clone(),
                json!({"runId": r["runId"], "by": r["startedBy"]}),
            )
        })
        .collect();
    for run in runs.iter_mut().filter(|r| r["status"] == "interrupted") {
        let by: Vec<Value> = answers
            .iter()
            .filter(|(parent, _)| *parent == run["runId"])
            .map(|(_, a)| a.clone())
            .collect();
        if !by.is_empty() {
            run["answeredBy"] = Value::Array(by);
        }
    }
}

/// Query of the join stream.
#[derive(Debug, Deserialize)]
pub struct JoinQuery {
    /// A cursor: `<seq>` or `<seq>.<epoch>` (see [`Cursor`]).
    after: Option<String>,
    /// A one-use ticket from `POST /v1/threads/{id}/ticket`, for clients
    /// that cannot send headers (`EventSource`).
    ticket: Option<String>,
    /// `Last-Event-ID` for clients that cannot send the header: a reopened
    /// `EventSource` (a new one, after the old one gave up — its ticket
    /// died with a restarted gateway) goes on exactly like a reconnect. The
    /// name the common `EventSource` polyfills use. The header wins.
    #[serde(rename = "lastEventId")]
    last_event_id: Option<String>,
}

/// `POST /v1/threads/{threadId}/ticket`: a one-use, short-lived ticket that
/// lets the caller join this thread's SSE stream as `?ticket=` (see
/// [`crate::auth::ticket`]).
pub async fn issue_ticket(
    State(state): State<Arc<AppState>>,
    Path(thread_id): Path<String>,
    Authenticated(who): Authenticated,
) -> Response {
    if let Err(e) = thread_to_watch(&state, &who, &thread_id).await {
        return e.into_api().into_response();
    }
    match state.tickets.issue(&who, &thread_id) {
        Some((ticket, ttl)) => {
            Json(json!({"ticket": ticket, "expiresIn": ttl.as_secs()})).into_response()
        }
        None => ApiError {
            retry_after: Some(1),
            ..ApiError::new(
                ErrorCode::RateLimited,
                "too many outstanding stream tickets",
            )
        }
        .into_response(),
    }
}

/// `GET /v1/threads/{threadId}/events`: SSE join stream with `id: <seq>`
/// lines (or AG-UI protobuf, by `Accept`: [`encode::negotiate`]), authenticated by a bearer token or a one-use `?ticket=`. Starts
/// after `after` (or `Last-Event-ID`), else from the oldest event held (a
/// snapshot when that is compacted), and is always a valid AG-UI stream for
/// a stock client, whatever the thread holds (see [`JoinFramer`]).
pub async fn join(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(thread_id): Path<String>,
    Query(q): Query<JoinQuery>,
) -> Response {
    let enc = match encode::negotiate(&headers) {
        Ok(enc) => enc,
        Err(e) => return e.into_response(),
    };
    let resumed = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .or(q.last_event_id.as_deref())
        .and_then(Cursor::parse);
    let last_event_id = resumed.as_ref().map(|c| c.seq);
    let asked = match q.after.as_deref().map(|a| (a, Cursor::parse(a))) {
        Some((_, Some(c))) => Some(c),
        Some((a, None)) => {
            return ApiError::new(
                ErrorCode::Invalid,
                format!("'after' must be a cursor (<seq> or <seq>.<epoch>), not '{a}'"),
            )
            .into_response();
        }
        None => None,
    };
    // An `EventSource` reconnects to the URL it was opened with: its
    // `Last-Event-ID` is where it stands, whatever `after` the URL says.
    let cursor = resumed.clone().or(asked).unwrap_or(Cursor {
        seq: 0,
        epoch: None,
    });
    let mut after = cursor.seq;
    // With a ticket, the stream's claim on it: what it sent bounds where a
    // reconnect may resume, and a reconnect ends it (`auth::ticket`).
    let (who, claim) = match &q.ticket {
        Some(ticket) => match state
            .tickets
            .redeem(ticket, &thread_id, after, last_event_id)
        {
            Some((p, claim)) => (p, Some(claim)),
            None => {
                return ApiError {
                    reason: Some("bad_ticket"),
                    ..ApiError::new(
                        ErrorCode::Unauthenticated,
                        "stream ticket is unknown, expired, for another thread, or used \
                         (a used ticket only resumes its own stream, with Last-Event-ID)",
                    )
                }
                .into_response();
            }
        },
        None => match authenticate(&state, &headers).await {
            Ok(p) => (p, None),
            Err(e) => return e.into_response(),
        },
    };
    let thread = match thread_to_watch(&state, &who, &thread_id).await {
        Ok(t) => t,
        Err(e) => return AccessError::into_api(e).into_response(),
    };
    let (ob, rx) = outbox(state.config.threads.viewer_queue_bytes);
    let viewer = state.next_connection_id();
    let visibility = visibility_on(&state, &who, &thread);
    let mut epoch = thread.epoch();
    // A cursor into a history the store lost: its seqs name other events
    // now. A reset snapshot instead; a reconnect's open run ends first.
    let lost = cursor.from_other_history(epoch.as_deref());
    if lost {
        after = u64::MAX;
    }
    let mut framer = JoinFramer::new(&thread_id, &thread.snapshot(&visibility));
    let prelude = match (lost, resumed.is_some()) {
        (true, true) => vec![history_lost()],
        (true, false) => Vec::new(),
        _ => join_prelude(&thread, &mut framer, after, resumed.is_some(), &visibility),
    };
    // Wakes the stream so the prelude goes out before any event comes.
    ob.push(Outgoing::Continues);
    let seen_as = visibility.clone();
    thread.subscribe(viewer, ob.clone(), Start::After(after), visibility);
    tracing::debug!(thread = %thread_id, viewer, after, "viewer joined the SSE stream");
    let keepalive = state.config.server.keepalive;
    // Listed as watching (told nothing: the stream carries AG-UI events only).
    state
        .presence
        .join(&thread.key, viewer, visitor(&who), None);
    let guard = ViewerGuard {
        thread,
        viewer,
        threads: Some(state.threads.clone()),
        presence: Some(state.presence.clone()),
    };
    // The node stopped: the stream ends after what it was sent.
    let shutdown = state.shutdown.clone();
    let closing = ob.clone();
    let replaced = claim
        .as_ref()
        .map(StreamClaim::replaced)
        .unwrap_or_default();
    tokio::spawn(async move {
        tokio::select! {
            _ = shutdown.cancelled() => closing.close(1001, "gateway shutting down"),
            // The browser reconnected with this stream's ticket.
            _ = replaced.cancelled() => closing.close(1000, "resumed by a reconnect"),
            _ = closing.closed() => {}
        }
    });
    let metrics = crate::metrics::metrics();
    let counted = metrics.connection("sse");
    let events_out = metrics.events_out_counter("sse");
    let sent = move |seq: u64| {
        if let Some(claim) = &claim {
            claim.sent(seq);
        }
    };
    let mut prelude = Some(prelude);
    let stream = pump(rx, enc, keepalive, move |item, chunk| {
        // Dropped with the stream, however it ends: the guard unsubscribes.
        let (_guard, _counted, _ob) = (&guard, &counted, &ob);
        if let Some(prelude) = prelude.take() {
            write_snapshot(enc, &thread_id, prelude, None, None, chunk);
        }
        {
            match item {
                Some(Outgoing::Event(e)) => {
                    events_out.inc();
                    sent(e.seq);
                    let framed = framer.event(e.seq, &e.event);
                    write_framed(enc, &e, framed, epoch.as_deref(), chunk)
                }
                Some(Outgoing::Message(m)) => {
                    if let Some(snap) = snapshot_of_message(&m) {
                        let seq = snap.get("seq").and_then(Value::as_u64);
                        if let Some(seq) = seq {
                            sent(seq);
                        }
                        let point = guard.thread.join_point(seq.unwrap_or(0), &seen_as, false);
                        let prefix: Vec<_> = point
                            .prefix
                            .iter()
                            .flatten()
                            .map(|e| (e.seq, &e.event))
                            .collect();
                        let framed = framer.snapshot(&snap, &prefix);
                        if snap.get("reset").is_some() {
                            // Reloaded after a loss: the ids name the new history.
                            epoch = guard.thread.epoch();
                        }
                        write_snapshot(enc, &thread_id, framed, seq, epoch.as_deref(), chunk);
                    }
                }
                Some(Outgoing::Close(..)) => return Next::End,
                Some(Outgoing::Continues) | None => {}
            }
            Next::More
        }
    });
    stream_response(enc, stream)
}

/// Brings `framer` to where a viewer starting after `after` stands (see
/// [`crate::protocol::join`], "Cursors"): a reconnect (`Last-Event-ID`)
/// holds open what the journal up to `after` opened, and gets nothing more;
/// a fresh start inside a run gets the run re-opened (the prelude returned).
/// A fresh start whose conversation cannot be rebuilt (compacted) is framed
/// as before cursors existed: what it never saw open is opened when used.
fn join_prelude(
    thread: &crate::thread::Thread,
    framer: &mut JoinFramer,
    after: u64,
    reconnect: bool,
    visibility: &crate::protocol::hooks::ViewerVisibility,
) -> Vec<Framed> {
    if after == 0 {
        return Vec::new();
    }
    let point = thread.join_point(after, visibility, !reconnect);
    let (Some(prefix), true) = (point.prefix, reconnect || point.at.is_some()) else {
        return Vec::new();
    };
    for e in &prefix {
        framer.follow(e.seq, &e.event);
    }
    point.at.map(|at| framer.reopen(&at)).unwrap_or_default()
}

/// Frames, in `enc`'s format, for what the framer made of journal entry
/// `e`: the entry itself from its frame cache, converted events with its
/// seq, synthetic ones without.
fn write_framed(
    enc: &dyn Encoder,
    e: &crate::thread::Entry,
    framed: Vec<Framed>,
    epoch: Option<&str>,
    out: &mut BytesMut,
) {
    for f in framed {
        match f {
            Framed::Journal if epoch.is_none() => enc.write_entry(e, out),
            Framed::Journal => {
                write_event(enc, &e.thread_id, e.event.json(), Some(e.seq), epoch, out)
            }
            Framed::Converted(v) | Framed::Marked(v) => {
                let json = v.to_string();
                write_event(enc, &e.thread_id, json.as_bytes(), Some(e.seq), epoch, out)
            }
            Framed::Synthetic(v) => enc.event(&e.thread_id, v.to_string().as_bytes(), None, out),
        }
    }
}

/// One event's frame, carrying `seq` as its id — with the journal's
/// `epoch`, when the store has one, in SSE: the `Last-Event-ID` a browser
/// sends back is then a whole [`Cursor`].
fn write_event(
    enc: &dyn Encoder,
    thread_id: &str,
    json: &[u8],
    seq: Option<u64>,
    epoch: Option<&str>,
    out: &mut BytesMut,
) {
    match (seq, epoch) {
        (Some(seq), Some(epoch)) if enc.content_type() == encode::sse::SSE.content_type() => {
            out.extend_from_slice(b"id: ");
            out.extend_from_slice(Cursor::text(seq, Some(epoch)).as_bytes());
            out.extend_from_slice(b"\n");
            enc.event(thread_id, json, None, out);
        }
        _ => enc.event(thread_id, json, seq, out),
    }
}

/// What a reconnect into a lost history gets before its reset snapshot:
/// the end of whatever run it held open (`RUN_ERROR` may come at any point).
fn history_lost() -> Framed {
    let error = crate::protocol::event::run_error(
        "journal_lost",
        "the journal store lost the history this stream was reading; a snapshot of what it holds follows",
    );
    Framed::Synthetic(Value::Object(error.body().clone()))
}

/// Frames for a snapshot start; the event standing for the journal up to
/// the snapshot carries its `seq`.
fn write_snapshot(
    enc: &dyn Encoder,
    thread_id: &str,
    framed: Vec<Framed>,
    seq: Option<u64>,
    epoch: Option<&str>,
    out: &mut BytesMut,
) {
    for f in framed {
        match f {
            Framed::Converted(v) | Framed::Marked(v) => {
                write_event(enc, thread_id, v.to_string().as_bytes(), seq, epoch, out)
            }
            Framed::Synthetic(v) => enc.event(thread_id, v.to_string().as_bytes(), None, out),
            Framed::Journal => {}
        }
    }
}

/// The snapshot object of a `snapshot` message (without `type`).
fn snapshot_of_message(message: &[u8]) -> Option<Map<String, Value>> {
    let mut v: Map<String, Value> = serde_json::from_slice(message).ok()?;
    (v.remove("type")?.as_str()? == "snapshot").then_some(v)
}

/// Unsubscribes a viewer when dropped.
pub struct ViewerGuard {
    pub thread: Arc<crate::thread::Thread>,
    pub viewer: u64,
    /// The registry, to drop a thread watched before its first run once
    /// its last viewer left (as if never asked for).
    pub threads: Option<Arc<crate::thread::Threads>>,
    /// Where the viewer is listed as watching.
    pub presence: Option<Arc<crate::thread::presence::Presence>>,
}

impl Drop for ViewerGuard {
    fn drop(&mut self) {
        self.thread.unsubscribe(self.viewer);
        self.thread.viewer_left();
        if let Some(presence) = &self.presence {
            presence.leave(&self.thread.key, self.viewer);
        }
        if let Some(threads) = &self.threads {
            let key = self.thread.key.clone();
            // The registry's and this guard's references only.
            threads.forget_if_unused(&key);
        }
    }
}
