//! The soak: steady load on one gateway with an SQLite journal, sampled over
//! time. `tests/soak.rs` runs a short one in CI; `benches/soak.rs` a long one
//! (docs/benchmarks.md).
//!
//! Per thread, one WebSocket client starts a demo run after another (the
//! built-in demo agent, a few dozen events a run), and viewers follow it;
//! each viewer drops its connection every few hundred frames and resumes on
//! a new one with `after = <last seq it saw>`, as a flaky network makes real
//! clients do. Every `sample_every` the driver records the WAL file's size
//! and the gateway's `VmRSS` (`/proc/PID/status`).

use super::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The shape of the load.
#[derive(Debug, Clone)]
pub struct Load {
    pub threads: usize,
    pub viewers_per_thread: usize,
    pub duration: Duration,
    pub sample_every: Duration,
    /// How long each thread's runner waits after a run's end before the
    /// next (a user reading the answer); zero: back to back.
    pub pause: Duration,
}

/// One sample.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Seconds since the load started.
    pub at: f64,
    pub wal_bytes: u64,
    pub db_bytes: u64,
    pub rss_kib: u64,
    /// Runs finished and event frames viewers received so far.
    pub runs: u64,
    pub frames: u64,
    pub reconnects: u64,
}

/// What a soak found.
pub struct Report {
    pub samples: Vec<Sample>,
    /// Viewer frames whose seq did not continue the previous one (after a
    /// resume, a reset snapshot may legitimately restart the count).
    pub gaps: u64,
    /// The events in the journal when the load stopped, and their JSON's
    /// bytes: what a retained event's memory is compared with.
    pub journal: JournalSize,
}

/// A journal's events and the bytes of their JSON texts.
#[derive(Debug, Clone, Copy, Default)]
pub struct JournalSize {
    pub events: u64,
    pub json_bytes: u64,
}

impl JournalSize {
    /// Read from the SQLite journal at `db` (read-only, beside the gateway
    /// that writes it: WAL readers do not block the writer).
    pub fn of(db: &Path) -> JournalSize {
        let c =
            rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .expect("journal opens read-only");
        c.query_row(
            "SELECT COALESCE(SUM(last_seq - first_seq + 1), 0), COALESCE(SUM(length(frames)), 0) FROM batches",
            [],
            |r| {
                Ok(JournalSize {
                    events: r.get::<_, i64>(0)? as u64,
                    json_bytes: r.get::<_, i64>(1)? as u64,
                })
            },
        )
        .expect("journal readable")
    }
}

/// `[store]`, `[demo]` and the demo agent for a soak gateway journaling to
/// `db`, with `extra` TOML in `[store]` (e.g. `max_wal_bytes`). Journals are
/// compacted past 500 events, so a thread's memory reaches its steady state
/// within seconds (and resumes from before the base get `reset` snapshots).
pub fn soak_config(db: &Path, store_extra: &str) -> String {
    format!(
        "[demo]\nenabled = true\ntoken_delay = \"0s\"\n[threads]\nmax_events = 500\n\
         [store]\nkind = \"sqlite\"\npath = \"{}\"\n{store_extra}\n\
         [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n",
        db.display()
    )
}

