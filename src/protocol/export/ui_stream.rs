//! AG-UI events → AI SDK UI message stream chunks (protocol `v1`, as read
//! by the `Chat` of `ai` 5, 6 and 7), one event at a time.
//!
//! One AG-UI run is one assistant response: `start` + `start-step` at
//! `RUN_STARTED`, then text, reasoning and tool chunks as the events come
//! (`text-start` waits for a text message's first delta: an empty one, as
//! agents send before tool calls, makes no part),
//! `data-*` parts for what has no AI SDK counterpart (state, activity,
//! custom and meta events), and at the end `finish-step` + `finish` (or
//! `error`, or `abort` for a cancelled run). What the agent says after
//! calling tools is a new step (`finish-step` + `start-step`), as the SDK's
//! own agents stream it and as the export cuts it
//! ([`super::ai_sdk::ui_messages`]). The response's message id is the
//! export's ([`super::ai_sdk::answer_id`] of the user message it answers).
//!
//! Every interrupt becomes a `data-interrupt` part (id = interrupt id, data
//! = the interrupt): the one chunk every version accepts — `ai` 5 fails the
//! whole chat on a chunk type it does not know, and has no approvals. A
//! client that says it runs `ai` 6 or later
//! ([`UiStream::with_approval_requests`]) also gets a
//! `tool-approval-request` (approval id = interrupt id) for each interrupt
//! that waits on a tool call of the run.
//!
//! A run that hands the thread to another agent (docs/protocol.md,
//! "Handoff") goes on in the same response when the gateway says so
//! ([`UiStream::continues`]): the first run's `RUN_FINISHED` closes only its
//! step, the next run's `RUN_STARTED` opens the next step of the SAME
//! assistant message (no second `start`), answers the transfer tool call
//! with the result that run's input carries, and the gateway's handoff
//! record becomes a `data-agent` part (`{agent, from, reason, result}`) and
//! a `message-metadata` chunk naming the agent now speaking (`start` names
//! the first one). So one user turn is one message, however many agents
//! answered it, as the export writes it.
//!
//! Agents that deliver a message whole in `MESSAGES_SNAPSHOT` instead of
//! streaming it (LangGraph nodes that return an `AIMessage` without a chat
//! model, say) would otherwise show nothing in the chat: an assistant
//! message's text that the snapshot is the first to carry becomes one
//! `text-start`/`text-delta`/`text-end`. "First" means neither known before
//! the run ([`UiStream::before_run_snapshot`], [`UiStream::before_run`]) nor
//! streamed in it, so history is never sent again.

use super::ai_sdk::answer_id;
use super::parse_args;
use crate::protocol::authorship::GATEWAY_FIELD;
use crate::protocol::event::{Event, EventType};
use crate::protocol::handoff::HANDOFF_EVENT;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};

/// Translates one run's events (see the module docs).
#[derive(Debug)]
pub struct UiStream {
    /// The assistant message id sent with `start` (`None`: the client picks).
    message_id: Option<String>,
    /// The shared state as the client should see it (`data-state`).
    state: Value,
    started: bool,
    done: bool,
    /// Tool calls of this run: id → (name, arguments so far).
    tools: HashMap<String, (String, String)>,
    /// Activity contents, by message id, for `ACTIVITY_DELTA`.
    activities: HashMap<String, Value>,
    /// Text messages whose `text-start` was sent: it waits for the first
    /// delta, so a text message without content (one that only carries tool
    /// calls) leaves no empty text part.
    texts: HashSet<String>,
    /// Message ids the client has or will have from events: the thread's
    /// before the run, and those this run streamed. A `MESSAGES_SNAPSHOT`
    /// sends only the text of assistant messages not in here.
    known: HashSet<String>,
    /// Send `tool-approval-request` chunks (the client runs `ai` 6+).
    approval_requests: bool,
    /// The message whose tool calls the current step made, if it made any:
    /// anything the agent says in another message is the next step.
    step_tools: Option<String>,
    /// The newest user message known, which the response answers.
    last_user: Option<String>,
    /// The agent speaking now (message metadata `agent`), once known.
    agent: Option<String>,
    /// Every agent that spoke in this message, in order.
    agents: Vec<String>,
    /// Who started the run this message began with (metadata `startedBy`),
    /// or who answered the interrupt it continues from (`answeredBy`), as
    /// the run's journaled stamp says: the export's attribution.
    started_by: Option<String>,
    answered_by: Vec<Value>,
    /// The gateway said the current run hands over: its `RUN_FINISHED`
    /// ends a step, not the message.
    continues: bool,
    /// Between a run that handed over and the next run's first event.
    handing_over: bool,
}

