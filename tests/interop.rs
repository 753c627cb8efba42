//! Interop with the stock AG-UI packages: the npm `@ag-ui/client` `HttpAgent`
//! runs the same agent directly and through the gateway, and must see the
//! same events, fold the same messages and state, and print no warnings about
//! material it had to strip or drop that it did not also print directly.
//!
//! Upstreams: the scripted `ag-ui-protocol` agent (deterministic, so the
//! comparison is exact), replays of the captured pydantic-ai and LangGraph
//! streams in `tests/fixtures`, and a live pydantic-ai agent (ids and
//! timestamps are random per run there, so those are canonicalized first).

mod common;

use common::*;
use serde_json::{Map, Value, json};

/// What the stock client saw for one run.
#[derive(Debug)]
struct ClientView {
    events: Vec<Value>,
    messages: Value,
    state: Value,
    error: Value,
    warnings: Vec<String>,
}

async fn http_agent(url: &str, token: &str, text: &str) -> ClientView {
    let v = node_client("httpagent.mjs", &[url, token, "thread-1", "run-1", text]).await;
    ClientView {
        events: v["events"].as_array().unwrap().clone(),
        messages: v["messages"].clone(),
        state: v["state"].clone(),
        error: v["error"].clone(),
        warnings: v["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap().to_owned())
            .collect(),
    }
}

/// Runs `path` on the scripted agent directly and through a gateway.
async fn direct_and_via_gateway(agent_url: &str) -> (ClientView, ClientView) {
    let gw = Gateway::start(&format!("[[agents]]\nid = \"a\"\nurl = \"{agent_url}\"\n")).await;
    let direct = http_agent(agent_url, "", "hello").await;
    let via = http_agent(&gw.run_url("a"), &token(json!({})), "hello").await;
    (direct, via)
}

fn assert_same(direct: &ClientView, via: &ClientView) {
    assert!(
        direct.error.is_null(),
        "direct run failed: {}",
        direct.error
    );
    assert!(via.error.is_null(), "gateway run failed: {}", via.error);
    assert_eq!(direct.events.len(), via.events.len(), "event count");
    for (i, (d, v)) in direct.events.iter().zip(&via.events).enumerate() {
        assert_eq!(d, v, "event {i} differs");
    }
    assert_eq!(direct.messages, via.messages, "folded messages");
    assert_eq!(direct.state, via.state, "folded state");
    assert_eq!(direct.warnings, via.warnings, "client warnings");
}

#[tokio::test]
async fn scripted_agent_identical_with_and_without_gateway() {
    let py = PyAgent::start("scripted_agent.py").await;
    let (direct, via) = direct_and_via_gateway(&py.url("ok")).await;
    assert_same(&direct, &via);
    // The run is rich enough to mean something: chunks were expanded, text folded.
    let t = types(&via.events);
    assert!(
        t.contains(&"TOOL_CALL_ARGS".to_owned())
            && t.contains(&"REASONING_MESSAGE_CONTENT".to_owned())
    );
    assert_eq!(via.state, json!({"count": 2, "items": ["a"]}));
    let texts: Vec<_> = via
        .messages
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        texts.contains(&"Hello wörld \u{2603} \u{1F600}"),
        "{texts:?}"
    );
    assert!(texts.contains(&"chunked text"), "{texts:?}");
}

#[tokio::test]
async fn unknown_events_are_handled_by_the_client_as_without_gateway() {
    let py = PyAgent::start("scripted_agent.py").await;
    let (direct, via) = direct_and_via_gateway(&py.url("unknown-type")).await;
    assert!(
        direct.error.is_null() && via.error.is_null(),
        "{} / {}",
        direct.error,
        via.error
    );
    // The client turns legacy THINKING_* into REASONING_* with fresh random ids.
    let (mut a, mut b) = (Map::new(), Map::new());
    assert_eq!(
        canonical(&Value::Array(direct.events.clone()), &mut a),
        canonical(&Value::Array(via.events.clone()), &mut b)
    );
    assert_eq!(direct.warnings, via.warnings);
    assert!(
        via.warnings.iter().any(|w| w.contains("FUTURE_EVENT")),
        "the client itself drops the unknown type, with or without the gateway: {:?}",
        via.warnings
    );
}

#[tokio::test]
async fn captured_framework_streams_identical_through_gateway() {
    let py = PyAgent::start("scripted_agent.py").await;
    for name in [
        "pydantic-ai-tool-and-text",
        "pydantic-ai-approval-interrupt",
        "langgraph-legacy-interrupt",
        "langgraph-resumed",
    ] {
        assert!(
            fixture(&format!("{name}.sse")).exists(),
            "fixture {name} missing"
        );
        let (direct, mut via) = direct_and_via_gateway(&py.url(&format!("fixture-{name}"))).await;
        if name == "langgraph-legacy-interrupt" {
            // The one difference, by design: the requester gets the canonical
            // interrupt outcome the journal holds (the CUSTOM event stays).
            let last = via.events.last_mut().unwrap().as_object_mut().unwrap();
            let outcome = last.remove("outcome").expect("canonical outcome added");
            assert_eq!(outcome["type"], "interrupt");
            assert_eq!(outcome["interrupts"][0]["id"], "lg-r1-1");
        }
        assert_same(&direct, &via);
        assert!(!via.events.is_empty(), "{name}");
    }
}

