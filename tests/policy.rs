//! Operator policy against the real gateway and a real upstream that tries to
//! break it (the scripted `ag-ui-protocol` agent calls whatever tool it is
//! told to, offered or not). Uses the example policies shipped in `config/`.

mod common;

use agui_gateway::policy::Policy;
use common::*;
use serde_json::{Value, json};

fn example(name: &str) -> String {
    repo().join("config").join(name).display().to_string()
}

async fn ws(gw: &Gateway, claims: Value) -> Ws {
    Ws::connect(gw, WsAuth::Header(&token(claims)))
        .await
        .expect("upgrade")
}

fn call(thread: &str, run: &str, tool: &str, args: Value) -> Value {
    json!({"type": "run", "id": run, "agent": "finance", "threadId": thread, "runId": run,
           "messages": [{"id": format!("u-{run}"), "role": "user", "content": "go"}],
           "tools": [{"name": "transfer_funds", "description": "move money"}, {"name": "delete_account", "description": "x"}],
           "forwardedProps": {"toolName": tool, "args": args, "aguiGateway": {"sub": "forged-admin"}}})
}

async fn types_of_run(c: &mut Ws) -> Vec<Value> {
    c.recv_until(is_terminal_frame)
        .await
        .into_iter()
        .filter(|f| f["type"] == "event")
        .map(|f| f["event"].clone())
        .collect()
}

#[tokio::test]
async fn shipped_example_policies_load() {
    for f in [
        "policy.toml",
        "policies/finance-agent.toml",
        "policies/multimodal-assistant.toml",
    ] {
        Policy::load(std::path::Path::new(&example(f))).unwrap_or_else(|e| panic!("{f}: {e:?}"));
    }
}

#[tokio::test]
async fn finance_policy_guards_tool_calls_at_call_time() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&format!(
        "[policy]\npath = \"{}\"\n[[agents]]\nid = \"finance\"\nurl = \"{}\"\n",
        example("policies/finance-agent.toml"),
        py.url("call-tool")
    ))
    .await;
    // A treasurer under the limit: the call goes through untouched.
    let mut t = ws(&gw, json!({"sub": "tina", "roles": ["treasurer"]})).await;
    t.send(call("f1", "r1", "transfer_funds", json!({"amount": 500})))
        .await;
    let events = types_of_run(&mut t).await;
    let args: String = events
        .iter()
        .filter(|e| e["type"] == "TOOL_CALL_ARGS")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(args, r#"{"amount": 500}"#);
    assert!(events.iter().any(|e| e["type"] == "TOOL_CALL_RESULT"));
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");

    // Over the limit: the run ends with policy_violation; the call never shows.
    t.send(call(
        "f2",
        "r2",
        "transfer_funds",
        json!({"amount": 50000, "memo": "s3cret"}),
    ))
    .await;
    let events = types_of_run(&mut t).await;
    assert!(
        !events
            .iter()
            .any(|e| e["type"].as_str().unwrap().starts_with("TOOL_CALL")),
        "{events:#?}"
    );
    let last = events.last().unwrap();
    assert_eq!(
        (last["type"].as_str(), last["code"].as_str()),
        (Some("RUN_ERROR"), Some("policy_violation"))
    );
    assert!(
        last["message"]
            .as_str()
            .unwrap()
            .contains("treasurer-transfers-under-10k")
    );
    // The denied call's arguments appear nowhere (the test's own input, in
    // RUN_STARTED, carries them only because it tells the agent what to call).
    let after_start = |evs: &[Value]| serde_json::to_string(&evs[1..]).unwrap();
    assert!(
        !after_start(&events).contains("s3cret"),
        "hidden arguments never leak"
    );
    // Nor are they in the journal: a late joiner's replay is the same.
    let mut late = ws(&gw, json!({"sub": "tina"})).await;
    late.send(json!({"type": "subscribe", "threadId": "f2", "after": 0}))
        .await;
    let replay = types_of_run(&mut late).await;
    assert_eq!(replay[0]["type"], "RUN_STARTED");
    assert!(!after_start(&replay).contains("s3cret"));

    // A clerk is refused even small transfers (and the condition is evaluated per call).
    let mut c = ws(&gw, json!({"sub": "carl", "roles": ["clerk"]})).await;
    c.send(call("f3", "r3", "transfer_funds", json!({"amount": 5})))
        .await;
    assert_eq!(
        types_of_run(&mut c).await.last().unwrap()["code"],
        "policy_violation"
    );

    // A delete the agent was not offered but called anyway: dropped, with a notice, run continues.
    c.send(call("f4", "r4", "delete_account", json!({"id": 7})))
        .await;
    let events = types_of_run(&mut c).await;
    assert!(
        !events
            .iter()
            .any(|e| e["type"].as_str().unwrap().starts_with("TOOL_CALL"))
    );
    let notice = events
        .iter()
        .find(|e| e["name"] == "agui-gateway/policy")
        .expect("notice");
    assert_eq!(notice["value"]["rule"], "no-deletes");
    assert_eq!(notice["value"]["toolName"], "delete_account");
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
}

