//! One row of the `batches` table: consecutive events of one thread, stored
//! together so the journal pays SQLite's B-tree insert, index entry and row
//! header once per batch instead of once per event (they were ≈ 28 % of a
//! SQLite run, docs/benchmarks.md).
//!
//! A row holds the seq range `first_seq..=last_seq`, the events' JSON back to
//! back in `frames`, and in `ends` where each event but the last ends in
//! `frames` (little-endian `u32` offsets; the last one ends with the blob).
//! Offsets beside the bytes, rather than a prefix before each event, keep
//! `frames` the events' exact bytes: a row of one event is that event's JSON
//! with an empty `ends`, which is also what a per-event row of an older file
//! becomes in the migration ([`super::migration`]).
//!
//! Seqs are implicit (`first_seq + i`), so a batch must be consecutive; the
//! writer checks that before it encodes one.

use bytes::Bytes;

use crate::store::StoreError;

/// A row being built from consecutive events of one thread (a group commit
/// puts a thread's batches into one row, up to [`MAX_ROW_BYTES`]).
#[derive(Debug, Default)]
pub(super) struct RowBuilder {
    first: u64,
    /// Events in the row.
    len: u64,
    ends: Vec<u8>,
    frames: Vec<u8>,
}

/// A row takes no more events once its frames reach this size (one event
/// bigger than that is a row by itself): SQLite refuses a blob over 1 GB,
/// and a read from the middle of a row copies the rest of it.
pub(super) const MAX_ROW_BYTES: usize = 1 << 20;

impl RowBuilder {
    /// A row of `events` (consecutive, at least one), whatever their size.
    pub(super) fn new(events: &[(u64, Bytes)]) -> RowBuilder {
        let mut row = RowBuilder::default();
        for (seq, json) in events {
            row.push(*seq, json);
        }
        row
    }

    /// True before the first event is pushed.
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when the event after the row's last can be added to it.
    pub(super) fn has_room(&self) -> bool {
        self.frames.len() < MAX_ROW_BYTES
    }

    /// Appends the event `seq`, which continues the row (the writer checked).
    pub(super) fn push(&mut self, seq: u64, json: &[u8]) {
        if self.len == 0 {
            self.first = seq;
        } else {
            debug_assert_eq!(seq, self.first + self.len, "a row's events are consecutive");
            self.ends
                .extend_from_slice(&(self.frames.len() as u32).to_le_bytes());
        }
        self.frames.extend_from_slice(json);
        self.len += 1;
    }

    /// The row's columns: first seq, last seq, ends, frames.
    pub(super) fn columns(&self) -> (i64, i64, &[u8], &[u8]) {
        (
            self.first as i64,
            (self.first + self.len - 1) as i64,
            &self.ends,
            &self.frames,
        )
    }
}

/// Appends to `out` the events of a stored row whose seq is above `after`,
/// each a slice of one buffer holding the row's frames (one allocation per
/// row, not per event). A row that does not add up — offsets that do not
/// match its seq range or its bytes — is an error, never a silent gap.
pub(super) fn decode(
    first: u64,
    last: u64,
    ends: &[u8],
    frames: &[u8],
    after: u64,
    out: &mut Vec<(u64, Bytes)>,
) -> Result<(), StoreError> {
    let damaged = || StoreError::failed(format!("damaged journal row (seqs {first}..={last})"));
    if last < first || ends.len() as u64 != 4 * (last - first) {
        return Err(damaged());
    }
    let mut bounds = Vec::with_capacity(ends.len() / 4 + 2);
    bounds.push(0usize);
    for end in ends.chunks_exact(4) {
        bounds.push(u32::from_le_bytes(end.try_into().expect("4 bytes")) as usize);
    }
    bounds.push(frames.len());
    if bounds.windows(2).any(|w| w[0] > w[1]) {
        return Err(damaged());
    }
    let skip = after.saturating_sub(first - 1).min(last - first + 1) as usize;
    if skip == bounds.len() - 1 {
        return Ok(());
    }
    // Only the part the caller asked for is copied out of SQLite's buffer.
    let from = bounds[skip];
    let kept = Bytes::copy_from_slice(&frames[from..]);
    out.reserve(bounds.len() - 1 - skip);
    for (i, w) in bounds.windows(2).enumerate().skip(skip) {
        out.push((first + i as u64, kept.slice(w[0] - from..w[1] - from)));
    }
    Ok(())
}

/// The row of `first..=last` with its events up to `upto` cut off (the part
/// compaction made obsolete): the new first seq, ends and frames.
pub(super) fn trim(
    first: u64,
    last: u64,
    ends: &[u8],
    frames: &[u8],
    upto: u64,
) -> Result<(u64, Vec<u8>, Vec<u8>), StoreError> {
    let mut kept = Vec::new();
    decode(first, last, ends, frames, upto, &mut kept)?;
    let row = RowBuilder::new(&kept);
    Ok((row.first, row.ends, row.frames))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(from: u64, jsons: &[&str]) -> Vec<(u64, Bytes)> {
        jsons
            .iter()
            .enumerate()
            .map(|(i, j)| (from + i as u64, Bytes::copy_from_slice(j.as_bytes())))
            .collect()
    }

    fn roundtrip(row: &RowBuilder, after: u64) -> Vec<(u64, Bytes)> {
        let (first, last, ends, frames) = row.columns();
        let mut out = Vec::new();
        decode(first as u64, last as u64, ends, frames, after, &mut out).unwrap();
        out
    }

    #[test]
    fn a_row_reads_back_from_any_seq_in_it() {
        let all = events(7, &["{\"a\":1}", "", "{\"b\":\"x\\ny\"}", "[]"]);
        let row = RowBuilder::new(&all);
        for after in 0..=12 {
            let want: Vec<_> = all.iter().filter(|(s, _)| *s > after).cloned().collect();
            assert_eq!(roundtrip(&row, after), want, "after {after}");
        }
    }

    #[test]
    fn a_row_of_one_event_is_its_json() {
        let row = RowBuilder::new(&events(3, &["{\"x\":1}"]));
        let (first, last, ends, frames) = row.columns();
        assert_eq!(
            (first, last, ends, frames),
            (3, 3, &[][..], &b"{\"x\":1}"[..])
        );
    }

    #[test]
    fn trimming_keeps_the_later_events() {
        let all = events(1, &["a", "bb", "ccc"]);
        let row = RowBuilder::new(&all);
        let (first, last, ends, frames) = row.columns();
        let (f, e, b) = trim(first as u64, last as u64, ends, frames, 1).unwrap();
        let mut out = Vec::new();
        decode(f, 3, &e, &b, 0, &mut out).unwrap();
        assert_eq!(out, all[1..]);
    }

    #[test]
    fn a_row_that_does_not_add_up_is_refused() {
        let mut out = Vec::new();
        // Three seqs need two offsets.
        assert!(decode(1, 3, &[1, 0, 0, 0], b"abc", 0, &mut out).is_err());
        // Offsets past the bytes, or going back.
        assert!(decode(1, 2, &[9, 0, 0, 0], b"abc", 0, &mut out).is_err());
        assert!(decode(1, 3, &[2, 0, 0, 0, 1, 0, 0, 0], b"abc", 0, &mut out).is_err());
        assert!(decode(5, 4, &[], b"", 0, &mut out).is_err());
        assert!(out.is_empty());
    }
}
