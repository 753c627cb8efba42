//! A run's end, kept: the conversation, state and pending interrupts as
//! they stood when the run ended, so a branch from it, or the view "as it
//! was at the end of run R", costs a clone instead of a replay
//! ([`super::lineage`] keeps the newest ones per thread).
//!
//! Why a checkpoint shares its conversation with the one before it: a
//! thread keeps the newest 16 run ends, and each held a list as long as
//! the conversation (a pointer and an origin per message, 40 bytes). A
//! heap profile of a soak found those lists at 8 KB a thread after 80
//! runs, growing with every message: 16 × 40 bytes a message, more than
//! the message itself. A run usually appends to its base's conversation,
//! so its checkpoint keeps only what it appended and points at the base's
//! list for the rest; the chain is cut (one flat copy) every
//! [`MAX_CHAIN`] links, so reading one walks a bounded number of parts.
//!
//! Why a whole sealed page is one part: the fold seals its older messages
//! into pages ([`super::sealed`]) at a run's end, and the next checkpoint
//! no longer starts like the one before (its messages are the same, on a
//! page now), so it is copied flat: every couple of dozen runs, a list as
//! long as the conversation, 32 bytes a message — a fifth of what a long
//! watched conversation held (docs/benchmarks.md, "Thirteenth pass"). A
//! page's messages, in order and each by the run the page records for it,
//! are kept as the page alone, so a flat copy costs a part per page plus
//! one per message not on one.

use super::authorship::{Authors, RunAgent};
use super::message::Message;
use super::message_list::MessageList;
use super::sealed::Page;
use serde_json::{Value, json};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

/// Links before a conversation is copied flat: bounds a read's walk, and
/// the copies a thread's 16 kept checkpoints hold (at most two).
const MAX_CHAIN: usize = 32;

/// Some messages of a conversation, each with the run that introduced it.
#[derive(Debug)]
enum Part {
    One(Message, RunAgent),
    /// Every message of the page, in order, each introduced by the run
    /// the page records for it ([`page_origin`]).
    Page(Arc<Page>),
}

impl Part {
    /// Its messages with their origins.
    fn entries(&self) -> impl Iterator<Item = (Message, RunAgent)> + '_ {
        let (one, page) = match self {
            Part::One(m, o) => (Some((m.clone(), o.clone())), None),
            Part::Page(page) => (None, Some(page)),
        };
        let on_page = page.into_iter().flat_map(|page| {
            (0..page.len() as u32).map(move |i| (Message::of_page(page, i), page_origin(page, i)))
        });
        one.into_iter().chain(on_page)
    }

    /// True when the next of `messages` (as many as it holds) are its very
    /// messages, introduced by the same runs.
    fn is<'m>(
        &self,
        messages: &mut impl Iterator<Item = Cow<'m, Message>>,
        origin: &impl Fn(&Message) -> RunAgent,
    ) -> bool {
        match self {
            Part::One(m, o) => messages
                .next()
                .is_some_and(|n| Message::ptr_eq(m, &n) && *o == origin(&n)),
            Part::Page(page) => (0..page.len() as u32).all(|i| {
                messages
                    .next()
                    .is_some_and(|m| page_message(&m, page, i, &origin(&m)))
            }),
        }
    }
}

/// True when `m` is message `i` of `page`, introduced by the run the page
/// records for it.
fn page_message(m: &Message, page: &Arc<Page>, i: u32, origin: &RunAgent) -> bool {
    m.is_of_page(page, i) && page_origin(page, i) == *origin
}

/// The run a page records for message `i` ([`RunAgent::Unknown`] when it
/// records none, as [`Authors::of_message`] answers then).
fn page_origin(page: &Page, i: u32) -> RunAgent {
    page.origin(i).cloned().unwrap_or_default()
}

/// `entries` as parts: each run of a whole page's messages, in order and
/// by the runs the page records, as the page; the rest one by one.
fn parts_of(entries: Vec<(Message, RunAgent)>) -> Vec<Part> {
    let mut parts = Vec::new();
    let mut at = 0;
    while at < entries.len() {
        let whole_page = entries[at].0.on_page().and_then(|(page, first)| {
            let run = entries.get(at..at + page.len())?;
            let whole = first == 0
                && run
                    .iter()
                    .zip(0..)
                    .all(|((m, o), i)| page_message(m, page, i, o));
            whole.then(|| page.clone())
        });
        match whole_page {
            Some(page) => {
                at += page.len();
                parts.push(Part::Page(page));
            }
            None => {
                let (m, o) = entries[at].clone();
                parts.push(Part::One(m, o));
                at += 1;
            }
        }
    }
    parts.shrink_to_fit();
    parts
}