#[tokio::test]
async fn offered_tools_are_filtered_and_identity_is_injected() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&format!(
        "[policy]\npath = \"{}\"\n[[agents]]\nid = \"finance\"\nurl = \"{}\"\n",
        example("policies/finance-agent.toml"),
        py.url("echo")
    ))
    .await;
    // Over HTTP (complete input) …
    let body = json!({"threadId": "e1", "runId": "r1", "messages": [], "context": [],
        "tools": [{"name": "transfer_funds", "description": "d"}, {"name": "delete_account", "description": "d"}],
        "forwardedProps": {"aguiGateway": {"sub": "forged-admin"}, "keep": 1}});
    let (status, text) = post_run(
        &gw.run_url("finance"),
        &token(json!({"sub": "tina", "roles": ["treasurer"], "tenant": "bank"})),
        &body,
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let seen = &sse_events(&text)[1]["value"]["input"];
    let names: Vec<_> = seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["transfer_funds"],
        "delete_* is never offered; transfer_* is decided per call"
    );
    assert_eq!(
        seen["forwardedProps"]["aguiGateway"],
        json!({"sub": "tina", "tenant": "bank", "roles": ["treasurer"]})
    );
    assert_eq!(seen["forwardedProps"]["keep"], 1);
    let headers = &sse_events(&text)[1]["value"]["identityHeaders"];
    assert_eq!(
        headers,
        &json!({"x-agui-user": "tina", "x-agui-tenant": "bank", "x-agui-roles": "treasurer"})
    );
    // … and over WebSocket (incremental input).
    let mut c = ws(&gw, json!({"sub": "carl"})).await;
    c.send(call("e2", "r2", "x", json!({}))).await;
    let events = types_of_run(&mut c).await;
    let seen = &events.iter().find(|e| e["name"] == "echo").unwrap()["value"]["input"];
    assert_eq!(seen["tools"].as_array().unwrap().len(), 1);
    assert_eq!(seen["forwardedProps"]["aguiGateway"]["sub"], "carl");
}

#[tokio::test]
async fn multimodal_policy_refuses_ssrf_and_oversize_inline_data() {
    // A body limit above the policy's 5 MB, so the policy is what refuses.
    let gw = Gateway::start_with_env(
        &format!(
            "[policy]\npath = \"{}\"\n[demo]\nenabled = true\ntoken_delay = \"1ms\"\n[[agents]]\nid = \"assistant\"\nurl = \"demo:\"\n",
            example("policies/multimodal-assistant.toml")
        ),
        &[("AGUI_GATEWAY__SERVER__MAX_BODY_BYTES", "16777216")],
    )
    .await;
    let tok = token(json!({}));
    let run = |part: Value| {
        let url = gw.run_url("assistant");
        let tok = tok.clone();
        async move {
            let body = json!({"threadId": format!("mm-{}", rand_id()), "runId": "r", "tools": [], "context": [],
                              "messages": [{"id": "u", "role": "user", "content": [{"type": "text", "text": "look"}, part]}]});
            let resp = http()
                .post(url)
                .bearer_auth(tok)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            (status, resp.text().await.unwrap())
        }
    };
    let ok = run(json!({"type": "image", "source": {"type": "url", "value": "https://cdn.example.com/cat.png", "mimeType": "image/png"}})).await;
    assert_eq!(ok.0, 200, "{}", ok.1);
    for url in [
        "http://127.0.0.1/x.png",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/x.png",
        "https://2130706433/x.png",
        "https://0x7f000001/x.png",
        // Parsers that disagree on the host: WHATWG reads cdn.example.com,
        // Python's httpx and urllib read 169.254.169.254 (issue 19).
        "https://cdn.example.com\\@169.254.169.254/x.png",
        "https://cdn.example.com@169.254.169.254/x.png",
        "https://cdn.example.com\t@169.254.169.254/x.png",
        "https://cdn.example.com%2F@169.254.169.254/x.png",
    ] {
        let (status, body) = run(json!({"type": "image", "source": {"type": "url", "value": url, "mimeType": "image/png"}})).await;
        assert_eq!(status, 403, "{url}: {body}");
        assert!(
            body.contains("images-from-our-cdn"),
            "names the rule: {body}"
        );
    }
    use base64::Engine;
    let big = base64::engine::general_purpose::STANDARD.encode(vec![0u8; 5_000_001]);
    let (status, body) = run(
        json!({"type": "image", "source": {"type": "data", "value": big, "mimeType": "image/png"}}),
    )
    .await;
    assert_eq!(status, 413, "{body}");
    let (status, _) = run(json!({"type": "document", "source": {"type": "url", "value": "https://cdn.example.com/a.pdf", "mimeType": "application/pdf"}})).await;
    assert_eq!(status, 403);
}

/// URLs that are hard to read: every one the gateway accepts is read with
/// the same host by the Python clients an agent fetches with (`urllib`,
/// `httpx`), and the one of issue 19 is refused.
#[tokio::test]
async fn every_url_the_gateway_accepts_has_the_host_python_clients_fetch() {
    let urls = [
        "https://cdn.example.com/cat.png",
        "https://CDN.example.com:8443/a?b=c@d#e",
        "https://a.example./x",
        "https://[2001:db8:0:0::1]/x",
        "https://xn--bcher-kva.example/x",
        "http://93.184.216.34/x",
        "https://cdn.example.com/p@th",
        "https://cdn.example.com\\@169.254.169.254/x",
        "https://cdn.example.com\\.169.254.169.254/x",
        "https://cdn.example.com@169.254.169.254/x",
        "https://cdn.example.com:443@169.254.169.254/x",
        "https://cdn.example.com?@169.254.169.254/x",
        "https://cdn.example.com#@169.254.169.254/x",
        "https://cdn.example.com\t@169.254.169.254/x",
        "https://cdn.example.com\n@169.254.169.254/x",
        "https://cdn.example.com%40169.254.169.254/x",
        "https://169.254.169%2e254/x",
        "https://2852039166/x",
        "https://0xa9.0xfe.0xa9.0xfe/x",
        "https://169.254.43518/x",
        "https://b\u{fc}cher.example/x",
        "https://169\u{3002}254\u{3002}169\u{3002}254/x",
        "https:cdn.example.com/x",
        "https:/cdn.example.com/x",
    ];
    // Each URL's host as urllib and httpx read it (IPs in canonical form,
    // names in ASCII), or an error.
    let script = r#"
import ipaddress, json, sys, urllib.parse, httpx
def canon(h):
    if h is None: return None
    h = h.strip("[]")
    try: return str(ipaddress.ip_address(h))
    except ValueError: return h.lower()
out = []
for u in json.load(sys.stdin):
    row = {}
    try: row["urllib"] = canon(urllib.parse.urlsplit(u).hostname)
    except Exception as e: row["urllib"] = "error: %s" % e
    try: row["httpx"] = canon(httpx.URL(u).raw_host.decode("ascii"))
    except Exception as e: row["httpx"] = "error: %s" % e
    out.append(row)
print(json.dumps(out))
"#;
    let mut child = std::process::Command::new(python())
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(&urls).unwrap().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let python: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mut accepted = 0;
    for (url, py) in urls.iter().zip(&python) {
        let Ok(ours) = agui_gateway::protocol::url_host::parse(url) else {
            continue;
        };
        accepted += 1;
        let host = ours.host_str().unwrap().trim_matches(['[', ']']);
        let host = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => ip.to_string(),
            Err(_) => host.to_ascii_lowercase(),
        };
        assert_eq!(py["urllib"], host, "{url:?}: urllib reads another host");
        assert_eq!(py["httpx"], host, "{url:?}: httpx reads another host");
    }
    assert_eq!(accepted, 7, "the plain URLs are accepted");
    // The bypass of issue 19: the Python clients go to the metadata address.
    assert_eq!(python[7]["urllib"], "169.254.169.254");
    assert_eq!(python[7]["httpx"], "169.254.169.254");
}

