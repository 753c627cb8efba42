//! Backend pools (issue 24) against the real gateway binary and three real
//! AG-UI agent processes per pool (`tests/agents/pool_agent.py`, built with
//! PyPI `ag-ui-protocol`). Each replica appends every run id it receives to
//! a file of its own, before it answers (and again once its first event is
//! out), so the tests count where each run went — and that none went to two
//! replicas — even for a replica that was killed.

mod common;

use common::*;
use futures::StreamExt;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

/// One replica and the file it records its runs in.
struct Replica {
    agent: PyAgent,
    record: PathBuf,
}

impl Replica {
    async fn start(dir: &tempfile::TempDir, n: usize) -> Replica {
        let record = dir.path().join(format!("replica-{n}.runs"));
        let agent = PyAgent::start_args("pool_agent.py", &[record.to_str().unwrap()]).await;
        Replica { agent, record }
    }

    fn url(&self, path: &str) -> String {
        self.agent.url(path)
    }

    /// The (run id, thread id) of every run request it received.
    fn received(&self) -> Vec<(String, String)> {
        self.records(false)
    }

    /// The (run id, thread id) of every run it sent its first event of.
    fn started(&self) -> Vec<(String, String)> {
        self.records(true)
    }

    fn records(&self, started: bool) -> Vec<(String, String)> {
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.ends_with(" started") == started)
            .map(|l| {
                let mut fields = l.split(' ');
                let run = fields.next().unwrap().to_owned();
                (run, fields.next().unwrap().to_owned())
            })
            .collect()
    }

    fn runs(&self) -> Vec<String> {
        self.received().into_iter().map(|(r, _)| r).collect()
    }
}

async fn replicas(n: usize) -> (tempfile::TempDir, Vec<Replica>) {
    let dir = tempfile::tempdir().unwrap();
    let mut out = Vec::new();
    for i in 0..n {
        out.push(Replica::start(&dir, i).await);
    }
    (dir, out)
}

/// An `[[agents]]` entry `p` over `backends` (url, weight), with `pool`
/// lines for `[agents.pool]`.
fn pool_agent(backends: &[(String, u32)], pool: &str) -> String {
    let list: Vec<String> = backends
        .iter()
        .map(|(url, w)| format!("{{ url = \"{url}\", weight = {w} }}"))
        .collect();
    format!(
        "[[agents]]\nid = \"p\"\nbackends = [{}]\n[agents.pool]\n{pool}\n",
        list.join(", ")
    )
}

/// How one run ended: `Ok(())`, or the `RUN_ERROR` code.
type Outcome = Result<(), String>;

/// Runs `run` on `thread` of agent `p` over HTTP; its events and outcome.
async fn run(gw: &Gateway, thread: &str, run: &str) -> (Vec<Value>, Outcome) {
    run_as(gw, &token(json!({})), thread, run).await
}

/// [`run`] with the token `tok`.
async fn run_as(gw: &Gateway, tok: &str, thread: &str, run: &str) -> (Vec<Value>, Outcome) {
    let body = json!({"threadId": thread, "runId": run,
        "messages": [{"id": format!("u-{run}"), "role": "user", "content": "hi"}],
        "tools": [], "context": []});
    let (status, text) = post_run(&gw.run_url("p"), tok, &body).await;
    assert_eq!(status, 200, "{text}");
    let events = sse_events(&text);
    let last = events.last().cloned().unwrap_or(Value::Null);
    let outcome = match last["type"].as_str() {
        Some("RUN_FINISHED") => Ok(()),
        Some("RUN_ERROR") => Err(last["code"].as_str().unwrap_or("?").to_owned()),
        _ => panic!("no terminal event: {events:?}"),
    };
    (events, outcome)
}

/// Runs `runs` (thread, run id) with `parallel` at a time; outcome by run id.
async fn run_all(
    gw: &Gateway,
    runs: Vec<(String, String)>,
    parallel: usize,
    done: Option<&tokio::sync::watch::Sender<usize>>,
) -> HashMap<String, Outcome> {
    futures::stream::iter(runs)
        .map(|(thread, id)| async move {
            let (_, outcome) = run(gw, &thread, &id).await;
            if let Some(done) = done {
                done.send_modify(|n| *n += 1);
            }
            (id, outcome)
        })
        .buffer_unordered(parallel)
        .collect()
        .await
}

/// Fails naming every run that did not finish, with its error code.
#[track_caller]
fn assert_all_finished(outcomes: &HashMap<String, Outcome>) {
    let failed: Vec<_> = outcomes.iter().filter(|(_, o)| o.is_err()).collect();
    assert!(failed.is_empty(), "runs that did not finish: {failed:?}");
}

/// A run id on a thread of its own, per `i`.
fn fresh(prefix: &str, n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| (format!("{prefix}-t{i}"), format!("{prefix}-r{i}")))
        .collect()
}

/// How many times each run id was received, over all `replicas`.
fn receipts(replicas: &[&Replica]) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for r in replicas {
        for id in r.runs() {
            *seen.entry(id).or_default() += 1;
        }
    }
    seen
}

/// The value of the metric line starting with `series` (0 when absent).
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_hold_over_a_thousand_runs_and_each_reaches_one_backend_once() {
    let (_dir, r) = replicas(3).await;
    let weights = [1u32, 2, 3];
    let backends: Vec<_> = r
        .iter()
        .zip(weights)
        .map(|(r, w)| (r.url("ok"), w))
        .collect();
    let gw = Gateway::start(&pool_agent(&backends, "")).await;

    let runs = fresh("w", 1000);
    let outcomes = run_all(&gw, runs.clone(), 8, None).await;
    assert_all_finished(&outcomes);

    let seen = receipts(&r.iter().collect::<Vec<_>>());
    assert_eq!(seen.len(), 1000, "every run reached a backend");
    assert!(seen.values().all(|&n| n == 1), "none reached two");
    for (replica, w) in r.iter().zip(weights) {
        let share = replica.runs().len() as f64 / 1000.0;
        let want = f64::from(w) / 6.0;
        eprintln!(
            "weight {w}: {:.1} % (want {:.1} %)",
            share * 100.0,
            want * 100.0
        );
        assert!(
            (share - want).abs() < 0.03,
            "weight {w}: share {share}, want {want}"
        );
    }
}

