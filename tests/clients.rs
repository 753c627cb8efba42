//! The client package (`clients/typescript`, npm `@agui-gateway/client`)
//! against a real gateway and real agents: its scripts in
//! `clients/typescript/test/` run in Node (and one in Chromium) and print
//! what they saw; the assertions are here.

mod common;

use common::*;
use serde_json::{Value, json};

/// The package's folder.
fn package() -> std::path::PathBuf {
    repo().join("clients/typescript")
}

/// Runs `clients/typescript/test/<script>` with Node and returns the JSON
/// object it prints (a `failure` fails the test).
async fn script(script: &str, args: &[&str]) -> Value {
    assert!(
        package().join("node_modules/ws").exists(),
        "clients/typescript/node_modules missing: run `npm ci` there (bash .ci/run does)"
    );
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(90),
        tokio::process::Command::new("node")
            .arg(package().join("test").join(script))
            .args(args)
            .env("SUPPRESS_TRANSFORMATION_WARNINGS", "1")
            .current_dir(package())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("node {script} timed out"))
    .expect("node runs");
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .rfind(|l| l.starts_with('{'))
        .unwrap_or("")
        .to_owned();
    let seen: Value = serde_json::from_str(&last).unwrap_or_else(|e| {
        panic!(
            "{script}: {e}: {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        seen.get("failure").is_none(),
        "{seen:#} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    seen
}

/// Seqs of a recorded session, without the snapshot markers.
fn event_seqs(seen: &Value) -> Vec<u64> {
    seen["seqs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_u64)
        .collect()
}

/// True when `seqs` go up by one from `first`.
fn gapless_from(seqs: &[u64], first: u64) -> bool {
    seqs.iter().enumerate().all(|(i, s)| *s == first + i as u64)
}

/// A gateway with the built-in demo agent and the scripted agent's gated run.
async fn gateway(py: &PyAgent, extra: &str) -> Gateway {
    Gateway::start(&format!(
        "[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
         [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n\
         [[agents]]\nid = \"gated\"\nurl = \"{}\"\n{extra}",
        py.url("gated")
    ))
    .await
}

#[tokio::test]
async fn two_sessions_see_the_same_gapless_seqs_and_each_others_runs_live() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = gateway(&py, "").await;
    let t = token(json!({"sub": "sam"}));
    let seen = script("sessions.mjs", &[&gw.base, &t, "demo"]).await;
    let a = event_seqs(&seen["a"]);
    let b = event_seqs(&seen["b"]);
    let joined = seen["bJoinedAt"].as_u64().unwrap();
    assert!(gapless_from(&a, 1), "A: every seq once, from 1: {a:?}");
    assert_eq!(seen["b"]["snapshots"], json!([joined]), "{seen:#}");
    assert!(gapless_from(&b, joined + 1), "B: after its snapshot: {b:?}");
    assert_eq!(&a[joined as usize..], &b[..], "the same events on both");
    assert_eq!(seen["aSeq"], seen["bSeq"]);
    // Each saw the other's run live: three runs on A, two after B joined.
    let starts = |s: &Value| {
        s["types"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| *t == "RUN_STARTED")
            .count()
    };
    assert_eq!(starts(&seen["a"]), 3);
    assert_eq!(starts(&seen["b"]), 2);
    assert_eq!(seen["bRun"]["status"], "finished");
    assert_eq!(seen["bRun"]["runId"], "r3");
    // `after` beyond the journal's end: a reset snapshot, and the session
    // continues from its seq.
    let last = seen["aSeq"].as_u64().unwrap();
    assert_eq!(seen["reset"]["previousSeq"], last + 1000, "{seen:#}");
    assert_eq!(seen["reset"]["snapshotSeq"], last);
    assert_eq!(seen["reset"]["seqAfter"], last);
    assert_eq!(seen["reset"]["run"]["runId"], "r3");
}

#[tokio::test]
async fn a_session_resumes_after_its_last_seq_across_a_gateway_restart() {
    if single_node_only("restarts one process on a fixed port") {
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nshutdown_grace = \"1s\"\n\
             [auth]\nalgorithms = [\"HS256\"]\nhs_secret = \"{SECRET}\"\n\
             [demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
             [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n"
        ),
    )
    .unwrap();
    let gw = Gateway::start_file(&path, &[]).await;
    let t = token(json!({"sub": "ria"}));
    let (status, _) = post_run(&gw.run_url("demo"), &t, &input("again", "r1", "hello")).await;
    assert_eq!(status, 200);
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(package().join("test/reconnect.mjs"))
        .args(["restart", gw.base.as_str(), t.as_str(), "again"])
        .current_dir(package());
    let mut client = Proc::spawn(cmd);
    client.expect_line("watching").await;
    let gw = gw.restart().await;
    client.expect_line("reconnected").await;
    let mut next = input("again", "r2", "and again");
    next["messages"][0]["id"] = "m-again-2".into();
    let (status, _) = post_run(&gw.run_url("demo"), &t, &next).await;
    assert_eq!(status, 200);
    let line = client.expect_line("{").await;
    let seen: Value = serde_json::from_str(&line).unwrap();
    assert!(seen.get("failure").is_none(), "{seen:#}");
    assert!(
        seen["states"]
            .as_array()
            .unwrap()
            .contains(&json!("reconnecting")),
        "{seen:#}"
    );
    // One snapshot (before the restart), then the next run's events, each
    // once: the reconnect asked for what followed the snapshot's seq.
    let snapshot = seen["snapshots"].as_array().unwrap();
    assert_eq!(snapshot.len(), 1, "{seen:#}");
    let seqs = event_seqs(&seen);
    assert!(
        gapless_from(&seqs, snapshot[0].as_u64().unwrap() + 1),
        "{seqs:?}"
    );
    let types = seen["types"].as_array().unwrap();
    assert_eq!(types.first().unwrap(), "RUN_STARTED", "{seen:#}");
    assert_eq!(types.last().unwrap(), "RUN_FINISHED", "{seen:#}");
}

/// A session away (its gateway down) while Redis lost the thread's history
/// and the new journal went past the seq it holds: resubscribing with its
/// cursor — the seq and the epoch the gateway's ack named — gets a reset
/// snapshot of the new history, not the new history's later events spliced
/// onto the old one (docs/protocol.md, "Cursors").
#[tokio::test]
async fn a_session_away_while_redis_lost_the_history_is_reset_not_spliced() {
    if single_node_only("stops one process on a fixed port") {
        return;
    }
    let redis = RedisServer::start().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let agents = format!("[[agents]]\nid = \"ok\"\nurl = \"{}\"\n", py.url("ok"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nshutdown_grace = \"1s\"\n\
             [auth]\nalgorithms = [\"HS256\"]\nhs_secret = \"{SECRET}\"\n{}{agents}",
            redis.store_config("a")
        ),
    )
    .unwrap();
    let mut gw = Gateway::start_file(&path, &[]).await;
    let t = token(json!({"sub": "ria"}));
    let run = |r: &str| {
        let mut body = input("away", r, "hello");
        body["messages"][0]["id"] = format!("u-{r}").into();
        body
    };
    let (status, _) = post_run(&gw.run_url("ok"), &t, &run("r1")).await;
    assert_eq!(status, 200);
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(package().join("test/reconnect.mjs"))
        .args(["restart", gw.base.as_str(), t.as_str(), "away"])
        .current_dir(package());
    let mut client = Proc::spawn(cmd);
    client.expect_line("watching").await;
    // The client's gateway goes away; meanwhile Redis loses everything and
    // another node writes a new history past the client's seq.
    gw.signal("KILL");
    gw.proc.child.wait().await.unwrap();
    assert_eq!(redis.cli(&["FLUSHALL"]).trim(), "OK");
    let other = Gateway::start(&format!("{}{agents}", redis.store_config("b"))).await;
    for r in ["r2", "r3"] {
        let (status, body) = post_run(&other.run_url("ok"), &t, &run(r)).await;
        assert_eq!(status, 200, "{body}");
    }
    let gw = Gateway::start_file(&path, &[]).await;
    client.expect_line("reconnected").await;
    let now: Value = json_of(http().get(gw.url("/v1/threads/away")).bearer_auth(&t)).await;
    let (status, _) = post_run(&gw.run_url("ok"), &t, &run("r4")).await;
    assert_eq!(status, 200);
    let line = client.expect_line("{").await;
    let seen: Value = serde_json::from_str(&line).unwrap();
    assert!(seen.get("failure").is_none(), "{seen:#}");
    let epochs = seen["epochs"].as_array().unwrap();
    assert!(epochs[0].is_string(), "the ack named the epoch: {seen:#}");
    assert!(
        epochs[1].is_string() && epochs[1] != epochs[0],
        "and names the new one: {seen:#}"
    );
    // A reset snapshot of the new history, then its next run, gapless.
    let snapshots = seen["snapshots"].as_array().unwrap();
    assert_eq!(snapshots.len(), 2, "{seen:#}");
    assert_eq!(seen["resets"][0]["seq"], now["seq"], "{seen:#}");
    let seqs: Vec<&Value> = seen["seqs"].as_array().unwrap().iter().collect();
    let after_reset = seqs
        .iter()
        .position(|s| s.as_str().is_some_and(|s| s.starts_with("snapshot@")) && *s != seqs[0])
        .expect("the reset is recorded");
    let next: Vec<u64> = seqs[after_reset + 1..]
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    assert!(
        gapless_from(&next, now["seq"].as_u64().unwrap() + 1),
        "{seen:#}"
    );
}

/// `joinStream` (the package's SSE join stream through the platform's own
/// `EventSource`) survives a gateway restart: the restarted gateway has
/// forgotten the stream's ticket, the `EventSource` gives up on the 401,
/// and the package opens it again with a new ticket and `lastEventId=` —
/// the stream goes on after the last event it got, nothing repeated, no
/// second `RUN_STARTED` of a run it already had (docs/protocol.md, "Join
/// cursors").
#[tokio::test]
async fn a_join_stream_survives_a_gateway_restart_with_nothing_repeated() {
    if single_node_only("restarts one process on a fixed port") {
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nshutdown_grace = \"1s\"\n\
             [auth]\nalgorithms = [\"HS256\"]\nhs_secret = \"{SECRET}\"\n\
             [demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
             [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n"
        ),
    )
    .unwrap();
    let gw = Gateway::start_file(&path, &[]).await;
    let t = token(json!({"sub": "ria"}));
    let (status, _) = post_run(&gw.run_url("demo"), &t, &input("es", "r1", "hello")).await;
    assert_eq!(status, 200);
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg("--experimental-eventsource")
        .arg(package().join("test/joinstream.mjs"))
        .args([gw.base.as_str(), t.as_str(), "es"])
        .env("NODE_NO_WARNINGS", "1")
        .current_dir(package());
    let mut client = Proc::spawn(cmd);
    client.expect_line("watching").await;
    let gw = gw.restart().await;
    let mut next = input("es", "r2", "and again");
    next["messages"][0]["id"] = "m-es-2".into();
    let (status, _) = post_run(&gw.run_url("demo"), &t, &next).await;
    assert_eq!(status, 200);
    let line = client.expect_line("{").await;
    let seen: Value = serde_json::from_str(&line).unwrap();
    assert!(seen.get("failure").is_none(), "{seen:#}");
    assert!(
        seen["opens"].as_u64().unwrap() >= 2,
        "it opened again: {seen:#}"
    );
    let events = seen["events"].as_array().unwrap();
    let started: Vec<&Value> = events.iter().filter(|e| e[1] == "RUN_STARTED").collect();
    assert_eq!(started.len(), 2, "r1 once, r2 once: {seen:#}");
    assert_eq!(
        (started[0][2].as_str(), started[1][2].as_str()),
        (Some("r1"), Some("r2"))
    );
    // Every journal event once, in order: the cursors are the seqs 1..=n.
    let seqs: Vec<u64> = events
        .iter()
        .filter_map(|e| e[0].as_str())
        .map(|c| c.parse().unwrap())
        .collect();
    let mut deduped = seqs.clone();
    deduped.dedup();
    assert_eq!(
        seqs, deduped,
        "an id only once (the gateway adds events without one): {seen:#}"
    );
    assert!(gapless_from(&deduped, 1), "{seen:#}");
}

#[tokio::test]
async fn a_session_rides_out_a_cut_tcp_connection_mid_run() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = gateway(&py, "").await;
    let t = token(json!({"sub": "cora"}));
    let seen = script(
        "reconnect.mjs",
        &["cut", &gw.base, &t, "gated", &py.url("release")],
    )
    .await;
    assert_eq!(seen["released"], 200, "{seen:#}");
    assert_eq!(seen["subscribeBeforeThread"], "not_found", "{seen:#}");
    assert!(seen["accepted"].as_u64().unwrap() >= 2, "{seen:#}");
    // Every seq once, from the run's start to its end, across the cut.
    let seqs = event_seqs(&seen);
    assert!(gapless_from(&seqs, 1), "{seqs:?}");
    assert!(seqs.len() as u64 > seen["seqBeforeCut"].as_u64().unwrap());
    assert_eq!(seen["snapshots"], json!([]), "no reset needed: {seen:#}");
    let types = seen["types"].as_array().unwrap();
    assert_eq!(types.last().unwrap(), "RUN_FINISHED");
    assert_eq!(seen["snapshot"]["seq"], *seqs.last().unwrap());
    assert_eq!(seen["snapshot"]["text"], "go|part1part2", "{seen:#}");
}

#[tokio::test]
async fn a_silent_socket_is_found_by_ping_and_the_session_resumes_after_its_last_seq() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = gateway(&py, "").await;
    let t = token(json!({"sub": "stan"}));
    let seen = script(
        "reconnect.mjs",
        &["stall", &gw.base, &t, "gated", &py.url("release")],
    )
    .await;
    assert_eq!(
        seen["closes"][0][1], "no pong within pingTimeoutMs",
        "{seen:#}"
    );
    assert!(seen["accepted"].as_u64().unwrap() >= 2, "{seen:#}");
    let seqs = event_seqs(&seen);
    assert!(gapless_from(&seqs, 1), "{seqs:?}");
    assert_eq!(seen["snapshot"]["text"], "go|part1part2", "{seen:#}");
    assert_eq!(seen["snapshot"]["seq"], *seqs.last().unwrap());
}

#[tokio::test]
async fn an_expiring_token_is_refreshed_on_the_open_socket_during_a_long_run() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = gateway(&py, "").await;
    let seen = script(
        "refresh.mjs",
        &[&gw.base, SECRET, "gated", &py.url("release"), "demo"],
    )
    .await;
    assert_eq!(seen["closes"], json!([]), "never closed: {seen:#}");
    assert_eq!(seen["opens"], 1, "one socket, never reopened: {seen:#}");
    assert!(seen["refreshes"].as_u64().unwrap() >= 1, "{seen:#}");
    assert_eq!(seen["asked"][0], "initial");
    assert!(
        seen["asked"].as_array().unwrap()[1..]
            .iter()
            .all(|r| r == "expiring"),
        "{seen:#}"
    );
    assert!(seen["pastFirstExpiryMs"].as_u64().unwrap() >= 1000);
    let seqs = event_seqs(&seen);
    assert!(gapless_from(&seqs, 1), "{seqs:?}");
    assert_eq!(
        seen["types"].as_array().unwrap().last().unwrap(),
        "RUN_FINISHED"
    );
    // Without a refresh ahead: closed with 4001 at expiry, the provider
    // asked again, and the session resumed after its last seq.
    let expiry = &seen["expiry"];
    assert_eq!(expiry["asked"], json!(["initial", "rejected"]), "{seen:#}");
    assert_eq!(expiry["closes"][0], 4001, "{seen:#}");
    assert_eq!(expiry["snapshots"].as_array().unwrap().len(), 1, "{seen:#}");
    let after = event_seqs(expiry);
    assert!(
        gapless_from(&after, expiry["seqAtExpiry"].as_u64().unwrap() + 1),
        "{seen:#}"
    );
    assert_eq!(
        expiry["types"].as_array().unwrap().last().unwrap(),
        "RUN_FINISHED"
    );
}

