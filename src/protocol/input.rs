//! `RunAgentInput` and the types inside it (AG-UI 1.0).
//!
//! Each struct names the fields the gateway reasons about and keeps every
//! other field in `extra`, so a client's or a newer protocol's additions reach
//! the agent unchanged. Parsing reports the JSON path of a bad field, which is
//! what the HTTP face puts in its 400 message.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Unknown fields, kept in order.
pub type Extra = Map<String, Value>;

/// The body of a run request, as an agent receives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunAgentInput {
    pub thread_id: String,
    pub run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Value>,
    #[serde(default)]
    pub messages: Vec<Message>,
    #[serde(default)]
    pub tools: Vec<Tool>,
    #[serde(default)]
    pub context: Vec<Context>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarded_props: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<Vec<ResumeEntry>>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Why an input was rejected; `path` is the JSON path of the bad field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct InputError {
    pub path: String,
    pub message: String,
}

impl RunAgentInput {
    /// Parses a request body, naming the offending field on failure.
    pub fn from_json(body: &[u8]) -> Result<RunAgentInput, InputError> {
        let de = &mut serde_json::Deserializer::from_slice(body);
        let input: RunAgentInput = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
            let path = e.path().to_string();
            let message = e.inner().to_string();
            let message = message
                .split(" at line ")
                .next()
                .unwrap_or(&message)
                .to_owned();
            InputError {
                // (an error under the key "" has the empty path)
                path: if path.is_empty() || path == "." || path == "?" {
                    "body".into()
                } else {
                    path
                },
                message,
            }
        })?;
        // One JSON value and nothing after it, as `serde_json::from_slice` has
        // it: `{…} {…}` is not a body (found by the `run_agent_input` fuzz target).
        de.end().map_err(|_| InputError {
            path: "body".into(),
            message: "trailing characters after the JSON value".into(),
        })?;
        input.validate()?;
        Ok(input)
    }

    /// Checks what serde's types cannot: non-empty ids, tool names, resume shape.
    pub fn validate(&self) -> Result<(), InputError> {
        let bad = |path: String, message: &str| {
            Err(InputError {
                path,
                message: message.into(),
            })
        };
        if self.thread_id.is_empty() {
            return bad("threadId".into(), "must not be empty");
        }
        if self.run_id.is_empty() {
            return bad("runId".into(), "must not be empty");
        }
        for (i, m) in self.messages.iter().enumerate() {
            if m.id().is_empty() {
                return bad(format!("messages[{i}].id"), "must not be empty");
            }
        }
        for (i, t) in self.tools.iter().enumerate() {
            if t.name.is_empty() {
                return bad(format!("tools[{i}].name"), "must not be empty");
            }
        }
        Ok(())
    }
}

/// A conversation message; the seven AG-UI roles, tagged by `role`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    Developer(TextMessage),
    System(TextMessage),
    Assistant(AssistantMessage),
    User(UserMessage),
    Tool(ToolMessage),
    Activity(ActivityMessage),
    Reasoning(TextMessage),
}

impl Message {
    /// The message id.
    pub fn id(&self) -> &str {
        match self {
            Message::Developer(m) | Message::System(m) | Message::Reasoning(m) => &m.id,
            Message::Assistant(m) => &m.id,
            Message::User(m) => &m.id,
            Message::Tool(m) => &m.id,
            Message::Activity(m) => &m.id,
        }
    }

    /// The wire role name.
    pub fn role(&self) -> &'static str {
        match self {
            Message::Developer(_) => "developer",
            Message::System(_) => "system",
            Message::Assistant(_) => "assistant",
            Message::User(_) => "user",
            Message::Tool(_) => "tool",
            Message::Activity(_) => "activity",
            Message::Reasoning(_) => "reasoning",
        }
    }
}

/// Developer, system and reasoning messages: an id and string content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextMessage {
    pub id: String,
    pub content: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// An assistant message; content is optional when it only calls tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssistantMessage {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A user message: text or multimodal parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    pub id: String,
    pub content: Content,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A tool result message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolMessage {
    pub id: String,
    pub content: Content,
    pub tool_call_id: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A structured activity (progress, plan, …) shown in the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivityMessage {
    pub id: String,
    pub activity_type: String,
    pub content: Map<String, Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A tool call carried by an assistant message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionCall,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The function a tool call invokes; `arguments` is a JSON string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Message content: a string, or (user/tool messages) a list of parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// One multimodal part: AG-UI 1.0 text/image/audio/video/document, or the
/// legacy `binary` part of the multimodal proposal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ContentPart {
    Text(TextPart),
    Image(MediaPart),
    Audio(MediaPart),
    Video(MediaPart),
    Document(MediaPart),
    Binary(BinaryPart),
}

/// A text part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextPart {
    pub text: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// An image, audio, video or document part and where its bytes are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MediaPart {
    pub source: PartSource,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Where a media part's bytes come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum PartSource {
    /// Inline base64 `value`; `mimeType` required.
    Data {
        value: String,
        #[serde(rename = "mimeType")]
        mime_type: String,
        #[serde(flatten)]
        extra: Extra,
    },
    /// A URL the agent fetches.
    Url {
        value: String,
        #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        #[serde(flatten)]
        extra: Extra,
    },
    /// A provider file handle.
    File {
        value: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider: Option<String>,
        #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        #[serde(flatten)]
        extra: Extra,
    },
}