#[tokio::test]
async fn a_500_before_the_first_event_is_retried_elsewhere_and_after_an_event_is_not() {
    let (_dir, r) = replicas(3).await;
    // Before the first event: replica 0 answers 500 (never ejected here,
    // so it keeps being tried), 1 and 2 serve.
    let backends = vec![
        (r[0].url("fail500"), 1),
        (r[1].url("ok"), 1),
        (r[2].url("ok"), 1),
    ];
    let gw = Gateway::start(&pool_agent(&backends, "eject_after = 1000")).await;
    let outcomes = run_all(&gw, fresh("b", 30), 1, None).await;
    assert_all_finished(&outcomes);
    let failed = r[0].runs();
    assert_eq!(
        failed.len(),
        10,
        "a third of the runs tried the failing replica first"
    );
    let served = receipts(&[&r[1], &r[2]]);
    assert_eq!(served.len(), 30);
    assert!(
        served.values().all(|&n| n == 1),
        "each run served once: {served:?}"
    );
    for id in &failed {
        assert!(
            served.contains_key(id),
            "{id} was retried on a healthy replica"
        );
    }
    if !single_node_only("counts this process's metrics") {
        let m = gw.metrics().await;
        assert_eq!(metric(&m, "agui_upstream_retries_total{agent=\"p\"}"), 10.0);
        let failing = format!(
            "agui_upstream_backend_failures_total{{agent=\"p\",backend=\"{}\"}}",
            r[0].url("fail500")
        );
        assert_eq!(metric(&m, &failing), 10.0, "{m}");
    }

    // After an event: replica 0 sent RUN_STARTED, then its response broke.
    // The run ends with its own error and is not sent anywhere else.
    let (_dir2, r) = replicas(2).await;
    let backends = vec![(r[0].url("fail-after"), 1), (r[1].url("ok"), 1)];
    let gw = Gateway::start(&pool_agent(&backends, "")).await;
    let outcomes = run_all(&gw, fresh("a", 10), 1, None).await;
    let broke: HashSet<String> = r[0].runs().into_iter().collect();
    let served: HashSet<String> = r[1].runs().into_iter().collect();
    assert_eq!(broke.len(), 5, "half the runs went to the breaking replica");
    assert!(broke.is_disjoint(&served), "no run was sent twice");
    for (id, outcome) in &outcomes {
        if broke.contains(id) {
            assert_eq!(outcome, &Err("upstream_incomplete".to_owned()), "{id}");
        } else {
            assert_eq!(outcome, &Ok(()), "{id}");
            assert!(served.contains(id));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_backend_mid_traffic_loses_no_unstarted_run_and_duplicates_none() {
    let (_dir, mut r) = replicas(3).await;
    let backends: Vec<_> = r.iter().map(|r| (r.url("slow"), 1)).collect();
    let gw = Arc::new(Gateway::start(&pool_agent(&backends, "")).await);
    let (done, mut progress) = tokio::sync::watch::channel(0usize);
    let traffic = {
        let gw = gw.clone();
        tokio::spawn(async move { run_all(&gw, fresh("k", 150), 6, Some(&done)).await })
    };
    progress.wait_for(|&n| n >= 40).await.unwrap();
    r[2].agent.proc.child.kill().await.unwrap();
    let outcomes = traffic.await.unwrap();

    // A run the killed replica received but had not started (it died
    // between reading the request and sending its first event) is retried,
    // as the rule says; a run it had started is never sent again.
    let started_there: HashSet<String> = r[2].started().into_iter().map(|(id, _)| id).collect();
    let killed: HashSet<String> = r[2].runs().into_iter().collect();
    let survivors = receipts(&[&r[0], &r[1]]);
    assert!(
        survivors.values().all(|&n| n == 1),
        "no run reached a survivor twice: {survivors:?}"
    );
    let retried: Vec<&String> = killed
        .iter()
        .filter(|id| survivors.contains_key(*id))
        .collect();
    for id in &retried {
        assert!(
            !started_there.contains(*id),
            "{id} started on the killed replica and was sent again"
        );
    }
    eprintln!(
        "{} runs received by the killed replica before their first event, then retried",
        retried.len()
    );
    let mut lost = 0;
    for (id, outcome) in &outcomes {
        match outcome {
            Ok(()) => assert!(
                survivors.contains_key(id) || started_there.contains(id),
                "{id} finished, so one replica served it"
            ),
            Err(code) => {
                // Only a run the killed replica had begun may fail, and it
                // was not sent anywhere else.
                assert!(
                    killed.contains(id) && !survivors.contains_key(id),
                    "{id} failed ({code})"
                );
                assert_eq!(code, "upstream_incomplete", "{id}");
                lost += 1;
            }
        }
    }
    eprintln!("{lost} runs cut by the kill (at most the 6 in flight)");
    assert!(lost <= 6);
    assert_eq!(outcomes.len(), 150);
    // Every run that did not fail reached one replica that served it.
    assert_eq!(outcomes.values().filter(|o| o.is_ok()).count() + lost, 150);
}

/// The pool of agent `p` as an admin sees it in `GET /v1/agents`.
async fn pool_listing(gw: &Gateway) -> Value {
    let agents: Value = json_of(
        http()
            .get(gw.url("/v1/agents"))
            .bearer_auth(token(json!({"roles": ["admin"]}))),
    )
    .await;
    agents["agents"][0]["pool"].clone()
}

#[tokio::test]
async fn an_ejected_backend_comes_back_through_the_half_open_run() {
    if single_node_only("ejections are per node") {
        return;
    }
    let (_dir, r) = replicas(2).await;
    let backends = vec![(r[0].url("flaky"), 1), (r[1].url("ok"), 1)];
    let gw = Gateway::start(&pool_agent(
        &backends,
        "eject_after = 2\neject_base = \"3s\"",
    ))
    .await;
    // Users see no backends; admins do.
    let plain: Value = json_of(
        http()
            .get(gw.url("/v1/agents"))
            .bearer_auth(token(json!({}))),
    )
    .await;
    assert!(plain["agents"][0].get("pool").is_none(), "{plain}");

    // Two failures in a row eject the flaky replica: runs still succeed
    // (retried), and then stop reaching it.
    let outcomes = run_all(&gw, fresh("e", 4), 1, None).await;
    assert_all_finished(&outcomes);
    assert_eq!(r[0].runs().len(), 2, "tried twice, then ejected");
    let listing = pool_listing(&gw).await;
    assert_eq!(listing["backends"][0]["health"], "ejected", "{listing}");
    assert_eq!(listing["backends"][0]["ejections"], 1);
    assert_eq!(listing["backends"][0]["failures"], 2);
    assert_eq!(listing["backends"][1]["health"], "healthy");

    // Healed, and past its ejection: one run probes it and closes the circuit.
    http().post(r[0].url("heal")).send().await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while pool_listing(&gw).await["backends"][0]["health"] != "half-open" {
        assert!(tokio::time::Instant::now() < deadline, "never half-open");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let before = r[0].runs().len();
    let outcomes = run_all(&gw, fresh("h", 4), 1, None).await;
    assert_all_finished(&outcomes);
    assert!(r[0].runs().len() > before, "the probe reached it");
    let listing = pool_listing(&gw).await;
    assert_eq!(listing["backends"][0]["health"], "healthy", "{listing}");
    assert_eq!(listing["backends"][0]["inFlight"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_in_flight_sends_fewer_runs_to_a_slower_backend() {
    let (_dir, r) = replicas(2).await;
    let backends = vec![(r[0].url("slow"), 1), (r[1].url("ok"), 1)];
    let gw = Gateway::start(&pool_agent(&backends, "balance = \"least-in-flight\"")).await;
    let outcomes = run_all(&gw, fresh("l", 60), 4, None).await;
    assert_all_finished(&outcomes);
    let (slow, fast) = (r[0].runs().len(), r[1].runs().len());
    eprintln!("slow replica {slow} runs, fast replica {fast}");
    assert_eq!(slow + fast, 60);
    // Weighted, both would get exactly 30 (an even interleave); measured
    // about 20/40 on an idle machine, 26/34 on a loaded one.
    assert!(fast >= slow + 6, "slow {slow}, fast {fast}");
}

#[tokio::test]
async fn a_capped_backend_makes_runs_wait_then_unavailable() {
    if single_node_only("a cap holds per node") {
        return;
    }
    let (_dir, r) = replicas(1).await;
    let gw = Gateway::start(&format!(
        "[[agents]]\nid = \"p\"\nbackends = [{{ url = \"{}\", max_in_flight = 1 }}]\n[agents.pool]\nqueue_timeout = \"50ms\"\n",
        r[0].url("slow")
    ))
    .await;
    // Two at once: one waits and is served after the other (100 ms > 50 ms:
    // it gives up), so exactly one run is refused and never reaches the agent.
    let outcomes = run_all(&gw, fresh("c", 2), 2, None).await;
    let refused: Vec<_> = outcomes
        .iter()
        .filter(|(_, o)| o.is_err())
        .map(|(id, o)| (id.clone(), o.clone()))
        .collect();
    assert_eq!(refused.len(), 1, "{outcomes:?}");
    assert_eq!(refused[0].1, Err("upstream_unavailable".to_owned()));
    assert!(!r[0].runs().contains(&refused[0].0));
    // With room to wait, both are served in turn.
    let gw2 = Gateway::start(&format!(
        "[[agents]]\nid = \"p\"\nbackends = [{{ url = \"{}\", max_in_flight = 1 }}]\n",
        r[0].url("slow")
    ))
    .await;
    let outcomes = run_all(&gw2, fresh("d", 4), 4, None).await;
    assert_all_finished(&outcomes);
}

/// Rewrites the gateway's config with `edit` and waits for its reload.
async fn reload(gw: &Gateway, edit: impl FnOnce(String) -> String) {
    const RELOADED: &str = "configuration reloaded";
    let before = gw.proc.stderr().matches(RELOADED).count();
    let cfg = std::fs::read_to_string(&gw.config_path).unwrap();
    std::fs::write(&gw.config_path, edit(cfg)).unwrap();
    gw.signal("HUP");
    gw.proc.expect_stderr_times(RELOADED, before + 1).await;
}

/// The replica (index) each thread's runs among `runs` went to.
fn homes(r: &[Replica], runs: &HashSet<String>) -> HashMap<String, HashSet<usize>> {
    let mut homes: HashMap<String, HashSet<usize>> = HashMap::new();
    for (i, replica) in r.iter().enumerate() {
        for (run, thread) in replica.received() {
            if runs.contains(&run) {
                homes.entry(thread).or_default().insert(i);
            }
        }
    }
    homes
}

/// The `agui-gateway/upstream` notes among a run's events.
fn moved_notes(events: &[Value]) -> usize {
    events
        .iter()
        .filter(|e| e["type"] == "CUSTOM" && e["name"] == "agui-gateway/upstream")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn affinity_holds_over_100_runs_and_a_removal_moves_only_that_backends_threads() {
    if single_node_only("reloads and kills one node's view") {
        return;
    }
    let (_dir, mut r) = replicas(3).await;
    let backends: Vec<_> = r.iter().map(|r| (r.url("ok"), 1)).collect();
    let gw = Gateway::start(&pool_agent(&backends, "affinity = true")).await;
    let round = |tag: &str, threads: std::ops::Range<usize>| -> Vec<(String, String)> {
        threads
            .map(|t| (format!("at{t}"), format!("at{t}-{tag}")))
            .collect()
    };
    // 20 threads × 5 runs: the threads in parallel, each thread's in turn.
    let mut runs = HashSet::new();
    for n in 0..5 {
        let batch = round(&format!("r{n}"), 0..20);
        runs.extend(batch.iter().map(|(_, id)| id.clone()));
        let outcomes = run_all(&gw, batch, 5, None).await;
        assert_all_finished(&outcomes);
    }
    let before = homes(&r, &runs);
    assert_eq!(before.len(), 20);
    assert!(
        before.values().all(|h| h.len() == 1),
        "each thread on one replica: {before:?}"
    );
    let home = |t: &str| *before[t].iter().next().unwrap();
    let used: HashSet<usize> = before.values().flatten().copied().collect();
    assert!(used.len() >= 2, "threads spread over replicas: {before:?}");

    // Admins see it on.
    assert_eq!(pool_listing(&gw).await["affinity"], true);

    // Replica 2 removed by a reload: only its threads move.
    let gone = format!(", {{ url = \"{}\", weight = 1 }}", r[2].url("ok"));
    reload(&gw, |cfg| cfg.replace(&gone, "")).await;
    let batch = round("after-removal", 0..20);
    let after_ids: HashSet<String> = batch.iter().map(|(_, id)| id.clone()).collect();
    let outcomes = run_all(&gw, batch, 5, None).await;
    assert_all_finished(&outcomes);
    let after = homes(&r, &after_ids);
    let mut moved = 0;
    for (thread, now) in &after {
        let now = *now.iter().next().unwrap();
        assert_ne!(now, 2, "nothing reaches the removed replica");
        if home(thread) == 2 {
            moved += 1;
        } else {
            assert_eq!(
                now,
                home(thread),
                "{thread} moved though its replica stayed"
            );
        }
    }
    assert_eq!(moved, before.values().filter(|h| h.contains(&2)).count());

    // The affine replica down: its threads' runs go elsewhere, and the
    // journal says so; the others' runs carry no note.
    let down = if used.contains(&0) { 0 } else { 1 };
    r[down].agent.proc.child.kill().await.unwrap();
    for t in 0..20 {
        let thread = format!("at{t}");
        let (events, outcome) = run(&gw, &thread, &format!("{thread}-after-kill")).await;
        assert_eq!(outcome, Ok(()), "{events:?}");
        let was = after[&thread].iter().next().copied().unwrap();
        assert_eq!(
            moved_notes(&events),
            usize::from(was == down),
            "{thread}: {events:?}"
        );
    }
    // What the requester got is what the journal holds: the note is there.
    let journal = String::from_utf8_lossy(&gw.journal_bytes()).into_owned();
    assert!(
        journal.contains("agui-gateway/upstream"),
        "the note is journaled"
    );
}

#[tokio::test]
async fn a_reload_that_adds_a_backend_leaves_a_running_run_alone() {
    if single_node_only("reloads one node") {
        return;
    }
    let (_dir, r) = replicas(2).await;
    // Replica 0 holds every run it gets until released, and takes one at a time.
    let gw = Gateway::start(&format!(
        "[[agents]]\nid = \"p\"\nbackends = [{{ url = \"{}\", max_in_flight = 1 }}]\n",
        r[0].url("hold")
    ))
    .await;
    let held = {
        let url = gw.run_url("p");
        let body = json!({"threadId": "held", "runId": "held-r", "tools": [], "context": [],
            "messages": [{"id": "u", "role": "user", "content": "hi"}]});
        tokio::spawn(async move { post_run(&url, &token(json!({})), &body).await })
    };
    gw.proc.expect_stderr("run requested over HTTP").await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while pool_listing(&gw).await["backends"][0]["inFlight"] != 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the held run never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    let added = format!("max_in_flight = 1 }}, {{ url = \"{}\" }}]", r[1].url("ok"));
    reload(&gw, |cfg| cfg.replacen("max_in_flight = 1 }]", &added, 1)).await;
    let listing = pool_listing(&gw).await;
    assert_eq!(
        listing["backends"].as_array().unwrap().len(),
        2,
        "{listing}"
    );
    assert_eq!(
        listing["backends"][0]["inFlight"], 1,
        "the running run is still counted"
    );
    // New runs reach the new backend: replica 0 is still at its cap, since
    // the reload carried its count over.
    let outcomes = run_all(&gw, fresh("n", 3), 1, None).await;
    assert_all_finished(&outcomes);
    assert_eq!(r[1].runs(), ["n-r0", "n-r1", "n-r2"]);

    http().post(r[0].url("release")).send().await.unwrap();
    let (status, body) = held.await.unwrap();
    assert_eq!(status, 200);
    let events = sse_events(&body);
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED", "{events:?}");
    assert_eq!(r[0].runs(), ["held-r"]);
}

#[tokio::test]
async fn a_cancel_during_the_retry_backoff_stops_the_run() {
    if single_node_only("reads one node's log") {
        return;
    }
    let (_dir, r) = replicas(2).await;
    let backends = vec![(r[0].url("fail500"), 1), (r[1].url("ok"), 1)];
    let gw = Gateway::start(&pool_agent(&backends, "retry_backoff = \"1500ms\"")).await;
    // The first run goes to the first backend (weighted, equal weights,
    // config order breaks the tie): it answers 500 and the run backs off.
    let url = gw.run_url("p");
    let requester =
        tokio::spawn(
            async move { post_run(&url, &token(json!({})), &input("c-t", "c-r", "hi")).await },
        );
    gw.proc.expect_stderr("trying another").await;
    requester.abort(); // the requester leaves; nobody watches: the run is cancelled
    gw.proc.expect_stderr("run cancelled").await;
    // Past the backoff the retry would have reached replica 1: it did not.
    tokio::time::sleep(std::time::Duration::from_millis(2000)).await;
    assert_eq!(r[0].runs(), ["c-r"]);
    assert!(r[1].runs().is_empty(), "{:?}", r[1].runs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_rule_and_a_sticky_canary_choose_the_backend_group() {
    let (_dir, r) = replicas(3).await;
    let pool = format!(
        "[[agents]]\nid = \"p\"\nbackends = [{{ url = \"{}\" }}, \
         {{ url = \"{}\", group = \"acme\" }}, {{ url = \"{}\", group = \"next\" }}]\n\
         [agents.pool]\ncanary = {{ group = \"next\", percent = 25 }}\n\
         [[agents.pool.routes]]\ntenants = [\"acme\"]\ngroup = \"acme\"\n",
        r[0].url("ok"),
        r[1].url("ok"),
        r[2].url("ok")
    );
    let gw = Gateway::start(&pool).await;
    // The tenant with its own deployment: every run there, none elsewhere.
    let acme = token(json!({"tenant": "acme"}));
    for i in 0..20 {
        let (_, outcome) = run_as(&gw, &acme, &format!("acme-t{i}"), &format!("acme-r{i}")).await;
        assert_eq!(outcome, Ok(()));
    }
    assert_eq!(r[1].runs().len(), 20);
    let others = receipts(&[&r[0], &r[2]]);
    assert!(
        others.keys().all(|id| !id.starts_with("acme")),
        "{others:?}"
    );

    // Everyone else: a quarter of the threads on the canary, the same
    // threads run after run, and none on the tenant's deployment.
    let outcomes = run_all(&gw, fresh("c1", 200), 8, None).await;
    assert_all_finished(&outcomes);
    let canary_threads: HashSet<String> = r[2].received().into_iter().map(|(_, t)| t).collect();
    let share = canary_threads.len() as f64 / 200.0;
    eprintln!("canary share {:.1} % (want 25 %)", share * 100.0);
    assert!((0.15..0.35).contains(&share), "canary share {share}");
    assert_eq!(
        r[1].runs().len(),
        20,
        "no other tenant's run on acme's deployment"
    );
    let again: Vec<_> = (0..200)
        .map(|i| (format!("c1-t{i}"), format!("c1-again-{i}")))
        .collect();
    let outcomes = run_all(&gw, again, 8, None).await;
    assert_all_finished(&outcomes);
    let second: HashSet<String> = r[2]
        .received()
        .into_iter()
        .filter(|(run, _)| run.starts_with("c1-again"))
        .map(|(_, t)| t)
        .collect();
    assert_eq!(second, canary_threads, "the canary is sticky per thread");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_and_cel_rules_choose_the_backend_group_by_who_asks_and_what_they_send() {
    let (_dir, r) = replicas(3).await;
    let pool = format!(
        "[[agents]]\nid = \"p\"\nbackends = [{{ url = \"{}\" }}, \
         {{ url = \"{}\", group = \"staff\" }}, {{ url = \"{}\", group = \"gold\" }}]\n\
         [[agents.pool.routes]]\nroles = [\"staff-*\"]\ngroup = \"staff\"\n\
         [[agents.pool.routes]]\nwhen = 'input.forwardedProps.plan == \"gold\" && principal.tenant != \"trial\"'\ngroup = \"gold\"\n",
        r[0].url("ok"),
        r[1].url("ok"),
        r[2].url("ok")
    );
    let gw = Gateway::start(&pool).await;
    let send = |tok: String, run: &'static str, plan: &'static str| {
        let gw = &gw;
        async move {
            let body = json!({"threadId": format!("t-{run}"), "runId": run,
                "messages": [{"id": format!("u-{run}"), "role": "user", "content": "hi"}],
                "tools": [], "context": [], "forwardedProps": {"plan": plan}});
            let (status, text) = post_run(&gw.run_url("p"), &tok, &body).await;
            assert_eq!(status, 200, "{text}");
            assert!(text.contains("RUN_FINISHED"), "{text}");
        }
    };
    send(token(json!({"roles": ["staff-eu"]})), "by-role", "free").await;
    send(token(json!({})), "gold", "gold").await;
    send(token(json!({"tenant": "trial"})), "trial-gold", "gold").await;
    send(token(json!({})), "plain", "free").await;
    assert_eq!(r[1].runs(), ["by-role"], "a role rule");
    assert_eq!(
        r[2].runs(),
        ["gold"],
        "a CEL rule over the input and principal"
    );
    let mut rest = r[0].runs();
    rest.sort();
    assert_eq!(rest, ["plain", "trial-gold"], "no rule: the default group");
}

#[tokio::test]
async fn check_config_names_bad_pool_keys() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("g.toml");
    std::fs::write(
        &cfg,
        format!(
            "[auth]\nhs_secret = \"{SECRET}\"\n[[agents]]\nid = \"p\"\n\
             backends = [{{ url = \"http://127.0.0.1:1/a\", weight = 0 }}]\n\
             [agents.pool]\ncanary = {{ group = \"nope\", percent = 150 }}\n\
             [[agents.pool.routes]]\ntenants = [\"acme\"]\ngroup = \"acme\"\n"
        ),
    )
    .unwrap();
    let out = std::process::Command::new(gateway_bin())
        .args(["--config", cfg.to_str().unwrap(), "check-config"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for key in [
        "agents[0].backends[0].weight: must be at least 1",
        "agents[0].pool.routes[0].group: no backend is in group 'acme'",
        "agents[0].pool.canary.group: no backend is in group 'nope'",
        "agents[0].pool.canary.percent: must be 0 to 100",
    ] {
        assert!(err.contains(key), "{key}: {err}");
    }
}

#[tokio::test]
async fn check_config_compiles_routing_conditions() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("g.toml");
    std::fs::write(
        &cfg,
        format!(
            "[auth]\nhs_secret = \"{SECRET}\"\n[[agents]]\nid = \"p\"\n\
             backends = [{{ url = \"http://127.0.0.1:1/a\" }}]\n\
             [[agents.pool.routes]]\nwhen = \"&& nope\"\ngroup = \"default\"\n"
        ),
    )
    .unwrap();
    let out = std::process::Command::new(gateway_bin())
        .args(["--config", cfg.to_str().unwrap(), "check-config"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("agents[0].pool.routes[0].when: does not compile"),
        "{err}"
    );
}

/// Waits until the admin listing shows backend `i` of `p` as `health`.
async fn await_health(gw: &Gateway, i: usize, health: &str) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let listing = pool_listing(gw).await;
        if listing["backends"][i]["health"] == health {
            return listing;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never {health}: {listing}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await; // polling the listing
    }
}

#[tokio::test]
async fn an_active_probe_ejects_and_readmits_a_backend_no_run_was_sent_to() {
    if single_node_only("ejections are per node") {
        return;
    }
    let (_dir, r) = replicas(2).await;
    // Replicas start failing their probe: replica 1 is healed from the start.
    http().post(r[1].url("heal")).send().await.unwrap();
    let backends = vec![(r[0].url("flaky"), 1), (r[1].url("ok"), 1)];
    let gw = Gateway::start(&pool_agent(
        &backends,
        "eject_after = 2\neject_base = \"1h\"\neject_max = \"1h\"\n\
         probe = { path = \"/probe\", interval = \"100ms\" }",
    ))
    .await;
    let listing = await_health(&gw, 0, "ejected").await;
    assert!(
        listing["backends"][0]["failures"].as_u64().unwrap() >= 2,
        "{listing}"
    );
    assert_eq!(listing["backends"][0]["runs"], 0, "no run was its test");
    // Ejected: runs go to the other replica.
    let outcomes = run_all(&gw, fresh("p", 4), 1, None).await;
    assert_all_finished(&outcomes);
    assert!(r[0].runs().is_empty());
    // Healed: a passing probe readmits it long before its hour is up.
    http().post(r[0].url("heal")).send().await.unwrap();
    await_health(&gw, 0, "healthy").await;
    let outcomes = run_all(&gw, fresh("q", 4), 1, None).await;
    assert_all_finished(&outcomes);
    assert_eq!(r[0].runs().len(), 2, "weighted: back to half the runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_on_redis_agree_on_affinity_and_eject_on_their_own() {
    let redis = RedisServer::start().await;
    two_nodes_agree_on_affinity_and_eject_on_their_own(|node| redis.store_config(node)).await;
}

/// The same on a Redis Cluster (issue 34: pools hold on the cluster as on
/// one Redis). Nothing of a pool lives in the store — affinity is a hash
/// of the thread, ejection each node's own — so what this proves is that
/// nothing on the cluster's path (hash-tagged keys, shard channels, slot
/// groups of leases) changes where a thread's runs go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_on_a_redis_cluster_agree_on_affinity_and_eject_on_their_own() {
    let cluster = RedisCluster::start().await;
    two_nodes_agree_on_affinity_and_eject_on_their_own(|node| cluster.store_config(node)).await;
}

/// Two nodes on one store (`store_config` gives a node's `[store]`), one
/// pool of three replicas, the first of which fails every run.
async fn two_nodes_agree_on_affinity_and_eject_on_their_own(store_config: impl Fn(&str) -> String) {
    let (_dir, r) = replicas(3).await;
    let backends = vec![
        (r[0].url("flaky"), 1),
        (r[1].url("ok"), 1),
        (r[2].url("ok"), 1),
    ];
    let agent = pool_agent(
        &backends,
        "affinity = true\neject_after = 1\neject_base = \"1h\"\neject_max = \"1h\"",
    );
    let a = Gateway::start(&format!("{}{agent}", store_config("a"))).await;
    let b = Gateway::start(&format!("{}{agent}", store_config("b"))).await;
    // Each thread's runs alternate between the nodes, and stay on one replica.
    let mut runs = HashSet::new();
    for n in 0..4 {
        let node = if n % 2 == 0 { &a } else { &b };
        for t in 0..20 {
            let (thread, id) = (format!("n-t{t}"), format!("n-t{t}-r{n}"));
            let (events, outcome) = run(node, &thread, &id).await;
            assert_eq!(outcome, Ok(()), "{events:?}");
            runs.insert(id);
        }
    }
    let served = homes(&r[1..], &runs);
    assert_eq!(served.len(), 20);
    assert!(served.values().all(|h| h.len() == 1), "{served:?}");
    // Replica 0 fails (ejected after one failure): each node ejected it on
    // its own, on the first run it sent there.
    let tried: HashSet<String> = r[0].runs().into_iter().collect();
    assert_eq!(
        tried.len(),
        2,
        "one failed run per node, then ejected there: {tried:?}"
    );
    for node in [&a, &b] {
        assert_eq!(pool_listing(node).await["backends"][0]["health"], "ejected");
    }
}

/// The last assistant message of a run's last `MESSAGES_SNAPSHOT` (the
/// graph answers without a model, so in snapshots only).
fn answer(events: &[Value]) -> String {
    let snapshot = events
        .iter()
        .rfind(|e| e["type"] == "MESSAGES_SNAPSHOT")
        .expect("a MESSAGES_SNAPSHOT");
    snapshot["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|m| m["role"] == "assistant")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_langgraph_checkpointer_on_two_replicas_keeps_its_threads_by_affinity() {
    // Two processes, each with its own MemorySaver: a thread's run count
    // lives only in the checkpoint of the replica that ran it.
    let a = PyAgent::start("langgraph_agent.py").await;
    let b = PyAgent::start("langgraph_agent.py").await;
    let backends = vec![(a.url("turns"), 1), (b.url("turns"), 1)];
    // `same-thread` marks the agent stateful: affinity is on by default.
    let gw = Gateway::start(&format!(
        "{}[agents.branching]\nmode = \"same-thread\"\n",
        pool_agent(&backends, "")
    ))
    .await;
    assert_eq!(pool_listing(&gw).await["affinity"], true);
    for t in 0..6 {
        for n in 1..=3 {
            let (events, outcome) = run(&gw, &format!("lg-t{t}"), &format!("lg-t{t}-r{n}")).await;
            assert_eq!(outcome, Ok(()), "{events:?}");
            assert_eq!(answer(&events), format!("turn {n}"), "lg-t{t}: {events:?}");
        }
    }
    // Without affinity the same runs alternate between the replicas and
    // each one counts only the runs it saw: the state is lost.
    let gw = Gateway::start(&format!(
        "{}[agents.branching]\nmode = \"same-thread\"\n",
        pool_agent(&backends, "affinity = false")
    ))
    .await;
    let mut lost = 0;
    for n in 1..=3 {
        let (events, outcome) = run(&gw, "lg-free", &format!("lg-free-r{n}")).await;
        assert_eq!(outcome, Ok(()), "{events:?}");
        lost += usize::from(answer(&events) != format!("turn {n}"));
    }
    assert!(lost > 0, "alternating replicas lose the thread's state");
}

/// The thread's journal from the start, as a join stream gives it (read up
/// to the last seq its snapshot names; the stream itself follows on).
async fn journal(gw: &Gateway, thread: &str) -> Vec<Value> {
    let t = token(json!({}));
    let snap = json_of(
        http()
            .get(gw.url(&format!("/v1/threads/{thread}")))
            .bearer_auth(&t),
    )
    .await;
    let last = format!("id: {}\n", snap["seq"].as_u64().unwrap());
    let mut resp = http()
        .get(gw.url(&format!("/v1/threads/{thread}/events?after=0")))
        .bearer_auth(&t)
        .send()
        .await
        .unwrap();
    let mut body = String::new();
    while !body.contains(&last) {
        let chunk = resp.chunk().await.unwrap().expect("the stream goes on");
        body.push_str(&String::from_utf8_lossy(&chunk));
    }
    let end = body.find(&last).unwrap();
    let end = end + body[end..].find("\n\n").map_or(body.len() - end, |i| i + 2);
    sse_events(&body[..end])
}

/// The pool settings of the failover tests: one failure ejects a backend
/// (for an hour), so its counting shows in the listing and in where the
/// next run goes.
const EJECT_AT_ONCE: &str = "eject_after = 1\neject_base = \"1h\"\neject_max = \"1h\"";

/// Checks that run `id` on `thread`, first sent to `r[0]` (which failed
/// before its first event), was served by `r[1]` alone; that the requester
/// and the journal each hold exactly one `RUN_STARTED` … `RUN_FINISHED`;
/// and that `r[0]`'s failure was counted (and, at `EJECT_AT_ONCE`, ejected
/// it: the next run goes to `r[1]` directly).
async fn assert_failed_over(gw: &Gateway, r: &[Replica], thread: &str, id: &str, seen: &[Value]) {
    let lifecycle = |events: &[Value]| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["type"].as_str().is_some_and(|t| t.starts_with("RUN_")))
            .map(|e| {
                format!(
                    "{} {}",
                    e["type"].as_str().unwrap(),
                    e["runId"].as_str().unwrap_or("-")
                )
            })
            .collect()
    };
    let once = [format!("RUN_STARTED {id}"), format!("RUN_FINISHED {id}")];
    assert_eq!(lifecycle(seen), once, "the requester: {seen:#?}");
    let journaled = journal(gw, thread).await;
    assert_eq!(lifecycle(&journaled), once, "the journal: {journaled:#?}");
    assert_eq!(r[0].runs(), [id], "the first backend was tried first");
    assert_eq!(r[1].runs(), [id], "the other one served the run, once");
    if single_node_only("counts and ejects on one node") {
        return;
    }
    let listing = pool_listing(gw).await;
    let failed = &listing["backends"][0];
    assert_eq!(
        (&failed["failures"], &failed["ejections"], &failed["health"]),
        (&json!(1), &json!(1), &json!("ejected")),
        "{listing}"
    );
    assert_eq!(listing["backends"][1]["failures"], 0, "{listing}");
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, "agui_upstream_retries_total{agent=\"p\"}"),
        1.0,
        "{m}"
    );
    let next = format!("{id}-next");
    let (_, outcome) = run(gw, &format!("{thread}-next"), &next).await;
    assert_eq!(outcome, Ok(()));
    assert_eq!(r[0].runs(), [id], "ejected: the next run skipped it");
    assert_eq!(r[1].runs(), [id.to_owned(), next]);
}

#[tokio::test]
async fn every_failure_before_the_first_event_is_failed_over_and_counted() {
    // Headers then nothing (a clean empty body, or the connection dropped
    // mid-body) used to end the run `upstream_incomplete` while a stall was
    // failed over; a 404 and a response that is not an event stream did
    // too. All of them say this backend did not serve the run.
    let mut tried = Vec::new();
    for scenario in ["empty", "drop", "fail404", "not-sse"] {
        let (dir, r) = replicas(2).await;
        let backends = vec![(r[0].url(scenario), 1), (r[1].url("ok"), 1)];
        let gw = Gateway::start(&pool_agent(&backends, EJECT_AT_ONCE)).await;
        // Equal weights: the first run goes to the first backend.
        let (thread, id) = (format!("{scenario}-t"), format!("{scenario}-r"));
        let (events, outcome) = run(&gw, &thread, &id).await;
        tried.push((scenario, outcome, (dir, r, gw, thread, id, events)));
    }
    let outcomes: Vec<_> = tried.iter().map(|(s, o, _)| (*s, o.clone())).collect();
    assert!(outcomes.iter().all(|(_, o)| o.is_ok()), "{outcomes:?}");
    for (_, _, (_dir, r, gw, thread, id, events)) in &tried {
        assert_failed_over(gw, r, thread, id, events).await;
    }
}

#[tokio::test]
async fn a_request_refused_as_it_is_is_neither_failed_over_nor_counted() {
    // A 422 says the input is wrong, not the backend: every replica would
    // answer the same, and counting it would let bad input eject healthy
    // backends.
    let (_dir, r) = replicas(2).await;
    let backends = vec![(r[0].url("fail422"), 1), (r[1].url("ok"), 1)];
    let gw = Gateway::start(&pool_agent(&backends, EJECT_AT_ONCE)).await;
    let (events, outcome) = run(&gw, "bad-t", "bad-r").await;
    assert_eq!(outcome, Err("upstream_http_422".into()), "{events:#?}");
    assert_eq!(r[0].runs(), ["bad-r"]);
    assert!(r[1].runs().is_empty(), "not sent to the other backend");
    if single_node_only("counts on one node") {
        return;
    }
    let listing = pool_listing(&gw).await;
    assert_eq!(listing["backends"][0]["health"], "healthy", "{listing}");
}

#[tokio::test]
async fn a_replica_killed_between_its_headers_and_its_first_event_is_failed_over() {
    let (_dir, mut r) = replicas(2).await;
    let backends = vec![(r[0].url("headers-then-wait"), 1), (r[1].url("ok"), 1)];
    let gw = Gateway::start(&pool_agent(&backends, EJECT_AT_ONCE)).await;
    // Replica 0 has sent its 200 and event-stream headers and nothing more
    // when it says HEADERS: it is killed right then.
    let ((events, outcome), ()) = tokio::join!(run(&gw, "kh-t", "kh-r"), async {
        r[0].agent.proc.expect_line("HEADERS kh-r").await;
        r[0].agent.proc.child.kill().await.unwrap();
    });
    assert_eq!(outcome, Ok(()), "{events:#?}");
    assert_failed_over(&gw, &r, "kh-t", "kh-r", &events).await;
}

#[tokio::test]
async fn a_stream_that_breaks_after_its_first_event_is_not_failed_over() {
    // The other side of the rule: once RUN_STARTED came the agent may have
    // acted, so the run ends with its own error and goes nowhere else, and
    // it is not counted against the backend (it served the run).
    let (_dir, r) = replicas(2).await;
    let backends = vec![(r[0].url("fail-after"), 1), (r[1].url("ok"), 1)];
    let gw = Gateway::start(&pool_agent(&backends, EJECT_AT_ONCE)).await;
    let (events, outcome) = run(&gw, "fa-t", "fa-r").await;
    assert_eq!(
        outcome,
        Err("upstream_incomplete".to_owned()),
        "{events:#?}"
    );
    assert_eq!(r[0].runs(), ["fa-r"]);
    assert!(r[1].runs().is_empty(), "{:?}", r[1].runs());
    let started = events.iter().filter(|e| e["type"] == "RUN_STARTED").count();
    assert_eq!(started, 1, "{events:#?}");
    if !single_node_only("counts on one node") {
        let listing = pool_listing(&gw).await;
        assert_eq!(listing["backends"][0]["failures"], 0, "{listing}");
        assert_eq!(listing["backends"][0]["health"], "healthy", "{listing}");
    }
}

/// The fault point `upstream.failover` (src/fault.rs) is on the failover
/// path: armed, it fires once the first backend failed and before the run
/// is sent to the next, and the run then goes on.
#[cfg(feature = "failpoints")]
#[tokio::test]
async fn the_failover_path_passes_its_fault_point() {
    if single_node_only("reads one node's log") {
        return;
    }
    let (_dir, r) = replicas(2).await;
    let backends = vec![(r[0].url("fail500"), 1), (r[1].url("ok"), 1)];
    let gw = Gateway::start_with_env(
        &pool_agent(&backends, ""),
        &[("FAILPOINTS", "upstream.failover=1*return(stall:100)")],
    )
    .await;
    let (events, outcome) = run(&gw, "fp-t", "fp-r").await;
    assert_eq!(outcome, Ok(()), "{events:#?}");
    assert_eq!(r[1].runs(), ["fp-r"]);
    gw.proc
        .expect_stderr("fault point upstream.failover: stall:100")
        .await;
}
