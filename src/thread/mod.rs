//! Threads: the journal, its fold, its viewers, and its runs.
//!
//! An append goes: hand the batch to the store (under the thread lock, so
//! batches reach it in order) → durable write ([`crate::store`],
//! group-committed; the store confirms or assigns the `seq`s) → publish
//! (under the lock again): fold in, keep in the in-memory journal, push to
//! every viewer's outbox. Viewers therefore only ever see durable events, in
//! `seq` order.
//!
//! With several nodes on one store, a thread in memory here is a copy: its
//! events come from this node's acknowledged batches and from the other
//! nodes' announcements ([`crate::store::bus`]), and both are published in
//! one seq order. A seq still missing while a later one is known is read
//! back from the store, never skipped.
//!
//! `subscribe` registers the viewer and queues its snapshot or replay in the
//! same critical section as publishing, so nothing published can fall between
//! "read the journal" and "go live": there is nothing to merge or de-duplicate.
//!
//! Where each part lives:
//! - `journal`: appends, acknowledgements and publishing (the path above);
//! - `viewers`: subscribe, snapshots, replays, catching up;
//! - `compaction`: the journal folded into the base;
//! - [`run`]: the run slot — admission, strategies, queue, cancel;
//! - [`branch`]: where a run starts from (the head, or any earlier run);
//! - `run_input`: what a run is sent and how its journal opens;
//! - `drive`: a run's task, from the agent's stream to the journal;
//! - `recovery`, `journal_lost`, `load`: a failed write, a store that
//!   lost history, and (re)loading a thread;
//! - [`registry`]: the threads in memory; [`fanout`]: viewers' outboxes.

pub mod abandoned;
pub mod branch;
mod compaction;
pub mod cursor;
mod drive;
pub mod entry;
pub mod fanout;
pub mod handoff;
mod journal;
mod journal_lost;
mod judged;
mod load;
pub mod memory_ceiling;
pub mod meta;
mod opening;
mod packed;
pub mod presence;
pub mod recent;
mod recovery;
pub mod registry;
mod request;
mod requester_feed;
pub mod run;
mod run_input;
mod staged;
mod tail;
mod viewers;

pub use entry::{Entry, FrameSlot};
pub use journal::PendingAppend;
pub use registry::{Residency, Threads};
pub use tail::NodeBytes;
use tail::Tail;
use viewers::Viewer;

use crate::protocol::authorship::RunAgent;
use crate::protocol::event::now_millis;
use crate::protocol::fold::{Fold, RunInfo, RunStatus};
use crate::protocol::hooks::{SeenBy, ViewerVisibility};
use crate::protocol::{Event, EventType};
use crate::store::bus::{Publication, PublicationBus};
use crate::store::lease::{Control, RunLeases};
use crate::store::{AppendBatch, JournalStore, StoreError, ThreadKey, ThreadMeta};
use bytes::Bytes;
use dashmap::DashMap;
use fanout::{CatchUp, Live, Outbox, Outgoing};
use run::RunSlot;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// How many of a thread's latest meta `clientEventId`s are remembered for
/// idempotent retries.
pub const META_IDS_KEPT: usize = 4096;

/// Settings that shape every thread.
#[derive(Debug, Clone, Default)]
pub struct ThreadSettings {
    /// After a run ends, a journal longer than this is compacted into the
    /// fold (viewers asking for older events get a `reset` snapshot).
    pub max_events: usize,
    /// A thread with no run and no new event for this long has its journal
    /// compacted into the fold too (zero: never).
    pub idle_ttl: std::time::Duration,
    /// Most runs a thread takes in its life (0: no cap); past it, `too_large`.
    pub max_runs: u64,
    /// Most runs that fork a thread (0: no cap); past it, `too_large`.
    pub max_branches: usize,
    /// Bytes of its newest events a thread keeps in memory (0: no bound);
    /// see [`tail`].
    pub hot_bytes: usize,
    /// The node's count of resident bytes, shared by every thread.
    pub node_bytes: NodeBytes,
}

struct Inner {
    meta: ThreadMeta,
    fold: Fold,
    /// Published entries after `base_seq` still in memory (the newest;
    /// older ones are read back from the store, see [`tail`]).
    journal: Tail,
    /// Events up to here exist only as the fold (compacted).
    base_seq: u64,
    /// The next seq to publish (everything before it is published).
    next_seq: u64,
    /// The seq the next batch handed to the store should start at, as far
    /// as this copy knows (a node-local store checks it; a shared one
    /// assigns the real one).
    next_assign: u64,
    /// Batches handed to the store and not acknowledged yet.
    inflight: usize,
    /// Durable entries known here (acknowledged, or announced by another
    /// node) that wait for an earlier seq before they are published.
    arrived: BTreeMap<u64, Arc<Entry>>,
    /// A read-back of missing seqs from the store is under way.
    backfilling: bool,
    viewers: Vec<Viewer>,
    runs: RunSlot,
    /// When the last event was published.
    last_event: std::time::Instant,
    /// `clientEventId` → META event id, for idempotent meta posts.
    /// (The latest [`META_IDS_KEPT`] keys: retries come within seconds.)
    meta_ids: recent::Recent<String>,
    /// Why the journal failed this thread: nothing is appended until the
    /// recovery ([`recovery`]) has brought it back to what the store holds.
    broken: Option<String>,
    /// A recovery is under way: no run starts until it has closed the run
    /// the failure cut short.
    recovering: bool,
    /// A run's end left a due compaction to its task, to be serialized
    /// outside the lock, and no compaction has been stored since: the next
    /// run's end compacts under the lock ([`compaction`]).
    compaction_deferred: bool,
    /// Viewers that fell behind the live budget and read the journal until
    /// they catch up (see [`fanout::CatchUp`]); compaction waits for them.
    /// Viewer id → the ticket of its current catch-up ([`CatchUp::ticket`]).
    catching_up: std::collections::HashMap<u64, u64>,
    /// Who posted which meta event on which message ([`meta`]).
    meta_notes: meta::MetaNotes,
    /// The run stopped here because the store lost the history it wrote to
    /// ([`Thread::journal_lost`]), so its requester is told `journal_lost`.
    lost_run: Option<String>,
}

