//! Load tool for shared sessions (not criterion: it drives the real gateway
//! binary over loopback). Run it with
//!
//! ```sh
//! cargo bench --bench load   # needs ~10,100 open files per process (ulimit -n)
//! ```
//!
//! It starts an in-process "blaster" AG-UI agent (a CUSTOM event per tick
//! carrying its send time), the `agui-gateway` binary with an SQLite journal,
//! and WebSocket viewers, then reports:
//! - fan-out: deliveries/s (unpaced run) and p50/p99 event latency (paced run)
//!   for 1 run → 10, 100, 1,000 viewers;
//! - many viewers (issue 22): 10,000 viewers of one thread at 20 msg/s,
//!   1,000 and 100 at 200 msg/s, each on a fresh gateway: p50/p99/max
//!   delivery latency and lost ticks (`LOAD_ONLY=viewers`; scenarios as
//!   `LOAD_VIEWERS="10000@20,1000@200,100@200"`, run length
//!   `LOAD_VIEWERS_SECS`, default 10);
//! - RSS of the gateway per idle authenticated socket at 10,000 sockets;
//! - catch-up time for `subscribe after=0` on a 10,000-event thread;
//! - journal appends/s through the SQLite group commit (library, no network).
//!
//! `LOAD_ONLY=cluster` compares two nodes on one Redis with one on SQLite;
//! `LOAD_ONLY=redis-cluster` two nodes on one Redis with two on a 3-master
//! Redis Cluster, with gateway and Redis CPU per event (docs/operations.md,
//! capacity model);
//! with `LOAD_PERF=<dir>` it also `perf record`s every gateway during the
//! concurrent runs (`LOAD_PERF_FREQ`, default 199 Hz; build with
//! `CARGO_PROFILE_BENCH_DEBUG=true` for symbols).
//!
//! `LOAD_GATEWAY_BIN=<path>` runs another build of the gateway.
//!
//! Under `cargo test` (no `--bench` argument) it does nothing.

#[path = "support/blaster.rs"]
mod blaster;
#[path = "support/perf.rs"]
mod perf;

use axum::body::Bytes;
use blaster::{blaster, now_ns};

use agui_gateway::store::sqlite::SqliteStore;
use agui_gateway::store::{AppendBatch, JournalStore, ThreadKey, ThreadMeta};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::AsyncBufReadExt;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const SECRET: &str = "load-test-secret-0123456789abcdef0123";

struct Gateway {
    child: tokio::process::Child,
    addr: String,
    _dir: tempfile::TempDir,
}

async fn gateway(upstream: std::net::SocketAddr) -> Gateway {
    gateway_with(upstream, "").await
}

/// A gateway with `extra` TOML (e.g. a `[store]` section) appended.
async fn gateway_with(upstream: std::net::SocketAddr, extra: &str) -> Gateway {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("g.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[auth]\nhs_secret = \"{SECRET}\"\n\
             [threads]\nmax_events = 1000000\n[ws]\nread_timeout = \"10m\"\nping_interval = \"5m\"\n\
             [[agents]]\nid = \"blast\"\nurl = \"http://{upstream}/agent\"\n{extra}"
        ),
    )
    .unwrap();
    // LOAD_GATEWAY_BIN: another build of the gateway (e.g. main's, to
    // compare a branch with it in one session).
    let bin = std::env::var("LOAD_GATEWAY_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_agui-gateway").to_owned());
    let mut child = tokio::process::Command::new(bin)
        .args(["--config", cfg.to_str().unwrap(), "serve"])
        .env("AGUI_GATEWAY_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next_line().await.unwrap().unwrap();
    let addr = line.rsplit("http://").next().unwrap().trim().to_owned();
    Gateway {
        child,
        addr,
        _dir: dir,
    }
}

