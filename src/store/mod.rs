//! Journal storage behind one trait: [`memory`] for tests and throwaway
//! gateways, [`sqlite`] for the embedded default. [`bus`] is how nodes
//! sharing a store tell each other what became durable.
//!
//! Appends are asynchronous and acknowledged: [`JournalStore::append`]
//! returns a receiver that resolves once the batch is durable. The thread
//! layer publishes events to viewers only after that, so a crash can never
//! un-say an event a viewer saw, and `seq` numbers are never reused.

pub mod bus;
pub mod counters;
pub mod lease;
pub mod memory;
pub mod page_file;
pub mod presence;
pub mod redis;
pub mod sqlite;

use bytes::Bytes;
use serde::Serialize;
use tokio::sync::oneshot;

/// A thread's identity: threads are scoped by tenant.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ThreadKey {
    pub tenant: String,
    #[serde(rename = "threadId")]
    pub thread_id: String,
}

impl ThreadKey {
    /// A key for `thread_id` under `tenant`.
    pub fn new(tenant: impl Into<String>, thread_id: impl Into<String>) -> ThreadKey {
        ThreadKey {
            tenant: tenant.into(),
            thread_id: thread_id.into(),
        }
    }
}

/// What the store keeps about a thread besides its events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadMeta {
    /// Subject of the user who created the thread (holds every permission).
    pub creator: String,
    /// Agent of the latest run.
    pub agent: Option<String>,
    /// Status of the latest run (`running`, `finished`, …) or `idle`.
    pub status: String,
    pub created_ms: u64,
    pub updated_ms: u64,
    /// Last seq in the journal.
    pub last_seq: u64,
}

/// Events to append, with the thread's updated metadata.
#[derive(Debug, Clone)]
pub struct AppendBatch {
    pub key: ThreadKey,
    pub meta: ThreadMeta,
    /// (seq, event JSON), consecutive. A store of one node checks that the
    /// first follows the stored last seq ([`StoreError::SeqConflict`]
    /// otherwise); a shared store (Redis) assigns the seqs itself, in the
    /// append, and answers the first it gave (several nodes append meta
    /// events to one thread; a run's own events are serialized by its lease).
    pub events: Vec<(u64, Bytes)>,
    /// When set, events with seq ≤ this are dropped and `snapshot` becomes
    /// the thread's base (retention/compaction).
    pub compact: Option<(u64, Bytes)>,
    /// The run lease this batch is written under ([`lease`]): a shared
    /// store refuses it ([`StoreError::Fenced`]) unless the lease is still
    /// this one. `None` for writes outside a run (meta, compaction).
    pub fence: Option<std::sync::Arc<str>>,
    /// True when the batch starts or ends a run: only then does it set the
    /// thread's status and agent (a meta event appended by a node whose copy
    /// lags must not put back an old status).
    pub run_boundary: bool,
    /// `(clientEventId, event id)` of a META event posted with an
    /// idempotency key: a shared store refuses a second batch with the same
    /// key on the thread ([`StoreError::Duplicate`]), whichever node it
    /// reaches. (One process checks its own memory before appending.)
    pub idempotency: Option<(String, String)>,
    /// The batch that closes a run after one of the run's batches failed.
    /// A shared store refuses every later batch of a run (same `fence`)
    /// once one failed — the journal must not skip events without a seq
    /// gap — except this one.
    pub closes_failed_run: bool,
}

/// A thread as loaded from the store.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredThread {
    pub meta: ThreadMeta,
    /// The fold at `base_seq` (JSON), when older events were compacted.
    pub base: Option<(u64, Bytes)>,
    /// Events after the base, in seq order.
    pub events: Vec<(u64, Bytes)>,
}

/// Why an append or a load failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The backend failed (I/O, connection, a damaged row).
    #[error("journal store: {0}")]
    Failed(String),
    /// A batch did not continue the stored journal: its first seq is not
    /// the one after the stored last. The store refuses it (and only it),
    /// so two writers of one thread — two nodes, or two processes on one
    /// file — can never interleave or reuse seqs; the loser reloads.
    #[error(
        "journal store: seq conflict: the journal continues at {expected}, the batch starts at {got}"
    )]
    SeqConflict { expected: u64, got: u64 },
    /// The batch was written under a run lease that is no longer its run's
    /// (the node lost it; another node closed the run): nothing changed.
    #[error("journal store: the run's lease was lost; another node closed the run")]
    Fenced,
    /// A META event with this idempotency key is already stored (posted
    /// through another node): the id of that event. Nothing changed.
    #[error("journal store: already stored as event {0}")]
    Duplicate(String),
    /// The stored journal is not the one this node has seen: it lost
    /// history (a shared store restarted empty, flushed, or restored from
    /// an older snapshot — its epoch changed, or it ends before what this
    /// node published). Nothing changed; the thread's copy is reloaded from
    /// what the store holds now.
    #[error("journal store: the stored journal lost history this node had seen")]
    JournalLost,
}

