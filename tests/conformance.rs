//! AG-UI 1.1 conformance of the gateway as a relay, against the real gateway
//! and real AG-UI agents: the `basic/versioning`, `events/reasoning`,
//! `events/lifecycle` and `basic/run-input` pages, where they say what an
//! intermediary does with what an agent sent.

mod common;

use common::*;
use serde_json::{Value, json};

/// The version the gateway declares (`src/protocol/version.rs`).
const GATEWAY_VERSION: &str = "1.1";

async fn ws(gw: &Gateway) -> Ws {
    Ws::connect(gw, WsAuth::Header(&token(json!({}))))
        .await
        .expect("upgrade")
}

fn run_cmd(agent: &str, thread: &str, run: &str, text: &str) -> Value {
    json!({"type": "run", "id": run, "agent": agent, "threadId": thread, "runId": run,
           "messages": [{"id": format!("u-{run}"), "role": "user", "content": text}]})
}

/// The thread's snapshot object.
async fn snapshot(gw: &Gateway, thread: &str) -> Value {
    json_of(
        http()
            .get(gw.url(&format!("/v1/threads/{thread}")))
            .bearer_auth(token(json!({}))),
    )
    .await
}

/// Every journaled event of `thread`, in seq order (a WebSocket subscribe
/// from 0, read up to the snapshot's seq).
async fn journal(gw: &Gateway, thread: &str) -> Vec<Value> {
    let last = snapshot(gw, thread).await["seq"].as_u64().unwrap();
    let mut c = ws(gw).await;
    c.send(json!({"type": "subscribe", "id": "j", "threadId": thread, "after": 0}))
        .await;
    let frames = c
        .recv_until(|f| f["type"] == "event" && f["seq"].as_u64() == Some(last))
        .await;
    frames
        .into_iter()
        .filter(|f| f["type"] == "event")
        .map(|f| f["event"].clone())
        .collect()
}

/// The message with `id` in a list of AG-UI messages.
fn message<'a>(messages: &'a Value, id: &str) -> &'a Value {
    messages
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("no message {id} in {messages:#}"))
}

