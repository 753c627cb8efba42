//! Sealed pages leaving memory: a conversation's oldest pages (their text,
//! LZ4-packed or as it was when it did not pack, and their bodies) written
//! to a node-local file when the node is over its budget, read back by the
//! walks that unpack them already.
//!
//! Why: once a node has shed every idle thread and every tail's old events,
//! what is left is in use — mostly the conversations of watched threads,
//! which grow with every run and which a snapshot and every run's input
//! read in full. Their finished messages are already packed into sealed
//! pages ([`super::sealed`]), and a page never changes, so it can sit in a
//! file as well as in memory: its packed text and its body (each message's
//! entry and id) leave, its role names, origins and tool-call hashes stay,
//! with 16 bits of each id's hash so that a lookup by id passes the pages
//! that cannot hold it. A reader that needs a page reads it from the file
//! instead of from memory — the same unpacking, plus one `pread` that the
//! kernel's page cache usually answers. For messages of real agents the
//! text is most of it (about 340 of a 560-byte message's bytes leave); for
//! short, repetitive ones the body is (37 of the demo agent's 45 bytes a
//! message leave, 25 of them its body): docs/benchmarks.md, "Twelfth pass"
//! and "Fifteenth pass".
//!
//! The order is the pages' age: the oldest sealed pages leave first. A
//! conversation's pages are all read by each of its runs, so age says
//! which conversations have lasted longest rather than which are cold;
//! the coldest *threads* left memory whole before any page is spilled.
//!
//! The file itself ([`crate::store::page_file`]) is installed once at
//! start-up; without it nothing is registered and nothing leaves. What it
//! holds is bounded by `threads.spill_bytes`; a page that does not fit
//! stays in memory.

use super::sealed::Page;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

/// Where spilled pages go (their packed text and their bodies): a
/// node-local file, private to the process (nothing in it outlives it).
pub trait SpillFile: Send + Sync {
    /// Stores `bytes`; answers where, or `None` when it has no room (or the
    /// write failed: the page stays in memory).
    fn write(&self, bytes: &[u8]) -> Option<u64>;
    /// The `len` bytes stored at `at`.
    fn read(&self, at: u64, len: usize) -> std::io::Result<Vec<u8>>;
    /// The `len` bytes at `at` are no longer needed (their page is gone).
    fn free(&self, at: u64, len: usize);
    /// Bytes it holds now (for the metrics).
    fn held_bytes(&self) -> u64;
}

static FILE: OnceLock<Box<dyn SpillFile>> = OnceLock::new();

/// Pages sealed since start-up that may still be in memory,
/// oldest first, as weak references (a page's life is its messages').
/// Dead ones are pruned as the queue doubles, so it stays within about
/// twice the live pages.
struct Queue {
    pages: VecDeque<Weak<Page>>,
    /// Its length after the last prune.
    pruned_at: usize,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    pages: VecDeque::new(),
    pruned_at: 0,
});

/// Installs the spill file (once per process; a second call is ignored and
/// answers false).
pub fn install(file: Box<dyn SpillFile>) -> bool {
    FILE.set(file).is_ok()
}

/// The installed spill file, if any.
pub(super) fn file() -> Option<&'static dyn SpillFile> {
    FILE.get().map(|f| &**f)
}

/// Bytes the spill file holds now (0 without one).
pub fn held_bytes() -> u64 {
    file().map_or(0, SpillFile::held_bytes)
}

fn queue() -> std::sync::MutexGuard<'static, Queue> {
    QUEUE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Notes a newly sealed page as one that may leave memory later.
pub(super) fn register(page: &Arc<Page>) {
    if file().is_none() {
        return;
    }
    let mut q = queue();
    q.pages.push_back(Arc::downgrade(page));
    if q.pages.len() >= q.pruned_at.saturating_mul(2).max(64) {
        q.pages.retain(|p| p.strong_count() > 0);
        q.pruned_at = q.pages.len();
    }
}

/// Writes the oldest pages still in memory (their packed text and their
/// bodies) to the spill file until `want` bytes of memory are freed, the file is full or no page
/// is left. Answers the bytes freed. Blocking (file writes): call it off
/// the runtime's threads.
pub fn spill_oldest(want: usize) -> usize {
    if file().is_none() {
        return 0;
    }
    let mut freed = 0;
    while freed < want {
        let Some(weak) = queue().pages.pop_front() else {
            break;
        };
        let Some(page) = weak.upgrade() else {
            continue;
        };
        match page.spill() {
            Some(bytes) => freed += bytes,
            None => {
                // No room (or the write failed): it stays, and so do the
                // ones after it.
                queue().pages.push_front(weak);
                break;
            }
        }
    }
    freed
}

/// Reads a spilled page's packed text or body back. A spill file that
/// cannot give back what it was given is a failed local disk: the
/// conversation it held cannot be served correctly from memory any more,
/// so the process stops rather than serve a wrong one — the journal, not
/// this file, is the record, and a restarted (or another) node reloads the
/// thread from it.
pub(super) fn read(at: u64, len: usize) -> Vec<u8> {
    let file = file().expect("a page is spilled only with a spill file installed");
    match file.read(at, len) {
        Ok(bytes) => bytes,
        Err(e) => fail(&format!("reading {len} bytes at block {at}: {e}")),
    }
}

/// Stops the process over a spill file that failed (see [`read`]).
pub(super) fn fail(what: &str) -> ! {
    tracing::error!(
        error = what,
        "the spill file of sealed pages failed: stopping (the journal holds every thread; \
         they load again on restart)"
    );
    eprintln!("agui-gateway: the spill file of sealed pages failed: {what}");
    std::process::abort()
}
