//! SQLite journal (WAL) with group commit.
//!
//! One writer thread owns the write connection. It takes every append that
//! queued up while the previous transaction was committing (up to
//! `max_batch_events`) and writes them in one transaction, so throughput is
//! not one commit per event and there is no artificial delay when the load is
//! light. Appends are acknowledged after the commit; the thread layer shows
//! events to viewers only then.
//!
//! Loss window: with `synchronous = "normal"` (the default) a commit survives
//! the process being killed (`kill -9`) but the last few transactions may be
//! lost if the machine loses power; `"full"` also survives that, at the cost
//! of an fsync per batch. Nothing acknowledged is ever lost to a process crash.

use super::*;
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;
use std::sync::Mutex;
use std::sync::mpsc;

type Ack = oneshot::Sender<Result<(), StoreError>>;

/// A [`JournalStore`] in one SQLite file.
pub struct SqliteStore {
    writer: mpsc::Sender<(AppendBatch, Ack)>,
    reader: Mutex<Connection>,
    /// Cleared by the writer when a commit fails.
    healthy: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError(e.to_string())
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS threads (
    tenant TEXT NOT NULL,
    thread TEXT NOT NULL,
    creator TEXT NOT NULL,
    agent TEXT,
    status TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    base_seq INTEGER,
    base_snapshot BLOB,
    PRIMARY KEY (tenant, thread)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS threads_by_update ON threads (tenant, updated_ms DESC);
CREATE TABLE IF NOT EXISTS events (
    tenant TEXT NOT NULL,
    thread TEXT NOT NULL,
    seq INTEGER NOT NULL,
    json BLOB NOT NULL,
    PRIMARY KEY (tenant, thread, seq)
) WITHOUT ROWID;
";

fn open(path: &Path, synchronous: &str) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(err)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(err)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(err)?;
    conn.pragma_update(None, "synchronous", synchronous)
        .map_err(err)?;
    Ok(conn)
}

impl SqliteStore {
    /// Opens (creating if needed) the journal at `path`.
    ///
    /// `synchronous` is SQLite's setting (`off`, `normal`, `full`);
    /// `max_batch_events` bounds one group commit.
    pub fn open(
        path: &Path,
        synchronous: &str,
        max_batch_events: usize,
    ) -> Result<SqliteStore, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
        }
        let mut write = open(path, synchronous)?;
        write.execute_batch(SCHEMA).map_err(err)?;
        let reader = open(path, synchronous)?;
        let (tx, rx) = mpsc::channel::<(AppendBatch, Ack)>();
        let healthy = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let writer_health = healthy.clone();
        std::thread::Builder::new()
            .name("journal-writer".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut group = vec![first];
                    let mut events = group[0].0.events.len();
                    while events < max_batch_events {
                        match rx.try_recv() {
                            Ok(next) => {
                                events += next.0.events.len();
                                group.push(next);
                            }
                            Err(_) => break,
                        }
                    }
                    let result = write_group(&mut write, &group);
                    if let Err(e) = &result {
                        tracing::error!("journal write failed: {e}");
                        writer_health.store(false, std::sync::atomic::Ordering::Release);
                    }
                    for (_, ack) in group {
                        let _ = ack.send(result.clone());
                    }
                }
            })
            .map_err(err)?;
        Ok(SqliteStore {
            writer: tx,
            reader: Mutex::new(reader),
            healthy,
        })
    }
}

