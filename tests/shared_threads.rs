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

/// [`CONFIG`] with presence told every 100 ms and `auditor`s unlisted.
fn presence_config() -> String {
    format!(
        "{CONFIG}[threads]\npresence_interval = \"100ms\"\npresence_hide_roles = [\"auditor\"]\n"
    )
}

/// Subscribes and returns the user ids the ack lists as present.
async fn subscribe_listed(viewer: &mut Ws, thread: &str) -> Vec<String> {
    viewer
        .send(json!({"type": "subscribe", "id": "p", "threadId": thread, "presence": true}))
        .await;
    let frames = viewer.recv_until(|f| f["id"] == "p").await;
    let ack = frames.last().unwrap();
    assert_eq!(ack["type"], "ack", "{ack}");
    user_ids(&ack["presence"])
}

fn user_ids(list: &Value) -> Vec<String> {
    let mut ids: Vec<String> = list
        .as_array()
        .unwrap_or_else(|| panic!("a list: {list}"))
        .iter()
        .map(|w| w["userId"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

/// Reads `viewer`'s frames until a `presence` frame lists exactly `ids`;
/// returns every presence frame read.
async fn until_viewers(viewer: &mut Ws, ids: &[&str]) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let f = viewer.recv().await;
        assert!(f.get("close").is_none(), "closed: {f} after {seen:?}");
        if f["type"] != "presence" {
            continue;
        }
        seen.push(f.clone());
        if user_ids(&f["viewers"]) == ids {
            return seen;
        }
    }
}

#[tokio::test]
async fn viewers_see_who_joins_and_leaves_hidden_roles_and_other_tenants_apart() {
    let gw = Gateway::start(&presence_config()).await;
    let grant = |sub: &str| json!({"sub": sub, "name": format!("{sub} (display)"), "threads": {"pres-*": ["view"]}});
    let mut ann = ws(&gw, grant("ann")).await;
    assert_eq!(subscribe_listed(&mut ann, "pres-1").await, ["ann"]);
    // Ben, on the next node: he learns of Ann (in his ack or just after),
    // Ann is told he joined.
    let mut ben = ws(&gw, grant("ben")).await;
    let listed = subscribe_listed(&mut ben, "pres-1").await;
    assert!(listed.contains(&"ben".to_owned()), "{listed:?}");
    if listed != ["ann", "ben"] {
        // Ann's node had not recorded her yet: he is told at its next tick.
        until_viewers(&mut ben, &["ann", "ben"]).await;
    }
    let frames = until_viewers(&mut ann, &["ann", "ben"]).await;
    let joined = &frames.last().unwrap()["joined"];
    assert_eq!(joined[0]["userId"], "ben", "{frames:?}");
    assert_eq!(joined[0]["name"], "ben (display)", "{frames:?}");
    assert_eq!(joined[0]["connections"], 1);

    // An auditor watches unlisted; a viewer of another tenant's thread of
    // the same id sees only their own tenant.
    let mut aud = ws(
        &gw,
        json!({"sub": "aud", "roles": ["auditor"], "threads": {"pres-*": ["view"]}}),
    )
    .await;
    let listed = subscribe_listed(&mut aud, "pres-1").await;
    assert!(!listed.contains(&"aud".to_owned()), "{listed:?}");
    let mut tom = ws(
        &gw,
        json!({"sub": "tom", "tenant": "t2", "threads": {"pres-*": ["view"]}}),
    )
    .await;
    assert_eq!(subscribe_listed(&mut tom, "pres-1").await, ["tom"]);
    let mut cat = ws(&gw, grant("cat")).await;
    subscribe_listed(&mut cat, "pres-1").await;
    let frames = until_viewers(&mut ann, &["ann", "ben", "cat"]).await;
    let text = serde_json::to_string(&frames).unwrap();
    assert!(!text.contains("aud") && !text.contains("tom"), "{text}");

    // Ben unsubscribes, Cat's browser goes away: both leave.
    ben.send(json!({"type": "unsubscribe", "threadId": "pres-1"}))
        .await;
    drop(cat);
    let frames = until_viewers(&mut ann, &["ann"]).await;
    let left: Vec<String> = frames.iter().flat_map(|f| user_ids(&f["left"])).collect();
    assert!(
        left.contains(&"ben".to_owned()) && left.contains(&"cat".to_owned()),
        "{frames:?}"
    );

    // The same list over HTTP, from each node; not for someone without view.
    let ann_t = token(grant("ann"));
    for _ in 0..2 {
        let got = json_of(
            http()
                .get(gw.url("/v1/threads/pres-1/presence"))
                .bearer_auth(&ann_t),
        )
        .await;
        assert_eq!(user_ids(&got["viewers"]), ["ann"], "{got}");
    }
    let eve = token(json!({"sub": "eve"}));
    let resp = http()
        .get(gw.url("/v1/threads/pres-1/presence"))
        .bearer_auth(&eve)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    // Presence is never journaled: the thread was never run.
    let mut alice = ws(&gw, json!({"sub": "alice"})).await;
    let events = run_to_end(&mut alice, "pres-1", "r1").await;
    assert!(
        events.iter().all(|f| !f.to_string().contains("presence")),
        "{events:?}"
    );
    assert_eq!(seqs(&events)[0], 1);
}

/// Reads `viewer`'s frames until a `presence` frame shows exactly `ids`
/// typing; returns that frame.
async fn until_composing(viewer: &mut Ws, ids: &[&str]) -> Value {
    loop {
        let f = viewer.recv().await;
        assert!(f.get("close").is_none(), "closed: {f}");
        if f["type"] == "presence" && user_ids_of(&f["composing"]) == ids {
            return f;
        }
    }
}

fn user_ids_of(list: &Value) -> Vec<String> {
    let mut ids: Vec<String> = list
        .as_array()
        .unwrap_or_else(|| panic!("a list: {list}"))
        .iter()
        .map(|id| id.as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

/// Issue 31's optional signal: who is typing, told to the others (on any
/// node) in their presence frames, never for a hidden role, stopped when
/// told and lapsed when not repeated; refused on a thread the connection
/// does not watch.
#[tokio::test]
async fn viewers_see_who_is_typing_until_they_stop_or_it_lapses() {
    let gw = Gateway::start(&presence_config()).await;
    let grant = |sub: &str| json!({"sub": sub, "threads": {"typing-*": ["view"]}});
    let mut ann = ws(&gw, grant("ann")).await;
    subscribe_listed(&mut ann, "typing-1").await;
    let mut ben = ws(&gw, grant("ben")).await;
    subscribe_listed(&mut ben, "typing-1").await;
    let mut aud = ws(
        &gw,
        json!({"sub": "aud", "roles": ["auditor"], "threads": {"typing-*": ["view"]}}),
    )
    .await;
    subscribe_listed(&mut aud, "typing-1").await;
    until_viewers(&mut ann, &["ann", "ben"]).await;

    // Ben types (acked, since the frame has an id); so does the auditor,
    // unlisted.
    ben.send(json!({"type": "composing", "id": "c1", "threadId": "typing-1"}))
        .await;
    let acked = ben.recv_until(|f| f["id"] == "c1").await;
    assert_eq!(acked.last().unwrap()["type"], "ack", "{acked:?}");
    assert_eq!(
        acked.last().unwrap()["lapseMs"],
        500,
        "five 100 ms intervals"
    );
    aud.send(json!({"type": "composing", "threadId": "typing-1", "composing": true}))
        .await;
    let f = until_composing(&mut ann, &["ben"]).await;
    let listed = f["viewers"].as_array().unwrap();
    let ben_w = listed.iter().find(|w| w["userId"] == "ben").unwrap();
    assert_eq!(ben_w["composing"], true, "{f}");
    assert!(!f.to_string().contains("aud"), "{f}");
    // He stops: told at once (the next tick).
    ben.send(json!({"type": "composing", "threadId": "typing-1", "composing": false}))
        .await;
    until_composing(&mut ann, &[]).await;
    // Ann types without repeating: it lapses on its own (five intervals).
    ann.send(json!({"type": "composing", "threadId": "typing-1"}))
        .await;
    until_composing(&mut ben, &["ann"]).await;
    until_composing(&mut ben, &[]).await;

    // Not on a thread the connection does not watch; not a non-boolean.
    for (bad, code) in [
        (
            json!({"type": "composing", "id": "x1", "threadId": "typing-2"}),
            "invalid",
        ),
        (
            json!({"type": "composing", "id": "x2", "threadId": "typing-1", "composing": "yes"}),
            "invalid",
        ),
    ] {
        ben.send(bad).await;
        let got = ben.recv_until(|f| f["type"] == "error").await;
        assert_eq!(got.last().unwrap()["code"], code, "{got:?}");
    }
}

/// A client that asked for presence on a thread nobody had made yet
/// (`not_found`: no grant), then made it with its first run, hears who is
/// there in the run's ack and who joins after, like a subscriber.
#[tokio::test]
async fn a_thread_made_by_the_first_run_tells_its_maker_who_comes() {
    let gw = Gateway::start(&presence_config()).await;
    let mut amy = ws(&gw, json!({"sub": "amy"})).await;
    amy.send(json!({"type": "subscribe", "id": "s", "threadId": "made-1", "presence": true}))
        .await;
    let refused = amy.recv_until(|f| f["id"] == "s").await;
    assert_eq!(refused.last().unwrap()["code"], "not_found", "{refused:?}");
    amy.send(run_cmd("made-1", "r1", "hello")).await;
    let frames = amy.recv_until(|f| f["id"] == "cmd-r1").await;
    let ack = frames.last().unwrap();
    assert_eq!(ack["type"], "ack", "{ack}");
    assert_eq!(user_ids(&ack["presence"]), ["amy"], "{ack}");
    // Bob, granted view, comes: Amy is told.
    let mut bob = ws(&gw, json!({"sub": "bob", "threads": {"made-*": ["view"]}})).await;
    subscribe_listed(&mut bob, "made-1").await;
    until_viewers(&mut amy, &["amy", "bob"]).await;
}

#[tokio::test]
async fn a_dead_nodes_viewers_leave_on_their_own() {
    if test_nodes() < 2 {
        eprintln!("needs AGUI_TEST_NODES=2: a node dies");
        return;
    }
    let mut gw = Gateway::start(&presence_config()).await;
    let grant = |sub: &str| json!({"sub": sub, "threads": {"pres-*": ["view"]}});
    // Ann on the first node, Ben on the second.
    let mut ann = ws(&gw, grant("ann")).await;
    subscribe_listed(&mut ann, "pres-dead").await;
    let mut ben = ws(&gw, grant("ben")).await;
    subscribe_listed(&mut ben, "pres-dead").await;
    until_viewers(&mut ann, &["ann", "ben"]).await;
    // The second node dies without a word (SIGKILL): nobody tells anyone.
    gw.peers[0].0.child.start_kill().unwrap();
    gw.peers[0].0.child.wait().await.unwrap();
    let frames = until_viewers(&mut ann, &["ann"]).await;
    assert_eq!(user_ids(&frames.last().unwrap()["left"]), ["ben"]);
    drop(ben);
}

/// `regenerate` of the answer that followed an approval: a sibling of the
/// resume, with the same answers — not "the thread has pending interrupts"
/// (the head has none; the base, the run that asked, has them).
#[tokio::test]
async fn regenerating_the_answer_after_an_approval_carries_the_approval() {
    let (_py, gw) = agent_behind_gateway("pydantic_approval_agent.py", "agent", "bank", "").await;
    let mut olga = ws(&gw, json!({"sub": "olga"})).await;
    olga.send(
        json!({"type": "run", "id": "ask", "agent": "bank", "threadId": "appr", "runId": "ask",
                     "messages": [{"id": "u1", "role": "user", "content": "pay acct-9"}]}),
    )
    .await;
    let asked = olga.recv_until(is_terminal_frame).await;
    let interrupt = asked.last().unwrap()["event"]["outcome"]["interrupts"][0]["id"].clone();
    assert_eq!(interrupt, "int-call_t", "{asked:?}");
    let answers =
        json!([{"interruptId": "int-call_t", "status": "resolved", "payload": {"approved": true}}]);
    olga.send(json!({"type": "resume", "id": "yes", "threadId": "appr", "runId": "answer", "resume": answers}))
        .await;
    let answered = olga.recv_until(is_terminal_frame).await;
    assert_eq!(answered.last().unwrap()["event"]["type"], "RUN_FINISHED");

    // Ben regenerates the answer (the head's last assistant message).
    let mut ben = ws(
        &gw,
        json!({"sub": "ben", "threads": {"appr": ["view", "run", "resume"]}}),
    )
    .await;
    let frames = regenerate_carrying(&mut ben, "again", &answers).await;
    let runs = json_of(
        http()
            .get(gw.url("/v1/threads/appr/runs"))
            .bearer_auth(token(json!({"sub": "olga"}))),
    )
    .await;
    let again = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["runId"] == "again")
        .unwrap();
    let answer = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["runId"] == "answer")
        .unwrap();
    assert_eq!(
        again["parentRunId"], answer["parentRunId"],
        "a sibling of the resume: {runs}"
    );
    assert_eq!(again["status"], "finished", "{runs}");
    // Who did what: Olga asked and answered, Ben regenerated.
    let ask = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["runId"] == "ask")
        .unwrap();
    assert_eq!(ask["startedBy"], "olga");
    assert_eq!(
        ask["answeredBy"],
        json!([{"runId": "answer", "by": "olga"}, {"runId": "again", "by": "ben"}]),
        "{runs}"
    );
    let snap = json_of(
        http()
            .get(gw.url("/v1/threads/appr"))
            .bearer_auth(token(json!({"sub": "olga"}))),
    )
    .await;
    assert_eq!(snap["run"]["startedBy"], "ben", "{snap}");
    assert_eq!(frames.last().unwrap()["event"]["type"], "RUN_FINISHED");

    // Regenerating that regenerated answer again carries the answers again
    // (its base still has them pending), rather than being refused.
    let frames = regenerate_carrying(&mut ben, "twice", &answers).await;
    assert_eq!(frames.last().unwrap()["event"]["type"], "RUN_FINISHED");
}

