//! Cluster-wide rate budgets and connection counts ([`SharedCounters`]).

use super::scripts::{CLOSE, OPEN, TAKE};

use super::*;

impl SharedCounters for RedisStore {
    fn take(
        &self,
        key: &str,
        limit: u32,
        window: std::time::Duration,
    ) -> BoxFuture<'static, Result<Option<std::time::Duration>, StoreError>> {
        let mut conn = self.conn.clone();
        let key = self.names.rate(key);
        let window_ms = window.as_millis().max(1) as u64;
        let interval = (window_ms / u64::from(limit.max(1))).max(1);
        Box::pin(async move {
            let wait: u64 = Script::new(TAKE)
                .key(key)
                .arg(interval)
                .arg(window_ms)
                .invoke_async(&mut conn)
                .await
                .map_err(StoreError::failed)?;
            Ok((wait > 0).then(|| std::time::Duration::from_millis(wait)))
        })
    }

    fn open(&self, key: &str, limit: u32) -> BoxFuture<'static, Result<bool, StoreError>> {
        let mut conn = self.conn.clone();
        let key = self.names.conns(key);
        let nodes = self.names.nodes();
        let instance = self.instance.clone();
        // A node's heartbeat comes every third of the lease's time to live.
        let stale = self.lease_ttl.as_millis() as u64;
        Box::pin(async move {
            let opened: i64 = Script::new(OPEN)
                .key(key)
                .key(nodes)
                .arg(instance)
                .arg(limit)
                .arg(stale)
                .invoke_async(&mut conn)
                .await
                .map_err(StoreError::failed)?;
            Ok(opened == 1)
        })
    }

    fn close(&self, key: &str) {
        let mut conn = self.conn.clone();
        let key = self.names.conns(key);
        let instance = self.instance.clone();
        tokio::spawn(async move {
            let closed: ::redis::RedisResult<i64> = Script::new(CLOSE)
                .key(&key)
                .arg(instance)
                .invoke_async(&mut conn)
                .await;
            if let Err(e) = closed {
                // Counted until this node's heartbeat goes stale (a restart
                // starts a new instance): a cap errs on the strict side.
                tracing::warn!(key = %key, "uncounting a closed connection failed (redis): {e}");
            }
        });
    }
}
