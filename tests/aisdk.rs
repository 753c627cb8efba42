//! The Vercel AI SDK chat face and the message exports, against the real
//! libraries: npm `ai` 7.0.173, 6.0.325 and 5.0.277 (`AbstractChat` +
//! `DefaultChatTransport`, driven by `tests/interop/aisdk_chat.mjs`; each
//! version's `convertToModelMessages` by `tests/interop/aisdk_convert.mjs`)
//! on the chat route for the demo agent, for pydantic-ai agents (a
//! tool-calling one and one whose tool needs approval) and for a LangGraph
//! graph that calls `interrupt()`, two pydantic-ai agents handing a thread
//! over (`handoff_agents.py`), a WebSocket viewer of the same thread,
//! and PyPI `agentscope` 2.0.11 loading the AgentScope export.

mod common;

use common::*;
use serde_json::{Value, json};
use std::process::Stdio;
use tokio::io::AsyncWriteExt;

const DEMO: &str = "[demo]\nenabled = true\ntoken_delay = \"1ms\"\n[[agents]]\nid = \"demo\"\nurl = \"demo:\"\nroles = [\"*\"]\n";

fn chat_url(gw: &Gateway, agent: &str) -> String {
    gw.url(&format!("/v1/agents/{agent}/chat"))
}

/// The `ai` 7 client, saying so (it gets tool approval requests).
const AI7: &[(&str, &str)] = &[("AI_PACKAGE", "ai"), ("AI_SDK_VERSION", "7")];
/// The `ai` 6 client, saying so.
const AI6: &[(&str, &str)] = &[("AI_PACKAGE", "ai6"), ("AI_SDK_VERSION", "6")];
/// The `ai` 5 client, as an app sets it up: nothing says which version.
const AI5: &[(&str, &str)] = &[("AI_PACKAGE", "ai5")];

/// Runs the AI SDK 7 client script; returns what the chat ended with.
async fn ai_chat(
    gw: &Gateway,
    agent: &str,
    claims: Value,
    chat: &str,
    scenario: &str,
    text: &str,
) -> Value {
    ai_chat_with(AI7, gw, agent, claims, chat, scenario, text).await
}

/// [`ai_chat`] with the client `version` (package and header) given.
async fn ai_chat_with(
    version: &[(&str, &str)],
    gw: &Gateway,
    agent: &str,
    claims: Value,
    chat: &str,
    scenario: &str,
    text: &str,
) -> Value {
    let v = node_client_env(
        "aisdk_chat.mjs",
        &[&chat_url(gw, agent), &token(claims), chat, scenario, text],
        version,
    )
    .await;
    assert!(
        v["error"].is_null() && v["errors"] == json!([]),
        "chat failed: {v}"
    );
    assert_eq!(v["status"], "ready", "{v}");
    v
}

/// The assistant message the chat built (the last message).
fn answer(v: &Value) -> &Value {
    let m = v["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(m["role"], "assistant", "{v}");
    m
}

fn part_types(m: &Value) -> Vec<String> {
    m["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["type"].as_str().unwrap().to_owned())
        .collect()
}

fn texts(m: &Value) -> String {
    m["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "text")
        .map(|p| p["text"].as_str().unwrap())
        .collect::<Vec<_>>()
        .join("|")
}

/// The `tool-<name>` part of the chat's answer, which must have its output.
fn answered_tool<'a>(v: &'a Value, name: &str) -> &'a Value {
    let m = answer(v);
    let p = tool_part(m, name);
    assert_eq!(p["state"], "output-available", "{m}");
    p
}

fn tool_part<'a>(m: &'a Value, name: &str) -> &'a Value {
    m["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == format!("tool-{name}"))
        .unwrap_or_else(|| panic!("no tool-{name} part: {m}"))
}

async fn export(gw: &Gateway, claims: Value, thread: &str, format: &str) -> (u16, Value) {
    let resp = http()
        .get(gw.url(&format!("/v1/threads/{thread}/messages?format={format}")))
        .bearer_auth(token(claims))
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

/// The parts both the live chat and the export hold (steps, text,
/// reasoning, tool parts' call/state/input/output), to compare them.
fn comparable(m: &Value) -> Vec<Value> {
    m["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| {
            let t = p["type"].as_str().unwrap();
            if t == "step-start" {
                Some(json!({"type": t}))
            } else if t == "text" || t == "reasoning" {
                Some(json!({"type": t, "text": p["text"]}))
            } else if t.starts_with("tool-") {
                Some(
                    json!({"type": t, "toolCallId": p["toolCallId"], "state": p["state"],
                    "input": p["input"], "output": p["output"]}),
                )
            } else {
                None
            }
        })
        .collect()
}

