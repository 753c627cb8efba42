//! Human-in-the-loop and side-band, against the real gateway with real
//! upstreams: a `pydantic-ai-slim[ag-ui]` agent with an approval-required tool
//! (canonical interrupts), a LangGraph graph calling `interrupt()` served by
//! `ag-ui-langgraph` (legacy `on_interrupt`), and a raw `ag-ui-protocol`
//! server emitting the older draft shape. Plus cancel and meta events.

mod common;

use common::*;
use serde_json::{Value, json};

async fn ws(gw: &Gateway, claims: Value) -> Ws {
    Ws::connect(gw, WsAuth::Header(&token(claims)))
        .await
        .expect("upgrade")
}

fn run_cmd(agent: &str, thread: &str, run: &str, text: &str) -> Value {
    json!({"type": "run", "id": run, "agent": agent, "threadId": thread, "runId": run,
           "messages": [{"id": format!("u-{run}"), "role": "user", "content": text}]})
}

fn resume_cmd(id: &str, thread: &str, interrupt: &str, approved: bool) -> Value {
    json!({"type": "resume", "id": id, "threadId": thread,
           "resume": [{"interruptId": interrupt, "status": "resolved", "payload": {"approved": approved}}]})
}

/// Event frames until the next terminal event.
async fn to_terminal(ws: &mut Ws) -> Vec<Value> {
    ws.recv_until(is_terminal_frame).await
}

fn last_event(frames: &[Value]) -> &Value {
    &frames.last().unwrap()["event"]
}

#[tokio::test]
async fn pydantic_ai_approval_reaches_every_viewer_and_one_answer_continues_the_run() {
    let (_py, gw) = agent_behind_gateway("pydantic_approval_agent.py", "agent", "bank", "").await;
    let owner = json!({"sub": "olga"});
    let mut runner = ws(&gw, owner.clone()).await;
    runner
        .send(run_cmd("bank", "pay", "r1", "pay acct-9"))
        .await;
    assert_eq!(runner.recv().await["type"], "ack");
    let mut approver_a = ws(
        &gw,
        json!({"sub": "ann", "threads": {"pay": ["view", "resume"]}}),
    )
    .await;
    let mut approver_b = ws(
        &gw,
        json!({"sub": "ben", "threads": {"pay": ["view", "resume"]}}),
    )
    .await;
    let mut watcher = ws(&gw, json!({"sub": "wes", "threads": {"pay": ["view"]}})).await;
    for v in [&mut approver_a, &mut approver_b, &mut watcher] {
        v.send(json!({"type": "subscribe", "threadId": "pay", "after": 0}))
            .await;
    }
    let first = to_terminal(&mut runner).await;
    let outcome = &last_event(&first)["outcome"];
    assert_eq!(outcome["type"], "interrupt");
    let interrupt = outcome["interrupts"][0].clone();
    assert_eq!(interrupt["toolCallId"], "call_t");
    for v in [&mut approver_a, &mut approver_b, &mut watcher] {
        let frames = to_terminal(v).await;
        assert_eq!(
            last_event(&frames)["outcome"]["interrupts"][0],
            interrupt,
            "every viewer sees it"
        );
    }
    // The snapshot lists it as pending; a plain run is refused, naming it.
    let mut late = ws(&gw, owner.clone()).await;
    late.send(json!({"type": "subscribe", "threadId": "pay"}))
        .await;
    let snap = late.recv().await;
    assert_eq!(snap["interrupts"][0]["id"], interrupt["id"]);
    assert_eq!(snap["run"]["status"], "interrupted");
    late.send(run_cmd("bank", "pay", "r-x", "ignore that"))
        .await;
    let refused = late.recv().await;
    assert_eq!(refused["code"], "conflict");
    assert!(
        refused["message"].as_str().unwrap().contains("int-call_t"),
        "{refused}"
    );
    // Without the resume permission: forbidden. Unknown id: invalid.
    watcher
        .send(resume_cmd("w", "pay", "int-call_t", true))
        .await;
    assert_eq!(watcher.recv().await["code"], "forbidden");
    approver_a
        .send(resume_cmd("bad", "pay", "int-nope", true))
        .await;
    assert_eq!(approver_a.recv().await["code"], "invalid");

    // Two approvers answer at once: exactly one run starts.
    approver_a
        .send(resume_cmd("a", "pay", "int-call_t", true))
        .await;
    approver_b
        .send(resume_cmd("b", "pay", "int-call_t", false))
        .await;
    let a = approver_a.recv_until(|f| f["id"] == "a").await;
    let b = approver_b.recv_until(|f| f["id"] == "b").await;
    let replies = [
        a.last().unwrap()["type"].clone(),
        b.last().unwrap()["type"].clone(),
    ];
    assert!(
        replies.contains(&json!("ack")) && replies.contains(&json!("error")),
        "{replies:?}"
    );
    let loser = if replies[0] == "error" {
        a.last().unwrap()
    } else {
        b.last().unwrap()
    };
    assert_eq!(loser["code"], "conflict", "{loser}");
    let approved = replies[0] == "ack";

    // Every viewer sees the continued run and its result.
    for v in [&mut runner, &mut watcher] {
        let frames = to_terminal(v).await;
        let result = frames
            .iter()
            .find(|f| f["event"]["type"] == "TOOL_CALL_RESULT")
            .expect("tool result");
        assert_eq!(result["event"]["toolCallId"], "call_t");
        let text: String = frames
            .iter()
            .filter(|f| f["event"]["type"] == "TEXT_MESSAGE_CONTENT")
            .map(|f| f["event"]["delta"].as_str().unwrap())
            .collect();
        if approved {
            assert_eq!(text, "Transfer result: sent 500 to acct-9");
        } else {
            assert!(text.starts_with("Transfer result: "), "{text}");
            assert!(
                !text.contains("sent 500"),
                "denied: the tool did not run: {text}"
            );
        }
        assert_eq!(last_event(&frames)["outcome"]["type"], "success");
    }
    // The resume run's journal entry records who answered what.
    let mut check = ws(&gw, owner).await;
    check
        .send(json!({"type": "subscribe", "threadId": "pay"}))
        .await;
    let snap = check.recv().await;
    assert_eq!(snap["interrupts"], json!([]));
    assert_eq!(snap["run"]["status"], "finished");
}

