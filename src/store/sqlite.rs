//! SQLite journal (WAL) with group commit.
//!
//! One writer thread owns the write connection. It takes every append that
//! queued up while the previous transaction was committing (up to
//! `max_batch_events`) and writes them in one transaction, so throughput is
//! not one commit per event and there is no artificial delay when the load is
//! light. When nothing is queued, a small append commits on its caller's
//! thread instead, so a lone event waits for no other thread to wake
//! ([`SqliteStore::append`] says why and when). Appends are acknowledged after the commit; the thread layer shows
//! events to viewers only then. Each thread's events of one group commit are
//! one row ([`batch_row`]), so the table's B-tree work is paid per batch, not
//! per event; a read from a seq inside a row skips the row's earlier events,
//! and compaction trims the row its base falls in.
//!
//! Loss window: with `synchronous = "normal"` (the default) a commit survives
//! the process being killed (`kill -9`) but the last few transactions may be
//! lost if the machine loses power; `"full"` also survives that, at the cost
//! of an fsync per batch. Nothing acknowledged is ever lost to a process crash.
//!
//! The WAL stays bounded under any load. Passive checkpoints (off the commit
//! path) copy frames into the database but can never *reset* the log while
//! commits keep coming — a reset needs a moment with every frame copied and
//! no commit in between, which steady load never gives (a 10-minute soak grew
//! the WAL to 2.3 GB for a 28 MB database). So when the log in use passes
//! `max_wal_bytes`, the writer itself runs a `RESTART` checkpoint between two
//! group commits: no commit can land during it, readers hold their snapshot
//! for one statement only, so it completes and the next commit writes the log
//! from its start again.
//!
//! `RESTART`, not `TRUNCATE`: the file keeps its size and its blocks, so the
//! commits after a reset overwrite what the file holds instead of growing it
//! block by block again. Growing the file is what the live path paid for: on
//! ext4 an append that extends the file waited 5–8 ms whenever the passive
//! checkpoint's fsync was committing the filesystem's journal, and the
//! truncation itself (freeing 64 MiB) held the writer 30 ms — the p99 of a
//! paced run was those stalls (docs/benchmarks.md, "The tail of a paced run").
//! The size in use is counted in frames (SQLite's WAL hook after every
//! commit), since the file's length no longer says it.
//!
//! A failed commit (disk full, I/O error) turns [`JournalStore::healthy`]
//! false; it turns true again with the next commit that succeeds — a batch,
//! or the writer's own probe, retried with backoff while it is idle.

use super::*;
use batch_row::RowBuilder;
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;
use std::sync::Mutex;
use std::sync::mpsc;

mod batch_row;
mod migration;

type Ack = oneshot::Sender<Result<u64, StoreError>>;

/// The most event bytes a batch committed on its appender's thread holds
/// (see `SqliteStore::append`); a compaction's base (up to megabytes)
/// always goes to the writer thread, so an async worker is never held
/// for long.
const INLINE_MAX_BYTES: usize = 64 << 10;

/// What the writer thread is asked to do.
// Unboxed: a batch is what goes through the queue, and boxing it would add
// an allocation to each for the sake of the rare housekeeping nudge.
#[allow(clippy::large_enum_variant)]
enum Request {
    /// Write a batch (in a group commit with whatever else queued).
    Batch(AppendBatch, Ack),
    /// Look after the log and compacted rows: an append committed on its
    /// caller's thread left that to the writer ([`SqliteStore::append`]).
    Housekeeping,
}

/// A [`JournalStore`] in one SQLite file.
pub struct SqliteStore {
    /// `None` once closed ([`JournalStore::close`]).
    writer: Mutex<Option<mpsc::Sender<Request>>>,
    /// The write connection and its bookkeeping: the writer thread's, and
    /// an appender's while the writer has nothing queued (see `append`).
    core: std::sync::Arc<Mutex<Writer>>,
    /// Batches sent to the writer thread and not yet written: an append
    /// commits on its own thread only when this is zero, so it can never
    /// pass a batch queued before it.
    queued: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Whether an append may commit on its caller's thread: not with
    /// `synchronous = "full"`, whose commits each wait for an fsync.
    inline: bool,
    /// The writer thread, joined by `close`.
    writer_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Set by `close`: the writer's end is then expected, not an alarm.
    closing: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The one connection every read of this process goes through; the
    /// writer holds it while it resets the WAL (see [`Writer::bound_wal`]).
    reader: std::sync::Arc<Mutex<Connection>>,
    /// Cleared by the writer when a commit fails, set when one succeeds.
    healthy: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Resets of the log by the writer ([`Writer::bound_wal`]).
    #[cfg_attr(not(test), allow(dead_code))]
    writer_resets: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// The default of `store.max_wal_bytes`: past it the writer resets the WAL.
pub const DEFAULT_MAX_WAL_BYTES: u64 = 64 << 20;

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError::failed(e)
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS threads (
    tenant TEXT NOT NULL,
    thread TEXT NOT NULL,
    creator TEXT NOT NULL,
    agent TEXT,
    status TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    base_seq INTEGER,
    base_snapshot BLOB,
    PRIMARY KEY (tenant, thread)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS threads_by_update ON threads (tenant, updated_ms DESC);
-- Compacted bases (fold snapshots, up to megabytes) live outside the
-- WITHOUT ROWID threads table: there every key search reads whole rows, so a
-- big snapshot in a row made every commit read megabytes (docs/benchmarks.md).
-- threads.base_snapshot is kept for old files and always NULL.
CREATE TABLE IF NOT EXISTS bases (
    tenant TEXT NOT NULL,
    thread TEXT NOT NULL,
    snapshot BLOB NOT NULL,
    PRIMARY KEY (tenant, thread)
);
-- The events: one row per batch (a group commit's events of one thread), in
-- a rowid table so the blob never sits in an index B-tree (see the bases
-- table above); the index holds only the key. Seqs are first_seq..=last_seq,
-- the events' JSON back to back in `frames`, where each but the last ends in
-- `ends` (little-endian u32 offsets): see sqlite/batch_row.rs. Files from
-- before kept one row per event in a table `events`; opening one migrates it
-- (sqlite/migration.rs).
CREATE TABLE IF NOT EXISTS batches (
    tenant TEXT NOT NULL,
    thread TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    ends BLOB NOT NULL,
    frames BLOB NOT NULL,
    CHECK (last_seq >= first_seq AND length(ends) = 4 * (last_seq - first_seq))
);
CREATE UNIQUE INDEX IF NOT EXISTS batches_by_seq ON batches (tenant, thread, last_seq);
-- One row the writer rewrites while the journal is failing, to learn when
-- writes work again (see Writer::probe).
CREATE TABLE IF NOT EXISTS probe (pad BLOB NOT NULL);
";

/// Stores one row of [`batch_row`] (tenant, thread, first seq, last seq,
/// ends, frames).
const INSERT_ROW: &str = "INSERT INTO batches (tenant, thread, first_seq, last_seq, ends, frames)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

/// How long a statement waits for a lock another connection (or process)
/// holds.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

fn open(path: &Path, synchronous: &str) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(err)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(err)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(err)?;
    conn.pragma_update(None, "synchronous", synchronous)
        .map_err(err)?;
    Ok(conn)
}

impl SqliteStore {
    /// Opens (creating if needed) the journal at `path`, its WAL bounded by
    /// [`DEFAULT_MAX_WAL_BYTES`].
    ///
    /// `synchronous` is SQLite's setting (`off`, `normal`, `full`);
    /// `max_batch_events` bounds one group commit.
    pub fn open(
        path: &Path,
        synchronous: &str,
        max_batch_events: usize,
    ) -> Result<SqliteStore, StoreError> {
        Self::open_bounded(path, synchronous, max_batch_events, DEFAULT_MAX_WAL_BYTES)
    }

    /// [`SqliteStore::open`] with the WAL reset whenever it passes
    /// `max_wal_bytes` (`store.max_wal_bytes`).
    pub fn open_bounded(
        path: &Path,
        synchronous: &str,
        max_batch_events: usize,
        max_wal_bytes: u64,
    ) -> Result<SqliteStore, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
        }
        let mut wal_path = path.as_os_str().to_owned();
        wal_path.push("-wal");
        let mut write = open(path, synchronous)?;
        write.execute_batch(SCHEMA).map_err(err)?;
        // Files from before the `bases` table: move their snapshots there.
        write
            .execute_batch(
                "BEGIN;
                 INSERT OR REPLACE INTO bases (tenant, thread, snapshot)
                   SELECT tenant, thread, base_snapshot FROM threads WHERE base_snapshot IS NOT NULL;
                 UPDATE threads SET base_snapshot = NULL WHERE base_snapshot IS NOT NULL;
                 COMMIT;",
            )
            .map_err(err)?;
        // Whenever the log is reset (by any checkpoint), the file shrinks to
        // this size instead of keeping its high-water mark.
        write
            .pragma_update(None, "journal_size_limit", max_wal_bytes as i64)
            .map_err(err)?;
        // Files from before one row per batch (with SQLite's automatic
        // checkpoints still on, so the log stays small while it runs).
        migration::migrate_event_rows(&mut write)?;
        // Checkpoints run on their own connection and thread (below), never
        // inside a commit that a run is waiting for.
        write
            .pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(err)?;
        // Not before: SQLite deletes the log of a database with no page yet.
        preallocate_wal(Path::new(&wal_path), max_wal_bytes);
        // Frames in the log after each commit: its size in use (the file
        // keeps its length across resets). Set after `wal_autocheckpoint`,
        // which replaces any WAL hook.
        let page_size = write
            .query_row("PRAGMA page_size", [], |r| r.get::<_, i64>(0))
            .map_err(err)?
            .max(0) as u64;
        let frames = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = frames.clone();
        write
            .wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, pages: i32| {
                counted.store(pages.max(0) as u64, std::sync::atomic::Ordering::Relaxed);
                Ok(())
            }))
            .map_err(err)?;
        let reader = std::sync::Arc::new(Mutex::new(open(path, synchronous)?));
        let checkpointer = open(path, synchronous)?;
        // Compactions a crash interrupted before their rows were deleted.
        let leftovers = compacted_threads(&write)?;
        let (tx, rx) = mpsc::channel::<Request>();
        let (checkpoint_tx, checkpoint_rx) = mpsc::sync_channel::<()>(1);
        let checkpointing = std::sync::Arc::new(Mutex::new(()));
        let healthy = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let writer_resets = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let writer = Writer {
            conn: write,
            healthy: healthy.clone(),
            collecting: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(
                !leftovers.is_empty(),
            )),
            garbage: leftovers.into(),
            checkpoint: checkpoint_tx,
            since_checkpoint: 0,
            wal: Wal {
                path: wal_path.into(),
                max_bytes: max_wal_bytes,
                next_try: std::time::Instant::now(),
                frames: frames.clone(),
                frame_bytes: page_size + WAL_FRAME_HEADER,
                requested_at: 0,
                resets: writer_resets.clone(),
            },
            probe_backoff: PROBE_FIRST,
            readers: reader.clone(),
            checkpointing: checkpointing.clone(),
        };
        let core = std::sync::Arc::new(Mutex::new(writer));
        let queued = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let thread = {
            let w = core
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            WriterThread {
                requests: rx,
                core: core.clone(),
                queued: queued.clone(),
                max_batch_events,
                healthy: w.healthy.clone(),
                collecting: w.collecting.clone(),
            }
        };
        let closing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let alive = WriterAlive(healthy.clone(), closing.clone());
        let writer_thread = std::thread::Builder::new()
            .name("journal-writer".into())
            .spawn(move || {
                // However the thread ends (a panic included), readiness
                // turns false: nothing can be journaled any more.
                let _alive = alive;
                thread.run()
            })
            .map_err(err)?;
        let background = BackgroundCheckpoint {
            conn: checkpointer,
            readers: reader.clone(),
            frames: frames.clone(),
            frame_bytes: page_size + WAL_FRAME_HEADER,
            max_bytes: max_wal_bytes,
        };
        let turn = checkpointing.clone();
        std::thread::Builder::new()
            .name("journal-checkpoint".into())
            .spawn(move || {
                while checkpoint_rx.recv().is_ok() {
                    let _turn = turn
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    background.run();
                }
            })
            .map_err(err)?;
        Ok(SqliteStore {
            writer: Mutex::new(Some(tx)),
            core,
            queued,
            inline: !synchronous.eq_ignore_ascii_case("full")
                && !synchronous.eq_ignore_ascii_case("extra"),
            writer_thread: Mutex::new(Some(writer_thread)),
            closing,
            reader,
            healthy,
            writer_resets,
        })
    }
}

