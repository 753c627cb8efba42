//! A thread's viewers: who watches it, what each may see, and how each
//! starts — a snapshot or a replay queued in the same critical section as
//! publishing, so nothing published falls between "read the journal" and
//! "go live" — and catches up from the journal when it falls behind.

use super::judged::judged;
use super::*;

/// A viewer registered on a thread.
pub(super) struct Viewer {
    pub(super) id: u64,
    pub(super) outbox: Arc<Outbox>,
    /// What it may see, by the run each event belongs to.
    pub(super) seen: SeenBy,
    /// An HTTP requester reading its run from the journal: it gets that
    /// run's events only (no meta) and leaves after its terminal event.
    pub(super) run_scope: Option<String>,
    /// What the batch being published gives it, queued as one item when
    /// the batch is done ([`Thread::fan_out`]); empty in between.
    pub(super) staged: Vec<Arc<Entry>>,
    /// Its last wanted event is staged: it gets nothing after it.
    pub(super) ended: bool,
}

impl Viewer {
    /// What this viewer gets of `entry`, judged with the thread's `fold`
    /// as of that entry or later: nothing, the entry, or its own copy
    /// without what it may not see ([`SeenBy::judge`], one rule for every
    /// face; [`judged`]).
    pub(super) fn view(&mut self, entry: &Arc<Entry>, fold: &Fold) -> Option<Arc<Entry>> {
        if self.run_scope.is_some() && *entry.event.kind() == EventType::Meta {
            return None;
        }
        judged(&mut self.seen, entry, fold)
    }

    /// True when `event` is the last one this viewer wants.
    pub(super) fn ends_with(&self, event: &Event) -> bool {
        self.run_scope.is_some() && event.kind().is_terminal()
    }
}

pub(super) fn snapshot_of(key: &ThreadKey, inner: &Inner, reset: bool) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("threadId".into(), key.thread_id.clone().into());
    for (k, v) in inner.fold.to_json() {
        m.insert(k, v);
    }
    // The run's own agent, as its journaled `RUN_STARTED` names it (the
    // metadata's may be another run's on a copy that lags); the metadata's
    // only for a run journaled before runs were stamped.
    let run = inner.fold.run().map(|r| {
        let agent = match &r.agent {
            RunAgent::Agent(a) => json!(a.as_ref()),
            _ => json!(inner.meta.agent),
        };
        let mut run = json!({"runId": r.run_id, "agent": agent, "status": r.status.as_str()});
        if let Some(head) = inner.fold.runs().head().filter(|h| h.run_id == r.run_id) {
            run["parentRunId"] = head.parent.clone().into();
            run["kind"] = head.kind.as_str().into();
            run["startedBy"] = head.started_by.clone().into();
        }
        run
    });
    m.insert("run".into(), run.unwrap_or(Value::Null));
    m.insert(
        "headRunId".into(),
        inner.fold.runs().head().map(|h| h.run_id.clone()).into(),
    );
    if reset {
        m.insert("reset".into(), true.into());
    }
    m
}

/// A viewer's `snapshot` message. Outside the byte budget, like a catch-up
/// page: it is built only when the viewer's writer is ready to send it.
/// `epoch` is the journal's (a shared store's), part of the cursor the
/// client keeps from here on: after a `reset` the old one is gone.
pub(super) fn snapshot_frame(
    key: &ThreadKey,
    inner: &Inner,
    viewer: &mut Viewer,
    (reset, epoch): (bool, Option<String>),
) -> Outgoing {
    let mut m = Map::new();
    m.insert("type".into(), "snapshot".into());
    let mut snap = snapshot_of(key, inner, reset);
    if let Some(epoch) = epoch {
        snap.insert("epoch".into(), epoch.into());
    }
    viewer.seen.redact_snapshot(&mut snap, inner.fold.authors());
    super::meta::attach(&mut snap, &inner.meta_notes);
    m.extend(snap);
    let text = serde_json::to_string(&m).expect("snapshot serializes");
    Outgoing::Message(Bytes::from(text))
}

