//! Runs on a thread: at most one active, the others rejected, queued, or
//! pre-empting it, per the agent's strategy.
//!
//! "At most one" holds across nodes: before a run is accepted it takes the
//! thread's lease ([`crate::store::lease`]), and its appends are fenced by
//! it. A run active on another node is cancelled by a request to that node;
//! a request queued here starts when that run's terminal event arrives.
//!
//! Where a run starts from is [`super::branch`]; what it is sent and what
//! its journal opens with, [`super::run_input`]; how its task reads the
//! agent and journals what it sends, [`super::drive`].

use super::branch::admit;
use super::drive::{drive, fence_of};
use super::fanout::{Outbox, Outgoing};
use super::recent::Recent;
use super::run_input::{PreparedInput, build_input};
use super::{Entry, Inner, Thread};
use crate::protocol::event::run_error;
use crate::protocol::fold::RunStatus;
use crate::protocol::hooks::RunInput;
use crate::protocol::interrupts::is_langgraph;
use crate::store::lease::{Acquired, Control, Lease};
use bytes::Bytes;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub use super::request::{BaseRequest, RunRefused, RunRequest, Started};
pub use crate::config::Strategy;

struct ActiveRun {
    run_id: String,
    cancel: CancellationToken,
    /// The agent's `on_disconnect = "cancel"`.
    cancel_when_unwatched: bool,
    /// The thread's lease; `None` while it is being acquired (the slot is
    /// reserved meanwhile, so this node starts nothing else).
    lease: Option<Lease>,
}

/// The thread's run state.
pub(super) struct RunSlot {
    active: Option<ActiveRun>,
    queue: VecDeque<RunRequest>,
    /// The run that answered the pending interrupts, until it ends.
    resume_claimed: Option<String>,
    /// The runIds this thread has accepted (the latest [`RUN_IDS_KEPT`]): a
    /// reused id would make two replies fold into one, so it is refused.
    used_ids: Recent<()>,
    /// Since when the store has failed the first queued run's lease
    /// requests, and the wait before the next one (see [`Thread::start_queued`]).
    start_failing: Option<(std::time::Instant, std::time::Duration)>,
}

/// Why a thread refuses runs while its journal recovers ([`super::recovery`]).
const JOURNAL_RECOVERING: &str = "the journal failed a write on this thread; its run was stopped and the thread takes runs again once the journal works (see /readyz)";

/// How often a run queued behind another node's run asks for the lease
/// again, should the notice of its release be missed.
const QUEUED_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

/// The first wait before a queued run asks again for a lease the store
/// failed to answer; doubled on each failure up to [`QUEUED_RETRY`].
const QUEUED_ERROR_RETRY: std::time::Duration = std::time::Duration::from_millis(50);

/// How many of a thread's latest runIds are remembered for the reuse check.
pub const RUN_IDS_KEPT: usize = 4096;

impl Default for RunSlot {
    fn default() -> Self {
        RunSlot {
            active: None,
            queue: VecDeque::new(),
            resume_claimed: None,
            used_ids: Recent::new(RUN_IDS_KEPT),
            start_failing: None,
        }
    }
}

impl RunSlot {
    /// Records a runId seen in the journal (or its compacted base).
    pub(super) fn remember(&mut self, run_id: &str) {
        self.used_ids.insert(run_id.to_owned(), ());
    }

    /// The runIds remembered (kept in the compacted base), oldest first.
    pub(super) fn used_ids(&self) -> impl Iterator<Item = &String> {
        self.used_ids.keys()
    }

    /// A run is active here (or its lease is being asked for).
    pub(super) fn has_active(&self) -> bool {
        self.active.is_some()
    }

    /// Stops the run launched here as if its lease were lost (its task ends
    /// it); its id, if there is one.
    pub(super) fn stop_launched(&self) -> Option<String> {
        let active = self.active.as_ref()?;
        active.lease.as_ref()?.lost.cancel();
        Some(active.run_id.clone())
    }

    /// No run active or waiting.
    pub(super) fn is_idle(&self) -> bool {
        self.active.is_none() && self.queue.is_empty()
    }

    /// Whether the run slot was handed over to a run that has not started
    /// yet: the journal's open run (`open`) is not the one holding the
    /// slot. Its terminal event then leaves the thread running, and a
    /// shared store keeps the lease for the run that follows.
    pub(super) fn handed_over(&self, open: Option<&str>) -> bool {
        self.active
            .as_ref()
            .is_some_and(|a| a.lease.is_some() && open.is_some_and(|o| o != a.run_id))
    }

    /// Cancels the active run, if any (the journal failed: nothing it does
    /// could be stored).
    pub(super) fn cancel_active(&self) {
        if let Some(active) = &self.active {
            active.cancel.cancel();
        }
    }
}

/// The run id a sweeper's lease names (it closes a stopped node's run).
pub(super) const CLOSER: &str = "gateway-closer";

