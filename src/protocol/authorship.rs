//! Which agent's run each journal event and each folded message belongs to.
//!
//! Operator visibility rules are scoped to agents (`agents = ["full"]`), and
//! one thread holds runs of different agents. So what a viewer may see is
//! decided per event by the agent of the run that event belongs to, never by
//! "the thread's agent" at some moment: that was stale as soon as the next
//! run used another agent, and differed between nodes.
//!
//! The journal itself says which agent ran: the gateway stamps every
//! `RUN_STARTED` it journals with `"agui-gateway": {"agent": "<id>"}` (an
//! extra field: stock clients keep or ignore it). Everything that reads the
//! journal — live fan-out, replay, a reload on another node, a copy fed by
//! another node's announcements — therefore derives the same attribution
//! from the events alone, with no side table to keep in step.

use super::Event;
use super::sealed::{IdStr, Page};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The field of a journaled `RUN_STARTED` that names the run's agent.
pub const GATEWAY_FIELD: &str = "agui-gateway";

/// The run an event belongs to, by its agent.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum RunAgent {
    /// Between runs (a meta event): only rules not scoped to agents apply.
    Outside,
    /// A run of this agent.
    Agent(Arc<str>),
    /// A run whose agent the journal does not name (journaled before runs
    /// were stamped, or never attributed): the rules of every agent apply,
    /// so an unknown origin can only hide more, never leak.
    #[default]
    Unknown,
}

impl RunAgent {
    /// The agent a journaled `RUN_STARTED` names, if any.
    pub fn of_run_started(event: &Event) -> RunAgent {
        match event
            .body()
            .get(GATEWAY_FIELD)
            .and_then(|g| g.get("agent"))
            .and_then(Value::as_str)
        {
            Some(agent) => RunAgent::Agent(Arc::from(agent)),
            None => RunAgent::Unknown,
        }
    }

    /// Stored as the agent's id, `false` outside a run, `null` unknown.
    pub fn to_json(&self) -> Value {
        match self {
            RunAgent::Agent(a) => Value::String(a.to_string()),
            RunAgent::Outside => Value::Bool(false),
            RunAgent::Unknown => Value::Null,
        }
    }

    /// Reads [`RunAgent::to_json`]'s form (anything else: unknown).
    pub fn from_json(v: &Value) -> RunAgent {
        match v {
            Value::String(a) => RunAgent::Agent(Arc::from(a.as_str())),
            Value::Bool(false) => RunAgent::Outside,
            _ => RunAgent::Unknown,
        }
    }
}

/// Which run introduced each folded message, and which runs wrote the
/// state: a snapshot shows a viewer each message as the rules of its own
/// run's agent allow.
///
/// Why two places: a map from id to origin cost about 90 bytes a message,
/// as much as the message itself once it is on a sealed page
/// ([`super::sealed`]). So when the fold seals messages it moves their
/// origins onto the page with them ([`Authors::seal`]) and keeps the page
/// here; the map holds only the messages not on a page. A lookup tries the
/// map, then the pages, newest first — starting where the last lookup
/// found a message, since the readers (a snapshot, a run's input, a
/// checkpoint) ask in conversation order, so a walk costs one step a
/// message.
#[derive(Debug, Default)]
pub struct Authors {
    /// Message id → the run that introduced it (messages not on a page).
    messages: HashMap<String, RunAgent>,
    /// Pages whose messages' origins are theirs, oldest first. An id is
    /// attributed in one place only: the map or the pages (where several
    /// messages with the same id all carry its one origin).
    pages: Vec<Arc<Page>>,
    /// Distinct ids the pages attribute: with the map's, what a fold that
    /// never seals would hold in its map (when to forget is decided on it).
    on_pages: usize,
    /// Attributed messages on the pages, an id as often as it appears: past
    /// twice `on_pages`, older pages repeat what newer ones say.
    page_entries: usize,
    /// Where the next lookup likely is: page << 32 | message on it.
    hint: AtomicU64,
    /// Every distinct origin of a state change (the state is one value
    /// shared by all runs, so it is hidden if any of its writers' rules hide it).
    state: Vec<RunAgent>,
}

impl Clone for Authors {
    fn clone(&self) -> Authors {
        Authors {
            messages: self.messages.clone(),
            pages: self.pages.clone(),
            on_pages: self.on_pages,
            page_entries: self.page_entries,
            hint: AtomicU64::new(self.hint.load(Ordering::Relaxed)),
            state: self.state.clone(),
        }
    }
}

/// Equal when they attribute the same ids the same way (wherever each
/// keeps them) and name the same writers of the state.
impl PartialEq for Authors {
    fn eq(&self, o: &Authors) -> bool {
        self.state == o.state && self.all() == o.all()
    }
}

