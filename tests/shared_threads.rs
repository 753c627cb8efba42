//! Threads shared by several people as they use them: joined before the
//! first run, against the real gateway binary (one node, or with
//! `AGUI_TEST_NODES=2` two nodes on Redis, each client on the next node).

mod common;

use common::*;
use serde_json::{Value, json};

/// The demo agent, slow enough (10 ms a token) that a run streams, and a
/// role grant: `support` may view every `help-*` thread.
const CONFIG: &str = "[demo]\nenabled = true\ntoken_delay = \"10ms\"\n\
    [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n\
    [[grants]]\nrole = \"support\"\nthreads = \"help-*\"\npermissions = [\"view\"]\n";

async fn ws(gw: &Gateway, claims: Value) -> Ws {
    Ws::connect(gw, WsAuth::Header(&token(claims)))
        .await
        .expect("upgrade")
}

fn run_cmd(thread: &str, run: &str, text: &str) -> Value {
    json!({"type": "run", "id": format!("cmd-{run}"), "agent": "demo", "threadId": thread,
           "runId": run, "messages": [{"id": format!("u-{run}"), "role": "user", "content": text}]})
}

/// Subscribes `viewer` to `thread` before anyone ran on it: the ack, then an
/// empty snapshot at seq 0.
async fn join_empty(viewer: &mut Ws, thread: &str) {
    viewer
        .send(json!({"type": "subscribe", "id": "s", "threadId": thread}))
        .await;
    let ack = viewer.recv().await;
    assert_eq!(
        (ack["type"].as_str(), ack["id"].as_str()),
        (Some("ack"), Some("s")),
        "{ack}"
    );
    let snap = viewer.recv().await;
    assert_eq!(snap["type"], "snapshot", "{snap}");
    assert_eq!(snap["seq"], 0, "{snap}");
    assert_eq!(snap["messages"], json!([]), "{snap}");
}

/// Runs `run` on `thread` through `runner` and returns its event frames.
async fn run_to_end(runner: &mut Ws, thread: &str, run: &str) -> Vec<Value> {
    runner.send(run_cmd(thread, run, "hello")).await;
    let frames = runner.recv_until(is_terminal_frame).await;
    assert!(
        frames.iter().any(|f| f["type"] == "ack"),
        "the run was taken: {frames:?}"
    );
    frames
        .into_iter()
        .filter(|f| f["type"] == "event")
        .collect()
}

#[tokio::test]
async fn a_viewer_with_a_grant_joins_before_the_first_run_and_sees_it_live() {
    let gw = Gateway::start(CONFIG).await;
    // A token claim grants one viewer; a role grant the other.
    let mut by_claim = ws(&gw, json!({"sub": "vic", "threads": {"early-*": ["view"]}})).await;
    join_empty(&mut by_claim, "early-1").await;
    let mut by_role = ws(&gw, json!({"sub": "sue", "roles": ["support"]})).await;
    join_empty(&mut by_role, "help-1").await;

    // The first runs, by their creator, on the next node.
    let mut alice = ws(&gw, json!({"sub": "alice"})).await;
    let early = run_to_end(&mut alice, "early-1", "r1").await;
    let help = run_to_end(&mut alice, "help-1", "r2").await;
    assert_eq!(seqs(&early)[0], 1, "{early:?}");

    // Each early viewer gets its thread's run, every event from seq 1.
    for (viewer, expected) in [(&mut by_claim, &early), (&mut by_role, &help)] {
        let got: Vec<Value> = viewer
            .recv_until(is_terminal_frame)
            .await
            .into_iter()
            .filter(|f| f["type"] == "event")
            .collect();
        assert_eq!(seqs(&got), seqs(expected));
        assert_eq!(got, *expected);
    }

    // The runner created the thread: it is theirs on every node, and the
    // early viewer holds `view` only.
    let alice_t = token(json!({"sub": "alice"}));
    for _ in 0..2 {
        let snap = json_of(
            http()
                .get(gw.url("/v1/threads/early-1"))
                .bearer_auth(&alice_t),
        )
        .await;
        assert_eq!(snap["messages"][0]["content"], "hello", "{snap}");
    }
    by_claim.send(run_cmd("early-1", "r3", "mine?")).await;
    let refused = by_claim.recv_until(|f| f["id"] == "cmd-r3").await;
    let refused = refused.last().unwrap();
    assert_eq!(refused["code"], "forbidden", "{refused}");
}

#[tokio::test]
async fn without_a_grant_a_thread_not_yet_run_is_not_found_like_any_hidden_thread() {
    let gw = Gateway::start(CONFIG).await;
    let mut alice = ws(&gw, json!({"sub": "alice"})).await;
    run_to_end(&mut alice, "someones", "r1").await;
    let mut eve = ws(&gw, json!({"sub": "eve"})).await;
    let mut answers = Vec::new();
    for thread in ["nobodys-yet", "someones"] {
        eve.send(json!({"type": "subscribe", "id": thread, "threadId": thread}))
            .await;
        let mut answer = eve.recv().await;
        answer.as_object_mut().unwrap().remove("id");
        answers.push(answer);
    }
    assert_eq!(answers[0]["code"], "not_found", "{answers:?}");
    assert_eq!(
        answers[0], answers[1],
        "a hidden thread and a missing one look alike"
    );
    // The SSE join and its ticket answer the same.
    let eve_t = token(json!({"sub": "eve"}));
    for path in [
        "/v1/threads/nobodys-yet/events",
        "/v1/threads/someones/events",
    ] {
        let resp = http()
            .get(gw.url(path))
            .bearer_auth(&eve_t)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404, "{path}");
    }
    let resp = http()
        .post(gw.url("/v1/threads/nobodys-yet/ticket"))
        .bearer_auth(&eve_t)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    // A grantee's early join does not make the thread exist for others.
    let mut vic = ws(
        &gw,
        json!({"sub": "vic", "threads": {"nobodys-yet": ["view"]}}),
    )
    .await;
    join_empty(&mut vic, "nobodys-yet").await;
    for _ in 0..2 {
        let resp = http()
            .get(gw.url("/v1/threads/nobodys-yet"))
            .bearer_auth(&eve_t)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404);
    }
}

/// Reads an SSE body until it holds `needle`.
async fn sse_until(resp: reqwest::Response, needle: &str) -> String {
    let mut resp = resp;
    let mut body = String::new();
    tokio::time::timeout(WAIT, async {
        while !body.contains(needle) {
            let chunk = resp.chunk().await.unwrap().expect("the stream goes on");
            body.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {needle} in {body}"));
    body
}

#[tokio::test]
async fn the_sse_join_of_a_thread_not_yet_run_streams_its_first_run() {
    let gw = Gateway::start(CONFIG).await;
    let sue = token(json!({"sub": "sue", "roles": ["support"]}));
    let resp = http()
        .get(gw.url("/v1/threads/help-sse/events"))
        .bearer_auth(&sue)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // Headers are out: the stream is registered before the run starts.
    let mut alice = ws(&gw, json!({"sub": "alice"})).await;
    let frames = run_to_end(&mut alice, "help-sse", "r1").await;
    let body = sse_until(resp, "RUN_FINISHED").await;
    let events = sse_events(&body);
    let ws_types: Vec<String> = frames
        .iter()
        .map(|f| f["event"]["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(types(&events), ws_types, "{body}");
    assert!(body.contains("id: 1"), "seqs from 1: {body}");
}
