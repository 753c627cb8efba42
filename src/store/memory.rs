//! In-memory journal: everything in a map, durable for the life of the process.

use super::*;
use std::collections::HashMap;
use std::sync::Mutex;

/// A [`JournalStore`] kept in memory; appends are acknowledged at once.
#[derive(Default)]
pub struct MemoryStore {
    threads: Mutex<HashMap<ThreadKey, StoredThread>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }
}

impl JournalStore for MemoryStore {
    fn append(&self, batch: AppendBatch) -> AppendAck {
        let (tx, rx) = oneshot::channel();
        let mut threads = self
            .threads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let t = threads.entry(batch.key).or_insert_with(|| StoredThread {
            meta: batch.meta.clone(),
            base: None,
            events: Vec::new(),
        });
        t.meta = batch.meta;
        t.events.extend(batch.events);
        if let Some((base_seq, snapshot)) = batch.compact {
            t.events.retain(|(seq, _)| *seq > base_seq);
            t.base = Some((base_seq, snapshot));
        }
        let _ = tx.send(Ok(()));
        rx
    }

    fn load(&self, key: &ThreadKey) -> Result<Option<StoredThread>, StoreError> {
        Ok(self
            .threads
            .lock()
            .expect("memory store lock")
            .get(key)
            .cloned())
    }

    fn list(&self, tenant: &str) -> Result<Vec<(ThreadKey, ThreadMeta)>, StoreError> {
        let threads = self
            .threads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out: Vec<_> = threads
            .iter()
            .filter(|(k, _)| k.tenant == tenant)
            .map(|(k, t)| (k.clone(), t.meta.clone()))
            .collect();
        out.sort_by(|a, b| b.1.updated_ms.cmp(&a.1.updated_ms).then(a.0.cmp(&b.0)));
        Ok(out)
    }

    fn running(&self) -> Result<Vec<ThreadKey>, StoreError> {
        let threads = self
            .threads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(threads
            .iter()
            .filter(|(_, t)| t.meta.status == "running")
            .map(|(k, _)| k.clone())
            .collect())
    }

    fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
