//! AG-UI ↔ A2A, both ways of one upstream run (the table is docs/a2a.md).
//!
//! Pure: no I/O, so every row of the table is a unit test. [`request`]
//! turns the run's `RunAgentInput` into the A2A message it sends;
//! [`Mapper`] turns what the agent answers (A2A v1.0 `StreamResponse`s, or
//! the one `SendMessageResponse` of a blocking send) into AG-UI events.
//!
//! Why only the new user input goes out: an A2A agent keeps the history of
//! its context itself (A2A's `contextId` is the conversation), so resending
//! the thread's history each run would have it read every turn twice.

use crate::protocol::Event;
use crate::protocol::input::{Message, ResumeStatus, RunAgentInput};
use serde_json::{Map, Value, json};

/// The A2A task states (v1.0 proto enum names), as far as a run cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// Submitted or working: the run goes on.
    Going,
    Completed,
    InputRequired,
    AuthRequired,
    Failed,
    Rejected,
    Canceled,
    /// A state this gateway does not know: the run goes on.
    Unknown,
}

impl TaskState {
    pub fn parse(s: &str) -> TaskState {
        match s {
            "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING" => TaskState::Going,
            "TASK_STATE_COMPLETED" => TaskState::Completed,
            "TASK_STATE_INPUT_REQUIRED" => TaskState::InputRequired,
            "TASK_STATE_AUTH_REQUIRED" => TaskState::AuthRequired,
            "TASK_STATE_FAILED" => TaskState::Failed,
            "TASK_STATE_REJECTED" => TaskState::Rejected,
            "TASK_STATE_CANCELED" => TaskState::Canceled,
            _ => TaskState::Unknown,
        }
    }

    /// The task will not move again without a new message (or ever).
    pub fn is_final(self) -> bool {
        !matches!(self, TaskState::Going | TaskState::Unknown)
    }
}

/// What the run asks of the agent: a message, or only to cancel tasks (a
/// `resume` that declines every interrupt and says nothing else).
#[derive(Debug, PartialEq)]
pub enum Ask {
    /// The `message` of `SendMessage`/`SendStreamingMessage`.
    Send(Value),
    /// `CancelTask` for each of these task ids.
    Cancel(Vec<String>),
}

/// The A2A request for `input` (docs/a2a.md, "RunAgentInput → A2A").
///
/// A `resume` answers interrupts whose ids are A2A task ids (see
/// [`Mapper`]): a resolved one continues that task with the answer; one
/// declined (`cancelled`) with nothing else to say cancels it.
pub fn request(input: &RunAgentInput) -> Ask {
    let mut parts = new_user_parts(input);
    let mut task_id = None;
    let mut declined = Vec::new();
    for entry in input.resume.iter().flatten() {
        match entry.status {
            ResumeStatus::Resolved => {
                task_id.get_or_insert_with(|| entry.interrupt_id.clone());
                match &entry.payload {
                    Some(Value::String(text)) if !text.is_empty() => {
                        parts.push(json!({"text": text}))
                    }
                    Some(Value::Null) | None => {}
                    Some(other) => parts.push(json!({"data": other})),
                }
            }
            ResumeStatus::Cancelled => declined.push(entry.interrupt_id.clone()),
        }
    }
    if task_id.is_none() && !declined.is_empty() && parts.is_empty() {
        return Ask::Cancel(declined);
    }
    if parts.is_empty() {
        // A2A refuses a message without parts; a run with no new user input
        // (a regenerate, say) still asks the agent to answer.
        parts.push(json!({"text": ""}));
    }
    let mut message = json!({
        "messageId": input.run_id,
        "contextId": input.thread_id,
        "role": "ROLE_USER",
        "parts": parts,
    });
    if let Some(task) = task_id {
        message["taskId"] = task.into();
    }
    let metadata = ag_ui_metadata(input);
    if !metadata.is_empty() {
        message["metadata"] = json!({ "ag-ui": metadata });
    }
    Ask::Send(message)
}

/// What has no A2A counterpart travels in the message's metadata, under
/// `ag-ui`: the client's tools (an A2A agent cannot call them, but may read
/// them), context and `forwardedProps`, and the run id.
fn ag_ui_metadata(input: &RunAgentInput) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("runId".into(), input.run_id.clone().into());
    if !input.tools.is_empty() {
        m.insert("tools".into(), json!(input.tools));
    }
    if !input.context.is_empty() {
        m.insert("context".into(), json!(input.context));
    }
    if let Some(props) = &input.forwarded_props {
        m.insert("forwardedProps".into(), props.clone());
    }
    m
}

