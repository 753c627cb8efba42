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

async fn subscribe(gw: &Gateway, token: &str, thread: &str, after: u64) -> Ws {
    let mut ws = Ws::connect(gw, WsAuth::Header(token)).await.unwrap();
    ws.send(json!({"type": "subscribe", "id": "s", "threadId": thread, "after": after}))
        .await;
    let ack = ws.recv().await;
    assert_eq!(ack["type"], "ack", "{ack}");
    ws
}

/// `(seq, event type)` of a viewer's frames.
fn journal(frames: &[Value]) -> Vec<(u64, String)> {
    frames
        .iter()
        .filter(|f| f["type"] == "event")
        .map(|f| {
            (
                f["seq"].as_u64().unwrap(),
                f["event"]["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
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
        let snap: Value = http()
            .get(gw.url("/v1/threads/shared"))
            .bearer_auth(&t)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(snap["seq"], first_run + 10004 + next_a.len() as u64);
    }
}