impl UiStream {
    /// A translator for one run, `{}` its state until told otherwise
    /// ([`UiStream::before_run_snapshot`], [`UiStream::before_run`]).
    pub fn new(message_id: Option<String>) -> UiStream {
        UiStream {
            message_id,
            state: json!({}),
            started: false,
            done: false,
            tools: HashMap::new(),
            activities: HashMap::new(),
            texts: Default::default(),
            known: Default::default(),
            approval_requests: false,
            step_tools: None,
            last_user: None,
            agent: None,
            agents: Vec::new(),
            started_by: None,
            answered_by: Vec::new(),
            continues: false,
            handing_over: false,
        }
    }

    /// Names the agent the response starts with (the chat route's); else
    /// the first journaled `RUN_STARTED`'s stamp names it.
    pub fn with_agent(mut self, agent: &str) -> UiStream {
        self.speaks(agent);
        self
    }

    /// Names who started the run this response begins with (the chat
    /// route's caller): the requester's copy of `RUN_STARTED` is the
    /// agent's own, without the journal's stamp.
    pub fn with_started_by(mut self, by: &str) -> UiStream {
        self.started_by = Some(by.to_owned());
        self
    }

    /// Names who answered the interrupts this response continues from, by
    /// the answering run (`answeredBy`, as `/runs` lists it).
    pub fn with_answer(mut self, run_id: &str, by: &str) -> UiStream {
        self.answered_by.push(json!({"runId": run_id, "by": by}));
        self
    }

    fn speaks(&mut self, agent: &str) {
        self.agent = Some(agent.to_owned());
        if self.agents.last().map(String::as_str) != Some(agent) {
            self.agents.push(agent.to_owned());
        }
    }

    fn metadata(&self) -> Value {
        let mut m = json!({"agent": self.agent, "agents": self.agents});
        if let Some(by) = &self.started_by {
            m["startedBy"] = by.clone().into();
        }
        if !self.answered_by.is_empty() {
            m["answeredBy"] = self.answered_by.clone().into();
        }
        m
    }

    /// Who started the run opening this response, from its journaled
    /// stamp: a run that answers interrupts (a resume, or a regenerate
    /// carrying the base's answers) names who answered, any other who
    /// started the message.
    fn attribute(&mut self, event: &Event) {
        if self.started_by.is_some() || !self.answered_by.is_empty() {
            return;
        }
        let Some(stamp) = event.get(GATEWAY_FIELD) else {
            return;
        };
        let Some(by) = stamp.get("by").and_then(Value::as_str) else {
            return;
        };
        let resumes = event
            .get("input")
            .and_then(|i| i.get("resume"))
            .is_some_and(|r| !r.is_null());
        match stamp.get("kind").and_then(Value::as_str) {
            Some("resume") => {}
            Some("regenerate") if resumes => {}
            _ => {
                self.started_by = Some(by.to_owned());
                return;
            }
        }
        self.answered_by
            .push(json!({"runId": event.get("runId"), "by": by}));
    }

    /// The tool calls (id, name) of the message this response continues
    /// (an approval's answer): an approved transfer's run answers its call.
    pub fn with_open_calls(
        mut self,
        calls: impl IntoIterator<Item = (String, String)>,
    ) -> UiStream {
        for (id, name) in calls {
            self.tools.insert(id, (name, String::new()));
        }
        self
    }

    /// The gateway hands the thread over after the current run (its outbox
    /// got [`crate::thread::fanout::Outgoing::Continues`] ahead of the
    /// run's end): the next run goes on in this message.
    pub fn continues(&mut self) {
        self.continues = true;
    }

    /// The chunks that end the message when the stream ends without a
    /// terminal event after a run that handed over (the next run never
    /// started): the message still finishes. Nothing otherwise.
    pub fn close(&mut self) -> Vec<Value> {
        if !self.handing_over || self.done {
            return Vec::new();
        }
        self.done = true;
        vec![json!({"type": "finish", "finishReason": "stop"})]
    }

    /// Also sends `tool-approval-request` chunks, which only `ai` 6 and
    /// later accept (see the module docs).
    pub fn with_approval_requests(mut self, yes: bool) -> UiStream {
        self.approval_requests = yes;
        self
    }