/// One conversation.
pub struct Thread {
    pub key: ThreadKey,
    /// `key.thread_id`, shared with every entry.
    id: Arc<str>,
    store: Arc<dyn JournalStore>,
    /// One active run per thread across nodes ([`crate::store::lease`]).
    leases: Arc<dyn RunLeases>,
    /// Where this node announces what became durable (other nodes' copies
    /// of the thread publish it to their viewers).
    bus: Arc<dyn PublicationBus>,
    settings: ThreadSettings,
    /// This thread, for catch-ups queued in viewers' outboxes.
    me: std::sync::Weak<Thread>,
    /// A reload after the store lost history is under way ([`Thread::journal_lost`]).
    reloading: tokio::sync::Mutex<()>,
    inner: Mutex<Inner>,
}

/// How a subscription starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A snapshot, then live events.
    Snapshot,
    /// Every event with `seq > n` (or a reset snapshot if compacted), then live.
    After(u64),
    /// Only events published from now on.
    Live,
}

impl Thread {
    fn new(
        key: ThreadKey,
        (store, bus, leases): (
            Arc<dyn JournalStore>,
            Arc<dyn PublicationBus>,
            Arc<dyn RunLeases>,
        ),
        settings: ThreadSettings,
        meta: ThreadMeta,
    ) -> Arc<Thread> {
        let tail = Tail::new(settings.node_bytes.clone(), settings.hot_bytes);
        Arc::new_cyclic(|me| Thread {
            id: Arc::from(key.thread_id.as_str()),
            key,
            bus,
            store,
            leases,
            settings,
            me: me.clone(),
            reloading: Default::default(),
            inner: Mutex::new(Inner {
                meta,
                fold: Fold::new(),
                journal: tail,
                base_seq: 0,
                next_seq: 1,
                next_assign: 1,
                inflight: 0,
                arrived: BTreeMap::new(),
                backfilling: false,
                viewers: Vec::new(),
                runs: RunSlot::default(),
                last_event: std::time::Instant::now(),
                meta_ids: recent::Recent::new(META_IDS_KEPT),
                catching_up: Default::default(),
                meta_notes: Default::default(),
                broken: None,
                lost_run: None,
                recovering: false,
                compaction_deferred: false,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The creator's subject (for access checks).
    pub fn creator(&self) -> String {
        self.lock().meta.creator.clone()
    }

    /// Makes `subject` the creator of a copy nobody created yet (one made
    /// for viewers who joined before the first run: its creator is `""`)
    /// and returns the creator now, so the first claim wins.
    pub fn claim_creator(&self, subject: &str) -> String {
        let mut inner = self.lock();
        if inner.meta.creator.is_empty() {
            inner.meta.creator = subject.to_owned();
        }
        inner.meta.creator.clone()
    }

    /// Gives `subject`'s claim back while the thread still holds nothing
    /// (its first run was refused): the next run claims it again, as a
    /// refused run on a thread nobody watched creates nothing.
    pub fn release_claim(&self, subject: &str) {
        let mut inner = self.lock();
        if inner.meta.creator == subject
            && inner.next_seq == 1
            && inner.next_assign <= 1
            && inner.inflight == 0
            && inner.runs.is_idle()
        {
            inner.meta.creator.clear();
        }
    }

    /// The stored metadata.
    pub fn meta(&self) -> ThreadMeta {
        self.lock().meta.clone()
    }

    /// Last published seq.
    pub fn seq(&self) -> u64 {
        self.lock().fold.seq
    }

    /// The last seq this copy knows the journal to hold (published, or
    /// skipped as unreadable).
    fn seq_known(&self) -> u64 {
        self.lock().next_seq - 1
    }

    /// The journal's latest run, if it has not ended (wherever it runs).
    /// True when nothing ever happened on this copy: no event journaled or
    /// on its way, no run active or queued, nobody watching.
    pub fn never_used(&self) -> bool {
        let inner = self.lock();
        inner.next_seq == 1
            && inner.next_assign <= 1
            && inner.inflight == 0
            && inner.viewers.is_empty()
            && inner.catching_up.is_empty()
            && inner.runs.is_idle()
    }

    pub fn open_run(&self) -> Option<String> {
        self.lock()
            .fold
            .run()
            .filter(|r| r.status == RunStatus::Running)
            .map(|r| r.run_id.clone())
    }
}

/// A thread on an in-memory store, and the built-in demo agent answering
/// at once: for tests that drive real runs through a thread.
#[cfg(test)]
pub(crate) async fn demo_thread(
    max_events: usize,
) -> (Arc<crate::upstream::Agent>, Threads, Arc<Thread>) {
    let demo = crate::demo::start(&crate::config::DemoConfig {
        token_delay: std::time::Duration::ZERO,
        ..Default::default()
    })
    .await
    .unwrap();
    let cfg: crate::config::AgentConfig = toml::from_str("id = \"demo\"\nurl = \"demo:\"").unwrap();
    let agent = Arc::new(crate::upstream::Agent::from_config(&cfg, Some(demo)).unwrap());
    let threads = Threads::new(
        Arc::new(crate::store::memory::MemoryStore::new()),
        ThreadSettings {
            max_events,
            idle_ttl: std::time::Duration::ZERO,
            ..Default::default()
        },
    );
    let thread = threads
        .get_or_create(&ThreadKey::new("ten", "th"), "u")
        .await
        .unwrap();
    (agent, threads, thread)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

    fn threads(max_events: usize) -> Threads {
        threads_on(Arc::new(MemoryStore::new()), max_events)
    }

    /// Threads on `store`, compacted past `max_events`, never for idleness.
    fn threads_on(store: Arc<dyn JournalStore>, max_events: usize) -> Threads {
        Threads::new(
            store,
            ThreadSettings {
                max_events,
                idle_ttl: std::time::Duration::ZERO,
                ..Default::default()
            },
        )
    }

    /// Thread `th` of tenant `ten` in `ts`, created by `u` if new.
    async fn thread_th(ts: &Threads) -> Arc<Thread> {
        ts.get_or_create(&ThreadKey::new("ten", "th"), "u")
            .await
            .unwrap()
    }

    fn ev(v: Value) -> Event {
        Event::build(v)
    }

    async fn drain(rx: &mut fanout::OutboxReceiver) -> Vec<Value> {
        let mut out = Vec::new();
        while let Ok(Some(item)) =
            tokio::time::timeout(std::time::Duration::from_millis(20), rx.recv()).await
        {
            out.push(match item {
                Outgoing::Event(e) => json!({
                    "type": "event",
                    "seq": e.seq,
                    "event": serde_json::from_slice::<Value>(e.event.json()).unwrap(),
                }),
                Outgoing::Message(m) => serde_json::from_slice(&m).unwrap(),
                Outgoing::Close(c, _) => json!({"close": c}),
                Outgoing::Continues => json!({"continues": true}),
            });
        }
        out
    }

    #[tokio::test]
    async fn seqs_are_gapless_and_viewers_get_snapshot_then_live() {
        let ts = threads(1000);
        let t = thread_th(&ts).await;
        t.append(vec![ev(
            json!({"type":"RUN_STARTED","threadId":"th","runId":"r"}),
        )])
        .await;
        let (ob, mut rx) = fanout::outbox(1 << 20);
        t.subscribe(1, ob.clone(), Start::Snapshot, None);
        // Not read yet: the snapshot is built when the writer gets to it, so
        // it shows what was published meanwhile, and nothing comes twice.
        t.append(vec![ev(json!({"type":"CUSTOM","name":"n","value":1}))])
            .await;
        let got = drain(&mut rx).await;
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0]["type"], "snapshot");
        assert_eq!(got[0]["seq"], 2);
        t.subscribe(1, ob, Start::Snapshot, None);
        let got = drain(&mut rx).await;
        assert_eq!(got[0]["seq"], 2);
        let entries = t
            .append(vec![
                ev(json!({"type":"TEXT_MESSAGE_START","messageId":"m"})),
                ev(json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"})),
            ])
            .await;
        assert_eq!(entries.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4]);
        let got = drain(&mut rx).await;
        assert_eq!(got[0]["seq"], 3);
        assert_eq!(got[1]["event"]["delta"], "x");
        assert_eq!(got.len(), 2);
    }

    #[tokio::test]
    async fn after_replays_and_compaction_forces_reset() {
        let ts = threads(3);
        let t = thread_th(&ts).await;
        for i in 0..5 {
            t.append(vec![ev(json!({"type":"CUSTOM","name":"n","value":i}))])
                .await;
        }
        let (ob, mut rx) = fanout::outbox(1 << 20);
        t.subscribe(1, ob, Start::After(3), None);
        let got = drain(&mut rx).await;
        assert_eq!(
            got.iter()
                .map(|g| g["seq"].as_u64().unwrap())
                .collect::<Vec<_>>(),
            [4, 5]
        );
        t.maybe_compact().await;
        let (ob, mut rx) = fanout::outbox(1 << 20);
        t.subscribe(2, ob, Start::After(3), None);
        let got = drain(&mut rx).await;
        assert_eq!(got[0]["type"], "snapshot");
        assert_eq!(got[0]["reset"], true);
        assert_eq!(got[0]["seq"], 5);
        // After the base, up-to-date viewers still resume without a reset.
        let (ob, mut rx) = fanout::outbox(1 << 20);
        t.subscribe(3, ob, Start::After(5), None);
        t.append(vec![ev(json!({"type":"CUSTOM","name":"n","value":6}))])
            .await;
        assert_eq!(drain(&mut rx).await[0]["seq"], 6);
    }

    /// The base is serialized outside the thread's lock: a thread that
    /// moves on meanwhile keeps its journal (the serialized copy is
    /// dropped), and the next compaction stores the newer base.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_compaction_overtaken_by_a_new_event_keeps_the_journal() {
        let store = Arc::new(MemoryStore::new());
        let ts = threads_on(store.clone(), 2);
        let key = ThreadKey::new("ten", "paused");
        let t = ts.get_or_create(&key, "u").await.unwrap();
        // A long run's journal: its base is serialized on a blocking thread.
        let long: Vec<_> = (0..1100)
            .map(|i| ev(json!({"type":"CUSTOM","name":"n","value":i})))
            .collect();
        t.append(long).await;
        let (started, serializing) = std::sync::mpsc::channel();
        let (go_on, waiting) = std::sync::mpsc::channel();
        *compaction::pause::AT_SERIALIZE.lock().unwrap() =
            Some(("paused".into(), started, waiting));
        let compacting = tokio::spawn({
            let t = t.clone();
            async move { t.maybe_compact().await }
        });
        let wait = tokio::task::spawn_blocking(move || {
            serializing.recv_timeout(std::time::Duration::from_secs(10))
        });
        assert!(
            wait.await.unwrap().is_ok(),
            "the compaction never serialized outside the thread's lock"
        );
        // Serializing now: the thread's lock is free, and it moves on.
        t.append(vec![ev(json!({"type":"CUSTOM","name":"n","value":"x"}))])
            .await;
        go_on.send(()).unwrap();
        compacting.await.unwrap();
        assert_eq!(
            t.entries_after(0).map(|e| e.len()),
            Some(1101),
            "the base of seq 1100 was not stored after seq 1101 was published"
        );
        assert_eq!(store.load(&key).unwrap().unwrap().base, None);
        t.maybe_compact().await;
        assert!(t.entries_after(0).is_none(), "compacted now");
        let stored = store.load(&key).unwrap().unwrap();
        assert_eq!(stored.base.map(|(seq, _)| seq), Some(1101));
        assert!(stored.events.is_empty());
    }

    #[tokio::test]
    async fn idle_threads_are_compacted_by_the_sweeper() {
        let ts = Threads::new(
            Arc::new(MemoryStore::new()),
            ThreadSettings {
                max_events: 1000,
                idle_ttl: std::time::Duration::from_millis(1),
                ..Default::default()
            },
        );
        let t = thread_th(&ts).await;
        t.append(vec![ev(json!({"type":"CUSTOM","name":"n","value":1}))])
            .await;
        assert_eq!(t.entries_after(0).unwrap().len(), 1);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await; // exceed the 1 ms TTL
        ts.sweep_idle().await;
        assert!(
            t.entries_after(0).is_none(),
            "compacted: after=0 now needs a reset snapshot"
        );
        assert!(t.entries_after(1).unwrap().is_empty());
    }

    #[tokio::test]
    async fn reload_from_store_restores_fold_and_seq() {
        let store: Arc<dyn JournalStore> = Arc::new(MemoryStore::new());
        let key = ThreadKey::new("ten", "th");
        {
            let ts = threads_on(store.clone(), 2);
            let t = ts.get_or_create(&key, "u").await.unwrap();
            t.append(vec![
                ev(json!({"type":"RUN_STARTED","threadId":"th","runId":"r"})),
                ev(json!({"type":"STATE_SNAPSHOT","snapshot":{"a":1}})),
                ev(json!({"type":"RUN_FINISHED","threadId":"th","runId":"r"})),
            ])
            .await;
            t.maybe_compact().await;
            t.append(vec![ev(
                json!({"type":"STATE_DELTA","delta":[{"op":"replace","path":"/a","value":2}]}),
            )])
            .await;
        }
        let ts = Threads::new(
            store,
            ThreadSettings {
                max_events: 2,
                idle_ttl: std::time::Duration::ZERO,
                ..Default::default()
            },
        );
        let t = ts.get(&key).await.unwrap().unwrap();
        let snap = t.snapshot(&None);
        assert_eq!(snap["seq"], 4);
        assert_eq!(snap["state"], json!({"a":2}));
        assert_eq!(snap["run"]["status"], "finished");
        assert_eq!(t.creator(), "u");
        let e = t
            .append(vec![ev(json!({"type":"CUSTOM","name":"x","value":1}))])
            .await;
        assert_eq!(e[0].seq, 5);
        assert!(
            ts.get(&ThreadKey::new("other", "th"))
                .await
                .unwrap()
                .is_none(),
            "tenants are separate"
        );
    }

    #[tokio::test]
    async fn recover_skips_a_thread_it_cannot_load() {
        let bad = ThreadKey::new("ten", "bad");
        let good = ThreadKey::new("ten", "good");
        let store = slow_store(0);
        let settings = ThreadSettings {
            max_events: 1000,
            idle_ttl: std::time::Duration::ZERO,
            ..Default::default()
        };
        {
            let ts = Threads::new(store.clone(), settings.clone());
            for key in [&bad, &good] {
                let t = ts.get_or_create(key, "u").await.unwrap();
                t.append(vec![ev(
                    json!({"type":"RUN_STARTED","threadId":"x","runId":"r"}),
                )])
                .await;
            }
        }
        // A new process: both runs were left open; one thread is unreadable.
        *store.damaged.lock().unwrap() = Some(bad);
        let ts = Threads::new(store, settings);
        assert_eq!(ts.recover().await.unwrap(), 1);
        let snap = ts.get(&good).await.unwrap().unwrap().snapshot(&None);
        assert_eq!(snap["run"]["status"], "error");
    }

    #[tokio::test]
    async fn a_lagging_viewer_reads_the_journal_and_goes_live_again() {
        let ts = threads(3);
        let t = thread_th(&ts).await;
        // A 300-byte budget: a few frames, then the viewer lags.
        let (ob, mut rx) = fanout::outbox(300);
        t.subscribe(1, ob, Start::Live, None);
        let (fast_ob, mut fast) = fanout::outbox(1 << 20);
        t.subscribe(2, fast_ob, Start::Live, None);
        for i in 0..100 {
            t.append(vec![ev(json!({"type":"CUSTOM","name":"n","value":i}))])
                .await;
        }
        assert_eq!(t.viewer_count(), 2, "the lagging viewer still counts");
        t.maybe_compact().await;
        assert!(
            t.entries_after(0).is_some(),
            "compaction waits for the lagging reader"
        );
        let seqs = |items: Vec<Value>| -> Vec<u64> {
            items.iter().map(|v| v["seq"].as_u64().unwrap()).collect()
        };
        assert_eq!(seqs(drain(&mut fast).await), (1..=100).collect::<Vec<_>>());
        assert_eq!(
            seqs(drain(&mut rx).await),
            (1..=100).collect::<Vec<_>>(),
            "nothing lost or repeated"
        );
        // Live again: the next event arrives normally, and compaction may run.
        t.append(vec![ev(json!({"type":"CUSTOM","name":"n","value":100}))])
            .await;
        assert_eq!(seqs(drain(&mut rx).await), [101]);
        t.maybe_compact().await;
        assert!(t.entries_after(0).is_none());
    }

    #[tokio::test]
    async fn unsubscribing_or_leaving_ends_a_catch_up() {
        let ts = threads(3);
        let t = thread_th(&ts).await;
        let (ob, mut rx) = fanout::outbox(100);
        t.subscribe(1, ob, Start::Live, None);
        let (gone, gone_rx) = fanout::outbox(100);
        t.subscribe(2, gone, Start::Live, None);
        for i in 0..20 {
            t.append(vec![ev(json!({"type":"CUSTOM","name":"n","value":i}))])
                .await;
        }
        assert_eq!(t.viewer_count(), 2);
        drop(gone_rx); // the reader went away: its catch-up is forgotten
        assert_eq!(t.viewer_count(), 1);
        t.unsubscribe(1);
        assert_eq!(t.viewer_count(), 0);
        let got = drain(&mut rx).await;
        assert!(
            got.len() < 20,
            "no catch-up after unsubscribe: {}",
            got.len()
        );
        t.append(vec![ev(json!({"type":"CUSTOM","name":"n","value":20}))])
            .await;
        assert!(drain(&mut rx).await.is_empty(), "and no live events");
    }

    /// A memory store with faults: it holds back the acknowledgement of the
    /// batch starting at `held_first` until `release` is notified, fails
    /// batches while `failing` is set, and cannot load the `damaged` thread.
    struct SlowStore {
        inner: MemoryStore,
        held_first: u64,
        release: Arc<tokio::sync::Notify>,
        failing: std::sync::atomic::AtomicBool,
        damaged: std::sync::Mutex<Option<ThreadKey>>,
    }

    impl JournalStore for SlowStore {
        fn append(&self, batch: AppendBatch) -> crate::store::AppendAck {
            let (tx, rx) = tokio::sync::oneshot::channel();
            if self.failing.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = tx.send(Err(StoreError::failed("disk full")));
                return rx;
            }
            let held = batch
                .events
                .first()
                .is_some_and(|(seq, _)| *seq == self.held_first);
            let done = self.inner.append(batch);
            let release = self.release.clone();
            tokio::spawn(async move {
                if held {
                    release.notified().await;
                }
                let _ = tx.send(done.await.unwrap_or(Ok(0)));
            });
            rx
        }
        fn load(&self, key: &ThreadKey) -> Result<Option<crate::store::StoredThread>, StoreError> {
            if self.damaged.lock().unwrap().as_ref() == Some(key) {
                return Err(StoreError::failed("damaged row"));
            }
            self.inner.load(key)
        }
        fn list(&self, tenant: &str) -> Result<Vec<(ThreadKey, ThreadMeta)>, StoreError> {
            self.inner.list(tenant)
        }
        fn running(&self) -> Result<Vec<ThreadKey>, StoreError> {
            self.inner.running()
        }
        fn ping(&self) -> Result<(), StoreError> {
            self.inner.ping()
        }
    }

    /// A registry over `store` and its thread `th`.
    async fn thread_on(store: Arc<dyn JournalStore>) -> (Threads, Arc<Thread>) {
        let ts = Threads::new(
            store,
            ThreadSettings {
                max_events: 1000,
                idle_ttl: std::time::Duration::ZERO,
                ..Default::default()
            },
        );
        let t = thread_th(&ts).await;
        (ts, t)
    }

    fn slow_store(held_first: u64) -> Arc<SlowStore> {
        Arc::new(SlowStore {
            inner: MemoryStore::new(),
            held_first,
            release: Arc::new(tokio::sync::Notify::new()),
            failing: false.into(),
            damaged: Default::default(),
        })
    }

    #[tokio::test]
    async fn a_later_seq_is_never_visible_before_an_earlier_one_is_durable() {
        let store = slow_store(2);
        let (_ts, t) = thread_on(store.clone()).await;
        t.append(vec![ev(json!({"type":"CUSTOM","name":"n","value":1}))])
            .await;
        let (ob, mut rx) = fanout::outbox(1 << 20);
        t.subscribe(1, ob, Start::Live, None);
        // Seq 2 (a run batch, say) is slow to commit; seq 3 (a meta event) is not.
        let slow = tokio::spawn({
            let t = t.clone();
            async move {
                t.append(vec![ev(json!({"type":"CUSTOM","name":"n","value":2}))])
                    .await
            }
        });
        tokio::task::yield_now().await;
        while t.lock().next_assign < 3 {
            tokio::task::yield_now().await;
        }
        let fast = t
            .append(vec![ev(json!({"type":"CUSTOM","name":"n","value":3}))])
            .await;
        assert_eq!(fast[0].seq, 3, "stored");
        assert!(
            drain(&mut rx).await.is_empty(),
            "3 waits for 2 to be durable"
        );
        store.release.notify_one();
        assert_eq!(slow.await.unwrap()[0].seq, 2);
        let got: Vec<u64> = drain(&mut rx)
            .await
            .iter()
            .map(|v| v["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(got, [2, 3]);
    }

    #[tokio::test]
    async fn a_failed_write_publishes_nothing_until_the_thread_recovers() {
        let store = slow_store(0);
        let (_ts, t) = thread_on(store.clone()).await;
        let (ob, mut rx) = fanout::outbox(1 << 20);
        t.subscribe(1, ob, Start::Live, None);
        store
            .failing
            .store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(
            t.try_append(vec![ev(json!({"type":"CUSTOM","name":"n","value":1}))])
                .await
                .is_err()
        );
        store
            .failing
            .store(false, std::sync::atomic::Ordering::Relaxed);
        assert!(
            t.try_append(vec![ev(json!({"type":"CUSTOM","name":"n","value":2}))])
                .await
                .is_err(),
            "no append after a gap"
        );
        assert!(
            drain(&mut rx).await.is_empty(),
            "nothing unstored is published"
        );
        // The store works again: the thread recovers by itself, with no gap.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while t.lock().recovering {
            assert!(std::time::Instant::now() < deadline, "recovered");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let stored = t
            .try_append(vec![ev(json!({"type":"CUSTOM","name":"n","value":3}))])
            .await
            .unwrap();
        assert_eq!(stored[0].seq, 1, "continues what the store holds");
        assert_eq!(drain(&mut rx).await[0]["seq"], 1);
    }

    /// What a `subscribe after=0` gets, as JSON.
    async fn replay(t: &Thread) -> Vec<Value> {
        let (ob, mut rx) = fanout::outbox(1 << 20);
        t.subscribe(99, ob, Start::After(0), None);
        let got = drain(&mut rx).await;
        t.unsubscribe(99);
        got
    }

    #[tokio::test]
    async fn idle_threads_leave_memory_and_come_back_unchanged() {
        let ts = Threads::new(
            Arc::new(MemoryStore::new()),
            ThreadSettings {
                max_events: 1000,
                idle_ttl: std::time::Duration::ZERO,
                ..Default::default()
            },
        )
        .with_residency(Residency {
            evict_after: std::time::Duration::ZERO,
            max_resident: 2,
            ..Residency::default()
        });
        let keys: Vec<ThreadKey> = (0..5)
            .map(|i| ThreadKey::new("ten", format!("th{i}")))
            .collect();
        let mut before = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let t = ts.get_or_create(key, "u").await.unwrap();
            t.append(vec![
                ev(json!({"type":"RUN_STARTED","threadId":"x","runId":format!("r{i}")})),
                ev(json!({"type":"RUN_FINISHED","threadId":"x","runId":format!("r{i}")})),
            ])
            .await;
            before.push((replay(&t).await, t.snapshot(&None)));
        }
        // th4 is in use (a connection holds it, with a viewer): it stays.
        let held = ts.get(&keys[4]).await.unwrap().unwrap();
        let (ob, _rx) = fanout::outbox(1 << 20);
        held.subscribe(1, ob, Start::Live, None);
        assert_eq!(ts.resident(), 5);
        assert_eq!(ts.evict_idle(), 3, "down to the budget of 2");
        assert_eq!(ts.resident(), 2);
        assert!(ts.map.contains_key(&keys[4]));
        assert!(
            !ts.map.contains_key(&keys[0]),
            "the longest idle left first"
        );
        for (key, (events, snapshot)) in keys.iter().zip(before) {
            let t = ts.get(key).await.unwrap().unwrap();
            assert_eq!(
                replay(&t).await,
                events,
                "{key:?}: same replay after eviction"
            );
            assert_eq!(t.snapshot(&None), snapshot);
            // And it still knows its run ids (a reused one stays refused).
            let run_id = format!("r{}", &key.thread_id[2..]);
            assert!(t.lock().runs.used_ids().any(|id| *id == run_id));
        }
    }

    #[tokio::test]
    async fn unread_snapshots_and_replays_stay_within_the_budget() {
        let ts = threads(1000);
        let t = thread_th(&ts).await;
        for i in 0..50 {
            t.append(vec![ev(
                json!({"type":"CUSTOM","name":"n","value":format!("{i:0>100}")}),
            )])
            .await;
        }
        // Replays: a connection that sends thousands of `subscribe after=0`
        // queues a small marker each; only the latest is served, a page at a time.
        let (ob, mut rx) = fanout::outbox(2000);
        for _ in 0..1000 {
            t.subscribe(7, ob.clone(), Start::After(0), None);
        }
        assert!(!ob.is_closed());
        let got = drain(&mut rx).await;
        assert_eq!(got.len(), 50, "only the latest subscription is served");
        assert_eq!(t.viewer_count(), 1);
        // Snapshots too: built when read (a snapshot larger than the whole
        // budget still goes), only the latest subscription's.
        let (ob, mut rx) = fanout::outbox(20);
        for _ in 0..1000 {
            t.subscribe(7, ob.clone(), Start::Snapshot, None);
        }
        assert!(!ob.is_closed());
        let got = drain(&mut rx).await;
        assert_eq!(got.len(), 1, "only the latest subscription is served");
        assert_eq!(got[0]["type"], "snapshot");
        assert!(got[0].to_string().len() > 20);
    }

    /// A bus between two in-process "nodes": what `from` announces reaches
    /// `to`'s listener, except announcements the test asks it to lose.
    struct PairBus {
        to: tokio::sync::mpsc::UnboundedSender<Publication>,
        from: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Publication>>>,
        lose_next: std::sync::atomic::AtomicBool,
    }

    impl PublicationBus for PairBus {
        fn announce(&self, publication: Publication) {
            if !self
                .lose_next
                .swap(false, std::sync::atomic::Ordering::AcqRel)
            {
                let _ = self.to.send(publication);
            }
        }
        fn subscribe(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Publication>> {
            self.from.lock().unwrap().take()
        }
    }

    #[tokio::test]
    async fn another_nodes_durable_events_reach_this_nodes_viewers_once_in_order() {
        let store: Arc<dyn JournalStore> = Arc::new(MemoryStore::new());
        let (a_to_b, b_hears) = tokio::sync::mpsc::unbounded_channel();
        let bus_a = Arc::new(PairBus {
            to: a_to_b,
            from: Default::default(),
            lose_next: false.into(),
        });
        let (unused, _) = tokio::sync::mpsc::unbounded_channel();
        let bus_b = Arc::new(PairBus {
            to: unused,
            from: std::sync::Mutex::new(Some(b_hears)),
            lose_next: false.into(),
        });
        let settings = ThreadSettings {
            max_events: 1000,
            idle_ttl: std::time::Duration::ZERO,
            ..Default::default()
        };
        let node_a = Threads::new(store.clone(), settings.clone()).with_bus(bus_a.clone());
        let node_b = Arc::new(Threads::new(store, settings).with_bus(bus_b));
        let on_a = thread_th(&node_a).await;
        on_a.append(vec![ev(json!({"type":"CUSTOM","name":"n","value":1}))])
            .await;
        // Node B serves a viewer of the same thread (loaded from the store).
        let on_b = node_b
            .get(&ThreadKey::new("ten", "th"))
            .await
            .unwrap()
            .unwrap();
        let (ob, mut rx) = fanout::outbox(1 << 20);
        on_b.subscribe(1, ob, Start::After(1), None);
        // Node B hears only announcements, delivered by its listener.
        node_b.spawn_bus_listener();
        for v in 2..=3 {
            on_a.append(vec![ev(json!({"type":"CUSTOM","name":"n","value":v}))])
                .await;
        }
        // One announcement is lost; the next one reveals the gap, which
        // node B reads back from the store.
        bus_a
            .lose_next
            .store(true, std::sync::atomic::Ordering::Release);
        on_a.append(vec![
            ev(json!({"type":"CUSTOM","name":"n","value":4})),
            ev(json!({"type":"CUSTOM","name":"n","value":5})),
        ])
        .await;
        on_a.append(vec![ev(json!({"type":"CUSTOM","name":"n","value":6}))])
            .await;
        let mut got = Vec::new();
        while got.last().is_none_or(|(seq, _)| *seq < 6) {
            let item = tokio::time::timeout(std::time::Duration::from_secs(5), rx.recv()).await;
            let Ok(Some(Outgoing::Event(e))) = item else {
                panic!("events up to 6, got {got:?} then {item:?}")
            };
            got.push((e.seq, e.event.get("value").unwrap().as_i64().unwrap()));
        }
        assert_eq!(got, [(2, 2), (3, 3), (4, 4), (5, 5), (6, 6)]);
        assert_eq!(on_b.seq(), 6);
        assert_eq!(on_b.snapshot(&None), on_a.snapshot(&None), "same fold");
        assert_eq!(on_b.meta().last_seq, 6);
        // A repeated announcement changes nothing ...
        node_b
            .deliver(Publication {
                key: on_a.key.clone(),
                events: vec![(3, on_a.entries_after(2).unwrap()[0].event.json().clone())],
            })
            .await;
        // ... and node B's own next append continues the journal after A's.
        let mine = on_b
            .try_append(vec![ev(json!({"type":"CUSTOM","name":"n","value":7}))])
            .await
            .unwrap();
        assert_eq!(mine[0].seq, 7);
        let Some(Outgoing::Event(next)) = rx.recv().await else {
            panic!("an event")
        };
        assert_eq!(next.seq, 7, "nothing repeated before it");
    }

    /// A shared store as Redis behaves: it gives each batch the next seqs of
    /// the stored journal, whatever seqs the batch carried.
    struct AssigningStore(MemoryStore);

    impl JournalStore for AssigningStore {
        fn append(&self, mut batch: AppendBatch) -> crate::store::AppendAck {
            let last = self
                .0
                .load(&batch.key)
                .ok()
                .flatten()
                .map_or(0, |t| t.meta.last_seq);
            for (i, (seq, _)) in batch.events.iter_mut().enumerate() {
                *seq = last + 1 + i as u64;
            }
            batch.meta.last_seq = last + batch.events.len() as u64;
            self.0.append(batch)
        }
        fn load(&self, key: &ThreadKey) -> Result<Option<crate::store::StoredThread>, StoreError> {
            self.0.load(key)
        }
        fn list(&self, tenant: &str) -> Result<Vec<(ThreadKey, ThreadMeta)>, StoreError> {
            self.0.list(tenant)
        }
        fn running(&self) -> Result<Vec<ThreadKey>, StoreError> {
            self.0.running()
        }
        fn ping(&self) -> Result<(), StoreError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_copy_publishes_in_the_stores_order_when_another_node_appends_in_between() {
        let store = Arc::new(AssigningStore(MemoryStore::new()));
        let (unheard, _) = tokio::sync::mpsc::unbounded_channel();
        let bus = Arc::new(PairBus {
            to: unheard,
            from: Default::default(),
            lose_next: false.into(),
        });
        let settings = ThreadSettings {
            max_events: 1000,
            idle_ttl: std::time::Duration::ZERO,
            ..Default::default()
        };
        let node = Threads::new(store.clone(), settings).with_bus(bus);
        let t = thread_th(&node).await;
        let (ob, mut rx) = fanout::outbox(1 << 20);
        t.subscribe(1, ob, Start::Live, None);
        t.append(vec![ev(json!({"type":"CUSTOM","name":"n","value":1}))])
            .await;
        // Another node appends seq 2; its announcement never arrives here.
        let mut meta = t.meta();
        meta.last_seq = 2;
        let other = br#"{"type":"CUSTOM","name":"n","value":2}"#;
        store
            .append(AppendBatch {
                key: t.key.clone(),
                meta,
                events: vec![(2, Bytes::from_static(other))],
                compact: None,
                fence: None,
                run_boundary: false,
                idempotency: None,
                closes_failed_run: false,
            })
            .await
            .unwrap()
            .unwrap();
        // This node's next batch gets seq 3 from the store, not the 2 it
        // expected; seq 2 is read back before 3 is published.
        let mine = t
            .try_append(vec![ev(json!({"type":"CUSTOM","name":"n","value":3}))])
            .await
            .unwrap();
        assert_eq!(mine[0].seq, 3, "the store's seq");
        let mut got = Vec::new();
        while got.len() < 3 {
            let item = tokio::time::timeout(std::time::Duration::from_secs(5), rx.recv()).await;
            let Ok(Some(Outgoing::Event(e))) = item else {
                panic!("three events, got {got:?} then {item:?}")
            };
            got.push((e.seq, e.event.get("value").unwrap().as_i64().unwrap()));
        }
        assert_eq!(
            got,
            [(1, 1), (2, 2), (3, 3)],
            "gapless, in the store's order"
        );
        assert_eq!(t.seq(), 3);
        // And the next batch continues after it.
        let next = t
            .try_append(vec![ev(json!({"type":"CUSTOM","name":"n","value":4}))])
            .await
            .unwrap();
        assert_eq!(next[0].seq, 4);
    }
}
