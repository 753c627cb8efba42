//! Where a run starts from: the head, or any earlier run (a branch).
//!
//! A client names a run's base three ways: `parentRunId` (continue from
//! that run), `regenerate` (answer an assistant message again: a sibling of
//! the run that produced it) and `edit` (a user message with new content,
//! same id: a sibling of the run that introduced it). A client that only
//! truncates or edits its message list — CopilotKit's reload, a stock
//! `HttpAgent` — is read the same way when its agent allows it
//! ([`detect`]). Each resolves here, under the thread's lock, to a [`Base`]:
//! the run the new one hangs from and that run's end state
//! ([`Checkpoint`]), which is what the new run is sent
//! (`thread::run_input`) and what its journaled opening restates.
//!
//! The guards of [`detect`] are the ones AG-UI's LangGraph integration
//! learned the hard way (ag-ui issues 1551, 1743, 1748, 2109): a resume, a
//! tool result being sent back, or pending interrupts are never a branch.

pub use super::request::BaseRequest;
use super::request::{RunRefused, RunRequest};
use super::{Inner, Thread};
use crate::protocol::Event;
use crate::protocol::fold::{Fold, RunStatus};
use crate::protocol::hooks::RunInput;
use crate::protocol::lineage::{Checkpoint, RunKind, RunRecord};
use crate::protocol::message::Message;
use serde_json::Value;
use std::sync::Arc;

/// A run's base, resolved against the thread.
#[derive(Debug, Clone)]
pub struct Base {
    pub kind: RunKind,
    /// The run it hangs from (`None`: the thread's first run, or a sibling of it).
    pub parent: Option<String>,
    /// The head when the run was resolved.
    pub head_before: Option<String>,
    /// The base's end, for a run that forks; `None` → the head (the fold).
    pub view: Option<Arc<Checkpoint>>,
    /// What a regenerate or an edit sends as its new input: the replaced
    /// run's own input (with the edit applied).
    pub input: Option<Vec<Value>>,
    /// The message regenerated or edited.
    pub replaces: Option<String>,
}

impl Base {
    /// True when the run forks (its opening restates the history).
    pub fn forks(&self) -> bool {
        self.view.is_some()
    }

    /// The pending interrupts a run from this base must answer.
    pub fn interrupts<'a>(&'a self, fold: &'a Fold) -> &'a [Value] {
        match &self.view {
            Some(view) => &view.interrupts,
            None => fold.interrupts(),
        }
    }
}

/// The base `req` resolves to on the thread as it stands, within the
/// thread's caps and what its agent's `branching.mode` allows.
pub(super) fn admit(thread: &Thread, req: &RunRequest, inner: &Inner) -> Result<Base, RunRefused> {
    let caps = &thread.settings;
    let sent: Option<Vec<Value>> = match &req.input {
        RunInput::Complete(i) if req.base == BaseRequest::Detect => Some(
            i.messages
                .iter()
                .map(|m| serde_json::to_value(m).expect("message serializes"))
                .collect(),
        ),
        _ => None,
    };
    let base = resolve(
        thread,
        inner,
        &req.base,
        req.input.has_resume(),
        sent.as_deref(),
    )?;
    let runs = inner.fold.runs();
    let (max_runs, max_branches) = (caps.max_runs, caps.max_branches);
    if max_runs > 0 && runs.started_count() >= max_runs {
        return Err(RunRefused::TooLarge(format!(
            "this thread has had its {max_runs} runs (threads.max_runs)"
        )));
    }
    if base.forks() && max_branches > 0 && runs.branch_count() >= max_branches {
        return Err(RunRefused::TooLarge(format!(
            "this thread has been forked {max_branches} times (threads.max_branches)"
        )));
    }
    if base.forks() {
        use crate::config::BranchMode;
        use crate::protocol::lineage::RunKind;
        let agent = &req.agent.id;
        match req.agent.branching.mode {
            BranchMode::Refuse => {
                return Err(RunRefused::Invalid(format!(
                    "agent '{agent}' does not take runs that fork the thread (branching.mode = \"refuse\")"
                )));
            }
            BranchMode::SameThread if !matches!(base.kind, RunKind::Regenerate | RunKind::Edit) => {
                return Err(RunRefused::Invalid(format!(
                    "agent '{agent}' keeps its own thread state and forks only by regenerate or edit (branching.mode = \"same-thread\")"
                )));
            }
            _ => {}
        }
    }
    Ok(base)
}