/// Messages and who introduced each, as a run's end saw them: the messages
/// of `before` (another checkpoint's, shared), then `own`.
#[derive(Debug)]
struct Conversation {
    before: Option<Arc<Conversation>>,
    own: Vec<Part>,
    len: usize,
    links: usize,
}

impl Conversation {
    fn flat(entries: Vec<(Message, RunAgent)>) -> Conversation {
        Conversation {
            before: None,
            len: entries.len(),
            own: parts_of(entries),
            links: 0,
        }
    }

    /// Its parts, oldest first.
    fn parts(&self) -> Vec<&[Part]> {
        let mut parts = vec![self.own.as_slice()];
        let mut at = self.before.as_deref();
        while let Some(c) = at {
            parts.push(&c.own);
            at = c.before.as_deref();
        }
        parts.reverse();
        parts
    }

    fn iter(&self) -> impl Iterator<Item = (Message, RunAgent)> + '_ {
        self.parts().into_iter().flatten().flat_map(Part::entries)
    }

    /// True when `messages` start with its messages, by the same runs.
    fn starts(&self, messages: &MessageList, origin: &impl Fn(&Message) -> RunAgent) -> bool {
        if self.len > messages.len() {
            return false;
        }
        let mut messages = messages.iter();
        self.parts()
            .into_iter()
            .flatten()
            .all(|part| part.is(&mut messages, origin))
    }

    /// The conversation of `entries`, sharing `previous`'s when that is
    /// where it starts (as [`Conversation::after`]; a base read back).
    fn after_entries(
        previous: Option<&Arc<Conversation>>,
        entries: Vec<(Message, RunAgent)>,
    ) -> Conversation {
        let shared = previous.filter(|p| {
            p.links < MAX_CHAIN
                && p.len <= entries.len()
                && p.iter()
                    .zip(&entries)
                    .all(|((m, o), (n, q))| Message::ptr_eq(&m, n) && o == *q)
        });
        match shared {
            Some(p) => Conversation {
                before: Some(p.clone()),
                len: entries.len(),
                own: parts_of(entries.into_iter().skip(p.len).collect()),
                links: p.links + 1,
            },
            None => Conversation::flat(entries),
        }
    }

    /// The conversation of `messages`, sharing `previous`'s when that is
    /// where it starts (the very same message values, by the same runs).
    fn after(
        previous: Option<&Arc<Conversation>>,
        messages: &MessageList,
        origin: impl Fn(&Message) -> RunAgent,
    ) -> Conversation {
        let entries = |skip: usize| {
            (messages.iter().skip(skip))
                .map(|m| {
                    let o = origin(&m);
                    (m.into_owned(), o)
                })
                .collect()
        };
        let shared = previous.filter(|p| p.links < MAX_CHAIN && p.starts(messages, &origin));
        match shared {
            Some(p) => Conversation {
                before: Some(p.clone()),
                own: parts_of(entries(p.len)),
                len: messages.len(),
                links: p.links + 1,
            },
            None => Conversation::flat(entries(0)),
        }
    }
}

/// A run's end: its messages, state and pending interrupts, and which
/// run's agent introduced each message (so a view at this run is shown to
/// each viewer by the right agent's rules).
///
/// Messages are shared with the thread's fold (which copies one only when
/// it changes after the run's end), the list of them with the previous
/// checkpoint where it starts the same (see the module's docs), and state
/// with the previous checkpoint when unchanged: a run's end costs what the
/// run added, not a copy of the conversation.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    pub seq: u64,
    conversation: Arc<Conversation>,
    state: Arc<Value>,
    state_origins: Vec<RunAgent>,
    pub interrupts: Vec<Value>,
}

/// Equal when they say the same (however each shares its parts).
impl PartialEq for Checkpoint {
    fn eq(&self, o: &Self) -> bool {
        self.seq == o.seq
            && self.conversation.len == o.conversation.len
            && self
                .conversation
                .iter()
                .zip(o.conversation.iter())
                .all(|((m, a), (n, b))| m == n && a == b)
            && self.state == o.state
            && self.state_origins == o.state_origins
            && self.interrupts == o.interrupts
    }
}

impl Checkpoint {
    /// A checkpoint of the fold's `messages` (shared: see the type's
    /// docs) and `state` (shared with `previous` when unchanged).
    pub fn new(
        seq: u64,
        (messages, state, interrupts): (&MessageList, &Value, &[Value]),
        authors: &Authors,
        previous: Option<&Checkpoint>,
    ) -> Checkpoint {
        let conversation = Conversation::after(previous.map(|p| &p.conversation), messages, |m| {
            authors.of_message(m.id().as_deref()).clone()
        });
        let state = match previous {
            Some(p) if *p.state == *state => p.state.clone(),
            _ => Arc::new(state.clone()),
        };
        Checkpoint {
            seq,
            conversation: Arc::new(conversation),
            state,
            state_origins: authors.of_state().to_vec(),
            interrupts: interrupts.to_vec(),
        }
    }