/// Held by the writer thread: marks the store unhealthy when the thread
/// ends (and says so loudly unless the store was closed on purpose).
struct WriterAlive(
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
);

impl Drop for WriterAlive {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::Release);
        if self.1.load(std::sync::atomic::Ordering::Acquire) {
            tracing::info!("journal closed: every queued batch written");
        } else {
            tracing::error!("the journal writer stopped: readiness is false");
        }
    }
}

/// Events written between two checkpoint requests (the WAL stays small, so
/// a commit's cost does not grow with what was written before).
const CHECKPOINT_EVERY: usize = 4096;

/// Old events one idle step of compaction deletes (one short transaction,
/// so an append arriving meanwhile waits for little).
const DELETE_CHUNK: i64 = 2048;

/// The writer thread: group commits first, housekeeping when idle.
struct WriterThread {
    requests: mpsc::Receiver<Request>,
    core: std::sync::Arc<Mutex<Writer>>,
    /// See [`SqliteStore::queued`]: lowered once a group is written.
    queued: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    max_batch_events: usize,
    /// The writer's `healthy` and `collecting`.
    healthy: std::sync::Arc<std::sync::atomic::AtomicBool>,
    collecting: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// The write connection and what goes with it, used by the writer thread
/// and, while that has nothing queued, by an append on its own thread.
struct Writer {
    conn: Connection,
    /// Cleared when a commit fails.
    healthy: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Compacted threads whose events up to the base are still to delete.
    garbage: std::collections::VecDeque<(ThreadKey, u64)>,
    /// Whether `garbage` holds anything (read by the writer thread without
    /// the lock).
    collecting: std::sync::Arc<std::sync::atomic::AtomicBool>,
    checkpoint: mpsc::SyncSender<()>,
    since_checkpoint: usize,
    wal: Wal,
    /// How long the writer waits, idle and unhealthy, before probing again.
    probe_backoff: std::time::Duration,
    /// The store's read connection (see [`Writer::bound_wal`]).
    readers: std::sync::Arc<Mutex<Connection>>,
    /// Held by whoever checkpoints: the background passive checkpoint or
    /// the writer's reset (which would be refused while the other runs).
    checkpointing: std::sync::Arc<Mutex<()>>,
}

/// The WAL file and its bound.
struct Wal {
    path: std::path::PathBuf,
    max_bytes: u64,
    /// No reset is tried before this (after one failed: a reader held
    /// an old snapshot for longer than [`RESET_WAIT`]).
    next_try: std::time::Instant,
    /// Frames in the log now (the WAL hook's count after each commit).
    frames: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// One frame: a page and its header.
    frame_bytes: u64,
    /// The log in use when a background checkpoint was last asked for.
    requested_at: u64,
    /// Resets done by the writer itself.
    resets: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// Gives the WAL file its full size (`max_bytes`) and its blocks, so a
/// fresh journal's commits overwrite allocated space
/// from the first one, as they do after every reset ([`Writer::bound_wal`]):
/// growing the file is what made a commit wait on the filesystem's journal.
/// What it adds reads as zeros, which SQLite takes for the log's end (a
/// frame needs the header's salts), so a log with frames in it keeps them.
/// Best effort: a filesystem without `fallocate` grows the file as before.
#[cfg(target_os = "linux")]
fn preallocate_wal(path: &Path, max_bytes: u64) {
    use std::os::fd::AsRawFd;
    let Ok(file) = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
    else {
        return;
    };
    let len = file.metadata().map_or(0, |m| m.len());
    if len >= max_bytes {
        return;
    }
    let Ok(size) = libc::off_t::try_from(max_bytes) else {
        return;
    };
    // SAFETY: a plain syscall on a descriptor this function owns.
    let done = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, size) };
    if done != 0 {
        tracing::debug!(
            "journal WAL not preallocated: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn preallocate_wal(_: &Path, _: u64) {}

/// The header SQLite writes before each page in the WAL.
const WAL_FRAME_HEADER: u64 = 24;

impl Wal {
    /// The log in use, in bytes (the file may be longer: it keeps its
    /// length across resets).
    fn in_use(&self) -> u64 {
        self.frames.load(std::sync::atomic::Ordering::Relaxed) * self.frame_bytes
    }
}

/// The journal's checkpoints off the commit path, on a connection and
/// thread of their own, asked for by the writer as the log grows
/// ([`Writer::request_checkpoint`]).
struct BackgroundCheckpoint {
    conn: Connection,
    /// The store's read connection, quiet during a restart (as for the
    /// writer's reset, [`Writer::bound_wal`]).
    readers: std::sync::Arc<Mutex<Connection>>,
    /// The log's frames (the writer's WAL hook counts them).
    frames: std::sync::Arc<std::sync::atomic::AtomicU64>,
    frame_bytes: u64,
    max_bytes: u64,
}

/// How long the background `RESTART` waits for the write lock and for
/// readers: appends wait as long, so it gives up early (the next request
/// tries again, and the writer's own reset is the fallback).
const RESTART_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

impl BackgroundCheckpoint {
    /// A `PASSIVE` checkpoint (copies what it can without blocking the
    /// writer), then, with the log past half its bound, a `RESTART` that
    /// finishes the job while the little written meanwhile is all there is
    /// to copy and sync.
    ///
    /// Why both: under a steady stream of commits (a paced run, one commit a
    /// millisecond) a passive checkpoint never catches up — by the time it
    /// has synced what it copied, new frames are in the log — and SQLite
    /// starts the log over only once every frame is copied. So the log
    /// reached its bound every few seconds and the writer reset it itself,
    /// its fsync of tens of megabytes (13–24 ms here) in front of every
    /// append then waiting: the paced run's p99 (docs/benchmarks.md, "The
    /// tail of a paced run"). Right after a passive pass the restart syncs
    /// only a few milliseconds' worth of log, and holds the write lock for
    /// about as long.
    fn run(&self) {
        if let Err(e) = self
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
        {
            tracing::warn!("journal checkpoint failed: {e}");
            return;
        }
        let in_use = self.frames.load(std::sync::atomic::Ordering::Relaxed) * self.frame_bytes;
        if in_use < self.max_bytes / 2 {
            return;
        }
        match restart_log(&self.conn, &self.readers, &self.frames, RESTART_WAIT) {
            Ok(true) => {
                crate::metrics::metrics().journal_wal_restarts.inc();
            }
            Ok(false) => tracing::debug!(
                in_use,
                "journal log not restarted: a reader or writer was busy"
            ),
            Err(e) => tracing::debug!(in_use, "journal log not restarted: {e}"),
        }
    }
}

/// A `RESTART` checkpoint on `conn`, for the background checkpoint and
/// the writer's reset alike. This process's reads (`readers`) wait
/// meanwhile: one reading a big page of history would hold an old snapshot
/// and the restart would wait for it with appends held (taken before the
/// restart takes the write lock). Other processes' readers and writers get
/// `wait`. `Ok(true)`: every frame is copied, and the next commit writes
/// the log from its start (its frame count is set to 0 now); `Ok(false)`:
/// a reader or another checkpoint was in the way.
fn restart_log(
    conn: &Connection,
    readers: &Mutex<Connection>,
    frames: &std::sync::atomic::AtomicU64,
    wait: std::time::Duration,
) -> rusqlite::Result<bool> {
    let _quiet = readers
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let _ = conn.busy_timeout(wait);
    // (busy, frames in the log, frames checkpointed).
    let busy = conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |row| {
        row.get::<_, i64>(0)
    });
    let _ = conn.busy_timeout(BUSY_TIMEOUT);
    let restarted = busy? == 0;
    if restarted {
        frames.store(0, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(restarted)
}

/// How long a `RESTART` checkpoint waits for readers of older snapshots
/// (each holds one for a statement: normally microseconds). Appends queue
/// meanwhile.
const RESET_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The first probe of a failing journal, and the longest wait between two.
const PROBE_FIRST: std::time::Duration = std::time::Duration::from_millis(250);
const PROBE_MAX: std::time::Duration = std::time::Duration::from_secs(5);

impl WriterThread {
    fn lock(&self) -> std::sync::MutexGuard<'_, Writer> {
        self.core
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn run(self) {
        loop {
            // Read without the lock: an append tries it without waiting,
            // and a glance here must not send it to the queue.
            let healthy = self.healthy.load(std::sync::atomic::Ordering::Acquire);
            let idle_work = self.collecting.load(std::sync::atomic::Ordering::Acquire);
            let first = if !healthy {
                // Failing: probe now and then, so readiness comes back once
                // writes work again even if nothing else is written.
                let backoff = self.lock().probe_backoff;
                match self.requests.recv_timeout(backoff) {
                    Ok(r) => r,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        self.lock().probe();
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
            } else if !idle_work {
                match self.requests.recv() {
                    Ok(r) => r,
                    Err(_) => return,
                }
            } else {
                match self.requests.try_recv() {
                    Ok(r) => r,
                    Err(mpsc::TryRecvError::Empty) => {
                        let mut w = self.lock();
                        w.collect_garbage();
                        w.bound_wal();
                        continue;
                    }
                    Err(mpsc::TryRecvError::Disconnected) => return,
                }
            };
            let mut group = Vec::new();
            let mut events = 0;
            let mut next = Some(first);
            while let Some(request) = next.take() {
                if let Request::Batch(batch, ack) = request {
                    events += batch.events.len();
                    group.push((batch, ack));
                }
                if events < self.max_batch_events {
                    next = self.requests.try_recv().ok();
                }
            }
            let mut w = self.lock();
            if !group.is_empty() {
                let n = group.len();
                w.commit(group);
                // Under the lock: an append that finds nothing queued
                // commits after these.
                self.queued
                    .fetch_sub(n, std::sync::atomic::Ordering::AcqRel);
            }
            w.bound_wal();
        }
    }
}

impl Writer {
    /// Writes `group` in one transaction and answers each batch (a write
    /// lock another connection holds is waited for, up to
    /// [`BUSY_TIMEOUT`]).
    fn commit(&mut self, group: Vec<(AppendBatch, Ack)>) {
        let written = begin_write(&mut self.conn).and_then(|tx| write_group(tx, &group));
        self.settle(group, written);
    }

    /// Commits one batch on the caller's thread if the write lock is free
    /// now (`None`); else gives it back, to queue for the writer thread, which
    /// waits for the lock. The caller is an async worker: waiting out
    /// another process's transaction there would hold up every task on
    /// it, for up to [`BUSY_TIMEOUT`].
    fn commit_now(&mut self, batch: AppendBatch, ack: Ack) -> Option<(AppendBatch, Ack)> {
        let mut group = vec![(batch, ack)];
        let _ = self.conn.busy_timeout(std::time::Duration::ZERO);
        let written = match begin_write(&mut self.conn) {
            Ok(tx) => {
                let _ = tx.busy_timeout(BUSY_TIMEOUT);
                Some(write_group(tx, &group))
            }
            Err(_) => None,
        };
        let Some(written) = written else {
            let _ = self.conn.busy_timeout(BUSY_TIMEOUT);
            return group.pop();
        };
        self.settle(group, written);
        None
    }

    /// Answers each batch of a group with what writing it gave.
    fn settle(
        &mut self,
        group: Vec<(AppendBatch, Ack)>,
        written: Result<Vec<Result<u64, StoreError>>, StoreError>,
    ) {
        let events: usize = group.iter().map(|(b, _)| b.events.len()).sum();
        match written {
            Ok(results) => {
                self.set_healthy(true);
                for ((batch, ack), result) in group.into_iter().zip(results) {
                    if result.is_ok()
                        && let Some((base, _)) = batch.compact
                    {
                        self.garbage.push_back((batch.key, base));
                        self.collecting
                            .store(true, std::sync::atomic::Ordering::Release);
                    }
                    let _ = ack.send(result);
                }
            }
            Err(e) => {
                tracing::error!("journal write failed: {e}");
                self.set_healthy(false);
                for (_, ack) in group {
                    let _ = ack.send(Err(e.clone()));
                }
            }
        }
        self.since_checkpoint += events;
        self.request_checkpoint();
    }

    /// Whether the writer thread has work after a commit made elsewhere:
    /// the log past its bound, compacted rows to delete, or a failing
    /// journal to probe.
    fn wants_housekeeping(&self) -> bool {
        !self.garbage.is_empty() || self.wal_full() || !self.healthy()
    }

    /// The log in use passed its bound: the writer thread resets it before
    /// the next commit ([`Writer::bound_wal`]).
    fn wal_full(&self) -> bool {
        self.wal.in_use() > self.wal.max_bytes
    }

    fn healthy(&self) -> bool {
        self.healthy.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Asks the checkpoint thread for a passive checkpoint every
    /// [`CHECKPOINT_EVERY`] events, or sooner once the log in use grew by a
    /// quarter of its bound since the last request. By bytes too because
    /// commits of one small event each (a paced run) write several pages
    /// apiece: counted by events alone, the log reached its bound first and
    /// the writer reset it itself, with an fsync of a few milliseconds in
    /// front of every append then waiting (docs/benchmarks.md, "The tail of
    /// a paced run"). Checkpointed in the background instead, the log is
    /// copied back while appends go on, and SQLite restarts it from its
    /// start at the next commit, in place and without an fsync.
    fn request_checkpoint(&mut self) {
        let in_use = self.wal.in_use();
        if in_use < self.wal.requested_at {
            // Restarted since the last request.
            self.wal.requested_at = 0;
        }
        let grew = in_use - self.wal.requested_at >= self.wal.max_bytes / 4;
        if (self.since_checkpoint >= CHECKPOINT_EVERY || grew)
            && self.checkpoint.try_send(()).is_ok()
        {
            self.since_checkpoint = 0;
            self.wal.requested_at = in_use;
        }
    }

    fn set_healthy(&mut self, healthy: bool) {
        if healthy && !self.healthy() {
            tracing::warn!("journal writes work again: readiness is true");
        }
        self.healthy
            .store(healthy, std::sync::atomic::Ordering::Release);
        self.probe_backoff = PROBE_FIRST;
    }

    /// Rewrites the probe row (16 fresh pages, committed): what a full disk
    /// or a failing device refuses, like the batches it failed.
    fn probe(&mut self) {
        let wrote = self.conn.execute_batch(
            "BEGIN IMMEDIATE;
             DELETE FROM probe;
             INSERT INTO probe (pad) VALUES (randomblob(65536));
             COMMIT;",
        );
        match wrote {
            Ok(()) => self.set_healthy(true),
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                tracing::debug!("journal still failing: {e}");
                self.probe_backoff = (self.probe_backoff * 2).min(PROBE_MAX);
            }
        }
    }

    /// Sets the log's size gauge; returns it.
    fn report_wal(&self) -> u64 {
        let size = self.wal.in_use();
        crate::metrics::metrics()
            .journal_wal_bytes
            .set(size.min(i64::MAX as u64) as i64);
        size
    }

    /// Resets the WAL when the log in use passed its bound, and reports its
    /// size. Runs between group commits, on the writer's own connection, so
    /// no commit lands during the checkpoint and it can copy every frame.
    fn bound_wal(&mut self) {
        let size = self.report_wal();
        if size <= self.wal.max_bytes || std::time::Instant::now() < self.wal.next_try {
            return;
        }
        // Reads of this process wait meanwhile (one statement each normally
        // holds a snapshot for microseconds, but back to back they can keep
        // the log in use for as long as they like); other processes' get
        // RESET_WAIT to finish theirs.
        let _turn = self
            .checkpointing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let began = std::time::Instant::now();
        let done = restart_log(&self.conn, &self.readers, &self.wal.frames, RESET_WAIT);
        let refused = match done {
            Ok(true) => {
                let file = std::fs::metadata(&self.wal.path).map_or(0, |m| m.len());
                tracing::debug!(in_use = size, file, "journal WAL reset");
                crate::metrics::metrics().journal_wal_bytes.set(0);
                crate::metrics::metrics().journal_wal_resets.inc();
                self.wal
                    .resets
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return;
            }
            Ok(false) => "a reader held an old snapshot, or a checkpoint was running".to_owned(),
            Err(e) => e.to_string(),
        };
        if began.elapsed() < RESET_WAIT / 2 {
            // Refused at once (another process checkpointing): the next
            // commit tries again.
            tracing::debug!(wal_bytes = size, "journal WAL not reset yet: {refused}");
        } else {
            // A reader elsewhere: waiting for it again at every commit would
            // stall appends, so not before a second has passed.
            tracing::warn!(
                wal_bytes = size,
                "journal WAL not reset (retried in a second): {refused}"
            );
            self.wal.next_try = std::time::Instant::now() + RESET_WAIT;
        }
    }

    /// Deletes one chunk of compacted events (the oldest rows first, about
    /// [`DELETE_CHUNK`] events), or, last, trims the row the base falls in
    /// (its events after the base stay). Loads read only events after the
    /// base, so rows waiting here are never seen.
    fn collect_garbage(&mut self) {
        let Some((key, base)) = self.garbage.pop_front() else {
            return;
        };
        self.collecting.store(
            !self.garbage.is_empty(),
            std::sync::atomic::Ordering::Release,
        );
        match collect_one_step(&mut self.conn, &key, base) {
            Ok(Some(deleted)) => {
                self.since_checkpoint += deleted;
                self.garbage.push_back((key, base));
                self.collecting
                    .store(true, std::sync::atomic::Ordering::Release);
            }
            Ok(None) => {} // done with this thread
            Err(e) => tracing::warn!("journal compaction delete failed (retried at restart): {e}"),
        }
    }
}

/// One step of [`Writer::collect_garbage`] for the thread `key` compacted up
/// to `base`: `Some(events)` deleted, with more to do, or `None` when no
/// event at or below the base is left. One short transaction, so a
/// compaction never holds up appends for long and another process on the
/// file cannot trim the same row in between.
fn collect_one_step(
    conn: &mut Connection,
    key: &ThreadKey,
    base: u64,
) -> Result<Option<usize>, StoreError> {
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(err)?;
    let oldest: Option<(i64, i64, i64)> = tx
        .query_row(
            "SELECT rowid, first_seq, last_seq FROM batches
             WHERE tenant = ?1 AND thread = ?2 ORDER BY last_seq LIMIT 1",
            params![key.tenant, key.thread_id],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .optional()
        .map_err(err)?;
    let Some((rowid, first, last)) = oldest.filter(|(_, first, _)| *first <= base as i64) else {
        return Ok(None);
    };
    let done = if last <= base as i64 {
        // Whole rows: those ending at or below the base, about a chunk's
        // worth of events (at least the oldest row, however big).
        let upto = (first + DELETE_CHUNK - 1).min(base as i64).max(last);
        tx.execute(
            "DELETE FROM batches WHERE tenant = ?1 AND thread = ?2 AND last_seq <= ?3",
            params![key.tenant, key.thread_id, upto],
        )
        .map_err(err)?;
        Some((upto - first + 1) as usize)
    } else {
        // The base falls inside this row: keep its events after the base.
        let (ends, frames): (Vec<u8>, Vec<u8>) = tx
            .query_row(
                "SELECT ends, frames FROM batches WHERE rowid = ?1",
                params![rowid],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .map_err(err)?;
        let (first, ends, frames) =
            batch_row::trim(first as u64, last as u64, &ends, &frames, base)?;
        tx.execute(
            "UPDATE batches SET first_seq = ?2, ends = ?3, frames = ?4 WHERE rowid = ?1",
            params![rowid, first as i64, ends, frames],
        )
        .map_err(err)?;
        None
    };
    tx.commit().map_err(err)?;
    Ok(done)
}

/// Threads whose compacted events may still be in the table.
fn compacted_threads(conn: &Connection) -> Result<Vec<(ThreadKey, u64)>, StoreError> {
    let mut stmt = conn
        .prepare("SELECT tenant, thread, base_seq FROM threads WHERE base_seq IS NOT NULL")
        .map_err(err)?;
    stmt.query_map([], |row| {
        Ok((
            ThreadKey::new(row.get::<_, String>(0)?, row.get::<_, String>(1)?),
            row.get::<_, i64>(2)? as u64,
        ))
    })
    .map_err(err)?
    .collect::<Result<Vec<_>, _>>()
    .map_err(err)
}

/// Opens a group's transaction holding the write lock from its start
/// (`BEGIN IMMEDIATE`): the group reads each thread's last seq before it
/// writes, and a deferred transaction that has read cannot wait for a lock
/// another connection holds — SQLite refuses its first write at once
/// ("database is locked"), which failed the batch and the journal's
/// readiness whenever another process wrote to the file.
fn begin_write(conn: &mut Connection) -> Result<rusqlite::Transaction<'_>, StoreError> {
    conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(err)
}

/// Writes a group of batches in `tx` ([`begin_write`]) and commits it. A
/// batch that does not continue its thread's stored journal is refused
/// alone ([`StoreError::SeqConflict`]); the rest commit together, each
/// thread's accepted events as one row (more when they pass
/// [`batch_row::MAX_ROW_BYTES`]): the B-tree insert and index entry are paid
/// per thread and group commit, not per event. `Err` (nothing written) when
/// the database itself failed.
fn write_group(
    tx: rusqlite::Transaction<'_>,
    group: &[(AppendBatch, Ack)],
) -> Result<Vec<Result<u64, StoreError>>, StoreError> {
    let mut results = Vec::with_capacity(group.len());
    {
        let mut insert = tx.prepare_cached(INSERT_ROW).map_err(err)?;
        let mut upsert = tx
            .prepare_cached(
                "INSERT INTO threads (tenant, thread, creator, agent, status, created_ms, updated_ms, last_seq)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (tenant, thread) DO UPDATE SET
                   agent = excluded.agent, status = excluded.status, last_seq = excluded.last_seq",
            )
            .map_err(err)?;
        // Its own statement, a no-op when the stamp did not move: an update
        // that names the column rewrites its index entry even when the
        // value is the same (a page more in the log per commit).
        let mut stamp = tx
            .prepare_cached(
                "UPDATE threads SET updated_ms = ?3
                 WHERE tenant = ?1 AND thread = ?2 AND updated_ms IS NOT ?3",
            )
            .map_err(err)?;
        let mut stored_last = tx
            .prepare_cached("SELECT last_seq FROM threads WHERE tenant = ?1 AND thread = ?2")
            .map_err(err)?;
        // Per thread of the group: its last seq as this group leaves it, its
        // metadata (written once, from its last accepted batch) and the row
        // its accepted events go into.
        let mut threads: Vec<GroupThread<'_>> = Vec::new();
        for (b, _) in group {
            let (t, th) = (&b.key.tenant, &b.key.thread_id);
            let i = match threads.iter().position(|g| *g.key == b.key) {
                Some(i) => i,
                None => {
                    let seq: Option<i64> = stored_last
                        .query_row(params![t, th], |row| row.get(0))
                        .optional()
                        .map_err(err)?;
                    threads.push(GroupThread {
                        key: &b.key,
                        last: seq.unwrap_or(0) as u64,
                        meta: None,
                        row: RowBuilder::default(),
                    });
                    threads.len() - 1
                }
            };
            let g = &mut threads[i];
            // Seqs are not stored per event: each must follow the one before.
            if let Some((expected, got)) = b
                .events
                .iter()
                .enumerate()
                .map(|(n, (seq, _))| (g.last + 1 + n as u64, *seq))
                .find(|(expected, got)| expected != got)
            {
                results.push(Err(StoreError::SeqConflict { expected, got }));
                continue;
            }
            for (seq, json) in &b.events {
                if !g.row.has_room() {
                    // Full: stored now, so a group holds at most one row's
                    // copy of each thread's events, whatever its size.
                    insert_row(&mut insert, (t, th), &std::mem::take(&mut g.row))?;
                }
                g.row.push(*seq, json);
            }
            if let Some((seq, _)) = b.events.last() {
                g.last = *seq;
            }
            g.meta = Some(b);
            if let Some((base_seq, snapshot)) = &b.compact {
                // The base moves now; the old rows are deleted later, off
                // the commit path (loads never read below the base).
                upsert_meta((&mut stamp, &mut upsert), b)?;
                tx.execute(
                    "UPDATE threads SET base_seq = ?3 WHERE tenant = ?1 AND thread = ?2",
                    params![t, th, *base_seq as i64],
                )
                .map_err(err)?;
                tx.execute(
                    "INSERT OR REPLACE INTO bases (tenant, thread, snapshot) VALUES (?1, ?2, ?3)",
                    params![t, th, &snapshot[..]],
                )
                .map_err(err)?;
            }
            results.push(Ok(b.events.first().map_or(0, |(seq, _)| *seq)));
        }
        for g in threads {
            if !g.row.is_empty() {
                let key = (g.key.tenant.as_str(), g.key.thread_id.as_str());
                insert_row(&mut insert, key, &g.row)?;
            }
            if let Some(b) = g.meta {
                upsert_meta((&mut stamp, &mut upsert), b)?;
            }
        }
    }
    tx.commit().map_err(err)?;
    Ok(results)
}

/// One thread's share of a group commit (see [`write_group`]).
struct GroupThread<'a> {
    key: &'a ThreadKey,
    last: u64,
    meta: Option<&'a AppendBatch>,
    /// The row its accepted events go into (stored when full, and at the
    /// end of the group).
    row: RowBuilder,
}

/// Stores `row` of thread `tenant`/`thread` with [`INSERT_ROW`].
fn insert_row(
    insert: &mut rusqlite::Statement<'_>,
    (tenant, thread): (&str, &str),
    row: &RowBuilder,
) -> Result<(), StoreError> {
    let (first, last, ends, frames) = row.columns();
    insert
        .execute(params![tenant, thread, first, last, ends, frames])
        .map(|_| ())
        .map_err(err)
}

/// Stores a batch's thread metadata: its `updated_ms` (`stamp`, written
/// only when it moved) and the rest (`upsert`).
fn upsert_meta(
    (stamp, upsert): (
        &mut rusqlite::CachedStatement<'_>,
        &mut rusqlite::CachedStatement<'_>,
    ),
    b: &AppendBatch,
) -> Result<(), StoreError> {
    let m = &b.meta;
    stamp
        .execute(params![b.key.tenant, b.key.thread_id, m.updated_ms as i64])
        .map_err(err)?;
    upsert
        .execute(params![
            b.key.tenant,
            b.key.thread_id,
            m.creator,
            m.agent,
            m.status,
            m.created_ms as i64,
            m.updated_ms as i64,
            m.last_seq as i64
        ])
        .map(|_| ())
        .map_err(err)
}

/// Column `at` of `row`, a blob, borrowed from SQLite's buffer.
fn blob<'r>(row: &'r rusqlite::Row<'_>, at: usize) -> Result<&'r [u8], StoreError> {
    row.get_ref(at).map_err(err)?.as_blob().map_err(err)
}

fn meta_from_row(row: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<ThreadMeta> {
    Ok(ThreadMeta {
        creator: row.get(at)?,
        agent: row.get(at + 1)?,
        status: row.get(at + 2)?,
        created_ms: row.get::<_, i64>(at + 3)? as u64,
        updated_ms: row.get::<_, i64>(at + 4)? as u64,
        last_seq: row.get::<_, i64>(at + 5)? as u64,
    })
}

impl JournalStore for SqliteStore {
    /// Commits a small batch on the caller's thread when the writer has
    /// nothing queued (and the write connection is free): a paced run's single events then
    /// wait for no other thread, where a trip to the writer thread and back
    /// was two wake-ups of a sleeping thread (on a small VM, of a halted
    /// CPU) per event — most of what the SQLite journal added to a paced
    /// run's p99 over the memory store (docs/benchmarks.md, "The tail of a
    /// paced run"). The commit is one short transaction (no fsync with
    /// `synchronous = "normal"`; never taken with `"full"`); the log's
    /// reset and the deletion of compacted rows stay on the writer thread.
    /// Otherwise the batch queues for the writer's next group commit.
    fn append(&self, mut batch: AppendBatch) -> AppendAck {
        use std::sync::atomic::Ordering;
        let (mut tx, rx) = oneshot::channel();
        let Some(writer) = self
            .writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
        else {
            let _ = tx.send(Err(StoreError::failed("journal writer stopped")));
            self.healthy.store(false, Ordering::Release);
            return rx;
        };
        let small = batch.compact.is_none()
            && batch.events.iter().map(|(_, e)| e.len()).sum::<usize>() <= INLINE_MAX_BYTES;
        if self.inline && small && self.queued.load(Ordering::Acquire) == 0 && self.healthy() {
            // A writer busy (or gone: poisoned) means the queue.
            if let Ok(mut core) = self.core.try_lock()
                && self.queued.load(Ordering::Acquire) == 0
                && !core.wal_full()
            {
                match core.commit_now(batch, tx) {
                    None => {
                        if core.wants_housekeeping() {
                            let _ = writer.send(Request::Housekeeping);
                        } else {
                            core.report_wal();
                        }
                        return rx;
                    }
                    // Another process holds the write lock: the writer waits for it.
                    Some(back) => (batch, tx) = back,
                }
            }
        }
        self.queued.fetch_add(1, Ordering::AcqRel);
        let refused = writer.send(Request::Batch(batch, tx)).err().map(|e| {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            match e.0 {
                Request::Batch(_, ack) => ack,
                Request::Housekeeping => unreachable!("a batch was sent"),
            }
        });
        if let Some(ack) = refused {
            let _ = ack.send(Err(StoreError::failed("journal writer stopped")));
            self.healthy
                .store(false, std::sync::atomic::Ordering::Release);
        }
        rx
    }

    /// Drops the queue's sender, so the writer commits what is queued and
    /// ends, and waits for it.
    fn close(&self) -> futures::future::BoxFuture<'static, ()> {
        self.closing
            .store(true, std::sync::atomic::Ordering::Release);
        self.writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let thread = self
            .writer_thread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        Box::pin(async move {
            if let Some(thread) = thread {
                let _ = tokio::task::spawn_blocking(move || thread.join()).await;
            }
        })
    }

    fn healthy(&self) -> bool {
        self.healthy.load(std::sync::atomic::Ordering::Acquire)
    }

    fn load(&self, key: &ThreadKey) -> Result<Option<StoredThread>, StoreError> {
        self.load_after(key, 0)
    }

    /// Reads only the rows that hold events after `after` (the first of
    /// them may start before it: its earlier events are skipped).
    fn load_after(&self, key: &ThreadKey, after: u64) -> Result<Option<StoredThread>, StoreError> {
        let conn = self
            .reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let head = conn
            .query_row(
                "SELECT creator, agent, status, created_ms, updated_ms, last_seq, base_seq, snapshot
                 FROM threads LEFT JOIN bases USING (tenant, thread)
                 WHERE tenant = ?1 AND thread = ?2",
                params![key.tenant, key.thread_id],
                |row| {
                    let meta = meta_from_row(row, 0)?;
                    let base_seq: Option<i64> = row.get(6)?;
                    let snapshot: Option<Vec<u8>> = row.get(7)?;
                    Ok((meta, base_seq.zip(snapshot).map(|(s, b)| (s as u64, Bytes::from(b)))))
                },
            )
            .optional()
            .map_err(err)?;
        let Some((meta, base)) = head else {
            return Ok(None);
        };
        let after = base.as_ref().map_or(0, |(s, _)| *s).max(after);
        let mut stmt = conn
            .prepare_cached(
                "SELECT first_seq, last_seq, ends, frames FROM batches
                 WHERE tenant = ?1 AND thread = ?2 AND last_seq > ?3 ORDER BY last_seq",
            )
            .map_err(err)?;
        let mut rows = stmt
            .query(params![key.tenant, key.thread_id, after as i64])
            .map_err(err)?;
        let mut events = Vec::new();
        while let Some(row) = rows.next().map_err(err)? {
            let first = row.get::<_, i64>(0).map_err(err)? as u64;
            let last = row.get::<_, i64>(1).map_err(err)? as u64;
            let (ends, frames) = (blob(row, 2)?, blob(row, 3)?);
            batch_row::decode(first, last, ends, frames, after, &mut events)?;
        }
        Ok(Some(StoredThread { meta, base, events }))
    }

    /// The batches overlapping the range, read until the budget is met.
    fn read_events(
        &self,
        key: &ThreadKey,
        after: u64,
        until: u64,
        max_bytes: usize,
    ) -> Result<Vec<(u64, Bytes)>, StoreError> {
        let conn = self
            .reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut stmt = conn
            .prepare_cached(
                "SELECT first_seq, last_seq, ends, frames FROM batches
                 WHERE tenant = ?1 AND thread = ?2 AND last_seq > ?3 AND first_seq < ?4
                 ORDER BY last_seq",
            )
            .map_err(err)?;
        let mut rows = stmt
            .query(params![
                key.tenant,
                key.thread_id,
                after as i64,
                until.min(i64::MAX as u64) as i64
            ])
            .map_err(err)?;
        let mut events = Vec::new();
        let mut bytes = 0;
        while bytes < max_bytes
            && let Some(row) = rows.next().map_err(err)?
        {
            let first = row.get::<_, i64>(0).map_err(err)? as u64;
            let last = row.get::<_, i64>(1).map_err(err)? as u64;
            let (ends, frames) = (blob(row, 2)?, blob(row, 3)?);
            let before = events.len();
            batch_row::decode(first, last, ends, frames, after, &mut events)?;
            bytes += events[before..]
                .iter()
                .map(|(_, j): &(u64, Bytes)| j.len())
                .sum::<usize>();
        }
        Ok(crate::store::within(
            events.into_iter(),
            after,
            until,
            max_bytes,
        ))
    }

    fn list(&self, tenant: &str) -> Result<Vec<(ThreadKey, ThreadMeta)>, StoreError> {
        let conn = self
            .reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut stmt = conn
            .prepare_cached(
                "SELECT thread, creator, agent, status, created_ms, updated_ms, last_seq
                 FROM threads WHERE tenant = ?1 ORDER BY updated_ms DESC, thread",
            )
            .map_err(err)?;
        stmt.query_map(params![tenant], |row| {
            Ok((
                ThreadKey::new(tenant, row.get::<_, String>(0)?),
                meta_from_row(row, 1)?,
            ))
        })
        .map_err(err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)
    }

    fn running(&self) -> Result<Vec<ThreadKey>, StoreError> {
        let conn = self
            .reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut stmt = conn
            .prepare("SELECT tenant, thread FROM threads WHERE status = 'running'")
            .map_err(err)?;
        stmt.query_map([], |row| {
            Ok(ThreadKey::new(
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
            ))
        })
        .map_err(err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)
    }

    fn ping(&self) -> Result<(), StoreError> {
        let conn = self
            .reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        conn.query_row("SELECT 1", [], |_| Ok(())).map_err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(seq: u64, status: &str) -> ThreadMeta {
        ThreadMeta {
            creator: "u".into(),
            agent: Some("a".into()),
            status: status.into(),
            created_ms: 1,
            updated_ms: seq,
            last_seq: seq,
        }
    }

    fn batch(key: &ThreadKey, from: u64, n: u64, status: &str) -> AppendBatch {
        AppendBatch {
            key: key.clone(),
            meta: meta(from + n - 1, status),
            events: (from..from + n)
                .map(|s| (s, Bytes::from(format!("{{\"type\":\"CUSTOM\",\"n\":{s}}}"))))
                .collect(),
            compact: None,
            fence: None,
            run_boundary: true,
            idempotency: None,
            closes_failed_run: false,
        }
    }

    #[tokio::test]
    async fn appends_survive_reopen_and_compaction_drops_old_events() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        let k = ThreadKey::new("t1", "th");
        {
            let s = SqliteStore::open(&path, "normal", 1024).unwrap();
            let acks: Vec<_> = (0..10)
                .map(|i| s.append(batch(&k, i * 5 + 1, 5, "running")))
                .collect();
            for a in acks {
                a.await.unwrap().unwrap();
            }
            let mut b = batch(&k, 51, 1, "finished");
            b.compact = Some((40, Bytes::from_static(b"{\"seq\":40}")));
            s.append(b).await.unwrap().unwrap();
        }
        let s = SqliteStore::open(&path, "normal", 1024).unwrap();
        let t = s.load(&k).unwrap().unwrap();
        assert_eq!(t.meta.status, "finished");
        assert_eq!(t.meta.last_seq, 51);
        assert_eq!(t.base.as_ref().unwrap().0, 40);
        let seqs: Vec<u64> = t.events.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, (41..=51).collect::<Vec<_>>());
        assert!(s.running().unwrap().is_empty());
        assert_eq!(s.list("t1").unwrap().len(), 1);
        assert!(s.list("other").unwrap().is_empty());
        assert!(s.load(&ThreadKey::new("other", "th")).unwrap().is_none());
        // The compacted rows leave the table too, off the commit path (the
        // first store was closed mid-way; this one finishes the job).
        let rows_below_base = || {
            Connection::open(&path)
                .unwrap()
                .query_row(
                    "SELECT COUNT(*) FROM batches WHERE first_seq <= 40",
                    [],
                    |r| r.get::<_, i64>(0),
                )
                .unwrap()
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while rows_below_base() > 0 {
            assert!(std::time::Instant::now() < deadline, "old rows deleted");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// The `batches` rows of `path`: (first seq, last seq) in order.
    fn stored_rows(path: &Path) -> Vec<(i64, i64)> {
        let conn = Connection::open(path).unwrap();
        let mut stmt = conn
            .prepare("SELECT first_seq, last_seq FROM batches ORDER BY last_seq")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[tokio::test]
    async fn a_group_commit_stores_a_threads_batches_as_one_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        let s = SqliteStore::open(&path, "normal", 1024).unwrap();
        let k = ThreadKey::new("t", "x");
        s.append(batch(&k, 1, 3, "running")).await.unwrap().unwrap();
        // Queued together: one group commit, one row.
        let acks: Vec<_> = (0..5)
            .map(|i| s.append(batch(&k, 4 + i * 2, 2, "running")))
            .collect();
        let firsts: Vec<u64> = futures::future::join_all(acks)
            .await
            .into_iter()
            .map(|a| a.unwrap().unwrap())
            .collect();
        assert_eq!(firsts, [4, 6, 8, 10, 12], "each batch acknowledged alone");
        let rows = stored_rows(&path);
        assert_eq!(rows.first(), Some(&(1, 3)));
        assert_eq!(rows.last().map(|r| r.1), Some(13));
        assert!(
            rows.len() <= 6,
            "a row per group commit, not per event or batch: {rows:?}"
        );
        assert_eq!(
            s.load(&k).unwrap().unwrap().events,
            batch(&k, 1, 13, "running").events
        );
    }

    #[tokio::test]
    async fn a_row_takes_no_more_events_past_its_size_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        let s = SqliteStore::open(&path, "normal", 1024).unwrap();
        let k = ThreadKey::new("t", "big");
        let mut b = batch(&k, 1, 4, "finished");
        let big = Bytes::from(vec![b'x'; batch_row::MAX_ROW_BYTES * 6 / 10]);
        b.events[0].1 = big.clone();
        b.events[1].1 = big.clone();
        b.events[2].1 = big;
        s.append(b.clone()).await.unwrap().unwrap();
        // The second event takes the row past its bound: the third starts
        // another one.
        assert_eq!(stored_rows(&path), [(1, 2), (3, 4)]);
        assert_eq!(s.load(&k).unwrap().unwrap().events, b.events);
    }

    #[tokio::test]
    async fn compaction_inside_a_row_trims_it_and_keeps_its_later_events() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        let k = ThreadKey::new("t", "x");
        let s = SqliteStore::open(&path, "normal", 1024).unwrap();
        for from in [1, 11, 21] {
            s.append(batch(&k, from, 10, "running"))
                .await
                .unwrap()
                .unwrap();
        }
        assert_eq!(stored_rows(&path), [(1, 10), (11, 20), (21, 30)]);
        // The base falls in the middle of the second row.
        let mut b = batch(&k, 31, 1, "finished");
        b.compact = Some((15, Bytes::from_static(b"{\"seq\":15}")));
        s.append(b).await.unwrap().unwrap();
        // Collected off the commit path, when the writer is idle.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while stored_rows(&path).first() != Some(&(16, 20)) {
            assert!(
                std::time::Instant::now() < deadline,
                "rows below the base deleted, the cut one trimmed: {:?}",
                stored_rows(&path)
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(stored_rows(&path), [(16, 20), (21, 30), (31, 31)]);
        let want = batch(&k, 16, 16, "finished").events;
        assert_eq!(s.load(&k).unwrap().unwrap().events, want);
        assert_eq!(s.load_after(&k, 17).unwrap().unwrap().events, want[2..]);
    }

    #[tokio::test]
    async fn the_store_refuses_a_batch_that_does_not_continue_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        let s = SqliteStore::open(&path, "normal", 1024).unwrap();
        let k = ThreadKey::new("t", "x");
        let other = ThreadKey::new("t", "y");
        s.append(batch(&k, 1, 2, "running")).await.unwrap().unwrap();
        // Queued together (one group commit): a reused seq, a gap, and a
        // good batch of another thread. Only the two bad ones are refused.
        let reused = s.append(batch(&k, 2, 1, "finished"));
        let gap = s.append(batch(&k, 5, 1, "finished"));
        let fine = s.append(batch(&other, 1, 3, "running"));
        assert_eq!(
            reused.await.unwrap(),
            Err(StoreError::SeqConflict {
                expected: 3,
                got: 2
            })
        );
        assert_eq!(
            gap.await.unwrap(),
            Err(StoreError::SeqConflict {
                expected: 3,
                got: 5
            })
        );
        fine.await.unwrap().unwrap();
        assert!(s.healthy(), "a refused batch is not a store failure");
        let t = s.load(&k).unwrap().unwrap();
        assert_eq!(t.events.len(), 2, "nothing of the refused batches");
        assert_eq!(
            (t.meta.last_seq, t.meta.status.as_str()),
            (2, "running"),
            "their metadata neither"
        );
        assert_eq!(s.load(&other).unwrap().unwrap().events.len(), 3);
        // The check holds across processes sharing the file, too.
        drop(s);
        let again = SqliteStore::open(&path, "normal", 1024).unwrap();
        assert!(
            again
                .append(batch(&k, 1, 1, "running"))
                .await
                .unwrap()
                .is_err()
        );
        again
            .append(batch(&k, 3, 1, "running"))
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn a_file_with_snapshots_in_the_threads_table_is_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let k = ThreadKey::new("t", "old");
        {
            let s = SqliteStore::open(&path, "normal", 1024).unwrap();
            s.append(batch(&k, 1, 3, "finished"))
                .await
                .unwrap()
                .unwrap();
        }
        // As an older gateway left it: the base inside the threads row.
        let conn = Connection::open(&path).unwrap();
        conn.execute("DELETE FROM bases", []).unwrap();
        conn.execute(
            "UPDATE threads SET base_seq = 2, base_snapshot = X'7B7D'",
            [],
        )
        .unwrap();
        drop(conn);
        let s = SqliteStore::open(&path, "normal", 1024).unwrap();
        let t = s.load(&k).unwrap().unwrap();
        assert_eq!(t.base, Some((2, Bytes::from_static(b"{}"))));
        assert_eq!(t.events.iter().map(|(s, _)| *s).collect::<Vec<_>>(), [3]);
        let left: i64 = Connection::open(&path)
            .unwrap()
            .query_row(
                "SELECT COUNT(*) FROM threads WHERE base_snapshot IS NOT NULL",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(left, 0, "moved out of the threads table");
    }

    #[tokio::test]
    async fn a_failed_write_fails_the_batch_and_turns_readiness_false() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(&dir.path().join("j.db"), "normal", 1024).unwrap();
        let k = ThreadKey::new("t", "x");
        s.append(batch(&k, 1, 2, "running")).await.unwrap().unwrap();
        assert!(s.healthy());
        // The database refuses what this batch writes (as a full disk or a
        // failing device would; here a trigger, for this thread only).
        let conn = Connection::open(dir.path().join("j.db")).unwrap();
        conn.execute_batch(
            "CREATE TRIGGER refuse BEFORE INSERT ON batches WHEN NEW.thread = 'x'
             BEGIN SELECT RAISE(ABORT, 'refused'); END;",
        )
        .unwrap();
        assert!(matches!(
            s.append(batch(&k, 3, 2, "finished")).await.unwrap(),
            Err(StoreError::Failed(_))
        ));
        assert!(!s.healthy(), "a failed write turns readiness false");
        assert_eq!(
            s.load(&k).unwrap().unwrap().events.len(),
            2,
            "nothing half-written"
        );
        assert_eq!(s.running().unwrap(), vec![k.clone()]);
        // Writes work again: the writer's probe turns readiness true, with
        // nothing else written.
        conn.execute_batch("DROP TRIGGER refuse").unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !s.healthy() {
            assert!(std::time::Instant::now() < deadline, "readiness came back");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        s.append(batch(&k, 3, 1, "finished"))
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn the_wal_stays_bounded_while_writers_and_readers_keep_going() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        let bound = 1 << 20;
        let s = std::sync::Arc::new(SqliteStore::open_bounded(&path, "normal", 64, bound).unwrap());
        let wal = dir.path().join("j.db-wal");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Readers all along, as viewers resuming and thread lists do.
        let reader = {
            let (s, stop) = (s.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = s.load(&ThreadKey::new("t", "x0")).unwrap();
                    let _ = s.list("t").unwrap();
                }
            })
        };
        let mut largest = 0;
        for round in 0..40u64 {
            let acks: Vec<_> = (0..8)
                .map(|t| {
                    let k = ThreadKey::new("t", format!("x{t}"));
                    s.append(batch(&k, round * 50 + 1, 50, "running"))
                })
                .collect();
            for a in acks {
                a.await.unwrap().unwrap();
            }
            largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        reader.join().unwrap();
        // 16,000 events of ~30 bytes, each commit a few pages: without the
        // bound the log passes 5 MiB here.
        assert!(
            largest <= bound + (512 << 10),
            "WAL reached {largest} bytes"
        );
        assert_eq!(
            s.load(&ThreadKey::new("t", "x7"))
                .unwrap()
                .unwrap()
                .events
                .len(),
            2000
        );
    }

    /// A paced run commits one small event at a time, several pages each:
    /// the background checkpoint keeps the log under its bound, so the
    /// writer never has to reset it itself (with an fsync every append
    /// waited for) but now and then, when the checkpoint thread falls
    /// behind on a loaded machine. Asked for by events alone, it came too late: 1,500
    /// commits are far fewer than `CHECKPOINT_EVERY` events, yet their
    /// pages fill the 1 MiB log many times over.
    #[tokio::test]
    async fn a_paced_journal_is_checkpointed_in_the_background_not_reset_by_its_writer() {
        // The load's shape: about one event a millisecond.
        let pause = std::time::Duration::from_micros(500);
        let (restarts, resets) = single_event_commits(1500, Some(pause)).await;
        // Before, every start over was the writer's reset (24 of 24 here);
        // on a loaded machine the checkpoint thread may fall behind now and
        // then, and the writer's reset is its fallback.
        assert!(
            resets * 4 <= restarts as u64,
            "the writer reset the log {resets} times of {restarts} (the background checkpoint fell behind)"
        );
    }

    /// `commits` single-event commits against a 1 MiB log, each awaited
    /// (then `pause`): how often the log started over (the WAL header's
    /// salts change each time) and how often the writer did it itself.
    /// Every event must be kept.
    async fn single_event_commits(
        commits: u64,
        pause: Option<std::time::Duration>,
    ) -> (usize, u64) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        let s = SqliteStore::open_bounded(&path, "normal", 64, 1 << 20).unwrap();
        let k = ThreadKey::new("t", "paced");
        let wal = dir.path().join("j.db-wal");
        let salts = || std::fs::read(&wal).unwrap()[16..24].to_vec();
        let (mut restarts, mut salts_before) = (0, Vec::new());
        for seq in 1..=commits {
            s.append(batch(&k, seq, 1, "running"))
                .await
                .unwrap()
                .unwrap();
            let now = salts();
            restarts += usize::from(!salts_before.is_empty() && now != salts_before);
            salts_before = now;
            if let Some(pause) = pause {
                tokio::time::sleep(pause).await;
            }
        }
        assert!(restarts >= 10, "the log started over {restarts} times");
        assert_eq!(
            s.load(&k).unwrap().unwrap().events.len() as u64,
            commits,
            "every event is kept"
        );
        let resets = s.writer_resets.load(std::sync::atomic::Ordering::Relaxed);
        (restarts, resets)
    }

    /// A commit of one small event writes three pages to the log (its
    /// batch's row and index entry, the thread's row) while the thread's
    /// `updated_ms` stays put; four when it moves (its index entry too).
    /// The thread layer moves it at most once a second
    /// (`thread::journal::updated_stamp`): it was a page more per event.
    #[tokio::test]
    async fn a_commit_leaves_the_update_index_alone_while_the_stamp_stays() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(&dir.path().join("j.db"), "normal", 64).unwrap();
        let k = ThreadKey::new("t", "x");
        // Other threads, so the index is more than the one page.
        for t in 0..200 {
            let other = ThreadKey::new("t", format!("o{t:03}"));
            s.append(batch(&other, 1, 1, "idle"))
                .await
                .unwrap()
                .unwrap();
        }
        let frames = || {
            let core = s.core.lock().unwrap();
            core.wal.frames.load(std::sync::atomic::Ordering::Relaxed)
        };
        let commit = |seq: u64, updated_ms: u64| {
            let mut b = batch(&k, seq, 1, "running");
            b.meta.updated_ms = updated_ms;
            s.append(b)
        };
        commit(1, 5).await.unwrap().unwrap();
        let (n, before) = (50, frames());
        for seq in 2..2 + n {
            commit(seq, 5).await.unwrap().unwrap();
        }
        let per_commit = (frames() - before) as f64 / n as f64;
        assert!(
            per_commit <= 3.2,
            "{per_commit} pages a commit, the stamp unchanged"
        );
        let before = frames();
        for seq in 2 + n..2 + 2 * n {
            commit(seq, seq * 1000).await.unwrap().unwrap();
        }
        let per_commit = (frames() - before) as f64 / n as f64;
        assert!(
            per_commit >= 3.8,
            "{per_commit} pages a commit, the stamp moving"
        );
        let listed = s.list("t").unwrap();
        assert_eq!(listed[0].0, k, "the newest stamp first");
        assert_eq!(listed[0].1.updated_ms, (1 + 2 * n) * 1000);
    }

    /// Commits back to back, with no pause for a passive checkpoint to
    /// catch up in (a steady stream on a busy disk, where each pass takes
    /// longer than the commits it copies): the background checkpoint still
    /// keeps the log within its bound, restarting it itself, so the
    /// writer's reset (its fsync in front of every append) stays the rare
    /// fallback. Before, the writer reset the log every time.
    #[tokio::test]
    async fn a_journal_written_without_a_pause_is_restarted_in_the_background() {
        let (restarts, resets) = single_event_commits(3000, None).await;
        assert!(
            resets * 4 <= restarts as u64,
            "the writer reset the log {resets} times of {restarts}"
        );
    }

    /// The log is reset in place: the file has its full size from the
    /// start and keeps it across resets (commits overwrite allocated
    /// blocks instead of growing the file, which waited on the filesystem's
    /// journal), while the log in use stays bounded and nothing is lost.
    #[tokio::test]
    async fn the_wal_is_reset_in_place_never_grown_or_truncated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        let bound = 1 << 20;
        let s = SqliteStore::open_bounded(&path, "normal", 64, bound).unwrap();
        let wal = dir.path().join("j.db-wal");
        let k = ThreadKey::new("t", "x");
        // The WAL header's salts change at every reset of the log.
        let salts = || std::fs::read(&wal).unwrap()[16..24].to_vec();
        let mut resets = 0;
        let mut salts_before = Vec::new();
        for round in 0..400u64 {
            s.append(batch(&k, round * 10 + 1, 10, "running"))
                .await
                .unwrap()
                .unwrap();
            let file = std::fs::metadata(&wal).unwrap().len();
            // (A commit may pass the bound before the reset that follows it.)
            assert!(
                (bound..bound + (256 << 10)).contains(&file),
                "round {round}: the file keeps its size: {file}"
            );
            let now = salts();
            if !salts_before.is_empty() && now != salts_before {
                resets += 1;
            }
            salts_before = now;
        }
        assert!(resets >= 1, "the log was reset in place");
        drop(s);
        let again = SqliteStore::open_bounded(&path, "normal", 64, bound).unwrap();
        assert_eq!(again.load(&k).unwrap().unwrap().events.len(), 4000);
    }

    #[tokio::test]
    async fn readiness_turns_false_when_the_writer_thread_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SqliteStore::open(&dir.path().join("j.db"), "normal", 1024).unwrap();
        assert!(s.healthy());
        // The writer thread ends when its queue's sender goes away.
        let (orphan, _) = mpsc::channel();
        s.writer = Mutex::new(Some(orphan));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while s.healthy() {
            assert!(std::time::Instant::now() < deadline, "still healthy");
            std::thread::yield_now();
        }
        let ack = s.append(batch(&ThreadKey::new("t", "th"), 1, 1, "running"));
        assert!(ack.await.unwrap().is_err(), "nothing can be written");
    }

    /// A small batch appended while the writer has nothing queued is
    /// committed before `append` returns: no trip to the writer thread and
    /// back (two wake-ups per event of a paced run).
    #[tokio::test]
    async fn an_idle_journal_commits_a_small_batch_on_the_appenders_thread() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(&dir.path().join("j.db"), "normal", 1024).unwrap();
        let k = ThreadKey::new("t", "x");
        for from in 1..=20 {
            let mut ack = s.append(batch(&k, from, 1, "running"));
            assert_eq!(ack.try_recv().expect("acknowledged at once"), Ok(from));
        }
        assert_eq!(s.load(&k).unwrap().unwrap().events.len(), 20);
        // With an fsync per commit, the writer's group commits instead.
        let full = SqliteStore::open(&dir.path().join("f.db"), "full", 1024).unwrap();
        assert!(!full.inline);
    }

