//! A thread's viewers: who watches it, what each may see, and how each
//! starts — a snapshot or a replay queued in the same critical section as
//! publishing, so nothing published falls between "read the journal" and
//! "go live" — and catches up from the journal when it falls behind.

use super::*;
use crate::protocol::authorship::Authors;
use crate::protocol::hooks::Shown;

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

/// What a viewer with `seen` gets of `entry`: nothing, the entry, or its
/// own copy without what it may not see. Events that restate history
/// ([`SeenBy::restates`]) are judged message by message with the thread's
/// [`Authors`] and, for a fork's `RUN_STARTED`, its base's too
/// ([`fork_base_authors`]); every other event costs one lookup.
pub(super) fn judged(seen: &mut SeenBy, entry: &Arc<Entry>, fold: &Fold) -> Option<Arc<Entry>> {
    let shown = if SeenBy::restates(entry.event.kind()) {
        let base = fork_base_authors(fold, &entry.event);
        let mut layers = vec![fold.authors()];
        layers.extend(base.as_ref());
        seen.judge(entry.origin(), &entry.event, &layers)
    } else if seen.hides(entry.origin(), &entry.event) {
        Shown::Hidden
    } else {
        Shown::Whole
    };
    match shown {
        Shown::Hidden => None,
        Shown::Whole => Some(entry.clone()),
        Shown::Redacted(event) => {
            let own = Entry::new(entry.thread_id.clone(), entry.seq, event);
            own.set_origin(entry.origin().clone());
            Some(Arc::new(own))
        }
    }
}

/// Who introduced each message of a fork's base, for judging the fork's
/// `RUN_STARTED` (which restates the base's history). The thread's fold
/// alone is not enough there: when it folds that `RUN_STARTED` it holds
/// another branch, and attributes the base's messages it lacks to the fork
/// until the restating `MESSAGES_SNAPSHOT` right after sets them from the
/// base. Without a base checkpoint the base's messages are judged as of
/// an unknown run (every agent's rules: fail closed). `None` for any other
/// event.
fn fork_base_authors(fold: &Fold, event: &Event) -> Option<Authors> {
    if *event.kind() != EventType::RunStarted {
        return None;
    }
    let run = fold.runs().get(event.str_field("runId")?)?;
    if !run.kind.forks() {
        return None;
    }
    let checkpoint = run
        .parent
        .as_deref()
        .and_then(|p| fold.runs().get(p))
        .and_then(|p| p.checkpoint());
    Some(checkpoint.map(|c| c.authors()).unwrap_or_default())
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
pub(super) fn snapshot_frame(
    key: &ThreadKey,
    inner: &Inner,
    viewer: &mut Viewer,
    reset: bool,
) -> Outgoing {
    let mut m = Map::new();
    m.insert("type".into(), "snapshot".into());
    let mut snap = snapshot_of(key, inner, reset);
    viewer.seen.redact_snapshot(&mut snap, inner.fold.authors());
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
        let lost = after < inner.base_seq || after > inner.fold.seq;
        let snapshot = snapshot.or(lost.then_some(true));
        if let Some(reset) = snapshot {
            inner.catching_up.remove(&viewer.id);
            let page = vec![snapshot_frame(&self.key, &inner, &mut viewer, reset)];
            inner.viewers.push(viewer);
            return (page, None);
        }
        let start = inner.journal.partition_point(|e| e.seq <= after);
        let (mut page, mut bytes, mut last) = (Vec::new(), 0, after);
        for e in inner.journal.range(start..) {
            if bytes >= budget {
                break;
            }
            last = e.seq;
            if let Some(seen) = viewer.view(e, &inner.fold) {
                bytes += seen.cost();
                page.push(Outgoing::Event(seen));
                if viewer.ends_with(&e.event) {
                    inner.catching_up.remove(&viewer.id);
                    return (page, None);
                }
            }
        }
        if last >= inner.fold.seq {
            inner.catching_up.remove(&viewer.id);
            inner.viewers.push(viewer);
            (page, None)
        } else {
            (page, Some((viewer, last)))
        }
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
        let inner = self.lock();
        (after >= inner.base_seq).then(|| {
            inner
                .journal
                .iter()
                .filter(|e| e.seq > after)
                .cloned()
                .collect()
        })
    }
}
