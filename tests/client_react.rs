//! The React hooks (`clients/react`, npm `@agui-gateway/react`) in headless
//! Chromium with current React against a real gateway:
//! `clients/react/test/browser.mjs` bundles `test/app.jsx` and prints what
//! the page rendered; the assertions are here.

mod common;

use common::*;
use serde_json::{Value, json};

#[tokio::test]
async fn use_thread_and_use_gateway_agent_render_the_gateways_view_in_chromium() {
    let package = repo().join("clients/react");
    assert!(
        package.join("node_modules/esbuild").exists(),
        "clients/react/node_modules missing: run `npm ci` there (bash .ci/run does)"
    );
    assert!(
        std::path::Path::new("/usr/bin/chromium").exists(),
        "/usr/bin/chromium is missing: `bash .ci/run` installs Debian's chromium"
    );
    let gw = Gateway::start(
        "[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
         [cors]\nallowed_origins = [\"http://127.0.0.1:*\"]\n\
         [threads]\npresence_interval = \"100ms\"\n\
         [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n",
    )
    .await;
    let t = token(json!({"sub": "rae"}));
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        tokio::process::Command::new("node")
            .arg(package.join("test/browser.mjs"))
            .args([gw.base.as_str(), &t, "demo"])
            .current_dir(&package)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("browser.mjs timed out")
    .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().rfind(|l| l.starts_with('{')).unwrap_or("");
    let seen: Value = serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("{e}: {stdout} {}", String::from_utf8_lossy(&out.stderr)));
    assert!(seen.get("failure").is_none(), "{seen:#}");
    assert_eq!(seen["errors"], json!([]), "{seen:#}");
    assert!(
        seen["reactVersion"].as_str().unwrap().starts_with("19."),
        "{seen:#}"
    );
    // An empty thread, then the starter's own run rendered from its fold.
    assert_eq!(seen["statusBefore"], "empty");
    assert_eq!(seen["ackRunId"], "x1");
    assert_eq!(seen["x1"]["a"], seen["x1"]["snapshot"], "{seen:#}");
    assert_eq!(seen["x1"]["status"], "ready");
    assert_eq!(seen["bJoined"], seen["x1"]["snapshot"], "{seen:#}");
    // Presence in the hook: one person, three connections; typing shown.
    assert_eq!(seen["viewers"], json!([["rae", 3]]), "{seen:#}");
    assert_eq!(seen["viewersA"], json!(["rae"]), "{seen:#}");
    assert_eq!(seen["typingA"], json!(["rae"]), "{seen:#}");
    assert_eq!(seen["typing"], json!(["rae"]), "{seen:#}");
    // A fork of the first run: both render the gateway's branch; the runs
    // tree shows the two siblings, the new one on the head's branch.
    let x2 = &seen["x2"];
    assert_eq!(seen["regenerateAckRunId"], "x2");
    assert_eq!(x2["a"], x2["snapshot"], "{seen:#}");
    assert_eq!(x2["b"], x2["snapshot"], "{seen:#}");
    assert_eq!(x2["latestRun"]["parentRunId"], Value::Null, "{seen:#}");
    assert_eq!(x2["latestRun"]["kind"], "regenerate");
    assert_eq!(x2["siblings"], json!(["x1", "x2"]), "{seen:#}");
    assert_eq!(
        x2["alternatives"],
        json!([["x1", false], ["x2", true]]),
        "{seen:#}"
    );
    // B's runAgent went through the gateway; A rendered it live.
    let x3 = &seen["x3"];
    assert_eq!(x3["a"], x3["snapshot"], "{seen:#}");
    assert_eq!(x3["b"], x3["snapshot"], "{seen:#}");
    assert_eq!(x3["head"], "x3");
    assert_eq!(x3["bRunning"], false);
    // StrictMode mounted (connected, closed, connected) each connection
    // twice: exactly the three live sockets (A, B, C) remain, none leaked.
    assert_eq!(seen["wsSessions"], 3, "{seen:#}");
    assert!(
        x3["snapshot"]
            .as_array()
            .unwrap()
            .contains(&json!("u3:user:from b")),
        "{seen:#}"
    );
}