impl Authors {
    /// The run that introduced message `id` (unknown if none is recorded).
    pub fn of_message(&self, id: Option<&str>) -> &RunAgent {
        static UNKNOWN: RunAgent = RunAgent::Unknown;
        let Some(id) = id else { return &UNKNOWN };
        self.messages
            .get(id)
            .or_else(|| self.on_pages(id))
            .unwrap_or(&UNKNOWN)
    }

    /// The origin a page keeps for message `id`: the message after the
    /// last one found first, then every page newest first.
    fn on_pages(&self, id: &str) -> Option<&RunAgent> {
        let hint = self.hint.load(Ordering::Relaxed);
        let (p, i) = ((hint >> 32) as usize, hint as u32);
        let found = match self.pages.get(p) {
            Some(page) if (i as usize) < page.len() && page.is_attributed_as(i, id) => Some((p, i)),
            _ => self
                .pages
                .iter()
                .enumerate()
                .rev()
                .find_map(|(p, page)| Some((p, page.attributed_position(id)?))),
        };
        let (p, i) = found?;
        let page = &self.pages[p];
        let next = match i as usize + 1 {
            n if n < page.len() => ((p as u64) << 32) | n as u64,
            _ => (p as u64 + 1) << 32,
        };
        self.hint.store(next, Ordering::Relaxed);
        page.origin(i)
    }

    /// Every attributed id and its origin (pages first, the map over them).
    fn all(&self) -> HashMap<IdStr<'_>, &RunAgent> {
        let mut all = HashMap::new();
        for page in &self.pages {
            for i in 0..page.len() as u32 {
                if let (Some(id), Some(origin)) = (page.id(i), page.origin(i)) {
                    all.insert(id, origin);
                }
            }
        }
        all.extend((self.messages.iter()).map(|(id, o)| (IdStr::from(id.as_str()), o)));
        all
    }

    /// Authors from their parts: message id → origin, and the state's origins.
    pub fn from_parts(
        messages: impl IntoIterator<Item = (String, RunAgent)>,
        state: Vec<RunAgent>,
    ) -> Authors {
        Authors {
            messages: messages.into_iter().collect(),
            state,
            ..Authors::default()
        }
    }

    /// The origins of the state.
    pub fn of_state(&self) -> &[RunAgent] {
        &self.state
    }

    fn attributed(&self, id: &str) -> bool {
        self.messages.contains_key(id) || self.on_pages(id).is_some()
    }

    /// The pages every message of which it attributes (by their address):
    /// a walk noting origins passes over them.
    pub(super) fn whole_pages(&self) -> std::collections::HashSet<*const Page> {
        (self.pages.iter())
            .filter(|p| p.all_attributed())
            .map(Arc::as_ptr)
            .collect()
    }

    /// Records `origin` for every message in `messages` not attributed yet.
    pub(super) fn note_messages<'a>(
        &mut self,
        ids: impl IntoIterator<Item = IdStr<'a>>,
        origin: &RunAgent,
    ) {
        for id in ids {
            if !self.attributed(&id) {
                self.messages.insert(id.to_string(), origin.clone());
            }
        }
    }

    /// The origin of a message about to be sealed, if one is recorded
    /// (taken out of the map: the page keeps it from now on).
    pub(super) fn take_for_page(&mut self, id: Option<&str>) -> Option<RunAgent> {
        let id = id?;
        match self.messages.remove(id) {
            Some(origin) => {
                self.on_pages += 1;
                Some(origin)
            }
            None => self.on_pages(id).cloned(),
        }
    }

    /// Keeps `page` (just sealed with origins from [`Authors::take_for_page`])
    /// as where its messages' origins are.
    pub(super) fn seal(&mut self, page: Arc<Page>) {
        self.page_entries += attributed(&page).count();
        self.pages.push(page);
        if self.page_entries > 2 * self.on_pages + 64 {
            self.drop_superseded();
        }
        // A map read back whole (a reloaded base) has just given most of
        // its entries to pages; its table would otherwise stay that large.
        if self.messages.capacity() > 4 * self.messages.len() + 64 {
            self.messages.shrink_to_fit();
        }
    }

    /// Forgets messages the conversation (`ids`, `len` of them) no longer
    /// holds (after an agent's `MESSAGES_SNAPSHOT`), so what is kept stays
    /// as large as the conversation. A page with a message gone is let go,
    /// the origins of those of its messages still present moved back to
    /// the map.
    pub(super) fn keep_only<'a>(&mut self, ids: impl IntoIterator<Item = IdStr<'a>>, len: usize) {
        if self.messages.len() + self.on_pages <= len {
            return;
        }
        let present: std::collections::HashSet<IdStr> = ids.into_iter().collect();
        self.messages.retain(|id, _| present.contains(id.as_str()));
        let (kept, gone): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pages)
            .into_iter()
            .partition(|p| attributed(p).all(|id| present.contains(&*id)));
        self.pages = kept;
        self.hint.store(0, Ordering::Relaxed);
        for page in gone {
            for i in 0..page.len() as u32 {
                if let (Some(id), Some(origin)) = (page.id(i), page.origin(i))
                    && present.contains(&*id)
                    && !self.attributed(&id)
                {
                    self.messages.insert(id.to_string(), origin.clone());
                }
            }
        }
        let on_pages: std::collections::HashSet<IdStr> =
            self.pages.iter().flat_map(|p| attributed(p)).collect();
        self.on_pages = on_pages.len();
        self.page_entries = self.pages.iter().map(|p| attributed(p).count()).sum();
    }

    /// Lets go of the pages every attributed id of which a newer page
    /// attributes too. An agent that restates the conversation changed
    /// (every run, some do) has every message sealed again on new pages
    /// under the same ids; the old pages would otherwise be kept here for
    /// good, the whole conversation once more each time. A lookup finds
    /// the newer page first, so nothing it answers changes.
    fn drop_superseded(&mut self) {
        let mut seen = std::collections::HashSet::new();
        let mut keep = vec![false; self.pages.len()];
        for (i, page) in self.pages.iter().enumerate().rev() {
            for id in attributed(page) {
                keep[i] |= seen.insert(id);
            }
        }
        let mut keep = keep.into_iter();
        self.pages.retain(|_| keep.next().unwrap_or(true));
        self.page_entries = self.pages.iter().map(|p| attributed(p).count()).sum();
        self.hint.store(0, Ordering::Relaxed);
    }

    /// Pages it keeps (tests: that restated conversations do not pile up).
    #[cfg(test)]
    pub(super) fn pages_held(&self) -> usize {
        self.pages.len()
    }

    /// Records that a run of `origin` changed the state.
    pub(super) fn note_state(&mut self, origin: &RunAgent) {
        if !self.state.contains(origin) {
            self.state.push(origin.clone());
        }
    }

    /// The stored form (part of a compacted base, never of a snapshot).
    pub fn to_json(&self) -> Value {
        let messages: Map<String, Value> = self
            .all()
            .into_iter()
            .map(|(id, a)| (id.to_string(), a.to_json()))
            .collect();
        let state: Vec<Value> = self.state.iter().map(RunAgent::to_json).collect();
        json!({ "messages": messages, "state": state })
    }

    /// Reads [`Authors::to_json`]'s form; anything missing is unknown.
    pub fn from_json(v: &Value) -> Authors {
        Authors::from_parts(
            v.get("messages")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(id, a)| (id.clone(), RunAgent::from_json(a))),
            v.get("state")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(RunAgent::from_json)
                .collect(),
        )
    }

    /// What it holds in memory, about (the pages are counted with the
    /// messages on them).
    pub fn approx_bytes(&self) -> usize {
        self.messages.len() * 96 + self.pages.len() * 8 + self.state.len() * 16
    }
}