/// The parts of the user messages after the last message that is not a
/// user's: what the agent has not seen yet. When there are none — a run
/// handed over from another agent, whose history ends with the transfer —
/// the last user message: the request the agent is asked to take over.
fn new_user_parts(input: &RunAgentInput) -> Vec<Value> {
    let is_user = |m: &Message| matches!(m, Message::User(_));
    let mut start = input
        .messages
        .iter()
        .rposition(|m| !is_user(m))
        .map_or(0, |i| i + 1);
    if start == input.messages.len() && input.resume.is_none() {
        start = input.messages.iter().rposition(is_user).unwrap_or(start);
    }
    let mut parts = Vec::new();
    for m in &input.messages[start..] {
        if let Message::User(user) = m {
            match serde_json::to_value(&user.content) {
                Ok(Value::String(text)) if !text.is_empty() => parts.push(json!({"text": text})),
                Ok(Value::Array(items)) => parts.extend(items.iter().filter_map(content_part)),
                _ => {}
            }
        }
    }
    parts
}

/// One AG-UI content part as an A2A part: text as text, inline data as
/// `raw` (both base64), a URL as `url`, with its media type; anything else
/// (a provider file handle, a newer kind) as a `data` part holding the AG-UI
/// part as it came, so nothing is dropped.
fn content_part(part: &Value) -> Option<Value> {
    let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
    if kind == "text" {
        let text = part.get("text").and_then(Value::as_str)?;
        return (!text.is_empty()).then(|| json!({"text": text}));
    }
    let (source_kind, value, mime) = match part.get("source") {
        Some(s) => (
            s.get("type").and_then(Value::as_str).unwrap_or(""),
            s.get("value").and_then(Value::as_str),
            s.get("mimeType").and_then(Value::as_str),
        ),
        // The pre-1.0 `binary` part.
        None => match (part.get("data"), part.get("url")) {
            (Some(Value::String(d)), _) => ("data", Some(d.as_str()), None),
            (_, Some(Value::String(u))) => ("url", Some(u.as_str()), None),
            _ => ("", None, None),
        },
    };
    let mime = mime.or_else(|| part.get("mimeType").and_then(Value::as_str));
    let mut out = match (source_kind, value) {
        ("data", Some(v)) => json!({"raw": v}),
        ("url", Some(v)) => json!({"url": v}),
        _ => return Some(json!({"data": part, "mediaType": "application/vnd.ag-ui.part+json"})),
    };
    if let Some(m) = mime {
        out["mediaType"] = m.into();
    }
    if let Some(name) = part.get("filename").and_then(Value::as_str) {
        out["filename"] = name.into();
    }
    Some(out)
}

/// Turns one run's A2A responses into AG-UI events, in order.
///
/// Text (of artifacts and of the agent's status messages) becomes
/// `TEXT_MESSAGE_*`; every other part a `CUSTOM` `a2a.part` event holding it
/// as it came. The task's states end the run: `completed` → `RUN_FINISHED`;
/// `input-required`/`auth-required` → `RUN_FINISHED` with an interrupt
/// outcome whose interrupt id is the task id (the `resume` that answers it
/// continues that task); `failed`/`rejected`/`canceled` → `RUN_ERROR`
/// (`a2a_failed`, …) with the agent's words.
#[derive(Debug)]
pub struct Mapper {
    thread_id: String,
    run_id: String,
    started: bool,
    ended: bool,
    task_id: Option<String>,
    context_id: Option<String>,
    /// The text message an artifact is streaming into: (artifact id, message id).
    open: Option<(String, String)>,
    /// Counts messages made from artifacts, so each gets its own id.
    made: usize,
}

/// The `CUSTOM` event name carrying a non-text A2A part (or result).
pub const PART_EVENT: &str = "a2a.part";

impl Mapper {
    pub fn new(thread_id: &str, run_id: &str) -> Mapper {
        Mapper {
            thread_id: thread_id.into(),
            run_id: run_id.into(),
            started: false,
            ended: false,
            task_id: None,
            context_id: None,
            open: None,
            made: 0,
        }
    }

    /// The run's `RUN_STARTED`, once (the gateway's, sent when the agent
    /// first answers).
    pub fn start(&mut self, out: &mut Vec<Event>) {
        if !std::mem::replace(&mut self.started, true) {
            out.push(Event::build(json!({
                "type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.run_id,
            })));
        }
    }