#[tokio::test]
async fn every_error_code_reaches_the_caller_as_a_typed_error() {
    if single_node_only("drains one process") {
        return;
    }
    let py = PyAgent::start("scripted_agent.py").await;
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("rate.toml");
    std::fs::write(
        &policy,
        "[[rules]]\nname = \"one-note-a-minute\"\nkind = \"rate\"\naction = \"meta\"\nlimit = 1\n",
    )
    .unwrap();
    let gw = gateway(&py, &format!("[policy]\npath = \"{}\"\n", policy.display())).await;
    let pid = gw.proc.child.id().unwrap().to_string();
    let seen = script(
        "errors.mjs",
        &[&gw.base, SECRET, "demo", "gated", &py.url("release"), &pid],
    )
    .await;
    let codes = &seen["codes"];
    for code in [
        "invalid",
        "conflict",
        "not_found",
        "too_large",
        "forbidden",
        "unauthenticated",
        "rate_limited",
        "unavailable",
    ] {
        assert_eq!(codes[code], code, "{seen:#}");
    }
    assert_eq!(codes["unavailableHttp"], "unavailable");
    assert_eq!(codes["connectRefused"], "unauthenticated", "{seen:#}");
    assert_eq!(seen["refusedState"], "closed", "no retry loop: {seen:#}");
}

