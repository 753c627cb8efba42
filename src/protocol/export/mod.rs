//! Pure conversions from the AG-UI model to other agent frameworks' shapes:
//! [`ai_sdk`] (Vercel AI SDK `UIMessage[]`, and its chat request's user
//! message back to AG-UI), [`ui_stream`] (AG-UI events → AI SDK UI message
//! stream chunks, incrementally), [`agentscope`] (AgentScope `Msg[]`).
//! No I/O: the server feeds them folded messages or journaled events. What
//! maps to what, and what is lost, is in `docs/exports.md`.

pub mod agentscope;
pub mod ai_sdk;
pub mod ui_stream;

use serde_json::Value;
use std::collections::HashMap;

/// Which agent produced each message of a thread that several agents spoke
/// on (a handoff, or a person naming another agent), and who started the
/// run that produced it: message id → [`Speaker`], from the runs table's
/// `outputMessageIds`, `agent` and `startedBy` (what
/// `GET /v1/threads/{id}/runs` shows). A message no run claims (a user's,
/// a tool result sent in a run's input, one journaled before runs were
/// recorded) has no speaker; the exports then keep the message with its
/// neighbours.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Speakers {
    by_message: HashMap<String, Speaker>,
    /// The status of every run noted so far, by id: whether a run's parent
    /// was interrupted (so the run answered it) is read from here.
    status: HashMap<String, String>,
}

/// The run that produced a message: its agent, and who started it.
#[derive(Debug, Clone, PartialEq)]
pub struct Speaker {
    pub agent: String,
    pub run_id: String,
    /// The subject of the caller who started the run, as its journaled
    /// `RUN_STARTED` was stamped (the snapshot's `run.startedBy`).
    pub by: Option<String>,
    /// The run answered the interrupts of its parent (a resume, or a
    /// regenerate of the answer): `by` is who answered them, as
    /// `/runs`'s `answeredBy` says.
    pub answers: bool,
}

impl Speaker {
    /// The `{runId, by}` entry of an `answeredBy` list.
    pub fn answer_json(&self) -> Value {
        serde_json::json!({"runId": self.run_id, "by": self.by})
    }
}

impl Speakers {
    /// Notes the runs (the public run form), oldest first: a later run
    /// claiming a message wins.
    pub fn note_runs<'a>(&mut self, runs: impl IntoIterator<Item = &'a Value>) {
        for run in runs {
            let run_id = run["runId"].as_str().unwrap_or_default();
            if let Some(status) = run["status"].as_str() {
                self.status.insert(run_id.to_owned(), status.to_owned());
            }
            let Some(agent) = run["agent"].as_str() else {
                continue;
            };
            let answers = matches!(run["kind"].as_str(), Some("resume" | "regenerate"))
                && run["parentRunId"]
                    .as_str()
                    .and_then(|p| self.status.get(p))
                    .is_some_and(|s| s == "interrupted");
            let speaker = Speaker {
                agent: agent.to_owned(),
                run_id: run_id.to_owned(),
                by: run["startedBy"].as_str().map(str::to_owned),
                answers,
            };
            for id in run["outputMessageIds"].as_array().into_iter().flatten() {
                if let Some(id) = id.as_str() {
                    self.by_message.insert(id.to_owned(), speaker.clone());
                }
            }
        }
    }

    /// The agent that produced message `id`, if a run claims it.
    pub fn of(&self, id: &str) -> Option<&str> {
        self.by_message.get(id).map(|s| s.agent.as_str())
    }

    /// The run that produced message `id`, if a run claims it.
    pub fn run_of(&self, id: &str) -> Option<&Speaker> {
        self.by_message.get(id)
    }
}

/// Who started an exported answer and who answered its interrupts, from
/// the runs that produced its messages (in order): the first run that did
/// not answer an interrupt started it; each answering run is one
/// `{runId, by}` of `answeredBy`, as `/runs` lists them.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Attribution {
    pub started_by: Option<String>,
    pub answered_by: Vec<Value>,
    runs: Vec<String>,
}

impl Attribution {
    /// Counts `speaker`'s run in (once per run).
    pub fn note(&mut self, speaker: &Speaker) {
        if self.runs.contains(&speaker.run_id) {
            return;
        }
        self.runs.push(speaker.run_id.clone());
        if speaker.answers {
            self.answered_by.push(speaker.answer_json());
        } else if self.started_by.is_none() {
            self.started_by = speaker.by.clone();
        }
    }
}

/// The tool calls of the conversation's assistant messages, by id:
/// (tool name, raw JSON arguments).
pub(crate) fn tool_calls(messages: &[Value]) -> Vec<(String, String, String)> {
    messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .filter_map(|m| m.get("toolCalls").and_then(Value::as_array))
        .flatten()
        .filter_map(|c| {
            Some((
                c.get("id")?.as_str()?.to_owned(),
                c["function"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                c["function"]["arguments"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            ))
        })
        .collect()
}

/// A tool call's input: its arguments parsed as JSON, else the raw text
/// (`{}` when empty).
pub(crate) fn parse_args(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(Default::default());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

/// The text of AG-UI content: a string, or the text parts joined.
pub(crate) fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A media part of AG-UI content (1.0 `image`/`audio`/`video`/`document`
/// with a `source`, or the pre-1.0 `binary`): (media type, URL or `None`,
/// base64 data or `None`, filename).
pub(crate) struct Media {
    pub media_type: String,
    pub url: Option<String>,
    pub data: Option<String>,
    pub filename: Option<String>,
}

/// The media part `p`, if it is one.
pub(crate) fn media(p: &Value) -> Option<Media> {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    match p["type"].as_str()? {
        "image" | "audio" | "video" | "document" => {
            let source = p.get("source")?;
            let media_type = s(source, "mimeType").unwrap_or_else(|| {
                match p["type"].as_str() {
                    Some("image") => "image",
                    Some("audio") => "audio",
                    Some("video") => "video",
                    _ => "application/octet-stream",
                }
                .to_owned()
            });
            let value = s(source, "value");
            let (url, data) = match source["type"].as_str() {
                Some("data") => (None, value),
                _ => (value, None),
            };
            Some(Media {
                media_type,
                url,
                data,
                filename: s(p, "filename"),
            })
        }
        "binary" => Some(Media {
            media_type: s(p, "mimeType").unwrap_or_else(|| "application/octet-stream".into()),
            url: s(p, "url").or_else(|| s(p, "id").map(|id| format!("agui-file:{id}"))),
            data: s(p, "data"),
            filename: s(p, "filename"),
        }),
        _ => None,
    }
}

/// Which pending interrupt (if any) waits on each tool call: tool call id →
/// interrupt id.
pub(crate) fn interrupt_for_call<'a>(interrupts: &'a [Value], call_id: &str) -> Option<&'a str> {
    interrupts
        .iter()
        .find(|i| i["toolCallId"] == call_id)
        .and_then(|i| i["id"].as_str())
}
