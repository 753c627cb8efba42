//! Long life under steady load (issue 19, item 6): a short soak of the real
//! gateway binary — demo runs back to back on several threads, WebSocket
//! viewers dropping and resuming with `after = N` — must not grow the SQLite
//! WAL or the process's memory once warm. The long version is a benchmark
//! (`benches/soak.rs`, docs/benchmarks.md).

mod common;

use common::soak::*;
use common::*;
use std::time::Duration;

/// The WAL bound this test configures (`store.max_wal_bytes`).
const MAX_WAL: u64 = 4 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_and_memory_stop_growing_under_steady_load() {
    if single_node_only("measures one process's SQLite WAL and memory") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let gw = Gateway::start(&soak_config(&db, &format!("max_wal_bytes = {MAX_WAL}"))).await;
    let load = Load {
        threads: 6,
        viewers_per_thread: 4,
        duration: Duration::from_secs(75),
        sample_every: Duration::from_secs(3),
    };
    let report = soak(&gw, &db, &load).await;
    let s = &report.samples;
    assert_eq!(report.gaps, 0, "viewers saw every seq once, in order");
    let last = s.last().unwrap();
    assert!(last.runs > 100 && last.reconnects > 50, "{last:?}");
    // Warm after the first third; then compare the second third with the last.
    let third = s.len() / 3;
    let (middle, end) = (&s[third..2 * third], &s[2 * third..]);
    let max = |w: &[Sample], f: fn(&Sample) -> u64| w.iter().map(f).max().unwrap();
    // One group commit may land between a check and the truncation.
    let slack = 4 << 20;
    assert!(
        max(s, |x| x.wal_bytes) <= MAX_WAL + slack,
        "the WAL passed its bound: {s:#?}"
    );
    assert!(
        max(end, |x| x.wal_bytes) <= max(middle, |x| x.wal_bytes).max(MAX_WAL) + slack,
        "the WAL keeps growing: {s:#?}"
    );
    // Memory: the last third may not sit above the middle one by more than
    // allocator noise (10 % and 8 MiB).
    let (rss_middle, rss_end) = (max(middle, |x| x.rss_kib), max(end, |x| x.rss_kib));
    assert!(
        rss_end <= rss_middle + rss_middle / 10 + 8 * 1024,
        "memory keeps growing: {rss_middle} KiB → {rss_end} KiB: {s:#?}"
    );
    // The metric says what the file holds.
    let metrics = gw.metrics().await;
    let wal_metric: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("agui_journal_wal_bytes "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no agui_journal_wal_bytes in {metrics}"));
    assert!(wal_metric <= MAX_WAL + slack, "{wal_metric}");
}
