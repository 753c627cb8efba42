//! A sealed page: finished messages of one conversation packed together,
//! their text compressed as one block.
//!
//! Why: a watched thread's conversation stays in memory for as long as
//! anyone watches (a snapshot and every run's input need it), and it grows
//! with every run. Kept one by one as text ([`super::message`]), a finished
//! message cost its text plus about 100 bytes of headers and two
//! allocations; the demo agent's 138-byte messages cost 242 bytes each. A
//! conversation repeats its field names, roles and ids from message to
//! message, so many of them compress well together where one alone does
//! not. Once a run has ended, the fold ([`super::fold`]) packs its oldest
//! finished messages into pages of about [`PAGE_TEXT`] bytes of text: ids
//! and roles stay plain (lookups scan them without unpacking anything), the
//! text is one LZ4 block, the page keeps who introduced each message
//! ([`super::authorship::Authors`] looks there for sealed ones), and a
//! message is the page and its index in it.
//!
//! A page never changes. Changing a message on one (a late tool result's
//! delta, an agent restating it differently) opens a copy of it, as for any
//! finished message; the page lives while any message still points at it.
//!
//! Reading a message's text unpacks its page. The readers of finished
//! messages (a snapshot, a run's input, a branch) walk the conversation in
//! order, so the last page unpacked on each OS thread is kept
//! ([`unpacked`]): a walk unpacks each page once. What that holds is one
//! page's text per thread, at most [`PAGE_TEXT`] plus one message (messages
//! longer than [`MAX_SEALED_MESSAGE`] stay on their own).
//!
//! Past the node's budget, a page's text and body (each message's entry
//! and id) may leave memory for a node-local file ([`super::page_spill`]);
//! it reads the same from there, an id read back holding what was read
//! ([`IdStr`]) rather than borrowing from the page.

use super::authorship::RunAgent;
use serde_json::Value;
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Text a page is filled to before it is sealed, by default: large enough
/// that LZ4 finds the repetitions between messages, small enough that a
/// reader of one message unpacks little more than it needs.
pub const PAGE_TEXT: usize = 16 << 10;

/// The page text this process's folds use (`threads.sealed_page_bytes`).
/// Process-wide rather than passed to every fold: a fold is made in many
/// places (a thread's load, a branch's replay, a view at a run's end) and
/// its pages never change what it reads, only what it holds.
static PAGE_TEXT_NOW: AtomicUsize = AtomicUsize::new(PAGE_TEXT);

/// Sets the page text folds made from now on use (at start-up, from
/// `threads.sealed_page_bytes`).
pub fn set_page_text(bytes: usize) {
    PAGE_TEXT_NOW.store(bytes.max(1), Ordering::Relaxed);
}

/// The page text folds use (see [`set_page_text`]).
pub fn page_text() -> usize {
    PAGE_TEXT_NOW.load(Ordering::Relaxed)
}

/// Most text one page takes, whatever the setting: its offsets are 32-bit,
/// and packing it happens at a run's end, in the thread's lock.
pub const MAX_PAGE_TEXT: usize = 64 << 20;

/// Longest message packed into a page; a longer one stays on its own (its
/// text alone is what a reader would unpack).
pub const MAX_SEALED_MESSAGE: usize = 8 << 10;

/// A string of a page's ids or role names: `start..start+len`, or absent.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Str {
    start: u32,
    len: u32,
}

const ABSENT: Str = Str {
    start: u32::MAX,
    len: 0,
};

/// Most messages one page holds (its entries name their roles by a
/// 16-bit place; the fold fills pages by text, far below it).
pub const MAX_PAGE_MESSAGES: usize = u16::MAX as usize;

/// One message of a page: 16 bytes, one per sealed message for as long as
/// its conversation is watched (so every field is as small as it can be).
struct Entry {
    /// Where its JSON ends in the page's text (it starts where the one
    /// before ends).
    end: u32,
    id: Str,
    /// Its place in the page's `roles`.
    role: u16,
    /// Its place in the page's `origins` ([`NO_ORIGIN`]: none recorded),
    /// and [`HAS_TOOL_CALLS`].
    origin: u16,
}

