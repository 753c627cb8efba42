//! A thread's hot tail: the newest published entries, kept in memory up to
//! `threads.hot_bytes`; what is older (and not compacted) stays in the
//! store and is read back when a reader asks for it.
//!
//! Why by bytes: a count bounds nothing. Ten thousand entries of a thread
//! were 1.5 MB for short deltas and 40 MB for a run restating its inputs,
//! and a node holding thousands of threads could not say what it would
//! need. A reader of the past (a viewer catching up, a join from an older
//! cursor, a fork replaying its base) is rare next to the live path, which
//! only ever needs the newest entries; so the past pays a store read and
//! the live path pays nothing.
//!
//! What never leaves: the entries of a run still running (closing it after
//! a node loss needs them, and the SSE join re-opens it from them), and a
//! thread's fold, run table and checkpoints (a snapshot never reads the
//! journal). Each tail counts its bytes into the node's total
//! ([`NodeBytes`]), which the registry holds to `threads.memory_budget`.

use super::packed::Packed;
use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A kept event, scanned again from its text (it was scanned once when it
/// was published, so this does not fail; a failure is logged and the
/// event skipped, as a damaged stored one is). The tail keeps only the
/// text ([`super::packed`]): an [`Entry`] is 272 bytes of routing fields
/// and frame slots that only the live fan-out needs, about twice a typical
/// event's text; a reader of the past gets a fresh one, which costs it
/// microseconds and the live path nothing.
pub(super) fn kept_event(seq: u64, json: Bytes) -> Option<Event> {
    match Event::parse(json) {
        Ok(event) => Some(event),
        Err(e) => {
            tracing::error!(seq, "a kept event no longer scans, skipped: {e}");
            None
        }
    }
}

/// A journal entry for kept event `seq`, of thread `thread_id`, with its
/// run as `fold` remembers it.
fn kept_entry(seq: u64, json: Bytes, thread_id: &Arc<str>, fold: &Fold) -> Option<Arc<Entry>> {
    let entry = Entry::new(thread_id.clone(), seq, kept_event(seq, json)?);
    entry.set_origin(origin_at(fold, seq));
    Some(Arc::new(entry))
}

/// Bytes the resident threads of this node hold: their tails, and their
/// folds as last estimated (the registry compares the sum with
/// `threads.memory_budget`). Shared by every thread's settings.
#[derive(Debug, Clone, Default)]
pub struct NodeBytes(Arc<[AtomicUsize; 2]>);

const TAILS: usize = 0;
const FOLDS: usize = 1;

impl NodeBytes {
    /// The bytes of the node's tails now.
    pub fn tails(&self) -> usize {
        self.0[TAILS].load(Ordering::Relaxed)
    }

    /// The bytes of the node's folds (messages, state, runs, checkpoints),
    /// as each thread last estimated them.
    pub fn folds(&self) -> usize {
        self.0[FOLDS].load(Ordering::Relaxed)
    }

    fn add(&self, n: usize) {
        self.0[TAILS].fetch_add(n, Ordering::Relaxed);
    }

    fn sub(&self, n: usize) {
        self.0[TAILS].fetch_sub(n, Ordering::Relaxed);
    }

    fn move_fold(&self, from: usize, to: usize) {
        self.0[FOLDS].fetch_add(to, Ordering::Relaxed);
        self.0[FOLDS].fetch_sub(from, Ordering::Relaxed);
    }
}

/// The published events a thread holds in memory, oldest first, and what
/// they cost; changed only here, so the count stays exact.
pub(super) struct Tail {
    events: Packed,
    /// The thread's fold, as last estimated ([`Thread::recount_fold`]).
    fold_bytes: usize,
    /// The conversation's length at that estimate.
    counted_messages: usize,
    node: NodeBytes,
}

impl Tail {
    /// An empty tail of at most about `hot_bytes` (0: unbounded),
    /// counting into `node`.
    pub(super) fn new(node: NodeBytes, hot_bytes: usize) -> Tail {
        let events = Packed::new(hot_bytes);
        node.add(events.bytes());
        Tail {
            events,
            fold_bytes: 0,
            counted_messages: 0,
            node,
        }
    }

    /// Bytes this tail holds.
    pub(super) fn bytes(&self) -> usize {
        self.events.bytes()
    }

    /// Events kept.
    pub(super) fn len(&self) -> usize {
        self.events.len()
    }

    /// The oldest kept seq.
    pub(super) fn front_seq(&self) -> Option<u64> {
        self.events.front_seq()
    }

    /// The kept events from seq `from` on: seq and (a copy of) its text.
    pub(super) fn texts_from(&self, from: u64) -> impl Iterator<Item = (u64, Bytes)> + '_ {
        self.events.iter_from(from)
    }

    /// The kept events from seq `from` on, scanned again.
    pub(super) fn events_from(&self, from: u64) -> impl Iterator<Item = (u64, Event)> + '_ {
        self.texts_from(from)
            .filter_map(|(seq, json)| Some((seq, kept_event(seq, json)?)))
    }

    /// The thread's fold's bytes, as last estimated.
    pub(super) fn fold_bytes(&self) -> usize {
        self.fold_bytes
    }

    /// Records a new estimate of the thread's fold, taken over
    /// `messages` messages.
    pub(super) fn set_fold_bytes(&mut self, n: usize, messages: usize) {
        self.node.move_fold(self.fold_bytes, n);
        self.fold_bytes = n;
        self.counted_messages = messages;
    }

    /// True when an estimate over `messages` messages would say little the
    /// last one did not: the conversation grew by less than an eighth.
    fn estimate_holds(&self, messages: usize) -> bool {
        let last = self.counted_messages;
        messages >= last && messages - last < (last / 8).max(1)
    }

    /// Keeps a published entry (its text, copied: see [`super::packed`]).
    pub(super) fn push_back(&mut self, entry: &Entry) {
        let before = self.events.bytes();
        self.events.push(entry.seq, entry.event.json());
        match self.events.bytes().checked_sub(before) {
            Some(grew) => self.node.add(grew),
            // Closing the last chunk gave back more than the new one took.
            None => self.node.sub(before - self.events.bytes()),
        }
    }

    /// Entries for the kept events from seq `from` on (see [`kept_event`]).
    pub(super) fn entries_from<'a>(
        &'a self,
        from: u64,
        thread_id: &'a Arc<str>,
        fold: &'a Fold,
    ) -> impl Iterator<Item = Arc<Entry>> + 'a {
        self.events
            .iter_from(from)
            .filter_map(move |(seq, json)| kept_entry(seq, json, thread_id, fold))
    }

    /// Removes every event (compaction, reload). Whole chunks: freeing
    /// them is a few calls to the allocator, however long the run was.
    pub(super) fn clear(&mut self) {
        let before = self.events.bytes();
        drop(self.events.take());
        self.node.sub(before - self.events.bytes());
    }

    /// Lets the oldest events go, a chunk at a time, until the tail holds
    /// at most `max` bytes, keeping every event from seq `keep_from` on.
    /// Returns how many bytes left memory.
    pub(super) fn trim(&mut self, max: usize, keep_from: u64) -> usize {
        let mut freed = 0;
        while self.events.bytes() > max {
            match self.events.pop_front_before(keep_from) {
                Some(n) => freed += n,
                None => break,
            }
        }
        self.node.sub(freed);
        freed
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        self.node.sub(self.events.bytes());
        self.node.move_fold(self.fold_bytes, 0);
    }
}

