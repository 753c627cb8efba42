//! Readers slower than the agent: the HTTP requester and the SSE join stream
//! fall behind their byte budget while a 10 MB run streams, and still get
//! every event and exactly one terminal event — read from the journal once
//! they are behind, never cut off.

mod common;

use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A raw HTTP/1.1 request on a socket with a 4 KiB receive buffer, not read
/// until the caller says so: the gateway's side backs up at once.
struct SlowReader {
    tcp: tokio::net::TcpStream,
}

impl SlowReader {
    async fn send(gw: &Gateway, method: &str, path: &str, token: &str, body: &str) -> SlowReader {
        let addr: std::net::SocketAddr = gw.base.trim_start_matches("http://").parse().unwrap();
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut tcp = socket.connect(addr).await.unwrap();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nAccept: text/event-stream\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        tcp.write_all(request.as_bytes()).await.unwrap();
        SlowReader { tcp }
    }

    /// Reads the whole response (the server closes after the terminal
    /// event) and returns its de-chunked body.
    async fn read_all(mut self) -> String {
        let mut raw = Vec::new();
        tokio::time::timeout(WAIT * 3, self.tcp.read_to_end(&mut raw))
            .await
            .expect("response ends")
            .unwrap();
        let text = String::from_utf8(raw).unwrap();
        let (head, mut rest) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(
            head.to_lowercase().contains("transfer-encoding: chunked"),
            "{head}"
        );
        let mut body = String::new();
        loop {
            let (size, after) = rest.split_once("\r\n").unwrap();
            let size = usize::from_str_radix(size.trim(), 16).unwrap();
            if size == 0 {
                return body;
            }
            body.push_str(&after[..size]);
            rest = &after[size + 2..];
        }
    }
}

fn terminal_count(events: &[Value]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e["type"].as_str(), Some("RUN_FINISHED" | "RUN_ERROR")))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_requester_and_slow_join_reader_get_every_event() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&format!(
        "[threads]\nmax_events = 100000\n[[agents]]\nid = \"quick\"\nurl = \"{}\"\n\
         [[agents]]\nid = \"flood\"\nurl = \"{}\"\n",
        py.url("ok"),
        py.url("flood")
    ))
    .await;
    let t = token(json!({"sub": "alice"}));
    // A quick run creates the thread, so a viewer can watch the flood finish.
    let (status, _) = post_run(&gw.run_url("quick"), &t, &input("big", "r0", "hi")).await;
    assert_eq!(status, 200);
    let (_, snap) = {
        let resp = http()
            .get(gw.url("/v1/threads/big"))
            .bearer_auth(&t)
            .send()
            .await
            .unwrap();
        (resp.status(), resp.json::<Value>().await.unwrap())
    };
    let base = snap["seq"].as_u64().unwrap();
    let mut watcher = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    watcher
        .send(json!({"type": "subscribe", "id": "s", "threadId": "big", "after": base}))
        .await;
    assert_eq!(watcher.recv().await["type"], "ack");

    let join = SlowReader::send(
        &gw,
        "GET",
        &format!("/v1/threads/big/events?after={base}"),
        &t,
        "",
    )
    .await;
    let mut flood = input("big", "r1", "go");
    flood["messages"][0]["id"] = "u-flood".into();
    let requester =
        SlowReader::send(&gw, "POST", "/v1/agents/flood/run", &t, &flood.to_string()).await;

    // Nobody reads the two slow sockets until the whole run is journaled.
    let frames = watcher.recv_until(is_terminal_frame).await;
    let n = seqs(&frames).len();
    assert_eq!(n, 10004, "the watcher got the whole run");
    // Both slow readers are behind: the metrics say so.
    let behind = gw.metrics().await;
    assert!(
        gauge(&behind, "agui_readers_catching_up") >= 2.0,
        "{behind}"
    );
    assert!(gauge(&behind, "agui_outbox_bytes") > 0.0, "{behind}");

    let body = requester.read_all().await;
    let events = sse_events(&body);
    assert_eq!(events.len(), 10004, "the slow requester got every event");
    assert_eq!(terminal_count(&events), 1);
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
    let deltas: Vec<String> = events
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .map(|e| e["delta"].as_str().unwrap()[..5].to_owned())
        .collect();
    let expected: Vec<String> = (0..10000).map(|i| format!("{i:05}")).collect();
    assert_eq!(deltas, expected, "in order, nothing lost or repeated");

    // The join stream stays open (it is live): read until the last seq.
    let last = format!("id: {}\n", base + 10004);
    let text = {
        let mut join = join;
        let mut raw = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        while !String::from_utf8_lossy(&raw[raw.len().saturating_sub(64 * 1024)..]).contains(&last)
        {
            let n = tokio::time::timeout(WAIT, join.tcp.read(&mut buf))
                .await
                .expect("join stream delivers")
                .unwrap();
            assert!(n > 0, "join stream ended early");
            raw.extend_from_slice(&buf[..n]);
        }
        String::from_utf8(raw).unwrap()
    };
    let ids: Vec<u64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .map(|v| v.trim().parse().unwrap())
        .collect();
    assert_eq!(
        ids,
        (base + 1..=base + 10004).collect::<Vec<_>>(),
        "the slow join reader got every journal event once, in order"
    );
    // Caught up and live again (the requester gone): nobody is behind.
    let caught_up = gw.metrics().await;
    assert_eq!(
        gauge(&caught_up, "agui_readers_catching_up"),
        0.0,
        "{caught_up}"
    );
}