/// A regenerate of the answer after an approval whose answers the journal
/// no longer holds (compacted away: `threads.max_events = 2`) is refused
/// `conflict`, saying so and how to answer again, never sent without them.
#[tokio::test]
async fn regenerating_an_approvals_answer_whose_answers_were_compacted_is_refused() {
    let (_py, gw) = agent_behind_gateway(
        "pydantic_approval_agent.py",
        "agent",
        "bank",
        "[threads]\nmax_events = 2\n",
    )
    .await;
    let mut olga = ws(&gw, json!({"sub": "olga"})).await;
    olga.send(
        json!({"type": "run", "id": "ask", "agent": "bank", "threadId": "gone", "runId": "ask",
                     "messages": [{"id": "u1", "role": "user", "content": "pay acct-9"}]}),
    )
    .await;
    olga.recv_until(is_terminal_frame).await;
    let answers =
        json!([{"interruptId": "int-call_t", "status": "resolved", "payload": {"approved": true}}]);
    olga.send(json!({"type": "resume", "id": "yes", "threadId": "gone", "runId": "answer", "resume": answers}))
        .await;
    let answered = olga.recv_until(is_terminal_frame).await;
    assert_eq!(answered.last().unwrap()["event"]["type"], "RUN_FINISHED");
    // The compaction follows the run's end: wait until a join from seq 1
    // is answered with a reset (the journal no longer holds it).
    until_compacted(&gw, &json!({"sub": "olga"}), "gone").await;
    olga.send(json!({"type": "regenerate", "id": "again", "threadId": "gone", "runId": "again"}))
        .await;
    let refused = olga.recv_until(|f| f["id"] == "again").await;
    let refused = refused.last().unwrap();
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(refused["code"], "conflict", "{refused}");
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("no longer in the journal") && message.contains("'ask'"),
        "{refused}"
    );
}

