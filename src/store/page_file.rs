//! The node-local file sealed pages' packed text is spilled to
//! ([`crate::protocol::page_spill`]).
//!
//! Why a file of our own and not the journal store: a spilled page is a
//! copy of what the journal already holds, made to save memory on this
//! node only. It must be cheap to write and to read back (one `pwrite` or
//! `pread` each, the kernel's page cache in front), it must never be read
//! by another node or after a restart (so it is created unlinked: a crash
//! leaves nothing behind), and it must not grow without bound (so it has a
//! size, `threads.spill_bytes`, and reuses the room pages leave).
//!
//! Room is handed out in blocks of [`BLOCK`] bytes. A page's packed text is
//! a few kilobytes (a 16 KiB page packs to about a quarter), so a page
//! takes one to a few blocks; freed runs of blocks are kept by length and
//! reused for a page of that length, or split for a shorter one. Nothing
//! is moved to close gaps: a file whose free runs are all too short for
//! the next page answers "no room", and that page stays in memory.
//! Hand-written rather than a crate: it is a free list of a few lines, and
//! the allocators on crates.io manage memory, not offsets in a file.

use crate::protocol::page_spill::SpillFile;
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

/// The unit of room in the file.
pub const BLOCK: u64 = 4096;

/// Most blocks one page may take; a page that packs to more (a page of
/// very large settings) stays in memory.
const MAX_BLOCKS: u64 = 1024;

/// A spill file (see the module's docs).
pub struct PageFile {
    file: File,
    /// Blocks the file may span.
    capacity: u64,
    room: Mutex<Room>,
}

#[derive(Default)]
struct Room {
    /// Blocks handed out from the end so far (the file's extent).
    end: u64,
    /// Freed runs of blocks by length: their first blocks.
    free: BTreeMap<u64, Vec<u64>>,
    /// Blocks in use.
    used: u64,
    /// A write failed already (said once in the log).
    failed: bool,
}

fn blocks(len: usize) -> u64 {
    (len as u64).div_ceil(BLOCK).max(1)
}

impl PageFile {
    /// A new spill file in `dir` of at most `capacity` bytes, unlinked from
    /// the start (the system removes it when the process ends, however it
    /// ends).
    pub fn create(dir: &Path, capacity: u64) -> std::io::Result<PageFile> {
        let file = tempfile::tempfile_in(dir)?;
        Ok(PageFile {
            file,
            capacity: capacity / BLOCK,
            room: Mutex::default(),
        })
    }

    fn room(&self) -> std::sync::MutexGuard<'_, Room> {
        self.room.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `n` blocks: a freed run of that length, a longer one split, or new
    /// ones at the end while the file has room.
    fn take(&self, n: u64) -> Option<u64> {
        let mut room = self.room();
        let found = room
            .free
            .range(n..)
            .find(|(_, starts)| !starts.is_empty())
            .map(|(len, _)| *len);
        let at = match found {
            Some(len) => {
                let at = room.free.get_mut(&len)?.pop()?;
                if room.free.get(&len).is_some_and(Vec::is_empty) {
                    room.free.remove(&len);
                }
                if len > n {
                    room.free.entry(len - n).or_default().push(at + n);
                }
                at
            }
            None if room.end + n <= self.capacity => {
                room.end += n;
                room.end - n
            }
            None => return None,
        };
        room.used += n;
        Some(at)
    }

    fn give_back(&self, at: u64, n: u64) {
        let mut room = self.room();
        room.used -= n;
        room.free.entry(n).or_default().push(at);
    }
}

impl SpillFile for PageFile {
    fn write(&self, bytes: &[u8]) -> Option<u64> {
        let n = blocks(bytes.len());
        if n > MAX_BLOCKS {
            return None;
        }
        let at = self.take(n)?;
        match self.file.write_all_at(bytes, at * BLOCK) {
            Ok(()) => Some(at),
            Err(e) => {
                self.give_back(at, n);
                let mut room = self.room();
                if !room.failed {
                    room.failed = true;
                    tracing::warn!(error = %e, "the spill file of sealed pages could not be written: pages stay in memory");
                }
                None
            }
        }
    }

    fn read(&self, at: u64, len: usize) -> std::io::Result<Vec<u8>> {
        let mut bytes = vec![0; len];
        self.file.read_exact_at(&mut bytes, at * BLOCK)?;
        Ok(bytes)
    }

    fn free(&self, at: u64, len: usize) {
        self.give_back(at, blocks(len));
    }

