//! Memory by the byte (docs/operations.md, "Sizing by bytes"): a thread
//! keeps only `threads.hot_bytes` of its newest events in memory and a
//! node holds its threads to `threads.memory_budget`; what left memory is
//! read back from the store, and a client sees no difference but latency.
//! Against the real gateway binary with the built-in demo agent.

mod common;

use common::*;
use serde_json::{Value, json};

/// Demo agent; a tail of 1 KiB holds about two events, so every run's
/// older events leave memory as it streams.
const SMALL: &str = "[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
    [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n\
    [threads]\nhot_bytes = \"1KiB\"\n";

fn series(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix(name))
        .filter_map(|rest| rest.rsplit_once(' '))
        .filter_map(|(_, v)| v.trim().parse::<f64>().ok())
        .sum()
}

async fn run_on(gw: &Gateway, t: &str, thread: &str, run: &str) {
    let (status, body) = post_run(&gw.run_url("demo"), t, &input(thread, run, "tell me")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("RUN_FINISHED"), "{body}");
}

/// Every event frame from `after` on until seq `last`.
async fn replay(gw: &Gateway, t: &str, thread: &str, after: u64, last: u64) -> Vec<Value> {
    let mut ws = Ws::connect(gw, WsAuth::Header(t)).await.unwrap();
    ws.send(json!({"type": "subscribe", "id": "s", "threadId": thread, "after": after}))
        .await;
    ws.recv_until(|f| f["seq"].as_u64() == Some(last))
        .await
        .into_iter()
        .filter(|f| f["type"] == "event")
        .collect()
}

/// A live viewer gets the events from memory as they are published; a
/// viewer that comes later, from the start or from a cursor in the middle,
/// gets the same events read back from the store — and the node says it
/// read them there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_that_left_memory_are_read_back_from_the_store_unchanged() {
    if single_node_only("counts this node's reads from the store") {
        return;
    }
    let gw = Gateway::start(SMALL).await;
    let t = token(json!({"sub": "alice"}));
    let mut live = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    run_on(&gw, &t, "tail", "r1").await;
    live.send(json!({"type": "subscribe", "id": "s", "threadId": "tail", "after": 0}))
        .await;
    for run in ["r2", "r3", "r4"] {
        run_on(&gw, &t, "tail", run).await;
    }
    let live_frames: Vec<Value> = live
        .recv_until(|f| is_terminal_frame(f) && f["event"]["runId"] == "r4")
        .await
        .into_iter()
        .filter(|f| f["type"] == "event")
        .collect();
    let last = *seqs(&live_frames).last().unwrap();
    assert!(last > 40, "four runs of the demo agent: {last} events");
    let before = series(&gw.metrics().await, "agui_cold_reads_total");
    let replayed = replay(&gw, &t, "tail", 0, last).await;
    assert_eq!(
        seqs(&replayed),
        (1..=last).collect::<Vec<_>>(),
        "gapless from 1"
    );
    assert_eq!(
        replayed, live_frames,
        "the same frames as the live viewer's"
    );
    let middle = last / 2;
    let resumed = replay(&gw, &t, "tail", middle, last).await;
    assert_eq!(
        resumed[..],
        replayed[middle as usize..],
        "a resume from the middle"
    );
    let after = series(&gw.metrics().await, "agui_cold_reads_total");
    assert!(
        after - before >= (last - 4) as f64,
        "read back from the store: {before} → {after} of {last} events"
    );
}

/// A node over its budget lets its idle threads go (counted as `budget`
/// evictions); their conversations load back from the store, whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_over_its_budget_lets_idle_threads_go_and_loads_them_back_whole() {
    if single_node_only("reads this node's residency") {
        return;
    }
    let config = format!("{SMALL}memory_budget = \"1KiB\"\n");
    let gw = Gateway::start(&config).await;
    let t = token(json!({"sub": "alice"}));
    for thread in ["b1", "b2", "b3"] {
        run_on(&gw, &t, thread, "r1").await;
    }
    // No event to wait on from outside the process: the budget is looked
    // at every second, so the threads leave within a few.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let metrics = loop {
        let m = gw.metrics().await;
        if series(&m, "agui_resident_threads") == 0.0 {
            break m;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "threads stayed resident over the budget:\n{m}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert!(
        series(&metrics, "agui_evictions_total{reason=\"budget\"}") >= 3.0,
        "{metrics}"
    );
    for thread in ["b1", "b2", "b3"] {
        let snap = json_of(
            http()
                .get(gw.url(&format!("/v1/threads/{thread}")))
                .bearer_auth(&t),
        )
        .await;
        let messages = snap["messages"].as_array().expect("messages");
        assert_eq!(messages.len(), 5, "{snap}");
        assert_eq!(messages[0]["content"], "tell me", "{snap}");
        assert!(
            messages[4]["content"]
                .as_str()
                .unwrap()
                .contains("You said"),
            "{snap}"
        );
        let last = snap["seq"].as_u64().expect("seq");
        let replayed = replay(&gw, &t, thread, 0, last).await;
        assert_eq!(seqs(&replayed), (1..=last).collect::<Vec<_>>());
    }
}