#[tokio::test]
async fn langgraph_legacy_interrupt_is_canonical_and_resumes_the_graph() {
    let (mut py, gw) = agent_behind_gateway("langgraph_agent.py", "agent", "lg", "").await;
    let mut c = ws(&gw, json!({})).await;
    c.send(run_cmd("lg", "mail", "r1", "email bob")).await;
    let frames = to_terminal(&mut c).await;
    assert!(
        frames.iter().any(|f| f["event"]["name"] == "on_interrupt"),
        "the original custom event is kept"
    );
    let outcome = &last_event(&frames)["outcome"];
    assert_eq!(outcome["type"], "interrupt", "canonical in the journal");
    let interrupt = &outcome["interrupts"][0];
    assert_eq!(interrupt["id"], "lg-r1-1");
    assert_eq!(interrupt["reason"], "confirmation");
    assert_eq!(interrupt["message"], "Send the email to a@b.com?");
    c.send(resume_cmd("go", "mail", "lg-r1-1", true)).await;
    let frames = c
        .recv_until(|f| is_terminal_frame(f) && f["event"]["runId"] != "r1")
        .await;
    py.proc.expect_line("forwarded ").await; // the first run's
    let resumed: Value =
        serde_json::from_str(&py.proc.expect_line("forwarded ").await["forwarded ".len()..])
            .unwrap();
    assert_eq!(
        resumed["command"]["resume"],
        json!({"approved": true}),
        "LangGraph's own resume channel is set too"
    );
    let started = frames
        .iter()
        .find(|f| f["event"]["type"] == "RUN_STARTED")
        .unwrap();
    assert!(
        started["event"]["input"].get("forwardedProps").is_none(),
        "forwardedProps (private to the request) are not journaled"
    );
    let says_sent = frames.iter().any(|f| {
        f["event"]["type"] == "MESSAGES_SNAPSHOT"
            && f["event"]["messages"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["content"] == "Sent.")
    });
    assert!(
        says_sent,
        "the graph continued past interrupt(): {frames:#?}"
    );
    assert_eq!(last_event(&frames)["type"], "RUN_FINISHED");
}

