//! A thread whose journal failed a write gets going again by itself.
//!
//! When a store of this node alone (SQLite) fails a batch — a full disk, an
//! I/O error — nothing of that batch, nor anything after it, may reach a
//! viewer: the journal would have a seq viewers saw and the store never
//! held. The thread is then *broken*: it refuses appends and new runs
//! (`unavailable`), and its active run stops (its requester is told
//! `RUN_ERROR journal_unavailable`). It used to stay so until a restart: the
//! thread said `running` forever, viewers never got a terminal event, and
//! cancel answered "no active run".
//!
//! Now a recovery task retries, with backoff, until it can:
//!
//! 1. reload what the store holds and bring this copy and its viewers to it
//!    — live, with the events they lack, when the store continues what they
//!    saw; with a `reset` snapshot of the store's state otherwise;
//! 2. close the run the failure cut short with `RUN_ERROR
//!    journal_unavailable`, journaled like any event (that write is what
//!    proves the store works again), so every viewer and late joiner sees
//!    how it ended;
//! 3. take appends and runs again, those queued meanwhile first.
//!
//! `/readyz` follows the store's own health, which turns true again with its
//! first successful write ([`crate::store::sqlite`]).
//!
//! A shared store (Redis) never breaks a copy: it assigns seqs itself, so a
//! copy stays a faithful prefix whatever happened to a batch
//! ([`Thread::settle`]).

use super::*;
use crate::store::StoredThread;

/// The first retry of a broken thread's recovery, and the longest wait
/// between two.
const FIRST_RETRY: std::time::Duration = std::time::Duration::from_millis(100);
const MAX_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

impl Thread {
    /// The store failed a batch of this thread (`why`): nothing more is
    /// appended until the recovery task has brought the thread back to what
    /// the store holds; it starts now unless it is already under way.
    pub(super) fn journal_failed(&self, inner: &mut Inner, why: &StoreError) {
        inner.broken.get_or_insert_with(|| why.to_string());
        // Nothing it does can be journaled any more: stop reading its agent.
        inner.runs.cancel_active();
        if inner.recovering {
            return;
        }
        let Some(me) = self.me.upgrade() else { return };
        // (A batch dropped outside the runtime, at exit: nothing to recover.)
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        inner.recovering = true;
        runtime.spawn(me.recover_journal());
    }

    /// Retries [`Thread::try_recover`] with backoff until it succeeds.
    async fn recover_journal(self: Arc<Self>) {
        let mut wait = FIRST_RETRY;
        loop {
            tokio::time::sleep(wait).await;
            match self.try_recover().await {
                Ok(()) => return,
                Err(why) => {
                    tracing::debug!(tenant = %self.key.tenant, thread = %self.key.thread_id, "journal recovery retried in {wait:?}: {why}");
                }
            }
            wait = (wait * 2).min(MAX_RETRY);
        }
    }

    /// One attempt: resynchronizes with the store, closes the cut-short run,
    /// and reopens the thread; `Err` (why) to be tried again later.
    async fn try_recover(&self) -> Result<(), String> {
        {
            let inner = self.lock();
            if inner.inflight > 0 || inner.runs.has_active() {
                return Err("a batch or the stopped run is still winding down".into());
            }
        }
        let store = self.store.clone();
        let key = self.key.clone();
        let stored = tokio::task::spawn_blocking(move || store.load(&key))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        self.resync(stored);
        let cut_short = self.open_run();
        self.lock().broken = None;
        if let Some(run_id) = &cut_short {
            let error = crate::protocol::event::run_error(
                "journal_unavailable",
                "the gateway could not store this run's events; the run was stopped",
            );
            // Fails again (and marks the thread broken again) while the
            // store still fails writes.
            self.try_append(vec![error])
                .await
                .map_err(|e| format!("closing run {run_id}: {e}"))?;
        }
        let mut inner = self.lock();
        if let Some(e) = &inner.broken {
            return Err(format!("failed again: {e}"));
        }
        inner.recovering = false;
        tracing::warn!(
            tenant = %self.key.tenant,
            thread = %self.key.thread_id,
            seq = inner.next_seq - 1,
            closed_run = cut_short.as_deref().unwrap_or("none"),
            "journal recovered: the thread takes appends and runs again"
        );
        self.start_queued(&mut inner);
        Ok(())
    }

    /// Brings this copy and its viewers to what the store holds: when the
    /// store continues what was published, the events it has beyond that
    /// are published like any (viewers get them live, in order); when it
    /// holds less, or compacted past it, the copy is rebuilt from the store
    /// and every live viewer gets a `reset` snapshot of it.
    fn resync(&self, stored: Option<StoredThread>) {
        let mut inner = self.lock();
        let published = inner.next_seq - 1;
        let (last, base) = stored.as_ref().map_or((0, 0), |s| {
            (s.meta.last_seq, s.base.as_ref().map_or(0, |(seq, _)| *seq))
        });
        // What the failed batches announced is void.
        inner.arrived.clear();
        if last >= published && base <= published {
            inner.next_assign = last + 1;
            if let Some(stored) = &stored {
                inner.meta.status = stored.meta.status.clone();
            }
            let missing: Vec<(u64, Bytes)> = stored
                .map(|s| s.events)
                .unwrap_or_default()
                .into_iter()
                .filter(|(seq, _)| *seq > published)
                .collect();
            drop(inner);
            self.publish_remote(missing);
            return;
        }
        tracing::error!(
            tenant = %self.key.tenant,
            thread = %self.key.thread_id,
            published,
            stored = last,
            "the journal holds less than viewers saw: reloaded, viewers get a reset snapshot"
        );
        inner.fill(&self.id, stored);
        self.settle_residency(&mut inner);
        for viewer in std::mem::take(&mut inner.viewers) {
            self.reset_viewer(&mut inner, viewer);
        }
    }
}