impl Thread {
    /// The snapshot object (spec `snapshot` frame without `type`), as
    /// `visibility` allows.
    pub fn snapshot(&self, visibility: &ViewerVisibility) -> Map<String, Value> {
        let inner = self.lock();
        let mut snap = snapshot_of(&self.key, &inner, false);
        SeenBy::new(visibility.clone()).redact_snapshot(&mut snap, inner.fold.authors());
        super::meta::attach(&mut snap, &inner.meta_notes);
        snap
    }

    /// Registers viewer `id` and queues its start (snapshot or replay) ahead
    /// of any live event.
    pub fn subscribe(
        &self,
        id: u64,
        outbox: Arc<Outbox>,
        start: Start,
        visibility: ViewerVisibility,
    ) {
        let mut inner = self.lock();
        inner.viewers.retain(|v| v.id != id);
        inner.catching_up.remove(&id);
        let viewer = Viewer {
            id,
            outbox,
            seen: SeenBy::new(visibility),
            run_scope: None,
            staged: Vec::new(),
            ended: false,
        };
        // Replay is a catch-up: read from the journal a budget's worth at a
        // time, then live (memory stays within budget). A snapshot is one
        // too, built when the writer reaches it (see `fanout`).
        let me = self.me.clone();
        let outbox = viewer.outbox.clone();
        let catch_up = match start {
            Start::Live => return inner.viewers.push(viewer),
            Start::Snapshot => CatchUp::snapshot(me, viewer, false),
            Start::After(n) if n >= inner.base_seq && n < inner.fold.seq => {
                CatchUp::new(me, viewer, n)
            }
            Start::After(n) if n == inner.fold.seq => return inner.viewers.push(viewer),
            Start::After(_) => CatchUp::snapshot(me, viewer, true),
        };
        let ticket = catch_up.ticket();
        if outbox.push_catch_up(catch_up) {
            inner.catching_up.insert(id, ticket);
        }
    }

    /// Sends a live viewer a `reset` snapshot of the copy as it is now (it
    /// was reloaded from the store), then live events: queued like any
    /// snapshot, built when the viewer's writer reaches it.
    pub(super) fn reset_viewer(&self, inner: &mut Inner, viewer: Viewer) {
        let (id, outbox) = (viewer.id, viewer.outbox.clone());
        let catch_up = CatchUp::snapshot(self.me.clone(), viewer, true);
        let ticket = catch_up.ticket();
        if outbox.push_catch_up(catch_up) {
            inner.catching_up.insert(id, ticket);
        }
    }

    /// Removes viewer `id` (live or catching up); returns how many remain.
    pub fn unsubscribe(&self, id: u64) -> usize {
        let mut inner = self.lock();
        inner.viewers.retain(|v| v.id != id);
        inner.catching_up.remove(&id);
        inner.viewers.len() + inner.catching_up.len()
    }

    /// Viewers currently subscribed (those catching up included).
    pub fn viewer_count(&self) -> usize {
        let mut inner = self.lock();
        inner.viewers.retain(|v| !v.outbox.is_closed());
        inner.viewers.len() + inner.catching_up.len()
    }