/// How often a run that found a sweeper's lease on its thread asks again.
/// A sweeper holds the lease for a store round trip when the thread it
/// listed turns out not to be abandoned (its run ended between the
/// sweeper's two reads), and for one append when it closes a stopped
/// node's run: either way briefly, and never past a lease's life.
const CLOSER_RETRY: std::time::Duration = std::time::Duration::from_millis(25);

/// What [`Thread::start_run`] does before asking for the lease again.
enum Retry {
    /// Cancel this run on the node running it (the interrupt strategy).
    CancelElsewhere(String),
    /// The store's journal moved on: read it back, decide again.
    ReadBack(RunRequest),
    /// A stopped node's run was found open: close it under this lease.
    CloseAbandoned(RunRequest, Lease),
    /// A sweeper holds the thread (closing what a stopped node left, or
    /// finding nothing to close): ask again once it is done.
    AfterCloser(RunRequest),
}

/// How [`Thread::admit`] took a request.
enum Admitted {
    /// The slot is reserved for it; the lease comes next. Carries the last
    /// seq this copy decided on.
    Reserved(u64, Box<RunRequest>),
    /// Queued behind this many (a run is active on this node).
    Queued(usize),
}

impl Thread {
    /// Starts `req` now, queues it, or refuses it, per `strategy`.
    ///
    /// A resume must answer exactly the pending interrupts (AG-UI has no
    /// partial resume); the first valid answer claims them, so a second one
    /// gets `conflict` even before the resumed run has started — on any
    /// node: the lease is granted only on the journal the decision was made
    /// on, so a node whose copy lags reads back and decides again.
    pub async fn start_run(
        self: &Arc<Self>,
        mut req: RunRequest,
        strategy: Strategy,
    ) -> Result<Started, RunRefused> {
        // Waiting for a sweeper is not one of the three tries: it is not
        // the thread changing under the run, and it ends within a lease's
        // life (a sweeper that died holding it lets it lapse).
        let closer_deadline = tokio::time::Instant::now() + self.leases.patience();
        let mut tries = 0;
        while tries < 3 {
            let (seen, reserved) = match self.admit(req, strategy)? {
                Admitted::Queued(n) => return Ok(Started::Queued(n)),
                Admitted::Reserved(seen, reserved) => (seen, *reserved),
            };
            req = reserved;
            let acquired = self
                .leases
                .acquire(
                    &self.key,
                    &req.run_id,
                    seen,
                    (&self.creator(), Some(&req.agent.id)),
                )
                .await;
            if matches!(acquired, Ok(Acquired::Held { .. })) {
                // Between the store's answer and this copy's lock: the
                // holder's run may end here, its end arriving before the
                // request is queued (see the `Strategy::Enqueue` arm).
                crate::fault::point("run.lease_held").await;
            }
            // What to do once the lock is released (nothing awaits under it).
            let then: Retry = {
                let mut inner = self.lock();
                let reserved_for_me = inner
                    .runs
                    .active
                    .as_ref()
                    .is_some_and(|a| a.run_id == req.run_id && a.lease.is_none());
                if !reserved_for_me {
                    // Pre-empted (interrupt strategy) while the lease was asked for.
                    if let Ok(Acquired::Granted(lease) | Acquired::Abandoned(lease)) = &acquired {
                        self.leases.release(&self.key, lease);
                    }
                    return Err(RunRefused::Conflict(
                        "the run was cancelled before it started".into(),
                    ));
                }
                match acquired {
                    Ok(Acquired::Granted(lease)) => {
                        self.launch(&mut inner, req, lease);
                        return Ok(Started::Now);
                    }
                    Ok(Acquired::Held { run_id }) => {
                        self.unreserve(&mut inner, &req);
                        match strategy {
                            Strategy::Reject
                                if run_id == CLOSER
                                    && tokio::time::Instant::now() < closer_deadline =>
                            {
                                Retry::AfterCloser(req)
                            }
                            Strategy::Reject if run_id == CLOSER => {
                                return Err(RunRefused::Conflict(
                                    "the thread is being closed after a stopped gateway node; retry".into(),
                                ));
                            }
                            Strategy::Reject => {
                                return Err(RunRefused::Conflict(format!(
                                    "run '{run_id}' is still active on this thread"
                                )));
                            }
                            Strategy::Enqueue => {
                                self.queue(&mut inner, req, false);
                                let queued = inner.runs.queue.len();
                                // Asked again at once, not only when the
                                // holder's end arrives: it may have arrived
                                // while the store's answer was on its way,
                                // and a queued run waiting for an end
                                // already seen waited forever. Still held,
                                // it waits as every queued run does (the
                                // end, or a retry every `QUEUED_RETRY`).
                                self.start_queued(&mut inner);
                                return Ok(Started::Queued(queued));
                            }
                            Strategy::Interrupt => {
                                self.queue(&mut inner, req, true);
                                Retry::CancelElsewhere(run_id)
                            }
                        }
                    }
                    Ok(Acquired::Stale) => {
                        self.unreserve(&mut inner, &req);
                        Retry::ReadBack(req)
                    }
                    Ok(Acquired::Abandoned(lease)) => {
                        self.unreserve(&mut inner, &req);
                        Retry::CloseAbandoned(req, lease)
                    }
                    Err(e) => {
                        self.unreserve(&mut inner, &req);
                        return Err(RunRefused::Unavailable(format!(
                            "cannot start a run now: {e}"
                        )));
                    }
                }
            };
            match then {
                Retry::CancelElsewhere(run_id) => {
                    // Queued first; it starts when that run's end arrives —
                    // or now, should the end have arrived already (see the
                    // `Strategy::Enqueue` arm).
                    self.cancel_elsewhere(&run_id).await?;
                    self.start_queued(&mut self.lock());
                    return Ok(Started::Queued(1));
                }
                Retry::ReadBack(stale) => {
                    tries += 1;
                    req = stale;
                    self.read_back().await;
                }
                Retry::CloseAbandoned(again, lease) => {
                    tries += 1;
                    req = again;
                    self.close_under(&lease).await;
                }
                Retry::AfterCloser(again) => {
                    req = again;
                    tokio::time::sleep(CLOSER_RETRY).await;
                    // A sweeper that closed a run appended its end.
                    self.read_back().await;
                }
            }
        }
        Err(RunRefused::Conflict(
            "the thread kept changing while the run was being started; try again".into(),
        ))
    }

