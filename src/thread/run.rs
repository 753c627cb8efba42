//! Runs on a thread: at most one active, the others rejected, queued, or
//! pre-empting it, per the agent's strategy.
//!
//! "At most one" holds across nodes: before a run is accepted it takes the
//! thread's lease ([`crate::store::lease`]), and its appends are fenced by
//! it. A run active on another node is cancelled by a request to that node;
//! a request queued here starts when that run's terminal event arrives.
//!
//! A run's task owns the upstream stream. It appends what the agent sends in
//! small batches (whatever arrived together), so a busy run costs one durable
//! write per read rather than per event. The journal's `RUN_STARTED` carries
//! the run's input with the messages already in history left out, so the fold
//! (and every late joiner) sees the user's new messages too; the HTTP
//! requester still gets the agent's own `RUN_STARTED`, unchanged.

use super::branch::{Base, BaseRequest};
use super::fanout::{Live, Outbox, Outgoing};
use super::recent::Recent;
use super::run_input::{PreparedInput, build_input, restore_thread_id};
use super::{Entry, Inner, Thread};
use crate::protocol::event::run_error;
use crate::protocol::fold::RunStatus;
use crate::protocol::hooks::{EventFilter, RunInput, SeenBy, ViewerVisibility};
use crate::protocol::interrupts::{InterruptNormalizer, is_langgraph};
use crate::protocol::open::OpenEntities;
use crate::protocol::{Event, EventType, PROTOCOL_VERSION};
use crate::store::StoreError;
use crate::store::lease::{Acquired, Control, Lease};
use crate::upstream::{Agent, RunStream};
use bytes::Bytes;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub use crate::config::Strategy;

/// A request to run an agent on a thread.
pub struct RunRequest {
    pub agent: Arc<Agent>,
    pub run_id: String,
    pub input: RunInput,
    /// The HTTP requester's stream: this run's events only.
    pub starter: Option<Arc<Outbox>>,
    /// What the HTTP requester may see.
    pub starter_visibility: ViewerVisibility,
    /// A WebSocket requester's connection: it sees the run as a viewer, and
    /// is told here (an `error` frame naming the run) if the run, queued,
    /// can never start.
    pub requester_connection: Option<Arc<Outbox>>,
    /// Operator rules on the run's events, if any.
    pub filter: Option<Box<dyn EventFilter>>,
    /// Extra upstream request headers (the verified identity, when configured).
    pub upstream_headers: reqwest::header::HeaderMap,
    /// The run's span (thread, run, agent): the run is driven inside it, so
    /// the upstream request's span is its child.
    pub span: tracing::Span,
    /// Where the run starts from ([`super::branch`]).
    pub base: BaseRequest,
    /// Who asked for it (the principal's subject), journaled with the run.
    pub started_by: Option<String>,
}

impl RunRequest {
    /// The base this request resolves to on the thread as it stands.
    fn resolve_base(
        &self,
        inner: &Inner,
        caps: &super::ThreadSettings,
    ) -> Result<Base, RunRefused> {
        let sent: Option<Vec<Value>> = match &self.input {
            RunInput::Complete(i) if self.base == BaseRequest::Detect => Some(
                i.messages
                    .iter()
                    .map(|m| serde_json::to_value(m).expect("message serializes"))
                    .collect(),
            ),
            _ => None,
        };
        let base =
            super::branch::resolve(inner, &self.base, self.input.has_resume(), sent.as_deref())?;
        let runs = inner.fold.runs();
        let (max_runs, max_branches) = (caps.max_runs, caps.max_branches);
        if max_runs > 0 && runs.started_count() >= max_runs {
            return Err(RunRefused::TooLarge(format!(
                "this thread has had its {max_runs} runs (threads.max_runs)"
            )));
        }
        if base.forks() && max_branches > 0 && runs.branch_count() >= max_branches {
            return Err(RunRefused::TooLarge(format!(
                "this thread has been forked {max_branches} times (threads.max_branches)"
            )));
        }
        if base.forks() {
            use crate::config::BranchMode;
            use crate::protocol::lineage::RunKind;
            let agent = &self.agent.id;
            match self.agent.branching.mode {
                BranchMode::Refuse => {
                    return Err(RunRefused::Invalid(format!(
                        "agent '{agent}' does not take runs that fork the thread (branching.mode = \"refuse\")"
                    )));
                }
                BranchMode::SameThread
                    if !matches!(base.kind, RunKind::Regenerate | RunKind::Edit) =>
                {
                    return Err(RunRefused::Invalid(format!(
                        "agent '{agent}' keeps its own thread state and forks only by regenerate or edit (branching.mode = \"same-thread\")"
                    )));
                }
                _ => {}
            }
        }
        Ok(base)
    }
}