#[tokio::test]
async fn demo_agent_through_the_ai_sdk_chat_with_approval_and_a_websocket_viewer() {
    let gw = Gateway::start(DEMO).await;
    let olga = json!({"sub": "olga"});
    // A plain turn: reasoning, a tool call with its result, state, text.
    let v = ai_chat(&gw, "demo", olga.clone(), "chat-1", "send", "hello there").await;
    let m = answer(&v);
    assert_eq!(
        part_types(m),
        [
            "step-start",
            "data-state",
            "reasoning",
            "tool-lookup",
            "step-start",
            "text"
        ],
        "{m}"
    );
    let lookup = tool_part(m, "lookup");
    assert_eq!(lookup["state"], "output-available");
    assert_eq!(lookup["input"], json!({"q": "hello there"}));
    assert_eq!(lookup["output"], "11 characters, 2 words");
    assert_eq!(
        texts(m),
        "You said \"hello there\". This is the agui-gateway demo agent: every event you see came through the gateway."
    );
    let state = m["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "data-state")
        .unwrap();
    assert_eq!(state["data"], json!({"turns": 1, "topic": "hello there"}));
    // The export holds the same conversation as the AI SDK built it.
    let (status, exported) = export(&gw, olga.clone(), "chat-1", "ai-sdk").await;
    assert_eq!(status, 200, "{exported}");
    let ui = exported["messages"].as_array().unwrap();
    assert_eq!(ui.len(), 2);
    assert_eq!(
        ui[0]["parts"], v["messages"][0]["parts"],
        "the user message"
    );
    assert_eq!(
        ui[0]["id"], v["messages"][0]["id"],
        "the client's message id is kept"
    );
    assert_eq!(ui[1]["id"], m["id"], "the answer's id is the chat's");
    assert_eq!(comparable(&ui[1]), comparable(m));

    // A WebSocket viewer of the thread sees the next runs as AG-UI events.
    let mut viewer = Ws::connect(&gw, WsAuth::Header(&token(olga.clone())))
        .await
        .unwrap();
    viewer
        .send(json!({"type": "subscribe", "threadId": "chat-1"}))
        .await;
    assert_eq!(viewer.recv().await["type"], "snapshot");

    // An approval: the interrupt is an AI SDK tool approval request; the
    // client's answer resumes the run, which continues the same message.
    let v = ai_chat(
        &gw,
        "demo",
        olga.clone(),
        "chat-1",
        "approve",
        "please transfer",
    )
    .await;
    let m = answer(&v);
    let transfer = answered_tool(&v, "transfer_funds");
    assert_eq!(transfer["output"], "transfer executed");
    assert_eq!(transfer["approval"]["approved"], true);
    assert!(
        transfer["approval"]["id"]
            .as_str()
            .unwrap()
            .starts_with("int-")
    );
    assert_eq!(
        texts(m),
        "This needs your approval first.|Done: the transfer of 500 to acct-9 went through."
    );
    let first = viewer.recv_until(is_terminal_frame).await;
    let outcome = &first.last().unwrap()["event"]["outcome"];
    assert_eq!(outcome["type"], "interrupt");
    assert_eq!(outcome["interrupts"][0]["id"], transfer["approval"]["id"]);
    let second = viewer.recv_until(is_terminal_frame).await;
    let kinds: Vec<&str> = second
        .iter()
        .map(|f| f["event"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds[0], "RUN_STARTED");
    assert_eq!(
        second[0]["event"]["input"]["resume"][0],
        json!({"interruptId": transfer["approval"]["id"], "status": "resolved", "payload": {"approved": true}})
    );
    assert!(kinds.contains(&"TOOL_CALL_RESULT"));
    assert_eq!(
        second.last().unwrap()["event"]["outcome"]["type"],
        "success"
    );

    // Denied: the agent is told so.
    let v = ai_chat(&gw, "demo", olga.clone(), "chat-2", "deny", "transfer it").await;
    let m = answer(&v);
    assert_eq!(
        tool_part(m, "transfer_funds")["output"],
        "transfer declined by user"
    );
    assert!(texts(m).ends_with("Understood, I did not make the transfer."));
}

#[tokio::test]
async fn pydantic_ai_agents_through_the_ai_sdk_chat() {
    let (_py, gw) = agent_behind_gateway("pydantic_agent.py", "agent", "pyd", "").await;
    let v = ai_chat(&gw, "pyd", json!({}), "py-1", "send", "what is life?").await;
    let m = answer(&v);
    let lookup = tool_part(m, "lookup");
    assert_eq!(
        (&lookup["state"], &lookup["input"], &lookup["output"]),
        (
            &json!("output-available"),
            &json!({"q": "life"}),
            &json!("42")
        )
    );
    assert_eq!(texts(m), "The answer is 42.");
    let (_, exported) = export(&gw, json!({}), "py-1", "ai-sdk").await;
    assert_eq!(comparable(&exported["messages"][1]), comparable(m));

    let (_py2, gw2) = agent_behind_gateway("pydantic_approval_agent.py", "agent", "bank", "").await;
    // Approved with `ai` 7's approval response, and `ai` 5's tool output.
    for (version, chat) in [(AI7, "pay-7"), (AI5, "pay-5")] {
        let v = ai_chat_with(
            version,
            &gw2,
            "bank",
            json!({}),
            chat,
            "approve",
            "pay acct-9",
        )
        .await;
        assert_eq!(
            answered_tool(&v, "transfer")["output"],
            "sent 500 to acct-9"
        );
        assert_eq!(texts(answer(&v)), "Transfer result: sent 500 to acct-9");
    }
}

/// A LangGraph `interrupt()` is not on a tool call: the chat gets it as a
/// `data-interrupt` part, and the client's answer in the body's `resume`
/// (docs/ai-sdk.md) resumes the graph through LangGraph's own channel.
#[tokio::test]
async fn a_langgraph_interrupt_through_the_ai_sdk_chat_is_answered_and_resumes_the_graph() {
    let (mut py, gw) = agent_behind_gateway("langgraph_agent.py", "agent", "lg", "").await;
    let alice = json!({});
    let v = ai_chat(&gw, "lg", alice.clone(), "mail-1", "answer", "email bob").await;
    // The interrupt as the chat saw it: one data part, the canonical interrupt.
    let asked: Vec<&Value> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "data-interrupt")
        .collect();
    assert_eq!(asked.len(), 1, "{v}");
    assert_eq!(asked[0]["data"]["reason"], "confirmation");
    assert_eq!(asked[0]["data"]["message"], "Send the email to a@b.com?");
    let interrupt_id = asked[0]["id"].as_str().unwrap().to_owned();
    assert!(interrupt_id.starts_with("lg-aisdk-"), "{interrupt_id}");
    // The graph's nodes return whole messages (MESSAGES_SNAPSHOT, no text
    // events): each reaches the chat once, in the one assistant message the
    // answer continued.
    assert_eq!(v["messages"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(
        texts(answer(&v)),
        "I will send the email once you approve.|Sent.",
        "{v}"
    );

    // The graph got the answer on LangGraph's resume channel.
    py.proc.expect_line("forwarded ").await; // the first run's
    let resumed: Value =
        serde_json::from_str(&py.proc.expect_line("forwarded ").await["forwarded ".len()..])
            .unwrap();
    assert_eq!(resumed["command"]["resume"], json!({"approved": true}));

    // A WebSocket viewer joining from the start sees both runs as AG-UI
    // events: the interrupt, then the resume carrying the chat's answer,
    // finishing with no new pause.
    let mut viewer = Ws::connect(&gw, WsAuth::Header(&token(alice.clone())))
        .await
        .unwrap();
    viewer
        .send(json!({"type": "subscribe", "threadId": "mail-1", "after": 0}))
        .await;
    let first = viewer.recv_until(is_terminal_frame).await;
    let outcome = &first.last().unwrap()["event"]["outcome"];
    assert_eq!(outcome["type"], "interrupt", "{first:#?}");
    assert_eq!(outcome["interrupts"][0]["id"], interrupt_id.as_str());
    let second = viewer.recv_until(is_terminal_frame).await;
    assert_eq!(
        second[0]["event"]["input"]["resume"][0],
        json!({"interruptId": interrupt_id, "status": "resolved", "payload": {"approved": true}})
    );
    let finished = &second.last().unwrap()["event"];
    assert_eq!(finished["type"], "RUN_FINISHED", "{second:#?}");
    assert_ne!(finished["outcome"]["type"], "interrupt");

    // The graph's answer after the pause is in the thread, in every export.
    let (status, exported) = export(&gw, alice.clone(), "mail-1", "ai-sdk").await;
    assert_eq!(status, 200, "{exported}");
    let said: Vec<String> = exported["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(texts)
        .collect();
    assert!(said.iter().any(|t| t.contains("Sent.")), "{exported}");
    let (status, agentscope) = export(&gw, alice, "mail-1", "agentscope").await;
    assert_eq!(status, 200);
    let loaded = agentscope_load(&agentscope).await;
    assert!(loaded["error"].is_null(), "agentscope refused it: {loaded}");
    let texts: Vec<&str> = loaded["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .filter_map(|m| m["text"].as_str())
        .collect();
    assert!(texts.iter().any(|t| t.contains("Sent.")), "{loaded}");
}

#[tokio::test]
async fn reconnect_replays_the_active_run_and_is_204_otherwise() {
    // Slow enough that the run is still going when the second client (a
    // Node process, slow to start on a loaded machine) reconnects.
    let gw = Gateway::start(
        "[demo]\nenabled = true\ntoken_delay = \"250ms\"\n[[agents]]\nid = \"demo\"\nurl = \"demo:\"\nroles = [\"*\"]\n",
    )
    .await;
    let t = token(json!({"sub": "olga"}));
    let stream_url = gw.url("/v1/agents/demo/chat/slow-1/stream");
    let get = |url: String| {
        let t = t.clone();
        async move { http().get(url).bearer_auth(t).send().await.unwrap() }
    };
    assert_eq!(
        get(stream_url.clone()).await.status().as_u16(),
        204,
        "no such thread yet"
    );
    let body = json!({"id": "slow-1", "trigger": "submit-message",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "a slow question"}]}]});
    let started = http()
        .post(chat_url(&gw, "demo"))
        .bearer_auth(&t)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(started.status().as_u16(), 200);
    assert_eq!(started.headers()["x-vercel-ai-ui-message-stream"], "v1");
    assert_eq!(started.headers()["content-type"], "text/event-stream");
    // A second client reconnects mid-run with the AI SDK's resumeStream().
    let v = ai_chat(
        &gw,
        "demo",
        json!({"sub": "olga"}),
        "slow-1",
        "reconnect",
        "",
    )
    .await;
    let replayed = answer(&v);
    let original = started.text().await.unwrap();
    assert!(original.ends_with("data: [DONE]\n\n"), "{original}");
    let chunks: Vec<Value> = sse_data(&original)
        .iter()
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(chunks[0]["type"], "start");
    assert_eq!(
        chunks.last().unwrap(),
        &json!({"type": "finish", "finishReason": "stop"})
    );
    assert!(
        texts(replayed).starts_with("You said \"a slow question\""),
        "{replayed}"
    );
    assert_eq!(
        part_types(replayed),
        [
            "step-start",
            "data-state",
            "reasoning",
            "tool-lookup",
            "step-start",
            "text"
        ]
    );
    assert_eq!(replayed["id"], "u1-answer", "named as the export names it");
    assert_eq!(
        get(stream_url).await.status().as_u16(),
        204,
        "the run is over"
    );
}

async fn post_chat(gw: &Gateway, agent: &str, claims: Value, body: &str) -> (u16, Value) {
    let resp = http()
        .post(chat_url(gw, agent))
        .bearer_auth(token(claims))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    (
        resp.status().as_u16(),
        resp.json().await.unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn bad_chat_requests_get_json_errors_with_stable_codes() {
    let gw = Gateway::start(&format!(
        "{DEMO}[[agents]]\nid = \"staff-only\"\nurl = \"demo:\"\nroles = [\"staff\"]\n"
    ))
    .await;
    let ok = r#"{"id":"t1","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"hi"}]}]}"#;
    let cases = [
        ("demo", json!({}), "{not json", 400, "invalid"),
        ("demo", json!({}), r#"{"id":"t1"}"#, 400, "invalid"),
        (
            "demo",
            json!({}),
            r#"{"id":"t1","messages":[]}"#,
            400,
            "invalid",
        ),
        (
            "demo",
            json!({}),
            r#"{"id":"bad/id","messages":[{"id":"u","role":"user","parts":[{"type":"text","text":"x"}]}]}"#,
            400,
            "invalid",
        ),
        (
            "demo",
            json!({}),
            r#"{"id":"t1","messages":[{"id":"u","role":"user","parts":[]}]}"#,
            400,
            "invalid",
        ),
        (
            "demo",
            json!({}),
            r#"{"id":"t1","trigger":"nope","messages":[{"id":"u","role":"user","parts":[{"type":"text","text":"x"}]}]}"#,
            400,
            "invalid",
        ),
        ("nope", json!({}), ok, 404, "not_found"),
        ("staff-only", json!({}), ok, 403, "forbidden"),
    ];
    for (agent, claims, body, status, code) in cases {
        let (s, v) = post_chat(&gw, agent, claims, body).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}: {v}"
        );
    }
    // Someone else's thread: invisible (not_found); visible but no run: forbidden.
    let (s, _) = post_chat(
        &gw,
        "demo",
        json!({"sub": "olga"}),
        &ok.replace("t1", "owned"),
    )
    .await;
    assert_eq!(s, 200);
    let (s, v) = post_chat(
        &gw,
        "demo",
        json!({"sub": "mal"}),
        &ok.replace("t1", "owned"),
    )
    .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{v}"
    );
    let viewer = json!({"sub": "vic", "threads": {"owned": ["view"]}});
    let (s, v) = post_chat(&gw, "demo", viewer.clone(), &ok.replace("t1", "owned")).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "{v}"
    );
    // Exports: unknown format, invisible thread.
    let (s, v) = export(&gw, viewer.clone(), "owned", "markdown").await;
    assert_eq!((s, v["error"]["code"].as_str()), (400, Some("invalid")));
    let (s, v) = export(&gw, json!({"sub": "mal"}), "owned", "ag-ui").await;
    assert_eq!((s, v["error"]["code"].as_str()), (404, Some("not_found")));
    let (s, v) = export(&gw, viewer, "owned", "ag-ui").await;
    assert_eq!(s, 200);
    assert_eq!(
        v["messages"][0],
        json!({"id": "u1", "role": "user", "content": "hi"})
    );
}

