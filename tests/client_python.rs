//! The Python client (`clients/python`, distribution `agui-gateway-client`)
//! against a real gateway and real agents: `clients/python/tests/scenarios.py`
//! runs one scenario with the test venv's Python (the package from its
//! source tree) and prints what it saw; the assertions are here.

mod common;

use common::*;
use serde_json::{Value, json};

/// Runs one scenario and returns the JSON object it prints (a `failure`
/// fails the test).
///
/// The package comes from its source tree, or, with
/// `AGUI_TEST_PY_CLIENT=<python>`, from that Python's installed
/// distribution (`clients/python/tests/packed.sh`: the built wheel in a
/// fresh venv).
async fn scenario(args: &[&str]) -> Value {
    let package = repo().join("clients/python");
    let mut cmd = match std::env::var_os("AGUI_TEST_PY_CLIENT") {
        Some(installed) => tokio::process::Command::new(installed),
        None => {
            let mut c = tokio::process::Command::new(python());
            c.env("PYTHONPATH", package.join("src"));
            c
        }
    };
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(90),
        cmd.arg(package.join("tests/scenarios.py"))
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("scenario {args:?} timed out"))
    .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().rfind(|l| l.starts_with('{')).unwrap_or("");
    let seen: Value = serde_json::from_str(last).unwrap_or_else(|e| {
        panic!(
            "{args:?}: {e}: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        seen.get("failure").is_none(),
        "{}\n{seen:#}",
        seen["failure"].as_str().unwrap_or("")
    );
    seen
}

/// True when `seqs` go up by one from `first`.
fn gapless_from(seqs: &Value, first: u64) -> bool {
    let seqs = seqs.as_array().unwrap();
    !seqs.is_empty()
        && seqs
            .iter()
            .enumerate()
            .all(|(i, s)| s.as_u64() == Some(first + i as u64))
}

async fn gateway(py: &PyAgent) -> Gateway {
    Gateway::start(&format!(
        "[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
         [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n\
         [[agents]]\nid = \"gated\"\nurl = \"{}\"\n",
        py.url("gated")
    ))
    .await
}

#[tokio::test]
async fn python_sessions_share_a_thread_fork_it_and_hold_the_gateways_view() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = gateway(&py).await;
    let t = token(json!({"sub": "pia"}));
    let seen = scenario(&["sessions", &gw.base, &t, "demo"]).await;
    assert_eq!(seen["subscribeBeforeThread"], "not_found", "{seen:#}");
    assert_eq!(seen["ackRunId"], "r1");
    assert_eq!(seen["regenerateAckRunId"], "r2");
    assert_eq!(seen["editAckRunId"], "r3");
    // Every event of the run once, in order, typed with ag_ui.core's models.
    assert!(gapless_from(&seen["aSeqs"], 1), "{seen:#}");
    assert_eq!(seen["unknown"], json!([]), "{seen:#}");
    assert_eq!(seen["deltasTyped"], true);
    for class in [
        "RunStartedEvent",
        "TextMessageContentEvent",
        "RunFinishedEvent",
    ] {
        assert!(
            seen["typedClasses"]
                .as_array()
                .unwrap()
                .contains(&json!(class)),
            "{class}: {seen:#}"
        );
    }
    // The starter's own view after its run is the gateway's.
    assert_eq!(seen["aMessagesR1"][0]["id"], "u1", "{seen:#}");
    assert_eq!(seen["aMessagesR1"], seen["snapshotR1"], "{seen:#}");
    // A fork of the first run has no base: None, on both sessions.
    for who in ["aRun", "bRun"] {
        assert_eq!(seen[who]["run_id"], "r2", "{who}: {seen:#}");
        assert_eq!(seen[who]["kind"], "regenerate", "{who}: {seen:#}");
        assert_eq!(seen[who]["parent_run_id"], Value::Null, "{who}: {seen:#}");
    }
    assert_eq!(seen["bRun3"]["kind"], "edit");
    // After the edit both sessions hold the gateway's snapshot.
    assert_eq!(seen["snapshot"][0]["content"], "hello again", "{seen:#}");
    assert_eq!(seen["aMessages"], seen["snapshot"], "{seen:#}");
    assert_eq!(seen["bMessages"], seen["snapshot"], "{seen:#}");
    let joined = seen["bJoinedAt"].as_u64().unwrap();
    assert!(gapless_from(&seen["bSeqs"], joined + 1), "{seen:#}");
    assert_eq!(seen["meta"], "ack");
    assert_eq!(seen["cancelIdle"], "conflict", "{seen:#}");
    assert_eq!(
        seen["tree"],
        json!([
            ["r1", null, "continue"],
            ["r2", null, "regenerate"],
            ["r3", null, "edit"]
        ]),
        "{seen:#}"
    );
}

#[tokio::test]
async fn a_python_session_resumes_after_its_last_seq_across_a_cut_connection() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = gateway(&py).await;
    let t = token(json!({"sub": "pia"}));
    let seen = scenario(&["cut", &gw.base, &t, "gated", &py.url("release")]).await;
    assert_eq!(seen["released"], 200);
    assert_eq!(seen["opens"], 2, "one reconnect: {seen:#}");
    assert_eq!(
        seen["snapshots"], 0,
        "resumed, not re-snapshotted: {seen:#}"
    );
    let after = seen["seqBeforeCut"].as_u64().unwrap();
    assert!(gapless_from(&seen["seqs"], after + 1), "{seen:#}");
    assert_eq!(seen["lastSeq"], seen["snapshotSeq"]);
    assert_eq!(seen["text"], "part1part2", "{seen:#}");
}