fn token(sub: &str) -> String {
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &json!({"sub": sub, "exp": exp}),
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(addr: &str) -> Socket {
    let mut req = format!("ws://{addr}/v1/ws").into_client_request().unwrap();
    req.headers_mut().insert(
        "authorization",
        format!("Bearer {}", token("bench")).parse().unwrap(),
    );
    tokio_tungstenite::connect_async(req).await.unwrap().0
}

async fn send(ws: &mut Socket, v: Value) {
    ws.send(Message::Text(v.to_string().into())).await.unwrap();
}

/// Reads text frames until one satisfies `done`.
async fn until(ws: &mut Socket, done: impl Fn(&str) -> bool) {
    while let Some(Ok(m)) = ws.next().await {
        if let Message::Text(t) = m
            && done(&t)
        {
            return;
        }
    }
    panic!("socket ended early");
}

/// CPU time (user + system) the process `pid` used so far, in seconds.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the `(comm)`, which may hold spaces: utime and stime are
    // the 12th and 13th, in clock ticks (100 per second on Linux).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    (f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)) as f64 / 100.0
}

/// Soft limit on open files of this process (the gateway inherits it).
fn open_files_limit() -> u64 {
    std::fs::read_to_string("/proc/self/limits")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn gateway_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Starts a run of `n` ticks on `thread` and waits for its ack.
async fn start_run(runner: &mut Socket, thread: &str, run: &str, n: u64, gap_us: u64) {
    send(
        runner,
        json!({"type": "run", "id": run, "agent": "blast", "threadId": thread, "runId": run,
               "forwardedProps": {"n": n, "gapUs": gap_us}}),
    )
    .await;
    until(runner, |t| t.contains("\"type\":\"ack\"")).await;
}

/// The `p` quantile of `sorted` ns values, in µs (NaN when empty: nothing
/// was delivered).
fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize] as f64 / 1000.0
}

/// One fan-out measurement: (deliveries/s of an unpaced run, p50 µs, p99 µs of a paced run).
async fn fanout(
    gw: &Gateway,
    viewers: usize,
    n_fast: u64,
    n_paced: u64,
    gap_us: u64,
) -> (f64, f64, f64) {
    fanout_across(&gw.addr, &[&gw.addr], viewers, (n_fast, n_paced, gap_us)).await
}

/// [`fanout`] with the run on `runner_addr` and viewers spread over
/// `viewer_addrs` in turn (several nodes sharing one store).
async fn fanout_across(
    runner_addr: &str,
    viewer_addrs: &[&str],
    viewers: usize,
    (n_fast, n_paced, gap_us): (u64, u64, u64),
) -> (f64, f64, f64) {
    let thread = format!("fan-{viewers}-{gap_us}-{}", viewer_addrs.len());
    let mut runner = connect(runner_addr).await;
    let mut sockets = watchers(&mut runner, viewer_addrs, &thread, viewers).await;
    let fast = deliver(&mut runner, &mut sockets, &thread, "fast", n_fast, 0).await;
    let paced = deliver(&mut runner, &mut sockets, &thread, "paced", n_paced, gap_us).await;
    for (run, d) in [("fast", &fast), ("paced", &paced)] {
        if d.lost > 0 {
            println!("   {viewers} viewers, {run} run: {} ticks LOST", d.lost);
        }
    }
    (fast.rate, paced.p50, paced.p99)
}

/// `viewers` sockets watching `thread` (spread over `viewer_addrs` in turn),
/// each acked, after a first 1-event run so the thread exists; connected
/// 500 at a time.
async fn watchers(
    runner: &mut Socket,
    viewer_addrs: &[&str],
    thread: &str,
    viewers: usize,
) -> Vec<Socket> {
    start_run(runner, thread, "warm", 1, 0).await;
    until(runner, |t| t.contains("RUN_FINISHED")).await;
    let mut sockets = Vec::with_capacity(viewers);
    for batch in (0..viewers).collect::<Vec<_>>().chunks(500) {
        let joined = batch.iter().map(|&v| async move {
            let mut ws = connect(viewer_addrs[v % viewer_addrs.len()]).await;
            send(
                &mut ws,
                json!({"type": "subscribe", "id": "s", "threadId": thread, "after": 3}),
            )
            .await;
            until(&mut ws, |t| t.contains("\"type\":\"ack\"")).await;
            ws
        });
        sockets.extend(futures::future::join_all(joined).await);
    }
    sockets
}