    /// Appends committed on their own threads and batches queued for the
    /// writer (big ones, and whatever arrives while it is busy) interleave
    /// without one ever passing another of its thread: every batch of
    /// several journals, appended back to back without waiting, is
    /// accepted in order.
    #[tokio::test]
    async fn appends_on_their_own_threads_never_pass_queued_ones() {
        let dir = tempfile::tempdir().unwrap();
        let s =
            std::sync::Arc::new(SqliteStore::open(&dir.path().join("j.db"), "normal", 64).unwrap());
        let appenders: Vec<_> = (0..4)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || {
                    let k = ThreadKey::new("t", format!("x{t}"));
                    let mut acks = Vec::new();
                    let mut seq = 1;
                    for i in 0..400u64 {
                        // Now and then a batch past the inline bound.
                        let mut b = batch(&k, seq, 1 + i % 3, "running");
                        if i % 50 == t {
                            b.events[0].1 = Bytes::from(format!(
                                "{{\"type\":\"CUSTOM\",\"pad\":\"{}\"}}",
                                "p".repeat(INLINE_MAX_BYTES)
                            ));
                        }
                        seq += b.events.len() as u64;
                        acks.push(s.append(b));
                    }
                    (k, seq - 1, acks)
                })
            })
            .collect();
        for appender in appenders {
            let (k, last, acks) = appender.join().unwrap();
            for ack in acks {
                ack.await.unwrap().expect("accepted in order");
            }
            let stored = s.load(&k).unwrap().unwrap();
            assert_eq!(stored.events.len() as u64, last);
            assert!(stored.events.iter().zip(1..).all(|((seq, _), n)| *seq == n));
        }
    }

    /// Another process holding the database's write lock (a backup, an
    /// `sqlite3` shell left in a transaction) never holds up the appender's
    /// own thread, an async worker: the batch goes to the writer thread,
    /// which waits for the lock, and is committed once it is free. (The
    /// appender's commit waited out the busy timeout on the worker and then
    /// failed the batch and the journal's readiness, and so did the
    /// writer's: its transaction read before it wrote, and SQLite refuses
    /// such a transaction's write at once instead of waiting.) With
    /// `synchronous = "full"` every batch goes to the writer.
    #[tokio::test]
    async fn a_journal_locked_by_another_process_queues_for_the_writer() {
        for synchronous in ["normal", "full"] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("j.db");
            let s = SqliteStore::open(&path, synchronous, 1024).unwrap();
            let k = ThreadKey::new("t", "x");
            assert_eq!(s.append(batch(&k, 1, 1, "running")).await.unwrap(), Ok(1));
            let other = Connection::open(&path).unwrap();
            other.execute_batch("BEGIN IMMEDIATE").unwrap();
            let mut ack = s.append(batch(&k, 2, 1, "running"));
            // Returned with the lock still held elsewhere: nothing decided yet.
            let early = ack.try_recv();
            assert!(
                matches!(early, Err(oneshot::error::TryRecvError::Empty)),
                "{synchronous}: the append was decided while another process held the lock: {early:?}"
            );
            // The other process writes too (a table of its own).
            other
                .execute_batch(
                    "CREATE TABLE IF NOT EXISTS notes (n); INSERT INTO notes VALUES (1); COMMIT",
                )
                .unwrap();
            assert_eq!(ack.await.unwrap(), Ok(2), "{synchronous}");
            assert!(s.healthy(), "{synchronous}");
            assert_eq!(s.load(&k).unwrap().unwrap().events.len(), 2);
        }
    }

    #[tokio::test]
    async fn close_writes_everything_queued_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        let s = SqliteStore::open(&path, "normal", 16).unwrap();
        let k = ThreadKey::new("t", "th");
        // Queued, never awaited: only close stands between them and exit.
        let acks: Vec<_> = (0..50)
            .map(|i| s.append(batch(&k, 1 + i * 4, 4, "running")))
            .collect();
        s.close().await;
        let late = s.append(batch(&k, 201, 1, "running"));
        assert!(late.await.unwrap().is_err(), "closed: nothing more taken");
        drop(acks);
        drop(s);
        let reopened = SqliteStore::open(&path, "normal", 16).unwrap();
        assert_eq!(reopened.load(&k).unwrap().unwrap().events.len(), 200);
    }
}
