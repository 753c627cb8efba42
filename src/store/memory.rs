//! In-memory journal: everything in a map, durable for the life of the process.

use super::*;
use std::collections::HashMap;
use std::sync::Mutex;

/// A [`JournalStore`] kept in memory; appends are checked (seqs must
/// continue the journal) and acknowledged at once.
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
        let stored_last = threads.get(&batch.key).map_or(0, |t| t.meta.last_seq);
        // Each event must follow the one before, as the SQLite store checks.
        if let Some((expected, got)) = batch
            .events
            .iter()
            .enumerate()
            .map(|(n, (seq, _))| (stored_last + 1 + n as u64, *seq))
            .find(|(expected, got)| expected != got)
        {
            let _ = tx.send(Err(StoreError::SeqConflict { expected, got }));
            return rx;
        }
        let first = batch.events.first().map_or(0, |(seq, _)| *seq);
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
        let _ = tx.send(Ok(first));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(key: &ThreadKey, from: u64, n: u64) -> AppendBatch {
        AppendBatch {
            key: key.clone(),
            meta: ThreadMeta {
                creator: "u".into(),
                agent: None,
                status: "running".into(),
                created_ms: 1,
                updated_ms: 1,
                last_seq: from + n - 1,
            },
            events: (from..from + n)
                .map(|s| (s, Bytes::from(format!("{{\"type\":\"CUSTOM\",\"n\":{s}}}"))))
                .collect(),
            compact: None,
            fence: None,
            run_boundary: true,
            idempotency: None,
            closes_failed_run: false,
        }
    }

    #[tokio::test]
    async fn only_a_batch_that_continues_the_journal_is_stored() {
        let s = MemoryStore::new();
        let k = ThreadKey::new("t", "x");
        assert_eq!(
            s.append(batch(&k, 2, 1)).await.unwrap(),
            Err(StoreError::SeqConflict {
                expected: 1,
                got: 2
            }),
            "a new thread starts at 1"
        );
        s.append(batch(&k, 1, 3)).await.unwrap().unwrap();
        assert!(s.append(batch(&k, 3, 1)).await.unwrap().is_err(), "reused");
        s.append(batch(&k, 4, 1)).await.unwrap().unwrap();
        let t = s.load(&k).unwrap().unwrap();
        assert_eq!(
            t.events.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
    }
}
