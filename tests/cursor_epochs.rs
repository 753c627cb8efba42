//! A client away while Redis lost a thread's history (docs/protocol.md,
//! "Cursors"; docs/operations.md, "Redis"): once the new journal is past the
//! seq it holds, resuming from that seq would splice the new history onto
//! the old one. The epoch of the history is part of every cursor a client
//! holds — the WebSocket `ack` of a `subscribe` or `run`, the SSE ids — so a
//! cursor from the lost history gets a reset snapshot, on the node that held
//! the thread and on one that never did, over WebSocket and SSE.

mod common;
use common::*;
use serde_json::{Value, json};

async fn node(redis: &RedisServer, name: &str, py: &PyAgent) -> Gateway {
    let store = redis.store_config(name) + "lease_ttl = \"2s\"\n";
    Gateway::start(&format!(
        "{store}[[agents]]\nid = \"ok\"\nurl = \"{}\"\n",
        py.url("ok")
    ))
    .await
}

fn run_input(run: &str) -> Value {
    let mut body = input("away", run, "hello");
    body["messages"][0]["id"] = format!("u-{run}").into();
    body
}

/// The SSE join stream's text until it holds `needle` (and the frame it is in).
async fn read_sse_until(
    gw: &Gateway,
    t: &str,
    query: &str,
    resume: Option<&str>,
    needle: &str,
) -> String {
    let mut req = http()
        .get(gw.url(&format!("/v1/threads/away/events{query}")))
        .bearer_auth(t);
    if let Some(id) = resume {
        req = req.header("last-event-id", id);
    }
    let mut resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = String::new();
    loop {
        if let Some(at) = body.find(needle)
            && let Some(end) = body[at..].find("\n\n")
        {
            body.truncate(at + end + 2);
            return body;
        }
        let chunk = tokio::time::timeout(WAIT, resp.chunk())
            .await
            .unwrap_or_else(|_| panic!("no {needle} in {body}"))
            .unwrap()
            .expect("the join stream ended");
        body.push_str(&String::from_utf8_lossy(&chunk));
    }
}

