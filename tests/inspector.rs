//! The inspector page: served by the gateway, strict about what a browser
//! may load, and — driven in a real headless Chromium by
//! `tests/interop/inspector.mjs` — usable by two people on one thread.

mod common;

use common::*;
use serde_json::{Value, json};

fn config(py: &PyAgent) -> String {
    let mut config =
        "[inspector]\nenabled = true\n[demo]\nenabled = true\ntoken_delay = \"15ms\"\n\
         [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n"
            .to_owned();
    for scenario in ["xss", "activity", "gated"] {
        config += &format!(
            "[[agents]]\nid = \"{scenario}\"\nurl = \"{}\"\n",
            py.url(scenario)
        );
    }
    config
}

/// Runs a page script from `tests/interop` (it drives Chromium) and returns
/// the JSON object it prints. More patient than `node_client`: these scripts
/// wait through token expiries and outages on a busy machine.
async fn page_script(script: &str, args: &[&str]) -> Value {
    if !std::path::Path::new("/usr/bin/chromium").exists() {
        panic!("/usr/bin/chromium is missing: `bash .ci/run` installs Debian's chromium");
    }
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(90),
        tokio::process::Command::new("node")
            .arg(repo().join("tests/interop").join(script))
            .args(args)
            .current_dir(repo().join("tests/interop"))
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("node {script} timed out"))
    .expect("node runs");
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{script}: {e}: {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    if let Some(failure) = seen.get("failure") {
        // The script's own failure first: CI's summary shows one line.
        panic!("{script} failed: {failure}\nthe page saw: {seen:#}");
    }
    seen
}

/// The public development secret of the shipped config: the only one on
/// which the page offers to mint tokens.
const DEV_SECRET: &str = "agui-gateway-development-secret-change-me";

/// A gateway on [`DEV_SECRET`] with the inspector on, plus `extra` config.
async fn dev_gateway(extra: &str) -> Gateway {
    Gateway::start_config(
        &format!(
            "[auth]\nalgorithms = [\"HS256\"]\nhs_secret = \"{DEV_SECRET}\"\n\
             [inspector]\nenabled = true\n{extra}"
        ),
        &[],
    )
    .await
}

/// A token from the page's development mint, as the page asks for one.
async fn mint_dev_token(gw: &Gateway, sub: &str) -> String {
    let minted: Value = json_of(
        http()
            .post(gw.url("/inspector/dev-token"))
            .json(&json!({"sub": sub, "roles": ["admin"]})),
    )
    .await;
    minted["token"].as_str().unwrap().to_owned()
}

