//! Proxy benchmark: the gateway as a data plane in front of one fast agent,
//! measured in the same run against the same consumer reading that agent
//! directly (issue 9, "Deliver 6"). Not criterion: it drives the release
//! `agui-gateway` binary over loopback. Run it with
//!
//! ```sh
//! cargo bench --bench proxy                          # everything, ~4 minutes
//! PROXY_ONLY=throughput cargo bench --bench proxy    # or latency | paired | rss | idle | concurrent
//! PROXY_ONLY=paired cargo bench --bench proxy        # the paced run through the gateway and
//!                  # direct at the same time, PROXY_PAIRED_ROUNDS rounds (default 7);
//!                  # with `throughput` too, after the big runs
//! PROXY_ONLY=concurrent PROXY_CONCURRENT=200x1000 cargo bench --bench proxy
//!                  # many runs at once: RUNSxEVENTS (default 200x1000)
//! PROXY_STORES=memory cargo bench --bench proxy      # sqlite,memory (default) | sqlite | memory
//! PROXY_PERF=/tmp/prof PROXY_ONLY=throughput cargo bench --bench proxy
//!                  # also `perf record`s the gateway during its 200k-event runs
//!                  # (`-F 199 --call-graph dwarf`; PROXY_PERF_FREQ=999 for more samples)
//! PROXY_TRIM=1 PROXY_ONLY=rss cargo bench --bench proxy
//!                  # also calls malloc_trim(0) in the gateway (gdb) after eviction
//! PROXY_WRITE_BYTES=1 cargo bench --bench proxy      # the agent writes each event alone
//! PROXY_CLIENT=reqwest cargo bench --bench proxy     # the consumer reads through reqwest/hyper
//! PROXY_GATEWAY_ENV="LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2" \
//!   cargo bench --bench proxy    # environment of the gateway only (space-separated K=V):
//!                                # another allocator, or glibc's GLIBC_TUNABLES
//! PROXY_GATEWAY_BIN=/tmp/agui-gateway-mimalloc cargo bench --bench proxy
//!                                # another build of the gateway (`--features mimalloc`)
//! ```
//!
//! It starts an in-process AG-UI agent that answers every run with
//! `RUN_STARTED`, `TEXT_MESSAGE_START`, `n` × `TEXT_MESSAGE_CONTENT` (each
//! event's JSON 100 bytes), `TEXT_MESSAGE_END`, `RUN_FINISHED`, as fast as it
//! can (16 KiB writes, ~150 events each), or one content event per write
//! every `gapUs`, carrying its send time. One SSE consumer POSTs a
//! `RunAgentInput` either to that agent directly or to the gateway's
//! `POST /v1/agents/{agent}/run`, decodes the HTTP/1.1 chunked body and the
//! SSE frames, counts the `data:` events and checks that there were all of
//! them and the last one is `RUN_FINISHED` (`PROXY_CLIENT=reqwest` reads
//! through hyper's client instead). Measured, per path (direct, gateway with
//! the SQLite journal, gateway with the memory store):
//! - events/s of 2k / 20k / 200k-event runs (the 200k one ÷ direct is the
//!   proxy ratio); a 20k run on a new thread before vs after the 200k runs;
//!   time to first event on a fresh thread vs a thread with a 10k-event history;
//! - where the CPU went in the 200k runs (`/proc/<pid>/task/*/schedstat`):
//!   gateway CPU per event, its journal threads' share, and how long the
//!   gateway was runnable but waiting for a core (other load on the machine);
//! - latency per event at 1,000 events/s (receive − send), on a fresh gateway
//!   and again after the runs above, and what the gateway adds over direct;
//! - gateway RSS at baseline and after 1,000 threads × 1,000 events went idle
//!   and were evicted (`threads.evict_after = "1s"`);
//! - many runs at once (issue 22): 200 runs × 1,000 events started together,
//!   each by its own consumer on its own connection and thread; events/s of
//!   all of them (first request to last `RUN_FINISHED`) ÷ the same through
//!   no gateway, and the gateway's CPU per event;
//! - RSS per idle authenticated WebSocket at 10,000 sockets (needs
//!   `ulimit -n` ≥ 10,100).
//!
//! The gateway runs with its defaults (no policy) except what each part
//! names. Everything shares the machine: agent and consumer (this process)
//! compete with the gateway for the cores, as they do for "direct".
//!
//! Under `cargo test` (no `--bench` argument) it does nothing.

#[path = "support/perf.rs"]
mod perf;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::response::Response;
use axum::routing::post;
use axum::serve::ListenerExt;
use futures::{SinkExt, StreamExt};
use perf::Perf;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::AsyncBufReadExt;
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const SECRET: &str = "proxy-bench-secret-0123456789abcdef0123";
const AGENT: &str = "fast";
/// Length of each `TEXT_MESSAGE_CONTENT` event's JSON.
const EVENT_BYTES: usize = 100;
/// Size of the agent's writes when it is not paced.
const WRITE_BYTES: usize = 16 * 1024;
/// The consumers every latency row is measured with: ours, and hyper's
/// client (which shows what Nagle's algorithm on the gateway's sockets does
/// to a client that acknowledges late).
const CONSUMERS: [&str; 2] = ["raw", "reqwest"];
/// Events of the paced (latency) runs, one per millisecond.
const PACED_EVENTS: u64 = 5_000;
/// Repetitions of every throughput measurement (the table shows the median).
const REPEAT: usize = 3;
/// Pause between measured runs, so one run's after-work (compaction, commits)
/// does not land in the next one's figure.
const SETTLE: Duration = Duration::from_millis(500);

