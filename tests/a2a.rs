//! A2A agents behind the gateway, against a real `a2a-sdk` agent
//! (tests/agents/a2a_agent.py, JSON-RPC at /rpc as its card says, A2A v1.0):
//! its card in `GET /v1/agents`; a streamed task as an AG-UI run on the HTTP
//! face and to a WebSocket viewer, journaled like any run; input-required
//! as an interrupt whose resume continues the same task; failed and
//! rejected tasks as `RUN_ERROR`s; a cancel as `CancelTask`; an agent that
//! does not stream reached with a blocking send.

mod common;

use common::*;
use serde_json::{Value, json};
use std::path::PathBuf;

/// The agent (with its record file) and a gateway whose agent `echo` is it.
async fn a2a_behind_gateway(args: &[&str]) -> (PyAgent, Gateway, PathBuf, tempfile::TempDir) {
    a2a_behind_gateway_with(args, "").await
}

/// [`a2a_behind_gateway`] with `agent_extra` TOML in the agent's table.
async fn a2a_behind_gateway_with(
    args: &[&str],
    agent_extra: &str,
) -> (PyAgent, Gateway, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let mut all = args.to_vec();
    all.push(record.to_str().unwrap());
    let py = PyAgent::start_args("a2a_agent.py", &all).await;
    let gw = Gateway::start(&format!(
        "[[agents]]\nid = \"echo\"\nprotocol = \"a2a\"\nurl = \"{}\"\n{agent_extra}\n",
        py.url("/")
    ))
    .await;
    (py, gw, record, dir)
}

/// The lines the agent recorded (one JSON value each).
fn recorded(path: &PathBuf) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

async fn run(gw: &Gateway, body: &Value) -> Vec<Value> {
    let (status, text) = post_run(&gw.run_url("echo"), &token(json!({})), body).await;
    assert_eq!(status, 200, "{text}");
    sse_events(&text)
}