#[tokio::test]
async fn gateway_agent_runs_through_ag_ui_clients_run_agent_and_a_second_one_follows() {
    let (_py, gw) = agent_behind_gateway("pydantic_approval_agent.py", "agent", "bank", "").await;
    let t = token(json!({"sub": "gail"}));
    let seen = script("agent.mjs", &[&gw.base, &t, "bank"]).await;
    assert_eq!(seen["pending"][0]["reason"], "tool_call", "{seen:#}");
    assert_eq!(seen["pending"][0]["toolCallId"], "call_t", "{seen:#}");
    assert_eq!(seen["status1"]["status"], "interrupted");
    assert_eq!(seen["answerNew"], json!(["tool", "assistant"]), "{seen:#}");
    assert_eq!(seen["pendingAfter"], 0);
    assert_eq!(seen["status3"]["status"], "finished");
    // The gateway's snapshot is what both agents folded.
    let snapshot = &seen["snapshotMessages"];
    assert_eq!(snapshot.as_array().unwrap().len(), 6, "{seen:#}");
    assert_eq!(&seen["firstMessages"], snapshot, "{seen:#}");
    assert_eq!(&seen["watcherMessages"], snapshot, "{seen:#}");
    // The second agent joined with the interrupt pending and received the
    // first one's next runs live.
    assert_eq!(seen["watcherPendingAtJoin"], json!(["int-call_t"]));
    assert_eq!(seen["watcherRuns"], json!(["run-answer", "run-turn3"]));
}

