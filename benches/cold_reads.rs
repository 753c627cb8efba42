//! Reading back what left memory (issue 30): the same threads read from
//! the start by a WebSocket `subscribe` with `after: 0`, once from memory
//! (`threads.hot_bytes` large enough for everything) and once from the
//! store (`hot_bytes` = 1 KiB: every older event is read back), on SQLite
//! and on Redis, side by side in one run. Prints the catch-up rate
//! (events/s) of each, their ratio, and the gateway's RSS once the threads
//! are filled. Run it with
//!
//! ```sh
//! cargo bench --bench cold_reads                       # 20 threads × 40 runs (about 1,700 events each)
//! COLD_THREADS=100 COLD_RUNS=200 cargo bench --bench cold_reads
//! # issue 30's 1,000 threads × 10,000 events, far past a 256 MiB budget:
//! COLD_THREADS=1000 COLD_RUNS=1 COLD_EVENTS=10000 COLD_HOT=4MiB COLD_BUDGET=256MiB \
//!   COLD_READ_THREADS=100 cargo bench --bench cold_reads
//! ```
//!
//! Knobs: `COLD_EVENTS` > 0 fills with the blaster (`benches/support`:
//! that many small CUSTOM events a run, as fast as the gateway takes them)
//! instead of the demo agent's conversations; `COLD_HOT` the `hot_bytes`
//! values to compare (default `1GiB,1KiB`: all in memory, all from the
//! store); `COLD_BUDGET` the node's `memory_budget` (default 4 GiB);
//! `COLD_STORES` (default `sqlite,redis`); `COLD_READ_THREADS` how many
//! threads the rate is measured on (default all). Every thread is also
//! checked to start at seq 1 when read from `after: 0` (nothing of it was
//! lost to the budget).
//!
//! Under `cargo test` (no `--bench` argument) it does nothing.

#[path = "support/blaster.rs"]
mod blaster;
#[path = "../tests/common/mod.rs"]
mod common;

use common::soak::rss_kib;
use common::*;
use serde_json::json;
use std::time::{Duration, Instant};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Fills `threads` threads with `runs` runs each (all threads at once):
/// demo conversations, or `events` blaster ticks a run; answers each
/// thread's last seq.
async fn fill(
    gw: &Gateway,
    t: &str,
    threads: usize,
    runs: usize,
    events: usize,
) -> Vec<(String, u64)> {
    // At most 100 threads filled at once: a thousand 10,000-event runs
    // at once are not what this measures.
    let filling = std::sync::Arc::new(tokio::sync::Semaphore::new(100));
    // Without the tests' 20 s limit: a 10,000-event run among a hundred
    // takes longer on Redis.
    let client = reqwest::Client::new();
    let mut tasks = Vec::new();
    for i in 0..threads {
        let agent = if events > 0 { "blast" } else { "demo" };
        let (url, t) = (gw.run_url(agent), t.to_owned());
        let (filling, client) = (filling.clone(), client.clone());
        tasks.push(tokio::spawn(async move {
            let _turn = filling.acquire_owned().await.unwrap();
            let thread = format!("cold-{i}");
            for r in 0..runs {
                let mut body = input(&thread, &format!("r{r}"), "go");
                body["forwardedProps"] = json!({"n": events});
                let (status, body) = post_run_on(&client, &url, &t, &body).await;
                assert_eq!(status, 200, "{body}");
            }
            thread
        }));
    }
    let mut out = Vec::new();
    for task in tasks {
        let thread = task.await.unwrap();
        let snap = json_of(
            http()
                .get(gw.url(&format!("/v1/threads/{thread}")))
                .bearer_auth(t),
        )
        .await;
        out.push((thread, snap["seq"].as_u64().unwrap()));
    }
    out
}

/// Reads every thread from the start, one after another; events/s.
async fn read_all(gw: &Gateway, t: &str, threads: &[(String, u64)]) -> f64 {
    let mut ws = Ws::connect(gw, WsAuth::Header(t)).await.unwrap();
    let began = Instant::now();
    let mut events = 0u64;
    for (thread, last) in threads {
        ws.send(json!({"type": "subscribe", "id": thread, "threadId": thread, "after": 0}))
            .await;
        let frames = ws.recv_until(|f| f["seq"].as_u64() == Some(*last)).await;
        events += frames.iter().filter(|f| f["type"] == "event").count() as u64;
        ws.send(json!({"type": "unsubscribe", "id": format!("u-{thread}"), "threadId": thread}))
            .await;
    }
    events as f64 / began.elapsed().as_secs_f64()
}

