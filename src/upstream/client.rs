//! One upstream run: POST `RunAgentInput`, decode SSE, normalize, verify.
//!
//! The run is driven by its own task that feeds a bounded channel, so a slow
//! consumer applies backpressure all the way to the agent's socket. The task
//! watches the channel: when the consumer drops the [`RunStream`] the HTTP
//! response is dropped at once and the agent sees its connection close, even
//! while it is silent. Whatever goes wrong, the stream ends with a terminal
//! event (`RUN_FINISHED` from the agent, or a `RUN_ERROR` with one of the
//! [`UpstreamCode`]s), so every consumer can rely on runs ending.
//!
//! **A late `RUN_ERROR`.** AG-UI 1.1 (`events/lifecycle`, "After a run
//! closes"): "A producer MAY emit `RUN_ERROR` after `RUN_FINISHED`,
//! reporting a failure that surfaced after the run reported success — a
//! transport error while flushing, say. A consumer MUST treat the run as
//! failed in that case." So after `RUN_FINISHED` the agent's response is
//! read on until it ends, for at most [`LATE_ERROR_GRACE`] (an agent that
//! keeps its response open after the run delays the run's end by that much,
//! no more). `RUN_FINISHED` is held back meanwhile and handed over together
//! with the `RUN_ERROR` that followed it, if one did: the stream then yields
//! both, back to back, the error ready the moment the `RUN_FINISHED` is
//! read — so a consumer journals them in one batch, and nothing can slip in
//! between. Anything else after `RUN_FINISHED` ("A consumer MUST reject any
//! other event that arrives after a run has closed") is dropped and logged,
//! and a response that breaks or overflows after `RUN_FINISHED` does not
//! turn a run the agent reported finished into a failure.

use super::Agent;
use super::attempt::{Failure, Handed, UpstreamCode, describe, fail, feed_read, own_copy};
use super::backend::{Backend, Slot};
use super::pool::{NoBackend, RunKey};
use crate::config::VerifyMode;
use crate::protocol::chunks::ChunkNormalizer;
use crate::protocol::event::run_error;
use crate::protocol::sse::{SseDecoder, SseFrame};
use crate::protocol::verify::Verifier;
use crate::protocol::{Event, EventType};
use bytes::Bytes;
use futures::StreamExt;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout_at};
use tokio_util::task::AbortOnDropHandle;

/// How long the agent's response is read after `RUN_FINISHED`, waiting for
/// a late `RUN_ERROR` (see the module doc). An agent ends its response with
/// its run, so this is only waited for in full by one that does not.
pub const LATE_ERROR_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// How much of an error response body goes into `RUN_ERROR.message`.
const ERROR_BODY_EXCERPT: usize = 512;
/// Reads' worth of events buffered between the upstream task and the
/// consumer (each message is what one read of the agent's response held).
const CHANNEL_READS: usize = 8;

/// The events of one run, ending with its terminal event — or with
/// `RUN_FINISHED` then a late `RUN_ERROR`. Dropping it drops the upstream
/// request.
pub struct RunStream {
    rx: mpsc::Receiver<Handed>,
    _task: AbortOnDropHandle<()>,
}

impl RunStream {
    /// The next events: what the agent sent since the last call, at least
    /// one read's worth (waiting for it), more while more is ready and the
    /// batch holds fewer than `max` and no terminal event (a single read
    /// may hold more than `max`). `None` once the stream has ended.
    pub async fn next_batch(&mut self, max: usize) -> Option<Vec<Event>> {
        let mut batch = self.rx.recv().await?;
        while batch.len() < max && !batch.last().is_some_and(|e| e.kind().is_terminal()) {
            match self.rx.try_recv() {
                Ok(more) => batch.extend(more),
                Err(_) => break,
            }
        }
        Some(batch)
    }

    /// Starts a run on `agent` with `body` (serialized `RunAgentInput`);
    /// `extra` headers (e.g. the verified identity) go after the agent's own.
    pub fn start(agent: Arc<Agent>, body: Bytes, extra: reqwest::header::HeaderMap) -> RunStream {
        Self::start_for(agent, None, body, extra)
    }

