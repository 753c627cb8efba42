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
//!   when the thread's run is still going, no end: the live run continues it);
//! - an event between runs (a meta event) is wrapped in a one-event run whose
//!   id is `agui-gateway-meta-<seq>`;
//! - a start in the middle of a run opens that run (`RUN_STARTED` with its
//!   id), and any message, tool call, reasoning span, step or subagent the
//!   viewer never saw open is opened right before its first event;
//! - anything still open when the run finishes is closed before
//!   `RUN_FINISHED` (it cannot happen on a verified journal, but a policy
//!   that hides events from one viewer must not break that viewer's stream).
//!
//! Journal events pass byte-for-byte; `META` becomes
//! `CUSTOM agui-gateway/meta` (stock 1.0 clients drop the draft type).
//! Synthetic events carry no SSE `id`, so `Last-Event-ID` stays a journal seq.

use super::event::{Event, EventType};
use super::open::{Entity, OpenEntities, Role};
use serde_json::{Map, Value, json};
use std::collections::HashMap;

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

    /// The stream's start from a snapshot object (the `snapshot` frame
    /// without `type`): a run of its own, or the opening of the running run.
    pub fn snapshot(&mut self, snapshot: &Map<String, Value>) -> Vec<Framed> {
        self.learn(snapshot);
        let mut out = self.close_run();
        let seq = snapshot.get("seq").and_then(Value::as_u64).unwrap_or(0);
        let run_id = self
            .active_run
            .clone()
            .unwrap_or_else(|| format!("agui-gateway-snapshot-{seq}"));
        out.push(self.start_run(&run_id));
        let field = |k: &str| snapshot.get(k).cloned().unwrap_or(Value::Null);
        out.push(Framed::Synthetic(
            json!({"type": "MESSAGES_SNAPSHOT", "messages": field("messages")}),
        ));
        out.push(Framed::Synthetic(
            json!({"type": "STATE_SNAPSHOT", "snapshot": field("state")}),
        ));
        let mut value: Map<String, Value> = snapshot.clone();
        value.remove("messages");
        value.remove("state");
        // Stands for the journal up to the snapshot's seq (its SSE id).
        out.push(Framed::Converted(
            json!({"type": "CUSTOM", "name": "agui-gateway/snapshot", "value": value}),
        ));
        if self.active_run.is_none() {
            let interrupts = snapshot
                .get("interrupts")
                .and_then(Value::as_array)
                .filter(|i| !i.is_empty());
            let mut finished =
                json!({"type": "RUN_FINISHED", "threadId": self.thread_id, "runId": run_id});
            if let Some(i) = interrupts {
                finished["outcome"] = json!({"type": "interrupt", "interrupts": i});
            }
            out.push(Framed::Synthetic(finished));
            self.run = None;
        }
        out
    }

    /// What the viewer gets for journal event `event` (seq `seq`).
    pub fn event(&mut self, seq: u64, event: &Event) -> Vec<Framed> {
        let kind = event.kind();
        let mut out = Vec::new();
        if *kind == EventType::Meta {
            let mut value = event.body().clone();
            value.remove("type");
            let custom = Framed::Converted(
                json!({"type": "CUSTOM", "name": "agui-gateway/meta", "value": value}),
            );
            if self.run.is_some() {
                return vec![custom];
            }
            let run_id = format!("agui-gateway-meta-{seq}");
            out.push(self.start_run(&run_id));
            out.push(custom);
            out.extend(self.close_run());
            return out;
        }
        match kind {
            EventType::RunStarted => {
                out.extend(self.close_run());
                self.run = Some(event.str_field("runId").unwrap_or_default().to_owned());
                self.open.clear();
                out.push(Framed::Journal);
                return out;
            }
            EventType::RunError => {
                // Allowed at any point; it ends the run as it stands.
                self.run = None;
                self.open.clear();
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
            self.open.clear();
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
                self.open.track(&opener);
                out.push(Framed::Synthetic(json!(opener.body())));
            }
            if entity == Entity::ToolCall
                && role == Role::Opens
                && let Some(name) = event.str_field("toolCallName")
            {
                self.tool_names.insert(id.to_owned(), name.to_owned());
            }
        }
        self.open.track(event);
        out.push(Framed::Journal);
        out
    }

    fn start_run(&mut self, run_id: &str) -> Framed {
        self.run = Some(run_id.to_owned());
        self.open.clear();
        Framed::Synthetic(
            json!({"type": "RUN_STARTED", "threadId": self.thread_id, "runId": run_id,
                "protocolVersion": super::PROTOCOL_VERSION}),
        )
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
        self.open.clear();
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
            for f in framed {
                out.push(match f {
                    Framed::Journal => v.clone(),
                    Framed::Converted(v) | Framed::Synthetic(v) => v,
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
                Framed::Synthetic(v) | Framed::Converted(v) => v,
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
        let mut got = made_up(framer.snapshot(snap.as_object().unwrap()));
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
        let mut got = made_up(framer.snapshot(snap.as_object().unwrap()));
        got.extend(view(&mut framer, &journal()[3..]));
        assert_valid(&got);
        assert_eq!(got[0]["runId"], "r1");
        assert_eq!(got.iter().filter(|e| e["type"] == "RUN_STARTED").count(), 3);
    }
}
