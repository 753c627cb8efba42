//! Several gateway nodes on one real `redis-server`: a thread's journal is
//! one, wherever its run executes and wherever its viewers are connected.

mod common;

use common::*;
use serde_json::{Value, json};

async fn node(redis: &RedisServer, name: &str, agent_url: &str) -> Gateway {
    Gateway::start(&format!(
        "{}[threads]\nmax_events = 100000\n[[agents]]\nid = \"ok\"\nurl = \"{agent_url}\"\n[[agents]]\nid = \"flood\"\nurl = \"{}\"\n",
        redis.store_config(name),
        agent_url.replace("/ok", "/flood"),
    ))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewers_on_two_nodes_see_one_journal_live() {
    let redis = RedisServer::start().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let a = node(&redis, "a", &py.url("ok")).await;
    let b = node(&redis, "b", &py.url("ok")).await;
    let t = token(json!({"sub": "alice"}));

    // A first run on node A creates the thread.
    let (status, body) = post_run(&a.run_url("ok"), &t, &input("shared", "r1", "hi")).await;
    assert_eq!(status, 200, "{body}");
    let first_run = sse_events(&body).len() as u64;

    // Viewers on both nodes, live from there.
    let mut on_a = subscribe(&a, &t, "shared", first_run).await;
    let mut on_b = subscribe(&b, &t, "shared", first_run).await;

    // A long run on node A: node B's viewer sees every event live, in order.
    let mut flood = input("shared", "r2", "go");
    flood["messages"][0]["id"] = "u-2".into();
    let (status, body) = post_run(&a.run_url("flood"), &t, &flood).await;
    assert_eq!(status, 200);
    assert_eq!(sse_events(&body).len(), 10004);
    let seen_a = journal(&on_a.recv_until(is_terminal_frame).await);
    let seen_b = journal(&on_b.recv_until(is_terminal_frame).await);
    assert_eq!(seen_b.len(), 10004, "node B's viewer got the whole run");
    assert_eq!(seen_a, seen_b, "the same journal on both nodes");
    let expected: Vec<u64> = (first_run + 1..=first_run + 10004).collect();
    assert_eq!(
        seen_b.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        expected,
        "gapless, in order, once"
    );

    // A run started on node B continues the same journal; A's viewer sees it.
    let mut third = input("shared", "r3", "again");
    third["messages"][0]["id"] = "u-3".into();
    let (status, _) = post_run(&b.run_url("ok"), &t, &third).await;
    assert_eq!(status, 200);
    let next_a = journal(&on_a.recv_until(is_terminal_frame).await);
    let next_b = journal(&on_b.recv_until(is_terminal_frame).await);
    assert_eq!(next_a, next_b);
    assert_eq!(
        next_a[0].0,
        first_run + 10005,
        "continues after node A's run"
    );

    // A late joiner on either node reads the same journal from the store.
    let late = subscribe(&b, &t, "shared", 0).await;
    let mut late = late;
    let mut replay = Vec::new();
    while replay.len() < (first_run + 10004) as usize + next_a.len() {
        let f = late.recv().await;
        if f["type"] == "event" {
            replay.push(f["seq"].as_u64().unwrap());
        }
    }
    assert_eq!(
        replay,
        (1..=first_run + 10004 + next_a.len() as u64).collect::<Vec<_>>()
    );
    // Both nodes list the thread with the same last seq.
    for gw in [&a, &b] {
        let snap: Value = json_of(http().get(gw.url("/v1/threads/shared")).bearer_auth(&t)).await;
        assert_eq!(snap["seq"], first_run + 10004 + next_a.len() as u64);
    }
}

/// A node whose agents are the scripted agent's scenarios, with a short
/// run lease (a dead node's runs are closed within seconds).
async fn scenario_node(redis: &RedisServer, name: &str, py: &PyAgent) -> Gateway {
    let agents: String = ["ok", "stall", "gated", "draft-interrupt"]
        .iter()
        .map(|s| {
            format!(
                "[[agents]]\nid = \"{s}\"\nurl = \"{}\"\nallow_strategy_override = true\ntimeouts = {{ idle = \"1h\" }}\n",
                py.url(s)
            )
        })
        .collect();
    let store = redis.store_config(name) + "lease_ttl = \"2s\"\n";
    Gateway::start(&format!("{store}{agents}")).await
}

fn run_frame(agent: &str, thread: &str, run: &str) -> Value {
    json!({"type": "run", "id": run, "agent": agent, "threadId": thread, "runId": run,
           "messages": [{"id": format!("u-{run}"), "role": "user", "content": "hello"}]})
}

/// A client on `gw` that starts run `(agent, thread, run)` and has read
/// up to its first `event_type` event.
async fn run_until(
    gw: &Gateway,
    t: &str,
    (agent, thread, run): (&str, &str, &str),
    event_type: &str,
) -> Ws {
    let mut ws = Ws::connect(gw, WsAuth::Header(t)).await.unwrap();
    ws.send(run_frame(agent, thread, run)).await;
    assert_eq!(answer(&mut ws, run).await["type"], "ack");
    ws.recv_until(|f| f["event"]["type"] == event_type).await;
    ws
}

/// A viewer of `thread` on `gw` (from seq 0) that has read up to its first
/// `event_type` event.
async fn watch_until(gw: &Gateway, t: &str, thread: &str, event_type: &str) -> Ws {
    let mut ws = subscribe(gw, t, thread, 0).await;
    ws.recv_until(|f| f["event"]["type"] == event_type).await;
    ws
}

/// The next frame answering command `id` (events in between are skipped).
async fn answer(ws: &mut Ws, id: &str) -> Value {
    loop {
        let f = ws.recv().await;
        if f["id"] == id || f.get("close").is_some() {
            return f;
        }
    }
}

async fn post_json(url: String, token: &str, body: Value) -> (u16, Value) {
    let resp = http()
        .post(url)
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    (
        resp.status().as_u16(),
        resp.json().await.unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_run_per_thread_across_nodes_and_cancel_from_any_node() {
    let redis = RedisServer::start().await;
    let mut py = PyAgent::start("scripted_agent.py").await;
    let a = scenario_node(&redis, "a", &py).await;
    let b = scenario_node(&redis, "b", &py).await;
    let t = token(json!({"sub": "alice"}));

    // A run that waits for its gate, on node A.
    let mut on_a = Ws::connect(&a, WsAuth::Header(&t)).await.unwrap();
    on_a.send(run_frame("gated", "one", "r1")).await;
    assert_eq!(answer(&mut on_a, "r1").await["type"], "ack");
    on_a.recv_until(|f| f["event"]["type"] == "TEXT_MESSAGE_CONTENT")
        .await;

    // Node B refuses a second run (reject), or queues it (enqueue).
    let mut on_b = subscribe(&b, &t, "one", 0).await;
    let mut rejected = run_frame("ok", "one", "r2");
    rejected["strategy"] = "reject".into();
    on_b.send(rejected).await;
    let refused = answer(&mut on_b, "r2").await;
    assert_eq!(refused["code"], "conflict", "{refused}");
    let mut queued = run_frame("ok", "one", "r3");
    queued["strategy"] = "enqueue".into();
    on_b.send(queued).await;
    let ack = answer(&mut on_b, "r3").await;
    assert_eq!(ack["type"], "ack", "{ack}");
    assert_eq!(ack["queued"], 1, "{ack}");

    // The gate opens: r1 ends on A, then B starts r3; no run overlaps.
    http().post(py.url("release")).send().await.unwrap();
    let mut ends = 0;
    while ends < 2 {
        ends += usize::from(is_terminal_frame(&on_b.recv().await));
    }
    // The whole journal, read back through node A.
    let mut full = subscribe(&a, &t, "one", 0).await;
    let mut frames = full.recv_until(is_terminal_frame).await;
    frames.extend(full.recv_until(is_terminal_frame).await);
    let events = journal(&frames);
    let starts: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, (_, t))| t == "RUN_STARTED")
        .map(|(i, _)| i)
        .collect();
    let ends: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, (_, t))| t == "RUN_FINISHED")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(starts.len(), 2, "{events:?}");
    assert!(ends[0] < starts[1], "r3 starts after r1 ended: {events:?}");
    let seqs: Vec<u64> = events.iter().map(|(s, _)| *s).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "gapless from 1"
    );

    // A run stalls on node B; a cancel sent to node A stops it.
    // `on_b` watches the thread since r3, so r4's first events may come
    // before its ack (docs/protocol.md): what came first is kept.
    on_b.send(run_frame("stall", "one", "r4")).await;
    let started = |f: &Value| f["event"]["type"] == "TEXT_MESSAGE_START";
    let frames = on_b.recv_until(|f| f["id"] == "r4").await;
    assert_eq!(frames.last().unwrap()["type"], "ack", "{frames:?}");
    if !frames.iter().any(started) {
        on_b.recv_until(started).await;
    }
    let (status, body) =
        post_json(a.url("/v1/threads/one/cancel"), &t, json!({"runId": "r4"})).await;
    assert_eq!(
        (status, body["runId"].as_str()),
        (200, Some("r4")),
        "{body}"
    );
    py.proc.expect_line("DISCONNECTED stall").await;
    let end = on_b.recv_until(is_terminal_frame).await;
    assert_eq!(end.last().unwrap()["event"]["outcome"]["type"], "cancelled");
}