/// Nanoseconds on one monotonic clock shared by the agent and the consumer
/// (both live in this process).
fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Size of the agent's unpaced writes (`PROXY_WRITE_BYTES`, default `WRITE_BYTES`).
fn write_bytes() -> usize {
    static BYTES: OnceLock<usize> = OnceLock::new();
    *BYTES.get_or_init(|| {
        std::env::var("PROXY_WRITE_BYTES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(WRITE_BYTES)
    })
}

/// A fresh id for every run (the gateway refuses a reused `runId`).
fn fresh(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

// ---------------------------------------------------------------- the agent

/// A `TEXT_MESSAGE_CONTENT` SSE frame whose JSON is `EVENT_BYTES` long; with
/// `stamp`, its delta starts with the send time (20 digits of `now_ns`).
fn content_frame(message_id: &str, stamp: Option<u64>) -> Bytes {
    let head = format!(
        r#"{{"type":"TEXT_MESSAGE_CONTENT","messageId":{},"delta":""#,
        json!(message_id)
    );
    let tail = r#""}"#;
    let mut delta = stamp.map(|t| format!("{t:020} ")).unwrap_or_default();
    let pad = EVENT_BYTES.saturating_sub(head.len() + tail.len() + delta.len());
    delta.extend(std::iter::repeat_n('x', pad));
    Bytes::from(format!("data: {head}{delta}{tail}\n\n"))
}

/// The agent: `forwardedProps.n` content events, unpaced, or one per
/// `forwardedProps.gapUs` with their send time.
async fn agent_run(body: Bytes) -> Response {
    let input: Value = serde_json::from_slice(&body).unwrap_or_default();
    let n = input["forwardedProps"]["n"].as_u64().unwrap_or(10);
    let gap_us = input["forwardedProps"]["gapUs"].as_u64().unwrap_or(0);
    let thread = input["threadId"].as_str().unwrap_or("t").to_owned();
    let run = input["runId"].as_str().unwrap_or("r").to_owned();
    let message = format!("m-{run}");
    let frame = |v: Value| Bytes::from(format!("data: {v}\n\n"));
    let start = [
        frame(json!({"type": "RUN_STARTED", "threadId": thread, "runId": run})),
        frame(json!({"type": "TEXT_MESSAGE_START", "messageId": message, "role": "assistant"})),
    ];
    let end = [
        frame(json!({"type": "TEXT_MESSAGE_END", "messageId": message})),
        frame(json!({"type": "RUN_FINISHED", "threadId": thread, "runId": run})),
    ];
    let body = if gap_us == 0 {
        // As fast as it can: whole writes of `WRITE_BYTES` (a buffered
        // writer), not one small write per event.
        let content = content_frame(&message, None);
        let write_bytes = input["forwardedProps"]["writeBytes"]
            .as_u64()
            .unwrap_or(WRITE_BYTES as u64) as usize;
        let per_write = (write_bytes / content.len()).max(1);
        let full = Bytes::from(content.repeat(per_write));
        let rest = n as usize % per_write;
        let writes = std::iter::repeat_n(full, n as usize / per_write)
            .chain((rest > 0).then(|| content.repeat(rest).into()));
        let events = std::iter::once(Bytes::from(start.concat()))
            .chain(writes)
            .chain(std::iter::once(Bytes::from(end.concat())));
        Body::from_stream(futures::stream::iter(events.map(Ok::<_, Infallible>)))
    } else {
        let gap = Duration::from_micros(gap_us);
        let t0 = tokio::time::Instant::now();
        let paced = futures::stream::unfold(0u64, move |i| {
            let message = message.clone();
            async move {
                if i == n {
                    return None;
                }
                // An absolute schedule: timer granularity does not add up.
                tokio::time::sleep_until(t0 + gap * (i as u32 + 1)).await;
                Some((content_frame(&message, Some(now_ns())), i + 1))
            }
        });
        let events = futures::stream::iter(start)
            .chain(paced)
            .chain(futures::stream::iter(end));
        Body::from_stream(events.map(Ok::<_, Infallible>))
    };
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(body)
        .unwrap()
}

async fn start_agent() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // No Nagle: small writes leave at once (as the gateway's own agent client does).
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move {
        axum::serve(listener, Router::new().route("/agent", post(agent_run))).await
    });
    addr
}

// -------------------------------------------------------------- the gateway

#[derive(Clone, Copy, PartialEq, Eq)]
enum Store {
    Sqlite,
    Memory,
}

impl Store {
    fn name(self) -> &'static str {
        match self {
            Store::Sqlite => "sqlite",
            Store::Memory => "memory",
        }
    }
}

struct Gateway {
    _child: tokio::process::Child,
    addr: String,
    pid: u32,
    /// The resident-thread count from the gateway's last "idle threads left
    /// memory" log line (debug level of `agui_gateway::thread`), with a
    /// counter that moves on every such line.
    resident: watch::Receiver<(u64, Option<usize>)>,
    _dir: tempfile::TempDir,
}

/// Strips ANSI colour escapes from a log line.
fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Starts the release gateway with `store` and `extra` config sections.
async fn gateway(agent: std::net::SocketAddr, store: Store, extra: &str) -> Gateway {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gateway.toml");
    let journal = dir.path().join("journal.db");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[auth]\nhs_secret = \"{SECRET}\"\n\
             [store]\nkind = \"{}\"\npath = {}\n{extra}\n\
             [[agents]]\nid = \"{AGENT}\"\nurl = \"http://{agent}/agent\"\n",
            store.name(),
            json!(journal.to_str().unwrap()),
        ),
    )
    .unwrap();
    // PROXY_GATEWAY_BIN: another build of the gateway (another allocator).
    let bin = std::env::var("PROXY_GATEWAY_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_agui-gateway").to_owned());
    let mut child = tokio::process::Command::new(bin)
        .args(["--config", cfg.to_str().unwrap(), "serve"])
        .env(
            "AGUI_GATEWAY_LOG",
            "warn,agui_gateway::thread=debug,agui_gateway::thread::run=warn",
        )
        .env("NO_COLOR", "1")
        .envs(gateway_env())
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("all_proxy")
        .env_remove("ALL_PROXY")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let (tx, resident) = watch::channel((0, None));
    let mut log = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = log.next_line().await {
            let line = plain(&line);
            if let Some(n) = line
                .split_once("resident=")
                .and_then(|(_, r)| r.split_whitespace().next())
                .and_then(|r| r.parse().ok())
            {
                tx.send_modify(|(seen, last)| {
                    *seen += 1;
                    *last = Some(n);
                });
            } else if line.contains("WARN") || line.contains("ERROR") {
                eprintln!("  gateway: {line}");
            }
        }
    });
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next_line().await.unwrap().expect("gateway started");
    let addr = line.rsplit("http://").next().unwrap().trim().to_owned();
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Gateway {
        _child: child,
        addr,
        pid,
        resident,
        _dir: dir,
    }
}

