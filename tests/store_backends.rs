//! One suite for the journal backends of one node: every case runs against
//! the memory store and the SQLite store (a real file in a temporary
//! directory), through the `JournalStore` trait only, so both keep the same
//! promises — store-checked seqs, gapless replay from any seq, compaction,
//! what survives a restart. (Redis assigns seqs itself and is covered by
//! tests/cluster.rs and the Redis cases of the other suites.)
//!
//! Also here: a journal file written before events were stored a batch per
//! row opens, replays and continues gapless (`tests/fixtures/journal-v1`).
//!
//! ```sh
//! cargo test --test store_backends
//! ```

use agui_gateway::store::memory::MemoryStore;
use agui_gateway::store::sqlite::SqliteStore;
use agui_gateway::store::{
    AppendBatch, JournalStore, StoreError, StoredThread, ThreadKey, ThreadMeta,
};
use bytes::Bytes;
use std::path::PathBuf;
use std::sync::Arc;

/// A backend under test, able to "restart": the memory store hands back the
/// same instance (it keeps nothing across a process), SQLite a new store on
/// the same file after closing the old one.
enum Backend {
    Memory(Arc<MemoryStore>),
    Sqlite(tempfile::TempDir),
}

impl Backend {
    fn memory() -> Backend {
        Backend::Memory(Arc::new(MemoryStore::new()))
    }

    fn sqlite() -> Backend {
        Backend::Sqlite(tempfile::tempdir().unwrap())
    }

    fn open(&self) -> Arc<dyn JournalStore> {
        match self {
            Backend::Memory(s) => s.clone(),
            Backend::Sqlite(dir) => {
                Arc::new(SqliteStore::open(&dir.path().join("journal.db"), "normal", 1024).unwrap())
            }
        }
    }

    /// Closes `store` (every queued batch written) and opens it again.
    async fn restart(&self, store: Arc<dyn JournalStore>) -> Arc<dyn JournalStore> {
        store.close().await;
        drop(store);
        self.open()
    }
}

fn meta(last_seq: u64, status: &str) -> ThreadMeta {
    ThreadMeta {
        creator: "u".into(),
        agent: Some("a".into()),
        status: status.into(),
        created_ms: 1,
        updated_ms: last_seq,
        last_seq,
    }
}

/// Event `seq` of a thread: a CUSTOM event `pad` bytes long, its seq inside
/// (so a misplaced event is seen).
fn event(seq: u64, pad: usize) -> Bytes {
    let head = format!("{{\"type\":\"CUSTOM\",\"name\":\"n\",\"value\":{{\"seq\":{seq},\"pad\":\"");
    let mut json = head.into_bytes();
    json.extend(std::iter::repeat_n(b'x', pad));
    json.extend_from_slice(b"\"}}");
    Bytes::from(json)
}

fn batch(key: &ThreadKey, events: Vec<(u64, Bytes)>, status: &str) -> AppendBatch {
    let last = events.last().map_or(0, |(s, _)| *s);
    AppendBatch {
        key: key.clone(),
        meta: meta(last, status),
        events,
        compact: None,
        fence: None,
        run_boundary: true,
        idempotency: None,
        closes_failed_run: false,
    }
}

/// Events `from..from + n`, each `pad` bytes of padding.
fn events(from: u64, n: u64, pad: usize) -> Vec<(u64, Bytes)> {
    (from..from + n).map(|s| (s, event(s, pad))).collect()
}

async fn append(store: &Arc<dyn JournalStore>, b: AppendBatch) -> Result<u64, StoreError> {
    store.append(b).await.expect("acknowledged")
}

fn seqs(t: &StoredThread) -> Vec<u64> {
    t.events.iter().map(|(s, _)| *s).collect()
}

/// Every read from every seq returns exactly the events after it.
fn assert_reads_from_any_seq(store: &Arc<dyn JournalStore>, key: &ThreadKey, all: &[(u64, Bytes)]) {
    let last = all.last().map_or(0, |(s, _)| *s);
    assert_eq!(store.load(key).unwrap().unwrap().events, all, "load");
    for after in 0..=last + 1 {
        let want: Vec<_> = all.iter().filter(|(s, _)| *s > after).cloned().collect();
        let got = store.load_after(key, after).unwrap().unwrap();
        assert_eq!(got.events, want, "events after {after}");
        assert_eq!(got.meta.last_seq, last);
    }
}