fn text_of(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .map(|e| e["delta"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn an_a2a_task_streams_as_an_ag_ui_run_to_the_requester_and_every_viewer() {
    let (_py, gw, record, _dir) = a2a_behind_gateway(&[]).await;
    // The card, read at start, names the agent and its skills.
    let t = token(json!({}));
    let deadline = tokio::time::Instant::now() + WAIT;
    let listing = loop {
        let v = json_of(http().get(gw.url("/v1/agents")).bearer_auth(&t)).await;
        if v["agents"][0].get("a2a").is_some() {
            break v["agents"][0].clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the card was never read: {v}"
        );
        tokio::task::yield_now().await;
    };
    assert_eq!(listing["protocol"], "a2a");
    assert_eq!(listing["a2a"]["name"], "Echo A2A");
    assert_eq!(
        listing["description"],
        "Echoes, asks, fails and ticks: a test agent"
    );
    assert_eq!(listing["a2a"]["skills"][0]["id"], "echo");
    let caps = json_of(
        http()
            .get(gw.url("/v1/agents/echo/capabilities"))
            .bearer_auth(&t),
    )
    .await;
    assert_eq!(
        caps["identity"]["a2a"]["capabilities"]["streaming"], true,
        "{caps}"
    );

    let events = run(&gw, &input("t1", "r1", "hello")).await;
    assert_eq!(
        types(&events),
        [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ],
        "{events:#?}"
    );
    assert_eq!(text_of(&events), "echo: hello!");
    assert_eq!(events[0]["threadId"], "t1");
    assert_eq!(events[0]["runId"], "r1");
    // A viewer joining now reads the same run from the journal.
    let mut viewer = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    viewer
        .send(json!({"type": "subscribe", "threadId": "t1", "after": 0}))
        .await;
    let frames = viewer.recv_until(is_terminal_frame).await;
    let seen: Vec<Value> = frames
        .iter()
        .filter(|f| f["type"] == "event")
        .map(|f| f["event"].clone())
        .collect();
    assert_eq!(text_of(&seen), "echo: hello!");
    assert_eq!(seen.last().unwrap()["type"], "RUN_FINISHED");
    // What the agent got: the thread as its context, the user's text.
    let sent = recorded(&record);
    assert_eq!(sent[0]["contextId"], "t1");
    assert_eq!(sent[0]["parts"], json!([{"text": "hello"}]));
    assert_eq!(sent[0]["role"], "ROLE_USER");
    // The journal folds it into the conversation like any run.
    let export = json_of(
        http()
            .get(gw.url("/v1/threads/t1/messages?format=ag-ui"))
            .bearer_auth(&t),
    )
    .await;
    let last = export["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "assistant", "{export}");
    assert_eq!(last["content"], "echo: hello!");
}

#[tokio::test]
async fn input_required_is_an_interrupt_and_its_resume_continues_the_same_task() {
    let (_py, gw, record, _dir) = a2a_behind_gateway(&[]).await;
    let events = run(&gw, &input("t2", "r1", "ask")).await;
    let last = events.last().unwrap();
    assert_eq!(last["type"], "RUN_FINISHED", "{events:#?}");
    assert_eq!(last["outcome"]["type"], "interrupt");
    let interrupt = &last["outcome"]["interrupts"][0];
    assert_eq!(interrupt["reason"], "input_required");
    assert_eq!(text_of(&events), "which colour?");
    let task = interrupt["id"].as_str().unwrap().to_owned();
    assert_eq!(interrupt["metadata"]["a2a"]["taskId"], task.as_str());
    // A plain run is refused while the interrupt is pending.
    let (status, _) = post_run(
        &gw.run_url("echo"),
        &token(json!({})),
        &input("t2", "r-x", "never mind"),
    )
    .await;
    assert_eq!(status, 409);
    let resume = json!({"threadId": "t2", "runId": "r2", "messages": [], "tools": [], "context": [],
        "resume": [{"interruptId": task, "status": "resolved", "payload": "blue"}]});
    let events = run(&gw, &resume).await;
    assert_eq!(text_of(&events), "you said blue", "{events:#?}");
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
    assert!(
        events
            .last()
            .unwrap()
            .get("outcome")
            .is_none_or(|o| o["type"] != "interrupt")
    );
    let sent = recorded(&record);
    assert_eq!(
        sent[1]["taskId"],
        task.as_str(),
        "the answer went to the same task"
    );
    assert_eq!(sent[1]["contextId"], "t2");
}

#[tokio::test]
async fn failed_and_rejected_tasks_end_the_run_and_auth_required_pauses_it() {
    let (_py, gw, _record, _dir) = a2a_behind_gateway(&[]).await;
    let events = run(&gw, &input("t3", "r1", "fail")).await;
    let message = assert_run_error(&events, "a2a_failed");
    assert_eq!(message, "the agent failed on purpose");
    assert_eq!(events[0]["type"], "RUN_STARTED");
    let events = run(&gw, &input("t4", "r1", "reject")).await;
    assert_eq!(assert_run_error(&events, "a2a_rejected"), "not my job");
    // auth-required pauses the run like input-required, with its reason.
    let events = run(&gw, &input("t8", "r1", "auth")).await;
    let interrupt = &events.last().unwrap()["outcome"]["interrupts"][0];
    assert_eq!(interrupt["reason"], "auth_required", "{events:#?}");
    assert_eq!(interrupt["message"], "sign in first");
}

#[tokio::test]
async fn a_cancelled_run_cancels_the_agents_task() {
    let (_py, gw, record, _dir) = a2a_behind_gateway(&[]).await;
    let t = token(json!({}));
    let mut ws = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    ws.send(
        json!({"type": "run", "id": "c", "agent": "echo", "threadId": "t5", "runId": "r1",
        "messages": [{"id": "u1", "role": "user", "content": "slow"}]}),
    )
    .await;
    // Once the first tick is journaled, the task exists at the agent.
    ws.recv_until(|f| f["event"]["type"] == "TEXT_MESSAGE_CONTENT")
        .await;
    let ack = json_of(
        http()
            .post(gw.url("/v1/threads/t5/cancel"))
            .bearer_auth(&t)
            .json(&json!({"runId": "r1"})),
    )
    .await;
    assert_eq!(ack["runId"], "r1", "{ack}");
    let frames = ws.recv_until(is_terminal_frame).await;
    assert!(is_terminal_frame(frames.last().unwrap()), "{frames:#?}");
    let task = recorded(&record)[0]["_task"].as_str().unwrap().to_owned();
    // The agent is told: CancelTask reaches its executor's cancel.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if recorded(&record)
            .iter()
            .any(|l| l["cancel"] == task.as_str())
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no CancelTask for {task}: {:?}",
            recorded(&record)
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_agent_that_does_not_stream_is_sent_a_blocking_message() {
    let (_py, gw, _record, _dir) = a2a_behind_gateway(&["--no-streaming"]).await;
    // Its one answer comes when the task ends: it has the run's whole
    // time, not first_event's.
    let (_py2, gw2, _record2, _dir2) = a2a_behind_gateway_with(
        &["--no-streaming"],
        "timeouts = { first_event = \"200ms\" }",
    )
    .await;
    let events = run(&gw2, &input("t5", "r1", "wait")).await;
    assert_eq!(text_of(&events), "waited", "{events:#?}");
    let events = run(&gw, &input("t6", "r1", "hello")).await;
    assert_eq!(text_of(&events), "echo: hello!", "{events:#?}");
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
    let events = run(&gw, &input("t7", "r1", "ask")).await;
    assert_eq!(events.last().unwrap()["outcome"]["type"], "interrupt");
}

#[tokio::test]
async fn a_pool_of_a2a_backends_fails_over_before_the_first_event() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let alive = PyAgent::start_args("a2a_agent.py", &[record.to_str().unwrap()]).await;
    // A backend that refuses connections: its card cannot be read, so each
    // run sent to it moves on to the other before anything reached anyone.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}/", dead.local_addr().unwrap());
    drop(dead);
    let gw = Gateway::start(&format!(
        "[[agents]]\nid = \"echo\"\nprotocol = \"a2a\"\nbackends = [{{ url = \"{dead_url}\" }}, {{ url = \"{}\" }}]\n\
         [agents.pool]\neject_after = 1000\n",
        alive.url("/")
    ))
    .await;
    for i in 0..6 {
        let events = run(&gw, &input(&format!("p{i}"), "r1", "hi")).await;
        assert_eq!(text_of(&events), "echo: hi!", "{events:#?}");
    }
    let contexts: Vec<Value> = recorded(&record)
        .iter()
        .map(|l| l["contextId"].clone())
        .collect();
    assert_eq!(
        contexts.len(),
        6,
        "every run reached the live backend once: {contexts:?}"
    );
}

#[tokio::test]
async fn an_ag_ui_agent_hands_the_thread_to_an_a2a_agent() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let a2a = PyAgent::start_args("a2a_agent.py", &[record.to_str().unwrap()]).await;
    let agui = PyAgent::start("handoff_agents.py").await;
    let gw = Gateway::start(&format!(
        "[[agents]]\nid = \"scripted\"\nurl = \"{}\"\nhandoff = {{ targets = [\"echo\"] }}\n\
         [[agents]]\nid = \"echo\"\nprotocol = \"a2a\"\nurl = \"{}\"\n",
        agui.url("scripted"),
        a2a.url("/")
    ))
    .await;
    let orders = json!({"handoff": "echo"}).to_string();
    let (status, body) = post_run(
        &gw.run_url("scripted"),
        &token(json!({})),
        &input("h1", "r1", &orders),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let events = sse_events(&body);
    // The AG-UI agent's run, then the A2A agent's on the same thread.
    let starts: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "RUN_STARTED")
        .collect();
    assert_eq!(starts.len(), 2, "{events:#?}");
    assert_eq!(starts[1]["threadId"], "h1");
    assert_eq!(text_of(&events), format!("echo: {orders}!"));
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
    let sent = recorded(&record);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["contextId"], "h1");
    assert_eq!(
        sent[0]["parts"],
        json!([{"text": orders}]),
        "the user's request, taken over"
    );
}

/// Runs the a2a-sdk client (tests/agents/a2a_client.py) against `url` and
/// returns what it printed.
async fn a2a_client(url: &str, token: &str, turns: &[&str], extra: &[&str]) -> Value {
    let mut cmd = tokio::process::Command::new(python());
    cmd.arg(repo().join("tests/agents/a2a_client.py"))
        .args([url, token, &json!(turns).to_string()])
        .args(extra)
        .kill_on_drop(true);
    let out = tokio::time::timeout(WAIT, cmd.output())
        .await
        .expect("the a2a-sdk client finishes")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: {stdout} {}", String::from_utf8_lossy(&out.stderr)))
}

/// The text an A2A client read from a turn's artifact updates.
fn artifact_text(turn: &Value) -> String {
    turn.as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str())
        .collect()
}

fn last_state(turn: &Value) -> Value {
    let last = turn.as_array().unwrap().last().unwrap();
    last["statusUpdate"]["status"]["state"].clone()
}

#[tokio::test]
async fn the_a2a_sdk_client_runs_an_ag_ui_agent_on_a_thread_people_watch() {
    let (_py, gw) = agent_behind_gateway(
        "pydantic_agent.py",
        "agent",
        "pyd",
        "description = \"Looks things up\"",
    )
    .await;
    let t = token(json!({}));
    // The card needs the same bearer token as every other route.
    let anonymous = http()
        .get(gw.url("/a2a/pyd/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    let url = gw.url("/a2a/pyd");
    let got = a2a_client(&url, &t, &["what is life?"], &[]).await;
    assert!(got.get("error").is_none(), "{got}");
    assert_eq!(got["card"]["name"], "pyd");
    assert_eq!(got["card"]["description"], "Looks things up");
    assert_eq!(
        got["card"]["supportedInterfaces"][0]["url"],
        url.as_str(),
        "the card names the address the client used"
    );
    let turn = &got["turns"][0];
    let first = &turn[0]["task"];
    assert_eq!(first["status"]["state"], "TASK_STATE_SUBMITTED", "{turn}");
    assert_eq!(
        turn[1]["statusUpdate"]["status"]["state"],
        "TASK_STATE_WORKING"
    );
    assert_eq!(artifact_text(turn), "The answer is 42.");
    assert_eq!(last_state(turn), "TASK_STATE_COMPLETED");
    // The context is a thread of the caller's tenant: people watch it.
    let context = first["contextId"].as_str().unwrap();
    let snap = json_of(
        http()
            .get(gw.url(&format!("/v1/threads/{context}")))
            .bearer_auth(&t),
    )
    .await;
    assert_eq!(snap["run"]["status"], "finished", "{snap}");
    let export = json_of(
        http()
            .get(gw.url(&format!("/v1/threads/{context}/messages?format=ag-ui")))
            .bearer_auth(&t),
    )
    .await;
    let messages = export["messages"].as_array().unwrap();
    assert_eq!(messages[0]["content"], "what is life?", "{export}");
    assert_eq!(messages.last().unwrap()["content"], "The answer is 42.");
    // Another tenant's token does not reach it.
    let other = token(json!({"tenant": "other"}));
    let status = http()
        .get(gw.url(&format!("/v1/threads/{context}")))
        .bearer_auth(&other)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status.as_u16(), 404);
}

#[tokio::test]
async fn an_a2a_client_answers_an_a2a_agents_question_through_the_gateway() {
    let (_py, gw, record, _dir) = a2a_behind_gateway(&[]).await;
    let t = token(json!({}));
    for extra in [&[][..], &["--blocking"][..]] {
        let got = a2a_client(&gw.url("/a2a/echo"), &t, &["ask", "reply:blue"], extra).await;
        assert!(got.get("error").is_none(), "{got}");
        let asked = &got["turns"][0];
        let last = asked.as_array().unwrap().last().unwrap();
        let status = if extra.is_empty() {
            &last["statusUpdate"]["status"]
        } else {
            &last["task"]["status"]
        };
        assert_eq!(status["state"], "TASK_STATE_INPUT_REQUIRED", "{asked}");
        assert_eq!(status["message"]["parts"][0]["text"], "which colour?");
        let answered = &got["turns"][1];
        let last = answered.as_array().unwrap().last().unwrap();
        if extra.is_empty() {
            assert_eq!(
                artifact_text(answered).trim_start_matches("which colour?"),
                "you said blue",
                "{answered}"
            );
            assert_eq!(last_state(answered), "TASK_STATE_COMPLETED");
        } else {
            assert_eq!(
                last["task"]["status"]["state"], "TASK_STATE_COMPLETED",
                "{answered}"
            );
        }
    }
    // Behind the gateway the answer went to the upstream task that asked.
    let sent = recorded(&record);
    assert_eq!(sent.len(), 4, "{sent:?}");
    assert_eq!(sent[1]["taskId"], sent[0]["_task"]);
}

/// One JSON-RPC call to the gateway's A2A face; the JSON answer (a
/// streamed answer's frames are not read here).
async fn rpc(gw: &Gateway, version: &str, method: &str, params: Value) -> Value {
    json_of(
        http()
            .post(gw.url("/a2a/echo"))
            .bearer_auth(token(json!({})))
            .header("A2A-Version", version)
            .json(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params})),
    )
    .await
}