/// Replaces ids and timestamps (random per pydantic-ai run) with stable tokens,
/// keeping which values were equal to which.
fn canonical(v: &Value, ids: &mut Map<String, Value>) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| k.as_str() != "timestamp")
                .map(|(k, v)| {
                    let v = match (k.as_str(), v) {
                        ("messageId" | "id" | "parentMessageId", Value::String(s)) => {
                            let n = ids.len();
                            ids.entry(s.clone())
                                .or_insert_with(|| json!(format!("id{n}")))
                                .clone()
                        }
                        _ => canonical(v, ids),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(|x| canonical(x, ids)).collect()),
        other => other.clone(),
    }
}

#[tokio::test]
async fn pydantic_ai_agent_equivalent_through_gateway() {
    let py = PyAgent::start("pydantic_agent.py").await;
    let (direct, via) = direct_and_via_gateway(&py.url("agent")).await;
    assert!(via.error.is_null(), "{}", via.error);
    let (mut a, mut b) = (Map::new(), Map::new());
    assert_eq!(
        canonical(&Value::Array(direct.events.clone()), &mut a),
        canonical(&Value::Array(via.events.clone()), &mut b)
    );
    assert_eq!(
        canonical(&direct.messages, &mut a),
        canonical(&via.messages, &mut b)
    );
    assert_eq!(direct.warnings, via.warnings);
    let last = via.messages.as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["content"], "The answer is 42.");
    assert!(types(&via.events).contains(&"TOOL_CALL_RESULT".to_owned()));
}

#[tokio::test]
async fn demo_agent_runs_in_the_stock_client() {
    let gw = Gateway::start("[demo]\nenabled = true\ntoken_delay = \"1ms\"\n[[agents]]\nid = \"demo\"\nurl = \"demo:\"\n").await;
    let view = http_agent(&gw.run_url("demo"), &token(json!({})), "hello gateway").await;
    assert!(view.error.is_null(), "{}", view.error);
    // The demo's runs are the gateway's own: they declare its AG-UI version
    // (1.1), and a 1.0 client says so once, as AG-UI's versioning page has
    // a consumer meeting a newer producer do. Nothing else.
    assert_eq!(
        view.warnings,
        [
            "[ag-ui] The producer speaks protocol 1.1; this client speaks 1.0. Unrecognised material will be stripped with warnings."
        ],
        "{:?}",
        view.warnings
    );
    assert_eq!(view.state["turns"], 1);
    let roles: Vec<_> = view
        .messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        roles.contains(&"tool".to_owned()) && roles.contains(&"reasoning".to_owned()),
        "{roles:?}"
    );
}

/// Events the SSE face gives, as the AG-UI protobuf encoding carries them
/// (docs/protocol.md, "Binary transport"): `null` fields omitted, `META` as
/// `CUSTOM agui-gateway/meta`, fields the schema lacks dropped (the scripted
/// agent's `vendor_hint`, the gateway's `agui-gateway` stamp on a journaled
/// `RUN_STARTED`), and `RUN_STARTED.input` decoded with its
/// empty lists present (the decoder's defaults).
fn as_proto_carries(events: &[Value]) -> Vec<Value> {
    fn strip_nulls(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k.clone(), strip_nulls(v)))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(strip_nulls).collect()),
            v => v.clone(),
        }
    }
    events
        .iter()
        .map(|e| {
            if e["type"] == "META" {
                let mut value = e.as_object().unwrap().clone();
                value.remove("type");
                json!({"type": "CUSTOM", "name": "agui-gateway/meta", "value": value})
            } else {
                let mut e = strip_nulls(e);
                e.as_object_mut().unwrap().remove("vendor_hint");
                e.as_object_mut().unwrap().remove("agui-gateway");
                if let Some(input) = e.get_mut("input").and_then(Value::as_object_mut) {
                    for list in ["tools", "context", "resume"] {
                        input.entry(list).or_insert(json!([]));
                    }
                }
                e
            }
        })
        .collect()
}

/// Reads a stream with `protoframes.mjs` (official `@ag-ui/proto` decode).
async fn frames(url: &str, token: &str, format: &str, ends: &str, body: Option<&Value>) -> Value {
    let body = body.map(Value::to_string);
    let mut args = vec![url, token, format, ends];
    if let Some(b) = &body {
        args.push(b);
    }
    let v = node_client("protoframes.mjs", &args).await;
    assert!(v["error"].is_null(), "{format} stream: {}", v["error"]);
    assert_eq!(v["status"], 200, "{v}");
    v
}