/// Resolves `request` on the thread as it stands (`resumes`: the run
/// carries a resume; `sent`: the complete input's messages, for
/// [`BaseRequest::Detect`]).
pub(super) fn resolve(
    thread: &Thread,
    inner: &Inner,
    request: &BaseRequest,
    resumes: bool,
    sent: Option<&[Value]>,
) -> Result<Base, RunRefused> {
    let runs = inner.fold.runs();
    let head = runs.head().map(|h| h.run_id.clone());
    let linear = |kind| Base {
        kind,
        parent: head.clone(),
        head_before: head.clone(),
        view: None,
        input: None,
        replaces: None,
    };
    let plain = if resumes {
        RunKind::Resume
    } else {
        RunKind::Continue
    };
    match request {
        BaseRequest::Head => Ok(linear(plain)),
        BaseRequest::Handoff => Ok(linear(RunKind::Handoff)),
        BaseRequest::Run(id) if Some(id) == head.as_ref() => Ok(linear(plain)),
        BaseRequest::Run(id) => {
            let run = known_run(inner, id)?;
            Ok(Base {
                kind: RunKind::Branch,
                parent: Some(run.run_id.clone()),
                head_before: head.clone(),
                view: Some(view_at(thread, inner, id)?),
                input: None,
                replaces: None,
            })
        }
        BaseRequest::Regenerate(message) => {
            let message = match message {
                Some(m) => m.clone(),
                None => last_assistant(&inner.fold).ok_or_else(|| {
                    RunRefused::NotFound("the thread has no assistant message to regenerate".into())
                })?,
            };
            // An assistant message: a sibling of the run that produced it.
            // A user message (the AI SDK names the question): a sibling of
            // the run it was sent in.
            let run = runs
                .producer_of(&message)
                .or_else(|| runs.introducer_of(&message))
                .or_else(|| {
                    // An answer no run is known to have produced (restated
                    // under another id): the run that asked its question.
                    let messages = inner.fold.messages();
                    let at = messages
                        .ids()
                        .position(|id| id.is_some_and(|id| id == *message))?;
                    let asked = (0..at).rev().find(|&i| messages.role_at(i) == "user")?;
                    runs.introducer_of(&messages.id_at(asked)?)
                })
                .ok_or_else(|| {
                    RunRefused::NotFound(format!(
                        "message '{message}' is not part of a run this thread remembers"
                    ))
                })?;
            sibling_of(
                thread,
                inner,
                run,
                RunKind::Regenerate,
                run.input.iter().map(Message::to_value).collect(),
                message,
            )
        }
        BaseRequest::Edit {
            message_id,
            message,
        } => {
            if message.get("role").and_then(Value::as_str) != Some("user") {
                return Err(RunRefused::Invalid(
                    "edit: message.role must be \"user\"".into(),
                ));
            }
            let run = runs.introducer_of(message_id).ok_or_else(|| {
                RunRefused::NotFound(format!(
                    "message '{message_id}' was not sent in a run this thread remembers"
                ))
            })?;
            let input = edited_input(&run.input, message_id, message, &[]);
            sibling_of(thread, inner, run, RunKind::Edit, input, message_id.clone())
        }
        BaseRequest::Detect => match sent.and_then(|sent| detect(inner, sent, resumes)) {
            Some(request) => resolve(thread, inner, &request, resumes, None),
            None => Ok(linear(plain)),
        },
    }
}

