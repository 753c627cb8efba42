//! A fold's conversation: whole sealed pages first, each standing for all
//! its messages, then the rest one slot each.
//!
//! Why: a watched conversation stays in memory for as long as anyone
//! watches, and a flat list held a 16-byte slot for every message of it
//! (21 with the list's spare room) even once the message was packed on a
//! sealed page ([`super::sealed`]), about a fifth of what a long watched
//! conversation held (docs/benchmarks.md, "Fourteenth pass"). A page whose
//! messages sit in the list in order and nothing else between them is held
//! here as the page alone.
//!
//! Only the oldest pages are held so (a *frozen* prefix), and only whole:
//! the fold changes messages near the end of its conversation (a delta to
//! the message being streamed, a tool result after its call), and reads
//! the rest. Whatever would change a frozen message, or insert between
//! two, first *thaws* the prefix back into slots (O(the conversation),
//! as rare as a late edit of an old message or an agent's
//! `MESSAGES_SNAPSHOT`, itself O(the conversation)); the next run's end
//! freezes what is whole again. Lookups by id scan the pages' ids in place,
//! without a slot or a copy.

use super::message::Message;
use super::sealed::{IdStr, Page};
use serde::{Serialize, Serializer};
use std::borrow::Cow;
use std::sync::Arc;

/// A conversation (see the module's docs).
#[derive(Clone, Default)]
pub struct MessageList {
    /// Whole pages, oldest first, each with the list's length at its end.
    frozen: Vec<(Arc<Page>, usize)>,
    /// Every message after the frozen pages.
    loose: Vec<Message>,
}

impl MessageList {
    /// Messages in the conversation.
    pub fn len(&self) -> usize {
        self.frozen_len() + self.loose.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Messages the frozen pages stand for.
    fn frozen_len(&self) -> usize {
        self.frozen.last().map_or(0, |(_, end)| *end)
    }

    /// Message `i`, borrowed when it has a slot of its own.
    pub fn get(&self, i: usize) -> Option<Cow<'_, Message>> {
        Some(match self.place(i)? {
            Place::Frozen(page, j) => Cow::Owned(Message::of_page(page, j)),
            Place::Loose(m) => Cow::Borrowed(m),
        })
    }

    /// The messages in order (those of frozen pages as new handles to
    /// their place on the page, the rest borrowed).
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = Cow<'_, Message>> + '_ {
        let frozen = self
            .on_frozen()
            .map(|(page, i)| Cow::Owned(Message::of_page(page, i)));
        frozen.chain(self.loose.iter().map(Cow::Borrowed))
    }

