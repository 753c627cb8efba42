//! One attempt of a run on one A2A backend: the card's JSON-RPC interface
//! gets `SendStreamingMessage` (or a blocking `SendMessage` when the card
//! says the agent does not stream), with the `A2A-Version: 1.0` header;
//! what it answers is mapped to AG-UI events ([`super::mapping`]) and handed
//! over exactly as an AG-UI agent's events are ([`crate::upstream::client`]):
//! same channel, same time limits, same failover before the first event,
//! so the thread, its journal, its viewers and policy cannot tell the two
//! apart.
//!
//! **Cancel.** When the run's consumer leaves (a cancel, `on_disconnect`,
//! a replaced run) the attempt is dropped mid-stream; a task the agent
//! named and did not end is then cancelled with `CancelTask`, sent from a
//! task of its own since the attempt is gone.

use super::card::Card;
use super::mapping::{Ask, Mapper, request};
use crate::protocol::Event;
use crate::protocol::input::RunAgentInput;
use crate::protocol::sse::{SseDecoder, SseFrame};
use crate::upstream::Agent;
use crate::upstream::attempt::{Failure, Handed, UpstreamCode, describe, fail, feed_read};
use crate::upstream::backend::{Backend, Slot};
use crate::upstream::keep_alive;
use bytes::Bytes;
use futures::StreamExt;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout_at};

/// The header A2A v1.0 requires on every request (without it the a2a-sdk
/// takes the request for 0.3).
pub const VERSION_HEADER: &str = "A2A-Version";
pub const VERSION: &str = "1.0";

/// How long a `CancelTask` sent after the run is gone may take.
const CANCEL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// One attempt; returns its result and whether the agent answered at all
/// (what the failover decision needs, as for an AG-UI attempt).
#[allow(clippy::too_many_arguments)]
pub(in crate::upstream) async fn drive(
    agent: &Agent,
    backend: &Backend,
    slot: &mut Slot,
    note: &mut Option<Event>,
    kept: &mut Option<Bytes>,
    body: Bytes,
    extra: HeaderMap,
    total_deadline: Instant,
    tx: &mpsc::Sender<Handed>,
) -> (Result<(), Failure>, bool) {
    let mut attempt = Attempt {
        agent,
        backend,
        slot,
        note,
        kept,
        tx,
        seen_any: false,
        cancel: None,
    };
    let result = attempt.run(body, extra, total_deadline).await;
    (result, attempt.seen_any)
}

struct Attempt<'a> {
    agent: &'a Agent,
    backend: &'a Backend,
    slot: &'a mut Slot,
    note: &'a mut Option<Event>,
    /// The run's body as the attempts keep it for the next backend: let go
    /// at the agent's first event, as an AG-UI attempt does (it is the
    /// whole conversation, and an A2A task may stream for minutes).
    kept: &'a mut Option<Bytes>,
    tx: &'a mpsc::Sender<Handed>,
    seen_any: bool,
    /// Cancels the agent's task if the attempt is dropped before it ended.
    cancel: Option<CancelOnDrop>,
}