/// Loads an AgentScope export with the real `agentscope` package.
async fn agentscope_load(exported: &Value) -> Value {
    let mut child = tokio::process::Command::new(python())
        .arg(repo().join("tests/agents/agentscope_load.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(exported.to_string().as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("agentscope loader timed out")
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn exports_follow_policy_and_agentscope_loads_them() {
    let policy = repo().join("config/policies/support-bot.toml");
    let gw = Gateway::start(&format!(
        "[policy]\npath = \"{}\"\n[demo]\nenabled = true\ntoken_delay = \"1ms\"\n[[agents]]\nid = \"support\"\nurl = \"demo:\"\n",
        policy.display()
    ))
    .await;
    let staff = json!({"sub": "sam", "roles": ["staff"]});
    ai_chat(
        &gw,
        "support",
        staff.clone(),
        "help",
        "send",
        "hi, I am ann@example.com",
    )
    .await;
    ai_chat(
        &gw,
        "support",
        staff.clone(),
        "help",
        "send",
        "transfer please",
    )
    .await;
    let guest = json!({"sub": "gus", "roles": ["guest"], "threads": {"help": ["view"]}});

    // AG-UI: the fold, redacted; a guest sees no reasoning.
    let (_, mine) = export(&gw, staff.clone(), "help", "ag-ui").await;
    let (_, theirs) = export(&gw, guest.clone(), "help", "ag-ui").await;
    let roles = |v: &Value| -> Vec<String> {
        v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(roles(&mine).contains(&"reasoning".into()));
    assert!(!roles(&theirs).contains(&"reasoning".into()), "{theirs}");
    assert!(!mine.to_string().contains("ann@example.com"), "redacted");

    // AI SDK: no reasoning parts for the guest; the pending approval shows.
    let (_, ui) = export(&gw, guest.clone(), "help", "ai-sdk").await;
    let all = ui.to_string();
    assert!(!all.contains("\"reasoning\""), "{ui}");
    let last = ui["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(
        tool_part(last, "transfer_funds")["state"],
        "approval-requested"
    );

    // AgentScope: the real package validates every Msg, roles respected.
    for who in [staff, guest] {
        let (_, exported) = export(&gw, who.clone(), "help", "agentscope").await;
        let loaded = agentscope_load(&exported).await;
        assert!(loaded["error"].is_null(), "agentscope refused it: {loaded}");
        let msgs = loaded["messages"].as_array().unwrap();
        let summary: Vec<(String, Vec<String>)> = msgs
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap().to_owned(),
                    m["blocks"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|b| b.as_str().unwrap().to_owned())
                        .collect(),
                )
            })
            .collect();
        let thinking = if who["sub"] == "sam" {
            vec!["thinking"]
        } else {
            vec![]
        };
        let assistant = |rest: &[&str]| -> Vec<String> {
            thinking.iter().chain(rest).map(|s| s.to_string()).collect()
        };
        assert_eq!(
            summary,
            vec![
                ("user".into(), vec!["text".into()]),
                (
                    "assistant".into(),
                    assistant(&["tool_call", "tool_result", "text"])
                ),
                ("user".into(), vec!["text".into()]),
                ("assistant".into(), assistant(&["text", "tool_call"])),
            ],
            "{loaded}"
        );
        assert_eq!(msgs[1]["name"], "support");
        assert_eq!(
            msgs[3]["dump"]["content"]
                .as_array()
                .unwrap()
                .last()
                .unwrap()["state"],
            "asking"
        );
    }
}

/// Tool approvals with every major version of the AI SDK: `ai` 5 knows no
/// approval chunk (one would send the whole chat to error), so by default
/// an interrupt is a `data-interrupt` part that names the tool call, and
/// the app answers it the `ai` 5 way, with a tool output; a client that
/// says it runs 6 or later also gets the SDK's own approval request.
#[tokio::test]
async fn tool_approvals_work_with_ai_sdk_5_6_and_7() {
    let gw = Gateway::start(DEMO).await;
    let olga = json!({"sub": "olga"});
    let ai7_unsaid: &[(&str, &str)] = &[("AI_PACKAGE", "ai")];
    // A plain turn with a tool call: `ai` 5's `sendAutomaticallyWhen:
    // lastAssistantMessageIsCompleteWithToolCalls` must not send it back
    // (the answer after the tool result is a step of its own).
    let v = ai_chat_with(AI5, &gw, "demo", olga.clone(), "plain-5", "send", "hello").await;
    assert_eq!(v["messages"].as_array().unwrap().len(), 2, "{v}");
    for (n, (version, native)) in [(AI5, false), (AI6, true), (AI7, true), (ai7_unsaid, false)]
        .into_iter()
        .enumerate()
    {
        let chat = format!("pay-{n}");
        let v = ai_chat_with(
            version,
            &gw,
            "demo",
            olga.clone(),
            &chat,
            "approve",
            "please transfer",
        )
        .await;
        let m = answer(&v);
        let transfer = answered_tool(&v, "transfer_funds");
        assert_eq!(transfer["output"], "transfer executed", "{version:?}");
        // Every version learnt the interrupt, with its id and tool call.
        let asked: Vec<&Value> = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["type"] == "data-interrupt")
            .collect();
        assert_eq!(asked.len(), 1, "{version:?}: {v}");
        assert_eq!(asked[0]["data"]["toolCallId"], transfer["toolCallId"]);
        let interrupt = asked[0]["id"].as_str().unwrap();
        assert!(interrupt.starts_with("int-"), "{interrupt}");
        if native {
            assert_eq!(transfer["approval"]["id"], interrupt, "{version:?}");
            assert_eq!(transfer["approval"]["approved"], true);
        } else {
            assert!(transfer.get("approval").is_none(), "{version:?}: {m}");
        }
        assert!(
            texts(m).starts_with("This needs your approval first.|Done: the transfer"),
            "{version:?}: {m}"
        );
        // The resume the agent got carries the answer.
        let (_, exported) = export(&gw, olga.clone(), &chat, "ag-ui").await;
        let said = exported.to_string();
        assert!(said.contains("transfer executed"), "{exported}");
    }
    // Denied the `ai` 5 way: the agent is told so.
    let v = ai_chat_with(
        AI5,
        &gw,
        "demo",
        olga.clone(),
        "pay-no",
        "deny",
        "transfer it",
    )
    .await;
    let m = answer(&v);
    assert_eq!(
        tool_part(m, "transfer_funds")["output"],
        "transfer declined by user"
    );
    assert!(texts(m).ends_with("Understood, I did not make the transfer."));
    // A version that is not one.
    let resp = http()
        .post(chat_url(&gw, "demo"))
        .bearer_auth(token(olga))
        .header("x-ai-sdk-version", "latest")
        .json(&json!({"id": "v", "messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": "x"}]}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid", "{body}");
}

