//! Any window of a thread's journal as a valid AG-UI event stream.
//!
//! The SSE join stream (`GET /v1/threads/{id}/events`) is read by stock AG-UI
//! clients, which refuse a stream that does not start with `RUN_STARTED`,
//! has events after `RUN_FINISHED` other than a new `RUN_STARTED`, or
//! continues a message they never saw start. A thread's journal, seen from an
//! arbitrary point, breaks all three: meta events fall between runs, a
//! compacted thread starts from a snapshot, and a viewer may join mid-run.
//! [`JoinFramer`] repairs the view without touching the journal:
//!
//! - a start from a snapshot becomes a run of its own (`RUN_STARTED`,
//!   `MESSAGES_SNAPSHOT`, `STATE_SNAPSHOT`, `CUSTOM agui-gateway/snapshot`,
//!   then `RUN_FINISHED` — with the pending interrupts as its outcome — or,
//!   when the thread's run is still going, no end: the live run continues it,
//!   with what that run holds open re-opened, see [`JoinFramer::reopen`]);
//! - an event between runs (a meta event) is wrapped in a one-event run whose
//!   id is `agui-gateway-meta-<seq>`;
//! - a fresh start in the middle of a run ([`JoinFramer::reopen`]) opens that
//!   run with the conversation as it stood at the cursor and re-opens what
//!   the run holds open there; any message, tool call, reasoning span, step
//!   or subagent the viewer still never saw open is opened right before its
//!   first event;
//! - anything still open when the run finishes is closed before
//!   `RUN_FINISHED` (it cannot happen on a verified journal, but a policy
//!   that hides events from one viewer must not break that viewer's stream).
//!
//! **Cursors.** What a viewer holds open after the frames of journal event
//! `seq` is a function of the journal up to `seq` alone: the framer's state
//! after [`JoinFramer::follow`]ing the events the viewer may see from the
//! thread's oldest held event (a run boundary: compaction only cuts between
//! runs). So an SSE reconnect (`Last-Event-ID: seq`) rebuilds that state and
//! goes on with no second `RUN_STARTED` or `*_START`; only a fresh start
//! (`?after=`) gets [`JoinFramer::reopen`]'s prelude. For that to hold, the
//! frame carrying a seq as its SSE id is the last of that seq's frames
//! ([`Framed::Marked`] closes a wrapped meta event's run).
//!
//! Journal events pass byte-for-byte; `META` becomes
//! `CUSTOM agui-gateway/meta` (stock 1.0 clients drop the draft type).
//! Other synthetic events carry no SSE `id`, so `Last-Event-ID` stays a
//! journal seq.

use super::event::{Event, EventType};
use super::open::{Entity, OpenEntities, Role};
use serde_json::{Map, Value, json};
use std::collections::HashMap;

/// A client's position in a thread's journal (docs/protocol.md, "Cursors"):
/// the seq of the last event it holds and, when the journal's store can
/// lose history and start anew (Redis), the epoch of the history that seq
/// belongs to: `<seq>` or `<seq>.<epoch>`. A plain seq (clients from before
/// epochs, or a local store) is taken as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub seq: u64,
    pub epoch: Option<String>,
}

impl Cursor {
    /// Reads `<seq>` or `<seq>.<epoch>` (`None` when it is neither).
    pub fn parse(s: &str) -> Option<Cursor> {
        let s = s.trim();
        let (seq, epoch) = match s.split_once('.') {
            Some((seq, epoch)) => (seq, Some(epoch)),
            None => (s, None),
        };
        let epoch = match epoch {
            Some(e) if e.is_empty() || !e.chars().all(|c| c.is_ascii_alphanumeric()) => {
                return None;
            }
            e => e.map(str::to_owned),
        };
        Some(Cursor {
            seq: seq.parse().ok()?,
            epoch,
        })
    }

    /// The cursor text for `seq` of a journal of `epoch`.
    pub fn text(seq: u64, epoch: Option<&str>) -> String {
        match epoch {
            Some(e) => format!("{seq}.{e}"),
            None => seq.to_string(),
        }
    }

    /// True when this cursor was read from another history than the one
    /// the journal holds now (`current`): its seqs mean other events.
    pub fn from_other_history(&self, current: Option<&str>) -> bool {
        matches!((self.epoch.as_deref(), current), (Some(mine), Some(now)) if mine != now)
    }
}