    fn held_bytes(&self) -> u64 {
        self.room().used * BLOCK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(capacity: u64) -> (tempfile::TempDir, PageFile) {
        let dir = tempfile::tempdir().unwrap();
        let f = PageFile::create(dir.path(), capacity).unwrap();
        (dir, f)
    }

    /// The whole way through, with this file installed as the process's
    /// spill file: a fold's pages leave memory, it reads and folds on as a
    /// fold that never sealed anything, and the room comes back when the
    /// fold goes. (Other tests of this binary may have their pages spilled
    /// too meanwhile, which is what the file is for: they read the same.)
    #[test]
    fn a_conversation_whose_pages_left_memory_reads_and_folds_as_before() {
        use crate::protocol::Event;
        use crate::protocol::fold::Fold;
        use crate::protocol::fold::tests::demo_run;
        use crate::protocol::page_spill;
        let dir = tempfile::tempdir().unwrap();
        assert!(page_spill::install(Box::new(
            PageFile::create(dir.path(), 64 << 20).unwrap()
        )));
        let mut late: Vec<serde_json::Value> = vec![
            serde_json::json!({"type":"RUN_STARTED","threadId":"t","runId":"late"}),
            serde_json::json!({"type":"TOOL_CALL_ARGS","toolCallId":"c3","delta":" "}),
            serde_json::json!({"type":"TOOL_CALL_RESULT","messageId":"t3b","toolCallId":"c3","content":"again"}),
            serde_json::json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"b5","delta":"!"}),
            serde_json::json!({"type":"RUN_FINISHED","threadId":"t","runId":"late"}),
        ];
        late.extend((300..310).flat_map(demo_run));
        let mut spilled = Fold::new().with_page_text(4096);
        let mut plain = Fold::new().with_page_text(usize::MAX);
        let mut seq = 0;
        let mut apply = |events: Vec<serde_json::Value>, a: &mut Fold, b: &mut Fold| {
            for e in events {
                seq += 1;
                let e = Event::build(e);
                assert_eq!(a.apply(seq, &e), b.apply(seq, &e));
            }
        };
        apply(
            (0..300).flat_map(demo_run).collect(),
            &mut spilled,
            &mut plain,
        );
        let held = spilled.approx_bytes();
        let read_before = spilled.to_json();
        let freed = page_spill::spill_oldest(usize::MAX);
        let on_file = spilled.messages().iter().filter(|m| m.is_spilled()).count();
        assert!(
            on_file > 1000,
            "{on_file} of {} spilled",
            spilled.messages().len()
        );
        let bodies = (spilled.messages().iter())
            .filter(|m| m.on_page().is_some_and(|(page, _)| page.is_body_spilled()))
            .count();
        assert_eq!(bodies, on_file, "each page's body leaves with its text");
        assert!(freed > 0 && page_spill::held_bytes() > 0);
        // Ids and roles read back from the bodies, and lookups by id pass
        // pages by their filters: as the fold that never sealed.
        let ids = |f: &Fold| -> Vec<Option<String>> {
            (f.messages().ids())
                .map(|id| id.map(|id| id.to_string()))
                .collect()
        };
        assert_eq!(ids(&spilled), ids(&plain));
        assert!(spilled.messages().roles().eq(plain.messages().roles()));
        for (i, id) in ids(&plain).iter().enumerate().step_by(97) {
            let id = id.as_deref().unwrap();
            assert_eq!(spilled.messages().rfind_id(id), Some(i), "{id}");
        }
        assert_eq!(spilled.messages().rfind_id("never-seen"), None);
        assert!(
            spilled.approx_bytes() + freed / 2 <= held,
            "{held} → {} bytes counted, {freed} freed",
            spilled.approx_bytes()
        );
        assert_eq!(spilled.to_json(), read_before, "reads the same");
        assert_eq!(spilled, plain);
        // Folding on touches spilled messages (a late argument, a result,
        // a delta): the same as a fold that never sealed.
        apply(late, &mut spilled, &mut plain);
        assert_eq!(spilled, plain);
        assert_eq!(spilled.to_json(), plain.to_json());
        // Its room comes back with it.
        let with = page_spill::held_bytes();
        drop(spilled);
        assert!(
            page_spill::held_bytes() < with,
            "{with} → {}",
            page_spill::held_bytes()
        );
    }

    #[test]
    fn what_is_written_reads_back_and_the_file_leaves_no_name_behind() {
        let (dir, f) = file(1 << 20);
        let a: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let b = vec![7u8; 10];
        let at_a = f.write(&a).unwrap();
        let at_b = f.write(&b).unwrap();
        assert_eq!(f.read(at_a, a.len()).unwrap(), a);
        assert_eq!(f.read(at_b, b.len()).unwrap(), b);
        assert_eq!(
            f.held_bytes(),
            3 * BLOCK,
            "5,000 bytes take two blocks, 10 one"
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "created unlinked"
        );
    }

    #[test]
    fn the_file_never_passes_its_size_and_reuses_what_pages_leave() {
        let (_dir, f) = file(8 * BLOCK);
        let page = vec![1u8; 3 * BLOCK as usize - 10];
        let first = f.write(&page).unwrap();
        let second = f.write(&page).unwrap();
        assert_eq!(f.write(&page), None, "a third would pass 8 blocks");
        let small = f.write(&[2u8; 100]).unwrap();
        assert_eq!(f.held_bytes(), 7 * BLOCK);
        // What a page leaves is taken again: whole, or split for a shorter one.
        f.free(first, page.len());
        assert_eq!(f.write(&page), Some(first));
        f.free(second, page.len());
        let one = f.write(&[3u8; 10]).unwrap();
        let two = f.write(&vec![4u8; 2 * BLOCK as usize]).unwrap();
        assert_eq!((one, two), (second, second + 1));
        assert_eq!(
            f.read(two, 2 * BLOCK as usize).unwrap(),
            vec![4u8; 2 * BLOCK as usize]
        );
        assert_eq!(f.read(small, 100).unwrap(), vec![2u8; 100]);
        assert_eq!(f.held_bytes(), 7 * BLOCK);
        assert_eq!(f.write(&page), None, "one block free, three asked");
    }
}
