//! What one viewer may see of one journaled entry: the rule every face
//! applies (the live fan-out, a replay, a requester's feed, a meta event
//! sent to an open chat stream), in one place so no face judges otherwise.

use super::Entry;
use crate::protocol::authorship::{Authors, RunAgent};
use crate::protocol::event::EventType;
use crate::protocol::fold::Fold;
use crate::protocol::hooks::{SeenBy, Shown};
use serde_json::Value;
use std::sync::Arc;

/// What a viewer with `seen` gets of `entry`: nothing, the entry, or its
/// own copy without what it may not see. Events that restate history
/// ([`SeenBy::restates`]) are judged part by part with the thread's
/// [`Authors`] and, where those may not be the entry's, with those as of
/// the entry's run too ([`authors_as_of`]); every other event costs one
/// lookup.
pub(super) fn judged(seen: &mut SeenBy, entry: &Arc<Entry>, fold: &Fold) -> Option<Arc<Entry>> {
    let shown = if seen.sees_everything() {
        Shown::Whole
    } else if SeenBy::restates(entry.event.kind()) {
        let then = authors_as_of(fold, entry);
        let now = fold.authors();
        let both;
        let layers: &[&Authors] = match &then {
            Some(then) => {
                both = [now, then];
                &both
            }
            None => std::slice::from_ref(&now),
        };
        seen.judge(entry.origin(), &entry.event, layers)
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

/// Who had introduced the messages and written the state when `entry` (an
/// event that restates history) was journaled, where the thread's fold
/// may say otherwise; `None` where it says exactly that.
///
/// The fold says it of the entry it has just folded (live), except for a
/// fork's `RUN_STARTED`: folding it, the fold still holds another branch
/// and attributes the base's messages it lacks to the fork, until the
/// restating `MESSAGES_SNAPSHOT` right after sets them from the base. And it
/// does not for an older entry (a replay, a requester reading its batch):
/// a later fork reset the state's writers to its base's, so a replayed
/// restatement of another branch's state would be judged by the wrong
/// writers. Both are answered from the entry's run: its base's end (its
/// checkpoint's authors) plus the run's own agent. Without that checkpoint,
/// or a run the table no longer holds, every message and the state count
/// as of an unknown run (every agent's rules: fail closed).
fn authors_as_of(fold: &Fold, entry: &Entry) -> Option<Authors> {
    let event = &entry.event;
    let starts = *event.kind() == EventType::RunStarted;
    if !starts && entry.seq >= fold.seq {
        return None;
    }
    let run = match starts {
        true => fold.runs().get(event.str_field("runId")?),
        false => fold.runs().at_seq(entry.seq),
    };
    let forks = starts && run.is_some_and(|r| r.kind.forks());
    if entry.seq >= fold.seq && !forks {
        return None;
    }
    let unknown = || Authors::from_parts([], vec![RunAgent::Unknown]);
    let Some(run) = run else {
        return Some(unknown());
    };
    let base = match run.parent.as_deref() {
        None => None,
        Some(parent) => match fold.runs().get(parent).and_then(|p| p.checkpoint()) {
            Some(c) => Some(c),
            None => return Some(unknown()),
        },
    };
    let mut writers = base.map(|c| c.state_origins().to_vec()).unwrap_or_default();
    writers.push(run.agent.clone());
    // Each message the entry carries: as the base's end says, else this
    // run's (it came with its input or its output).
    let carried = match event.kind() {
        EventType::RunStarted => event.get("input").and_then(|i| i.get("messages")),
        EventType::MessagesSnapshot => event.get("messages"),
        _ => None,
    };
    let ids = carried.and_then(Value::as_array).into_iter().flatten();
    let ids: Vec<&str> = ids.filter_map(|m| m.get("id")?.as_str()).collect();
    let mut authors: std::collections::HashMap<String, RunAgent> = match base {
        Some(c) if !ids.is_empty() => c.message_authors().collect(),
        _ => Default::default(),
    };
    let messages: Vec<(String, RunAgent)> = ids
        .into_iter()
        .map(|id| {
            let by = authors.remove(id).unwrap_or_else(|| run.agent.clone());
            (id.to_owned(), by)
        })
        .collect();
    Some(Authors::from_parts(messages, writers))
}