fn token(sub: &str) -> String {
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
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

/// `PROXY_GATEWAY_ENV` (space-separated `K=V`): set in the gateway's
/// environment only, so the agent and the consumer stay as they are (an
/// allocator compared by `LD_PRELOAD` on the same binary, glibc tunables).
fn gateway_env() -> Vec<(String, String)> {
    std::env::var("PROXY_GATEWAY_ENV")
        .unwrap_or_default()
        .split_whitespace()
        .map(|kv| {
            let (k, v) = kv
                .split_once('=')
                .unwrap_or_else(|| panic!("PROXY_GATEWAY_ENV: '{kv}' is not K=V"));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// A KiB figure of `/proc/<pid>/status` (`VmRSS:`, `VmHWM:` for the peak).
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Scheduler time of every thread of `pid` (`/proc/<pid>/task/*/schedstat`):
/// on a CPU, runnable but waiting for one, and on a CPU as one of the SQLite
/// journal's threads (`journal-writer`, `journal-checkpoint`).
#[derive(Clone, Copy, Default)]
struct Cpu {
    on_ns: u64,
    waiting_ns: u64,
    writer_ns: u64,
}

impl Cpu {
    fn of(pid: u32) -> Cpu {
        let mut cpu = Cpu::default();
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return cpu;
        };
        for task in tasks.flatten() {
            let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
            let mut f = stat
                .split_whitespace()
                .map(|v| v.parse::<u64>().unwrap_or(0));
            let (on, waiting) = (f.next().unwrap_or(0), f.next().unwrap_or(0));
            cpu.on_ns += on;
            cpu.waiting_ns += waiting;
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.starts_with("journal-") {
                cpu.writer_ns += on;
            }
        }
        cpu
    }

    fn since(self, before: Cpu) -> Cpu {
        Cpu {
            on_ns: self.on_ns.saturating_sub(before.on_ns),
            waiting_ns: self.waiting_ns.saturating_sub(before.waiting_ns),
            writer_ns: self.writer_ns.saturating_sub(before.writer_ns),
        }
    }
}

// ------------------------------------------------------------- the consumer

/// Where a consumer POSTs its `RunAgentInput`.
struct Target {
    label: String,
    /// `host:port`.
    addr: String,
    path: String,
    bearer: Option<String>,
    /// The gateway's process, when there is one.
    pid: Option<u32>,
}

impl Target {
    fn direct(agent: std::net::SocketAddr) -> Target {
        Target {
            label: "direct".into(),
            addr: agent.to_string(),
            path: "/agent".into(),
            bearer: None,
            pid: None,
        }
    }

    fn via(gw: &Gateway, store: Store) -> Target {
        Target {
            label: format!("gateway, {}", store.name()),
            addr: gw.addr.clone(),
            path: format!("/v1/agents/{AGENT}/run"),
            bearer: Some(token("bench")),
            pid: Some(gw.pid),
        }
    }
}

/// What one consumer saw of one run.
#[derive(Default)]
struct Seen {
    /// `data:` events.
    events: u64,
    /// From sending the request to the first event.
    first: Duration,
    /// From sending the request to the terminal event.
    last: Duration,
    /// The last event was `RUN_FINISHED`.
    finished: bool,
    /// Receive − send of every stamped content event, ns.
    latencies: Vec<u64>,
    /// The gateway's scheduler time during the run (zero when direct).
    gateway: Cpu,
    /// This process's (agent and consumer) scheduler time during the run.
    bench: Cpu,
}

impl Seen {
    /// Events/s over the whole run, request to terminal event.
    fn rate(&self) -> f64 {
        self.events as f64 / self.last.as_secs_f64()
    }

    /// Events/s from the first event on (setup cost left out).
    fn steady_rate(&self) -> f64 {
        (self.events - 1) as f64 / (self.last - self.first).as_secs_f64()
    }
}

/// The send time a stamped content event carries.
fn stamp_of(data: &[u8]) -> Option<u64> {
    let at = memchr::memmem::find(data, b"\"delta\":\"")? + 9;
    let digits = data.get(at..at + 20)?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// How the consumer speaks HTTP (`PROXY_CLIENT`): `raw` (default), its own
/// HTTP/1.1 reader (64 KiB reads, chunked encoding decoded in place, like
/// curl or a browser's network stack), or `reqwest` (hyper's client, which
/// hands the body over one HTTP chunk at a time through a channel).
#[derive(Clone)]
enum Client {
    Raw,
    Reqwest(reqwest::Client),
}

fn client() -> Client {
    client_of(std::env::var("PROXY_CLIENT").as_deref().unwrap_or("raw"))
}

fn client_of(kind: &str) -> Client {
    match kind {
        "reqwest" => Client::Reqwest(
            reqwest::Client::builder()
                .no_proxy()
                .tcp_nodelay(true)
                .build()
                .unwrap(),
        ),
        _ => Client::Raw,
    }
}

/// Counts the SSE events of one answer, fed as its body arrives.
struct SseReader {
    t0: Instant,
    stamped: bool,
    frame_end: memchr::memmem::Finder<'static>,
    buf: Vec<u8>,
    last_event: Vec<u8>,
    terminal: bool,
    seen: Seen,
}

impl SseReader {
    fn new(t0: Instant, stamped: bool) -> SseReader {
        SseReader {
            t0,
            stamped,
            frame_end: memchr::memmem::Finder::new(b"\n\n"),
            buf: Vec::with_capacity(1 << 16),
            last_event: Vec::new(),
            terminal: false,
            seen: Seen::default(),
        }
    }

    /// Body bytes that arrived at `arrived` (`now_ns`).
    fn feed(&mut self, bytes: &[u8], arrived: u64) {
        self.buf.extend_from_slice(bytes);
        let mut pos = 0;
        while let Some(end) = self.frame_end.find(&self.buf[pos..]) {
            let frame = &self.buf[pos..pos + end];
            pos += end + 2;
            // Our events are one `data:` line each; `id:` lines and
            // `: keepalive` comments are not events.
            let Some(data) = frame
                .split(|b| *b == b'\n')
                .find_map(|l| l.strip_prefix(b"data:"))
            else {
                continue;
            };
            let data = data.strip_prefix(b" ").unwrap_or(data);
            self.seen.events += 1;
            if self.seen.events == 1 {
                self.seen.first = self.t0.elapsed();
            }
            if self.stamped
                && let Some(sent) = stamp_of(data)
            {
                self.seen.latencies.push(arrived.saturating_sub(sent));
            }
            self.last_event.clear();
            self.last_event.extend_from_slice(data);
            if memchr::memmem::find(data, b"\"type\":\"RUN_FINISHED\"").is_some()
                || memchr::memmem::find(data, b"\"type\":\"RUN_ERROR\"").is_some()
            {
                self.seen.last = self.t0.elapsed();
                self.terminal = true;
            }
        }
        self.buf.drain(..pos);
    }

    /// What was seen, if it was a whole run of `n` content events.
    fn finish(mut self, n: u64) -> Result<Seen, String> {
        self.seen.finished = self.terminal
            && memchr::memmem::find(&self.last_event, b"\"type\":\"RUN_FINISHED\"").is_some();
        if !self.seen.finished {
            return Err(format!(
                "no RUN_FINISHED after {} events; last: {}",
                self.seen.events,
                String::from_utf8_lossy(&self.last_event)
            ));
        }
        if self.seen.events != n + 4 {
            return Err(format!("{} events, expected {}", self.seen.events, n + 4));
        }
        Ok(self.seen)
    }
}

/// Where a chunked-encoding decoder stands.
enum Chunk {
    Size,
    Data(usize),
    Crlf,
    Done,
}

/// Decodes the complete chunked-encoding pieces at the start of `raw`,
/// feeding their data to `sink`, and keeps the incomplete rest. `true` once
/// the last chunk was read.
fn dechunk(
    raw: &mut Vec<u8>,
    state: &mut Chunk,
    mut sink: impl FnMut(&[u8]),
) -> Result<bool, String> {
    let mut pos = 0;
    loop {
        match *state {
            Chunk::Size => {
                let Some(i) = memchr::memmem::find(&raw[pos..], b"\r\n") else {
                    break;
                };
                let line = &raw[pos..pos + i];
                let hex = line.split(|b| *b == b';').next().unwrap_or_default();
                let size = std::str::from_utf8(hex)
                    .ok()
                    .and_then(|h| usize::from_str_radix(h.trim(), 16).ok())
                    .ok_or_else(|| format!("bad chunk size {:?}", String::from_utf8_lossy(line)))?;
                pos += i + 2;
                *state = if size == 0 {
                    Chunk::Done
                } else {
                    Chunk::Data(size)
                };
            }
            Chunk::Data(rest) => {
                let take = rest.min(raw.len() - pos);
                if take == 0 {
                    break;
                }
                sink(&raw[pos..pos + take]);
                pos += take;
                *state = if take == rest {
                    Chunk::Crlf
                } else {
                    Chunk::Data(rest - take)
                };
            }
            Chunk::Crlf => {
                if raw.len() - pos < 2 {
                    break;
                }
                pos += 2;
                *state = Chunk::Size;
            }
            Chunk::Done => break,
        }
    }
    raw.drain(..pos);
    Ok(matches!(state, Chunk::Done))
}

/// POSTs `body` over a new connection and feeds the answer's body to `sse`.
async fn raw_post(target: &Target, body: &str, sse: &mut SseReader) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let io = |e: std::io::Error| e.to_string();
    let mut tcp = tokio::net::TcpStream::connect(&target.addr)
        .await
        .map_err(io)?;
    tcp.set_nodelay(true).map_err(io)?;
    let mut request = format!(
        "POST {} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         accept: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n",
        target.path,
        target.addr,
        body.len()
    );
    if let Some(t) = &target.bearer {
        request.push_str(&format!("authorization: Bearer {t}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    tcp.write_all(request.as_bytes()).await.map_err(io)?;
    let mut raw: Vec<u8> = Vec::with_capacity(1 << 16);
    let head_end = loop {
        if let Some(i) = memchr::memmem::find(&raw, b"\r\n\r\n") {
            break i + 4;
        }
        raw.reserve(1 << 16);
        if tcp.read_buf(&mut raw).await.map_err(io)? == 0 {
            return Err("connection closed before the response head".into());
        }
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200") {
        let status = head.lines().next().unwrap_or_default().to_owned();
        return Err(format!(
            "{status}: {}",
            String::from_utf8_lossy(&raw[head_end..])
        ));
    }
    let chunked = head.contains("transfer-encoding: chunked");
    raw.drain(..head_end);
    let mut state = Chunk::Size;
    let mut arrived = now_ns();
    loop {
        if chunked {
            if dechunk(&mut raw, &mut state, |d| sse.feed(d, arrived))? {
                return Ok(());
            }
        } else {
            sse.feed(&raw, arrived);
            raw.clear();
        }
        raw.reserve(1 << 16);
        if tcp.read_buf(&mut raw).await.map_err(io)? == 0 {
            return Ok(());
        }
        arrived = now_ns();
    }
}

/// One run: POSTs, reads the SSE answer to its end, parsing every frame.
async fn consume(
    client: &Client,
    target: &Target,
    thread: &str,
    n: u64,
    gap_us: u64,
) -> Result<Seen, String> {
    let run = fresh("run");
    let body = json!({
        "threadId": thread,
        "runId": run,
        "messages": [{"id": format!("u-{run}"), "role": "user", "content": "go"}],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {"n": n, "gapUs": gap_us, "writeBytes": write_bytes()},
    })
    .to_string();
    let t0 = Instant::now();
    let mut sse = SseReader::new(t0, gap_us > 0);
    match client {
        Client::Raw => raw_post(target, &body, &mut sse).await?,
        Client::Reqwest(client) => {
            let mut req = client
                .post(format!("http://{}{}", target.addr, target.path))
                .header("content-type", "application/json")
                .header("accept", "text/event-stream")
                .body(body);
            if let Some(t) = &target.bearer {
                req = req.bearer_auth(t);
            }
            let mut resp = req.send().await.map_err(|e| e.to_string())?;
            if !resp.status().is_success() {
                let status = resp.status();
                return Err(format!(
                    "{status}: {}",
                    resp.text().await.unwrap_or_default()
                ));
            }
            while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
                sse.feed(&chunk, now_ns());
            }
        }
    }
    sse.finish(n)
}

// ------------------------------------------------------------------ figures

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn percentile_ms(sorted_ns: &[u64], p: f64) -> f64 {
    sorted_ns[((sorted_ns.len() as f64 - 1.0) * p).round() as usize] as f64 / 1e6
}

/// `median (min–max)` in thousands.
fn krange(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    format!("{:.0}k ({:.0}–{:.0}k)", median(v) / 1e3, lo / 1e3, hi / 1e3)
}

fn pct(x: f64) -> String {
    format!("{:+.0} %", (x - 1.0) * 100.0)
}

fn check(ok: bool) -> &'static str {
    if ok { "✓" } else { "✗" }
}

/// Throughput figures of one path.
#[derive(Default)]
struct Flat {
    label: String,
    before_20k: Vec<f64>,
    s2k: Vec<f64>,
    s20k_steady: Vec<f64>,
    s2k_steady: Vec<f64>,
    s200k: Vec<f64>,
    s200k_steady: Vec<f64>,
    after_20k: Vec<f64>,
    ttfe_fresh: Vec<f64>,
    ttfe_history: Vec<f64>,
    /// Per 200k run: (gateway CPU µs/event, writer µs/event, gateway cores
    /// busy, gateway cores runnable but waiting, agent+consumer µs/event).
    s200k_cpu: Vec<[f64; 5]>,
}

/// Latency figures of one path: (label, p50 ms, p99 ms, max ms).
struct Latency {
    label: String,
    client: &'static str,
    p50: f64,
    p99: f64,
    max: f64,
}

/// Runs `n`-event runs `REPEAT` times, each on a new thread.
async fn repeat(client: &Client, target: &Target, n: u64) -> Vec<Seen> {
    let mut out = Vec::new();
    for _ in 0..REPEAT {
        tokio::time::sleep(SETTLE).await;
        let gateway = target.pid.map(Cpu::of).unwrap_or_default();
        let bench = Cpu::of(std::process::id());
        let mut seen = consume(client, target, &fresh("flat"), n, 0)
            .await
            .unwrap_or_else(|e| panic!("{}: {n}-event run: {e}", target.label));
        seen.gateway = target
            .pid
            .map(|p| Cpu::of(p).since(gateway))
            .unwrap_or_default();
        seen.bench = Cpu::of(std::process::id()).since(bench);
        eprintln!(
            "  {}: {n} events: {:.0} events/s ({:.0} after the first), first event {:.2} ms; \
             CPU µs/event: gateway {:.2} (writer {:.2}), agent+consumer {:.2}",
            target.label,
            seen.rate(),
            seen.steady_rate(),
            seen.first.as_secs_f64() * 1e3,
            seen.gateway.on_ns as f64 / 1e3 / n as f64,
            seen.gateway.writer_ns as f64 / 1e3 / n as f64,
            seen.bench.on_ns as f64 / 1e3 / n as f64,
        );
        out.push(seen);
    }
    out
}

/// The throughput and flat-cost series of one path, in this order: 20k runs
/// (before), 2k, 200k (profiled when `perf` is given), 20k again (after), then
/// time to first event on a thread with a 10k-event history vs a new one.
async fn flat(target: &Target, perf: Option<(&std::path::Path, u32, &str)>) -> Flat {
    let client = client();
    let mut f = Flat {
        label: target.label.clone(),
        ..Default::default()
    };
    consume(&client, target, &fresh("warm"), 1_000, 0)
        .await
        .unwrap_or_else(|e| panic!("{}: warm-up: {e}", target.label));
    let rates = |v: &[Seen]| v.iter().map(Seen::rate).collect::<Vec<_>>();
    let steady = |v: &[Seen]| v.iter().map(Seen::steady_rate).collect::<Vec<_>>();
    let before = repeat(&client, target, 20_000).await;
    (f.before_20k, f.s20k_steady) = (rates(&before), steady(&before));
    let s2k = repeat(&client, target, 2_000).await;
    (f.s2k, f.s2k_steady) = (rates(&s2k), steady(&s2k));
    let recording = perf.map(|(dir, pid, name)| {
        let freq = std::env::var("PROXY_PERF_FREQ").unwrap_or_else(|_| "199".into());
        Perf::start(dir, pid, name, &freq)
    });
    if recording.is_some() {
        tokio::time::sleep(Duration::from_millis(500)).await; // perf attached
    }
    let s200k = repeat(&client, target, 200_000).await;
    if let Some(p) = recording {
        p.stop();
    }
    (f.s200k, f.s200k_steady) = (rates(&s200k), steady(&s200k));
    f.s200k_cpu = s200k
        .iter()
        .map(|s| {
            let per = |ns: u64| ns as f64 / 1e3 / s.events as f64;
            let cores = |ns: u64| ns as f64 / 1e9 / s.last.as_secs_f64();
            [
                per(s.gateway.on_ns),
                per(s.gateway.writer_ns),
                cores(s.gateway.on_ns),
                cores(s.gateway.waiting_ns),
                per(s.bench.on_ns),
            ]
        })
        .collect();
    f.after_20k = rates(&repeat(&client, target, 20_000).await);
    // Time to first event: 10-event runs, alternating between a thread that
    // holds a 10k-event run and a new thread each time.
    let history = fresh("history");
    tokio::time::sleep(SETTLE).await;
    consume(&client, target, &history, 10_000, 0)
        .await
        .unwrap_or_else(|e| panic!("{}: history run: {e}", target.label));
    for _ in 0..15 {
        for (thread, into) in [
            (history.clone(), &mut f.ttfe_history),
            (fresh("ttfe"), &mut f.ttfe_fresh),
        ] {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let seen = consume(&client, target, &thread, 10, 0)
                .await
                .unwrap_or_else(|e| panic!("{}: short run: {e}", target.label));
            into.push(seen.first.as_secs_f64() * 1e3);
        }
    }
    f
}

/// Latency at 1 event/ms: `PACED_EVENTS` stamped content events.
async fn latency(target: &Target, label: &str, kind: &'static str) -> Latency {
    let client = client_of(kind);
    consume(&client, target, &fresh("warm"), 10, 0)
        .await
        .unwrap_or_else(|e| panic!("{}: warm-up: {e}", target.label));
    let seen = consume(&client, target, &fresh("paced"), PACED_EVENTS, 1000)
        .await
        .unwrap_or_else(|e| panic!("{}: paced run: {e}", target.label));
    let mut lat = seen.latencies;
    lat.sort_unstable();
    let l = Latency {
        label: format!("{}{label}", target.label),
        client: kind,
        p50: percentile_ms(&lat, 0.5),
        p99: percentile_ms(&lat, 0.99),
        max: percentile_ms(&lat, 1.0),
    };
    eprintln!(
        "  {} ({kind} consumer): {} stamped events at 1/ms: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        l.label,
        lat.len(),
        l.p50,
        l.p99,
        l.max
    );
    l
}

/// Rounds of the paired latency measurement (`PROXY_PAIRED_ROUNDS`).
fn paired_rounds() -> usize {
    std::env::var("PROXY_PAIRED_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7)
}

/// The CPU time the host took from this VM (`steal` in `/proc/stat`), and
/// all CPU time, in ticks: their differences over a round give its share.
fn steal_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let cpu: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    (cpu.get(7).copied().unwrap_or(0), cpu.iter().sum())
}

/// One round of [`paired`]: p50 and p99 of each path, and the VM's steal.
struct PairedRound {
    direct: (f64, f64),
    /// Through HAProxy, when it is on this machine.
    haproxy: Option<(f64, f64)>,
    gateway: (f64, f64),
    steal: f64,
}

/// HAProxy in HTTP mode in front of the agent: the reference proxy of the
/// paired rounds. Any proxy adds two socket hops (two wake-ups of a
/// sleeping thread) to every event, and on a small VM those alone can
/// cost more than a target of a few tenths of a millisecond; a proxy
/// operators trust, measured in the same moments, says how much of the
/// gateway's figure is the hops and how much is the gateway.
struct HaProxy {
    target: Target,
    _child: tokio::process::Child,
    _dir: tempfile::TempDir,
}

async fn start_haproxy(agent: std::net::SocketAddr) -> Option<HaProxy> {
    let bin = ["/usr/sbin/haproxy", "/usr/bin/haproxy"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let dir = tempfile::tempdir().ok()?;
    let cfg = dir.path().join("haproxy.cfg");
    std::fs::write(
        &cfg,
        format!(
            "global\n  nbthread 2\ndefaults\n  mode http\n  option http-no-delay\n  \
             timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n\
             frontend bench\n  bind 127.0.0.1:{port}\n  default_backend agent\n\
             backend agent\n  server a {agent}\n"
        ),
    )
    .ok()?;
    let child = tokio::process::Command::new(bin)
        .arg("-db")
        .arg("-f")
        .arg(&cfg)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .ok()?;
    let addr = format!("127.0.0.1:{port}");
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(&addr).await.is_ok() {
            return Some(HaProxy {
                target: Target {
                    label: "haproxy".into(),
                    addr,
                    path: "/agent".into(),
                    bearer: None,
                    pid: None,
                },
                _child: child,
                _dir: dir,
            });
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    None
}

/// The paced run through the gateway, through HAProxy and straight to
/// the agent at the same time, in rounds: all see the same moments of the
/// machine (a VM whose host takes its CPU now and then, another job's
/// burst), which runs one after the other do not. What the gateway adds
/// is then the difference within each round; the median over the rounds
/// is reported.
async fn paired(
    direct: &Target,
    haproxy: Option<&Target>,
    target: &Target,
    label: &str,
    kind: &'static str,
) -> Vec<PairedRound> {
    let client = client_of(kind);
    let paths: Vec<&Target> = [Some(direct), haproxy, Some(target)]
        .into_iter()
        .flatten()
        .collect();
    for t in &paths {
        consume(&client, t, &fresh("warm"), 10, 0)
            .await
            .unwrap_or_else(|e| panic!("{}: warm-up: {e}", t.label));
    }
    let mut rounds = Vec::new();
    for _ in 0..paired_rounds() {
        tokio::time::sleep(SETTLE).await;
        let threads: Vec<String> = paths.iter().map(|_| fresh("paced")).collect();
        let (steal0, all0) = steal_ticks();
        let seen = futures::future::join_all(
            paths
                .iter()
                .zip(&threads)
                .map(|(t, thread)| consume(&client, t, thread, PACED_EVENTS, 1000)),
        )
        .await;
        let (steal1, all1) = steal_ticks();
        let mut figures: Vec<(f64, f64)> = seen
            .into_iter()
            .zip(&paths)
            .map(|(seen, t)| {
                let mut lat = seen
                    .unwrap_or_else(|e| panic!("{}: paced run: {e}", t.label))
                    .latencies;
                lat.sort_unstable();
                (percentile_ms(&lat, 0.5), percentile_ms(&lat, 0.99))
            })
            .collect();
        let r = PairedRound {
            gateway: figures.pop().expect("the gateway's"),
            haproxy: haproxy.and_then(|_| figures.pop()),
            direct: figures.pop().expect("direct"),
            steal: (steal1 - steal0) as f64 / (all1 - all0).max(1) as f64,
        };
        let h = r
            .haproxy
            .map(|h| format!(", haproxy p50 {:.3} p99 {:.3} ms", h.0, h.1))
            .unwrap_or_default();
        eprintln!(
            "  {}{label} ({kind} consumer), paired: direct p50 {:.3} p99 {:.3} ms{h}, gateway p50 {:.3} \
             p99 {:.3} ms, added p99 {:+.3} ms, steal {:.1} %",
            target.label,
            r.direct.0,
            r.direct.1,
            r.gateway.0,
            r.gateway.1,
            r.gateway.1 - r.direct.1,
            r.steal * 100.0
        );
        rounds.push(r);
    }
    rounds
}

/// Many runs at once (`PROXY_CONCURRENT`, `RUNSxEVENTS`, default 200x1000).
fn concurrent_shape() -> (usize, u64) {
    let v = std::env::var("PROXY_CONCURRENT").unwrap_or_else(|_| "200x1000".into());
    v.split_once('x')
        .and_then(|(r, n)| Some((r.trim().parse().ok()?, n.trim().parse().ok()?)))
        .unwrap_or_else(|| panic!("PROXY_CONCURRENT: '{v}' is not RUNSxEVENTS"))
}

/// Aggregate figures of one path's concurrent runs.
struct Concurrent {
    label: String,
    /// Events/s of all runs together, first request to last `RUN_FINISHED`,
    /// per repetition.
    rates: Vec<f64>,
    /// Gateway CPU µs per event, per repetition (zero when direct).
    cpu: Vec<f64>,
    /// Slowest single run's events/s, per repetition.
    slowest: Vec<f64>,
}

/// `runs` runs of `n` events at once, each on its own thread and its own
/// connection, `REPEAT` times: every run must be whole.
async fn concurrent(target: &Target, runs: usize, n: u64) -> Concurrent {
    let client = client();
    let mut c = Concurrent {
        label: target.label.clone(),
        rates: Vec::new(),
        cpu: Vec::new(),
        slowest: Vec::new(),
    };
    consume(&client, target, &fresh("warm"), 1_000, 0)
        .await
        .unwrap_or_else(|e| panic!("{}: warm-up: {e}", target.label));
    for _ in 0..REPEAT {
        tokio::time::sleep(SETTLE).await;
        let gateway = target.pid.map(Cpu::of).unwrap_or_default();
        let t0 = Instant::now();
        let client = &client;
        let all =
            (0..runs).map(|_| async move { consume(client, target, &fresh("many"), n, 0).await });
        let seen = futures::future::join_all(all).await;
        let secs = t0.elapsed().as_secs_f64();
        let cpu = target
            .pid
            .map(|p| Cpu::of(p).since(gateway))
            .unwrap_or_default();
        let mut events = 0;
        let mut slowest = f64::INFINITY;
        for s in seen {
            let s = s.unwrap_or_else(|e| panic!("{}: concurrent run: {e}", target.label));
            events += s.events;
            slowest = slowest.min(s.rate());
        }
        let rate = events as f64 / secs;
        let per_event = cpu.on_ns as f64 / 1e3 / events as f64;
        eprintln!(
            "  {}: {runs} runs × {n} events at once: {rate:.0} events/s in all, slowest run \
             {slowest:.0} events/s; gateway CPU {per_event:.2} µs/event",
            target.label
        );
        c.rates.push(rate);
        c.cpu.push(per_event);
        c.slowest.push(slowest);
    }
    c
}

/// RSS of the gateway (SQLite, `evict_after = "1s"`): at start, after a
/// warm-up whose threads were evicted (the baseline), right after 1,000
/// threads × 1,000 events, and once those threads were evicted and RSS
/// settled (optionally after `malloc_trim`). Returns (when, RSS KiB) rows.
async fn rss(agent: std::net::SocketAddr) -> Vec<(String, u64)> {
    let mut gw = gateway(agent, Store::Sqlite, "[threads]\nevict_after = \"1s\"\n").await;
    let target = Target::via(&gw, Store::Sqlite);
    let client = client();
    let mut out = Vec::new();
    tokio::time::sleep(Duration::from_secs(1)).await;
    out.push(("at start".to_owned(), rss_kib(gw.pid)));
    let many = |threads: usize, prefix: &'static str| {
        let (client, target) = (&client, &target);
        futures::stream::iter(0..threads)
            .map(move |_| async move {
                consume(client, target, &fresh(prefix), 1_000, 0)
                    .await
                    .unwrap_or_else(|e| panic!("rss run: {e}"))
            })
            .buffer_unordered(4)
            .count()
    };
    many(20, "rss-warm").await;
    let evicted = wait_evicted(&mut gw).await;
    out.push((
        format!("baseline: 20 threads × 1,000 events, evicted{evicted}"),
        rss_kib(gw.pid),
    ));
    let t0 = Instant::now();
    many(1_000, "rss").await;
    eprintln!(
        "  1,000 threads × 1,000 events in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    out.push((
        "right after 1,000 threads × 1,000 events".to_owned(),
        rss_kib(gw.pid),
    ));

    let evicted = wait_evicted(&mut gw).await;
    out.push((
        format!("1,000 threads × 1,000 events, idle and evicted{evicted}"),
        rss_kib(gw.pid),
    ));
    // jemalloc returns freed pages over `dirty_decay_ms` (10 s): RSS can
    // look settled while it still falls.
    tokio::time::sleep(Duration::from_secs(12)).await;
    out.push(("the same, 12 s later".to_owned(), rss_kib(gw.pid)));
    out.push(("peak (VmHWM)".to_owned(), status_kib(gw.pid, "VmHWM:")));
    if std::env::var_os("PROXY_TRIM").is_some() {
        // Diagnosis: how much of that is freed memory the allocator keeps?
        let trimmed = std::process::Command::new("gdb")
            .args(["-p", &gw.pid.to_string(), "-batch", "-ex"])
            .arg("call (int) malloc_trim(0)")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if trimmed {
            out.push((
                "the same after `malloc_trim(0)` (gdb; PROXY_TRIM=1)".to_owned(),
                rss_kib(gw.pid),
            ));
        }
    }
    out
}

/// Waits until the gateway logs that no thread is resident (then lets RSS
/// settle); returns a note for the table when that was not seen in 30 s.
async fn wait_evicted(gw: &mut Gateway) -> &'static str {
    let since = gw.resident.borrow().0;
    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if gw.resident.changed().await.is_err() {
                return false;
            }
            let (n, resident) = *gw.resident.borrow();
            if n > since && resident == Some(0) {
                return true;
            }
        }
    })
    .await
    .unwrap_or(false);
    // RSS settles: two readings 500 ms apart within 1 %.
    let mut last = rss_kib(gw.pid);
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = rss_kib(gw.pid);
        if now.abs_diff(last) * 100 <= last {
            break;
        }
        last = now;
    }
    if seen {
        ""
    } else {
        " (eviction NOT observed in 30 s)"
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(addr: &str, bearer: &str) -> Socket {
    let mut req = format!("ws://{addr}/v1/ws").into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {bearer}").parse().unwrap());
    tokio_tungstenite::connect_async(req).await.unwrap().0
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

/// RSS per idle authenticated WebSocket (as `benches/load.rs` measures it):
/// bytes per socket and the gateway's total RSS in KiB.
async fn idle_sockets(agent: std::net::SocketAddr, count: usize) -> (f64, u64) {
    let gw = gateway(
        agent,
        Store::Sqlite,
        "[ws]\nread_timeout = \"10m\"\nping_interval = \"5m\"\n",
    )
    .await;
    let bearer = token("bench");
    let warm: Vec<_> = futures::future::join_all((0..50).map(|_| connect(&gw.addr, &bearer))).await;
    let before = rss_kib(gw.pid);
    let mut sockets = Vec::with_capacity(count);
    for _ in 0..count / 500 {
        sockets
            .extend(futures::future::join_all((0..500).map(|_| connect(&gw.addr, &bearer))).await);
    }
    for ws in sockets.iter_mut() {
        ws.send(Message::Text(json!({"type": "ping"}).to_string().into()))
            .await
            .unwrap();
    }
    for ws in sockets.iter_mut() {
        while let Some(Ok(m)) = ws.next().await {
            if matches!(&m, Message::Text(t) if t.contains("pong")) {
                break;
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib(gw.pid);
    drop(warm);
    (
        after.saturating_sub(before) as f64 * 1024.0 / count as f64,
        after,
    )
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("proxy: skipped outside `cargo bench --bench proxy`");
        return;
    }
    let only = std::env::var("PROXY_ONLY").unwrap_or_default();
    let want = |part: &str| only.is_empty() || only.split(',').any(|p| p == part);
    let stores: Vec<Store> = std::env::var("PROXY_STORES")
        .unwrap_or_else(|_| "sqlite,memory".into())
        .split(',')
        .map(|s| match s.trim() {
            "sqlite" => Store::Sqlite,
            "memory" => Store::Memory,
            other => panic!("PROXY_STORES: unknown store {other}"),
        })
        .collect();
    let perf = std::env::var_os("PROXY_PERF").map(PathBuf::from);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        now_ns();
        let agent = start_agent().await;
        let direct = Target::direct(agent);
        let mut flats = Vec::new();
        let mut latencies = Vec::new();
        let mut rss_rows = Vec::new();
        let mut pairs = Vec::new();
        let haproxy = if want("paired") {
            let h = start_haproxy(agent).await;
            if h.is_none() {
                eprintln!("paired: no HAProxy on this machine, measured without it");
            }
            h
        } else {
            None
        };
        if want("latency") {
            for kind in CONSUMERS {
                latencies.push(latency(&direct, "", kind).await);
            }
        }
        if want("throughput") {
            flats.push(flat(&direct, None).await);
        }
        for &store in &stores {
            if !want("latency") && !want("throughput") && !want("paired") {
                break;
            }
            let gw = gateway(agent, store, "").await;
            let target = Target::via(&gw, store);
            if want("latency") {
                for kind in CONSUMERS {
                    latencies.push(latency(&target, ", fresh", kind).await);
                }
            }
            if want("throughput") {
                let perf = perf.as_deref().map(|d| (d, gw.pid, store.name()));
                flats.push(flat(&target, perf).await);
                rss_rows.push((
                    format!("{}: peak during the throughput runs (VmHWM)", store.name()),
                    status_kib(gw.pid, "VmHWM:"),
                ));
                rss_rows.push((
                    format!("{}: after the throughput runs", store.name()),
                    rss_kib(gw.pid),
                ));
            }
            if want("latency") && want("throughput") {
                for kind in CONSUMERS {
                    latencies.push(latency(&target, ", after the runs above", kind).await);
                }
            }
            if want("paired") {
                let when = if want("throughput") {
                    ", after the runs above"
                } else {
                    ", fresh"
                };
                for kind in CONSUMERS {
                    let haproxy = haproxy.as_ref().map(|h| &h.target);
                    let rounds = paired(&direct, haproxy, &target, when, kind).await;
                    pairs.push((format!("{}{when}", target.label), kind, rounds));
                }
            }
        }
        let mut many = Vec::new();
        let (runs, events) = concurrent_shape();
        if want("concurrent") {
            many.push(concurrent(&direct, runs, events).await);
            for &store in &stores {
                let gw = gateway(agent, store, "").await;
                many.push(concurrent(&Target::via(&gw, store), runs, events).await);
            }
        }
        let rss = if want("rss") {
            rss(agent).await
        } else {
            Vec::new()
        };
        let idle = if want("idle") {
            if open_files_limit() < 10_100 {
                eprintln!("idle sockets: skipped, `ulimit -n` is below 10,100");
                None
            } else {
                Some(idle_sockets(agent, 10_000).await)
            }
        } else {
            None
        };
        report(&flats, &latencies, &rss, idle);
        report_paired(&pairs);
        report_concurrent(&many, runs, events);
        if !rss_rows.is_empty() {
            println!("\n### Gateway RSS of the throughput runs\n");
            println!("| when | RSS |");
            println!("|---|---|");
            for (when, kib) in &rss_rows {
                println!("| {when} | {:.1} MB |", *kib as f64 * 1024.0 / 1e6);
            }
        }
    });
}

fn report(flats: &[Flat], latencies: &[Latency], rss: &[(String, u64)], idle: Option<(f64, u64)>) {
    println!();
    let direct = flats.iter().find(|f| f.label == "direct");
    if !flats.is_empty() {
        println!("### Events/s, one SSE consumer, 200k-event runs (median of {REPEAT}, min–max)\n");
        println!("| path | events/s | ÷ direct | target |");
        println!("|---|---|---|---|");
        for f in flats {
            let (ratio, target) = match (direct, f.label.as_str()) {
                (Some(d), l) if l != "direct" => {
                    let r = median(&f.s200k) / median(&d.s200k);
                    let want = if l.ends_with("sqlite") { 0.5 } else { 0.7 };
                    (format!("{r:.2}"), format!("≥ {want} {}", check(r >= want)))
                }
                _ => ("1".to_owned(), String::new()),
            };
            println!(
                "| {} | {} | {ratio} | {target} |",
                f.label,
                krange(&f.s200k)
            );
        }
        println!(
            "\n### Where the CPU went, 200k-event runs (median of {REPEAT}; `/proc/<pid>/task/*/schedstat`)\n"
        );
        println!(
            "| path | gateway CPU per event | of which the journal threads | gateway on CPU | gateway runnable, waiting for a CPU | agent + consumer CPU per event |"
        );
        println!("|---|---|---|---|---|---|");
        for f in flats {
            let col = |i: usize| median(&f.s200k_cpu.iter().map(|c| c[i]).collect::<Vec<_>>());
            if f.label == "direct" {
                println!("| direct | — | — | — | — | {:.2} µs |", col(4));
            } else {
                println!(
                    "| {} | {:.2} µs | {:.2} µs | {:.2} cores | {:.2} cores | {:.2} µs |",
                    f.label,
                    col(0),
                    col(1),
                    col(2),
                    col(3),
                    col(4)
                );
            }
        }
        println!(
            "\n### Flat cost (events/s of the whole run, request to RUN_FINISHED; median of {REPEAT})\n"
        );
        println!(
            "| path | 2k | 20k | 200k | 200k vs 20k | 2k vs 20k | after first event: 2k / 20k / 200k |"
        );
        println!("|---|---|---|---|---|---|---|");
        for f in flats {
            let (a, b, c) = (median(&f.s2k), median(&f.before_20k), median(&f.s200k));
            println!(
                "| {} | {:.0}k | {:.0}k | {:.0}k | {} | {} | {:.0}k / {:.0}k / {:.0}k |",
                f.label,
                a / 1e3,
                b / 1e3,
                c / 1e3,
                pct(c / b),
                pct(a / b),
                median(&f.s2k_steady) / 1e3,
                median(&f.s20k_steady) / 1e3,
                median(&f.s200k_steady) / 1e3,
            );
        }
        println!(
            "\n| path | 20k run, new thread, before the 200k runs | the same after | after ÷ before | first event, new thread | first event, 10k-event history | history ÷ new |"
        );
        println!("|---|---|---|---|---|---|---|");
        for f in flats {
            let (b, a) = (median(&f.before_20k), median(&f.after_20k));
            let (tf, th) = (median(&f.ttfe_fresh), median(&f.ttfe_history));
            println!(
                "| {} | {} | {} | {} {} | {tf:.2} ms | {th:.2} ms | {} {} |",
                f.label,
                krange(&f.before_20k),
                krange(&f.after_20k),
                pct(a / b),
                check((a / b - 1.0).abs() <= 0.15),
                pct(th / tf),
                check((th / tf - 1.0).abs() <= 0.15),
            );
        }
    }
    if !latencies.is_empty() {
        println!(
            "\n### Latency per event at 1,000 events/s ({PACED_EVENTS} events, receive − send)\n"
        );
        println!(
            "| path | consumer | p50 | p99 | max | added p50 | added p99 | target (+0.05 / +1 ms) |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        for l in latencies {
            let d = latencies
                .iter()
                .find(|d| d.label == "direct" && d.client == l.client);
            let (added, target) = match d {
                Some(d) if l.label != "direct" => {
                    let (a50, a99) = (l.p50 - d.p50, l.p99 - d.p99);
                    (
                        format!("{a50:+.3} ms | {a99:+.3} ms"),
                        format!("{} {}", check(a50 <= 0.05), check(a99 <= 1.0)),
                    )
                }
                _ => ("— | —".to_owned(), String::new()),
            };
            println!(
                "| {} | {} | {:.3} ms | {:.3} ms | {:.2} ms | {added} | {target} |",
                l.label, l.client, l.p50, l.p99, l.max
            );
        }
    }
    if !rss.is_empty() {
        println!("\n### Gateway RSS (SQLite journal, `threads.evict_after = \"1s\"`)\n");
        println!("| when | RSS |");
        println!("|---|---|");
        for (when, kib) in rss {
            println!("| {when} | {:.1} MB |", *kib as f64 * 1024.0 / 1e6);
        }
        let base = rss[1].1 as f64 * 1024.0 / 1e6;
        let end = rss[3].1 as f64 * 1024.0 / 1e6;
        println!(
            "| growth over baseline | {:+.1} MB (target ≤ +50 MB {}) |",
            end - base,
            check(end - base <= 50.0)
        );
    }
    if let Some((per, total)) = idle {
        println!("\n### Idle authenticated WebSockets\n");
        println!(
            "| 10,000 sockets | {per:.0} bytes RSS each (gateway RSS {:.1} MB) | target ≤ 8 KiB {} |",
            total as f64 * 1024.0 / 1e6,
            check(per <= 8192.0)
        );
    }
}

/// The paired rounds ([`paired`]): per path, the median over the rounds of
/// each figure, and of the added p99 its range too.
fn report_paired(pairs: &[(String, &'static str, Vec<PairedRound>)]) {
    if pairs.is_empty() {
        return;
    }
    println!(
        "\n### Latency at 1,000 events/s, all paths at the same time ({} rounds of {PACED_EVENTS} events; medians)\n",
        paired_rounds()
    );
    println!(
        "| path | consumer | direct p50 / p99 | HAProxy p50 / p99 | gateway p50 / p99 | added p50 | added p99 (min–max) | HAProxy's added p99 | gateway − HAProxy, p99 | steal | added p99 / gateway − HAProxy, rounds with steal < 1 % | target ≤ +0.3 ms p99 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (label, kind, rounds) in pairs {
        let m = |f: &dyn Fn(&PairedRound) -> f64| median(&rounds.iter().map(f).collect::<Vec<_>>());
        let added: Vec<f64> = rounds.iter().map(|r| r.gateway.1 - r.direct.1).collect();
        let (lo, hi) = added
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), a| {
                (lo.min(*a), hi.max(*a))
            });
        let a99 = median(&added);
        let with_haproxy = rounds.iter().all(|r| r.haproxy.is_some());
        let h = |f: &dyn Fn(&PairedRound, (f64, f64)) -> f64| {
            m(&|r| f(r, r.haproxy.unwrap_or_default()))
        };
        let (hap, hap_added, over_hap) = if with_haproxy {
            (
                format!("{:.3} / {:.3} ms", h(&|_, x| x.0), h(&|_, x| x.1)),
                format!("{:+.3} ms", h(&|r, x| x.1 - r.direct.1)),
                format!("{:+.3} ms", h(&|r, x| r.gateway.1 - x.1)),
            )
        } else {
            ("—".into(), "—".into(), "—".into())
        };
        // The rounds the host left alone: what the gateway adds, without
        // the moments a VM is not running at all (they land on whichever
        // path is mid-hop; more hops, more of them).
        let quiet: Vec<&PairedRound> = rounds.iter().filter(|r| r.steal < 0.01).collect();
        let quiet_figures = if quiet.is_empty() {
            "none".to_owned()
        } else {
            let added = median(
                &quiet
                    .iter()
                    .map(|r| r.gateway.1 - r.direct.1)
                    .collect::<Vec<_>>(),
            );
            let over = if with_haproxy {
                format!(
                    "{:+.3} ms",
                    median(
                        &quiet
                            .iter()
                            .map(|r| r.gateway.1 - r.haproxy.unwrap_or_default().1)
                            .collect::<Vec<_>>()
                    )
                )
            } else {
                "—".into()
            };
            format!(
                "{added:+.3} ms / {over} ({} of {})",
                quiet.len(),
                rounds.len()
            )
        };
        println!(
            "| {label} | {kind} | {:.3} / {:.3} ms | {hap} | {:.3} / {:.3} ms | {:+.3} ms | {a99:+.3} ms ({lo:+.3} – {hi:+.3}) | {hap_added} | {over_hap} | {:.1} % | {quiet_figures} | {} |",
            m(&|r| r.direct.0),
            m(&|r| r.direct.1),
            m(&|r| r.gateway.0),
            m(&|r| r.gateway.1),
            m(&|r| r.gateway.0 - r.direct.0),
            m(&|r| r.steal) * 100.0,
            check(a99 <= 0.3)
        );
    }
}

fn report_concurrent(many: &[Concurrent], runs: usize, n: u64) {
    if many.is_empty() {
        return;
    }
    let direct = many.iter().find(|c| c.label == "direct");
    println!(
        "\n### Many runs at once: {runs} runs × {n} events, one consumer each (median of {REPEAT}, min–max)\n"
    );
    println!(
        "| path | events/s, all runs | ÷ direct | slowest run, events/s (median) | gateway CPU per event | target |"
    );
    println!("|---|---|---|---|---|---|");
    for c in many {
        let (ratio, target) = match direct {
            Some(d) if c.label != "direct" => {
                let r = median(&c.rates) / median(&d.rates);
                (format!("{r:.2}"), format!("≥ 0.5 {}", check(r >= 0.5)))
            }
            _ => ("1".to_owned(), String::new()),
        };
        let cpu = if c.label == "direct" {
            "—".to_owned()
        } else {
            format!("{:.2} µs", median(&c.cpu))
        };
        println!(
            "| {} | {} | {ratio} | {:.0} | {cpu} | {target} |",
            c.label,
            krange(&c.rates),
            median(&c.slowest),
        );
    }
}