/// The bit of [`Entry::origin`] saying the message carries tool calls.
const HAS_TOOL_CALLS: u16 = 1 << 15;

/// A page's text: `len` bytes of JSON, LZ4-packed when that saved an
/// eighth or more (`packed`), as they were otherwise.
struct Text {
    block: Mutex<Block>,
    len: usize,
    packed: bool,
}

/// Where a page's text is. Behind a lock because it moves once, from
/// memory to the spill file, while readers may be unpacking it.
enum Block {
    Held(Box<[u8]>),
    /// In the spill file ([`super::page_spill`]) at `at`, `bytes` long.
    Spilled {
        at: u64,
        bytes: usize,
    },
}

/// A sealed page of finished messages (see the module's docs).
pub struct Page {
    /// Tells pages apart in the per-thread caches of unpacked text and
    /// read-back bodies (an address could be reused by a later page).
    serial: u64,
    /// Messages on it.
    len: u32,
    /// Whether every message on it has a recorded origin (a walk noting
    /// who introduced what passes over such a page without reading it).
    all_attributed: bool,
    text: Text,
    /// Each message's entry and id: held, or in the spill file with its
    /// text (then only a filter of its ids stays).
    body: Mutex<BodyAt>,
    /// Each distinct role once, in `role_names` (a handful a page, so they
    /// stay when the body leaves: a role is read without reading it back).
    roles: Box<[Str]>,
    role_names: Box<str>,
    /// Hashes of the tool call ids its messages' `toolCalls` name, sorted:
    /// a tool call's lookup passes a page that does not name it without
    /// unpacking it.
    tool_calls: Box<[u64]>,
    /// The runs that introduced its messages, each once (a conversation's
    /// messages come from a handful of agents): who may see a message is
    /// decided by its origin, and keeping it here rather than in a map
    /// keyed by id ([`super::authorship::Authors`]) costs two bytes a
    /// message instead of about ninety.
    origins: Box<[RunAgent]>,
}

/// What a page keeps of each message besides its text: its 16-byte entry
/// and its id. For short messages (the demo agent's 138 bytes pack
/// eleven to one) this, not the text, was most of a spilled page: about
/// 32 bytes a message that no budget could shed while the conversation
/// was watched (docs/benchmarks.md, "Fifteenth pass"). So it leaves memory
/// with the text, and a reader that needs it reads it back as it reads
/// the text.
struct Body {
    entries: Box<[Entry]>,
    /// The messages' ids, back to back.
    ids: Box<str>,
}

/// Where a page's body is.
enum BodyAt {
    Held(Arc<Body>),
    /// In the spill file at `at`, `bytes` long. `filter` holds 16 bits of
    /// each id's hash, sorted: a lookup by id passes a spilled page that
    /// does not hold it (all but about one in 550 of them, for a page of
    /// 120 messages) without reading anything back.
    Spilled {
        at: u64,
        bytes: usize,
        filter: Box<[u16]>,
    },
}

/// What a sealed message needs of the message it was: its compact JSON,
/// id, role, whether it carries tool calls, and the run that introduced it.
pub struct Sealing<'a> {
    pub json: &'a str,
    pub id: Option<&'a str>,
    pub role: &'a str,
    pub has_tool_calls: bool,
    /// `None` when no run is recorded as having introduced it (a fold
    /// notes one later, in its map).
    pub origin: Option<RunAgent>,
}

/// An entry's `origin` when none is recorded.
const NO_ORIGIN: u16 = HAS_TOOL_CALLS - 1;

/// Most distinct origins one page tells apart; a message of any further
/// one is recorded as of an unknown run (every agent's rules apply to it:
/// it can only be hidden more, never leak). Origins are agents an operator
/// configured, so no page comes near it.
const MAX_ORIGINS: usize = NO_ORIGIN as usize;

static SERIALS: AtomicU64 = AtomicU64::new(1);

