//! Driving a run: read the agent, journal what it sends, feed the requester.
//!
//! A run's task owns the upstream stream. It appends what the agent sends
//! in small batches (whatever arrived together, up to [`MAX_BATCH`]), so a
//! busy run costs one durable write per read rather than per event, and
//! keeps up to [`PIPELINE`] batches in the journal's hands while it reads on;
//! each reaches the HTTP requester once it is durable, in order. The
//! journal's opening of the run ([`super::run_input`]) goes first; the
//! operator's filter sees exactly what would be journaled; a cancel, a lost
//! lease or a failed write ends the run with the right terminal event.

use super::fanout::Outgoing;
use super::request::{Ended, Incoming, RunRequest, Then};
use super::requester_feed::RequesterFeed;
use super::run_input::{PreparedInput, restore_thread_id};
use super::{Entry, Thread};
use crate::protocol::event::run_error;
use crate::protocol::handoff::{HANDOFF_EVENT, SignalWatch, UPSTREAM_NOTE, is_gateway_event};
use crate::protocol::hooks::{EventFilter, SeenBy};
use crate::protocol::interrupts::InterruptNormalizer;
use crate::protocol::lineage::RunKind;
use crate::protocol::open::OpenEntities;
use crate::protocol::{Event, EventType, PROTOCOL_VERSION};
use crate::store::StoreError;
use crate::store::lease::Lease;
use crate::upstream::RunStream;
use futures::StreamExt;
use futures::stream::FuturesOrdered;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Most events appended in one batch.
const MAX_BATCH: usize = 256;

/// How long a run whose lease was lost waits to learn whether the store
/// lost its journal (see [`Thread::journal_lost`]) before it ends as fenced.
const LOSS_CHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// Batches a run may have in the journal's hands at once.
const PIPELINE: usize = 4;

enum Step {
    /// The thread's lease was lost: another node closes the run; nothing
    /// more can be journaled from here.
    LeaseLost,
    Cancel,
    StarterGone,
    Events(Vec<Event>),
    /// A journaled batch was acknowledged (or failed), with what the
    /// requester gets for each of its events.
    Stored(Result<Vec<Arc<Entry>>, StoreError>, Vec<ForRequester>),
    Ended,
}

/// The agent's next events: whatever arrived together, up to `MAX_BATCH`,
/// ending at a terminal event; `None` when the stream ended.
async fn next_batch(upstream: &mut RunStream) -> Option<Vec<Event>> {
    upstream.next_batch(MAX_BATCH).await
}

/// The fencing token appends carry under `lease` (none for a lease of a
/// single process, which needs no fencing).
pub(super) fn fence_of(lease: &Lease) -> Option<Arc<str>> {
    (!lease.token.is_empty()).then(|| lease.token.clone())
}

/// A run's task: the run, then each run a handoff chains after it in the
/// same slot ([`super::handoff`]), each in its own span.
pub(super) async fn drive(
    thread: Arc<Thread>,
    req: RunRequest,
    input: PreparedInput,
    cancel: CancellationToken,
    lease: Lease,
    current: Arc<std::sync::Mutex<String>>,
) {
    // Handoffs in a row that led to the leg about to run: counted here, not
    // read from the fold, which may not have published the previous leg's
    // start yet (its batch still in the store's hands).
    let mut chain = match &input.stamp {
        s if s.kind == RunKind::Handoff => {
            1 + s.parent.as_deref().map_or(0, |p| thread.handoff_chain(p))
        }
        _ => 0,
    };
    let mut leg = Some((req, input));
    let mut last = String::new();
    while let Some((req, input)) = leg.take() {
        last = req.run_id.clone();
        if let Ok(mut current) = current.lock() {
            current.clone_from(&last);
        }
        let span = req.span.clone();
        let Some(next) = tracing::Instrument::instrument(
            drive_leg(&thread, req, input, &cancel, &lease, chain),
            span,
        )
        .await
        else {
            break;
        };
        let run_id = next.run_id.clone();
        chain += 1;
        match thread.next_leg(&next) {
            Ok(input) => leg = Some((*next, input)),
            Err(refused) => {
                tracing::warn!(thread = %thread.key.thread_id, run = %run_id, "handoff run refused at its start: {refused}");
                last = run_id;
            }
        }
    }
    // Usually a no-op: the slot went with the terminal event's publication
    // ([`Thread::terminal_published`]); not when the run ended unjournaled
    // or a handoff it was passed to did not start.
    thread.run_ended(&last);
    thread.maybe_compact().await;
}

