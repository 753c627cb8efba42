//! The SSE join stream from every cursor (docs/protocol.md, "Cursors"): a
//! fresh start at any seq (`?after=N`) and a reconnect at any seq the stream
//! carried (`Last-Event-ID: N`, what a browser `EventSource` sends by
//! itself) are valid AG-UI for the stock `@ag-ui/client` — its own SSE
//! parser, verifier and reducer read the bytes the gateway sent — and fold
//! the conversation the gateway holds. The thread has tool calls (joined
//! mid-arguments, and between a call's end and its result), reasoning,
//! steps, state, a meta event between runs, a fork and a handoff; every
//! stream read from its start also passes `ag-ui-validate`.

mod common;
use common::*;
use serde_json::{Value, json};

async fn gateway() -> (PyAgent, Gateway) {
    let py = PyAgent::start("scripted_agent.py").await;
    // `events` may hand the thread to `ok` (its transfer tool).
    let cfg = format!(
        "[[agents]]\nid = \"events\"\nurl = \"{}\"\nhandoff = {{ targets = [\"ok\"] }}\n\
         [[agents]]\nid = \"ok\"\nurl = \"{}\"\n",
        py.url("events"),
        py.url("ok")
    );
    (py, Gateway::start(&cfg).await)
}

fn run_input(run: &str, parent: Option<&str>, events: Value) -> Value {
    let mut v = input("jc", run, &format!("question {run}"));
    v["messages"][0]["id"] = format!("u-{run}").into();
    v["forwardedProps"] = json!({ "events": events });
    if let Some(p) = parent {
        v["parentRunId"] = p.into();
    }
    v
}

/// A first run with everything a cursor can fall inside of.
fn rich_events() -> Value {
    json!([
        {"type": "STEP_STARTED", "stepName": "plan"},
        {"type": "STATE_SNAPSHOT", "snapshot": {"count": 0}},
        {"type": "REASONING_START", "messageId": "rs1"},
        {"type": "REASONING_MESSAGE_START", "messageId": "rm1", "role": "reasoning"},
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": "rm1", "delta": "let me "},
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": "rm1", "delta": "look"},
        {"type": "REASONING_MESSAGE_END", "messageId": "rm1"},
        {"type": "REASONING_END", "messageId": "rs1"},
        {"type": "TEXT_MESSAGE_START", "messageId": "a1", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a1", "delta": "Looking "},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a1", "delta": "it up."},
        {"type": "TEXT_MESSAGE_END", "messageId": "a1"},
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "lookup", "parentMessageId": "a1"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{\"query\": "},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "\"invoices\", "},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "\"limit\": 3}"},
        {"type": "TOOL_CALL_END", "toolCallId": "c1"},
        {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/count", "value": 1}]},
        {"type": "TOOL_CALL_RESULT", "messageId": "t1", "toolCallId": "c1", "content": "3 invoices"},
        {"type": "STEP_FINISHED", "stepName": "plan"},
        {"type": "TEXT_MESSAGE_START", "messageId": "a2", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a2", "delta": "You have "},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a2", "delta": "3."},
        {"type": "TEXT_MESSAGE_END", "messageId": "a2"},
    ])
}

fn tool_events(msg: &str, call: &str) -> Value {
    json!([
        {"type": "TEXT_MESSAGE_START", "messageId": msg, "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": msg, "delta": "again"},
        {"type": "TOOL_CALL_START", "toolCallId": call, "toolCallName": "lookup", "parentMessageId": msg},
        {"type": "TOOL_CALL_ARGS", "toolCallId": call, "delta": "{\"q\":"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": call, "delta": " 1}"},
        {"type": "TOOL_CALL_END", "toolCallId": call},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": msg, "delta": " done"},
        {"type": "TEXT_MESSAGE_END", "messageId": msg},
    ])
}

/// A turn that hands the thread to `ok` with the transfer tool (its call
/// answered by the gateway in the target run's input).
fn handoff_events() -> Value {
    json!([
        {"type": "TEXT_MESSAGE_START", "messageId": "a5", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "a5", "delta": "Passing you on."},
        {"type": "TEXT_MESSAGE_END", "messageId": "a5"},
        {"type": "TOOL_CALL_START", "toolCallId": "x1", "toolCallName": "transfer_to_ok", "parentMessageId": "a5"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "x1", "delta": "{\"reason\": "},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "x1", "delta": "\"billing\"}"},
        {"type": "TOOL_CALL_END", "toolCallId": "x1"},
    ])
}

