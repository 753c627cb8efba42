//! Compaction: a journal past `threads.max_events` after a run, or idle for
//! `threads.idle_ttl`, becomes the fold (stored as the thread's base); late
//! readers of what was compacted get a `reset` snapshot.
//!
//! The base is serialized outside the thread's lock, and a long run's off
//! the runtime's workers too: its fold can be megabytes (a 200k-delta
//! message), and serializing it under the lock held up every viewer and
//! the next run of the thread for as long. Under the lock, compaction only
//! takes a copy of the fold (its messages are shared, so that is a pointer
//! each) and later hands the finished base to the store — still under the
//! lock, so the store gets it in seq order with the appends. If the thread
//! moved on in between (a run started), the copy is dropped and the next
//! run's end tries again; a journal that keeps missing its chance is
//! compacted under the lock instead ([`Thread::terminal_published`]: at
//! most two runs past its cap).

use super::*;

/// What the store keeps as a compacted base beside the fold: the run ids
/// used on the thread and its last run.
fn extras(inner: &Inner) -> Vec<(&'static str, Value)> {
    let run_ids: Vec<String> = inner.runs.used_ids().cloned().collect();
    let mut extra = vec![("runIds", Value::from(run_ids))];
    if let Some(run) = inner.fold.run() {
        extra.push((
            "run",
            json!({"runId": run.run_id, "status": run.status.as_str(), "agent": run.agent.to_json()}),
        ));
    }
    if let Some(notes) = inner.meta_notes.to_base() {
        extra.push(("metaNotes", notes));
    }
    extra
}

/// A journal longer than this is a long run's: its base is serialized,
/// and its entries freed, on a blocking thread. Shorter ones are done on
/// the runtime's worker (still outside the lock): each blocking thread
/// gets a malloc arena of its own that keeps its high-water mark, and
/// serializing every thread's base there grew the soak's memory from
/// 22 to 51 KB a run (tests/soak.rs), for folds that take microseconds.
const LONG_JOURNAL: usize = 1024;

/// Where a compaction's copy was taken: the fold's seq and the base below
/// it. The fold and the run ids it keeps change only by publishing (which
/// moves the seq) or by a reload (which moves the base), so a base
/// serialized from a copy taken at the same point is still what the
/// thread would store now.
fn taken_at(inner: &Inner) -> (u64, u64) {
    (inner.fold.seq, inner.base_seq)
}

impl Thread {
    /// Since when nothing has happened here, if nothing is going on (no
    /// viewer, no run, nothing unstored): such a thread may leave memory.
    pub(super) fn idle_since(&self) -> Option<std::time::Instant> {
        let mut inner = self.lock();
        inner.viewers.retain(|v| !v.outbox.is_closed());
        let idle = inner.viewers.is_empty()
            && inner.catching_up.is_empty()
            && inner.runs.is_idle()
            && inner.inflight == 0
            && inner.arrived.is_empty()
            && !inner.recovering;
        idle.then_some(inner.last_event)
    }

    /// Compacts the journal into the fold when it grew past `max_events`
    /// (called between runs, so the base is a whole-run boundary).
    pub(super) async fn maybe_compact(&self) {
        self.compact(false).await
    }

    /// Compacts when idle past `idle_ttl` (no active run, nothing new).
    pub(super) async fn compact_if_idle(&self) {
        let idle = {
            let inner = self.lock();
            !self.settings.idle_ttl.is_zero()
                && inner.runs.is_idle()
                && inner.fold.seq > inner.base_seq
                && inner.last_event.elapsed() >= self.settings.idle_ttl
        };
        if idle {
            self.compact(true).await
        }
    }