/// A run that answers `run`'s question again: hangs from `run`'s base.
fn sibling_of(
    thread: &Thread,
    inner: &Inner,
    run: &RunRecord,
    kind: RunKind,
    input: Vec<Value>,
    replaces: String,
) -> Result<Base, RunRefused> {
    let view = match &run.parent {
        Some(parent) => view_at(thread, inner, parent)?,
        None => Arc::new(Fold::new().checkpoint(None)),
    };
    Ok(Base {
        kind,
        parent: run.parent.clone(),
        head_before: inner.fold.runs().head().map(|h| h.run_id.clone()),
        view: Some(view),
        input: Some(input),
        replaces: Some(replaces),
    })
}

/// `input` with message `id` replaced by `message` (keeping the id), the
/// messages after it dropped and `after` appended.
fn edited_input(input: &[Message], id: &str, message: &Value, after: &[Value]) -> Vec<Value> {
    let mut edited: Vec<Value> = Vec::new();
    for m in input {
        if m.id().is_some_and(|at| at == id) {
            let mut m = message.clone();
            if let Some(obj) = m.as_object_mut() {
                obj.insert("id".into(), id.into());
            }
            edited.push(m);
            break;
        }
        edited.push(m.to_value());
    }
    edited.extend(after.iter().cloned());
    edited
}

fn known_run<'a>(inner: &'a Inner, id: &str) -> Result<&'a RunRecord, RunRefused> {
    inner
        .fold
        .runs()
        .get(id)
        .ok_or_else(|| beyond_remembered(id))
}

/// The conversation at the end of run `id`: its checkpoint, or a replay of
/// the journal from its nearest ancestor that has one (or from the
/// thread's start).
pub(super) fn view_at(
    thread: &Thread,
    inner: &Inner,
    id: &str,
) -> Result<Arc<Checkpoint>, RunRefused> {
    let run = known_run(inner, id)?;
    if run.status == RunStatus::Running {
        return Err(RunRefused::Conflict(format!(
            "run '{id}' has not ended; a run can only start from a run that has"
        )));
    }
    if let Some(c) = run.checkpoint() {
        return Ok(c.clone());
    }
    let path = inner.fold.runs().path(id);
    let from = path.iter().position(|r| r.checkpoint().is_some());
    let (mut fold, replayed) = match from {
        Some(i) => (
            Fold::at_checkpoint(path[i].checkpoint().expect("found")),
            &path[..i],
        ),
        None if path.last().is_some_and(|r| r.parent.is_none()) => (Fold::new(), &path[..]),
        None => return Err(gone(id)),
    };
    for run in replayed.iter().rev() {
        let Some(end) = run.ended_seq else {
            return Err(gone(id));
        };
        if run.started_seq <= inner.base_seq {
            return Err(gone(id));
        }
        if !thread.replay_into(inner, &mut fold, run.started_seq, end) {
            return Err(gone(id));
        }
    }
    Ok(Arc::new(fold.checkpoint(None)))
}

fn gone(id: &str) -> RunRefused {
    beyond_remembered(id)
}

/// The refusal of a base whose end the thread cannot give: a run it
/// forgot (past the newest [`RUNS_KEPT`](crate::protocol::lineage::RUNS_KEPT)
/// runs), one whose end is neither checkpointed nor in the journal since
/// its last compaction, or one on a path through such a run — or an id
/// that was never one of its runs, which a forgotten run cannot be told
/// from. One code and one message for all of them, so a client gets the
/// same answer for the same base whichever way the thread lost it (and
/// nothing says "compacted" of a run that was only forgotten).
fn beyond_remembered(id: &str) -> RunRefused {
    RunRefused::NotFound(format!(
        "run '{id}' is beyond the runs this thread remembers (or was never one of them): a run can only start from a run whose end the thread still keeps"
    ))
}

/// The last assistant message of the head's conversation.
fn last_assistant(fold: &Fold) -> Option<String> {
    fold.messages()
        .iter()
        .rev()
        .find(|m| m.role() == "assistant")
        .and_then(|m| Some(m.id()?.to_string()))
}