impl Page {
    /// A page of these messages, in this order (at most `u32::MAX` bytes
    /// of text; the fold seals far less at a time).
    pub fn seal<'a>(messages: impl IntoIterator<Item = Sealing<'a>>) -> Page {
        let mut text = String::new();
        let mut ids = String::new();
        let mut role_names = String::new();
        // Each role's place, found by a map: a role is the client's string,
        // so a page may have as many as it has messages.
        let mut roles: HashMap<&str, usize> = HashMap::new();
        let mut role_places: Vec<Str> = Vec::new();
        let mut entries = Vec::new();
        let mut tool_calls = Vec::new();
        let mut origins: Vec<RunAgent> = Vec::new();
        let push = |strings: &mut String, s: &str| {
            let start = strings.len() as u32;
            strings.push_str(s);
            Str {
                start,
                len: s.len() as u32,
            }
        };
        for m in messages {
            text.push_str(m.json);
            let id = m.id.map_or(ABSENT, |id| push(&mut ids, id));
            let role = *roles.entry(m.role).or_insert_with(|| {
                role_places.push(push(&mut role_names, m.role));
                role_places.len() - 1
            });
            if m.has_tool_calls {
                tool_calls.extend(tool_call_ids(m.json).map(|id| hash(&id)));
            }
            let origin = match m.origin {
                None => NO_ORIGIN as usize,
                Some(origin) => match origins.iter().position(|o| *o == origin) {
                    Some(at) => at,
                    None if origins.len() < MAX_ORIGINS => {
                        origins.push(origin);
                        origins.len() - 1
                    }
                    None => match origins.iter().position(|o| *o == RunAgent::Unknown) {
                        Some(at) => at,
                        None => {
                            // The last place goes to "unknown" (see MAX_ORIGINS).
                            origins[MAX_ORIGINS - 1] = RunAgent::Unknown;
                            MAX_ORIGINS - 1
                        }
                    },
                },
            };
            let role = u16::try_from(role)
                .expect("at most MAX_PAGE_MESSAGES messages on a page, so as many roles");
            let flag = if m.has_tool_calls { HAS_TOOL_CALLS } else { 0 };
            entries.push(Entry {
                end: text.len() as u32,
                id,
                role,
                origin: origin as u16 | flag,
            });
        }
        tool_calls.sort_unstable();
        tool_calls.dedup();
        let block = lz4_flex::block::compress(text.as_bytes());
        let len = text.len();
        let packed = block.len() <= len - len / 8;
        let held = match packed {
            true => block.into_boxed_slice(),
            false => text.into_bytes().into_boxed_slice(),
        };
        let text = Text {
            block: Mutex::new(Block::Held(held)),
            len,
            packed,
        };
        let len = u32::try_from(entries.len()).expect("a page's offsets are 32-bit, so its count");
        let all_attributed = entries
            .iter()
            .all(|e| e.origin & !HAS_TOOL_CALLS != NO_ORIGIN);
        let body = Body {
            entries: entries.into_boxed_slice(),
            ids: ids.into_boxed_str(),
        };
        Page {
            serial: SERIALS.fetch_add(1, Ordering::Relaxed),
            len,
            all_attributed,
            text,
            body: Mutex::new(BodyAt::Held(Arc::new(body))),
            roles: role_places.into_boxed_slice(),
            role_names: role_names.into_boxed_str(),
            tool_calls: tool_calls.into_boxed_slice(),
            origins: origins.into_boxed_slice(),
        }
    }

    /// Its text, held or spilled.
    fn block(&self) -> MutexGuard<'_, Block> {
        self.text
            .block
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether its text is LZ4-packed (text that does not pack is kept as
    /// it is).
    pub fn is_packed(&self) -> bool {
        self.text.packed
    }

    /// Whether its text is in the spill file.
    pub fn is_spilled(&self) -> bool {
        matches!(*self.block(), Block::Spilled { .. })
    }

    /// Whether its body (entries and ids) is in the spill file.
    pub fn is_body_spilled(&self) -> bool {
        matches!(*self.body_at(), BodyAt::Spilled { .. })
    }

    fn body_at(&self) -> MutexGuard<'_, BodyAt> {
        self.body.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Its body: held, or read back from the spill file (once per page a
    /// walk reads in order, as its text is).
    fn body(&self) -> Arc<Body> {
        let (at, bytes) = match &*self.body_at() {
            BodyAt::Held(body) => return body.clone(),
            BodyAt::Spilled { at, bytes, .. } => (*at, *bytes),
        };
        // A spilled body never comes back: read it without the lock.
        read_back(self.serial, at, bytes, self.len as usize)
    }

    /// Moves its text and its body to the spill file; answers the bytes of
    /// memory that frees (`Some(0)`: they were there already), or `None`
    /// when the file has room for neither.
    pub(super) fn spill(&self) -> Option<usize> {
        match (self.spill_text(), self.spill_body()) {
            (None, None) => None,
            (text, body) => Some(text.unwrap_or(0) + body.unwrap_or(0)),
        }
    }

    fn spill_text(&self) -> Option<usize> {
        let mut block = self.block();
        let Block::Held(held) = &*block else {
            return Some(0);
        };
        let bytes = held.len();
        let at = super::page_spill::file()?.write(held)?;
        *block = Block::Spilled { at, bytes };
        Some(bytes)
    }

    fn spill_body(&self) -> Option<usize> {
        let mut body_at = self.body_at();
        let BodyAt::Held(body) = &*body_at else {
            return Some(0);
        };
        let encoded = body.encode();
        let at = super::page_spill::file()?.write(&encoded)?;
        let mut filter: Vec<u16> = (0..self.len)
            .filter_map(|i| body.id(i))
            .map(short_hash)
            .collect();
        filter.sort_unstable();
        filter.dedup();
        let held = body.heap_bytes();
        let filter = filter.into_boxed_slice();
        let left = filter.len() * 2;
        *body_at = BodyAt::Spilled {
            at,
            bytes: encoded.len(),
            filter,
        };
        Some(held.saturating_sub(left))
    }

    /// Messages on the page.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Message `i`'s id.
    pub fn id(&self, i: u32) -> Option<IdStr<'static>> {
        Body::id_str(&self.body(), i)
    }

    /// Each message's id, in order (the body read once for all of them).
    pub fn ids<'a>(&self) -> impl DoubleEndedIterator<Item = Option<IdStr<'a>>> + use<'a> {
        let body = self.body();
        (0..self.len).map(move |i| Body::id_str(&body, i))
    }

    /// Whether every message on it has a recorded origin.
    pub fn all_attributed(&self) -> bool {
        self.all_attributed
    }

    /// Whether message `i` has this id and a recorded origin.
    pub fn is_attributed_as(&self, i: u32, id: &str) -> bool {
        let body = self.body();
        body.id(i) == Some(id) && self.origin_on(&body, i).is_some()
    }

    /// Message `i`'s role.
    pub fn role(&self, i: u32) -> &str {
        let role = self.roles[self.body().entries[i as usize].role as usize];
        &self.role_names[role.start as usize..(role.start + role.len) as usize]
    }

    /// The run that introduced message `i`, if one was recorded.
    pub fn origin(&self, i: u32) -> Option<&RunAgent> {
        self.origin_on(&self.body(), i)
    }

    /// The origin of message `i`, its entry read from `body` (its own).
    fn origin_on(&self, body: &Body, i: u32) -> Option<&RunAgent> {
        let origin = body.entries[i as usize].origin & !HAS_TOOL_CALLS;
        self.origins.get(origin as usize)
    }

    /// False when no message on the page has this id (true: one may). Only
    /// a spilled body is asked: a held one is scanned as cheaply.
    fn may_hold(&self, id: &str) -> bool {
        match &*self.body_at() {
            BodyAt::Held(_) => true,
            BodyAt::Spilled { filter, .. } => filter.binary_search(&short_hash(id)).is_ok(),
        }
    }

    /// The newest message on the page with this id.
    pub fn position(&self, id: &str) -> Option<u32> {
        self.newest(id, false)
    }

    /// The newest message on the page with this id and a recorded origin.
    pub fn attributed_position(&self, id: &str) -> Option<u32> {
        self.newest(id, true)
    }

    /// The newest message with this id (and a recorded origin, when
    /// `attributed`), its filter asked first when the body has left.
    fn newest(&self, id: &str, attributed: bool) -> Option<u32> {
        if !self.may_hold(id) {
            return None;
        }
        let body = self.body();
        (0..self.len).rev().find(|&i| {
            body.id(i) == Some(id) && (!attributed || self.origin_on(&body, i).is_some())
        })
    }

    /// Whether message `i` carries tool calls.
    pub fn has_tool_calls(&self, i: u32) -> bool {
        self.body().entries[i as usize].origin & HAS_TOOL_CALLS != 0
    }

    /// False when no message on the page names tool call `id` in its
    /// `toolCalls` (true: one may).
    pub fn may_name_tool_call(&self, id: &str) -> bool {
        self.tool_calls.binary_search(&hash(id)).is_ok()
    }

    fn range(&self, i: u32) -> Range<usize> {
        self.body().range(i)
    }

    /// Bytes of message `i`'s JSON.
    pub fn json_len(&self, i: u32) -> usize {
        self.range(i).len()
    }

    /// Message `i`'s JSON.
    pub fn json(&self, i: u32) -> SealedText<'_> {
        let range = self.range(i);
        SealedText::Unpacked(unpacked(self.serial, &self.text), range)
    }

    /// What the page holds in memory, about (its allocations and their
    /// headers).
    pub fn heap_bytes(&self) -> usize {
        let text = match &*self.block() {
            Block::Held(b) => b.len(),
            Block::Spilled { .. } => 0,
        };
        let body = match &*self.body_at() {
            BodyAt::Held(body) => body.heap_bytes(),
            BodyAt::Spilled { filter, .. } => filter.len() * 2 + 16,
        };
        std::mem::size_of::<Page>()
            + 16
            + text
            + body
            + self.roles.len() * std::mem::size_of::<Str>()
            + self.role_names.len()
            + self.tool_calls.len() * 8
            + self.origins.len() * std::mem::size_of::<RunAgent>()
            + 4 * 16
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        let Some(file) = super::page_spill::file() else {
            return;
        };
        if let Block::Spilled { at, bytes } = *self.block() {
            file.free(at, bytes);
        }
        if let BodyAt::Spilled { at, bytes, .. } = *self.body_at() {
            file.free(at, bytes);
        }
    }
}