    /// The checks of [`Thread::start_run`] on this copy, under its lock:
    /// refuses, queues behind a run active here, or reserves the slot.
    fn admit(&self, mut req: RunRequest, strategy: Strategy) -> Result<Admitted, RunRefused> {
        let mut inner = self.lock();
        if inner.recovering {
            return Err(RunRefused::Unavailable(JOURNAL_RECOVERING.into()));
        }
        let base = admit(self, &req, &inner)?;
        let interrupts = base.interrupts(&inner.fold);
        let pending: Vec<String> = interrupts
            .iter()
            .filter_map(|i| i.get("id").and_then(Value::as_str).map(str::to_owned))
            .collect();
        if req.input.has_resume() {
            if inner.runs.resume_claimed.is_some() {
                return Err(RunRefused::Conflict(
                    "the interrupts were already answered".into(),
                ));
            }
            if pending.is_empty() {
                return Err(RunRefused::Conflict(
                    "the thread has no pending interrupts".into(),
                ));
            }
            let langgraph = check_resume(&req.input, interrupts)?;
            if langgraph && req.agent.langgraph_resume_command {
                req.input.set_langgraph_command();
            }
        } else if !pending.is_empty() {
            // A LangGraph frontend answers with `forwardedProps.command.resume`.
            let hint = if interrupts.iter().any(is_langgraph) {
                " (to let LangGraph frontends answer the LangGraph way, configure the agent with interrupts = \"agent\")"
            } else {
                ""
            };
            return Err(RunRefused::Conflict(format!(
                "the thread has pending interrupts ({}); answer them with resume{hint}",
                pending.join(", ")
            )));
        }
        if let Some(active) = &inner.runs.active
            && strategy == Strategy::Reject
        {
            // Only a run that holds the thread is named: one whose lease is
            // still being asked for may yet be refused itself.
            return Err(RunRefused::Conflict(match &active.lease {
                Some(_) => format!("run '{}' is still active on this thread", active.run_id),
                None => "another run is being started on this thread; retry".into(),
            }));
        }
        if inner.runs.used_ids.contains(&req.run_id) {
            return Err(RunRefused::Conflict(format!(
                "runId '{}' was already used on this thread; every run needs a fresh runId",
                req.run_id
            )));
        }
        if req.input.has_resume() {
            inner.runs.resume_claimed = Some(req.run_id.clone());
        }
        let Some(active) = &inner.runs.active else {
            inner.runs.active = Some(ActiveRun {
                run_id: req.run_id.clone(),
                cancel: CancellationToken::new(),
                cancel_when_unwatched: false,
                lease: None,
            });
            return Ok(Admitted::Reserved(inner.next_seq - 1, Box::new(req)));
        };
        let interrupt = strategy == Strategy::Interrupt;
        if interrupt {
            active.cancel.cancel();
        }
        self.queue(&mut inner, req, interrupt);
        Ok(Admitted::Queued(if interrupt {
            1
        } else {
            inner.runs.queue.len()
        }))
    }

    /// Frees a slot reserved by [`Thread::admit`] whose lease was not granted.
    fn unreserve(&self, inner: &mut Inner, req: &RunRequest) {
        inner.runs.active = None;
        if inner.runs.resume_claimed.as_deref() == Some(&req.run_id) {
            inner.runs.resume_claimed = None;
        }
    }

