//! Shared sessions over WebSocket, against the real gateway binary with real
//! upstream agents (the built-in demo agent over HTTP, and the scripted
//! `ag-ui-protocol` agent) and real WebSocket clients.

mod common;

use agui_gateway::protocol::Event;
use agui_gateway::protocol::fold::Fold;
use common::*;
use serde_json::{Value, json};

/// Demo agents with each strategy; slow enough (15 ms a token) that runs overlap.
const DEMO: &str = "[demo]\nenabled = true\ntoken_delay = \"15ms\"\n\
    [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n\
    [[agents]]\nid = \"queue\"\nurl = \"demo:\"\nstrategy = \"enqueue\"\n\
    [[agents]]\nid = \"preempt\"\nurl = \"demo:\"\nstrategy = \"interrupt\"\n\
    [[agents]]\nid = \"flexible\"\nurl = \"demo:\"\nallow_strategy_override = true\n";

async fn ws(gw: &Gateway, claims: Value) -> Ws {
    Ws::connect(gw, WsAuth::Header(&token(claims)))
        .await
        .expect("upgrade")
}

fn run_cmd(agent: &str, thread: &str, run: &str, text: &str) -> Value {
    json!({"type": "run", "id": format!("cmd-{run}"), "agent": agent, "threadId": thread, "runId": run,
           "messages": [{"id": format!("u-{run}"), "role": "user", "content": text}]})
}

/// Event frames of one run, from the frame after `ack` until its terminal event.
async fn until_terminal(ws: &mut Ws) -> Vec<Value> {
    ws.recv_until(is_terminal_frame).await
}

#[tokio::test]
async fn viewers_and_runner_see_identical_gapless_seqs_and_late_joiner_snapshot_matches() {
    let gw = Gateway::start(DEMO).await;
    let mut viewers = Vec::new();
    let mut runner = ws(&gw, json!({"sub": "alice"})).await;
    runner.send(run_cmd("demo", "shared", "r1", "first")).await;
    // The run's first events may come before its ack (docs/protocol.md):
    // the runner subscribes before the run starts.
    let mut early = runner.recv_until(|f| f["type"] == "ack").await;
    let ack = early.pop().unwrap();
    assert_eq!(
        (ack["type"].as_str(), ack["runId"].as_str()),
        (Some("ack"), Some("r1")),
        "{ack}"
    );
    // Three viewers with view rights join while the run streams.
    for i in 0..3 {
        let mut v = ws(
            &gw,
            json!({"sub": format!("viewer{i}"), "threads": {"shared": ["view"]}}),
        )
        .await;
        v.send(json!({"type": "subscribe", "threadId": "shared", "after": 0}))
            .await;
        viewers.push(v);
    }
    let mut runner_frames = early;
    if !runner_frames.iter().any(is_terminal_frame) {
        runner_frames.extend(until_terminal(&mut runner).await);
    }
    let runner_seqs = seqs(&runner_frames);
    assert_eq!(
        runner_seqs,
        (1..=runner_seqs.len() as u64).collect::<Vec<_>>(),
        "gapless from 1"
    );
    for v in &mut viewers {
        let frames = until_terminal(v).await;
        assert_eq!(seqs(&frames), runner_seqs, "same seq list");
        let events: Vec<&Value> = frames.iter().map(|f| &f["event"]).collect();
        let runner_events: Vec<&Value> = runner_frames.iter().map(|f| &f["event"]).collect();
        assert_eq!(events, runner_events, "same events");
    }
    // The journal's RUN_STARTED carries the user's message, so it is in the fold.
    assert_eq!(
        runner_frames[0]["event"]["input"]["messages"][0]["content"],
        "first"
    );

    // A late joiner's snapshot equals the fold of what the early viewers saw.
    let mut fold = Fold::new();
    for f in &runner_frames {
        fold.apply(
            f["seq"].as_u64().unwrap(),
            &Event::build(f["event"].clone()),
        );
    }
    let mut late = ws(&gw, json!({"sub": "late", "threads": {"shared": ["view"]}})).await;
    late.send(json!({"type": "subscribe", "threadId": "shared"}))
        .await;
    let snap = late.recv().await;
    assert_eq!(snap["type"], "snapshot");
    assert_eq!(snap["seq"], fold.seq);
    assert_eq!(snap["messages"], fold.to_json()["messages"]);
    assert_eq!(&snap["state"], fold.state());
    assert_eq!(snap["run"]["status"], "finished");
    assert_eq!(snap["run"]["agent"], "demo");
    assert_eq!(snap["messages"][0]["content"], "first");

    // The same snapshot over HTTP, and the thread in the caller's list.
    let http_snap: Value = json_of(
        http()
            .get(gw.url("/v1/threads/shared"))
            .bearer_auth(token(json!({"sub": "alice"}))),
    )
    .await;
    assert_eq!(http_snap["messages"], snap["messages"]);
    let list: Value = json_of(
        http()
            .get(gw.url("/v1/threads"))
            .bearer_auth(token(json!({"sub": "alice"}))),
    )
    .await;
    assert_eq!(list["threads"][0]["threadId"], "shared");
    assert_eq!(list["threads"][0]["status"], "finished");
}