fn rand_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[tokio::test]
async fn cel_errors_fail_closed_and_bad_policy_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.toml");
    std::fs::write(
        &policy,
        "[[rules]]\nname = \"typo\"\nkind = \"tools\"\neffect = \"deny\"\ntools = [\"*\"]\nwhen = 'tool.args.no_such_field > 3'\n",
    )
    .unwrap();
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&format!(
        "[policy]\npath = \"{}\"\n[[agents]]\nid = \"finance\"\nurl = \"{}\"\n",
        policy.display(),
        py.url("call-tool")
    ))
    .await;
    let mut c = ws(&gw, json!({})).await;
    c.send(call("c1", "r1", "lookup", json!({"q": 1}))).await;
    let events = types_of_run(&mut c).await;
    assert!(
        !events
            .iter()
            .any(|e| e["type"].as_str().unwrap().starts_with("TOOL_CALL")),
        "an erroring condition denies"
    );
    assert_eq!(
        events
            .iter()
            .find(|e| e["name"] == "agui-gateway/policy")
            .unwrap()["value"]["rule"],
        "typo"
    );

    std::fs::write(&policy, "[[rules]]\nname = \"ok\"\nkind = \"tools\"\neffect = \"deny\"\ntools = [\"x\"]\n\n[[rules]]\nname = \"bad\"\nkind = \"tools\"\neffect = \"deny\"\ntools = [\"y\"]\nwhen = \"&& &&\"\n").unwrap();
    let cfg = dir.path().join("g.toml");
    std::fs::write(
        &cfg,
        format!("[auth]\nhs_secret = \"{SECRET}\"\n[policy]\npath = \"p.toml\"\n"),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agui-gateway"))
        .args(["--config", cfg.to_str().unwrap(), "check-config"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("p.toml:8 (rule 'bad')"), "{err}");
}

#[tokio::test]
async fn rate_limits_runs_meta_and_connections() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("rate.toml");
    std::fs::write(
        &policy,
        "[[rules]]\nname = \"two-runs-a-minute\"\nkind = \"rate\"\naction = \"run\"\nlimit = 2\n\
         [[rules]]\nname = \"one-note-a-minute\"\nkind = \"rate\"\naction = \"meta\"\nlimit = 1\n\
         [[rules]]\nname = \"two-sockets\"\nkind = \"rate\"\naction = \"connection\"\nlimit = 2\n",
    )
    .unwrap();
    let gw = Gateway::start(&format!(
        "[policy]\npath = \"{}\"\n[demo]\nenabled = true\ntoken_delay = \"1ms\"\n[[agents]]\nid = \"demo\"\nurl = \"demo:\"\n",
        policy.display()
    ))
    .await;
    let alice = token(json!({"sub": "alice"}));
    for i in 0..2 {
        let (s, _) = post_run(&gw.run_url("demo"), &alice, &json!({"threadId": format!("t{i}"), "runId": "r", "messages": [], "tools": [], "context": []})).await;
        assert_eq!(s, 200);
    }
    let resp = http()
        .post(gw.run_url("demo"))
        .bearer_auth(&alice)
        .json(&json!({"threadId": "t9", "runId": "r", "messages": [], "tools": [], "context": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);
    let retry: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("two-runs-a-minute")
    );
    // Budgets are per user.
    let (s, _) = post_run(
        &gw.run_url("demo"),
        &token(json!({"sub": "bob"})),
        &json!({"threadId": "b", "runId": "r", "messages": [], "tools": [], "context": []}),
    )
    .await;
    assert_eq!(s, 200);

    // Meta: one a minute.
    let mut a = Ws::connect(&gw, WsAuth::Header(&alice)).await.unwrap();
    a.send(json!({"type": "meta", "id": 1, "threadId": "t0", "metaType": "note", "payload": {}}))
        .await;
    assert_eq!(a.recv().await["type"], "ack");
    a.send(json!({"type": "meta", "id": 2, "threadId": "t0", "metaType": "note", "payload": {}}))
        .await;
    let e = a.recv().await;
    assert_eq!(e["code"], "rate_limited");
    assert!(e["retryAfter"].as_u64().unwrap() >= 1);

    // Connections: two at once; the third is refused before the upgrade.
    let b = Ws::connect(&gw, WsAuth::Header(&alice)).await.unwrap();
    assert_eq!(
        Ws::connect(&gw, WsAuth::Header(&alice)).await.err(),
        Some(429)
    );
    drop(b);
    // The slot comes back once the gateway sees the socket close.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match Ws::connect(&gw, WsAuth::Header(&alice)).await {
            Ok(_) => break,
            Err(429) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await
            }
            Err(s) => panic!("still refused: {s}"),
        }
    }
    drop(a);
}