/// What a complete input that names no base means, if it is a
/// regenerate or an edit (see [`BaseRequest::Detect`]).
fn detect(inner: &Inner, sent: &[Value], resumes: bool) -> Option<BaseRequest> {
    let fold = &inner.fold;
    if resumes
        || !fold.interrupts().is_empty()
        || sent.last().is_none_or(|m| role(m) != "user")
        || fold.runs().is_empty()
    {
        return None;
    }
    // An edit: a user message the head's history holds, with new content.
    for m in sent.iter().filter(|m| role(m) == "user") {
        if let Some(id) = message_id(m)
            && let Some(known) = fold.message(id)
            && is_edit(&known.value(), m)
        {
            return Some(BaseRequest::Edit {
                message_id: id.to_owned(),
                message: m.clone(),
            });
        }
    }
    // A regenerate: the conversation as sent is the head's, cut after a
    // user message.
    fn turns<'a, Id: std::ops::Deref<Target = str>>(
        msgs: impl Iterator<Item = (&'a str, Option<Id>)>,
    ) -> Vec<String> {
        msgs.filter(|(role, _)| !matches!(*role, "tool" | "activity" | "reasoning"))
            .filter_map(|(_, id)| Some(id?.to_string()))
            .collect()
    }
    let (sent_ids, head_ids) = (
        turns(sent.iter().map(|m| (role(m), message_id(m)))),
        turns(fold.messages().roles().zip(fold.messages().ids())),
    );
    if sent_ids.len() >= head_ids.len() || !head_ids.starts_with(&sent_ids) {
        return None;
    }
    let answer = head_ids[sent_ids.len()..]
        .iter()
        .find(|id| fold.message(id).is_some_and(|m| m.role() == "assistant"))?;
    Some(BaseRequest::Regenerate(Some(answer.clone())))
}

fn role(m: &Value) -> &str {
    m.get("role").and_then(Value::as_str).unwrap_or_default()
}

fn message_id(m: &Value) -> Option<&str> {
    m.get("id").and_then(Value::as_str)
}

/// The `CUSTOM agui-gateway/lineage` event a forked run journals after its
/// snapshots.
pub(super) fn lineage_event(base: &Base, run_id: &str, agent: &str) -> Event {
    let mut value = serde_json::json!({
        "runId": run_id,
        "parentRunId": base.parent,
        "kind": base.kind.as_str(),
        "agent": agent,
        "headBefore": base.head_before,
    });
    match (base.kind, &base.replaces) {
        (RunKind::Regenerate, Some(m)) => value["regeneratedMessageId"] = m.clone().into(),
        (RunKind::Edit, Some(m)) => value["editedMessageId"] = m.clone().into(),
        _ => {}
    }
    Event::build(serde_json::json!({
        "type": "CUSTOM",
        "name": crate::protocol::lineage::LINEAGE_EVENT,
        "value": value,
    }))
}

impl super::Thread {
    /// The snapshot at the end of run `run_id` (the conversation as it was
    /// then, on its branch), as `visibility` allows; the head's snapshot
    /// when `None`.
    pub fn snapshot_at(
        &self,
        run_id: Option<&str>,
        visibility: &crate::protocol::hooks::ViewerVisibility,
    ) -> Result<serde_json::Map<String, Value>, RunRefused> {
        let Some(run_id) = run_id else {
            return Ok(self.snapshot(visibility));
        };
        let inner = self.lock();
        let view = view_at(self, &inner, run_id)?;
        let run = inner.fold.runs().get(run_id).expect("view_at found it");
        let mut snap = serde_json::Map::new();
        snap.insert("threadId".into(), self.key.thread_id.clone().into());
        snap.insert("seq".into(), view.seq.into());
        snap.insert("messages".into(), Value::Array(view.message_values()));
        snap.insert("state".into(), view.state().clone());
        snap.insert("interrupts".into(), Value::Array(view.interrupts.clone()));
        snap.insert("run".into(), run_summary(run));
        snap.insert(
            "headRunId".into(),
            inner.fold.runs().head().map(|h| h.run_id.clone()).into(),
        );
        crate::protocol::hooks::SeenBy::new(visibility.clone())
            .redact_snapshot(&mut snap, &view.authors());
        super::meta::attach(&mut snap, &inner.meta_notes);
        Ok(snap)
    }