macro_rules! for_each_backend {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test]
            async fn $case() {
                super::$case(super::Backend::memory()).await
            })*
        }
        mod sqlite {
            $(#[tokio::test]
            async fn $case() {
                super::$case(super::Backend::sqlite()).await
            })*
        }
    };
}

for_each_backend!(
    batches_of_any_size_replay_gapless_from_any_seq,
    compaction_cutting_a_batch_keeps_its_later_events,
    a_batch_that_does_not_continue_the_journal_is_refused_alone,
    large_events_come_back_byte_for_byte,
    a_restart_finds_running_threads_and_they_continue,
);

async fn batches_of_any_size_replay_gapless_from_any_seq(backend: Backend) {
    let store = backend.open();
    let k = ThreadKey::new("t", "sizes");
    let mut all = Vec::new();
    // Batches of one, a few and many, one at a time and queued together
    // (one group commit for the journal that has them).
    for n in [1, 5, 1, 150, 2] {
        let evs = events(all.len() as u64 + 1, n, 40);
        all.extend(evs.clone());
        append(&store, batch(&k, evs, "running")).await.unwrap();
    }
    let queued: Vec<_> = [1, 3, 1, 7]
        .into_iter()
        .map(|n| {
            let evs = events(all.len() as u64 + 1, n, 10);
            all.extend(evs.clone());
            store.append(batch(&k, evs, "running"))
        })
        .collect();
    for (ack, first) in queued.into_iter().zip([160, 161, 164, 165]) {
        assert_eq!(ack.await.unwrap(), Ok(first));
    }
    assert_reads_from_any_seq(&store, &k, &all);
    let store = backend.restart(store).await;
    assert_reads_from_any_seq(&store, &k, &all);
    // And it continues, gapless, after the restart.
    let more = events(all.len() as u64 + 1, 4, 0);
    all.extend(more.clone());
    append(&store, batch(&k, more, "finished")).await.unwrap();
    assert_reads_from_any_seq(&store, &k, &all);
    assert_eq!(store.load(&k).unwrap().unwrap().meta.status, "finished");
}

async fn compaction_cutting_a_batch_keeps_its_later_events(backend: Backend) {
    let store = backend.open();
    let k = ThreadKey::new("t", "compacted");
    for from in [1, 11, 21] {
        append(&store, batch(&k, events(from, 10, 20), "running"))
            .await
            .unwrap();
    }
    // The base, 15, falls in the middle of the second batch.
    let mut end = batch(&k, events(31, 1, 20), "finished");
    end.compact = Some((15, Bytes::from_static(b"{\"fold\":15}")));
    append(&store, end).await.unwrap();
    let after_base = events(16, 16, 20);
    let check = |store: &Arc<dyn JournalStore>, after_base: &[(u64, Bytes)]| {
        let t = store.load(&k).unwrap().unwrap();
        assert_eq!(t.base, Some((15, Bytes::from_static(b"{\"fold\":15}"))));
        assert_eq!(t.events, after_base);
        // A read from below the base gets everything after the base.
        for after in [0, 3, 10, 14, 15] {
            let t = store.load_after(&k, after).unwrap().unwrap();
            assert_eq!(t.events, after_base, "after {after}");
        }
        let last = after_base.last().unwrap().0;
        for after in 16..=last {
            let want: Vec<_> = after_base
                .iter()
                .filter(|(s, _)| *s > after)
                .cloned()
                .collect();
            assert_eq!(store.load_after(&k, after).unwrap().unwrap().events, want);
        }
    };
    check(&store, &after_base);
    let store = backend.restart(store).await;
    check(&store, &after_base);
    // A second compaction cutting the row the first one trimmed.
    let mut next = batch(&k, events(32, 3, 20), "finished");
    next.compact = Some((18, Bytes::from_static(b"{\"fold\":18}")));
    append(&store, next).await.unwrap();
    let t = store.load(&k).unwrap().unwrap();
    assert_eq!(t.base.as_ref().unwrap().0, 18);
    assert_eq!(seqs(&t), (19..=34).collect::<Vec<_>>());
    assert_eq!(t.events, events(19, 16, 20));
}

