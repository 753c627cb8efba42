//! The soak of issue 19 (item 6): steady load on one gateway with an SQLite
//! journal for minutes, sampling the WAL file and the gateway's RSS. Run it
//! with
//!
//! ```sh
//! cargo bench --bench soak                  # 200 viewers on 20 threads, 10 min
//! SOAK_SECS=180 cargo bench --bench soak    # shorter
//! ```
//!
//! Per thread, one WebSocket client starts a demo run after another and
//! viewers (`SOAK_VIEWERS` per thread, default 10) follow it, each dropping
//! its connection every few hundred frames and resuming with `after = N`
//! (`tests/common/soak.rs`; `tests/soak.rs` is the CI-sized version).
//! `SOAK_THREADS` (default 20), `SOAK_PAUSE_MS` (a pause after each run,
//! per thread: a user reading; default 0), `SOAK_MAX_WAL` (`store.max_wal_bytes`;
//! unset: the default) and `AGUI_TEST_GATEWAY_BIN` (another gateway binary,
//! e.g. an older build to compare with) shape it. It prints one line per
//! sample and a summary; docs/benchmarks.md has the numbers.
//!
//! Under `cargo test` (no `--bench` argument) it does nothing.

#[path = "../tests/common/mod.rs"]
mod common;

use common::Gateway;
use common::soak::*;
use std::time::Duration;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("soak: skipped outside `cargo bench --bench soak`");
        return;
    }
    let load = Load {
        threads: env_or("SOAK_THREADS", 20) as usize,
        viewers_per_thread: env_or("SOAK_VIEWERS", 10) as usize,
        duration: Duration::from_secs(env_or("SOAK_SECS", 600)),
        sample_every: Duration::from_secs(env_or("SOAK_SAMPLE_SECS", 15)),
        pause: Duration::from_millis(env_or("SOAK_PAUSE_MS", 0)),
    };
    let store_extra = std::env::var("SOAK_MAX_WAL")
        .map(|v| format!("max_wal_bytes = {v}"))
        .unwrap_or_default();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let db = dir.path().join("journal.db");
            let gw = Gateway::start(&soak_config(&db, &store_extra)).await;
            let report = soak(&gw, &db, &load).await;
            let max_wal = report.samples.iter().map(|s| s.wal_bytes).max().unwrap();
            let last = report.samples.last().unwrap();
            println!(
                "soak: {} threads × {} viewers, {:.0} s: {} runs, {} viewer frames, {} reconnects, {} gaps; \
                 WAL max {:.1} MiB, last {:.1} MiB; database {:.1} MiB; RSS last {:.1} MiB",
                load.threads,
                load.viewers_per_thread,
                last.at,
                last.runs,
                last.frames,
                last.reconnects,
                report.gaps,
                max_wal as f64 / 1048576.0,
                last.wal_bytes as f64 / 1048576.0,
                last.db_bytes as f64 / 1048576.0,
                last.rss_kib as f64 / 1024.0
            );
            // What each event kept in the journal cost in RSS, beside its
            // JSON: meaningful when nothing was compacted or shed
            // (`threads.max_events` and the budgets raised, docs/benchmarks.md).
            // Counted from the second sample: the first fill (connections,
            // SQLite's page cache, the runtime's buffers) is fixed cost.
            let warm = &report.samples[1.min(report.samples.len() - 1)];
            let j = report.journal;
            let per_run_events = j.events as f64 / last.runs.max(1) as f64;
            let events = (last.runs - warm.runs) as f64 * per_run_events;
            let gained = (last.rss_kib.saturating_sub(warm.rss_kib) * 1024) as f64;
            let per_event = gained / events.max(1.0);
            let json = j.json_bytes as f64 / j.events.max(1) as f64;
            println!(
                "soak: {} events journaled ({per_run_events:.1} a run), {json:.0} JSON bytes each; \
                 once warm, RSS +{:.1} MiB over {} runs = {per_event:.0} B an event ({:.2}× its JSON)",
                j.events,
                gained / 1048576.0,
                last.runs - warm.runs,
                per_event / json,
            );
        });
}
