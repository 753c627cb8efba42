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
use agui_gateway::protocol::page_spill;
use agui_gateway::store::page_file::PageFile;
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
    // A spill file, as a node has (pages sealed from now on may leave).
    let spill_dir = tempfile::tempdir().unwrap();
    assert!(page_spill::install(Box::new(
        PageFile::create(spill_dir.path(), 1 << 30).unwrap()
    )));

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
    // The run ends' views hold a whole page as one part (src/protocol/
    // checkpoint.rs): 1,092 bytes a run, against 1,457 when every view
    // copied flat held 32 bytes a message (docs/benchmarks.md,
    // "Thirteenth pass"); 930 once the fold's own list held its oldest
    // whole pages as pages, not a 16-byte slot a message (src/protocol/
    // message_list.rs), against 1,032 before ("Fourteenth pass").
    let per_run = sealed / RUNS as isize;
    assert!(per_run <= 1_000, "a run holds {per_run} bytes");

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

    // Its pages moved to the spill file (what a node over its ceiling does
    // last, src/protocol/page_spill.rs): the memory given back is at least
    // what the file took, and it reads the same. Measured: 37 bytes a
    // message of the demo agent's, its packed text (12: the demo's messages
    // pack about 11 to 1 on a page) and its page's body, each entry and id
    // (25); 12 when the body stayed (docs/benchmarks.md, "Twelfth pass" and
    // "Fifteenth pass").
    let before = HELD.load(Ordering::Relaxed);
    let moved = page_spill::spill_oldest(usize::MAX);
    let released = (before - HELD.load(Ordering::Relaxed)) as usize;
    let spilled = sealed_fold
        .messages()
        .iter()
        .filter(|m| m.is_spilled())
        .count();
    println!(
        "spilled: {moved} B of packed text for {spilled} messages, {released} B released: \
         {} B a message, {} B a run left",
        released / spilled.max(1),
        (sealed as usize - released) / RUNS
    );
    assert!(spilled * 10 >= on_pages * 9, "{spilled} of {on_pages}");
    assert!(moved >= 8 * spilled, "{moved} bytes moved");
    assert!(
        released >= 30 * spilled,
        "{released} bytes released for {spilled} spilled messages"
    );
    assert!(released >= moved, "{released} released for {moved} moved");
    assert!(page_spill::held_bytes() as usize >= moved);
    assert_eq!(sealed_fold, plain_fold, "both still read the same");
    assert_eq!(sealed_fold.to_json(), plain_fold.to_json());
    drop((sealed_fold, plain_fold));
    assert_eq!(page_spill::held_bytes(), 0, "the room comes back");

    // Answers in prose (this repository's own docs, a paragraph a run), as
    // a model writes them: there the packed text is most of a sealed
    // message, and most of it leaves. Measured: docs/benchmarks.md,
    // "Twelfth pass".
    let prose: Vec<&str> = include_str!("../docs/operations.md")
        .split("\n\n")
        .filter(|p| p.len() > 200)
        .collect();
    let before = HELD.load(Ordering::Relaxed);
    let mut fold = Fold::new();
    let mut seq = 0;
    let runs = 400;
    for i in 0..runs {
        let r = format!("p{i}");
        let answer = prose[i % prose.len()];
        for e in [
            serde_json::json!({"type":"RUN_STARTED","threadId":"t","runId":r,"input":{"messages":[{"id":format!("u-{r}"),"role":"user","content":format!("what does part {i} say?")}]}}),
            serde_json::json!({"type":"TEXT_MESSAGE_START","messageId":format!("a-{r}"),"role":"assistant"}),
            serde_json::json!({"type":"TEXT_MESSAGE_CONTENT","messageId":format!("a-{r}"),"delta":answer}),
            serde_json::json!({"type":"TEXT_MESSAGE_END","messageId":format!("a-{r}")}),
            serde_json::json!({"type":"RUN_FINISHED","threadId":"t","runId":r}),
        ] {
            seq += 1;
            fold.apply(seq, &Event::build(e));
        }
    }
    let held = HELD.load(Ordering::Relaxed) - before;
    let expected = fold.to_json();
    let on_pages: Vec<usize> = fold
        .messages()
        .iter()
        .filter(|m| m.is_sealed())
        .map(|m| m.json_len())
        .collect();
    let text: usize = on_pages.iter().sum();
    let before = HELD.load(Ordering::Relaxed);
    let moved = page_spill::spill_oldest(usize::MAX);
    let released = (before - HELD.load(Ordering::Relaxed)) as usize;
    println!(
        "prose: {runs} runs hold {held} B; {} messages on pages, {} B of JSON each on average; \
         {} B a message released by the spill ({moved} B moved)",
        on_pages.len(),
        text / on_pages.len(),
        released / on_pages.len()
    );
    assert!(on_pages.len() * 10 >= fold.messages().len() * 9);
    assert!(
        released * 3 >= text,
        "{released} released for {text} bytes of JSON on pages"
    );
    assert_eq!(fold.to_json(), expected, "reads the same");
    drop(fold);
    assert_eq!(page_spill::held_bytes(), 0);

    // What a run adds while the run table fills (its first 1,000 runs),
    // with UUID run ids as clients send them: the run's record (its id
    // held once, its output ids in one allocation: src/protocol/run_list.rs
    // and id_list.rs) and the conversation it adds. Measured: 1,516 bytes
    // a run, against 1,981 when the table held each id three times and
    // each output id on its own (docs/benchmarks.md, "Eleventh pass");
    // 1,115 once a run end's view held each whole page as one part
    // ("Thirteenth pass"); 925 with the fold's list holding whole pages
    // (1,061 before, "Fourteenth pass").
    let uuid = |i: usize| format!("{i:08x}-7d1c-4b7e-9a4f-{:012x}", i * 7919);
    let (_, fold) = held_after(Fold::new(), run, 0..100, &uuid);
    let (filling, fold) = held_after(fold, run, 100..1000, &uuid);
    let per_run = filling / 900;
    println!("runs 100 to 1,000 with UUID ids: {per_run} B a run");
    assert!(per_run <= 1_000, "a run adds {per_run} bytes");
    drop(fold);
}
