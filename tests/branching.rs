//! Threads that branch: runs as commits on one journal (docs/protocol.md,
//! "Branches"). A real gateway, the scripted Python AG-UI agent's `history`
//! scenario (it reports the history it was sent and answers `a-<runId>`),
//! WebSocket clients, and the stock `@ag-ui/client` replaying the journal.

mod common;
use common::*;
use serde_json::{Value, json};

/// A gateway with the `history` agent as `h`.
async fn gateway(py: &PyAgent, extra: &str) -> Gateway {
    Gateway::start(&format!(
        "[[agents]]\nid = \"h\"\nurl = \"{}\"\n{extra}",
        py.url("history")
    ))
    .await
}

/// Sends `frame` (with `id` = its runId) and returns the history the agent
/// reported for that run, after its terminal event; or the refusal. The
/// connection watches the thread after its first run, so a run's events
/// may come before its ack: both are read as they come.
async fn run(ws: &mut Ws, mut frame: Value) -> Result<Value, Value> {
    let run_id = frame["runId"].as_str().unwrap_or("cmd").to_owned();
    frame["id"] = run_id.clone().into();
    ws.send(frame).await;
    let frames = ws.answer_and_run(&run_id, &run_id).await?;
    let started = frames
        .iter()
        .position(|f| f["event"]["type"] == "RUN_STARTED" && f["event"]["runId"] == run_id.as_str())
        .unwrap_or_else(|| panic!("{run_id} started: {frames:#?}"));
    let history = frames[started..]
        .iter()
        .find(|f| f["event"]["type"] == "CUSTOM" && f["event"]["name"] == "history")
        .map(|f| f["event"]["value"].clone())
        .unwrap_or_else(|| panic!("the agent reported its history for {run_id}: {frames:#?}"));
    Ok(history)
}

fn turn(thread: &str, run: &str, text: &str) -> Value {
    json!({"type": "run", "agent": "h", "threadId": thread, "runId": run,
           "messages": [{"id": format!("u-{run}"), "role": "user", "content": text}]})
}