#[tokio::test]
async fn the_a2a_face_answers_what_it_cannot_do_with_stable_errors() {
    let (_py, gw, _record, _dir) = a2a_behind_gateway(&[]).await;
    let message = |text: &str| {
        json!({"message": {"messageId": "m1", "contextId": "e1",
        "role": "ROLE_USER", "parts": [{"text": text}]}})
    };
    let old = rpc(&gw, "0.3", "SendMessage", message("hello")).await;
    assert_eq!(old["error"]["code"], -32009, "{old}");
    assert_eq!(old["id"], 7);
    let unknown = rpc(&gw, "1.0", "message/send", message("hello")).await;
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    let get = rpc(&gw, "1.0", "GetTask", json!({"id": "x"})).await;
    assert_eq!(get["error"]["code"], -32004, "{get}");
    let empty = rpc(
        &gw,
        "1.0",
        "SendMessage",
        json!({"message": {"messageId": "m", "parts": []}}),
    )
    .await;
    assert_eq!(empty["error"]["code"], -32602, "{empty}");
    assert_eq!(empty["error"]["data"]["code"], "invalid");
    // A context waiting for input takes an answer to its task, nothing else.
    let asked = rpc(&gw, "1.0", "SendMessage", message("ask")).await;
    assert_eq!(
        asked["result"]["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asked}"
    );
    let plain = rpc(&gw, "1.0", "SendMessage", message("something else")).await;
    assert_eq!(plain["error"]["data"]["code"], "conflict", "{plain}");
    // Nothing runs: nothing to cancel; an id that is not the gateway's: no task.
    let task = asked["result"]["task"]["id"].as_str().unwrap();
    let idle = rpc(&gw, "1.0", "CancelTask", json!({"id": task})).await;
    assert_eq!(idle["error"]["code"], -32002, "{idle}");
    let foreign = rpc(&gw, "1.0", "CancelTask", json!({"id": "not-ours"})).await;
    assert_eq!(foreign["error"]["code"], -32001, "{foreign}");
}

#[test]
fn check_config_names_a_bad_protocol_and_an_a2a_demo_agent() {
    let dir = tempfile::tempdir().unwrap();
    let check = |agent: &str| {
        let cfg = dir.path().join("gateway.toml");
        std::fs::write(
            &cfg,
            format!(
                "[server]\nlisten = \"127.0.0.1:0\"\n[auth]\nhs_secret = \"0123456789abcdef0123456789abcdef\"\n\
                 [demo]\nenabled = true\n[[agents]]\nid = \"a\"\n{agent}\n"
            ),
        )
        .unwrap();
        let out = std::process::Command::new(gateway_bin())
            .arg("--config")
            .arg(&cfg)
            .arg("check-config")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = check("url = \"demo:\"\nprotocol = \"a2a\"");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cannot be protocol = \"a2a\""), "{err}");
    let (code, err) = check("url = \"http://127.0.0.1:9/\"\nprotocol = \"mcp\"");
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("agents[0].protocol") && err.contains("mcp"),
        "{err}"
    );
    let (code, err) = check("url = \"http://127.0.0.1:9/\"\nprotocol = \"a2a\"");
    assert_eq!(code, Some(0), "{err}");
}