impl Body {
    /// Message `i`'s id, holding the body it is read from.
    fn id_str(body: &Arc<Body>, i: u32) -> Option<IdStr<'static>> {
        let at = body.entries[i as usize].id;
        (at != ABSENT).then(|| IdStr(Held::OnPage(body.clone(), at)))
    }

    fn id(&self, i: u32) -> Option<&str> {
        let at = self.entries[i as usize].id;
        (at != ABSENT).then(|| &self.ids[at.start as usize..(at.start + at.len) as usize])
    }

    fn range(&self, i: u32) -> Range<usize> {
        let start = match i {
            0 => 0,
            _ => self.entries[i as usize - 1].end as usize,
        };
        start..self.entries[i as usize].end as usize
    }

    fn heap_bytes(&self) -> usize {
        self.entries.len() * std::mem::size_of::<Entry>() + self.ids.len() + 3 * 16
    }

    /// Its bytes for the spill file: each entry's four fields
    /// little-endian, then the ids, LZ4-packed (entries of one page differ
    /// in few bytes).
    fn encode(&self) -> Vec<u8> {
        let mut raw = Vec::with_capacity(self.entries.len() * ENTRY_BYTES + self.ids.len());
        for e in &self.entries {
            raw.extend_from_slice(&e.end.to_le_bytes());
            raw.extend_from_slice(&e.id.start.to_le_bytes());
            raw.extend_from_slice(&e.id.len.to_le_bytes());
            raw.extend_from_slice(&e.role.to_le_bytes());
            raw.extend_from_slice(&e.origin.to_le_bytes());
        }
        raw.extend_from_slice(self.ids.as_bytes());
        lz4_flex::block::compress_prepend_size(&raw)
    }

    /// Reads [`Body::encode`]'s bytes for a page of `len` messages.
    fn decode(bytes: &[u8], len: usize) -> Result<Body, String> {
        let raw = lz4_flex::block::decompress_size_prepended(bytes).map_err(|e| e.to_string())?;
        let (entries, ids) = raw
            .split_at_checked(len * ENTRY_BYTES)
            .ok_or("shorter than its entries")?;
        let u32_at =
            |c: &[u8], at: usize| u32::from_le_bytes([c[at], c[at + 1], c[at + 2], c[at + 3]]);
        let u16_at = |c: &[u8], at: usize| u16::from_le_bytes([c[at], c[at + 1]]);
        let entries = entries
            .chunks_exact(ENTRY_BYTES)
            .map(|c| Entry {
                end: u32_at(c, 0),
                id: Str {
                    start: u32_at(c, 4),
                    len: u32_at(c, 8),
                },
                role: u16_at(c, 12),
                origin: u16_at(c, 14),
            })
            .collect();
        let ids = std::str::from_utf8(ids).map_err(|e| e.to_string())?;
        Ok(Body {
            entries,
            ids: ids.into(),
        })
    }
}