/// An app reloading a conversation from the `ai-sdk` export and converting
/// it with the SDK's own `convertToModelMessages` (5, 6 and 7) gets the
/// model messages in the order they happened: the tool call, its result,
/// then what the agent said about it.
#[tokio::test]
async fn an_ai_sdk_export_converts_to_model_messages_in_order_with_ai_5_6_and_7() {
    let gw = Gateway::start(DEMO).await;
    let olga = json!({"sub": "olga"});
    // The chat request as the transport sends it; the stream names the answer.
    let resp = http()
        .post(chat_url(&gw, "demo"))
        .bearer_auth(token(olga.clone()))
        .json(
            &json!({"id": "conv-1", "trigger": "submit-message", "messages": [
            {"id": "q1", "role": "user", "parts": [{"type": "text", "text": "hello there"}]}]}),
        )
        .send()
        .await
        .unwrap();
    let stream = resp.text().await.unwrap();
    let start: Value = serde_json::from_str(sse_data(&stream)[0].as_str()).unwrap();
    assert_eq!(start["type"], "start", "{stream}");
    let (_, exported) = export(&gw, olga, "conv-1", "ai-sdk").await;
    let converted = node_client("aisdk_convert.mjs", &[&exported.to_string()]).await;
    for version in ["ai5", "ai6", "ai7"] {
        let model = &converted[version];
        assert!(model.is_array(), "{version} refused the export: {model}");
        // (role, content part types) per model message.
        let shape: Vec<(String, Vec<String>)> = model
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let parts = m["content"].as_array().unwrap();
                (
                    m["role"].as_str().unwrap().to_owned(),
                    parts
                        .iter()
                        .map(|p| p["type"].as_str().unwrap().to_owned())
                        .collect(),
                )
            })
            .collect();
        let s = |role: &str, parts: &[&str]| {
            (
                role.to_owned(),
                parts.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
            )
        };
        assert_eq!(
            shape,
            [
                s("user", &["text"]),
                s("assistant", &["reasoning", "tool-call"]),
                s("tool", &["tool-result"]),
                s("assistant", &["text"]),
            ],
            "{version}: {model}"
        );
        assert!(
            model[3]["content"][0]["text"]
                .as_str()
                .unwrap()
                .starts_with("You said \"hello there\""),
            "{version}: {model}"
        );
    }
    // The answer has the same id live and in the export.
    assert_eq!(
        exported["messages"][1]["id"], start["messageId"],
        "{stream}"
    );
}