/// The journal's opening of a run: `RUN_STARTED` with the normalized input
/// (the agent's own, when it sent one, goes to the requester), then the
/// edited history, if the client changed a known message, and, for a run
/// that takes the thread over, the handoff's record.
struct Opening {
    thread_id: String,
    run_id: String,
    journal_input: Value,
    stamp: crate::protocol::lineage::Stamp,
    restated: Vec<Event>,
    incoming: Option<Incoming>,
}

impl Opening {
    fn events(&self, agent_start: Option<&Event>, result: &str) -> Staged {
        let start = match agent_start {
            Some(e) => e.modify(|b| {
                b.insert("input".into(), self.journal_input.clone());
            }),
            None => Event::build(
                json!({"type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.run_id,
                    "protocolVersion": PROTOCOL_VERSION, "input": self.journal_input}),
            ),
        };
        // The journal names the run's agent (every reader of the journal
        // judges the run's events by that agent's visibility rules) and its
        // place in the run tree.
        let start = self.stamp.apply(&start);
        // A requester whose run handed over did not send this input: it gets
        // the journal's (it carries the transfer call's result).
        let for_requester = match agent_start {
            Some(_) if self.incoming.is_some() => ForRequester::Same,
            Some(e) => ForRequester::Instead(e.clone()),
            None => ForRequester::Nothing,
        };
        let mut staged: Staged = vec![(start, for_requester)];
        staged.extend(
            self.restated
                .iter()
                .map(|e| (e.clone(), ForRequester::Nothing)),
        );
        if let Some(incoming) = &self.incoming {
            let mut value = incoming.record.clone();
            value["result"] = result.into();
            let record =
                Event::build(json!({"type": "CUSTOM", "name": HANDOFF_EVENT, "value": value}));
            staged.push((record, ForRequester::Same));
        }
        staged
    }

    /// The agent taking the thread over never started (`why`): the transfer
    /// call's result in the journaled input says so, so the next turn's
    /// agent reads a failure, not a transfer that never happened.
    fn handoff_failed(&mut self, why: &str) {
        let Some(incoming) = &self.incoming else {
            return;
        };
        let Some(call) = &incoming.tool_call_id else {
            return;
        };
        let to = incoming.record["toAgent"].as_str().unwrap_or_default();
        if let Some(Value::Array(messages)) = self.journal_input.get_mut("messages") {
            for m in messages.iter_mut() {
                if m.get("toolCallId").and_then(Value::as_str) == Some(call) {
                    m["content"] = format!("The transfer to '{to}' failed: {why}").into();
                }
            }
        }
    }
}

