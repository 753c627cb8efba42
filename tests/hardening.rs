//! The edges real users reach first: browsers (CORS, `EventSource` tickets),
//! stock AG-UI clients (`@ag-ui/client` on interrupts, on the join stream, on
//! reused run ids), edited history, the error shape of every refusal, the
//! bare binary, and hostile input that must never wedge a thread. All against
//! the real binary, real Python agents and the real npm client.

mod common;

use common::*;
use serde_json::{Value, json};

/// Scenarios of `tests/agents/scripted_agent.py` each test gateway routes.
const SCRIPTED: &[&str] = &["ok", "events", "gated", "draft-interrupt", "release"];

/// The scripted agent and a gateway with one agent per scenario, plus `extra`.
async fn scripted_gateway(extra: &str) -> (PyAgent, Gateway) {
    let py = PyAgent::start("scripted_agent.py").await;
    let mut cfg = String::new();
    for s in SCRIPTED {
        cfg.push_str(&format!(
            "[[agents]]\nid = \"{s}\"\nurl = \"{}\"\n",
            py.url(s)
        ));
    }
    cfg.push_str(extra);
    (py, Gateway::start(&cfg).await)
}

/// A run input whose agent (`events`) streams exactly `events`.
fn scripted_input(thread: &str, run: &str, text: &str, events: Value) -> Value {
    let mut v = input(thread, run, text);
    v["messages"][0]["id"] = format!("u-{run}").into();
    v["forwardedProps"] = json!({ "events": events });
    v
}

fn text_events(id: &str, text: &str) -> Value {
    json!([
        {"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": text},
        {"type": "TEXT_MESSAGE_END", "messageId": id},
    ])
}

async fn get_json(url: &str, token: &str) -> (u16, Value) {
    let resp = http().get(url).bearer_auth(token).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// Reads a join stream until it has carried `runs` terminal events, and
/// checks the capture with the `ag-ui-validate` conformance tool (PyPI).
async fn validate_join_stream(url: &str, token: &str, runs: usize) {
    let mut resp = http().get(url).bearer_auth(token).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = String::new();
    while sse_events(&body)
        .iter()
        .filter(|e| matches!(e["type"].as_str(), Some("RUN_FINISHED" | "RUN_ERROR")))
        .count()
        < runs
    {
        let chunk = resp.chunk().await.unwrap().expect("stream open");
        body.push_str(&String::from_utf8_lossy(&chunk));
    }
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("join.sse");
    std::fs::write(&capture, &body).unwrap();
    let validator = python().with_file_name("ag-ui-validate");
    let out = tokio::process::Command::new(validator)
        .arg(&capture)
        .arg("--no-color")
        .output()
        .await
        .expect("ag-ui-validate runs");
    assert!(
        out.status.success(),
        "ag-ui-validate: {}\n{body}",
        String::from_utf8_lossy(&out.stdout)
    );
}

fn message<'a>(messages: &'a Value, id: &str) -> &'a Value {
    messages
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("no message {id} in {messages:#}"))
}

// 1. CORS

#[tokio::test]
async fn cors_preflights_are_answered_for_allowed_origins_only() {
    let gw = Gateway::start(
        "[cors]\nallowed_origins = [\"https://app.example.com\", \"http://localhost:*\"]\n",
    )
    .await;
    let preflight = |origin: &str| {
        http()
            .request(reqwest::Method::OPTIONS, gw.run_url("demo"))
            .header("Origin", origin)
            .header("Access-Control-Request-Method", "POST")
            .header(
                "Access-Control-Request-Headers",
                "authorization,content-type,traceparent,tracestate,baggage",
            )
            .send()
    };
    for origin in ["https://app.example.com", "http://localhost:5173"] {
        let resp = preflight(origin).await.unwrap();
        assert!(resp.status().is_success(), "{origin}: {}", resp.status());
        let h = resp.headers();
        assert_eq!(h["access-control-allow-origin"], origin);
        let allowed = h["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .to_lowercase();
        for wanted in [
            "authorization",
            "content-type",
            // Browser OpenTelemetry adds these to every fetch (issue 19).
            "traceparent",
            "tracestate",
            "baggage",
        ] {
            assert!(allowed.contains(wanted), "{wanted} in {allowed}");
        }
        assert!(
            h["access-control-allow-methods"]
                .to_str()
                .unwrap()
                .contains("POST")
        );
    }
    let refused = preflight("https://evil.example.net").await.unwrap();
    let cors_headers: Vec<_> = refused
        .headers()
        .keys()
        .filter(|k| k.as_str().starts_with("access-control-"))
        .collect();
    assert!(
        cors_headers.is_empty(),
        "a refused origin gets no CORS headers at all: {cors_headers:?}"
    );
    assert_eq!(refused.status(), 403);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "forbidden", "{body}");
    // Nor does its real request.
    let resp = http()
        .get(gw.url("/healthz"))
        .header("Origin", "https://evil.example.net")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        !resp
            .headers()
            .keys()
            .any(|k| k.as_str().starts_with("access-control-"))
    );
    // The real request from an allowed page can read even an error answer.
    let resp = http()
        .post(gw.run_url("demo"))
        .header("Origin", "https://app.example.com")
        .json(&input("t", "r", "hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    assert_eq!(
        resp.headers()["access-control-allow-origin"],
        "https://app.example.com"
    );
    // Without [cors], no origin is allowed.
    let closed = Gateway::start("").await;
    let resp = http()
        .request(reqwest::Method::OPTIONS, closed.run_url("demo"))
        .header("Origin", "https://app.example.com")
        .header("Access-Control-Request-Method", "POST")
        .send()
        .await
        .unwrap();
    assert!(resp.headers().get("access-control-allow-origin").is_none());
}