/// The pre-1.0 `binary` part: a MIME type and one of `data`, `url`, `id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BinaryPart {
    pub mime_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A tool the client offers the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A piece of context for the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Context {
    pub description: String,
    pub value: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The answer to one pending interrupt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumeEntry {
    pub interrupt_id: String,
    pub status: ResumeStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// How an interrupt was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResumeStatus {
    Resolved,
    Cancelled,
}

/// A pause the agent asks a human to answer (`RUN_FINISHED.outcome.interrupts[]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Interrupt {
    pub id: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// How a run finished (`RUN_FINISHED.outcome`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum RunOutcome {
    Success {
        #[serde(flatten)]
        extra: Extra,
    },
    Interrupt {
        interrupts: Vec<Interrupt>,
        #[serde(flatten)]
        extra: Extra,
    },
    Cancelled {
        #[serde(flatten)]
        extra: Extra,
    },
}

impl RunOutcome {
    /// Reads the outcome of a `RUN_FINISHED` event body; `None` when absent
    /// (older agents), which means success.
    pub fn of(run_finished: &Map<String, Value>) -> Option<Result<RunOutcome, String>> {
        run_finished
            .get("outcome")
            .map(|o| serde_json::from_value(o.clone()).map_err(|e| e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn full_input_round_trips_with_unknown_fields() {
        let input = json!({
            "threadId": "t", "runId": "r", "protocolVersion": "1.0", "parentRunId": "p",
            "state": {"n": 1},
            "messages": [
                {"id": "d", "role": "developer", "content": "dev"},
                {"id": "s", "role": "system", "content": "sys", "name": "x"},
                {"id": "u", "role": "user", "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image", "source": {"type": "data", "value": "aGk=", "mimeType": "image/png"}},
                    {"type": "audio", "source": {"type": "url", "value": "https://cdn/a.mp3"}},
                    {"type": "video", "source": {"type": "file", "value": "file-1", "provider": "openai"}},
                    {"type": "document", "source": {"type": "url", "value": "https://cdn/d.pdf", "mimeType": "application/pdf"}, "metadata": {"k": 1}},
                    {"type": "binary", "mimeType": "image/jpeg", "url": "https://cdn/x.jpg", "filename": "x.jpg"}
                ]},
                {"id": "a", "role": "assistant", "toolCalls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}, "encryptedValue": "e"}]},
                {"id": "tm", "role": "tool", "toolCallId": "c", "content": "ok", "error": "none"},
                {"id": "ac", "role": "activity", "activityType": "plan", "content": {"steps": []}},
                {"id": "rs", "role": "reasoning", "content": "hmm", "encryptedValue": "z"}
            ],
            "tools": [{"name": "f", "description": "d", "parameters": {"type": "object"}, "vendorFlag": true}],
            "context": [{"description": "c", "value": "v"}],
            "forwardedProps": {"x": [1]},
            "resume": [{"interruptId": "i", "status": "resolved", "payload": {"approved": true}}],
            "futureField": {"deep": [null]}
        });
        let parsed = RunAgentInput::from_json(input.to_string().as_bytes()).unwrap();
        assert_eq!(parsed.messages.len(), 7);
        assert_eq!(parsed.messages[2].role(), "user");
        let Message::User(u) = &parsed.messages[2] else {
            panic!()
        };
        let Content::Parts(parts) = &u.content else {
            panic!()
        };
        assert!(matches!(parts[5], ContentPart::Binary(_)));
        assert_eq!(serde_json::to_value(&parsed).unwrap(), input);
    }

    #[test]
    fn errors_name_the_field() {
        let e = RunAgentInput::from_json(
            br#"{"threadId":"t","runId":"r","messages":[{"id":"1","role":"robot","content":"x"}]}"#,
        )
        .unwrap_err();
        assert!(e.path.starts_with("messages[0]"), "{e}");
        let e = RunAgentInput::from_json(br#"{"runId":"r"}"#).unwrap_err();
        assert!(e.message.contains("threadId"), "{e}");
        let e = RunAgentInput::from_json(br#"{"threadId":"t","runId":"r","tools":[{"name":5}]}"#)
            .unwrap_err();
        assert_eq!(e.path, "tools[0].name");
        let e = RunAgentInput::from_json(br#"{"threadId":"","runId":"r"}"#).unwrap_err();
        assert_eq!(e.path, "threadId");
        let e = RunAgentInput::from_json(b"{not json").unwrap_err();
        assert_eq!(e.path, "body");
        let e = RunAgentInput::from_json(br#"{"":{"a""#).unwrap_err();
        assert_eq!(e.path, "body");
        let e = RunAgentInput::from_json(br#"{"threadId":"t","runId":"r"}]}"#).unwrap_err();
        assert_eq!(e.path, "body");
        assert!(RunAgentInput::from_json(b"{\"threadId\":\"t\",\"runId\":\"r\"}\n ").is_ok());
        let e = RunAgentInput::from_json(
            br#"{"threadId":"t","runId":"r","resume":[{"interruptId":"i","status":"maybe"}]}"#,
        )
        .unwrap_err();
        assert_eq!(e.path, "resume[0].status");
    }

    #[test]
    fn outcomes_parse() {
        let ev = json!({"type":"RUN_FINISHED","outcome":{"type":"interrupt","interrupts":[{"id":"i","reason":"tool_call","toolCallId":"c","responseSchema":{}}]}});
        let RunOutcome::Interrupt { interrupts, .. } =
            RunOutcome::of(ev.as_object().unwrap()).unwrap().unwrap()
        else {
            panic!()
        };
        assert_eq!(interrupts[0].tool_call_id.as_deref(), Some("c"));
        let ev = json!({"type":"RUN_FINISHED","outcome":{"type":"cancelled"}});
        assert!(matches!(
            RunOutcome::of(ev.as_object().unwrap()).unwrap().unwrap(),
            RunOutcome::Cancelled { .. }
        ));
        assert!(RunOutcome::of(json!({"type":"RUN_FINISHED"}).as_object().unwrap()).is_none());
    }
}