    /// Like [`RunStream::start`] for a run of a known tenant and thread:
    /// the agent's routes and canary choose its backend group by them,
    /// and with the agent's affinity on the thread's runs stay on one
    /// backend.
    ///
    /// The request runs in an `upstream` span (a child of the current one,
    /// the run's); with OpenTelemetry export on, its context is the request's
    /// `traceparent`, replacing the one in `extra`.
    pub fn start_for(
        agent: Arc<Agent>,
        run: Option<RunKey>,
        body: Bytes,
        mut extra: reqwest::header::HeaderMap,
    ) -> RunStream {
        let (tx, rx) = mpsc::channel(CHANNEL_READS);
        let span = tracing::info_span!(
            "upstream",
            agent = %agent.id,
            otel.kind = "client",
            http.request.method = "POST",
            http.response.status_code = tracing::field::Empty,
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        if let Some(value) = super::trace::of_span(&span)
            .and_then(|t| reqwest::header::HeaderValue::from_str(&t).ok())
        {
            extra.insert("traceparent", value);
        }
        let work = async move {
            if let Some((code, message)) = attempts(&agent, run.as_ref(), body, extra, &tx).await {
                let span = tracing::Span::current();
                span.record("error.type", code.as_string());
                span.record("otel.status_code", "ERROR");
                tracing::warn!(agent = %agent.id, code = %code.as_string(), "{message}");
                crate::metrics::metrics()
                    .upstream_errors
                    .get_or_create(&crate::metrics::UpstreamErrorLabels {
                        agent: agent.id.clone(),
                        code: crate::metrics::upstream_code_class(&code.as_string()),
                    })
                    .inc();
                let _ = tx.send(vec![run_error(&code.as_string(), message)]).await;
            }
        };
        let task = tokio::spawn(tracing::Instrument::instrument(work, span));
        RunStream {
            rx,
            _task: AbortOnDropHandle::new(task),
        }
    }
}

/// Sends the run to the agent's backends in turn until one serves it;
/// `Some` is the failure that ends the run.
///
/// **Every failure before the first event moves on.** Until a backend's
/// first complete SSE frame, nothing of the run has reached anyone, and
/// whatever went wrong — a refused connection, a non-2xx answer (but a
/// refusal of the request itself, see [`UpstreamCode::refuses_the_request`]), a
/// response that is not an event stream, a body that is empty or breaks,
/// a stall past `first_event` — says the same thing: this backend did not
/// serve the run. So each is counted against the backend (its passive
/// ejection, see [`super::health`]) and the run goes to the next one.
/// Telling them apart would leave a replica that dies between its headers
/// and its first event (a crash, an OOM kill, a proxy in front of it
/// answering for it) to fail runs that a stalled one would have had
/// retried.
///
/// **No duplicates.** Once the agent sent a frame it may have acted, and
/// any failure ends the run with its own code, as for an agent of one
/// backend. At most `pool.attempts` backends, each at most once, with
/// `pool.retry_backoff` (doubling) between them, all within the run's
/// `total` timeout; the consumer leaving (a cancel) stops the search at
/// once, mid-backoff included.
async fn attempts(
    agent: &Agent,
    run: Option<&RunKey>,
    body: Bytes,
    extra: reqwest::header::HeaderMap,
    tx: &mpsc::Sender<Handed>,
) -> Failure {
    let pool = &agent.pool;
    let started = Instant::now();
    let total_deadline = started + agent.timeouts.total;
    let mut tried = Vec::new();
    let mut backoff = pool.retry_backoff;
    let mut last: Failure = None;
    let mut note = None;
    // Ours until the agent's first event, for the next backend should this
    // one fail before it; dropped then ([`Run::forward_decoded`]). It is the
    // whole conversation, and a run streams for seconds to minutes: held to
    // the run's end, every busy thread kept a second copy of its history
    // (docs/benchmarks.md, "The run's body, held to its end"). An A2A
    // attempt lets it go at the first event too, and its parsed input
    // once the request is sent.
    let mut body = Some(body);
    for attempt in 1..=pool.attempts {
        // None only once an event arrived, and then no attempt follows.
        let Some(this_body) = body.clone() else {
            return last;
        };
        let granted = tokio::select! {
            _ = tx.closed() => return None,
            g = pool.acquire(run, &tried) => g,
        };
        let mut granted = match granted {
            Ok(g) => g,
            Err(NoBackend::Exhausted) => break,
            Err(NoBackend::Busy) => {
                return fail(
                    UpstreamCode::Unavailable,
                    format!(
                        "every backend of agent '{}' stayed at its max_in_flight for queue_timeout {:?}",
                        agent.id, pool.queue_timeout
                    ),
                );
            }
        };
        tried.push(granted.index);
        if granted.moved && note.is_none() {
            note = Some(moved_note());
        }
        let backend = &pool.backends[granted.index];
        // The one place the agent's protocol matters: how an attempt talks
        // to its backend. What it hands over is AG-UI events either way.
        let (result, seen_any) = match agent.protocol {
            crate::config::AgentProtocol::AgUi => {
                let mut sent = Run {
                    agent,
                    backend,
                    body: &mut body,
                    slot: &mut granted.slot,
                    note: note.take(),
                    tx,
                    chunks: ChunkNormalizer::new(),
                    verifier: Verifier::new(),
                    frames: Vec::new(),
                    events: Vec::new(),
                    out: Vec::new(),
                    ended: false,
                    finished: None,
                    seen_any: false,
                };
                let result = sent.drive(this_body, extra.clone(), total_deadline).await;
                // An unsent note goes with the run to the next backend.
                note = sent.note.take();
                (result, sent.seen_any)
            }
            crate::config::AgentProtocol::A2a => {
                super::a2a::client::drive(
                    agent,
                    backend,
                    &mut granted.slot,
                    &mut note,
                    &mut body,
                    this_body,
                    extra.clone(),
                    total_deadline,
                    tx,
                )
                .await
            }
        };
        let (code, message) = match result {
            Ok(()) | Err(None) => return None,
            Err(Some(failure)) => failure,
        };
        if seen_any || code.refuses_the_request() {
            return fail(code, message);
        }
        granted.slot.failed(&pool.ejection);
        drop(granted);
        if attempt == pool.attempts
            || !pool.untried(run, &tried)
            || Instant::now() + backoff >= total_deadline
        {
            return fail(code, message);
        }
        tracing::warn!(agent = %agent.id, backend = %backend.name, code = %code.as_string(), attempt,
            "backend failed before the agent's first event: trying another");
        crate::metrics::metrics()
            .upstream_retries
            .get_or_create(&crate::metrics::AgentLabel {
                agent: agent.id.clone(),
            })
            .inc();
        last = fail(code, message);
        tokio::select! {
            _ = tx.closed() => return None,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = backoff.saturating_mul(2);
        crate::fault::point("upstream.failover").await;
    }
    last
}

/// The journal's note on a run that could not go to its thread's backend
/// (affinity): the agent that served it may not hold the thread's state.
fn moved_note() -> Event {
    Event::build(serde_json::json!({
        "type": "CUSTOM",
        "name": crate::protocol::handoff::UPSTREAM_NOTE,
        "value": {
            "affinity": "moved",
            "message": "this thread's backend was unavailable: the run went to another backend, which may not hold the thread's state",
        },
    }))
}

struct Run<'a> {
    agent: &'a Agent,
    backend: &'a Backend,
    /// The run's body as [`attempts`] keeps it for another backend: let go
    /// at the first event, after which no other backend is tried.
    body: &'a mut Option<Bytes>,
    /// The run's hold on `backend`, told of the first event.
    slot: &'a mut Slot,
    /// A note to send right after the agent's first event (see [`moved_note`]).
    note: Option<Event>,
    tx: &'a mpsc::Sender<Handed>,
    chunks: ChunkNormalizer,
    verifier: Verifier,
    frames: Vec<SseFrame>,
    events: Vec<Event>,
    /// What this read forwards, handed over at its end ([`Handed`]).
    out: Vec<Event>,
    /// The run's stream has ended (terminal event forwarded).
    ended: bool,
    /// The agent's `RUN_FINISHED`, held back while a late `RUN_ERROR` may
    /// still come (see the module doc).
    finished: Option<Event>,
    /// At least one frame arrived (tells idle from first-event timeouts).
    seen_any: bool,
}

impl Run<'_> {
    /// One attempt on `self.backend`; `total_deadline` is the whole run's.
    async fn drive(
        &mut self,
        body: Bytes,
        extra: reqwest::header::HeaderMap,
        total_deadline: Instant,
    ) -> Result<(), Failure> {
        let t = &self.agent.timeouts;
        let started = Instant::now();
        let first_deadline = (started + t.first_event).min(total_deadline);

        // The closure owns the body: it goes with the request future once
        // an answer came (see [`Run::body`]), not at the end of `drive`.
        let backend = self.backend;
        let request = super::keep_alive::send(
            &self.agent.id,
            &self.agent.http,
            &self.agent.http_fresh,
            move |http| {
                http.post(backend.url.clone())
                    .headers(backend.headers.clone())
                    .headers(extra.clone())
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .header(reqwest::header::ACCEPT, "text/event-stream")
                    .body(body.clone())
            },
        );
        let response = tokio::select! {
            _ = self.tx.closed() => return Err(None),
            r = timeout_at(first_deadline, request) => match r {
                Err(_) => return Err(fail(UpstreamCode::Timeout, format!(
                    "no response from agent '{}' within first_event timeout {:?}", self.agent.id, t.first_event))),
                Ok(Err(e)) => return Err(fail(UpstreamCode::Unavailable, format!(
                    "agent '{}' unreachable: {}", self.agent.id, describe(&e)))),
                Ok(Ok(r)) => r,
            }
        };

        let status = response.status();
        tracing::Span::current().record("http.response.status_code", i64::from(status.as_u16()));
        if !status.is_success() {
            // The body may carry internals (stack traces, hosts, queries):
            // operators get a capped, escaped excerpt in the log; clients
            // only the status.
            let excerpt = read_excerpt(response, first_deadline).await;
            tracing::warn!(agent = %self.agent.id, status = status.as_u16(), body = %excerpt.escape_debug(), "agent answered an HTTP error");
            return Err(fail(
                UpstreamCode::Http(status.as_u16()),
                format!(
                    "agent '{}' answered HTTP {} (its response body is in the gateway log)",
                    self.agent.id,
                    status.as_u16()
                ),
            ));
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        if !content_type.starts_with("text/event-stream") {
            return Err(fail(
                UpstreamCode::ProtocolViolation,
                format!(
                    "agent '{}' answered Content-Type '{content_type}', expected text/event-stream",
                    self.agent.id
                ),
            ));
        }

        let mut decoder = SseDecoder::new(self.agent.max_frame_bytes);
        let mut body = response.bytes_stream();
        let mut deadline = first_deadline;
        loop {
            let next = tokio::select! {
                _ = self.tx.closed() => return Err(None),
                n = timeout_at(deadline, body.next()) => n,
            };
            if self.finished.is_some() {
                // After RUN_FINISHED: whatever ends the response or the
                // grace hands the run's end over, with a late RUN_ERROR if
                // one arrived.
                let more = match next {
                    Ok(Some(Ok(chunk))) => decoder
                        .feed_bytes(&own_copy(&chunk), &mut self.frames)
                        .is_ok(),
                    Ok(None) => {
                        let _ = decoder.finish(&mut self.frames);
                        false
                    }
                    Ok(Some(Err(_))) | Err(_) => false,
                };
                self.forward_frames().await?;
                if self.finished.is_none() {
                    return Ok(());
                }
                if !more {
                    return self.hand_over_finished(None).await;
                }
                continue;
            }
            let chunk = match next {
                Err(_) => {
                    let which = if deadline == total_deadline {
                        format!("total timeout {:?}", t.total)
                    } else if self.seen_any {
                        format!("idle timeout {:?}", t.idle)
                    } else {
                        format!("first_event timeout {:?}", t.first_event)
                    };
                    return Err(fail(
                        UpstreamCode::Timeout,
                        format!("agent '{}' exceeded its {which}", self.agent.id),
                    ));
                }
                Ok(None) => {
                    decoder
                        .finish(&mut self.frames)
                        .map_err(|e| fail(UpstreamCode::FrameTooLarge, e.to_string()))?;
                    self.forward_frames().await?;
                    if self.finished.is_some() {
                        return self.hand_over_finished(None).await;
                    }
                    if self.ended {
                        return Ok(());
                    }
                    return Err(fail(
                        UpstreamCode::Incomplete,
                        format!(
                            "agent '{}' ended the stream without RUN_FINISHED or RUN_ERROR",
                            self.agent.id
                        ),
                    ));
                }
                Ok(Some(read)) => read,
            };
            feed_read(&self.agent.id, chunk, &mut decoder, &mut self.frames)?;
            let had_events = !self.frames.is_empty();
            self.forward_frames().await?;
            if self.ended {
                return Ok(()); // dropping `body` closes the upstream connection
            }
            if self.finished.is_some() {
                deadline = (Instant::now() + LATE_ERROR_GRACE).min(total_deadline);
            } else if had_events {
                deadline = (Instant::now() + t.idle).min(total_deadline);
            }
        }
    }

    /// Sends the held `RUN_FINISHED`, with the late `RUN_ERROR` that
    /// followed it if any: the run's stream is over.
    async fn hand_over_finished(&mut self, late: Option<Event>) -> Result<(), Failure> {
        if let Some(finished) = self.finished.take() {
            self.ended = true;
            self.out.push(finished);
            self.out.extend(late);
        }
        self.hand_over().await
    }

    /// Sends what this read forwards, if anything.
    async fn hand_over(&mut self) -> Result<(), Failure> {
        if self.out.is_empty() {
            return Ok(());
        }
        let out = std::mem::take(&mut self.out);
        self.tx.send(out).await.map_err(|_| None)
    }

    /// Parses, normalizes, verifies and forwards every decoded frame.
    async fn forward_frames(&mut self) -> Result<(), Failure> {
        let forwarded = self.forward_decoded();
        // Whatever the read gave goes over, even when it ended in a failure
        // (what came before the failure was the agent's and is journaled).
        let handed = self.hand_over().await;
        forwarded.and(handed)
    }

    /// The body of [`Run::forward_frames`], collecting into `out`.
    ///
    /// The frame and event buffers are reused across reads (taken and put
    /// back), so the steady state allocates nothing but the events themselves.
    fn forward_decoded(&mut self) -> Result<(), Failure> {
        let strict = self.agent.verify == VerifyMode::Strict;
        let mut frames = std::mem::take(&mut self.frames);
        let mut events = std::mem::take(&mut self.events);
        for frame in frames.drain(..) {
            if !std::mem::replace(&mut self.seen_any, true) {
                self.slot.first_event();
                *self.body = None;
            }
            if self.finished.is_some() {
                // The run has closed: only a late RUN_ERROR is admitted.
                match Event::parse(frame.data) {
                    Ok(e) if *e.kind() == EventType::RunError => {
                        if let Some(finished) = self.finished.take() {
                            self.ended = true;
                            self.out.push(finished);
                            self.out.push(e);
                        }
                        return Ok(());
                    }
                    Ok(e) => {
                        tracing::warn!(agent = %self.agent.id, "dropping {} sent after RUN_FINISHED (only a late RUN_ERROR may follow it)", e.kind());
                    }
                    Err(e) => {
                        tracing::warn!(agent = %self.agent.id, "dropping SSE frame after RUN_FINISHED that is not an event: {e}");
                    }
                }
                continue;
            }
            let event = match Event::parse(frame.data) {
                Ok(e) => e,
                Err(e) if strict => {
                    return Err(fail(
                        UpstreamCode::ProtocolViolation,
                        format!("frame_not_event: {e}"),
                    ));
                }
                Err(e) => {
                    tracing::warn!(agent = %self.agent.id, "skipping SSE frame that is not an event: {e}");
                    continue;
                }
            };
            // Only chunk events can fail to expand; keep a copy of those alone,
            // for lenient agents whose broken chunk is forwarded as it came.
            let fallback = (!strict && event.kind().is_chunk()).then(|| event.clone());
            if let Err(e) = self.chunks.push(event, &mut events) {
                let Some(original) = fallback else {
                    return Err(fail(
                        UpstreamCode::ProtocolViolation,
                        format!("chunk_expansion: {e}"),
                    ));
                };
                tracing::warn!(agent = %self.agent.id, "forwarding chunk that could not be expanded: {e}");
                events.push(original);
            }
            for event in events.drain(..) {
                if let Err(v) = self.verifier.check(&event) {
                    if strict {
                        return Err(fail(
                            UpstreamCode::ProtocolViolation,
                            format!("{} (event {})", v, event.kind()),
                        ));
                    }
                    tracing::warn!(agent = %self.agent.id, rule = v.rule, "forwarding event that breaks the AG-UI rules: {}", v.message);
                }
                // The pool's note is the gateway's word, never an agent's.
                if *event.kind() == EventType::Custom
                    && event.str_field("name") == Some(crate::protocol::handoff::UPSTREAM_NOTE)
                {
                    continue;
                }
                if *event.kind() == EventType::RunFinished {
                    // Held until the response ends or the grace passes;
                    // what follows in this read is looked at as above.
                    self.finished = Some(event);
                    break;
                }
                let terminal = event.kind().is_terminal();
                self.out.push(event);
                if terminal {
                    self.ended = true;
                    return Ok(());
                }
                if let Some(note) = self.note.take() {
                    self.out.push(note);
                }
            }
        }
        self.frames = frames;
        self.events = events;
        Ok(())
    }
}

async fn read_excerpt(response: reqwest::Response, deadline: Instant) -> String {
    let mut body = response.bytes_stream();
    let mut buf = Vec::new();
    while buf.len() < ERROR_BODY_EXCERPT {
        match timeout_at(
            deadline.max(Instant::now() + std::time::Duration::from_secs(2)),
            body.next(),
        )
        .await
        {
            Ok(Some(Ok(b))) => buf.extend_from_slice(&b),
            _ => break,
        }
    }
    buf.truncate(ERROR_BODY_EXCERPT);
    let text = String::from_utf8_lossy(&buf).trim().to_owned();
    if text.is_empty() {
        "(empty body)".into()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::post;
    use std::sync::{Arc, Mutex};
    use tokio::sync::oneshot;

    /// A body that says when its last copy is gone.
    struct Watched(Vec<u8>, Option<oneshot::Sender<()>>);

    impl AsRef<[u8]> for Watched {
        fn as_ref(&self) -> &[u8] {
            &self.0
        }
    }

    impl Drop for Watched {
        fn drop(&mut self) {
            if let Some(tx) = self.1.take() {
                let _ = tx.send(());
            }
        }
    }

    /// The run's body (the whole conversation) is let go at the agent's
    /// first event, not held until the run ends: no backend is tried after
    /// it, and a busy thread's runs would otherwise each keep a second copy
    /// of its history for as long as they stream.
    #[tokio::test]
    async fn the_runs_body_is_let_go_at_the_first_event() {
        body_let_go_at_the_first_event(
            "",
            axum::Router::new(),
            "/",
            [
                r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#,
                r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r"}"#,
            ],
        )
        .await;
    }

    /// The same for an A2A agent (a loopback one: its card, and a
    /// streamed task), whose attempt held the body to the run's end.
    #[tokio::test]
    async fn an_a2a_runs_body_is_let_go_at_the_first_event() {
        let app = axum::Router::new().route(
            &format!("/{}", super::super::a2a::card::WELL_KNOWN),
            axum::routing::get(|req: axum::extract::Request| async move {
                let host = req.headers()["host"].to_str().unwrap().to_owned();
                axum::Json(
                    serde_json::json!({"name": "a", "capabilities": {"streaming": true},
                    "supportedInterfaces": [{"url": format!("http://{host}/rpc"),
                        "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]}),
                )
            }),
        );
        let answer = |result: serde_json::Value| {
            serde_json::json!({"jsonrpc": "2.0", "id": "r", "result": result}).to_string()
        };
        body_let_go_at_the_first_event(
            "protocol = \"a2a\"\n",
            app,
            "/rpc",
            [
                answer(serde_json::json!({"task": {"id": "k", "contextId": "t",
                    "status": {"state": "TASK_STATE_WORKING"}}})),
                answer(serde_json::json!({"statusUpdate": {"taskId": "k",
                    "status": {"state": "TASK_STATE_COMPLETED"}}})),
            ],
        )
        .await;
    }

    /// Runs a body that says when it is dropped against an agent at
    /// `rpc` of `app` that streams `frames` (one SSE frame each, the
    /// second only once the body was let go), and checks that the run is
    /// whole: it starts, and its last event is `RUN_FINISHED`.
    async fn body_let_go_at_the_first_event(
        agent_toml: &str,
        app: axum::Router,
        rpc: &str,
        [first_frame, last_frame]: [impl Into<String>; 2],
    ) {
        // The agent streams what the test hands it, one SSE frame each.
        let (frames_tx, frames_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let frames_rx = Arc::new(Mutex::new(Some(frames_rx)));
        let app = app.route(
            rpc,
            post(move |_body: axum::body::Bytes| {
                let rx = frames_rx.lock().unwrap().take().expect("one run");
                async move {
                    let frames = futures::stream::unfold(rx, |mut rx| async move {
                        let frame = rx.recv().await?;
                        Some((
                            Ok::<_, std::convert::Infallible>(format!("data: {frame}\n\n")),
                            rx,
                        ))
                    });
                    axum::response::Response::builder()
                        .header("content-type", "text/event-stream")
                        .body(Body::from_stream(frames))
                        .unwrap()
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let cfg: crate::config::AgentConfig = toml::from_str(&format!(
            "id = \"a\"\nurl = \"http://{addr}/\"\n{agent_toml}"
        ))
        .unwrap();
        let agent = Arc::new(Agent::from_config(&cfg, None).unwrap());

        let (dropped_tx, mut dropped) = oneshot::channel();
        let input = br#"{"threadId":"t","runId":"r","messages":[{"id":"u","role":"user","content":"hi"}],"state":{}}"#.to_vec();
        let body = Bytes::from_owner(Watched(input, Some(dropped_tx)));
        let mut run = RunStream::start(agent, body, reqwest::header::HeaderMap::new());
        frames_tx.send(first_frame.into()).unwrap();
        let first = run.next_batch(16).await.expect("the first event");
        assert_eq!(*first[0].kind(), EventType::RunStarted);
        // The run is still streaming: its body is gone all the same.
        tokio::time::timeout(std::time::Duration::from_secs(10), &mut dropped)
            .await
            .expect("the body was held past the first event")
            .unwrap();
        frames_tx.send(last_frame.into()).unwrap();
        let mut last = None;
        while let Some(batch) = run.next_batch(16).await {
            last = batch.last().map(|e| e.kind().clone());
        }
        assert_eq!(last, Some(EventType::RunFinished));
    }

    /// A raw HTTP/1.1 agent on loopback that answers every request with a
    /// whole run, kept alive, except what `close` says to drop unanswered:
    /// called with (the request's number on its connection, from 0), it
    /// closes the connection right after reading the request, as a server
    /// does whose idle keep-alive timer fired as the request arrived.
    async fn keep_alive_agent(close: fn(usize) -> bool) -> KeepAliveAgent {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(AtomicUsize::new(0));
        let (let_go_tx, let_go) = tokio::sync::watch::channel(0);
        let (req, conns) = (requests.clone(), connections.clone());
        tokio::spawn(async move {
            loop {
                let (socket, _) = listener.accept().await.unwrap();
                conns.fetch_add(1, SeqCst);
                let (req, let_go_tx) = (req.clone(), let_go_tx.clone());
                tokio::spawn(async move {
                    let mut socket = BufReader::new(socket);
                    for n in 0.. {
                        let mut length = 0;
                        loop {
                            let mut line = String::new();
                            if socket.read_line(&mut line).await.unwrap_or(0) == 0 {
                                // The gateway closed it.
                                let_go_tx.send_modify(|n| *n += 1);
                                return;
                            }
                            if let Some(v) =
                                line.to_ascii_lowercase().strip_prefix("content-length:")
                            {
                                length = v.trim().parse().unwrap();
                            }
                            if line == "\r\n" {
                                break;
                            }
                        }
                        let mut body = vec![0; length];
                        socket.read_exact(&mut body).await.unwrap();
                        req.fetch_add(1, SeqCst);
                        if close(n) {
                            return;
                        }
                        let events = "data: {\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\"}\n\n\
                                      data: {\"type\":\"RUN_FINISHED\",\"threadId\":\"t\",\"runId\":\"r\"}\n\n";
                        let head = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n",
                            events.len()
                        );
                        let out = socket.get_mut();
                        out.write_all(head.as_bytes()).await.unwrap();
                        out.write_all(events.as_bytes()).await.unwrap();
                    }
                });
            }
        });
        KeepAliveAgent {
            url: format!("http://{addr}/"),
            requests,
            connections,
            let_go,
        }
    }

    struct KeepAliveAgent {
        url: String,
        /// Requests read.
        requests: Arc<std::sync::atomic::AtomicUsize>,
        /// Connections accepted.
        connections: Arc<std::sync::atomic::AtomicUsize>,
        /// Connections the gateway closed.
        let_go: tokio::sync::watch::Receiver<usize>,
    }

    /// Every event of one run of `agent`, to its end.
    async fn one_run(agent: &Arc<Agent>) -> Vec<Event> {
        let input = r#"{"threadId":"t","runId":"r","messages":[],"state":{}}"#;
        let mut run = RunStream::start(
            agent.clone(),
            Bytes::from_static(input.as_bytes()),
            reqwest::header::HeaderMap::new(),
        );
        let mut events = Vec::new();
        while let Some(batch) = run.next_batch(16).await {
            events.extend(batch);
        }
        events
    }

    fn agent_at(url: &str, more_toml: &str) -> Arc<Agent> {
        let cfg: crate::config::AgentConfig =
            toml::from_str(&format!("id = \"a\"\nurl = \"{url}\"\n{more_toml}")).unwrap();
        Arc::new(Agent::from_config(&cfg, None).unwrap())
    }

    /// An agent server closes a connection it kept alive once it has been
    /// idle for its own timeout (uvicorn and Node: 5 s), and a run sent on
    /// it at that moment meets a closed connection before any answer. The
    /// agent never read that request as a request: the run is sent again,
    /// once, over a new connection, rather than ended `upstream_unavailable`
    /// (which a pool test met under load, with one backend in its group).
    #[tokio::test]
    async fn a_run_that_meets_a_kept_alive_connection_closing_is_sent_again_on_a_new_one() {
        use std::sync::atomic::Ordering::SeqCst;
        let server = keep_alive_agent(|n| n == 1).await;
        let agent = agent_at(&server.url, "");
        for _ in 0..2 {
            let events = one_run(&agent).await;
            assert_eq!(
                events.last().map(|e| e.kind().clone()),
                Some(EventType::RunFinished),
                "{events:?}"
            );
        }
        // The second run: read on the kept-alive connection and dropped
        // there, then sent once more on a second connection.
        assert_eq!(server.requests.load(SeqCst), 3);
        assert_eq!(server.connections.load(SeqCst), 2);
    }

    /// The resend is once per attempt: an agent that drops every request
    /// it reads, on fresh connections too, ends the run
    /// `upstream_unavailable` after two sends, not a loop of them.
    #[tokio::test]
    async fn an_agent_that_drops_every_request_is_sent_a_run_at_most_twice() {
        use std::sync::atomic::Ordering::SeqCst;
        let server = keep_alive_agent(|_| true).await;
        let agent = agent_at(&server.url, "");
        let events = one_run(&agent).await;
        let last = events.last().expect("a terminal event");
        assert_eq!(*last.kind(), EventType::RunError);
        assert_eq!(
            last.get("code").and_then(serde_json::Value::as_str),
            Some("upstream_unavailable"),
            "{events:?}"
        );
        assert_eq!(server.requests.load(SeqCst), 2);
    }

    /// An idle connection is let go after `timeouts.keep_alive`, before the
    /// agent's server would close it under a request (module
    /// `keep_alive`): the agent sees the gateway close it, no earlier.
    #[tokio::test]
    async fn an_idle_connection_is_let_go_after_keep_alive() {
        let mut server = keep_alive_agent(|_| false).await;
        let agent = agent_at(&server.url, "[timeouts]\nkeep_alive = \"300ms\"\n");
        let ran = std::time::Instant::now();
        one_run(&agent).await;
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            server.let_go.wait_for(|n| *n == 1),
        )
        .await
        .expect("the idle connection was kept past keep_alive")
        .unwrap();
        assert!(ran.elapsed() >= std::time::Duration::from_millis(300));
    }
}
