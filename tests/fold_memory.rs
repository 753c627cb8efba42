//! What a watched conversation holds in memory as it grows, counted: a
//! guard that finished messages go onto sealed pages
//! (`src/protocol/sealed.rs`) and that pages cost what docs/benchmarks.md
//! ("Ninth pass") says.
//!
//! A counting global allocator wraps the system allocator in this binary
//! only (one test in it, so nothing else allocates meanwhile). The demo
//! agent's first run, as the gateway journaled it, is folded again and
//! again under new ids, each run the child of the one before (as a
//! thread's runs are): once by a fold that seals its pages, once by one
//! that never does. Both read the same (the fold's own tests and its fuzz
//! target check that); this counts what each holds.

use agui_gateway::protocol::Event;
use agui_gateway::protocol::fold::Fold;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

struct Counting;

/// Heap bytes held now.
static HELD: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HELD.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        HELD.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs folded: enough for pages to be most of the conversation.
const RUNS: usize = 600;

/// Heap bytes a fold of [`RUNS`] demo runs holds.
fn held_after_runs(fold: Fold, run: &[&str]) -> (isize, Fold) {
    held_after(fold, run, 0..RUNS, &|i| format!("r{i}"))
}

/// Heap bytes `fold` grows by as runs `runs` of the demo agent are folded
/// into it, run `i` named `id(i)`, each the child of the one before.
fn held_after(
    fold: Fold,
    run: &[&str],
    runs: std::ops::Range<usize>,
    id: &dyn Fn(usize) -> String,
) -> (isize, Fold) {
    let before = HELD.load(Ordering::Relaxed);
    let mut fold = fold;
    let mut seq = (runs.start * run.len()) as u64;
    for i in runs {
        let parent = match i {
            0 => "null".to_owned(),
            _ => format!("\"{}\"", id(i - 1)),
        };
        for line in run {
            let line = line
                .replace("r0-0", &id(i))
                .replace("\"parentRunId\":null", &format!("\"parentRunId\":{parent}"));
            seq += 1;
            fold.apply(seq, &Event::parse(line.into_bytes()).unwrap());
        }
    }
    (HELD.load(Ordering::Relaxed) - before, fold)
}

#[test]
fn a_long_conversation_holds_its_finished_messages_on_sealed_pages() {
    let journal = include_str!("fixtures/journal-text/demo-agent.jsonl");
    let lines: Vec<&str> = journal.lines().collect();
    let end = lines
        .iter()
        .position(|l| l.contains("\"RUN_FINISHED\""))
        .unwrap();
    let run = &lines[..=end];

    let (sealed, sealed_fold) = held_after_runs(Fold::new(), run);
    let (plain, plain_fold) = held_after_runs(Fold::new().with_page_text(usize::MAX), run);
    assert_eq!(sealed_fold, plain_fold, "both read the same");
    let messages = sealed_fold.messages().len();
    let on_pages = sealed_fold
        .messages()
        .iter()
        .filter(|m| m.is_sealed())
        .count();
    println!(
        "{RUNS} runs, {messages} messages ({on_pages} on pages): {} B a run sealed, {} plain",
        sealed / RUNS as isize,
        plain / RUNS as isize
    );
    assert!(on_pages * 10 >= messages * 9, "{on_pages} of {messages}");
    // Measured: 69 bytes a message on a page against 242 on its own; its
    // origin on the page, 2 bytes against 93 in the map; a run record's
    // copy of its input shares the page. 255 bytes less a message at 600
    // runs, five messages a run.
    let saved = (plain - sealed) as usize / messages;
    assert!(saved >= 220, "a sealed message saves {saved} bytes");

    // Read back from its stored form (a thread reloaded after eviction or
    // on another node), it holds about what it held live: the run
    // records' and end views' messages share the conversation's.
    let stored = serde_json::Value::Object(sealed_fold.to_stored_json());
    let before = HELD.load(Ordering::Relaxed);
    let reloaded = Fold::from_json(&stored, None);
    let held = HELD.load(Ordering::Relaxed) - before;
    println!("reloaded: {} B a run", held / RUNS as isize);
    assert!(
        held < sealed + sealed / 2,
        "reloaded it holds {held} bytes against {sealed} live"
    );
    drop(reloaded);
    drop((sealed_fold, plain_fold));

    // What a run adds while the run table fills (its first 1,000 runs),
    // with UUID run ids as clients send them: the run's record (its id
    // held once, its output ids in one allocation: src/protocol/run_list.rs
    // and id_list.rs) and the conversation it adds. Measured: 1,516 bytes
    // a run, against 1,981 when the table held each id three times and
    // each output id on its own (docs/benchmarks.md, "Eleventh pass").
    let uuid = |i: usize| format!("{i:08x}-7d1c-4b7e-9a4f-{:012x}", i * 7919);
    let (_, fold) = held_after(Fold::new(), run, 0..100, &uuid);
    let (filling, fold) = held_after(fold, run, 100..1000, &uuid);
    let per_run = filling / 900;
    println!("runs 100 to 1,000 with UUID ids: {per_run} B a run");
    assert!(per_run <= 1_650, "a run adds {per_run} bytes");
    drop(fold);
}