/// Ben's regenerate `run_id` on thread `appr`: acked, and its run sent the
/// approval's `answers` again. Its frames up to its end.
async fn regenerate_carrying(ben: &mut Ws, run_id: &str, answers: &Value) -> Vec<Value> {
    ben.send(json!({"type": "regenerate", "id": run_id, "threadId": "appr", "runId": run_id}))
        .await;
    let frames = ben
        .recv_until(|f| is_terminal_frame(f) || f["type"] == "error")
        .await;
    let ack = frames.iter().find(|f| f["id"] == run_id).unwrap();
    assert_eq!(ack["type"], "ack", "{ack}");
    let started = frames
        .iter()
        .find(|f| f["event"]["type"] == "RUN_STARTED")
        .unwrap();
    assert_eq!(&started["event"]["input"]["resume"], answers, "{started}");
    frames
}

/// Who switched the agent is part of the thread, as who started a run is:
/// the snapshot's `activeAgentBy`, alike over HTTP and a WebSocket
/// subscribe, on every node. A run on the agent already speaking switches
/// nothing, so it does not take the credit.
#[tokio::test]
async fn the_snapshot_names_who_switched_the_agent() {
    let gw = Gateway::start(CONFIG).await;
    let ann_t = token(json!({"sub": "ann"}));
    let ben_claims = json!({"sub": "ben", "threads": {"sw-1": ["view", "run"]}});
    let ben_t = token(ben_claims.clone());
    let by = |snap: &Value| snap["activeAgentBy"].clone();
    let snapshot = |t: &str| json_of(http().get(gw.url("/v1/threads/sw-1")).bearer_auth(t));

    let mut ann = ws(&gw, json!({"sub": "ann"})).await;
    run_to_end(&mut ann, "sw-1", "r1").await;
    let snap = snapshot(&ben_t).await;
    assert_eq!(
        (&snap["activeAgent"], by(&snap)),
        (&json!("demo"), json!("ann")),
        "her run chose the agent: {snap}"
    );

    let switched = json_of(
        http()
            .post(gw.url("/v1/threads/sw-1/agent"))
            .bearer_auth(&ben_t)
            .json(&json!({"agent": "demo"})),
    )
    .await;
    assert_eq!(switched["agent"], "demo", "{switched}");
    run_to_end(&mut ann, "sw-1", "r2").await;
    for t in [&ann_t, &ben_t] {
        assert_eq!(
            by(&snapshot(t).await),
            "ben",
            "Ann's run after it switched nothing"
        );
    }
    let mut ben = ws(&gw, ben_claims).await;
    ben.send(json!({"type": "subscribe", "id": "s", "threadId": "sw-1"}))
        .await;
    let snap = ben.recv_until(|f| f["type"] == "snapshot").await;
    let snap = snap.last().unwrap();
    assert_eq!(by(snap), "ben", "{snap}");
}
