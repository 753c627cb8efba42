//! One message of a thread's conversation as the fold keeps it: a JSON tree
//! while a run writes it, its compact JSON text once the run has ended.
//!
//! Why two forms: a message streamed in delta by delta must be cheap to
//! append to, and a `serde_json::Value` is; but a finished message is only
//! ever read again (a snapshot, the history a run sends upstream, a branch's
//! base), and as a tree it cost about five times its text. A heap profile of
//! the soak (docs/benchmarks.md, "Memory by the byte") found the
//! conversations' trees — an `IndexMap` of 100-byte slots per message, a
//! key string per field, strings grown by doubling — at 4.4 KB a run, more
//! than the run's events. Closed, a message costs its text and a small
//! header, in two allocations that never change size (so they leave no
//! holes behind as the trees did).
//!
//! A third form comes later: once a conversation has piled up two pages'
//! worth of finished messages, the fold packs the oldest into a sealed page
//! ([`super::sealed`]), where many share one compressed text; the message
//! is then the page and its place on it, and reads the same.
//!
//! A closed message is read back by parsing it ([`Message::value`]): the
//! readers are a snapshot, a run's start and a branch, each already
//! O(the conversation); the hot path (a delta appended to the message being
//! streamed) touches only open messages. Id and role, which lookups scan
//! for, are kept as ranges of the text so finding a message parses nothing.

