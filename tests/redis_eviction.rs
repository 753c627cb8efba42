//! The journal on Redis needs `maxmemory-policy noeviction` (an evicting
//! policy deletes a thread's keys under memory pressure: acknowledged
//! events lost without a flush). A node says so at start when Redis is set
//! otherwise, and says nothing when it is set right (docs/operations.md,
//! "Redis").

mod common;
use common::*;

const WARNING: &str = "Redis maxmemory-policy is 'allkeys-lru'";

#[tokio::test]
async fn a_node_warns_at_start_when_redis_may_evict_journal_keys() {
    let redis = RedisServer::start().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let config = format!(
        "{}[[agents]]\nid = \"ok\"\nurl = \"{}\"\n",
        redis.store_config("a"),
        py.url("ok")
    );
    redis.cli(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let evicting = Gateway::start(&config).await;
    evicting.proc.expect_stderr(WARNING).await;
    assert!(
        evicting.proc.stderr().contains("noeviction"),
        "the warning names the policy to set"
    );
    drop(evicting);

    redis.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let right = Gateway::start(&config).await;
    // Served, so the check at start is behind it.
    assert_eq!(
        http()
            .get(right.url("/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert!(
        !right.proc.stderr().contains("maxmemory-policy"),
        "{}",
        right.proc.stderr()
    );
}