#[tokio::test]
async fn the_a2a_js_client_streams_and_answers_through_the_gateway() {
    let (_py, gw, record, _dir) = a2a_behind_gateway(&[]).await;
    let t = token(json!({}));
    let url = gw.url("/a2a/echo");
    let got = node_client(
        "a2a-js/client.mjs",
        &[&url, &t, r#"["hello", "ask", "reply:blue"]"#],
    )
    .await;
    assert!(got.get("error").is_none(), "{got}");
    assert_eq!(got["card"]["interfaces"][0]["url"], url.as_str());
    let states = |turn: &Value| -> Vec<String> {
        turn.as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s["state"].as_str().map(str::to_owned))
            .collect()
    };
    let texts = |turn: &Value| -> String {
        turn.as_array()
            .unwrap()
            .iter()
            .filter(|s| s["case"] == "artifactUpdate")
            .map(|s| s["text"].as_str().unwrap())
            .collect()
    };
    let hello = &got["turns"][0];
    assert_eq!(
        states(hello),
        [
            "TASK_STATE_SUBMITTED",
            "TASK_STATE_WORKING",
            "TASK_STATE_COMPLETED"
        ],
        "{hello}"
    );
    assert_eq!(texts(hello), "echo: hello!");
    let asked = &got["turns"][1];
    assert_eq!(
        states(asked).last().unwrap(),
        "TASK_STATE_INPUT_REQUIRED",
        "{asked}"
    );
    assert_eq!(
        asked.as_array().unwrap().last().unwrap()["text"],
        "which colour?"
    );
    let answered = &got["turns"][2];
    assert_eq!(
        states(answered).last().unwrap(),
        "TASK_STATE_COMPLETED",
        "{answered}"
    );
    assert_eq!(texts(answered), "you said blue");
    // One context throughout: one thread, and the upstream agent's one context.
    let sent = recorded(&record);
    assert_eq!(sent.len(), 3);
    assert!(
        sent.iter().all(|m| m["contextId"] == sent[0]["contextId"]),
        "{sent:?}"
    );
    assert_eq!(sent[2]["taskId"], sent[1]["_task"]);
}

