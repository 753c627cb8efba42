//! A gateway run as an A2A task: the run's AG-UI events, as its requester
//! receives them, turned into A2A v1.0 `StreamResponse`s (docs/a2a.md,
//! "The gateway's agents for A2A clients").
//!
//! The task is announced before the run's first event (A2A clients expect
//! a `Task` first); `RUN_STARTED` makes it `working`; each text message
//! streams as one artifact (its `messageId` the artifact id); the run's end
//! is the task's state: `completed`, `input-required` for an interrupt (its
//! interrupts under `metadata["ag-ui"]`, their messages as the status
//! message), `canceled` for a cancelled run, `failed` for a `RUN_ERROR`. A handoff's next run continues the
//! same task.

use crate::protocol::{Event, EventType};
use serde_json::{Value, json};

/// Turns one task's AG-UI events into A2A results, in order.
#[derive(Debug)]
pub struct TaskStream {
    task_id: String,
    context_id: String,
    working: bool,
    /// Artifacts (text messages) that already sent a chunk.
    streamed: Vec<String>,
    /// Set when the run hands the thread over: its `RUN_FINISHED` is not
    /// the task's end.
    continues: bool,
    done: bool,
}

/// The v1.0 task state names.
pub const SUBMITTED: &str = "TASK_STATE_SUBMITTED";
pub const WORKING: &str = "TASK_STATE_WORKING";
pub const COMPLETED: &str = "TASK_STATE_COMPLETED";
pub const INPUT_REQUIRED: &str = "TASK_STATE_INPUT_REQUIRED";
pub const FAILED: &str = "TASK_STATE_FAILED";
pub const CANCELED: &str = "TASK_STATE_CANCELED";

impl TaskStream {
    pub fn new(task_id: &str, context_id: &str) -> TaskStream {
        TaskStream {
            task_id: task_id.into(),
            context_id: context_id.into(),
            working: false,
            streamed: Vec::new(),
            continues: false,
            done: false,
        }
    }

    /// The first result: the task, submitted.
    pub fn submitted(&self) -> Value {
        json!({"task": {"id": self.task_id, "contextId": self.context_id,
            "status": {"state": SUBMITTED}}})
    }

    /// Whether the task reached a state that ends the client's stream.
    pub fn done(&self) -> bool {
        self.done
    }

    /// The run hands the thread over: the task goes on with the next run.
    pub fn continues(&mut self) {
        self.continues = true;
    }

    /// The results one event makes (often none).
    pub fn event(&mut self, event: &Event) -> Vec<Value> {
        if self.done {
            return Vec::new();
        }
        match event.kind() {
            EventType::RunStarted if !std::mem::replace(&mut self.working, true) => {
                vec![self.status(WORKING, None, None)]
            }
            EventType::TextMessageContent => {
                let (Some(id), Some(delta)) =
                    (event.str_field("messageId"), event.str_field("delta"))
                else {
                    return Vec::new();
                };
                let append = self.streamed.iter().any(|s| s == id);
                if !append {
                    self.streamed.push(id.to_owned());
                }
                vec![json!({"artifactUpdate": {
                    "taskId": self.task_id, "contextId": self.context_id,
                    "artifact": {"artifactId": id, "parts": [{"text": delta}]},
                    "append": append,
                }})]
            }
            // The artifact is whole: A2A's `lastChunk`, on an empty chunk
            // (the message's last words were sent with its last delta).
            EventType::TextMessageEnd => match event.str_field("messageId") {
                Some(id) if self.streamed.iter().any(|s| s == id) => {
                    vec![json!({"artifactUpdate": {
                        "taskId": self.task_id, "contextId": self.context_id,
                        "artifact": {"artifactId": id, "parts": []},
                        "append": true, "lastChunk": true,
                    }})]
                }
                _ => Vec::new(),
            },
            EventType::RunFinished if std::mem::take(&mut self.continues) => Vec::new(),
            EventType::RunFinished => self.finished(event),
            EventType::RunError => {
                self.done = true;
                let text = event.str_field("message").unwrap_or("the run failed");
                let code = event.str_field("code");
                let meta = code.map(|c| json!({"ag-ui": {"code": c}}));
                vec![self.status(FAILED, Some(text), meta)]
            }
            _ => Vec::new(),
        }
    }