/// An entry's bytes in the spill file.
const ENTRY_BYTES: usize = 16;

/// An id read from a message: borrowed from the message it is in, or from
/// its page's body, which it keeps alive (the body may leave memory while
/// it is read: the reader holds what it read, not the page).
#[derive(Clone)]
pub struct IdStr<'a>(Held<'a>);

#[derive(Clone)]
enum Held<'a> {
    Here(&'a str),
    OnPage(Arc<Body>, Str),
}

impl<'a> From<&'a str> for IdStr<'a> {
    fn from(s: &'a str) -> IdStr<'a> {
        IdStr(Held::Here(s))
    }
}

impl std::ops::Deref for IdStr<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        match &self.0 {
            Held::Here(s) => s,
            Held::OnPage(body, at) => &body.ids[at.start as usize..(at.start + at.len) as usize],
        }
    }
}

impl std::borrow::Borrow<str> for IdStr<'_> {
    fn borrow(&self) -> &str {
        self
    }
}

impl PartialEq for IdStr<'_> {
    fn eq(&self, o: &IdStr<'_>) -> bool {
        **self == **o
    }
}

impl Eq for IdStr<'_> {}

impl PartialEq<str> for IdStr<'_> {
    fn eq(&self, o: &str) -> bool {
        &**self == o
    }
}