#[tokio::test]
async fn the_package_works_as_a_browser_module_in_chromium() {
    if !std::path::Path::new("/usr/bin/chromium").exists() {
        panic!("/usr/bin/chromium is missing: `bash .ci/run` installs Debian's chromium");
    }
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = gateway(&py, "[inspector]\nenabled = true\n").await;
    let t = token(json!({"sub": "bea"}));
    let seen = script("browser.mjs", &[&gw.base, &t, "demo"]).await;
    assert_eq!(seen["errors"], json!([]), "{seen:#}");
    assert_eq!(seen["nativeWebSocket"], true);
    let a: Vec<u64> = serde_json::from_value(seen["a"]["seqs"].clone()).unwrap();
    let b: Vec<u64> = serde_json::from_value(seen["b"]["seqs"].clone()).unwrap();
    let joined = seen["joinedAt"].as_u64().unwrap();
    assert!(gapless_from(&a, 1), "{a:?}");
    assert_eq!(seen["b"]["snapshots"], json!([joined]));
    assert!(gapless_from(&b, joined + 1), "{b:?}");
    assert_eq!(&a[joined as usize..], &b[..]);
    let starts = |v: &Value| {
        v["types"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| *t == "RUN_STARTED")
            .count()
    };
    assert_eq!(starts(&seen["a"]), 3);
    assert_eq!(starts(&seen["b"]), 2);
}