/// What every viewer of one run received.
struct Delivery {
    /// Deliveries per second, run start to the last viewer's `RUN_FINISHED`.
    rate: f64,
    /// Receive − send of every tick, every viewer, µs.
    p50: f64,
    p99: f64,
    max: f64,
    /// Ticks some viewer never received (before its `RUN_FINISHED`, or
    /// before its socket ended).
    lost: u64,
    /// Viewers whose socket ended without `RUN_FINISHED` (closed as too
    /// slow, or failed).
    dropped: usize,
}

/// One run of `n` ticks `gap_us` apart on `thread`, read by every socket.
async fn deliver(
    runner: &mut Socket,
    sockets: &mut Vec<Socket>,
    thread: &str,
    run: &str,
    n: u64,
    gap_us: u64,
) -> Delivery {
    let viewers = sockets.len();
    // A viewer gives up this long after the run should have ended.
    let patience = Duration::from_micros(n * gap_us) + Duration::from_secs(60);
    let handles: Vec<_> = sockets
        .drain(..)
        .map(|mut ws| {
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(n as usize);
                let mut last = None;
                let read = async {
                    while let Some(Ok(Message::Text(t))) = ws.next().await {
                        if let Some(i) = t.find("\"t\":") {
                            let digits: String = t[i + 4..]
                                .chars()
                                .take_while(|c| c.is_ascii_digit())
                                .collect();
                            lat.push(now_ns().saturating_sub(digits.parse().unwrap_or(0)));
                        } else if t.contains("RUN_FINISHED") {
                            last = Some(Instant::now());
                            break;
                        }
                    }
                };
                let _ = tokio::time::timeout(patience, read).await;
                (ws, lat, last)
            })
        })
        .collect();
    let started = Instant::now();
    start_run(runner, thread, run, n, gap_us).await;
    let mut lat = Vec::new();
    let (mut end, mut dropped) = (started, 0);
    for h in handles {
        let (ws, l, last) = h.await.unwrap();
        lat.extend(l);
        match last {
            Some(last) => end = end.max(last),
            None => dropped += 1,
        }
        sockets.push(ws);
    }
    until(runner, |t| t.contains("RUN_FINISHED")).await;
    let secs = end.duration_since(started).as_secs_f64();
    // Every viewer must have received every tick before RUN_FINISHED.
    let lost = (viewers as u64 * n).saturating_sub(lat.len() as u64);
    lat.sort_unstable();
    Delivery {
        rate: (viewers as u64 * n) as f64 / secs,
        p50: percentile(&lat, 0.5),
        p99: percentile(&lat, 0.99),
        max: percentile(&lat, 1.0),
        lost,
        dropped,
    }
}

/// Issue 22's fan-out scenarios: `viewers` on one thread, one tick every
/// `1/rate` s for `secs` seconds, on a fresh gateway each (so one
/// scenario's sockets do not weigh on the next). Prints one table row.
async fn many_viewers(upstream: std::net::SocketAddr, viewers: usize, rate: u64, secs: u64) {
    let gw = gateway(upstream).await;
    let thread = format!("viewers-{viewers}-{rate}");
    let mut runner = connect(&gw.addr).await;
    let t0 = Instant::now();
    let mut sockets = watchers(&mut runner, &[&gw.addr], &thread, viewers).await;
    let connected = t0.elapsed();
    let gap_us = 1_000_000 / rate;
    let n = rate * secs;
    let pid = gw.child.id().unwrap();
    let cpu = cpu_secs(pid);
    let d = deliver(&mut runner, &mut sockets, &thread, "paced", n, gap_us).await;
    // CPU per delivery: less noisy than latency on a shared machine.
    let per_delivery = (cpu_secs(pid) - cpu) * 1e6 / (viewers as u64 * n) as f64;
    println!(
        "| {viewers} | {rate} msg/s × {secs} s ({n} ticks) | {:.0} | {:.1} ms | {:.1} ms | {:.1} ms | {} | {} | {per_delivery:.2} µs | {:.1} s |",
        viewers as f64 * rate as f64,
        d.p50 / 1000.0,
        d.p99 / 1000.0,
        d.max / 1000.0,
        d.lost,
        d.dropped,
        connected.as_secs_f64(),
    );
}