/// A thread still watched cannot leave memory; over the budget it gives
/// back its tail's old events and its older runs' end views instead. A
/// fork from its first run then rebuilds that run's conversation from the
/// events read back from the store: the agent gets the same history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_thread_over_the_budget_sheds_its_past_and_still_forks_from_it() {
    if single_node_only("reads this node's residency") {
        return;
    }
    let config = format!("{SMALL}memory_budget = \"1KiB\"\n");
    let gw = Gateway::start(&config).await;
    let t = token(json!({"sub": "alice"}));
    let mut watcher = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    run_on(&gw, &t, "shed", "r1").await;
    watcher
        .send(json!({"type": "subscribe", "id": "s", "threadId": "shed", "after": 0}))
        .await;
    for run in ["r2", "r3"] {
        run_on(&gw, &t, "shed", run).await;
    }
    // Polled: the budget is looked at every second.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let m = gw.metrics().await;
        if series(&m, "agui_evictions_total{reason=\"budget_tail\"}") >= 1.0 {
            assert_eq!(
                series(&m, "agui_resident_threads"),
                1.0,
                "watched: stays\n{m}"
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "nothing shed:\n{m}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let mut fork = input("shed", "f1", "again");
    fork["parentRunId"] = json!("r1");
    fork["messages"][0]["id"] = json!("u-f1");
    let (status, body) = post_run(&gw.run_url("demo"), &t, &fork).await;
    assert_eq!(status, 200, "{body}");
    // The journal's RUN_STARTED restates the branch's history (the
    // watcher's copy; the HTTP requester gets the agent's own).
    let frames = watcher
        .recv_until(|f| f["event"]["type"] == "RUN_STARTED" && f["event"]["runId"] == "f1")
        .await;
    let started = frames.last().unwrap()["event"].clone();
    let history = started["input"]["messages"].as_array().expect("input");
    let contents: Vec<&str> = history
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(
        history.len(),
        6,
        "r1's five messages and the new one: {started}"
    );
    assert_eq!(contents.first(), Some(&"tell me"), "{started}");
    assert_eq!(contents.last(), Some(&"again"), "{started}");
    assert!(
        !body.contains("r2-answer") && !body.contains("r3-answer"),
        "{body}"
    );
}

/// The admin view of where the budget goes: `/metrics` names the biggest
/// resident threads with their bytes, biggest first in size, and a thread
/// that left memory is no longer named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_biggest_threads_are_named_with_their_bytes() {
    if single_node_only("reads this node's residency") {
        return;
    }
    let config = "[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
        [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n";
    let gw = Gateway::start(config).await;
    let t = token(json!({"sub": "alice"}));
    run_on(&gw, &t, "small", "s1").await;
    for run in ["b1", "b2", "b3", "b4"] {
        run_on(&gw, &t, "big", run).await;
    }
    let bytes = |m: &str, thread: &str| {
        m.lines()
            .find(|l| {
                l.starts_with("agui_thread_resident_bytes{")
                    && l.contains(&format!("thread=\"{thread}\""))
            })
            .and_then(|l| l.rsplit_once(' '))
            .and_then(|(_, v)| v.parse::<f64>().ok())
    };
    let m = gw.metrics().await;
    let (small, big) = (bytes(&m, "small"), bytes(&m, "big"));
    assert!(small.is_some_and(|s| s > 1000.0), "{m}");
    assert!(
        big.unwrap_or(0.0) > small.unwrap_or(f64::MAX),
        "four runs hold more than one: {big:?} against {small:?}\n{m}"
    );
    // What a thread is named with grows with what it holds (a tail's full
    // chunks are compressed, so not in proportion to its runs).
    for run in 5..=12 {
        run_on(&gw, &t, "big", &format!("b{run}")).await;
    }
    let m = gw.metrics().await;
    let (small_after, bigger) = (bytes(&m, "small"), bytes(&m, "big"));
    assert_eq!(small_after, small, "the small thread did not change: {m}");
    assert!(
        bigger.unwrap_or(0.0) > big.unwrap_or(f64::MAX),
        "twelve runs hold more than four: {bigger:?} against {big:?}\n{m}"
    );
}

/// The budget is also held against the process's resident set: a node
/// whose RSS is past `memory_budget + memory_overhead` sheds its watched
/// threads' old events though their count is within the budget (counted as
/// `budget_rss`), says so when nothing is left to shed, and what left is
/// read back from the store unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_resident_set_passes_its_ceiling_sheds_within_its_count() {
    if single_node_only("reads this node's residency") {
        return;
    }
    // A 64 KiB tail holds every event of these runs, and their count stays
    // far within 1 MiB; a ceiling of 17 MiB is below what any gateway
    // process holds, so only the resident set can make it shed.
    let config = "[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
        [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n\
        [threads]\nhot_bytes = \"64KiB\"\nmemory_budget = \"1MiB\"\nmemory_overhead = \"16MiB\"\n";
    let gw = Gateway::start(config).await;
    let t = token(json!({"sub": "alice"}));
    let mut live = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    run_on(&gw, &t, "rss", "r1").await;
    live.send(json!({"type": "subscribe", "id": "s", "threadId": "rss", "after": 0}))
        .await;
    for run in ["r2", "r3"] {
        run_on(&gw, &t, "rss", run).await;
    }
    let live_frames: Vec<Value> = live
        .recv_until(|f| is_terminal_frame(f) && f["event"]["runId"] == "r3")
        .await
        .into_iter()
        .filter(|f| f["type"] == "event")
        .collect();
    let last = *seqs(&live_frames).last().unwrap();
    // Polled: the resident set is looked at every second.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let m = loop {
        let m = gw.metrics().await;
        if series(&m, "agui_evictions_total{reason=\"budget_rss\"}") >= 1.0 {
            break m;
        }
        assert!(std::time::Instant::now() < deadline, "nothing shed:\n{m}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert!(
        series(&m, "agui_evictions_total{reason=\"budget_tail\"}") >= 1.0,
        "{m}"
    );
    assert!(
        series(&m, "agui_process_resident_bytes") > (16 << 20) as f64,
        "{m}"
    );
    assert_eq!(
        series(&m, "agui_resident_threads"),
        1.0,
        "watched: stays\n{m}"
    );
    // Nothing left to shed, and the process still over: said, not hidden.
    gw.proc.expect_stderr("with nothing left to shed").await;
    let before = series(&gw.metrics().await, "agui_cold_reads_total");
    let replayed = replay(&gw, &t, "rss", 0, last).await;
    assert_eq!(replayed, live_frames, "the same frames, read back");
    let after = series(&gw.metrics().await, "agui_cold_reads_total");
    assert!(
        after > before,
        "read back from the store: {before} → {after}"
    );
}

/// The last thing a node over its ceiling sheds: the sealed pages of its
/// watched conversations leave memory for the spill file
/// (`threads.spill_bytes`), and the conversation reads the same — its
/// snapshot, and a run started on it after (which reads every page for its
/// input and seals new ones).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_conversation_over_the_ceiling_leaves_memory_for_the_spill_file() {
    if single_node_only("reads this node's residency") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Pages of 1 KiB of text (a few runs' messages each: a page of one
    // short message would not pack, and only packed text is spilled); a
    // ceiling of 17 MiB is below what any gateway process holds.
    let config = format!(
        "[demo]\nenabled = true\ntoken_delay = \"1ms\"\n\
        [[agents]]\nid = \"demo\"\nurl = \"demo:\"\n\
        [threads]\nhot_bytes = \"64KiB\"\nmemory_budget = \"1MiB\"\nmemory_overhead = \"16MiB\"\n\
        sealed_page_bytes = \"1KiB\"\nspill_bytes = \"1MiB\"\nspill_dir = {:?}\n",
        dir.path().display().to_string()
    );
    let gw = Gateway::start(&config).await;
    let t = token(json!({"sub": "alice"}));
    // Each run brings a new user message: the conversation grows.
    let turn = |i: usize| {
        let t = &t;
        let gw = &gw;
        async move {
            let mut body = input("spill", &format!("r{i}"), &format!("question {i}"));
            body["messages"][0]["id"] = json!(format!("u{i}"));
            let (status, body) = post_run(&gw.run_url("demo"), t, &body).await;
            assert_eq!(status, 200, "{body}");
            assert!(body.contains("RUN_FINISHED"), "{body}");
        }
    };
    let mut live = Ws::connect(&gw, WsAuth::Header(&t)).await.unwrap();
    turn(1).await;
    live.send(json!({"type": "subscribe", "id": "s", "threadId": "spill", "after": 0}))
        .await;
    for i in 2..=12 {
        turn(i).await;
    }
    let snapshot = || async {
        json_of(http().get(gw.url("/v1/threads/spill")).bearer_auth(&t)).await["messages"].clone()
    };
    let before = snapshot().await;
    assert!(before.as_array().unwrap().len() >= 16, "{before}");
    // Polled: the ceiling is looked at every second.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let m = loop {
        let m = gw.metrics().await;
        if series(&m, "agui_spilled_page_bytes") > 0.0 {
            break m;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no page spilled:\n{m}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert!(
        series(&m, "agui_evictions_total{reason=\"budget_spill\"}") >= 1.0,
        "{m}"
    );
    assert!(
        series(&m, "agui_spilled_page_bytes") <= (1 << 20) as f64,
        "within spill_bytes:\n{m}"
    );
    assert_eq!(snapshot().await, before, "the same conversation, read back");
    // A run on it reads every page for its input, and ends with all of it.
    turn(13).await;
    let after = snapshot().await;
    let after = after.as_array().unwrap();
    assert_eq!(
        after[..before.as_array().unwrap().len()],
        before.as_array().unwrap()[..]
    );
    assert!(after.len() > before.as_array().unwrap().len());
    drop(live);
}
