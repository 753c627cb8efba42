//! Driving a run: read the agent, journal what it sends, feed the requester.
//!
//! A run's task owns the upstream stream. It appends what the agent sends
//! in small batches (whatever arrived together, up to [`MAX_BATCH`]), so a
//! busy run costs one durable write per read rather than per event, and
//! keeps up to [`PIPELINE`] batches in the journal's hands while it reads on;
//! each reaches the HTTP requester once it is durable, in order. The
//! journal's opening of the run ([`super::opening`]) goes first; the
//! operator's filter sees exactly what would be journaled; a cancel, a lost
//! lease or a failed write ends the run with the right terminal event.
//!
//! A run is a sequence of steps, each a method of [`Leg`], and a node can
//! stop between any two of them: the fault points ([`crate::fault`]) name
//! those seams (`run.batch_enqueued`, `run.end_stored`, `handoff.decided`,
//! …), and whoever takes the thread next closes what was left
//! ([`super::abandoned`]).

use super::fanout::Outgoing;
use super::opening::Opening;
use super::request::{Ended, RunRequest, Then};
use super::requester_feed::RequesterFeed;
use super::run_input::{PreparedInput, restore_thread_id};
use super::staged::{ForRequester, Staged, apply_filter};
use super::{Entry, Thread};
use crate::protocol::event::run_error;
use crate::protocol::handoff::{SignalWatch, UPSTREAM_NOTE, is_gateway_event, transfer_not_made};
use crate::protocol::hooks::{EventFilter, SeenBy, ViewerVisibility};
use crate::protocol::interrupts::InterruptNormalizer;
use crate::protocol::lineage::RunKind;
use crate::protocol::open::OpenEntities;
use crate::protocol::{Event, EventType};
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
/// lost its journal (see [`Thread::journal_lost`]) before it ends as fenced,
/// and, before that, for the batches already in the store's hands.
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
    Stored(StoredBatch),
    Ended,
}

/// A batch's answer from the store, with what the requester gets for each
/// of its events.
type StoredBatch = (Result<Vec<Arc<Entry>>, StoreError>, Vec<ForRequester>);

/// A batch's way through the journal: its acknowledgement, then what the
/// requester gets for it. (One function, so the run's queue of batches
/// holds one concrete future type, unboxed: a box per batch was one more
/// allocation per forwarded event, which `tests/alloc_count.rs` guards.)
async fn settle_batch(
    thread: Arc<Thread>,
    pending: super::PendingAppend,
    originals: Vec<ForRequester>,
) -> StoredBatch {
    (thread.settle(pending).await, originals)
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
    crate::fault::point("run.lease_granted").await;
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
            Leg::start(&thread, req, input, &cancel, &lease, chain).run(),
            span,
        )
        .await
        else {
            break;
        };
        // The source's end is durable and the slot is the target's: a node
        // stopping here leaves a handoff the next taker journals as failed.
        crate::fault::point("handoff.decided").await;
        let run_id = next.run_id.clone();
        chain += 1;
        match thread.next_leg(&next) {
            Ok(input) => {
                crate::fault::point("handoff.target_starting").await;
                leg = Some((*next, input));
            }
            Err(refused) => {
                tracing::warn!(thread = %thread.key.thread_id, run = %run_id, "handoff run refused at its start: {refused}");
                // The source ended handing over: the thread must not stay
                // running for a target that will never start.
                let why = super::abandoned::Abandoned {
                    code: refused.code(),
                    message: &refused.to_string(),
                };
                if let Err(e) = thread.close_abandoned(why, true, fence_of(&lease)).await {
                    tracing::warn!(thread = %thread.key.thread_id, "journaling the refused handoff failed: {e}");
                }
                last = run_id;
            }
        }
    }
    // Usually a no-op: the slot went with the terminal event's publication
    // ([`Thread::terminal_published`]); not when the run ended unjournaled
    // or a handoff it was passed to did not start.
    thread.run_ended(&last);
    crate::fault::point("run.lease_released").await;
    thread.maybe_compact().await;
}