    /// Queues `req` (first when it pre-empts); its runId counts as used.
    fn queue(&self, inner: &mut Inner, req: RunRequest, first: bool) {
        inner.runs.used_ids.insert(req.run_id.clone(), ());
        if req.input.has_resume() {
            inner.runs.resume_claimed = Some(req.run_id.clone());
        }
        if first {
            inner.runs.queue.push_front(req);
        } else {
            inner.runs.queue.push_back(req);
        }
    }

    /// Asks the node running `run_id` on this thread to cancel it.
    async fn cancel_elsewhere(&self, run_id: &str) -> Result<(), RunRefused> {
        self.leases
            .send(Control::Cancel {
                key: self.key.clone(),
                run_id: run_id.to_owned(),
            })
            .await
            .map_err(|e| RunRefused::Unavailable(format!("cannot reach the other nodes: {e}")))
    }

    /// Starts the first queued request if nothing runs here, once its lease
    /// is granted (a run on another node keeps it queued until that run's
    /// terminal event arrives).
    pub(super) fn start_queued(&self, inner: &mut Inner) {
        // After a journal failure, queued runs wait for the recovery, which
        // starts them once the cut-short run is closed.
        if inner.runs.active.is_some() || inner.runs.queue.is_empty() || inner.recovering {
            return;
        }
        let Some(me) = self.me.upgrade() else { return };
        let req = inner.runs.queue.pop_front().expect("checked");
        inner.runs.active = Some(ActiveRun {
            run_id: req.run_id.clone(),
            cancel: CancellationToken::new(),
            cancel_when_unwatched: false,
            lease: None,
        });
        let seen = inner.next_seq - 1;
        tokio::spawn(async move {
            let acquired = me
                .leases
                .acquire(
                    &me.key,
                    &req.run_id,
                    seen,
                    (&me.creator(), Some(&req.agent.id)),
                )
                .await;
            let read_back = {
                let mut inner = me.lock();
                let reserved = inner
                    .runs
                    .active
                    .as_ref()
                    .is_some_and(|a| a.run_id == req.run_id && a.lease.is_none());
                if acquired.is_ok() && reserved {
                    inner.runs.start_failing = None;
                }
                let stale = match acquired {
                    Ok(Acquired::Granted(lease) | Acquired::Abandoned(lease)) if !reserved => {
                        me.leases.release(&me.key, &lease);
                        return;
                    }
                    Ok(Acquired::Granted(lease)) => {
                        me.launch(&mut inner, req, lease);
                        return;
                    }
                    Ok(Acquired::Abandoned(lease)) => {
                        // Closed first (not under the lock), then asked again.
                        inner.runs.active = None;
                        inner.runs.queue.push_front(req);
                        let closer = me.clone();
                        tokio::spawn(async move {
                            closer.close_under(&lease).await;
                            let mut inner = closer.lock();
                            closer.start_queued(&mut inner);
                        });
                        return;
                    }
                    _ if !reserved => return,
                    // Waits for that lease's release (or expiry: tried again
                    // after a while in case the notice was missed).
                    Ok(Acquired::Held { .. }) => {
                        let retry = me.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(QUEUED_RETRY).await;
                            let mut inner = retry.lock();
                            retry.start_queued(&mut inner);
                        });
                        false
                    }
                    Ok(Acquired::Stale) => true,
                    Err(e) => {
                        // The store failed to answer (a lost connection, a
                        // failover): ask again soon, keeping this run first
                        // in line, so no later run overtakes it once the
                        // store answers; past the leases' patience the run
                        // is refused, never left waiting unseen.
                        let now = std::time::Instant::now();
                        let (since, wait) = *inner
                            .runs
                            .start_failing
                            .get_or_insert((now, QUEUED_ERROR_RETRY));
                        if since.elapsed() >= me.leases.patience() {
                            inner.runs.start_failing = None;
                            inner.runs.active = None;
                            tracing::error!(tenant = %me.key.tenant, thread = %me.key.thread_id, run = %req.run_id, "queued run refused: the store failed every lease request for {:?}: {e}", since.elapsed());
                            me.refuse_queued(
                                &mut inner,
                                req,
                                "unavailable",
                                "the queued run could not start: the store shared with the other gateway nodes kept failing; retry",
                            );
                            me.start_queued(&mut inner);
                            return;
                        }
                        tracing::warn!(thread = %me.key.thread_id, run = %req.run_id, "queued run waits: the store failed the lease request; asking again in {wait:?}: {e}");
                        inner.runs.start_failing = Some((since, (wait * 2).min(QUEUED_RETRY)));
                        let retry = me.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(wait).await;
                            let mut inner = retry.lock();
                            retry.start_queued(&mut inner);
                        });
                        false
                    }
                };
                inner.runs.active = None;
                inner.runs.queue.push_front(req);
                stale
            };
            if read_back {
                me.read_back().await;
                let mut inner = me.lock();
                me.start_queued(&mut inner);
            }
        });
    }

    /// A terminal event was just published (under the lock, before any
    /// viewer can have it). When it ends the run active on this node, the
    /// run's slot and lease are given back now — not when its task has
    /// finished its bookkeeping — so a run sent on that terminal event is
    /// never refused as `conflict`. Then a queued run may start.
    ///
    /// A journal past `max_events` is compacted by the run's task once the
    /// run is over, its base serialized outside the lock ([`compaction`]).
    /// When a queued run starts in this very step, that would be too late
    /// (the task finds the next run going and leaves the journal), and so
    /// it was if the previous run's end left it to its task too and it has
    /// not been done since (a run was sent in between): then it is done
    /// here, under the lock, so the base is this run's end and the next
    /// run's events come after it. A journal so holds at most two runs
    /// past its cap.
    ///
    /// [`compaction`]: super::compaction
    pub(super) fn terminal_published(&self, inner: &mut Inner) {
        let ended = inner.runs.active.as_ref().is_some_and(|active| {
            active.lease.is_some()
                && inner
                    .fold
                    .run()
                    .is_some_and(|r| r.run_id == active.run_id && r.status != RunStatus::Running)
        });
        if ended && let Some(run) = inner.runs.active.take() {
            if inner.runs.resume_claimed.as_deref() == Some(&run.run_id) {
                inner.runs.resume_claimed = None;
            }
            if let Some(lease) = &run.lease {
                self.leases.release(&self.key, lease);
            }
            let now = !inner.runs.queue.is_empty() || inner.compaction_deferred;
            if !now {
                inner.compaction_deferred =
                    inner.fold.seq.saturating_sub(inner.base_seq) > self.settings.max_events as u64;
            } else if let Some(ack) = self.compaction(inner, false) {
                let thread_id = self.key.thread_id.clone();
                tokio::spawn(async move {
                    if let Ok(Err(e)) = ack.await {
                        tracing::error!(thread = %thread_id, "journal compaction failed: {e}");
                    }
                });
            }
        }
        self.start_queued(inner);
    }

    /// Ends a queued run that will not start (the store kept failing its
    /// lease requests): it was never journaled, so its HTTP requester is
    /// told directly with `RUN_ERROR unavailable`, a WebSocket requester
    /// with an `error` frame naming the run (and the refusal is logged as an
    /// error).
    fn refuse_queued(&self, inner: &mut Inner, req: RunRequest, code: &str, message: &str) {
        if inner.runs.resume_claimed.as_deref() == Some(&req.run_id) {
            inner.runs.resume_claimed = None;
        }
        let error = run_error(code, message);
        if let Some(outbox) = &req.starter {
            outbox.push_replay(Outgoing::Event(Arc::new(Entry::new(
                self.id.clone(),
                0,
                error,
            ))));
        }
        self.tell_requester(
            req.requester_connection.as_ref(),
            &req.run_id,
            code,
            message,
        );
    }

    /// Tells a WebSocket requester (`connection`) that its run `run_id`
    /// ended with nothing in the journal to say so (refused once queued,
    /// or stopped before its first event was stored): an `error` frame
    /// naming the run, as the ack it got named it.
    pub(super) fn tell_requester(
        &self,
        connection: Option<&Arc<Outbox>>,
        run_id: &str,
        code: &str,
        message: &str,
    ) {
        if let Some(connection) = connection {
            let frame = json!({
                "type": "error",
                "code": code,
                "threadId": self.key.thread_id,
                "runId": run_id,
                "message": message,
            });
            connection.push(Outgoing::Message(Bytes::from(frame.to_string())));
        }
    }

    /// Another node released this thread's lease: a run queued here may
    /// start now.
    pub fn lease_released(&self) {
        let mut inner = self.lock();
        self.start_queued(&mut inner);
    }

    /// Cancels the active run (only `run_id`'s, when given, so a stale cancel
    /// never stops a newer run), on this node or, through the store, on the
    /// node running it. Returns the cancelled run's id.
    pub async fn cancel_run(&self, run_id: Option<&str>) -> Result<Option<String>, RunRefused> {
        if let Some(cancelled) = self.cancel_here(run_id) {
            return Ok(Some(cancelled));
        }
        let recovering = self.lock().recovering;
        if recovering && self.open_run().is_some() {
            // Already stopped; closed with RUN_ERROR journal_unavailable
            // once the journal takes writes again.
            return Err(RunRefused::Unavailable(JOURNAL_RECOVERING.into()));
        }
        if !self.leases.shared() {
            return Ok(None);
        }
        // Running elsewhere, as far as the journal tells.
        let running = {
            let inner = self.lock();
            inner
                .fold
                .run()
                .filter(|r| r.status == RunStatus::Running)
                .map(|r| r.run_id.clone())
        };
        match running {
            Some(r) if run_id.is_none_or(|id| id == r) => {
                self.cancel_elsewhere(&r).await?;
                Ok(Some(r))
            }
            _ => Ok(None),
        }
    }

    /// Cancels the run active on this node (only `run_id`'s, when given).
    pub fn cancel_here(&self, run_id: Option<&str>) -> Option<String> {
        let inner = self.lock();
        let active = inner.runs.active.as_ref()?;
        if run_id.is_some_and(|r| r != active.run_id) {
            return None;
        }
        active.cancel.cancel();
        Some(active.run_id.clone())
    }

    /// Called when a viewer left: cancels the active run if nobody watches
    /// any more and its agent says `on_disconnect = "cancel"`.
    pub fn viewer_left(&self) {
        let mut inner = self.lock();
        inner.viewers.retain(|v| !v.outbox.is_closed());
        if inner.viewers.is_empty()
            && inner.catching_up.is_empty()
            && let Some(active) = inner
                .runs
                .active
                .as_ref()
                .filter(|a| a.cancel_when_unwatched)
        {
            tracing::info!(thread = %self.key.thread_id, run = %active.run_id, "last viewer left: cancelling (on_disconnect = cancel)");
            active.cancel.cancel();
        }
    }

    /// Runs active or queued on this node for this thread.
    pub fn runs_here(&self) -> usize {
        let inner = self.lock();
        usize::from(inner.runs.active.is_some()) + inner.runs.queue.len()
    }

    /// Drops the queued runs and cancels the active one; returns 1 if one was
    /// active. (A queued run's requester sees its stream end without events.)
    pub fn cancel_all_here(&self) -> usize {
        let mut inner = self.lock();
        // Never started, so never journaled: an HTTP requester waiting for
        // one is told plainly instead of seeing its stream just end.
        for queued in inner.runs.queue.drain(..) {
            if let Some(outbox) = &queued.starter {
                let error = run_error(
                    "unavailable",
                    "this gateway node shut down before the queued run started; retry",
                );
                outbox.push_replay(Outgoing::Event(Arc::new(Entry::new(
                    self.id.clone(),
                    0,
                    error,
                ))));
            }
        }
        match &inner.runs.active {
            Some(active) => {
                active.cancel.cancel();
                1
            }
            None => 0,
        }
    }

    /// The active run's id, if any.
    pub fn active_run(&self) -> Option<String> {
        self.lock().runs.active.as_ref().map(|a| a.run_id.clone())
    }

    /// Closes what a stopped node left open on this thread, under `lease`
    /// (granted over it: [`Acquired::Abandoned`]); the closing batch ends a
    /// run, which gives the lease back in the same store step, and the
    /// caller asks for a lease of its own again. A close that fails leaves
    /// the thread as it was (the lease is released; the sweeper or the next
    /// request tries again).
    async fn close_under(&self, lease: &Lease) {
        crate::fault::point("run.abandoned_leased").await;
        if let Err(e) = self
            .close_abandoned(super::abandoned::NODE_LOST, true, fence_of(lease))
            .await
        {
            tracing::warn!(thread = %self.key.thread_id, "closing a stopped node's run failed: {e}");
        }
        self.leases.release(&self.key, lease);
    }

    /// Starts `req` under `lease` (the slot is this node's, cluster-wide).
    fn launch(self: &Arc<Self>, inner: &mut Inner, req: RunRequest, lease: Lease) {
        inner.runs.used_ids.insert(req.run_id.clone(), ());
        if req.input.has_resume() {
            inner.runs.resume_claimed = Some(req.run_id.clone());
        }
        // Resolved again: the head may have moved while the run was queued.
        let base = match admit(self, &req, inner) {
            Ok(base) => base,
            Err(refused) => {
                self.leases.release(&self.key, &lease);
                inner.runs.active = None;
                tracing::warn!(tenant = %self.key.tenant, thread = %self.key.thread_id, run = %req.run_id, "run refused at its start: {refused}");
                self.refuse_queued(inner, req, refused.code(), &refused.to_string());
                self.start_queued(inner);
                return;
            }
        };
        let prepared = build_input(&self.key.thread_id, inner, &req, &base);
        inner.meta.agent = Some(req.agent.id.clone());
        let cancel = CancellationToken::new();
        inner.runs.active = Some(ActiveRun {
            run_id: req.run_id.clone(),
            cancel: cancel.clone(),
            cancel_when_unwatched: req.agent.on_disconnect == crate::config::OnDisconnect::Cancel,
            lease: Some(lease.clone()),
        });
        tracing::info!(tenant = %self.key.tenant, thread = %self.key.thread_id, run = %req.run_id, agent = %req.agent.id, "run started");
        let run_id = req.run_id.clone();
        let span = req.span.clone();
        // The run the task is driving (a handoff chains others after it).
        let current = Arc::new(std::sync::Mutex::new(run_id.clone()));
        let run = tokio::spawn(tracing::Instrument::instrument(
            drive(self.clone(), req, prepared, cancel, lease, current.clone()),
            span,
        ));
        tokio::spawn(self.clone().supervise(run_id, current, run));
    }

    /// Passes the slot of `from`, the run active here, to `to`, the run a
    /// handoff starts next. `from`'s terminal event then leaves the slot
    /// taken ([`Thread::terminal_published`] releases only the active
    /// run's), so nothing starts in between and a cancel naming `to` stops
    /// it. `false` when `from` no longer holds the slot, or `to` is a runId
    /// the thread already used.
    pub(super) fn hand_over(&self, from: &str, to: &str) -> bool {
        let mut inner = self.lock();
        if inner.runs.used_ids.contains(to) {
            return false;
        }
        let Some(active) = inner.runs.active.as_mut().filter(|a| a.run_id == from) else {
            return false;
        };
        active.run_id = to.to_owned();
        inner.runs.used_ids.insert(to.to_owned(), ());
        if inner.runs.resume_claimed.as_deref() == Some(from) {
            inner.runs.resume_claimed = None;
        }
        true
    }

    /// Whether `run_id` holds this thread's slot.
    pub(super) fn run_is_slotted(&self, run_id: &str) -> bool {
        self.lock()
            .runs
            .active
            .as_ref()
            .is_some_and(|a| a.run_id == run_id)
    }

    /// What the run a handoff starts is sent and journaled, resolved on the
    /// thread as it stands (the run it follows just ended at the head), in
    /// the slot [`Thread::hand_over`] passed it. A refusal (a thread cap)
    /// leaves the slot to the caller to give back.
    pub(super) fn next_leg(&self, req: &RunRequest) -> Result<PreparedInput, RunRefused> {
        let mut inner = self.lock();
        let base = admit(self, req, &inner)?;
        let prepared = build_input(&self.key.thread_id, &inner, req, &base);
        inner.meta.agent = Some(req.agent.id.clone());
        if let Some(active) = inner.runs.active.as_mut() {
            active.cancel_when_unwatched =
                req.agent.on_disconnect == crate::config::OnDisconnect::Cancel;
        }
        tracing::info!(tenant = %self.key.tenant, thread = %self.key.thread_id, run = %req.run_id, agent = %req.agent.id, "handoff run started");
        Ok(prepared)
    }

    /// Ends a run whose task panicked: without this the thread would stay
    /// "running" (its slot taken) until the process restarts.
    async fn supervise(
        self: Arc<Self>,
        run_id: String,
        current: Arc<std::sync::Mutex<String>>,
        run: tokio::task::JoinHandle<()>,
    ) {
        let Err(e) = run.await else { return };
        if !e.is_panic() {
            return;
        }
        // A handoff may have passed the slot on to another run.
        let run_id = current.lock().map_or(run_id, |current| current.clone());
        tracing::error!(tenant = %self.key.tenant, thread = %self.key.thread_id, run = %run_id, "run task panicked; closing the run with RUN_ERROR internal");
        if self.run_is_open(&run_id) {
            let event = run_error("internal", "the gateway failed while running this run");
            let fence = self
                .lock()
                .runs
                .active
                .as_ref()
                .and_then(|a| fence_of(a.lease.as_ref()?));
            if let Ok(pending) = self.enqueue(vec![event], fence) {
                let _ = self.settle(pending).await;
            }
        }
        self.run_ended(&run_id);
    }

    /// True when the journal's latest run is `run_id` and has not ended.
    pub(super) fn run_is_open(&self, run_id: &str) -> bool {
        self.lock()
            .fold
            .run()
            .is_some_and(|r| r.run_id == run_id && r.status == RunStatus::Running)
    }

    pub(super) fn run_ended(self: &Arc<Self>, run_id: &str) {
        let mut inner = self.lock();
        if inner.runs.resume_claimed.as_deref() == Some(run_id) {
            inner.runs.resume_claimed = None;
        }
        if inner
            .runs
            .active
            .as_ref()
            .is_some_and(|a| a.run_id == run_id)
            && let Some(ended) = inner.runs.active.take()
            && let Some(lease) = &ended.lease
        {
            self.leases.release(&self.key, lease);
        }
        self.start_queued(&mut inner);
    }
}

