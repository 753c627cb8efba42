//! The text of the events a thread's tail keeps, packed into chunks.
//!
//! Why packed: a record per event (its seq, a `Bytes` handle, and the
//! shared header the handle needs on the agent's read buffer) cost about
//! 100 bytes beside a typical 110-byte text; a heap profile of a soak
//! (docs/benchmarks.md, "Where the rest went") found those records, the
//! deque's doubling and the read buffers' headers at a third of what the
//! node held. Packed, an event costs its text and 8 bytes of index, and the
//! agent's read buffer is freed as soon as the live fan-out is done with it.
//!
//! Why chunks: a tail lets its oldest events go; a chunk goes whole, so the
//! memory really returns to the allocator (one free, not one per event) and
//! nothing is moved. A chunk is sized from `threads.hot_bytes` (an eighth of
//! it, between 256 bytes and 16 KiB), so a tail overshoots its bound by at
//! most a chunk. Readers copy an event's text out (a reader of the past is
//! rare; the live path reads the entries it publishes, never this).
//!
//! Why compressed: once no more events go into a chunk, its text is
//! compressed (LZ4, a block per chunk). A run's events repeat their type,
//! field names, message ids and timestamps, so a sealed chunk holds about a
//! fifth of its text (5.8× on the demo agent's journal, docs/benchmarks.md,
//! "Sixth pass"), and the packed text had been the largest part of what a
//! resident thread holds. LZ4 rather than zstd: zstd packs twice as tight,
//! but took four times as long to seal a chunk and to read one back, and
//! sealing happens on the publishing path (about 6 µs per 16 KiB chunk, once
//! per hundred-odd events). The chunk being filled stays plain, so the live
//! path never decompresses anything; a reader of the past unpacks each
//! chunk it reads once.

use bytes::Bytes;
use std::borrow::Cow;
use std::collections::VecDeque;

/// The largest chunk: big enough that the per-chunk overhead is lost in
/// it, small enough that trimming whole chunks stays close to the bound.
const MAX_CHUNK: usize = 16 << 10;
/// The smallest chunk (a tail bounded to 1 KiB still packs a few events).
const MIN_CHUNK: usize = 256;

/// A chunk's text: plain while events go into it, then compressed if that
/// saves an eighth or more (a chunk of one big event of random text stays
/// plain; so does one whose compression failed to pay).
enum Text {
    Plain(Vec<u8>),
    Lz4 { block: Box<[u8]>, len: usize },
}

/// Consecutive kept events: their texts end to end, and per event its seq
/// (as an offset from the chunk's first) and where its text ends.
struct Chunk {
    first_seq: u64,
    text: Text,
    index: Vec<(u32, u32)>,
}

impl Chunk {
    /// What the chunk holds in memory (its allocations, not its length).
    fn bytes(&self) -> usize {
        let text = match &self.text {
            Text::Plain(t) => t.capacity(),
            Text::Lz4 { block, .. } => block.len(),
        };
        std::mem::size_of::<Chunk>()
            + text
            + self.index.capacity() * std::mem::size_of::<(u32, u32)>()
    }

    fn last_seq(&self) -> u64 {
        self.first_seq + self.index.last().map_or(0, |&(s, _)| s as u64)
    }

    /// The text still being filled (`None` once sealed and compressed).
    fn open(&mut self) -> Option<&mut Vec<u8>> {
        match &mut self.text {
            Text::Plain(t) => Some(t),
            Text::Lz4 { .. } => None,
        }
    }

    /// True when an event `seq` of `len` bytes still fits: the chunk is
    /// not sealed, its size allows, and the offsets fit their 32 bits.
    fn fits(&self, seq: u64, len: usize, chunk: usize) -> bool {
        let Text::Plain(text) = &self.text else {
            return false;
        };
        text.len() + len <= chunk
            && u32::try_from(seq - self.first_seq).is_ok()
            && u32::try_from(text.len() + len).is_ok()
    }

