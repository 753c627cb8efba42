//! Crash timing, tested: real gateway processes die (`abort`, a `kill -9`
//! at exactly one step) or freeze (`SIGSTOP`) or stall at the named fault
//! points of `src/fault.rs`, on one node over SQLite and on two over Redis,
//! and what is left must hold the invariants a client relies on:
//!
//! 1. every run ends exactly once in the journal, and no run starts inside
//!    another;
//! 2. the requester's terminal equals the journal's (when its node lived);
//! 3. no thread stays `running` (within `lease_ttl` on Redis, at restart on
//!    one node);
//! 4. no transfer (handoff) call is left unanswered;
//! 5. every viewer's sequence is gapless and equals the journal;
//! 6. the thread takes the next run.
//!
//! Needs the `failpoints` feature (`cargo test --features failpoints`, as
//! `.ci/run` builds the tests): without it the points do not exist and this
//! file is empty. The quick points run here; every point × several seeds is
//! `scripts` in docs/operations.md ("Crash timing").
#![cfg(feature = "failpoints")]

mod common;

use common::*;
use serde_json::{Value, json};
use std::time::Duration;

const LEASE_TTL: Duration = Duration::from_secs(2);

/// The scripted agent's scenarios, and the handoff agents, as agents of a
/// node on `store` TOML (empty: SQLite in the node's own directory).
fn config(store: &str, py: &PyAgent, handoff: Option<&PyAgent>) -> String {
    let mut agents: String = ["ok", "stall", "call-tool", "gated"]
        .iter()
        .map(|s| {
            format!(
                "[[agents]]\nid = \"{s}\"\nurl = \"{}\"\ntimeouts = {{ idle = \"1h\" }}\n",
                py.url(s)
            )
        })
        .collect();
    if let Some(h) = handoff {
        agents.push_str(&format!(
            "[[agents]]\nid = \"triage\"\nurl = \"{}\"\nhandoff = {{ targets = [\"billing\"] }}\n\
             [[agents]]\nid = \"billing\"\nurl = \"{}\"\n",
            h.url("triage"),
            h.url("billing")
        ));
    }
    format!("{store}{agents}")
}

/// Waits until `node` stalls at fault point `point` (configured as
/// `stall:<stall>`); returns when it was seen stalling.
async fn stalled(node: &Gateway, point: &str, stall: Duration) -> std::time::Instant {
    node.proc
        .expect_stderr(&format!("fault point {point}: stall:{}", stall.as_millis()))
        .await;
    std::time::Instant::now()
}

async fn redis_node(redis: &RedisServer, name: &str, config: &str, faults: &str) -> Gateway {
    let store = redis.store_config(name) + &format!("lease_ttl = \"{}s\"\n", LEASE_TTL.as_secs());
    Gateway::start_with_env(&format!("{store}{config}"), &[("FAILPOINTS", faults)]).await
}

fn body(thread: &str, run: &str, text: &str) -> Value {
    json!({"threadId": thread, "runId": run, "messages": [
        {"id": format!("u-{run}"), "role": "user", "content": text}]})
}

/// The thread's journal as `(seq, event)`, read from seq 0 on `base`.
async fn journal_at(base: &str, t: &str, thread: &str) -> Vec<(u64, Value)> {
    let snap = json_of(
        http()
            .get(format!("{base}/v1/threads/{thread}"))
            .bearer_auth(t),
    )
    .await;
    let last = snap["seq"].as_u64().expect("a snapshot names its seq");
    let mut ws = Ws::connect_at(base, WsAuth::Header(t), None, None)
        .await
        .unwrap();
    ws.send(json!({"type": "subscribe", "id": "j", "threadId": thread, "after": 0}))
        .await;
    // After a compaction the journal starts with a snapshot at its base
    // (always between runs); the events after it follow.
    let mut out = Vec::new();
    let mut reached = 0;
    while reached < last {
        let f = ws.recv().await;
        if f["type"] == "event" {
            reached = f["seq"].as_u64().unwrap();
            out.push((reached, f["event"].clone()));
        } else if f["type"] == "snapshot" {
            reached = reached.max(f["seq"].as_u64().unwrap_or(0));
        }
    }
    out
}