    /// `GET /v1/threads/{id}/runs`: the run tree, oldest first, `limit`
    /// runs from index `cursor`.
    pub fn runs_page(&self, cursor: usize, limit: usize) -> Value {
        let inner = self.lock();
        let runs = inner.fold.runs();
        let page: Vec<Value> = runs
            .iter()
            .skip(cursor)
            .take(limit)
            .map(|r| r.to_json())
            .collect();
        // Saturating: a cursor past every page is the empty last one.
        let end = cursor.saturating_add(limit);
        let next = (end < runs.len()).then_some(end);
        serde_json::json!({
            "threadId": self.key.thread_id,
            "headRunId": runs.head().map(|h| h.run_id.clone()),
            "runs": page,
            "nextCursor": next,
        })
    }
}

/// The snapshot's `run` object for a run of the table.
pub(super) fn run_summary(run: &RunRecord) -> Value {
    serde_json::json!({
        "runId": run.run_id,
        "agent": run.agent.to_json(),
        "status": run.status.as_str(),
        "parentRunId": run.parent,
        "kind": run.kind.as_str(),
        "startedBy": run.started_by,
    })
}

/// True when a client re-sent message `known` (same id) with other content:
/// role, content, tool calls or the tool call it answers. Other fields
/// (metadata a client strips or adds) are not an edit.
pub(super) fn is_edit(known: &Value, sent: &Value) -> bool {
    ["role", "content", "toolCalls", "toolCallId"]
        .iter()
        .any(|k| known.get(k) != sent.get(k))
}

#[cfg(test)]
mod tests {
    //! The lineage property: whatever sequence of runs, branches,
    //! regenerates and edits a thread goes through, (1) the journal folded
    //! from the start is the head's view, and (2) folding only the runs on
    //! any run's path gives that run's checkpoint — so the restated
    //! snapshots say exactly what each branch holds.
    use super::*;
    use crate::thread::Start;
    use crate::thread::fanout::{self, Outgoing};
    use proptest::prelude::*;
    use serde_json::json;

    #[derive(Debug, Clone)]
    enum Op {
        Continue,
        /// From the n-th run (modulo the runs so far).
        Branch(usize),
        Regenerate,
        /// The n-th user message of the head's conversation.
        Edit(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => Just(Op::Continue),
            2 => (0usize..8).prop_map(Op::Branch),
            1 => Just(Op::Regenerate),
            1 => (0usize..4).prop_map(Op::Edit),
        ]
    }

    async fn run_ops(ops: Vec<Op>) {
        let (agent, _threads, t) = crate::thread::demo_thread(100_000).await;
        let (ob, mut rx) = fanout::outbox(1 << 24);
        t.subscribe(1, ob, Start::Live, None);
        let mut run_ids: Vec<String> = Vec::new();
        for (n, op) in std::iter::once(Op::Continue).chain(ops).enumerate() {
            let run_id = format!("r{n}");
            let mut messages = vec![];
            let base = match op {
                Op::Continue => {
                    messages.push(json!({"id": format!("u-{run_id}"), "role": "user", "content": format!("hi {n}")}));
                    BaseRequest::Head
                }
                Op::Branch(i) => {
                    messages.push(json!({"id": format!("u-{run_id}"), "role": "user", "content": format!("fork {n}")}));
                    BaseRequest::Run(run_ids[i % run_ids.len()].clone())
                }
                Op::Regenerate => BaseRequest::Regenerate(None),
                Op::Edit(i) => {
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
                    BaseRequest::Edit {
                        message_id: id,
                        message: json!({"role": "user", "content": format!("edited {n}")}),
                    }
                }
            };
            let req = crate::thread::request::test_request(agent.clone(), &run_id, messages, base);
            if t.start_run(req, crate::config::Strategy::Reject)
                .await
                .is_err()
            {
                continue; // e.g. a regenerate with nothing to regenerate
            }
            loop {
                match rx.recv().await.expect("viewer open") {
                    Outgoing::Event(e)
                        if e.event.kind().is_terminal()
                            && e.event.str_field("runId") == Some(run_id.as_str()) =>
                    {
                        break;
                    }
                    _ => {}
                }
            }
            run_ids.push(run_id);
        }
        let inner = t.lock();
        let entries: Vec<_> = inner.journal.entries_from(0, &t.id, &inner.fold).collect();
        // (1) The journal from the start is the head's view.
        let mut all = Fold::new();
        for e in &entries {
            all.apply(e.seq, &e.event);
        }
        assert_eq!(all.messages(), inner.fold.messages());
        assert_eq!(all.state(), inner.fold.state());
        // (2) Each run's path, folded alone, is its checkpoint.
        for run in inner.fold.runs().iter() {
            let checkpoint = run.checkpoint().expect("every run ended and is kept");
            let mut path = inner.fold.runs().path(&run.run_id);
            path.reverse();
            let mut fold = Fold::new();
            for r in path {
                let end = r.ended_seq.unwrap();
                for e in entries
                    .iter()
                    .filter(|e| (r.started_seq..=end).contains(&e.seq))
                {
                    fold.apply(e.seq, &e.event);
                }
            }
            assert_eq!(
                *fold.messages(),
                checkpoint.shared_messages(),
                "run {}",
                run.run_id
            );
            assert_eq!(fold.state(), checkpoint.state(), "run {}", run.run_id);
        }
    }