#[tokio::test]
async fn http_answers_and_websocket_frames_match_their_descriptions() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = gateway(&py, "").await;
    let t = token(json!({"sub": "dee"}));
    let seen = script("described.mjs", &[&gw.base, &t, "demo"]).await;
    assert_eq!(
        seen["servedIsDocs"], true,
        "GET /v1/openapi.json serves docs/openapi.json"
    );
    assert_eq!(seen["failures"], json!([]), "{seen:#}");
    assert!(seen["checked"].as_array().unwrap().len() >= 17, "{seen:#}");
    // Every command and reply kind the session used was validated.
    for kind in [
        "command:run",
        "command:meta",
        "command:subscribe",
        "command:unsubscribe",
        "command:ping",
        "reply:ack",
        "reply:error",
        "reply:pong",
        "reply:snapshot",
    ] {
        assert!(
            seen["wsKinds"].as_array().unwrap().contains(&json!(kind)),
            "{kind}: {seen:#}"
        );
    }
}

#[tokio::test]
async fn sessions_regenerate_edit_and_branch_and_every_viewer_ends_on_the_head() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&format!(
        "[[agents]]\nid = \"h\"\nurl = \"{}\"\n",
        py.url("history")
    ))
    .await;
    let t = token(json!({"sub": "bea"}));
    let seen = script("branching.mjs", &[&gw.base, &t, "h"]).await;
    let ids = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect()
    };
    // What each fork's agent was sent: its base's path plus the new input,
    // never the answer it replaces.
    let sent = &seen["sent"];
    assert_eq!(sent["r3"], json!(["u1", "a-r1", "u2"]), "{seen:#}");
    assert_eq!(sent["r4"], json!(["u1", "a-r1", "u2"]), "{seen:#}");
    assert_eq!(
        sent["r5"],
        json!(["u1", "a-r1", "u2", "a-r3", "u3"]),
        "{seen:#}"
    );
    // After every fork, the agent that forked and the one that joined after
    // the first run (live) hold exactly the gateway's snapshot.
    for (run, expected) in [
        ("r3", vec!["u1", "a-r1", "u2", "a-r3"]),
        ("r4", vec!["u1", "a-r1", "u2", "a-r4"]),
        ("r5", vec!["u1", "a-r1", "u2", "a-r3", "u3", "a-r5"]),
    ] {
        let v = &seen["views"][run];
        assert_eq!(ids(&v["snapshot"]), expected, "{run}: {v:#}");
        assert_eq!(v["a"], v["snapshot"], "{run}: the forking agent: {v:#}");
        assert_eq!(v["b"], v["snapshot"], "{run}: the live viewer: {v:#}");
        assert_eq!(v["ackRunId"], run);
        assert_eq!(v["headRunId"], run);
        assert_eq!(v["aHead"], run);
        assert_eq!(v["bHead"], run);
        assert_eq!(v["bRun"]["runId"], run);
        assert_eq!(v["bRun"]["status"], "finished");
    }
    assert_eq!(seen["views"]["r3"]["bRun"]["parentRunId"], "r1");
    assert_eq!(seen["views"]["r3"]["bRun"]["kind"], "regenerate");
    assert_eq!(seen["views"]["r4"]["bRun"]["kind"], "edit");
    assert_eq!(seen["views"]["r4"]["snapshot"][2]["content"], "two, edited");
    assert_eq!(seen["views"]["r5"]["bRun"]["parentRunId"], "r3");
    assert_eq!(seen["views"]["r5"]["bRun"]["kind"], "branch");
    // The viewer cut off before the forks resumed after its last seq (no
    // fresh snapshot) and ends where the gateway does.
    let l = &seen["l"];
    assert_eq!(l["resumedFrom"], seen["lJoinedAt"], "{l:#}");
    assert_eq!(
        l["snapshots"],
        json!([]),
        "resumed, not re-snapshotted: {l:#}"
    );
    assert_eq!(l["messages"], seen["final"], "{l:#}");
    assert_eq!(l["head"], "r5");
    // The tree: r2, r3 and r4 are siblings on r1; r5 continues r3.
    let tree = &seen["tree"];
    assert_eq!(tree["headRunId"], "r5");
    let runs: Vec<(String, Value, String)> = tree["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["runId"].as_str().unwrap().to_owned(),
                r["parentRunId"].clone(),
                r["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        runs,
        vec![
            ("r1".into(), Value::Null, "continue".into()),
            ("r2".into(), json!("r1"), "continue".into()),
            ("r3".into(), json!("r1"), "regenerate".into()),
            ("r4".into(), json!("r1"), "edit".into()),
            ("r5".into(), json!("r3"), "branch".into()),
        ],
        "{tree:#}"
    );
    assert_eq!(seen["page1"], 2, "a page of two has a next cursor");
    // The view at a run that is no longer on the head's branch.
    assert_eq!(
        seen["at"]["r2"],
        json!(["u1:one", "a-r1:re: one", "u2:two", "a-r2:re: two"])
    );
    assert_eq!(
        seen["at"]["r4"],
        json!([
            "u1:one",
            "a-r1:re: one",
            "u2:two, edited",
            "a-r4:re: two, edited"
        ])
    );
    assert_eq!(seen["unknownMessage"], "not_found");
}