impl PartialEq<&str> for IdStr<'_> {
    fn eq(&self, o: &&str) -> bool {
        &**self == *o
    }
}

impl Hash for IdStr<'_> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        (**self).hash(h)
    }
}

impl std::fmt::Debug for IdStr<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl serde::Serialize for IdStr<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self)
    }
}

impl std::fmt::Display for IdStr<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl std::fmt::Debug for Page {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Page#{}({} messages)", self.serial, self.len())
    }
}

/// A sealed message's JSON: borrowed from a plain page, or a range of the
/// text unpacked on this thread.
pub enum SealedText<'a> {
    Plain(&'a str),
    Unpacked(Rc<str>, Range<usize>),
}

impl std::ops::Deref for SealedText<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            SealedText::Plain(s) => s,
            SealedText::Unpacked(all, range) => &all[range.clone()],
        }
    }
}

thread_local! {
    /// The page last unpacked on this thread, by serial.
    static LAST: RefCell<Option<(u64, Rc<str>)>> = const { RefCell::new(None) };
    /// The spilled body last read back on this thread, by its page's serial.
    static LAST_BODY: RefCell<Option<(u64, Arc<Body>)>> = const { RefCell::new(None) };
}

/// Page `serial`'s spilled body (`len` messages, `bytes` at `at`), read
/// back once per page a walk reads in order.
fn read_back(serial: u64, at: u64, bytes: usize, len: usize) -> Arc<Body> {
    LAST_BODY.with(|last| {
        if let Some((s, body)) = &*last.borrow()
            && *s == serial
        {
            return body.clone();
        }
        let read = super::page_spill::read(at, bytes);
        let body = Body::decode(&read, len).unwrap_or_else(|e| {
            super::page_spill::fail(&format!("a page's body read back does not decode: {e}"))
        });
        let body = Arc::new(body);
        *last.borrow_mut() = Some((serial, body.clone()));
        body
    })
}