#[tokio::test]
async fn a_reload_reads_the_new_agents_card() {
    let (first, gw, _record, dir) = a2a_behind_gateway(&[]).await;
    let record = dir.path().join("second.jsonl");
    let second = PyAgent::start_args(
        "a2a_agent.py",
        &["--no-streaming", "--name=Second", record.to_str().unwrap()],
    )
    .await;
    const RELOADED: &str = "configuration reloaded";
    let before = gw.proc.stderr().matches(RELOADED).count();
    let cfg = std::fs::read_to_string(&gw.config_path).unwrap();
    let cfg = cfg.replace(&first.url("/"), &second.url("/"));
    std::fs::write(&gw.config_path, cfg).unwrap();
    gw.signal("HUP");
    gw.proc.expect_stderr_times(RELOADED, before + 1).await;
    // The first node reloaded (a peer reloads on the file change by itself).
    let t = token(json!({}));
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let v = json_of(http().get(format!("{}/v1/agents", gw.base)).bearer_auth(&t)).await;
        if v["agents"][0]["a2a"]["name"] == "Second" {
            assert_eq!(v["agents"][0]["a2a"]["capabilities"]["streaming"], false);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new card was never read: {v}"
        );
        tokio::task::yield_now().await;
    }
    // And its runs go there, as blocking sends (the new card does not stream).
    let (status, body) = post_run(
        &format!("{}/v1/agents/echo/run", gw.base),
        &t,
        &input("rl", "r1", "hello"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(text_of(&sse_events(&body)), "echo: hello!");
    assert_eq!(recorded(&record).len(), 1);
}

#[tokio::test]
async fn the_a2a_face_takes_the_agents_roles_like_every_face() {
    let (_py, gw, record, _dir) = a2a_behind_gateway_with(&[], "roles = [\"admin\"]").await;
    let user = token(json!({}));
    let admin = token(json!({"roles": ["admin"]}));
    let card = |t: &str| {
        http()
            .get(gw.url("/a2a/echo/.well-known/agent-card.json"))
            .bearer_auth(t)
            .send()
    };
    assert_eq!(card(&user).await.unwrap().status().as_u16(), 403);
    assert_eq!(card(&admin).await.unwrap().status().as_u16(), 200);
    let send = |t: &str| {
        http()
            .post(gw.url("/a2a/echo"))
            .bearer_auth(t)
            .header("A2A-Version", "1.0")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message":
                {"messageId": "m", "contextId": "roles", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}}))
            .send()
    };
    assert_eq!(send(&user).await.unwrap().status().as_u16(), 403);
    assert!(recorded(&record).is_empty(), "nothing reached the agent");
    let ok: Value = send(&admin).await.unwrap().json().await.unwrap();
    assert_eq!(
        ok["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{ok}"
    );
    assert_eq!(
        ok["result"]["task"]["artifacts"][0]["parts"][0]["text"],
        "echo: hi!"
    );
}