    fn finished(&mut self, event: &Event) -> Vec<Value> {
        self.done = true;
        let outcome = event.get("outcome");
        let interrupts = outcome
            .filter(|o| o.get("type").and_then(Value::as_str) == Some("interrupt"))
            .and_then(|o| o.get("interrupts"))
            .and_then(Value::as_array);
        let kind = outcome.and_then(|o| o.get("type")).and_then(Value::as_str);
        match interrupts {
            _ if kind == Some("cancelled") => vec![self.status(CANCELED, None, None)],
            Some(list) if !list.is_empty() => {
                let text: Vec<&str> = list
                    .iter()
                    .filter_map(|i| {
                        i.get("message")
                            .or_else(|| i.get("reason"))
                            .and_then(Value::as_str)
                    })
                    .collect();
                let text = if text.is_empty() {
                    "the agent needs input".to_owned()
                } else {
                    text.join("\n")
                };
                let meta = json!({"ag-ui": {"interrupts": list}});
                vec![self.status(INPUT_REQUIRED, Some(&text), Some(meta))]
            }
            _ => vec![self.status(COMPLETED, None, None)],
        }
    }

    fn status(&self, state: &str, text: Option<&str>, metadata: Option<Value>) -> Value {
        let mut status = json!({"state": state, "timestamp": now()});
        if let Some(text) = text {
            status["message"] = json!({
                "messageId": format!("{}-{}", self.task_id, state.to_ascii_lowercase()),
                "contextId": self.context_id, "taskId": self.task_id,
                "role": "ROLE_AGENT", "parts": [{"text": text}],
            });
        }
        let mut update =
            json!({"taskId": self.task_id, "contextId": self.context_id, "status": status});
        if let Some(m) = metadata {
            update["metadata"] = m;
        }
        json!({ "statusUpdate": update })
    }
}

/// RFC 3339 UTC, what A2A timestamps are.
fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// The whole task a blocking `SendMessage` answers, folded from the results
/// a [`TaskStream`] made: the last status, and each artifact's chunks joined.
pub fn fold(results: &[Value]) -> Value {
    let mut task = results
        .first()
        .and_then(|r| r.get("task"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    let mut artifacts: Vec<Value> = Vec::new();
    for r in results {
        if let Some(s) = r.get("statusUpdate") {
            task["status"] = s["status"].clone();
            if let Some(m) = s.get("metadata") {
                task["metadata"] = m.clone();
            }
        }
        if let Some(a) = r.get("artifactUpdate") {
            let id = &a["artifact"]["artifactId"];
            let text = a["artifact"]["parts"][0]["text"].as_str().unwrap_or("");
            match artifacts.iter_mut().find(|x| x["artifactId"] == *id) {
                Some(x) => {
                    let joined = format!("{}{text}", x["parts"][0]["text"].as_str().unwrap_or(""));
                    x["parts"][0]["text"] = joined.into();
                }
                None => artifacts.push(a["artifact"].clone()),
            }
        }
    }
    if !artifacts.is_empty() {
        task["artifacts"] = artifacts.into();
    }
    task
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(v: Value) -> Event {
        Event::build(v)
    }

    #[test]
    fn a_run_is_a_task_and_an_interrupt_asks_for_input() {
        let mut t = TaskStream::new("k", "c");
        let mut out = vec![t.submitted()];
        for e in [
            json!({"type": "RUN_STARTED", "threadId": "c", "runId": "r"}),
            json!({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}),
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "he"}),
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "llo"}),
            json!({"type": "TEXT_MESSAGE_END", "messageId": "m"}),
            json!({"type": "RUN_FINISHED", "threadId": "c", "runId": "r", "outcome": {"type": "interrupt",
                "interrupts": [{"id": "i1", "message": "approve?"}]}}),
        ] {
            out.extend(t.event(&ev(e)));
        }
        assert!(t.done());
        assert_eq!(out[1]["statusUpdate"]["status"]["state"], WORKING);
        assert_eq!(out[2]["artifactUpdate"]["append"], false);
        assert_eq!(out[3]["artifactUpdate"]["append"], true);
        assert_eq!(out[4]["artifactUpdate"]["lastChunk"], true);
        let last = &out[5]["statusUpdate"];
        assert_eq!(last["status"]["state"], INPUT_REQUIRED);
        assert_eq!(last["status"]["message"]["parts"][0]["text"], "approve?");
        assert_eq!(last["metadata"]["ag-ui"]["interrupts"][0]["id"], "i1");
        let task = fold(&out);
        assert_eq!(task["artifacts"][0]["parts"][0]["text"], "hello");
        assert_eq!(task["status"]["state"], INPUT_REQUIRED);
    }

    #[test]
    fn a_handoff_continues_the_task_and_an_error_fails_it() {
        let mut t = TaskStream::new("k", "c");
        t.continues();
        assert!(
            t.event(&ev(
                json!({"type": "RUN_FINISHED", "threadId": "c", "runId": "r"})
            ))
            .is_empty()
        );
        assert!(!t.done());
        let out = t.event(&ev(
            json!({"type": "RUN_ERROR", "message": "boom", "code": "x"}),
        ));
        assert_eq!(out[0]["statusUpdate"]["status"]["state"], FAILED);
        assert_eq!(
            out[0]["statusUpdate"]["status"]["message"]["parts"][0]["text"],
            "boom"
        );
        assert!(t.done());
    }
}