/// `agui_config_reloads_total` from /metrics.
/// Reload attempts and the last one's success, of the node that has
/// reloaded least (every node watches the files on its own).
async fn reloads(gw: &Gateway) -> (u64, u64) {
    let mut least = (u64::MAX, u64::MAX);
    for m in gw.metrics_of_every_node().await {
        let read = |series: &str| {
            m.lines()
                .find_map(|l| l.strip_prefix(&format!("{series} ")))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        let count = read("agui_config_reloads_total{result=\"ok\"}")
            + read("agui_config_reloads_total{result=\"refused\"}");
        if count < least.0 {
            least = (count, read("agui_config_reload_success"));
        }
    }
    least
}

/// Waits until every node has attempted more than `n` reloads.
async fn reload_after(gw: &Gateway, n: u64) -> u64 {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (count, ok) = reloads(gw).await;
        if count > n {
            return ok;
        }
        assert!(tokio::time::Instant::now() < deadline, "no reload happened");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await; // polling /metrics
    }
}

#[tokio::test]
async fn hot_reload_applies_to_the_next_run_and_keeps_the_last_good_policy() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("live.toml");
    let deny = "[[rules]]\nname = \"no-deletes\"\nkind = \"tools\"\neffect = \"deny\"\ntools = [\"delete_*\"]\n";
    std::fs::write(&policy, deny).unwrap();
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&format!(
        "[policy]\npath = \"{}\"\n[demo]\nenabled = true\ntoken_delay = \"30ms\"\n\
         [[agents]]\nid = \"finance\"\nurl = \"{}\"\n[[agents]]\nid = \"demo\"\nurl = \"demo:\"\n",
        policy.display(),
        py.url("call-tool")
    ))
    .await;
    let mut c = ws(&gw, json!({"sub": "olga"})).await;
    let tool_calls = |events: &[Value]| {
        events
            .iter()
            .filter(|e| e["type"] == "TOOL_CALL_START")
            .count()
    };
    c.send(call("h1", "r1", "delete_account", json!({}))).await;
    assert_eq!(
        tool_calls(&types_of_run(&mut c).await),
        0,
        "denied before the reload"
    );

    // A long run is in flight while the policy changes.
    let mut long = ws(&gw, json!({"sub": "olga"})).await;
    long.send(json!({"type": "run", "agent": "demo", "threadId": "h-long", "messages": [{"id": "u", "role": "user", "content": "a long answer please"}]})).await;
    long.recv_until(|f| f["event"]["type"] == "TEXT_MESSAGE_CONTENT")
        .await;
    let (before, _) = reloads(&gw).await;
    std::fs::write(&policy, "# no rules\n").unwrap();
    assert_eq!(reload_after(&gw, before).await, 1);
    let finished = types_of_run(&mut long).await;
    assert_eq!(
        finished.last().unwrap()["outcome"]["type"],
        "success",
        "the run in flight was not dropped"
    );
    c.send(call("h2", "r2", "delete_account", json!({}))).await;
    assert_eq!(
        tool_calls(&types_of_run(&mut c).await),
        1,
        "the new rules apply to the next run"
    );

    // A broken file: refused, gauge 0, last good policy kept.
    let (before, _) = reloads(&gw).await;
    std::fs::write(
        &policy,
        "[[rules]]\nname = \"x\"\nkind = \"tools\"\nwhen = \"&& &&\"\n",
    )
    .unwrap();
    assert_eq!(reload_after(&gw, before).await, 0);
    c.send(call("h3", "r3", "delete_account", json!({}))).await;
    assert_eq!(
        tool_calls(&types_of_run(&mut c).await),
        1,
        "still the last good policy"
    );

    // SIGHUP reloads too (here: fixing the file and adding an agent route).
    std::fs::write(&policy, deny).unwrap();
    let mut cfg = std::fs::read_to_string(&gw.config_path).unwrap();
    cfg.push_str("\n[[agents]]\nid = \"finance2\"\nurl = \"demo:\"\n");
    std::fs::write(&gw.config_path, cfg).unwrap();
    let (before, _) = reloads(&gw).await;
    gw.signal("HUP");
    assert_eq!(reload_after(&gw, before).await, 1);
    c.send(call("h4", "r4", "delete_account", json!({}))).await;
    assert_eq!(tool_calls(&types_of_run(&mut c).await), 0, "denied again");
    let agents: Value = json_of(
        http()
            .get(gw.url("/v1/agents"))
            .bearer_auth(token(json!({}))),
    )
    .await;
    assert!(
        agents["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["id"] == "finance2"),
        "new route"
    );
}

#[tokio::test]
async fn a_reload_warns_about_each_changed_key_that_needs_a_restart() {
    if single_node_only("reads one process's log and reload counters") {
        return;
    }
    let gw = Gateway::start("[demo]\nenabled = true\n[[agents]]\nid = \"demo\"\nurl = \"demo:\"\n")
        .await;
    // Two keys only a restart applies (one of them a secret) and one a reload applies.
    let rotated = "rotated-secret-never-to-be-logged-0123456789";
    let text = std::fs::read_to_string(&gw.config_path).unwrap();
    assert!(text.contains("keepalive = \"1s\"") && text.contains(SECRET));
    let text = text
        .replace("keepalive = \"1s\"", "keepalive = \"2s\"")
        .replace(SECRET, rotated)
        + "\n[[agents]]\nid = \"more\"\nurl = \"demo:\"\n";
    let (before, _) = reloads(&gw).await;
    std::fs::write(&gw.config_path, text).unwrap();
    assert_eq!(reload_after(&gw, before).await, 1);
    gw.proc.expect_stderr("server.keepalive changed in").await;
    gw.proc.expect_stderr("auth.hs_secret changed in").await;
    let log = gw.proc.stderr();
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("takes effect only after a restart"))
        .collect();
    assert_eq!(warned.len(), 2, "only the restart-only keys: {warned:#?}");
    assert!(warned.iter().all(|l| l.contains("WARN")), "{warned:#?}");
    assert!(!log.contains(rotated), "a value is never logged");

    // The agent route is in force; the secret is still the running one.
    let agents: Value = json_of(
        http()
            .get(gw.url("/v1/agents"))
            .bearer_auth(token(json!({}))),
    )
    .await;
    assert!(
        agents["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["id"] == "more"),
        "{agents}"
    );
}

