//! Compaction: a journal past `threads.max_events` after a run, or idle for
//! `threads.idle_ttl`, becomes the fold (stored as the thread's base); late
//! readers of what was compacted get a `reset` snapshot.

use super::*;

/// What the store keeps as a compacted base: the fold plus run info.
pub(super) fn fold_record(inner: &Inner) -> Bytes {
    let run_ids: Vec<String> = inner.runs.used_ids().cloned().collect();
    let mut extra = vec![("runIds", Value::from(run_ids))];
    if let Some(run) = inner.fold.run() {
        extra.push((
            "run",
            json!({"runId": run.run_id, "status": run.status.as_str(), "agent": run.agent.to_json()}),
        ));
    }
    Bytes::from(inner.fold.stored_json_bytes(&extra))
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
                && !inner.journal.is_empty()
                && inner.last_event.elapsed() >= self.settings.idle_ttl
        };
        if idle {
            self.compact(true).await
        }
    }

    pub(super) async fn compact(&self, force: bool) {
        // Handed to the store under the lock, like appends: in seq order.
        let ack = {
            let mut inner = self.lock();
            match self.compaction(&mut inner, force) {
                Some(ack) => ack,
                None => return,
            }
        };
        if let Ok(Err(e)) = ack.await {
            tracing::error!(thread = %self.key.thread_id, "journal compaction failed: {e}");
        }
    }

    /// Hands the compaction of the journal into the fold to the store when
    /// it is due (`force`: idle; else longer than `max_events`) and nothing
    /// is under way that still reads the journal; `None` when not done.
    /// Only between runs (no run active or starting here), so the base is a
    /// whole-run boundary.
    pub(super) fn compaction(
        &self,
        inner: &mut Inner,
        force: bool,
    ) -> Option<crate::store::AppendAck> {
        let due = force || inner.journal.len() > self.settings.max_events;
        // Lagging viewers still read the journal: compact later.
        let busy = inner.inflight > 0
            || !inner.arrived.is_empty()
            || !inner.catching_up.is_empty()
            || inner.runs.has_active()
            || inner.recovering;
        if !due || inner.journal.is_empty() || busy {
            return None;
        }
        let base = inner.fold.seq;
        // Freeing a long run's entries is real work (a 200k-event run's
        // were a tenth of its time on the runtime, under this lock): a
        // blocking thread does it.
        let compacted = std::mem::take(&mut inner.journal);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) if compacted.len() > 1024 => drop(rt.spawn_blocking(move || drop(compacted))),
            _ => drop(compacted),
        }
        inner.base_seq = base;
        let snapshot = fold_record(inner);
        Some(self.store.append(AppendBatch {
            key: self.key.clone(),
            meta: inner.meta.clone(),
            events: Vec::new(),
            compact: Some((base, snapshot)),
            fence: None,
            run_boundary: false,
            idempotency: None,
            closes_failed_run: false,
        }))
    }
}