    /// The task this run is on, once the agent named it.
    pub fn task_id(&self) -> Option<&str> {
        self.task_id.as_deref()
    }

    /// Whether the run's terminal event was produced.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Maps one `result` of the agent (a `StreamResponse` or a
    /// `SendMessageResponse`: the same oneof, `task` | `message` |
    /// `statusUpdate` | `artifactUpdate`).
    pub fn result(&mut self, result: &Value, out: &mut Vec<Event>) {
        self.start(out);
        if self.ended {
            return;
        }
        if let Some(task) = result.get("task") {
            self.task(task, out);
        } else if let Some(update) = result.get("statusUpdate") {
            self.ids(update.get("taskId"), update.get("contextId"));
            self.status(update.get("status"), out);
        } else if let Some(update) = result.get("artifactUpdate") {
            self.ids(update.get("taskId"), update.get("contextId"));
            self.artifact_chunk(update, out);
        } else if let Some(message) = result.get("message") {
            // A reply without a task: the exchange is over.
            self.message(message, out);
            if self.task_id.is_none() {
                self.finish(None, out);
            }
        } else {
            out.push(custom(json!({ "result": result })));
        }
    }

    /// The agent answered a JSON-RPC error: the run ends with it.
    pub fn rpc_error(&mut self, error: &Value, out: &mut Vec<Event>) {
        self.start(out);
        let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("the agent answered a JSON-RPC error");
        self.error("a2a_rpc_error", format!("A2A error {code}: {message}"), out);
    }

    /// Ends the run successfully (for a cancel-only resume).
    pub fn finish_plain(&mut self, out: &mut Vec<Event>) {
        self.start(out);
        self.finish(None, out);
    }

    fn ids(&mut self, task: Option<&Value>, context: Option<&Value>) {
        if let Some(Value::String(t)) = task {
            self.task_id.get_or_insert_with(|| t.clone());
        }
        if let Some(Value::String(c)) = context {
            self.context_id.get_or_insert_with(|| c.clone());
        }
    }

    fn task(&mut self, task: &Value, out: &mut Vec<Event>) {
        self.ids(task.get("id"), task.get("contextId"));
        // A blocking send's task carries its artifacts whole.
        for artifact in task
            .get("artifacts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let update = json!({"artifact": artifact, "lastChunk": true});
            self.artifact_chunk(&update, out);
        }
        self.status(task.get("status"), out);
    }

    fn status(&mut self, status: Option<&Value>, out: &mut Vec<Event>) {
        let Some(status) = status else { return };
        let state = TaskState::parse(status.get("state").and_then(Value::as_str).unwrap_or(""));
        let message = status.get("message");
        let words = message.map(text_of).unwrap_or_default();
        if !matches!(
            state,
            TaskState::Failed | TaskState::Rejected | TaskState::Canceled
        ) && let Some(m) = message
        {
            self.message(m, out);
        }
        match state {
            TaskState::Going | TaskState::Unknown => {}
            TaskState::Completed => self.finish(None, out),
            TaskState::InputRequired | TaskState::AuthRequired => {
                let reason = if state == TaskState::InputRequired {
                    "input_required"
                } else {
                    "auth_required"
                };
                let interrupt = json!({
                    "id": self.task_id.clone().unwrap_or_default(),
                    "reason": reason,
                    "message": words,
                    "metadata": {"a2a": {
                        "taskId": self.task_id, "contextId": self.context_id,
                        "state": status.get("state"),
                    }},
                });
                self.finish(
                    Some(json!({"type": "interrupt", "interrupts": [interrupt]})),
                    out,
                );
            }
            TaskState::Failed | TaskState::Rejected | TaskState::Canceled => {
                let (code, default) = match state {
                    TaskState::Failed => ("a2a_failed", "the A2A task failed"),
                    TaskState::Rejected => ("a2a_rejected", "the A2A agent rejected the task"),
                    _ => ("a2a_canceled", "the A2A task was canceled"),
                };
                let text = if words.is_empty() {
                    default.into()
                } else {
                    words
                };
                self.error(code, text, out);
            }
        }
    }