/// One item of the join stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Framed {
    /// The journal event itself, byte-for-byte, with its seq as SSE id.
    Journal,
    /// The journal event (or, from [`JoinFramer::snapshot`], the journal up
    /// to the snapshot's seq) in another shape, with that seq as SSE id.
    Converted(Value),
    /// An event the framer adds (no SSE id).
    Synthetic(Value),
    /// An event the framer adds that ends the frames of a journal event
    /// (or snapshot) standing for none of them itself: it carries that seq
    /// as SSE id, so a reconnect never resumes inside the group.
    Marked(Value),
}

/// Something the viewer's run holds open, as the framer re-opens it for a
/// fresh start in the middle of that run.
#[derive(Debug, Clone)]
struct Opened {
    entity: Entity,
    id: String,
    subagent: Option<String>,
    /// The event that opened it (journal or synthetic).
    start: Value,
    /// A tool call's arguments so far (streamed again on a re-open: a
    /// client must see a call's whole arguments between its start and end).
    args: String,
}

/// Turns journal entries (and a starting snapshot) into a valid AG-UI stream.
#[derive(Debug)]
pub struct JoinFramer {
    thread_id: String,
    /// The run the viewer is inside, as far as its stream goes.
    run: Option<String>,
    /// The thread's active run when the viewer joined (names a run joined mid-way).
    active_run: Option<String>,
    open: OpenEntities,
    /// What `open` holds, in opening order, with how to re-open it.
    opened: Vec<Opened>,
    /// Tool call id → name, for tool calls re-opened mid-run.
    tool_names: HashMap<String, String>,
}

impl JoinFramer {
    /// A framer for a viewer of `thread_id`; `context` is the thread's
    /// snapshot when the viewer joined (its run and messages name what a
    /// mid-run start has to re-open).
    pub fn new(thread_id: &str, context: &Map<String, Value>) -> JoinFramer {
        let mut framer = JoinFramer {
            thread_id: thread_id.to_owned(),
            run: None,
            active_run: None,
            open: OpenEntities::default(),
            opened: Vec::new(),
            tool_names: HashMap::new(),
        };
        framer.learn(context);
        framer
    }