/// `events/reasoning`, "encryptedValueType": the type is stored with its
/// value, replaced with it and removed when a new value comes without one;
/// it goes back to the agent in the next run's history, the `ai-sdk` export
/// carries it, and the protobuf transport (whose `@ag-ui/proto` 1.0.0 schema
/// has no field for it) says so in a `CUSTOM agui-gateway/lossy` right after
/// each event it could not carry whole.
#[tokio::test]
async fn an_encrypted_value_keeps_its_type_everywhere_the_format_can_carry_it() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&format!(
        "[[agents]]\nid = \"enc\"\nurl = \"{}\"\n[[agents]]\nid = \"echo\"\nurl = \"{}\"\n",
        py.url("encrypted"),
        py.url("echo")
    ))
    .await;
    let mut c = ws(&gw).await;
    c.send(run_cmd("enc", "think", "r1", "why?")).await;
    let frames = c.recv_until(is_terminal_frame).await;
    assert_eq!(frames.last().unwrap()["event"]["type"], "RUN_FINISHED");

    // The fold (every snapshot, every late joiner).
    let snap = snapshot(&gw, "think").await;
    let messages = &snap["messages"];
    let r1 = message(messages, "r1");
    assert_eq!(r1["encryptedValue"], "sig-1");
    assert_eq!(r1["encryptedValueType"], "anthropic.signature");
    let r2 = message(messages, "r2").as_object().unwrap();
    assert_eq!(r2["encryptedValue"], "new-bytes");
    assert!(
        !r2.contains_key("encryptedValueType"),
        "new bytes without a type clear the old type: {r2:?}"
    );
    let call = &message(messages, "a1")["toolCalls"][0];
    assert_eq!(call["encryptedValue"], "enc-1");
    assert_eq!(call["encryptedValueType"], "openai.encrypted_content");

    // "return it unmodified in later run input": the history the gateway
    // builds for its producer's next run holds both, as stored.
    c.send(run_cmd("enc", "think", "r2", "and?")).await;
    let frames = c.recv_until(is_terminal_frame).await;
    let echo = frames
        .iter()
        .find(|f| f["event"]["name"] == "echo")
        .expect("the echo agent's report");
    let sent = &echo["event"]["value"]["input"]["messages"];
    assert_eq!(
        message(sent, "r1")["encryptedValueType"],
        "anthropic.signature"
    );
    assert_eq!(
        message(sent, "a1")["toolCalls"][0]["encryptedValueType"],
        "openai.encrypted_content"
    );

    // Another agent is never fed them ("a consumer must not feed an
    // encryptedValue to anything but its producer").
    c.send(run_cmd("echo", "think", "r3", "and you?")).await;
    let frames = c.recv_until(is_terminal_frame).await;
    let echo = frames
        .iter()
        .find(|f| f["event"]["name"] == "echo")
        .expect("the echo agent's report");
    let sent = &echo["event"]["value"]["input"]["messages"];
    for id in ["r1", "r2"] {
        let m = message(sent, id).as_object().unwrap();
        assert!(
            !m.contains_key("encryptedValue") && !m.contains_key("encryptedValueType"),
            "{m:?}"
        );
    }
    let call = message(sent, "a1")["toolCalls"][0].as_object().unwrap();
    assert!(!call.contains_key("encryptedValue"), "{call:?}");

    // The AI SDK export: the reasoning part's provider metadata.
    let exported = json_of(
        http()
            .get(gw.url("/v1/threads/think/messages?format=ai-sdk"))
            .bearer_auth(token(json!({}))),
    )
    .await;
    let parts: Vec<&Value> = exported
        .as_array()
        .or_else(|| exported["messages"].as_array())
        .unwrap()
        .iter()
        .flat_map(|m| m["parts"].as_array().unwrap())
        .filter(|p| p["type"] == "reasoning")
        .collect();
    assert_eq!(
        parts[0]["providerMetadata"]["agui"],
        json!({"encryptedValue": "sig-1", "encryptedValueType": "anthropic.signature"})
    );

    // The protobuf transport, read by the official @ag-ui/proto decoder.
    let v = node_client(
        "protoframes.mjs",
        &[
            &gw.url("/v1/threads/think/events?after=0"),
            &token(json!({})),
            "proto",
            "1",
        ],
    )
    .await;
    assert!(v["error"].is_null(), "{v}");
    let events = v["events"].as_array().unwrap();
    let at = events
        .iter()
        .position(|e| e["type"] == "REASONING_ENCRYPTED_VALUE" && e["entityId"] == "r1")
        .expect("the encrypted value");
    assert_eq!(events[at]["encryptedValue"], "sig-1");
    let warning = &events[at + 1];
    assert_eq!(warning["type"], "CUSTOM", "{events:#?}");
    assert_eq!(warning["name"], "agui-gateway/lossy");
    assert_eq!(warning["value"]["event"], "REASONING_ENCRYPTED_VALUE");
    assert_eq!(
        warning["value"]["lost"],
        json!([{"path": "encryptedValueType", "value": "anthropic.signature"}])
    );
    // The untyped value lost nothing: no warning after it.
    let untyped = events
        .iter()
        .position(|e| e["encryptedValue"] == "new-bytes")
        .unwrap();
    assert_ne!(events[untyped + 1]["name"], "agui-gateway/lossy");
}