/// The handoff agents (`tests/agents/handoff_agents.py`: real pydantic-ai
/// agents; triage calls `transfer_to_billing` on "bill…", billing answers).
async fn handoff_gateway() -> (PyAgent, Gateway) {
    let py = PyAgent::start("handoff_agents.py").await;
    let gw = Gateway::start(&format!(
        "[[agents]]\nid = \"triage\"\nurl = \"{}\"\nhandoff = {{ targets = [\"billing\"] }}\n\
         [[agents]]\nid = \"billing\"\nurl = \"{}\"\ndescription = \"Answers invoice questions\"\n",
        py.url("triage"),
        py.url("billing"),
    ))
    .await;
    (py, gw)
}

/// The parts of type `t`.
fn parts_of<'a>(m: &'a Value, t: &str) -> Vec<&'a Value> {
    m["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == t)
        .collect()
}

/// One chat request whose run hands over is ONE assistant message across
/// both agents' steps, with `ai` 7 and `ai` 5: the transfer call has its
/// result, a `data-agent` part marks the switch and the message metadata
/// names the agent speaking; regenerating it replaces the whole answer (a
/// new triage run, a new handoff), never merging into the old one; the
/// export agrees with the live chat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_streams_one_ai_sdk_message_across_both_agents() {
    let (_py, gw) = handoff_gateway().await;
    for (version, chat) in [(AI7, "ho-7"), (AI5, "ho-5")] {
        let v = ai_chat_with(
            version,
            &gw,
            "triage",
            json!({}),
            chat,
            "regenerate",
            "I have a bill question",
        )
        .await;
        let mut calls = Vec::new();
        for step in v["steps"].as_array().unwrap() {
            let roles: Vec<&str> = step
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["role"].as_str().unwrap())
                .collect();
            assert_eq!(roles, ["user", "assistant"], "one message: {step:#}");
            let m = &step[1];
            let transfer = parts_of(m, "tool-transfer_to_billing");
            assert_eq!(transfer.len(), 1, "{m:#}");
            assert_eq!(
                (&transfer[0]["state"], &transfer[0]["output"]),
                (
                    &json!("output-available"),
                    &json!("Transferred to 'billing'.")
                ),
                "{m:#}"
            );
            calls.push(transfer[0]["toolCallId"].clone());
            assert_eq!(texts(m), "Billing here: your invoice is paid.", "{m:#}");
            assert_eq!(
                parts_of(m, "reasoning").len(),
                1,
                "triage's thinking: {m:#}"
            );
            let switch = parts_of(m, "data-agent");
            assert_eq!(switch.len(), 1, "{m:#}");
            assert_eq!(
                (&switch[0]["data"]["agent"], &switch[0]["data"]["from"]),
                (&json!("billing"), &json!("triage"))
            );
            assert_eq!(
                m["metadata"],
                json!({"agent": "billing", "agents": ["triage", "billing"], "startedBy": "alice"}),
                "{m:#}"
            );
            // The switch comes after triage's step, before billing's text.
            let types = part_types(m);
            let at = |t: &str| types.iter().position(|x| x == t).unwrap();
            assert!(at("tool-transfer_to_billing") < at("data-agent"));
            assert!(at("data-agent") < at("text"), "{types:?}");
            assert!(
                types.iter().filter(|t| *t == "step-start").count() >= 2,
                "{types:?}"
            );
        }
        assert_ne!(calls[0], calls[1], "regenerated: a new transfer call");
        // The export is the regenerated conversation, as the chat shows it.
        let (_, exported) = export(&gw, json!({}), chat, "ai-sdk").await;
        let msgs = exported["messages"].as_array().unwrap();
        assert_eq!(msgs.len(), 2, "{exported:#}");
        let last = v["steps"][1][1].clone();
        assert_eq!(comparable(&msgs[1]), comparable(&last));
        assert_eq!(msgs[1]["metadata"], last["metadata"]);
        assert_eq!(
            parts_of(&msgs[1], "data-agent")[0]["data"],
            json!({"agent": "billing", "from": "triage"})
        );
    }
}

