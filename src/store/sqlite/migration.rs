//! Files written before events were stored a batch per row.
//!
//! Up to issue 22 the journal kept one row per event in a `WITHOUT ROWID`
//! table `events (tenant, thread, seq, json)`. Opening such a file moves its
//! events into [`batches`](super::batch_row) rows, one thread per
//! transaction (a crash in the middle leaves every thread either moved or
//! not, and the next start carries on), then drops the old table. Runs of
//! consecutive seqs become rows of up to
//! [`MAX_ROW_BYTES`](super::batch_row::MAX_ROW_BYTES) each; a gap (which
//! a healthy journal never has, but a damaged file might) starts a new row,
//! so nothing is invented or lost. Rows below a compacted base move too and
//! are collected afterwards like any others.
//!
//! The moved rows are written between the store's own WAL bounds: the
//! migration runs before the writer starts, with SQLite's automatic
//! checkpoint on, so the log does not grow with the file.

use super::batch_row::RowBuilder;
use super::{err, insert_row};
use crate::store::StoreError;
use rusqlite::{Connection, params};

/// Moves the events of a per-event `events` table, if the file has one, into
/// `batches`, and drops it. Returns how many events moved.
pub(super) fn migrate_event_rows(conn: &mut Connection) -> Result<u64, StoreError> {
    let exists: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events')",
            [],
            |row| row.get(0),
        )
        .map_err(err)?;
    if !exists {
        return Ok(0);
    }
    let began = std::time::Instant::now();
    let threads: Vec<(String, String)> = {
        let mut stmt = conn
            .prepare("SELECT DISTINCT tenant, thread FROM events")
            .map_err(err)?;
        stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .map_err(err)?
            .collect::<Result<_, _>>()
            .map_err(err)?
    };
    let mut moved = 0;
    for (tenant, thread) in &threads {
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(err)?;
        {
            let mut read = tx
                .prepare(
                    "SELECT seq, json FROM events WHERE tenant = ?1 AND thread = ?2 ORDER BY seq",
                )
                .map_err(err)?;
            let mut insert = tx.prepare(super::INSERT_ROW).map_err(err)?;
            let mut rows = read.query(params![tenant, thread]).map_err(err)?;
            let mut row = RowBuilder::default();
            let mut next = None;
            while let Some(r) = rows.next().map_err(err)? {
                let seq = r.get::<_, i64>(0).map_err(err)? as u64;
                let json = r.get_ref(1).map_err(err)?;
                let json = json
                    .as_blob()
                    .or_else(|_| json.as_str().map(str::as_bytes))
                    .map_err(err)?;
                if next.is_some_and(|n| n != seq) || !row.has_room() {
                    insert_row(&mut insert, (tenant, thread), &row)?;
                    row = RowBuilder::default();
                }
                row.push(seq, json);
                next = Some(seq + 1);
                moved += 1;
            }
            if next.is_some() {
                insert_row(&mut insert, (tenant, thread), &row)?;
            }
        }
        tx.execute(
            "DELETE FROM events WHERE tenant = ?1 AND thread = ?2",
            params![tenant, thread],
        )
        .map_err(err)?;
        tx.commit().map_err(err)?;
    }
    conn.execute_batch("DROP TABLE events").map_err(err)?;
    tracing::info!(
        events = moved,
        threads = threads.len(),
        ms = began.elapsed().as_millis() as u64,
        "journal file migrated to one row per batch"
    );
    Ok(moved)
}