#[tokio::test]
async fn a_threads_runs_stay_on_the_a2a_backend_that_holds_its_context() {
    let dir = tempfile::tempdir().unwrap();
    let records: Vec<PathBuf> = (0..2)
        .map(|i| dir.path().join(format!("r{i}.jsonl")))
        .collect();
    let mut agents = Vec::new();
    for r in &records {
        agents.push(PyAgent::start_args("a2a_agent.py", &[r.to_str().unwrap()]).await);
    }
    let gw = Gateway::start(&format!(
        "[[agents]]\nid = \"echo\"\nprotocol = \"a2a\"\nbackends = [{{ url = \"{}\" }}, {{ url = \"{}\" }}]\n",
        agents[0].url("/"),
        agents[1].url("/")
    ))
    .await;
    for thread in ["a", "b", "c", "d"] {
        for run_id in ["r1", "r2", "r3"] {
            let events = run(&gw, &input(thread, run_id, "hi")).await;
            assert_eq!(text_of(&events), "echo: hi!");
        }
    }
    let contexts: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            recorded(r)
                .iter()
                .map(|m| m["contextId"].as_str().unwrap().to_owned())
                .collect()
        })
        .collect();
    for thread in ["a", "b", "c", "d"] {
        let on: Vec<usize> = (0..2)
            .filter(|i| contexts[*i].iter().any(|c| c == thread))
            .collect();
        assert_eq!(
            on.len(),
            1,
            "thread {thread} on one backend only: {contexts:?}"
        );
        assert_eq!(contexts[on[0]].iter().filter(|c| *c == thread).count(), 3);
    }
}