impl Inner {
    /// The first seq held in memory: published seqs from `base_seq + 1`
    /// up to this one (excluded) are only in the store.
    pub(super) fn resident_from(&self) -> u64 {
        self.journal.front_seq().unwrap_or(self.next_seq)
    }

    /// Where the tail must keep everything from: the running run's start
    /// (closing it after a node loss, and re-opening it for a joiner, read
    /// its events), else nothing is pinned.
    fn pinned_from(&self) -> u64 {
        match self.fold.run() {
            Some(run) if run.status == RunStatus::Running => self
                .fold
                .runs()
                .get(&run.run_id)
                .map_or(0, |r| r.started_seq),
            _ => u64::MAX,
        }
    }
}

impl Thread {
    /// Brings this thread's tail within `max` bytes (`threads.hot_bytes`,
    /// or less when the node is over its budget). Returns the bytes freed.
    pub(super) fn trim_tail(&self, inner: &mut Inner, max: usize) -> usize {
        if max == 0 {
            return 0; // unbounded (a registry built without settings)
        }
        let keep_from = inner.pinned_from();
        inner.journal.trim(max, keep_from)
    }

    /// Estimates the fold's bytes anew, at a run's end, unless the
    /// conversation grew by less than an eighth since the last estimate:
    /// the estimate serializes the whole conversation, under the thread's
    /// lock, and doing it at every run's end made a run's end cost
    /// O(the conversation). Re-counting at each eighth of growth costs
    /// O(1) a message, and the count lags the truth by at most an eighth.
    /// `force`: after a load or a shed, whatever the growth.
    pub(super) fn recount_fold(&self, inner: &mut Inner, force: bool) {
        let messages = inner.fold.messages().len();
        if !force && inner.journal.estimate_holds(messages) {
            return;
        }
        // The meta notes beside the fold (at most 32 KiB) count with it.
        let n = inner.fold.approx_bytes() + inner.meta_notes.bytes();
        inner.journal.set_fold_bytes(n, messages);
    }

