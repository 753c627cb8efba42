//! The gateway's HTTP face and CLI, against the real binary: error codes and
//! statuses, the agent list, health and metrics, the demo agent's interrupt
//! and resume, `check-config` and `token`, OpenTelemetry export.

mod common;

use common::*;
use serde_json::{Value, json};

const DEMO: &str = "[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
    [[agents]]\nid = \"demo\"\nurl = \"demo:\"\ndescription = \"the demo\"\n\
    [[agents]]\nid = \"admin-only\"\nurl = \"demo:\"\nroles = [\"admin\"]\n";

async fn error_of(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    (status, resp.json::<Value>().await.unwrap()["error"].clone())
}

#[tokio::test]
async fn demo_run_is_a_complete_verified_stream() {
    let gw = Gateway::start(DEMO).await;
    let resp = http()
        .post(gw.run_url("demo"))
        .bearer_auth(token(json!({})))
        .json(&input("t1", "r1", "hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let body = resp.text().await.unwrap();
    assert!(!body.contains('\r'), "never CRLF");
    let events = sse_events(&body);
    let t = types(&events);
    assert_eq!(t.first().unwrap(), "RUN_STARTED");
    assert_eq!(t.last().unwrap(), "RUN_FINISHED");
    for k in [
        "REASONING_MESSAGE_CONTENT",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_RESULT",
        "STATE_SNAPSHOT",
        "STATE_DELTA",
        "TEXT_MESSAGE_CONTENT",
    ] {
        assert!(t.iter().any(|x| x == k), "demo emits {k}");
    }
    let mut v = agui_gateway::protocol::verify::Verifier::new();
    for e in &events {
        v.check(&agui_gateway::protocol::Event::build(e.clone()))
            .unwrap();
    }
}

#[tokio::test]
async fn demo_interrupt_then_resume_over_http() {
    let gw = Gateway::start(DEMO).await;
    let tok = token(json!({}));
    let (_, body) = post_run(
        &gw.run_url("demo"),
        &tok,
        &input("t1", "r1", "please transfer 500 to bob"),
    )
    .await;
    let events = sse_events(&body);
    let outcome = &events.last().unwrap()["outcome"];
    assert_eq!(outcome["type"], "interrupt");
    let interrupt = &outcome["interrupts"][0];
    assert_eq!(interrupt["reason"], "tool_call");
    // It proposes what was asked for.
    assert_eq!(interrupt["metadata"], json!({"amount": 500, "to": "bob"}));
    let mut resume = input("t1", "r2", "");
    resume["messages"] = json!([]);
    resume["resume"] = json!([{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": true}}]);
    let (_, body) = post_run(&gw.run_url("demo"), &tok, &resume).await;
    let events = sse_events(&body);
    let result = events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT")
        .expect("tool result");
    assert_eq!(result["toolCallId"], interrupt["toolCallId"]);
    assert_eq!(result["content"], "transfer executed");
    let said: String = events
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(said, "Done: the transfer of 500 to bob went through.");
    assert_eq!(events.last().unwrap()["outcome"]["type"], "success");
}

/// The README's quick-start promise: an HTTP run carries the client's full
/// history. The agent gets exactly the messages (and state) the request
/// sends; the gateway adds nothing from the thread's journal, which still
/// holds both turns for its viewers.
#[tokio::test]
async fn an_http_run_carries_the_clients_history_and_nothing_from_the_journal() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&format!(
        "[[agents]]\nid = \"echo\"\nurl = \"{}\"\n",
        py.url("echo")
    ))
    .await;
    let tok = token(json!({}));
    let seen = |body: &str| -> Value {
        let events = sse_events(body);
        let echo = events.iter().find(|e| e["name"] == "echo").expect("echo");
        echo["value"]["input"].clone()
    };
    let (status, body) = post_run(&gw.run_url("echo"), &tok, &input("h1", "r1", "first")).await;
    assert_eq!(status, 200, "{body}");
    let mut second = input("h1", "r2", "second");
    second["messages"][0]["id"] = "u2".into();
    let (status, body) = post_run(&gw.run_url("echo"), &tok, &second).await;
    assert_eq!(status, 200, "{body}");
    let got = seen(&body);
    assert_eq!(
        got["messages"],
        json!([{"id": "u2", "role": "user", "content": "second"}]),
        "only what the client sent: {got:#}"
    );
    assert!(got.get("state").is_none_or(Value::is_null), "{got:#}");
    let snapshot = json_of(http().get(gw.url("/v1/threads/h1")).bearer_auth(&tok)).await;
    let users: Vec<&Value> = snapshot["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| &m["content"])
        .collect();
    assert_eq!(users, [&json!("first"), &json!("second")]);
}

#[tokio::test]
async fn agents_list_shows_only_what_the_caller_may_run() {
    let gw = Gateway::start(DEMO).await;
    let list = |tok: String| {
        let url = gw.url("/v1/agents");
        async move {
            let v: Value = json_of(http().get(url).bearer_auth(tok)).await;
            v["agents"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a["id"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(list(token(json!({}))).await, ["demo"]);
    assert_eq!(
        list(token(json!({"roles": ["admin"]}))).await,
        ["demo", "admin-only"]
    );
    let (status, err) = error_of(
        http()
            .post(gw.run_url("admin-only"))
            .bearer_auth(token(json!({})))
            .json(&input("t", "r", "x"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, err["code"].as_str().unwrap()), (403, "forbidden"));
}

#[tokio::test]
async fn errors_have_stable_codes_and_statuses() {
    let gw = Gateway::start(DEMO).await;
    let tok = token(json!({}));
    let c = http();

    let (s, e) = error_of(
        c.post(gw.run_url("demo"))
            .json(&input("t", "r", "x"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (
            s,
            e["code"].as_str().unwrap(),
            e["reason"].as_str().unwrap()
        ),
        (401, "unauthenticated", "missing_token")
    );

    let expired = token(json!({"exp": 1000}));
    let resp = c
        .post(gw.run_url("demo"))
        .bearer_auth(expired)
        .json(&input("t", "r", "x"))
        .send()
        .await
        .unwrap();
    assert!(
        resp.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer")
    );
    let (s, e) = error_of(resp).await;
    assert_eq!((s, e["reason"].as_str().unwrap()), (401, "token_expired"));

    let (s, e) = error_of(
        c.post(gw.run_url("nope"))
            .bearer_auth(&tok)
            .json(&input("t", "r", "x"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((s, e["code"].as_str().unwrap()), (404, "not_found"));

    let bad = json!({"threadId": "t", "runId": "r", "messages": [{"id": "1", "role": "user"}]});
    let (s, e) = error_of(
        c.post(gw.run_url("demo"))
            .bearer_auth(&tok)
            .json(&bad)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((s, e["code"].as_str().unwrap()), (400, "invalid"));
    assert!(
        e["message"].as_str().unwrap().contains("messages[0]"),
        "{e}"
    );

    let (s, e) = error_of(
        c.post(gw.run_url("demo"))
            .bearer_auth(&tok)
            .body("{oops")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((s, e["code"].as_str().unwrap()), (400, "invalid"));

    // An oversize body is refused from its Content-Length, before it is
    // read: a client still writing it may see the connection close (a
    // broken pipe) before it reads the answer, so this one only announces
    // the body and reads the answer.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = gw.base.trim_start_matches("http://").to_owned();
        let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let head = format!(
            "POST /v1/agents/demo/run HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {tok}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            2 * 1024 * 1024
        );
        conn.write_all(head.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&answer).contains("too_large") {
            let n = tokio::time::timeout(std::time::Duration::from_secs(10), conn.read(&mut buf))
                .await
                .expect("an answer without the body being sent")
                .unwrap();
            assert!(
                n > 0,
                "closed without an answer: {}",
                String::from_utf8_lossy(&answer)
            );
            answer.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    }

    // A fresh client: after an early 413 the server closes that connection,
    // and a pooled client could try to reuse it.
    let (s, e) = error_of(http().get(gw.url("/v1/nothing")).send().await.unwrap()).await;
    assert_eq!((s, e["code"].as_str().unwrap()), (404, "not_found"));

    // After all that, a good request still works.
    let (s, body) = post_run(&gw.run_url("demo"), &tok, &input("t", "r", "x")).await;
    assert_eq!(s, 200);
    assert_eq!(sse_events(&body).last().unwrap()["type"], "RUN_FINISHED");
}

#[tokio::test]
async fn chunked_oversize_body_without_length_is_refused() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A raw client: it keeps streaming chunks while reading the answer, the way
    // curl does (reqwest gives up on the broken pipe instead of reading the 413).
    let gw = Gateway::start(DEMO).await;
    let addr = gw.base.trim_start_matches("http://").to_owned();
    let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut rd, mut wr) = stream.into_split();
    let head = format!(
        "POST /v1/agents/demo/run HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        token(json!({}))
    );
    let writer = tokio::spawn(async move {
        wr.write_all(head.as_bytes()).await?;
        let chunk = format!("10000\r\n{}\r\n", " ".repeat(0x10000));
        for _ in 0..40 {
            wr.write_all(chunk.as_bytes()).await?;
        }
        Ok::<_, std::io::Error>(())
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(WAIT, rd.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "connection closed without an answer");
        answer.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    let _ = writer.await;
}

/// The value of the series `name` (with its labels, as exposed), or 0.
fn series(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn health_ready_and_metrics_move_under_http_and_websocket_runs() {
    let gw = Gateway::start(DEMO).await;
    let c = http();
    assert_eq!(
        c.get(gw.url("/healthz")).send().await.unwrap().status(),
        200
    );
    assert_eq!(c.get(gw.url("/readyz")).send().await.unwrap().status(), 200);
    let before = gw.metrics().await;
    assert!(before.contains("agui_build_info{version="), "{before}");
    assert!(before.ends_with("# EOF\n"), "OpenMetrics text");

    // An HTTP run, then a WebSocket run with a viewer, then two bad tokens.
    let (status, body) = post_run(
        &gw.run_url("demo"),
        &token(json!({})),
        &input("t", "r", "x"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let http_events = sse_events(&body).len() as f64;
    let mut ws = Ws::connect(&gw, WsAuth::Header(&token(json!({"sub": "w"}))))
        .await
        .unwrap();
    ws.send(
        json!({"type": "run", "id": "r", "agent": "demo", "threadId": "w1", "runId": "w-r1",
                   "messages": [{"id": "m", "role": "user", "content": "hi"}]}),
    )
    .await;
    let ws_frames = ws.recv_until(is_terminal_frame).await;
    let ws_events = ws_frames.iter().filter(|f| f["type"] == "event").count() as f64;
    let _ = c.get(gw.url("/v1/agents")).send().await.unwrap();
    assert_eq!(
        Ws::connect(&gw, WsAuth::Header("not-a-jwt")).await.err(),
        Some(401)
    );

    let m = gw.metrics().await;
    assert_eq!(
        series(&m, "agui_runs_started_total{agent=\"demo\"}"),
        2.0,
        "{m}"
    );
    assert_eq!(
        series(
            &m,
            "agui_runs_ended_total{agent=\"demo\",outcome=\"success\"}"
        ),
        2.0,
        "{m}"
    );
    assert_eq!(
        series(&m, "agui_run_duration_seconds_count{agent=\"demo\"}"),
        2.0,
        "{m}"
    );
    assert_eq!(
        series(
            &m,
            "agui_upstream_first_event_seconds_count{agent=\"demo\"}"
        ),
        2.0,
        "{m}"
    );
    assert!(
        series(&m, "agui_events_in_total{agent=\"demo\"}") >= http_events,
        "{m}"
    );
    assert_eq!(
        series(&m, "agui_events_out_total{transport=\"http\"}"),
        http_events,
        "{m}"
    );
    assert!(
        series(&m, "agui_events_out_total{transport=\"ws\"}") >= ws_events,
        "{m}"
    );
    assert!(
        series(&m, "agui_journal_append_seconds_count") >= 2.0,
        "{m}"
    );
    assert_eq!(series(&m, "agui_connections{transport=\"ws\"}"), 1.0, "{m}");
    assert_eq!(series(&m, "agui_ws_sessions"), 1.0, "{m}");
    assert_eq!(
        series(
            &m,
            "agui_auth_failures_total{reason=\"missing_token\",transport=\"http\"}"
        ),
        1.0,
        "/v1/agents without a token: {m}"
    );
    assert_eq!(
        series(
            &m,
            "agui_auth_failures_total{reason=\"malformed_token\",transport=\"ws\"}"
        ),
        1.0,
        "{m}"
    );
    assert!(series(&m, "agui_resident_threads") >= 2.0, "{m}");
    drop(ws);
}

#[tokio::test]
async fn check_config_reports_keys_and_token_mints_valid_tokens() {
    let bin = gateway_bin();
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[auth]\nhs_secret = \"short\"\n[[agents]]\nid = \"a\"\nurl = \"nope\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(&bin)
        .args(["--config", bad.to_str().unwrap(), "check-config"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml: auth.hs_secret") && err.contains("agents[0].url"),
        "{err}"
    );

    let shipped = repo().join("config/gateway.toml");
    let out = std::process::Command::new(&bin)
        .args(["--config", shipped.to_str().unwrap(), "check-config"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let gw = Gateway::start(DEMO).await;
    let out = std::process::Command::new(&bin)
        .args([
            "--config",
            gw.config_path.to_str().unwrap(),
            "token",
            "--sub",
            "bob",
            "--roles",
            "admin,ops",
            "--tenant",
            "acme",
            "--ttl",
            "60",
            "--threads",
            r#"{"t-*":["view"]}"#,
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let tok = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let v: Value = json_of(http().get(gw.url("/v1/agents")).bearer_auth(&tok)).await;
    assert_eq!(
        v["agents"].as_array().unwrap().len(),
        2,
        "admin role from --roles: {v}"
    );
}

/// Runs the binary with `args` on the config `text` (written to a file in
/// `dir`); returns the exit code and stderr.
fn run_on(dir: &std::path::Path, text: &str, args: &[&str]) -> (Option<i32>, String) {
    let cfg = dir.join("gateway.toml");
    std::fs::write(&cfg, text).unwrap();
    let out = std::process::Command::new(gateway_bin())
        .arg("--config")
        .arg(&cfg)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn check_config_runs_every_start_up_check_without_listening() {
    let dir = tempfile::tempdir().unwrap();
    let auth = "[auth]\nhs_secret = \"0123456789abcdef0123456789abcdef\"\n";
    // A listener address that start-up could bind: nothing stops before the checks.
    let listen = "[server]\nlisten = \"127.0.0.1:0\"\n";

    // A missing certificate: check-config and serve say the same thing, and
    // serve says it before it listens.
    let missing_cert = format!(
        "{listen}[server.tls]\ncert = \"missing-cert.pem\"\nkey = \"missing-key.pem\"\n{auth}[store]\nkind = \"memory\"\n"
    );
    let (code, err) = run_on(dir.path(), &missing_cert, &["check-config"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("gateway.toml: server.tls.cert: ") && err.contains("missing-cert.pem"),
        "{err}"
    );
    let (code, serve_err) = run_on(dir.path(), &missing_cert, &["serve"]);
    assert_ne!(code, Some(0), "{serve_err}");
    assert!(
        serve_err.contains("server.tls.cert: ") && !serve_err.contains("cannot listen"),
        "{serve_err}"
    );

    // Redis settings start-up refuses, found without connecting to Redis.
    let redis = format!(
        "{listen}{auth}[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:1/x\"\nlease_ttl = \"500ms\"\n"
    );
    let (code, err) = run_on(dir.path(), &redis, &["check-config"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("gateway.toml: store.lease_ttl: must be at least 1s"),
        "{err}"
    );
    let (code, err) = run_on(
        dir.path(),
        &redis.replace("lease_ttl = \"500ms\"", "lease_ttl = \"2s\""),
        &["check-config"],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("gateway.toml: store.url: "),
        "a bad db index: {err}"
    );

    // An agent header value no HTTP request can carry, and a journal path
    // under a file.
    std::fs::write(dir.path().join("plain-file"), "").unwrap();
    let agent = format!(
        "{listen}{auth}[store]\npath = \"plain-file/j.db\"\n\
         [[agents]]\nid = \"a\"\nurl = \"http://127.0.0.1:9/\"\nheaders = {{ X-Key = \"a\\nb\" }}\n"
    );
    let (code, err) = run_on(dir.path(), &agent, &["check-config"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("agents[0]: agent a: header X-Key: invalid value"),
        "{err}"
    );
    assert!(
        err.contains("store.path: ") && err.contains("is not a folder"),
        "{err}"
    );

    // The whole schema on stdout, as committed.
    let out = std::process::Command::new(gateway_bin())
        .arg("config-schema")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        std::fs::read_to_string(repo().join("config/schema.json")).unwrap()
    );
}

#[tokio::test]
async fn token_ttl_takes_a_duration_or_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        "[auth]\nhs_secret = \"0123456789abcdef0123456789abcdef\"\n",
    )
    .unwrap();
    // The minted token's exp is `secs` ahead of now (and of its iat).
    let minted_for = |ttl: &str, secs: u64| {
        let out = std::process::Command::new(gateway_bin())
            .arg("--config")
            .arg(&cfg)
            .args(["token", "--ttl", ttl])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "--ttl {ttl}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let tok = String::from_utf8(out.stdout).unwrap();
        use base64::Engine;
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(tok.trim().split('.').nth(1).unwrap())
            .unwrap();
        let claims: Value = serde_json::from_slice(&payload).unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let exp = claims["exp"].as_u64().unwrap();
        assert!(exp.abs_diff(now + secs) <= 5, "--ttl {ttl}: {claims}");
        assert_eq!(exp - claims["iat"].as_u64().unwrap(), secs, "--ttl {ttl}");
    };
    minted_for("1h", 3600);
    minted_for("90", 90); // whole seconds, as before
    minted_for("1h 30m", 5400);
    let out = std::process::Command::new(gateway_bin())
        .arg("--config")
        .arg(&cfg)
        .args(["token", "--ttl", "soon"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("'soon' is not a duration"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn env_overrides_config_keys() {
    let gw =
        Gateway::start_with_env(DEMO, &[("AGUI_GATEWAY__SERVER__MAX_BODY_BYTES", "2048")]).await;
    let resp = http()
        .post(gw.run_url("demo"))
        .bearer_auth(token(json!({})))
        .json(&input("t", "r", &"x".repeat(4096)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
}

#[tokio::test]
async fn the_access_log_names_each_request_and_never_a_token_or_content() {
    let gw = Gateway::start(&format!("{DEMO}[ws]\nquery_token = true\n")).await;
    let tok = token(json!({"sub": "logan", "tenant": "acme"}));
    let resp = http()
        .get(gw.url("/v1/agents"))
        .bearer_auth(&tok)
        .header("x-request-id", "req-from-client-1")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["x-request-id"],
        "req-from-client-1",
        "echoed"
    );
    // Without one, the gateway makes one up and says which.
    let resp = http().get(gw.url("/healthz")).send().await.unwrap();
    let made_up = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(made_up.len(), 36, "a UUID: {made_up}");
    // A run with private content, and a WebSocket with its token in the query.
    let secret_text = "my-private-message-7781";
    let mut body = input("logged", "r1", secret_text);
    body["messages"][0]["id"] = "m-logged".into();
    let (status, _) = post_run(&gw.run_url("demo"), &tok, &body).await;
    assert_eq!(status, 200);
    let mut ws = Ws::connect(&gw, WsAuth::Query(&tok)).await.unwrap();
    ws.send(json!({"type": "ping", "id": "p"})).await;
    assert_eq!(ws.recv().await["type"], "pong");

    gw.proc.expect_stderr("req-from-client-1").await;
    gw.proc.expect_stderr(&made_up).await;
    let log = gw.proc.stderr();
    let line = log
        .lines()
        .find(|l| l.contains("req-from-client-1") && l.contains("access"))
        .expect("an access line for the request");
    assert!(
        line.contains("status=200") && line.contains("path=/v1/agents"),
        "{line}"
    );
    assert!(line.contains("tenant=acme"), "{line}");
    let run_line = log
        .lines()
        .find(|l| l.contains("access") && l.contains("thread=logged"))
        .expect("the run's access line names its thread");
    assert!(run_line.contains("run=r1"), "{run_line}");
    assert!(!log.contains(&tok), "a token reached the log");
    assert!(
        !log.contains("access_token"),
        "a query string reached the log"
    );
    for l in log
        .lines()
        .filter(|l| l.contains(" INFO ") || l.contains(" WARN "))
    {
        assert!(!l.contains(secret_text), "message content at info: {l}");
    }
}

/// Issue 19: a thread id with a newline wrote a forged line into the log,
/// NUL and bidi overrides went in raw. In text and JSON logs alike, every
/// event stays one line and the id is still readable, escaped.
#[tokio::test]
async fn client_strings_never_forge_or_disguise_a_log_line() {
    for format in ["text", "json"] {
        let gw = Gateway::start_with_env(DEMO, &[("AGUI_GATEWAY_LOG_FORMAT", format)]).await;
        let tok = token(json!({"sub": "eve"}));
        let forged = "FORGED-7731 admin signed in";
        let thread = format!(
            "t-{format}\n2026-11-25T00:00:00.000000Z  INFO agui_gateway: {forged}\r\u{0}\u{202e}\u{85}"
        );
        // Refused (not a valid thread id), and logged all the same.
        let (status, body) = post_run(&gw.run_url("demo"), &tok, &input(&thread, "r1", "hi")).await;
        assert_eq!(status, 400, "{body}");
        gw.proc.expect_stderr(forged).await;
        let log = gw.proc.stderr();
        for line in log.lines() {
            assert!(
                !line.starts_with("2026-11-25T00:00:00"),
                "{format}: a forged line: {line:?}"
            );
            if format == "json" {
                serde_json::from_str::<Value>(line)
                    .unwrap_or_else(|e| panic!("not one JSON object per line ({e}): {line:?}"));
            }
        }
        for raw in ['\r', '\0', '\u{202e}', '\u{85}'] {
            assert!(!log.contains(raw), "{format}: {raw:?} reached the log raw");
        }
        if format == "text" {
            assert!(
                log.contains("thread=t-text\\n2026-11-25T00:00:00.000000Z  INFO agui_gateway: FORGED-7731 admin signed in\\r\\u0000\\u202e\\u0085"),
                "the id is logged escaped: {log}"
            );
        } else {
            // JSON readers get the very string the client sent.
            let logged = log
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .any(|v| v["span"]["thread"] == thread.as_str());
            assert!(logged, "the thread id round-trips in JSON: {log}");
        }
    }
}

#[tokio::test]
async fn an_online_backup_restores_the_journal() {
    let gw = Gateway::start(DEMO).await;
    let tok = token(json!({"sub": "bea"}));
    let (status, _) = post_run(&gw.run_url("demo"), &tok, &input("bk", "r1", "remember me")).await;
    assert_eq!(status, 200);
    let snapshot = |gw: &Gateway| {
        let url = gw.url("/v1/threads/bk");
        let tok = tok.clone();
        async move {
            http()
                .get(url)
                .bearer_auth(tok)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let original = snapshot(&gw).await;
    // docs/operations.md: `VACUUM INTO` while the gateway runs.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("backup.db");
    let live = gw
        .config_path
        .parent()
        .unwrap()
        .join("data/agui-gateway.db");
    rusqlite::Connection::open(&live)
        .unwrap()
        .execute("VACUUM INTO ?1", [copy.to_str().unwrap()])
        .unwrap();
    // A new gateway on the copy holds the same thread.
    let restored = Gateway::start(&format!("{DEMO}[store]\npath = \"{}\"\n", copy.display())).await;
    let back = snapshot(&restored).await;
    assert_eq!(back["seq"], original["seq"], "{back}");
    assert_eq!(back["messages"], original["messages"]);
    assert!(
        back["messages"].to_string().contains("remember me"),
        "{back}"
    );
}

/// A client that trusts only `pem`.
fn trusting(pem: &[u8]) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(pem).unwrap()])
        .build()
        .unwrap()
}

/// A TLS client that never finishes its handshake is dropped at
/// `server.header_read_timeout`, like a slow request head.
#[tokio::test]
async fn a_silent_tls_client_is_dropped_at_the_header_deadline() {
    use std::time::{Duration, Instant};
    use tokio::io::AsyncReadExt;
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, _) = tls_certificate(dir.path(), "silent");
    let gw = Gateway::start_with_env(
        &format!(
            "[server.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
            cert.display(),
            key.display()
        ),
        &[("AGUI_GATEWAY__SERVER__HEADER_READ_TIMEOUT", "1s")],
    )
    .await;
    let addr = gw.base.trim_start_matches("https://").to_owned();
    let mut silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let opened = Instant::now();
    let read = tokio::time::timeout(WAIT, silent.read(&mut [0u8; 64])).await;
    assert!(matches!(read, Ok(Ok(0) | Err(_))), "closed: {read:?}");
    let lived = opened.elapsed();
    assert!(
        (Duration::from_millis(900)..Duration::from_secs(5)).contains(&lived),
        "dropped at the deadline: {lived:?}"
    );
}

#[tokio::test]
async fn tls_on_the_listener_and_a_renewed_certificate_without_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, first) = tls_certificate(dir.path(), "first");
    let gw = Gateway::start(&format!(
        "{DEMO}[server.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
        cert.display(),
        key.display()
    ))
    .await;
    assert!(gw.base.starts_with("https://"), "{}", gw.base);
    let ok = trusting(&first)
        .get(gw.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    // A run over HTTPS, end to end.
    let resp = trusting(&first)
        .post(gw.run_url("demo"))
        .bearer_auth(token(json!({})))
        .json(&input("tls", "r1", "hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let events = sse_events(&resp.text().await.unwrap());
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
    // Plain HTTP on the same port gets no answer it could mistake for one.
    let plain = gw.url("/healthz").replace("https://", "http://");
    assert!(
        http()
            .get(plain)
            .send()
            .await
            .map(|r| r.status() != 200)
            .unwrap_or(true)
    );

    // The certificate is renewed in place: new handshakes get the new one.
    let (second_cert, second_key, second) = tls_certificate(dir.path(), "second");
    std::fs::copy(&second_key, &key).unwrap();
    std::fs::copy(&second_cert, &cert).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        // A fresh client each time: a fresh handshake.
        if trusting(&second)
            .get(gw.url("/healthz"))
            .send()
            .await
            .is_ok()
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the new certificate was never served"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        trusting(&first)
            .get(gw.url("/healthz"))
            .send()
            .await
            .is_err(),
        "the old certificate is no longer served"
    );
}

/// Issue 19: connections sending their request head a byte at a time
/// (slowloris) were held forever, one descriptor each; near the fd limit the
/// node stopped accepting and `/healthz` timed out. Now each is closed once
/// `server.header_read_timeout` passes, and liveness keeps answering while
/// more of them than the node has descriptors keep coming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_header_connections_are_closed_and_health_keeps_answering() {
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if single_node_only("one process's file descriptors") {
        return;
    }
    let gw = Gateway::start_with_env(
        "",
        &[
            ("AGUI_TEST_FD_LIMIT", "256"),
            ("AGUI_GATEWAY__SERVER__HEADER_READ_TIMEOUT", "1s"),
        ],
    )
    .await;
    let addr = gw.base.trim_start_matches("http://").to_owned();
    let attack_until = Instant::now() + Duration::from_secs(6);
    // More slow clients than the process has descriptors; each reconnects
    // as soon as it is closed, until the attack ends.
    let mut attackers = tokio::task::JoinSet::new();
    for _ in 0..320 {
        let addr = addr.clone();
        attackers.spawn(async move {
            let mut lives = Vec::new();
            while Instant::now() < attack_until {
                let Ok(mut tcp) = tokio::net::TcpStream::connect(&addr).await else {
                    continue;
                };
                let opened = Instant::now();
                let head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";
                let mut sent = 0;
                let mut buf = [0u8; 1024];
                let mut drip = tokio::time::interval(Duration::from_millis(250));
                let closed = loop {
                    tokio::select! {
                        read = tcp.read(&mut buf) => match read {
                            Ok(0) | Err(_) => break true,
                            Ok(_) => continue,
                        },
                        _ = drip.tick() => {
                            let byte = head.get(sent).copied().unwrap_or(b'a');
                            sent += 1;
                            if tcp.write_all(&[byte]).await.is_err() {
                                break true;
                            }
                            if opened.elapsed() > Duration::from_secs(15) {
                                break false;
                            }
                        }
                    }
                };
                lives.push((opened.elapsed(), closed));
            }
            lives
        });
    }
    // Liveness, each time on a fresh connection (a pooled one would skip
    // the accept queue the attack fills).
    let probe = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(8))
        .build()
        .unwrap();
    let mut slowest = Duration::ZERO;
    let mut probes = 0;
    while Instant::now() < attack_until {
        let asked = Instant::now();
        let health = probe.get(gw.url("/healthz")).send().await;
        let status = health.map(|r| r.status().as_u16());
        assert_eq!(
            status.as_ref().ok(),
            Some(&200),
            "/healthz under slowloris: {status:?}"
        );
        slowest = slowest.max(asked.elapsed());
        probes += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let mut lives = Vec::new();
    while let Some(done) = attackers.join_next().await {
        lives.extend(done.unwrap());
    }
    let longest = lives.iter().map(|(life, _)| *life).max().unwrap();
    let shortest = lives.iter().map(|(life, _)| *life).min().unwrap();
    eprintln!(
        "{} slow connections, lived {shortest:?}..{longest:?}; {probes} health probes, slowest {slowest:?}",
        lives.len()
    );
    assert!(
        lives.iter().all(|(_, closed)| *closed),
        "slow connections were still open after 15 s"
    );
    // Measured from when this busy client saw its connect complete, so a
    // little under the 1 s timeout; a refusal would be immediate.
    assert!(
        shortest >= Duration::from_millis(500),
        "closed by the timeout, not refused: {shortest:?}"
    );
}

#[tokio::test]
async fn past_max_connections_a_client_gets_a_clear_503_until_one_closes() {
    let gw = Gateway::start_with_env(DEMO, &[("AGUI_GATEWAY__SERVER__MAX_CONNECTIONS", "2")]).await;
    let t = token(json!({"sub": "cap"}));
    let first = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    let _second = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    // A third connection (a fresh client: a new TCP connection) is told why.
    let refused = http()
        .get(gw.url("/v1/agents"))
        .bearer_auth(&t)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["connection"], "close");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_connections"),
        "{body}"
    );
    // A full node is still alive: liveness answers (and closes).
    let alive = http().get(gw.url("/healthz")).send().await.unwrap();
    assert_eq!(alive.status(), 200);
    assert_eq!(alive.headers()["connection"], "close");
    // One closes: its slot is free again.
    drop(first);
    let deadline = std::time::Instant::now() + WAIT;
    let metrics = loop {
        let resp = http().get(gw.url("/metrics")).send().await.unwrap();
        if resp.status() == 200 {
            break resp.text().await.unwrap();
        }
        assert!(std::time::Instant::now() < deadline, "still refused");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    // Both connections past the cap count (the refused one and the probe's).
    assert!(
        metrics.contains("agui_connections_refused_total 2"),
        "{metrics}"
    );
}

/// A tiny OTLP/HTTP collector on loopback: every `POST /v1/traces` body, in
/// arrival order.
async fn otlp_receiver() -> (String, std::sync::Arc<std::sync::Mutex<Vec<bytes::Bytes>>>) {
    use axum::routing::post;
    let bodies: std::sync::Arc<std::sync::Mutex<Vec<bytes::Bytes>>> = Default::default();
    let sink = bodies.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |body: bytes::Bytes| async move {
            sink.lock().unwrap().push(body);
            // An empty ExportTraceServiceResponse: all accepted.
            (
                [("content-type", "application/x-protobuf")],
                Vec::<u8>::new(),
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), bodies)
}

/// Sends SIGTERM and waits until the gateway has exited (drained, flushed).
async fn stop(gw: &mut Gateway) {
    gw.signal("TERM");
    let status = tokio::time::timeout(WAIT, gw.proc.child.wait())
        .await
        .expect("the gateway exits after SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}\n{}", gw.proc.stderr());
}

#[tokio::test]
async fn otlp_export_joins_the_agent_trace_and_carries_no_token() {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use prost::Message;
    if single_node_only("reads one process's exported spans after stopping it") {
        return;
    }
    let (collector, bodies) = otlp_receiver().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let mut gw = Gateway::start(&format!(
        "[[agents]]\nid = \"echo\"\nurl = \"{}\"\n\n\
         [tracing]\notlp_endpoint = \"{collector}\"\nservice_name = \"gw-under-test\"\n",
        py.url("echo")
    ))
    .await;
    let tok = token(json!({"sub": "otto", "tenant": "acme"}));
    let secret_text = "my-private-message-5523";
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let resp = http()
        .post(gw.run_url("echo"))
        .bearer_auth(&tok)
        .header("traceparent", parent)
        .json(&input("t-otel", "r-otel", secret_text))
        .send()
        .await
        .unwrap();
    let events = sse_events(&resp.text().await.unwrap());
    let sent = events[1]["value"]["traceparent"]
        .as_str()
        .unwrap()
        .to_owned();
    let parts: Vec<&str> = sent.split('-').collect();
    assert_eq!(parts.len(), 4, "{sent}");
    let (trace_id, upstream_id) = (parts[1], parts[2]);
    assert_eq!(trace_id, "4bf92f3577b34da6a3ce929d0e0e4736", "{sent}");
    assert_eq!(parts[3], "01", "sampled: {sent}");
    gw.proc.expect_stderr(&format!("trace_id={trace_id}")).await;

    // The batch goes out every 5 s: this run's spans reach the collector
    // through the flush at shutdown, after the drain.
    stop(&mut gw).await;
    let bodies = bodies.lock().unwrap().clone();
    assert!(!bodies.is_empty(), "nothing exported");
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let mut spans = Vec::new();
    for body in &bodies {
        let request = ExportTraceServiceRequest::decode(body.as_ref()).expect("OTLP protobuf");
        for rs in request.resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref()?.value.clone());
            assert_eq!(
                service,
                Some(Any::StringValue("gw-under-test".into())),
                "service.name"
            );
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
        // Nowhere in what is exported: the token, nor message content.
        let raw = String::from_utf8_lossy(body);
        assert!(!raw.contains(&tok), "the bearer token was exported");
        assert!(!raw.contains(secret_text), "message content was exported");
    }
    let named = |name: &str| {
        spans
            .iter()
            .find(|s| s.name == name && hex(&s.trace_id) == trace_id)
            .unwrap_or_else(|| {
                let seen: Vec<_> = spans.iter().map(|s| (&s.name, hex(&s.trace_id))).collect();
                panic!("no '{name}' span in trace {trace_id}: {seen:?}")
            })
    };
    let (request, run, upstream) = (named("request"), named("run"), named("upstream"));
    assert_eq!(hex(&upstream.span_id), upstream_id, "the agent's parent");
    assert_eq!(hex(&upstream.parent_span_id), hex(&run.span_id));
    assert_eq!(hex(&run.parent_span_id), hex(&request.span_id));
    assert_eq!(
        hex(&request.parent_span_id),
        "00f067aa0ba902b7",
        "the client's span"
    );
    let attr = |span: &opentelemetry_proto::tonic::trace::v1::Span, key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref()?.value.clone())
    };
    assert_eq!(attr(run, "thread"), Some(Any::StringValue("t-otel".into())));
    assert_eq!(attr(run, "agent"), Some(Any::StringValue("echo".into())));
    assert_eq!(
        attr(request, "path"),
        Some(Any::StringValue("/v1/agents/echo/run".into()))
    );
    assert_eq!(
        attr(upstream, "http.response.status_code"),
        Some(Any::IntValue(200))
    );
    // No attribute of any span holds the token or its signature.
    let signature = tok.rsplit('.').next().unwrap();
    for span in &spans {
        for kv in &span.attributes {
            let value = format!("{:?}", kv.value);
            assert!(
                !value.contains(signature) && !value.contains(secret_text),
                "{} {}: {value}",
                span.name,
                kv.key
            );
        }
    }
}

#[tokio::test]
async fn without_an_otlp_endpoint_nothing_is_exported() {
    if single_node_only("stops one process to see what it flushed") {
        return;
    }
    // Even with the SDK's own environment variable pointing at a collector.
    let (collector, bodies) = otlp_receiver().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let mut gw = Gateway::start_with_env(
        &format!("[[agents]]\nid = \"echo\"\nurl = \"{}\"\n", py.url("echo")),
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &collector)],
    )
    .await;
    let (status, text) = post_run(
        &gw.run_url("echo"),
        &token(json!({})),
        &input("t-off", "r-off", "hi"),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let sent = sse_events(&text)[1]["value"]["traceparent"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(sent.len(), 55, "still a traceparent: {sent}");
    stop(&mut gw).await;
    assert!(bodies.lock().unwrap().is_empty(), "spans were exported");
}

/// An event stream asked for in a format the gateway cannot serve is 406
/// `not_acceptable` with the JSON error shape, before any run starts; the
/// proto type is served with its own content type.
#[tokio::test]
async fn unservable_accept_is_406_not_acceptable() {
    let gw = Gateway::start(DEMO).await;
    let tok = token(json!({}));
    let c = http();
    for accept in ["application/json", "text/event-stream;q=0", "text/html"] {
        let (s, e) = error_of(
            c.post(gw.run_url("demo"))
                .bearer_auth(&tok)
                .header("accept", accept)
                .json(&input("na", "r1", "x"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(
            (s, e["code"].as_str().unwrap()),
            (406, "not_acceptable"),
            "{accept}: {e}"
        );
    }
    let (s, e) = error_of(
        c.get(gw.url("/v1/threads/na/events"))
            .bearer_auth(&tok)
            .header("accept", "application/xml")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((s, e["code"].as_str().unwrap()), (406, "not_acceptable"));
    // Nothing ran: the thread does not exist.
    let resp = c
        .get(gw.url("/v1/threads/na"))
        .bearer_auth(&tok)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    // The proto type is served as such.
    let resp = c
        .post(gw.run_url("demo"))
        .bearer_auth(&tok)
        .header("accept", "application/vnd.ag-ui.event+proto")
        .json(&input("na", "r1", "x"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "application/vnd.ag-ui.event+proto"
    );
    let body = resp.bytes().await.unwrap();
    let len = u32::from_be_bytes(body[..4].try_into().unwrap()) as usize;
    assert!(body.len() > 4 + len, "more than one length-prefixed frame");
}

/// A request body dripped a byte at a time used to hold its request (and
/// descriptor) for as long as the client liked: the head had a deadline,
/// the body none. Now it is refused `invalid` once
/// `server.body_read_timeout` passes, and the connection is closed.
#[tokio::test]
async fn a_dripped_request_body_is_refused_at_its_deadline() {
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let gw =
        Gateway::start_with_env(DEMO, &[("AGUI_GATEWAY__SERVER__BODY_READ_TIMEOUT", "1s")]).await;
    let addr = gw.base.trim_start_matches("http://").to_owned();
    let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /v1/agents/demo/run HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 400\r\n\r\n",
        token(json!({}))
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let sent = Instant::now();
    // A byte every 200 ms, until the gateway answers.
    let (mut reader, mut writer) = conn.into_split();
    let drip = tokio::spawn(async move {
        for b in br#"{"threadId": "slow", "runId": "r1", "messages": []"#
            .iter()
            .cycle()
        {
            if writer.write_all(&[*b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let mut answer = Vec::new();
    let read = tokio::time::timeout(WAIT, reader.read_to_end(&mut answer)).await;
    drip.abort();
    let took = sent.elapsed();
    assert!(
        read.is_ok(),
        "the gateway never answered the dripping request"
    );
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(
        text.contains("\"invalid\"") && text.contains("body_read_timeout"),
        "{text}"
    );
    assert!(
        (Duration::from_millis(900)..Duration::from_secs(5)).contains(&took),
        "refused at the deadline: {took:?}"
    );
    // A body that arrives in time is served as before.
    let (status, _) = post_run(
        &gw.run_url("demo"),
        &token(json!({})),
        &input("fast", "r1", "hi"),
    )
    .await;
    assert_eq!(status, 200);
}

/// A refused run creates nothing (issue 29, item 9): a first run on a new
/// thread refused for an unknown `parentRunId` left an empty thread behind
/// that answered 200 (and appeared in the listing) where `not_found` was
/// right.
#[tokio::test]
async fn a_refused_first_run_leaves_no_thread_behind() {
    let gw = Gateway::start(DEMO).await;
    let t = token(json!({"sub": "alice"}));
    let mut body = input("ghost", "r1", "hello");
    body["parentRunId"] = "no-such-run".into();
    let resp = http()
        .post(gw.run_url("demo"))
        .bearer_auth(&t)
        .json(&body)
        .send()
        .await
        .unwrap();
    let (status, error) = error_of(resp).await;
    assert_eq!(status, 404, "{error}");
    let resp = http()
        .get(gw.url("/v1/threads/ghost"))
        .bearer_auth(&t)
        .send()
        .await
        .unwrap();
    let (status, error) = error_of(resp).await;
    assert_eq!((status, error["code"].as_str()), (404, Some("not_found")));
    let list = json_of(http().get(gw.url("/v1/threads")).bearer_auth(&t)).await;
    assert!(
        !list.to_string().contains("\"ghost\""),
        "the refused run left a thread: {list}"
    );
    // The same thread then starts normally.
    let (status, out) = post_run(&gw.run_url("demo"), &t, &input("ghost", "r2", "hi")).await;
    assert_eq!(status, 200, "{out}");
}