    /// One artifact update: its text streams into one text message per
    /// artifact (a new one when the artifact restarts without `append`).
    fn artifact_chunk(&mut self, update: &Value, out: &mut Vec<Event>) {
        let artifact = update.get("artifact").unwrap_or(&Value::Null);
        let artifact_id = artifact
            .get("artifactId")
            .and_then(Value::as_str)
            .unwrap_or("artifact")
            .to_owned();
        let append = update.get("append").and_then(Value::as_bool) == Some(true);
        let same = self.open.as_ref().is_some_and(|(a, _)| *a == artifact_id);
        if !(append && same) {
            self.close(out);
        }
        for part in parts_of(artifact) {
            match part.get("text").and_then(Value::as_str) {
                Some(text) if !text.is_empty() => {
                    let id = self.open_artifact(&artifact_id, out);
                    out.push(Event::build(json!({
                        "type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": text,
                    })));
                }
                Some(_) => {}
                None => out.push(custom(json!({"artifactId": artifact_id, "part": part}))),
            }
        }
        if update.get("lastChunk").and_then(Value::as_bool) == Some(true) {
            self.close(out);
        }
    }

    fn open_artifact(&mut self, artifact_id: &str, out: &mut Vec<Event>) -> String {
        if let Some((_, id)) = &self.open {
            return id.clone();
        }
        self.made += 1;
        let id = format!("{}-{artifact_id}-{}", self.run_id, self.made);
        out.push(text_start(&id));
        self.open = Some((artifact_id.into(), id.clone()));
        id
    }

    fn close(&mut self, out: &mut Vec<Event>) {
        if let Some((_, id)) = self.open.take() {
            out.push(Event::build(
                json!({"type": "TEXT_MESSAGE_END", "messageId": id}),
            ));
        }
    }

    /// A whole agent message: its text as one text message, other parts as
    /// `a2a.part` events.
    fn message(&mut self, message: &Value, out: &mut Vec<Event>) {
        self.close(out);
        let id = message
            .get("messageId")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("{}-message-{}", self.run_id, self.made));
        let text = text_of(message);
        if !text.is_empty() {
            out.push(text_start(&id));
            out.push(Event::build(
                json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": text}),
            ));
            out.push(Event::build(
                json!({"type": "TEXT_MESSAGE_END", "messageId": id}),
            ));
        }
        for part in parts_of(message).filter(|p| p.get("text").is_none()) {
            out.push(custom(json!({"messageId": id, "part": part})));
        }
    }

    fn finish(&mut self, outcome: Option<Value>, out: &mut Vec<Event>) {
        self.close(out);
        let mut e =
            json!({"type": "RUN_FINISHED", "threadId": self.thread_id, "runId": self.run_id});
        if let Some(o) = outcome {
            e["outcome"] = o;
        }
        out.push(Event::build(e));
        self.ended = true;
    }

    fn error(&mut self, code: &str, message: String, out: &mut Vec<Event>) {
        self.close(out);
        out.push(crate::protocol::event::run_error(code, message));
        self.ended = true;
    }
}