#[tokio::test]
async fn check_config_explain_names_the_deciding_rule() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("g.toml");
    std::fs::write(
        &cfg,
        format!(
            "[auth]\nhs_secret = \"{SECRET}\"\n[policy]\npath = \"{}\"\n",
            example("policies/finance-agent.toml")
        ),
    )
    .unwrap();
    let explain = |sample: Value| {
        let path = dir.path().join("sample.json");
        std::fs::write(&path, sample.to_string()).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_agui-gateway"))
            .args([
                "--config",
                cfg.to_str().unwrap(),
                "check-config",
                "--explain",
                path.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let clerk = explain(
        json!({"claims": {"sub": "carl", "roles": ["clerk"]}, "agent": "finance",
        "tool": {"name": "transfer_funds", "args": {"amount": 500}},
        "input": {"messages": [], "tools": [{"name": "delete_account"}, {"name": "lookup"}]}}),
    );
    assert!(clerk.contains("tool call transfer_funds: denied by rule 'treasurer-transfers-under-10k' (ends the run)"), "{clerk}");
    assert!(
        clerk.contains("offered tool delete_account: denied by rule 'no-deletes'"),
        "{clerk}"
    );
    assert!(clerk.contains("offered tool lookup: allowed"), "{clerk}");
    let treasurer = explain(
        json!({"claims": {"sub": "tina", "roles": ["treasurer"]}, "agent": "finance",
        "tool": {"name": "transfer_funds", "args": {"amount": 500}}}),
    );
    assert!(
        treasurer.contains("tool call transfer_funds: allowed"),
        "{treasurer}"
    );
}

#[tokio::test]
async fn redaction_across_deltas_reaches_no_viewer_and_no_disk() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("redact.toml");
    std::fs::write(
        &policy,
        "[[rules]]\nname = \"cards\"\nkind = \"redaction\"\npattern = '\\d{4}-\\d{4}-\\d{4}-\\d{4}'\nreplacement = \"[card]\"\nmax_match_bytes = 19\n",
    )
    .unwrap();
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&format!(
        "[policy]\npath = \"{}\"\n[[agents]]\nid = \"shop\"\nurl = \"{}\"\n",
        policy.display(),
        py.url("leak")
    ))
    .await;
    let mut c = ws(&gw, json!({"sub": "olga"})).await;
    c.send(json!({"type": "run", "agent": "shop", "threadId": "cards", "runId": "r1",
                  "messages": [{"id": "u", "role": "user", "content": "my card is 4111-1111-1111-1111"}]})).await;
    let live = types_of_run(&mut c).await;
    let text: String = live
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Your card [card] is on file.");
    let args: String = live
        .iter()
        .filter(|e| e["type"] == "TOOL_CALL_ARGS")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(args, r#"{"card": "[card]"}"#);
    let all = serde_json::to_string(&live).unwrap();
    assert!(!all.contains("4111"), "no viewer sees it: {all}");
    // Nor the journal (replay) …
    let mut late = ws(&gw, json!({"sub": "olga"})).await;
    late.send(json!({"type": "subscribe", "threadId": "cards", "after": 0}))
        .await;
    assert!(
        !serde_json::to_string(&types_of_run(&mut late).await)
            .unwrap()
            .contains("4111")
    );
    // … nor the bytes on disk.
    let stored = gw.journal_bytes();
    assert!(
        stored.windows(5).any(|w| w == b"cards"),
        "the journal holds the thread"
    );
    assert!(
        !stored.windows(4).any(|w| w == b"4111"),
        "unredacted bytes in the journal's files"
    );
}

#[tokio::test]
async fn guests_do_not_see_reasoning_live_on_replay_or_in_snapshots() {
    let gw = Gateway::start(&format!(
        "[policy]\npath = \"{}\"\n[demo]\nenabled = true\ntoken_delay = \"1ms\"\n[[agents]]\nid = \"support\"\nurl = \"demo:\"\n",
        example("policies/support-bot.toml")
    ))
    .await;
    let mut staff = ws(&gw, json!({"sub": "sam", "roles": ["staff"]})).await;
    staff.send(json!({"type": "run", "agent": "support", "threadId": "help", "runId": "r1",
                      "messages": [{"id": "u", "role": "user", "content": "hi, I am ann@example.com"}]})).await;
    assert_eq!(staff.recv().await["type"], "ack");
    let mut guest = ws(
        &gw,
        json!({"sub": "gus", "roles": ["guest"], "threads": {"help": ["view"]}}),
    )
    .await;
    guest
        .send(json!({"type": "subscribe", "threadId": "help", "after": 0}))
        .await;
    let seen_by_staff = types_of_run(&mut staff).await;
    let seen_by_guest = types_of_run(&mut guest).await;
    let reasoning = |evs: &[Value]| {
        evs.iter()
            .filter(|e| e["type"].as_str().unwrap().starts_with("REASONING"))
            .count()
    };
    assert!(reasoning(&seen_by_staff) > 0);
    assert_eq!(reasoning(&seen_by_guest), 0);
    assert_eq!(
        seen_by_guest.len(),
        seen_by_staff.len() - reasoning(&seen_by_staff),
        "everything else arrives"
    );
    let all = serde_json::to_string(&seen_by_staff).unwrap();
    assert!(
        !all.contains("ann@example.com") && all.contains("[email]"),
        "redacted for everyone"
    );
    // Snapshots follow the same rules.
    let snapshot = |claims: Value| {
        let url = gw.url("/v1/threads/help");
        async move {
            http()
                .get(url)
                .bearer_auth(token(claims))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let roles = |snap: &Value| {
        snap["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert!(
        roles(&snapshot(json!({"sub": "sam", "roles": ["staff"]})).await)
            .contains(&"reasoning".to_owned())
    );
    let guest_snap =
        snapshot(json!({"sub": "gus", "roles": ["guest"], "threads": {"help": ["view"]}})).await;
    assert!(
        !roles(&guest_snap).contains(&"reasoning".to_owned()),
        "{guest_snap}"
    );
    assert!(roles(&guest_snap).contains(&"assistant".to_owned()));
}

/// A guest may not see the reasoning of agent `full`; agent `echo`'s is
/// fine. One thread runs `echo`, then `full`: every event, message and
/// snapshot is judged by the agent of its own run — for a viewer who
/// subscribed between the runs, a late joiner, the HTTP snapshot and the
/// export, on every node (the CI runs this suite on two nodes too, where
/// the guest and the HTTP reads land on the node that did not run `full`).
#[tokio::test]
async fn visibility_follows_the_agent_of_each_events_run() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("visibility.toml");
    std::fs::write(
        &policy,
        "[[rules]]\nname = \"no-reasoning-of-full\"\nkind = \"visibility\"\nagents = [\"full\"]\nroles = [\"guest\"]\nhide = [\"REASONING_*\"]\n",
    )
    .unwrap();
    let gw = Gateway::start(&format!(
        "[policy]\npath = \"{}\"\n[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
         [[agents]]\nid = \"echo\"\nurl = \"demo:\"\n[[agents]]\nid = \"full\"\nurl = \"demo:\"\n",
        policy.display()
    ))
    .await;
    let guest_claims = json!({"sub": "gus", "roles": ["guest"], "threads": {"mix": ["view"]}});
    let staff_claims = json!({"sub": "sam", "roles": ["staff"]});
    let run = |agent: &str, run_id: &str| {
        json!({"type": "run", "agent": agent, "threadId": "mix", "runId": run_id,
               "messages": [{"id": format!("u-{run_id}"), "role": "user", "content": "hi"}]})
    };
    let reasoning = |evs: &[Value]| {
        evs.iter()
            .filter(|e| e["type"].as_str().unwrap().starts_with("REASONING"))
            .count()
    };
    let mut staff = ws(&gw, staff_claims.clone()).await;
    staff.send(run("echo", "r1")).await;
    let echo_run = types_of_run(&mut staff).await;
    let echo_reasoning = reasoning(&echo_run);
    assert!(echo_reasoning > 0, "the demo reasons: {echo_run:#?}");

    // A guest subscribes between the runs (the thread's agent is `echo` now).
    let mut between = ws(&gw, guest_claims.clone()).await;
    between
        .send(json!({"type": "subscribe", "threadId": "mix", "after": 0}))
        .await;
    let replayed = types_of_run(&mut between).await;
    assert_eq!(
        reasoning(&replayed),
        echo_reasoning,
        "echo's reasoning is visible"
    );

    staff.send(run("full", "r2")).await;
    let full_run = types_of_run(&mut staff).await;
    assert!(reasoning(&full_run) > 0);
    let live = types_of_run(&mut between).await;
    assert_eq!(live[0]["type"], "RUN_STARTED");
    assert_eq!(live[0]["runId"], "r2");
    assert_eq!(
        reasoning(&live),
        0,
        "full's reasoning reached a guest live: {live:#?}"
    );
    assert_eq!(live.len(), full_run.len() - reasoning(&full_run));

    // A late joiner replaying everything: echo's reasoning, not full's.
    let mut late = ws(&gw, guest_claims.clone()).await;
    late.send(json!({"type": "subscribe", "threadId": "mix", "after": 0}))
        .await;
    let first = types_of_run(&mut late).await;
    let second = types_of_run(&mut late).await;
    assert_eq!(reasoning(&first), echo_reasoning);
    assert_eq!(second[0]["runId"], "r2");
    assert_eq!(reasoning(&second), 0, "{second:#?}");

    // Snapshots and exports, read twice (on two nodes, once on each): the
    // guest gets echo's reasoning message only; the run is full's.
    let get = |path: &str, claims: &Value| {
        let req = http().get(gw.url(path)).bearer_auth(token(claims.clone()));
        async move { req.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let reasoning_messages = |v: &Value| {
        v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "reasoning")
            .count()
    };
    for _ in 0..2 {
        let staff_snap = get("/v1/threads/mix", &staff_claims).await;
        assert_eq!(reasoning_messages(&staff_snap), 2, "{staff_snap}");
        let snap = get("/v1/threads/mix", &guest_claims).await;
        assert_eq!(reasoning_messages(&snap), 1, "{snap}");
        assert_eq!(snap["run"]["agent"], "full", "{snap}");
        let export = get("/v1/threads/mix/messages?format=ag-ui", &guest_claims).await;
        assert_eq!(reasoning_messages(&export), 1, "{export}");
        let staff_export = get("/v1/threads/mix/messages?format=ag-ui", &staff_claims).await;
        assert_eq!(reasoning_messages(&staff_export), 2, "{staff_export}");
    }
}

#[tokio::test]
async fn event_limits_end_a_runaway_run() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("cap.toml");
    std::fs::write(
        &policy,
        "[[rules]]\nname = \"cap\"\nkind = \"limits\"\nmax_events_per_run = 100\n",
    )
    .unwrap();
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&format!(
        "[policy]\npath = \"{}\"\n[[agents]]\nid = \"flood\"\nurl = \"{}\"\n",
        policy.display(),
        py.url("flood")
    ))
    .await;
    let mut c = ws(&gw, json!({"sub": "olga"})).await;
    c.send(json!({"type": "run", "agent": "flood", "threadId": "cap", "runId": "r1"}))
        .await;
    let events = types_of_run(&mut c).await;
    let last = events.last().unwrap();
    assert_eq!(
        (last["type"].as_str(), last["code"].as_str()),
        (Some("RUN_ERROR"), Some("policy_violation"))
    );
    assert!(last["message"].as_str().unwrap().contains("100 events"));
    assert!(events.len() <= 102, "stopped at the cap: {}", events.len());
}

#[tokio::test]
async fn view_only_viewers_see_a_redacted_run_input_without_the_identity() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("input.toml");
    std::fs::write(
        &policy,
        "[identity]\nforwarded_props_key = \"aguiGateway\"\n\n\
         [[rules]]\nname = \"cards\"\nkind = \"redaction\"\npattern = '\\d{4}-\\d{4}-\\d{4}-\\d{4}'\nreplacement = \"[card]\"\nmax_match_bytes = 19\n\
         [[rules]]\nname = \"api-tokens\"\nkind = \"redaction\"\npattern = 'tok_[a-z0-9]+'\napplies_to = [\"tool_args\"]\n",
    )
    .unwrap();
    let gw = Gateway::start(&format!(
        "[policy]\npath = \"{}\"\n[demo]\nenabled = true\ntoken_delay = \"1ms\"\n[[agents]]\nid = \"demo\"\nurl = \"demo:\"\n",
        policy.display()
    ))
    .await;
    let mut owner = ws(&gw, json!({"sub": "owner-5f2c", "tenant": "acme"})).await;
    owner
        .send(json!({"type": "run", "agent": "demo", "threadId": "inp", "runId": "r1",
            "messages": [
                {"id": "u1", "role": "user", "content": "my card is 4111-1111-1111-1111"},
                {"id": "u2", "role": "user", "content": [{"type": "text", "text": "again 4111-1111-1111-1111"}]},
                {"id": "a1", "role": "assistant", "toolCalls": [{"id": "c1", "type": "function",
                    "function": {"name": "login", "arguments": "{\"token\": \"tok_9f8e7d\"}"}}]},
                {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "ok"},
                {"id": "u3", "role": "user", "content": "thanks"}
            ],
            "forwardedProps": {"keep": 1, "aguiGateway": {"sub": "forged-admin"}}}))
        .await;
    types_of_run(&mut owner).await;

    let viewer_claims = json!({"sub": "vic", "tenant": "acme", "threads": {"inp": ["view"]}});
    let mut viewer = ws(&gw, viewer_claims.clone()).await;
    viewer
        .send(json!({"type": "subscribe", "threadId": "inp", "after": 0}))
        .await;
    let seen = types_of_run(&mut viewer).await;
    let started = seen
        .iter()
        .find(|e| e["type"] == "RUN_STARTED")
        .expect("RUN_STARTED");
    let input = &started["input"];
    assert_eq!(input["messages"][0]["content"], "my card is [card]");
    assert_eq!(input["messages"][1]["content"][0]["text"], "again [card]");
    assert_eq!(
        input["messages"][2]["toolCalls"][0]["function"]["arguments"], r#"{"token": "[redacted]"}"#,
        "tool-call arguments in the input, by a tool_args rule"
    );
    let text = started.to_string();
    assert!(
        !text.contains("4111") && !text.contains("tok_"),
        "redacted: {text}"
    );
    // The injected identity never reaches the journal; who started the run
    // is named by its subject only, in the gateway's lineage stamp (as a
    // meta event names its poster).
    let input_text = input.to_string();
    assert!(
        !text.contains("aguiGateway")
            && !text.contains("forged")
            && !input_text.contains("owner-5f2c"),
        "no identity in the journaled input: {text}"
    );
    assert_eq!(started["agui-gateway"]["by"], "owner-5f2c", "{text}");
    // The snapshot is folded from the same journal.
    let snap = http()
        .get(gw.url("/v1/threads/inp"))
        .bearer_auth(token(viewer_claims))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(snap.contains("[card]") && !snap.contains("4111"), "{snap}");
    assert!(!snap.contains("aguiGateway"), "{snap}");
}

#[tokio::test]
async fn rate_budgets_and_connection_counts_survive_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("rate.toml");
    let rules = |runs: u32| {
        format!(
            "[[rules]]\nname = \"runs\"\nkind = \"rate\"\naction = \"run\"\nlimit = {runs}\n\
             [[rules]]\nname = \"one-socket\"\nkind = \"rate\"\naction = \"connection\"\nlimit = 1\n"
        )
    };
    std::fs::write(&policy, rules(2)).unwrap();
    let gw = Gateway::start(&format!(
        "[policy]\npath = \"{}\"\n[demo]\nenabled = true\ntoken_delay = \"1ms\"\n[[agents]]\nid = \"demo\"\nurl = \"demo:\"\n",
        policy.display()
    ))
    .await;
    let alice = token(json!({"sub": "alice"}));
    let run = |i: u32| {
        let url = gw.run_url("demo");
        let alice = alice.clone();
        async move {
            post_run(
                &url,
                &alice,
                &json!({"threadId": format!("rl{i}"), "runId": "r", "messages": [], "tools": [], "context": []}),
            )
            .await
            .0
        }
    };
    assert_eq!(run(0).await, 200);
    assert_eq!(run(1).await, 200);
    assert_eq!(run(2).await, 429, "quota spent");
    let socket = Ws::connect(&gw, WsAuth::Header(&alice)).await.unwrap();
    assert_eq!(
        Ws::connect(&gw, WsAuth::Header(&alice)).await.err(),
        Some(429)
    );

    // Rewriting the file with the same rules reloads it …
    let (before, _) = reloads(&gw).await;
    std::fs::write(&policy, rules(2)).unwrap();
    assert_eq!(reload_after(&gw, before).await, 1);
    // … and resets nothing.
    assert_eq!(run(3).await, 429, "the budget survives a reload");
    assert_eq!(
        Ws::connect(&gw, WsAuth::Header(&alice)).await.err(),
        Some(429),
        "the open socket still counts"
    );

    // A changed quota is a new budget; the connection rule is unchanged.
    let (before, _) = reloads(&gw).await;
    std::fs::write(&policy, rules(3)).unwrap();
    assert_eq!(reload_after(&gw, before).await, 1);
    assert_eq!(run(4).await, 200, "a new quota starts fresh");
    assert_eq!(
        Ws::connect(&gw, WsAuth::Header(&alice)).await.err(),
        Some(429)
    );
    drop(socket);
}