    /// True when both hold the very same state value (not a copy).
    pub fn shares_state_with(&self, other: &Checkpoint) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }

    /// Messages in the conversation.
    pub fn len(&self) -> usize {
        self.conversation.len
    }

    /// True for a run's end with no message yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The messages, as shared with the fold they were taken from.
    pub fn shared_messages(&self) -> Vec<Message> {
        self.conversation.iter().map(|(m, _)| m).collect()
    }

    /// The conversation at this run's end.
    pub fn messages(&self) -> impl Iterator<Item = Message> + '_ {
        self.conversation.iter().map(|(m, _)| m)
    }

    /// The conversation, as owned values.
    pub fn message_values(&self) -> Vec<Value> {
        self.messages().map(|m| m.to_value()).collect()
    }

    pub fn state(&self) -> &Value {
        &self.state
    }

    /// The runs that wrote the state (by agent).
    pub fn state_origins(&self) -> &[RunAgent] {
        &self.state_origins
    }

    /// Who introduced each message (message id, origin).
    pub fn message_authors(&self) -> impl Iterator<Item = (String, RunAgent)> + '_ {
        self.conversation
            .iter()
            .filter_map(|(m, o)| Some((m.id()?.to_string(), o)))
    }

    /// Who introduced each message and wrote the state.
    pub fn authors(&self) -> Authors {
        Authors::from_parts(self.message_authors(), self.state_origins.clone())
    }

    /// Bytes it holds of its own (what it shares is counted where it is
    /// owned): its entries, its interrupts.
    pub fn own_bytes(&self, value_bytes: impl Fn(&Value) -> usize) -> usize {
        std::mem::size_of::<Conversation>()
            + self.conversation.own.capacity() * std::mem::size_of::<Part>()
            + self.interrupts.iter().map(value_bytes).sum::<usize>()
    }
}

/// Checkpoints written once per distinct message and state: a compacted
/// base holds the values in two pools and each checkpoint as indices.
#[derive(Default)]
pub(super) struct Pools {
    messages: Vec<Value>,
    message_index: HashMap<usize, usize>,
    states: Vec<Value>,
    state_index: HashMap<*const Value, usize>,
}

impl Pools {
    fn message(&mut self, m: &Message) -> usize {
        let next = self.messages.len();
        *self.message_index.entry(m.addr()).or_insert_with(|| {
            self.messages.push(m.to_value());
            next
        })
    }

    fn state(&mut self, s: &Arc<Value>) -> usize {
        let next = self.states.len();
        *self.state_index.entry(Arc::as_ptr(s)).or_insert_with(|| {
            self.states.push((**s).clone());
            next
        })
    }

    pub(super) fn checkpoint(&mut self, c: &Checkpoint) -> Value {
        let messages: Vec<usize> = c
            .conversation
            .iter()
            .map(|(m, _)| self.message(&m))
            .collect();
        let origins: Vec<Value> = c.conversation.iter().map(|(_, o)| o.to_json()).collect();
        json!({
            "seq": c.seq,
            "messages": messages,
            "origins": origins,
            "state": self.state(&c.state),
            "stateOrigins": c.state_origins.iter().map(RunAgent::to_json).collect::<Vec<_>>(),
            "interrupts": c.interrupts,
        })
    }

    /// The pools' stored form.
    pub(super) fn into_json(self) -> (Vec<Value>, Vec<Value>) {
        (self.messages, self.states)
    }
}