use super::authorship::RunAgent;
use super::sealed::{IdStr, Page, Sealing};
use serde::{Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::sync::Arc;

/// A message (an AG-UI `Message` object), shared between the fold and the
/// checkpoints of the runs that ended with it: changing one copies it.
#[derive(Clone)]
pub struct Message(Form);

#[derive(Clone)]
enum Form {
    /// Being written: deltas append to it.
    Open(Arc<Value>),
    /// Finished: its compact JSON.
    Closed(Arc<Closed>),
    /// Finished and packed with others: message `.1` of a sealed page
    /// ([`super::sealed`]).
    Sealed(Arc<Page>, u32),
}

struct Closed {
    json: Box<RawValue>,
    id: Field,
    role: Field,
    /// Whether it carries `toolCalls` (a tool call's lookup skips the rest
    /// without parsing them).
    has_tool_calls: bool,
}

/// A top-level string field of a closed message.
enum Field {
    Absent,
    /// Bytes `start..end` of the text (a string with no escapes reads the
    /// same in the text as in the value).
    At(u32, u32),
    /// A string with escapes, unescaped.
    Owned(Box<str>),
}

impl Field {
    fn of(json: &str, v: &Value, key: &str) -> Field {
        let Some(s) = v.get(key).and_then(Value::as_str) else {
            return Field::Absent;
        };
        let quoted = serde_json::to_string(s).expect("a string serializes");
        let plain = quoted.len() == s.len() + 2;
        // The first occurrence of the same string reads as the same text,
        // whichever field of the message it belongs to.
        match json.find(quoted.as_str()) {
            Some(at) if plain && json.len() <= u32::MAX as usize => {
                Field::At((at + 1) as u32, (at + 1 + s.len()) as u32)
            }
            _ => Field::Owned(s.into()),
        }
    }

    fn get<'a>(&'a self, json: &'a str) -> Option<&'a str> {
        match self {
            Field::Absent => None,
            Field::At(a, b) => Some(&json[*a as usize..*b as usize]),
            Field::Owned(s) => Some(s),
        }
    }
}

impl Message {
    /// A message to be written to (or just made).
    pub fn open(v: Value) -> Message {
        Message(Form::Open(Arc::new(v)))
    }

    /// A finished message (read from a store, or closed at a run's end).
    pub fn closed(v: &Value) -> Message {
        let text = serde_json::to_string(v).expect("a message serializes");
        let id = Field::of(&text, v, "id");
        let role = Field::of(&text, v, "role");
        let has_tool_calls = v.get("toolCalls").is_some();
        let json = RawValue::from_string(text).expect("serde_json's own output is JSON");
        Message(Form::Closed(Arc::new(Closed {
            json,
            id,
            role,
            has_tool_calls,
        })))
    }

    /// Closes it if it is open (a run that wrote it has ended); a closed
    /// message stays the very same one (still shared where it is).
    pub fn close(&mut self) {
        if let Form::Open(v) = &self.0 {
            *self = Message::closed(v);
        }
    }

    pub fn is_open(&self) -> bool {
        matches!(self.0, Form::Open(_))
    }

    /// True when it is on a sealed page.
    pub fn is_sealed(&self) -> bool {
        matches!(self.0, Form::Sealed(..))
    }

    /// True when it is on a sealed page whose text left memory for the
    /// spill file ([`super::page_spill`]).
    pub fn is_spilled(&self) -> bool {
        matches!(&self.0, Form::Sealed(page, _) if page.is_spilled())
    }

    /// A finished message not on a page yet, short enough for one: what
    /// [`Message::seal`] takes.
    pub fn sealable(&self) -> bool {
        matches!(&self.0, Form::Closed(c) if c.json.get().len() <= super::sealed::MAX_SEALED_MESSAGE)
    }

    /// Packs `messages` (each [`Message::sealable`], with the run that
    /// introduced it, if one is recorded) into one sealed page
    /// ([`super::sealed`]): each becomes its place on it. Answers the page.
    pub fn seal(mut messages: Vec<(&mut Message, Option<RunAgent>)>) -> Arc<Page> {
        let page = Arc::new(Page::seal(messages.iter_mut().map(
            |(m, origin)| match &m.0 {
                Form::Closed(c) => Sealing {
                    json: c.json.get(),
                    id: c.id.get(c.json.get()),
                    role: c.role.get(c.json.get()).unwrap_or_default(),
                    has_tool_calls: c.has_tool_calls,
                    origin: std::mem::take(origin),
                },
                _ => unreachable!("only finished messages are sealed"),
            },
        )));
        for (i, (m, _)) in messages.iter_mut().enumerate() {
            **m = Message(Form::Sealed(page.clone(), i as u32));
        }
        super::page_spill::register(&page);
        page
    }

    /// Becomes the same message on `page` when the page holds one with its
    /// id and the very same text (a run record's copy of an input message
    /// the fold has just sealed): one text kept instead of two. Answers
    /// whether it did.
    pub fn share_page(&mut self, page: &Arc<Page>) -> bool {
        let Form::Closed(c) = &self.0 else {
            return false;
        };
        let at = c.id.get(c.json.get()).and_then(|id| page.position(id));
        match at {
            Some(i) if *page.json(i) == *c.json.get() => {
                self.0 = Form::Sealed(page.clone(), i);
                true
            }
            _ => false,
        }
    }

    /// The page it is on and its place there, when sealed.
    pub fn on_page(&self) -> Option<(&Arc<Page>, u32)> {
        match &self.0 {
            Form::Sealed(page, i) => Some((page, *i)),
            _ => None,
        }
    }

    /// True when it is message `i` of `page` itself (not a copy of it).
    pub fn is_of_page(&self, page: &Arc<Page>, i: u32) -> bool {
        matches!(&self.0, Form::Sealed(p, j) if Arc::ptr_eq(p, page) && *j == i)
    }

    /// Message `i` of `page` (as sealing made it).
    pub fn of_page(page: &Arc<Page>, i: u32) -> Message {
        debug_assert!((i as usize) < page.len());
        Message(Form::Sealed(page.clone(), i))
    }

    /// Its JSON text, when finished (`None` while open).
    fn text(&self) -> Option<super::sealed::SealedText<'_>> {
        match &self.0 {
            Form::Open(_) => None,
            Form::Closed(c) => Some(super::sealed::SealedText::Plain(c.json.get())),
            Form::Sealed(p, i) => Some(p.json(*i)),
        }
    }

    /// Its `id` (a sealed one's read from its page, which may read it back
    /// from the spill file).
    pub fn id(&self) -> Option<IdStr<'_>> {
        match &self.0 {
            Form::Open(v) => v.get("id").and_then(Value::as_str).map(IdStr::from),
            Form::Closed(c) => c.id.get(c.json.get()).map(IdStr::from),
            Form::Sealed(p, i) => p.id(*i),
        }
    }

    /// Its `role` ("" when it has none).
    pub fn role(&self) -> &str {
        match &self.0 {
            Form::Open(v) => v.get("role").and_then(Value::as_str),
            Form::Closed(c) => c.role.get(c.json.get()),
            Form::Sealed(p, i) => Some(p.role(*i)),
        }
        .unwrap_or_default()
    }

    /// Whether it may carry tool calls (false means it does not).
    pub fn may_have_tool_calls(&self) -> bool {
        match &self.0 {
            Form::Open(v) => v.get("toolCalls").is_some(),
            Form::Closed(c) => c.has_tool_calls,
            Form::Sealed(p, i) => p.has_tool_calls(*i),
        }
    }

    /// Whether it may name tool call `id` in its `toolCalls` (false means
    /// it does not; a sealed one answers without unpacking its page).
    pub fn may_name_tool_call(&self, id: &str) -> bool {
        match &self.0 {
            Form::Sealed(p, i) => p.has_tool_calls(*i) && p.may_name_tool_call(id),
            _ => self.may_have_tool_calls() && self.json_mentions(id),
        }
    }

    /// Whether its text may hold the string `needle` (a closed message's,
    /// searched without parsing; an open one, or a needle JSON writes with
    /// escapes, answers true: look at its value).
    pub fn json_mentions(&self, needle: &str) -> bool {
        let Some(text) = self.text() else {
            return true;
        };
        let plain = serde_json::to_string(needle).is_ok_and(|q| q.len() == needle.len() + 2);
        !plain || text.contains(needle)
    }

    /// The message as a value: borrowed when open, parsed when closed.
    pub fn value(&self) -> Cow<'_, Value> {
        match (&self.0, self.text()) {
            (Form::Open(v), _) => Cow::Borrowed(&**v),
            (_, Some(text)) => {
                Cow::Owned(serde_json::from_str(&text).expect("a closed message parses"))
            }
            (_, None) => unreachable!("only an open message has no text"),
        }
    }

    /// The message as an owned value.
    pub fn to_value(&self) -> Value {
        self.value().into_owned()
    }

    /// The message to change (opened again if closed, copied if shared).
    pub fn make_mut(&mut self) -> &mut Value {
        if let Some(text) = self.text() {
            let v = serde_json::from_str(&text).expect("a closed message parses");
            self.0 = Form::Open(Arc::new(v));
        }
        match &mut self.0 {
            Form::Open(v) => Arc::make_mut(v),
            Form::Closed(_) | Form::Sealed(..) => unreachable!("opened above"),
        }
    }

    /// True for the very same message (not an equal copy).
    pub fn ptr_eq(a: &Message, b: &Message) -> bool {
        match (&a.0, &b.0) {
            (Form::Open(x), Form::Open(y)) => Arc::ptr_eq(x, y),
            (Form::Closed(x), Form::Closed(y)) => Arc::ptr_eq(x, y),
            (Form::Sealed(x, i), Form::Sealed(y, j)) => Arc::ptr_eq(x, y) && i == j,
            _ => false,
        }
    }

    /// Its address, to write a message shared by many checkpoints once.
    pub fn addr(&self) -> usize {
        match &self.0 {
            Form::Open(v) => Arc::as_ptr(v) as usize,
            Form::Closed(c) => Arc::as_ptr(c) as usize,
            // Addresses use the low 48 bits; the index tells a page's
            // messages apart.
            Form::Sealed(p, i) => Arc::as_ptr(p) as usize ^ ((*i as usize + 1) << 48),
        }
    }

    /// Bytes of its JSON text (a closed one's exactly; an open one's
    /// serialized to count).
    pub fn json_len(&self) -> usize {
        match &self.0 {
            Form::Open(v) => serde_json::to_vec(&**v).map_or(0, |b| b.len()),
            Form::Closed(c) => c.json.get().len(),
            Form::Sealed(p, i) => p.json_len(*i),
        }
    }

    /// What it holds in memory, about: a closed one its text and header, a
    /// sealed one its share of its page, an open one `value_factor` times
    /// its text (a tree's cost).
    pub fn approx_bytes(&self, value_factor: usize) -> usize {
        const HEADER: usize = std::mem::size_of::<Closed>() + 16;
        match &self.0 {
            Form::Open(_) => self.json_len() * value_factor,
            Form::Closed(c) => c.json.get().len() + HEADER,
            // Its share of the page (which its neighbours share too).
            Form::Sealed(p, _) => p.heap_bytes() / p.len().max(1) + std::mem::size_of::<Message>(),
        }
    }
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Form::Open(v) => v.serialize(s),
            Form::Closed(c) => c.json.serialize(s),
            Form::Sealed(p, i) => RawValue::from_string(p.json(*i).to_owned())
                .expect("a sealed message is JSON")
                .serialize(s),
        }
    }
}