    /// A base the thread cannot give is refused with one code and one
    /// message, whichever way it was lost: a run whose checkpoint was
    /// evicted and whose events were compacted, and an id the run table
    /// does not hold (forgotten past the run window, or never a run),
    /// every time it is asked.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_base_beyond_the_remembered_runs_is_refused_the_same_way_every_time() {
        let (agent, _threads, t) = crate::thread::demo_thread(64).await;
        let runs = crate::protocol::lineage::CHECKPOINTS_KEPT + 3;
        for n in 0..runs {
            let run_id = format!("r{n}");
            let req = crate::thread::request::test_request(
                agent.clone(),
                &run_id,
                vec![json!({"id": format!("u-{run_id}"), "role": "user", "content": "hi"})],
                BaseRequest::Head,
            );
            let (ob, mut rx) = fanout::outbox(1 << 24);
            t.subscribe(1, ob, Start::Live, None);
            t.start_run(req, crate::config::Strategy::Reject)
                .await
                .unwrap();
            loop {
                if let Some(Outgoing::Event(e)) = rx.recv().await
                    && e.event.kind().is_terminal()
                {
                    break;
                }
            }
            t.unsubscribe(1);
            t.maybe_compact().await;
        }
        let refusal = |id: &str| {
            let inner = t.lock();
            assert!(inner.fold.runs().get("r0").is_some(), "r0 is remembered");
            assert!(inner.base_seq > 0, "the journal was compacted");
            resolve(&t, &inner, &BaseRequest::Run(id.to_owned()), false, None)
                .expect_err("refused")
                .to_string()
                .replace(id, "<id>")
        };
        // r0: remembered, but neither checkpointed nor in the journal.
        let compacted = refusal("r0");
        assert_eq!(compacted, refusal("nope"), "same as a run not remembered");
        assert_eq!(compacted, refusal("r0"), "every time");
        assert!(
            compacted.contains("beyond the runs this thread remembers")
                && !compacted.contains("compact"),
            "{compacted}"
        );
        let inner = t.lock();
        let not_found = resolve(&t, &inner, &BaseRequest::Run("r0".into()), false, None);
        assert!(matches!(not_found, Err(RunRefused::NotFound(_))));
        // A view at it is refused the same way.
        assert_eq!(
            view_at(&t, &inner, "r0").expect_err("refused").to_string(),
            compacted.replace("<id>", "r0")
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        #[test]
        fn every_runs_path_folds_to_its_checkpoint_and_the_journal_to_the_head(
            ops in proptest::collection::vec(op(), 1..8)
        ) {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap()
                .block_on(run_ops(ops));
        }
    }
}