    /// No more events go into this chunk: its text is compressed when that
    /// pays, and what it reserved beyond its length is given back.
    fn seal(&mut self) {
        self.index.shrink_to_fit();
        let Text::Plain(text) = &mut self.text else {
            return;
        };
        let block = lz4_flex::block::compress(text);
        if block.len() <= text.len() - text.len() / 8 {
            let len = text.len();
            self.text = Text::Lz4 {
                block: block.into_boxed_slice(),
                len,
            };
        } else {
            text.shrink_to_fit();
        }
    }

    /// The chunk's whole text (unpacked when sealed). `None` if a sealed
    /// block does not unpack, which only damaged memory could cause: its
    /// events are logged as lost rather than taking the reader down.
    fn text(&self) -> Option<Cow<'_, [u8]>> {
        match &self.text {
            Text::Plain(t) => Some(Cow::Borrowed(t)),
            Text::Lz4 { block, len } => match lz4_flex::block::decompress(block, *len) {
                Ok(text) if text.len() == *len => Some(Cow::Owned(text)),
                Ok(_) | Err(_) => {
                    tracing::error!(
                        first_seq = self.first_seq,
                        events = self.index.len(),
                        "a kept chunk no longer unpacks, its events skipped"
                    );
                    None
                }
            },
        }
    }

    /// Every event of the chunk: its seq and a copy of its text.
    fn events(&self) -> impl Iterator<Item = (u64, Bytes)> + '_ {
        let text = self.text();
        let count = if text.is_some() { self.index.len() } else { 0 };
        let mut start = 0;
        self.index[..count].iter().map(move |&(seq, end)| {
            let text = text.as_deref().expect("counted only when unpacked");
            let json = Bytes::copy_from_slice(&text[start..end as usize]);
            start = end as usize;
            (self.first_seq + seq as u64, json)
        })
    }
}

/// A tail's events, oldest first.
pub(super) struct Packed {
    chunks: VecDeque<Chunk>,
    /// Target size of a chunk's text.
    chunk: usize,
    len: usize,
    bytes: usize,
}

impl Packed {
    /// Empty, with chunks sized for a tail of `hot_bytes` (0: unbounded).
    pub(super) fn new(hot_bytes: usize) -> Packed {
        let chunk = match hot_bytes {
            0 => MAX_CHUNK,
            n => (n / 8).clamp(MIN_CHUNK, MAX_CHUNK),
        };
        Packed {
            chunks: VecDeque::new(),
            chunk,
            len: 0,
            bytes: 0,
        }
    }

    /// Events kept.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Bytes held: every chunk's allocations, and the chunk queue's.
    pub(super) fn bytes(&self) -> usize {
        self.bytes + self.chunks.capacity() * std::mem::size_of::<Chunk>()
    }

    /// The oldest kept seq.
    pub(super) fn front_seq(&self) -> Option<u64> {
        self.chunks.front().map(|c| c.first_seq)
    }

    /// Keeps event `seq` (newer than every kept one) with text `json`.
    pub(super) fn push(&mut self, seq: u64, json: &[u8]) {
        let open = self
            .chunks
            .back()
            .is_some_and(|c| c.fits(seq, json.len(), self.chunk));
        if !open {
            self.close_last();
            // Grown as it fills (below), so a quiet thread's one chunk is
            // about its few events, not a whole chunk's reservation.
            let chunk = Chunk {
                first_seq: seq,
                text: Text::Plain(Vec::with_capacity(
                    json.len().max(MIN_CHUNK).min(self.chunk.max(json.len())),
                )),
                index: Vec::new(),
            };
            self.bytes += chunk.bytes();
            self.chunks.push_back(chunk);
        }
        let chunk = self.chunk;
        let last = self.chunks.back_mut().expect("a chunk is open");
        let before = last.bytes();
        let first_seq = last.first_seq;
        let text = last.open().expect("the newest chunk is open");
        if text.capacity() - text.len() < json.len() {
            // Doubling, but never past the chunk's size: what a chunk
            // reserves stays what it will hold.
            let need = text.len() + json.len();
            let want = (text.capacity() * 2).clamp(need, chunk.max(need));
            text.reserve_exact(want - text.len());
        }
        text.extend_from_slice(json);
        let end = text.len() as u32;
        last.index.push(((seq - first_seq) as u32, end));
        self.bytes = self.bytes + last.bytes() - before;
        self.len += 1;
    }