/// Equal when they say the same, whatever their forms.
impl PartialEq for Message {
    fn eq(&self, o: &Message) -> bool {
        if Message::ptr_eq(self, o) {
            return true;
        }
        match (self.text(), o.text()) {
            (Some(a), Some(b)) if *a == *b => true,
            _ => *self.value() == *o.value(),
        }
    }
}

/// Equal to a value saying the same: a closed message compares its text
/// first (an agent restating the conversation sends it as it was), and
/// parses only when the texts differ (keys in another order).
impl PartialEq<Value> for Message {
    fn eq(&self, o: &Value) -> bool {
        match (&self.0, self.text()) {
            (Form::Open(v), _) => **v == *o,
            (_, text) => {
                text.is_some_and(|text| serde_json::to_string(o).is_ok_and(|t| t == *text))
                    || *self.value() == *o
            }
        }
    }
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Form::Open(v) => write!(f, "Open({v})"),
            Form::Closed(c) => write!(f, "Closed({})", c.json.get()),
            Form::Sealed(p, i) => write!(f, "Sealed({})", &*p.json(*i)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_closed_message_reads_as_the_open_one() {
        let v =
            json!({"id": "m1", "role": "assistant", "content": "hi", "toolCalls": [{"id": "c"}]});
        let mut m = Message::open(v.clone());
        m.close();
        assert!(!m.is_open());
        assert_eq!(m.id().as_deref(), Some("m1"));
        assert_eq!(m.role(), "assistant");
        assert!(m.may_have_tool_calls());
        assert_eq!(*m.value(), v);
        assert_eq!(serde_json::to_value(&m).unwrap(), v);
        assert_eq!(m, Message::open(v));
    }

    #[test]
    fn ids_with_escapes_and_ids_repeated_inside_read_right() {
        // The id appears first inside the content; the range still reads it.
        let v = json!({"content": "see \"x\" and x", "id": "x", "role": "user"});
        let m = Message::closed(&v);
        assert_eq!(m.id().as_deref(), Some("x"));
        assert!(m.json_mentions("see") && !m.json_mentions("absent"));
        assert!(
            m.json_mentions("q\"uote"),
            "a needle with escapes is not ruled out"
        );
        let v = json!({"id": "a\"b\\c\n", "role": "us\u{e9}r"});
        let m = Message::closed(&v);
        assert_eq!(m.id().as_deref(), Some("a\"b\\c\n"));
        assert_eq!(m.role(), "us\u{e9}r");
        let m = Message::closed(&json!({"id": 7, "role": null}));
        assert_eq!(m.id(), None);
        assert_eq!(m.role(), "");
    }

    #[test]
    fn changing_a_closed_message_opens_a_copy() {
        let mut a = Message::closed(&json!({"id": "m", "role": "assistant", "content": "a"}));
        let b = a.clone();
        assert!(Message::ptr_eq(&a, &b));
        a.make_mut()["content"] = json!("ab");
        assert!(a.is_open());
        assert!(!Message::ptr_eq(&a, &b));
        assert_eq!(b.value()["content"], "a");
        assert_eq!(a.value()["content"], "ab");
        let before = a.clone();
        a.close();
        assert!(!Message::ptr_eq(&a, &before));
        let again = a.clone();
        a.close();
        assert!(
            Message::ptr_eq(&a, &again),
            "closing a closed message keeps it"
        );
    }
}