#[tokio::test]
async fn a_session_folds_its_own_run_names_runs_in_acks_and_honours_abort_signals() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = gateway(&py, "").await;
    let t = token(json!({"sub": "tia"}));
    let seen = script("typed.mjs", &[&gw.base, &t, "demo"]).await;
    assert_eq!(seen["ackRunId"], "r1", "{seen:#}");
    assert_eq!(seen["regenerateAckRunId"], "r2", "{seen:#}");
    // The starter's own view is the gateway's, after its run and after a fork.
    let after_r1 = seen["messagesAfterR1"].as_array().unwrap();
    assert_eq!(
        after_r1.first().map(|m| &m["id"]),
        Some(&json!("u1")),
        "the starter's own question, folded: {seen:#}"
    );
    assert!(
        after_r1
            .iter()
            .any(|m| m["role"] == "assistant"
                && m["content"].as_str().is_some_and(|c| !c.is_empty())),
        "the answer, folded: {seen:#}"
    );
    assert_eq!(seen["messagesAfterR1"], seen["snapshotAfterR1"], "{seen:#}");
    assert_eq!(seen["messagesAfterR2"], seen["snapshotAfterR2"], "{seen:#}");
    assert_eq!(seen["watcherMessagesAfterR2"], seen["snapshotAfterR2"]);
    // events(): every seq of the run once, in order, ending with its end.
    let iterated = seen["iterated"].as_array().unwrap();
    let seqs: Vec<u64> = iterated.iter().map(|p| p[0].as_u64().unwrap()).collect();
    assert!(gapless_from(&seqs, 1), "{seqs:?}");
    assert_eq!(seqs.last().copied(), seen["seqAfterR1"].as_u64());
    assert_eq!(iterated[0][1], "RUN_STARTED");
    assert_eq!(iterated.last().unwrap()[1], "RUN_FINISHED");
    // A regenerated first run has no base: null, not the previous head.
    for who in ["latestRun", "watcherRun"] {
        assert_eq!(seen[who]["runId"], "r2", "{who}: {seen:#}");
        assert_eq!(seen[who]["kind"], "regenerate", "{who}: {seen:#}");
        assert_eq!(seen[who]["parentRunId"], Value::Null, "{who}: {seen:#}");
    }
    assert_eq!(seen["abortedBefore"], "aborted");
    assert_eq!(seen["abortedWaiting"], "aborted");
    assert_eq!(seen["iteratorAfterAbort"]["done"], true);
    assert_eq!(seen["withoutRetry"], "disconnected", "{seen:#}");
    assert_eq!(seen["retriedAck"], "ack", "{seen:#}");
}