    /// Notes the running run and the tool call names in a snapshot.
    fn learn(&mut self, snapshot: &Map<String, Value>) {
        let run = snapshot.get("run");
        self.active_run = run
            .filter(|r| r.get("status").and_then(Value::as_str) == Some("running"))
            .and_then(|r| r.get("runId"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let calls = snapshot
            .get("messages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|m| m.get("toolCalls")?.as_array())
            .flatten();
        for call in calls {
            if let (Some(id), Some(name)) = (
                call.get("id").and_then(Value::as_str),
                call.get("function")
                    .and_then(|f| f.get("name"))
                    .and_then(Value::as_str),
            ) {
                self.tool_names.insert(id.to_owned(), name.to_owned());
            }
        }
    }

    /// Takes in journal event `seq` as if its frames had been sent: how a
    /// reconnect rebuilds what its viewer holds open (see the module docs).
    pub fn follow(&mut self, seq: u64, event: &Event) {
        let _ = self.event(seq, event);
    }

    /// The prelude of a fresh start (`?after=`) at the point this framer
    /// [`JoinFramer::follow`]ed up to; `at` is the conversation there
    /// (`seq`, `messages`, `state`, `interrupts`). Between runs, that
    /// conversation as a run of its own (`agui-gateway-snapshot-<seq>`,
    /// ending with the pending interrupts as its outcome): a client that
    /// starts there holds what one that read from the start holds.
    ///
    /// The run is opened, `MESSAGES_SNAPSHOT` and `STATE_SNAPSHOT` give the
    /// conversation as it stood, and what the run holds open is opened
    /// again: a message or reasoning message with its start (its text so
    /// far is in the snapshot; a stock client's start of a message it holds
    /// keeps it and appends), a tool call with its start and its whole
    /// arguments so far, left out of the snapshot. Why not the arguments in
    /// the snapshot: a tool call's arguments are judged between its start
    /// and its end (ag-ui-validate AGUI204), and a client that joined
    /// mid-arguments otherwise keeps only their tail. A tool call that
    /// ended before the cursor is in the snapshot, so its result names a
    /// known call (AGUI207). Whatever the client held before is replaced by
    /// the snapshot, so a client that was there and one that was not fold
    /// the same conversation.
    pub fn reopen(&mut self, at: &Map<String, Value>) -> Vec<Framed> {
        let Some(run_id) = self.run.clone() else {
            let seq = at.get("seq").and_then(Value::as_u64).unwrap_or(0);
            let run_id = format!("agui-gateway-snapshot-{seq}");
            let mut out = vec![Framed::Synthetic(self.run_started(&run_id))];
            out.extend(self.conversation(at));
            out.push(Framed::Synthetic(
                self.finished_with_interrupts(&run_id, at),
            ));
            return out;
        };
        let mut out = vec![Framed::Synthetic(self.run_started(&run_id))];
        out.extend(self.conversation(at));
        out.extend(self.openers());
        out
    }

    /// `RUN_FINISHED` of a run standing for a snapshot: the snapshot's
    /// pending interrupts, if any, are its outcome.
    fn finished_with_interrupts(&self, run_id: &str, snapshot: &Map<String, Value>) -> Value {
        let mut finished =
            json!({"type": "RUN_FINISHED", "threadId": self.thread_id, "runId": run_id});
        if let Some(i) = snapshot
            .get("interrupts")
            .and_then(Value::as_array)
            .filter(|i| !i.is_empty())
        {
            finished["outcome"] = json!({"type": "interrupt", "interrupts": i});
        }
        finished
    }

    /// `MESSAGES_SNAPSHOT` (without the tool calls open now) and
    /// `STATE_SNAPSHOT` of `at`.
    fn conversation(&self, at: &Map<String, Value>) -> [Framed; 2] {
        let open_calls: Vec<&str> = self
            .opened
            .iter()
            .filter(|o| o.entity == Entity::ToolCall)
            .map(|o| o.id.as_str())
            .collect();
        let mut messages = at.get("messages").cloned().unwrap_or(json!([]));
        for m in messages.as_array_mut().into_iter().flatten() {
            let Some(m) = m.as_object_mut() else { continue };
            if let Some(calls) = m.get_mut("toolCalls").and_then(Value::as_array_mut) {
                calls.retain(|c| {
                    !c.get("id")
                        .and_then(Value::as_str)
                        .is_some_and(|id| open_calls.contains(&id))
                });
                if calls.is_empty() {
                    m.remove("toolCalls");
                }
            }
        }
        let state = at.get("state").cloned().unwrap_or(Value::Null);
        [
            Framed::Synthetic(json!({"type": "MESSAGES_SNAPSHOT", "messages": messages})),
            Framed::Synthetic(json!({"type": "STATE_SNAPSHOT", "snapshot": state})),
        ]
    }

    /// What the run holds open, opened again in order (a tool call with its
    /// arguments so far).
    fn openers(&self) -> Vec<Framed> {
        let mut out = Vec::new();
        for o in &self.opened {
            out.push(Framed::Synthetic(o.start.clone()));
            if o.entity == Entity::ToolCall && !o.args.is_empty() {
                let mut args =
                    json!({"type": "TOOL_CALL_ARGS", "toolCallId": o.id, "delta": o.args});
                if let Some(s) = o.start.get("subagentRunId").filter(|s| s.is_string()) {
                    args["subagentRunId"] = s.clone();
                }
                out.push(Framed::Synthetic(args));
            }
        }
        out
    }

    /// The stream's start from a snapshot object (the `snapshot` frame
    /// without `type`): a run of its own, or the opening of the running
    /// run. `prefix` is the journal the viewer may see up to the snapshot's
    /// seq (from the oldest event held), what names what a running run
    /// holds open.
    pub fn snapshot(
        &mut self,
        snapshot: &Map<String, Value>,
        prefix: &[(u64, &Event)],
    ) -> Vec<Framed> {
        let mut out = self.close_run();
        self.learn(snapshot);
        let seq = snapshot.get("seq").and_then(Value::as_u64).unwrap_or(0);
        let mut value: Map<String, Value> = snapshot.clone();
        value.remove("messages");
        value.remove("state");
        // Stands for the journal up to the snapshot's seq (its SSE id).
        let custom = json!({"type": "CUSTOM", "name": "agui-gateway/snapshot", "value": value});
        if let Some(active) = self.active_run.clone() {
            for (seq, event) in prefix {
                self.follow(*seq, event);
            }
            if self.run.as_deref() != Some(active.as_str()) {
                // The run's start is no longer held: nothing known open.
                let _ = self.close_run();
                self.run = Some(active.clone());
            }
            out.push(Framed::Synthetic(self.run_started(&active)));
            out.extend(self.conversation(snapshot));
            out.extend(self.openers());
            out.push(Framed::Converted(custom));
            return out;
        }
        let run_id = format!("agui-gateway-snapshot-{seq}");
        out.push(self.start_run(&run_id));
        out.extend(self.conversation(snapshot));
        out.push(Framed::Synthetic(custom));
        out.push(Framed::Marked(
            self.finished_with_interrupts(&run_id, snapshot),
        ));
        self.run = None;
        out
    }

    /// What the viewer gets for journal event `event` (seq `seq`).
    pub fn event(&mut self, seq: u64, event: &Event) -> Vec<Framed> {
        let kind = event.kind();
        let mut out = Vec::new();
        if *kind == EventType::Meta {
            let mut value = event.body().clone();
            value.remove("type");
            let custom = json!({"type": "CUSTOM", "name": "agui-gateway/meta", "value": value});
            if self.run.is_some() {
                return vec![Framed::Converted(custom)];
            }
            let run_id = format!("agui-gateway-meta-{seq}");
            out.push(self.start_run(&run_id));
            out.push(Framed::Synthetic(custom));
            out.extend(self.close_run());
            // The run's end carries the seq: a reconnect resumes after it.
            if let Some(Framed::Synthetic(end)) = out.pop() {
                out.push(Framed::Marked(end));
            }
            return out;
        }
        match kind {
            EventType::RunStarted => {
                out.extend(self.close_run());
                self.run = Some(event.str_field("runId").unwrap_or_default().to_owned());
                self.forget_open();
                out.push(Framed::Journal);
                return out;
            }
            EventType::RunError => {
                // Allowed at any point; it ends the run as it stands.
                self.run = None;
                self.forget_open();
                out.push(Framed::Journal);
                return out;
            }
            _ => {}
        }
        if self.run.is_none() {
            // Joined mid-run (or an agent's event outside any run).
            let run_id = self
                .active_run
                .clone()
                .or_else(|| event.str_field("runId").map(str::to_owned))
                .unwrap_or_else(|| format!("agui-gateway-join-{seq}"));
            out.push(self.start_run(&run_id));
        }
        if *kind == EventType::RunFinished {
            out.extend(
                self.open
                    .closing()
                    .into_iter()
                    .map(|e| Framed::Synthetic(json!(e.body()))),
            );
            self.forget_open();
            self.run = None;
            out.push(Framed::Journal);
            return out;
        }
        if let Some((entity, role)) = Entity::of(kind) {
            let id = event.str_field(entity.id_field()).unwrap_or_default();
            let subagent = event
                .subagent_run_id()
                .filter(|_| entity != Entity::Subagent);
            if role != Role::Opens && !self.open.is_open(entity, id, subagent) {
                let name = self.tool_names.get(id).map(String::as_str);
                let opener = Event::build(entity.opener(id, subagent, name));
                self.track(&opener);
                out.push(Framed::Synthetic(json!(opener.body())));
            }
            if entity == Entity::ToolCall
                && role == Role::Opens
                && let Some(name) = event.str_field("toolCallName")
            {
                self.tool_names.insert(id.to_owned(), name.to_owned());
            }
        }
        self.track(event);
        out.push(Framed::Journal);
        out
    }

    /// Follows what `event` opens, continues or closes.
    fn track(&mut self, event: &Event) {
        self.open.track(event);
        let Some((entity, role)) = Entity::of(event.kind()) else {
            return;
        };
        let id = event.str_field(entity.id_field()).unwrap_or_default();
        let subagent = event
            .subagent_run_id()
            .filter(|_| entity != Entity::Subagent);
        let at = self.opened.iter().rposition(|o| {
            o.entity == entity
                && o.id == id
                && (entity != Entity::Step || o.subagent.as_deref() == subagent)
        });
        match (role, at) {
            (Role::Opens, _) => self.opened.push(Opened {
                entity,
                id: id.to_owned(),
                subagent: subagent.map(str::to_owned),
                start: json!(event.body()),
                args: String::new(),
            }),
            (Role::Continues, Some(i)) if entity == Entity::ToolCall => {
                self.opened[i].args += event.str_field("delta").unwrap_or_default();
            }
            (Role::Closes, Some(i)) => {
                self.opened.remove(i);
            }
            _ => {}
        }
    }

    /// Forgets what was open (its run ended or a new one started).
    fn forget_open(&mut self) {
        self.open.clear();
        self.opened.clear();
    }

    fn run_started(&self, run_id: &str) -> Value {
        json!({"type": "RUN_STARTED", "threadId": self.thread_id, "runId": run_id,
            "protocolVersion": super::PROTOCOL_VERSION})
    }

    fn start_run(&mut self, run_id: &str) -> Framed {
        self.run = Some(run_id.to_owned());
        self.forget_open();
        Framed::Synthetic(self.run_started(run_id))
    }

    /// Ends the viewer's run if one is open (closing what it left open).
    fn close_run(&mut self) -> Vec<Framed> {
        let Some(run_id) = self.run.take() else {
            return Vec::new();
        };
        let mut out: Vec<Framed> = self
            .open
            .closing()
            .into_iter()
            .map(|e| Framed::Synthetic(json!(e.body())))
            .collect();
        self.forget_open();
        out.push(Framed::Synthetic(
            json!({"type": "RUN_FINISHED", "threadId": self.thread_id, "runId": run_id}),
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::verify::Verifier;

    /// The events a viewer receives, as JSON, for a window of a journal;
    /// asserts each journal event reaches the viewer exactly once.
    fn view(framer: &mut JoinFramer, journal: &[(u64, Value)]) -> Vec<Value> {
        let mut out = Vec::new();
        for (seq, v) in journal {
            let e = Event::build(v.clone());
            let framed = framer.event(*seq, &e);
            let own = framed
                .iter()
                .filter(|f| !matches!(f, Framed::Synthetic(_)))
                .count();
            assert_eq!(own, 1, "journal event {seq} delivered once: {framed:?}");
            assert!(
                !matches!(framed.last(), Some(Framed::Synthetic(_))),
                "the frame carrying seq {seq} ends its frames: {framed:?}"
            );
            for f in framed {
                out.push(match f {
                    Framed::Journal => v.clone(),
                    Framed::Converted(v) | Framed::Synthetic(v) | Framed::Marked(v) => v,
                });
            }
        }
        out
    }

    /// The events of a snapshot start (all made up by the framer).
    fn made_up(framed: Vec<Framed>) -> Vec<Value> {
        framed
            .into_iter()
            .map(|f| match f {
                Framed::Synthetic(v) | Framed::Converted(v) | Framed::Marked(v) => v,
                Framed::Journal => unreachable!("a snapshot is not a journal event"),
            })
            .collect()
    }

    fn assert_valid(events: &[Value]) {
        let mut v = Verifier::new();
        for e in events {
            if let Err(err) = v.check(&Event::build(e.clone())) {
                panic!("invalid at {e}: {err:?}\n{events:#?}");
            }
        }
    }

    fn journal() -> Vec<(u64, Value)> {
        vec![
            (1, json!({"type":"RUN_STARTED","threadId":"t","runId":"r1"})),
            (
                2,
                json!({"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}),
            ),
            (
                3,
                json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"a"}),
            ),
            (
                4,
                json!({"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"look"}),
            ),
            (
                5,
                json!({"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"{}"}),
            ),
            (6, json!({"type":"TOOL_CALL_END","toolCallId":"c"})),
            (
                7,
                json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"b"}),
            ),
            (8, json!({"type":"TEXT_MESSAGE_END","messageId":"m"})),
            (
                9,
                json!({"type":"RUN_FINISHED","threadId":"t","runId":"r1"}),
            ),
            (
                10,
                json!({"type":"META","id":"x","metaType":"thumbs_up","payload":{}}),
            ),
            (
                11,
                json!({"type":"RUN_STARTED","threadId":"t","runId":"r2"}),
            ),
            (
                12,
                json!({"type":"META","id":"y","metaType":"note","payload":{}}),
            ),
            (
                13,
                json!({"type":"RUN_FINISHED","threadId":"t","runId":"r2"}),
            ),
        ]
    }

    #[test]
    fn every_start_position_is_a_valid_stream() {
        let all = journal();
        for start in 0..all.len() {
            let mut framer = JoinFramer::new("t", &Map::new());
            assert_valid(&view(&mut framer, &all[start..]));
        }
    }

    #[test]
    fn meta_between_runs_is_wrapped_and_converted() {
        let mut framer = JoinFramer::new("t", &Map::new());
        let got = view(&mut framer, &journal()[8..11]);
        let types: Vec<&str> = got.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "RUN_STARTED",
                "RUN_FINISHED",
                "RUN_STARTED",
                "CUSTOM",
                "RUN_FINISHED",
                "RUN_STARTED"
            ]
        );
        assert_eq!(got[2]["runId"], "agui-gateway-meta-10");
        assert_eq!(got[3]["name"], "agui-gateway/meta");
        assert_eq!(got[3]["value"]["metaType"], "thumbs_up");
    }

    #[test]
    fn mid_run_join_reopens_what_it_never_saw() {
        let context = json!({"run": {"runId": "r1", "status": "running"},
            "messages": [{"id":"m","role":"assistant","content":"a","toolCalls":[{"id":"c","type":"function","function":{"name":"look","arguments":""}}]}]});
        let mut framer = JoinFramer::new("t", context.as_object().unwrap());
        let got = view(&mut framer, &journal()[4..9]);
        assert_valid(&got);
        assert_eq!(
            got[0],
            json!({"type":"RUN_STARTED","threadId":"t","runId":"r1","protocolVersion":crate::protocol::PROTOCOL_VERSION}),
            "a run the join stream opens declares the gateway's version"
        );
        assert_eq!(got[1]["type"], "TOOL_CALL_START");
        assert_eq!(got[1]["toolCallName"], "look", "name from the snapshot");
        assert!(got.iter().any(|e| e["type"] == "TEXT_MESSAGE_START"));
    }

    #[test]
    fn snapshot_start_is_a_run_with_pending_interrupts_as_outcome() {
        let snap = json!({"threadId":"t","seq":42,"messages":[{"id":"u","role":"user","content":"hi"}],
            "state":{"k":1},"interrupts":[{"id":"i1","reason":"approve"}],
            "run":{"runId":"r9","status":"interrupted"},"reset":true});
        let mut framer = JoinFramer::new("t", &Map::new());
        let mut got = made_up(framer.snapshot(snap.as_object().unwrap(), &[]));
        got.extend(view(&mut framer, &journal()[9..]));
        assert_valid(&got);
        assert_eq!(got[0]["runId"], "agui-gateway-snapshot-42");
        assert_eq!(got[1]["messages"][0]["id"], "u");
        assert_eq!(got[2]["snapshot"], json!({"k":1}));
        assert_eq!(got[3]["value"]["run"]["runId"], "r9");
        assert!(got[3]["value"].get("messages").is_none());
        assert_eq!(got[4]["outcome"]["interrupts"][0]["id"], "i1");
    }

    #[test]
    fn snapshot_of_a_running_run_stays_open_for_the_live_events() {
        let snap = json!({"threadId":"t","seq":3,"messages":[{"id":"m","role":"assistant","content":"a"}],
            "state":{},"interrupts":[],"run":{"runId":"r1","status":"running"}});
        let mut framer = JoinFramer::new("t", &Map::new());
        let all = journal();
        let prefix: Vec<(u64, Event)> = all[..3]
            .iter()
            .map(|(s, v)| (*s, Event::build(v.clone())))
            .collect();
        let prefix: Vec<(u64, &Event)> = prefix.iter().map(|(s, e)| (*s, e)).collect();
        let mut got = made_up(framer.snapshot(snap.as_object().unwrap(), &prefix));
        got.extend(view(&mut framer, &all[3..]));
        assert_valid(&got);
        assert_eq!(got[0]["runId"], "r1");
        assert_eq!(
            got[3],
            json!({"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}),
            "the message the run holds open is opened again"
        );
        assert_eq!(got.iter().filter(|e| e["type"] == "RUN_STARTED").count(), 3);
    }

    /// The frames a viewer that started at 0 got, as (seq carried, event).
    fn framed_from_zero(all: &[(u64, Value)]) -> Vec<(Option<u64>, Value)> {
        let mut framer = JoinFramer::new("t", &Map::new());
        let mut out = Vec::new();
        for (seq, v) in all {
            for f in framer.event(*seq, &Event::build(v.clone())) {
                out.push(match f {
                    Framed::Journal => (Some(*seq), v.clone()),
                    Framed::Converted(v) | Framed::Marked(v) => (Some(*seq), v),
                    Framed::Synthetic(v) => (None, v),
                });
            }
        }
        out
    }

    fn followed(all: &[(u64, Value)], upto: u64) -> JoinFramer {
        let mut framer = JoinFramer::new("t", &Map::new());
        for (seq, v) in all.iter().filter(|(s, _)| *s <= upto) {
            framer.follow(*seq, &Event::build(v.clone()));
        }
        framer
    }

    /// A reconnect at any seq the stream carried goes on exactly as the
    /// first connection would have: no frame twice, none missing.
    #[test]
    fn a_reconnect_at_every_cursor_continues_the_same_stream() {
        let all = journal();
        let whole = framed_from_zero(&all);
        for (i, (id, _)) in whole.iter().enumerate() {
            let Some(n) = id else { continue };
            let mut framer = followed(&all, *n);
            let mut resumed: Vec<Value> = whole[..=i].iter().map(|(_, v)| v.clone()).collect();
            resumed.extend(view(&mut framer, &all[*n as usize..]));
            let expected: Vec<Value> = whole.iter().map(|(_, v)| v.clone()).collect();
            assert_eq!(resumed, expected, "reconnect at {n}");
        }
    }

    /// A fresh start at any seq is a valid stream on its own, with a tool
    /// call joined mid-arguments re-opened with its whole arguments.
    #[test]
    fn a_fresh_start_at_every_cursor_is_valid_and_reopens_whole_arguments() {
        let mut all = journal();
        // Arguments in two deltas: a start between them is mid-arguments.
        all.insert(
            4,
            (
                5,
                json!({"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"{\"q\":"}),
            ),
        );
        for (i, (seq, v)) in all.iter_mut().enumerate() {
            *seq = i as u64 + 1;
            if v["toolCallId"] == "c" && v["type"] == "TOOL_CALL_ARGS" && v["delta"] == "{}" {
                v["delta"] = json!("1}");
            }
        }
        let at = json!({"messages": [{"id":"m","role":"assistant","content":"a",
            "toolCalls":[{"id":"c","type":"function","function":{"name":"look","arguments":"{\"q\":"}}]}],
            "state": {}});
        for n in 0..all.len() as u64 {
            let mut framer = followed(&all, n);
            let mut got = made_up(framer.reopen(at.as_object().unwrap()));
            got.extend(view(&mut framer, &all[n as usize..]));
            assert_valid(&got);
            if n == 5 {
                let args: String = got
                    .iter()
                    .filter(|e| e["type"] == "TOOL_CALL_ARGS")
                    .map(|e| e["delta"].as_str().unwrap())
                    .collect();
                assert_eq!(args, "{\"q\":1}", "{got:#?}");
                let snap = got
                    .iter()
                    .find(|e| e["type"] == "MESSAGES_SNAPSHOT")
                    .unwrap();
                assert!(
                    snap["messages"][0].get("toolCalls").is_none(),
                    "the open call is not in the snapshot: {snap}"
                );
            }
        }
    }

    #[test]
    fn cursors_read_plain_seqs_and_seqs_with_an_epoch() {
        assert_eq!(
            Cursor::parse("12"),
            Some(Cursor {
                seq: 12,
                epoch: None
            })
        );
        let c = Cursor::parse("12.ab12cd34").unwrap();
        assert_eq!((c.seq, c.epoch.as_deref()), (12, Some("ab12cd34")));
        assert_eq!(Cursor::text(12, Some("ab12cd34")), "12.ab12cd34");
        assert_eq!(Cursor::text(12, None), "12");
        for bad in ["", "x", "12.", "12.a-b", "-1", "12.ab.cd"] {
            assert_eq!(Cursor::parse(bad), None, "{bad}");
        }
        assert!(c.from_other_history(Some("ffffffff")));
        assert!(!c.from_other_history(Some("ab12cd34")));
        assert!(!c.from_other_history(None), "a store without epochs");
        assert!(
            !Cursor::parse("12")
                .unwrap()
                .from_other_history(Some("ab12cd34"))
        );
    }
}