/// The status `GET /v1/agents` answers with `token`: 200 for a real one.
async fn agents_status(gw: &Gateway, token: &str) -> u16 {
    let resp = http()
        .get(gw.url("/v1/agents"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    resp.status().as_u16()
}

/// `[seq, type]` timeline rows from a page script.
fn rows(v: &Value) -> Vec<(u64, String)> {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("rows: {e}: {v}"))
}

/// Seconds since the epoch.
fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test]
async fn the_page_is_served_with_a_strict_policy_and_only_where_configured() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&config(&py)).await;
    let redirect = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(gw.url("/inspector"))
        .send()
        .await
        .unwrap();
    assert_eq!(redirect.status(), 308);
    assert_eq!(redirect.headers()["location"], "/inspector/");
    for (path, kind) in [
        ("/inspector/", "text/html"),
        ("/inspector/app.js", "text/javascript"),
        ("/inspector/app.css", "text/css"),
        ("/inspector/agui-gateway-client.js", "text/javascript"),
    ] {
        let resp = http().get(gw.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let headers = resp.headers().clone();
        assert!(
            headers["content-type"].to_str().unwrap().starts_with(kind),
            "{path}"
        );
        let csp = headers["content-security-policy"].to_str().unwrap();
        for rule in [
            "default-src 'none'",
            "script-src 'self'",
            "connect-src 'self'",
            "frame-ancestors 'none'",
        ] {
            assert!(csp.contains(rule), "{path}: {csp}");
        }
        let body = resp.text().await.unwrap();
        assert!(
            !body.contains("https://") && !body.contains("http://"),
            "no third-party origin in {path}"
        );
    }
    let html = http()
        .get(gw.url("/inspector/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        !html.contains("<script>") && !html.contains("style="),
        "no inline script or style"
    );
    // With a real secret there is no token minting.
    let config: Value = json_of(http().get(gw.url("/inspector/config.json"))).await;
    assert_eq!(config["devTokens"], false);
    let mint = http()
        .post(gw.url("/inspector/dev-token"))
        .json(&json!({"sub": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(mint.status(), 404);
    // Not configured: not served.
    let plain = Gateway::start("").await;
    assert_eq!(
        http()
            .get(plain.url("/inspector/"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
}

#[tokio::test]
async fn on_the_development_secret_the_page_can_mint_a_development_token() {
    let gw = dev_gateway("").await;
    let config: Value = json_of(http().get(gw.url("/inspector/config.json"))).await;
    assert_eq!(config["devTokens"], true);
    let token = mint_dev_token(&gw, "dana").await;
    assert_eq!(
        agents_status(&gw, &token).await,
        200,
        "the minted token works"
    );
}

#[tokio::test]
async fn two_people_watch_steer_and_reload_one_thread_in_a_real_browser() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&config(&py)).await;
    let ann = token(json!({"sub": "ann"}));
    let ben = token(json!({"sub": "ben", "threads": {"shared-1": ["view", "resume", "meta"]}}));
    let shots = std::env::var("UPDATE_SCREENSHOTS")
        .ok()
        .map(|_| repo().join("docs").display().to_string());
    let release = py.url("release");
    let mut args = vec![
        gw.base.as_str(),
        ann.as_str(),
        ben.as_str(),
        release.as_str(),
    ];
    if let Some(dir) = &shots {
        args.push(dir);
    }
    let seen = page_script("inspector.mjs", &args).await;
    assert_eq!(seen["tokenInUrl"], false);
    assert_eq!(seen["streamedWhileRunning"], true, "{seen:#}");
    // Ben joins at the interrupt: his snapshot is at exactly the seq of the
    // last event Ann saw live (1, 2, … without a gap).
    let rows = |key: &str| rows(&seen[key]);
    let ann_at = rows("annRowsAtInterrupt");
    let ann_seqs: Vec<u64> = ann_at.iter().map(|(s, _)| *s).collect();
    assert_eq!(ann_seqs, (1..=ann_seqs.len() as u64).collect::<Vec<_>>());
    assert_eq!(ann_at.last().unwrap().1, "RUN_FINISHED", "{ann_at:?}");
    assert_eq!(
        rows("benRowsAtInterrupt"),
        vec![(ann_seqs.len() as u64, "snapshot".to_owned())],
        "{seen:#}"
    );
    // From there on both saw the same events live: same seqs, same types.
    let after = |key: &str| -> Vec<(u64, String)> {
        rows(key)
            .into_iter()
            .filter(|(s, _)| *s > ann_seqs.len() as u64)
            .collect()
    };
    let (ann_live, ben_live) = (after("annRowsAfterApproval"), after("benRowsAfterApproval"));
    assert_eq!(ann_live, ben_live, "{seen:#}");
    assert_eq!(
        ann_live.first().map(|r| r.1.as_str()),
        Some("RUN_STARTED"),
        "{seen:#}"
    );
    assert_eq!(
        ann_live.last().map(|r| r.1.as_str()),
        Some("RUN_FINISHED"),
        "{seen:#}"
    );
    // The form offered what the agent proposed; Ben's edited amount is the
    // one the agent executed, as Ann sees it.
    assert_eq!(
        seen["benProposed"],
        json!({"amount": "25", "to": "bob"}),
        "pre-filled with what Ann asked for: {seen:#}"
    );
    assert_eq!(
        seen["annRunFinished"], 2,
        "the approved run continued: {seen:#}"
    );
    assert!(
        seen["annStatus"].as_str().unwrap().starts_with("finished"),
        "{seen:#}"
    );
    assert_eq!(
        seen["annReply"], "Done: the transfer of 30 to bob went through.",
        "{seen:#}"
    );
    let state = seen["annState"].as_str().unwrap();
    assert!(
        state.contains("approved") && state.contains("amount: 30"),
        "{seen:#}"
    );
    assert!(
        seen["annSawThumbsUp"].as_str().unwrap().contains("ben"),
        "{seen:#}"
    );
    // Ann reloaded while the gated run was held open: her page joined it
    // running, then followed it live to its end.
    assert_eq!(seen["switchStatus"], 200, "{seen:#}");
    assert!(
        seen["annStatusAfterReload"]
            .as_str()
            .unwrap()
            .starts_with("running"),
        "{seen:#}"
    );
    assert_eq!(seen["released"], 200, "{seen:#}");
    // The reload lost and repeated nothing: gapless seqs from the snapshot
    // on, the run's end seen live, same story as Ben's.
    assert_eq!(seen["annGapNotices"], 0, "{seen:#}");
    let seqs: Vec<u64> = serde_json::from_value(seen["annSeqsAfterReload"].clone()).unwrap();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    assert!(
        seqs.len() >= 3,
        "a snapshot, then the run's rest live: {seqs:?}"
    );
    let last = |v: &Value| {
        v.as_array()
            .unwrap()
            .last()
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        last(&seen["annMessagesAfterReload"]),
        "part1part2",
        "{seen:#}"
    );
    assert_eq!(last(&seen["benMessages"]), "part1part2", "{seen:#}");
    // The agent's script, and a person's, stayed text wherever it was shown.
    assert_eq!(seen["pwned"], Value::Null, "{seen:#}");
    assert_eq!(seen["imagesInPage"], 0);
    assert_eq!(seen["scriptsInPage"], json!(["app.js"]));
    let agent_payload = "<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=2</script>";
    for key in [
        "xssText",
        "xssReasoning",
        "xssActivity",
        "xssSubagent",
        "xssInterrupt",
        "xssInterruptComment",
    ] {
        assert!(
            seen[key].as_str().unwrap().contains(agent_payload),
            "{key}: {seen:#}"
        );
    }
    assert_eq!(
        seen["xssMeta"]
            .as_str()
            .unwrap()
            .matches("onerror=\"window.__pwned=4\"")
            .count(),
        2,
        "the note and the tag, as text: {seen:#}"
    );
    assert_eq!(seen["errors"], json!([]), "no page errors: {seen:#}");
}

#[tokio::test]
async fn the_page_reconnects_after_a_gateway_restart_and_resumes_after_its_last_seq() {
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
             [inspector]\nenabled = true\n[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
             [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n"
        ),
    )
    .unwrap();
    let gw = Gateway::start_file(&path, &[]).await;
    let t = token(json!({"sub": "ria"}));
    let (status, _) = post_run(&gw.run_url("demo"), &t, &input("again", "r1", "hello")).await;
    assert_eq!(status, 200);
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(repo().join("tests/interop/inspector_reconnect.mjs"))
        .args([gw.base.as_str(), t.as_str(), "again"])
        .current_dir(repo().join("tests/interop"));
    let mut page = Proc::spawn(cmd);
    page.expect_line("watching").await;
    // The gateway restarts on the same port: the page must come back alone.
    let gw = gw.restart().await;
    page.expect_line("reconnected").await;
    let mut next = input("again", "r2", "and again");
    next["messages"][0]["id"] = "m-again-2".into();
    let (status, _) = post_run(&gw.run_url("demo"), &t, &next).await;
    assert_eq!(status, 200);
    let line = page.expect_line("{").await;
    let seen: Value = serde_json::from_str(&line).unwrap();
    assert!(seen.get("failure").is_none(), "{seen:#}");
    assert_eq!(seen["sawOutage"], true);
    assert_eq!(seen["gaps"], json!([]), "{seen:#}");
    let rows: Vec<(u64, String)> = serde_json::from_value(seen["rows"].clone()).unwrap();
    let seqs: Vec<u64> = rows.iter().map(|(s, _)| *s).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "one snapshot, then every seq once, across the restart: {rows:?}"
    );
    assert_eq!(rows[0].1, "snapshot", "{rows:?}");
    assert_eq!(
        rows.iter().filter(|(_, t)| t == "RUN_STARTED").count(),
        1,
        "the run after the restart, once: {rows:?}"
    );
    assert_eq!(rows.last().unwrap().1, "RUN_FINISHED", "{rows:?}");
    assert_eq!(seen["errors"], json!([]), "{seen:#}");
}

#[tokio::test]
async fn a_guest_sees_in_the_page_exactly_what_the_policy_lets_any_viewer_see() {
    let policy = repo().join("config/policies/support-bot.toml");
    let gw = Gateway::start(&format!(
        "[policy]\npath = \"{}\"\n[inspector]\nenabled = true\n[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
         [[agents]]\nid = \"support\"\nurl = \"demo:\"\n",
        policy.display()
    ))
    .await;
    let staff = token(json!({"sub": "sam", "roles": ["staff"]}));
    let guest = token(json!({"sub": "gus", "roles": ["guest"], "threads": {"help": ["view"]}}));
    let (status, _) = post_run(
        &gw.run_url("support"),
        &staff,
        &input("help", "r1", "hi there"),
    )
    .await;
    assert_eq!(status, 200);
    let as_staff = node_client("inspector_view.mjs", &[&gw.base, &staff, "help"]).await;
    let as_guest = node_client("inspector_view.mjs", &[&gw.base, &guest, "help"]).await;
    assert!(as_staff.get("failure").is_none(), "{as_staff:#}");
    assert!(as_guest.get("failure").is_none(), "{as_guest:#}");
    assert!(
        as_staff["reasoning"].as_u64().unwrap() > 0,
        "staff sees reasoning: {as_staff:#}"
    );
    assert_eq!(as_guest["reasoning"], 0, "a guest sees none: {as_guest:#}");
    assert!(
        as_guest["conversation"]
            .as_str()
            .unwrap()
            .contains("hi there"),
        "{as_guest:#}"
    );
}

#[tokio::test]
async fn activity_subagents_and_custom_events_are_grouped_live_and_from_a_snapshot() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&config(&py)).await;
    let t = token(json!({"sub": "ada"}));
    let seen = page_script("inspector_activity.mjs", &[&gw.base, &t]).await;
    assert_eq!(seen["errors"], Value::Null, "no page errors: {seen:#}");
    for (when, v) in [("live", &seen["live"]), ("snapshot", &seen["snapshot"])] {
        // One block per activity message, where its subagent is; the
        // deltas applied, the `replace: false` snapshot ignored.
        let activities = v["activities"].as_array().unwrap();
        let ids: Vec<(&str, &Value)> = activities
            .iter()
            .map(|a| (a["id"].as_str().unwrap(), &a["subagent"]))
            .collect();
        assert_eq!(
            ids,
            [("plan", &Value::Null), ("search", &json!("sa-research"))],
            "{when}: {v:#}"
        );
        let plan = activities[0]["text"].as_str().unwrap();
        assert!(
            plan.contains("\"search\"") && plan.contains("\"write\"") && plan.contains("\"done\""),
            "{when}: {plan}"
        );
        assert!(!plan.contains("working"), "{when}: {plan}");
        assert!(
            activities[1]["text"].as_str().unwrap().contains("found: 3"),
            "{when}: {v:#}"
        );
        // The subagent's message sits in its group, not in the conversation.
        let research = &v["subagents"][0];
        assert_eq!(research["id"], "sa-research", "{when}: {v:#}");
        assert_eq!(research["messages"], json!(["found 3 sources"]), "{when}");
        assert!(
            !v["topLevelMessages"]
                .as_array()
                .unwrap()
                .contains(&json!("found 3 sources")),
            "{when}: {v:#}"
        );
        assert_eq!(
            v["topLevelMessages"].as_array().unwrap().last().unwrap(),
            "summary written"
        );
        // Reasoning that went on after a MESSAGES_SNAPSHOT is one visible block.
        assert_eq!(
            v["reasoning"],
            json!(["reasoningfirst thought, then more"]),
            "{when}: {v:#}"
        );
        assert_eq!(v["rawLines"], 0, "{when}: no raw event dumps: {v:#}");
        assert_eq!(v["notices"], json!([]), "{when}: {v:#}");
    }
    // Live only: the subagents' lifecycle and the custom events (neither is
    // part of a thread's snapshot).
    let live = &seen["live"];
    assert_eq!(
        live["subagents"],
        json!([
            {"id": "sa-research", "name": "researcher", "status": "finished",
             "outcome": "result: 3 sources", "messages": ["found 3 sources"]},
            {"id": "sa-writer", "name": "writer", "status": "error",
             "outcome": "error quota: quota exceeded", "messages": []},
        ]),
        "{live:#}"
    );
    assert_eq!(
        live["customs"],
        json!([{"name": "progress", "count": "×2", "latest": "{\"pct\":100}"}]),
        "{live:#}"
    );
}

#[tokio::test]
async fn the_page_rides_out_a_network_drop_mid_run_and_resumes_after_its_last_seq() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&config(&py)).await;
    let t = token(json!({"sub": "dora"}));
    let seen = page_script("inspector_drop.mjs", &[&gw.base, &t, &py.url("release")]).await;
    assert_eq!(seen["sawOutage"], true, "{seen:#}");
    assert_eq!(seen["released"], 200, "{seen:#}");
    assert_eq!(seen["liveWhileOffline"], false, "{seen:#}");
    assert!(
        seen["sockets"].as_u64().unwrap() >= 2,
        "it reconnected: {seen:#}"
    );
    // The reconnect asked for what followed the last seq it had.
    let before = seen["lastSeqBeforeDrop"].as_u64().unwrap();
    let resubscribe = seen["subscribes"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(resubscribe["threadId"], "drop-1", "{seen:#}");
    assert_eq!(resubscribe["after"], before, "{seen:#}");
    // Every seq once, in order, from the run's start to its end; nothing
    // was missing, so nothing was called a gap.
    let rows = rows(&seen["rows"]);
    let seqs: Vec<u64> = rows.iter().map(|(s, _)| *s).collect();
    assert_eq!(
        seqs,
        (1..=rows.len() as u64).collect::<Vec<_>>(),
        "{rows:?}"
    );
    assert!(
        rows.len() as u64 > before,
        "events after the drop: {rows:?}"
    );
    assert_eq!(rows[0].1, "RUN_STARTED", "{rows:?}");
    assert_eq!(rows.last().unwrap().1, "RUN_FINISHED", "{rows:?}");
    assert_eq!(seen["gaps"], json!([]), "{seen:#}");
    assert_eq!(seen["message"], "part1part2", "{seen:#}");
    assert!(
        seen["status"].as_str().unwrap().starts_with("finished"),
        "{seen:#}"
    );
    assert_eq!(seen["errors"], json!([]), "{seen:#}");
}

#[tokio::test]
async fn a_pasted_token_is_replaced_on_the_open_connection_and_errors_read_plainly() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("rate.toml");
    std::fs::write(
        &policy,
        "[[rules]]\nname = \"one-meta-a-minute\"\nkind = \"rate\"\naction = \"meta\"\nlimit = 1\n",
    )
    .unwrap();
    let gw = Gateway::start(&format!(
        "[policy]\npath = \"{}\"\n[inspector]\nenabled = true\n[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
         [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n",
        policy.display()
    ))
    .await;
    // Two tokens that expire within seconds, a replacement for the same
    // user, and a token for someone else.
    let short = token(json!({"sub": "tia", "exp": now() + 10}));
    let short2 = token(json!({"sub": "tia", "exp": now() + 10}));
    let replacement = token(json!({"sub": "tia"}));
    let stranger = token(json!({"sub": "ted"}));
    let seen = page_script(
        "inspector_token.mjs",
        &[&gw.base, &short, &short2, &replacement, &stranger],
    )
    .await;
    assert_eq!(seen["errors"], json!([]), "{seen:#}");
    // A countdown, ticking.
    assert_eq!(seen["countdownVisible"], true, "{seen:#}");
    let (c1, c2) = (
        seen["countdown1"].as_str().unwrap(),
        seen["countdown2"].as_str().unwrap(),
    );
    assert!(c1.starts_with("Your token expires in 0:"), "{c1}");
    assert_ne!(c1, c2, "the countdown ticks");
    // Someone else's token: refused by the gateway, in plain words.
    assert_eq!(
        seen["strangerRefused"],
        "The gateway refused the new token — Not allowed: a refreshed token must name the same user and tenant",
        "{seen:#}"
    );
    // The replacement was taken on the same connection, which outlived the
    // first token and still runs things.
    assert_eq!(seen["storedToken"], true, "{seen:#}");
    assert_eq!(seen["liveAfterExpiry"], true, "{seen:#}");
    assert!(
        seen["runAfterExpiry"]
            .as_str()
            .unwrap()
            .starts_with("finished"),
        "{seen:#}"
    );
    assert_eq!(seen["socketsA"], 1, "no reconnect: {seen:#}");
    // A rate limit says what it is and when to retry.
    let limited = seen["rateLimited"].as_str().unwrap();
    assert!(
        limited.starts_with("Your thumbs up was not posted — Too many requests:")
            && limited.contains("one-meta-a-minute")
            && limited.contains("try again in"),
        "{limited}"
    );
    // The page that let its token expire was closed by the gateway and
    // came back with the pasted one.
    assert!(
        seen["expiredNotice"]
            .as_str()
            .unwrap()
            .contains("no longer accepts your token"),
        "{seen:#}"
    );
    assert_eq!(seen["socketsB"], 2, "{seen:#}");
}

/// Browsing as one person: the thread list pages with its cursor and
/// filters by agent and status (each the query the page sends and the
/// gateway's answer shown as is), the timeline filters by event type, and a
/// development token is minted again before it expires and sent on the open
/// connection (the page's clock is jumped ahead; the gateway's is real).
#[tokio::test]
async fn the_thread_list_pages_and_filters_the_timeline_filters_and_a_dev_token_is_refreshed() {
    let gw = dev_gateway(
        "[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
         [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n\
         [[agents]]\nid = \"helper\"\nurl = \"demo:\"\n",
    )
    .await;
    let erin = mint_dev_token(&gw, "erin").await;
    // 52 finished demo threads, 3 helper threads, one waiting for approval:
    // more than the list's first page of 50.
    let mut created = Vec::new();
    for (agent, thread, text) in (0..52)
        .map(|i| ("demo", format!("d-{i:02}"), "hello"))
        .chain((0..3).map(|i| ("helper", format!("h-{i}"), "hello")))
        .chain([("demo", "pay".to_owned(), "please transfer")])
    {
        let (status, body) = post_run(&gw.run_url(agent), &erin, &input(&thread, "r1", text)).await;
        assert_eq!(status, 200, "{body}");
        created.push(thread);
    }
    created.sort();

    let seen = page_script(
        "inspector_browse.mjs",
        &[&gw.base, "erin", "d-07", "helper", "interrupted"],
    )
    .await;
    let ids = |v: &Value| -> Vec<String> { serde_json::from_value(v.clone()).unwrap() };

    // Two pages hold every thread once; "more" shows only while there is more.
    let first = &seen["firstPage"];
    assert_eq!(first["query"], "", "{seen:#}");
    assert_eq!(ids(&first["answered"]).len(), 50);
    assert_eq!(first["shown"], first["answered"]);
    assert_eq!(seen["moreShown"], true);
    let next = &seen["nextPage"];
    assert_eq!(next["query"], "?cursor=50");
    assert_eq!(ids(&next["answered"]).len(), 6);
    let mut both = ids(&next["shown"]);
    both.sort();
    assert_eq!(both, created, "both pages, each thread once");
    assert_eq!(seen["moreShownAfter"], false);

    // Filters go to the gateway and the page shows exactly its answer.
    let by_agent = &seen["byAgent"];
    assert_eq!(by_agent["query"], "?agent=helper");
    let mut helpers = ids(&by_agent["shown"]);
    helpers.sort();
    assert_eq!(helpers, ["h-0", "h-1", "h-2"]);
    let by_status = &seen["byStatus"];
    assert_eq!(by_status["query"], "?status=interrupted");
    assert_eq!(by_status["shown"], json!(["pay"]));

    // The timeline filter hides every other type, and hides nothing else.
    let shown = ids(&seen["timelineShown"]);
    let all = ids(&seen["timelineAll"]);
    assert!(!shown.is_empty(), "{seen:#}");
    assert!(shown.iter().all(|t| t == "TEXT_MESSAGE_CONTENT"));
    assert_eq!(
        shown.len(),
        all.iter().filter(|t| *t == "TEXT_MESSAGE_CONTENT").count()
    );
    assert!(all.iter().any(|t| t == "RUN_STARTED") && all.iter().any(|t| t == "RUN_FINISHED"));

    // The refresh: a new mint, sent as `auth` on the one socket and accepted.
    assert!(seen["mintsForRefresh"].as_u64().unwrap() >= 1, "{seen:#}");
    assert_eq!(seen["refreshAnswer"]["type"], "ack", "{seen:#}");
    assert_eq!(seen["sockets"], 1, "no reconnect");
    let refreshed = seen["refreshToken"].as_str().unwrap();
    assert_eq!(
        agents_status(&gw, refreshed).await,
        200,
        "the refreshed token is a real one"
    );
    assert_eq!(seen["status"], "live");
    assert_eq!(seen["errors"], json!([]));
}

/// First contact in a narrow window (600 px, a phone or a split screen):
/// before sign-in only the sign-in form shows (no "Start run" that could
/// only answer "unavailable"); signed in, nothing sticks out sideways and
/// the thread gets the window's width; the timeline follows new events
/// until the person scrolls up to read. `UPDATE_SCREENSHOTS=1` writes the
/// page as seen to docs/.
#[tokio::test]
async fn in_a_narrow_window_the_page_fits_shows_only_sign_in_first_and_the_timeline_follows() {
    let gw = dev_gateway(
        "[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
         [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n",
    )
    .await;
    let shots = std::env::var("UPDATE_SCREENSHOTS")
        .ok()
        .map(|_| repo().join("docs").display().to_string());
    let mut args = vec![gw.base.as_str()];
    if let Some(dir) = &shots {
        args.push(dir);
    }
    let seen = page_script("inspector_narrow.mjs", &args).await;
    assert_eq!(seen["errors"], json!([]), "no page errors: {seen:#}");
    assert_eq!(
        seen["beforeSignIn"],
        json!({"signin": true, "app": false, "runStart": false, "thread": false}),
        "{seen:#}"
    );
    assert_eq!(
        seen["afterSignIn"],
        json!({"signin": false, "app": true}),
        "{seen:#}"
    );
    let layout = &seen["layout"];
    let width = layout["width"].as_i64().unwrap();
    assert_eq!(
        layout["scrollWidth"], width,
        "no sideways scrolling: {layout:#}"
    );
    for part in ["aside", "thread", "conversation", "timeline", "feedback"] {
        let b = &layout[part];
        assert!(
            b["left"].as_i64().unwrap() >= 0 && b["right"].as_i64().unwrap() <= width,
            "{part} inside the window: {layout:#}"
        );
    }
    // One column: the thread below the agents and threads, as wide as they are.
    assert!(
        layout["thread"]["top"].as_i64() > layout["aside"]["top"].as_i64()
            && layout["thread"]["width"] == layout["aside"]["width"],
        "{layout:#}"
    );
    let followed = &seen["followed"];
    assert_eq!(
        followed["scrollable"], true,
        "enough rows to scroll: {seen:#}"
    );
    assert!(
        followed["fromBottom"].as_i64().unwrap() <= 2,
        "the newest row is in view: {seen:#}"
    );
    let reading = &seen["readingUp"];
    assert_eq!(
        reading["scrollTop"], 0,
        "scrolled up, the view stays put: {seen:#}"
    );
    assert!(reading["rows"].as_u64() > followed["rows"].as_u64());
}

/// Two people try a development gateway together, each signed in with a
/// token from the page's own mint: the thread one starts shows up in the
/// other's list by itself (development tokens share the tenant's threads;
/// the list is live), both lists follow its status, and the answer to its
/// interrupt shows in both conversations.
#[tokio::test]
async fn two_people_on_development_tokens_share_a_thread_and_see_its_answer_live() {
    let gw = dev_gateway(
        "[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
         [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n",
    )
    .await;
    let seen = page_script("inspector_share.mjs", &[&gw.base, "pair-1"]).await;
    assert_eq!(seen["errors"], json!([]), "no page errors: {seen:#}");
    for who in ["ann", "ben"] {
        let listed = seen[format!("{who}Listed")].as_str().unwrap();
        assert!(
            listed.starts_with("demo · interrupted · "),
            "{who}: {seen:#}"
        );
        let after = seen[format!("{who}ListedAfter")].as_str().unwrap();
        assert!(after.starts_with("demo · finished · "), "{who}: {seen:#}");
        let answers = &seen[format!("{who}Answers")];
        assert_eq!(answers.as_array().unwrap().len(), 1, "{who}: {seen:#}");
        assert_eq!(answers[0]["status"], "approved", "{who}: {seen:#}");
        let text = answers[0]["text"].as_str().unwrap();
        assert!(
            text.contains("Approve transfer_funds(")
                && text.contains("→ approved — amount: 30, to: bob"),
            "{who}: what was asked and what was answered: {text}"
        );
        assert_eq!(seen[format!("{who}Interrupts")], 0, "{who}: {seen:#}");
    }
    // The demo proposed what Ann asked for; Ben's edit is what it did.
    assert_eq!(
        seen["benProposed"],
        json!({"amount": "25", "to": "bob"}),
        "{seen:#}"
    );
    assert_eq!(
        seen["annReply"], "Done: the transfer of 30 to bob went through.",
        "{seen:#}"
    );
}

/// Branches from the page: regenerate an answer and edit a question (sent
/// through the package's session), watched by a second browser. Both
/// conversations follow the head — the newest answer only — the run list
/// shows the siblings (n/m), and the older sibling's view shows its old
/// answer, read-only. `UPDATE_SCREENSHOTS=1` writes docs/inspector-branches.png.
#[tokio::test]
async fn regenerate_and_edit_from_the_page_and_view_an_older_sibling() {
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&format!(
        "[inspector]\nenabled = true\n[[agents]]\nid = \"h\"\nurl = \"{}\"\n",
        py.url("history")
    ))
    .await;
    let t = token(json!({"sub": "ann"}));
    let shots = std::env::var("UPDATE_SCREENSHOTS")
        .ok()
        .map(|_| repo().join("docs").display().to_string());
    let mut args = vec![gw.base.as_str(), t.as_str(), "branch-1"];
    if let Some(dir) = &shots {
        args.push(dir);
    }
    let seen = page_script("inspector_branch.mjs", &args).await;
    assert_eq!(seen["errors"], json!([]), "no page errors: {seen:#}");
    let runs = |v: &Value| -> Vec<(String, String, Value, bool)> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["parent"].as_str().unwrap().to_owned(),
                    r["kind"].as_str().unwrap().to_owned(),
                    r["sibling"].clone(),
                    r["head"].as_bool().unwrap(),
                )
            })
            .collect()
    };
    let old = seen["replaced"].as_str().unwrap();
    let before = &seen["before"];
    assert_eq!(before.as_array().unwrap().len(), 4, "{seen:#}");
    assert_eq!(before[3], "assistant:re: two");
    // After the regenerate: one answer to "two" (the new one), for both.
    let after = &seen["afterRegenerate"];
    for who in ["ann", "ben"] {
        let shown = after[who].as_array().unwrap();
        assert_eq!(shown.len(), 4, "{who}: the new answer only: {after:#}");
        assert_eq!(shown[..3], before.as_array().unwrap()[..3], "{who}");
        assert_eq!(shown[3], "assistant:re: two");
    }
    // The run list: the first run, then the two siblings on it.
    let first = after["runs"][0]["run"].as_str().unwrap().to_owned();
    assert_eq!(
        runs(&after["runs"]),
        vec![
            (String::new(), "continue".into(), Value::Null, false),
            (first.clone(), "continue".into(), json!("1/2"), false),
            (first.clone(), "regenerate".into(), json!("2/2"), true),
        ],
        "{after:#}"
    );
    assert_eq!(
        after["runs"], after["benRuns"],
        "both pages list the same tree"
    );
    assert_eq!(
        format!("a-{}", after["runs"][1]["run"].as_str().unwrap()),
        old
    );
    // The answer shown is the regenerated run's, not the replaced one.
    let new = format!("a-{}", after["runs"][2]["run"].as_str().unwrap());
    for who in ["annIds", "benIds"] {
        assert_eq!(after[who][3], json!(new), "{who}: {after:#}");
        assert!(
            !after[who].as_array().unwrap().contains(&json!(old)),
            "{who}: {after:#}"
        );
    }
    // The older sibling: its own answer, shown read-only over the live view.
    let at = &seen["atOld"];
    assert_eq!(at["shown"].as_array().unwrap().len(), 4, "{at:#}");
    assert_eq!(at["shown"][3], "assistant:re: two");
    assert_eq!(at["ids"][3], old, "the older sibling's own answer: {at:#}");
    assert_eq!(at["liveHidden"], true);
    assert!(at["runs"][1]["viewing"].as_bool().unwrap(), "{at:#}");
    assert!(
        at["label"]
            .as_str()
            .unwrap()
            .contains(old.trim_start_matches("a-")),
        "{at:#}"
    );
    assert_eq!(seen["backToLive"]["shown"], after["ann"]);
    assert_eq!(seen["backToLive"]["atHidden"], true);
    // The edit: a third sibling; both pages show the edited question and
    // its answer only.
    let edit = &seen["afterEdit"];
    for who in ["ann", "ben"] {
        assert_eq!(
            edit[who],
            json!([
                before[0],
                before[1],
                "user:two, edited",
                "assistant:re: two, edited"
            ]),
            "{who}: {edit:#}"
        );
    }
    assert_eq!(
        runs(&edit["runs"])[1..],
        [
            (first.clone(), "continue".into(), json!("1/3"), false),
            (first.clone(), "regenerate".into(), json!("2/3"), false),
            (first, "edit".into(), json!("3/3"), true),
        ],
        "{edit:#}"
    );
    let edited = format!("a-{}", edit["runs"][3]["run"].as_str().unwrap());
    assert_eq!(edit["annIds"][3], json!(edited), "{edit:#}");
}