async fn idle_sockets(gw: &Gateway, count: usize) -> (f64, u64) {
    let pid = gw.child.id().unwrap();
    // Warm the allocator and runtime with a few connections first.
    let warm: Vec<_> = futures::future::join_all((0..50).map(|_| connect(&gw.addr))).await;
    let before = gateway_rss_kib(pid);
    let mut sockets = Vec::with_capacity(count);
    for chunk in 0..count / 500 {
        let batch = futures::future::join_all((0..500).map(|_| connect(&gw.addr))).await;
        sockets.extend(batch);
        let _ = chunk;
    }
    // Every socket authenticated and served: one ping round-trip each.
    for ws in sockets.iter_mut() {
        send(ws, json!({"type": "ping"})).await;
    }
    for ws in sockets.iter_mut() {
        until(ws, |t| t.contains("pong")).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await; // let the RSS reading settle
    let after = gateway_rss_kib(pid);
    drop(warm);
    (
        (after.saturating_sub(before)) as f64 * 1024.0 / count as f64,
        after,
    )
}

async fn catch_up(gw: &Gateway, events: u64) -> Duration {
    let mut runner = connect(&gw.addr).await;
    start_run(&mut runner, "catchup", "big", events, 0).await;
    until(&mut runner, |t| t.contains("RUN_FINISHED")).await;
    let mut ws = connect(&gw.addr).await;
    let t0 = Instant::now();
    send(
        &mut ws,
        json!({"type": "subscribe", "threadId": "catchup", "after": 0}),
    )
    .await;
    until(&mut ws, |t| t.contains("RUN_FINISHED")).await;
    t0.elapsed()
}

/// A batch of a running run's events for `key`, as the journal bench
/// appends them.
fn run_batch(key: &ThreadKey, events: Vec<(u64, Bytes)>) -> AppendBatch {
    let last_seq = events.last().map_or(0, |(seq, _)| *seq);
    AppendBatch {
        key: key.clone(),
        meta: ThreadMeta {
            creator: "u".into(),
            agent: None,
            status: "running".into(),
            created_ms: 0,
            updated_ms: last_seq,
            last_seq,
        },
        events,
        compact: None,
        fence: None,
        run_boundary: false,
        idempotency: None,
        closes_failed_run: false,
    }
}

/// A paced run's journal: one single-event append every `every`, each
/// awaited; the time from `append` to its acknowledgement (p50, p99, max,
/// in ms). What the journal adds to each event of a paced run (issue 30
/// item 5), without the network or the gateway's other hops.
async fn journal_paced(events: usize, every: Duration) -> (f64, f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("j.db"), "normal", 4096).unwrap();
    let event = Bytes::from_static(
        br#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"token ","timestamp":1764380000000}"#,
    );
    let key = ThreadKey::new("bench", "paced");
    let mut took = Vec::with_capacity(events);
    let mut next = tokio::time::Instant::now();
    for seq in 1..=events as u64 {
        next += every;
        tokio::time::sleep_until(next).await;
        let t0 = Instant::now();
        store
            .append(run_batch(&key, vec![(seq, event.clone())]))
            .await
            .unwrap()
            .unwrap();
        took.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    took.sort_by(f64::total_cmp);
    let at = |q: f64| took[((took.len() as f64 * q) as usize).min(took.len() - 1)];
    (at(0.5), at(0.99), took[took.len() - 1])
}

async fn journal_appends(tasks: usize, batches_per_task: usize, batch: usize) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let store =
        std::sync::Arc::new(SqliteStore::open(&dir.path().join("j.db"), "normal", 4096).unwrap());
    let event =
        Bytes::from_static(br#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"token "}"#);
    let t0 = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let store = store.clone();
            let event = event.clone();
            tokio::spawn(async move {
                let key = ThreadKey::new("bench", format!("t{t}"));
                for b in 0..batches_per_task {
                    let first = (b * batch) as u64 + 1;
                    let events = (0..batch as u64)
                        .map(|i| (first + i, event.clone()))
                        .collect();
                    store
                        .append(run_batch(&key, events))
                        .await
                        .unwrap()
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.await.unwrap();
    }
    (tasks * batches_per_task * batch) as f64 / t0.elapsed().as_secs_f64()
}

/// A `redis-server` on a free loopback port, nothing persisted.
struct Redis {
    _child: tokio::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

async fn redis() -> Redis {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    redis_on(port, &[]).await
}

/// [`redis`] on `port`, with `args`.
async fn redis_on(port: u16, args: &[&str]) -> Redis {
    let dir = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no"])
        .args(args)
        .arg("--dir")
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("redis-server");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    while let Some(line) = lines.next_line().await.unwrap() {
        if line.contains("Ready to accept connections") {
            break;
        }
    }
    // Keep draining its log so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Redis {
        _child: child,
        port,
        _dir: dir,
    }
}

/// `used_memory` from Redis's `INFO memory`.
fn redis_used_memory(port: u16) -> u64 {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), "INFO", "memory"])
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// `threads` runs of `n` unpaced events at once, run `i` through
/// `addrs[i % len]`; events journaled and delivered per second.
async fn concurrent_runs(addrs: &[&str], threads: usize, n: u64, tag: &str) -> f64 {
    let t0 = Instant::now();
    let runs = (0..threads).map(|i| {
        let addr = addrs[i % addrs.len()].to_owned();
        let thread = format!("{tag}-{i}");
        async move {
            let mut runner = connect(&addr).await;
            start_run(&mut runner, &thread, "r", n, 0).await;
            until(&mut runner, |t| t.contains("RUN_FINISHED")).await;
        }
    });
    futures::future::join_all(runs).await;
    (threads as u64 * n) as f64 / t0.elapsed().as_secs_f64()
}

/// Redis memory per thread (threads with one 10-event run each) and per
/// 1,000 events (10,000 more events on one thread).
async fn redis_memory(addr: &str, port: u16) -> (f64, f64) {
    let before = redis_used_memory(port);
    let threads = 1000;
    for chunk in 0..threads / 50 {
        let addrs = [addr];
        concurrent_runs(&addrs, 50, 10, &format!("mem{chunk}")).await;
    }
    let after_threads = redis_used_memory(port);
    let mut runner = connect(addr).await;
    start_run(&mut runner, "mem-long", "r", 10_000, 0).await;
    until(&mut runner, |t| t.contains("RUN_FINISHED")).await;
    let after_events = redis_used_memory(port);
    (
        after_threads.saturating_sub(before) as f64 / threads as f64,
        after_events.saturating_sub(after_threads) as f64 / 10.0,
    )
}

/// Three `redis-server`s joined as a Redis Cluster of three masters (no
/// replicas: the bench measures the masters' work), nothing persisted.
async fn redis_cluster3() -> Vec<Redis> {
    let mut nodes = Vec::new();
    while nodes.len() < 3 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if port >= 55000 || std::net::TcpListener::bind(("127.0.0.1", port + 10000)).is_err() {
            continue; // the cluster bus listens on port + 10000
        }
        nodes.push(
            redis_on(
                port,
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                ],
            )
            .await,
        );
    }
    let addresses: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let out = std::process::Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addresses)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("redis-cli --cluster create");
    assert!(out.status.success(), "{out:?}");
    // Polled: Redis announces nothing when the cluster is formed.
    loop {
        let ok = nodes.iter().all(|n| {
            let out = std::process::Command::new("redis-cli")
                .args(["-p", &n.port.to_string(), "CLUSTER", "INFO"])
                .output()
                .expect("redis-cli");
            String::from_utf8_lossy(&out.stdout).contains("cluster_state:ok")
        });
        if ok {
            return nodes;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A field of Redis's `INFO`, as a number.
fn redis_info(port: u16, section: &str, field: &str) -> f64 {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), "INFO", section])
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Each Redis's CPU seconds (user + sys) and commands processed so far.
fn redis_work(ports: &[u16]) -> Vec<(f64, f64)> {
    ports
        .iter()
        .map(|p| {
            (
                redis_info(*p, "cpu", "used_cpu_user") + redis_info(*p, "cpu", "used_cpu_sys"),
                redis_info(*p, "stats", "total_commands_processed"),
            )
        })
        .collect()
}