/// One run of a run's task (a leg: a handoff chains several in one slot),
/// with everything it keeps between two steps.
struct Leg<'a> {
    thread: &'a Arc<Thread>,
    cancel: &'a CancellationToken,
    lease: &'a Lease,
    chain: usize,
    agent: Arc<crate::upstream::Agent>,
    run_id: String,
    thread_id: String,
    opening: Opening,
    /// The requester's outbox, kept to notice it leave.
    starter: Option<Arc<super::fanout::Outbox>>,
    /// A WebSocket requester's connection (told directly when the run ends
    /// with nothing journaled).
    requester_connection: Option<Arc<super::fanout::Outbox>>,
    requester_rules: ViewerVisibility,
    filter: Option<Box<dyn EventFilter>>,
    hook: Option<Arc<dyn super::request::HandoffHook>>,
    signals: SignalWatch,
    interrupts: InterruptNormalizer,
    upstream_thread: Option<String>,
    stream: Option<RunStream>,
    feed: RequesterFeed,
    open: OpenEntities,
    /// The journal's opening is staged (it goes with the first batch).
    started: bool,
    /// A batch of this run was acknowledged by the store.
    journaled: bool,
    /// Set once the run's terminal event is enqueued: nothing more is read,
    /// and the loop ends when the journal has acknowledged everything.
    ending: bool,
    /// The run a handoff starts next (its slot already passed on).
    next: Option<Box<RunRequest>>,
    /// The run ends asking a person to approve its transfer: the call is
    /// answered by the approval's run.
    approval_asked: bool,
    /// The run this one passed its slot to, even when it will not start
    /// (the slot is then given back under that run's id).
    handed_to: Option<String>,
    metrics: Metrics,
}

/// A leg's metrics: its agent's label, when it began, and how it ended (a
/// fixed set of classes).
struct Metrics {
    label: crate::metrics::AgentLabel,
    began: std::time::Instant,
    first_event: bool,
    outcome: &'static str,
}

impl<'a> Leg<'a> {
    /// Takes the run's request apart and starts the upstream request.
    fn start(
        thread: &'a Arc<Thread>,
        req: RunRequest,
        input: PreparedInput,
        cancel: &'a CancellationToken,
        lease: &'a Lease,
        chain: usize,
    ) -> Leg<'a> {
        let RunRequest {
            agent,
            run_id,
            starter,
            filter,
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
        let label = crate::metrics::AgentLabel {
            agent: agent.id.clone(),
        };
        crate::metrics::metrics()
            .runs_started
            .get_or_create(&label)
            .inc();
        // Upstream pools route and keep affinity by tenant and thread.
        let pool_key = crate::upstream::pool::RunKey {
            tenant: thread.key.tenant.clone(),
            thread: thread_id.clone(),
            route,
        };
        let stream = RunStream::start_for(agent.clone(), Some(pool_key), body, upstream_headers);
        Leg {
            thread,
            cancel,
            lease,
            chain,
            opening: Opening {
                thread_id: thread_id.clone(),
                run_id: run_id.clone(),
                journal_input,
                stamp,
                restated,
                incoming: handoff.incoming,
            },
            hook: handoff.hook,
            signals: SignalWatch::default(),
            interrupts: InterruptNormalizer::new(agent.interrupts),
            // The requester's outbox while this task feeds it (the journal
            // takes over if it lags).
            feed: RequesterFeed {
                outbox: starter.clone(),
                seen: SeenBy::new(starter_visibility.clone()),
                run_id: run_id.clone(),
                fence: fence_of(lease),
                store_failed: false,
                staged: Vec::new(),
            },
            requester_rules: starter_visibility,
            starter,
            requester_connection,
            filter,
            upstream_thread,
            stream: Some(stream),
            open: OpenEntities::default(),
            started: false,
            journaled: false,
            ending: false,
            next: None,
            approval_asked: false,
            handed_to: None,
            metrics: Metrics {
                label,
                began: std::time::Instant::now(),
                first_event: true,
                outcome: "gateway_error",
            },
            agent,
            run_id,
            thread_id,
        }
    }