/// Checks a captured stream with the `ag-ui-validate` conformance tool.
async fn ag_ui_validate(name: &str, body: &str) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("join.sse");
    std::fs::write(&capture, body).unwrap();
    let out = tokio::process::Command::new(python().with_file_name("ag-ui-validate"))
        .arg(&capture)
        .arg("--no-color")
        .output()
        .await
        .expect("ag-ui-validate runs");
    (!out.status.success()).then(|| {
        format!(
            "{name}: ag-ui-validate: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// A join stream's raw SSE text, up to the end of the frame carrying `last`
/// (bytes gathered whole: a character may straddle two chunks).
async fn read_join(gw: &Gateway, t: &str, query: &str, resume: Option<&str>, last: u64) -> String {
    let mut req = http()
        .get(gw.url(&format!("/v1/threads/jc/events{query}")))
        .bearer_auth(t);
    if let Some(id) = resume {
        req = req.header("last-event-id", id);
    }
    let mut resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let mark = format!("id: {last}\n");
    let mut bytes = Vec::new();
    loop {
        let body = String::from_utf8_lossy(&bytes);
        if let Some(at) = body.find(&mark)
            && let Some(end) = body[at..].find("\n\n")
        {
            return body[..at + end + 2].to_owned();
        }
        let chunk = tokio::time::timeout(WAIT, resp.chunk())
            .await
            .expect("the join stream stalled")
            .unwrap()
            .expect("the join stream ended");
        bytes.extend_from_slice(&chunk);
    }
}

/// The SSE frames of a body (keepalive comments dropped), each with its id.
fn frames(body: &str) -> Vec<(Option<String>, String)> {
    body.split_inclusive("\n\n")
        .filter(|f| f.lines().any(|l| l.starts_with("data:")))
        .map(|f| {
            let id = f
                .lines()
                .find_map(|l| l.strip_prefix("id: "))
                .map(str::to_owned);
            (id, f.to_owned())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fresh_start_and_every_reconnect_is_valid_and_folds_the_thread() {
    let (_py, gw) = gateway().await;
    let t = token(json!({}));
    let url = gw.run_url("events");
    let runs = [
        run_input("r1", None, rich_events()),
        run_input("r2", None, tool_events("a3", "c2")),
        // A fork from the first run: the history is restated.
        run_input("r3", Some("r1"), tool_events("a4", "c3")),
        // A handoff: `ok`'s run follows in the same request.
        run_input("r4", None, handoff_events()),
    ];
    for (i, body) in runs.iter().enumerate() {
        let (status, text) = post_run(&url, &t, body).await;
        assert_eq!(status, 200, "{text}");
        if i == 0 {
            let meta = http()
                .post(gw.url("/v1/threads/jc/meta"))
                .bearer_auth(&t)
                .json(&json!({"metaType": "thumbs_up", "payload": {"note": "good"}}))
                .send()
                .await
                .unwrap();
            assert_eq!(meta.status(), 200);
        }
    }
    let snap = json_of(http().get(gw.url("/v1/threads/jc")).bearer_auth(&t)).await;
    let last = snap["seq"].as_u64().unwrap();
    assert!(last > 45, "{snap}");

    let whole = read_join(&gw, &t, "", None, last).await;
    let whole_frames = frames(&whole);
    let mut cases = vec![json!({"name": "whole", "bodies": [whole.clone()]})];
    // Streams a client reads from their start, for ag-ui-validate too.
    let mut standalone = vec![("whole".to_owned(), whole.clone())];
    // A reconnect after every frame that carried an id.
    for (i, (id, _)) in whole_frames.iter().enumerate() {
        let Some(id) = id else { continue };
        let cut: String = whole_frames[..=i].iter().map(|(_, f)| f.as_str()).collect();
        let rest = if *id == last.to_string() {
            String::new()
        } else {
            read_join(&gw, &t, "", Some(id), last).await
        };
        let name = format!("reconnect {id}");
        standalone.push((name.clone(), format!("{cut}{rest}")));
        cases.push(json!({"name": name, "bodies": [format!("{cut}{rest}")]}));
    }
    // A fresh start at every seq, by a client that read up to there (and
    // so holds the conversation so far) and by one that did not.
    for n in 1..last {
        let mark = format!("{n}");
        let Some(i) = whole_frames
            .iter()
            .rposition(|(id, _)| id.as_deref() == Some(&mark))
        else {
            continue;
        };
        let cut: String = whole_frames[..=i].iter().map(|(_, f)| f.as_str()).collect();
        let rest = read_join(&gw, &t, &format!("?after={n}"), None, last).await;
        cases.push(json!({"name": format!("after {n}, was there"), "bodies": [cut, rest.clone()]}));
        standalone.push((format!("after {n}"), rest.clone()));
        cases.push(json!({"name": format!("after {n}, new"), "bodies": [rest]}));
    }
    let path = std::env::temp_dir().join(format!("join-cursors-{}.json", std::process::id()));
    std::fs::write(&path, serde_json::to_vec(&cases).unwrap()).unwrap();
    let seen = node_client("replay_sse.mjs", &[path.to_str().unwrap()]).await;
    let _ = std::fs::remove_file(&path);

    let mut failures = Vec::new();
    for (name, body) in &standalone {
        failures.extend(ag_ui_validate(name, body).await);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let types = types(&sse_events(&whole));
    assert!(
        types.iter().filter(|t| *t == "RUN_STARTED").count() >= 5,
        "a handoff's run follows: {types:?}"
    );

    let baseline = &seen["whole"];
    assert!(baseline["error"].is_null(), "{baseline:#}");
    assert_eq!(
        baseline["messages"], snap["messages"],
        "the stream from 0 folds the snapshot"
    );
    assert_eq!(baseline["state"], snap["state"]);
    for (name, got) in seen.as_object().unwrap() {
        if !got["error"].is_null() {
            failures.push(format!("{name}: {}", got["error"]));
        } else if got["messages"] != snap["messages"] || got["state"] != snap["state"] {
            failures.push(format!(
                "{name}: folds {} / {}",
                got["messages"], got["state"]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} starts broke:\n{}\nsnapshot: {}",
        failures.len(),
        seen.as_object().unwrap().len(),
        failures.join("\n"),
        snap["messages"]
    );
}