    /// The newest chunk is sealed: no more events go into it (see
    /// [`Chunk::seal`]).
    fn close_last(&mut self) {
        if let Some(last) = self.chunks.back_mut() {
            let before = last.bytes();
            last.seal();
            self.bytes = self.bytes + last.bytes() - before;
        }
    }

    /// Drops the oldest chunk if every event in it is older than
    /// `keep_from`; the bytes it held.
    pub(super) fn pop_front_before(&mut self, keep_from: u64) -> Option<usize> {
        let front = self.chunks.front()?;
        if front.last_seq() >= keep_from {
            return None;
        }
        let chunk = self.chunks.pop_front()?;
        let mut n = chunk.bytes();
        if self.chunks.len() < self.chunks.capacity() / 4 {
            let before = self.chunks.capacity();
            self.chunks.shrink_to_fit();
            n += (before - self.chunks.capacity()) * std::mem::size_of::<Chunk>();
        }
        self.bytes -= chunk.bytes();
        self.len -= chunk.index.len();
        Some(n)
    }

    /// The kept events from seq `from` on, oldest first: each seq and a
    /// copy of its text (a sealed chunk is unpacked once, as it is reached).
    pub(super) fn iter_from(&self, from: u64) -> impl Iterator<Item = (u64, Bytes)> + '_ {
        let first = self.chunks.partition_point(|c| c.last_seq() < from);
        let skip = self.chunks.get(first).map_or(0, |c| {
            c.index
                .partition_point(|&(s, _)| c.first_seq + (s as u64) < from)
        });
        self.chunks
            .range(first..)
            .flat_map(Chunk::events)
            .skip(skip)
    }

    /// Every chunk, handed over (compaction and reload drop them).
    pub(super) fn take(&mut self) -> Packed {
        let empty = Packed {
            chunks: VecDeque::new(),
            chunk: self.chunk,
            len: 0,
            bytes: 0,
        };
        std::mem::replace(self, empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(seq: u64, len: usize) -> Vec<u8> {
        format!("{seq:0len$}").into_bytes()
    }

    #[test]
    fn events_read_back_from_any_seq_in_order() {
        let mut p = Packed::new(2048); // 256-byte chunks
        for seq in 10..110 {
            p.push(seq, &text(seq, 40));
        }
        assert_eq!((p.len(), p.front_seq()), (100, Some(10)));
        for from in [0, 10, 11, 57, 109] {
            let got: Vec<u64> = p.iter_from(from).map(|(s, _)| s).collect();
            let want: Vec<u64> = (from.max(10)..110).collect();
            assert_eq!(got, want, "from {from}");
        }
        assert_eq!(p.iter_from(110).count(), 0);
        for (seq, json) in p.iter_from(0) {
            assert_eq!(json, text(seq, 40).as_slice());
        }
    }

    /// A quiet thread's chunk holds about what it has, not a chunk's size.
    #[test]
    fn a_chunk_reserves_about_what_it_holds() {
        let mut p = Packed::new(4 << 20); // 16 KiB chunks
        for seq in 0..5 {
            p.push(seq, &text(seq, 150));
        }
        assert!(p.bytes() < 2 * 1024, "{} bytes for 750 of text", p.bytes());
        for seq in 5..1000 {
            p.push(seq, &text(seq, 150));
        }
        assert!(p.chunks.iter().all(|c| c.bytes() <= MAX_CHUNK + 1024));
    }

    #[test]
    fn gaps_in_seqs_and_events_bigger_than_a_chunk_are_kept_as_they_are() {
        let mut p = Packed::new(2048);
        p.push(1, &text(1, 10));
        p.push(5, &text(5, 1000)); // its own chunk
        p.push(6, &text(6, 10));
        let got: Vec<(u64, usize)> = p.iter_from(2).map(|(s, j)| (s, j.len())).collect();
        assert_eq!(got, vec![(5, 1000), (6, 10)]);
    }

    /// Text LZ4 finds nothing to share in (hex digits of a pseudo-random
    /// sequence), as an event of random content would be.
    fn noise(seq: u64, len: usize) -> Vec<u8> {
        let mut x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b"0123456789abcdef"[(x & 15) as usize]
            })
            .collect()
    }

    /// An AG-UI event as a streaming agent sends hundreds of: the same
    /// type, message id and field names, a word and a timestamp apart.
    fn delta(seq: u64) -> Vec<u8> {
        format!(
            r#"{{"type":"TEXT_MESSAGE_CONTENT","messageId":"msg-{}","delta":" w{}","timestamp":{}}}"#,
            seq / 40,
            seq % 97,
            1_795_879_537_235 + seq * 3
        )
        .into_bytes()
    }

    /// An event that does not compress costs its text and a few bytes:
    /// the point of packing.
    #[test]
    fn an_event_costs_its_text_and_eight_bytes_of_index() {
        let mut p = Packed::new(4 << 20);
        for seq in 0..10_000 {
            p.push(seq, &noise(seq, 110));
        }
        let per_event = p.bytes() as f64 / 10_000.0;
        assert!(per_event < 110.0 * 1.1, "{per_event} bytes an event");
        assert!(
            p.chunks.iter().all(|c| matches!(c.text, Text::Plain(_))),
            "compression that does not pay is not kept"
        );
        for (seq, json) in p.iter_from(0) {
            assert_eq!(json, noise(seq, 110).as_slice());
        }
    }

    /// Sealed chunks of a streaming run are compressed and read back as
    /// they were, from any seq; the chunk being filled stays plain.
    #[test]
    fn a_run_s_sealed_chunks_hold_a_fraction_of_their_text_and_read_back_whole() {
        let mut p = Packed::new(4 << 20); // 16 KiB chunks
        let mut json = 0;
        for seq in 1..=5_000 {
            let d = delta(seq);
            json += d.len();
            p.push(seq, &d);
        }
        assert!(
            p.bytes() * 3 < json,
            "{} bytes held for {json} of text",
            p.bytes()
        );
        let sealed = p.chunks.len() - 1;
        assert!(
            p.chunks
                .iter()
                .take(sealed)
                .all(|c| matches!(c.text, Text::Lz4 { .. })),
            "every chunk but the newest is compressed"
        );
        assert!(matches!(p.chunks.back().unwrap().text, Text::Plain(_)));
        for from in [0, 1, 2, 700, 701, 4_999, 5_000] {
            let got: Vec<(u64, Bytes)> = p.iter_from(from).collect();
            assert_eq!(got.len() as u64, 5_001 - from.max(1), "from {from}");
            for (seq, text) in got {
                assert_eq!(text, delta(seq).as_slice(), "seq {seq} from {from}");
            }
        }
        // Trimming a compressed chunk gives back what it held.
        let before = p.bytes();
        let freed = p.pop_front_before(4_000).unwrap();
        assert_eq!(p.bytes(), before - freed);
        assert!(freed < MAX_CHUNK / 2, "{freed}");
    }

    #[test]
    fn whole_chunks_leave_and_never_one_holding_a_kept_seq() {
        let mut p = Packed::new(2048);
        for seq in 1..=100 {
            p.push(seq, &text(seq, 40));
        }
        let before = p.bytes();
        let freed = p.pop_front_before(50).expect("the first chunk is older");
        assert_eq!(p.bytes(), before - freed);
        let front = p.front_seq().unwrap();
        assert!(front > 1 && front <= 50, "{front}");
        while p.pop_front_before(50).is_some() {}
        let front = p.front_seq().unwrap();
        assert!(front <= 50, "seq 50 is still kept: front {front}");
        assert_eq!(p.iter_from(0).count() as u64, 101 - front);
        assert_eq!(p.len() as u64, 101 - front);
    }
}