fn write_group(conn: &mut Connection, group: &[(AppendBatch, Ack)]) -> Result<(), StoreError> {
    let tx = conn.transaction().map_err(err)?;
    {
        let mut insert = tx
            .prepare_cached(
                "INSERT INTO events (tenant, thread, seq, json) VALUES (?1, ?2, ?3, ?4)",
            )
            .map_err(err)?;
        let mut upsert = tx
            .prepare_cached(
                "INSERT INTO threads (tenant, thread, creator, agent, status, created_ms, updated_ms, last_seq)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (tenant, thread) DO UPDATE SET
                   agent = excluded.agent, status = excluded.status,
                   updated_ms = excluded.updated_ms, last_seq = excluded.last_seq",
            )
            .map_err(err)?;
        // Events in order; each thread's metadata once, from its last batch.
        let mut last_meta: Vec<&AppendBatch> = Vec::new();
        for (b, _) in group {
            let (t, th) = (&b.key.tenant, &b.key.thread_id);
            for (seq, json) in &b.events {
                insert
                    .execute(params![t, th, *seq as i64, &json[..]])
                    .map_err(err)?;
            }
            match last_meta.iter_mut().find(|m| m.key == b.key) {
                Some(m) => *m = b,
                None => last_meta.push(b),
            }
            if let Some((base_seq, snapshot)) = &b.compact {
                upsert_meta(&mut upsert, b)?;
                tx.execute(
                    "DELETE FROM events WHERE tenant = ?1 AND thread = ?2 AND seq <= ?3",
                    params![t, th, *base_seq as i64],
                )
                .map_err(err)?;
                tx.execute(
                    "UPDATE threads SET base_seq = ?3, base_snapshot = ?4 WHERE tenant = ?1 AND thread = ?2",
                    params![t, th, *base_seq as i64, &snapshot[..]],
                )
                .map_err(err)?;
            }
        }
        for b in last_meta {
            upsert_meta(&mut upsert, b)?;
        }
    }
    tx.commit().map_err(err)
}

fn upsert_meta(
    stmt: &mut rusqlite::CachedStatement<'_>,
    b: &AppendBatch,
) -> Result<(), StoreError> {
    let m = &b.meta;
    stmt.execute(params![
        b.key.tenant,
        b.key.thread_id,
        m.creator,
        m.agent,
        m.status,
        m.created_ms as i64,
        m.updated_ms as i64,
        m.last_seq as i64
    ])
    .map(|_| ())
    .map_err(err)
}