async fn a_batch_that_does_not_continue_the_journal_is_refused_alone(backend: Backend) {
    let store = backend.open();
    let k = ThreadKey::new("t", "checked");
    let other = ThreadKey::new("t", "other");
    assert_eq!(
        append(&store, batch(&k, events(2, 1, 0), "running")).await,
        Err(StoreError::SeqConflict {
            expected: 1,
            got: 2
        }),
        "a new thread starts at 1"
    );
    append(&store, batch(&k, events(1, 3, 0), "running"))
        .await
        .unwrap();
    // Queued together: a reused seq, a gap, seqs that skip inside the batch,
    // and a good batch of another thread. Only the bad ones are refused.
    let reused = store.append(batch(&k, events(3, 2, 0), "finished"));
    let gap = store.append(batch(&k, events(5, 1, 0), "finished"));
    let mut skipping = events(4, 3, 0);
    skipping[2].0 = 7;
    let skips = store.append(batch(&k, skipping, "finished"));
    let fine = store.append(batch(&other, events(1, 2, 0), "running"));
    assert_eq!(
        reused.await.unwrap(),
        Err(StoreError::SeqConflict {
            expected: 4,
            got: 3
        })
    );
    assert_eq!(
        gap.await.unwrap(),
        Err(StoreError::SeqConflict {
            expected: 4,
            got: 5
        })
    );
    assert_eq!(
        skips.await.unwrap(),
        Err(StoreError::SeqConflict {
            expected: 6,
            got: 7
        })
    );
    assert_eq!(fine.await.unwrap(), Ok(1));
    assert!(store.healthy(), "a refused batch is not a store failure");
    let t = store.load(&k).unwrap().unwrap();
    assert_eq!(t.events, events(1, 3, 0), "nothing of the refused batches");
    assert_eq!((t.meta.last_seq, t.meta.status.as_str()), (3, "running"));
    assert_eq!(store.load(&other).unwrap().unwrap().events, events(1, 2, 0));
    // The journal goes on where it was.
    append(&store, batch(&k, events(4, 1, 0), "finished"))
        .await
        .unwrap();
    assert_reads_from_any_seq(&store, &k, &events(1, 4, 0));
}

async fn large_events_come_back_byte_for_byte(backend: Backend) {
    let store = backend.open();
    let k = ThreadKey::new("t", "large");
    // Snapshots of megabytes among small deltas, in one batch; then a large
    // batch of one.
    let pads = [10, 3 << 20, 10, 1_500_000, 10, 200_000, 10];
    let first: Vec<_> = pads
        .iter()
        .enumerate()
        .map(|(i, pad)| (i as u64 + 1, event(i as u64 + 1, *pad)))
        .collect();
    append(&store, batch(&k, first.clone(), "running"))
        .await
        .unwrap();
    let one = vec![(8, event(8, 2 << 20))];
    append(&store, batch(&k, one.clone(), "finished"))
        .await
        .unwrap();
    let all: Vec<_> = first.into_iter().chain(one).collect();
    assert_reads_from_any_seq(&store, &k, &all);
    let store = backend.restart(store).await;
    assert_reads_from_any_seq(&store, &k, &all);
}

async fn a_restart_finds_running_threads_and_they_continue(backend: Backend) {
    let store = backend.open();
    let running = ThreadKey::new("t", "running");
    let done = ThreadKey::new("t", "done");
    append(&store, batch(&running, events(1, 5, 0), "running"))
        .await
        .unwrap();
    append(&store, batch(&done, events(1, 2, 0), "finished"))
        .await
        .unwrap();
    // Metadata alone (no events) changes no seq.
    let mut meta_only = batch(&done, Vec::new(), "finished");
    meta_only.meta = meta(2, "finished");
    meta_only.meta.updated_ms = 99;
    append(&store, meta_only).await.unwrap();
    let store = backend.restart(store).await;
    assert_eq!(store.running().unwrap(), vec![running.clone()]);
    let listed: Vec<_> = store
        .list("t")
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(listed, [done.clone(), running.clone()], "newest first");
    assert_eq!(store.load(&done).unwrap().unwrap().meta.updated_ms, 99);
    // Recovery closes the run where the journal ends.
    append(&store, batch(&running, events(6, 1, 0), "error"))
        .await
        .unwrap();
    assert!(store.running().unwrap().is_empty());
    assert_reads_from_any_seq(&store, &running, &events(1, 6, 0));
}