#[tokio::test]
async fn a_python_connection_refreshes_an_expiring_token_on_the_open_socket() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = gateway(&py).await;
    let seen = scenario(&["refresh", &gw.base, SECRET, "gated", &py.url("release")]).await;
    assert_eq!(seen["endType"], "RUN_FINISHED", "{seen:#}");
    assert_eq!(seen["opens"], 1, "one socket, never reopened: {seen:#}");
    assert!(seen["refreshes"].as_u64().unwrap() >= 1, "{seen:#}");
    let asked = seen["asked"].as_array().unwrap();
    assert_eq!(asked[0], "initial");
    assert!(asked[1..].iter().all(|r| r == "expiring"), "{seen:#}");
    assert!(seen["pastFirstExpiry"].as_f64().unwrap() >= 1.0);
}

#[tokio::test]
async fn a_python_session_resumes_on_a_fresh_token_after_the_gateway_closes_an_expired_one() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = gateway(&py).await;
    let seen = scenario(&["expiry", &gw.base, SECRET, "gated", &py.url("release")]).await;
    assert_eq!(seen["asked"], json!(["initial", "rejected"]), "{seen:#}");
    assert_eq!(seen["opens"], 2, "{seen:#}");
    assert_eq!(
        seen["snapshots"], 0,
        "resumed, not re-snapshotted: {seen:#}"
    );
    let after = seen["seqBeforeExpiry"].as_u64().unwrap();
    assert!(gapless_from(&seen["seqs"], after + 1), "{seen:#}");
    assert_eq!(seen["text"], "part1part2", "{seen:#}");
}

#[tokio::test]
async fn a_python_command_sent_while_disconnected_is_retried_after_the_reconnect() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = gateway(&py).await;
    let t = token(json!({"sub": "pia"}));
    let seen = scenario(&["retry", &gw.base, &t, "demo"]).await;
    assert_eq!(seen["withoutRetry"], "disconnected", "{seen:#}");
    assert_eq!(seen["withRetry"], "ack", "{seen:#}");
}

#[tokio::test]
async fn the_python_cli_watches_a_thread_live() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = gateway(&py).await;
    let t = token(json!({"sub": "pia"}));
    let seen = scenario(&["cli", &gw.base, &t, "demo"]).await;
    let head = seen["head"].as_str().unwrap();
    assert!(head.starts_with("snapshot seq="), "{seen:#}");
    assert!(head.ends_with("head=c1"), "{seen:#}");
    let joined: u64 = head["snapshot seq=".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let lines = seen["lines"].as_array().unwrap();
    let seqs: Vec<Value> = lines.iter().map(|l| l[0].clone()).collect();
    assert!(gapless_from(&json!(seqs), joined + 1), "{seen:#}");
    assert_eq!(lines[0][1], "RUN_STARTED");
    assert_eq!(lines.last().unwrap()[1], "RUN_FINISHED");
    assert_eq!(lines.last().unwrap()[0], seen["sessionSeq"]);
    // `run` from the shell: its run's events, from its start to its end.
    assert_eq!(seen["runExit"], 0, "{seen:#}");
    assert_eq!(seen["runTypes"][0], "RUN_STARTED", "{seen:#}");
    let types = seen["runTypes"].as_array().unwrap();
    assert_eq!(types.last().unwrap(), "RUN_FINISHED", "{seen:#}");
    assert_eq!(seen["runInput"], "third", "{seen:#}");
}

#[tokio::test]
async fn a_python_session_lists_who_watches_a_thread_not_yet_run() {
    let gw = Gateway::start("[threads]\npresence_interval = \"100ms\"\n").await;
    let grant = json!({"team-7-*": ["view"]});
    let ann = token(json!({"sub": "ann", "threads": grant}));
    let ben = token(json!({"sub": "ben", "threads": grant}));
    let seen = scenario(&["presence", &gw.base, &ann, &ben]).await;
    assert_eq!(seen["atJoin"], json!(["ann"]), "{seen:#}");
    assert_eq!(seen["both"], json!(["ann", "ben"]), "{seen:#}");
    assert_eq!(seen["after"], json!(["ann"]), "{seen:#}");
    assert_eq!(seen["lapseMs"], 500, "{seen:#}");
    assert_eq!(seen["repeat"], Value::Null, "{seen:#}");
    assert_eq!(seen["typing"], json!(["ben"]), "{seen:#}");
}