/// The exports of a thread a handoff passed on: AgentScope Msgs split where
/// the agent changes, each named after it (the real `agentscope` package
/// loads them); the injected transfer tool's definition appears nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_of_a_handoff_name_each_agent() {
    let (_py, gw) = handoff_gateway().await;
    ai_chat(
        &gw,
        "triage",
        json!({}),
        "ho-x",
        "send",
        "I have a bill question",
    )
    .await;
    let (_, exported) = export(&gw, json!({}), "ho-x", "agentscope").await;
    let loaded = agentscope_load(&exported).await;
    assert!(loaded["error"].is_null(), "agentscope refused it: {loaded}");
    let summary: Vec<(String, String, Vec<String>)> = loaded["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["name"].as_str().unwrap().to_owned(),
                m["blocks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| b.as_str().unwrap().to_owned())
                    .collect(),
            )
        })
        .collect();
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        summary,
        vec![
            ("user".into(), "user".into(), s(&["text"])),
            (
                "assistant".into(),
                "triage".into(),
                s(&["thinking", "tool_call", "tool_result"])
            ),
            ("assistant".into(), "billing".into(), s(&["text"])),
        ],
        "{loaded:#}"
    );
    assert_eq!(
        loaded["messages"][2]["text"],
        "Billing here: your invoice is paid."
    );
    for format in ["ag-ui", "ai-sdk", "agentscope"] {
        let (_, v) = export(&gw, json!({}), "ho-x", format).await;
        assert!(
            !v.to_string()
                .contains("Transfer the conversation to the agent"),
            "{format}: {v}"
        );
    }
}