/// A copy of the fixture file in a temporary directory (opening a journal
/// writes to it).
fn fixture_copy(dir: &tempfile::TempDir) -> PathBuf {
    let from =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/journal-v1/journal.db");
    let to = dir.path().join("journal.db");
    std::fs::copy(&from, &to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    to
}

/// Event `seq` of the fixture's thread `thread` whose run ends at `last`
/// (0: never), as `tests/fixtures/journal-v1/make.rs` wrote it.
fn fixture_event(thread: &str, seq: u64, last: u64) -> Bytes {
    let json = match seq {
        1 => format!(r#"{{"type":"RUN_STARTED","threadId":"{thread}","runId":"r1"}}"#),
        2 => r#"{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}"#.to_owned(),
        s if s == last => {
            format!(r#"{{"type":"RUN_FINISHED","threadId":"{thread}","runId":"r1"}}"#)
        }
        7 => format!(
            r#"{{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"{}"}}"#,
            "y".repeat(5000)
        ),
        s => format!(r#"{{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"seq {s} "}}"#),
    };
    Bytes::from(json)
}

fn fixture_events(
    thread: &str,
    seqs: std::ops::RangeInclusive<u64>,
    last: u64,
) -> Vec<(u64, Bytes)> {
    seqs.map(|s| (s, fixture_event(thread, s, last))).collect()
}

#[tokio::test]
async fn a_journal_file_from_before_batch_rows_replays_and_continues_gapless() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_copy(&dir);
    let open =
        || -> Arc<dyn JournalStore> { Arc::new(SqliteStore::open(&path, "normal", 1024).unwrap()) };
    let finished = ThreadKey::new("acme", "finished");
    let running = ThreadKey::new("acme", "running");
    let compacted = ThreadKey::new("other", "compacted");
    let store = open();
    // Everything the old file held, from any seq.
    assert_reads_from_any_seq(&store, &finished, &fixture_events("finished", 1..=9, 9));
    let t = store.load(&finished).unwrap().unwrap();
    assert_eq!(
        (
            t.meta.creator.as_str(),
            t.meta.agent.as_deref(),
            t.meta.status.as_str()
        ),
        ("alice", Some("echo"), "finished")
    );
    assert_reads_from_any_seq(&store, &running, &fixture_events("running", 1..=8, 0));
    let t = store.load(&compacted).unwrap().unwrap();
    assert_eq!(
        t.base,
        Some((15, Bytes::from_static(br#"{"fold":"at 15"}"#)))
    );
    assert_eq!(t.events, fixture_events("compacted", 16..=31, 31));
    assert_eq!(
        store.load_after(&compacted, 20).unwrap().unwrap().events,
        fixture_events("compacted", 21..=31, 31)
    );
    // Restart recovery finds the interrupted run.
    assert_eq!(store.running().unwrap(), vec![running.clone()]);
    assert_eq!(store.list("acme").unwrap().len(), 2);
    // The journals continue where the old file ends, and the store still
    // checks their seqs.
    let wrong = batch(&running, fixture_events("running", 8..=9, 9), "finished");
    assert_eq!(
        append(&store, wrong).await,
        Err(StoreError::SeqConflict {
            expected: 9,
            got: 8
        })
    );
    let end = batch(&running, fixture_events("running", 9..=10, 10), "finished");
    assert_eq!(append(&store, end).await, Ok(9));
    let mut all = fixture_events("running", 1..=8, 0);
    all.extend(fixture_events("running", 9..=10, 10));
    assert_reads_from_any_seq(&store, &running, &all);
    assert!(store.running().unwrap().is_empty());
    // The old layout is gone, and the rows the old process left below the
    // compacted base are collected like any others.
    let rows_below_base = || {
        let conn = rusqlite::Connection::open(&path).unwrap();
        let old: bool = conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'events')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(!old, "the per-event table is dropped");
        conn.query_row(
            "SELECT COUNT(*) FROM batches WHERE thread = 'compacted' AND first_seq <= 15",
            [],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while rows_below_base() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "rows below the base collected"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // And a second start reads the migrated file as it is.
    store.close().await;
    drop(store);
    let store = open();
    assert_reads_from_any_seq(&store, &running, &all);
    assert_reads_from_any_seq(&store, &finished, &fixture_events("finished", 1..=9, 9));
    assert_eq!(
        store.load(&compacted).unwrap().unwrap().events,
        fixture_events("compacted", 16..=31, 31)
    );
}
