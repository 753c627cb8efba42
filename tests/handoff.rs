//! Handoff between agents on one thread (docs/protocol.md, "Handoff"): real
//! pydantic-ai agents calling the transfer tools the gateway offers
//! (`tests/agents/handoff_agents.py`), a scripted `ag_ui.core` agent sending
//! `CUSTOM agui-gateway/handoff`, the stock `@ag-ui/client`, WebSocket
//! viewers, and the thread's journal, runs and metrics.

mod common;
use common::*;
use serde_json::{Value, json};

/// The agents, with `billing_extra` / `triage_extra` TOML inside their
/// tables (a `handoff = {…}` line replaces the default one).
fn agents(py: &PyAgent, triage: &str, billing: &str) -> String {
    format!(
        "[[agents]]\nid = \"triage\"\nurl = \"{}\"\ndescription = \"Routes the user\"\n{triage}\n\
         [[agents]]\nid = \"billing\"\nurl = \"{}\"\ndescription = \"Answers invoice and payment questions\"\n{billing}\n\
         [[agents]]\nid = \"support\"\nurl = \"{}\"\n\
         [[agents]]\nid = \"scripted\"\nurl = \"{}\"\nhandoff = {{ targets = [\"billing\", \"vault\"] }}\n\
         [[agents]]\nid = \"vault\"\nurl = \"{}\"\nroles = [\"admin\"]\n",
        py.url("triage"),
        py.url("billing"),
        py.url("scripted"),
        py.url("scripted"),
        py.url("scripted"),
    )
}

const TRIAGE: &str = "handoff = { targets = [\"billing\", \"support\"] }";
const BILLING: &str = "handoff = { targets = [\"triage\"] }";

async fn received(py: &PyAgent, agent: &str) -> Vec<Value> {
    let v = json_of(http().get(py.url(&format!("received/{agent}")))).await;
    v.as_array().unwrap().clone()
}

/// The thread's journal from the start, as a join stream gives it (read up
/// to the last seq the snapshot names; the stream itself follows on).
async fn journal(gw: &Gateway, t: &str, thread: &str) -> Vec<Value> {
    let snap = json_of(
        http()
            .get(gw.url(&format!("/v1/threads/{thread}")))
            .bearer_auth(t),
    )
    .await;
    // `id: <seq>`, or `id: <seq>.<epoch>` on Redis (docs/protocol.md, "Cursors").
    let seq = snap["seq"].as_u64().unwrap();
    let last = |body: &str| {
        let plain = format!("id: {seq}\n");
        let with_epoch = format!("id: {seq}.");
        body.find(&plain).or_else(|| body.find(&with_epoch))
    };
    let mut resp = http()
        .get(gw.url(&format!("/v1/threads/{thread}/events?after=0")))
        .bearer_auth(t)
        .send()
        .await
        .unwrap();
    let mut body = String::new();
    while last(&body).is_none() {
        let chunk = resp.chunk().await.unwrap().expect("the stream goes on");
        body.push_str(&String::from_utf8_lossy(&chunk));
    }
    // Up to the end of that frame.
    let end = last(&body).unwrap();
    let end = end + body[end..].find("\n\n").map_or(body.len() - end, |i| i + 2);
    sse_events(&body[..end])
}

/// The thread's runs, oldest first.
async fn runs(gw: &Gateway, t: &str, thread: &str) -> Vec<Value> {
    let v = json_of(
        http()
            .get(gw.url(&format!("/v1/threads/{thread}/runs")))
            .bearer_auth(t),
    )
    .await;
    v["runs"].as_array().unwrap().clone()
}

fn handoff_records(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["type"] == "CUSTOM" && e["name"] == "agui-gateway/handoff")
        .map(|e| e["value"].clone())
        .collect()
}

fn refusals(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| {
            e["type"] == "CUSTOM"
                && e["name"] == "agui-gateway/policy"
                && e["value"]["action"] == "handoff_refused"
        })
        .map(|e| e["value"].clone())
        .collect()
}

