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
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let mut all = args.to_vec();
    all.push(record.to_str().unwrap());
    let py = PyAgent::start_args("a2a_agent.py", &all).await;
    let gw = Gateway::start(&format!(
        "[[agents]]\nid = \"echo\"\nprotocol = \"a2a\"\nurl = \"{}\"\n",
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
    let listing = loop {
        let v = json_of(http().get(gw.url("/v1/agents")).bearer_auth(&t)).await;
        if v["agents"][0].get("a2a").is_some() {
            break v["agents"][0].clone();
        }
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
async fn failed_and_rejected_tasks_end_the_run_with_the_agents_words() {
    let (_py, gw, _record, _dir) = a2a_behind_gateway(&[]).await;
    let events = run(&gw, &input("t3", "r1", "fail")).await;
    let message = assert_run_error(&events, "a2a_failed");
    assert_eq!(message, "the agent failed on purpose");
    assert_eq!(events[0]["type"], "RUN_STARTED");
    let events = run(&gw, &input("t4", "r1", "reject")).await;
    assert_eq!(assert_run_error(&events, "a2a_rejected"), "not my job");
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