/// One run of a run's task; returns the run a handoff starts next, whose
/// slot this run has already passed on ([`Thread::hand_over`]).
async fn drive_leg(
    thread: &Arc<Thread>,
    req: RunRequest,
    input: PreparedInput,
    cancel: &CancellationToken,
    lease: &Lease,
    chain: usize,
) -> Option<Box<RunRequest>> {
    let RunRequest {
        agent,
        run_id,
        mut starter,
        mut filter,
        starter_visibility,
        upstream_headers,
        handoff,
        requester_connection,
        route,
        ..
    } = req;
    let thread_id = thread.key.thread_id.clone();
    let PreparedInput {
        body,
        journal_input,
        stamp,
        restated,
        upstream_thread,
    } = input;
    let mut opening = Opening {
        thread_id: thread_id.clone(),
        run_id: run_id.clone(),
        journal_input,
        stamp: stamp.clone(),
        restated,
        incoming: handoff.incoming,
    };
    let hook = handoff.hook;
    let mut signals = SignalWatch::default();
    let mut next: Option<Box<RunRequest>> = None;
    let requester_rules = starter_visibility.clone();
    let metrics = crate::metrics::metrics();
    let agent_label = crate::metrics::AgentLabel {
        agent: agent.id.clone(),
    };
    metrics.runs_started.get_or_create(&agent_label).inc();
    let began = std::time::Instant::now();
    let mut first_event = true;
    // How the run ended, for the metrics (a fixed set of classes).
    let mut outcome = "gateway_error";
    // Upstream pools route and keep affinity by tenant and thread.
    let pool_key = crate::upstream::pool::RunKey {
        tenant: thread.key.tenant.clone(),
        thread: thread_id.clone(),
        route,
    };
    let mut stream = Some(RunStream::start_for(
        agent.clone(),
        Some(pool_key),
        body,
        upstream_headers,
    ));
    // The requester's outbox while this task feeds it (the journal takes
    // over if it lags); `starter` itself is kept to notice the requester leave.
    let mut feed = RequesterFeed {
        outbox: starter.clone(),
        seen: SeenBy::new(starter_visibility),
        run_id: run_id.clone(),
        fence: fence_of(lease),
        store_failed: false,
        staged: Vec::new(),
    };
    let mut open = OpenEntities::default();
    let mut started = false;
    let mut interrupts = InterruptNormalizer::new(agent.interrupts);
    // Batches handed to the journal and not yet acknowledged, oldest first:
    // the run reads the agent on while they commit (at most `PIPELINE`), and
    // each reaches the requester once it is durable, in order.
    let mut inflight = FuturesOrdered::new();
    // Set once the run's terminal event is enqueued: nothing more is read,
    // and the loop ends when the journal has acknowledged everything.
    let mut ending = false;
    'run: loop {
        if ending && inflight.is_empty() {
            break;
        }
        let room = !ending && inflight.len() < PIPELINE;
        let step = {
            let starter_gone = async {
                match &starter {
                    Some(s) => s.closed().await,
                    None => std::future::pending().await,
                }
            };
            let upstream_batch = async {
                match stream.as_mut() {
                    Some(upstream) if room => next_batch(upstream).await,
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = lease.lost.cancelled() => Step::LeaseLost,
                _ = cancel.cancelled(), if !ending => Step::Cancel,
                _ = starter_gone => Step::StarterGone,
                Some((stored, originals)) = inflight.next(), if !inflight.is_empty() => {
                    Step::Stored(stored, originals)
                }
                batch = upstream_batch => match batch {
                    None => Step::Ended,
                    Some(batch) => Step::Events(batch),
                },
            }
        };
        match step {
            Step::LeaseLost => {
                // Lost because the store lost the journal (its lease went
                // with it)? Checking reloads the thread if so; a store that
                // does not answer (the usual reason) is not waited for long.
                let _ = tokio::time::timeout(LOSS_CHECK, thread.read_back()).await;
                next = None;
                let why = if thread.lost_its_journal(&run_id) {
                    StoreError::JournalLost
                } else {
                    StoreError::Fenced
                };
                tracing::warn!(thread = %thread_id, run = %run_id, "run lease lost: stopping the run ({why})");
                feed.journal_failed(thread, &why);
                break;
            }
            Step::StarterGone => {
                starter = None;
                feed.stop();
                if thread.viewer_count() == 0 {
                    tracing::info!(thread = %thread_id, run = %run_id, "requester left and nobody is watching: cancelling");
                    cancel.cancel();
                }
            }
            Step::Stored(stored, originals) => {
                if !feed.deliver(thread, stored, originals) {
                    next = None;
                    break;
                }
            }
            Step::Cancel | Step::Ended => {
                drop(stream.take()); // drops the upstream request now
                // What is in flight goes first, in order.
                while let Some((stored, originals)) = inflight.next().await {
                    if !feed.deliver(thread, stored, originals) {
                        break 'run;
                    }
                }
                // Cancelled (or cut short) before a handoff's run began:
                // nothing follows.
                next = None;
                let mut closing = Vec::new();
                if matches!(step, Step::Ended) {
                    // RunStream always ends with a terminal event; this is a bug guard.
                    closing.push(run_error(
                        "internal",
                        "upstream stream ended without a terminal event",
                    ));
                } else {
                    if !started {
                        // Through the operator rules like any journaled input.
                        let (opened, _) =
                            apply_filter(&mut filter, opening.events(None, "cancelled"));
                        closing.extend(opened.into_iter().map(|(e, _)| e));
                    }
                    closing.extend(open.closing());
                    closing.push(Event::build(json!({"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id, "outcome": {"type": "cancelled"}})));
                    outcome = "cancelled";
                    tracing::info!(thread = %thread_id, run = %run_id, "run cancelled");
                }
                feed.journal(thread, closing, Vec::new()).await;
                break;
            }
            Step::Events(batch) => {
                if std::mem::take(&mut first_event) {
                    metrics
                        .upstream_first_event
                        .get_or_create(&agent_label)
                        .observe(began.elapsed().as_secs_f64());
                }
                metrics
                    .events_in
                    .get_or_create(&agent_label)
                    .inc_by(batch.len() as u64);
                // 1. What the journal gets (input on RUN_STARTED, canonical
                //    interrupts), and what the HTTP requester gets instead:
                //    (see [`ForRequester`]).
                let mut staged: Staged = Vec::with_capacity(batch.len() + 2);
                for event in batch {
                    let event = match &upstream_thread {
                        Some(alias) => restore_thread_id(event, alias, &thread_id),
                        None => event,
                    };
                    // The gateway's namespace is the gateway's: an agent's
                    // handoff request is taken as one, never journaled.
                    if is_gateway_event(&event) && event.str_field("name") != Some(UPSTREAM_NOTE) {
                        if hook.is_some() {
                            signals.observe(&event, |_| None);
                        }
                        continue;
                    }
                    if !started {
                        started = true;
                        if *event.kind() == EventType::RunStarted {
                            staged.extend(opening.events(Some(&event), "accepted"));
                            continue;
                        }
                        // Journal the user's input even when the agent failed before starting.
                        let failed = *event.kind() == EventType::RunError;
                        if failed {
                            opening.handoff_failed(
                                event.str_field("message").unwrap_or("it did not answer"),
                            );
                        }
                        let mut synthetic =
                            opening.events(None, if failed { "failed" } else { "accepted" });
                        for (e, requester) in &mut synthetic {
                            // (the handoff's record still goes to the requester)
                            if *e.kind() != EventType::Custom {
                                *requester = ForRequester::Nothing;
                            }
                        }
                        staged.extend(synthetic);
                    }
                    // The requester gets what the journal holds (canonical
                    // interrupts), so a stock client sees `pendingInterrupts`
                    // and resumes as usual.
                    let mut journaled = interrupts.apply(&event).unwrap_or(event);
                    if *journaled.kind() == EventType::RunStarted {
                        // A second RUN_STARTED (a lenient verifier passes
                        // it) must not name another agent than this run's.
                        journaled = stamp.apply(&journaled);
                    }
                    staged.push((journaled, ForRequester::Same));
                }
                // 2. Operator rules, last, over exactly what would be journaled.
                let (mut staged, failed) = apply_filter(&mut filter, staged);
                let terminal = failed || staged.iter().any(|(e, _)| e.kind().is_terminal());
                // 3. A handoff the run asked for: decided before its end is
                //    journaled, so the slot passes on with it.
                if let Some(hook) = &hook {
                    for (e, _) in &staged {
                        signals.observe(e, |name| hook.target(name));
                    }
                    if terminal && ends_well(&staged) && !signals.signals().is_empty() {
                        let ended = Ended {
                            thread_id: &thread_id,
                            run_id: &run_id,
                            agent: &agent.id,
                            signals: signals.signals(),
                            chain,
                        };
                        let decision = hook.decide(&ended);
                        let at = staged.len() - 1;
                        for note in decision.notes.into_iter().rev() {
                            staged.insert(at, (note, ForRequester::Same));
                        }
                        match decision.then {
                            Then::Start {
                                mut run,
                                keep_requester,
                            } => {
                                if thread.hand_over(&run_id, &run.run_id) {
                                    if keep_requester && let Some(outbox) = &feed.outbox {
                                        outbox.push_replay(Outgoing::Continues);
                                        run.starter = starter.clone();
                                        run.starter_visibility = requester_rules.clone();
                                    }
                                    run.requester_connection = requester_connection.clone();
                                    next = Some(run);
                                }
                            }
                            Then::Ask(interrupt) => {
                                let (end, requester) = &mut staged[at];
                                *end = end.modify(|b| {
                                    b.insert(
                                        "outcome".into(),
                                        json!({"type": "interrupt", "interrupts": [interrupt]}),
                                    );
                                });
                                *requester = ForRequester::Same;
                            }
                            Then::End => {}
                        }
                    }
                }
                let mut events = Vec::with_capacity(staged.len());
                let mut originals = Vec::with_capacity(staged.len());
                for (event, original) in staged {
                    open.track(&event);
                    if event.kind().is_terminal() {
                        outcome = outcome_of(&event);
                    }
                    events.push(event);
                    originals.push(original);
                }
                // 3. To the journal, without waiting for the commit.
                match thread.enqueue(events, feed.fence.clone()) {
                    Ok(pending) => {
                        let thread = thread.clone();
                        inflight
                            .push_back(async move { (thread.settle(pending).await, originals) });
                    }
                    Err(e) => {
                        feed.journal_failed(thread, &e);
                        next = None;
                        break;
                    }
                }
                if terminal {
                    ending = true;
                    drop(stream.take()); // the run is over: stop reading the agent
                }
            }
        }
    }
    if feed.store_failed {
        outcome = "gateway_error";
    }
    metrics
        .runs_ended
        .get_or_create(&crate::metrics::RunEndLabels {
            agent: agent.id.clone(),
            outcome,
        })
        .inc();
    metrics
        .run_duration
        .get_or_create(&agent_label)
        .observe(began.elapsed().as_secs_f64());
    if feed.store_failed && thread.shared() {
        close_after_outage(thread, &run_id, lease).await;
    }
    match next {
        // Its end was journaled: the handoff's run goes next.
        Some(next) if thread.run_is_slotted(&next.run_id) => Some(next),
        // Passed on, but this run did not end as decided: give the slot back.
        Some(next) => {
            thread.run_ended(&next.run_id);
            None
        }
        None => {
            thread.run_ended(&run_id);
            None
        }
    }
}

/// Whether a run's last staged events end it well (`RUN_FINISHED`, not
/// interrupted, no `RUN_ERROR`): only such a run hands over.
fn ends_well(staged: &Staged) -> bool {
    let Some((last, _)) = staged.last() else {
        return false;
    };
    *last.kind() == EventType::RunFinished
        && !staged.iter().any(|(e, _)| *e.kind() == EventType::RunError)
        && matches!(
            last.get("outcome")
                .and_then(|o| o.get("type"))
                .and_then(Value::as_str),
            None | Some("success")
        )
}

/// The metrics class of a run's terminal event.
fn outcome_of(terminal: &Event) -> &'static str {
    if *terminal.kind() == EventType::RunError {
        crate::metrics::outcome_class(true, terminal.str_field("code"))
    } else {
        let outcome = terminal
            .get("outcome")
            .and_then(|o| o.get("type"))
            .and_then(Value::as_str);
        crate::metrics::outcome_class(false, outcome)
    }
}

/// Journals `RUN_ERROR journal_unavailable` for a run whose batch the shared
/// store failed (Redis unreachable), retrying with backoff until the store
/// takes it or the run's lease is lost (another node then closes the run
/// with `gateway_node_lost`). The run is not continued: the agent's stream
/// cannot wait for an outage of unknown length, and whether the failed batch
/// landed is unknown — if it did, its events reach every viewer like any
/// others, then this error; if not, no viewer ever saw them.
async fn close_after_outage(thread: &Thread, run_id: &str, lease: &Lease) {
    let mut backoff = std::time::Duration::from_millis(100);
    loop {
        if !thread.run_is_open(run_id) {
            return;
        }
        let error = run_error(
            "journal_unavailable",
            "the gateway could not store this run's events; the run was stopped",
        );
        let stored = match thread.enqueue_closing(vec![error], fence_of(lease)) {
            Ok(pending) => thread.settle(pending).await,
            Err(e) => Err(e),
        };
        match stored {
            Ok(_) => return,
            Err(StoreError::Fenced) => {
                // Another node closed it: bring this copy's viewers the rest.
                thread.read_back().await;
                return;
            }
            Err(_) => {}
        }
        tokio::select! {
            _ = lease.lost.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(std::time::Duration::from_secs(2));
        thread.read_back().await;
    }
}

/// What the HTTP requester gets for a journaled event.
#[derive(Clone)]
pub(super) enum ForRequester {
    /// Nothing: the journal only (input the gateway restates, a synthetic
    /// opening the agent never sent).
    Nothing,
    /// The journaled event itself.
    Same,
    /// The agent's own version of it (its `RUN_STARTED`, before the
    /// gateway normalized the input and stamped it).
    Instead(Event),
}

/// Events about to be journaled, each with what the requester gets for it.
type Staged = Vec<(Event, ForRequester)>;

/// Runs staged events through the run's filter; `true` when the filter ended
/// the run (its terminal event is then the last one). An event the filter
/// left unchanged keeps what the requester gets for it; anything the filter
/// changed or added is sent to the requester as journaled.
fn apply_filter(filter: &mut Option<Box<dyn EventFilter>>, staged: Staged) -> (Staged, bool) {
    let Some(filter) = filter else {
        return (staged, false);
    };
    let mut out = Vec::with_capacity(staged.len());
    for (event, original) in staged {
        let before = event.json().clone();
        match filter.filter(event) {
            Ok(events) => {
                for e in events {
                    let keep = if *e.json() == before {
                        original.clone()
                    } else {
                        ForRequester::Same
                    };
                    out.push((e, keep));
                }
            }
            Err(end) => {
                out.push((*end, ForRequester::Same));
                return (out, true);
            }
        }
    }
    (out, false)
}