/// The `interrupt` strategy across nodes: a run sent to node A while the
/// thread's run streams on node B cancels B's run (its agent is
/// disconnected, its end journaled `cancelled`) and starts on A once that
/// end is in the journal — never beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupting_run_on_one_node_cancels_the_run_on_another_then_starts() {
    let redis = RedisServer::start().await;
    let mut py = PyAgent::start("scripted_agent.py").await;
    let a = scenario_node(&redis, "a", &py).await;
    let b = scenario_node(&redis, "b", &py).await;
    let t = token(json!({"sub": "alice"}));

    let mut on_b = run_until(&b, &t, ("stall", "pre", "r1"), "TEXT_MESSAGE_START").await;
    let mut on_a = Ws::connect(&a, WsAuth::Header(&t)).await.unwrap();
    let mut pre_empt = run_frame("ok", "pre", "r2");
    pre_empt["strategy"] = "interrupt".into();
    on_a.send(pre_empt).await;
    let ack = answer(&mut on_a, "r2").await;
    assert_eq!(ack["type"], "ack", "{ack}");
    assert_eq!(ack["queued"], 1, "{ack}");
    py.proc.expect_line("DISCONNECTED stall").await;
    let end = on_b.recv_until(is_terminal_frame).await;
    assert_eq!(end.last().unwrap()["event"]["outcome"]["type"], "cancelled");

    // The journal, read back through either node: r1 ends, then r2 runs.
    for gw in [&a, &b] {
        let mut full = subscribe(gw, &t, "pre", 0).await;
        let mut frames = full.recv_until(is_terminal_frame).await;
        frames.extend(full.recv_until(is_terminal_frame).await);
        let runs: Vec<(String, String)> = frames
            .iter()
            .filter(|f| {
                matches!(
                    f["event"]["type"].as_str(),
                    Some("RUN_STARTED" | "RUN_FINISHED" | "RUN_ERROR")
                )
            })
            .map(|f| {
                let e = &f["event"];
                let what = e["outcome"]["type"].as_str().unwrap_or("started");
                (e["runId"].as_str().unwrap().to_owned(), what.to_owned())
            })
            .collect();
        let expect = [
            ("r1", "started"),
            ("r1", "cancelled"),
            ("r2", "started"),
            ("r2", "success"),
        ];
        assert_eq!(runs, expect.map(|(r, w)| (r.to_owned(), w.to_owned())));
        let seqs: Vec<u64> = journal(&frames).iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_is_taken_once_across_nodes_and_meta_from_anywhere_joins_the_journal() {
    let redis = RedisServer::start().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let a = scenario_node(&redis, "a", &py).await;
    let b = scenario_node(&redis, "b", &py).await;
    let t = token(json!({"sub": "alice"}));

    // A run on A ends interrupted; both nodes' viewers see the interrupt.
    let (status, body) = post_run(
        &a.run_url("draft-interrupt"),
        &t,
        &input("hitl", "r1", "delete it"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let interrupt_id = sse_events(&body).last().unwrap()["outcome"]["interrupts"][0]["id"]
        .as_str()
        .expect("canonical interrupt id")
        .to_owned();
    let mut viewer_a = subscribe(&a, &t, "hitl", 0).await;
    viewer_a.recv_until(is_terminal_frame).await;
    let mut viewer_b = subscribe(&b, &t, "hitl", 0).await;
    let before = viewer_b.recv_until(is_terminal_frame).await;
    assert_eq!(
        before.last().unwrap()["event"]["outcome"]["type"],
        "interrupt"
    );

    // Two people answer at once, one on each node: exactly one wins.
    let resume = |id: &str| {
        json!({"type": "resume", "id": id, "threadId": "hitl", "agent": "draft-interrupt",
               "resume": [{"interruptId": interrupt_id, "status": "resolved", "payload": {"ok": true}}]})
    };
    let mut ann = Ws::connect(&a, WsAuth::Header(&t)).await.unwrap();
    let mut ben = Ws::connect(&b, WsAuth::Header(&t)).await.unwrap();
    ann.send(resume("ra")).await;
    ben.send(resume("rb")).await;
    let (ra, rb) = tokio::join!(answer(&mut ann, "ra"), answer(&mut ben, "rb"));
    let answers = [ra["type"].clone(), rb["type"].clone()];
    assert!(
        answers.contains(&json!("ack")) && answers.contains(&json!("error")),
        "one ack, one refusal: {ra} {rb}"
    );
    let refused = if ra["type"] == "error" { &ra } else { &rb };
    assert_eq!(refused["code"], "conflict", "{refused}");

    // Meta from node B lands in the journal beside the resumed run.
    let (status, body) = post_json(
        b.url("/v1/threads/hitl/meta"),
        &t,
        json!({"metaType": "thumbs_up", "payload": {}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let resumed_a = journal(&viewer_a.recv_until(is_terminal_frame).await);
    let resumed_b = journal(&viewer_b.recv_until(is_terminal_frame).await);
    assert_eq!(
        resumed_a.iter().filter(|(_, t)| t == "RUN_STARTED").count(),
        1,
        "one resumed run: {resumed_a:?}"
    );
    // Meta may land before, during or after the run: read until it is in.
    let mut all_a = resumed_a.clone();
    let mut all_b = resumed_b.clone();
    while !all_a.iter().any(|(_, t)| t == "META") {
        all_a.extend(journal(&[viewer_a.recv().await]));
    }
    while !all_b.iter().any(|(_, t)| t == "META") {
        all_b.extend(journal(&[viewer_b.recv().await]));
    }
    let last_a = all_a.last().unwrap().0;
    let last_b = all_b.last().unwrap().0;
    while all_a.last().unwrap().0 < last_b {
        all_a.extend(journal(&[viewer_a.recv().await]));
    }
    while all_b.last().unwrap().0 < last_a {
        all_b.extend(journal(&[viewer_b.recv().await]));
    }
    assert_eq!(all_a, all_b, "both nodes publish one journal");
    let seqs: Vec<u64> = all_a.iter().map(|(s, _)| *s).collect();
    let first = seqs[0];
    assert_eq!(
        seqs,
        (first..first + seqs.len() as u64).collect::<Vec<_>>(),
        "gapless"
    );

    // A viewer moving from node A to node B with `after` misses nothing
    // and repeats nothing.
    let mut full = subscribe(&a, &t, "hitl", 0).await;
    let mut everything = Vec::new();
    while everything
        .last()
        .is_none_or(|(s, _): &(u64, String)| *s < *seqs.last().unwrap())
    {
        everything.extend(journal(&[full.recv().await]));
    }
    let half = everything[everything.len() / 2].0;
    let mut moved = subscribe(&b, &t, "hitl", half).await;
    let mut rest = Vec::new();
    while rest
        .last()
        .is_none_or(|(s, _): &(u64, String)| *s < *seqs.last().unwrap())
    {
        rest.extend(journal(&[moved.recv().await]));
    }
    let expected: Vec<(u64, String)> = everything.into_iter().filter(|(s, _)| *s > half).collect();
    assert_eq!(rest, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_nodes_run_is_closed_by_another_node_and_the_thread_runs_again() {
    let redis = RedisServer::start().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let a = scenario_node(&redis, "a", &py).await;
    let b = scenario_node(&redis, "b", &py).await;
    let t = token(json!({"sub": "alice"}));

    let runner = run_until(&a, &t, ("stall", "lost", "r1"), "TEXT_MESSAGE_START").await;
    let mut viewer = watch_until(&b, &t, "lost", "TEXT_MESSAGE_START").await;

    // Node A dies (SIGKILL) just after renewing its lease — the worst case:
    // the lease lives longest. Node B closes the run within `lease_ttl`
    // (2 s here), as the docs say, and not before half of it.
    just_after_a_lease_renewal(&redis).await;
    drop(runner);
    drop(a);
    let died = std::time::Instant::now();
    let closing = viewer.recv_until(is_terminal_frame).await;
    let closed_after = died.elapsed();
    let end = &closing.last().unwrap()["event"];
    assert_eq!(end["type"], "RUN_ERROR", "{end}");
    assert_eq!(end["code"], "gateway_node_lost", "{end}");
    eprintln!("lease_ttl 2 s: the lost node's run was closed after {closed_after:?}");
    let lease_ttl = std::time::Duration::from_secs(2);
    assert!(
        closed_after <= lease_ttl && closed_after >= lease_ttl / 2,
        "closed {closed_after:?} after the node died; lease_ttl is {lease_ttl:?}"
    );
    let events = journal(&closing);
    assert!(
        events.iter().all(|(_, t)| t != "RUN_STARTED"),
        "nothing repeated: {events:?}"
    );

    // The thread takes new runs, on the surviving node.
    let mut next = input("lost", "r2", "again");
    next["messages"][0]["id"] = "u-r2".into();
    let (status, body) = post_run(&b.run_url("ok"), &t, &next).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        sse_events(&body).last().unwrap()["type"],
        "RUN_FINISHED",
        "{body}"
    );
    // And a node started now closes nothing that is alive.
    let c = scenario_node(&redis, "c", &py).await;
    let snap: Value = json_of(http().get(c.url("/v1/threads/lost")).bearer_auth(&t)).await;
    let all = journal(&viewer.recv_until(is_terminal_frame).await);
    assert_eq!(snap["seq"], all.last().unwrap().0, "{snap}");
}

/// Returns right after the one run lease in `redis` has been renewed (its
/// remaining time to live went up), watching it in Redis itself.
async fn just_after_a_lease_renewal(redis: &RedisServer) {
    let client = ::redis::Client::open(format!("redis://127.0.0.1:{}", redis.port)).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = ::redis::cmd("KEYS")
        .arg("*:lease")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let pttl = |mut conn: ::redis::aio::MultiplexedConnection| {
        let key = keys[0].clone();
        async move {
            let ms: i64 = ::redis::cmd("PTTL")
                .arg(key)
                .query_async(&mut conn)
                .await
                .unwrap();
            ms
        }
    };
    let deadline = std::time::Instant::now() + WAIT;
    let mut last = pttl(conn.clone()).await;
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the lease was never renewed"
        );
        let now = pttl(conn.clone()).await;
        assert!(now > 0, "the lease expired while its node was alive");
        if now > last {
            return;
        }
        last = now;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_flight_survives_a_redis_restart_with_nothing_lost_or_repeated() {
    let mut redis = RedisServer::start_persistent().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let node_config = |name: &str| {
        let agents = format!(
            "[[agents]]\nid = \"gated\"\nurl = \"{}\"\ntimeouts = {{ idle = \"1h\" }}\n[[agents]]\nid = \"ok\"\nurl = \"{}\"\n",
            py.url("gated"),
            py.url("ok")
        );
        format!("{}lease_ttl = \"30s\"\n{agents}", redis.store_config(name))
    };
    let a = Gateway::start(&node_config("a")).await;
    let b = Gateway::start(&node_config("b")).await;
    let t = token(json!({"sub": "alice"}));

    let mut runner = Ws::connect(&a, WsAuth::Header(&t)).await.unwrap();
    runner.send(run_frame("gated", "outage", "r1")).await;
    assert_eq!(answer(&mut runner, "r1").await["type"], "ack");
    let mut before = runner
        .recv_until(|f| f["event"]["type"] == "TEXT_MESSAGE_CONTENT")
        .await;
    let mut viewer = subscribe(&b, &t, "outage", 0).await;
    let mut seen = viewer
        .recv_until(|f| f["event"]["type"] == "TEXT_MESSAGE_CONTENT")
        .await;

    // Redis goes away: both nodes say so, and new runs are refused.
    redis.kill().await;
    until_ready_is(&a, 503).await;
    until_ready_is(&b, 503).await;
    let (status, body) = post_run(&b.run_url("ok"), &t, &input("elsewhere", "x1", "hi")).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("unavailable"), "{body}");

    // Redis is back: both nodes reconnect; the run goes on to its end.
    redis.start_again().await;
    until_ready_is(&a, 200).await;
    until_ready_is(&b, 200).await;
    http().post(py.url("release")).send().await.unwrap();
    before.extend(runner.recv_until(is_terminal_frame).await);
    seen.extend(viewer.recv_until(is_terminal_frame).await);
    let on_a = journal(&before);
    let on_b = journal(&seen);
    assert_eq!(on_a, on_b, "the same events on both nodes");
    assert_eq!(
        on_b.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        (1..=on_b.len() as u64).collect::<Vec<_>>(),
        "gapless, once"
    );
    assert_eq!(on_b.last().unwrap().1, "RUN_FINISHED");

    // And the journal in Redis says the same to a late joiner.
    let mut late = subscribe(&a, &t, "outage", 0).await;
    let replay = journal(&late.recv_until(is_terminal_frame).await);
    assert_eq!(replay, on_b);
    let (status, body) = post_run(&b.run_url("ok"), &t, &input("elsewhere", "x2", "hi")).await;
    assert_eq!(status, 200, "{body}");
}

/// Subscribers of a thread's channel, as Redis counts them.
fn listeners(redis: &RedisServer, thread: &str) -> u64 {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port.to_string(), "PUBSUB", "NUMSUB"])
        .arg(format!("agui:pub:default/{thread}"))
        .output()
        .expect("redis-cli");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .nth(1)
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Polls `listeners` until it is `n` (Redis tells no one when it changes).
async fn until_listeners(redis: &RedisServer, thread: &str, n: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while listeners(redis, thread) != n {
        assert!(
            std::time::Instant::now() < deadline,
            "{thread}: {} listeners, expected {n}",
            listeners(redis, thread)
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_listens_to_a_thread_only_while_it_holds_it() {
    let redis = RedisServer::start().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let config = |name: &str| {
        format!(
            "{}[threads]\nevict_after = \"1s\"\n[[agents]]\nid = \"ok\"\nurl = \"{}\"\n",
            redis.store_config(name),
            py.url("ok")
        )
    };
    let a = Gateway::start(&config("a")).await;
    let b = Gateway::start(&config("b")).await;
    let t = token(json!({"sub": "alice"}));
    let (status, _) = post_run(&a.run_url("ok"), &t, &input("quiet", "r1", "hi")).await;
    assert_eq!(status, 200);
    // Nobody on node B holds the thread: only node A (if still) listens.
    assert!(listeners(&redis, "quiet") <= 1);
    let mut viewer = subscribe(&b, &t, "quiet", 0).await;
    viewer.recv_until(is_terminal_frame).await;
    assert!(
        listeners(&redis, "quiet") >= 1,
        "node B listens while it serves a viewer"
    );
    // Viewers gone, the thread leaves both nodes' memory, and their ears.
    drop(viewer);
    until_listeners(&redis, "quiet", 0).await;
    // It comes back on demand, with everything.
    let mut again = subscribe(&b, &t, "quiet", 0).await;
    let replay = journal(&again.recv_until(is_terminal_frame).await);
    assert_eq!(replay.last().unwrap().1, "RUN_FINISHED");
    assert_eq!(listeners(&redis, "quiet"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_node_finishes_its_runs_refuses_new_ones_and_exits_cleanly() {
    let redis = RedisServer::start().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let config = |name: &str| {
        let agents: String = ["ok", "gated", "stall"]
            .iter()
            .map(|s| {
                format!(
                    "[[agents]]\nid = \"{s}\"\nurl = \"{}\"\ntimeouts = {{ idle = \"1h\" }}\n",
                    py.url(s)
                )
            })
            .collect();
        format!("{}{agents}", redis.store_config(name))
    };
    let mut a = Gateway::start(&config("a")).await;
    let b = Gateway::start(&config("b")).await;
    let t = token(json!({"sub": "alice"}));

    let _runner = run_until(&a, &t, ("gated", "drain", "r1"), "TEXT_MESSAGE_CONTENT").await;
    let mut viewer = watch_until(&b, &t, "drain", "TEXT_MESSAGE_CONTENT").await;

    // SIGTERM: node A stops taking runs and says so, its run goes on.
    a.signal("TERM");
    until_ready_is(&a, 503).await;
    let (status, body) = post_run(&a.run_url("ok"), &t, &input("other", "x1", "hi")).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("draining"), "{body}");
    let (status, body) = post_run(&b.run_url("ok"), &t, &input("other", "x2", "hi")).await;
    assert_eq!(status, 200, "node B takes it: {body}");

    // The run finishes within the window; B's viewer sees its end; A exits 0.
    http().post(py.url("release")).send().await.unwrap();
    let end = viewer.recv_until(is_terminal_frame).await;
    assert_eq!(end.last().unwrap()["event"]["type"], "RUN_FINISHED");
    assert!(
        end.last().unwrap()["event"]
            .get("outcome")
            .is_none_or(|o| o["type"] == "success")
    );
    let exit = a.proc.child.wait().await.unwrap();
    assert!(exit.success(), "{exit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_outlasts_the_drain_window_is_journaled_cancelled() {
    let redis = RedisServer::start().await;
    let mut py = PyAgent::start("scripted_agent.py").await;
    let agents = format!(
        "[[agents]]\nid = \"stall\"\nurl = \"{}\"\ntimeouts = {{ idle = \"1h\" }}\n",
        py.url("stall")
    );
    let mut a = Gateway::start_config(
        &format!(
            "[auth]\nalgorithms = [\"HS256\"]\nhs_secret = \"{SECRET}\"\n{}{agents}",
            redis.store_config("a")
        ),
        &[("AGUI_GATEWAY__SERVER__DRAIN_TIMEOUT", "1s")],
    )
    .await;
    let b = Gateway::start(&format!("{}{agents}", redis.store_config("b"))).await;
    let t = token(json!({"sub": "alice"}));
    let _runner = run_until(&a, &t, ("stall", "long", "r1"), "TEXT_MESSAGE_START").await;
    let mut viewer = watch_until(&b, &t, "long", "TEXT_MESSAGE_START").await;
    a.signal("TERM");
    py.proc.expect_line("DISCONNECTED stall").await;
    let end = viewer.recv_until(is_terminal_frame).await;
    let last = &end.last().unwrap()["event"];
    assert_eq!(last["type"], "RUN_FINISHED", "{last}");
    assert_eq!(
        last["outcome"]["type"], "cancelled",
        "not gateway_node_lost: {last}"
    );
    assert!(a.proc.child.wait().await.unwrap().success());
}

/// `haproxy`, from PATH or Debian's /usr/sbin.
fn haproxy() -> std::path::PathBuf {
    let sbin = std::path::PathBuf::from("/usr/sbin/haproxy");
    if sbin.exists() {
        sbin
    } else {
        "haproxy".into()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_multi_node_files_serve_one_session_through_haproxy() {
    // deploy/cluster.toml on two nodes, deploy/haproxy.cfg in front: what
    // deploy/compose.yaml runs, with loopback addresses instead of names.
    let redis = RedisServer::start().await;
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let node = |name: &'static str| {
        let url = url.clone();
        async move {
            Gateway::start_file(
                &repo().join("deploy/cluster.toml"),
                &[
                    ("AGUI_GATEWAY__SERVER__LISTEN", "127.0.0.1:0"),
                    ("AGUI_GATEWAY__STORE__URL", &url),
                    ("AGUI_GATEWAY__STORE__NODE", name),
                    ("AGUI_HS_SECRET", SECRET),
                    ("AGUI_GATEWAY__DEMO__TOKEN_DELAY", "1ms"),
                ],
            )
            .await
        }
    };
    let a = node("gateway-a").await;
    let b = node("gateway-b").await;
    let lb_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = tokio::process::Command::new(haproxy());
    cmd.arg("-db")
        .arg("-f")
        .arg(repo().join("deploy/haproxy.cfg"))
        .env("LB_LISTEN", format!("127.0.0.1:{lb_port}"))
        .env("GATEWAY_A", a.base.trim_start_matches("http://"))
        .env("GATEWAY_B", b.base.trim_start_matches("http://"));
    let _lb = Proc::spawn(cmd);
    let lb = format!("http://127.0.0.1:{lb_port}");
    // Ready once HAProxy listens and has checked both nodes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let ok = http().get(format!("{lb}/readyz")).send().await;
        if ok.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "haproxy never ready");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    // A run over HTTP and a viewer over WebSocket, both through the balancer.
    let t = token(json!({"sub": "alice"}));
    let (status, body) = post_run(
        &format!("{lb}/v1/agents/demo/run"),
        &t,
        &input("lb", "r1", "hello"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let run = sse_events(&body);
    let mut seen = Vec::new();
    for _ in 0..4 {
        // Round robin: these land on both nodes.
        let req = format!("ws://127.0.0.1:{lb_port}/v1/ws");
        let mut req =
            tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(req)
                .unwrap();
        req.headers_mut()
            .insert("authorization", format!("Bearer {t}").parse().unwrap());
        let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
        use futures::{SinkExt, StreamExt};
        ws.send(tokio_tungstenite::tungstenite::Message::text(
            json!({"type": "subscribe", "id": "s", "threadId": "lb", "after": 0}).to_string(),
        ))
        .await
        .unwrap();
        let mut events = 0;
        while events < run.len() {
            let msg = ws.next().await.unwrap().unwrap();
            let f: Value = serde_json::from_str(msg.to_text().unwrap()).unwrap();
            if f["type"] == "event" {
                events += 1;
                seen.push(f["seq"].as_u64().unwrap());
            }
        }
    }
    let once: Vec<u64> = (1..=run.len() as u64).collect();
    assert_eq!(
        seen,
        [once.clone(), once.clone(), once.clone(), once].concat()
    );
    // Round robin: the next run lands on the other node; each started one.
    let (status, body) = post_run(
        &format!("{lb}/v1/agents/demo/run"),
        &t,
        &input("lb2", "r2", "hello"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    for gw in [&a, &b] {
        let metrics = gw.metrics().await;
        let started: u64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix("agui_runs_started_total{agent=\"demo\"} "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        assert!(started >= 1, "every node took a run: {metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_and_meta_retries_hold_across_nodes() {
    let redis = RedisServer::start().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "[[rules]]\nname = \"two-runs\"\nkind = \"rate\"\naction = \"run\"\nlimit = 2\n\
         [[rules]]\nname = \"one-socket\"\nkind = \"rate\"\naction = \"connection\"\nlimit = 1\n",
    )
    .unwrap();
    let config = |name: &str| {
        format!(
            "{}[policy]\npath = \"{}\"\n[[agents]]\nid = \"ok\"\nurl = \"{}\"\n",
            redis.store_config(name),
            policy.display(),
            py.url("ok")
        )
    };
    let a = Gateway::start(&config("a")).await;
    let b = Gateway::start(&config("b")).await;
    let t = token(json!({"sub": "alice"}));

    // Two runs a minute in all: one on each node, then both refuse.
    for (gw, run) in [(&a, "r1"), (&b, "r2")] {
        let mut body = input("limited", run, "hi");
        body["messages"][0]["id"] = format!("u-{run}").into();
        let (status, text) = post_run(&gw.run_url("ok"), &t, &body).await;
        assert_eq!(status, 200, "{text}");
    }
    for gw in [&a, &b] {
        let (status, text) = post_run(&gw.run_url("ok"), &t, &input("limited", "r3", "hi")).await;
        assert_eq!(status, 429, "{text}");
        assert!(text.contains("two-runs"), "{text}");
    }

    // One socket at a time in all: a second one on the other node is refused
    // until the first closes.
    let first = Ws::connect(&a, WsAuth::Header(&t)).await.unwrap();
    assert_eq!(Ws::connect(&b, WsAuth::Header(&t)).await.err(), Some(429));
    drop(first);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match Ws::connect(&b, WsAuth::Header(&t)).await {
            Ok(_) => break,
            Err(429) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await
            }
            Err(s) => panic!("still refused: {s}"),
        }
    }

    // The same meta retried through both nodes at once: one event, one id.
    let meta = json!({"metaType": "thumbs_up", "payload": {}, "clientEventId": "c-1"});
    let (on_a, on_b) = tokio::join!(
        post_json(a.url("/v1/threads/limited/meta"), &t, meta.clone()),
        post_json(b.url("/v1/threads/limited/meta"), &t, meta.clone()),
    );
    assert_eq!((on_a.0, on_b.0), (200, 200), "{on_a:?} {on_b:?}");
    assert_eq!(on_a.1["eventId"], on_b.1["eventId"], "{on_a:?} {on_b:?}");
    let snapshot = redis.snapshot_bytes();
    let stored = snapshot.windows(4).filter(|w| w == b"c-1\"").count();
    assert_eq!(stored, 1, "one META event holds the key");
}

#[test]
fn the_compose_file_wires_the_files_the_haproxy_test_runs() {
    // `docker compose` cannot run here (no daemon, no registry): check what
    // the file promises against the files tests/cluster.rs does run.
    let read = |name: &str| -> Value {
        config::Config::builder()
            .add_source(config::File::from(repo().join("deploy").join(name)))
            .build()
            .unwrap()
            .try_deserialize()
            .unwrap()
    };
    let compose = read("compose.yaml");
    let node = read("cluster.toml");
    let services = &compose["services"];
    for name in ["redis", "gateway-a", "gateway-b", "lb"] {
        assert!(services.get(name).is_some(), "service {name}");
    }
    let port = node["server"]["listen"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    let lb = &services["lb"];
    assert_eq!(lb["environment"]["GATEWAY_A"], format!("gateway-a:{port}"));
    assert_eq!(lb["environment"]["GATEWAY_B"], format!("gateway-b:{port}"));
    assert!(
        lb["volumes"][0]
            .as_str()
            .unwrap()
            .starts_with("./haproxy.cfg:")
    );
    let a = &services["gateway-a"];
    assert!(
        a["volumes"][0]
            .as_str()
            .unwrap()
            .starts_with("./cluster.toml:")
    );
    assert_eq!(a["environment"]["AGUI_GATEWAY__STORE__NODE"], "gateway-a");
    assert_eq!(
        services["gateway-b"]["environment"]["AGUI_GATEWAY__STORE__NODE"],
        "gateway-b"
    );
    assert_eq!(node["store"]["kind"], "redis");
    assert_eq!(node["store"]["url"], "redis://redis:6379");
    assert!(repo().join("deploy/Dockerfile").exists());
}

/// Many threads at once across three nodes: on each thread three runs are
/// started at the same moment from the three nodes (queued behind each
/// other) and three meta events posted from the three nodes; viewers on
/// every node see one journal per thread — gapless, in order, identical on
/// every node and equal to a late replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_on_many_threads_give_one_gapless_journal_on_every_node() {
    const THREADS: usize = 12;
    let redis = RedisServer::start().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let nodes = [
        scenario_node(&redis, "a", &py).await,
        scenario_node(&redis, "b", &py).await,
        scenario_node(&redis, "c", &py).await,
    ];
    let t = token(json!({"sub": "alice"}));
    let thread = |i: usize| format!("many-{i}");

    // Each thread exists (a first run, on one of the nodes) before its
    // viewers subscribe from seq 0 on every node.
    let firsts = (0..THREADS).map(|i| {
        let (gw, t, thread) = (&nodes[i % 3], &t, thread(i));
        async move {
            let (status, body) = post_run(&gw.run_url("ok"), t, &input(&thread, "r0", "hi")).await;
            assert_eq!(status, 200, "{body}");
        }
    });
    futures::future::join_all(firsts).await;
    let mut viewers = Vec::new();
    for i in 0..THREADS {
        for gw in &nodes {
            viewers.push((i, subscribe(gw, &t, &thread(i), 0).await));
        }
    }

    // At once: three runs and three meta events per thread, one of each
    // from every node.
    let mut runners = Vec::new();
    for i in 0..THREADS {
        for (k, gw) in nodes.iter().enumerate() {
            let mut ws = Ws::connect(gw, WsAuth::Header(&t)).await.unwrap();
            let run = format!("r{}", k + 1);
            let mut frame = run_frame("ok", &thread(i), &run);
            frame["strategy"] = "enqueue".into();
            ws.send(frame).await;
            ws.send(json!({"type": "meta", "id": "m", "threadId": thread(i),
                           "metaType": "note", "payload": {"from": k}}))
                .await;
            runners.push((run, ws));
        }
    }
    for (run, ws) in &mut runners {
        assert_eq!(answer(ws, run).await["type"], "ack");
        let meta = answer(ws, "m").await;
        assert_eq!(meta["type"], "ack", "{meta}");
        assert_eq!(meta["duplicate"], false, "{meta}");
    }

    // Every viewer until its thread's four runs ended and three metas came.
    let mut seen: Vec<Vec<Vec<(u64, String)>>> = vec![Vec::new(); THREADS];
    for (v, (i, ws)) in viewers.iter_mut().enumerate() {
        let (mut ends, mut metas, mut frames) = (0, 0, Vec::new());
        while ends < 4 || metas < 3 {
            let Ok(f) = tokio::time::timeout(WAIT, ws.recv_frame()).await else {
                // What the stuck viewer had, and what the nodes said.
                let logs: Vec<String> = nodes.iter().map(|n| n.proc.stderr()).collect();
                panic!(
                    "viewer of thread {i} on node {}: {ends} runs ended and {metas} metas after {:?}\nnode logs:\n{}",
                    v % 3,
                    journal(&frames),
                    logs.join("\n---\n")
                );
            };
            assert!(f.get("close").is_none(), "viewer closed: {f}");
            ends += usize::from(is_terminal_frame(&f));
            metas += usize::from(f["event"]["type"] == "META");
            frames.push(f);
        }
        seen[*i].push(journal(&frames));
    }
    for (i, per_node) in seen.iter().enumerate() {
        let first = &per_node[0];
        let seqs: Vec<u64> = first.iter().map(|(s, _)| *s).collect();
        assert_eq!(
            seqs,
            (1..=seqs.len() as u64).collect::<Vec<_>>(),
            "thread {i}: gapless from 1"
        );
        for (node, other) in per_node.iter().enumerate() {
            assert_eq!(other, first, "thread {i}: node {node} saw another journal");
        }
        // Runs never overlap: each RUN_STARTED follows the previous end.
        let mut open = false;
        for (seq, kind) in first {
            match kind.as_str() {
                "RUN_STARTED" => {
                    assert!(!open, "thread {i}: overlapping runs at seq {seq}");
                    open = true;
                }
                "RUN_FINISHED" | "RUN_ERROR" => open = false,
                _ => {}
            }
        }
        assert_eq!(first.iter().filter(|(_, k)| k == "RUN_STARTED").count(), 4);
        assert_eq!(first.iter().filter(|(_, k)| k == "META").count(), 3);
        // A late replay through any node reads the same journal back.
        let mut late = subscribe(&nodes[(i + 1) % 3], &t, &thread(i), 0).await;
        let mut replay = Vec::new();
        while replay.len() < first.len() {
            replay.extend(journal(&[late.recv().await]));
        }
        assert_eq!(&replay, first, "thread {i}: late replay");
    }
}

/// Meta posted while Redis is down is refused (`unavailable`) and its
/// idempotency key stays unused: the client's retry with the same key once
/// Redis is back is stored, once. A run that writes during the outage ends
/// with `RUN_ERROR journal_unavailable` on every node — after exactly the
/// events that were stored, no hole and nothing repeated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_during_a_redis_outage_fail_plainly_and_nothing_is_half_written() {
    let mut redis = RedisServer::start_persistent().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let node_config = |name: &str| {
        format!(
            "{}lease_ttl = \"30s\"\n[[agents]]\nid = \"gated\"\nurl = \"{}\"\ntimeouts = {{ idle = \"1h\" }}\n",
            redis.store_config(name),
            py.url("gated"),
        )
    };
    let a = Gateway::start(&node_config("a")).await;
    let b = Gateway::start(&node_config("b")).await;
    let t = token(json!({"sub": "alice"}));

    let mut runner = Ws::connect(&a, WsAuth::Header(&t)).await.unwrap();
    runner.send(run_frame("gated", "cut", "r1")).await;
    assert_eq!(answer(&mut runner, "r1").await["type"], "ack");
    let mut on_a = runner
        .recv_until(|f| f["event"]["type"] == "TEXT_MESSAGE_CONTENT")
        .await;
    let mut viewer = subscribe(&b, &t, "cut", 0).await;
    let mut on_b = viewer
        .recv_until(|f| f["event"]["type"] == "TEXT_MESSAGE_CONTENT")
        .await;

    redis.kill().await;
    until_ready_is(&a, 503).await;
    until_ready_is(&b, 503).await;
    // Meta with an idempotency key: refused, not acknowledged.
    let meta = json!({"metaType": "note", "payload": {"text": "hi"}, "clientEventId": "k1"});
    let (status, body) = post_json(b.url("/v1/threads/cut/meta"), &t, meta.clone()).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
    // The run goes on at the agent while nothing can be stored.
    http().post(py.url("release")).send().await.unwrap();
    a.proc.expect_stderr("journal write failed (redis)").await;

    redis.start_again().await;
    until_ready_is(&a, 200).await;
    until_ready_is(&b, 200).await;
    on_a.extend(runner.recv_until(is_terminal_frame).await);
    on_b.extend(viewer.recv_until(is_terminal_frame).await);
    let (seen_a, seen_b) = (journal(&on_a), journal(&on_b));
    assert_eq!(seen_a, seen_b, "the same events on both nodes");
    assert_eq!(
        seen_b.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        (1..=seen_b.len() as u64).collect::<Vec<_>>(),
        "gapless, once"
    );
    let last = on_b.iter().rev().find(|f| is_terminal_frame(f)).unwrap();
    assert_eq!(last["event"]["type"], "RUN_ERROR", "{last}");
    assert_eq!(last["event"]["code"], "journal_unavailable", "{last}");
    // Nothing of the run after the hole: the error follows the content
    // that was stored before the outage.
    assert_eq!(
        seen_b[seen_b.len() - 2].1,
        "TEXT_MESSAGE_CONTENT",
        "{seen_b:?}"
    );

    // The retry of the refused meta is stored now, once.
    let (status, body) = post_json(b.url("/v1/threads/cut/meta"), &t, meta.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["duplicate"], false, "{body}");
    let (status, again) = post_json(a.url("/v1/threads/cut/meta"), &t, meta).await;
    assert_eq!((status, &again["eventId"]), (200, &body["eventId"]));
    assert_eq!(again["duplicate"], true);
    let mut late = subscribe(&a, &t, "cut", 0).await;
    let mut replay = journal(&late.recv_until(is_terminal_frame).await);
    replay.extend(journal(
        &late.recv_until(|f| f["event"]["type"] == "META").await,
    ));
    let mut expected = seen_b.clone();
    expected.push((seen_b.len() as u64 + 1, "META".into()));
    assert_eq!(replay, expected);
}

/// The store itself: a compacted base only moves forward (a node whose copy
/// lags cannot put an older fold over a newer one), and once a batch of a
/// run failed, that run's later batches are refused unsent — only the batch
/// that closes the run is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_store_keeps_its_base_and_never_writes_past_a_failed_batch() {
    use agui_gateway::store::redis::RedisStore;
    use agui_gateway::store::{AppendBatch, JournalStore, StoreError, ThreadKey, ThreadMeta};
    let mut redis = RedisServer::start_persistent().await;
    let store = RedisStore::connect(
        &format!("redis://127.0.0.1:{}", redis.port),
        "agui",
        "t",
        std::time::Duration::from_secs(30),
    )
    .await
    .unwrap();
    let key = ThreadKey::new("default", "base");
    let batch =
        |events: Vec<&str>, compact: Option<u64>, fence: Option<&str>, closing: bool| AppendBatch {
            key: key.clone(),
            meta: ThreadMeta {
                creator: "alice".into(),
                agent: None,
                status: "idle".into(),
                created_ms: 1,
                updated_ms: 1,
                last_seq: 0,
            },
            events: events
                .into_iter()
                .map(|e| (0, bytes::Bytes::from(e.to_owned())))
                .collect(),
            compact: compact.map(|s| (s, bytes::Bytes::from(format!("{{\"at\":{s}}}")))),
            fence: fence.map(Into::into),
            run_boundary: false,
            idempotency: None,
            closes_failed_run: closing,
        };
    let ten: Vec<&str> = vec![r#"{"type":"CUSTOM","name":"x","value":1}"#; 10];
    assert_eq!(
        store.append(batch(ten, None, None, false)).await.unwrap(),
        Ok(1)
    );
    store
        .append(batch(vec![], Some(8), None, false))
        .await
        .unwrap()
        .unwrap();
    // A lagging copy compacts at 5: ignored.
    store
        .append(batch(vec![], Some(5), None, false))
        .await
        .unwrap()
        .unwrap();
    let s = store.clone();
    let k = key.clone();
    let stored = tokio::task::spawn_blocking(move || s.load(&k))
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let (base, snapshot) = stored.base.unwrap();
    assert_eq!((base, &snapshot[..]), (8, &b"{\"at\":8}"[..]));
    assert_eq!(
        stored.events.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        vec![9, 10]
    );

    // Redis goes away: a run's batch fails.
    redis.kill().await;
    let one = vec![r#"{"type":"CUSTOM","name":"y","value":2}"#];
    let failed = store.append(batch(one.clone(), None, Some("run-1"), false));
    assert!(matches!(failed.await.unwrap(), Err(StoreError::Failed(_))));
    redis.start_again().await;
    // Back: the run's next batch is refused without reaching Redis …
    let refused = store.append(batch(one.clone(), None, Some("run-1"), false));
    match refused.await.unwrap() {
        Err(StoreError::Failed(why)) => assert!(why.contains("earlier batch"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // … its closing batch reaches Redis (fenced here: no lease was taken) …
    let closing = store.append(batch(one.clone(), None, Some("run-1"), true));
    assert!(matches!(closing.await.unwrap(), Err(StoreError::Fenced)));
    // … and other writes go on as before.
    assert_eq!(
        store.append(batch(one, None, None, false)).await.unwrap(),
        Ok(11)
    );
}

/// A node started while its Redis is not up yet waits for it (instead of
/// exiting) and serves once Redis answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_started_before_its_redis_waits_for_it() {
    let mut redis = RedisServer::start().await;
    redis.kill().await;
    let config = format!(
        "{}[[agents]]\nid = \"demo\"\nurl = \"demo:\"\n[demo]\nenabled = true\nlisten = \"127.0.0.1:0\"\n",
        redis.store_config("early")
    );
    // Redis's port cuts every connection off: the node's attempts are seen
    // arriving — more than one connection manager's worth of retries (the
    // redis crate retries 6 times by itself) — before Redis is back.
    let impostor = tokio::net::TcpListener::bind(("127.0.0.1", redis.port))
        .await
        .unwrap();
    let starting = tokio::spawn(async move { Gateway::start(&config).await });
    for _ in 0..10 {
        let (attempt, _) = tokio::time::timeout(WAIT, impostor.accept())
            .await
            .expect("the node keeps trying to reach Redis")
            .unwrap();
        drop(attempt);
    }
    drop(impostor);
    redis.start_again().await;
    let gw = starting.await.unwrap();
    gw.proc.expect_stderr("redis unreachable at start-up").await;
    until_ready_is(&gw, 200).await;
    let t = token(json!({"sub": "alice"}));
    let (status, body) = post_run(&gw.run_url("demo"), &t, &input("early", "r1", "hi")).await;
    assert_eq!(status, 200, "{body}");
}

/// Visibility rules scoped to an agent hold on every node from the moment
/// a run is accepted: a guest joining on node B after node A took the run's
/// lease — before the run's first event is journaled — sees no reasoning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_scoped_visibility_holds_on_another_node_before_the_first_event() {
    let redis = RedisServer::start().await;
    let mut py = PyAgent::start("scripted_agent.py").await;
    let config = |name: &str| {
        format!(
            "{}[policy]\npath = \"{}/config/policies/support-bot.toml\"\n\
             [[agents]]\nid = \"support\"\nurl = \"{}\"\ntimeouts = {{ idle = \"1h\" }}\n",
            redis.store_config(name),
            env!("CARGO_MANIFEST_DIR"),
            py.url("gated-start"),
        )
    };
    let a = Gateway::start(&config("a")).await;
    let b = Gateway::start(&config("b")).await;
    let staff = token(json!({"sub": "sam", "roles": ["staff"]}));
    let guest = token(json!({"sub": "gus", "roles": ["guest"], "threads": {"help": ["view"]}}));

    let mut runner = Ws::connect(&a, WsAuth::Header(&staff)).await.unwrap();
    runner.send(run_frame("support", "help", "r1")).await;
    assert_eq!(answer(&mut runner, "r1").await["type"], "ack");
    py.proc.expect_line("GATED-START r1").await;
    // Accepted, nothing journaled yet: the guest joins on the other node.
    let mut on_b = subscribe(&b, &guest, "help", 0).await;
    http().post(py.url("release")).send().await.unwrap();

    let staff_saw = journal(&runner.recv_until(is_terminal_frame).await);
    let guest_saw = journal(&on_b.recv_until(is_terminal_frame).await);
    let reasoning = |seen: &[(u64, String)]| {
        seen.iter()
            .filter(|(_, t)| t.starts_with("REASONING"))
            .count()
    };
    assert!(reasoning(&staff_saw) > 0, "{staff_saw:?}");
    assert_eq!(reasoning(&guest_saw), 0, "{guest_saw:?}");
    assert_eq!(guest_saw.len(), staff_saw.len() - reasoning(&staff_saw));
}

/// Issue 19 item 10 on two nodes: a run sent on the previous run's terminal
/// event, through the node that ran it or the other one, is never refused
/// although every run compacts the journal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_sent_on_the_previous_runs_end_is_taken_on_either_node_when_that_run_compacted() {
    let redis = RedisServer::start().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let config = |name: &str| {
        format!(
            "{}[threads]\nmax_events = 2\n[[agents]]\nid = \"ok\"\nurl = \"{}\"\n",
            redis.store_config(name),
            py.url("ok")
        )
    };
    let a = Gateway::start(&config("a")).await;
    let b = Gateway::start(&config("b")).await;
    let t = token(json!({"sub": "alice"}));
    let (status, body) = post_run(&a.run_url("ok"), &t, &input("b2b", "first", "hi")).await;
    assert_eq!(status, 200, "{body}");
    let seen = sse_events(&body).len() as u64;
    let mut conns = [
        subscribe(&a, &t, "b2b", seen).await,
        subscribe(&b, &t, "b2b", seen).await,
    ];
    let refused = back_to_back_runs(&mut conns, ("ok", "b2b"), 15).await;
    assert!(refused.is_empty(), "refused: {refused:?}");
}

/// Issue 19 item 9: a run queued behind another asked for the lease once
/// when that run ended; if Redis answered that request with an error it
/// never started (and a later run could take its turn). Here Redis refuses
/// `SET` (an ACL), so taking a lease fails while the running run's appends
/// and its end still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_run_starts_once_the_store_answers_again_or_ends_with_run_error() {
    let redis = RedisServer::start().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let agents = format!(
        "[[agents]]\nid = \"gated\"\nurl = \"{}\"\ntimeouts = {{ idle = \"1h\" }}\n\
         [[agents]]\nid = \"queued\"\nurl = \"{}\"\nstrategy = \"enqueue\"\n",
        py.url("gated"),
        py.url("ok")
    );
    let a = Gateway::start(&format!(
        "{}lease_ttl = \"2s\"\n{agents}",
        redis.store_config("a")
    ))
    .await;
    let t = token(json!({"sub": "alice"}));
    let leases_fail = |fail: bool| {
        let rule = if fail { "-set" } else { "+set" };
        assert_eq!(redis.cli(&["ACL", "SETUSER", "default", rule]).trim(), "OK");
    };

    // The store recovers: the queued run asks again and starts.
    let mut runner = run_until(&a, &t, ("gated", "q1", "r1"), "TEXT_MESSAGE_CONTENT").await;
    leases_fail(true);
    let mut requester = Ws::connect(&a, WsAuth::Header(&t)).await.unwrap();
    requester.send(run_frame("queued", "q1", "r2")).await;
    let ack = answer(&mut requester, "r2").await;
    assert_eq!(ack["queued"], 1, "{ack}");
    http().post(py.url("release")).send().await.unwrap();
    runner.recv_until(is_terminal_frame).await;
    a.proc.expect_stderr("queued run waits: the store").await;
    leases_fail(false);
    let frames = requester
        .recv_until(|f| is_terminal_frame(f) && f["event"]["runId"] == "r2")
        .await;
    assert_eq!(frames.last().unwrap()["event"]["type"], "RUN_FINISHED");

    // The store keeps failing past the lease time to live: the queued run
    // ends with RUN_ERROR, never silently.
    let mut runner = run_until(&a, &t, ("gated", "q2", "r3"), "TEXT_MESSAGE_CONTENT").await;
    leases_fail(true);
    let queued = tokio::spawn({
        let (url, t) = (a.run_url("queued"), t.clone());
        async move { post_run(&url, &t, &input("q2", "r4", "next")).await }
    });
    while !a.metrics().await.contains("agui_active_runs 2") {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    requester.send(run_frame("queued", "q2", "r5")).await;
    assert_eq!(answer(&mut requester, "r5").await["queued"], 2);
    http().post(py.url("release")).send().await.unwrap();
    runner.recv_until(is_terminal_frame).await;
    let (status, body) = tokio::time::timeout(WAIT, queued)
        .await
        .expect("the queued run's requester is answered")
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_run_error(&sse_events(&body), "unavailable");
    // The WebSocket requester of the run queued behind it is told too.
    let frames = requester.recv_until(|f| f["type"] == "error").await;
    let refused = frames.last().unwrap();
    assert_eq!(refused["code"], "unavailable", "{refused}");
    assert_eq!(refused["runId"], "r5", "{refused}");
    a.proc.expect_stderr("queued run refused").await;
    leases_fail(false);
}

/// How the store loses history in [`a_journal_that_goes_back`].
#[derive(Debug, Clone, Copy, PartialEq)]
enum Loss {
    Flushall,
    RestartEmpty,
    OlderSnapshot,
}

/// Issue 19 item 8: Redis loses acknowledged history while two nodes hold a
/// thread (viewers on both, a run streaming on A with an HTTP requester).
/// Before, nothing noticed: readiness stayed 200, nodes disagreed, viewers
/// got the new journal spliced onto the old one with no reset, runs through
/// a holding node got `conflict`, and the streaming run never ended. Now:
/// logged, not ready for a lease's time to live, the run ends with
/// `RUN_ERROR journal_lost`, viewers get a `reset` snapshot of what the
/// store holds, and the thread goes on from there on every node.
async fn a_journal_that_goes_back(loss: Loss) {
    let mut redis = RedisServer::start().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let a = scenario_node(&redis, "a", &py).await;
    let b = scenario_node(&redis, "b", &py).await;
    let t = token(json!({"sub": "alice"}));
    let run_input = |run: &str| {
        let mut body = input("back", run, "hello");
        body["messages"][0]["id"] = format!("u-{run}").into();
        body
    };

    // History the store keeps (the older snapshot holds it) ...
    let (status, body) = post_run(&a.run_url("ok"), &t, &run_input("r1")).await;
    assert_eq!(status, 200, "{body}");
    let kept = sse_events(&body).len() as u64;
    let snapshot = (loss == Loss::OlderSnapshot).then(|| redis.snapshot_bytes());
    // ... and history it loses.
    let (status, body) = post_run(&a.run_url("ok"), &t, &run_input("r2")).await;
    assert_eq!(status, 200, "{body}");
    let seen = kept + sse_events(&body).len() as u64;
    let mut on_a = subscribe(&a, &t, "back", seen).await;
    let mut on_b = subscribe(&b, &t, "back", seen).await;
    let streaming = tokio::spawn({
        let (url, t, body) = (a.run_url("gated"), t.clone(), run_input("r3"));
        async move { post_run(&url, &t, &body).await }
    });
    for viewer in [&mut on_a, &mut on_b] {
        viewer
            .recv_until(|f| f["event"]["type"] == "TEXT_MESSAGE_CONTENT")
            .await;
    }

    match loss {
        Loss::Flushall => assert_eq!(redis.cli(&["FLUSHALL"]).trim(), "OK"),
        Loss::RestartEmpty => {
            redis.kill().await;
            redis.start_again().await;
        }
        Loss::OlderSnapshot => {
            redis.kill().await;
            std::fs::write(redis.data_dir().join("dump.rdb"), snapshot.unwrap()).unwrap();
            redis.start_again().await;
        }
    }
    let holds = if loss == Loss::OlderSnapshot { kept } else { 0 };

    // Not ready until reconciled, then ready again.
    until_ready_is(&a, 503).await;
    until_ready_is(&a, 200).await;
    // The run that was streaming ends, with a stable code.
    let (status, body) = tokio::time::timeout(WAIT, streaming)
        .await
        .expect("the streaming run's requester gets an end")
        .unwrap();
    assert_eq!(status, 200);
    assert_run_error(&sse_events(&body), "journal_lost");
    // Viewers on both nodes: a reset snapshot of what the store holds.
    for viewer in [&mut on_a, &mut on_b] {
        let frames = viewer.recv_until(|f| f["type"] == "snapshot").await;
        let reset = frames.last().unwrap();
        assert_eq!(reset["reset"], true, "{reset}");
        assert_eq!(reset["seq"], holds, "{reset}");
    }
    // Said loudly, on both nodes.
    for node in [&a, &b] {
        node.proc.expect_stderr("JOURNAL LOST HISTORY").await;
    }
    // A viewer resuming from its old position is reset too, not left silent.
    let mut resuming = Ws::connect(&b, WsAuth::Header(&t)).await.unwrap();
    resuming
        .send(json!({"type": "subscribe", "id": "s", "threadId": "back", "after": seen}))
        .await;
    let frames = resuming.recv_until(|f| f["type"] == "snapshot").await;
    assert_eq!(frames.last().unwrap()["reset"], true);
    assert_eq!(frames.last().unwrap()["seq"], holds);

    // The thread goes on from what the store holds, through the node that
    // held it (no conflict), and a meta event posted there reaches viewers.
    let (status, body) = post_run(&a.run_url("ok"), &t, &run_input("r4")).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = post_json(
        a.url("/v1/threads/back/meta"),
        &t,
        json!({"metaType": "thumbs_up", "payload": {}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    for viewer in [&mut on_a, &mut on_b, &mut resuming] {
        let frames = viewer.recv_until(|f| f["event"]["type"] == "META").await;
        let seqs = seqs(&frames);
        assert_eq!(
            seqs,
            (holds + 1..=holds + seqs.len() as u64).collect::<Vec<_>>(),
            "continues after the reset, gapless"
        );
    }
    // And the nodes agree.
    let on_a: Value = json_of(http().get(a.url("/v1/threads/back")).bearer_auth(&t)).await;
    let on_b: Value = json_of(http().get(b.url("/v1/threads/back")).bearer_auth(&t)).await;
    assert_eq!(on_a["seq"], on_b["seq"]);
    assert_eq!(on_a["messages"], on_b["messages"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_journal_is_detected_and_viewers_reset() {
    a_journal_that_goes_back(Loss::Flushall).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_lost_by_an_empty_restart_is_detected_and_viewers_reset() {
    a_journal_that_goes_back(Loss::RestartEmpty).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_restored_from_an_older_snapshot_is_detected_and_viewers_reset() {
    a_journal_that_goes_back(Loss::OlderSnapshot).await;
}