    /// After a load: the tail within `threads.hot_bytes`, the fold counted.
    pub(super) fn settle_residency(&self, inner: &mut Inner) {
        self.trim_tail(inner, self.settings.hot_bytes);
        self.recount_fold(inner, true);
    }

    /// The bytes this thread holds: its tail and its fold.
    pub fn resident_bytes(&self) -> usize {
        let inner = self.lock();
        inner.journal.bytes() + inner.journal.fold_bytes()
    }

    /// Gives memory back (the node is over its budget): half the tail's
    /// oldest events, and the end views of older runs. The bytes freed.
    pub(super) fn shrink(&self) -> usize {
        let mut inner = self.lock();
        let half = inner.journal.bytes() / 2;
        let mut freed = self.trim_tail(&mut inner, half.max(1));
        let before = inner.journal.fold_bytes();
        inner.fold.shed_checkpoints();
        self.recount_fold(&mut inner, true);
        freed += before.saturating_sub(inner.journal.fold_bytes());
        freed
    }

    /// Published entries in `(after, until)` that left memory, read back
    /// from the store (about `max_bytes` of them, at least one), each with
    /// the run it belongs to as the fold knows it. Called without the
    /// thread's lock: the store read is the slow part, and the live path
    /// must not wait for it. Blocking (a store read): from a blocking
    /// context, or through [`read_past`].
    pub(super) fn read_cold(
        &self,
        after: u64,
        until: u64,
        max_bytes: usize,
    ) -> Result<Vec<Arc<Entry>>, StoreError> {
        let entries = self.read_stored(after, until, max_bytes)?;
        let inner = self.lock();
        for e in &entries {
            e.set_origin(origin_at(&inner.fold, e.seq));
        }
        crate::metrics::metrics()
            .cold_reads
            .inc_by(entries.len() as u64);
        Ok(entries)
    }
}