/// Page `serial`'s text, unpacked (once per page a walk reads in order),
/// from memory or from the spill file.
fn unpacked(serial: u64, text: &Text) -> Rc<str> {
    LAST.with(|last| {
        if let Some((at, unpacked)) = &*last.borrow()
            && *at == serial
        {
            return unpacked.clone();
        }
        let unpack = |bytes: &[u8]| match text.packed {
            true => lz4_flex::block::decompress(bytes, text.len).map_err(|e| e.to_string()),
            false => Ok(bytes.to_vec()),
        };
        let bytes = match &*text.block.lock().unwrap_or_else(PoisonError::into_inner) {
            Block::Held(held) => {
                unpack(held).expect("a sealed page unpacks (it was packed in this process)")
            }
            Block::Spilled { at, bytes } => {
                let read = super::page_spill::read(*at, *bytes);
                unpack(&read).unwrap_or_else(|e| {
                    super::page_spill::fail(&format!("a page read back does not unpack: {e}"))
                })
            }
        };
        let unpacked: Rc<str> = String::from_utf8(bytes)
            .expect("a sealed page's text is the JSON it was given")
            .into();
        *last.borrow_mut() = Some((serial, unpacked.clone()));
        unpacked
    })
}

/// 16 bits of an id's hash: a spilled page's filter.
fn short_hash(id: &str) -> u16 {
    hash(id) as u16
}