/// Invariants 1 and 4 on a journal; answers its runs' terminal events by run id.
fn check_journal(journal: &[(u64, Value)]) -> Vec<(String, Value)> {
    let mut open: Option<String> = None;
    let mut ended = Vec::new();
    let mut calls = std::collections::BTreeSet::new();
    let mut answered = std::collections::BTreeSet::new();
    // Messages and tool calls open in the current run: a run's end (its
    // own, or a closer's) must have ended them.
    let mut streaming = std::collections::BTreeSet::new();
    for (i, (seq, e)) in journal.iter().enumerate() {
        let id = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
        match e["type"].as_str().unwrap() {
            "TEXT_MESSAGE_START" => drop(streaming.insert(id("messageId"))),
            "TEXT_MESSAGE_END" => drop(streaming.remove(&id("messageId"))),
            "TOOL_CALL_START" => drop(streaming.insert(id("toolCallId"))),
            "TOOL_CALL_END" => drop(streaming.remove(&id("toolCallId"))),
            "RUN_FINISHED" | "RUN_ERROR" => assert!(
                streaming.is_empty(),
                "the run ended at seq {seq} with {streaming:?} still open: {journal:#?}"
            ),
            _ => {}
        }
        // From seq 1, or from a compacted base (always between runs).
        let first = journal.first().map_or(1, |(s, _)| *s);
        assert_eq!(
            *seq,
            first + i as u64,
            "the journal is gapless: {journal:#?}"
        );
        match e["type"].as_str().unwrap() {
            "RUN_STARTED" => {
                assert!(
                    open.is_none(),
                    "a run started inside run {open:?} at seq {seq}: {journal:#?}"
                );
                open = Some(e["runId"].as_str().unwrap().to_owned());
                for m in e["input"]["messages"].as_array().into_iter().flatten() {
                    if let Some(id) = m["toolCallId"].as_str() {
                        answered.insert(id.to_owned());
                    }
                }
            }
            "RUN_FINISHED" | "RUN_ERROR" => {
                let run = open.take().unwrap_or_else(|| {
                    panic!("a terminal at seq {seq} outside any run: {journal:#?}")
                });
                assert!(
                    ended.iter().all(|(r, _)| *r != run),
                    "run {run} ended twice: {journal:#?}"
                );
                ended.push((run, e.clone()));
            }
            "TOOL_CALL_START"
                if e["toolCallName"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("transfer_to_") =>
            {
                calls.insert(e["toolCallId"].as_str().unwrap().to_owned());
            }
            "TOOL_CALL_RESULT" => {
                answered.insert(e["toolCallId"].as_str().unwrap().to_owned());
            }
            _ => {}
        }
    }
    assert!(open.is_none(), "run {open:?} never ended: {journal:#?}");
    let unanswered: Vec<_> = calls.difference(&answered).collect();
    assert!(
        unanswered.is_empty(),
        "transfer calls without a result: {unanswered:?}: {journal:#?}"
    );
    ended
}

/// The run that `run` handed the thread over to, if the journal holds one.
fn handed_to(journal: &[(u64, Value)], run: &str) -> Option<String> {
    journal.iter().find_map(|(_, e)| {
        let stamp = &e["agui-gateway"];
        (e["type"] == "RUN_STARTED" && stamp["kind"] == "handoff" && stamp["parentRunId"] == run)
            .then(|| e["runId"].as_str().unwrap_or_default().to_owned())
    })
}

/// Waits until the thread is listed as not running on `base` (invariant 3),
/// at most `within`.
async fn settled_within(base: &str, t: &str, thread: &str, within: Duration) {
    let deadline = std::time::Instant::now() + within;
    loop {
        let list = json_of(http().get(format!("{base}/v1/threads")).bearer_auth(t)).await;
        let status = list["threads"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|x| x["threadId"] == thread)
            .map(|x| x["status"].clone());
        match status {
            Some(s) if s != "running" => return,
            _ => {}
        }
        assert!(
            std::time::Instant::now() < deadline,
            "thread {thread} still listed {status:?} after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits for a node that was armed to abort at `point` to say it fired
/// there and be gone.
async fn died(gw: &mut Gateway, point: &str) {
    gw.proc
        .expect_stderr(&format!("fault point {point}: abort"))
        .await;
    let exited = tokio::time::timeout(Duration::from_secs(30), gw.proc.child.wait()).await;
    let status = exited.expect("an aborted node exits").unwrap();
    assert!(!status.success(), "{status}");
}

/// A run request to `gw`'s node whose answer is not awaited here: the node
/// dies under it, so its stream just breaks off.
fn dying_request(gw: &Gateway, agent: &str, t: &str, body: Value) -> tokio::task::JoinHandle<()> {
    let request = http()
        .post(format!("{}/v1/agents/{agent}/run", gw.base))
        .bearer_auth(t)
        .json(&body);
    tokio::spawn(async move {
        if let Ok(mut resp) = request.send().await {
            while let Ok(Some(_)) = resp.chunk().await {}
        }
    })
}

/// A viewer's `(seq, event)` until the journal's seq `last` (invariant 5:
/// compared with the journal by the caller).
async fn viewer_until(ws: &mut Ws, last: u64, had: &mut Vec<(u64, Value)>) {
    while had.last().map_or(0, |(s, _)| *s) < last {
        let f = ws.recv().await;
        if f["type"] == "event" {
            had.push((f["seq"].as_u64().unwrap(), f["event"].clone()));
        }
    }
}

/// One scenario on two Redis nodes: a first run on B makes the thread and a
/// viewer on B watches from seq 0; A, armed to abort at `point`, takes a
/// run of `agent`; A dies there, B closes what A left within `lease_ttl`,
/// every invariant holds, and the thread takes a run on B.
async fn two_nodes_die_at(point: &str, agent: &str, handoff: bool) {
    let redis = RedisServer::start().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let h = if handoff {
        Some(PyAgent::start("handoff_agents.py").await)
    } else {
        None
    };
    let config = config("", &py, h.as_ref());
    let mut a = redis_node(&redis, "a", &config, &format!("{point}=1*return(abort)")).await;
    let b = redis_node(&redis, "b", &config, "").await;
    let t = token(json!({"sub": "alice"}));
    let thread = format!("fp-{}", point.replace('.', "-"));

    let (status, first) = post_run(&b.run_url("ok"), &t, &body(&thread, "r0", "hi")).await;
    assert_eq!(status, 200, "{first}");
    let mut viewer = Ws::connect_at(&b.base, WsAuth::Header(&t), None, None)
        .await
        .unwrap();
    viewer
        .send(json!({"type": "subscribe", "id": "v", "threadId": thread, "after": 0}))
        .await;
    let text = if handoff {
        "I have a bill question"
    } else {
        "go"
    };
    let requester = dying_request(&a, agent, &t, body(&thread, "r1", text));
    died(&mut a, point).await;
    let _ = requester.await; // its node died: its stream just ends

    settled_within(&b.base, &t, &thread, LEASE_TTL * 3).await;
    let journal = journal_at(&b.base, &t, &thread).await;
    check_journal(&journal);
    let mut seen = Vec::new();
    viewer_until(&mut viewer, journal.last().unwrap().0, &mut seen).await;
    assert_eq!(seen, journal, "the viewer saw exactly the journal");

    // Invariant 6: the next turn is free, on the surviving node — once the
    // dead node's lease has expired: until then a run is refused as
    // `conflict`, naming the run that holds the thread.
    let next = if handoff { "triage" } else { "ok" };
    let deadline = std::time::Instant::now() + LEASE_TTL * 2;
    let (status, out) = loop {
        let (status, out) = post_run(&b.run_url(next), &t, &body(&thread, "r2", "again")).await;
        if status != 409 || std::time::Instant::now() > deadline {
            break (status, out);
        }
        assert!(
            out.contains("run 'r1'"),
            "the conflict names the run holding the thread: {out}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status, 200, "{out}");
    let events = sse_events(&out);
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED", "{out}");
    let journal = journal_at(&b.base, &t, &thread).await;
    check_journal(&journal);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_dying_at_any_step_of_a_run_leaves_a_journal_another_node_closes() {
    // The points a run passes, each with an agent whose run reaches it.
    for (point, agent) in [
        ("run.lease_granted", "stall"),
        ("run.batch_enqueued", "stall"),
        ("run.batch_stored", "stall"),
        ("run.start_journaled", "stall"),
        ("run.end_enqueued", "ok"),
        ("run.end_stored", "ok"),
        ("run.lease_released", "ok"),
    ] {
        eprintln!("== {point}");
        two_nodes_die_at(point, agent, false).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_dying_between_a_handoffs_source_and_target_leaves_a_failed_handoff() {
    for point in ["handoff.decided", "handoff.target_starting"] {
        eprintln!("== {point}");
        two_nodes_die_at(point, "triage", true).await;
    }
}

/// Item 2 of issue 29: the batch that ends a run on Redis deletes the
/// run's lease; a heartbeat between that and the node learning its batch
/// was stored declared the lease gone, and the requester was told
/// `gateway_node_lost` for a run the journal holds as finished. The run's
/// task is held right after its end batch is handed to the store (a
/// `stall` of that task only) for longer than a heartbeat period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_end_is_stored_is_never_reported_lost() {
    let redis = RedisServer::start().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let config = config("", &py, None);
    let a = redis_node(
        &redis,
        "a",
        &config,
        "run.end_enqueued=1*return(stall:1200)",
    )
    .await;
    let t = token(json!({"sub": "alice"}));
    let (status, out) = post_run(&a.run_url("ok"), &t, &body("end-race", "r1", "go")).await;
    assert_eq!(status, 200, "{out}");
    a.proc
        .expect_stderr("fault point run.end_enqueued: stall:1200")
        .await;
    let journal = journal_at(&a.base, &t, "end-race").await;
    let ended = check_journal(&journal);
    let requester_end = sse_events(&out).last().cloned().unwrap();
    assert_eq!(
        requester_end, ended[0].1,
        "the requester's terminal is the journal's"
    );
    assert_eq!(requester_end["type"], "RUN_FINISHED", "{out}");
}

/// Issue 31: the sweeper lists the running threads, then asks which of them
/// hold a lease — two reads. A run that ended between them (its end batch
/// takes the thread off the running set and deletes its lease in one step)
/// was listed without a lease, and the closer, finding nothing open, took
/// the thread for a handoff whose target never started: a `CUSTOM
/// agui-gateway/handoff` "failed" record after a run that simply finished
/// (seen under load in the two-node inspector suite). The sweeper's task
/// is stalled between the two reads while the run ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_ending_while_the_sweeper_looks_is_left_as_it_ended() {
    const STALL: Duration = Duration::from_secs(6);
    let redis = RedisServer::start().await;
    let mut py = PyAgent::start("scripted_agent.py").await;
    let config = config("", &py, None);
    let faults = format!(
        "sweeper.listed=1*return(stall:{});sweeper.pass=return(stall:1)",
        STALL.as_millis()
    );
    let a = redis_node(&redis, "a", &config, &faults).await;
    let t = token(json!({"sub": "alice"}));
    let url = a.run_url("gated");
    let run = tokio::spawn(async move { post_run(&url, &t, &body("looked-at", "r1", "go")).await });
    // The run is open (its lease held) when the sweeper lists it.
    py.proc.expect_line_containing("GATED r1").await;
    let stalled_at = stalled(&a, "sweeper.listed", STALL).await;
    let passes = a.proc.stderr().matches("fault point sweeper.pass").count();
    // It ends while the sweeper waits between its two reads.
    http().post(py.url("release")).send().await.unwrap();
    let (status, out) = run.await.unwrap();
    assert_eq!(status, 200, "{out}");
    assert_eq!(
        sse_events(&out).last().unwrap()["type"],
        "RUN_FINISHED",
        "{out}"
    );
    assert!(
        stalled_at.elapsed() < STALL,
        "the run must end inside the sweeper's stall for this test to mean anything"
    );
    // The next pass begins once the stalled one (and any close) is over.
    a.proc
        .expect_stderr_times("fault point sweeper.pass", passes + 1)
        .await;
    let t = token(json!({"sub": "alice"}));
    let journal = journal_at(&a.base, &t, "looked-at").await;
    check_journal(&journal);
    let last = &journal.last().unwrap().1;
    assert_eq!(
        last["type"], "RUN_FINISHED",
        "nothing is journaled after the run's own end: {journal:#?}"
    );
}

/// CI, 2026-11-29: a run sent right after the previous run's end was
/// refused `conflict` ("the thread is being closed after a stopped gateway
/// node"). A sweeper had listed the thread while that run ended (two
/// reads, see the test above), took the closer's lease, found nothing to
/// close and gave it back — and the run asked for the thread in that
/// moment. A run now waits for a sweeper's lease (up to a lease's life).
/// The sweeper is stalled holding it here, past the run's request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_sent_while_a_sweeper_finds_nothing_to_close_waits_for_it() {
    const LISTED: Duration = Duration::from_secs(6);
    const HELD: Duration = Duration::from_millis(1500);
    let redis = RedisServer::start().await;
    let mut py = PyAgent::start("scripted_agent.py").await;
    let config = config("", &py, None);
    let faults = format!(
        "sweeper.listed=1*return(stall:{});sweeper.not_orphaned=1*return(stall:{});\
         sweeper.pass=return(stall:1)",
        LISTED.as_millis(),
        HELD.as_millis()
    );
    let a = redis_node(&redis, "a", &config, &faults).await;
    let t = token(json!({"sub": "alice"}));
    let url = a.run_url("gated");
    let run = tokio::spawn(async move { post_run(&url, &t, &body("swept", "r1", "go")).await });
    py.proc.expect_line_containing("GATED r1").await;
    stalled(&a, "sweeper.listed", LISTED).await;
    // The run ends while the sweeper waits between its two reads: it then
    // takes the closer's lease on a thread with nothing open, and holds it.
    http().post(py.url("release")).send().await.unwrap();
    let (status, out) = run.await.unwrap();
    assert_eq!(status, 200, "{out}");
    let held_at = stalled(&a, "sweeper.not_orphaned", HELD).await;
    let t = token(json!({"sub": "alice"}));
    assert!(
        held_at.elapsed() < HELD / 2,
        "the run must be asked for inside the sweeper's hold for this test to mean anything"
    );
    let (status, out) = post_run(&a.run_url("ok"), &t, &body("swept", "r2", "again")).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(
        sse_events(&out).last().unwrap()["type"],
        "RUN_FINISHED",
        "{out}"
    );
    let journal = journal_at(&a.base, &t, "swept").await;
    let ended = check_journal(&journal);
    let runs: Vec<(&str, &str)> = ended
        .iter()
        .map(|(r, e)| (r.as_str(), e["type"].as_str().unwrap()))
        .collect();
    assert_eq!(runs, [("r1", "RUN_FINISHED"), ("r2", "RUN_FINISHED")]);
}

/// Item 2: a WebSocket requester whose node froze past its lease before
/// the agent's first event is told how its run ended (nothing of the run
/// was journaled, so no closer ever will).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_requester_hears_its_run_stopped_before_anything_was_journaled() {
    let redis = RedisServer::start().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let config = config("", &py, None);
    let a = redis_node(&redis, "a", &config, "run.lease_granted=1*return(stop)").await;
    let t = token(json!({"sub": "alice"}));
    let mut ws = Ws::connect_at(&a.base, WsAuth::Header(&t), None, None)
        .await
        .unwrap();
    ws.send(
        json!({"type": "run", "id": "c1", "agent": "ok", "threadId": "frozen", "runId": "r1",
                   "messages": [{"id": "u1", "role": "user", "content": "go"}]}),
    )
    .await;
    // The node may freeze before its writer sent the ack (the run's task
    // and the connection's writer race): the ack is read after the wake.
    a.proc
        .expect_stderr("fault point run.lease_granted: stop")
        .await;
    // Frozen (SIGSTOP) until its lease expired in Redis, then woken.
    lease_expired(&redis).await;
    a.signal("CONT");
    let ack = ws.recv().await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let told = loop {
        let f = ws.recv().await;
        if f["type"] == "error" || is_terminal_frame(&f) {
            break f;
        }
    };
    assert_eq!(told["type"], "error", "{told}");
    assert_eq!(told["code"], "gateway_node_lost", "{told}");
    assert_eq!(told["runId"], "r1", "{told}");
}

/// Returns once Redis holds no run lease (the only one expired).
async fn lease_expired(redis: &RedisServer) {
    let deadline = std::time::Instant::now() + LEASE_TTL * 3;
    while !redis.cli(&["KEYS", "*:lease"]).trim().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the lease never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Item 3: a run asked for after a dead node's lease expired but before
/// any sweeper closed its run is granted only to close that run first (in
/// the same step the store grants the lease): the journal never holds a
/// run started inside another. B's sweeper is stalled for the whole test,
/// so it is the run's own start that closes the dead run; until the dead
/// node's lease expires, the run is refused as `conflict` naming the run
/// that holds the thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_runs_on_top_of_a_dead_nodes_run() {
    let redis = RedisServer::start().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let config = config("", &py, None);
    let a = redis_node(&redis, "a", &config, "").await;
    let b = redis_node(&redis, "b", &config, "sweeper.pass=return(stall:600000)").await;
    let t = token(json!({"sub": "alice"}));
    let mut viewer = Ws::connect_at(&b.base, WsAuth::Header(&t), None, None)
        .await
        .unwrap();
    let stuck = dying_request(&a, "stall", &t, body("atop", "r-dead", "go"));
    // The run is on its way once B sees its message open.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        viewer
            .send(json!({"type": "subscribe", "id": "v", "threadId": "atop", "after": 0}))
            .await;
        if viewer.recv().await["type"] == "ack" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    viewer
        .recv_until(|f| f["event"]["type"] == "TEXT_MESSAGE_START")
        .await;
    drop(a); // kill -9
    let _ = stuck.await;
    let mut conflicts = 0;
    loop {
        let (status, out) = post_run(&b.run_url("ok"), &t, &body("atop", "r-next", "again")).await;
        if status == 409 {
            assert!(out.contains("run 'r-dead'"), "{out}");
            conflicts += 1;
            continue;
        }
        assert_eq!(status, 200, "{out}");
        assert_eq!(
            sse_events(&out).last().unwrap()["type"],
            "RUN_FINISHED",
            "{out}"
        );
        break;
    }
    eprintln!("refused {conflicts} times while the dead node's lease lived");
    let journal = journal_at(&b.base, &t, "atop").await;
    let ended = check_journal(&journal);
    let runs: Vec<(&str, &str)> = ended
        .iter()
        .map(|(r, e)| (r.as_str(), e["type"].as_str().unwrap()))
        .collect();
    assert_eq!(runs, [("r-dead", "RUN_ERROR"), ("r-next", "RUN_FINISHED")]);
    assert_eq!(ended[0].1["code"], "gateway_node_lost");
    settled_within(&b.base, &t, "atop", LEASE_TTL).await;
}

/// One node on SQLite: the process dies at `point` of the thread's first
/// run (any earlier run would reach the point first); started again, it closes what it left
/// (`gateway_restarted`) before serving, and every invariant holds.
async fn one_node_dies_at(point: &str, agent: &str, handoff: bool) {
    let py = PyAgent::start("scripted_agent.py").await;
    let h = if handoff {
        Some(PyAgent::start("handoff_agents.py").await)
    } else {
        None
    };
    // For the compaction's seam, a short journal: a run's end compacts it.
    let threads = if point.starts_with("compaction.") {
        "[threads]\nmax_events = 10\n"
    } else {
        ""
    };
    let config = config(threads, &py, h.as_ref());
    let mut gw = Gateway::start_with_env(
        &config,
        &[("FAILPOINTS", &format!("{point}=1*return(abort)"))],
    )
    .await;
    let t = token(json!({"sub": "alice"}));
    let thread = format!("one-{}", point.replace('.', "-"));
    let text = if handoff {
        "I have a bill question"
    } else {
        "go"
    };
    let requester = dying_request(&gw, agent, &t, body(&thread, "r1", text));
    died(&mut gw, point).await;
    let _ = requester.await;

    let gw = gw.restart().await; // without FAILPOINTS
    settled_within(&gw.base, &t, &thread, Duration::from_secs(5)).await;
    let journal = journal_at(&gw.base, &t, &thread).await;
    let ended = check_journal(&journal);
    let (_, last) = ended.last().unwrap();
    if last["type"] == "RUN_ERROR" {
        assert_eq!(last["code"], "gateway_restarted", "{last}");
    }
    let next = if handoff { "triage" } else { "ok" };
    let (status, out) = post_run(&gw.run_url(next), &t, &body(&thread, "r2", "again")).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(
        sse_events(&out).last().unwrap()["type"],
        "RUN_FINISHED",
        "{out}"
    );
    check_journal(&journal_at(&gw.base, &t, &thread).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_dying_at_any_step_closes_what_it_left_when_it_starts_again() {
    for (point, agent, handoff) in [
        ("run.batch_stored", "stall", false),
        ("run.end_enqueued", "ok", false),
        ("run.end_stored", "ok", false),
        ("handoff.decided", "triage", true),
        ("compaction.serialized", "ok", false),
    ] {
        eprintln!("== {point}");
        one_node_dies_at(point, agent, handoff).await;
    }
}

/// The drill's knobs: `AGUI_DRILL_SECONDS` of workload (default 20),
/// `AGUI_DRILL_SEED` (default 1), `AGUI_DRILL_NODES` (default 2).
fn drill_knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A small deterministic generator (xorshift): the drill's choices follow
/// its seed (the nemesis's timing still meets the machine's).
struct Dice(u64);

impl Dice {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The randomized kill drill: a workload of runs (streams, tool calls,
/// handoffs), cancels and meta events on several threads over several
/// nodes, while a nemesis kills (`kill -9`, then a new node in its place)
/// and freezes (`SIGSTOP` … `SIGCONT`) nodes at random. Afterwards: every
/// journal holds the invariants, every thread settles, every requester
/// whose stream ended with a terminal got the journal's, and the threads
/// take runs again. `.ci/run` runs it for 20 s; longer and with other seeds
/// it is the documented long job (docs/operations.md, "Crash timing").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_randomized_kill_drill_keeps_every_invariant() {
    use std::sync::{Arc, Mutex};
    let seconds = drill_knob("AGUI_DRILL_SECONDS", 20);
    let seed = drill_knob("AGUI_DRILL_SEED", 1).max(1);
    let nodes_n = drill_knob("AGUI_DRILL_NODES", 2).max(2) as usize;
    eprintln!("drill: {seconds} s, seed {seed}, {nodes_n} nodes");
    let redis = RedisServer::start().await;
    let py = PyAgent::start("scripted_agent.py").await;
    let h = PyAgent::start("handoff_agents.py").await;
    let config = config("", &py, Some(&h));
    let mut nodes = Vec::new();
    for n in 0..nodes_n {
        nodes.push(redis_node(&redis, &format!("n{n}"), &config, "").await);
    }
    let bases: Arc<Mutex<Vec<Option<String>>>> = Arc::new(Mutex::new(
        nodes.iter().map(|g| Some(g.base.clone())).collect(),
    ));
    let t = token(json!({"sub": "alice"}));
    let threads: Vec<String> = (0..6).map(|i| format!("drill-{seed}-{i}")).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(seconds);
    // What requesters saw end: (thread, run id, terminal event).
    let told: Arc<Mutex<Vec<(String, String, Value)>>> = Arc::default();
    let pick = |bases: &Arc<Mutex<Vec<Option<String>>>>, dice: &mut Dice| {
        let live: Vec<String> = bases.lock().unwrap().iter().flatten().cloned().collect();
        live[dice.next(live.len() as u64) as usize].clone()
    };
    let mut workers = Vec::new();
    for (w, thread) in threads.iter().enumerate() {
        let (bases, told, t, thread) = (bases.clone(), told.clone(), t.clone(), thread.clone());
        workers.push(tokio::spawn(async move {
            let mut dice = Dice(seed * 7919 + w as u64 + 1);
            let mut n = 0;
            while std::time::Instant::now() < deadline {
                n += 1;
                let base = pick(&bases, &mut dice);
                let run = format!("{thread}-r{n}");
                let (agent, text) = match dice.next(10) {
                    0..=3 => ("ok", "go"),
                    4..=5 => ("call-tool", "go"),
                    6 => ("triage", "I have a bill question"),
                    7 => ("triage", "hello"),
                    8 => {
                        let _ = http()
                            .post(format!("{base}/v1/threads/{thread}/meta"))
                            .bearer_auth(&t)
                            .json(&json!({"metaType": "note", "payload": {"n": n}}))
                            .send()
                            .await;
                        continue;
                    }
                    _ => {
                        let _ = http()
                            .post(format!("{base}/v1/threads/{thread}/cancel"))
                            .bearer_auth(&t)
                            .json(&json!({}))
                            .send()
                            .await;
                        continue;
                    }
                };
                let sent = http()
                    .post(format!("{base}/v1/agents/{agent}/run"))
                    .bearer_auth(&t)
                    .json(&body(&thread, &run, text))
                    .timeout(Duration::from_secs(30))
                    .send()
                    .await;
                let Ok(resp) = sent else { continue };
                if resp.status() != 200 {
                    continue;
                }
                let Ok(text) = resp.text().await else {
                    continue;
                };
                // Only a stream that ended with a terminal is a requester
                // that heard its end (a dead node's just breaks off).
                let events = sse_events(&text);
                if let Some(end) = events
                    .iter()
                    .rev()
                    .find(|e| e["type"] == "RUN_FINISHED" || e["type"] == "RUN_ERROR")
                {
                    // A RUN_ERROR names no run: it ends the stream's last
                    // run (a handoff's response goes on with the target's).
                    let last_run = events
                        .iter()
                        .rev()
                        .find(|e| e["type"] == "RUN_STARTED")
                        .and_then(|e| e["runId"].as_str())
                        .unwrap_or(&run);
                    let ended = end["runId"].as_str().unwrap_or(last_run).to_owned();
                    told.lock()
                        .unwrap()
                        .push((thread.clone(), ended, end.clone()));
                }
            }
        }));
    }
    // The nemesis.
    let mut dice = Dice(seed);
    let (mut kills, mut freezes) = (0, 0);
    while std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(300 + dice.next(1200))).await;
        let i = dice.next(nodes.len() as u64) as usize;
        if dice.next(2) == 0 {
            kills += 1;
            bases.lock().unwrap()[i] = None;
            let _ = nodes[i].proc.child.kill().await;
            let name = format!("n{i}-{kills}");
            nodes[i] = redis_node(&redis, &name, &config, "").await;
            bases.lock().unwrap()[i] = Some(nodes[i].base.clone());
        } else {
            freezes += 1;
            nodes[i].signal("STOP");
            tokio::time::sleep(Duration::from_millis(
                dice.next(2 * LEASE_TTL.as_millis() as u64),
            ))
            .await;
            nodes[i].signal("CONT");
        }
    }
    for w in workers {
        w.await.unwrap();
    }
    eprintln!("drill: {kills} kills, {freezes} freezes");
    let base = nodes[0].base.clone();
    let told = told.lock().unwrap().clone();
    for thread in &threads {
        let listed = json_of(http().get(format!("{base}/v1/threads")).bearer_auth(&t)).await;
        if !listed.to_string().contains(&format!("\"{thread}\"")) {
            continue; // never created (every request refused or cut)
        }
        settled_within(&base, &t, thread, LEASE_TTL * 4).await;
        let journal = journal_at(&base, &t, thread).await;
        let ended = check_journal(&journal);
        for (th, run, end) in told.iter().filter(|(th, _, _)| th == thread) {
            // A run that handed over ends, for its requester, with the
            // last leg of its chain (the response goes on with each).
            let mut run = run.clone();
            while let Some(next) = handed_to(&journal, &run) {
                run = next;
            }
            let run = &run;
            let Some(journaled) = ended.iter().find(|(r, _)| r == run) else {
                // Stopped before anything of it was journaled (its node
                // froze past its lease, or its store failed): the requester
                // is told so, and the journal never shows the run.
                assert_eq!(
                    end["type"], "RUN_ERROR",
                    "{th}: {run} told {end}, never journaled"
                );
                let code = end["code"].as_str().unwrap_or_default();
                assert!(
                    [
                        "gateway_node_lost",
                        "journal_lost",
                        "journal_unavailable",
                        "unavailable"
                    ]
                    .contains(&code),
                    "{th}: {run} told {end}, never journaled"
                );
                continue;
            };
            assert_eq!(
                (end["type"].clone(), end["code"].clone()),
                (journaled.1["type"].clone(), journaled.1["code"].clone()),
                "{th}: the requester of {run} heard another end than the journal's"
            );
        }
        let (status, out) = loop {
            let (status, out) = post_run(
                &format!("{base}/v1/agents/ok/run"),
                &t,
                &body(thread, &format!("{thread}-last"), "end"),
            )
            .await;
            if status != 409 {
                break (status, out);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(status, 200, "{thread}: {out}");
        check_journal(&journal_at(&base, &t, thread).await);
    }
}

/// A run sent with `strategy: "enqueue"` to a node while another node's run
/// holds the thread: the store answers "held", and before this node queues
/// the request, the holder's run ends and its end reaches this node's copy.
/// The queued run then waited for an end it had already seen — forever
/// (found as a rare hang of `cluster.rs`'s many-threads test). The node is
/// stalled at exactly that step while the other run ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_queued_behind_a_run_that_ended_meanwhile_starts() {
    const STALL: Duration = Duration::from_secs(3);
    let redis = RedisServer::start().await;
    let mut py = PyAgent::start("scripted_agent.py").await;
    let config = config("", &py, None)
        + &format!(
            "[[agents]]\nid = \"queued\"\nurl = \"{}\"\nallow_strategy_override = true\n",
            py.url("ok")
        );
    let a = redis_node(&redis, "a", &config, "").await;
    let b = redis_node(
        &redis,
        "b",
        &config,
        &format!("run.lease_held=1*return(stall:{})", STALL.as_millis()),
    )
    .await;
    let t = token(json!({"sub": "alice"}));
    let url = a.run_url("gated");
    let first = {
        let t = t.clone();
        tokio::spawn(async move { post_run(&url, &t, &body("behind", "r1", "go")).await })
    };
    py.proc.expect_line_containing("GATED r1").await;

    let mut ws = Ws::connect(&b, WsAuth::Header(&t)).await.unwrap();
    ws.send(
        json!({"type": "run", "id": "r2", "agent": "queued", "threadId": "behind",
                   "runId": "r2", "strategy": "enqueue",
                   "messages": [{"id": "u-r2", "role": "user", "content": "next"}]}),
    )
    .await;
    let stalled_at = stalled(&b, "run.lease_held", STALL).await;
    // The holder ends while node b has the store's answer but has not
    // queued the request yet.
    http().post(py.url("release")).send().await.unwrap();
    let (status, out) = first.await.unwrap();
    assert_eq!(status, 200, "{out}");
    assert!(
        stalled_at.elapsed() < STALL,
        "the first run must end inside the stall for this test to mean anything"
    );
    let frames = ws
        .answer_and_run("r2", "r2")
        .await
        .unwrap_or_else(|refused| panic!("r2 refused: {refused}"));
    assert_eq!(
        frames.last().unwrap()["event"]["type"],
        "RUN_FINISHED",
        "{frames:#?}"
    );
    let journal = journal_at(&b.base, &t, "behind").await;
    check_journal(&journal);
}