fn ids(messages: &Value) -> Vec<String> {
    messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn snapshot(gw: &Gateway, t: &str, path: &str) -> Value {
    json_of(http().get(gw.url(path)).bearer_auth(t)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_run_regenerate_and_edit_fork_the_thread_and_the_agent_sees_only_the_branch() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = gateway(&py, "").await;
    let t = token(json!({"sub": "alice"}));
    let mut ws = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    for (run_id, text) in [("r1", "one"), ("r2", "two"), ("r3", "three")] {
        run(&mut ws, turn("b", run_id, text)).await.unwrap();
    }
    // Continue from the first run: the agent gets its history only.
    let mut fork = turn("b", "r4", "london instead");
    fork["parentRunId"] = "r1".into();
    let seen = run(&mut ws, fork).await.unwrap();
    assert_eq!(
        ids(&seen["messages"]),
        ["u-r1", "a-r1", "u-r4"],
        "a branch from r1 is sent r1's conversation plus the new message: {seen}"
    );
    assert_eq!(seen["state"], json!({"turns": 1}), "and r1's state: {seen}");
    assert_eq!(seen["parentRunId"], "r1");
    let head = snapshot(&gw, &t, "/v1/threads/b").await;
    assert_eq!(ids(&head["messages"]), ["u-r1", "a-r1", "u-r4", "a-r4"]);
    assert_eq!(head["headRunId"], "r4");
    assert_eq!(head["run"]["parentRunId"], "r1");
    // The conversation as it was at the end of r3 is still there.
    let old = snapshot(&gw, &t, "/v1/threads/b?runId=r3").await;
    assert_eq!(
        ids(&old["messages"]),
        ["u-r1", "a-r1", "u-r2", "a-r2", "u-r3", "a-r3"]
    );
    assert_eq!(old["state"], json!({"turns": 3}));
    let export = snapshot(&gw, &t, "/v1/threads/b/messages?format=ai-sdk&runId=r2").await;
    assert_eq!(export["messages"].as_array().unwrap().len(), 4, "{export}");

    // Regenerate the head's answer: a sibling of r4, from r1.
    let seen = run(
        &mut ws,
        json!({"type": "regenerate", "threadId": "b", "runId": "r5"}),
    )
    .await
    .unwrap();
    assert_eq!(ids(&seen["messages"]), ["u-r1", "a-r1", "u-r4"], "{seen}");
    let head = snapshot(&gw, &t, "/v1/threads/b").await;
    assert_eq!(ids(&head["messages"]), ["u-r1", "a-r1", "u-r4", "a-r5"]);

    // Edit r2's question (on another branch): a sibling of r2.
    let seen = run(
        &mut ws,
        json!({"type": "edit", "threadId": "b", "runId": "r6", "messageId": "u-r2",
               "message": {"role": "user", "content": "two, edited"}}),
    )
    .await
    .unwrap();
    assert_eq!(ids(&seen["messages"]), ["u-r1", "a-r1", "u-r2"], "{seen}");
    assert_eq!(seen["messages"][2]["content"], "two, edited");
    let head = snapshot(&gw, &t, "/v1/threads/b").await;
    assert_eq!(ids(&head["messages"]), ["u-r1", "a-r1", "u-r2", "a-r6"]);
    assert_eq!(head["messages"][2]["content"], "two, edited");
    // A plain run continues the head.
    let seen = run(&mut ws, turn("b", "r7", "go on")).await.unwrap();
    assert_eq!(
        ids(&seen["messages"]),
        ["u-r1", "a-r1", "u-r2", "a-r6", "u-r7"]
    );

    // The tree in one call.
    let tree = snapshot(&gw, &t, "/v1/threads/b/runs").await;
    assert_eq!(tree["headRunId"], "r7");
    let runs = tree["runs"].as_array().unwrap();
    let of = |id: &str| runs.iter().find(|r| r["runId"] == id).unwrap().clone();
    for (id, parent, kind) in [
        ("r1", Value::Null, "continue"),
        ("r2", json!("r1"), "continue"),
        ("r3", json!("r2"), "continue"),
        ("r4", json!("r1"), "branch"),
        ("r5", json!("r1"), "regenerate"),
        ("r6", json!("r1"), "edit"),
        ("r7", json!("r6"), "continue"),
    ] {
        let r = of(id);
        assert_eq!(
            (r["parentRunId"].clone(), r["kind"].as_str()),
            (parent, Some(kind)),
            "{r}"
        );
        assert_eq!(r["status"], "finished", "{r}");
        assert_eq!(r["startedBy"], "alice", "{r}");
    }
    assert_eq!(of("r5")["outputMessageIds"], json!(["a-r5"]));
    assert_eq!(of("r6")["inputMessageIds"], json!(["u-r2"]));

    // Bad bases get stable codes and start nothing.
    let mut nope = turn("b", "r8", "x");
    nope["parentRunId"] = "nope".into();
    assert_eq!(run(&mut ws, nope).await.unwrap_err()["code"], "not_found");
    let unknown = json!({"type": "regenerate", "threadId": "b", "runId": "r9", "messageId": "zz"});
    assert_eq!(
        run(&mut ws, unknown).await.unwrap_err()["code"],
        "not_found"
    );
    let not_user = json!({"type": "edit", "threadId": "b", "runId": "r10", "messageId": "u-r2",
                          "message": {"role": "assistant", "content": "no"}});
    assert_eq!(run(&mut ws, not_user).await.unwrap_err()["code"], "invalid");
    let missing = snapshot(&gw, &t, "/v1/threads/b?runId=nope").await;
    assert_eq!(missing["error"]["code"], "not_found", "{missing}");
}

/// The journal stays one valid linear AG-UI stream: the stock client,
/// replaying the join stream from 0 and from after any seq, ends on the
/// head's branch (the fork's snapshots restate it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stock_client_replaying_the_journal_from_any_seq_ends_on_the_head_branch() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = gateway(&py, "").await;
    let t = token(json!({"sub": "alice"}));
    let mut ws = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    for (run_id, text) in [("r1", "one"), ("r2", "two"), ("r3", "three")] {
        run(&mut ws, turn("j", run_id, text)).await.unwrap();
    }
    let mut fork = turn("j", "r4", "four from one");
    fork["parentRunId"] = "r1".into();
    run(&mut ws, fork).await.unwrap();
    // Back to the abandoned branch: the reducer holds r4's messages when
    // r5's restatement arrives, and must end in r3's order, not its own.
    let mut back = turn("j", "r5", "five from three");
    back["parentRunId"] = "r3".into();
    run(&mut ws, back).await.unwrap();
    let head = snapshot(&gw, &t, "/v1/threads/j").await;
    assert_eq!(
        ids(&head["messages"]),
        [
            "u-r1", "a-r1", "u-r2", "a-r2", "u-r3", "a-r3", "u-r5", "a-r5"
        ]
    );
    let last = head["seq"].as_u64().unwrap();
    let tree = snapshot(&gw, &t, "/v1/threads/j/runs").await;
    let fork_start = tree["runs"][3]["startedSeq"].as_u64().unwrap();
    let ends: Vec<u64> = tree["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["endedSeq"].as_u64().unwrap())
        .collect();
    // From the start, from inside the abandoned branch, at the fork, inside
    // the fork's run.
    for after in [0, 2, fork_start - 2, fork_start - 1, fork_start] {
        let runs = ends.iter().filter(|e| **e > after).count().to_string();
        let url = format!("{}?after={after}", gw.url("/v1/threads/j/events"));
        let v = node_client("joinstream.mjs", &[&url, &t, &runs]).await;
        assert_eq!(v["error"], Value::Null, "after={after}: {v}");
        if after == 0 {
            assert_eq!(
                ids(&v["messages"]),
                ids(&head["messages"]),
                "from 0 the stock reducer ends on the head's branch"
            );
            assert_eq!(v["state"], head["state"]);
        } else {
            // A client that starts fresh at after=N holds nothing before N:
            // it ends with exactly the head's messages (the stock reducer
            // keeps the order it first saw them in; a client resuming with
            // what it read up to N has the journal's order).
            let mut got = ids(&v["messages"]);
            let mut want = ids(&head["messages"]);
            got.sort();
            want.sort();
            assert_eq!(got, want, "after={after}");
            assert_eq!(v["state"], head["state"], "after={after}");
        }
    }
    assert!(last > fork_start);
}

/// A stock `@ag-ui/client` HttpAgent that names `parentRunId` (the .NET
/// client's field; a TS client sets it by subclassing) branches; one that
/// only cuts its list after a user message (CopilotKit's reload) regenerates;
/// a tool result sent back continues the head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_face_honours_parent_run_id_and_reads_a_cut_list_as_a_regenerate() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = gateway(&py, "").await;
    let t = token(json!({"sub": "alice"}));
    let post = |body: Value| {
        let url = gw.run_url("h");
        let t = t.clone();
        async move { post_run(&url, &t, &body).await }
    };
    let history_of = |body: &str| {
        sse_events(body)
            .into_iter()
            .find(|e| e["type"] == "CUSTOM" && e["name"] == "history")
            .map(|e| e["value"].clone())
            .unwrap_or_else(|| panic!("no history in {body}"))
    };
    let msg =
        |id: &str, role: &str, content: &str| json!({"id": id, "role": role, "content": content});
    let mut all = Vec::new();
    for (run_id, text) in [("r1", "one"), ("r2", "two"), ("r3", "three")] {
        all.push(msg(&format!("u-{run_id}"), "user", text));
        let mut body = input("hf", run_id, text);
        body["messages"] = Value::Array(all.clone());
        let (status, text) = post(body).await;
        assert_eq!(status, 200, "{text}");
        all.push(msg(
            &format!("a-{run_id}"),
            "assistant",
            &format!("re: {}", "x"),
        ));
    }
    // parentRunId: the client sends its whole list; the agent gets r1's.
    let mut body = input("hf", "r4", "four");
    all.push(msg("u-r4", "user", "four"));
    body["messages"] = Value::Array(all.clone());
    body["parentRunId"] = "r1".into();
    let (status, text) = post(body).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        ids(&history_of(&text)["messages"]),
        ["u-r1", "a-r1", "u-r4"]
    );
    // A cut list (the head's history up to its last question): a regenerate.
    let head = snapshot(&gw, &t, "/v1/threads/hf").await;
    let cut: Vec<Value> = head["messages"].as_array().unwrap()[..3].to_vec();
    let mut body = input("hf", "r5", "");
    body["messages"] = Value::Array(cut);
    let (status, text) = post(body).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        ids(&history_of(&text)["messages"]),
        ["u-r1", "a-r1", "u-r4"]
    );
    let head = snapshot(&gw, &t, "/v1/threads/hf").await;
    assert_eq!(ids(&head["messages"]), ["u-r1", "a-r1", "u-r4", "a-r5"]);
    let tree = snapshot(&gw, &t, "/v1/threads/hf/runs").await;
    assert_eq!(tree["runs"][4]["kind"], "regenerate", "{tree}");
    // The whole list plus a new question: a plain continuation.
    let mut list = head["messages"].as_array().unwrap().clone();
    list.push(msg("u-r6", "user", "six"));
    let mut body = input("hf", "r6", "");
    body["messages"] = Value::Array(list);
    let (status, text) = post(body).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        ids(&history_of(&text)["messages"]),
        ["u-r1", "a-r1", "u-r4", "a-r5", "u-r6"]
    );
    let tree = snapshot(&gw, &t, "/v1/threads/hf/runs").await;
    assert_eq!(tree["runs"][5]["kind"], "continue", "{tree}");
}