/// Checks that `input`'s resume answers exactly the `pending` interrupts,
/// none expired; returns whether any came from LangGraph's legacy form.
fn check_resume(input: &RunInput, pending: &[Value]) -> Result<bool, RunRefused> {
    let invalid = |m: String| Err(RunRefused::Invalid(m));
    let entries = input.resume_entries();
    let now = crate::protocol::event::now_millis();
    let mut answered = std::collections::HashSet::new();
    for (n, e) in entries.iter().enumerate() {
        let Some(id) = e.get("interruptId").and_then(Value::as_str) else {
            return invalid(format!("resume[{n}].interruptId is missing"));
        };
        if !matches!(
            e.get("status").and_then(Value::as_str),
            Some("resolved" | "cancelled")
        ) {
            return invalid(format!("resume[{n}].status must be resolved or cancelled"));
        }
        let Some(interrupt) = pending
            .iter()
            .find(|i| i.get("id").and_then(Value::as_str) == Some(id))
        else {
            return invalid(format!(
                "resume[{n}].interruptId '{id}' is not a pending interrupt"
            ));
        };
        if crate::protocol::interrupts::is_expired(interrupt, now) {
            return invalid(format!("interrupt '{id}' has expired"));
        }
        if !answered.insert(id.to_owned()) {
            return invalid(format!("interrupt '{id}' is answered twice"));
        }
    }
    let missing: Vec<&str> = pending
        .iter()
        .filter_map(|i| i.get("id").and_then(Value::as_str))
        .filter(|id| !answered.contains(*id))
        .collect();
    if !missing.is_empty() {
        return invalid(format!(
            "resume must answer every pending interrupt; missing: {}",
            missing.join(", ")
        ));
    }
    Ok(pending
        .iter()
        .any(crate::protocol::interrupts::is_langgraph))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::hooks::EventFilter;
    use crate::protocol::{Event, EventType};
    use crate::thread::{Start, fanout};

    #[test]
    fn a_thread_remembers_its_latest_run_ids_and_no_more() {
        let mut slot = RunSlot::default();
        for i in 0..RUN_IDS_KEPT + 100 {
            slot.remember(&format!("r{i}"));
        }
        assert_eq!(slot.used_ids().count(), RUN_IDS_KEPT);
        assert!(slot.used_ids.contains(&format!("r{}", RUN_IDS_KEPT + 99)));
        assert!(slot.used_ids.contains("r100"));
        assert!(!slot.used_ids.contains("r99"), "the oldest are forgotten");
    }

    /// A filter with a bug: it panics on the first text delta.
    struct Explodes;

    impl EventFilter for Explodes {
        fn filter(&mut self, event: Event) -> Result<Vec<Event>, Box<Event>> {
            assert!(
                *event.kind() != EventType::TextMessageContent,
                "filter bug (deliberate)"
            );
            Ok(vec![event])
        }
    }

    /// The next terminal event a viewer gets (fails instead of hanging).
    async fn next_terminal(rx: &mut fanout::OutboxReceiver) -> Arc<Entry> {
        let wait = async {
            loop {
                match rx.recv().await {
                    Some(Outgoing::Event(e)) if e.event.kind().is_terminal() => return e,
                    Some(_) => continue,
                    None => panic!("viewer closed"),
                }
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(20), wait)
            .await
            .expect("the run never ended")
    }

    #[tokio::test]
    async fn a_panicking_run_is_closed_and_frees_the_thread() {
        let (agent, _threads, t) = crate::thread::demo_thread(1000).await;
        let (ob, mut rx) = fanout::outbox(1 << 20);
        t.subscribe(1, ob, Start::Live, None);
        let req = |run: &str, filter: Option<Box<dyn EventFilter>>| RunRequest {
            filter,
            started_by: None,
            ..crate::thread::request::test_request(
                agent.clone(),
                run,
                vec![json!({"id": format!("u-{run}"), "role": "user", "content": "hi"})],
                Default::default(),
            )
        };
        t.start_run(req("r1", Some(Box::new(Explodes))), Strategy::Reject)
            .await
            .unwrap();
        let end = next_terminal(&mut rx).await;
        assert_eq!(*end.event.kind(), EventType::RunError);
        assert_eq!(end.event.str_field("code"), Some("internal"));
        // The slot is freed: the next run (queued if the old one is still
        // being torn down) starts and finishes.
        t.start_run(req("r2", None), Strategy::Enqueue)
            .await
            .unwrap();
        let end = next_terminal(&mut rx).await;
        assert_eq!(*end.event.kind(), EventType::RunFinished, "{:?}", end.event);
        assert_eq!(end.event.str_field("runId"), Some("r2"));
    }

    #[test]
    fn langgraph_command_survives_any_forwarded_props() {
        for props in [
            json!("str"),
            json!({"command": "oops"}),
            json!({"command": 3, "k": 1}),
            json!(null),
        ] {
            let mut input = RunInput::Incremental {
                messages: vec![],
                tools: vec![],
                context: vec![],
                state: None,
                forwarded_props: Some(props),
                resume: Some(
                    json!([{"interruptId": "i", "status": "resolved", "payload": {"ok": true}}]),
                ),
            };
            input.set_langgraph_command();
            let RunInput::Incremental {
                forwarded_props, ..
            } = input
            else {
                unreachable!()
            };
            assert_eq!(
                forwarded_props.unwrap()["command"]["resume"],
                json!({"ok": true})
            );
        }
    }
}