impl Attempt<'_> {
    async fn run(
        &mut self,
        body: Bytes,
        extra: HeaderMap,
        total_deadline: Instant,
    ) -> Result<(), Failure> {
        let t = &self.agent.timeouts;
        let first_deadline = (Instant::now() + t.first_event).min(total_deadline);
        // Only the new input goes out (`request`): the parsed history and
        // this copy of the body are dropped before the task streams.
        let input = RunAgentInput::from_json(&body)
            .map_err(|e| fail(UpstreamCode::ProtocolViolation, format!("run input: {e}")))?;
        drop(body);
        let card = tokio::select! {
            _ = self.tx.closed() => return Err(None),
            c = timeout_at(first_deadline, self.card()) => match c {
                Ok(c) => c?,
                Err(_) => return Err(fail(UpstreamCode::Timeout, format!(
                    "agent '{}': no agent card within first_event timeout {:?}", self.agent.id, t.first_event))),
            }
        };
        let mut mapper = Mapper::new(&input.thread_id, &input.run_id);
        let ask = request(&input);
        let run_id = input.run_id.clone();
        drop(input);
        let message = match ask {
            Ask::Send(m) => m,
            Ask::Cancel(tasks) => return self.cancel_only(&card, &tasks, &mut mapper).await,
        };
        let method = if card.streaming {
            "SendStreamingMessage"
        } else {
            "SendMessage"
        };
        let rpc = json!({"jsonrpc": "2.0", "id": run_id, "method": method,
            "params": {"message": message}});
        // A blocking send answers once the task ended or paused: its first
        // (and only) answer may take as long as the whole run.
        let answer_deadline = if card.streaming {
            first_deadline
        } else {
            total_deadline
        };
        let response = self.post(&card, &rpc, extra, answer_deadline).await?;
        self.cancel = Some(CancelOnDrop {
            http: self.agent.http.clone(),
            url: card.rpc_url.clone(),
            headers: self.backend.headers.clone(),
            task: None,
        });
        let streamed = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.to_ascii_lowercase().starts_with("text/event-stream"));
        let result = if streamed {
            self.read_stream(response, &mut mapper, first_deadline, total_deadline)
                .await
        } else {
            self.read_one(response, &mut mapper, answer_deadline).await
        };
        if let Some(c) = &mut self.cancel {
            c.task = (!mapper.ended())
                .then(|| mapper.task_id().map(str::to_owned))
                .flatten();
        }
        result
    }

    /// The backend's card: the one read at start or reload, else read now.
    async fn card(&self) -> Result<Arc<Card>, Failure> {
        let cards = self.agent.a2a_cards();
        if let Some(card) = cards.get(&self.backend.name) {
            return Ok(card);
        }
        match Card::fetch(&self.agent.http, &self.backend.url, &self.backend.headers).await {
            Ok(card) => Ok(cards.put(&self.backend.name, card)),
            Err(e) => Err(fail(
                UpstreamCode::Unavailable,
                format!("agent '{}': {e}", self.agent.id),
            )),
        }
    }

    async fn post(
        &mut self,
        card: &Card,
        rpc: &Value,
        extra: HeaderMap,
        first_deadline: Instant,
    ) -> Result<reqwest::Response, Failure> {
        // Serialized once: a resend ([`keep_alive`]) sends the same bytes.
        let rpc = Bytes::from(serde_json::to_vec(rpc).expect("a JSON value serializes"));
        let (url, headers) = (&card.rpc_url, &self.backend.headers);
        let request = keep_alive::send(
            &self.agent.id,
            &self.agent.http,
            &self.agent.http_fresh,
            move |http| {
                http.post(url.clone())
                    .headers(headers.clone())
                    .headers(extra.clone())
                    .header(VERSION_HEADER, HeaderValue::from_static(VERSION))
                    .header(
                        reqwest::header::ACCEPT,
                        "text/event-stream, application/json",
                    )
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(rpc.clone())
            },
        );
        let response = tokio::select! {
            _ = self.tx.closed() => return Err(None),
            r = timeout_at(first_deadline, request) => match r {
                Err(_) => return Err(fail(UpstreamCode::Timeout, format!(
                    "no response from agent '{}' in time (timeouts.first_event, or total for a blocking send)",
                    self.agent.id))),
                Ok(Err(e)) => return Err(fail(UpstreamCode::Unavailable, format!(
                    "agent '{}' unreachable: {}", self.agent.id, describe(&e)))),
                Ok(Ok(r)) => r,
            }
        };
        let status = response.status();
        tracing::Span::current().record("http.response.status_code", i64::from(status.as_u16()));
        if !status.is_success() {
            tracing::warn!(agent = %self.agent.id, status = status.as_u16(), "A2A agent answered an HTTP error");
            return Err(fail(
                UpstreamCode::Http(status.as_u16()),
                format!(
                    "agent '{}' answered HTTP {}",
                    self.agent.id,
                    status.as_u16()
                ),
            ));
        }
        Ok(response)
    }

    /// A streamed answer: one JSON-RPC response per SSE frame.
    async fn read_stream(
        &mut self,
        response: reqwest::Response,
        mapper: &mut Mapper,
        first_deadline: Instant,
        total_deadline: Instant,
    ) -> Result<(), Failure> {
        let t = &self.agent.timeouts;
        let mut decoder = SseDecoder::new(self.agent.max_frame_bytes);
        let mut frames: Vec<SseFrame> = Vec::new();
        let mut body = response.bytes_stream();
        let mut deadline = first_deadline;
        loop {
            let next = tokio::select! {
                _ = self.tx.closed() => return Err(None),
                n = timeout_at(deadline, body.next()) => n,
            };
            let chunk = match next {
                Err(_) => {
                    let which = if self.seen_any { "idle" } else { "first_event" };
                    return Err(fail(
                        UpstreamCode::Timeout,
                        format!("agent '{}' exceeded its {which} timeout", self.agent.id),
                    ));
                }
                Ok(None) => {
                    return Err(fail(
                        UpstreamCode::Incomplete,
                        format!(
                            "A2A agent '{}' ended its stream before the task ended or paused",
                            self.agent.id
                        ),
                    ));
                }
                Ok(Some(read)) => read,
            };
            feed_read(&self.agent.id, chunk, &mut decoder, &mut frames)?;
            let answers: Vec<Value> = frames
                .drain(..)
                .filter_map(|f| match serde_json::from_str(f.data.as_str()) {
                    Ok(v) => Some(v),
                    Err(e) => {
                        tracing::warn!(agent = %self.agent.id, "skipping an A2A frame that is not JSON: {e}");
                        None
                    }
                })
                .collect();
            if !answers.is_empty() {
                self.hand_over(mapper, &answers).await?;
                if mapper.ended() {
                    return Ok(());
                }
                deadline = (Instant::now() + t.idle).min(total_deadline);
            }
        }
    }

    /// A blocking answer: one JSON-RPC response.
    async fn read_one(
        &mut self,
        response: reqwest::Response,
        mapper: &mut Mapper,
        first_deadline: Instant,
    ) -> Result<(), Failure> {
        let answer = tokio::select! {
            _ = self.tx.closed() => return Err(None),
            a = timeout_at(first_deadline.max(Instant::now()), response.json::<Value>()) => a,
        };
        let answer = match answer {
            Err(_) => {
                return Err(fail(
                    UpstreamCode::Timeout,
                    format!("agent '{}' did not answer in time", self.agent.id),
                ));
            }
            Ok(Err(e)) => {
                return Err(fail(
                    UpstreamCode::ProtocolViolation,
                    format!(
                        "agent '{}' answered no JSON-RPC response: {}",
                        self.agent.id,
                        describe(&e)
                    ),
                ));
            }
            Ok(Ok(a)) => a,
        };
        self.hand_over(mapper, std::slice::from_ref(&answer))
            .await?;
        if mapper.ended() {
            return Ok(());
        }
        Err(fail(
            UpstreamCode::Incomplete,
            format!(
                "A2A agent '{}' answered a task that is still running (the gateway does not poll)",
                self.agent.id
            ),
        ))
    }

    /// Maps JSON-RPC responses to events and hands them over.
    async fn hand_over(&mut self, mapper: &mut Mapper, answers: &[Value]) -> Result<(), Failure> {
        let mut out = Vec::new();
        for answer in answers {
            if let Some(error) = answer.get("error") {
                mapper.rpc_error(error, &mut out);
            } else if let Some(result) = answer.get("result") {
                mapper.result(result, &mut out);
            } else {
                tracing::warn!(agent = %self.agent.id, "skipping an A2A frame that is no JSON-RPC response");
            }
        }
        if let (Some(c), Some(task)) = (&mut self.cancel, mapper.task_id()) {
            c.task = Some(task.to_owned());
        }
        if out.is_empty() {
            return Ok(());
        }
        if !std::mem::replace(&mut self.seen_any, true) {
            self.slot.first_event();
            *self.kept = None;
            if let Some(n) = self.note.take() {
                out.insert(1, n);
            }
        }
        self.tx.send(out).await.map_err(|_| None)
    }

    /// A resume that only declines: `CancelTask` each task, end the run.
    async fn cancel_only(
        &mut self,
        card: &Card,
        tasks: &[String],
        mapper: &mut Mapper,
    ) -> Result<(), Failure> {
        for task in tasks {
            let rpc = cancel_request(task);
            let first = Instant::now() + self.agent.timeouts.first_event;
            let response = self.post(card, &rpc, HeaderMap::new(), first).await?;
            let _ = response.bytes().await;
        }
        let mut out = Vec::new();
        mapper.finish_plain(&mut out);
        self.seen_any = true;
        self.slot.first_event();
        *self.kept = None;
        self.tx.send(out).await.map_err(|_| None)
    }
}

fn cancel_request(task: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": format!("cancel-{task}"), "method": "CancelTask",
        "params": {"id": task}})
}

/// Sends `CancelTask` for `task` when dropped with one set (see the module
/// doc).
struct CancelOnDrop {
    http: reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    task: Option<String>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let request = self
            .http
            .post(self.url.clone())
            .headers(std::mem::take(&mut self.headers))
            .header(VERSION_HEADER, VERSION)
            .timeout(CANCEL_WAIT)
            .json(&cancel_request(&task));
        runtime.spawn(async move {
            match request.send().await {
                Ok(r) => {
                    tracing::info!(task = %task, status = r.status().as_u16(), "A2A task cancelled")
                }
                Err(e) => tracing::warn!(task = %task, "A2A CancelTask failed: {}", describe(&e)),
            }
        });
    }
}