/// The AI SDK's own `Chat` over `DefaultChatTransport`: `regenerate()` and
/// an edit through `sendMessage({messageId})` fork the thread; the agent
/// never sees the answer it replaces; the export shows the new answer and
/// `?runId=` the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_sdk_regenerates_and_edits_without_the_replaced_answer() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = gateway(&py, "").await;
    let t = token(json!({"sub": "alice"}));
    let v = node_client_env(
        "aisdk_chat.mjs",
        &[&gw.url("/v1/agents/h/chat"), &t, "ai-b", "branch", "one"],
        &[("AI_PACKAGE", "ai")],
    )
    .await;
    assert!(v["error"].is_null() && v["errors"] == json!([]), "{v}");
    // What the agent was sent, run by run (its CUSTOM "history" reports).
    let seen: Vec<Vec<(String, String)>> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "data-custom" && p["data"]["name"] == "history")
        .map(|p| {
            p["data"]["value"]["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| {
                    (
                        m["role"].as_str().unwrap().to_owned(),
                        m["content"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .collect();
    assert_eq!(seen.len(), 4, "{v}");
    let roles_and_text = |i: usize| seen[i].clone();
    let own = |r: &str, c: &str| (r.to_owned(), c.to_owned());
    assert_eq!(
        roles_and_text(2),
        [
            own("user", "one"),
            own("assistant", "re: one"),
            own("user", "two")
        ],
        "the regenerate is sent the history before the answer it replaces"
    );
    assert_eq!(
        roles_and_text(3),
        [
            own("user", "one"),
            own("assistant", "re: one"),
            own("user", "two, edited")
        ],
        "the edit is sent the edited question, none of the answers after it"
    );
    let text = |m: &Value| -> String {
        m["parts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["type"] == "text")
            .map(|p| p["text"].as_str().unwrap())
            .collect()
    };
    let last = v["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(text(&last), "re: two, edited", "{v}");
    // The gateway's export is the head's branch; the old answers are one
    // `?runId=` away.
    let export = snapshot(&gw, &t, "/v1/threads/ai-b/messages?format=ai-sdk").await;
    let texts: Vec<String> = export["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(text)
        .collect();
    assert_eq!(texts, ["one", "re: one", "two, edited", "re: two, edited"]);
    let tree = snapshot(&gw, &t, "/v1/threads/ai-b/runs").await;
    let runs = tree["runs"].as_array().unwrap();
    let kinds: Vec<&str> = runs.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["continue", "continue", "regenerate", "edit"],
        "{tree}"
    );
    assert_eq!(runs[2]["parentRunId"], runs[0]["runId"]);
    assert_eq!(runs[3]["parentRunId"], runs[0]["runId"]);
    let old = runs[1]["runId"].as_str().unwrap();
    let at_old = snapshot(
        &gw,
        &t,
        &format!("/v1/threads/ai-b/messages?format=ai-sdk&runId={old}"),
    )
    .await;
    let texts: Vec<String> = at_old["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(text)
        .collect();
    assert_eq!(texts, ["one", "re: one", "two", "re: two"]);
}

/// A run from a base that ended with an interrupt must answer it (`conflict`
/// otherwise); a branch from elsewhere leaves those interrupts behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_from_an_interrupted_run_must_answer_its_interrupts() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = gateway(&py, "").await;
    let t = token(json!({"sub": "alice"}));
    let mut ws = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    run(&mut ws, turn("i", "r1", "one")).await.unwrap();
    // r2 asks back: the thread waits for an answer.
    ws.send(
        json!({"type": "run", "id": "r2", "agent": "h", "threadId": "i", "runId": "r2",
                   "messages": [{"id": "u-r2", "role": "user", "content": "ask me"}]}),
    )
    .await;
    ws.recv_until(|f| is_terminal_frame(f) && f["event"]["runId"] == "r2")
        .await;
    let head = snapshot(&gw, &t, "/v1/threads/i").await;
    assert_eq!(head["interrupts"][0]["id"], "int-r2", "{head}");
    let post = |body: Value| {
        let url = gw.run_url("h");
        let t = t.clone();
        async move { post_run(&url, &t, &body).await }
    };
    // From r2 without an answer: conflict.
    let mut body = input("i", "r3", "skip it");
    body["parentRunId"] = "r2".into();
    let (status, text) = post(body).await;
    assert_eq!(status, 409, "{text}");
    // From r1: allowed, r2's question is left behind on its branch.
    let mut fork = turn("i", "r4", "something else");
    fork["parentRunId"] = "r1".into();
    let seen = run(&mut ws, fork).await.unwrap();
    assert_eq!(ids(&seen["messages"]), ["u-r1", "a-r1", "u-r4"]);
    let head = snapshot(&gw, &t, "/v1/threads/i").await;
    assert_eq!(head["interrupts"], json!([]), "{head}");
    // From r2 with the answer: it proceeds, on r2's branch.
    let mut body = input("i", "r5", "");
    body["messages"] = json!([]);
    body["parentRunId"] = "r2".into();
    body["resume"] =
        json!([{"interruptId": "int-r2", "status": "resolved", "payload": {"ok": true}}]);
    let (status, text) = post(body).await;
    assert_eq!(status, 200, "{text}");
    let events = sse_events(&text);
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED", "{text}");
    let head = snapshot(&gw, &t, "/v1/threads/i").await;
    assert_eq!(ids(&head["messages"]), ["u-r1", "a-r1", "u-r2", "a-r5"]);
    assert_eq!(head["interrupts"], json!([]));
    assert_eq!(head["run"]["parentRunId"], "r2");
}

/// The last assistant text of a thread's snapshot.
async fn last_answer(gw: &Gateway, t: &str, thread: &str) -> String {
    let snap = snapshot(gw, t, &format!("/v1/threads/{thread}")).await;
    snap["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "assistant")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// Sends a run frame and waits for its end (no history report: a LangGraph agent).
async fn lg_run(ws: &mut Ws, mut frame: Value) -> Value {
    let id = frame["runId"].as_str().unwrap().to_owned();
    frame["id"] = id.clone().into();
    ws.send(frame).await;
    let frames = ws
        .recv_until(|f| {
            (f["type"] == "error" && f["id"] == id.as_str())
                || (is_terminal_frame(f) && f["event"]["runId"] == id.as_str())
        })
        .await;
    frames.last().unwrap().clone()
}

fn lg_turn(thread: &str, run: &str, text: &str) -> Value {
    json!({"type": "run", "agent": "lg", "threadId": thread, "runId": run,
           "messages": [{"id": format!("u-{run}"), "role": "user", "content": text}]})
}

/// A real LangGraph graph with a checkpointer (ag-ui-langgraph, MemorySaver)
/// keeps its own thread state, so each `branching.mode` is checked by what
/// the graph itself says it has seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateful_langgraph_agent_branches_as_its_branch_mode_says() {
    let py = PyAgent::start("langgraph_agent.py").await;
    let t = token(json!({"sub": "alice"}));
    for mode in ["same-thread", "fork-thread", "refuse"] {
        let gw = Gateway::start(&format!(
            "[[agents]]\nid = \"lg\"\nurl = \"{}\"\nbranching = {{ mode = \"{mode}\" }}\n",
            py.url("memory")
        ))
        .await;
        let thread = format!("lg-{mode}");
        let mut ws = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
        lg_run(&mut ws, lg_turn(&thread, "r1", "one")).await;
        lg_run(&mut ws, lg_turn(&thread, "r2", "two")).await;
        assert_eq!(
            last_answer(&gw, &t, &thread).await,
            "seen 2: one|two",
            "{mode}"
        );
        let mut from_first = lg_turn(&thread, "r3", "three");
        from_first["parentRunId"] = "r1".into();
        let end = lg_run(&mut ws, from_first).await;
        match mode {
            "same-thread" => {
                // A run from another run is not something the graph can do...
                assert_eq!(end["code"], "invalid", "{end}");
                // ...but a regenerate is: the graph forks its own checkpoint.
                let end = lg_run(
                    &mut ws,
                    json!({"type": "regenerate", "threadId": thread, "runId": "r4"}),
                )
                .await;
                assert_eq!(end["event"]["type"], "RUN_FINISHED", "{end}");
                assert_eq!(last_answer(&gw, &t, &thread).await, "seen 2: one|two");
                let tree = snapshot(&gw, &t, &format!("/v1/threads/{thread}/runs")).await;
                assert_eq!(tree["runs"][2]["kind"], "regenerate", "{tree}");
                assert_eq!(tree["runs"][2]["parentRunId"], "r1", "{tree}");
            }
            "fork-thread" => {
                // The branch is a fresh graph thread seeded with r1's history.
                assert_eq!(end["event"]["type"], "RUN_FINISHED", "{end}");
                assert_eq!(
                    end["event"]["threadId"],
                    thread.as_str(),
                    "mapped back: {end}"
                );
                assert_eq!(last_answer(&gw, &t, &thread).await, "seen 2: one|three");
                // Going on on that branch stays on the same graph thread.
                lg_run(&mut ws, lg_turn(&thread, "r4", "four")).await;
                assert_eq!(
                    last_answer(&gw, &t, &thread).await,
                    "seen 3: one|three|four"
                );
                // The mode for regenerating with ag-ui-langgraph: the new
                // answer's graph thread is seeded with the history before
                // the replaced answer (under `same-thread` the graph keeps
                // the replaced answer in its own checkpoint).
                let end = lg_run(
                    &mut ws,
                    json!({"type": "regenerate", "threadId": thread, "runId": "r5"}),
                )
                .await;
                assert_eq!(end["event"]["type"], "RUN_FINISHED", "{end}");
                assert_eq!(
                    last_answer(&gw, &t, &thread).await,
                    "seen 3: one|three|four"
                );
                let tree = snapshot(&gw, &t, &format!("/v1/threads/{thread}/runs")).await;
                assert_eq!(tree["runs"][4]["kind"], "regenerate", "{tree}");
                assert_eq!(tree["runs"][4]["parentRunId"], "r3", "{tree}");
            }
            _ => assert_eq!(end["code"], "invalid", "{end}"),
        }
    }
}

/// Per-thread caps from the operator's file: forks and runs past them are
/// refused `too_large`, and nothing starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forks_and_runs_past_the_threads_caps_are_too_large() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&format!(
        "[threads]\nmax_runs = 4\nmax_branches = 1\n[[agents]]\nid = \"h\"\nurl = \"{}\"\n",
        py.url("history")
    ))
    .await;
    let t = token(json!({"sub": "alice"}));
    let mut ws = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    run(&mut ws, turn("cap", "r1", "one")).await.unwrap();
    run(&mut ws, turn("cap", "r2", "two")).await.unwrap();
    let mut fork = turn("cap", "r3", "three");
    fork["parentRunId"] = "r1".into();
    run(&mut ws, fork).await.unwrap();
    let again = json!({"type": "regenerate", "threadId": "cap", "runId": "r4"});
    let refused = run(&mut ws, again).await.unwrap_err();
    assert_eq!(refused["code"], "too_large", "{refused}");
    run(&mut ws, turn("cap", "r5", "four")).await.unwrap();
    let refused = run(&mut ws, turn("cap", "r6", "five")).await.unwrap_err();
    assert_eq!(refused["code"], "too_large", "{refused}");
    let tree = snapshot(&gw, &t, "/v1/threads/cap/runs").await;
    assert_eq!(tree["runs"].as_array().unwrap().len(), 4, "{tree}");
}

/// A fork restates its base's history in a `MESSAGES_SNAPSHOT` of the new
/// run — here an `echo` run restating what `full` reasoned. Each restated
/// message is shown by the rules of the run that introduced it: a guest who
/// may not see `full`'s reasoning gets the snapshot without it, live and in
/// a replay; staff get all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_restating_another_agents_hidden_messages_hides_them_per_viewer() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("visibility.toml");
    std::fs::write(
        &policy,
        "[[rules]]\nname = \"no-reasoning-of-full\"\nkind = \"visibility\"\nagents = [\"full\"]\nroles = [\"guest\"]\nhide = [\"REASONING_*\", \"STATE_*\"]\n",
    )
    .unwrap();
    let gw = Gateway::start(&format!(
        "[policy]\npath = \"{}\"\n[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
         [[agents]]\nid = \"echo\"\nurl = \"demo:\"\n[[agents]]\nid = \"full\"\nurl = \"demo:\"\n",
        policy.display()
    ))
    .await;
    let staff_t = token(json!({"sub": "sam", "roles": ["staff"]}));
    let guest_t = token(json!({"sub": "gus", "roles": ["guest"], "threads": {"vis": ["view"]}}));
    let mut staff = Ws::connect(&gw, WsAuth::Header(&staff_t)).await.unwrap();
    let demo_turn = |agent: &str, run: &str| {
        json!({"type": "run", "id": run, "agent": agent, "threadId": "vis", "runId": run,
               "messages": [{"id": format!("u-{run}"), "role": "user", "content": "hi"}]})
    };
    let until_end =
        |run: &'static str| move |f: &Value| is_terminal_frame(f) && f["event"]["runId"] == run;
    staff.send(demo_turn("full", "r1")).await;
    staff.recv_until(until_end("r1")).await;
    staff.send(demo_turn("echo", "r2")).await;
    staff.recv_until(until_end("r2")).await;
    let mut guest = Ws::connect(&gw, WsAuth::Header(&guest_t)).await.unwrap();
    guest
        .send(json!({"type": "subscribe", "id": "s", "threadId": "vis"}))
        .await;
    guest.recv_until(|f| f["type"] == "snapshot").await;
    // echo forks from full's run.
    let mut fork = demo_turn("echo", "r3");
    fork["parentRunId"] = "r1".into();
    staff.send(fork).await;
    let snapshot_in = |frames: &[Value]| -> Vec<String> {
        let f = frames
            .iter()
            .find(|f| {
                f["event"]["type"] == "MESSAGES_SNAPSHOT" && f["event"]["messages"].is_array()
            })
            .unwrap_or_else(|| panic!("no restatement in {frames:#?}"));
        f["event"]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap().to_owned())
            .collect()
    };
    let states = |frames: &[Value]| {
        frames
            .iter()
            .filter(|f| {
                matches!(
                    f["event"]["type"].as_str(),
                    Some("STATE_SNAPSHOT" | "STATE_DELTA")
                )
            })
            .count()
    };
    let staff_frames = staff.recv_until(until_end("r3")).await;
    let staff_roles = snapshot_in(&staff_frames);
    assert!(
        states(&staff_frames) > 0,
        "staff see the state: {staff_frames:#?}"
    );
    assert!(
        staff_roles.iter().any(|r| r == "reasoning"),
        "staff see full's reasoning: {staff_roles:?}"
    );
    let guest_frames = guest.recv_until(until_end("r3")).await;
    let guest_roles = snapshot_in(&guest_frames);
    assert!(
        !guest_roles.iter().any(|r| r == "reasoning"),
        "live: {guest_roles:?}"
    );
    // The restated state is full's: hidden from the guest too.
    assert_eq!(states(&guest_frames), 0, "{guest_frames:#?}");
    assert!(guest_roles.iter().any(|r| r == "user"), "{guest_roles:?}");
    // The same from a replay of the journal.
    let mut late = Ws::connect(&gw, WsAuth::Header(&guest_t)).await.unwrap();
    late.send(json!({"type": "subscribe", "threadId": "vis", "after": 0}))
        .await;
    let replayed = late.recv_until(until_end("r3")).await;
    let fork_frames: Vec<Value> = replayed
        .into_iter()
        .skip_while(|f| f["event"]["runId"] != "r3")
        .collect();
    let late_roles = snapshot_in(&fork_frames);
    assert!(
        !late_roles.iter().any(|r| r == "reasoning"),
        "replay: {late_roles:?}"
    );
}