/// What one phase cost: gateway CPU seconds (all nodes) and, per Redis,
/// CPU seconds and commands.
fn phase_cost(
    gateways: &[&Gateway],
    ports: &[u16],
    before: (f64, Vec<(f64, f64)>),
) -> (f64, Vec<(f64, f64)>) {
    let gw: f64 = gateways
        .iter()
        .map(|g| cpu_secs(g.child.id().unwrap()))
        .sum();
    let after = redis_work(ports);
    (
        gw - before.0,
        after
            .iter()
            .zip(before.1)
            .map(|((c, n), (c0, n0))| (c - c0, n - n0))
            .collect(),
    )
}

/// The same load on two gateway nodes on one Redis and on two nodes on a
/// three-master Redis Cluster: fan-out across nodes, concurrent runs, and
/// what each costs in gateway and Redis CPU (the capacity model's inputs).
async fn redis_cluster(upstream: std::net::SocketAddr) {
    let single = redis().await;
    let shards = redis_cluster3().await;
    let on_single = |node: &str| {
        format!(
            "[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:{}\"\nnode = \"{node}\"\n",
            single.port
        )
    };
    let urls: Vec<String> = shards
        .iter()
        .map(|n| format!("\"redis://127.0.0.1:{}\"", n.port))
        .collect();
    let on_cluster = |node: &str| {
        format!(
            "[store]\nkind = \"redis-cluster\"\nurls = [{}]\nnode = \"{node}\"\n",
            urls.join(", ")
        )
    };
    // (name, its key in thread ids, Redis ports, the two nodes' [store])
    let setups = [
        (
            "1 Redis",
            "one",
            vec![single.port],
            on_single("a"),
            on_single("b"),
        ),
        (
            "3-master cluster",
            "three",
            shards.iter().map(|n| n.port).collect(),
            on_cluster("a"),
            on_cluster("b"),
        ),
    ];
    println!(
        "one Redis vs a 3-master Redis Cluster (2 gateway nodes each; run on A, viewers split over A and B):"
    );
    for (name, key, ports, store_a, store_b) in setups {
        let a = gateway_with(upstream, &store_a).await;
        let b = gateway_with(upstream, &store_b).await;
        let gws = [&a, &b];
        let start = |ports: &[u16]| {
            let gw: f64 = gws.iter().map(|g| cpu_secs(g.child.id().unwrap())).sum();
            (gw, redis_work(ports))
        };
        // LOAD_FANOUT=0: skip the fan-out rows.
        let fanouts = if std::env::var("LOAD_FANOUT").is_ok_and(|v| v == "0") {
            vec![]
        } else {
            vec![(100, 5_000, 2_000, 5000), (1000, 1_000, 300, 5000)]
        };
        for (viewers, fast, paced, gap) in fanouts {
            let before = start(&ports);
            let (rate, p50, p99) =
                fanout_across(&a.addr, &[&a.addr, &b.addr], viewers, (fast, paced, gap)).await;
            let (gw_cpu, redis) = phase_cost(&gws, &ports, before);
            let delivered = viewers as f64 * (fast + paced) as f64;
            println!(
                "  {name}: {viewers:>5} viewers: {rate:>8.0} deliveries/s, p50 {p50:.0} µs, p99 {p99:.0} µs; gateway CPU {:.1} µs per delivery; Redis CPU per shard {}",
                gw_cpu * 1e6 / delivered,
                redis
                    .iter()
                    .map(|(c, _)| format!("{c:.2} s"))
                    .collect::<Vec<_>>()
                    .join(" / ")
            );
        }
        for (threads, n) in [(50, 1_000), (200, 200), (1000, 50)] {
            let before = start(&ports);
            let rate =
                concurrent_runs(&[&a.addr, &b.addr], threads, n, &format!("{key}-{threads}")).await;
            let (gw_cpu, redis) = phase_cost(&gws, &ports, before);
            let events = (threads as u64 * n) as f64;
            let redis_cpu: f64 = redis.iter().map(|(c, _)| c).sum();
            println!(
                "  {name}: {threads:>4} concurrent runs × {n} events: {rate:>8.0} events/s; gateway CPU {:.1} µs per event; Redis CPU {:.1} µs per event (per shard: {}); commands per shard {}",
                gw_cpu * 1e6 / events,
                redis_cpu * 1e6 / events,
                redis
                    .iter()
                    .map(|(c, _)| format!("{:.2} s", c))
                    .collect::<Vec<_>>()
                    .join(" / "),
                redis
                    .iter()
                    .map(|(_, n)| format!("{n:.0}"))
                    .collect::<Vec<_>>()
                    .join(" / ")
            );
        }
        // Redis memory across every shard.
        let used = |ports: &[u16]| -> u64 { ports.iter().map(|p| redis_used_memory(*p)).sum() };
        let before = used(&ports);
        for chunk in 0..20 {
            concurrent_runs(&[&a.addr], 50, 10, &format!("{key}-mem{chunk}")).await;
        }
        let after = used(&ports);
        println!(
            "  {name}: Redis memory {:.0} bytes per thread (one 10-event run each, all shards)",
            after.saturating_sub(before) as f64 / 1000.0
        );
    }
}