    /// The next page of a lagging viewer's catch-up: published entries after
    /// `after`, up to `budget` bytes. When the page reaches the live end the
    /// viewer is registered live again in the same critical section, so
    /// nothing falls between the journal and the live stream; otherwise the
    /// viewer comes back with the position to continue from.
    pub(super) fn catch_up_page(
        &self,
        mut viewer: Viewer,
        after: u64,
        ticket: u64,
        budget: usize,
        snapshot: Option<bool>,
    ) -> (Vec<Outgoing>, Option<(Viewer, u64)>) {
        // Events that left memory come from the store, read before the
        // lock is taken (the live path never waits for this read).
        let cold = match snapshot {
            None => self.cold_page(after, budget),
            Some(_) => None,
        };
        let mut inner = self.lock();
        if inner.catching_up.get(&viewer.id) != Some(&ticket) || viewer.outbox.is_closed() {
            // Unsubscribed, subscribed anew, or gone meanwhile.
            return (Vec::new(), None);
        }
        // A snapshot asked for, a position compacted away (compaction
        // waits for catch-ups, so only after a reload), or one past the end
        // of a journal reloaded after the store lost history: the snapshot
        // as this page (a reset for the last two), then live from the fold
        // it shows.
        let lost = after < inner.base_seq
            || after > inner.fold.seq
            || matches!(cold, Some(None)) && after + 1 < inner.resident_from();
        let snapshot = snapshot.or(lost.then_some(true));
        if let Some(reset) = snapshot {
            inner.catching_up.remove(&viewer.id);
            let page = vec![snapshot_frame(
                &self.key,
                &inner,
                &mut viewer,
                (reset, self.epoch()),
            )];
            inner.viewers.push(viewer);
            return (page, None);
        }
        let (mut page, mut bytes, mut last) = (Vec::new(), 0, after);
        let read_back = cold
            .flatten()
            .filter(|c| c.first().is_some_and(|e| e.seq == after + 1));
        let entries: Box<dyn Iterator<Item = Arc<Entry>>> = match read_back {
            Some(cold) => Box::new(cold.into_iter()),
            None => Box::new(inner.journal.entries_from(after + 1, &self.id, &inner.fold)),
        };
        let mut ended = false;
        for e in entries {
            let e = &e;
            if bytes >= budget {
                break;
            }
            last = e.seq;
            if let Some(seen) = viewer.view(e, &inner.fold) {
                bytes += seen.cost();
                page.push(Outgoing::Event(seen));
                if viewer.ends_with(&e.event) {
                    ended = true;
                    break;
                }
            }
        }
        if ended {
            inner.catching_up.remove(&viewer.id);
            return (page, None);
        }
        if last >= inner.fold.seq {
            inner.catching_up.remove(&viewer.id);
            inner.viewers.push(viewer);
            (page, None)
        } else {
            (page, Some((viewer, last)))
        }
    }