fn parts_of(v: &Value) -> impl Iterator<Item = &Value> {
    v.get("parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The text parts of a message, joined.
fn text_of(message: &Value) -> String {
    parts_of(message)
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("")
}

fn text_start(id: &str) -> Event {
    Event::build(json!({"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"}))
}

fn custom(value: Value) -> Event {
    Event::build(json!({"type": "CUSTOM", "name": PART_EVENT, "value": value}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(v: Value) -> RunAgentInput {
        RunAgentInput::from_json(v.to_string().as_bytes()).unwrap()
    }

    fn kinds(events: &[Event]) -> Vec<String> {
        events.iter().map(|e| e.kind().to_string()).collect()
    }

    #[test]
    fn only_the_new_user_input_goes_out_multimodal_included() {
        let ask = request(&input(json!({
            "threadId": "t", "runId": "r2",
            "messages": [
                {"id": "u1", "role": "user", "content": "old"},
                {"id": "a1", "role": "assistant", "content": "answer"},
                {"id": "u2", "role": "user", "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image", "source": {"type": "url", "value": "https://x/i.png", "mimeType": "image/png"}},
                    {"type": "document", "source": {"type": "data", "value": "aGk=", "mimeType": "text/plain"}},
                ]},
            ],
        })));
        let Ask::Send(m) = ask else { panic!() };
        assert_eq!(m["contextId"], "t");
        assert_eq!(m["messageId"], "r2");
        assert_eq!(m["role"], "ROLE_USER");
        assert!(m.get("taskId").is_none());
        assert_eq!(
            m["parts"],
            json!([
                {"text": "look"},
                {"url": "https://x/i.png", "mediaType": "image/png"},
                {"raw": "aGk=", "mediaType": "text/plain"},
            ])
        );
    }

    #[test]
    fn a_handed_over_run_sends_the_last_user_request() {
        let ask = request(&input(json!({
            "threadId": "t", "runId": "r2",
            "messages": [
                {"id": "u1", "role": "user", "content": "my invoice"},
                {"id": "a1", "role": "assistant", "toolCalls": [{"id": "c", "type": "function",
                    "function": {"name": "transfer_to_billing", "arguments": "{}"}}]},
                {"id": "t1", "role": "tool", "toolCallId": "c", "content": "transferred"},
            ],
        })));
        let Ask::Send(m) = ask else { panic!() };
        assert_eq!(m["parts"], json!([{"text": "my invoice"}]));
    }

    #[test]
    fn a_resume_continues_the_task_and_a_decline_cancels_it() {
        let ask = request(&input(json!({
            "threadId": "t", "runId": "r3", "messages": [],
            "resume": [{"interruptId": "task-1", "status": "resolved", "payload": "blue"}],
        })));
        let Ask::Send(m) = ask else { panic!() };
        assert_eq!(m["taskId"], "task-1");
        assert_eq!(m["parts"], json!([{"text": "blue"}]));
        let ask = request(&input(json!({
            "threadId": "t", "runId": "r4", "messages": [],
            "resume": [{"interruptId": "task-1", "status": "cancelled"}],
        })));
        assert_eq!(ask, Ask::Cancel(vec!["task-1".into()]));
    }

    #[test]
    fn a_streamed_task_becomes_a_run_with_one_text_message() {
        let mut m = Mapper::new("t", "r");
        let mut out = Vec::new();
        for r in [
            json!({"task": {"id": "k", "contextId": "t", "status": {"state": "TASK_STATE_SUBMITTED"}}}),
            json!({"statusUpdate": {"taskId": "k", "status": {"state": "TASK_STATE_WORKING"}}}),
            json!({"artifactUpdate": {"taskId": "k", "artifact": {"artifactId": "a", "parts": [{"text": "he"}]}}}),
            json!({"artifactUpdate": {"taskId": "k", "artifact": {"artifactId": "a", "parts": [{"text": "llo"}, {"data": {"x": 1}}]}, "append": true, "lastChunk": true}}),
            json!({"statusUpdate": {"taskId": "k", "status": {"state": "TASK_STATE_COMPLETED"}}}),
        ] {
            m.result(&r, &mut out);
        }
        assert_eq!(
            kinds(&out),
            [
                "RUN_STARTED",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_CONTENT",
                "CUSTOM",
                "TEXT_MESSAGE_END",
                "RUN_FINISHED"
            ]
        );
        assert_eq!(out[4].body()["value"]["part"], json!({"data": {"x": 1}}));
        assert!(m.ended());
    }

    #[test]
    fn input_required_is_an_interrupt_carrying_the_task_id() {
        let mut m = Mapper::new("t", "r");
        let mut out = Vec::new();
        m.result(&json!({"task": {"id": "k", "contextId": "t", "status": {"state": "TASK_STATE_INPUT_REQUIRED",
            "message": {"messageId": "q", "role": "ROLE_AGENT", "parts": [{"text": "which?"}]}}}}), &mut out);
        let last = out.last().unwrap().body();
        assert_eq!(last["type"], "RUN_FINISHED");
        assert_eq!(last["outcome"]["type"], "interrupt");
        assert_eq!(last["outcome"]["interrupts"][0]["id"], "k");
        assert_eq!(last["outcome"]["interrupts"][0]["message"], "which?");
        assert_eq!(out[2].body()["delta"], "which?");
    }

    #[test]
    fn failed_and_rejected_are_run_errors_with_the_agents_words() {
        for (state, code) in [
            ("TASK_STATE_FAILED", "a2a_failed"),
            ("TASK_STATE_REJECTED", "a2a_rejected"),
        ] {
            let mut m = Mapper::new("t", "r");
            let mut out = Vec::new();
            m.result(
                &json!({"statusUpdate": {"taskId": "k", "status": {"state": state,
                "message": {"parts": [{"text": "no"}]}}}}),
                &mut out,
            );
            let last = out.last().unwrap().body();
            assert_eq!(last["type"], "RUN_ERROR");
            assert_eq!(last["code"], code);
            assert_eq!(last["message"], "no");
        }
    }
}
