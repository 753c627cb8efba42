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
//! Past the node's budget, a page's text may leave memory for a
//! node-local file ([`super::page_spill`]); it reads the same from there.

use super::authorship::RunAgent;
use serde_json::Value;
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

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

/// A string of the page's `strings`: `start..start+len`, or absent.
#[derive(Clone, Copy)]
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
    /// Tells pages apart in the per-thread cache of unpacked text (an
    /// address could be reused by a later page).
    serial: u64,
    text: Text,
    entries: Box<[Entry]>,
    /// Each distinct role once, in `strings`.
    roles: Box<[Str]>,
    /// Ids and roles, unescaped, each role once.
    strings: Box<str>,
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
        let mut strings = String::new();
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
            let id = m.id.map_or(ABSENT, |id| push(&mut strings, id));
            let role = *roles.entry(m.role).or_insert_with(|| {
                role_places.push(push(&mut strings, m.role));
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
        Page {
            serial: SERIALS.fetch_add(1, Ordering::Relaxed),
            text,
            entries: entries.into_boxed_slice(),
            roles: role_places.into_boxed_slice(),
            strings: strings.into_boxed_str(),
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

    /// Moves its text to the spill file; answers the bytes of memory that
    /// frees (`Some(0)`: it was there already), or `None` when the file
    /// has no room for it.
    pub(super) fn spill(&self) -> Option<usize> {
        let mut block = self.block();
        let Block::Held(held) = &*block else {
            return Some(0);
        };
        let bytes = held.len();
        let at = super::page_spill::file()?.write(held)?;
        *block = Block::Spilled { at, bytes };
        Some(bytes)
    }

    /// Messages on the page.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn str(&self, s: Str) -> Option<&str> {
        (s.start != u32::MAX).then(|| &self.strings[s.start as usize..(s.start + s.len) as usize])
    }

    /// Message `i`'s id.
    pub fn id(&self, i: u32) -> Option<&str> {
        self.str(self.entries[i as usize].id)
    }

    /// Message `i`'s role.
    pub fn role(&self, i: u32) -> &str {
        let role = self.roles[self.entries[i as usize].role as usize];
        self.str(role).unwrap_or_default()
    }

    /// The run that introduced message `i`, if one was recorded.
    pub fn origin(&self, i: u32) -> Option<&RunAgent> {
        let origin = self.entries[i as usize].origin & !HAS_TOOL_CALLS;
        self.origins.get(origin as usize)
    }

    /// The newest message on the page with this id.
    pub fn position(&self, id: &str) -> Option<u32> {
        (0..self.entries.len() as u32)
            .rev()
            .find(|i| self.id(*i) == Some(id))
    }

    /// The newest message on the page with this id and a recorded origin.
    pub fn attributed_position(&self, id: &str) -> Option<u32> {
        (0..self.entries.len() as u32)
            .rev()
            .find(|i| self.id(*i) == Some(id) && self.origin(*i).is_some())
    }

    /// Whether message `i` carries tool calls.
    pub fn has_tool_calls(&self, i: u32) -> bool {
        self.entries[i as usize].origin & HAS_TOOL_CALLS != 0
    }

    /// False when no message on the page names tool call `id` in its
    /// `toolCalls` (true: one may).
    pub fn may_name_tool_call(&self, id: &str) -> bool {
        self.tool_calls.binary_search(&hash(id)).is_ok()
    }

    fn range(&self, i: u32) -> Range<usize> {
        let start = match i {
            0 => 0,
            _ => self.entries[i as usize - 1].end as usize,
        };
        start..self.entries[i as usize].end as usize
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
        std::mem::size_of::<Page>()
            + 16
            + text
            + self.entries.len() * std::mem::size_of::<Entry>()
            + self.roles.len() * std::mem::size_of::<Str>()
            + self.strings.len()
            + self.tool_calls.len() * 8
            + self.origins.len() * std::mem::size_of::<RunAgent>()
            + 5 * 16
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        if let Block::Spilled { at, bytes } = *self.block()
            && let Some(file) = super::page_spill::file()
        {
            file.free(at, bytes);
        }
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
        assert_eq!(p.id(0), Some("m0"));
        assert_eq!(p.role(0), "assistant");
        assert_eq!(p.id(3), Some("t1"));
        assert_eq!(p.role(3), "tool");
        assert!(p.has_tool_calls(0) && !p.has_tool_calls(1));
        let last = jsons.len() as u32 - 1;
        assert_eq!(p.id(last), None);
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