    /// Each frozen message's page and place on it, in order.
    fn on_frozen(&self) -> impl DoubleEndedIterator<Item = (&Arc<Page>, u32)> + '_ {
        (self.frozen.iter()).flat_map(|(page, _)| (0..page.len() as u32).map(move |i| (page, i)))
    }

    /// The place of the last message with this id. Scans without copying
    /// anything: the slots, then each frozen page's ids, newest first.
    pub fn rfind_id(&self, id: &str) -> Option<usize> {
        let frozen = self.frozen_len();
        if let Some(i) = self
            .loose
            .iter()
            .rposition(|m| m.id().is_some_and(|at| at == id))
        {
            return Some(frozen + i);
        }
        (self.frozen.iter().rev())
            .find_map(|(page, end)| Some(end - page.len() + page.position(id)? as usize))
    }

    /// Each message's id, in order, read where it is (a frozen page's from
    /// the page).
    pub fn ids(&self) -> impl Iterator<Item = Option<IdStr<'_>>> + '_ {
        self.ids_but(|_| false)
    }

    /// Each message's id, in order, but those of the frozen pages `pass`
    /// says to pass over (none of their bodies is read).
    pub fn ids_but<'a>(
        &'a self,
        pass: impl Fn(&Arc<Page>) -> bool + 'a,
    ) -> impl Iterator<Item = Option<IdStr<'a>>> + 'a {
        let frozen = (self.frozen.iter())
            .filter(move |(page, _)| !pass(page))
            .flat_map(|(page, _)| page.ids());
        frozen.chain(self.loose.iter().map(Message::id))
    }

    /// Each message's role, in order (empty when it has none).
    pub fn roles(&self) -> impl Iterator<Item = &str> + '_ {
        let frozen = self.on_frozen().map(|(page, i)| page.role(i));
        frozen.chain(self.loose.iter().map(Message::role))
    }

    /// The id of message `i`.
    pub fn id_at(&self, i: usize) -> Option<IdStr<'_>> {
        match self.place(i)? {
            Place::Frozen(page, j) => page.id(j),
            Place::Loose(m) => m.id(),
        }
    }

    /// The role of message `i` (empty when it has none, or there is none).
    pub fn role_at(&self, i: usize) -> &str {
        match self.place(i) {
            Some(Place::Frozen(page, j)) => page.role(j),
            Some(Place::Loose(m)) => m.role(),
            None => "",
        }
    }

    /// Places and messages, newest first, passing over the frozen pages
    /// `wanted_on` says hold nothing wanted (without a handle made for any
    /// of their messages).
    pub fn rev_where<'a>(
        &'a self,
        wanted_on: impl Fn(&Page) -> bool + 'a,
    ) -> impl Iterator<Item = (usize, Cow<'a, Message>)> + 'a {
        let frozen = self.frozen_len();
        let loose =
            (self.loose.iter().enumerate().rev()).map(move |(i, m)| (frozen + i, Cow::Borrowed(m)));
        let pages = self
            .frozen
            .iter()
            .rev()
            .filter(move |(page, _)| wanted_on(page))
            .flat_map(|(page, end)| {
                let first = end - page.len();
                (0..page.len() as u32)
                    .rev()
                    .map(move |i| (first + i as usize, Cow::Owned(Message::of_page(page, i))))
            });
        loose.chain(pages)
    }

    /// Where message `i` is.
    fn place(&self, i: usize) -> Option<Place<'_>> {
        let frozen = self.frozen_len();
        if i >= frozen {
            return self.loose.get(i - frozen).map(Place::Loose);
        }
        let p = self.frozen.partition_point(|(_, end)| *end <= i);
        let (page, end) = &self.frozen[p];
        Some(Place::Frozen(page, (i - (end - page.len())) as u32))
    }

    /// Message `i` to change: thaws the frozen pages first when it is on
    /// one (see the module's docs).
    pub fn get_mut(&mut self, i: usize) -> Option<&mut Message> {
        if i < self.frozen_len() {
            self.thaw();
        }
        let frozen = self.frozen_len();
        self.loose.get_mut(i.checked_sub(frozen)?)
    }

    /// Adds a message at the end.
    pub fn push(&mut self, m: Message) {
        self.loose.push(m);
    }

    /// Inserts a message at `i` (thawing first when that is between two
    /// frozen messages).
    pub fn insert(&mut self, i: usize, m: Message) {
        if i < self.frozen_len() {
            self.thaw();
        }
        let frozen = self.frozen_len();
        self.loose.insert(i - frozen, m);
    }

    /// The messages not on a frozen page (all of them once thawed): what a
    /// run's end closes and seals.
    pub fn loose_mut(&mut self) -> &mut [Message] {
        &mut self.loose
    }

    /// Every message, the list left empty.
    pub fn take_all(&mut self) -> Vec<Message> {
        self.thaw();
        std::mem::take(&mut self.loose)
    }

    /// Gives each frozen page's messages a slot again.
    fn thaw(&mut self) {
        if self.frozen.is_empty() {
            return;
        }
        let mut all = Vec::with_capacity(self.len());
        all.extend(self.on_frozen().map(|(page, i)| Message::of_page(page, i)));
        all.append(&mut self.loose);
        self.frozen.clear();
        self.loose = all;
    }

    /// Holds each whole page at the start of the slots as the page alone:
    /// its messages in order, first to last, nothing between them.
    pub fn freeze(&mut self) {
        let mut at = 0;
        let mut end = self.frozen_len();
        while let Some((page, 0)) = self.loose.get(at).and_then(Message::on_page) {
            let n = page.len();
            let whole = (self.loose.get(at..at + n))
                .is_some_and(|run| run.iter().zip(0..).all(|(m, i)| m.is_of_page(page, i)));
            if !whole {
                break;
            }
            end += n;
            self.frozen.push((page.clone(), end));
            at += n;
        }
        if at > 0 {
            self.loose.drain(..at);
            // A list read back whole, or thawed, had a slot for every
            // message: what it keeps is what the slots left need.
            let keep = self.loose.len() * 2;
            if self.loose.capacity() > keep.max(16) {
                self.loose.shrink_to(keep);
            }
        }
    }

    /// What it holds, estimated as [`Message::approx_bytes`] does for
    /// each message in a slot (open ones at `value_factor` times their
    /// JSON), and each frozen page whole, once.
    pub fn approx_bytes(&self, value_factor: usize) -> usize {
        let frozen: usize = (self.frozen.iter())
            .map(|(page, _)| page.heap_bytes() + std::mem::size_of::<(Arc<Page>, usize)>())
            .sum();
        let loose: usize = (self.loose.iter())
            .map(|m| m.approx_bytes(value_factor))
            .sum();
        frozen + loose
    }
}