/// A handoff in the page: the approval the transfer needs is answered with
/// the page's own interrupt form (its message, Approve/Reject, no other
/// field), and then — live and from a snapshot — each assistant message
/// names the agent that spoke it, the handoff is marked in the conversation
/// (live) and on the timeline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_shows_who_speaks_and_its_approval_is_answered_in_the_page() {
    let py = PyAgent::start("handoff_agents.py").await;
    let gw = Gateway::start(&format!(
        "[inspector]\nenabled = true\n\
         [[agents]]\nid = \"triage\"\nurl = \"{}\"\nhandoff = {{ targets = [\"billing\"], approval = \"user\" }}\n\
         [[agents]]\nid = \"billing\"\nurl = \"{}\"\n",
        py.url("triage"),
        py.url("billing"),
    ))
    .await;
    let t = token(json!({"sub": "ada"}));
    let seen = page_script("inspector_handoff.mjs", &[&gw.base, &t, "ho-page"]).await;
    assert_eq!(seen["errors"], Value::Null, "no page errors: {seen:#}");
    let reply = seen["replyRun"].as_str().unwrap();
    assert!(
        reply.contains("billing · finished"),
        "the reply after the handoff went to billing: {seen:#}"
    );
    let asked = &seen["interrupt"];
    assert!(
        asked["text"]
            .as_str()
            .unwrap()
            .contains("Transfer to billing?"),
        "{asked}"
    );
    assert_eq!(asked["buttons"], json!(["Approve", "Reject"]));
    assert_eq!(asked["fields"], 0, "`approved` is the buttons: {asked}");
    for (when, v) in [("live", &seen["live"]), ("snapshot", &seen["snapshot"])] {
        let said: Vec<(&str, &Value)> = v["messages"]
            .as_array()
            .unwrap()
            .iter()
            // (triage's text message before its tool call is empty: only
            // the live page, which saw it start, shows it)
            .filter(|m| m["role"] == "assistant" && m["text"] != "")
            .map(|m| (m["text"].as_str().unwrap(), &m["agent"]))
            .collect();
        assert_eq!(
            said,
            [("Billing here: your invoice is paid.", &json!("billing"))],
            "{when}: {v:#}"
        );
        let billing = v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["agent"] == "billing")
            .unwrap();
        assert!(
            billing["label"].as_str().unwrap().contains("billing"),
            "{when}: {billing}"
        );
    }
    // The header names the agent speaking and who put it there: Ada, whose
    // approval let the handoff take place (live, and from the snapshot's
    // `activeAgentBy`).
    for when in ["live", "snapshot"] {
        assert_eq!(
            seen[when]["speaking"], "speaking: billing · by ada",
            "{when}: {seen:#}"
        );
    }
    let live = &seen["live"];
    assert!(
        live["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "assistant" && m["agent"] == "triage"),
        "triage's own message is named: {live:#}"
    );
    // The handoff record of billing's run, in the conversation and marked
    // on the timeline.
    assert_eq!(
        live["handoffs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| (&h["from"], &h["to"], &h["result"]))
            .collect::<Vec<_>>(),
        [(&json!("triage"), &json!("billing"), &json!("accepted"))],
        "{live:#}"
    );
    let rows = live["timeline"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{live:#}");
    assert!(
        rows[0]
            .as_str()
            .unwrap()
            .contains("handoff triage → billing (accepted)"),
        "{rows:?}"
    );
}

/// Two people, each in a browser of their own (on two nodes with
/// `AGUI_TEST_NODES=2`): a link opens a thread nobody has run on yet, its
/// first run (from the other page) reaches the early viewer live, both pages
/// show both avatars, one person's typing shows on the other's page until
/// the box is cleared, and a killed browser leaves the other's page.
#[tokio::test]
async fn a_linked_thread_is_watched_before_its_first_run_with_who_is_there() {
    let gw = dev_gateway(
        "[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
         [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n\
         [threads]\npresence_interval = \"200ms\"\n",
    )
    .await;
    let ben = gw.next_base().to_owned();
    let ann = gw.next_base().to_owned();
    let seen = page_script("inspector_presence.mjs", &[&ben, &ann, "linked-1"]).await;
    assert_eq!(seen["errors"], json!([]), "no page errors: {seen:#}");
    assert_eq!(
        seen["benAlone"],
        json!([{"user": "ben", "text": "B", "me": true}]),
        "{seen:#}"
    );
    assert_eq!(seen["annUrl"], "#thread=linked-1", "{seen:#}");
    let roles = seen["benMessages"].as_array().unwrap();
    assert_eq!(roles[0], "user", "{seen:#}");
    assert!(
        roles.contains(&json!("assistant")),
        "the answer, live: {seen:#}"
    );
    assert_eq!(seen["benRunBy"], "· started by ann", "{seen:#}");
    for (who, me) in [("benAvatars", "ben"), ("annAvatars", "ann")] {
        let avatars = seen[who].as_array().unwrap();
        let users: Vec<&str> = avatars
            .iter()
            .map(|a| a["user"].as_str().unwrap())
            .collect();
        assert_eq!(users.len(), 2, "{seen:#}");
        for a in avatars {
            assert_eq!(a["me"], a["user"] == me, "{who}: {seen:#}");
        }
    }
    assert_eq!(seen["benTypingNote"], "ann is typing…", "{seen:#}");
    assert_eq!(seen["annTypingAvatar"], true, "{seen:#}");
    assert_eq!(
        seen["benAfterKill"],
        json!([{"user": "ben", "text": "B", "me": true}])
    );
}

/// Three people debug one thread (on two nodes with `AGUI_TEST_NODES=2`):
/// a link opens it before its first run; a reply goes to the thread's
/// agent whatever the picker says; the view at an older run shows that
/// run's state and is named in the URL; a timeline row opens to its JSON,
/// with a millisecond time and the run's duration; "continue from this
/// run" starts a branch everyone sees; one of the three leaves and the
/// two others see it.
#[tokio::test]
async fn three_people_debug_a_thread_state_at_a_run_rows_as_json_and_a_branch_from_it() {
    let gw = dev_gateway(
        "[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
         [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n\
         [[agents]]\nid = \"other\"\nurl = \"demo:\"\n\
         [threads]\npresence_interval = \"200ms\"\n",
    )
    .await;
    let one = gw.next_base().to_owned();
    let two = gw.next_base().to_owned();
    let seen = page_script("inspector_debug.mjs", &[&one, &two, "debug-1"]).await;
    assert_eq!(seen["errors"], json!([]), "no page errors: {seen:#}");
    // Both runs are the demo agent's: the reply did not take the picker's.
    let agents = seen["annRunAgents"].as_array().unwrap();
    assert!(
        agents
            .iter()
            .filter(|a| a.as_str().unwrap().contains("demo ·"))
            .count()
            == 2,
        "{seen:#}"
    );
    // The late joiner's timeline: a snapshot, then (loaded) every event
    // before it, in seq order, ahead of the snapshot's row.
    assert_eq!(seen["benRowsBefore"], json!(["snapshot"]), "{seen:#}");
    let rows = seen["benRowsAfter"].as_array().unwrap();
    let snapshot_at = rows.iter().position(|r| r[1] == "snapshot").unwrap();
    let earlier: Vec<u64> = rows[..snapshot_at]
        .iter()
        .map(|r| r[0].as_u64().unwrap())
        .collect();
    assert_eq!(
        earlier,
        (1..=earlier.len() as u64).collect::<Vec<_>>(),
        "{seen:#}"
    );
    assert_eq!(
        rows[snapshot_at][0].as_u64().unwrap(),
        earlier.len() as u64,
        "{seen:#}"
    );
    let finished = rows[..snapshot_at]
        .iter()
        .filter(|r| r[1] == "RUN_FINISHED")
        .count();
    assert_eq!(finished, 2, "{seen:#}");
    let state = seen["benStateAtFirst"].as_str().unwrap();
    assert!(
        state.contains("alpha") && !state.contains("beta"),
        "{seen:#}"
    );
    let first = seen["firstRun"].as_str().unwrap();
    assert_eq!(
        seen["benUrl"],
        format!("#thread=debug-1&run={first}"),
        "{seen:#}"
    );
    let row = seen["catFinishedRow"].as_array().unwrap();
    let time = row[2].as_str().unwrap();
    assert!(
        time.len() == 12 && time.as_bytes()[8] == b'.',
        "hh:mm:ss.mmm: {seen:#}"
    );
    assert!(row[1].as_str().unwrap().contains("took "), "{seen:#}");
    assert_eq!(seen["catJson"]["type"], "RUN_FINISHED", "{seen:#}");
    assert_eq!(seen["catAvatars"], json!(["ann", "ben", "cat"]), "{seen:#}");
    let runs = seen["catRuns"].as_array().unwrap();
    assert_eq!(runs.len(), 3, "{seen:#}");
    let branch = runs
        .iter()
        .find(|r| r["parent"] == first && r["kind"] == "branch");
    assert!(branch.is_some(), "a branch from the first run: {seen:#}");
    assert_eq!(
        seen["benUrlAfter"], "#thread=debug-1",
        "back to live: {seen:#}"
    );
    // Three were there; Ben left: the two others see exactly each other.
    for who in ["annAvatarsAfterBenLeft", "catAvatarsAfterBenLeft"] {
        assert_eq!(seen[who], json!(["ann", "cat"]), "{who}: {seen:#}");
    }
}

/// Regenerate after an approval, from the page, by a second person (on
/// two nodes with `AGUI_TEST_NODES=2`): a sibling of the approval's run
/// that carries its answer, seen by both; no "pending interrupts" refusal.
/// The button is hidden on the answer while its run writes it (the page
/// records its own changes: polling from outside missed the mark when a
/// loaded machine let the page handle the whole run at once), shown on
/// every answer once the runs ended.
#[tokio::test]
async fn the_answer_after_an_approval_is_regenerated_from_the_page() {
    let gw = dev_gateway(
        "[demo]\nenabled = true\ntoken_delay = \"100ms\"\n\
         [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n",
    )
    .await;
    let one = gw.next_base().to_owned();
    let two = gw.next_base().to_owned();
    let seen = page_script("inspector_regen.mjs", &[&one, &two, "regen-1"]).await;
    assert_eq!(seen["errors"], json!([]), "no page errors: {seen:#}");
    assert_eq!(seen["benNotices"], json!([]), "no refusal: {seen:#}");
    assert_eq!(seen["hiddenWhileRunning"], true, "{seen:#}");
    let all_yes = |flags: &Value| {
        let flags = flags.as_array().unwrap();
        !flags.is_empty() && flags.iter().all(|f| f == "yes")
    };
    for page in ["ben", "annAfter", "benAfter"] {
        assert!(all_yes(&seen["regenerable"][page]), "{page}: {seen:#}");
    }
    let runs = seen["benRuns"].as_array().unwrap();
    let (asked, answered, again) = (&runs[0], &runs[1], &runs[2]);
    assert_eq!(answered["kind"], "resume", "{seen:#}");
    assert_eq!(again["kind"], "regenerate", "{seen:#}");
    assert_eq!(
        again["parent"], asked["run"],
        "a sibling of the resume: {seen:#}"
    );
    assert_eq!(answered["parent"], asked["run"], "{seen:#}");
    assert!(
        again["text"].as_str().unwrap().contains("started by ben"),
        "{seen:#}"
    );
    assert_eq!(seen["annRuns"], seen["benRuns"], "{seen:#}");
    assert!(
        seen["benReply"].as_str().unwrap().contains("went through"),
        "the regenerated answer: {seen:#}"
    );
}

/// Regenerate after an approval whose answers were compacted away: the
/// gateway refuses it (a regenerate without them would meet the pending
/// interrupt), and the page says so accurately — which run answered what,
/// and to answer again with a resume — instead of the misleading "pending
/// interrupts"; nothing starts.
#[tokio::test]
async fn regenerating_an_answer_whose_approval_was_compacted_is_refused_plainly() {
    let gw = Gateway::start(
        "[inspector]\nenabled = true\n[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
         [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n[threads]\nmax_events = 2\n",
    )
    .await;
    let claims = json!({"sub": "ann"});
    let mut ann = Ws::connect(&gw, WsAuth::Header(&token(claims.clone())))
        .await
        .expect("upgrade");
    ann.send(json!({"type": "run", "id": "ask", "agent": "demo", "threadId": "gone",
        "runId": "ask", "messages": [{"id": "u1", "role": "user", "content": "please transfer 25 EUR to bob"}]}))
        .await;
    let asked = ann.recv_until(is_terminal_frame).await;
    let interrupt = asked.last().unwrap()["event"]["outcome"]["interrupts"][0]["id"].clone();
    assert!(interrupt.is_string(), "{asked:?}");
    ann.send(json!({"type": "resume", "id": "yes", "threadId": "gone", "runId": "answer",
        "resume": [{"interruptId": interrupt, "status": "resolved", "payload": {"approved": true}}]}))
        .await;
    let answered = ann.recv_until(is_terminal_frame).await;
    assert_eq!(answered.last().unwrap()["event"]["type"], "RUN_FINISHED");
    // The compaction follows the run's end: wait until a join from seq 1 is
    // answered with a reset (the journal no longer holds it).
    until_compacted(&gw, &claims, "gone").await;
    let t = token(claims);
    let seen = page_script("inspector_regen_compacted.mjs", &[&gw.base, &t, "gone"]).await;
    assert_eq!(seen["errors"], json!([]), "no page errors: {seen:#}");
    assert_eq!(
        seen["answer"], "Done: the transfer of 25 to bob went through.",
        "{seen:#}"
    );
    let notices = seen["notices"].as_array().unwrap();
    assert_eq!(notices.len(), 1, "{seen:#}");
    let notice = notices[0].as_str().unwrap();
    assert!(
        notice.starts_with("Not regenerated")
            && notice.contains("no longer in the journal")
            && notice.contains("'ask'")
            && notice.contains("resume")
            && !notice.contains("pending interrupts"),
        "{seen:#}"
    );
    assert_eq!(
        seen["runsAfter"], seen["runsBefore"],
        "nothing started: {seen:#}"
    );
}
