//! A journal that went back: the shared store lost history this node had
//! seen (Redis restarted empty, flushed, restored from an older snapshot —
//! see [`crate::store::redis`]'s epochs). The copy in memory no longer
//! matches the store: kept as it is, it would splice the store's new events
//! onto its old ones for its viewers and refuse every run (its last seq
//! never matches the store's). So it is reloaded from what the store holds
//! now, the run active here (which wrote into the lost history) is stopped
//! with `RUN_ERROR journal_lost`, and every viewer gets a `reset` snapshot
//! of the reloaded thread. What the store holds from then on is a new
//! history under a new epoch ([`crate::store::JournalStore::new_history`]):
//! a journal restored from an older snapshot keeps its old epoch otherwise,
//! and a client away during the loss would resume with a cursor that names
//! the new events written at its seqs.

use super::*;

impl Thread {
    /// The store lost history of this thread that this copy holds: reloads
    /// the copy from the store, stops the run active here with `RUN_ERROR
    /// journal_lost`, and sends every viewer a `reset` snapshot of what the
    /// store holds now. One reload at a time (detections come in bursts).
    pub async fn journal_lost(&self) {
        let _reloading = match self.reloading.try_lock() {
            Ok(guard) => guard,
            Err(_) => {
                // Reloaded by another detection: done once it is.
                let _ = self.reloading.lock().await;
                return;
            }
        };
        let store = self.store.clone();
        let key = self.key.clone();
        // What the store holds from here is a new history (its epoch too):
        // cursors clients hold of the lost one must not match it.
        // A report of a loss this copy was reloaded for already: nothing to do.
        let stored = tokio::task::spawn_blocking(move || {
            match store.new_history(&key) {
                Ok(false) => return None,
                Ok(true) => {}
                Err(e) => {
                    tracing::warn!(thread = %key.thread_id, "could not renew the journal's epoch: {e}");
                }
            }
            Some(store.load(&key))
        })
        .await;
        match stored {
            Ok(None) => return,
            Ok(Some(Ok(stored))) => {
                let mut inner = self.lock();
                let before = inner.next_seq - 1;
                // The run active here wrote into the lost history: nothing
                // it journals from here could follow what viewers are reset to.
                if let Some(run_id) = inner.runs.stop_launched() {
                    inner.lost_run = Some(run_id);
                }
                inner.fill(&self.id, stored);
                self.settle_residency(&mut inner);
                tracing::error!(
                    tenant = %self.key.tenant,
                    thread = %self.key.thread_id,
                    "journal reloaded after the store lost history: this node had seq {before}, the store holds seq {}; its viewers get a reset snapshot",
                    inner.next_seq - 1
                );
                for viewer in std::mem::take(&mut inner.viewers) {
                    if viewer.run_scope.is_some() {
                        // A run's HTTP requester reading the journal: its
                        // run is gone from it; it ends here.
                        let error = crate::protocol::event::run_error(
                            "journal_lost",
                            "the journal store lost this run's events; the run was stopped",
                        );
                        viewer
                            .outbox
                            .push_replay(Outgoing::Event(Arc::new(Entry::new(
                                self.id.clone(),
                                0,
                                error,
                            ))));
                    } else {
                        self.reset_viewer(&mut inner, viewer);
                    }
                }
            }
            _ => tracing::warn!(
                thread = %self.key.thread_id,
                "reloading a journal that lost history failed; retried at the next mismatch"
            ),
        }
        drop(_reloading);
        // What other nodes wrote between the load and now.
        self.read_back().await;
    }

    /// True when run `run_id` was stopped because the store lost the
    /// journal it wrote to ([`Thread::journal_lost`]).
    pub(super) fn lost_its_journal(&self, run_id: &str) -> bool {
        self.lock().lost_run.as_deref() == Some(run_id)
    }
}