fn last_id(body: &str) -> String {
    body.lines()
        .rev()
        .find_map(|l| l.strip_prefix("id: "))
        .expect("an id")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_into_a_flushed_history_gets_a_reset_not_the_new_history_spliced_on() {
    let redis = RedisServer::start().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let a = node(&redis, "a", &py).await;
    let b = node(&redis, "b", &py).await;
    let t = token(json!({"sub": "alice"}));

    let (status, body) = post_run(&a.run_url("ok"), &t, &run_input("r1")).await;
    assert_eq!(status, 200, "{body}");
    let held = sse_events(&body).len() as u64;

    // A WebSocket client on node b reads the thread, learns its cursor, leaves.
    let mut ws = Ws::connect(&b, WsAuth::Header(&t)).await.unwrap();
    ws.send(json!({"type": "subscribe", "id": "s", "threadId": "away", "after": 0}))
        .await;
    let ack = ws.recv().await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let epoch = ack["epoch"].as_str().map(str::to_owned);
    let frames = ws.recv_until(|f| f["seq"] == held).await;
    assert_eq!(seqs(&frames), (1..=held).collect::<Vec<_>>());
    drop(ws);
    // An SSE reader on node a, up to the same seq.
    let sse = read_sse_until(&a, &t, "", None, "RUN_FINISHED").await;
    let sse_cursor = last_id(&sse);

    // Redis loses everything; the thread goes on past the seq they hold.
    assert_eq!(redis.cli(&["FLUSHALL"]).trim(), "OK");
    until_ready_is(&a, 503).await;
    until_ready_is(&a, 200).await;
    for run in ["r2", "r3"] {
        let (status, body) = post_run(&a.run_url("ok"), &t, &run_input(run)).await;
        assert_eq!(status, 200, "{body}");
    }
    let now = json_of(http().get(a.url("/v1/threads/away")).bearer_auth(&t)).await;
    let last = now["seq"].as_u64().unwrap();
    assert!(last > held, "the new journal is past the cursor: {now}");
    // A node that never held the thread.
    let c = node(&redis, "c", &py).await;

    for gw in [&b, &a, &c] {
        // WebSocket: the cursor it holds, as the client package sends it.
        let mut ws = Ws::connect(gw, WsAuth::Header(&t)).await.unwrap();
        let mut subscribe =
            json!({"type": "subscribe", "id": "s", "threadId": "away", "after": held});
        if let Some(e) = &epoch {
            subscribe["epoch"] = e.clone().into();
        }
        ws.send(subscribe).await;
        let ack = ws.recv().await;
        assert_eq!(ack["type"], "ack", "{ack}");
        let first = ws.recv().await;
        assert_eq!(
            first["type"], "snapshot",
            "a reset, not events spliced on: {first}"
        );
        assert_eq!(first["reset"], true, "{first}");
        assert_eq!(first["seq"], last, "{first}");
        assert_eq!(first["messages"], now["messages"]);
        assert_ne!(ack["epoch"].as_str(), epoch.as_deref(), "{ack}");

        // SSE: a browser's own reconnect with the id it last got ...
        let resumed = read_sse_until(gw, &t, "", Some(&sse_cursor), "agui-gateway/snapshot").await;
        let events = sse_events(&resumed);
        assert_eq!(events[0]["type"], "RUN_ERROR", "{resumed}");
        assert_eq!(events[0]["code"], "journal_lost", "{resumed}");
        let snap = events
            .iter()
            .find(|e| e["name"] == "agui-gateway/snapshot")
            .unwrap();
        assert_eq!(snap["value"]["reset"], true, "{resumed}");
        assert!(
            !events.iter().any(|e| e["type"] == "TEXT_MESSAGE_CONTENT"),
            "nothing of the new history as if it followed the old: {resumed}"
        );
        // ... and a fresh start at it.
        let fresh = read_sse_until(
            gw,
            &t,
            &format!("?after={sse_cursor}"),
            None,
            "agui-gateway/snapshot",
        )
        .await;
        let events = sse_events(&fresh);
        assert_eq!(events[0]["type"], "RUN_STARTED", "{fresh}");
        let snap = events
            .iter()
            .find(|e| e["name"] == "agui-gateway/snapshot")
            .unwrap();
        assert_eq!(snap["value"]["reset"], true, "{fresh}");
    }
}

/// A plain numeric cursor (a client from before epochs) works as it did,
/// and a cursor of the history the journal holds resumes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_of_the_history_held_resumes_and_a_plain_seq_still_works() {
    let redis = RedisServer::start().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let a = node(&redis, "a", &py).await;
    let t = token(json!({"sub": "alice"}));
    let (status, body) = post_run(&a.run_url("ok"), &t, &run_input("r1")).await;
    assert_eq!(status, 200, "{body}");
    let held = sse_events(&body).len() as u64;
    let sse = read_sse_until(&a, &t, "", None, "RUN_FINISHED").await;
    let cursor = last_id(&sse);
    let (seq, epoch) = cursor
        .split_once('.')
        .expect("an epoch in SSE ids on Redis");
    assert_eq!(seq, held.to_string());
    assert_eq!(epoch.len(), 8, "{cursor}");
    let (status, body) = post_run(&a.run_url("ok"), &t, &run_input("r2")).await;
    assert_eq!(status, 200, "{body}");
    for id in [cursor.as_str(), seq] {
        let resumed = read_sse_until(&a, &t, "", Some(id), "RUN_FINISHED").await;
        let events = sse_events(&resumed);
        assert_eq!(events[0]["type"], "RUN_STARTED", "{resumed}");
        assert_eq!(events[0]["runId"], "r2", "{resumed}");
    }
    let mut ws = Ws::connect(&a, WsAuth::Header(&t)).await.unwrap();
    ws.send(json!({"type": "subscribe", "id": "s", "threadId": "away", "after": cursor}))
        .await;
    let ack = ws.recv().await;
    assert_eq!(ack["epoch"], epoch, "{ack}");
    let first = ws.recv().await;
    assert_eq!(first["seq"], held + 1, "{first}");
    // A malformed cursor is refused with a stable code.
    let bad = http()
        .get(a.url("/v1/threads/away/events?after=12.not-hex!"))
        .bearer_auth(&t)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let e: Value = bad.json().await.unwrap();
    assert_eq!(e["error"]["code"], "invalid");
}

