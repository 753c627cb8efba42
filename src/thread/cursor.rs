//! Where a viewer's cursor stands in the journal: what a join stream needs
//! to start at seq `n` (see [`crate::protocol::join`], "Cursors").
//!
//! A viewer at `n` has been sent the frames of the journal up to `n`; what
//! it holds open is a function of that journal alone, so the join stream
//! rebuilds it from the events the viewer may see, from the oldest held
//! (compaction cuts only between runs, so that is a run boundary). A fresh
//! start at `n` also needs the conversation as it stood at `n`: the end
//! view of the last run that ended by then, and the journal after it.

use super::*;

/// What a join stream needs to start at a seq.
pub struct JoinPoint {
    /// The events up to the seq that the viewer may see, from the oldest
    /// held (`None`: the seq is not in the journal held; the viewer gets a
    /// reset snapshot, which needs none of this).
    pub prefix: Option<Vec<Arc<Entry>>>,
    /// The conversation at the seq (`messages`, `state`, …), as the viewer
    /// may see it; only asked for a fresh start, `None` when it cannot be
    /// rebuilt (the journal before it was compacted away).
    pub at: Option<Map<String, Value>>,
}

impl Thread {
    /// What viewer `visibility` needs to start at `n`; the conversation at
    /// `n` only when `conversation` (a fresh start rather than a reconnect).
    pub fn join_point(
        &self,
        n: u64,
        visibility: &ViewerVisibility,
        conversation: bool,
    ) -> JoinPoint {
        const NONE: JoinPoint = JoinPoint {
            prefix: None,
            at: None,
        };
        let from = {
            let inner = self.lock();
            if n < inner.base_seq || n > inner.fold.seq {
                return NONE;
            }
            boundary(&inner, n)
        };
        // What the viewer holds open at `n` began after the last run's end
        // before it: the events from there are all it takes (read back
        // from the store, outside the lock, when they left memory).
        let Some(events) = self.entries_between(from, n) else {
            return NONE;
        };
        let inner = self.lock();
        let mut seen = SeenBy::new(visibility.clone());
        let prefix = events
            .iter()
            .filter(|e| !seen.hides(e.origin(), &e.event))
            .cloned()
            .collect();
        let at = conversation
            .then(|| fold_at(self, &inner, n, &events))
            .flatten()
            .map(|fold| {
                let mut snap = fold.to_json();
                snap.insert("seq".into(), n.into());
                seen.redact_snapshot(&mut snap, fold.authors());
                snap
            });
        JoinPoint {
            prefix: Some(prefix),
            at,
        }
    }
}

/// The last run that ended by `n` (any branch's: runs of a thread never
/// overlap).
fn last_ended(inner: &Inner, n: u64) -> Option<&crate::protocol::lineage::RunRecord> {
    inner
        .fold
        .runs()
        .iter()
        .filter(|r| r.ended_seq.is_some_and(|e| e <= n))
        .max_by_key(|r| r.ended_seq)
}

/// The first seq a viewer at `n` may hold anything open from: just after
/// the last run's end before `n` (nothing stays open past a run's end),
/// else the oldest seq the journal holds.
fn boundary(inner: &Inner, n: u64) -> u64 {
    let held = inner.base_seq + 1;
    last_ended(inner, n)
        .and_then(|r| r.ended_seq)
        .map_or(held, |end| (end + 1).max(held))
}

/// The fold of the journal up to `n`: from the end view of the last run
/// that ended by then (or the thread's start), plus `events` after it
/// (those from [`boundary`] to `n`).
fn fold_at(thread: &Thread, inner: &Inner, n: u64, events: &[Arc<Entry>]) -> Option<Fold> {
    let (mut fold, from) = match last_ended(inner, n) {
        Some(run) => {
            let view = super::branch::view_at(thread, inner, &run.run_id).ok()?;
            let from = view.seq;
            (Fold::at_checkpoint(&view), from)
        }
        None if inner.base_seq == 0 => (Fold::new(), 0),
        None => return None,
    };
    if from < inner.base_seq {
        return None;
    }
    for e in events.iter().filter(|e| e.seq > from && e.seq <= n) {
        fold.apply(e.seq, &e.event);
    }
    Some(fold)
}

impl Thread {
    /// The short name of the history this thread's journal holds, when the
    /// store can lose history ([`crate::store::JournalStore::epoch`]): what
    /// a client's cursor carries beside its seq.
    pub fn epoch(&self) -> Option<String> {
        self.store.epoch(&self.key)
    }
}
