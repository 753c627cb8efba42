//! Upstream faults against the real gateway binary and a real Python agent
//! (`tests/agents/scripted_agent.py`, built with PyPI `ag-ui-protocol`).
//!
//! Every fault must end the run with exactly one terminal `RUN_ERROR` carrying
//! its stable code, and the gateway must go on serving the next run.

mod common;

use common::*;
use serde_json::{Value, json};

fn agent(id: &str, url: &str, extra: &str) -> String {
    format!("[[agents]]\nid = \"{id}\"\nurl = \"{url}\"\n{extra}\n")
}

/// One gateway in front of one scripted agent, with one gateway agent per
/// scenario. An agent id `scenario.variant` serves `scenario` with other settings.
async fn setup(scenarios: &[(&str, &str)]) -> (Gateway, PyAgent) {
    let py = PyAgent::start("scripted_agent.py").await;
    let mut cfg = agent("ok", &py.url("ok"), "");
    for (id, extra) in scenarios {
        let scenario = id.split('.').next().unwrap();
        cfg.push_str(&agent(id, &py.url(scenario), extra));
    }
    (Gateway::start(&cfg).await, py)
}

/// Runs `agent` as run `r1` on a thread of its own (a thread refuses a
/// reused runId).
async fn run(gw: &Gateway, agent: &str) -> Vec<Value> {
    static THREADS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let thread = format!(
        "t{}",
        THREADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let (status, body) = post_run(
        &gw.run_url(agent),
        &token(json!({})),
        &input(&thread, "r1", "hi"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    sse_events(&body)
}

async fn still_serving(gw: &Gateway) {
    let events = run(gw, "ok").await;
    assert_eq!(
        events.last().unwrap()["type"],
        "RUN_FINISHED",
        "{events:#?}"
    );
}

#[tokio::test]
async fn http_500_becomes_run_error_with_status_and_the_body_only_in_the_log() {
    let (gw, _py) = setup(&[("http500", "")]).await;
    let events = run(&gw, "http500").await;
    let msg = assert_run_error(&events, "upstream_http_500");
    assert!(msg.contains("HTTP 500"), "{msg}");
    let body = serde_json::to_string(&events).unwrap();
    assert!(
        !body.contains("database on fire") && !body.contains("10.0.0.7"),
        "the agent's error body never reaches clients: {msg}"
    );
    // Operators find it in the log.
    gw.proc.expect_stderr("database on fire at 10.0.0.7").await;
    assert_eq!(events.len(), 1, "nothing but the error: {events:#?}");
    still_serving(&gw).await;
}

#[tokio::test]
async fn garbage_bytes_are_a_protocol_violation() {
    let (gw, _py) = setup(&[("garbage", "")]).await;
    let events = run(&gw, "garbage").await;
    assert_eq!(events[0]["type"], "RUN_STARTED");
    let msg = assert_run_error(&events, "upstream_protocol_violation");
    assert!(msg.contains("not valid JSON"), "{msg}");
    still_serving(&gw).await;
}

#[tokio::test]
async fn order_violation_names_the_rule_and_event() {
    let (gw, _py) = setup(&[("violation", "")]).await;
    let events = run(&gw, "violation").await;
    let msg = assert_run_error(&events, "upstream_protocol_violation");
    assert!(
        msg.contains("message_pairing") && msg.contains("TEXT_MESSAGE_CONTENT"),
        "{msg}"
    );
    // The offending event itself is not forwarded.
    assert_eq!(types(&events), ["RUN_STARTED", "RUN_ERROR"]);
    still_serving(&gw).await;
}

#[tokio::test]
async fn lenient_agent_forwards_the_violation() {
    let (gw, _py) = setup(&[("violation", "verify = \"lenient\"")]).await;
    let events = run(&gw, "violation").await;
    assert_eq!(
        types(&events),
        ["RUN_STARTED", "TEXT_MESSAGE_CONTENT", "RUN_FINISHED"]
    );
}

#[tokio::test]
async fn unexpandable_chunk_is_a_violation_unless_lenient() {
    let (gw, _py) = setup(&[
        ("bad-chunk", ""),
        ("bad-chunk.lenient", "verify = \"lenient\""),
    ])
    .await;
    let events = run(&gw, "bad-chunk").await;
    let msg = assert_run_error(&events, "upstream_protocol_violation");
    assert!(
        msg.contains("chunk_expansion") && msg.contains("toolCallName"),
        "{msg}"
    );
    // Lenient: forwarded exactly as it came, and the run goes on.
    let (_, body) = post_run(
        &gw.run_url("bad-chunk.lenient"),
        &token(json!({})),
        &input("t", "r", "x"),
    )
    .await;
    let data = sse_data(&body);
    assert_eq!(
        data[1],
        r#"{"type":"TOOL_CALL_CHUNK","toolCallId":"c1","delta":"{}"}"#
    );
    assert_eq!(sse_events(&body).last().unwrap()["type"], "RUN_FINISHED");
}

#[tokio::test]
async fn stream_without_run_finished_is_incomplete() {
    let (gw, _py) = setup(&[("no-finish", "")]).await;
    let events = run(&gw, "no-finish").await;
    assert_eq!(
        types(&events),
        [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "RUN_ERROR"
        ]
    );
    assert_run_error(&events, "upstream_incomplete");
    still_serving(&gw).await;
}

#[tokio::test]
async fn upstream_killed_mid_stream_is_incomplete() {
    let (gw, mut py) = setup(&[("die", "")]).await;
    let events = run(&gw, "die").await;
    py.proc.expect_line("DYING").await;
    let status = tokio::time::timeout(WAIT, py.proc.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(!status.success(), "the agent process really died");
    assert_eq!(events[2]["delta"], "about to");
    assert_run_error(&events, "upstream_incomplete");
    // The agent is gone; a run against it now is refused at connect.
    let events = run(&gw, "die").await;
    assert_run_error(&events, "upstream_unavailable");
    assert_eq!(events.len(), 1);
}

#[tokio::test]
async fn idle_stall_times_out_and_the_upstream_sees_the_disconnect() {
    let (gw, mut py) = setup(&[("stall", "timeouts = { idle = \"300ms\" }")]).await;
    let events = run(&gw, "stall").await;
    assert_eq!(types(&events)[..2], ["RUN_STARTED", "TEXT_MESSAGE_START"]);
    let msg = assert_run_error(&events, "upstream_timeout");
    assert!(msg.contains("idle"), "{msg}");
    py.proc.expect_line("DISCONNECTED stall").await;
    still_serving(&gw).await;
}

#[tokio::test]
async fn no_first_event_times_out() {
    let (gw, mut py) = setup(&[("stall-first", "timeouts = { first_event = \"300ms\" }")]).await;
    let events = run(&gw, "stall-first").await;
    let msg = assert_run_error(&events, "upstream_timeout");
    assert!(msg.contains("first_event"), "{msg}");
    assert_eq!(events.len(), 1);
    py.proc.expect_line("DISCONNECTED stall-first").await;
}

#[tokio::test]
async fn total_timeout_ends_a_trickling_run() {
    let (gw, _py) = setup(&[("stall", "timeouts = { idle = \"10s\", total = \"400ms\" }")]).await;
    let events = run(&gw, "stall").await;
    let msg = assert_run_error(&events, "upstream_timeout");
    assert!(msg.contains("total"), "{msg}");
}

#[tokio::test]
async fn wrong_content_type_is_a_protocol_violation() {
    let (gw, _py) = setup(&[("wrong-ctype", "")]).await;
    let events = run(&gw, "wrong-ctype").await;
    let msg = assert_run_error(&events, "upstream_protocol_violation");
    assert!(msg.contains("application/json"), "{msg}");
}

#[tokio::test]
async fn oversize_frame_is_refused_not_buffered() {
    let (gw, _py) = setup(&[("big-frame", "max_frame_bytes = 1048576")]).await;
    let events = run(&gw, "big-frame").await;
    assert_eq!(events[0]["type"], "RUN_STARTED");
    assert_run_error(&events, "upstream_frame_too_large");
    still_serving(&gw).await;
}

#[tokio::test]
async fn connection_refused_is_unavailable() {
    // Bind and drop a listener to get a port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gw = Gateway::start(&agent("gone", &format!("http://127.0.0.1:{port}/x"), "")).await;
    let events = run(&gw, "gone").await;
    let msg = assert_run_error(&events, "upstream_unavailable");
    assert!(msg.contains("gone"), "{msg}");
}

#[tokio::test]
async fn client_disconnect_drops_the_upstream_request() {
    let (gw, mut py) = setup(&[("stall", "timeouts = { idle = \"1h\" }")]).await;
    let resp = http()
        .post(gw.run_url("stall"))
        .bearer_auth(token(json!({})))
        .json(&input("t1", "r1", "hi"))
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    use futures::StreamExt;
    let first = body.next().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("RUN_STARTED"));
    drop(body);
    py.proc.expect_line("DISCONNECTED stall").await;
    still_serving(&gw).await;
}

#[tokio::test]
async fn crlf_bom_comments_and_tiny_reads_decode_like_the_clean_stream() {
    let (gw, _py) = setup(&[("crlf", "")]).await;
    // Each run has a thread of its own: compare all but the threadId.
    let without_thread = |mut events: Vec<Value>| {
        for e in &mut events {
            e.as_object_mut().unwrap().remove("threadId");
        }
        events
    };
    let clean = without_thread(run(&gw, "ok").await);
    let messy = without_thread(run(&gw, "crlf").await);
    assert_eq!(clean, messy);
    assert_eq!(clean.last().unwrap()["type"], "RUN_FINISHED");
}

#[tokio::test]
async fn unchanged_events_keep_their_exact_bytes_and_unknown_types_pass() {
    let (gw, _py) = setup(&[("unknown-type", "")]).await;
    let (_, body) = post_run(
        &gw.run_url("unknown-type"),
        &token(json!({})),
        &input("t1", "r1", "hi"),
    )
    .await;
    let data = sse_data(&body);
    assert_eq!(
        data[1],
        r#"{"type":"FUTURE_EVENT","payload":{"deep":[1,{"a":null}]},"n":12345678901234567}"#,
        "byte-for-byte, including an integer beyond f64 precision"
    );
    assert_eq!(data[2], r#"{"type":"THINKING_START","title":"legacy"}"#);
    assert!(!body.contains('\r'));
}

#[tokio::test]
async fn input_reaches_the_agent_whole_and_header_secrets_stay_out_of_logs() {
    let secret = "sk-upstream-very-secret-value";
    let py = PyAgent::start("scripted_agent.py").await;
    let cfg = agent(
        "echo",
        &py.url("echo"),
        "headers = { Authorization = \"Bearer ${ECHO_AGENT_KEY}\" }",
    ) + &agent(
        "down",
        "http://127.0.0.1:9/x",
        "headers = { X-Api-Key = \"${ECHO_AGENT_KEY}\" }",
    );
    let gw = Gateway::start_with_env(&cfg, &[("ECHO_AGENT_KEY", secret)]).await;
    let mut body = input("t-echo", "r-echo", "hi");
    body["forwardedProps"] = json!({"custom": {"k": [1, 2]}});
    body["futureTopLevel"] = json!({"x": true});
    body["messages"][0]["vendorField"] = json!("kept");
    body["state"] = json!({"s": 1});
    let (_, text) = post_run(&gw.run_url("echo"), &token(json!({})), &body).await;
    let events = sse_events(&text);
    let seen = &events[1]["value"];
    assert_eq!(seen["authorization"], format!("Bearer {secret}"));
    assert_eq!(seen["accept"], "text/event-stream");
    for key in [
        "forwardedProps",
        "futureTopLevel",
        "state",
        "threadId",
        "runId",
        "tools",
        "context",
    ] {
        assert_eq!(seen["input"][key], body[key], "{key}");
    }
    assert_eq!(seen["input"]["messages"][0]["vendorField"], "kept");
    // A failing run against an agent with a secret header: the error says why, never the secret.
    body["runId"] = "r-down".into();
    let (_, text) = post_run(&gw.run_url("down"), &token(json!({})), &body).await;
    let msg = assert_run_error(&sse_events(&text), "upstream_unavailable");
    assert!(!msg.contains(secret));
    assert!(
        !gw.proc.stderr().contains(secret),
        "secret leaked into logs"
    );
}

#[tokio::test]
async fn keepalive_comments_flow_while_the_agent_is_quiet() {
    use futures::StreamExt;
    // Test gateways send a keepalive every 1 s; the agent stays silent for an hour.
    let (gw, mut py) = setup(&[("stall", "timeouts = { idle = \"1h\" }")]).await;
    let resp = http()
        .post(gw.run_url("stall"))
        .bearer_auth(token(json!({})))
        .json(&input("t1", "r1", "hi"))
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    let mut seen = String::new();
    while !seen.contains(": keepalive\n\n") {
        let chunk = tokio::time::timeout(WAIT, body.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(
        seen.starts_with("id: 1\ndata: "),
        "events first, with their seq: {seen}"
    );
    drop(body);
    py.proc.expect_line("DISCONNECTED stall").await;
}

#[tokio::test]
async fn the_upstream_request_carries_a_traceparent_continuing_the_callers_trace() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&agent("echo", &py.url("echo"), "")).await;
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let resp = http()
        .post(gw.run_url("echo"))
        .bearer_auth(token(json!({})))
        .header("traceparent", parent)
        .json(&input("t-trace", "r-trace", "hi"))
        .send()
        .await
        .unwrap();
    let events = sse_events(&resp.text().await.unwrap());
    let sent = events[1]["value"]["traceparent"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        sent.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-") && sent.ends_with("-01"),
        "same trace, a span of the gateway's own: {sent}"
    );
    assert_ne!(sent, parent);
    gw.proc
        .expect_stderr("trace_id=4bf92f3577b34da6a3ce929d0e0e4736")
        .await;
    // Without one, each run starts a trace of its own.
    let (_, text) = post_run(
        &gw.run_url("echo"),
        &token(json!({})),
        &input("t-trace", "r-2", "hi"),
    )
    .await;
    let fresh = sse_events(&text)[1]["value"]["traceparent"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(fresh.len(), 55, "{fresh}");
    assert!(!fresh.contains("4bf92f35"), "{fresh}");
}
