//! The inspector page: served by the gateway, strict about what a browser
//! may load, and — driven in a real headless Chromium by
//! `tests/interop/inspector.mjs` — usable by two people on one thread.

mod common;

use common::*;
use serde_json::{Value, json};

fn config(py: &PyAgent) -> String {
    format!(
        "[inspector]\nenabled = true\n[demo]\nenabled = true\ntoken_delay = \"15ms\"\n\
         [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n\
         [[agents]]\nid = \"xss\"\nurl = \"{}\"\n",
        py.url("xss")
    )
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
    let config: Value = http()
        .get(gw.url("/inspector/config.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
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
    let dev = "agui-gateway-development-secret-change-me";
    let gw = Gateway::start_config(
        &format!(
            "[auth]\nalgorithms = [\"HS256\"]\nhs_secret = \"{dev}\"\n[inspector]\nenabled = true\n"
        ),
        &[],
    )
    .await;
    let config: Value = http()
        .get(gw.url("/inspector/config.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(config["devTokens"], true);
    let minted: Value = http()
        .post(gw.url("/inspector/dev-token"))
        .json(&json!({"sub": "dana", "roles": ["admin"]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = minted["token"].as_str().unwrap();
    let agents = http()
        .get(gw.url("/v1/agents"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(agents.status(), 200, "the minted token works");
}

#[tokio::test]
async fn two_people_watch_steer_and_reload_one_thread_in_a_real_browser() {
    if !std::path::Path::new("/usr/bin/chromium").exists() {
        panic!("/usr/bin/chromium is missing: `bash .ci/run` installs Debian's chromium");
    }
    let py = PyAgent::start("scripted_agent.py").await;
    let gw = Gateway::start(&config(&py)).await;
    let ann = token(json!({"sub": "ann"}));
    let ben = token(json!({"sub": "ben", "threads": {"shared-1": ["view", "resume", "meta"]}}));
    let shots = std::env::var("UPDATE_SCREENSHOTS")
        .ok()
        .map(|_| repo().join("docs").display().to_string());
    let mut args = vec![gw.base.as_str(), ann.as_str(), ben.as_str()];
    if let Some(dir) = &shots {
        args.push(dir);
    }
    let seen = node_client("inspector.mjs", &args).await;
    assert!(seen.get("failure").is_none(), "{seen:#}");
    assert_eq!(seen["tokenInUrl"], false);
    assert_eq!(seen["streamedWhileRunning"], true, "{seen:#}");
    assert_eq!(
        seen["annRunFinished"], 2,
        "the approved run continued: {seen:#}"
    );
    assert!(
        seen["annStatus"].as_str().unwrap().starts_with("finished"),
        "{seen:#}"
    );
    assert!(
        seen["annState"].as_str().unwrap().contains("approved"),
        "{seen:#}"
    );
    assert!(
        seen["annSawThumbsUp"].as_str().unwrap().contains("ben"),
        "{seen:#}"
    );
    // The reload lost and repeated nothing: gapless seqs, same story as Ben's.
    assert_eq!(seen["annGapNotices"], 0, "{seen:#}");
    let seqs: Vec<u64> = serde_json::from_value(seen["annSeqsAfterReload"].clone()).unwrap();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
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
        last(&seen["benMessages"]),
        "{seen:#}"
    );
    // The agent's script stayed text.
    assert_eq!(seen["pwned"], Value::Null, "{seen:#}");
    assert_eq!(seen["imagesInPage"], 0);
    assert_eq!(seen["scriptsInPage"], json!(["app.js"]));
    assert!(
        seen["xssText"]
            .as_str()
            .unwrap()
            .contains("onerror=\"window.__pwned=1\""),
        "{seen:#}"
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
