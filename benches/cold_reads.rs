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
//! ```
//!
//! Under `cargo test` (no `--bench` argument) it does nothing.

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

/// Fills `threads` threads with `runs` demo runs each (all threads at
/// once), and answers each thread's last seq.
async fn fill(gw: &Gateway, t: &str, threads: usize, runs: usize) -> Vec<(String, u64)> {
    let mut tasks = Vec::new();
    for i in 0..threads {
        let (url, t) = (gw.run_url("demo"), t.to_owned());
        tasks.push(tokio::spawn(async move {
            let thread = format!("cold-{i}");
            for r in 0..runs {
                let (status, body) =
                    post_run(&url, &t, &input(&thread, &format!("r{r}"), "go")).await;
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

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("cold_reads: skipped outside `cargo bench --bench cold_reads`");
        return;
    }
    let (threads, runs) = (env_or("COLD_THREADS", 20), env_or("COLD_RUNS", 40));
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let t = token(json!({"sub": "bench"}));
            for store in ["sqlite", "redis"] {
                let mut rates = Vec::new();
                for hot in ["1GiB", "1KiB"] {
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
                         [threads]\nhot_bytes = \"{hot}\"\nmemory_budget = \"4GiB\"\nmax_events = 1000000\n\
                         {store_config}"
                    );
                    let gw = Gateway::start(&config).await;
                    let filled = fill(&gw, &t, threads, runs).await;
                    let events: u64 = filled.iter().map(|(_, last)| last).sum();
                    let rss = rss_kib(gw.proc.child.id().unwrap());
                    // Twice: the first read warms the store's cache.
                    let _ = read_all(&gw, &t, &filled).await;
                    let rate = read_all(&gw, &t, &filled).await;
                    println!(
                        "cold_reads {store:6} hot_bytes={hot:4}: {threads} threads, {events} events, \
                         RSS {:.1} MiB, catch-up {rate:.0} events/s",
                        rss as f64 / 1024.0
                    );
                    rates.push(rate);
                    drop(gw);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                println!(
                    "cold_reads {store:6}: from the store at {:.2}× the rate from memory",
                    rates[1] / rates[0]
                );
            }
        });
}