/// A handoff whose target never answers: the one message answers the
/// transfer call with a failure and ends with the error, then `[DONE]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_handoff_answers_the_transfer_with_an_error_in_the_ai_sdk_stream() {
    let py = PyAgent::start("handoff_agents.py").await;
    let gw = Gateway::start(&format!(
        "[[agents]]\nid = \"triage\"\nurl = \"{}\"\nhandoff = {{ targets = [\"billing\"] }}\n\
         [[agents]]\nid = \"billing\"\nurl = \"http://127.0.0.1:9/down\"\n",
        py.url("triage"),
    ))
    .await;
    let body = http()
        .post(chat_url(&gw, "triage"))
        .bearer_auth(token(json!({})))
        .json(
            &json!({"id": "ho-f", "messages": [{"id": "u1", "role": "user",
            "parts": [{"type": "text", "text": "a bill question"}]}]}),
        )
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let data: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{body}");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let of = |t: &str| -> Vec<&Value> { chunks.iter().filter(|c| c["type"] == t).collect() };
    assert_eq!(of("start").len(), 1, "{body}");
    let failed = of("tool-output-error");
    assert_eq!(failed.len(), 1, "{body}");
    assert_eq!(failed[0]["errorText"], "The transfer to 'billing' failed.");
    assert_eq!(
        failed[0]["toolCallId"],
        of("tool-input-start")[0]["toolCallId"]
    );
    assert_eq!(chunks.last().unwrap()["type"], "error", "{body}");
    assert!(of("data-agent").is_empty(), "nobody took over: {body}");
}

/// A transfer that needs approval, answered in the AI SDK chat the way each
/// version answers a tool approval (`ai` 7's approval response, `ai` 5's
/// tool output): billing's answer continues the message, the transfer call
/// gets its result, the switch is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_handoff_continues_the_ai_sdk_message() {
    let py = PyAgent::start("handoff_agents.py").await;
    let gw = Gateway::start(&format!(
        "[[agents]]\nid = \"triage\"\nurl = \"{}\"\nhandoff = {{ targets = [\"billing\"], approval = \"user\" }}\n\
         [[agents]]\nid = \"billing\"\nurl = \"{}\"\n",
        py.url("triage"),
        py.url("billing"),
    ))
    .await;
    for (version, chat) in [(AI7, "hoa-7"), (AI5, "hoa-5")] {
        let v = ai_chat_with(
            version,
            &gw,
            "triage",
            json!({}),
            chat,
            "approve",
            "a bill question",
        )
        .await;
        let messages = v["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 2, "{v:#}");
        let m = answer(&v);
        let transfer = tool_part(m, "transfer_to_billing");
        assert_eq!(transfer["state"], "output-available", "{m:#}");
        assert_eq!(texts(m), "Billing here: your invoice is paid.", "{m:#}");
        assert_eq!(m["metadata"]["agent"], "billing", "{m:#}");
        assert_eq!(
            parts_of(m, "data-agent")[0]["data"]["from"],
            "triage",
            "{m:#}"
        );
    }
}

/// Who did what, where an AI SDK app reads it: Olga asks for a transfer in
/// the chat, Ben (granted the thread) approves it. The live chat's message
/// metadata, as the real `ai` client merged it (5 and 7), says Olga started
/// the answer and Ben answered its approval; the `ai-sdk` export says the
/// same, with the answering run's id, and the AgentScope export carries it
/// in its Msg metadata (loaded by the real `agentscope`).
#[tokio::test]
async fn the_ai_sdk_stream_and_the_exports_name_who_asked_and_who_approved() {
    let gw = Gateway::start(DEMO).await;
    let olga = json!({"sub": "olga"});
    for (n, version) in [AI7, AI5].into_iter().enumerate() {
        let chat = format!("shared-pay-{n}");
        let ben = json!({"sub": "ben", "threads": {chat.as_str(): ["view", "run", "resume"]}});
        let ben_token = token(ben.clone());
        let env: Vec<(&str, &str)> = version
            .iter()
            .copied()
            .chain([("ANSWER_TOKEN", ben_token.as_str())])
            .collect();
        let v = ai_chat_with(
            &env,
            &gw,
            "demo",
            olga.clone(),
            &chat,
            "approve",
            "transfer",
        )
        .await;
        let live = &answer(&v)["metadata"];
        assert_eq!(live["startedBy"], "olga", "{version:?}: {v}");
        assert_eq!(live["answeredBy"][0]["by"], "ben", "{version:?}: {v}");
        let runs = json_of(
            http()
                .get(gw.url(&format!("/v1/threads/{chat}/runs")))
                .bearer_auth(token(olga.clone())),
        )
        .await;
        let resume = runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["kind"] == "resume")
            .unwrap_or_else(|| panic!("no resume run: {runs}"));
        let answered = json!([{"runId": resume["runId"], "by": "ben"}]);
        assert_eq!(live["answeredBy"], answered, "{version:?}: {v}");

        let (status, ui) = export(&gw, olga.clone(), &chat, "ai-sdk").await;
        assert_eq!(status, 200, "{ui}");
        let exported = ui["messages"].as_array().unwrap().last().unwrap();
        assert_eq!(exported["metadata"]["startedBy"], "olga", "{ui}");
        assert_eq!(exported["metadata"]["answeredBy"], answered, "{ui}");

        let (_, scope) = export(&gw, ben.clone(), &chat, "agentscope").await;
        let msg = scope["messages"].as_array().unwrap().last().unwrap();
        assert_eq!(msg["metadata"]["agui_started_by"], "olga", "{scope}");
        assert_eq!(msg["metadata"]["agui_answered_by"], answered, "{scope}");
        let loaded = agentscope_load(&scope).await;
        assert!(loaded["error"].is_null(), "agentscope refused it: {loaded}");
        let kept = &loaded["messages"].as_array().unwrap().last().unwrap()["dump"]["metadata"];
        assert_eq!(kept["agui_answered_by"], answered, "{loaded}");
    }
}

