//! The analytics webhook: every stored meta event is posted to
//! `meta.webhook_url`, off the request path, so a slow or failing collector
//! never delays the client's ack.

use serde_json::Value;

/// Posts one meta event to the analytics webhook, retrying non-2xx answers
/// and connection errors with exponential backoff; gives up after `attempts`.
pub async fn deliver(
    url: String,
    headers: std::collections::BTreeMap<String, String>,
    attempts: u32,
    body: Value,
) {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    let client = CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .expect("HTTP client builds")
    });
    let mut delay = std::time::Duration::from_millis(200);
    for attempt in 1..=attempts.max(1) {
        let mut req = client.post(&url).json(&body);
        for (k, v) in &headers {
            if let Ok(v) = crate::config::expand_env(v) {
                req = req.header(k, v);
            }
        }
        match req.send().await {
            Ok(r) if r.status().is_success() => return,
            Ok(r) => tracing::warn!(
                attempt,
                status = r.status().as_u16(),
                "meta webhook refused the event"
            ),
            Err(e) => tracing::warn!(attempt, "meta webhook unreachable: {}", e.without_url()),
        }
        if attempt < attempts {
            tokio::time::sleep(delay).await;
            delay *= 2;
        }
    }
    tracing::error!(seq = %body["seq"], "meta webhook: event dropped after {attempts} attempts");
}