/// Reads [`Pools::checkpoint`]'s form against the pools read back, sharing
/// the conversation of `previous` (the checkpoint read just before it)
/// where it starts the same, as when it was made.
pub(super) fn checkpoint_from_json(
    v: &Value,
    messages: &[Message],
    states: &[Arc<Value>],
    previous: Option<&Checkpoint>,
) -> Option<Checkpoint> {
    let origins = |k: &str| -> Vec<RunAgent> {
        v.get(k)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(RunAgent::from_json)
            .collect()
    };
    let picked: Option<Vec<Message>> = v
        .get("messages")?
        .as_array()?
        .iter()
        .map(|i| messages.get(i.as_u64()? as usize).cloned())
        .collect();
    let picked = picked?;
    let mut message_origins = origins("origins");
    message_origins.resize(picked.len(), RunAgent::Unknown);
    Some(Checkpoint {
        seq: v.get("seq")?.as_u64()?,
        conversation: Arc::new(Conversation::after_entries(
            previous.map(|p| &p.conversation),
            picked.into_iter().zip(message_origins).collect(),
        )),
        state: states.get(v.get("state")?.as_u64()? as usize)?.clone(),
        state_origins: origins("stateOrigins"),
        interrupts: v
            .get("interrupts")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(id: &str) -> Message {
        Message::closed(&json!({"id": id, "role": "assistant", "content": id}))
    }

    fn checkpoint(messages: &[Message], previous: Option<&Checkpoint>) -> Checkpoint {
        Checkpoint::new(
            messages.len() as u64,
            (&MessageList::from(messages.to_vec()), &json!({}), &[]),
            &Authors::default(),
            previous,
        )
    }

    /// A run that appended to its base's conversation keeps only what it
    /// appended; the whole reads back the same.
    #[test]
    fn a_checkpoint_keeps_only_what_its_run_appended() {
        let mut messages: Vec<Message> = (0..100).map(|i| message(&format!("m{i}"))).collect();
        let first = checkpoint(&messages, None);
        messages.push(message("m100"));
        messages.push(message("m101"));
        let second = checkpoint(&messages, Some(&first));
        assert_eq!(second.conversation.own.len(), 2, "only the two new ones");
        assert_eq!(second.shared_messages(), messages);
        assert_eq!(first.len(), 100);
        let flat = checkpoint(&messages, None);
        assert_eq!(flat, second, "the same conversation, however shared");
        assert!(second.own_bytes(|_| 0) < first.own_bytes(|_| 0) / 10);
    }

    /// A flat copy of a conversation whose older messages are on sealed
    /// pages holds each whole page as one part, and reads the very same
    /// messages; a page one of whose messages changed since, or whose
    /// message another run is now said to have introduced, is held
    /// message by message. The next run's end shares it as before.
    #[test]
    fn a_whole_sealed_page_is_one_part_of_a_conversation() {
        let mut messages: Vec<Message> = (0..400).map(|i| message(&format!("m{i}"))).collect();
        for page in messages[..300].chunks_mut(100) {
            Message::seal(page.iter_mut().map(|m| (m, None)).collect());
        }
        messages[150] = message("changed");
        let other = RunAgent::Agent("other".into());
        let authors = Authors::from_parts([("m250".to_owned(), other.clone())], vec![]);
        let view = |messages: &[Message], previous| {
            Checkpoint::new(
                1,
                (&MessageList::from(messages.to_vec()), &json!({}), &[]),
                &authors,
                previous,
            )
        };
        let first = view(&messages, None);
        // The first page whole; the second and third message by message;
        // the last hundred were never sealed.
        assert_eq!(first.conversation.own.len(), 1 + 100 + 100 + 100);
        let read: Vec<(Message, RunAgent)> = first.conversation.iter().collect();
        assert_eq!(read.len(), messages.len());
        for ((m, o), n) in read.iter().zip(&messages) {
            assert!(Message::ptr_eq(m, n), "the very same message");
            let want = if n.id().as_deref() == Some("m250") {
                &other
            } else {
                &RunAgent::Unknown
            };
            assert_eq!(o, want);
        }
        let one_by_one = (messages.len() - 1) * std::mem::size_of::<Part>();
        assert!(first.own_bytes(|_| 0) < one_by_one);

        messages.push(message("m400"));
        let second = view(&messages, Some(&first));
        assert_eq!(second.conversation.own.len(), 1, "only the new one");
        assert_eq!(second, view(&messages, None));
    }

    /// A conversation that does not start with the base's (a message
    /// changed after the base's end, or a branch restated another history)
    /// is copied flat; a chain is cut at its bound.
    #[test]
    fn a_changed_history_or_a_long_chain_is_copied_flat() {
        let mut messages: Vec<Message> = (0..10).map(|i| message(&format!("m{i}"))).collect();
        let first = checkpoint(&messages, None);
        messages[3] = message("edited");
        let second = checkpoint(&messages, Some(&first));
        assert_eq!(second.conversation.own.len(), 10);
        assert_eq!(second.shared_messages(), messages);

        let mut at = second;
        for i in 0..MAX_CHAIN * 2 {
            messages.push(message(&format!("n{i}")));
            at = checkpoint(&messages, Some(&at));
            assert!(at.conversation.links <= MAX_CHAIN);
            assert!(at.conversation.parts().len() <= MAX_CHAIN + 1);
        }
        assert_eq!(at.shared_messages(), messages);
    }
}