    /// The next catch-up page from the store when the events after
    /// `after` left memory: `None` when they are resident (or compacted,
    /// which the page answers with a reset), `Some(None)` when the store
    /// could not give them (the page is then a reset snapshot: the reader
    /// loses nothing, it restarts from the conversation as it is).
    fn cold_page(&self, after: u64, budget: usize) -> Option<Option<Vec<Arc<Entry>>>> {
        let (resident_from, base) = {
            let inner = self.lock();
            (inner.resident_from(), inner.base_seq)
        };
        if after < base || after + 1 >= resident_from {
            return None;
        }
        let read = tail::read_past(|| self.read_cold(after, resident_from, budget.max(1)));
        Some(match read {
            Ok(page) if page.first().is_some_and(|e| e.seq == after + 1) => Some(page),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(thread = %self.key.thread_id, after, "reading a catch-up page back from the store failed: {e}");
                None
            }
        })
    }

    /// Hands a run's HTTP requester that fell behind its budget to the
    /// journal: it reads the run's events after `after` from there, then
    /// live, until the run's terminal event, like any lagging viewer.
    pub(super) fn requester_lagged(
        &self,
        outbox: Arc<Outbox>,
        visibility: ViewerVisibility,
        run_id: &str,
        after: u64,
    ) {
        static REQUESTER_IDS: std::sync::atomic::AtomicU64 =
            std::sync::atomic::AtomicU64::new(1 << 62);
        let id = REQUESTER_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let viewer = Viewer {
            id,
            outbox: outbox.clone(),
            seen: SeenBy::new(visibility),
            run_scope: Some(run_id.to_owned()),
            staged: Vec::new(),
            ended: false,
        };
        let mut inner = self.lock();
        let catch_up = CatchUp::new(self.me.clone(), viewer, after);
        let ticket = catch_up.ticket();
        if outbox.push_catch_up(catch_up) {
            inner.catching_up.insert(id, ticket);
        }
    }

    /// Forgets a catch-up whose reader went away (unless a newer one of the
    /// same viewer replaced it).
    pub(super) fn catch_up_dropped(&self, viewer: u64, ticket: u64) {
        let mut inner = self.lock();
        if inner.catching_up.get(&viewer) == Some(&ticket) {
            inner.catching_up.remove(&viewer);
        }
    }

    /// Published entries with `seq > after` still in the journal, or `None`
    /// when `after` is older than the journal holds.
    pub fn entries_after(&self, after: u64) -> Option<Vec<Arc<Entry>>> {
        let (base, last) = {
            let inner = self.lock();
            (inner.base_seq, inner.fold.seq)
        };
        if after < base {
            return None;
        }
        if after >= last {
            return Some(Vec::new());
        }
        self.entries_between(after + 1, u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    //! The visibility property: on random multi-agent threads (runs of two
    //! agents, agent switches, handoff-kind runs, branches, regenerates and
    //! edits) under random rules, no viewer receives — live, live but
    //! lagging (read from the journal), replaying from any position, from a
    //! snapshot, or as a run's HTTP requester (lagging or not) — a byte of
    //! what its rules hide. Every face's encoding (WebSocket, SSE, proto,
    //! the AI SDK translation) starts from these items, so what is checked
    //! here is what each of them can send.
    //!
    //! The demo agent names what a run introduces after the run
    //! (`<run>-reasoning`, `<run>-call`, a state whose `topic` is the run's
    //! question `q-<run>`), so each hidden thing is recognized wherever it
    //! is restated.
    use super::*;
    use crate::protocol::hooks::{ViewerScope, Visibility};
    use crate::thread::branch::BaseRequest;
    use crate::thread::fanout::{self, OutboxReceiver};
    use crate::thread::run::RunRequest;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// What a rule may hide of one agent's runs.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Part {
        Reasoning,
        ToolCalls,
        State,
    }

    /// The parts hidden, per agent ("a", "b").
    type Rules = [Vec<Part>; 2];

    /// A [`Visibility`] with the policy's semantics for these parts.
    struct Hides(Vec<Part>);

    impl Visibility for Hides {
        fn hides(&self, event: &Event) -> bool {
            let t = event.kind().as_str();
            self.0.iter().any(|p| match p {
                Part::Reasoning => t.starts_with("REASONING_"),
                Part::ToolCalls => t.starts_with("TOOL_CALL_"),
                Part::State => t.starts_with("STATE_"),
            })
        }
        fn shows_message(&self, m: &mut Value) -> bool {
            let role = m.get("role").and_then(Value::as_str).unwrap_or("");
            if (role == "reasoning" && self.0.contains(&Part::Reasoning))
                || (role == "tool" && self.0.contains(&Part::ToolCalls))
            {
                return false;
            }
            if self.0.contains(&Part::ToolCalls)
                && let Some(o) = m.as_object_mut()
            {
                o.remove("toolCalls");
            }
            true
        }
        fn hides_state(&self) -> bool {
            self.0.contains(&Part::State)
        }
    }

    struct Scope(Rules);

    impl ViewerScope for Scope {
        fn generation(&self) -> u64 {
            1
        }
        fn visibility(&self, origin: &RunAgent) -> Option<Arc<dyn Visibility>> {
            let union =
                |rules: &[Vec<Part>]| -> Vec<Part> { rules.iter().flatten().copied().collect() };
            let parts = match origin {
                RunAgent::Agent(a) if &**a == "a" => self.0[0].clone(),
                RunAgent::Agent(a) if &**a == "b" => self.0[1].clone(),
                RunAgent::Outside => Vec::new(),
                _ => union(&self.0),
            };
            (!parts.is_empty()).then(|| Arc::new(Hides(parts)) as Arc<dyn Visibility>)
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// A plain run of agent `a` (0) or `b` (1): a switch when it differs.
        Run(usize),
        /// A run of that agent taking the thread over (a handoff's kind).
        Handoff(usize),
        /// By that agent, from the n-th run so far.
        Branch(usize, usize),
        Regenerate(usize),
        /// The n-th user message of the head's conversation.
        Edit(usize, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0usize..2).prop_map(Op::Run),
            1 => (0usize..2).prop_map(Op::Handoff),
            3 => (0usize..2, 0usize..8).prop_map(|(a, n)| Op::Branch(a, n)),
            1 => (0usize..2).prop_map(Op::Regenerate),
            1 => (0usize..2, 0usize..4).prop_map(|(a, n)| Op::Edit(a, n)),
        ]
    }

    fn part() -> impl Strategy<Value = Vec<Part>> {
        proptest::sample::subsequence(vec![Part::Reasoning, Part::ToolCalls, Part::State], 0..=3)
    }

    fn rules() -> impl Strategy<Value = Rules> {
        (part(), part()).prop_map(|(a, b)| [a, b])
    }

    /// A viewer's stream as it arrives, with what it may not contain.
    struct Watcher {
        rules: Rules,
        rx: OutboxReceiver,
        face: String,
    }

    /// Everything `w` has until the event at `last` (or its run's terminal
    /// event, for a requester: `until_run`).
    async fn drain(w: &mut Watcher, last: u64, until_run: Option<&str>) -> Vec<Value> {
        let mut got = Vec::new();
        loop {
            let item = tokio::time::timeout(std::time::Duration::from_secs(10), w.rx.recv())
                .await
                .unwrap_or_else(|_| panic!("{}: nothing more after {got:?}", w.face))
                .expect("open");
            match item {
                Outgoing::Event(e) => {
                    let v: Value = serde_json::from_slice(e.event.json()).unwrap();
                    let done = match until_run {
                        Some(run) => {
                            e.event.kind().is_terminal() && e.event.str_field("runId") == Some(run)
                        }
                        None => e.seq == last,
                    };
                    got.push(v);
                    if done {
                        return got;
                    }
                }
                Outgoing::Message(m) => {
                    let v: Value = serde_json::from_slice(&m).unwrap();
                    let at = v["seq"].as_u64();
                    got.push(v);
                    if until_run.is_none() && at == Some(last) {
                        return got;
                    }
                }
                _ => {}
            }
        }
    }

    /// Asserts nothing `rules` hide is in `received`: the ids of the hidden
    /// messages of each run of `agents`, and any state only hidden writers
    /// wrote (a state's `topic` is the question its run was `asked`).
    fn assert_clean(
        face: &str,
        rules: &Rules,
        agents: &HashMap<String, usize>,
        asked: &HashMap<String, String>,
        received: &[Value],
    ) {
        let bytes = serde_json::to_string(received).unwrap();
        for (run, agent) in agents {
            let hidden = &rules[*agent];
            for (part, marker) in [
                (Part::Reasoning, format!("\"{run}-reasoning\"")),
                (Part::ToolCalls, format!("\"{run}-call\"")),
            ] {
                assert!(
                    !hidden.contains(&part) || !bytes.contains(&marker),
                    "{face}: {marker} (agent {agent}) reached a viewer hiding {part:?}: {bytes}"
                );
            }
        }
        let mut states = Vec::new();
        for v in received {
            let e = if v["type"] == "event" { &v["event"] } else { v };
            states.push(&v["state"]);
            states.push(&e["snapshot"]);
            states.push(&e["input"]["state"]);
        }
        for state in states {
            // A regenerate asks its run's question again: every run that
            // may have written this state must be a hidden writer.
            if let Some(topic) = state["topic"].as_str() {
                let writers: Vec<usize> = asked
                    .iter()
                    .filter(|(_, q)| q.as_str() == topic)
                    .filter_map(|(run, _)| agents.get(run).copied())
                    .collect();
                assert!(
                    writers.is_empty() || writers.iter().any(|a| !rules[*a].contains(&Part::State)),
                    "{face}: a state only agents {writers:?} wrote reached a viewer hiding it: {state}"
                );
            }
        }
    }

    async fn check(ops: Vec<Op>, viewers: Vec<Rules>, replay_from: u64) {
        let demo = crate::demo::start(&crate::config::DemoConfig {
            token_delay: std::time::Duration::ZERO,
            ..Default::default()
        })
        .await
        .unwrap();
        let agent = |id: &str| {
            let cfg: crate::config::AgentConfig =
                toml::from_str(&format!("id = \"{id}\"\nurl = \"demo:\"")).unwrap();
            Arc::new(crate::upstream::Agent::from_config(&cfg, Some(demo)).unwrap())
        };
        let agents = [agent("a"), agent("b")];
        let (_demo_agent, _threads, t) = crate::thread::demo_thread(100_000).await;
        let scope = |r: &Rules| -> ViewerVisibility { Some(Arc::new(Scope(r.clone()))) };
        let mut live = Vec::new();
        // Every other viewer and requester has a budget it overruns, so it
        // reads from the journal (a catch-up) what it fell behind on.
        let budget = |i: usize| if i % 2 == 1 { 4096 } else { 1 << 24 };
        for (i, r) in viewers.iter().enumerate() {
            let (ob, rx) = fanout::outbox(budget(i));
            t.subscribe(i as u64 + 1, ob, Start::Live, scope(r));
            live.push(Watcher {
                rules: r.clone(),
                rx,
                face: format!("live viewer {i}"),
            });
        }
        let mut run_agent: HashMap<String, usize> = HashMap::new();
        let mut asked: HashMap<String, String> = HashMap::new();
        let mut run_ids: Vec<String> = Vec::new();
        for (n, op) in std::iter::once(Op::Run(0)).chain(ops).enumerate() {
            let run_id = format!("r{n:02}");
            let user =
                |text: &str| json!({"id": format!("u-{run_id}"), "role": "user", "content": text});
            let question = format!("q-{run_id}");
            let (who, base, messages) = match op {
                Op::Run(a) => (a, BaseRequest::Head, vec![user(&question)]),
                Op::Handoff(a) => (a, BaseRequest::Handoff, vec![user(&question)]),
                Op::Branch(a, i) if !run_ids.is_empty() => (
                    a,
                    BaseRequest::Run(run_ids[i % run_ids.len()].clone()),
                    vec![user(&question)],
                ),
                Op::Branch(..) => continue,
                Op::Regenerate(a) => (a, BaseRequest::Regenerate(None), vec![]),
                Op::Edit(a, i) => {
                    let users: Vec<String> = t
                        .lock()
                        .fold
                        .messages()
                        .iter()
                        .filter(|m| m.role() == "user")
                        .filter_map(|m| m.id().map(|id| id.to_string()))
                        .collect();
                    let Some(id) = users.get(i % users.len().max(1)).cloned() else {
                        continue;
                    };
                    let message = json!({"role": "user", "content": question});
                    (
                        a,
                        BaseRequest::Edit {
                            message_id: id,
                            message,
                        },
                        vec![],
                    )
                }
            };
            // The requester: one of the viewers' roles.
            let requester_rules = viewers[n % viewers.len()].clone();
            let (ob, rx) = fanout::outbox(budget(n));
            let req = RunRequest {
                starter: Some(ob),
                starter_visibility: scope(&requester_rules),
                ..crate::thread::request::test_request(agents[who].clone(), &run_id, messages, base)
            };
            if t.start_run(req, crate::config::Strategy::Reject)
                .await
                .is_err()
            {
                continue; // e.g. a regenerate with nothing to regenerate
            }
            run_agent.insert(run_id.clone(), who);
            let mut requester = Watcher {
                rules: requester_rules,
                rx,
                face: format!("requester of {run_id}"),
            };
            let got = drain(&mut requester, 0, Some(&run_id)).await;
            // The question the run answered (a regenerate's is its run's).
            let last_question = t
                .lock()
                .fold
                .messages()
                .iter()
                .rev()
                .find(|m| m.role() == "user")
                .and_then(|m| m.value()["content"].as_str().map(str::to_owned));
            asked.insert(run_id.clone(), last_question.unwrap_or(question));
            assert_clean(&requester.face, &requester.rules, &run_agent, &asked, &got);
            run_ids.push(run_id);
        }
        let last = t.lock().fold.seq;
        for w in &mut live {
            let got = drain(w, last, None).await;
            assert_clean(&w.face, &w.rules, &run_agent, &asked, &got);
        }
        // Late joiners: from 0, from some position, from a snapshot.
        for (i, r) in viewers.iter().enumerate() {
            for (k, start) in [
                Start::After(0),
                Start::After(replay_from % last.max(1)),
                Start::Snapshot,
            ]
            .into_iter()
            .enumerate()
            {
                let (ob, rx) = fanout::outbox(1 << 24);
                let id = 100 + (i * 3 + k) as u64;
                t.subscribe(id, ob, start, scope(r));
                let mut w = Watcher {
                    rules: r.clone(),
                    rx,
                    face: format!("joiner {i} start {k}"),
                };
                let got = drain(&mut w, last, None).await;
                assert_clean(&w.face, &w.rules, &run_agent, &asked, &got);
                t.unsubscribe(id);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
        #[test]
        fn no_viewer_receives_what_its_rules_hide_on_any_face(
            ops in proptest::collection::vec(op(), 1..10),
            viewers in proptest::collection::vec(rules(), 1..4),
            replay_from in 0u64..400,
        ) {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap()
                .block_on(check(ops, viewers, replay_from));
        }
    }
}