/// `basic/versioning`, "Version negotiation": a producer declares its own
/// version on `RUN_STARTED` and "a proxy that forwards a run untranslated
/// declares what the original producer spoke": an agent's declaration
/// reaches the requester and the journal as it sent it. The runs the
/// gateway makes itself (an agent that failed before starting, a join
/// stream opening a run) and the run input it builds declare its own.
#[tokio::test]
async fn an_agents_protocol_version_is_kept_and_the_gateways_runs_declare_its_own() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&format!(
        "[[agents]]\nid = \"old\"\nurl = \"{}\"\n[[agents]]\nid = \"down\"\nurl = \"{}\"\n[[agents]]\nid = \"echo\"\nurl = \"{}\"\n",
        py.url("versioned"),
        py.url("http500"),
        py.url("echo")
    ))
    .await;
    let t = token(json!({}));

    // Relayed: the agent's "1.0", to the requester and in the journal.
    let began = std::time::Instant::now();
    let (status, body) = post_run(&gw.run_url("old"), &t, &input("v", "r1", "hi")).await;
    assert_eq!(status, 200);
    // (The response of a run whose agent ends its response at once is not
    // held for a late RUN_ERROR: it ends when the run's task does.)
    eprintln!("a two-event run over HTTP took {:?}", began.elapsed());
    let events = sse_events(&body);
    assert_eq!(events[0]["type"], "RUN_STARTED");
    assert_eq!(events[0]["protocolVersion"], "1.0", "{events:#?}");
    // Made by the gateway: the agent answered HTTP 500 before any event.
    let (_, body) = post_run(&gw.run_url("down"), &t, &input("v", "r2", "hi")).await;
    assert_run_error(&sse_events(&body), "upstream_http_500");
    let journal = journal(&gw, "v").await;
    let started: Vec<&Value> = journal
        .iter()
        .filter(|e| e["type"] == "RUN_STARTED")
        .collect();
    assert_eq!(started[0]["runId"], "r1");
    assert_eq!(started[0]["protocolVersion"], "1.0", "never rewritten");
    assert_eq!(started[1]["runId"], "r2");
    assert_eq!(
        started[1]["protocolVersion"], GATEWAY_VERSION,
        "the gateway's own RUN_STARTED declares the gateway's version"
    );

    // A join stream that opens a run mid-way (from a snapshot) speaks for
    // itself too.
    let snap_seq = snapshot(&gw, "v").await["seq"].as_u64().unwrap();
    let v = node_client(
        "protoframes.mjs",
        &[
            &gw.url(&format!("/v1/threads/v/events?after={}", snap_seq + 5)),
            &t,
            "sse",
            "1",
        ],
    )
    .await;
    let opened = &v["events"][0];
    assert_eq!(opened["type"], "RUN_STARTED", "{v}");
    assert_eq!(opened["protocolVersion"], GATEWAY_VERSION);

    // The input the gateway builds for an agent declares the gateway's
    // version (`basic/run-input`: a consumer "MUST declare the version it
    // speaks").
    let mut c = ws(&gw).await;
    c.send(run_cmd("echo", "v", "r3", "who?")).await;
    let frames = c.recv_until(is_terminal_frame).await;
    let echo = frames
        .iter()
        .find(|f| f["event"]["name"] == "echo")
        .expect("the echo agent's report");
    assert_eq!(
        echo["event"]["value"]["input"]["protocolVersion"],
        GATEWAY_VERSION
    );
}

