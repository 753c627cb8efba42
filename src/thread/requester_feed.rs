//! The HTTP requester's stream while its run's task feeds it.
//!
//! The requester (the client whose `POST …/run` or WebSocket `run` started
//! the run) gets each batch once it is durable, in order, judged by its own
//! visibility; a requester that falls behind its outbox budget is handed to
//! the journal (it reads the rest from there, losing nothing), and one whose
//! run cannot be journaled is told how it ended.

use super::fanout::{Live, Outbox, Outgoing};
use super::judged::judged;
use super::staged::ForRequester;
use super::{Entry, Thread};
use crate::protocol::event::run_error;
use crate::protocol::hooks::SeenBy;
use crate::store::StoreError;
use std::sync::Arc;

/// The HTTP requester's stream while the run's task feeds it: the journal
/// takes over when it lags, and nothing follows once the journal failed.
pub(super) struct RequesterFeed {
    pub(super) outbox: Option<Arc<Outbox>>,
    /// What the requester may see (of this run's agent).
    pub(super) seen: SeenBy,
    pub(super) run_id: String,
    /// The run lease's fencing token, carried by every append.
    pub(super) fence: Option<Arc<str>>,
    /// Set when the store failed a batch (not a lost lease).
    pub(super) store_failed: bool,
    /// A batch's entries on their way to the outbox as one item (its room
    /// kept from batch to batch).
    pub(super) staged: Vec<Arc<Entry>>,
}

impl RequesterFeed {
    /// Stops feeding (the requester left).
    pub(super) fn stop(&mut self) {
        self.outbox = None;
    }

    /// Forwards a stored batch; `false` when the journal failed it: nothing
    /// was published, and the requester is told with a `RUN_ERROR
    /// journal_unavailable` the journal cannot hold.
    pub(super) fn deliver(
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
    pub(super) fn journal_failed(&mut self, thread: &Thread, why: &StoreError) {
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
    pub(super) fn forward(
        &mut self,
        thread: &Thread,
        entries: &[Arc<Entry>],
        originals: Vec<ForRequester>,
    ) {
        let Some(outbox) = &self.outbox else { return };
        let mut originals = originals.into_iter();
        for e in entries {
            let item = match originals.next().unwrap_or(ForRequester::Same) {
                ForRequester::Nothing => continue,
                ForRequester::Same => e.clone(),
                ForRequester::Instead(original) => {
                    // Judged as the journaled entry's run (the agent's own
                    // RUN_STARTED, sent instead, is not folded).
                    let own = Entry::new(e.thread_id.clone(), e.seq, original);
                    own.set_origin(e.origin().clone());
                    Arc::new(own)
                }
            };
            // The one rule of every face ([`judged`]); only an event that
            // restates history needs the thread's fold for it.
            let shown = if SeenBy::restates(item.event.kind()) {
                judged(&mut self.seen, &item, &thread.lock().fold)
            } else {
                (!self.seen.hides(item.origin(), &item.event)).then_some(item)
            };
            self.staged.extend(shown);
        }
        let Some(first) = self.staged.first().map(|e| e.seq) else {
            return;
        };
        match outbox.push_live_batch(&mut self.staged) {
            Live::Queued | Live::Closed => {}
            Live::Full => {
                let lagging = outbox.clone();
                thread.requester_lagged(
                    lagging,
                    self.seen.scope().clone(),
                    &self.run_id,
                    first - 1,
                );
                self.outbox = None;
            }
        }
    }
}