/// Issue 31 (attribution): Ann chats, Ben gives her answer a thumbs up; the
/// snapshot, Ann's ai-sdk export and the agentscope export say Ben posted
/// it (the summary is kept beside the fold, so a compaction keeps it too).
#[tokio::test]
async fn the_exports_and_the_snapshot_say_who_posted_each_meta_event() {
    let gw = Gateway::start(DEMO).await;
    let ann = json!({"sub": "ann"});
    let chat = "thumbs-1";
    let ben = json!({"sub": "ben", "threads": {chat: ["view", "meta"]}});
    let v = ai_chat(&gw, "demo", ann.clone(), chat, "send", "hello there").await;
    let (_, before) = export(&gw, ann.clone(), chat, "ag-ui").await;
    let answer_id = before["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "assistant")
        .unwrap_or_else(|| panic!("no answer: {before} / {v}"))["id"]
        .clone();
    thumbs_up_as(&gw, ben.clone(), chat, &answer_id).await;

    let (_, ui) = export(&gw, ann.clone(), chat, "ai-sdk").await;
    let noted: Vec<&Value> = ui["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["metadata"]["meta"].as_array())
        .flatten()
        .collect();
    assert_eq!(noted.len(), 1, "{ui}");
    assert_eq!(noted[0]["by"], "ben", "{ui}");
    assert_eq!(noted[0]["metaType"], "thumbs_up", "{ui}");

    let (_, scope) = export(&gw, ann.clone(), chat, "agentscope").await;
    let by: Vec<&Value> = scope["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["metadata"]["agui_meta"].as_array())
        .flatten()
        .map(|n| &n["by"])
        .collect();
    assert_eq!(by, [&json!("ben")], "{scope}");

    let snap = json_of(
        http()
            .get(gw.url(&format!("/v1/threads/{chat}")))
            .bearer_auth(token(ann.clone())),
    )
    .await;
    let id = answer_id.as_str().unwrap();
    assert_eq!(snap["meta"][id][0]["by"], "ben", "{snap}");
}

/// `claims` post a thumbs-up on `message` of `chat`, with a forged
/// `userId` the gateway must replace with the poster's subject.
async fn thumbs_up_as(gw: &Gateway, claims: Value, chat: &str, message: &Value) {
    let posted = http()
        .post(gw.url(&format!("/v1/threads/{chat}/meta")))
        .bearer_auth(token(claims))
        .json(&json!({"metaType": "thumbs_up", "payload": {"messageId": message, "userId": "mallory"}}))
        .send()
        .await
        .unwrap();
    let status = posted.status().as_u16();
    assert_eq!(status, 200, "{}", posted.text().await.unwrap());
}

/// A meta event posted while a chat response streams reaches it as a
/// `data-meta` part naming the poster (docs/ai-sdk.md), before its `finish`.
#[tokio::test]
async fn a_meta_event_posted_during_the_chat_reaches_its_stream_naming_the_poster() {
    // Slow enough that Ben posts while Ann's answer is still streaming.
    let gw = Gateway::start(
        "[demo]\nenabled = true\ntoken_delay = \"150ms\"\n[[agents]]\nid = \"demo\"\nurl = \"demo:\"\nroles = [\"*\"]\n",
    )
    .await;
    let chat = "live-meta-1";
    let ben = json!({"sub": "ben", "threads": {chat: ["view", "meta"]}});
    let body = json!({"id": chat, "trigger": "submit-message",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "a slow question"}]}]});
    let mut resp = http()
        .post(chat_url(&gw, "demo"))
        .bearer_auth(token(json!({"sub": "ann"})))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut text = String::new();
    // Read until the answer is being written (the run is under way).
    while !text.contains("\"text-delta\"") {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(20), resp.chunk())
            .await
            .expect("the answer starts")
            .unwrap()
            .expect("the stream is open");
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    thumbs_up_as(&gw, ben, chat, &json!("u1")).await;
    while let Some(chunk) = tokio::time::timeout(std::time::Duration::from_secs(30), resp.chunk())
        .await
        .expect("the stream ends")
        .unwrap()
    {
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let parts: Vec<Value> = sse_data(&text)
        .iter()
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let meta = parts
        .iter()
        .position(|p| p["type"] == "data-meta")
        .unwrap_or_else(|| panic!("no data-meta part: {text}"));
    assert_eq!(parts[meta]["data"]["payload"]["userId"], "ben", "{text}");
    assert_eq!(parts[meta]["data"]["payload"]["messageId"], "u1", "{text}");
    let finish = parts.iter().position(|p| p["type"] == "finish");
    assert!(
        finish.is_some_and(|f| f > meta),
        "data-meta before finish: {text}"
    );
}