/// Reads an SSE response until a frame's JSON matches `done`; returns the
/// frames read so far.
async fn frames_until(resp: &mut reqwest::Response, done: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut body = String::new();
    loop {
        // Only complete frames: the body read so far may end mid-frame.
        let complete = body.rfind("\n\n").map_or("", |end| &body[..end + 2]);
        let frames: Vec<Value> = sse_data(complete)
            .iter()
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        if frames.iter().any(&done) {
            return frames;
        }
        let chunk = tokio::time::timeout(WAIT, resp.chunk())
            .await
            .expect("the stream goes on")
            .unwrap()
            .unwrap_or_else(|| panic!("the stream ended: {body}"));
        body.push_str(&String::from_utf8_lossy(&chunk));
    }
}

fn state_of(frame: &Value) -> &Value {
    &frame["result"]["statusUpdate"]["status"]["state"]
}

#[tokio::test]
async fn a_person_or_the_a2a_client_cancels_a_task_and_the_agent_behind_is_told() {
    let (_py, gw, record, _dir) = a2a_behind_gateway(&[]).await;
    let t = token(json!({}));
    let stream = |context: &str| {
        http()
            .post(gw.url("/a2a/echo"))
            .bearer_auth(&t)
            .header("A2A-Version", "1.0")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message":
                {"messageId": format!("m-{context}"), "contextId": context, "role": "ROLE_USER", "parts": [{"text": "slow"}]}}}))
            .send()
    };
    let ticking = |f: &Value| f["result"].get("artifactUpdate").is_some();
    let cancelled = |f: &Value| state_of(f) == "TASK_STATE_CANCELED";
    let wait_for_cancels = |n: usize| {
        let record = record.clone();
        async move {
            let deadline = tokio::time::Instant::now() + WAIT;
            while recorded(&record)
                .iter()
                .filter(|l| l.get("cancel").is_some())
                .count()
                < n
            {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{:?}",
                    recorded(&record)
                );
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    };

    // A person watching the thread cancels it.
    let mut a2a = stream("steer-1").await.unwrap();
    frames_until(&mut a2a, ticking).await;
    let ack = json_of(
        http()
            .post(gw.url("/v1/threads/steer-1/cancel"))
            .bearer_auth(&t)
            .json(&json!({})),
    )
    .await;
    assert!(ack["runId"].is_string(), "{ack}");
    frames_until(&mut a2a, cancelled).await;
    wait_for_cancels(1).await;

    // The A2A client cancels its own task.
    let mut a2a = stream("steer-2").await.unwrap();
    let frames = frames_until(&mut a2a, ticking).await;
    let task = frames[0]["result"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let done = json_of(
        http()
            .post(gw.url("/a2a/echo"))
            .bearer_auth(&t)
            .header("A2A-Version", "1.0")
            .json(
                &json!({"jsonrpc": "2.0", "id": 2, "method": "CancelTask", "params": {"id": task}}),
            ),
    )
    .await;
    assert_eq!(
        done["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{done}"
    );
    frames_until(&mut a2a, cancelled).await;
    wait_for_cancels(2).await;
}

#[tokio::test]
async fn an_a2a_client_approves_an_ag_ui_agents_tool_call_with_a_data_part() {
    let (_py, gw) = agent_behind_gateway("pydantic_approval_agent.py", "agent", "bank", "").await;
    let t = token(json!({}));
    let send = |message: Value| {
        json_of(
            http()
                .post(gw.url("/a2a/bank"))
                .bearer_auth(&t)
                .header("A2A-Version", "1.0")
                .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                    "params": {"message": message}})),
        )
    };
    let asked = send(
        json!({"messageId": "m1", "contextId": "pay-a2a", "role": "ROLE_USER",
        "parts": [{"text": "pay acct-9"}]}),
    )
    .await;
    let task = &asked["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asked}"
    );
    let interrupts = &task["metadata"]["ag-ui"]["interrupts"];
    assert_eq!(interrupts[0]["toolCallId"], "call_t", "{asked}");
    // The answer is the interrupt's payload: a data part, as its schema asks.
    let answered = send(
        json!({"messageId": "m2", "contextId": "pay-a2a", "taskId": task["id"],
        "role": "ROLE_USER", "parts": [{"data": {"approved": true}}]}),
    )
    .await;
    let task2 = &answered["result"]["task"];
    assert_eq!(task2["id"], task["id"], "the same task goes on: {answered}");
    assert_eq!(
        task2["status"]["state"], "TASK_STATE_COMPLETED",
        "{answered}"
    );
    assert_eq!(
        task2["artifacts"][0]["parts"][0]["text"],
        "Transfer result: sent 500 to acct-9"
    );
    // The thread holds the approval like any resume.
    let snap = json_of(http().get(gw.url("/v1/threads/pay-a2a")).bearer_auth(&t)).await;
    assert_eq!(snap["interrupts"], json!([]), "{snap}");
}

