//! How the SQLite journal should store a batch of events (issue 22, item 2),
//! measured at the SQL level, without the gateway:
//!
//! ```sh
//! cargo bench --bench journal                 # 200,000 events per case
//! JOURNAL_EVENTS=50000 cargo bench --bench journal
//! ```
//!
//! Three layouts, each writing the same events the way the journal writer
//! does (a transaction per group commit: the seq check `SELECT last_seq`, the
//! events, the thread's metadata upsert, the commit; WAL, `synchronous =
//! normal`, a file in a temporary directory):
//! - `per-event`: one `INSERT` per event into the `WITHOUT ROWID` table
//!   `events (tenant, thread, seq, json)` (the journal before issue 22);
//! - `multi-row`: the same table, one `INSERT … VALUES (…), (…), …` per batch;
//! - `batch-row`: one row per batch in a rowid table with the seq range, the
//!   events' bytes back to back and their end offsets, indexed by
//!   (tenant, thread, last_seq) (what `src/store/sqlite.rs` does now).
//!
//! For batch sizes of 1, 10 and 150 events and events of 100 bytes and
//! 1 KiB, it prints the writer's CPU time per event (this thread's time on a
//! CPU from `/proc/thread-self/schedstat`; SQLite's work is all on it) and
//! the file's size. Under `cargo test` (no `--bench` argument) it does nothing.

use rusqlite::{Connection, params};
use std::time::Duration;

/// This thread's time on a CPU so far (`/proc/thread-self/schedstat`).
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    let ns: u64 = stat.split_whitespace().next().unwrap().parse().unwrap();
    Duration::from_nanos(ns)
}

#[derive(Clone, Copy, Debug)]
enum Layout {
    PerEvent,
    MultiRow,
    BatchRow,
}

const THREADS: &str = "CREATE TABLE threads (tenant TEXT NOT NULL, thread TEXT NOT NULL,
    creator TEXT NOT NULL, agent TEXT, status TEXT NOT NULL, created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL, last_seq INTEGER NOT NULL, base_seq INTEGER,
    base_snapshot BLOB, PRIMARY KEY (tenant, thread)) WITHOUT ROWID;";

fn schema(layout: Layout) -> String {
    let events = match layout {
        Layout::PerEvent | Layout::MultiRow => {
            "CREATE TABLE events (tenant TEXT NOT NULL, thread TEXT NOT NULL,
               seq INTEGER NOT NULL, json BLOB NOT NULL,
               PRIMARY KEY (tenant, thread, seq)) WITHOUT ROWID;"
        }
        Layout::BatchRow => {
            "CREATE TABLE batches (tenant TEXT NOT NULL, thread TEXT NOT NULL,
               first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL,
               ends BLOB NOT NULL, frames BLOB NOT NULL);
             CREATE UNIQUE INDEX batches_by_seq ON batches (tenant, thread, last_seq);"
        }
    };
    format!("{THREADS}{events}")
}

/// Writes `total` events of `size` bytes in batches of `batch`, one
/// transaction each, and answers (CPU per event, file bytes).
fn run(layout: Layout, total: u64, batch: u64, size: usize) -> (Duration, u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let mut conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "normal").unwrap();
    conn.execute_batch(&schema(layout)).unwrap();
    let json = {
        let mut j = br#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":""#.to_vec();
        j.resize(size - 2, b'x');
        j.extend_from_slice(br#""}"#);
        j
    };
    let began = thread_cpu();
    let mut seq = 1u64;
    while seq <= total {
        let n = batch.min(total - seq + 1);
        let tx = conn.transaction().unwrap();
        {
            let last: Option<i64> = tx
                .prepare_cached("SELECT last_seq FROM threads WHERE tenant = ?1 AND thread = ?2")
                .unwrap()
                .query_row(params!["t", "x"], |r| r.get(0))
                .ok();
            assert_eq!(last.unwrap_or(0) as u64, seq - 1);
            match layout {
                Layout::PerEvent => {
                    let mut insert = tx
                        .prepare_cached(
                            "INSERT INTO events (tenant, thread, seq, json) VALUES (?1, ?2, ?3, ?4)",
                        )
                        .unwrap();
                    for s in seq..seq + n {
                        insert.execute(params!["t", "x", s as i64, &json]).unwrap();
                    }
                }
                Layout::MultiRow => {
                    let mut sql =
                        "INSERT INTO events (tenant, thread, seq, json) VALUES ".to_owned();
                    for i in 0..n {
                        sql.push_str(if i == 0 {
                            "(?, ?, ?, ?)"
                        } else {
                            ", (?, ?, ?, ?)"
                        });
                    }
                    let mut insert = tx.prepare_cached(&sql).unwrap();
                    let seqs: Vec<i64> = (seq..seq + n).map(|s| s as i64).collect();
                    let mut args: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(4 * n as usize);
                    for s in &seqs {
                        args.extend([&"t" as &dyn rusqlite::ToSql, &"x", s, &json]);
                    }
                    insert.execute(args.as_slice()).unwrap();
                }
                Layout::BatchRow => {
                    let mut ends = Vec::with_capacity(4 * n as usize);
                    let mut frames = Vec::with_capacity(n as usize * json.len());
                    for i in 0..n {
                        if i > 0 {
                            ends.extend_from_slice(&(frames.len() as u32).to_le_bytes());
                        }
                        frames.extend_from_slice(&json);
                    }
                    tx.prepare_cached(
                        "INSERT INTO batches (tenant, thread, first_seq, last_seq, ends, frames)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    )
                    .unwrap()
                    .execute(params![
                        "t",
                        "x",
                        seq as i64,
                        (seq + n - 1) as i64,
                        ends,
                        frames
                    ])
                    .unwrap();
                }
            }
            tx.prepare_cached(
                "INSERT INTO threads (tenant, thread, creator, agent, status, created_ms, updated_ms, last_seq)
                 VALUES (?1, ?2, 'u', 'a', 'running', 1, ?3, ?3)
                 ON CONFLICT (tenant, thread) DO UPDATE SET
                   updated_ms = excluded.updated_ms, last_seq = excluded.last_seq",
            )
            .unwrap()
            .execute(params!["t", "x", (seq + n - 1) as i64])
            .unwrap();
        }
        tx.commit().unwrap();
        seq += n;
    }
    let cpu = thread_cpu() - began;
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    let bytes = std::fs::metadata(&path).unwrap().len();
    (cpu / total as u32, bytes)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("journal: skipped outside `cargo bench --bench journal`");
        return;
    }
    let total: u64 = std::env::var("JOURNAL_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    println!("{total} events per case; writer CPU per event (file size)");
    println!(
        "{:>6} {:>6} | {:>20} {:>20} {:>20}",
        "batch", "bytes", "per-event", "multi-row", "batch-row"
    );
    for size in [100, 1024] {
        for batch in [1, 10, 150] {
            let cells: Vec<String> = [Layout::PerEvent, Layout::MultiRow, Layout::BatchRow]
                .into_iter()
                .map(|layout| {
                    let (cpu, bytes) = run(layout, total, batch, size);
                    format!(
                        "{:.2} µs ({} MB)",
                        cpu.as_nanos() as f64 / 1000.0,
                        bytes >> 20
                    )
                })
                .collect();
            println!(
                "{batch:>6} {size:>6} | {:>20} {:>20} {:>20}",
                cells[0], cells[1], cells[2]
            );
        }
    }
}