fn hash(s: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// The ids a message's `toolCalls` name.
fn tool_call_ids(json: &str) -> impl Iterator<Item = String> {
    let v: Value = serde_json::from_str(json).unwrap_or(Value::Null);
    let calls = match v.get("toolCalls") {
        Some(Value::Array(calls)) => calls.clone(),
        _ => Vec::new(),
    };
    calls
        .into_iter()
        .filter_map(|c| c.get("id")?.as_str().map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealing(json: &str) -> (String, Option<String>, String, bool) {
        let v: Value = serde_json::from_str(json).unwrap();
        (
            json.to_owned(),
            v.get("id").and_then(Value::as_str).map(str::to_owned),
            v.get("role")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            v.get("toolCalls").is_some(),
        )
    }

    fn page(jsons: &[&str]) -> Page {
        let parts: Vec<_> = jsons.iter().map(|j| sealing(j)).collect();
        Page::seal(parts.iter().map(|(json, id, role, calls)| Sealing {
            json,
            id: id.as_deref(),
            role,
            has_tool_calls: *calls,
            origin: match id.as_deref() {
                Some(id) if id.starts_with('t') => Some(RunAgent::Agent("tools".into())),
                Some(id) if id.starts_with("m1") => None,
                _ => Some(RunAgent::Unknown),
            },
        }))
    }

    #[test]
    fn a_page_reads_back_each_message_as_it_was_given() {
        let mut jsons = Vec::new();
        for i in 0..200 {
            jsons.push(format!(
                r#"{{"id":"m{i}","role":"assistant","content":"the answer to question {i} is the same as before","toolCalls":[{{"id":"call-{i}","type":"function","function":{{"name":"f","arguments":"{{}}"}}}}]}}"#
            ));
            jsons.push(format!(
                r#"{{"id":"t{i}","role":"tool","toolCallId":"call-{i}","content":"ok"}}"#
            ));
        }
        jsons.push(r#"{"role":"us\u00e9r","content":"no id"}"#.to_owned());
        let refs: Vec<&str> = jsons.iter().map(String::as_str).collect();
        let p = page(&refs);
        assert!(p.is_packed(), "repetitive text packs");
        assert_eq!(p.len(), jsons.len());
        for (i, json) in jsons.iter().enumerate() {
            let i = i as u32;
            assert_eq!(&*p.json(i), json.as_str());
            assert_eq!(p.json_len(i), json.len());
        }
        assert_eq!(p.id(0).as_deref(), Some("m0"));
        assert_eq!(p.role(0), "assistant");
        assert_eq!(p.id(3).as_deref(), Some("t1"));
        assert_eq!(p.role(3), "tool");
        assert!(p.has_tool_calls(0) && !p.has_tool_calls(1));
        let last = jsons.len() as u32 - 1;
        assert!(p.id(last).is_none());
        assert_eq!(p.role(last), "us\u{e9}r");
        assert_eq!(p.origin(0), Some(&RunAgent::Unknown));
        assert_eq!(p.origin(3), Some(&RunAgent::Agent("tools".into())));
        assert_eq!(p.origin(2), None, "m1: none recorded");
        assert_eq!(p.origins.len(), 2, "each origin is kept once");
        assert_eq!(p.position("m1"), Some(2));
        assert_eq!(p.attributed_position("m1"), None);
        assert_eq!(p.position("t1"), Some(3));
        assert_eq!(p.position("nope"), None);
        assert!(p.may_name_tool_call("call-7"));
        assert!(!p.may_name_tool_call("call-900"));
        let text: usize = jsons.iter().map(String::len).sum();
        assert!(
            p.heap_bytes() < text / 2,
            "{} bytes held for {text} of text",
            p.heap_bytes()
        );
    }

    /// An entry is 16 bytes, its role a place among the page's roles and
    /// its tool-call flag a bit of its origin's place: many roles, and
    /// every mix of flag and origin (recorded, absent), read back apart.
    #[test]
    fn each_message_keeps_its_own_role_origin_and_tool_call_flag() {
        assert_eq!(std::mem::size_of::<Entry>(), 16);
        let jsons: Vec<String> = (0..1_000)
            .map(|i| match i % 4 {
                0 | 1 => format!(
                    r#"{{"id":"t{i}","role":"r{}","toolCalls":[{{"id":"c{i}"}}]}}"#,
                    i % 300
                ),
                _ => format!(r#"{{"id":"m1{i}","role":"r{}"}}"#, i % 300),
            })
            .collect();
        let refs: Vec<&str> = jsons.iter().map(String::as_str).collect();
        let p = page(&refs);
        for i in 0..1_000u32 {
            assert_eq!(p.role(i), format!("r{}", i % 300));
            assert_eq!(p.has_tool_calls(i), i % 4 < 2, "message {i}");
            let origin = (i % 4 < 2).then(|| RunAgent::Agent("tools".into()));
            assert_eq!(p.origin(i), origin.as_ref(), "message {i}");
        }
    }

    /// A body leaves memory as bytes and comes back as it was (every
    /// field of every entry, the ids, an absent id); bytes that are not a
    /// body are refused, not misread.
    #[test]
    fn a_body_reads_back_from_its_bytes_as_it_was() {
        let jsons: Vec<String> = (0..300)
            .map(|i| match i % 3 {
                0 => format!(
                    r#"{{"id":"t{i}-ünï","role":"r{}","toolCalls":[{{"id":"c{i}"}}]}}"#,
                    i % 7
                ),
                1 => format!(
                    r#"{{"id":"m1{i}","role":"user","content":"{}"}}"#,
                    "x".repeat(i)
                ),
                _ => r#"{"role":"assistant"}"#.to_owned(),
            })
            .collect();
        let refs: Vec<&str> = jsons.iter().map(String::as_str).collect();
        let p = page(&refs);
        let body = p.body();
        let bytes = body.encode();
        let back = Body::decode(&bytes, p.len()).unwrap();
        assert_eq!(&*back.ids, &*body.ids);
        for (a, b) in back.entries.iter().zip(&*body.entries) {
            assert!(a.end == b.end && a.id == b.id && a.role == b.role && a.origin == b.origin);
        }
        assert_eq!(back.entries.len(), p.len());
        assert_eq!(back.id(0), Some("t0-ünï"));
        assert_eq!(back.id(2), None);
        assert!(Body::decode(&bytes[..bytes.len() / 2], p.len()).is_err());
        assert!(Body::decode(&bytes, p.len() * 100).is_err());
    }

    #[test]
    fn text_that_does_not_pack_stays_plain_and_reads_the_same() {
        let p = page(&[r#"{"id":"a","role":"user","content":"x"}"#]);
        assert!(!p.is_packed());
        assert_eq!(&*p.json(0), r#"{"id":"a","role":"user","content":"x"}"#);
    }

    #[test]
    fn two_pages_read_in_turn_on_one_thread_each_read_their_own() {
        let a = page(&[&format!(r#"{{"id":"a","content":"{}"}}"#, "a".repeat(500))]);
        let b = page(&[&format!(r#"{{"id":"b","content":"{}"}}"#, "b".repeat(500))]);
        for _ in 0..3 {
            assert!(a.json(0).contains("aaaa") && !a.json(0).contains("bbbb"));
            assert!(b.json(0).contains("bbbb") && !b.json(0).contains("aaaa"));
        }
    }
}