fn text_of(messages: &Value) -> String {
    messages
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join(" | ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_call_hands_the_thread_to_billing_within_one_stock_request() {
    let py = PyAgent::start("handoff_agents.py").await;
    let gw = Gateway::start(&agents(&py, TRIAGE, BILLING)).await;
    let t = token(json!({}));
    let out = node_client(
        "httpagent.mjs",
        &[
            &gw.run_url("triage"),
            &t,
            "h1",
            "r1",
            "I have a bill question",
        ],
    )
    .await;
    assert_eq!(out["error"], Value::Null, "{out}");
    let events = out["events"].as_array().unwrap();
    let started: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "RUN_STARTED")
        .collect();
    assert_eq!(started.len(), 2, "one request, two runs: {events:#?}");
    let billing_run = started[1]["runId"].as_str().unwrap().to_owned();
    assert_ne!(billing_run, "r1");
    let all = text_of(&out["messages"]);
    assert!(all.contains("Billing here: your invoice is paid."), "{all}");
    assert!(
        all.contains("Transferred to 'billing'."),
        "the transfer call has its result: {all}"
    );

    // What billing was sent: the transfer's result, its own transfer tool,
    // none of triage's, and no encrypted value triage produced.
    let billing_in = received(&py, "billing").await;
    let sent = billing_in.last().unwrap();
    let tools: Vec<&str> = sent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["transfer_to_triage"], "{sent}");
    assert!(
        sent["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "tool" && m["content"] == "Transferred to 'billing'."),
        "{sent}"
    );
    let triage_in = received(&py, "triage").await;
    assert!(
        triage_in[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "transfer_to_billing"),
        "triage was offered the transfer"
    );
    let journal_text = serde_json::to_string(&journal(&gw, &t, "h1").await).unwrap();
    assert!(
        journal_text.contains("triage-only-secret"),
        "triage's encrypted thinking is journaled"
    );
    assert!(
        !serde_json::to_string(sent)
            .unwrap()
            .contains("triage-only-secret"),
        "billing never gets triage's encryptedValue: {sent}"
    );

    // Injected tools never reach the journal.
    let events = journal(&gw, &t, "h1").await;
    for start in events.iter().filter(|e| e["type"] == "RUN_STARTED") {
        let tools = serde_json::to_string(&start["input"]["tools"]).unwrap();
        assert!(!tools.contains("transfer_to_"), "{start}");
    }
    let records = handoff_records(&events);
    assert_eq!(records.len(), 1, "{records:?}");
    let r = &records[0];
    assert_eq!(
        (
            &r["fromAgent"],
            &r["toAgent"],
            &r["fromRunId"],
            &r["toRunId"],
            &r["trigger"],
            &r["result"]
        ),
        (
            &json!("triage"),
            &json!("billing"),
            &json!("r1"),
            &json!(billing_run),
            &json!("tool"),
            &json!("accepted")
        )
    );
    assert_eq!(r["reason"], "invoice question");
    // A viewer joining from the start sees A's run, the handoff, then B's run.
    let mut ws = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    ws.send(json!({"type": "subscribe", "threadId": "h1", "after": 0}))
        .await;
    let frames = ws
        .recv_until(|f| is_terminal_frame(f) && f["event"]["runId"] == billing_run.as_str())
        .await;
    let seen: Vec<String> = frames
        .iter()
        .filter(|f| f["type"] == "event")
        .map(|f| {
            let e = &f["event"];
            format!(
                "{}:{}",
                e["type"].as_str().unwrap(),
                e["name"].as_str().unwrap_or("")
            )
        })
        .collect();
    let handoff_at = seen.iter().position(|s| s == "CUSTOM:agui-gateway/handoff");
    let first_end = seen.iter().position(|s| s == "RUN_FINISHED:");
    assert!(
        handoff_at.is_some() && first_end < handoff_at,
        "the handoff comes after triage's run: {seen:?}"
    );

    // The run tree and the snapshot say who speaks now.
    let listed = runs(&gw, &t, "h1").await;
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[1]["kind"], "handoff");
    assert_eq!(listed[1]["parentRunId"], "r1");
    assert_eq!(listed[1]["agent"], "billing");
    let snap = json_of(http().get(gw.url("/v1/threads/h1")).bearer_auth(&t)).await;
    assert_eq!(snap["activeAgent"], "billing", "{snap}");

    // The next plain run (no agent named) reaches billing.
    let (status, body) = post_run(
        &gw.url("/v1/run"),
        &t,
        &json!({"threadId": "h1", "runId": "r3", "tools": [], "context": [],
                "messages": [{"id": "u2", "role": "user", "content": "and my balance?"}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"delta\":\"Billing \""), "{body}");
    assert_eq!(runs(&gw, &t, "h1").await[2]["agent"], "billing");
    // A client sending its complete history to another agent (the stock
    // client's way) has triage's encrypted value stripped too.
    let snap = json_of(http().get(gw.url("/v1/threads/h1")).bearer_auth(&t)).await;
    let mut history = snap["messages"].as_array().unwrap().clone();
    assert!(
        serde_json::to_string(&history)
            .unwrap()
            .contains("triage-only-secret"),
        "the snapshot keeps it: {history:?}"
    );
    history.push(json!({"id": "u9", "role": "user", "content": "one more"}));
    let (status, body) = post_run(
        &gw.run_url("billing"),
        &t,
        &json!({"threadId": "h1", "runId": "r9", "tools": [], "context": [], "messages": history}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let sent = received(&py, "billing").await;
    let sent = serde_json::to_string(sent.last().unwrap()).unwrap();
    assert!(sent.contains("one more"), "{sent}");
    assert!(!sent.contains("triage-only-secret"), "{sent}");
    // Counted by the node that ran the turn.
    let metrics = gw.metrics_of_every_node().await;
    assert!(
        metrics.iter().any(|m| m
            .contains("agui_handoffs_total{from=\"triage\",to=\"billing\",result=\"started\"} 1")),
        "{metrics:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_sticky_agent_hands_the_next_plain_run_back_to_the_entry_agent() {
    let py = PyAgent::start("handoff_agents.py").await;
    let gw = Gateway::start(&agents(
        &py,
        "handoff = { targets = [\"billing\"], respond = \"end\", history = \"since-last-user\", carry_state = false }",
        "handoff = { targets = [\"triage\"], sticky = false }",
    ))
    .await;
    let t = token(json!({}));
    let mut first = input("h2", "r1", "a bill?");
    first["state"] = json!({"cart": 3});
    first["messages"] = json!([
        {"id": "u0", "role": "user", "content": "hello"},
        {"id": "a0", "role": "assistant", "content": "hi"},
        {"id": "u1", "role": "user", "content": "a bill?"}
    ]);
    let (status, body) = post_run(&gw.run_url("triage"), &t, &first).await;
    assert_eq!(status, 200);
    // `respond = "end"`: the response ends with triage's run…
    let events = sse_events(&body);
    assert_eq!(
        types(&events)
            .iter()
            .filter(|t| *t == "RUN_STARTED")
            .count(),
        1,
        "{body}"
    );
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
    // …and billing's run is on the thread.
    let mut ws = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    ws.send(json!({"type": "subscribe", "threadId": "h2", "after": 0}))
        .await;
    let frames = ws
        .recv_until(|f| is_terminal_frame(f) && f["event"]["runId"] != "r1")
        .await;
    assert!(
        frames.iter().any(|f| f["event"]["delta"] == "Billing "),
        "{frames:#?}"
    );
    // Billing got the history from the last user message on, and no state.
    let sent = received(&py, "billing").await;
    let sent = sent.last().unwrap();
    assert_eq!(sent["messages"][0]["id"], "u1", "{sent}");
    assert_eq!(sent["state"], json!({}), "{sent}");
    // The plain run over WebSocket: no agent in the frame.
    ws.send(
        json!({"type": "run", "id": "x", "threadId": "h2", "runId": "r3",
                   "messages": [{"id": "u2", "role": "user", "content": "hello"}]}),
    )
    .await;
    ws.recv_until(|f| is_terminal_frame(f) && f["event"]["runId"] == "r3")
        .await;
    let listed = runs(&gw, &t, "h2").await;
    assert_eq!(listed.last().unwrap()["agent"], "triage", "{listed:?}");
    // A person switches the thread to billing: the next plain run goes there.
    let ack = json_of(
        http()
            .post(gw.url("/v1/threads/h2/agent"))
            .bearer_auth(&t)
            .json(&json!({"agent": "billing"})),
    )
    .await;
    assert_eq!(ack["agent"], "billing", "{ack}");
    let snap = json_of(http().get(gw.url("/v1/threads/h2")).bearer_auth(&t)).await;
    assert_eq!(snap["activeAgent"], "billing");
    ws.send(
        json!({"type": "run", "id": "y", "threadId": "h2", "runId": "r4",
                   "messages": [{"id": "u3", "role": "user", "content": "hi"}]}),
    )
    .await;
    ws.recv_until(|f| is_terminal_frame(f) && f["event"]["runId"] == "r4")
        .await;
    assert_eq!(
        runs(&gw, &t, "h2").await.last().unwrap()["agent"],
        "billing"
    );
    // The same over WebSocket: the switch is acked and journaled for every viewer.
    ws.send(json!({"type": "switch", "id": "sw", "threadId": "h2", "agent": "triage"}))
        .await;
    // (The event and the ack may come in either order.)
    let (mut acked, mut journaled) = (false, false);
    while !(acked && journaled) {
        let f = ws.recv().await;
        if f["id"] == "sw" {
            assert_eq!(
                (&f["type"], &f["agent"]),
                (&json!("ack"), &json!("triage")),
                "{f}"
            );
            acked = true;
        }
        if f["event"]["name"] == "agui-gateway/active-agent" {
            assert_eq!(f["event"]["value"]["agent"], "triage", "{f}");
            journaled = true;
        }
    }
    let snap = json_of(http().get(gw.url("/v1/threads/h2")).bearer_auth(&t)).await;
    assert_eq!(snap["activeAgent"], "triage");
    // Switching to an agent the caller may not run is refused.
    let resp = http()
        .post(gw.url("/v1/threads/h2/agent"))
        .bearer_auth(&t)
        .json(&json!({"agent": "vault"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoff_policy_refuses_unlisted_targets_escalation_and_ping_pong() {
    let py = PyAgent::start("handoff_agents.py").await;
    let gw = Gateway::start(&agents(
        &py,
        "handoff = { targets = [\"billing\", \"support\"], max_chain = 3 }",
        "handoff = { targets = [\"triage\"], max_chain = 3 }",
    ))
    .await;
    let t = token(json!({}));

    // A target not in the agent's list: refused, noted, nothing follows.
    let orders = json!({"handoff": "triage"}).to_string();
    let (_, body) = post_run(&gw.run_url("scripted"), &t, &input("p1", "r1", &orders)).await;
    let events = sse_events(&body);
    assert_eq!(
        types(&events)
            .iter()
            .filter(|t| *t == "RUN_STARTED")
            .count(),
        1
    );
    let refused = refusals(&events);
    assert_eq!(refused.len(), 1, "{events:#?}");
    assert!(
        refused[0]["reason"]
            .as_str()
            .unwrap()
            .contains("may not hand off")
    );
    assert!(
        !body.contains("\"name\":\"agui-gateway/handoff\""),
        "an agent's own handoff request is never forwarded: {body}"
    );

    // A target the caller's roles may not run: a handoff never escalates.
    let orders = json!({"handoff": "vault"}).to_string();
    let (_, body) = post_run(&gw.run_url("scripted"), &t, &input("p2", "r1", &orders)).await;
    let refused = refusals(&sse_events(&body));
    assert!(
        refused[0]["reason"].as_str().unwrap().contains("roles"),
        "{refused:?}"
    );
    let admin = token(json!({"roles": ["admin"]}));
    let (_, body) = post_run(&gw.run_url("scripted"), &admin, &input("p3", "r1", &orders)).await;
    assert_eq!(
        types(&sse_events(&body))
            .iter()
            .filter(|t| *t == "RUN_STARTED")
            .count(),
        2,
        "{body}"
    );

    // Ping-pong stops at the chain limit; the last agent is told why.
    let (_, body) = post_run(&gw.run_url("triage"), &t, &input("p4", "r1", "pingpong")).await;
    let events = sse_events(&body);
    let refused = refusals(&events);
    assert!(!refused.is_empty(), "{events:#?}");
    assert!(
        refused[0]["reason"].as_str().unwrap().contains("max_chain"),
        "{refused:?}"
    );
    let listed = runs(&gw, &t, "p4").await;
    assert!(listed.len() <= 6, "bounded: {listed:#?}");
    let handoffs = handoff_records(&journal(&gw, &t, "p4").await);
    assert_eq!(handoffs.len(), 3, "{handoffs:#?}");

    // Two transfer calls in one turn: the first wins, the other is answered.
    let (_, body) = post_run(&gw.run_url("triage"), &t, &input("p5", "r1", "twice")).await;
    assert!(body.contains("\"delta\":\"Billing \""), "{body}");
    let sent = received(&py, "billing").await;
    let sent = serde_json::to_string(sent.last().unwrap()).unwrap();
    assert!(
        sent.contains("Not transferred: only the first transfer"),
        "{sent}"
    );
    assert!(
        received(&py, "scripted")
            .await
            .iter()
            .all(|b| b["threadId"] != "p5")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_is_asked_then_approved_or_declined_through_a_stock_resume() {
    let py = PyAgent::start("handoff_agents.py").await;
    let gw = Gateway::start(&agents(
        &py,
        "handoff = { targets = [\"billing\"], approval = \"user\" }",
        BILLING,
    ))
    .await;
    let t = token(json!({}));
    for (thread, approved) in [("a1", true), ("a2", false)] {
        let out = node_client(
            "httpagent.mjs",
            &[&gw.run_url("triage"), &t, thread, "r1", "a bill question"],
        )
        .await;
        assert_eq!(out["error"], Value::Null, "{out}");
        let pending = out["pendingInterrupts"].as_array().expect("an interrupt");
        assert_eq!(pending.len(), 1, "{out}");
        assert_eq!(pending[0]["message"], "Transfer to billing?");
        let resume = json!([{"interruptId": pending[0]["id"], "status": "resolved",
                             "payload": {"approved": approved}}]);
        let out = node_client(
            "httpagent.mjs",
            &[
                &gw.run_url("triage"),
                &t,
                thread,
                "r2",
                "a bill question",
                &resume.to_string(),
            ],
        )
        .await;
        assert_eq!(out["error"], Value::Null, "{out}");
        let all = text_of(&out["messages"]);
        let listed = runs(&gw, &t, thread).await;
        if approved {
            assert!(all.contains("Billing here"), "{all}");
            assert_eq!(listed[1]["agent"], "billing");
            assert_eq!(listed[1]["kind"], "handoff");
            // Billing never sees the answer to the gateway's own interrupt.
            let sent = received(&py, "billing").await;
            assert!(
                sent.last()
                    .unwrap()
                    .get("resume")
                    .is_none_or(Value::is_null),
                "{sent:?}"
            );
        } else {
            assert!(
                all.contains("Triage again: The user declined the transfer to 'billing'."),
                "{all}"
            );
            assert_eq!(listed[1]["agent"], "triage");
        }
        assert_eq!(
            listed[1]["runId"], "r2",
            "the resume keeps the client's runId"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_never_answers_leaves_the_source_speaking_with_a_failure_result() {
    let py = PyAgent::start("handoff_agents.py").await;
    let gw = Gateway::start(&format!(
        "[[agents]]\nid = \"triage\"\nurl = \"{}\"\n{TRIAGE}\n\
         [[agents]]\nid = \"billing\"\nurl = \"http://127.0.0.1:9/down\"\n\
         [[agents]]\nid = \"support\"\nurl = \"{}\"\n",
        py.url("triage"),
        py.url("scripted"),
    ))
    .await;
    let t = token(json!({}));
    let (_, body) = post_run(&gw.run_url("triage"), &t, &input("f1", "r1", "a bill?")).await;
    let events = sse_events(&body);
    assert_eq!(events.last().unwrap()["type"], "RUN_ERROR", "{events:#?}");
    let records = handoff_records(&journal(&gw, &t, "f1").await);
    assert_eq!(records[0]["result"], "failed", "{records:?}");
    let snap = json_of(http().get(gw.url("/v1/threads/f1")).bearer_auth(&t)).await;
    assert_eq!(snap["activeAgent"], "triage");
    // The next plain turn (the gateway builds the history): triage, told
    // the transfer failed.
    let mut ws = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    ws.send(
        json!({"type": "run", "id": "x", "threadId": "f1", "runId": "r3",
                   "messages": [{"id": "u2", "role": "user", "content": "so?"}]}),
    )
    .await;
    ws.recv_until(|f| is_terminal_frame(f) && f["event"]["runId"] == "r3")
        .await;
    let sent = received(&py, "triage").await;
    let sent = serde_json::to_string(sent.last().unwrap()).unwrap();
    assert!(sent.contains("The transfer to 'billing' failed"), "{sent}");
    assert_eq!(runs(&gw, &t, "f1").await.last().unwrap()["agent"], "triage");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_a_handoff_started_can_be_cancelled_and_frees_the_thread() {
    let py = PyAgent::start("handoff_agents.py").await;
    let gw = Gateway::start(&agents(&py, TRIAGE, BILLING)).await;
    let t = token(json!({}));
    let mut ws = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    ws.send(
        json!({"type": "run", "id": "go", "agent": "triage", "threadId": "c1", "runId": "r1",
                   "messages": [{"id": "u1", "role": "user", "content": "slow bill"}]}),
    )
    .await;
    // Billing's run: its handoff record names it; it is under way once it speaks.
    let frames = ws
        .recv_until(|f| {
            f["event"]["type"] == "TEXT_MESSAGE_CONTENT"
                && f["event"]["delta"] == "Billing is thinking"
        })
        .await;
    let record = frames
        .iter()
        .find(|f| f["event"]["name"] == "agui-gateway/handoff")
        .expect("the handoff record");
    let billing_run = record["event"]["value"]["toRunId"]
        .as_str()
        .unwrap()
        .to_owned();
    // Triage's run is over: a cancel naming it is refused; naming billing's stops it.
    let refused = http()
        .post(gw.url("/v1/threads/c1/cancel"))
        .bearer_auth(&t)
        .json(&json!({"runId": "r1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 409);
    let ack = json_of(
        http()
            .post(gw.url("/v1/threads/c1/cancel"))
            .bearer_auth(&t)
            .json(&json!({"runId": billing_run})),
    )
    .await;
    assert_eq!(ack["runId"], billing_run.as_str(), "{ack}");
    let frames = ws
        .recv_until(|f| is_terminal_frame(f) && f["event"]["runId"] == billing_run.as_str())
        .await;
    assert_eq!(
        frames.last().unwrap()["event"]["outcome"]["type"],
        "cancelled"
    );
    // The slot is free: the next run starts at once.
    ws.send(
        json!({"type": "run", "id": "next", "agent": "triage", "threadId": "c1", "runId": "r3",
                   "messages": [{"id": "u2", "role": "user", "content": "hello"}]}),
    )
    .await;
    if let Err(refused) = ws.answer_and_run("next", "r3").await {
        panic!("the next run is taken at once: {refused}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_name_the_handoff_targets_the_caller_may_run() {
    let py = PyAgent::start("handoff_agents.py").await;
    let triage = format!(
        "{TRIAGE}\ncapabilities_url = \"{}\"",
        py.url("capabilities")
    );
    let gw = Gateway::start(&agents(&py, &triage, BILLING)).await;
    let caps = json_of(
        http()
            .get(gw.url("/v1/agents/scripted/capabilities"))
            .bearer_auth(token(json!({}))),
    )
    .await;
    assert_eq!(caps["transport"]["streaming"], true, "{caps}");
    assert_eq!(caps["transport"]["websocket"], true);
    assert_eq!(caps["humanInTheLoop"]["interrupts"], true);
    let names = |c: &Value| -> Vec<String> {
        c["multiAgent"]["subagents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_owned())
            .collect()
    };
    // `vault` needs the admin role: not a target for this caller.
    assert_eq!(names(&caps), ["billing"]);
    assert_eq!(caps["multiAgent"]["handoffs"], true);
    let admin = json_of(
        http()
            .get(gw.url("/v1/agents/scripted/capabilities"))
            .bearer_auth(token(json!({"roles": ["admin"]}))),
    )
    .await;
    assert_eq!(names(&admin), ["billing", "vault"]);
    // An agent's own declaration is merged under the gateway's.
    let triage = json_of(
        http()
            .get(gw.url("/v1/agents/triage/capabilities"))
            .bearer_auth(token(json!({}))),
    )
    .await;
    assert_eq!(triage["reasoning"]["encrypted"], true, "{triage}");
    assert_eq!(triage["transport"]["streaming"], true, "{triage}");
    let none = json_of(
        http()
            .get(gw.url("/v1/agents/support/capabilities"))
            .bearer_auth(token(json!({}))),
    )
    .await;
    assert_eq!(none["multiAgent"]["handoffs"], false);
    let missing = http()
        .get(gw.url("/v1/agents/nope/capabilities"))
        .bearer_auth(token(json!({})))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status().as_u16(), 404);
}

/// The `traceparent` headers `agent` received, oldest first.
async fn traceparents(py: &PyAgent, agent: &str) -> Vec<String> {
    let v = json_of(http().get(py.url(&format!("traceparents/{agent}")))).await;
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap_or("(none)").to_owned())
        .collect()
}

#[tokio::test]
async fn a_handoff_targets_request_continues_the_clients_traceparent() {
    let py = PyAgent::start("handoff_agents.py").await;
    let gw = Gateway::start(&agents(&py, TRIAGE, BILLING)).await;
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = format!("00-{trace}-00f067aa0ba902b7-01");
    let resp = http()
        .post(gw.run_url("triage"))
        .bearer_auth(token(json!({})))
        .header("traceparent", &parent)
        .json(&input("tp1", "r1", "I have a bill question"))
        .send()
        .await
        .unwrap();
    let events = sse_events(&resp.text().await.unwrap());
    let started = events.iter().filter(|e| e["type"] == "RUN_STARTED").count();
    assert_eq!(started, 2, "triage handed over to billing: {events:#?}");

    let (source, target) = (
        traceparents(&py, "triage").await,
        traceparents(&py, "billing").await,
    );
    assert_eq!(
        (source.len(), target.len()),
        (1, 1),
        "{source:?} {target:?}"
    );
    for (agent, sent) in [("triage", &source[0]), ("billing", &target[0])] {
        assert!(
            sent.starts_with(&format!("00-{trace}-")) && sent.len() == 55,
            "{agent}'s request continues the client's trace: {sent}"
        );
        assert_ne!(sent, &parent, "{agent}: a span of the gateway's own");
    }
    assert_ne!(source[0], target[0], "each run is a span of its own");
}

/// A branch from a handoff's source run: the source ended on its transfer
/// call, whose result is the target run's input, not part of the source's
/// end. The branch's history must still be a conversation a model API
/// accepts — every assistant tool call followed by its result — so the
/// gateway answers the call there (and journals what it sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_from_a_handoffs_source_sends_no_call_without_its_result() {
    let py = PyAgent::start("handoff_agents.py").await;
    let gw = Gateway::start(&agents(&py, TRIAGE, BILLING)).await;
    let t = token(json!({}));
    let (status, body) = post_run(
        &gw.run_url("triage"),
        &t,
        &input("hf", "r1", "I have a bill question"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(runs(&gw, &t, "hf").await.len(), 2, "triage handed over");

    let (status, body) = post_run(
        &gw.run_url("billing"),
        &t,
        &json!({"threadId": "hf", "runId": "r3", "parentRunId": "r1", "tools": [], "context": [],
                "messages": [{"id": "u3", "role": "user", "content": "and my refund?"}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("RUN_FINISHED"), "{body}");
    assert_eq!(runs(&gw, &t, "hf").await[2]["kind"], "branch");

    let sent = received(&py, "billing").await;
    let messages = sent.last().unwrap()["messages"].as_array().unwrap().clone();
    let calls: Vec<(usize, String)> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m["role"] == "assistant")
        .flat_map(|(i, m)| {
            m["toolCalls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |c| (i, c["id"].as_str().unwrap().to_owned()))
        })
        .collect();
    assert!(
        !calls.is_empty(),
        "the branch holds triage's transfer call: {messages:#?}"
    );
    for (at, call) in calls {
        // Its result is among the tool messages right after its message.
        let answered = messages[at + 1..]
            .iter()
            .take_while(|m| m["role"] == "tool")
            .any(|m| m["toolCallId"] == call.as_str());
        assert!(answered, "call {call} has no result: {messages:#?}");
    }
    assert_eq!(messages.last().unwrap()["id"], "u3", "{messages:#?}");
    // The journal's restated history is what billing got.
    let snap = json_of(http().get(gw.url("/v1/threads/hf")).bearer_auth(&t)).await;
    assert!(
        snap["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "tool" && m["id"].as_str().unwrap().starts_with("branch-result-")),
        "{snap}"
    );
}