/// The resident set of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Runs `load` against `gw` (whose journal is `db`) and samples it.
pub async fn soak(gw: &Gateway, db: &Path, load: &Load) -> Report {
    let pid = gw.proc.child.id().expect("gateway running");
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    let wal = PathBuf::from(wal);
    let stop = Arc::new(AtomicBool::new(false));
    let runs = Arc::new(AtomicU64::new(0));
    let frames = Arc::new(AtomicU64::new(0));
    let reconnects = Arc::new(AtomicU64::new(0));
    let gaps = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..load.threads {
        let thread = format!("soak-{t}");
        let mut runner = Ws::connect(gw, WsAuth::Header(&token(json!({"sub": "soak"}))))
            .await
            .expect("upgrade");
        let (stopped, runs) = (stop.clone(), runs.clone());
        let th = thread.clone();
        let base = gw.url("");
        let pause = load.pause;
        tasks.push(tokio::spawn(async move {
            let stop = stopped;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let run = format!("{th}-r{n}");
                runner
                    .send(json!({"type": "run", "id": run, "agent": "demo", "threadId": th,
                        "runId": run, "messages": [{"id": format!("u-{run}"), "role": "user", "content": "tell me a story"}]}))
                    .await;
                // The runner watches the thread already, so the run's first
                // events may come before its answer (docs/protocol.md,
                // "WebSocket"): the answer is the frame naming the command.
                let mut seen = Vec::new();
                let ack = loop {
                    let Ok(f) = tokio::time::timeout(WAIT, runner.recv_frame()).await else {
                        panic!("{}", stuck(&base, &th, &run, "no answer to the run", &seen).await);
                    };
                    assert!(f.get("close").is_none(), "runner closed: {f}");
                    if f["id"] == run.as_str() {
                        break f;
                    }
                    seen.push(f);
                };
                if ack["type"] == "error" {
                    eprintln!("soak: run {run} refused: {ack}");
                }
                if ack["type"] != "ack" {
                    // Refused (the previous run still closing): try again.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                let ended = |f: &Value| is_terminal_frame(f) && f["event"]["runId"] == run.as_str();
                while !seen.iter().any(ended) {
                    let Ok(f) = tokio::time::timeout(WAIT, runner.recv_frame()).await else {
                        panic!("{}", stuck(&base, &th, &run, "no end of the run", &seen).await);
                    };
                    assert!(f.get("close").is_none(), "{f}");
                    seen.push(f);
                }
                runs.fetch_add(1, Ordering::Relaxed);
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
            }
        }));
        for v in 0..load.viewers_per_thread {
            let (stop, frames, reconnects, gaps) = (
                stop.clone(),
                frames.clone(),
                reconnects.clone(),
                gaps.clone(),
            );
            let thread = thread.clone();
            let viewer_token =
                token(json!({"sub": format!("viewer-{v}"), "threads": {thread.clone(): ["view"]}}));
            // Each viewer drops its connection after its own number of frames.
            let drop_after = 150 + 53 * v as u64;
            let addr = gw.next_base().to_owned();
            tasks.push(tokio::spawn(async move {
                let mut last: Option<u64> = None;
                while !stop.load(Ordering::Relaxed) {
                    let mut ws = Ws::connect_at(&addr, WsAuth::Header(&viewer_token), None, None)
                        .await
                        .expect("upgrade");
                    let subscribe = match last {
                        Some(seq) => json!({"type": "subscribe", "threadId": thread, "after": seq}),
                        None => json!({"type": "subscribe", "threadId": thread}),
                    };
                    ws.send(subscribe).await;
                    let mut got = 0;
                    while got < drop_after && !stop.load(Ordering::Relaxed) {
                        // Woken now and then to notice the end of the load.
                        let Ok(f) =
                            tokio::time::timeout(Duration::from_millis(500), ws.recv()).await
                        else {
                            continue;
                        };
                        assert!(f.get("close").is_none(), "viewer closed: {f}");
                        match f["type"].as_str() {
                            Some("snapshot") => last = f["seq"].as_u64(),
                            Some("event") => {
                                let seq = f["seq"].as_u64().unwrap();
                                if last.is_some_and(|l| seq != l + 1) {
                                    gaps.fetch_add(1, Ordering::Relaxed);
                                }
                                last = Some(seq);
                                got += 1;
                                frames.fetch_add(1, Ordering::Relaxed);
                            }
                            _ => {}
                        }
                    }
                    reconnects.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
    }
    let began = std::time::Instant::now();
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(load.sample_every);
    loop {
        tick.tick().await;
        let sample = Sample {
            at: began.elapsed().as_secs_f64(),
            wal_bytes: file_len(&wal),
            db_bytes: file_len(db),
            rss_kib: rss_kib(pid),
            runs: runs.load(Ordering::Relaxed),
            frames: frames.load(Ordering::Relaxed),
            reconnects: reconnects.load(Ordering::Relaxed),
        };
        eprintln!(
            "soak t={:>5.1}s wal={:>8.2} MiB db={:>7.2} MiB rss={:>7.1} MiB runs={} frames={} reconnects={}",
            sample.at,
            sample.wal_bytes as f64 / 1048576.0,
            sample.db_bytes as f64 / 1048576.0,
            sample.rss_kib as f64 / 1024.0,
            sample.runs,
            sample.frames,
            sample.reconnects
        );
        samples.push(sample);
        if began.elapsed() >= load.duration {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("load task");
    }
    Report {
        samples,
        gaps: gaps.load(Ordering::Relaxed),
        journal: JournalSize::of(db),
    }
}

/// What a runner that waited in vain knows: the frames it got for its run,
/// and the thread as the gateway shows it (its run and status, its seq).
async fn stuck(base: &str, thread: &str, run: &str, what: &str, seen: &[Value]) -> String {
    let snapshot = http()
        .get(format!("{base}/v1/threads/{thread}"))
        .bearer_auth(token(json!({"sub": "soak"})))
        .send()
        .await;
    let snapshot = match snapshot {
        Ok(r) => r.json::<Value>().await.map_or_else(
            |e| format!("unreadable: {e}"),
            |v| {
                format!(
                    "seq={} run={} status={:?}",
                    v["seq"],
                    v["run"],
                    v.get("status")
                )
            },
        ),
        Err(e) => format!("no answer: {e}"),
    };
    let last: Vec<String> = seen
        .iter()
        .rev()
        .take(5)
        .map(|f| format!("{}:{}", f["seq"], f["event"]["type"]))
        .collect();
    format!(
        "soak runner of {thread}: {what} for run {run} within {WAIT:?}; it got {} frames (last: {last:?}); the gateway shows {snapshot}",
        seen.len()
    )
}