/// LangGraph/CopilotKit frontends answer an `interrupt()` the LangGraph way:
/// a new message plus `forwardedProps.command.resume`, no `resume` entries.
/// With canonical outcomes (the default) the stock `@ag-ui/client` holds
/// the interrupt the gateway made of `on_interrupt` and refuses that run;
/// with `interrupts = "agent"` it sees what the graph sent, as it would
/// directly, and the graph resumes.
#[tokio::test]
async fn langgraph_frontends_resume_the_langgraph_way_with_agent_interrupts() {
    let mut py = PyAgent::start("langgraph_agent.py").await;
    let url = py.url("agent");
    let config =
        |mode: &str| format!("[[agents]]\nid = \"lg\"\nurl = \"{url}\"\ninterrupts = \"{mode}\"\n");
    let t = token(json!({}));

    // Canonical: the client holds the gateway's interrupt and refuses.
    let gw = Gateway::start(&config("auto")).await;
    let v = node_client("langgraph_resume.mjs", &[&gw.run_url("lg"), &t, "lg-canon"]).await;
    assert!(v["first"]["error"].is_null(), "{v:#}");
    assert_eq!(
        v["first"]["pendingInterrupts"][0]["id"], "lg-lg-canon-1-1",
        "{v:#}"
    );
    let refused = v["second"]["error"].as_str().unwrap_or_default();
    assert!(refused.contains("lg-lg-canon-1-1"), "{v:#}");
    assert_eq!(v["second"]["events"], json!([]), "never sent: {v:#}");
    py.proc.expect_line("forwarded ").await; // only the first run reached it
    // A client that sends it anyway is told why, and what to configure.
    let (status, body) = post_run(
        &gw.run_url("lg"),
        &t,
        &json!({"threadId": "lg-canon", "runId": "lg-canon-3", "tools": [], "context": [],
                "messages": [{"id": "u2", "role": "user", "content": "yes"}],
                "forwardedProps": {"command": {"resume": {"approved": true}}}}),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    let message = serde_json::from_str::<Value>(&body).unwrap()["error"]["message"].clone();
    assert!(
        message.as_str().unwrap().contains("interrupts = \"agent\""),
        "{body}"
    );

    // Agent: the graph's own interrupt passes untouched; the LangGraph way
    // resumes it.
    let gw = Gateway::start(&config("agent")).await;
    let v = node_client("langgraph_resume.mjs", &[&gw.run_url("lg"), &t, "lg-own"]).await;
    let first = &v["first"];
    assert!(first["error"].is_null(), "{v:#}");
    assert_eq!(first["pendingInterrupts"], json!([]), "{v:#}");
    let kinds: Vec<&str> = first["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(kinds.contains(&"CUSTOM:on_interrupt"), "{kinds:?}");
    assert!(v["second"]["error"].is_null(), "{v:#}");
    py.proc.expect_line("forwarded ").await; // the first run's
    let resumed: Value =
        serde_json::from_str(&py.proc.expect_line("forwarded ").await["forwarded ".len()..])
            .unwrap();
    assert_eq!(resumed["command"]["resume"], json!({"approved": true}));
    let said: Vec<&Value> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["content"])
        .collect();
    assert!(said.contains(&&json!("Sent.")), "the graph resumed: {v:#}");
    // The thread holds no interrupt the agent did not send, and the answer.
    let snap = json_of(http().get(gw.url("/v1/threads/lg-own")).bearer_auth(&t)).await;
    assert_eq!(snap["interrupts"], json!([]), "{snap:#}");
    assert_eq!(snap["run"]["status"], "finished", "{snap:#}");
    assert!(snap.to_string().contains("Sent."), "{snap:#}");
}

#[tokio::test]
async fn draft_shape_interrupt_is_normalized_and_answered() {
    let (_py, gw) = agent_behind_gateway("scripted_agent.py", "draft-interrupt", "draft", "").await;
    let mut c = ws(&gw, json!({})).await;
    c.send(run_cmd("draft", "d1", "r1", "delete the report"))
        .await;
    let frames = to_terminal(&mut c).await;
    let finished = last_event(&frames);
    assert!(finished.get("interrupt").is_none());
    assert_eq!(
        finished["outcome"],
        json!({"type": "interrupt", "interrupts": [{"id": "int-r1-1", "reason": "confirm_delete", "metadata": {"payload": {"file": "report.pdf"}}}]})
    );
    // Answers must cover every pending interrupt.
    c.send(json!({"type": "resume", "id": "none", "threadId": "d1", "resume": []}))
        .await;
    assert_eq!(c.recv().await["code"], "invalid");
    c.send(resume_cmd("ok", "d1", "int-r1-1", true)).await;
    let frames = c.recv_until(is_terminal_frame).await;
    let answer = frames
        .iter()
        .find(|f| f["event"]["name"] == "answer")
        .unwrap();
    assert_eq!(answer["event"]["value"]["interruptId"], "int-r1-1");
    assert_eq!(
        answer["event"]["value"]["payload"],
        json!({"approved": true})
    );
    // The HTTP face takes the same answers (a second time: conflict, nothing pending).
    let (status, body) = post_run(
        &gw.run_url("draft"),
        &token(json!({})),
        &json!({"threadId": "d1", "runId": "r3", "messages": [], "tools": [], "context": [],
                "resume": [{"interruptId": "int-r1-1", "status": "resolved"}]}),
    )
    .await;
    assert_eq!(status, 409, "{body}");
}

#[tokio::test]
async fn cancel_over_http_stops_the_upstream_with_a_run_id_guard() {
    let (mut py, gw) = agent_behind_gateway(
        "scripted_agent.py",
        "stall",
        "slow",
        "timeouts = { idle = \"1h\" }\n",
    )
    .await;
    let mut c = ws(&gw, json!({"sub": "olga"})).await;
    c.send(run_cmd("slow", "long", "r1", "take your time"))
        .await;
    c.recv_until(|f| f["event"]["type"] == "TEXT_MESSAGE_START")
        .await;
    let cancel = |run: Value, claims: Value| {
        let url = gw.url("/v1/threads/long/cancel");
        async move {
            let resp = http()
                .post(url)
                .bearer_auth(token(claims))
                .json(&json!({"runId": run}))
                .send()
                .await
                .unwrap();
            (resp.status().as_u16(), resp.json::<Value>().await.unwrap())
        }
    };
    assert_eq!(
        cancel(json!("stale-run"), json!({"sub": "olga"})).await.0,
        409,
        "a stale cancel stops nothing"
    );
    assert_eq!(
        cancel(json!("r1"), json!({"sub": "eve"})).await.0,
        404,
        "not visible to eve"
    );
    let (status, body) = cancel(json!("r1"), json!({"sub": "olga"})).await;
    assert_eq!((status, body["runId"].as_str()), (200, Some("r1")));
    py.proc.expect_line("DISCONNECTED stall").await;
    let frames = to_terminal(&mut c).await;
    let types: Vec<_> = frames
        .iter()
        .map(|f| f["event"]["type"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        types[types.len() - 2..],
        ["TEXT_MESSAGE_END", "RUN_FINISHED"],
        "open message closed first"
    );
    assert_eq!(last_event(&frames)["outcome"]["type"], "cancelled");
    assert_eq!(
        cancel(json!(null), json!({"sub": "olga"})).await.0,
        409,
        "nothing left to cancel"
    );
}

#[tokio::test]
async fn meta_events_are_attributed_deduplicated_and_broadcast() {
    let gw = Gateway::start(
        "[demo]\nenabled = true\ntoken_delay = \"1ms\"\n[[agents]]\nid = \"demo\"\nurl = \"demo:\"\n\
         [meta]\nallowed_types = [\"thumbs_up\", \"thumbs_down\", \"note\"]\nmax_payload_bytes = 256\n",
    )
    .await;
    let mut owner = ws(&gw, json!({"sub": "olga"})).await;
    owner.send(run_cmd("demo", "fb", "r1", "hi")).await;
    to_terminal(&mut owner).await;
    let mut fan = ws(
        &gw,
        json!({"sub": "fred", "threads": {"fb": ["view", "meta"]}}),
    )
    .await;
    fan.send(json!({"type": "subscribe", "threadId": "fb", "after": 1000000}))
        .await;
    assert_eq!(
        fan.recv().await["type"],
        "snapshot",
        "after beyond the journal: reset snapshot"
    );
    let post = json!({"type": "meta", "id": "m1", "threadId": "fb", "metaType": "thumbs_up",
                      "payload": {"userId": "forged-admin", "messageId": "x"}, "clientEventId": "c-1"});
    fan.send(post.clone()).await;
    let ack = fan
        .recv_until(|f| f["id"] == "m1")
        .await
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (ack["type"].as_str(), ack["duplicate"].as_bool()),
        (Some("ack"), Some(false))
    );
    // Everyone sees it, attributed to the token's subject.
    let seen = owner.recv_until(|f| f["event"]["type"] == "META").await;
    let meta = &last_event(&seen);
    assert_eq!(
        meta["payload"]["userId"], "fred",
        "a forged userId is overwritten"
    );
    assert_eq!(meta["metaType"], "thumbs_up");
    assert_eq!(meta["id"], ack["eventId"]);
    // The same clientEventId again: acknowledged as a duplicate, nothing appended.
    fan.send(post).await;
    let dup = fan
        .recv_until(|f| f["id"] == "m1")
        .await
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (dup["duplicate"].as_bool(), &dup["eventId"]),
        (Some(true), &ack["eventId"])
    );
    // Over HTTP too; limits and permissions apply.
    let meta_post = |claims: Value, body: Value| {
        let url = gw.url("/v1/threads/fb/meta");
        async move {
            let resp = http()
                .post(url)
                .bearer_auth(token(claims))
                .json(&body)
                .send()
                .await
                .unwrap();
            (resp.status().as_u16(), resp.json::<Value>().await.unwrap())
        }
    };
    let (s, v) = meta_post(
        json!({"sub": "olga"}),
        json!({"metaType": "note", "payload": {"text": "good"}}),
    )
    .await;
    assert_eq!((s, v["duplicate"].as_bool()), (200, Some(false)));
    assert_eq!(
        meta_post(
            json!({"sub": "olga"}),
            json!({"metaType": "rating", "payload": {}})
        )
        .await
        .0,
        400
    );
    assert_eq!(
        meta_post(
            json!({"sub": "olga"}),
            json!({"metaType": "note", "payload": {"t": "x".repeat(300)}})
        )
        .await
        .0,
        413
    );
    assert_eq!(
        meta_post(
            json!({"sub": "wes", "threads": {"fb": ["view"]}}),
            json!({"metaType": "note"})
        )
        .await
        .0,
        403
    );
    // SSE join viewers get them as CUSTOM agui-gateway/meta (stock clients drop META).
    let resp = http()
        .get(gw.url("/v1/threads/fb/events?after=0"))
        .bearer_auth(token(json!({"sub": "olga"})))
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    use futures::StreamExt;
    while text.matches("agui-gateway/meta").count() < 2 {
        let chunk = tokio::time::timeout(WAIT, body.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let metas: Vec<Value> = sse_events(&text)
        .into_iter()
        .filter(|e| e["type"] == "CUSTOM" && e["name"] == "agui-gateway/meta")
        .collect();
    assert_eq!(metas[0]["value"]["payload"]["userId"], "fred");
    assert_eq!(metas[1]["value"]["payload"]["userId"], "olga");
    assert!(!text.contains("\"type\":\"META\""));
}

#[tokio::test]
async fn on_disconnect_cancel_stops_the_run_when_the_last_viewer_leaves() {
    let (mut py, gw) = agent_behind_gateway(
        "scripted_agent.py",
        "stall",
        "slow",
        "on_disconnect = \"cancel\"\ntimeouts = { idle = \"1h\" }\n",
    )
    .await;
    let mut c = ws(&gw, json!({"sub": "olga"})).await;
    c.send(run_cmd("slow", "gone", "r1", "hello")).await;
    c.recv_until(|f| f["event"]["type"] == "TEXT_MESSAGE_START")
        .await;
    drop(c); // the only viewer leaves
    py.proc.expect_line("DISCONNECTED stall").await;
    let mut back = ws(&gw, json!({"sub": "olga"})).await;
    back.send(json!({"type": "subscribe", "threadId": "gone", "after": 0}))
        .await;
    let frames = to_terminal(&mut back).await;
    assert_eq!(last_event(&frames)["outcome"]["type"], "cancelled");
}

#[tokio::test]
async fn expired_interrupts_cannot_be_answered() {
    let (_py, gw) = agent_behind_gateway("scripted_agent.py", "expired-interrupt", "x", "").await;
    let mut c = ws(&gw, json!({})).await;
    c.send(run_cmd("x", "exp", "r1", "hi")).await;
    let frames = to_terminal(&mut c).await;
    assert_eq!(
        last_event(&frames)["outcome"]["interrupts"][0]["id"],
        "late"
    );
    c.send(resume_cmd("r", "exp", "late", true)).await;
    let e = c.recv().await;
    assert_eq!(e["code"], "invalid");
    assert!(e["message"].as_str().unwrap().contains("expired"), "{e}");
}

#[tokio::test]
async fn meta_events_reach_the_webhook_with_retries() {
    let mut sink = PyAgent::start("webhook_sink.py").await;
    let gw = Gateway::start_with_env(
        &format!(
            "[demo]\nenabled = true\ntoken_delay = \"1ms\"\n[[agents]]\nid = \"demo\"\nurl = \"demo:\"\n\
             [meta]\nwebhook_url = \"{}\"\nwebhook_headers = {{ X-Key = \"${{HOOK_KEY}}\" }}\n",
            sink.url("hook")
        ),
        &[("HOOK_KEY", "k-123")],
    )
    .await;
    let mut c = ws(&gw, json!({"sub": "olga", "tenant": "acme"})).await;
    c.send(run_cmd("demo", "hooked", "r1", "hi")).await;
    to_terminal(&mut c).await;
    c.send(json!({"type": "meta", "id": "m", "threadId": "hooked", "metaType": "thumbs_down", "payload": {"why": "slow"}})).await;
    assert_eq!(
        c.recv_until(|f| f["id"] == "m").await.last().unwrap()["type"],
        "ack"
    );
    sink.proc.expect_line("REFUSED").await;
    let line = sink.proc.expect_line("DELIVERED ").await;
    let rest = line.trim_start_matches("DELIVERED ");
    let (key, body) = rest.split_once(' ').unwrap();
    assert_eq!(key, "k-123");
    let body: Value = serde_json::from_str(body).unwrap();
    assert_eq!(
        (body["tenant"].as_str(), body["threadId"].as_str()),
        (Some("acme"), Some("hooked"))
    );
    assert_eq!(body["event"]["metaType"], "thumbs_down");
    assert_eq!(body["event"]["payload"]["userId"], "olga");
    assert!(body["seq"].as_u64().unwrap() > 1);
}