impl Thread {
    /// Published entries with `from <= seq <= to`, those that left memory
    /// read back from the store outside the lock; `None` when some are
    /// gone (compacted meanwhile, or the store failed the read).
    pub(super) fn entries_between(&self, from: u64, to: u64) -> Option<Vec<Arc<Entry>>> {
        // Trimming may move the tail's start between the read and the
        // lock; a read that no longer meets it is made again.
        for _ in 0..3 {
            let (resident_from, base) = {
                let inner = self.lock();
                (inner.resident_from(), inner.base_seq)
            };
            if from <= base {
                return None;
            }
            let mut out = Vec::new();
            if from < resident_from {
                let until = resident_from.min(to.saturating_add(1));
                let mut after = from - 1;
                while after + 1 < until {
                    let page = read_past(|| self.read_cold(after, until, usize::MAX));
                    match page {
                        Ok(page) if page.first().is_some_and(|e| e.seq == after + 1) => {
                            after = page.last().map_or(after, |e| e.seq);
                            out.extend(page);
                        }
                        Ok(_) => return None,
                        Err(e) => {
                            tracing::warn!(thread = %self.key.thread_id, "reading events back from the store failed: {e}");
                            return None;
                        }
                    }
                }
            }
            let inner = self.lock();
            let next = out.last().map_or(from, |e: &Arc<Entry>| e.seq + 1);
            if next <= to && inner.resident_from() > next {
                continue; // trimmed meanwhile: read the rest back too
            }
            out.extend(
                inner
                    .journal
                    .entries_from(next, &self.id, &inner.fold)
                    .take_while(|e| e.seq <= to),
            );
            return Some(out);
        }
        None
    }
}

impl Thread {
    /// [`Thread::read_cold`] without the runs the entries belong to (for
    /// a replay into a fold, which needs none): takes no lock.
    pub(super) fn read_stored(
        &self,
        after: u64,
        until: u64,
        max_bytes: usize,
    ) -> Result<Vec<Arc<Entry>>, StoreError> {
        let stored = self.store.read_events(&self.key, after, until, max_bytes)?;
        let mut entries = Vec::with_capacity(stored.len());
        for (seq, json) in stored {
            match Event::parse(json) {
                Ok(event) => entries.push(Arc::new(Entry::new(self.id.clone(), seq, event))),
                Err(e) => {
                    tracing::error!(thread = %self.key.thread_id, seq, "unreadable journal event skipped: {e}")
                }
            }
        }
        Ok(entries)
    }

    /// Replays the published events `from..=to` into `fold`: those in
    /// memory from the tail, those that left it read back from the store.
    /// Under the caller's lock, so the store read holds the thread: only
    /// a fork from an older run whose end view left memory (the newest
    /// [`crate::protocol::lineage::CHECKPOINTS_KEPT`] runs' are kept) and
    /// whose events did too comes here. `false` when some are gone.
    pub(super) fn replay_into(&self, inner: &Inner, fold: &mut Fold, from: u64, to: u64) -> bool {
        let resident_from = inner.resident_from();
        if from < resident_from {
            let until = resident_from.min(to.saturating_add(1));
            let mut after = from - 1;
            while after + 1 < until {
                match read_past(|| self.read_stored(after, until, usize::MAX)) {
                    Ok(page) if page.first().is_some_and(|e| e.seq == after + 1) => {
                        for e in &page {
                            fold.apply(e.seq, &e.event);
                        }
                        after = page.last().map_or(after, |e| e.seq);
                    }
                    _ => return false,
                }
            }
        }
        for (seq, event) in inner
            .journal
            .events_from(from.max(resident_from))
            .take_while(|(seq, _)| *seq <= to)
        {
            fold.apply(seq, &event);
        }
        true
    }
}

/// The run an event at `seq` belonged to, as the run table remembers it
/// (what a viewer may see of a read-back entry depends on it, as for one
/// folded live); [`RunAgent::Outside`] between runs, unknown (fails closed)
/// for a run the table no longer holds.
fn origin_at(fold: &Fold, seq: u64) -> RunAgent {
    match fold.runs().at_seq(seq) {
        Some(run) => run.agent.clone(),
        None if fold
            .runs()
            .iter()
            .next()
            .is_some_and(|first| first.started_seq <= seq) =>
        {
            RunAgent::Outside
        }
        None => RunAgent::Unknown,
    }
}