    /// Runs the leg to its end; returns the run a handoff starts next,
    /// whose slot this run has already passed on ([`Thread::hand_over`]).
    async fn run(mut self) -> Option<Box<RunRequest>> {
        // Batches handed to the journal and not yet acknowledged, oldest
        // first: the run reads the agent on while they commit (at most
        // `PIPELINE`), and each reaches the requester once it is durable.
        let mut inflight = FuturesOrdered::new();
        loop {
            if self.ending && inflight.is_empty() {
                break;
            }
            match self.next_step(&mut inflight).await {
                Step::LeaseLost => {
                    self.lease_lost(&mut inflight).await;
                    break;
                }
                Step::StarterGone => self.starter_gone(),
                Step::Stored(stored) => {
                    if !self.delivered(stored).await {
                        self.next = None;
                        break;
                    }
                }
                step @ (Step::Cancel | Step::Ended) => {
                    self.close(&mut inflight, matches!(step, Step::Cancel))
                        .await;
                    break;
                }
                Step::Events(batch) => {
                    let Some((pending, originals)) = self.journal_batch(batch) else {
                        self.next = None;
                        break;
                    };
                    inflight.push_back(settle_batch(self.thread.clone(), pending, originals));
                    if self.ending {
                        crate::fault::point("run.end_enqueued").await;
                    } else {
                        crate::fault::point("run.batch_enqueued").await;
                    }
                }
            }
        }
        self.finish().await
    }

