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

/// The node budget this test configures (`threads.memory_budget`).
const BUDGET: u64 = 16 << 20;

/// What each connection may hold beside the threads: its outbox, bounded
/// by `threads.viewer_queue_bytes` (1 MiB by default; docs/operations.md,
/// "Sizing by bytes", says the budget does not count it).
const OUTBOX_BOUND: u64 = 1 << 20;

/// The allocator's arenas and fragmentation on top of what is held.
const ALLOCATOR_SLACK: u64 = 16 << 20;

// Four workers for 30 clients: in one CI run on two, the load's own sampler
// (which only reads files) printed nothing for 20 s while a runner's wait ran
// out, which points at the client side starving rather than the gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_wal_and_memory_stop_growing_under_steady_load() {
    if single_node_only("measures one process's SQLite WAL and memory") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    // Tails of 64 KiB and a node budget of 16 MiB (docs/operations.md,
    // "Sizing by bytes"): the journals compact past 500 events, so both
    // bind as the soak goes.
    let gw = Gateway::start_with_env(
        &soak_config(&db, &format!("max_wal_bytes = {MAX_WAL}")),
        &[
            ("AGUI_GATEWAY__THREADS__HOT_BYTES", "64KiB"),
            ("AGUI_GATEWAY__THREADS__MEMORY_BUDGET", "16MiB"),
        ],
    )
    .await;
    let load = Load {
        threads: 6,
        viewers_per_thread: 4,
        duration: Duration::from_secs(75),
        sample_every: Duration::from_secs(3),
        pause: Duration::ZERO,
    };
    let report = soak(&gw, &db, &load).await;
    let s = &report.samples;
    assert_eq!(report.gaps, 0, "viewers saw every seq once, in order");
    let last = s.last().unwrap();
    assert!(last.runs > 100 && last.reconnects > 50, "{last:?}");
    // Warm after the first third; then the second third against the last.
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
    // Memory: what it gains once warm, per run. Each run adds two messages
    // to its thread's conversation (kept in memory with the thread): 5–8 KiB
    // a run in the long soak, up to 13 KiB here (docs/benchmarks.md). A leak
    // of a KiB per event or per viewer reconnect passes 32 KiB a run,
    // whatever the machine's speed.
    let avg = |w: &[Sample], f: fn(&Sample) -> u64| w.iter().map(f).sum::<u64>() / w.len() as u64;
    let (warm, done) = (&s[third..third + 3], &s[s.len() - 3..]);
    let gained_kib = avg(done, |x| x.rss_kib).saturating_sub(avg(warm, |x| x.rss_kib));
    let runs = avg(done, |x| x.runs) - avg(warm, |x| x.runs);
    eprintln!(
        "soak: once warm, RSS +{gained_kib} KiB over {runs} runs ({} bytes a run)",
        gained_kib * 1024 / runs.max(1)
    );
    assert!(
        gained_kib * 1024 / runs.max(1) <= 32 * 1024,
        "memory keeps growing: {gained_kib} KiB over {runs} runs: {s:#?}"
    );
    // The node's count of what its threads hold stays within its budget.
    let metrics = gw.metrics().await;
    let resident: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("agui_resident_bytes{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
        .sum();
    assert!(
        resident > 0.0 && resident <= BUDGET as f64,
        "{resident} counted:\n{metrics}"
    );
    // RSS once warm, at every sample and not only the last: within the
    // budget plus the fixed overhead docs/operations.md ("Sizing by bytes")
    // names — what the process held at start (binary, runtime, SQLite's
    // page cache: a debug build starts near 45 MiB), each connection's
    // outbox bound, and the allocator's slack.
    let bound = rss_bound(s[0].rss_kib * 1024, &load);
    let (peak_at, peak) = s[third..]
        .iter()
        .map(|x| (x.at, x.rss_kib * 1024))
        .max_by_key(|(_, rss)| *rss)
        .unwrap();
    eprintln!(
        "soak: RSS once warm at most {} KiB (at {peak_at:.0} s), bound {} KiB",
        peak / 1024,
        bound / 1024
    );
    assert!(
        peak <= bound,
        "RSS {} KiB at {peak_at:.0} s passed its start, the budget, the outboxes and the slack ({} KiB): {s:#?}",
        peak / 1024,
        bound / 1024
    );
    // The metric says what the file holds.
    let wal_metric: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("agui_journal_wal_bytes "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no agui_journal_wal_bytes in {metrics}"));
    assert!(wal_metric <= MAX_WAL + slack, "{wal_metric}");
}

/// The most RSS the gateway may hold once warm: `start` (the process as it
/// began, listeners open) plus the node budget, each connection's outbox
/// bound (one runner and the viewers per thread) and the allocator's slack.
/// (A fixed 64 MiB for all but the budget passed locally and failed in CI
/// at 85 MiB: the debug build's start and the 30 outboxes had not been
/// counted.)
fn rss_bound(start: u64, load: &Load) -> u64 {
    let connections = (load.threads * (load.viewers_per_thread + 1)) as u64;
    start + BUDGET + connections * OUTBOX_BOUND + ALLOCATOR_SLACK
}