/// A fork restates its branch's history (`RUN_STARTED.input.messages`, the
/// restating `MESSAGES_SNAPSHOT` and `STATE_SNAPSHOT`): each message and the
/// state must be judged by the rules of the run that introduced or wrote
/// it, not by the fork's. Agent `full`'s reasoning and state are hidden
/// from guests, `echo`'s are not; a guest forks `full`'s run `F1` with
/// `echo`. Neither `full`'s reasoning message (its id `F1-reasoning`) nor
/// the state it wrote (the demo's `topic`) may appear in any byte the guest
/// gets: on its HTTP run, on a WebSocket live and replaying from 0, and on
/// an SSE join from 0.
#[tokio::test]
async fn a_fork_restates_no_hidden_reasoning_or_state_on_any_face() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("visibility.toml");
    std::fs::write(
        &policy,
        "[[rules]]\nname = \"private-full\"\nkind = \"visibility\"\nagents = [\"full\"]\nroles = [\"guest\"]\nhide = [\"REASONING_*\", \"STATE_*\"]\n",
    )
    .unwrap();
    let gw = Gateway::start(&format!(
        "[policy]\npath = \"{}\"\n[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
         [[agents]]\nid = \"echo\"\nurl = \"demo:\"\n[[agents]]\nid = \"full\"\nurl = \"demo:\"\n",
        policy.display()
    ))
    .await;
    let guest_claims =
        json!({"sub": "gus", "roles": ["guest"], "threads": {"fk": ["view", "run"]}});
    let staff_claims = json!({"sub": "sam", "roles": ["staff"]});
    const HIDDEN: [&str; 2] = ["F1-reasoning", "topic"];
    let leaks = |face: &str, bytes: &str| {
        for marker in HIDDEN {
            assert!(
                !bytes.contains(marker),
                "{face}: '{marker}' reached the guest: {bytes}"
            );
        }
    };
    let frames_text = |frames: &[Value]| serde_json::to_string(frames).unwrap();

    let mut staff = ws(&gw, staff_claims.clone()).await;
    staff
        .send(
            json!({"type": "run", "agent": "full", "threadId": "fk", "runId": "F1",
                      "messages": [{"id": "u-F1", "role": "user", "content": "hi"}]}),
        )
        .await;
    let full_run = types_of_run(&mut staff).await;
    assert!(
        frames_text(&full_run).contains("F1-reasoning"),
        "{full_run:#?}"
    );
    // The head moves on, so a run from F1 forks.
    staff
        .send(
            json!({"type": "run", "agent": "full", "threadId": "fk", "runId": "F2",
                      "messages": [{"id": "u-F2", "role": "user", "content": "more"}]}),
        )
        .await;
    types_of_run(&mut staff).await;

    // A guest watching the thread live (after replaying F1 and F2).
    let mut live = ws(&gw, guest_claims.clone()).await;
    live.send(json!({"type": "subscribe", "threadId": "fk", "after": 0}))
        .await;
    let mut replayed = live.recv_until(is_terminal_frame).await;
    replayed.extend(live.recv_until(is_terminal_frame).await);
    leaks("WebSocket replay of F1 and F2", &frames_text(&replayed));

    // The guest forks F1 with echo over the HTTP face.
    let t = token(guest_claims.clone());
    let (status, body) = post_run(
        &gw.run_url("echo"),
        &t,
        &json!({"threadId": "fk", "runId": "E2", "parentRunId": "F1", "tools": [], "context": [],
                "messages": [{"id": "u-E2", "role": "user", "content": "again"}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("RUN_FINISHED"), "{body}");
    leaks("HTTP requester", &body);

    let forked = live.recv_until(is_terminal_frame).await;
    assert!(
        forked.iter().any(|f| f["event"]["type"] == "RUN_STARTED"),
        "{forked:#?}"
    );
    leaks("WebSocket live", &frames_text(&forked));

    // Staff do get the restated history (the markers are there to leak).
    let mut staff_replay = ws(&gw, staff_claims).await;
    staff_replay
        .send(json!({"type": "subscribe", "threadId": "fk", "after": 0}))
        .await;
    staff_replay.recv_until(is_terminal_frame).await;
    staff_replay.recv_until(is_terminal_frame).await;
    let staff_fork = frames_text(&staff_replay.recv_until(is_terminal_frame).await);
    assert!(
        staff_fork.contains("F1-reasoning") && staff_fork.contains("topic"),
        "{staff_fork}"
    );

    // A guest replaying the whole thread.
    let mut late = ws(&gw, guest_claims.clone()).await;
    late.send(json!({"type": "subscribe", "threadId": "fk", "after": 0}))
        .await;
    let mut all = Vec::new();
    for _ in 0..3 {
        all.extend(late.recv_until(is_terminal_frame).await);
    }
    assert_eq!(
        all.iter()
            .filter(|f| f["event"]["type"] == "RUN_STARTED")
            .count(),
        3
    );
    leaks("WebSocket replay from 0", &frames_text(&all));

    // An SSE join from 0, up to the fork's end.
    let mut resp = http()
        .get(gw.url("/v1/threads/fk/events?after=0"))
        .bearer_auth(&t)
        .send()
        .await
        .unwrap();
    let mut sse = String::new();
    while sse.matches("RUN_FINISHED").count() < 3 {
        let chunk = resp.chunk().await.unwrap().expect("the stream goes on");
        sse.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(sse.contains("\"runId\":\"E2\""), "{sse}");
    leaks("SSE join", &sse);
}