/// A thread's event stream deleted while its meta hash survives (what
/// eviction or a careless `DEL` does): appends go on at the hash's last seq,
/// and a node loading the thread would show what came after as the whole
/// conversation, at seqs clients hold of the old one. The gap is found, the
/// history restarted under a new epoch, and a cursor into the old one gets a
/// reset snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_event_stream_is_found_and_cursors_into_it_are_reset() {
    let redis = RedisServer::start().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let a = node(&redis, "a", &py).await;
    let t = token(json!({"sub": "alice"}));
    let (status, body) = post_run(&a.run_url("ok"), &t, &run_input("r1")).await;
    assert_eq!(status, 200, "{body}");
    let held = sse_events(&body).len() as u64;
    let mut ws = Ws::connect(&a, WsAuth::Header(&t)).await.unwrap();
    ws.send(json!({"type": "subscribe", "id": "s", "threadId": "away", "after": 0}))
        .await;
    let ack = ws.recv().await;
    let epoch = ack["epoch"].as_str().expect("an epoch on Redis").to_owned();
    ws.recv_until(|f| f["seq"] == held).await;
    drop(ws);

    let stream = redis.cli(&["--scan", "--pattern", "*away*:ev"]);
    let stream = stream.trim();
    assert!(!stream.is_empty(), "the thread's stream key");
    assert_eq!(redis.cli(&["DEL", stream]).trim(), "1");
    let (status, body) = post_run(&a.run_url("ok"), &t, &run_input("r2")).await;
    assert_eq!(status, 200, "{body}");

    // A node that never held the thread.
    let c = node(&redis, "c", &py).await;
    let mut ws = Ws::connect(&c, WsAuth::Header(&t)).await.unwrap();
    ws.send(
        json!({"type": "subscribe", "id": "s", "threadId": "away", "after": held, "epoch": epoch}),
    )
    .await;
    let ack = ws.recv().await;
    assert_eq!(ack["type"], "ack", "{ack}");
    assert_ne!(ack["epoch"], epoch, "a new history: {ack}");
    let first = ws.recv().await;
    assert_eq!(
        first["type"], "snapshot",
        "a reset, not r2 spliced onto r1: {first}"
    );
    assert_eq!(first["reset"], true, "{first}");
    c.proc.expect_stderr("JOURNAL LOST HISTORY").await;
    assert!(
        c.proc.stderr().contains("event stream starts after seq"),
        "{}",
        c.proc.stderr()
    );
    // The thread goes on, on both nodes.
    let (status, body) = post_run(&c.run_url("ok"), &t, &run_input("r3")).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = post_run(&a.run_url("ok"), &t, &run_input("r4")).await;
    assert_eq!(status, 200, "{body}");
}

/// Redis restored from an older snapshot while a client was away: the
/// journal keeps its old epoch in the snapshot, and the thread goes on from
/// the older seq; once it is past the client's seq, that cursor names new
/// events. The node that finds the loss renews the epoch, so the cursor
/// gets a reset — on that node and on one that never held the thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_into_history_lost_to_an_older_snapshot_gets_a_reset() {
    let mut redis = RedisServer::start().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let a = node(&redis, "a", &py).await;
    let t = token(json!({"sub": "alice"}));
    let (status, body) = post_run(&a.run_url("ok"), &t, &run_input("r1")).await;
    assert_eq!(status, 200, "{body}");
    let older = redis.snapshot_bytes();
    let (status, body) = post_run(&a.run_url("ok"), &t, &run_input("r2")).await;
    assert_eq!(status, 200, "{body}");
    let now = json_of(http().get(a.url("/v1/threads/away")).bearer_auth(&t)).await;
    let held = now["seq"].as_u64().unwrap();
    let mut ws = Ws::connect(&a, WsAuth::Header(&t)).await.unwrap();
    ws.send(json!({"type": "subscribe", "id": "s", "threadId": "away", "after": 0}))
        .await;
    let epoch = ws.recv().await["epoch"].as_str().unwrap().to_owned();
    ws.recv_until(|f| f["seq"] == held).await;
    drop(ws);

    redis.kill().await;
    std::fs::write(redis.data_dir().join("dump.rdb"), older).unwrap();
    redis.start_again().await;
    // The thread goes on from the older seq until it is past the client's
    // (the first run after the restore may be the one that finds the loss).
    let mut runs = 3;
    let last = loop {
        assert!(runs < 20, "the thread does not go on past seq {held}");
        let (status, body) = post_run(&a.run_url("ok"), &t, &run_input(&format!("r{runs}"))).await;
        runs += 1;
        if status == 503 {
            // Redis is back, the node's connection not yet.
            until_ready_is(&a, 200).await;
            continue;
        }
        assert_eq!(status, 200, "{body}");
        let now = json_of(http().get(a.url("/v1/threads/away")).bearer_auth(&t)).await;
        let last = now["seq"].as_u64().unwrap();
        if last > held + 1 {
            break last;
        }
    };
    a.proc.expect_stderr("JOURNAL LOST HISTORY").await;
    let c = node(&redis, "c", &py).await;
    for gw in [&a, &c] {
        let mut ws = Ws::connect(gw, WsAuth::Header(&t)).await.unwrap();
        ws.send(json!({"type": "subscribe", "id": "s", "threadId": "away", "after": held, "epoch": epoch}))
            .await;
        let ack = ws.recv().await;
        assert_ne!(ack["epoch"], epoch, "a new history: {ack}");
        let first = ws.recv().await;
        assert_eq!(
            first["type"], "snapshot",
            "a reset, not the new events at its seqs: {first}"
        );
        assert_eq!(first["reset"], true, "{first}");
        assert_eq!(first["seq"], last, "{first}");
    }
}