/// Two nodes on one Redis against one node on SQLite, same agent, same run.
async fn cluster(upstream: std::net::SocketAddr) {
    let sqlite = gateway(upstream).await;
    let redis = redis().await;
    let store = |node: &str| {
        format!(
            "[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:{}\"\nnode = \"{node}\"\n",
            redis.port
        )
    };
    let a = gateway_with(upstream, &store("a")).await;
    let b = gateway_with(upstream, &store("b")).await;
    println!(
        "several nodes: 1 node on SQLite vs 2 nodes on one Redis (run on A, viewers split over A and B):"
    );
    for (viewers, fast, paced, gap) in [(100, 5_000, 2_000, 5000), (1000, 1_000, 300, 5000)] {
        let one = fanout_across(&sqlite.addr, &[&sqlite.addr], viewers, (fast, paced, gap)).await;
        let two = fanout_across(&a.addr, &[&a.addr, &b.addr], viewers, (fast, paced, gap)).await;
        println!(
            "  {viewers:>5} viewers: SQLite {:>8.0} deliveries/s, p50 {:.0} µs, p99 {:.0} µs | Redis {:>8.0} deliveries/s, p50 {:.0} µs, p99 {:.0} µs | throughput ratio {:.2}",
            one.0,
            one.1,
            one.2,
            two.0,
            two.1,
            two.2,
            two.0 / one.0
        );
    }
    // LOAD_PERF=<dir>: `perf record` each gateway during the concurrent
    // runs (the SQLite node during its runs, both Redis nodes during theirs).
    let perf_dir = std::env::var_os("LOAD_PERF").map(std::path::PathBuf::from);
    let record = |gws: &[(&Gateway, &str)], phase: &str| -> Vec<perf::Perf> {
        let Some(dir) = &perf_dir else {
            return Vec::new();
        };
        let freq = std::env::var("LOAD_PERF_FREQ").unwrap_or_else(|_| "199".into());
        gws.iter()
            .map(|(gw, name)| {
                let pid = gw.child.id().unwrap();
                perf::Perf::start(dir, pid, &format!("{name}-{phase}"), &freq)
            })
            .collect()
    };
    let attached = || async {
        if perf_dir.is_some() {
            tokio::time::sleep(Duration::from_millis(500)).await; // perf attached
        }
    };
    for (threads, n) in [(50, 1_000), (200, 200)] {
        let phase = format!("{threads}x{n}");
        let recording = record(&[(&sqlite, "sqlite")], &phase);
        attached().await;
        let one = concurrent_runs(&[&sqlite.addr], threads, n, &format!("c1-{threads}")).await;
        recording.into_iter().for_each(perf::Perf::stop);
        let recording = record(&[(&a, "redis-a"), (&b, "redis-b")], &phase);
        attached().await;
        let two = concurrent_runs(&[&a.addr, &b.addr], threads, n, &format!("c2-{threads}")).await;
        recording.into_iter().for_each(perf::Perf::stop);
        println!(
            "  {threads:>4} concurrent runs × {n} events: SQLite {one:>8.0} events/s | Redis, runs split over A and B {two:>8.0} events/s | ratio {:.2}",
            two / one
        );
    }
    let (per_thread, per_1k) = redis_memory(&a.addr, redis.port).await;
    println!(
        "  Redis memory: {per_thread:.0} bytes per thread (one 10-event run each), {per_1k:.0} bytes per 1,000 events (~110-byte events)"
    );
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("load: skipped outside `cargo bench --bench load`");
        return;
    }
    // LOAD_ONLY=journal|fanout|catchup|viewers|idle runs one part; LOAD_ONLY=cluster
    // (only on request: it needs redis-server) compares 2 nodes on Redis
    // with 1 node on SQLite.
    let only = std::env::var("LOAD_ONLY").unwrap_or_default();
    let want = |part: &str| only.is_empty() || only == part;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        if want("journal") {
        println!("journal appends (SQLite, synchronous=normal, group commit):");
        for (tasks, per, batch) in [(1, 20_000, 1), (64, 2000, 1), (512, 400, 1), (64, 250, 16)] {
            let rate = journal_appends(tasks, per, batch).await;
            println!("  {tasks:>3} concurrent appenders, {batch:>2} event(s) per append: {rate:>10.0} events/s");
        }
        let (p50, p99, max) = journal_paced(5000, Duration::from_millis(1)).await;
        println!("  paced, one event a millisecond, append to acknowledgement: p50 {p50:.3} ms, p99 {p99:.3} ms, max {max:.3} ms");
        }
        let upstream = blaster().await;
        if only == "cluster" {
            cluster(upstream).await;
            return;
        }
        if only == "redis-cluster" {
            redis_cluster(upstream).await;
            return;
        }
        let gw = gateway(upstream).await;
        if want("fanout") {
        println!("fan-out (1 run → N WebSocket viewers):");
        for (viewers, fast, paced, gap) in [
            (10, 20_000, 2_000, 1000),
            (100, 5_000, 1_000, 1000),
            (1000, 1_000, 500, 1000),
            (1000, 1_000, 300, 5000),
        ] {
            let (rate, p50, p99) = fanout(&gw, viewers, fast, paced, gap).await;
            let paced_rate = viewers as f64 * 1e6 / gap as f64;
            println!(
                "  {viewers:>5} viewers: {rate:>8.0} deliveries/s unpaced; paced at 1 event/{gap} µs ({paced_rate:.0} deliveries/s): p50 {p50:.0} µs, p99 {p99:.0} µs"
            );
        }
        }
        if want("catchup") {
            let d = catch_up(&gw, 10_000).await;
            println!("catch-up: subscribe after=0 on a 10,000-event thread: {:.1} ms to the last event", d.as_secs_f64() * 1000.0);
        }
        drop(gw);
        if want("viewers") {
            // LOAD_VIEWERS="10000@20,1000@200,100@200": viewers@msg/s per
            // scenario; LOAD_VIEWERS_SECS: length of each paced run.
            let scenarios = std::env::var("LOAD_VIEWERS")
                .unwrap_or_else(|_| "10000@20,1000@200,100@200".into());
            let secs = std::env::var("LOAD_VIEWERS_SECS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(10);
            println!("\nmany viewers (1 run → N WebSocket viewers, paced; a fresh gateway per row):\n");
            println!("| viewers | ticks | offered deliveries/s | p50 | p99 | max | lost | viewers dropped | gateway CPU per delivery | connect + subscribe |");
            println!("|---|---|---|---|---|---|---|---|---|---|");
            for scenario in scenarios.split(',') {
                let (viewers, rate) = scenario
                    .split_once('@')
                    .and_then(|(v, r)| Some((v.trim().parse().ok()?, r.trim().parse().ok()?)))
                    .unwrap_or_else(|| panic!("LOAD_VIEWERS: '{scenario}' is not viewers@rate"));
                if open_files_limit() < viewers as u64 + 100 {
                    println!("| {viewers} | skipped: `ulimit -n` is below {} |", viewers + 100);
                    continue;
                }
                many_viewers(upstream, viewers, rate, secs).await;
            }
        }
        if want("idle") {
            let gw = gateway(upstream).await;
            let (per_socket, total) = idle_sockets(&gw, 10_000).await;
            println!("idle sockets: 10,000 authenticated: {per_socket:.0} bytes RSS each (gateway RSS {total} KiB)");
        }
    });
}