/// `events/lifecycle`, "After a run closes": "A producer MAY emit
/// `RUN_ERROR` after `RUN_FINISHED` [...] A consumer MUST treat the run as
/// failed in that case." The late error reaches the requester right after
/// `RUN_FINISHED`, is journaled right after it (one batch: consecutive
/// seqs), and the thread's run ends in `error`. Anything else after
/// `RUN_FINISHED` is dropped, and an agent that keeps its response open
/// after the run holds it up for the grace only.
#[tokio::test]
async fn a_late_run_error_after_run_finished_is_journaled_and_fails_the_run() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&format!(
        "[[agents]]\nid = \"late\"\nurl = \"{}\"\n[[agents]]\nid = \"noise\"\nurl = \"{}\"\n[[agents]]\nid = \"hold\"\nurl = \"{}\"\n",
        py.url("late-error"),
        py.url("after-finish"),
        py.url("finish-and-hold")
    ))
    .await;
    let t = token(json!({}));

    let (status, body) = post_run(&gw.run_url("late"), &t, &input("flush", "r1", "hi")).await;
    assert_eq!(status, 200);
    let events = sse_events(&body);
    let kinds = types(&events);
    assert_eq!(
        &kinds[kinds.len() - 2..],
        ["RUN_FINISHED", "RUN_ERROR"],
        "the requester gets the late error: {events:#?}"
    );
    assert_eq!(events.last().unwrap()["code"], "flush_failed");

    // A stock @ag-ui/client accepts the stream (its verifier admits the late
    // error) and hands the RUN_ERROR to its subscribers, as for any failed
    // run (the 1.0.0 client surfaces run errors that way, not by throwing).
    let stock = node_client(
        "httpagent.mjs",
        &[&gw.run_url("late"), &t, "flush-stock", "r1", "hi"],
    )
    .await;
    let seen = types(stock["events"].as_array().unwrap());
    assert_eq!(
        &seen[seen.len() - 2..],
        ["RUN_FINISHED", "RUN_ERROR"],
        "{stock}"
    );
    assert!(stock["error"].is_null(), "{stock}");
    assert_eq!(stock["warnings"], json!([]), "{stock}");

    let journaled = types(&journal(&gw, "flush").await);
    assert_eq!(
        &journaled[journaled.len() - 2..],
        ["RUN_FINISHED", "RUN_ERROR"],
        "journaled right after RUN_FINISHED: {journaled:?}"
    );
    let snap = snapshot(&gw, "flush").await;
    assert_eq!(snap["run"]["status"], "error", "{snap:#}");

    // The next run on the thread is an ordinary one.
    let (_, body) = post_run(&gw.run_url("noise"), &t, &input("flush", "r2", "again")).await;
    let events = sse_events(&body);
    assert_eq!(
        types(&events).last().map(String::as_str),
        Some("RUN_FINISHED"),
        "an event after RUN_FINISHED other than RUN_ERROR is dropped: {events:#?}"
    );
    assert!(!events.iter().any(|e| e["name"] == "too-late"));
    assert_eq!(snapshot(&gw, "flush").await["run"]["status"], "finished");

    // An agent that keeps its response open after RUN_FINISHED: the run
    // ends after the grace (1 s), not when the agent lets go.
    let began = std::time::Instant::now();
    let (_, body) = post_run(&gw.run_url("hold"), &t, &input("flush", "r3", "hold")).await;
    let took = began.elapsed();
    assert_eq!(
        types(&sse_events(&body)).last().map(String::as_str),
        Some("RUN_FINISHED")
    );
    assert!(
        took < std::time::Duration::from_secs(10),
        "the grace bounds the wait: {took:?}"
    );
    eprintln!("run held open after RUN_FINISHED ended after {took:?}");
    assert_eq!(snapshot(&gw, "flush").await["run"]["status"], "finished");
}

/// `basic/run-input`, "forwardedProps": "intermediaries MUST NOT alter it".
/// With `langgraph_resume_command = false` a resume of a LangGraph graph's
/// interrupt reaches it with `forwardedProps` as the client sent them (no
/// `command.resume` added), and the graph resumes from `resume` alone.
#[tokio::test]
async fn the_langgraph_resume_command_is_a_switch_that_leaves_forwarded_props_alone() {
    let (mut py, gw) = agent_behind_gateway(
        "langgraph_agent.py",
        "agent",
        "lg",
        "langgraph_resume_command = false",
    )
    .await;
    let mut c = ws(&gw).await;
    c.send(run_cmd("lg", "mail", "r1", "email bob")).await;
    let frames = c.recv_until(is_terminal_frame).await;
    let outcome = &frames.last().unwrap()["event"]["outcome"];
    assert_eq!(outcome["type"], "interrupt", "{frames:#?}");
    let interrupt = outcome["interrupts"][0]["id"].as_str().unwrap().to_owned();
    c.send(json!({"type": "resume", "id": "go", "threadId": "mail",
        "forwardedProps": {"app": {"theme": "dark"}},
        "resume": [{"interruptId": interrupt, "status": "resolved", "payload": {"approved": true}}]}))
        .await;
    let frames = c
        .recv_until(|f| is_terminal_frame(f) && f["event"]["runId"] != "r1")
        .await;
    py.proc.expect_line("forwarded ").await; // the first run's
    let resumed: Value =
        serde_json::from_str(&py.proc.expect_line("forwarded ").await["forwarded ".len()..])
            .unwrap();
    assert_eq!(
        resumed,
        json!({"app": {"theme": "dark"}}),
        "forwardedProps reach the agent untouched"
    );
    let says_sent = frames.iter().any(|f| {
        f["event"]["type"] == "MESSAGES_SNAPSHOT"
            && f["event"]["messages"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["content"] == "Sent.")
    });
    assert!(says_sent, "the graph resumed from `resume`: {frames:#?}");
    assert_eq!(frames.last().unwrap()["event"]["type"], "RUN_FINISHED");
}