#[tokio::test]
async fn ag_ui_a2a_directly_and_the_gateway_tell_the_same_run() {
    // One agent that also speaks A2A 0.3, as @ag-ui/a2a 0.0.6 (on
    // @a2a-js/sdk 0.2) needs; the gateway reaches it over 1.0.
    let (py, gw, _record, _dir) = a2a_behind_gateway(&["--v03"]).await;
    let direct = node_client("ag-ui-a2a/direct.mjs", &[&py.url("/"), "hello"]).await;
    assert!(direct.get("error").is_none(), "{direct}");
    let direct = direct["events"].as_array().unwrap().clone();
    let through = run(&gw, &input("cmp", "r1", "hello")).await;
    // The same run: started, then finished, once each.
    for events in [&direct, &through] {
        let t = types(events);
        assert_eq!(t.first().unwrap(), "RUN_STARTED", "{events:#?}");
        assert_eq!(t.last().unwrap(), "RUN_FINISHED", "{events:#?}");
        assert_eq!(t.iter().filter(|t| *t == "RUN_STARTED").count(), 1);
    }
    // The same words: @ag-ui/a2a 0.0.6 passes artifact chunks on as RAW
    // events; the gateway streams them as a text message.
    let raw_text: String = direct
        .iter()
        .filter(|e| e["type"] == "RAW" && e["event"]["kind"] == "artifact-update")
        .flat_map(|e| e["event"]["artifact"]["parts"].as_array().unwrap().clone())
        .map(|p| p["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(raw_text, "echo: hello!");
    assert_eq!(text_of(&through), raw_text);
    assert!(!types(&direct).iter().any(|t| t.starts_with("TEXT_MESSAGE")));
}