    /// Compacts when due (`force`: idle), serializing the base outside the
    /// lock (a long run's on a blocking thread; see the module's docs).
    pub(super) async fn compact(&self, force: bool) {
        // A copy of the fold: its messages are shared, so a pointer each.
        let taken = {
            let inner = self.lock();
            self.compaction_due(&inner, force).then(|| {
                let long = inner.journal.len() > LONG_JOURNAL;
                (taken_at(&inner), inner.fold.clone(), extras(&inner), long)
            })
        };
        let Some((at, fold, extra, long)) = taken else {
            return;
        };
        // The copy is dropped where it is serialized.
        #[cfg(test)]
        let thread_id = self.key.thread_id.clone();
        let serialize = move || {
            #[cfg(test)]
            pause::here(&thread_id);
            Bytes::from(fold.stored_json_bytes(&extra))
        };
        let snapshot = match tokio::runtime::Handle::try_current() {
            Ok(rt) if long => match rt.spawn_blocking(serialize).await {
                Ok(done) => done,
                Err(_) => return,
            },
            _ => serialize(),
        };
        // Serialized, not yet handed to the store: a node stopping here
        // leaves the journal whole (the base is only ever written with the
        // trim, in one store step).
        crate::fault::point("compaction.serialized").await;
        let ack = {
            let mut inner = self.lock();
            if taken_at(&inner) != at || !self.compaction_due(&inner, force) {
                // The thread moved on: the next run's end compacts.
                return;
            }
            self.commit_compaction(&mut inner, snapshot)
        };
        if let Ok(Err(e)) = ack.await {
            tracing::error!(thread = %self.key.thread_id, "journal compaction failed: {e}");
        }
    }

    /// The compaction is due (`force`: idle; else the journal is longer
    /// than `max_events`) and nothing is under way that still reads the
    /// journal. Only between runs (no run active or starting here), so the
    /// base is a whole-run boundary.
    fn compaction_due(&self, inner: &Inner, force: bool) -> bool {
        // Counted in the store, not in memory: the tail holds only the newest.
        let kept = inner.fold.seq.saturating_sub(inner.base_seq);
        let due = force || kept > self.settings.max_events as u64;
        // Lagging viewers still read the journal: compact later.
        let busy = inner.inflight > 0
            || !inner.arrived.is_empty()
            || !inner.catching_up.is_empty()
            || inner.runs.has_active()
            || inner.recovering;
        due && kept > 0 && !busy
    }

    /// Compacts now, serializing the base under the lock the caller holds;
    /// `None` when not due. For the one step that must not wait: a run's
    /// end with the next run about to start ([`Thread::terminal_published`]).
    pub(super) fn compaction(
        &self,
        inner: &mut Inner,
        force: bool,
    ) -> Option<crate::store::AppendAck> {
        if !self.compaction_due(inner, force) {
            return None;
        }
        let snapshot = Bytes::from(inner.fold.stored_json_bytes(&extras(inner)));
        Some(self.commit_compaction(inner, snapshot))
    }

    /// Drops the journal up to the fold's seq and hands the base to the
    /// store (under the lock: in seq order with the appends).
    fn commit_compaction(&self, inner: &mut Inner, snapshot: Bytes) -> crate::store::AppendAck {
        let base = inner.fold.seq;
        // The tail's events go in whole chunks: a few frees, however long
        // the run (freeing a 200k-event run's entries one by one was a
        // tenth of its time on the runtime, under this lock).
        inner.journal.clear();
        inner.base_seq = base;
        inner.compaction_deferred = false;
        self.store.append(AppendBatch {
            key: self.key.clone(),
            meta: inner.meta.clone(),
            events: Vec::new(),
            compact: Some((base, snapshot)),
            fence: None,
            run_boundary: false,
            idempotency: None,
            closes_failed_run: false,
        })
    }
}

/// Lets a test act on a thread while its compaction serializes.
#[cfg(test)]
pub(super) mod pause {
    use std::sync::{Mutex, mpsc};

    /// The thread id to pause, a sender told when its serialization starts,
    /// and a receiver it waits on before going on (taken by the first one).
    #[allow(clippy::type_complexity)]
    pub static AT_SERIALIZE: Mutex<Option<(String, mpsc::Sender<()>, mpsc::Receiver<()>)>> =
        Mutex::new(None);

    pub fn here(thread_id: &str) {
        let gate = {
            let mut gate = AT_SERIALIZE.lock().unwrap();
            if gate.as_ref().is_some_and(|(id, ..)| id == thread_id) {
                gate.take()
            } else {
                None
            }
        };
        if let Some((_, started, go_on)) = gate {
            let _ = started.send(());
            let _ = go_on.recv();
        }
    }
}