    /// Notes the user messages among AG-UI `messages`: the newest is the one
    /// the response answers (its id names the response when the chat route
    /// did not).
    fn users(&mut self, messages: Option<&Value>) {
        let messages = messages.and_then(Value::as_array).into_iter().flatten();
        if let Some(id) = messages
            .rev()
            .filter(|m| m["role"] == "user")
            .find_map(|m| m["id"].as_str())
        {
            self.last_user = Some(id.to_owned());
        }
    }

    /// Learns the thread as it was before the run from a snapshot (the
    /// gateway's `{messages, state}`): deltas apply to its state, and a
    /// `MESSAGES_SNAPSHOT` repeating its messages sends nothing.
    pub fn before_run_snapshot(&mut self, snapshot: &Value) {
        if let Some(state) = snapshot.get("state") {
            self.state = state.clone();
        }
        self.users(snapshot.get("messages"));
        self.known_messages(message_ids(snapshot.get("messages")));
    }

    fn known_messages<'a>(&mut self, ids: impl IntoIterator<Item = &'a str>) {
        ids.into_iter().for_each(|id| self.know(Some(id)));
    }

    /// Notes a message id; per streamed event, so it allocates only for a
    /// message not seen yet.
    fn know(&mut self, id: Option<&str>) {
        if let Some(id) = id
            && !self.known.contains(id)
        {
            self.known.insert(id.to_owned());
        }
    }

    /// Learns from an event before the run (a reconnect replays the thread
    /// from its start): the messages it names and the state it sets, sending
    /// nothing.
    pub fn before_run(&mut self, event: &Event) {
        let b = event.body();
        match event.kind() {
            EventType::StateSnapshot | EventType::StateDelta => {
                self.apply_state(event);
            }
            EventType::MessagesSnapshot => {
                self.users(b.get("messages"));
                self.known_messages(message_ids(b.get("messages")))
            }
            EventType::RunStarted => self.users(event.get("input").and_then(|i| i.get("messages"))),
            _ => self.know(message_of(b)),
        }
    }

    /// True once the run's terminal event was translated.
    pub fn done(&self) -> bool {
        self.done
    }

    /// The opening chunks (`start`, `start-step`), once.
    pub fn open(&mut self) -> Vec<Value> {
        if self.started {
            return Vec::new();
        }
        self.started = true;
        let mut start = json!({"type": "start"});
        let id = (self.message_id.clone()).or_else(|| self.last_user.as_deref().map(answer_id));
        if let Some(id) = id {
            start["messageId"] = id.into();
        }
        if self.agent.is_some() {
            start["messageMetadata"] = self.metadata();
        }
        vec![start, json!({"type": "start-step"})]
    }

    /// Before the agent says something in `message`: a new step when the
    /// current one called tools from another message.
    fn says(&mut self, message: &str, out: &mut Vec<Value>) {
        if self
            .step_tools
            .as_deref()
            .is_some_and(|tools| tools != message)
        {
            self.step_tools = None;
            out.push(json!({"type": "finish-step"}));
            out.push(json!({"type": "start-step"}));
        }
    }

    /// The chunks for one event (none for events the AI SDK has no use for).
    pub fn event(&mut self, event: &Event) -> Vec<Value> {
        let b = event.body();
        let s = |k: &str| b.get(k).and_then(Value::as_str).unwrap_or_default();
        if event.kind() == &EventType::RunStarted && !self.started {
            // The user message it answers names the response.
            self.users(event.get("input").and_then(|i| i.get("messages")));
            if self.agent.is_none()
                && let Some(agent) = stamped_agent(event)
            {
                self.speaks(&agent);
            }
            self.attribute(event);
        }
        let first = !self.started;
        let mut out = self.open();
        if event.kind() == &EventType::RunStarted {
            if std::mem::take(&mut self.handing_over) {
                self.next_run(event, &mut out);
                out.push(json!({"type": "start-step"}));
            } else if first && is_handoff_run(event) {
                // A handoff's run opening this response (an approved
                // transfer): it answers the transfer call of the message
                // the response continues.
                self.next_run(event, &mut out);
            }
        }
        self.know(message_of(b));
        use EventType::*;
        match event.kind() {
            TextMessageContent => {
                let id = s("messageId");
                if !self.texts.contains(id) {
                    self.says(id, &mut out);
                    self.texts.insert(id.to_owned());
                    out.push(json!({"type": "text-start", "id": id}));
                }
                out.push(json!({"type": "text-delta", "id": id, "delta": s("delta")}));
            }
            TextMessageEnd if self.texts.remove(s("messageId")) => {
                out.push(json!({"type": "text-end", "id": s("messageId")}));
            }
            ReasoningMessageStart | ThinkingTextMessageStart => {
                self.says(reasoning_id(b), &mut out);
                out.push(json!({"type": "reasoning-start", "id": reasoning_id(b)}))
            }
            ReasoningMessageContent | ThinkingTextMessageContent => out.push(
                json!({"type": "reasoning-delta", "id": reasoning_id(b), "delta": s("delta")}),
            ),
            ReasoningMessageEnd | ThinkingTextMessageEnd => {
                out.push(json!({"type": "reasoning-end", "id": reasoning_id(b)}))
            }
            ToolCallStart => {
                let (id, name) = (s("toolCallId"), s("toolCallName"));
                // A call without a parent message is a message of its own
                // (as the fold makes it).
                let message = b
                    .get("parentMessageId")
                    .and_then(Value::as_str)
                    .unwrap_or(id);
                self.says(message, &mut out);
                self.step_tools = Some(message.to_owned());
                self.tools
                    .insert(id.to_owned(), (name.to_owned(), String::new()));
                out.push(json!({"type": "tool-input-start", "toolCallId": id, "toolName": name}));
            }
            ToolCallArgs => {
                let id = s("toolCallId");
                if let Some((_, args)) = self.tools.get_mut(id) {
                    args.push_str(s("delta"));
                }
                out.push(
                    json!({"type": "tool-input-delta", "toolCallId": id, "inputTextDelta": s("delta")}),
                );
            }
            ToolCallEnd => {
                let id = s("toolCallId");
                let (name, args) = self.tools.get(id).cloned().unwrap_or_default();
                out.push(json!({"type": "tool-input-available", "toolCallId": id,
                    "toolName": name, "input": parse_args(&args)}));
            }
            ToolCallResult => {
                let id = s("toolCallId");
                match b.get("error").and_then(Value::as_str) {
                    Some(e) => out.push(
                        json!({"type": "tool-output-error", "toolCallId": id, "errorText": e}),
                    ),
                    None => out.push(json!({"type": "tool-output-available", "toolCallId": id,
                        "output": b.get("content").cloned().unwrap_or(Value::Null)})),
                }
            }
            StateSnapshot | StateDelta if self.apply_state(event) => out.push(self.state_part()),
            MessagesSnapshot => {
                let messages = b.get("messages").and_then(Value::as_array);
                for m in messages.into_iter().flatten() {
                    let Some(id) = m["id"].as_str() else { continue };
                    if !self.known.insert(id.to_owned()) || m["role"] != "assistant" {
                        continue;
                    }
                    if let Some(text) = m["content"].as_str().filter(|t| !t.is_empty()) {
                        self.says(id, &mut out);
                        out.push(json!({"type": "text-start", "id": id}));
                        out.push(json!({"type": "text-delta", "id": id, "delta": text}));
                        out.push(json!({"type": "text-end", "id": id}));
                    }
                }
            }
            ActivitySnapshot => {
                let id = s("messageId").to_owned();
                let content = b.get("content").cloned().unwrap_or(json!({}));
                self.activities.insert(id.clone(), content.clone());
                out.push(json!({"type": "data-activity", "id": id,
                    "data": {"activityType": b.get("activityType"), "content": content}}));
            }
            ActivityDelta => {
                let id = s("messageId");
                if let (Some(content), Some(ops)) = (
                    self.activities.get_mut(id),
                    b.get("patch")
                        .cloned()
                        .and_then(|p| serde_json::from_value::<json_patch::Patch>(p).ok()),
                ) && crate::protocol::json_patch_atomic::apply(content, &ops)
                {
                    out.push(json!({"type": "data-activity", "id": id,
                        "data": {"activityType": b.get("activityType"), "content": content}}));
                }
            }
            Custom => {
                if s("name") == HANDOFF_EVENT {
                    self.handoff(b.get("value").unwrap_or(&Value::Null), &mut out);
                }
                out.push(json!({"type": "data-custom",
                    "data": {"name": b.get("name"), "value": b.get("value")}}))
            }
            Meta => out.push(json!({"type": "data-meta", "data": b})),
            RunFinished => {
                let outcome = b.get("outcome");
                let kind = outcome.and_then(|o| o.get("type")).and_then(Value::as_str);
                let interrupts = outcome
                    .and_then(|o| o.get("interrupts"))
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                if std::mem::take(&mut self.continues) && interrupts.is_empty() {
                    // The next agent's run goes on in this message.
                    self.handing_over = true;
                    self.step_tools = None;
                    out.push(json!({"type": "finish-step"}));
                    return out;
                }
                let mut approvals = false;
                for i in &interrupts {
                    out.push(json!({"type": "data-interrupt", "id": i["id"], "data": i}));
                    match i["toolCallId"].as_str() {
                        Some(call) if self.tools.contains_key(call) => {
                            approvals = true;
                            if self.approval_requests {
                                let mut req = json!({"type": "tool-approval-request",
                                    "approvalId": i["id"], "toolCallId": call});
                                if let Some(reason) = i["message"].as_str().or(i["reason"].as_str())
                                {
                                    req["reason"] = reason.into();
                                }
                                out.push(req);
                            }
                        }
                        _ => {}
                    }
                }
                out.push(json!({"type": "finish-step"}));
                self.done = true;
                if kind == Some("cancelled") {
                    out.push(json!({"type": "abort", "reason": "cancelled"}));
                } else {
                    let reason = match kind {
                        Some("interrupt") if approvals => "tool-calls",
                        Some("interrupt") => "other",
                        _ => "stop",
                    };
                    out.push(json!({"type": "finish", "finishReason": reason}));
                }
            }
            RunError => {
                self.done = true;
                let code = b.get("code").and_then(Value::as_str);
                let message = s("message");
                let text = match code {
                    Some(c) => format!("{message} ({c})"),
                    None => message.to_owned(),
                };
                out.push(json!({"type": "error", "errorText": text}));
            }
            _ => {}
        }
        out
    }

    /// The `RUN_STARTED` of the run a handoff started, in the message of the
    /// run that handed over: the transfer calls its input answers get their
    /// output.
    fn next_run(&mut self, event: &Event, out: &mut Vec<Value>) {
        let messages = event.get("input").and_then(|i| i.get("messages"));
        for m in messages.and_then(Value::as_array).into_iter().flatten() {
            let call = m["toolCallId"].as_str().unwrap_or_default();
            if m["role"] == "tool" && self.tools.contains_key(call) {
                out.push(json!({"type": "tool-output-available", "toolCallId": call,
                    "output": m.get("content").cloned().unwrap_or(Value::Null)}));
            }
            self.know(m["id"].as_str());
        }
    }

    /// The gateway's record of a handoff: the agent now speaking, as a
    /// `data-agent` part where the switch happened and as message metadata;
    /// a transfer that failed answers its call with the failure (the next
    /// run never started, so no input carried the result).
    fn handoff(&mut self, record: &Value, out: &mut Vec<Value>) {
        let field = |k: &str| record.get(k).and_then(Value::as_str);
        let call = field("toolCallId");
        match field("result") {
            Some("accepted") => {
                if let Some(to) = field("toAgent") {
                    self.speaks(to);
                    out.push(json!({"type": "data-agent", "data": {"agent": to,
                        "from": record.get("fromAgent"), "reason": record.get("reason"),
                        "runId": record.get("toRunId"), "result": "accepted"}}));
                    out.push(
                        json!({"type": "message-metadata", "messageMetadata": self.metadata()}),
                    );
                }
            }
            Some(result) => {
                if let Some(call) = call.filter(|c| self.tools.contains_key(*c)) {
                    let to = field("toAgent").unwrap_or_default();
                    out.push(json!({"type": "tool-output-error", "toolCallId": call,
                        "errorText": format!("The transfer to '{to}' {result}.")}));
                }
            }
            None => {}
        }
    }

    /// Applies a `STATE_SNAPSHOT` or `STATE_DELTA`; false when a delta does
    /// not apply (the client keeps the state it has).
    fn apply_state(&mut self, event: &Event) -> bool {
        let b = event.body();
        if event.kind() == &EventType::StateSnapshot {
            self.state = b.get("snapshot").cloned().unwrap_or(Value::Null);
            return true;
        }
        let patched = b
            .get("delta")
            .cloned()
            .and_then(|d| serde_json::from_value::<json_patch::Patch>(d).ok())
            .and_then(|ops| {
                let mut next = self.state.clone();
                crate::protocol::json_patch_atomic::apply(&mut next, &ops).then_some(next)
            });
        match patched {
            Some(next) => {
                self.state = next;
                true
            }
            None => false,
        }
    }

    fn state_part(&self) -> Value {
        json!({"type": "data-state", "id": "state", "data": self.state})
    }
}