#[tokio::test]
async fn the_readme_quick_start_runs_as_written_and_an_agent_attaches_before_the_first_run() {
    let gw = Gateway::start(
        "[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
         [[agents]]\nid = \"support\"\nurl = \"demo:\"\n",
    )
    .await;
    // The team's token grants `view` and `run` on its threads; the runner
    // of the agent's thread holds nothing but its own runs.
    let grantee = token(json!({"sub": "tia", "threads": {"team-7-*": ["view", "run"]}}));
    let runner = token(json!({"sub": "rob"}));
    let seen = script("early.mjs", &[&gw.base, &grantee, &runner]).await;
    assert!(
        seen["quickStartCode"]
            .as_str()
            .unwrap()
            .contains("await thread.subscribe(); await thread.run("),
        "the README's block: {seen:#}"
    );
    // Every event of the run it started after subscribing, from seq 1.
    let rendered = seen["rendered"].as_array().unwrap();
    let seqs: Vec<u64> = rendered.iter().map(|r| r[0].as_u64().unwrap()).collect();
    assert!(gapless_from(&seqs, 1), "{seen:#}");
    assert_eq!(rendered[0][1], "RUN_STARTED");
    assert_eq!(rendered.last().unwrap()[1], "RUN_FINISHED");
    // The agent subscribed to the empty thread and folded the first run.
    assert_eq!(
        seen["attached"],
        json!({"seq": 0, "ready": true}),
        "{seen:#}"
    );
    assert_eq!(seen["watcherMessages"], seen["runnerMessages"], "{seen:#}");
    assert_eq!(
        seen["watcherMessages"][0]["content"],
        "hello from the runner"
    );
}