/// How a request was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    Now,
    /// Queued behind this many runs (active one included).
    Queued(usize),
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunRefused {
    /// `conflict`: a run is active, interrupts are pending, or they were already answered.
    #[error("{0}")]
    Conflict(String),
    /// `invalid`: a resume that does not answer the pending interrupts.
    #[error("{0}")]
    Invalid(String),
    /// `unavailable`: the store shared with the other nodes cannot be reached.
    #[error("{0}")]
    Unavailable(String),
    /// `not_found`: the run or message a branch names is not (or no longer) known.
    #[error("{0}")]
    NotFound(String),
    /// `too_large`: a per-thread cap on runs or branches is reached.
    #[error("{0}")]
    TooLarge(String),
}

impl RunRefused {
    /// The contract's stable code.
    pub fn code(&self) -> &'static str {
        match self {
            RunRefused::Conflict(_) => "conflict",
            RunRefused::Invalid(_) => "invalid",
            RunRefused::Unavailable(_) => "unavailable",
            RunRefused::NotFound(_) => "not_found",
            RunRefused::TooLarge(_) => "too_large",
        }
    }
}

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

    /// Cancels the active run, if any (the journal failed: nothing it does
    /// could be stored).
    pub(super) fn cancel_active(&self) {
        if let Some(active) = &self.active {
            active.cancel.cancel();
        }
    }
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
        for _ in 0..3 {
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
            // What to do once the lock is released (nothing awaits under it):
            // `Err` cancel that run elsewhere, `Ok` read back and try again.
            let elsewhere: Result<RunRequest, String> = {
                let mut inner = self.lock();
                let reserved_for_me = inner
                    .runs
                    .active
                    .as_ref()
                    .is_some_and(|a| a.run_id == req.run_id && a.lease.is_none());
                if !reserved_for_me {
                    // Pre-empted (interrupt strategy) while the lease was asked for.
                    if let Ok(Acquired::Granted(lease)) = &acquired {
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
                            Strategy::Reject => {
                                return Err(RunRefused::Conflict(format!(
                                    "run '{run_id}' is still active on this thread"
                                )));
                            }
                            Strategy::Enqueue => {
                                self.queue(&mut inner, req, false);
                                return Ok(Started::Queued(inner.runs.queue.len()));
                            }
                            Strategy::Interrupt => {
                                self.queue(&mut inner, req, true);
                                Err(run_id)
                            }
                        }
                    }
                    Ok(Acquired::Stale) => {
                        self.unreserve(&mut inner, &req);
                        Ok(req)
                    }
                    Err(e) => {
                        self.unreserve(&mut inner, &req);
                        return Err(RunRefused::Unavailable(format!(
                            "cannot start a run now: {e}"
                        )));
                    }
                }
            };
            match elsewhere {
                Err(run_id) => {
                    // Queued first; it starts when that run's end arrives.
                    self.cancel_elsewhere(&run_id).await?;
                    return Ok(Started::Queued(1));
                }
                Ok(stale) => {
                    req = stale;
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
        let base = req.resolve_base(&inner, &self.settings)?;
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
        if inner.runs.active.is_some() && strategy == Strategy::Reject {
            let active = inner
                .runs
                .active
                .as_ref()
                .map(|a| a.run_id.clone())
                .unwrap_or_default();
            return Err(RunRefused::Conflict(format!(
                "run '{active}' is still active on this thread"
            )));
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
                    Ok(Acquired::Granted(lease)) if reserved => {
                        me.launch(&mut inner, req, lease);
                        return;
                    }
                    Ok(Acquired::Granted(lease)) => {
                        me.leases.release(&me.key, &lease);
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
    /// never refused as `conflict`; a journal past `max_events` is
    /// compacted in the same step, so the base is this run's end and the
    /// next run's events come after it. Then a queued run may start.
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
            if let Some(ack) = self.compaction(inner, false) {
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
        if let Some(connection) = &req.requester_connection {
            let frame = json!({
                "type": "error",
                "code": code,
                "threadId": self.key.thread_id,
                "runId": req.run_id,
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

    /// Starts `req` under `lease` (the slot is this node's, cluster-wide).
    fn launch(self: &Arc<Self>, inner: &mut Inner, req: RunRequest, lease: Lease) {
        inner.runs.used_ids.insert(req.run_id.clone(), ());
        if req.input.has_resume() {
            inner.runs.resume_claimed = Some(req.run_id.clone());
        }
        // Resolved again: the head may have moved while the run was queued.
        let base = match req.resolve_base(inner, &self.settings) {
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
        let run = tokio::spawn(tracing::Instrument::instrument(
            drive(self.clone(), req, prepared, cancel, lease),
            span,
        ));
        tokio::spawn(self.clone().supervise(run_id, run));
    }

    /// Ends a run whose task panicked: without this the thread would stay
    /// "running" (its slot taken) until the process restarts.
    async fn supervise(self: Arc<Self>, run_id: String, run: tokio::task::JoinHandle<()>) {
        let Err(e) = run.await else { return };
        if !e.is_panic() {
            return;
        }
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
    fn run_is_open(&self, run_id: &str) -> bool {
        self.lock()
            .fold
            .run()
            .is_some_and(|r| r.run_id == run_id && r.status == RunStatus::Running)
    }

    fn run_ended(self: &Arc<Self>, run_id: &str) {
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
    let first = upstream.next().await?;
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH && !batch.last().is_some_and(|e| e.kind().is_terminal()) {
        match upstream.next().now_or_never() {
            Some(Some(e)) => batch.push(e),
            _ => break,
        }
    }
    // A late RUN_ERROR comes ready with its RUN_FINISHED: the same batch.
    if batch
        .last()
        .is_some_and(|e| *e.kind() == EventType::RunFinished)
        && let Some(Some(late)) = upstream.next().now_or_never()
    {
        batch.push(late);
    }
    Some(batch)
}

/// The fencing token appends carry under `lease` (none for a lease of a
/// single process, which needs no fencing).
fn fence_of(lease: &Lease) -> Option<Arc<str>> {
    (!lease.token.is_empty()).then(|| lease.token.clone())
}

async fn drive(
    thread: Arc<Thread>,
    req: RunRequest,
    input: PreparedInput,
    cancel: CancellationToken,
    lease: Lease,
) {
    let RunRequest {
        agent,
        run_id,
        mut starter,
        mut filter,
        starter_visibility,
        upstream_headers,
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
    // The journal's opening of the run: RUN_STARTED with the normalized
    // input (the agent's own, when it sent one, goes to the requester), then
    // the edited history, if the client changed a known message.
    let opening = |agent_start: Option<&Event>| -> Staged {
        let start = match agent_start {
            Some(e) => e.modify(|b| {
                b.insert("input".into(), journal_input.clone());
            }),
            None => Event::build(
                json!({"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id,
                    "protocolVersion": PROTOCOL_VERSION, "input": journal_input}),
            ),
        };
        // The journal names the run's agent (every reader of the journal
        // judges the run's events by that agent's visibility rules) and its
        // place in the run tree.
        let start = stamp.apply(&start);
        let mut staged: Staged = vec![(start, agent_start.map(|e| Some(e.clone())))];
        staged.extend(restated.iter().map(|e| (e.clone(), None)));
        staged
    };
    let metrics = crate::metrics::metrics();
    let agent_label = crate::metrics::AgentLabel {
        agent: agent.id.clone(),
    };
    metrics.runs_started.get_or_create(&agent_label).inc();
    let began = std::time::Instant::now();
    let mut first_event = true;
    // How the run ended, for the metrics (a fixed set of classes).
    let mut outcome = "gateway_error";
    let mut stream = Some(RunStream::start(agent.clone(), body, upstream_headers));
    // The requester's outbox while this task feeds it (the journal takes
    // over if it lags); `starter` itself is kept to notice the requester leave.
    let mut feed = RequesterFeed {
        outbox: starter.clone(),
        seen: SeenBy::new(starter_visibility),
        run_id: run_id.clone(),
        fence: fence_of(&lease),
        store_failed: false,
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
                let why = if thread.lost_its_journal(&run_id) {
                    StoreError::JournalLost
                } else {
                    StoreError::Fenced
                };
                tracing::warn!(thread = %thread_id, run = %run_id, "run lease lost: stopping the run ({why})");
                feed.journal_failed(&thread, &why);
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
                if !feed.deliver(&thread, stored, originals) {
                    break;
                }
            }
            Step::Cancel | Step::Ended => {
                drop(stream.take()); // drops the upstream request now
                // What is in flight goes first, in order.
                while let Some((stored, originals)) = inflight.next().await {
                    if !feed.deliver(&thread, stored, originals) {
                        break 'run;
                    }
                }
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
                        let (opened, _) = apply_filter(&mut filter, opening(None));
                        closing.extend(opened.into_iter().map(|(e, _)| e));
                    }
                    closing.extend(open.closing());
                    closing.push(Event::build(json!({"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id, "outcome": {"type": "cancelled"}})));
                    outcome = "cancelled";
                    tracing::info!(thread = %thread_id, run = %run_id, "run cancelled");
                }
                feed.journal(&thread, closing, Vec::new()).await;
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
                //    `None` nothing, `Some(None)` the same, `Some(Some(e))` `e`.
                let mut staged: Staged = Vec::with_capacity(batch.len() + 2);
                for event in batch {
                    let event = match &upstream_thread {
                        Some(alias) => restore_thread_id(event, alias, &thread_id),
                        None => event,
                    };
                    if !started {
                        started = true;
                        if *event.kind() == EventType::RunStarted {
                            staged.extend(opening(Some(&event)));
                            continue;
                        }
                        // Journal the user's input even when the agent failed before starting.
                        let mut synthetic = opening(None);
                        for (_, requester) in &mut synthetic {
                            *requester = None;
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
                    staged.push((journaled, Some(None)));
                }
                // 2. Operator rules, last, over exactly what would be journaled.
                let (staged, failed) = apply_filter(&mut filter, staged);
                let terminal = failed || staged.iter().any(|(e, _)| e.kind().is_terminal());
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
                        feed.journal_failed(&thread, &e);
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
        close_after_outage(&thread, &run_id, &lease).await;
    }
    // Usually a no-op: the slot went with the terminal event's publication
    // ([`Thread::terminal_published`]); not when the run ended unjournaled.
    thread.run_ended(&run_id);
    thread.maybe_compact().await;
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

/// What the HTTP requester gets for a journaled event: `None` nothing (journal
/// only), `Some(None)` the same event, `Some(Some(e))` the agent's own `e`.
type ForRequester = Option<Option<Event>>;

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
                        Some(None)
                    };
                    out.push((e, keep));
                }
            }
            Err(end) => {
                out.push((*end, Some(None)));
                return (out, true);
            }
        }
    }
    (out, false)
}

/// The HTTP requester's stream while the run's task feeds it: the journal
/// takes over when it lags, and nothing follows once the journal failed.
struct RequesterFeed {
    outbox: Option<Arc<Outbox>>,
    /// What the requester may see (of this run's agent).
    seen: SeenBy,
    run_id: String,
    /// The run lease's fencing token, carried by every append.
    fence: Option<Arc<str>>,
    /// Set when the store failed a batch (not a lost lease).
    store_failed: bool,
}

impl RequesterFeed {
    /// Stops feeding (the requester left).
    fn stop(&mut self) {
        self.outbox = None;
    }

    /// Journals `events` and forwards them; `false` when the journal failed
    /// (see [`RequesterFeed::deliver`]).
    async fn journal(
        &mut self,
        thread: &Thread,
        events: Vec<Event>,
        originals: Vec<ForRequester>,
    ) -> bool {
        let stored = match thread.enqueue(events, self.fence.clone()) {
            Ok(pending) => thread.settle(pending).await,
            Err(e) => Err(e),
        };
        self.deliver(thread, stored, originals)
    }

    /// Forwards a stored batch; `false` when the journal failed it: nothing
    /// was published, and the requester is told with a `RUN_ERROR
    /// journal_unavailable` the journal cannot hold.
    fn deliver(
        &mut self,
        thread: &Thread,
        stored: Result<Vec<Arc<Entry>>, StoreError>,
        originals: Vec<ForRequester>,
    ) -> bool {
        match stored {
            Ok(entries) => {
                self.forward(thread, &entries, originals);
                true
            }
            Err(e) => {
                self.journal_failed(thread, &e);
                false
            }
        }
    }

    /// Ends the requester's stream with `RUN_ERROR journal_unavailable`.
    /// A lost lease (fenced) ends it with `gateway_node_lost`, as the node
    /// that closes the run journals it.
    fn journal_failed(&mut self, thread: &Thread, why: &StoreError) {
        self.store_failed |= !matches!(why, StoreError::Fenced | StoreError::JournalLost);
        if let Some(outbox) = self.outbox.take() {
            let error = match why {
                StoreError::JournalLost => run_error(
                    "journal_lost",
                    "the journal store lost this run's events (restarted empty, flushed, or restored from an older snapshot); the run was stopped",
                ),
                StoreError::Fenced => run_error(
                    "gateway_node_lost",
                    "the gateway node running this run lost its lease; the run was stopped",
                ),
                _ => run_error(
                    "journal_unavailable",
                    "the gateway could not store this run's events; the run was stopped",
                ),
            };
            outbox.push_replay(Outgoing::Event(Arc::new(Entry::new(
                thread.id.clone(),
                0,
                error,
            ))));
        }
    }

    /// Sends a run's entries, `originals[i]` deciding what the requester gets
    /// for entry `i` (see [`ForRequester`]; missing items mean the entry). A
    /// requester that falls behind its budget is handed to the journal (it
    /// reads the rest of the run from there, losing nothing) and is fed no
    /// more from here.
    fn forward(&mut self, thread: &Thread, entries: &[Arc<Entry>], originals: Vec<ForRequester>) {
        let Some(outbox) = &self.outbox else { return };
        let mut originals = originals.into_iter();
        for e in entries {
            let item = match originals.next().unwrap_or(Some(None)) {
                None => continue,
                Some(None) => e.clone(),
                Some(Some(original)) => Arc::new(Entry::new(e.thread_id.clone(), e.seq, original)),
            };
            // Judged as the journaled entry's run (the agent's own
            // RUN_STARTED, sent instead, is not folded).
            if self.seen.hides(e.origin(), &item.event) {
                continue;
            }
            match outbox.push_live(Outgoing::Event(item)) {
                Live::Queued => {}
                Live::Closed => return,
                Live::Full => {
                    let lagging = outbox.clone();
                    thread.requester_lagged(
                        lagging,
                        self.seen.scope().clone(),
                        &self.run_id,
                        e.seq - 1,
                    );
                    self.outbox = None;
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ThreadKey;
    use crate::store::memory::MemoryStore;
    use crate::thread::{Start, ThreadSettings, Threads, fanout};

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
        let demo = crate::demo::start(&crate::config::DemoConfig {
            token_delay: std::time::Duration::ZERO,
            ..Default::default()
        })
        .await
        .unwrap();
        let cfg: crate::config::AgentConfig =
            toml::from_str("id = \"demo\"\nurl = \"demo:\"").unwrap();
        let agent = Arc::new(Agent::from_config(&cfg, Some(demo)).unwrap());
        let threads = Threads::new(
            Arc::new(MemoryStore::new()),
            ThreadSettings {
                max_events: 1000,
                idle_ttl: std::time::Duration::ZERO,
                ..Default::default()
            },
        );
        let t = threads
            .get_or_create(&ThreadKey::new("ten", "th"), "u")
            .await
            .unwrap();
        let (ob, mut rx) = fanout::outbox(1 << 20);
        t.subscribe(1, ob, Start::Live, None);
        let req = |run: &str, filter: Option<Box<dyn EventFilter>>| RunRequest {
            agent: agent.clone(),
            run_id: run.into(),
            input: RunInput::Incremental {
                messages: vec![json!({"id": format!("u-{run}"), "role": "user", "content": "hi"})],
                tools: vec![],
                context: vec![],
                state: None,
                forwarded_props: None,
                resume: None,
            },
            starter: None,
            requester_connection: None,
            starter_visibility: None,
            filter,
            upstream_headers: Default::default(),
            base: Default::default(),
            started_by: None,
            span: tracing::Span::none(),
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