/// Checks that every thread, read from `after: 0`, starts at seq 1: none
/// of its history was lost to the budget, whatever left memory.
async fn check_first_seqs(gw: &Gateway, t: &str, threads: &[(String, u64)]) {
    let mut ws = Ws::connect(gw, WsAuth::Header(t)).await.unwrap();
    for (thread, _) in threads {
        ws.send(json!({"type": "subscribe", "id": thread, "threadId": thread, "after": 0}))
            .await;
        // What the previous thread still had in flight is skipped.
        let frames = ws
            .recv_until(|f| f["type"] == "event" && f["threadId"] == thread.as_str())
            .await;
        let first = frames.last().and_then(|f| f["seq"].as_u64());
        assert_eq!(first, Some(1), "{thread} read from its start");
        ws.send(json!({"type": "unsubscribe", "id": format!("u-{thread}"), "threadId": thread}))
            .await;
    }
}

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .map(str::to_owned)
        .collect()
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("cold_reads: skipped outside `cargo bench --bench cold_reads`");
        return;
    }
    let (threads, runs) = (env_or("COLD_THREADS", 20), env_or("COLD_RUNS", 40));
    let events = env_or("COLD_EVENTS", 0);
    let read_threads = env_or("COLD_READ_THREADS", threads);
    let budget = std::env::var("COLD_BUDGET").unwrap_or_else(|_| "4GiB".into());
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let t = token(json!({"sub": "bench"}));
            let upstream = blaster::blaster().await;
            for store in env_list("COLD_STORES", "sqlite,redis") {
                let store = store.as_str();
                let mut rates = Vec::new();
                for hot in env_list("COLD_HOT", "1GiB,1KiB") {
                    let redis = match store {
                        "redis" => Some(RedisServer::start().await),
                        _ => None,
                    };
                    let store_config = redis
                        .as_ref()
                        .map(|r| r.store_config("bench"))
                        .unwrap_or_default();
                    let config = format!(
                        "[demo]\nenabled = true\ntoken_delay = \"0s\"\n\
                         [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n\
                         [[agents]]\nid = \"blast\"\nurl = \"http://{upstream}/agent\"\n\
                         [threads]\nhot_bytes = \"{hot}\"\nmemory_budget = \"{budget}\"\nmax_events = 100000000\n\
                         {store_config}"
                    );
                    let gw = Gateway::start(&config).await;
                    let began = Instant::now();
                    let filled = fill(&gw, &t, threads, runs, events).await;
                    let fill_secs = began.elapsed().as_secs_f64();
                    let total: u64 = filled.iter().map(|(_, last)| last).sum();
                    let rss = rss_kib(gw.proc.child.id().unwrap());
                    let read = &filled[..read_threads.min(filled.len())];
                    // Twice: the first read warms the store's cache.
                    let _ = read_all(&gw, &t, read).await;
                    let rate = read_all(&gw, &t, read).await;
                    check_first_seqs(&gw, &t, &filled).await;
                    let rss_after = rss_kib(gw.proc.child.id().unwrap());
                    println!(
                        "cold_reads {store:6} hot_bytes={hot:4} budget={budget}: {threads} threads, \
                         {total} events (filled at {:.0} events/s), RSS {:.1} MiB filled, \
                         {:.1} MiB after the reads, catch-up {rate:.0} events/s over {} threads, \
                         every thread read from seq 1",
                        total as f64 / fill_secs,
                        rss as f64 / 1024.0,
                        rss_after as f64 / 1024.0,
                        read.len()
                    );
                    rates.push(rate);
                    drop(gw);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                if let [memory, cold] = rates[..] {
                    println!(
                        "cold_reads {store:6}: from the store at {:.2}× the rate from memory",
                        cold / memory
                    );
                }
            }
        });
}