/// The allowed request headers are the operator's: an app header once
/// listed, anything with `"*"`; one not listed is not echoed.
#[tokio::test]
async fn cors_allowed_headers_are_configurable() {
    let asks = |gw: &Gateway, headers: &'static str| {
        http()
            .request(reqwest::Method::OPTIONS, gw.run_url("demo"))
            .header("Origin", "https://app.example.com")
            .header("Access-Control-Request-Method", "POST")
            .header("Access-Control-Request-Headers", headers)
            .send()
    };
    let listed = Gateway::start(
        "[cors]\nallowed_origins = [\"https://app.example.com\"]\nallowed_headers = [\"authorization\", \"content-type\", \"x-app-version\"]\n",
    )
    .await;
    let resp = asks(&listed, "authorization,x-app-version").await.unwrap();
    assert!(resp.status().is_success());
    let allowed = resp.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_lowercase();
    assert!(allowed.contains("x-app-version"), "{allowed}");
    assert!(
        !allowed.contains("traceparent"),
        "a list replaces the default: {allowed}"
    );
    let any = Gateway::start(
        "[cors]\nallowed_origins = [\"https://app.example.com\"]\nallowed_headers = [\"*\"]\n",
    )
    .await;
    let resp = asks(&any, "authorization,x-tenant-hint").await.unwrap();
    assert_eq!(
        resp.headers()["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .to_lowercase(),
        "authorization,x-tenant-hint"
    );
    // A name that is not a header name is a configuration error.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("g.toml");
    std::fs::write(
        &cfg,
        format!("[auth]\nhs_secret = \"{SECRET}\"\n[cors]\nallowed_headers = [\"bad header\"]\n"),
    )
    .unwrap();
    let out = std::process::Command::new(gateway_bin())
        .args(["--config", cfg.to_str().unwrap(), "check-config"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cors.allowed_headers[0]"), "{err}");
}

/// A real browser: a page on another origin (`http://localhost:<port>`, the
/// gateway being reached as `127.0.0.1`) fetches a run with OpenTelemetry's
/// headers; the preflight passes, the run streams, and the agent is called in
/// the page's trace.
#[tokio::test]
async fn a_traced_browser_page_on_another_origin_runs_an_agent() {
    let (py, gw) = agent_behind_gateway(
        "scripted_agent.py",
        "echo",
        "echo",
        "[cors]\nallowed_origins = [\"http://localhost:*\"]\n",
    )
    .await;
    let _py = py;
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let seen = node_client(
        "cors_fetch.mjs",
        &[
            &gw.url("/healthz").replace("127.0.0.1", "localhost"),
            &gw.run_url("echo"),
            &token(json!({})),
            &format!("00-{trace}-00f067aa0ba902b7-01"),
        ],
    )
    .await;
    assert_eq!(seen["status"], 200, "{seen:#}");
    let events = sse_events(seen["body"].as_str().unwrap());
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED", "{seen:#}");
    let upstream = events[1]["value"]["traceparent"].as_str().unwrap();
    assert!(
        upstream.starts_with(&format!("00-{trace}-")),
        "the page's trace continues upstream: {upstream}"
    );
}

// 2. Canonical interrupts reach the HTTP requester.

#[tokio::test]
async fn stock_httpagent_gets_langgraph_interrupts_and_resumes_them() {
    let (_py, gw) = agent_behind_gateway("langgraph_agent.py", "agent", "lg", "").await;
    let t = token(json!({}));
    let url = gw.run_url("lg");
    let v = node_client(
        "httpagent.mjs",
        &[&url, &t, "lg-mail", "run-a", "email bob"],
    )
    .await;
    assert!(v["error"].is_null(), "{}", v["error"]);
    let pending = v["pendingInterrupts"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{v:#}");
    assert_eq!(pending[0]["id"], "lg-run-a-1");
    assert_eq!(pending[0]["reason"], "confirmation");
    let resume =
        json!([{"interruptId": "lg-run-a-1", "status": "resolved", "payload": {"approved": true}}])
            .to_string();
    let v = node_client(
        "httpagent.mjs",
        &[&url, &t, "lg-mail", "run-b", "email bob", &resume],
    )
    .await;
    assert!(v["error"].is_null(), "{}", v["error"]);
    assert_eq!(v["pendingInterrupts"], json!([]));
    assert!(
        v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["content"] == "Sent."),
        "the graph continued: {:#}",
        v["messages"]
    );
}

#[tokio::test]
async fn stock_httpagent_accepts_the_draft_interrupt_shape_as_canonical() {
    let (_py, gw) = scripted_gateway("").await;
    let t = token(json!({}));
    let url = gw.run_url("draft-interrupt");
    let v = node_client("httpagent.mjs", &[&url, &t, "draft", "run-a", "delete it"]).await;
    assert!(v["error"].is_null(), "no schema error: {}", v["error"]);
    let pending = &v["pendingInterrupts"];
    assert_eq!(pending[0]["id"], "int-run-a-1", "{v:#}");
    assert_eq!(pending[0]["reason"], "confirm_delete");
    let resume =
        json!([{"interruptId": "int-run-a-1", "status": "resolved", "payload": {"ok": true}}])
            .to_string();
    let v = node_client(
        "httpagent.mjs",
        &[&url, &t, "draft", "run-b", "delete it", &resume],
    )
    .await;
    assert!(v["error"].is_null(), "{}", v["error"]);
    assert!(
        v["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "answer")
    );
}

// 3. The join stream is a valid AG-UI stream whatever the thread holds.

#[tokio::test]
async fn stock_client_reads_the_join_stream_from_any_position() {
    // Journals longer than 12 events are compacted when a run ends.
    let (py, gw) = scripted_gateway("[threads]\nmax_events = 12\n").await;
    let t = token(json!({}));
    let events_url = |thread: &str| gw.url(&format!("/v1/threads/{thread}/events"));

    // A run, a meta event between runs, a run: seqs 1-5, 6, 7-11.
    let body = scripted_input("jm", "r1", "hi", text_events("a1", "first"));
    assert_eq!(post_run(&gw.run_url("events"), &t, &body).await.0, 200);
    let meta = http()
        .post(gw.url("/v1/threads/jm/meta"))
        .bearer_auth(&t)
        .json(&json!({"metaType": "thumbs_up", "payload": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(meta.status(), 200);
    let body = scripted_input("jm", "r2", "more", text_events("a2", "second"));
    assert_eq!(post_run(&gw.run_url("events"), &t, &body).await.0, 200);
    let (_, snapshot) = get_json(&gw.url("/v1/threads/jm"), &t).await;
    assert_eq!(snapshot["seq"], 11);
    validate_join_stream(&events_url("jm"), &t, 3).await;
    let v = node_client("joinstream.mjs", &[&events_url("jm"), &t, "3"]).await;
    assert!(v["error"].is_null(), "stock client error: {}", v["error"]);
    assert_eq!(
        v["messages"], snapshot["messages"],
        "the client folds what the gateway folds"
    );
    assert!(
        v["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "agui-gateway/meta" && e["value"]["metaType"] == "thumbs_up")
    );
    // From inside the second run (after its TEXT_MESSAGE_START, seq 8).
    let mid = format!("{}?after=8", events_url("jm"));
    validate_join_stream(&mid, &t, 1).await;
    let v = node_client("joinstream.mjs", &[&mid, &t, "1"]).await;
    assert!(v["error"].is_null(), "mid-run start: {}", v["error"]);
    assert_eq!(message(&v["messages"], "a2")["content"], "second");

    // A compacted thread starts from its snapshot.
    assert_eq!(
        post_run(&gw.run_url("ok"), &t, &input("j", "r1", "hi"))
            .await
            .0,
        200
    );
    let (_, snapshot) = get_json(&gw.url("/v1/threads/j"), &t).await;
    validate_join_stream(&events_url("j"), &t, 1).await;
    let v = node_client("joinstream.mjs", &[&events_url("j"), &t, "1"]).await;
    assert!(v["error"].is_null(), "compacted start: {}", v["error"]);
    assert_eq!(v["messages"], snapshot["messages"]);
    assert_eq!(v["state"], snapshot["state"]);

    // Joining the compacted thread live while a run is mid-message.
    let mut runner = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    runner
        .send(
            json!({"type": "run", "agent": "gated", "threadId": "j", "runId": "r3",
                     "messages": [{"id": "u3", "role": "user", "content": "go"}]}),
        )
        .await;
    runner.recv_until(|f| f["event"]["delta"] == "part1").await;
    let join = tokio::spawn({
        let (url, t) = (events_url("j"), t.clone());
        async move { node_client("joinstream.mjs", &[&url, &t, "1"]).await }
    });
    gw.proc.expect_stderr("viewer joined the SSE stream").await;
    http().post(py.url("release")).send().await.unwrap();
    runner.recv_until(is_terminal_frame).await;
    let v = join.await.unwrap();
    assert!(v["error"].is_null(), "live mid-run join: {}", v["error"]);
    assert_eq!(message(&v["messages"], "g1")["content"], "part1part2");
}

// 4. EventSource authenticates with a one-use ticket.

#[tokio::test]
async fn stream_tickets_are_one_use_single_thread_and_never_logged() {
    let (_py, gw) = scripted_gateway("").await;
    let alice = token(json!({"sub": "alice"}));
    let body = scripted_input("tk", "r1", "hi", text_events("a1", "hello"));
    assert_eq!(post_run(&gw.run_url("events"), &alice, &body).await.0, 200);
    let issue = |thread: &str, tok: &str| {
        http()
            .post(gw.url(&format!("/v1/threads/{thread}/ticket")))
            .bearer_auth(tok.to_owned())
            .send()
    };
    let resp = issue("tk", &alice).await.unwrap();
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    let ticket = v["ticket"].as_str().unwrap().to_owned();
    assert!((1..=30).contains(&v["expiresIn"].as_u64().unwrap()));

    // EventSource-style: no header, the ticket in the query.
    let url = gw.url(&format!("/v1/threads/tk/events?ticket={ticket}"));
    let mut resp = http().get(&url).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut seen = String::new();
    while !seen.contains("RUN_FINISHED") {
        let chunk = resp.chunk().await.unwrap().expect("stream open");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains("hello"));
    drop(resp);
    let last_sent: u64 = seen
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .map(|id| id.parse().unwrap())
        .max()
        .unwrap();

    // EventSource's own reconnect: the same URL with Last-Event-ID, naming
    // an event the ticket's stream sent, is the same stream resumed.
    let resume = |url: &str, id: u64| {
        http()
            .get(url)
            .header("last-event-id", id.to_string())
            .send()
    };
    assert_eq!(
        resume(&url, last_sent + 1).await.unwrap().status(),
        401,
        "never sent"
    );
    // That refusal spent the ticket for good.
    assert_eq!(
        resume(&url, last_sent).await.unwrap().status(),
        401,
        "spent"
    );

    // Tickets live in one process: issued and used on the first node.
    let v: Value = json_of(
        http()
            .post(format!("{}/v1/threads/tk/ticket", gw.base))
            .bearer_auth(&alice),
    )
    .await;
    let url = format!(
        "{}/v1/threads/tk/events?ticket={}",
        gw.base,
        v["ticket"].as_str().unwrap()
    );
    let first = http().get(&url).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let resumed = resume(&url, 1).await.unwrap();
    assert_eq!(resumed.status(), 200, "a reconnect resumes");
    // A fresh open (no Last-Event-ID) of a used ticket stays refused.
    let again = http().get(&url).send().await.unwrap();
    assert_eq!(again.status(), 401, "one use");
    let e: Value = again.json().await.unwrap();
    assert_eq!(e["error"]["reason"], "bad_ticket");
    assert_eq!(
        resume(&url, 1).await.unwrap().status(),
        401,
        "and it is spent"
    );
    drop((first, resumed));

    let v: Value = issue("tk", &alice).await.unwrap().json().await.unwrap();
    let other = gw.url(&format!(
        "/v1/threads/other/events?ticket={}",
        v["ticket"].as_str().unwrap()
    ));
    assert_eq!(
        http().get(&other).send().await.unwrap().status(),
        401,
        "one thread"
    );

    // No ticket for a thread you may not view; long-lived tokens stay out of URLs.
    let bob = token(json!({"sub": "bob"}));
    assert_eq!(issue("tk", &bob).await.unwrap().status(), 404);
    let with_jwt = gw.url(&format!("/v1/threads/tk/events?access_token={alice}"));
    assert_eq!(http().get(&with_jwt).send().await.unwrap().status(), 401);
    assert!(
        !gw.proc.stderr().contains(&ticket),
        "tickets are never logged"
    );
}

/// A browser's own `EventSource` (headless Chromium) on the join stream with
/// a ticket, its connection reset mid-run by a relay: it reconnects by
/// itself — same URL, same ticket, `Last-Event-ID` — and gets every journal
/// event exactly once, in order, including those published while it was cut
/// off.
#[tokio::test]
async fn a_browser_eventsource_reconnects_with_its_ticket_and_misses_nothing() {
    let (py, gw) = scripted_gateway("").await;
    let t = token(json!({"sub": "alice"}));
    // A run held mid-message by the gated agent.
    let mut runner = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    runner
        .send(
            json!({"type": "run", "agent": "gated", "threadId": "es", "runId": "r1",
                     "messages": [{"id": "u1", "role": "user", "content": "go"}]}),
        )
        .await;
    runner.recv_until(|f| f["event"]["delta"] == "part1").await;
    // Tickets live in one process: issued and used on the first node.
    let v = json_of(
        http()
            .post(format!("{}/v1/threads/es/ticket", gw.base))
            .bearer_auth(&t),
    )
    .await;
    let ticket = v["ticket"].as_str().unwrap();
    let seen = node_client(
        "eventsource_reconnect.mjs",
        &[&gw.base, "es", ticket, &py.url("release")],
    )
    .await;
    assert!(seen.get("failure").is_none(), "{seen:#}");
    assert_eq!(seen["released"], 200, "{seen:#}");
    assert!(
        seen["errors"].as_u64().unwrap() >= 1,
        "it saw the drop: {seen:#}"
    );
    assert!(
        seen["opens"].as_u64().unwrap() >= 2,
        "it reconnected: {seen:#}"
    );
    assert_eq!(seen["readyState"], 1, "still open: {seen:#}");

    // The journal, as the join stream frames it (id: seq) for a bearer reader.
    let mut resp = http()
        .get(format!("{}/v1/threads/es/events", gw.base))
        .bearer_auth(&t)
        .send()
        .await
        .unwrap();
    let mut raw = String::new();
    while !raw.contains("RUN_FINISHED") {
        let chunk = resp.chunk().await.unwrap().expect("stream open");
        raw.push_str(&String::from_utf8_lossy(&chunk));
    }
    let journal: Vec<(String, String)> = raw
        .split("\n\n")
        .filter_map(|frame| {
            let field = |name: &str| {
                frame
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(str::to_owned)
            };
            Some((field("id: ")?, field("data: ")?))
        })
        .collect();
    assert!(journal.len() >= 6, "{raw}");
    let browser: Vec<(String, String)> = serde_json::from_value(seen["events"].clone()).unwrap();
    let before_drop = seen["eventsBeforeDrop"].as_u64().unwrap() as usize;
    assert!(before_drop < browser.len(), "{seen:#}");
    // Every journal event, once, in order (what the framer adds to keep the
    // resumed stream valid for a stock client carries no id of its own).
    let from_journal: Vec<(String, String)> = browser
        .iter()
        .filter(|e| journal.contains(e))
        .cloned()
        .collect();
    assert_eq!(from_journal, journal, "{seen:#}");
}

// 5. A reused runId is a conflict.

const DEMO: &str = "[demo]\nenabled = true\ntoken_delay = \"0ms\"\n\
    [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n";

#[tokio::test]
async fn reused_run_id_is_a_conflict_and_replies_stay_apart() {
    let gw = Gateway::start(DEMO).await;
    let t = token(json!({}));
    let url = gw.run_url("demo");
    let first = input("ru", "r1", "hello");
    assert_eq!(post_run(&url, &t, &first).await.0, 200);
    let (status, body) = post_run(&url, &t, &first).await;
    assert_eq!(status, 409, "{body}");
    let e: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(e["error"]["code"], "conflict");
    assert!(e["error"]["message"].as_str().unwrap().contains("'r1'"));

    let mut ws = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    ws.send(
        json!({"type": "run", "id": "c", "agent": "demo", "threadId": "ru", "runId": "r1",
                   "messages": [{"id": "u9", "role": "user", "content": "again"}]}),
    )
    .await;
    let reply = ws.recv().await;
    assert_eq!(reply["type"], "error", "{reply}");
    assert_eq!(reply["code"], "conflict");

    // The next turn: a new question (its own message id; the same id again
    // would be a regenerate of the first, docs/protocol.md "Branches").
    let mut second = input("ru", "r2", "hello");
    second["messages"][0]["id"] = "u2".into();
    assert_eq!(post_run(&url, &t, &second).await.0, 200);
    let (_, snap) = get_json(&gw.url("/v1/threads/ru"), &t).await;
    let assistants = snap["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| {
            m["role"] == "assistant" && m["content"].as_str().is_some_and(|c| !c.is_empty())
        })
        .count();
    assert_eq!(
        assistants, 2,
        "two runs, two replies: {:#}",
        snap["messages"]
    );

    // A stock client reusing its runId gets the 409 as an error.
    let same = ["thread-x", "same-run", "hi"];
    let v = node_client("httpagent.mjs", &[&url, &t, same[0], same[1], same[2]]).await;
    assert!(v["error"].is_null(), "{}", v["error"]);
    let v = node_client("httpagent.mjs", &[&url, &t, same[0], same[1], same[2]]).await;
    assert!(
        v["error"].as_str().unwrap().contains("409"),
        "{}",
        v["error"]
    );
}

// 6. Edited history is journaled, and the fold follows.

#[tokio::test]
async fn edited_history_reaches_the_journal_and_every_viewer() {
    let gw = Gateway::start(DEMO).await;
    let t = token(json!({}));
    let url = gw.run_url("demo");
    assert_eq!(post_run(&url, &t, &input("ed", "r1", "hello")).await.0, 200);
    let mut edited = input("ed", "r2", "hello, edited");
    edited["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "u2", "role": "user", "content": "and more"}));
    assert_eq!(post_run(&url, &t, &edited).await.0, 200);
    let (_, snap) = get_json(&gw.url("/v1/threads/ed"), &t).await;
    assert_eq!(message(&snap["messages"], "u1")["content"], "hello, edited");
    assert_eq!(message(&snap["messages"], "u2")["content"], "and more");
    // A late viewer sees the edit as a MESSAGES_SNAPSHOT right after RUN_STARTED.
    let mut ws = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    ws.send(json!({"type": "subscribe", "threadId": "ed", "after": 0}))
        .await;
    let frames = ws
        .recv_until(|f| is_terminal_frame(f) && f["event"]["runId"] == "r2")
        .await;
    let i = frames
        .iter()
        .position(|f| f["event"]["type"] == "RUN_STARTED" && f["event"]["runId"] == "r2")
        .unwrap();
    assert_eq!(frames[i + 1]["event"]["type"], "MESSAGES_SNAPSHOT");
    // The first run re-sent nothing: only the edit journaled a snapshot.
    let snapshots = frames
        .iter()
        .filter(|f| f["event"]["type"] == "MESSAGES_SNAPSHOT")
        .count();
    assert_eq!(snapshots, 1);
}

// 7. Every error has the JSON shape.

#[tokio::test]
async fn every_error_answer_has_the_json_shape() {
    let gw = Gateway::start("").await;
    let t = token(json!({}));
    let check = |resp: reqwest::Response, status: u16, code: &'static str| async move {
        assert_eq!(resp.status().as_u16(), status);
        let ctype = resp.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(ctype.starts_with("application/json"), "{ctype}");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["code"], code, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    };
    let resp = http().put(gw.url("/v1/agents")).send().await.unwrap();
    assert!(resp.headers()["allow"].to_str().unwrap().contains("GET"));
    check(resp, 405, "method_not_allowed").await;
    let resp = http().get(gw.run_url("demo")).send().await.unwrap();
    assert!(resp.headers()["allow"].to_str().unwrap().contains("POST"));
    check(resp, 405, "method_not_allowed").await;
    let resp = http()
        .get(gw.url("/v1/threads/x/events?after=abc"))
        .bearer_auth(&t)
        .send()
        .await
        .unwrap();
    check(resp, 400, "invalid").await;
    let resp = http()
        .get(gw.url("/v1/threads?limit=-1"))
        .bearer_auth(&t)
        .send()
        .await
        .unwrap();
    check(resp, 400, "invalid").await;
    let resp = http()
        .get(gw.url("/v1/ws"))
        .bearer_auth(&t)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    assert!((400..500).contains(&status));
    let v: Value = resp.json().await.unwrap();
    assert!(v["error"]["code"].is_string(), "{v}");
    check(
        http().get(gw.url("/nope")).send().await.unwrap(),
        404,
        "not_found",
    )
    .await;
}

// 8. The bare binary runs on the compiled-in default.

#[tokio::test]
async fn bare_binary_runs_without_a_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let env = |cmd: &mut tokio::process::Command| {
        cmd.current_dir(dir.path())
            .env("HOME", &home)
            .env("AGUI_GATEWAY__SERVER__LISTEN", "127.0.0.1:0")
            .env("AGUI_GATEWAY__DEMO__TOKEN_DELAY", "0ms")
            .env_remove("AGUI_GATEWAY_CONFIG")
            .env_remove("XDG_STATE_HOME")
            .env_remove("STATE_DIRECTORY");
    };
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_agui-gateway"));
    env(&mut cmd);
    let mut gw = Proc::spawn(cmd);
    let line = gw.expect_line("agui-gateway listening on ").await;
    let base = line["agui-gateway listening on ".len()..].trim().to_owned();
    gw.expect_stderr("compiled-in default configuration").await;
    // The warning names what runs: there is no file to go and look for.
    gw.expect_stderr("public development secret of the compiled-in default configuration")
        .await;

    let mint = |sub: &'static str| {
        let mut mint = tokio::process::Command::new(env!("CARGO_BIN_EXE_agui-gateway"));
        env(&mut mint);
        async move {
            let out = mint.args(["token", "--sub", sub]).output().await.unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap().trim().to_owned()
        }
    };
    let tok = mint("alice").await;

    let (status, body) = post_run(
        &format!("{base}/v1/agents/demo/run"),
        &tok,
        &input("t1", "r1", "hello"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(sse_events(&body).last().unwrap()["type"], "RUN_FINISHED");
    assert!(
        home.join(".local/state/agui-gateway/agui-gateway.db")
            .exists()
    );
    // A second person's development token sees alice's thread.
    let (status, snapshot) = get_json(&format!("{base}/v1/threads/t1"), &mint("bob").await).await;
    assert_eq!(status, 200, "{snapshot}");
}

// 9. The README's quick start, pasted as a newcomer would.

/// The ```sh blocks of the README's "Quick start" section, in order.
fn quick_start_blocks() -> Vec<String> {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let start = readme
        .find("## Quick start\n")
        .expect("a Quick start section");
    let section = &readme[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let mut blocks = Vec::new();
    let mut block: Option<String> = None;
    for line in section.lines() {
        match (&mut block, line) {
            (None, "```sh") => block = Some(String::new()),
            (Some(_), "```") => blocks.push(block.take().unwrap()),
            (Some(b), line) => {
                b.push_str(line);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

/// Every command of the quick start after the gateway is up, pasted into
/// one shell against `cargo run --release`'s configuration (the repository's
/// `config/gateway.toml`, its journal moved to a scratch folder): the token,
/// the first run, the transfer the demo proposes as asked, and the answer
/// that resumes it with the interrupt id the shell kept. The gateway's
/// warning names the file whose development secret it runs on.
#[tokio::test]
async fn the_quick_start_commands_work_as_pasted() {
    let dir = tempfile::tempdir().unwrap();
    let config = repo().join("config/gateway.toml");
    let mut cmd = tokio::process::Command::new(gateway_bin());
    cmd.arg("--config")
        .arg(&config)
        .current_dir(repo())
        .env("AGUI_GATEWAY__SERVER__LISTEN", "127.0.0.1:0")
        .env("AGUI_GATEWAY__STORE__PATH", dir.path().join("quick.db"))
        .env("AGUI_GATEWAY__DEMO__TOKEN_DELAY", "0ms");
    let mut gw = Proc::spawn(cmd);
    let line = gw.expect_line("agui-gateway listening on ").await;
    let base = line["agui-gateway listening on ".len()..].trim().to_owned();
    gw.expect_stderr(&format!(
        "public development secret in {}",
        config.display()
    ))
    .await;

    let blocks = quick_start_blocks();
    let (serve, rest): (Vec<_>, Vec<_>) = blocks
        .iter()
        .partition(|b| matches!(b.trim(), "cargo run --release" | "bash .ci/run"));
    assert_eq!(serve.len(), 2, "{blocks:#?}");
    // What the quick start runs, with this test's binary and address; the
    // hello run twice, as a newcomer pastes it again.
    let binary = gateway_bin().display().to_string();
    let script = rest
        .iter()
        .flat_map(|b| {
            let again = b
                .contains("\"hello\"")
                .then(|| b.lines().skip(1).collect::<Vec<_>>().join("\n"));
            [b.to_string(), again.unwrap_or_default()]
        })
        .collect::<Vec<_>>()
        .join("\n")
        .replace("cargo run --release -q --", &binary)
        .replace("http://127.0.0.1:8080", &base);
    assert!(
        script.contains("$INTERRUPT") && script.contains("resume"),
        "{script}"
    );
    let out = tokio::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(repo())
        .output()
        .await
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    assert!(out.status.success(), "{script}\n{stdout}\n{stderr}");
    // The hello runs, then the answer; the transfer streamed to stderr.
    let runs = |text: &str| -> Vec<Vec<Value>> {
        let mut runs: Vec<Vec<Value>> = Vec::new();
        for e in sse_events(text) {
            if e["type"] == "RUN_STARTED" {
                runs.push(Vec::new());
            }
            runs.last_mut().expect("RUN_STARTED first").push(e);
        }
        runs
    };
    let said = |run: &[Value]| -> String {
        run.iter()
            .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
            .map(|e| e["delta"].as_str().unwrap())
            .collect()
    };
    let answered = runs(&stdout);
    assert_eq!(answered.len(), 3, "{stdout}");
    for hello in &answered[..2] {
        assert_eq!(hello.last().unwrap()["outcome"]["type"], "success");
        // An HTTP run carries only what the client sent: no state from the
        // thread, so the second paste is the demo's first turn again.
        let turns = hello.iter().find(|e| e["type"] == "STATE_DELTA").unwrap();
        assert_eq!(turns["delta"][0]["value"], 1, "{hello:?}");
    }
    let asked = runs(&stderr);
    assert_eq!(asked.len(), 1, "{stderr}");
    let outcome = &asked[0].last().unwrap()["outcome"];
    assert_eq!(outcome["type"], "interrupt", "{stderr}");
    assert_eq!(
        outcome["interrupts"][0]["metadata"],
        json!({"amount": 25, "to": "bob"}),
        "the demo proposes what was asked"
    );
    // The answer named the interrupt the shell kept: its tool call got the result.
    let resumed = &answered[2];
    let result = resumed
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT")
        .expect("a tool result");
    assert_eq!(result["toolCallId"], outcome["interrupts"][0]["toolCallId"]);
    assert_eq!(result["content"], "transfer executed");
    assert_eq!(
        said(resumed),
        "Done: the transfer of 25 to bob went through."
    );
    assert_eq!(resumed.last().unwrap()["outcome"]["type"], "success");
}

/// `.ci/run`'s system-packages step, run by a user who is not root with a
/// package missing: it stops at once, naming the package and how to install
/// it, instead of failing inside apt-get; with everything there it installs
/// nothing and needs no root.
#[tokio::test]
async fn the_system_packages_step_tells_a_user_without_root_what_to_install() {
    use std::os::unix::fs::{PermissionsExt, symlink};
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = dir.path().join("system-packages");
    std::fs::copy(repo().join(".ci/system-packages"), &script).unwrap();
    // A PATH with the system's own tools but no redis-server (and no sudo).
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    for tool in [
        "bash", "env", "id", "cat", "openssl", "node", "npm", "python3", "haproxy",
    ] {
        if let Some(found) = ["/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin"]
            .iter()
            .map(|d| std::path::Path::new(d).join(tool))
            .find(|p| p.exists())
        {
            symlink(found, bin.join(tool)).unwrap();
        }
    }
    let run = || {
        let uid = std::process::Command::new("id").arg("-u").output().unwrap();
        let mut cmd = if String::from_utf8_lossy(&uid.stdout).trim() == "0" {
            // Root here: the step runs as `nobody`, as a user would.
            let mut c = std::process::Command::new("/usr/bin/setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
            c.arg(bin.join("bash"));
            c
        } else {
            std::process::Command::new(bin.join("bash"))
        };
        cmd.arg(&script)
            .env_clear()
            .env("PATH", &bin)
            .env("HOME", dir.path())
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let out = run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("missing system packages: redis-server")
            && stderr.contains("needs root")
            && stderr.contains("sudo apt-get install -y redis-server"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("apt-get: ") && !stderr.contains("E: "),
        "{stderr}"
    );
    // Installed by hand: the step finds everything and is done.
    symlink(
        ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
            .iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect("redis-server is installed"),
        bin.join("redis-server"),
    )
    .unwrap();
    let out = run();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// 10. Hostile input never wedges a thread.

#[tokio::test]
async fn malformed_agent_snapshot_neither_panics_nor_wedges_the_thread() {
    let (_py, gw) = scripted_gateway("").await;
    let t = token(json!({}));
    let hostile = json!([
        {"type": "MESSAGES_SNAPSHOT", "messages": [
            {"id": "a", "role": "assistant", "toolCalls": [{"id": "c1", "type": "function", "function": "oops"}]},
            "not a message", 7
        ]},
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "n", "parentMessageId": "a"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{}"},
        {"type": "TOOL_CALL_END", "toolCallId": "c1"},
    ]);
    let url = gw.run_url("events");
    let (status, body) = post_run(&url, &t, &scripted_input("hx", "r1", "hi", hostile)).await;
    assert_eq!(status, 200);
    assert_eq!(
        sse_events(&body).last().unwrap()["type"],
        "RUN_FINISHED",
        "{body}"
    );
    let next = scripted_input("hx", "r2", "again", text_events("a2", "fine"));
    let (status, body) = post_run(&url, &t, &next).await;
    assert_eq!(status, 200, "the thread still works: {body}");
    // And it loads again after a restart (the journal is folded at load).
    let gw = gw.restart().await;
    let (status, snap) = get_json(&gw.url("/v1/threads/hx"), &t).await;
    assert_eq!(status, 200);
    assert_eq!(
        message(&snap["messages"], "a")["toolCalls"][0]["function"]["name"],
        "n"
    );
}

#[tokio::test]
async fn langgraph_resume_with_a_non_object_command_is_still_answered() {
    let (_py, gw) = agent_behind_gateway("langgraph_agent.py", "agent", "lg", "").await;
    let t = token(json!({}));
    let url = gw.run_url("lg");
    assert_eq!(
        post_run(&url, &t, &input("lgc", "r1", "email bob")).await.0,
        200
    );
    let mut resume = input("lgc", "r2", "email bob");
    resume["resume"] =
        json!([{"interruptId": "lg-r1-1", "status": "resolved", "payload": {"approved": true}}]);
    resume["forwardedProps"] = json!({"command": "not an object"});
    let (status, body) = post_run(&url, &t, &resume).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Sent."), "the graph continued: {body}");
}

// 13. Refused runs leave nothing behind.

#[tokio::test]
async fn a_run_refused_by_policy_creates_no_thread_and_no_subscription() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "[[rules]]\nname = \"no-tools\"\nkind = \"limits\"\nmax_tools = 0\n",
    )
    .unwrap();
    let (_py, gw) = scripted_gateway(&format!(
        "[policy]\npath = {:?}\n",
        policy.display().to_string()
    ))
    .await;
    let t = token(json!({}));
    let tool = json!([{"name": "t", "description": "d", "parameters": {}}]);

    let mut a = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    a.send(
        json!({"type": "run", "id": "x", "agent": "events", "threadId": "nope", "runId": "r1",
                  "tools": tool, "messages": [{"id": "u1", "role": "user", "content": "hi"}]}),
    )
    .await;
    let refused = a.recv().await;
    assert_eq!(refused["type"], "error", "{refused}");
    let mut http_input = input("nope", "r2", "hi");
    http_input["tools"] = tool;
    let (status, body) = post_run(&gw.run_url("events"), &t, &http_input).await;
    assert_eq!(status, 413, "{body}");
    let (status, _) = get_json(&gw.url("/v1/threads/nope"), &t).await;
    assert_eq!(status, 404, "no thread was created");

    // Someone else's run on that thread id is not delivered to `a`.
    let body = scripted_input("nope", "r3", "hi", text_events("m", "x"));
    assert_eq!(post_run(&gw.run_url("events"), &t, &body).await.0, 200);
    a.send(json!({"type": "ping", "id": "p"})).await;
    assert_eq!(a.recv().await["type"], "pong", "a was never subscribed");
}

#[tokio::test]
async fn a_state_delta_the_patch_library_cannot_undo_leaves_the_thread_working() {
    // A `move` that fails after an `add` of its source: `json_patch::patch`
    // panicked undoing it, inside the thread's fold.
    let (_py, gw) = scripted_gateway("").await;
    let t = token(json!({}));
    let bad = json!([
        {"type": "STATE_SNAPSHOT", "snapshot": {"k": 1}},
        {"type": "STATE_DELTA", "delta": [
            {"op": "add", "path": "/-", "value": 1},
            {"op": "add", "path": "/~0", "value": [null, 2]},
            {"op": "move", "from": "/~0", "path": "/x/y"}]},
    ]);
    let body = scripted_input("undo", "r1", "hi", bad);
    let (status, stream) = post_run(&gw.run_url("events"), &t, &body).await;
    assert_eq!(status, 200);
    let events = sse_events(&stream);
    assert_eq!(
        events.last().unwrap()["type"],
        "RUN_FINISHED",
        "the run ends as the agent ended it: {stream}"
    );
    assert!(
        events.iter().any(|e| e["type"] == "STATE_DELTA"),
        "the delta is forwarded as the agent sent it"
    );
    let (_, snapshot) = get_json(&gw.url("/v1/threads/undo"), &t).await;
    assert_eq!(
        snapshot["state"],
        json!({"k": 1}),
        "a failing delta changes nothing"
    );
    // The thread takes its next run.
    let body = scripted_input("undo", "r2", "more", text_events("a2", "second"));
    assert_eq!(post_run(&gw.run_url("events"), &t, &body).await.0, 200);
    let (_, snapshot) = get_json(&gw.url("/v1/threads/undo"), &t).await;
    assert_eq!(snapshot["messages"].as_array().unwrap().len(), 3);
}