/// The value of an unlabelled gauge in a `/metrics` text.
fn gauge(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {metrics}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_that_fails_mid_run_ends_it_with_run_error_for_the_requester_and_every_viewer() {
    let py = PyAgent::start("scripted_agent.py").await;
    let dir = tempfile::tempdir().unwrap();
    // The journal may grow to 2 MiB; the flood writes ~10 MB.
    let gw = Gateway::start_with_file_limit(
        &format!(
            "[store]\nkind = \"sqlite\"\npath = \"{}\"\n[threads]\nmax_events = 100000\n\
             [[agents]]\nid = \"flood\"\nurl = \"{}\"\n",
            dir.path().join("journal.db").display(),
            py.url("flood")
        ),
        2048,
    )
    .await;
    let ready = || async {
        http()
            .get(gw.url("/readyz"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(ready().await, 200);
    let t = token(json!({"sub": "alice"}));
    let mut watcher = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    let (status, body) = post_run(&gw.run_url("flood"), &t, &input("full", "r1", "go")).await;
    assert_eq!(status, 200);
    let events = sse_events(&body);
    assert_run_error(&events, "journal_unavailable");
    assert_eq!(terminal_count(&events), 1, "exactly one terminal event");
    let stored = events.len() - 1;
    assert!(
        (2..10004).contains(&stored),
        "the run was cut where the journal failed: {stored} events"
    );
    let seqs_seen: Vec<u64> = body
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .map(|id| id.trim().parse().unwrap())
        .collect();
    assert_eq!(
        seqs_seen,
        (1..=stored as u64).collect::<Vec<_>>(),
        "what the requester saw was stored, gapless; the RUN_ERROR the journal could not hold has no id"
    );
    // Whether a small write still fits under the limit depends on where the
    // failed batch left the WAL: room is made, as an operator would, so the
    // recovery (which retries with backoff) is sure to get through.
    // journal_recovery.rs checks a disk that stays full.
    gw.proc.expect_stderr("journal write failed").await;
    gw.lift_file_limit();
    // A viewer reads exactly what the requester saw: the published journal.
    watcher
        .send(json!({"type": "subscribe", "id": "s", "threadId": "full", "after": 0}))
        .await;
    assert_eq!(watcher.recv().await["type"], "ack");
    let mut replayed = Vec::new();
    while replayed.len() < stored {
        let frame = watcher.recv().await;
        replayed.push(frame["seq"].as_u64().unwrap());
    }
    assert_eq!(replayed, seqs_seen);
    // Then how the run ended: the thread recovered by itself and journaled
    // the RUN_ERROR the requester got, right after what was stored.
    let closing = watcher.recv().await;
    assert_eq!(closing["seq"], stored as u64 + 1, "{closing}");
    assert_eq!(closing["event"]["code"], "journal_unavailable", "{closing}");
    assert_eq!(ready().await, 200, "readiness is back with the journal");
}

/// A thread whose compacted fold is several MiB (over the 1 MiB viewer
/// budget) opens over a real WebSocket: the subscriber gets its ack, the
/// whole snapshot, then live events — not a 4008 close because the snapshot
/// queued behind the ack overflowed the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_larger_than_the_viewer_budget_reaches_a_websocket_subscriber() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&format!(
        "[threads]\nmax_events = 50\n[[agents]]\nid = \"events\"\nurl = \"{}\"\n",
        py.url("events")
    ))
    .await;
    let t = token(json!({"sub": "alice"}));
    // Five runs of one 800 kB assistant message each (request bodies stay
    // under the 1 MiB limit), 12 events each: the last run's end compacts
    // the journal (past 50 events) into its fold.
    let delta = "x".repeat(100_000);
    for run in 0..5 {
        let id = format!("m{run}");
        let mut events =
            vec![json!({"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"})];
        events.extend(
            (0..8)
                .map(|_| json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": delta})),
        );
        events.push(json!({"type": "TEXT_MESSAGE_END", "messageId": id}));
        let mut body = input("huge", &format!("r{run}"), "more");
        body["messages"][0]["id"] = format!("u{run}").into();
        body["forwardedProps"] = json!({ "events": events });
        let (status, text) = post_run(&gw.run_url("events"), &t, &body).await;
        assert_eq!(status, 200, "{text}");
    }
    let expected = json_of(http().get(gw.url("/v1/threads/huge")).bearer_auth(&t)).await;
    let expected_bytes = expected.to_string().len();
    assert!(expected_bytes > 4_000_000, "{expected_bytes} bytes");

    let mut ws = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    ws.send(json!({"type": "subscribe", "id": "s", "threadId": "huge"}))
        .await;
    let first = ws.recv().await;
    assert_eq!(first["type"], "ack", "{first}");
    let snapshot = ws.recv().await;
    assert_eq!(
        snapshot["type"],
        "snapshot",
        "not a snapshot: {:.200}",
        snapshot.to_string()
    );
    assert_eq!(snapshot["seq"], expected["seq"]);
    assert_eq!(snapshot["messages"], expected["messages"]);

    // Then live: a run on the thread arrives as events after the snapshot.
    ws.send(
        json!({"type": "run", "agent": "events", "threadId": "huge", "runId": "live",
                   "messages": [{"id": "u-live", "role": "user", "content": "hi"}]}),
    )
    .await;
    let frames = ws.recv_until(is_terminal_frame).await;
    let seqs = seqs(&frames);
    assert!(!seqs.is_empty(), "{frames:?}");
    let base = expected["seq"].as_u64().unwrap();
    assert_eq!(
        seqs,
        (base + 1..=base + seqs.len() as u64).collect::<Vec<_>>()
    );
    assert_eq!(frames.last().unwrap()["event"]["type"], "RUN_FINISHED");

    // A position the compaction removed gets the same multi-MiB snapshot as
    // a `reset`, on the same path.
    let mut late = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    late.send(json!({"type": "subscribe", "id": "s", "threadId": "huge", "after": 1}))
        .await;
    assert_eq!(late.recv().await["type"], "ack");
    let reset = late.recv().await;
    assert_eq!(reset["type"], "snapshot", "{:.200}", reset.to_string());
    assert_eq!(reset["reset"], true);
    assert_eq!(reset["seq"], base + seqs.len() as u64);
    assert!(reset.to_string().len() > 4_000_000);
}