/// Where a message is: on a frozen page (the page and its place on it) or
/// in a slot.
enum Place<'a> {
    Frozen(&'a Arc<Page>, u32),
    Loose(&'a Message),
}

impl From<Vec<Message>> for MessageList {
    fn from(loose: Vec<Message>) -> MessageList {
        MessageList {
            frozen: Vec::new(),
            loose,
        }
    }
}

impl FromIterator<Message> for MessageList {
    fn from_iter<I: IntoIterator<Item = Message>>(iter: I) -> MessageList {
        MessageList::from(iter.into_iter().collect::<Vec<_>>())
    }
}

/// Equal when they hold the same messages in order, however each holds
/// them.
impl PartialEq for MessageList {
    fn eq(&self, o: &MessageList) -> bool {
        self.len() == o.len() && self.iter().zip(o.iter()).all(|(a, b)| *a == *b)
    }
}

impl PartialEq<Vec<Message>> for MessageList {
    fn eq(&self, o: &Vec<Message>) -> bool {
        self.len() == o.len() && self.iter().zip(o).all(|(a, b)| *a == *b)
    }
}

impl std::fmt::Debug for MessageList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// As the JSON array of its messages.
impl Serialize for MessageList {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::authorship::RunAgent;
    use serde_json::json;

    fn closed(id: &str) -> Message {
        Message::closed(&json!({"id": id, "role": "user", "content": format!("text of {id}")}))
    }

    /// `n` closed messages, the middle `pages.len()` runs of them sealed
    /// into one page each (`pages` gives each page's size).
    fn list(before: usize, pages: &[usize], after: usize) -> Vec<Message> {
        let mut all: Vec<Message> = (0..before).map(|i| closed(&format!("b{i}"))).collect();
        for (p, &n) in pages.iter().enumerate() {
            let mut ms: Vec<Message> = (0..n).map(|i| closed(&format!("p{p}-{i}"))).collect();
            Message::seal(ms.iter_mut().map(|m| (m, None::<RunAgent>)).collect());
            all.extend(ms);
        }
        all.extend((0..after).map(|i| closed(&format!("a{i}"))));
        all
    }

    #[test]
    fn whole_pages_at_the_start_are_held_as_pages_and_read_the_same() {
        let flat = list(0, &[3, 4], 2);
        let mut l = MessageList::from(flat.clone());
        l.freeze();
        assert_eq!(l.frozen.len(), 2);
        assert_eq!(l.loose.len(), 2);
        assert_eq!(l.len(), 9);
        assert_eq!(l, flat);
        for (i, m) in flat.iter().enumerate() {
            assert_eq!(*l.get(i).unwrap(), *m, "message {i}");
            assert_eq!(l.rfind_id(&m.id().unwrap()), Some(i));
        }
        assert_eq!(l.rfind_id("nowhere"), None);
        assert!(l.get(9).is_none());
        let back: Vec<String> = l
            .iter()
            .rev()
            .map(|m| m.id().unwrap().to_string())
            .collect();
        let want: Vec<String> = flat
            .iter()
            .rev()
            .map(|m| m.id().unwrap().to_string())
            .collect();
        assert_eq!(back, want);
        assert_eq!(
            serde_json::to_value(&l).unwrap(),
            serde_json::to_value(&flat).unwrap()
        );
    }

    #[test]
    fn only_whole_pages_from_the_start_freeze() {
        // A message before the pages: nothing freezes.
        let mut l = MessageList::from(list(1, &[3], 0));
        l.freeze();
        assert!(l.frozen.is_empty());
        // A page with a message missing (changed since): it stays in slots,
        // and so does everything after it.
        let mut flat = list(0, &[3, 2], 0);
        flat.remove(1);
        let mut l = MessageList::from(flat.clone());
        l.freeze();
        assert!(l.frozen.is_empty());
        assert_eq!(l, flat);
    }

    #[test]
    fn changing_or_inserting_among_frozen_messages_thaws_them_first() {
        let flat = list(0, &[3, 3], 1);
        let mut l = MessageList::from(flat.clone());
        l.freeze();
        // At the end: nothing thaws.
        l.push(closed("new"));
        l.insert(6, closed("at-the-boundary"));
        assert_eq!(l.frozen.len(), 2);
        // Within a page: it thaws, and the change lands where it was asked.
        l.insert(4, closed("inside"));
        assert!(l.frozen.is_empty());
        let ids: Vec<String> = l.iter().map(|m| m.id().unwrap().to_string()).collect();
        assert_eq!(
            ids,
            [
                "p0-0",
                "p0-1",
                "p0-2",
                "p1-0",
                "inside",
                "p1-1",
                "p1-2",
                "at-the-boundary",
                "a0",
                "new"
            ]
        );
        // The first page is whole again at the start: it freezes, the
        // broken one does not.
        l.freeze();
        assert_eq!(l.frozen.len(), 1);
        *l.get_mut(1).unwrap() = closed("edited");
        assert!(l.frozen.is_empty());
        assert_eq!(l.get(1).unwrap().id().as_deref(), Some("edited"));
        assert_eq!(l.take_all().len(), 10);
        assert!(l.is_empty());
    }
}
