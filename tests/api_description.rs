//! The HTTP API refuses what its description (docs/openapi.json) refuses:
//! a `status` outside `RunStatus` and a `limit` outside its published range
//! are `400 invalid`, never a clamped or empty `200` that a client would
//! take for the whole answer.

mod common;

use common::*;
use serde_json::{Value, json};

/// GETs `path` with `token`: (status, JSON body).
async fn get(gw: &Gateway, path: &str, token: &str) -> (u16, Value) {
    let resp = http()
        .get(gw.url(path))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

#[tokio::test]
async fn list_and_runs_refuse_a_status_or_limit_the_description_refuses() {
    let gw = Gateway::start(
        "[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
         [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n",
    )
    .await;
    let t = token(json!({"sub": "otto"}));
    let (status, _) = post_run(
        &gw.url("/v1/agents/demo/run"),
        &t,
        &input("described", "r1", "hi"),
    )
    .await;
    assert_eq!(status, 200);

    for (path, field) in [
        ("/v1/threads?status=finshed", "status"),
        ("/v1/threads?limit=501", "limit"),
        ("/v1/threads?limit=0", "limit"),
        ("/v1/threads/described/runs?limit=1001", "limit"),
        ("/v1/threads/described/runs?limit=0", "limit"),
    ] {
        let (status, body) = get(&gw, path, &t).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["error"]["code"], "invalid", "{path}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(field), "{path}: {message}");
    }
    // The edges the description allows still answer.
    let (status, body) = get(&gw, "/v1/threads?status=finished&limit=500", &t).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["threads"][0]["threadId"], "described", "{body}");
    let (status, body) = get(&gw, "/v1/threads/described/runs?limit=1000", &t).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["runs"][0]["runId"], "r1", "{body}");
}
