//! Presence on Redis: one hash per thread, named after the thread's keys
//! ([`super::keys`]: its hash tag, so on a cluster it lives in the
//! thread's slot, beside its journal), one field per
//! node process holding `{"until": ms, "watchers": [...]}`. A reader skips
//! fields past their `until` (a node that died stopped renewing its own);
//! the whole key expires when no node renews it.

use super::RedisStore;
use crate::protocol::event::now_millis;
use crate::store::presence::{PresenceStore, Watcher};
use crate::store::{StoreError, ThreadKey};
use serde_json::json;
use std::collections::HashMap;
use std::time::Duration;

impl RedisStore {
    fn presence_key(&self, key: &ThreadKey) -> String {
        format!("{}:presence", self.names.thread(key).tag)
    }
}

impl PresenceStore for RedisStore {
    fn shared(&self) -> bool {
        true
    }

    fn put(&self, key: &ThreadKey, watchers: &[Watcher], ttl: Duration) -> Result<(), StoreError> {
        let k = self.presence_key(key);
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut pipe = ::redis::pipe();
        if watchers.is_empty() {
            pipe.hdel(&k, &self.instance).ignore();
        } else {
            let record = json!({"until": now_millis() + ms, "watchers": watchers});
            pipe.hset(&k, &self.instance, record.to_string())
                .ignore()
                .pexpire(&k, ms as i64)
                .ignore();
        }
        let mut conn = self.conn.clone();
        self.block_on(pipe.query_async::<()>(&mut conn))
    }

    fn others(&self, key: &ThreadKey) -> Result<Vec<Watcher>, StoreError> {
        let k = self.presence_key(key);
        let mut conn = self.conn.clone();
        let records: HashMap<String, String> =
            self.block_on(::redis::cmd("HGETALL").arg(&k).query_async(&mut conn))?;
        let now = now_millis();
        let mut out = Vec::new();
        for (node, record) in records {
            if node == self.instance {
                continue;
            }
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&record) else {
                continue;
            };
            if v["until"].as_u64().is_none_or(|until| until < now) {
                continue; // a node that stopped renewing: gone
            }
            if let Ok(w) = serde_json::from_value::<Vec<Watcher>>(v["watchers"].clone()) {
                out.extend(w);
            }
        }
        Ok(out)
    }
}