fn meta_from_row(row: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<ThreadMeta> {
    Ok(ThreadMeta {
        creator: row.get(at)?,
        agent: row.get(at + 1)?,
        status: row.get(at + 2)?,
        created_ms: row.get::<_, i64>(at + 3)? as u64,
        updated_ms: row.get::<_, i64>(at + 4)? as u64,
        last_seq: row.get::<_, i64>(at + 5)? as u64,
    })
}

impl JournalStore for SqliteStore {
    fn append(&self, batch: AppendBatch) -> AppendAck {
        let (tx, rx) = oneshot::channel();
        if let Err(mpsc::SendError((_, ack))) = self.writer.send((batch, tx)) {
            let _ = ack.send(Err(StoreError("journal writer stopped".into())));
            self.healthy
                .store(false, std::sync::atomic::Ordering::Release);
        }
        rx
    }

    fn healthy(&self) -> bool {
        self.healthy.load(std::sync::atomic::Ordering::Acquire)
    }

    fn load(&self, key: &ThreadKey) -> Result<Option<StoredThread>, StoreError> {
        let conn = self
            .reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let head = conn
            .query_row(
                "SELECT creator, agent, status, created_ms, updated_ms, last_seq, base_seq, base_snapshot
                 FROM threads WHERE tenant = ?1 AND thread = ?2",
                params![key.tenant, key.thread_id],
                |row| {
                    let meta = meta_from_row(row, 0)?;
                    let base_seq: Option<i64> = row.get(6)?;
                    let snapshot: Option<Vec<u8>> = row.get(7)?;
                    Ok((meta, base_seq.zip(snapshot).map(|(s, b)| (s as u64, Bytes::from(b)))))
                },
            )
            .optional()
            .map_err(err)?;
        let Some((meta, base)) = head else {
            return Ok(None);
        };
        let after = base.as_ref().map(|(s, _)| *s).unwrap_or(0) as i64;
        let mut stmt = conn
            .prepare_cached(
                "SELECT seq, json FROM events WHERE tenant = ?1 AND thread = ?2 AND seq > ?3 ORDER BY seq",
            )
            .map_err(err)?;
        let events = stmt
            .query_map(params![key.tenant, key.thread_id, after], |row| {
                Ok((
                    row.get::<_, i64>(0)? as u64,
                    Bytes::from(row.get::<_, Vec<u8>>(1)?),
                ))
            })
            .map_err(err)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
        Ok(Some(StoredThread { meta, base, events }))
    }

    fn list(&self, tenant: &str) -> Result<Vec<(ThreadKey, ThreadMeta)>, StoreError> {
        let conn = self
            .reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut stmt = conn
            .prepare_cached(
                "SELECT thread, creator, agent, status, created_ms, updated_ms, last_seq
                 FROM threads WHERE tenant = ?1 ORDER BY updated_ms DESC, thread",
            )
            .map_err(err)?;
        stmt.query_map(params![tenant], |row| {
            Ok((
                ThreadKey::new(tenant, row.get::<_, String>(0)?),
                meta_from_row(row, 1)?,
            ))
        })
        .map_err(err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)
    }

    fn running(&self) -> Result<Vec<ThreadKey>, StoreError> {
        let conn = self
            .reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut stmt = conn
            .prepare("SELECT tenant, thread FROM threads WHERE status = 'running'")
            .map_err(err)?;
        stmt.query_map([], |row| {
            Ok(ThreadKey::new(
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
            ))
        })
        .map_err(err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)
    }

    fn ping(&self) -> Result<(), StoreError> {
        let conn = self
            .reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        conn.query_row("SELECT 1", [], |_| Ok(())).map_err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(seq: u64, status: &str) -> ThreadMeta {
        ThreadMeta {
            creator: "u".into(),
            agent: Some("a".into()),
            status: status.into(),
            created_ms: 1,
            updated_ms: seq,
            last_seq: seq,
        }
    }

    fn batch(key: &ThreadKey, from: u64, n: u64, status: &str) -> AppendBatch {
        AppendBatch {
            key: key.clone(),
            meta: meta(from + n - 1, status),
            events: (from..from + n)
                .map(|s| (s, Bytes::from(format!("{{\"type\":\"CUSTOM\",\"n\":{s}}}"))))
                .collect(),
            compact: None,
        }
    }

    #[tokio::test]
    async fn appends_survive_reopen_and_compaction_drops_old_events() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        let k = ThreadKey::new("t1", "th");
        {
            let s = SqliteStore::open(&path, "normal", 1024).unwrap();
            let acks: Vec<_> = (0..10)
                .map(|i| s.append(batch(&k, i * 5 + 1, 5, "running")))
                .collect();
            for a in acks {
                a.await.unwrap().unwrap();
            }
            let mut b = batch(&k, 51, 1, "finished");
            b.compact = Some((40, Bytes::from_static(b"{\"seq\":40}")));
            s.append(b).await.unwrap().unwrap();
        }
        let s = SqliteStore::open(&path, "normal", 1024).unwrap();
        let t = s.load(&k).unwrap().unwrap();
        assert_eq!(t.meta.status, "finished");
        assert_eq!(t.meta.last_seq, 51);
        assert_eq!(t.base.as_ref().unwrap().0, 40);
        let seqs: Vec<u64> = t.events.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, (41..=51).collect::<Vec<_>>());
        assert!(s.running().unwrap().is_empty());
        assert_eq!(s.list("t1").unwrap().len(), 1);
        assert!(s.list("other").unwrap().is_empty());
        assert!(s.load(&ThreadKey::new("other", "th")).unwrap().is_none());
    }

    #[tokio::test]
    async fn duplicate_seq_fails_the_batch_and_reports_it() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(&dir.path().join("j.db"), "normal", 1024).unwrap();
        let k = ThreadKey::new("t", "x");
        s.append(batch(&k, 1, 2, "running")).await.unwrap().unwrap();
        assert!(s.healthy());
        assert!(s.append(batch(&k, 2, 1, "running")).await.unwrap().is_err());
        assert!(!s.healthy(), "a failed write turns readiness false");
        assert_eq!(
            s.load(&k).unwrap().unwrap().events.len(),
            2,
            "nothing half-written"
        );
        assert_eq!(s.running().unwrap(), vec![k]);
    }
}