impl StoreError {
    /// A backend failure with this description.
    pub fn failed(why: impl std::fmt::Display) -> StoreError {
        StoreError::Failed(why.to_string())
    }
}

/// Acknowledgement of a durable append: the seq the store gave the batch's
/// first event. A node-local store checks and keeps the batch's own seqs; a
/// shared one (Redis) assigns the next seqs of the stored journal, which
/// differ from the batch's when another node appended in between.
pub type AppendAck = oneshot::Receiver<Result<u64, StoreError>>;

/// A journal backend.
pub trait JournalStore: Send + Sync + 'static {
    /// Queues `batch`; the receiver resolves when it is durable (or failed),
    /// with the seq of its first event. Batches of one thread are applied in
    /// the order they are queued; seqs are checked (or assigned) by the
    /// store, not only in memory.
    fn append(&self, batch: AppendBatch) -> AppendAck;
    /// Loads a thread (blocking; call from `spawn_blocking`).
    fn load(&self, key: &ThreadKey) -> Result<Option<StoredThread>, StoreError>;
    /// Loads a thread's metadata and its events after seq `after` (all of
    /// them after the base, if the base is past `after`): how a copy catches
    /// up without reading the whole journal again. Blocking.
    fn load_after(&self, key: &ThreadKey, after: u64) -> Result<Option<StoredThread>, StoreError> {
        let mut stored = self.load(key)?;
        if let Some(t) = &mut stored
            && t.base.as_ref().is_none_or(|(base, _)| *base <= after)
        {
            t.events.retain(|(seq, _)| *seq > after);
        }
        Ok(stored)
    }
    /// Events with `after < seq < until`, in seq order: about `max_bytes`
    /// of them (at least one, when there is one), for a reader of what
    /// left a thread's memory (see `thread::tail`). Fewer than asked when
    /// compaction took them. Blocking. The default reads the journal after
    /// `after`; a backend overrides it with a bounded read.
    fn read_events(
        &self,
        key: &ThreadKey,
        after: u64,
        until: u64,
        max_bytes: usize,
    ) -> Result<Vec<(u64, Bytes)>, StoreError> {
        let events = self
            .load_after(key, after)?
            .map(|t| t.events)
            .unwrap_or_default();
        Ok(within(events.into_iter(), after, until, max_bytes))
    }
    /// Threads of `tenant`, newest first.
    fn list(&self, tenant: &str) -> Result<Vec<(ThreadKey, ThreadMeta)>, StoreError>;
    /// Threads whose latest run was still running (for restart recovery).
    fn running(&self) -> Result<Vec<ThreadKey>, StoreError>;
    /// Cheap reachability check for `/readyz`.
    fn ping(&self) -> Result<(), StoreError>;
    /// A short name of the history `key`'s journal holds, as this node
    /// knows it, when the store can lose history and start a journal anew
    /// (Redis: its epoch); part of the cursors clients hold, so a cursor
    /// into a lost history is told apart from the same seq of the new one.
    /// `None`: nothing to tell apart (a local store).
    fn epoch(&self, _key: &ThreadKey) -> Option<String> {
        None
    }
    /// `key`'s journal lost history this node had seen: what the store
    /// holds from here on is a new history, under a new epoch, unless the
    /// store's journal is already another one than this node knew (a flush
    /// or an empty restart: its next write starts one). Without it a
    /// journal restored from an older snapshot would go on under its old
    /// epoch, and a cursor into the lost events would match the new ones
    /// written at the same seqs. Only once per loss found: `Ok(false)` when
    /// the thread was reloaded since its loss was found (a late report of
    /// one dealt with already: renewing the epoch then would lose the
    /// reloaded journal). Blocking; a store without epochs: `Ok(true)`, nothing done.
    fn new_history(&self, _key: &ThreadKey) -> Result<bool, StoreError> {
        Ok(true)
    }
    /// False once a write has failed: readiness turns false, because runs
    /// can no longer be journaled (and nothing unjournaled is published).
    fn healthy(&self) -> bool {
        true
    }
    /// Stops taking batches and resolves once every batch queued before is
    /// written (or failed): the last step of a shutdown, so a process never
    /// exits with acknowledged-to-nobody batches still in a queue.
    fn close(&self) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

/// Of `events` (in seq order), those with `after < seq < until`, up to
/// `max_bytes` of JSON (at least one): what [`JournalStore::read_events`]
/// answers.
pub fn within(
    events: impl Iterator<Item = (u64, Bytes)>,
    after: u64,
    until: u64,
    max_bytes: usize,
) -> Vec<(u64, Bytes)> {
    let mut out = Vec::new();
    let mut bytes = 0;
    for (seq, json) in events {
        if seq <= after {
            continue;
        }
        if seq >= until || (bytes >= max_bytes && !out.is_empty()) {
            break;
        }
        bytes += json.len();
        out.push((seq, json));
    }
    out
}