/// The binary transport: the scripted run requested with the AG-UI proto
/// `Accept`, decoded frame by frame by the official `@ag-ui/proto`, equals
/// what the SSE face gives for the same journal (after the documented
/// mapping) — on the run endpoint and on the join stream.
#[tokio::test]
async fn proto_stream_decodes_to_the_sse_events() {
    let py = PyAgent::start("scripted_agent.py").await;
    let config = format!("[[agents]]\nid = \"a\"\nurl = \"{}\"\n", py.url("ok"));
    let t = token(json!({}));
    // The same scripted run on two fresh gateways: once in proto, once in SSE.
    let gw = Gateway::start(&config).await;
    let run = frames(
        &gw.run_url("a"),
        &t,
        "proto",
        "1",
        Some(&input("p", "r1", "hello")),
    )
    .await;
    assert_eq!(run["contentType"], "application/vnd.ag-ui.event+proto");
    let other = Gateway::start(&config).await;
    let sse = frames(
        &other.run_url("a"),
        &t,
        "sse",
        "1",
        Some(&input("p", "r1", "hello")),
    )
    .await;
    assert_eq!(sse["contentType"], "text/event-stream");
    let events_url = gw.url("/v1/threads/p/events");
    let sse = sse["events"].as_array().unwrap();
    assert!(
        types(sse).contains(&"TOOL_CALL_ARGS".to_owned())
            && types(sse).contains(&"REASONING_MESSAGE_CONTENT".to_owned())
            && types(sse).contains(&"STATE_DELTA".to_owned()),
        "{:?}",
        types(sse)
    );
    let expected = as_proto_carries(sse);
    let got = run["events"].as_array().unwrap();
    assert_eq!(got.len(), expected.len(), "event count");
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(g, e, "run endpoint: event {i} differs");
    }
    // The join stream in proto, with a meta event between runs.
    let meta = http()
        .post(gw.url("/v1/threads/p/meta"))
        .bearer_auth(&t)
        .json(&json!({"metaType": "thumbs_up", "payload": {"note": "good"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(meta.status().as_u16(), 200);
    let sse = frames(&events_url, &t, "sse", "2", None).await;
    let join = frames(&events_url, &t, "proto", "2", None).await;
    assert_eq!(join["contentType"], "application/vnd.ag-ui.event+proto");
    let expected = as_proto_carries(sse["events"].as_array().unwrap());
    assert_eq!(join["events"].as_array().unwrap(), &expected, "join stream");
    assert!(
        expected
            .iter()
            .any(|e| e["name"] == "agui-gateway/meta" && e["value"]["metaType"] == "thumbs_up"),
        "{expected:#?}"
    );
}

/// The stock `HttpAgent` asking for proto (its parser follows the response's
/// content type) sees the same events, messages and state as over SSE, on
/// the run endpoint and on the join stream.
#[tokio::test]
async fn stock_client_over_proto_sees_what_it_sees_over_sse() {
    let py = PyAgent::start("scripted_agent.py").await;
    let config = format!("[[agents]]\nid = \"a\"\nurl = \"{}\"\n", py.url("ok"));
    let t = token(json!({}));
    let mut views = Vec::new();
    for accept in ["sse", "proto"] {
        let gw = Gateway::start(&config).await;
        let args = [
            gw.run_url("a"),
            t.clone(),
            "thread-1".into(),
            "run-1".into(),
            "hello".into(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = node_client_env("httpagent.mjs", &args, &[("AGUI_ACCEPT", accept)]).await;
        let url = gw.url("/v1/threads/thread-1/events");
        let join = node_client_env(
            "joinstream.mjs",
            &[&url, &t, "1"],
            &[("AGUI_ACCEPT", accept)],
        )
        .await;
        views.push((run, join));
    }
    let ((sse, sse_join), (proto, proto_join)) = (&views[0], &views[1]);
    for v in [sse, sse_join, proto, proto_join] {
        assert!(v["error"].is_null(), "{}", v["error"]);
    }
    assert_eq!(
        proto["events"],
        Value::Array(as_proto_carries(sse["events"].as_array().unwrap()))
    );
    assert_eq!(proto["messages"], sse["messages"]);
    assert_eq!(proto["state"], sse["state"]);
    // The client warns over SSE about the extension field it strips; the
    // proto encoding never carries it, so there is nothing to warn about.
    let unstripped: Vec<&Value> = sse["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| {
            !w.as_str()
                .unwrap()
                .contains("Removed unrecognised material")
        })
        .collect();
    assert_eq!(
        proto["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .collect::<Vec<_>>(),
        unstripped
    );
    // Up to the terminal event: what the client adds after `abortRun` (a
    // synthetic abort `RUN_ERROR` from its SSE reader) is not the stream's.
    let to_terminal = |v: &Value| -> Vec<Value> {
        let events = v["events"].as_array().unwrap();
        let end = events
            .iter()
            .position(|e| e["type"] == "RUN_FINISHED")
            .unwrap();
        events[..=end].to_vec()
    };
    assert_eq!(
        to_terminal(proto_join),
        as_proto_carries(&to_terminal(sse_join))
    );
    assert_eq!(proto_join["messages"], sse_join["messages"]);
    assert_eq!(proto_join["state"], sse_join["state"]);
}