/// The agent a journaled `RUN_STARTED` names (the gateway's stamp).
fn stamped_agent(event: &Event) -> Option<String> {
    event
        .get(GATEWAY_FIELD)
        .and_then(|g| g.get("agent"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// True for the journaled `RUN_STARTED` of a run a handoff started.
fn is_handoff_run(event: &Event) -> bool {
    event
        .get(GATEWAY_FIELD)
        .and_then(|g| g.get("kind"))
        .and_then(Value::as_str)
        == Some("handoff")
}

/// The `id`s of an AG-UI `Message[]`.
fn message_ids(messages: Option<&Value>) -> impl Iterator<Item = &str> {
    let messages = messages.and_then(Value::as_array);
    messages
        .into_iter()
        .flatten()
        .filter_map(|m| m["id"].as_str())
}

/// The message a streamed event belongs to: a text or reasoning message's
/// `messageId`, a tool call's `parentMessageId`, a tool result's message.
fn message_of(b: &serde_json::Map<String, Value>) -> Option<&str> {
    b.get("messageId")
        .or_else(|| b.get("parentMessageId"))
        .and_then(Value::as_str)
}

/// A reasoning message's id (`messageId`; pre-1.0 thinking events have none).
fn reasoning_id(b: &serde_json::Map<String, Value>) -> &str {
    b.get("messageId")
        .and_then(Value::as_str)
        .unwrap_or("thinking")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(events: Vec<Value>, state: Value) -> Vec<Value> {
        let mut t = UiStream::new(Some("m".into()));
        t.before_run_snapshot(&json!({"state": state}));
        events
            .into_iter()
            .flat_map(|e| t.event(&Event::build(e)))
            .collect()
    }

    #[test]
    fn a_run_translates_chunk_by_chunk() {
        let chunks = run(
            vec![
                json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r"}),
                json!({"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/n", "value": 1}]}),
                json!({"type": "REASONING_MESSAGE_START", "messageId": "r1", "role": "reasoning"}),
                json!({"type": "REASONING_MESSAGE_CONTENT", "messageId": "r1", "delta": "hm"}),
                json!({"type": "REASONING_MESSAGE_END", "messageId": "r1"}),
                json!({"type": "TEXT_MESSAGE_START", "messageId": "a", "role": "assistant"}),
                json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "a", "delta": "hi"}),
                json!({"type": "TEXT_MESSAGE_END", "messageId": "a"}),
                json!({"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "go"}),
                json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "{\"x\":"}),
                json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "1}"}),
                json!({"type": "TOOL_CALL_END", "toolCallId": "c"}),
                json!({"type": "TOOL_CALL_RESULT", "messageId": "t1", "toolCallId": "c", "content": "ok"}),
                json!({"type": "CUSTOM", "name": "n", "value": 2}),
                json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "outcome": {"type": "success"}}),
            ],
            json!({}),
        );
        assert_eq!(
            chunks,
            vec![
                json!({"type": "start", "messageId": "m"}),
                json!({"type": "start-step"}),
                json!({"type": "data-state", "id": "state", "data": {"n": 1}}),
                json!({"type": "reasoning-start", "id": "r1"}),
                json!({"type": "reasoning-delta", "id": "r1", "delta": "hm"}),
                json!({"type": "reasoning-end", "id": "r1"}),
                json!({"type": "text-start", "id": "a"}),
                json!({"type": "text-delta", "id": "a", "delta": "hi"}),
                json!({"type": "text-end", "id": "a"}),
                json!({"type": "tool-input-start", "toolCallId": "c", "toolName": "go"}),
                json!({"type": "tool-input-delta", "toolCallId": "c", "inputTextDelta": "{\"x\":"}),
                json!({"type": "tool-input-delta", "toolCallId": "c", "inputTextDelta": "1}"}),
                json!({"type": "tool-input-available", "toolCallId": "c", "toolName": "go", "input": {"x": 1}}),
                json!({"type": "tool-output-available", "toolCallId": "c", "output": "ok"}),
                json!({"type": "data-custom", "data": {"name": "n", "value": 2}}),
                json!({"type": "finish-step"}),
                json!({"type": "finish", "finishReason": "stop"}),
            ]
        );
    }

    #[test]
    fn interrupts_are_data_parts_and_approval_requests_for_ai_6_and_later() {
        let events = [
            json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r"}),
            json!({"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "pay"}),
            json!({"type": "TOOL_CALL_END", "toolCallId": "c"}),
            json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "outcome": {"type": "interrupt",
                "interrupts": [{"id": "int-c", "toolCallId": "c", "message": "ok?"}, {"id": "i2", "reason": "x"}]}}),
        ];
        let translate = |approvals: bool| -> Vec<Value> {
            let mut t = UiStream::new(Some("m".into())).with_approval_requests(approvals);
            events
                .iter()
                .flat_map(|e| t.event(&Event::build(e.clone())))
                .collect()
        };
        // What every version accepts (`ai` 5 knows no approval chunk).
        assert_eq!(
            translate(false)[4..],
            [
                json!({"type": "data-interrupt", "id": "int-c", "data": {"id": "int-c", "toolCallId": "c", "message": "ok?"}}),
                json!({"type": "data-interrupt", "id": "i2", "data": {"id": "i2", "reason": "x"}}),
                json!({"type": "finish-step"}),
                json!({"type": "finish", "finishReason": "tool-calls"}),
            ]
        );
        assert_eq!(
            translate(true)[4..],
            [
                json!({"type": "data-interrupt", "id": "int-c", "data": {"id": "int-c", "toolCallId": "c", "message": "ok?"}}),
                json!({"type": "tool-approval-request", "approvalId": "int-c", "toolCallId": "c", "reason": "ok?"}),
                json!({"type": "data-interrupt", "id": "i2", "data": {"id": "i2", "reason": "x"}}),
                json!({"type": "finish-step"}),
                json!({"type": "finish", "finishReason": "tool-calls"}),
            ]
        );
        let err = run(
            vec![json!({"type": "RUN_ERROR", "message": "down", "code": "x"})],
            json!({}),
        );
        assert_eq!(
            err.last().unwrap(),
            &json!({"type": "error", "errorText": "down (x)"})
        );
    }

    #[test]
    fn what_follows_tool_calls_is_a_new_step_of_the_answer_to_the_user_message() {
        let mut t = UiStream::new(None);
        let chunks: Vec<Value> = [
            json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r",
                "input": {"messages": [{"id": "u7", "role": "user", "content": "go"}]}}),
            json!({"type": "TEXT_MESSAGE_START", "messageId": "a1", "role": "assistant"}),
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "a1", "delta": "looking"}),
            json!({"type": "TEXT_MESSAGE_END", "messageId": "a1"}),
            // Two calls of one message: one step.
            json!({"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "f", "parentMessageId": "a1"}),
            json!({"type": "TOOL_CALL_START", "toolCallId": "c2", "toolCallName": "f", "parentMessageId": "a1"}),
            json!({"type": "TOOL_CALL_RESULT", "messageId": "t1", "toolCallId": "c1", "content": "1"}),
            json!({"type": "TOOL_CALL_RESULT", "messageId": "t2", "toolCallId": "c2", "content": "2"}),
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "a2", "delta": "done"}),
            json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}),
        ]
        .into_iter()
        .flat_map(|e| t.event(&Event::build(e)))
        .collect();
        let kinds: Vec<&str> = chunks.iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "start",
                "start-step",
                "text-start",
                "text-delta",
                "text-end",
                "tool-input-start",
                "tool-input-start",
                "tool-output-available",
                "tool-output-available",
                "finish-step",
                "start-step",
                "text-start",
                "text-delta",
                "finish-step",
                "finish"
            ]
        );
        assert_eq!(
            chunks[0],
            json!({"type": "start", "messageId": "u7-answer"})
        );
    }

    #[test]
    fn a_messages_snapshot_sends_only_the_text_no_event_carried() {
        let mut t = UiStream::new(None);
        t.before_run_snapshot(&json!({"state": {"n": 1},
            "messages": [{"id": "old", "role": "assistant", "content": "before"}]}));
        let chunks: Vec<Value> = [
            json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r"}),
            json!({"type": "TEXT_MESSAGE_START", "messageId": "streamed", "role": "assistant"}),
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "streamed", "delta": "live"}),
            json!({"type": "TEXT_MESSAGE_END", "messageId": "streamed"}),
            json!({"type": "MESSAGES_SNAPSHOT", "messages": [
                {"id": "old", "role": "assistant", "content": "before"},
                {"id": "u", "role": "user", "content": "go"},
                {"id": "streamed", "role": "assistant", "content": "live"},
                {"id": "calls", "role": "assistant", "toolCalls": []},
                {"id": "new", "role": "assistant", "content": "Sent."},
            ]}),
            // A second snapshot repeats nothing.
            json!({"type": "MESSAGES_SNAPSHOT", "messages": [
                {"id": "new", "role": "assistant", "content": "Sent."},
            ]}),
        ]
        .into_iter()
        .flat_map(|e| t.event(&Event::build(e)))
        .collect();
        assert_eq!(
            chunks[2..],
            [
                json!({"type": "text-start", "id": "streamed"}),
                json!({"type": "text-delta", "id": "streamed", "delta": "live"}),
                json!({"type": "text-end", "id": "streamed"}),
                json!({"type": "text-start", "id": "new"}),
                json!({"type": "text-delta", "id": "new", "delta": "Sent."}),
                json!({"type": "text-end", "id": "new"}),
            ]
        );
    }

    #[test]
    fn events_before_the_run_set_its_state_and_known_messages() {
        let mut t = UiStream::new(None);
        for e in [
            json!({"type": "STATE_SNAPSHOT", "snapshot": {"n": 1}}),
            json!({"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/n", "value": 2}]}),
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "a", "delta": "x"}),
            json!({"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "b", "role": "assistant", "content": "y"}]}),
        ] {
            t.before_run(&Event::build(e));
        }
        let chunks = t.event(&Event::build(
            json!({"type": "MESSAGES_SNAPSHOT", "messages": [
                {"id": "a", "role": "assistant", "content": "x"},
                {"id": "b", "role": "assistant", "content": "y"},
            ]}),
        ));
        assert_eq!(chunks.len(), 2, "only start and start-step: {chunks:?}");
        let chunks = t.event(&Event::build(json!({"type": "STATE_DELTA",
            "delta": [{"op": "add", "path": "/m", "value": 3}]})));
        assert_eq!(
            chunks,
            [json!({"type": "data-state", "id": "state", "data": {"n": 2, "m": 3}})]
        );
    }

    #[test]
    fn a_handoff_goes_on_in_the_same_message_naming_the_agent_now_speaking() {
        let mut t = UiStream::new(Some("m".into())).with_agent("triage");
        let mut chunks = Vec::new();
        let mut feed = |t: &mut UiStream, e: Value| chunks.extend(t.event(&Event::build(e)));
        feed(
            &mut t,
            json!({"type": "RUN_STARTED", "threadId": "t", "runId": "a"}),
        );
        feed(
            &mut t,
            json!({"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "transfer_to_billing", "parentMessageId": "m1"}),
        );
        feed(&mut t, json!({"type": "TOOL_CALL_END", "toolCallId": "c"}));
        t.continues();
        feed(
            &mut t,
            json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "a"}),
        );
        assert!(!t.done(), "the message goes on");
        feed(
            &mut t,
            json!({"type": "RUN_STARTED", "threadId": "t", "runId": "b",
            "agui-gateway": {"agent": "billing", "kind": "handoff", "parentRunId": "a"},
            "input": {"messages": [{"id": "r", "role": "tool", "toolCallId": "c", "content": "Transferred."}]}}),
        );
        feed(
            &mut t,
            json!({"type": "CUSTOM", "name": HANDOFF_EVENT, "value": {"fromAgent": "triage",
            "toAgent": "billing", "toRunId": "b", "toolCallId": "c", "result": "accepted"}}),
        );
        feed(
            &mut t,
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m2", "delta": "paid"}),
        );
        feed(
            &mut t,
            json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "b"}),
        );
        assert!(t.done());
        let kinds: Vec<&str> = chunks.iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "start",
                "start-step",
                "tool-input-start",
                "tool-input-available",
                "finish-step",
                "tool-output-available",
                "start-step",
                "data-agent",
                "message-metadata",
                "data-custom",
                "text-start",
                "text-delta",
                "finish-step",
                "finish"
            ]
        );
        assert_eq!(chunks[0]["messageMetadata"]["agent"], "triage");
        assert_eq!(chunks[5]["output"], "Transferred.");
        assert_eq!(chunks[7]["data"]["from"], "triage");
        assert_eq!(
            chunks[8]["messageMetadata"],
            json!({"agent": "billing", "agents": ["triage", "billing"]})
        );
    }
}
