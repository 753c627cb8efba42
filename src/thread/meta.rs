//! Who posted which meta event on which message: a small summary kept beside
//! the fold, and the AI SDK chat streams that want meta events live.
//!
//! The fold keeps no META events (they are not conversation), and a
//! compaction drops them from the journal, yet an export or a snapshot must
//! still say that Ben gave Ann's answer a thumbs up. So each META event
//! that names a message (`payload.messageId`) leaves a [`Note`] here:
//! bounded in bytes (the oldest notes go first), stored with the compacted
//! base (see `compaction`), rebuilt from the journal on load.
//!
//! A chat response of the AI SDK face is fed its run's events only (it is
//! the run's requester, not a viewer); a meta event posted while it is open
//! reaches it through a [`Listener`], whatever node it was posted on (this
//! runs where each node publishes).

use super::fanout::{Outbox, Outgoing};
use super::judged::judged;
use super::{Entry, Thread};
use crate::protocol::fold::Fold;
use crate::protocol::hooks::{SeenBy, ViewerVisibility};
use serde_json::{Map, Value, json};
use std::collections::VecDeque;
use std::sync::Arc;

/// The bytes of notes a thread keeps (about 200 thumbs); older ones go.
pub const NOTES_BYTES: usize = 32 * 1024;

/// A payload larger than this is not copied into the note (the journal
/// keeps it whole); the note says so with `payloadOmitted`.
const PAYLOAD_KEPT: usize = 512;

/// One meta event on a message: `{id, metaType, by, at, payload?}`.
#[derive(Debug, Clone)]
struct Note {
    message_id: String,
    json: Value,
    bytes: usize,
}

/// A thread's notes and live listeners.
#[derive(Default)]
pub(super) struct MetaNotes {
    notes: VecDeque<Note>,
    bytes: usize,
    listeners: Vec<Listener>,
}

/// An open AI SDK chat stream that gets the thread's meta events.
struct Listener {
    id: u64,
    outbox: Arc<Outbox>,
    seen: SeenBy,
}

impl MetaNotes {
    /// Notes a published META event (others are ignored; so is one that
    /// names no message: it is about the thread, and the journal has it).
    pub(super) fn note(&mut self, event: &crate::protocol::Event) {
        let Some(payload) = event.get("payload").and_then(Value::as_object) else {
            return;
        };
        let Some(message_id) = payload.get("messageId").and_then(Value::as_str) else {
            return;
        };
        let mut note = json!({
            "id": event.get("id"),
            "metaType": event.get("metaType"),
            "by": payload.get("userId"),
            "at": event.get("timestamp"),
        });
        let rest: Map<String, Value> = payload
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "userId" | "messageId"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !rest.is_empty() {
            let rest = Value::Object(rest);
            if rest.to_string().len() <= PAYLOAD_KEPT {
                note["payload"] = rest;
            } else {
                note["payloadOmitted"] = true.into();
            }
        }
        self.push(message_id.to_owned(), note);
    }

    fn push(&mut self, message_id: String, json: Value) {
        let bytes = message_id.len() + json.to_string().len();
        self.notes.push_back(Note {
            message_id,
            json,
            bytes,
        });
        self.bytes += bytes;
        while self.bytes > NOTES_BYTES {
            let Some(old) = self.notes.pop_front() else {
                break;
            };
            self.bytes -= old.bytes;
        }
    }

    /// The notes of the messages `ids` lets through, oldest first per
    /// message: `{messageId: [note…]}`.
    pub(super) fn of(&self, mut shown: impl FnMut(&str) -> bool) -> Map<String, Value> {
        let mut out = Map::new();
        for n in self.notes.iter().filter(|n| shown(&n.message_id)) {
            let list = out
                .entry(n.message_id.clone())
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(list) = list {
                list.push(n.json.clone());
            }
        }
        out
    }

    /// Bytes its notes hold (counted with the thread's fold).
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// What the compacted base keeps: `[[messageId, note]…]`, oldest first.
    pub(super) fn to_base(&self) -> Option<Value> {
        (!self.notes.is_empty()).then(|| {
            self.notes
                .iter()
                .map(|n| json!([n.message_id, n.json]))
                .collect()
        })
    }

    /// Takes the notes back from a compacted base ([`Self::to_base`]);
    /// the listeners stay.
    pub(super) fn load_base(&mut self, base: Option<&Value>) {
        (self.notes, self.bytes) = (VecDeque::new(), 0);
        for pair in base.and_then(Value::as_array).into_iter().flatten() {
            if let (Some(id), Some(note)) = (pair[0].as_str(), pair.get(1)) {
                self.push(id.to_owned(), note.clone());
            }
        }
    }

    /// Hands a published META entry to every open chat stream that may see
    /// it. Outside the byte budget (meta events are small and rate-limited;
    /// a stream that lags reads its run from the journal, which would skip
    /// them), so none is lost while the stream is open.
    pub(super) fn tell(&mut self, entry: &Arc<Entry>, fold: &Fold) {
        self.listeners.retain(|l| !l.outbox.is_closed());
        for l in &mut self.listeners {
            if let Some(seen) = judged(&mut l.seen, entry, fold) {
                l.outbox.push_replay(Outgoing::Event(seen));
            }
        }
    }
}

/// The summary in a snapshot: `meta` (`{messageId: [note…]}`) for the
/// messages the snapshot shows, absent when none has a note.
pub(super) fn attach(snap: &mut Map<String, Value>, notes: &MetaNotes) {
    let shown: std::collections::HashSet<&str> = snap
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("id")?.as_str())
        .collect();
    let meta = notes.of(|id| shown.contains(id));
    if !meta.is_empty() {
        snap.insert("meta".into(), Value::Object(meta));
    }
}

impl Thread {
    /// Sends the META events published from now on to `outbox` (an AI SDK
    /// chat stream), as `visibility` allows, until [`Self::stop_meta`] or
    /// the stream closes.
    pub fn listen_meta(&self, id: u64, outbox: Arc<Outbox>, visibility: ViewerVisibility) {
        let mut inner = self.lock();
        inner.meta_notes.listeners.push(Listener {
            id,
            outbox,
            seen: SeenBy::new(visibility),
        });
    }

    /// Stops sending META events to listener `id`.
    pub fn stop_meta(&self, id: u64) {
        self.lock().meta_notes.listeners.retain(|l| l.id != id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Event;

    fn meta(id: &str, message: &str, by: &str) -> Event {
        Event::build(json!({"type": "META", "id": id, "metaType": "thumbs_up",
            "payload": {"messageId": message, "userId": by}, "timestamp": 1}))
    }

    #[test]
    fn notes_survive_the_base_and_stay_bounded() {
        let mut notes = MetaNotes::default();
        notes.note(&meta("m1", "a1", "ben"));
        let mut back = MetaNotes::default();
        back.load_base(notes.to_base().as_ref());
        let all = back.of(|_| true);
        assert_eq!(all["a1"][0]["by"], "ben");
        assert_eq!(all["a1"][0]["metaType"], "thumbs_up");
        for i in 0..2000 {
            notes.note(&meta(&format!("m{i}"), &format!("msg{i}"), "ben"));
        }
        assert!(notes.bytes <= NOTES_BYTES);
        let kept = notes.of(|_| true);
        assert!(kept.contains_key("msg1999") && !kept.contains_key("a1"));
    }
}
