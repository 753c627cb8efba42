//! The blaster: an in-process AG-UI agent for the benches that answers
//! each run with `forwardedProps.n` CUSTOM events (default 10), each
//! carrying its send time, `forwardedProps.gapUs` apart (default: as fast
//! as the socket takes them). A Python agent would be the bottleneck at
//! the rates the benches drive, and one written in Rust on the same
//! runtime costs the gateway's CPU nothing it would not cost anyway.

use axum::Router;
use axum::body::{Body, Bytes};
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch (what each tick carries).
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// Starts the blaster on a free loopback port; its runs are POSTed to
/// `/agent`.
pub async fn blaster() -> std::net::SocketAddr {
    async fn run(body: Bytes) -> Response {
        let input: Value = serde_json::from_slice(&body).unwrap();
        let n = input["forwardedProps"]["n"].as_u64().unwrap_or(10);
        let gap = Duration::from_micros(input["forwardedProps"]["gapUs"].as_u64().unwrap_or(0));
        let (thread, run) = (input["threadId"].clone(), input["runId"].clone());
        let t0 = tokio::time::Instant::now();
        let stream = futures::stream::unfold(0u64, move |i| {
            let (thread, run) = (thread.clone(), run.clone());
            async move {
                if i > n + 1 {
                    return None;
                }
                if i > 0 && i <= n && !gap.is_zero() {
                    // An absolute schedule: timer granularity does not add up.
                    tokio::time::sleep_until(t0 + gap * i as u32).await;
                }
                let ev = match i {
                    0 => json!({"type": "RUN_STARTED", "threadId": thread, "runId": run}),
                    i if i <= n => {
                        json!({"type": "CUSTOM", "name": "tick", "value": {"i": i, "t": now_ns()}})
                    }
                    _ => json!({"type": "RUN_FINISHED", "threadId": thread, "runId": run}),
                };
                Some((
                    Ok::<_, std::convert::Infallible>(Bytes::from(format!("data: {ev}\n\n"))),
                    i + 1,
                ))
            }
        });
        Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(stream))
            .unwrap()
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        async move { axum::serve(listener, Router::new().route("/agent", post(run))).await },
    );
    addr
}