#[tokio::test]
async fn second_run_uses_history_the_gateway_keeps() {
    let gw = Gateway::start(DEMO).await;
    let mut c = ws(&gw, json!({})).await;
    c.send(run_cmd("demo", "hist", "r1", "one")).await;
    until_terminal(&mut c).await;
    c.send(run_cmd("demo", "hist", "r2", "two")).await;
    let frames = until_terminal(&mut c).await;
    // Demo counts turns from the state the gateway sends back: 1 → 2.
    let delta = frames
        .iter()
        .find(|f| f["event"]["type"] == "STATE_DELTA")
        .unwrap();
    assert_eq!(delta["event"]["delta"][0]["value"], 2);
    let started = frames
        .iter()
        .find(|f| f["event"]["type"] == "RUN_STARTED")
        .unwrap();
    let msgs = started["event"]["input"]["messages"].as_array().unwrap();
    assert_eq!(
        msgs.len(),
        1,
        "journal input holds only the new message: {msgs:?}"
    );
    let mut late = ws(&gw, json!({})).await;
    late.send(json!({"type": "subscribe", "threadId": "hist"}))
        .await;
    let snap = late.recv().await;
    let users: Vec<_> = snap["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].clone())
        .collect();
    assert_eq!(users, [json!("one"), json!("two")]);
}

#[tokio::test]
async fn disconnect_mid_run_and_resume_after_is_gapless_without_duplicates() {
    let gw = Gateway::start(DEMO).await;
    let mut runner = ws(&gw, json!({"sub": "alice"})).await;
    runner.send(run_cmd("demo", "drop", "r1", "hello")).await;
    assert_eq!(runner.recv().await["type"], "ack");
    let mut viewer = ws(&gw, json!({"sub": "alice"})).await;
    viewer
        .send(json!({"type": "subscribe", "threadId": "drop", "after": 0}))
        .await;
    let mut seen = Vec::new();
    while seen.len() < 5 {
        let f = viewer.recv().await;
        assert!(f.get("close").is_none() && f["type"] != "error", "{f}");
        if f["type"] == "event" {
            seen.push(f);
        }
    }
    drop(viewer); // vanish mid-run
    let last = seen.last().unwrap()["seq"].as_u64().unwrap();
    let mut back = ws(&gw, json!({"sub": "alice"})).await;
    back.send(json!({"type": "subscribe", "threadId": "drop", "after": last}))
        .await;
    seen.extend(until_terminal(&mut back).await);
    let all = seqs(&seen);
    let runner_all = seqs(&until_terminal(&mut runner).await);
    assert_eq!(
        all, runner_all,
        "gapless, no duplicates, same as the runner"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_viewer_catches_up_from_the_journal_while_others_finish() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&format!(
        "[threads]\nmax_events = 100000\n[[agents]]\nid = \"quick\"\nurl = \"{}\"\n[[agents]]\nid = \"flood\"\nurl = \"{}\"\n",
        py.url("ok"),
        py.url("flood")
    ))
    .await;
    let t = token(json!({"sub": "alice"}));
    // A quick first run creates the thread, so viewers can be live before the flood.
    let mut runner = ws(&gw, json!({"sub": "alice"})).await;
    runner.send(run_cmd("quick", "big", "r0", "hi")).await;
    let first = until_terminal(&mut runner).await;
    let base = *seqs(&first).last().unwrap();
    let mut stalled = Ws::connect_with(&gw, WsAuth::Header(&t), None, Some(4096))
        .await
        .unwrap();
    stalled
        .send(json!({"type": "subscribe", "id": "s", "threadId": "big", "after": base}))
        .await;
    assert_eq!(stalled.recv().await["type"], "ack");
    // 48 viewers + the runner read at full speed beside the stalled one: 50.
    let mut fast = Vec::new();
    for _ in 0..48 {
        let mut v = ws(&gw, json!({"sub": "alice"})).await;
        v.send(json!({"type": "subscribe", "id": "s", "threadId": "big", "after": base}))
            .await;
        assert_eq!(v.recv().await["type"], "ack");
        fast.push(v);
    }
    runner.send(run_cmd("flood", "big", "r1", "go")).await;
    assert_eq!(runner.recv().await["type"], "ack");
    // Everyone but the stalled viewer reads concurrently, at full speed.
    let mut runner_again = ws(&gw, json!({"sub": "alice"})).await;
    fast.push(runner);
    let results = futures::future::join_all(fast.into_iter().map(|mut v| async move {
        let frames = until_terminal(&mut v).await;
        (frames.last().unwrap().clone(), seqs(&frames).len())
    }))
    .await;
    for (last, n) in results {
        assert_eq!(
            last["event"]["type"], "RUN_FINISHED",
            "{last} after {n} events"
        );
        assert!(n >= 10004, "every event arrived: {n}");
    }
    // The stalled viewer now reads: what was buffered, then the rest from
    // the journal (it fell behind its 1 MiB budget: it is not cut off).
    let frames = until_terminal(&mut stalled).await;
    assert_eq!(
        seqs(&frames),
        (base + 1..=base + 10004).collect::<Vec<_>>(),
        "gapless, no duplicates"
    );
    assert_eq!(frames.last().unwrap()["event"]["type"], "RUN_FINISHED");
    // And it is live again.
    runner_again
        .send(run_cmd("quick", "big", "r2", "again"))
        .await;
    let live = until_terminal(&mut stalled).await;
    assert_eq!(seqs(&live)[0], base + 10005);
}

#[tokio::test]
async fn tenants_are_isolated_and_grants_are_enforced() {
    let gw = Gateway::start(&format!(
        "{DEMO}\n[[grants]]\nrole = \"support\"\nthreads = \"sec-*\"\npermissions = [\"view\"]\n"
    ))
    .await;
    let mut owner = ws(&gw, json!({"sub": "owner", "tenant": "acme"})).await;
    owner
        .send(run_cmd("demo", "sec-1", "r1", "secret plans"))
        .await;
    until_terminal(&mut owner).await;

    let subscribe = json!({"type": "subscribe", "id": "s", "threadId": "sec-1"});
    // Same thread id, other tenant: not found; so is a thread that does not exist.
    let mut other = ws(&gw, json!({"sub": "owner", "tenant": "globex"})).await;
    other.send(subscribe.clone()).await;
    let e = other.recv().await;
    assert_eq!(
        (e["type"].as_str(), e["code"].as_str(), e["id"].as_str()),
        (Some("error"), Some("not_found"), Some("s"))
    );
    other
        .send(json!({"type": "subscribe", "threadId": "nope"}))
        .await;
    let missing = other.recv().await;
    assert_eq!(missing["code"], "not_found");
    assert_eq!(
        missing["message"], e["message"],
        "indistinguishable from a missing thread"
    );
    // Same tenant, no grant: not found.
    let mut stranger = ws(&gw, json!({"sub": "eve", "tenant": "acme"})).await;
    stranger.send(subscribe.clone()).await;
    assert_eq!(stranger.recv().await["code"], "not_found");
    // Role grant (config): may view, may not run.
    let mut support = ws(
        &gw,
        json!({"sub": "sam", "tenant": "acme", "roles": ["support"]}),
    )
    .await;
    support
        .send(json!({"type": "subscribe", "threadId": "sec-1"}))
        .await;
    assert_eq!(support.recv().await["type"], "snapshot");
    support.send(run_cmd("demo", "sec-1", "r2", "x")).await;
    assert_eq!(support.recv().await["code"], "forbidden");
    // Token grant: view + run.
    let mut helper = ws(
        &gw,
        json!({"sub": "hal", "tenant": "acme", "threads": {"sec-*": ["view", "run"]}}),
    )
    .await;
    helper.send(run_cmd("demo", "sec-1", "r3", "help")).await;
    assert_eq!(helper.recv().await["type"], "ack");
    // HTTP routes follow the same rules.
    let status = |claims: Value| {
        let url = gw.url("/v1/threads/sec-1");
        async move {
            http()
                .get(url)
                .bearer_auth(token(claims))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(
        status(json!({"sub": "owner", "tenant": "globex"})).await,
        404
    );
    assert_eq!(status(json!({"sub": "eve", "tenant": "acme"})).await, 404);
    assert_eq!(
        status(json!({"sub": "sam", "tenant": "acme", "roles": ["support"]})).await,
        200
    );
    let list: Value = json_of(
        http()
            .get(gw.url("/v1/threads"))
            .bearer_auth(token(json!({"sub": "eve", "tenant": "acme"}))),
    )
    .await;
    assert_eq!(list["threads"], json!([]), "eve lists nothing");
}

#[tokio::test]
async fn run_strategies_reject_enqueue_interrupt() {
    let gw = Gateway::start(DEMO).await;
    let mut c = ws(&gw, json!({})).await;

    // reject (default): the second run is refused with conflict.
    c.send(run_cmd("demo", "rej", "a", "long one")).await;
    assert_eq!(c.recv().await["type"], "ack");
    c.send(run_cmd("demo", "rej", "b", "second")).await;
    let frames = c.recv_until(|f| f["type"] == "error").await;
    assert_eq!(frames.last().unwrap()["code"], "conflict");
    c.recv_until(is_terminal_frame).await;

    // enqueue: the second run starts after the first ends.
    c.send(run_cmd("queue", "enq", "a", "first")).await;
    c.send(run_cmd("queue", "enq", "b", "second")).await;
    let mut frames = Vec::new();
    while frames.iter().filter(|f| is_terminal_frame(f)).count() < 2 {
        let f = c.recv().await;
        assert!(f.get("close").is_none(), "{f}");
        frames.push(f);
    }
    let acks: Vec<_> = frames.iter().filter(|f| f["type"] == "ack").collect();
    assert_eq!(acks[1]["queued"], 1);
    let runs: Vec<(String, String)> = frames
        .iter()
        .filter(|f| {
            f["type"] == "event"
                && matches!(
                    f["event"]["type"].as_str(),
                    Some("RUN_STARTED" | "RUN_FINISHED")
                )
        })
        .map(|f| {
            (
                f["event"]["type"].as_str().unwrap().to_owned(),
                f["event"]["runId"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expect = [
        ("RUN_STARTED", "a"),
        ("RUN_FINISHED", "a"),
        ("RUN_STARTED", "b"),
        ("RUN_FINISHED", "b"),
    ];
    assert_eq!(runs, expect.map(|(t, r)| (t.to_owned(), r.to_owned())));

    // interrupt: the first run is cancelled, then the second runs.
    c.send(run_cmd("preempt", "int", "a", "first")).await;
    c.recv_until(|f| f["type"] == "event" && f["event"]["type"] == "TEXT_MESSAGE_CONTENT")
        .await;
    c.send(run_cmd("preempt", "int", "b", "second")).await;
    let frames = c
        .recv_until(|f| is_terminal_frame(f) && f["event"]["runId"] == "b")
        .await;
    let cancelled = frames
        .iter()
        .find(|f| f["event"]["type"] == "RUN_FINISHED" && f["event"]["runId"] == "a")
        .unwrap();
    assert_eq!(cancelled["event"]["outcome"]["type"], "cancelled");
    assert_eq!(
        frames.last().unwrap()["event"]["outcome"]["type"],
        "success"
    );
    // The cancelled run's stream is still valid AG-UI (open message closed first).
    let mut v = agui_gateway::protocol::verify::Verifier::new();
    let mut snapshot_ws = ws(&gw, json!({})).await;
    snapshot_ws
        .send(json!({"type": "subscribe", "threadId": "int", "after": 0}))
        .await;
    for f in until_terminal(&mut snapshot_ws)
        .await
        .iter()
        .filter(|f| f["type"] == "event")
    {
        v.check(&Event::build(f["event"].clone())).unwrap();
    }

    // Strategy override: only where the agent allows it.
    c.send(json!({"type": "run", "id": "o1", "agent": "demo", "threadId": "ovr", "strategy": "enqueue"})).await;
    assert_eq!(
        c.recv_until(|f| f["id"] == "o1").await.last().unwrap()["code"],
        "forbidden"
    );
    c.send(json!({"type": "run", "id": "o2", "agent": "flexible", "threadId": "ovr", "strategy": "enqueue", "messages": []})).await;
    assert_eq!(
        c.recv_until(|f| f["id"] == "o2").await.last().unwrap()["type"],
        "ack"
    );
}

/// Issue 19 item 10: the slot of a run that compacted the journal was
/// given back only after the compaction, so a run sent on its terminal
/// event got `conflict` (4–10 of 15 on a long-running gateway).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_sent_on_the_previous_runs_end_is_taken_when_that_run_compacted() {
    // Every run leaves more than `max_events` behind: each one compacts.
    let gw = Gateway::start(
        "[demo]\nenabled = true\ntoken_delay = \"1ms\"\n[threads]\nmax_events = 2\n\
         [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n",
    )
    .await;
    let mut conns = [ws(&gw, json!({})).await];
    let refused = back_to_back_runs(&mut conns, ("demo", "b2b"), 15).await;
    assert!(refused.is_empty(), "refused: {refused:?}");
    // The runs did compact: an old position gets the reset snapshot.
    let mut late = ws(&gw, json!({})).await;
    late.send(json!({"type": "subscribe", "id": "s", "threadId": "b2b", "after": 1}))
        .await;
    let frames = late.recv_until(|f| f["type"] == "snapshot").await;
    assert_eq!(frames.last().unwrap()["reset"], true, "{frames:?}");
}

#[tokio::test]
async fn http_face_runs_are_journaled_and_seen_live() {
    let gw = Gateway::start(DEMO).await;
    let mut viewer = ws(&gw, json!({"sub": "alice"})).await;
    // The thread does not exist yet: create it with a WS run first.
    viewer.send(run_cmd("demo", "mixed", "r1", "ws run")).await;
    until_terminal(&mut viewer).await;
    let (status, body) = post_run(
        &gw.run_url("demo"),
        &token(json!({"sub": "alice"})),
        &json!({"threadId": "mixed", "runId": "r2", "messages": [{"id": "h1", "role": "user", "content": "http run"}], "tools": [], "context": []}),
    )
    .await;
    assert_eq!(status, 200);
    let http_events = sse_events(&body);
    assert!(
        http_events[0].get("input").is_none(),
        "the HTTP requester gets the agent's own RUN_STARTED"
    );
    let live = until_terminal(&mut viewer).await;
    assert_eq!(live.len(), http_events.len());
    assert_eq!(
        live[0]["event"]["input"]["messages"][0]["content"],
        "http run"
    );
    assert!(
        body.contains(&format!("id: {}\n", live[0]["seq"])),
        "SSE frames carry the journal seq"
    );
}

#[tokio::test]
async fn sse_join_stream_honours_after_and_last_event_id() {
    let gw = Gateway::start(DEMO).await;
    let mut c = ws(&gw, json!({"sub": "alice"})).await;
    c.send(run_cmd("demo", "join", "r1", "x")).await;
    let n = seqs(&until_terminal(&mut c).await).len() as u64;
    let read = |query: &'static str, last: Option<u64>| {
        let url = gw.url(&format!("/v1/threads/join/events{query}"));
        async move {
            let mut req = http().get(url).bearer_auth(token(json!({"sub": "alice"})));
            if let Some(l) = last {
                req = req.header("last-event-id", l.to_string());
            }
            let resp = req.send().await.unwrap();
            assert_eq!(resp.headers()["content-type"], "text/event-stream");
            let mut body = resp.bytes_stream();
            let mut text = String::new();
            use futures::StreamExt;
            while !text.contains("RUN_FINISHED") {
                let chunk = tokio::time::timeout(WAIT, body.next())
                    .await
                    .unwrap()
                    .unwrap()
                    .unwrap();
                text.push_str(&String::from_utf8_lossy(&chunk));
            }
            text
        }
    };
    // The journal events' ids (events the gateway adds to keep a mid-run
    // start a valid AG-UI stream carry none): cursors, `<seq>` or, on
    // Redis, `<seq>.<epoch>` (docs/protocol.md, "Cursors").
    let ids = |text: &str| -> Vec<u64> {
        text.lines()
            .filter_map(|l| l.strip_prefix("id: "))
            .map(|id| id.split('.').next().unwrap().parse().unwrap())
            .collect()
    };
    let all = read("", None).await;
    assert_eq!(sse_events(&all).len() as u64, n);
    assert!(all.starts_with("id: 1\n") || all.starts_with("id: 1."));
    assert_eq!(ids(&all), (1..=n).collect::<Vec<_>>());
    let tail = read("?after=5", None).await;
    assert_eq!(ids(&tail), (6..=n).collect::<Vec<_>>());
    assert_eq!(
        sse_events(&tail)[0]["type"],
        "RUN_STARTED",
        "mid-run start opens the run"
    );
    let resumed = read("", Some(n - 2)).await;
    assert_eq!(ids(&resumed), [n - 1, n]);
}

#[tokio::test]
async fn sqlite_journal_survives_kill_9_and_the_open_run_is_closed() {
    let py = PyAgent::start("scripted_agent.py").await;
    let cfg = format!(
        "[[agents]]\nid = \"slow\"\nurl = \"{}\"\ntimeouts = {{ idle = \"1h\" }}\n",
        py.url("stall")
    );
    let mut gw = Gateway::start(&cfg).await;
    let mut c = ws(&gw, json!({"sub": "alice"})).await;
    c.send(run_cmd("slow", "crash", "r1", "before the crash"))
        .await;
    let before = c
        .recv_until(|f| f["event"]["type"] == "TEXT_MESSAGE_START")
        .await;
    let before_seqs = seqs(&before);
    // kill -9: no shutdown path runs.
    gw.signal("KILL");
    gw.proc.child.wait().await.unwrap();
    drop(c);

    let gw2 = gw.restart().await;
    let mut c = ws(&gw2, json!({"sub": "alice"})).await;
    c.send(json!({"type": "subscribe", "threadId": "crash", "after": 0}))
        .await;
    let after = c.recv_until(is_terminal_frame).await;
    let after_seqs = seqs(&after);
    assert_eq!(
        &after_seqs[..before_seqs.len()],
        &before_seqs[..],
        "journal intact"
    );
    assert_eq!(
        after_seqs,
        (1..=after_seqs.len() as u64).collect::<Vec<_>>(),
        "gapless"
    );
    let last = after.last().unwrap();
    assert_eq!(last["event"]["type"], "RUN_ERROR");
    // One process closes what it left open when it starts again; across
    // nodes, the dead node's lease expires and a node closes the run.
    let closed_as = if test_nodes() > 1 {
        "gateway_node_lost"
    } else {
        "gateway_restarted"
    };
    assert_eq!(last["event"]["code"], closed_as);
    assert_eq!(
        after[0]["event"]["input"]["messages"][0]["content"],
        "before the crash"
    );
    // The thread works again afterwards, with its creator intact.
    c.send(json!({"type": "subscribe", "id": "again", "threadId": "crash"}))
        .await;
    let snap = c.recv_until(|f| f["type"] == "snapshot").await;
    assert_eq!(snap.last().unwrap()["run"]["status"], "error");
}

#[tokio::test]
async fn auth_variants_expiry_and_refresh() {
    let gw = Gateway::start(&format!("{DEMO}\n[ws]\nauth_timeout = \"500ms\"\nallowed_origins = [\"https://app.example.com\", \"http://localhost:*\"]\n")).await;
    let t = token(json!({}));
    // Subprotocol (the gateway answers agui-gateway.v1; checked in the helper).
    let mut s = Ws::connect(&gw, WsAuth::Subprotocol(&t)).await.unwrap();
    s.send(json!({"type": "ping", "id": 1})).await;
    assert_eq!(s.recv().await, json!({"type": "pong", "id": 1}));
    // First-frame auth.
    let mut f = Ws::connect(&gw, WsAuth::None).await.unwrap();
    f.send(json!({"type": "auth", "id": "a", "token": t})).await;
    assert_eq!(f.recv().await["type"], "ack");
    // No token in time: 4001.
    let mut n = Ws::connect(&gw, WsAuth::None).await.unwrap();
    assert_eq!(n.recv().await["close"], 4001);
    // Bad token in the first frame: 4001.
    let mut b = Ws::connect(&gw, WsAuth::None).await.unwrap();
    b.send(json!({"type": "auth", "token": "nope"})).await;
    assert_eq!(b.recv().await["close"], 4001);
    // Query tokens are off unless enabled: the upgrade is not authenticated.
    let mut q = Ws::connect(&gw, WsAuth::Query(&t)).await.unwrap();
    assert_eq!(q.recv().await["close"], 4001);
    // Bad header token: refused before the upgrade.
    assert_eq!(
        Ws::connect(&gw, WsAuth::Header("x.y.z")).await.err(),
        Some(401)
    );
    // Origins.
    let ok = Ws::connect_with(&gw, WsAuth::Header(&t), Some("http://localhost:3000"), None).await;
    assert!(ok.is_ok());
    let bad = Ws::connect_with(&gw, WsAuth::Header(&t), Some("https://evil.example"), None).await;
    assert_eq!(bad.err(), Some(403));

    // Expiry closes with 4001 …
    let now = jsonwebtoken::get_current_timestamp();
    let mut e = Ws::connect(&gw, WsAuth::Header(&token(json!({"exp": now + 2}))))
        .await
        .unwrap();
    let close = e.recv().await;
    assert_eq!(
        (close["close"].as_u64(), close["reason"].as_str()),
        (Some(4001), Some("token expired"))
    );
    // … unless refreshed in time (same user), and a different user is refused.
    let now = jsonwebtoken::get_current_timestamp();
    let mut r = Ws::connect(&gw, WsAuth::Header(&token(json!({"exp": now + 2}))))
        .await
        .unwrap();
    r.send(json!({"type": "auth", "id": "x", "token": token(json!({"sub": "mallory"}))}))
        .await;
    assert_eq!(r.recv().await["code"], "forbidden");
    r.send(json!({"type": "auth", "id": "r", "token": token(json!({}))}))
        .await;
    assert_eq!(r.recv().await["type"], "ack");
    tokio::time::sleep(std::time::Duration::from_secs(3)).await; // past the first token's exp
    r.send(json!({"type": "ping", "id": 2})).await;
    assert_eq!(r.recv().await, json!({"type": "pong", "id": 2}));
}

#[tokio::test]
async fn bad_frames_get_invalid_and_the_socket_stays_usable() {
    let gw = Gateway::start(&format!("{DEMO}\n[ws]\nmax_frame_bytes = 65536\n")).await;
    let mut c = ws(&gw, json!({})).await;
    use futures::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    c.stream
        .send(Message::Text("{not json".into()))
        .await
        .unwrap();
    assert_eq!(c.recv().await["code"], "invalid");
    c.send(json!({"id": 1})).await;
    assert!(c.recv().await["message"].as_str().unwrap().contains("type"));
    c.send(json!({"type": "dance", "id": 2})).await;
    let e = c.recv().await;
    assert_eq!(
        (e["code"].as_str(), e["id"].as_u64()),
        (Some("invalid"), Some(2))
    );
    c.send(json!({"type": "run", "agent": "demo", "threadId": "bad/id"}))
        .await;
    assert!(
        c.recv().await["message"]
            .as_str()
            .unwrap()
            .contains("threadId")
    );
    c.send(json!({"type": "run", "agent": "demo", "threadId": "ok", "messages": [{"id": "m", "role": "robot"}]})).await;
    assert!(
        c.recv().await["message"]
            .as_str()
            .unwrap()
            .contains("messages[0]")
    );
    c.send(json!({"type": "subscribe", "threadId": "ok", "after": -1}))
        .await;
    assert!(
        c.recv().await["message"]
            .as_str()
            .unwrap()
            .contains("after")
    );
    c.send(json!({"type": "ping", "id": 3})).await;
    assert_eq!(c.recv().await["type"], "pong");
    // Oversize frame: closed with 1009.
    c.send(json!({"type": "ping", "pad": "x".repeat(100_000)}))
        .await;
    assert_eq!(c.recv().await["close"], 1009);
}

/// Frames that break RFC 6455 get the RFC's close codes, not a socket that
/// just goes away: 1002 for framing errors, 1007 for a text frame that is not
/// UTF-8. The frames are written raw on the socket under the client library.
#[tokio::test]
async fn broken_websocket_frames_close_with_1002_and_invalid_utf8_with_1007() {
    use tokio::io::AsyncWriteExt;
    let gw = Gateway::start("").await;
    let t = token(json!({}));
    // A masked frame (mask key 0: the payload goes as is) with `head` as its
    // first byte: FIN, RSV bits and opcode.
    let masked = |head: u8, payload: &[u8]| {
        let mut frame = vec![head, 0x80 | payload.len() as u8, 0, 0, 0, 0];
        frame.extend_from_slice(payload);
        frame
    };
    let cases: [(&str, Vec<u8>, u64); 4] = [
        ("text that is not UTF-8", masked(0x81, &[0xC3, 0x28]), 1007),
        ("reserved bit set", masked(0xC1, b"{}"), 1002),
        ("unmasked client frame", vec![0x81, 0x02, b'{', b'}'], 1002),
        ("unknown opcode", masked(0x83, b"{}"), 1002),
    ];
    for (what, frame, code) in cases {
        let mut c = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
        // Alive and speaking the protocol first.
        c.send(json!({"type": "ping", "id": 1})).await;
        assert_eq!(c.recv().await["type"], "pong");
        c.stream.get_mut().write_all(&frame).await.unwrap();
        let close = c.recv().await;
        assert_eq!(close["close"], code, "{what}: {close}");
    }
}

#[tokio::test]
async fn sigterm_lets_the_run_finish_then_closes_viewers_with_1001_and_ends_join_streams() {
    if single_node_only("SIGTERM stops one process; tests/cluster.rs drains one node of two") {
        return;
    }
    let mut py = PyAgent::start("scripted_agent.py").await;
    let mut gw = Gateway::start(&format!(
        "[[agents]]\nid = \"gated\"\nurl = \"{}\"\ntimeouts = {{ idle = \"1h\" }}\n",
        py.url("gated")
    ))
    .await;
    let t = token(json!({"sub": "alice"}));
    let mut runner = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    runner
        .send(
            json!({"type": "run", "id": "r1", "agent": "gated", "threadId": "term", "runId": "r1",
                     "messages": [{"id": "u1", "role": "user", "content": "hi"}]}),
        )
        .await;
    runner
        .recv_until(|f| f["event"]["type"] == "TEXT_MESSAGE_CONTENT")
        .await;
    let join = http()
        .get(gw.url("/v1/threads/term/events?after=0"))
        .bearer_auth(&t)
        .send()
        .await
        .unwrap();
    assert_eq!(join.status(), 200);
    let join_body = tokio::spawn(async move { join.text().await.unwrap() });
    // A requester on the HTTP face, mid-run on another thread.
    let requester = {
        let (url, t) = (gw.run_url("gated"), t.clone());
        tokio::spawn(async move { post_run(&url, &t, &input("term-http", "h1", "hi")).await })
    };
    py.proc.expect_line("GATED h1").await;

    gw.signal("TERM");
    // Not ready, no new runs; the run in flight goes on.
    let deadline = std::time::Instant::now() + WAIT;
    while http().get(gw.url("/readyz")).send().await.unwrap().status() != 503 {
        assert!(std::time::Instant::now() < deadline, "still ready");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (status, body) = post_run(&gw.run_url("gated"), &t, &input("other", "x", "hi")).await;
    assert_eq!(status, 503, "{body}");
    http().post(py.url("release")).send().await.unwrap();

    // The runner's socket: the rest of the run, then close 1001.
    let rest = runner.recv_until(|f| f.get("close").is_some()).await;
    let (close, events) = rest.split_last().unwrap();
    assert_eq!(close["close"], 1001, "{close}");
    assert_eq!(
        events.last().unwrap()["event"]["type"],
        "RUN_FINISHED",
        "the close comes after the last event"
    );
    // The join stream ended after the terminal event.
    let text = join_body.await.unwrap();
    let last = sse_events(&text).pop().unwrap();
    assert_eq!(last["type"], "RUN_FINISHED", "{text}");
    // The HTTP requester's stream ended normally, with its run's end.
    let (status, body) = requester.await.unwrap();
    assert_eq!(status, 200, "{body}");
    let events = sse_events(&body);
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED", "{body}");
    assert!(gw.proc.child.wait().await.unwrap().success(), "exit 0");
    gw.proc.expect_stderr("journal flushed").await;
}

/// A run that outlasts the drain window is cancelled and journaled as
/// cancelled before the process exits 0: the next process finds it ended
/// (`RUN_FINISHED` outcome cancelled), never `gateway_restarted`. An HTTP
/// run queued behind it never starts; its requester gets `RUN_ERROR
/// unavailable` instead of a stream that just ends.
#[tokio::test]
async fn sigterm_with_a_run_past_the_drain_window_journals_it_cancelled() {
    if single_node_only("SIGTERM stops one process; tests/cluster.rs drains one node of two") {
        return;
    }
    let py = PyAgent::start("scripted_agent.py").await;
    let mut gw = Gateway::start_with_env(
        &format!(
            "[[agents]]\nid = \"gated\"\nurl = \"{0}\"\ntimeouts = {{ idle = \"1h\" }}\n\
             [[agents]]\nid = \"queued\"\nurl = \"{0}\"\nstrategy = \"enqueue\"\n",
            py.url("gated")
        ),
        &[("AGUI_GATEWAY__SERVER__DRAIN_TIMEOUT", "1s")],
    )
    .await;
    let t = token(json!({"sub": "alice"}));
    let mut runner = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    runner
        .send(
            json!({"type": "run", "id": "r1", "agent": "gated", "threadId": "late", "runId": "r1",
                     "messages": [{"id": "u1", "role": "user", "content": "hi"}]}),
        )
        .await;
    runner
        .recv_until(|f| f["event"]["type"] == "TEXT_MESSAGE_CONTENT")
        .await;
    // An HTTP run queued behind it (never started before the drain ends).
    let queued = {
        let (url, t) = (gw.run_url("queued"), t.clone());
        let mut next = input("late", "q1", "next");
        next["messages"][0]["id"] = "u-q1".into();
        tokio::spawn(async move { post_run(&url, &t, &next).await })
    };
    let deadline = std::time::Instant::now() + WAIT;
    while !gw.metrics().await.contains("agui_active_runs 2") {
        assert!(std::time::Instant::now() < deadline, "never queued");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    gw.signal("TERM");
    let (status, body) = queued.await.unwrap();
    assert_eq!(status, 200, "{body}");
    let told = sse_events(&body);
    assert_eq!(told.len(), 1, "{body}");
    assert_eq!(
        (&told[0]["type"], &told[0]["code"]),
        (&json!("RUN_ERROR"), &json!("unavailable")),
        "{body}"
    );
    let rest = runner.recv_until(|f| f.get("close").is_some()).await;
    let (close, events) = rest.split_last().unwrap();
    assert_eq!(close["close"], 1001, "{close}");
    let end = &events.last().unwrap()["event"];
    assert_eq!(end["type"], "RUN_FINISHED", "{end}");
    assert_eq!(end["outcome"]["type"], "cancelled", "{end}");
    assert!(gw.proc.child.wait().await.unwrap().success(), "exit 0");

    // The next process on the same journal: the run is over, as cancelled.
    let gw = gw.restart().await;
    let snap: Value = json_of(http().get(gw.url("/v1/threads/late")).bearer_auth(&t)).await;
    assert_eq!(snap["run"]["status"], "cancelled", "{snap}");
    let mut viewer = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    viewer
        .send(json!({"type": "subscribe", "id": "s", "threadId": "late", "after": 0}))
        .await;
    let replay = viewer.recv_until(is_terminal_frame).await;
    let last = &replay.last().unwrap()["event"];
    assert_eq!(last["outcome"]["type"], "cancelled", "{last}");
    assert!(
        !replay
            .iter()
            .any(|f| f["event"]["code"] == "gateway_restarted"),
        "{replay:?}"
    );
}