#[tokio::test]
async fn a_session_lists_who_watches_and_tells_joins_and_leaves() {
    let gw = Gateway::start(
        "[threads]\npresence_interval = \"100ms\"\n[demo]\nenabled = true\n\
         [[agents]]\nid = \"support\"\nurl = \"demo:\"\n",
    )
    .await;
    let ann = token(json!({"sub": "ann", "name": "Ann", "threads": {"team-7-*": ["view"]}}));
    let ben = token(json!({"sub": "ben", "threads": {"team-7-*": ["view"]}}));
    let seen = script("presence.mjs", &[&gw.base, &ann, &ben]).await;
    assert_eq!(seen["atJoin"], json!(["ann"]), "{seen:#}");
    assert_eq!(
        seen["bothA"],
        json!([{"userId": "ann", "name": "Ann", "connections": 1},
               {"userId": "ben", "name": null, "connections": 1}]),
        "{seen:#}"
    );
    assert_eq!(
        seen["events"],
        json!([{"joined": ["ben"], "left": []}, {"joined": [], "left": ["ben"]}]),
        "{seen:#}"
    );
    // Typing: told to Ann, the immediate repeat throttled by the package.
    assert_eq!(seen["lapseMs"], 500, "{seen:#}");
    assert_eq!(seen["repeat"], Value::Null, "{seen:#}");
    assert_eq!(seen["benTyping"], true, "{seen:#}");
}