/// Runs a blocking store read from wherever the caller is: on a
/// multi-threaded runtime's worker, the worker hands its other tasks on
/// first (`block_in_place`), so the live path of other threads goes on;
/// elsewhere (a blocking thread, a test's single-threaded runtime) it just
/// runs. Readers of the past are called from synchronous code (a viewer's
/// writer filling its next page, a snapshot's framing), which is why the
/// read is not an `.await`.
pub(super) fn read_past<R>(read: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) if rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(read)
        }
        _ => read(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, text: &str) -> Arc<Entry> {
        let json =
            serde_json::json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": text});
        let entry = Entry::new(
            Arc::from("t"),
            seq,
            Event::parse(Bytes::from(json.to_string())).unwrap(),
        );
        entry.set_origin(RunAgent::Agent(Arc::from("demo")));
        Arc::new(entry)
    }

    /// The fold is counted again after an eighth of growth, or any shrink
    /// (a branch's history replaced it), and its bytes move in the node's
    /// count.
    #[test]
    fn the_folds_estimate_is_taken_again_only_after_real_growth() {
        let node = NodeBytes::default();
        let mut tail = Tail::new(node.clone(), 0);
        tail.set_fold_bytes(8000, 80);
        assert_eq!(node.folds(), 8000);
        assert!(tail.estimate_holds(80) && tail.estimate_holds(89));
        assert!(!tail.estimate_holds(90), "an eighth more");
        assert!(!tail.estimate_holds(79), "shrunk");
        tail.set_fold_bytes(0, 0);
        assert!(
            !tail.estimate_holds(1),
            "a small conversation is counted each message"
        );
        tail.set_fold_bytes(500, 3);
        drop(tail);
        assert_eq!(
            node.folds(),
            0,
            "a dropped thread gives its fold's count back"
        );
    }

    #[test]
    fn a_tail_holds_its_bytes_and_counts_them_for_the_node() {
        let node = NodeBytes::default();
        let mut tail = Tail::new(node.clone(), 8 << 10); // 1 KiB chunks
        for seq in 1..=100 {
            tail.push_back(&entry(seq, &"x".repeat(100)));
        }
        assert_eq!(node.tails(), tail.bytes());
        let (all, json) = (tail.bytes(), entry(1, &"x".repeat(100)).event.json().len());
        // Sealed chunks are compressed (see `packed`): less than the text.
        assert!(all > 0 && all < 100 * json, "{all}");
        // Seq 95 on is pinned: what is older leaves, a chunk at a time.
        tail.trim(0, 95);
        let front = tail.front_seq().unwrap();
        assert!(front <= 95 && front > 80, "pinned entries stay: {front}");
        assert_eq!(node.tails(), tail.bytes());
        // Unpinned, trimmed to about 16 entries' worth (whole chunks).
        tail.trim(16 * json, u64::MAX);
        assert!(tail.bytes() <= 16 * json, "{}", tail.bytes());
        assert!(tail.len() >= 1, "a chunk's worth stays");
        assert_eq!(tail.front_seq(), Some(101 - tail.len() as u64));
        assert_eq!(node.tails(), tail.bytes());
        tail.clear();
        assert_eq!((tail.len(), node.tails()), (0, tail.bytes()));
        tail.push_back(&entry(101, "y"));
        drop(tail);
        assert_eq!(node.tails(), 0, "a dropped tail gives its bytes back");
    }

    /// A kept event costs its text and a few bytes of index (a live entry
    /// is 272 bytes more; a record with a `Bytes` handle was 72 more).
    #[test]
    fn a_kept_event_costs_its_text_and_a_few_bytes() {
        let e = entry(1, &"y".repeat(80));
        let json = e.event.json().len();
        assert!(json > 100 && json < 200, "{json}");
        let mut tail = Tail::new(NodeBytes::default(), 4 << 20);
        for seq in 1..=20_000 {
            tail.push_back(&entry(seq, &"y".repeat(80)));
        }
        let per_event = tail.bytes() / 20_000;
        assert!(per_event <= json + 10, "{per_event} for {json}");
        // And it reads back as the same entry.
        let back = tail
            .entries_from(0, &Arc::from("t"), &Fold::new())
            .next()
            .unwrap();
        assert_eq!((back.seq, back.event.json()), (1, e.event.json()));
    }
}