/// The ids of `page`'s messages with a recorded origin.
fn attributed(page: &Page) -> impl Iterator<Item = IdStr<'static>> + '_ {
    (0..page.len() as u32).filter_map(move |i| page.id(i).filter(|_| page.origin(i).is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message_id(m: &Value) -> Option<&str> {
        m.get("id").and_then(Value::as_str)
    }

    #[test]
    fn authors_round_trip_and_unknown_is_the_default() {
        let mut a = Authors::default();
        let msgs = [json!({"id": "m1"}), json!({"id": "m2"})];
        a.note_messages(
            msgs[..1].iter().filter_map(message_id).map(IdStr::from),
            &RunAgent::Agent("echo".into()),
        );
        a.note_messages(
            msgs.iter().filter_map(message_id).map(IdStr::from),
            &RunAgent::Agent("full".into()),
        );
        a.note_state(&RunAgent::Agent("full".into()));
        let back = Authors::from_json(&a.to_json());
        assert_eq!(back, a);
        assert_eq!(back.of_message(Some("m1")), &RunAgent::Agent("echo".into()));
        assert_eq!(back.of_message(Some("m2")), &RunAgent::Agent("full".into()));
        assert_eq!(back.of_message(Some("nope")), &RunAgent::Unknown);
        a.keep_only(
            msgs[1..].iter().filter_map(message_id).map(IdStr::from),
            msgs.len() - 1,
        );
        assert_eq!(a.of_message(Some("m1")), &RunAgent::Unknown);
    }
}
