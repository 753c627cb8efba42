//! A journal entry: one event, its seq, and its transports' frames.

use crate::protocol::Event;
use crate::protocol::authorship::RunAgent;
use bytes::Bytes;
use std::sync::{Arc, OnceLock};

/// One journal event and its seq.
///
/// The event's JSON text is the only copy of its bytes kept here; what a
/// transport sends (a WebSocket envelope, an SSE or protobuf frame) is built
/// by that transport's encoder (`server/encode/`) on first use and cached in the entry's frame
/// slots, shared by every viewer on that transport ([`Entry::frame`]).
/// Thread code never builds a frame: it knows no transport.
pub struct Entry {
    /// The thread's id (shared by all its entries): a connection's writer
    /// serves many threads and must name the one each event belongs to.
    pub thread_id: Arc<str>,
    pub seq: u64,
    pub event: Event,
    /// The run the event belongs to, set when the thread folds it in (the
    /// fold knows which run is open): what each viewer may see of it
    /// depends on that run's agent. Unset reads as unknown (fails closed).
    origin: OnceLock<RunAgent>,
    frames: [OnceLock<Bytes>; FRAME_SLOTS],
}

/// How many transports can cache a frame per entry (SSE needs none: its
/// frame is written afresh, see `server/encode`).
const FRAME_SLOTS: usize = 2;

/// The frame cache slot a transport owns (see [`Entry::frame`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameSlot(usize);

impl FrameSlot {
    /// WebSocket `event` envelopes.
    pub const WEBSOCKET: FrameSlot = FrameSlot(0);
    /// AG-UI protobuf frames (length prefix + `Event` message).
    pub const PROTO: FrameSlot = FrameSlot(1);
}

impl Entry {
    /// An entry for `event` at `seq` of thread `thread_id` (no frame built yet).
    pub fn new(thread_id: Arc<str>, seq: u64, event: Event) -> Entry {
        Entry {
            thread_id,
            seq,
            event,
            origin: OnceLock::new(),
            frames: Default::default(),
        }
    }

    /// The run this event belongs to ([`RunAgent::Unknown`] until folded).
    pub fn origin(&self) -> &RunAgent {
        static UNKNOWN: RunAgent = RunAgent::Unknown;
        self.origin.get().unwrap_or(&UNKNOWN)
    }

    /// Records the run this event belongs to (once: a journal entry's run
    /// never changes).
    pub(super) fn set_origin(&self, origin: RunAgent) {
        let _ = self.origin.set(origin);
    }

    /// This entry's frame for one transport: built by `encode` the first time
    /// any viewer on that transport needs it, then shared.
    pub fn frame(&self, slot: FrameSlot, encode: impl FnOnce(&Entry) -> Bytes) -> Bytes {
        self.frames[slot.0].get_or_init(|| encode(self)).clone()
    }

    /// What queueing this entry costs a viewer's budget: its JSON plus a
    /// transport envelope's worth.
    pub fn cost(&self) -> usize {
        self.event.json().len() + 64
    }
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("seq", &self.seq)
            .field("event", &self.event)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    /// A busy thread keeps up to `threads.max_events` entries: what one
    /// costs beside its event's text is this struct (docs/operations.md,
    /// "What a busy thread costs"). 272 bytes since events are scanned
    /// rather than parsed (360 before, with a third frame slot and 32-bit
    /// spans); growing it is a decision, not an accident.
    #[test]
    fn an_entry_stays_small() {
        assert!(std::mem::size_of::<super::Entry>() <= 272);
        assert!(std::mem::size_of::<crate::protocol::Event>() <= 136);
    }
}