    /// Waits for whatever happens first: a lost lease, a cancel, the
    /// requester leaving, a batch acknowledged, the agent's next events.
    async fn next_step<F: Future<Output = StoredBatch>>(
        &mut self,
        inflight: &mut FuturesOrdered<F>,
    ) -> Step {
        let room = !self.ending && inflight.len() < PIPELINE;
        let starter_gone = async {
            match &self.starter {
                Some(s) => s.closed().await,
                None => std::future::pending().await,
            }
        };
        let upstream_batch = async {
            match self.stream.as_mut() {
                Some(upstream) if room => upstream.next_batch(MAX_BATCH).await,
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = self.lease.lost.cancelled() => Step::LeaseLost,
            _ = self.cancel.cancelled(), if !self.ending => Step::Cancel,
            _ = starter_gone => Step::StarterGone,
            Some(stored) = inflight.next(), if !inflight.is_empty() => Step::Stored(stored),
            batch = upstream_batch => match batch {
                None => Step::Ended,
                Some(batch) => Step::Events(batch),
            },
        }
    }

    /// The lease was lost: the batches already in the store's hands are
    /// answered first — every one the store took was written under this
    /// run's lease, so viewers have it and the requester must too. When
    /// they include the run's end, the run ended as journaled: a fenced end
    /// batch releases the lease in the store, and a heartbeat in between
    /// reads that as lost. Otherwise the run stops: another node closes it
    /// (`gateway_node_lost`), or the store lost its journal.
    async fn lease_lost<F: Future<Output = StoredBatch>>(
        &mut self,
        inflight: &mut FuturesOrdered<F>,
    ) {
        self.stream.take();
        let drained = tokio::time::timeout(LOSS_CHECK, async {
            while let Some(stored) = inflight.next().await {
                if !self.deliver(stored) {
                    return false;
                }
            }
            true
        })
        .await;
        // (A run that handed over keeps its lease for the next leg, so a
        // loss then is real: the next leg is not started, and whoever takes
        // the thread journals the handoff as failed.)
        if drained == Ok(true) && self.ending && self.next.is_none() {
            return;
        }
        self.next = None;
        if drained == Ok(false) {
            return; // the requester was told by the failed batch
        }
        // Lost because the store lost the journal (its lease went with it)?
        // Checking reloads the thread if so; a store that does not answer
        // (the usual reason) is not waited for long.
        let _ = tokio::time::timeout(LOSS_CHECK, self.thread.read_back()).await;
        let why = if self.thread.lost_its_journal(&self.run_id) {
            StoreError::JournalLost
        } else {
            StoreError::Fenced
        };
        tracing::warn!(thread = %self.thread_id, run = %self.run_id, "run lease lost: stopping the run ({why})");
        self.feed.journal_failed(self.thread, &why);
        self.tell_if_unjournaled(&why);
    }

    /// The requester left: its feed stops, and the run is cancelled when
    /// nobody else watches.
    fn starter_gone(&mut self) {
        self.starter = None;
        self.feed.stop();
        if self.thread.viewer_count() == 0 {
            tracing::info!(thread = %self.thread_id, run = %self.run_id, "requester left and nobody is watching: cancelling");
            self.cancel.cancel();
        }
    }

    /// Forwards a stored batch; `false` when the journal failed it.
    fn deliver(&mut self, (stored, originals): StoredBatch) -> bool {
        if let Err(why) = &stored {
            self.tell_if_unjournaled(why);
        }
        self.journaled |= stored.is_ok();
        self.feed.deliver(self.thread, stored, originals)
    }

    /// A run stopped by `why` before anything of it reached the journal:
    /// no closer will ever journal its end, so a WebSocket requester (which
    /// follows the run as a viewer, and was acked its run id) is told here.
    fn tell_if_unjournaled(&mut self, why: &StoreError) {
        if self.journaled {
            return;
        }
        let (code, message) = why_told(why);
        self.thread.tell_requester(
            self.requester_connection.take().as_ref(),
            &self.run_id,
            code,
            message,
        );
    }

    /// [`Leg::deliver`] at its seam: a node stopping between a batch's
    /// acknowledgement and its delivery leaves viewers (who have it) ahead
    /// of the requester (who reconnects from the journal).
    async fn delivered(&mut self, stored: StoredBatch) -> bool {
        let ends = matches!(&stored.0, Ok(entries) if entries.iter().any(|e| e.event.kind().is_terminal()));
        crate::fault::point(if ends {
            "run.end_stored"
        } else {
            "run.batch_stored"
        })
        .await;
        if stored.0.is_ok() && !self.journaled {
            crate::fault::point("run.start_journaled").await;
        }
        self.deliver(stored)
    }

    /// The run was cancelled (`true`) or its stream ended without a
    /// terminal event: what is in flight goes first, in order, then the
    /// run's end is journaled (its opening too, when the agent never
    /// answered, so the user's input is kept).
    async fn close<F: Future<Output = StoredBatch>>(
        &mut self,
        inflight: &mut FuturesOrdered<F>,
        cancelled: bool,
    ) {
        drop(self.stream.take()); // drops the upstream request now
        while let Some(stored) = inflight.next().await {
            if !self.deliver(stored) {
                self.next = None;
                return;
            }
        }
        // Cancelled (or cut short) before a handoff's run began: nothing follows.
        self.next = None;
        let mut closing = Vec::new();
        if !cancelled {
            // RunStream always ends with a terminal event; this is a bug guard.
            closing.push(run_error(
                "internal",
                "upstream stream ended without a terminal event",
            ));
        } else {
            if !self.started {
                // Through the operator rules like any journaled input.
                let (opened, _) =
                    apply_filter(&mut self.filter, self.opening.events(None, "cancelled"));
                closing.extend(opened.into_iter().map(|(e, _)| e));
            }
            closing.extend(self.open.closing());
            closing.extend(self.transfers_not_made("the run was cancelled"));
            closing.push(Event::build(json!({"type": "RUN_FINISHED", "threadId": self.thread_id, "runId": self.run_id, "outcome": {"type": "cancelled"}})));
            self.metrics.outcome = "cancelled";
            tracing::info!(thread = %self.thread_id, run = %self.run_id, "run cancelled");
        }
        let stored = match self.thread.enqueue(closing, self.feed.fence.clone()) {
            Ok(pending) => {
                crate::fault::point("run.end_enqueued").await;
                self.thread.settle(pending).await
            }
            Err(e) => Err(e),
        };
        crate::fault::point("run.end_stored").await;
        self.deliver((stored, Vec::new()));
    }

    /// Stages the agent's next events (see [`Leg::stage`]) and hands them
    /// to the journal; the caller waits for the commit with the others in
    /// flight. `None` when the journal refused them.
    fn journal_batch(
        &mut self,
        batch: Vec<Event>,
    ) -> Option<(super::PendingAppend, Vec<ForRequester>)> {
        self.count_in(batch.len());
        let staged = self.stage(batch);
        // Operator rules, last, over exactly what would be journaled.
        let (mut staged, failed) = apply_filter(&mut self.filter, staged);
        let terminal = failed || staged.iter().any(|(e, _)| e.kind().is_terminal());
        self.watch_signals(&staged);
        if terminal {
            self.decide_handoff(&mut staged);
            let at = staged.len() - 1;
            let why = "the run ended without handing over";
            for result in self.transfers_not_made(why).into_iter().rev() {
                staged.insert(at, (result, ForRequester::Same));
            }
        }
        let mut events = Vec::with_capacity(staged.len());
        let mut originals = Vec::with_capacity(staged.len());
        for (event, original) in staged {
            self.open.track(&event);
            if event.kind().is_terminal() {
                self.metrics.outcome = outcome_of(&event);
            }
            events.push(event);
            originals.push(original);
        }
        let pending = match self.thread.enqueue(events, self.feed.fence.clone()) {
            Ok(pending) => pending,
            Err(e) => {
                self.feed.journal_failed(self.thread, &e);
                self.tell_if_unjournaled(&e);
                return None;
            }
        };
        if terminal {
            self.ending = true;
            drop(self.stream.take()); // the run is over: stop reading the agent
        }
        Some((pending, originals))
    }

    /// Counts the agent's events (and the first one's latency).
    fn count_in(&mut self, n: usize) {
        let metrics = crate::metrics::metrics();
        if std::mem::take(&mut self.metrics.first_event) {
            metrics
                .upstream_first_event
                .get_or_create(&self.metrics.label)
                .observe(self.metrics.began.elapsed().as_secs_f64());
        }
        metrics
            .events_in
            .get_or_create(&self.metrics.label)
            .inc_by(n as u64);
    }

    /// What the journal gets for the agent's events (the opening first, the
    /// input on `RUN_STARTED`, canonical interrupts), and what the HTTP
    /// requester gets instead (see [`ForRequester`]).
    fn stage(&mut self, batch: Vec<Event>) -> Staged {
        let mut staged: Staged = Vec::with_capacity(batch.len() + 2);
        for event in batch {
            let event = match &self.upstream_thread {
                Some(alias) => restore_thread_id(event, alias, &self.thread_id),
                None => event,
            };
            // The gateway's namespace is the gateway's: an agent's
            // handoff request is taken as one, never journaled.
            if is_gateway_event(&event) && event.str_field("name") != Some(UPSTREAM_NOTE) {
                if self.hook.is_some() {
                    self.signals.observe(&event, |_| None);
                }
                continue;
            }
            if !self.started {
                self.started = true;
                if *event.kind() == EventType::RunStarted {
                    staged.extend(self.opening.events(Some(&event), "accepted"));
                    continue;
                }
                staged.extend(self.synthetic_opening(&event));
            }
            // The requester gets what the journal holds (canonical
            // interrupts), so a stock client sees `pendingInterrupts`
            // and resumes as usual.
            let mut journaled = self.interrupts.apply(&event).unwrap_or(event);
            if *journaled.kind() == EventType::RunStarted {
                // A second RUN_STARTED (a lenient verifier passes
                // it) must not name another agent than this run's.
                journaled = self.opening.stamp.apply(&journaled);
            }
            staged.push((journaled, ForRequester::Same));
        }
        staged
    }

    /// The opening of a run whose agent's first event is not its
    /// `RUN_STARTED`: the user's input is journaled even when the agent
    /// failed before starting (a handoff's target that failed so is
    /// recorded as a failed transfer).
    fn synthetic_opening(&mut self, first: &Event) -> Staged {
        let failed = *first.kind() == EventType::RunError;
        if failed {
            self.opening
                .handoff_failed(first.str_field("message").unwrap_or("it did not answer"));
        }
        let mut synthetic = self
            .opening
            .events(None, if failed { "failed" } else { "accepted" });
        for (e, requester) in &mut synthetic {
            // (the handoff's record still goes to the requester)
            if *e.kind() != EventType::Custom {
                *requester = ForRequester::Nothing;
            }
        }
        synthetic
    }

    /// Notes the handoff requests among what is about to be journaled (a
    /// transfer call may come batches before the run's end).
    fn watch_signals(&mut self, staged: &Staged) {
        let Some(hook) = &self.hook else { return };
        for (e, _) in staged {
            self.signals.observe(e, |name| hook.target(name));
        }
    }

    /// Results for the transfer calls of a run that ends without handing
    /// over (and without asking a person to approve the transfer), so the
    /// next turn's history has a result for every call.
    fn transfers_not_made(&self, why: &str) -> Vec<Event> {
        if self.next.is_some() || self.approval_asked {
            return Vec::new();
        }
        self.signals
            .signals()
            .iter()
            .filter_map(|s| {
                let call = s.tool_call_id.as_deref()?;
                Some(transfer_not_made(call, &s.to, why))
            })
            .collect()
    }

    /// A handoff the run asked for, decided before its end is journaled, so
    /// the slot passes on with it: the decision's notes go before the
    /// terminal event, and an approval turns the end into an interrupt.
    fn decide_handoff(&mut self, staged: &mut Staged) {
        let Some(hook) = &self.hook else { return };
        if !ends_well(staged) || self.signals.signals().is_empty() {
            return;
        }
        let ended = Ended {
            thread_id: &self.thread_id,
            run_id: &self.run_id,
            agent: &self.agent.id,
            signals: self.signals.signals(),
            chain: self.chain,
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
                if self.thread.hand_over(&self.run_id, &run.run_id) {
                    if keep_requester && let Some(outbox) = &self.feed.outbox {
                        outbox.push_replay(Outgoing::Continues);
                        run.starter = self.starter.clone();
                        run.starter_visibility = self.requester_rules.clone();
                    }
                    run.requester_connection = self.requester_connection.clone();
                    self.handed_to = Some(run.run_id.clone());
                    self.next = Some(run);
                }
            }
            Then::Ask(interrupt) => {
                self.approval_asked = true;
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

    /// The leg's bookkeeping once it is over: metrics, the close of a run
    /// the store failed, and the slot (kept for the handoff's run only when
    /// this run ended as decided).
    async fn finish(mut self) -> Option<Box<RunRequest>> {
        let metrics = crate::metrics::metrics();
        if self.feed.store_failed {
            self.metrics.outcome = "gateway_error";
        }
        metrics
            .runs_ended
            .get_or_create(&crate::metrics::RunEndLabels {
                agent: self.agent.id.clone(),
                outcome: self.metrics.outcome,
            })
            .inc();
        metrics
            .run_duration
            .get_or_create(&self.metrics.label)
            .observe(self.metrics.began.elapsed().as_secs_f64());
        if self.feed.store_failed && self.thread.shared() {
            close_after_outage(self.thread, &self.run_id, self.lease).await;
        }
        match self.next.take() {
            // Its end was journaled: the handoff's run goes next.
            Some(next) if self.thread.run_is_slotted(&next.run_id) => Some(next),
            // Passed on, but this run did not end as decided: give the slot back.
            Some(next) => {
                self.thread.run_ended(&next.run_id);
                None
            }
            None => {
                let slot = self.handed_to.as_deref().unwrap_or(&self.run_id);
                self.thread.run_ended(slot);
                None
            }
        }
    }
}

/// The code and message a WebSocket requester is told for a run stopped
/// by `why` (the words of [`RequesterFeed::journal_failed`]).
fn why_told(why: &StoreError) -> (&'static str, &'static str) {
    match why {
        StoreError::JournalLost => (
            "journal_lost",
            "the journal store lost this run's events; the run was stopped",
        ),
        StoreError::Fenced => (
            "gateway_node_lost",
            "the gateway node running this run lost its lease; the run was stopped",
        ),
        _ => (
            "journal_unavailable",
            "the gateway could not store this run's events; the run was stopped",
        ),
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
