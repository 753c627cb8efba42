//! AG-UI messages ↔ Vercel AI SDK `UIMessage` (packages `ai` 5, 6 and 7).
//!
//! Export: user messages stay user messages (text parts, file parts for
//! media); system and developer messages become `system`; every run of
//! consecutive assistant, reasoning, tool and activity messages becomes ONE
//! assistant `UIMessage` (the AI SDK's shape: one message per response, its
//! steps as parts). Each step (one model call: what the agent said and the
//! tools it called, whose results follow) opens with a `step-start` part —
//! the SDK's `convertToModelMessages` splits a message at those, and
//! without them an answer written after a tool result would be placed
//! before it. Tool calls become `tool-<name>` parts whose state says how far
//! they got: `output-available` / `output-error` once a tool message answers
//! them, `approval-requested` while a pending interrupt waits on them,
//! `input-available` otherwise. Pending interrupts are also `data-interrupt`
//! parts of the last answer, as the chat stream sends them.
//!
//! The assistant message answering a user message is named after it
//! ([`answer_id`]), so the chat route can name it before the agent said
//! anything and the live chat and the export agree on its id.
//!
//! Import (the chat route): the newest `UIMessage` of a chat request becomes
//! the AG-UI user message of the run, or — for an assistant message that
//! answers pending interrupts (approval responses of `ai` 6+, or tool
//! outputs the client added, as `ai` 5 answers) — the run's `resume` entries.

use super::{
    Attribution, Speakers, content_text, interrupt_for_call, media, parse_args, tool_calls,
};
use serde_json::{Map, Value, json};

/// The id of the assistant `UIMessage` answering user message `user_id`.
pub fn answer_id(user_id: &str) -> String {
    format!("{user_id}-answer")
}

/// The assistant `UIMessage` being built by [`ui_messages`].
struct Answer {
    id: String,
    parts: Vec<Value>,
    /// The agents that spoke in it, in order (its metadata).
    agents: Vec<String>,
    /// Who started it and who answered its interrupts (its metadata).
    who: Attribution,
    /// The current step called tools: what the agent says next is a new step.
    step_called_tools: bool,
}

/// The conversation `messages` (AG-UI, as folded) as AI SDK `UIMessage`s;
/// `interrupts` are the thread's pending ones, `speakers` which agent
/// produced each message: an answer's `metadata` is `{agent, agents}` (the
/// agent that spoke last, and all in order), as the chat stream sends it,
/// with `startedBy` (who started the run it began with) and `answeredBy`
/// (`{runId, by}` of each run in it that answered an interrupt) where the
/// runs name them, and where a handoff changed the agent a `data-agent` part
/// `{agent, from}` marks the switch.
pub fn ui_messages(messages: &[Value], interrupts: &[Value], speakers: &Speakers) -> Vec<Value> {
    let calls = tool_calls(messages);
    let results: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").collect();
    let mut out: Vec<Value> = Vec::new();
    let mut open: Option<Answer> = None;
    // The user message the next assistant message answers (named after it).
    let mut asked: Option<String> = None;
    let close = |open: &mut Option<Answer>, out: &mut Vec<Value>| {
        if let Some(a) = open.take() {
            let mut m = json!({"id": a.id, "role": "assistant", "parts": a.parts});
            if let Some(last) = a.agents.last() {
                m["metadata"] = json!({"agent": last, "agents": a.agents});
                if let Some(by) = a.who.started_by {
                    m["metadata"]["startedBy"] = by.into();
                }
                if !a.who.answered_by.is_empty() {
                    m["metadata"]["answeredBy"] = a.who.answered_by.into();
                }
            }
            out.push(m);
        }
    };
    let step = || json!({"type": "step-start"});
    for m in messages {
        let id = m["id"].as_str().unwrap_or_default().to_owned();
        match m["role"].as_str().unwrap_or_default() {
            "user" => {
                close(&mut open, &mut out);
                out.push(json!({"id": id, "role": "user", "parts": user_parts(&m["content"])}));
                asked = Some(id);
            }
            role @ ("system" | "developer") => {
                close(&mut open, &mut out);
                let mut msg = json!({"id": id, "role": "system",
                    "parts": [{"type": "text", "text": content_text(&m["content"])}]});
                if role == "developer" {
                    msg["metadata"] = json!({"aguiRole": "developer"});
                }
                out.push(msg);
            }
            role => {
                let answer = open.get_or_insert_with(|| Answer {
                    id: asked.take().map(|u| answer_id(&u)).unwrap_or(id.clone()),
                    parts: vec![step()],
                    agents: Vec::new(),
                    who: Attribution::default(),
                    step_called_tools: false,
                });
                if matches!(role, "reasoning" | "assistant") && answer.step_called_tools {
                    answer.parts.push(step());
                    answer.step_called_tools = false;
                }
                // A tool result answering a call says nothing of who speaks.
                let speaker = speakers.of(&id).filter(|_| role != "tool");
                if let Some(run) = speakers.run_of(&id).filter(|_| role != "tool") {
                    answer.who.note(run);
                }
                if let Some(s) = speaker
                    && answer.agents.last().map(String::as_str) != Some(s)
                {
                    if let Some(from) = answer.agents.last() {
                        answer.parts.push(
                            json!({"type": "data-agent", "data": {"agent": s, "from": from}}),
                        );
                    }
                    answer.agents.push(s.to_owned());
                }
                let parts = &mut answer.parts;
                match role {
                    "reasoning" => {
                        let mut p = json!({"type": "reasoning",
                            "text": content_text(&m["content"]), "state": "done"});
                        if let Some(enc) = m.get("encryptedValue") {
                            // The type travels with its value (AG-UI 1.1,
                            // `events/reasoning`): bytes without it are
                            // ambiguous to the provider that issued them.
                            let mut agui = json!({"encryptedValue": enc});
                            if let Some(kind) = m.get("encryptedValueType") {
                                agui["encryptedValueType"] = kind.clone();
                            }
                            p["providerMetadata"] = json!({ "agui": agui });
                        }
                        parts.push(p);
                    }
                    "assistant" => {
                        let text = content_text(&m["content"]);
                        if !text.is_empty() {
                            parts.push(json!({"type": "text", "text": text, "state": "done"}));
                        }
                        for c in m
                            .get("toolCalls")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                        {
                            parts.push(tool_part(c, &results, interrupts));
                            answer.step_called_tools = true;
                        }
                    }
                    "tool" => {
                        let call = m["toolCallId"].as_str().unwrap_or_default();
                        if !calls.iter().any(|(id, ..)| id == call) {
                            // A result without its call: a dynamic tool part.
                            let mut p = json!({"type": "dynamic-tool", "toolName": "unknown",
                                "toolCallId": call, "input": null});
                            set_result(&mut p, m);
                            parts.push(p);
                        }
                    }
                    "activity" => parts.push(json!({"type": "data-activity", "id": id,
                        "data": {"activityType": m["activityType"], "content": m["content"]}})),
                    _ => {}
                }
            }
        }
    }
    // Every pending interrupt is a data part of the last answer, as the
    // chat stream sends it: how an `ai` 5 app (no approval state) learns
    // the interrupt and the tool call it waits on.
    if let Some(first) = interrupts.first() {
        let answer = open.get_or_insert_with(|| Answer {
            id: (asked.take().map(|u| answer_id(&u)))
                .unwrap_or_else(|| first["id"].as_str().unwrap_or("interrupt").to_owned()),
            parts: vec![step()],
            agents: Vec::new(),
            who: Attribution::default(),
            step_called_tools: false,
        });
        for i in interrupts {
            answer
                .parts
                .push(json!({"type": "data-interrupt", "id": i["id"], "data": i}));
        }
    }
    close(&mut open, &mut out);
    out
}

/// The parts of a user message's AG-UI content.
fn user_parts(content: &Value) -> Vec<Value> {
    match content {
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| {
                if p["type"] == "text" {
                    return Some(json!({"type": "text", "text": p["text"]}));
                }
                let m = media(p)?;
                let url = match (m.url, m.data) {
                    (Some(url), _) => url,
                    (None, Some(data)) => format!("data:{};base64,{data}", m.media_type),
                    (None, None) => return None,
                };
                let mut f = json!({"type": "file", "mediaType": m.media_type, "url": url});
                if let Some(name) = m.filename {
                    f["filename"] = name.into();
                }
                Some(f)
            })
            .collect(),
        other => vec![json!({"type": "text", "text": content_text(other)})],
    }
}

/// A `tool-<name>` part for AG-UI tool call `c`.
fn tool_part(c: &Value, results: &[&Value], interrupts: &[Value]) -> Value {
    let id = c["id"].as_str().unwrap_or_default();
    let name = c["function"]["name"].as_str().unwrap_or("unknown");
    let input = parse_args(c["function"]["arguments"].as_str().unwrap_or_default());
    let mut p = json!({"type": format!("tool-{name}"), "toolCallId": id,
        "state": "input-available", "input": input});
    if let Some(r) = results.iter().find(|r| r["toolCallId"] == id) {
        set_result(&mut p, r);
    } else if let Some(interrupt) = interrupt_for_call(interrupts, id) {
        p["state"] = "approval-requested".into();
        p["approval"] = json!({"id": interrupt});
    }
    p
}

/// Sets a tool part's outcome from AG-UI tool message `r`.
fn set_result(p: &mut Value, r: &Value) {
    match r.get("error").and_then(Value::as_str) {
        Some(e) => {
            p["state"] = "output-error".into();
            p["errorText"] = e.into();
        }
        None => {
            p["state"] = "output-available".into();
            p["output"] = r["content"].clone();
        }
    }
}

/// What the newest message of a chat request asks for.
#[derive(Debug, PartialEq)]
pub enum ChatTurn {
    /// A new user message (AG-UI), for a run.
    User(Value),
    /// Approval answers (AG-UI `ResumeEntry` objects), for a resume.
    Approvals(Vec<Value>),
}

/// Reads the newest `UIMessage` of a chat request; `pending` are the
/// thread's pending interrupts (which tool outputs answer one).
pub fn chat_turn(message: &Value, pending: &[Value]) -> Result<ChatTurn, String> {
    let id = message["id"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or("the last message needs a non-empty string 'id'")?;
    let parts = message["parts"]
        .as_array()
        .ok_or("the last message needs a 'parts' array")?;
    match message["role"].as_str() {
        Some("user") => Ok(ChatTurn::User(user_message(id, parts)?)),
        Some("assistant") => {
            let answers = approvals(parts, pending);
            if answers.is_empty() {
                Err("the last message is an assistant message answering no pending interrupt (no approval response, no tool output for a call an interrupt waits on); send a user message".into())
            } else {
                Ok(ChatTurn::Approvals(answers))
            }
        }
        _ => Err("the last message must have role 'user' (or be an assistant message answering tool approvals)".into()),
    }
}

/// An AG-UI user message from a `UIMessage`'s parts: text parts (joined,
/// when there is nothing else), file parts as media parts; other parts are
/// not sent to the agent.
fn user_message(id: &str, parts: &[Value]) -> Result<Value, String> {
    let mut content: Vec<Value> = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        match p["type"].as_str() {
            Some("text") => {
                let text = p["text"]
                    .as_str()
                    .ok_or(format!("parts[{i}]: 'text' must be a string"))?;
                content.push(json!({"type": "text", "text": text}));
            }
            Some("file") => content.push(file_part(p).ok_or(format!(
                "parts[{i}]: a file part needs string 'url' and 'mediaType'"
            ))?),
            _ => {}
        }
    }
    if content.is_empty() {
        return Err("the user message has no text or file part".into());
    }
    let content = if content.iter().all(|p| p["type"] == "text") {
        Value::String(content_text(&Value::Array(content)))
    } else {
        Value::Array(content)
    };
    Ok(json!({"id": id, "role": "user", "content": content}))
}

/// An AG-UI 1.0 media part for an AI SDK file part: a `data:` URL becomes
/// inline data, any other URL a URL source.
fn file_part(p: &Value) -> Option<Value> {
    let url = p["url"].as_str()?;
    let media_type = p["mediaType"].as_str()?;
    let kind = match media_type.split('/').next() {
        Some("image") => "image",
        Some("audio") => "audio",
        Some("video") => "video",
        _ => "document",
    };
    let source = match url
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"))
    {
        Some((mime, data)) => {
            let mime = if mime.is_empty() { media_type } else { mime };
            json!({"type": "data", "value": data, "mimeType": mime})
        }
        None => json!({"type": "url", "value": url, "mimeType": media_type}),
    };
    let mut part = Map::new();
    part.insert("type".into(), kind.into());
    part.insert("source".into(), source);
    if let Some(name) = p["filename"].as_str() {
        part.insert("filename".into(), name.into());
    }
    Some(Value::Object(part))
}

/// Resume entries for the answers among an assistant message's tool parts:
/// - `state: "approval-responded"` (`ai` 6+, `addToolApprovalResponse`):
///   the approval id is the interrupt id, `{approved, reason?}` its payload;
/// - `state: "output-available"` on a call a `pending` interrupt waits on
///   (`ai` 5 has no approvals: its apps answer with `addToolResult`): the
///   output is the payload. Outputs of calls no pending interrupt waits on
///   are the agent's own results, already in the thread.
fn approvals(parts: &[Value], pending: &[Value]) -> Vec<Value> {
    parts
        .iter()
        .filter_map(|p| match p["state"].as_str()? {
            "approval-responded" => {
                let approval = p.get("approval")?;
                let id = approval["id"].as_str()?;
                let mut payload = json!({"approved": approval["approved"].as_bool()?});
                if let Some(reason) = approval["reason"].as_str() {
                    payload["reason"] = reason.into();
                }
                Some(json!({"interruptId": id, "status": "resolved", "payload": payload}))
            }
            "output-available" => {
                let id = interrupt_for_call(pending, p["toolCallId"].as_str()?)?;
                Some(json!({"interruptId": id, "status": "resolved", "payload": p["output"]}))
            }
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_becomes_one_assistant_message_with_its_steps_as_parts() {
        let messages = vec![
            json!({"id": "u1", "role": "user", "content": "hi"}),
            json!({"id": "r1", "role": "reasoning", "content": "think"}),
            json!({"id": "a1", "role": "assistant", "content": "", "toolCalls": [
                {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":1}"}},
                {"id": "c2", "type": "function", "function": {"name": "transfer", "arguments": "{}"}},
                {"id": "c3", "type": "function", "function": {"name": "fail", "arguments": "oops"}}]}),
            json!({"id": "t1", "role": "tool", "toolCallId": "c1", "content": "found"}),
            json!({"id": "t3", "role": "tool", "toolCallId": "c3", "content": "", "error": "boom"}),
            json!({"id": "a2", "role": "assistant", "content": "done"}),
            json!({"id": "x1", "role": "activity", "activityType": "plan", "content": {"n": 1}}),
        ];
        let interrupts = vec![json!({"id": "int-c2", "toolCallId": "c2"})];
        let ui = ui_messages(&messages, &interrupts, &Speakers::default());
        assert_eq!(ui.len(), 2);
        assert_eq!(
            ui[0],
            json!({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]})
        );
        assert_eq!(
            ui[1],
            json!({"id": "u1-answer", "role": "assistant", "parts": [
                {"type": "step-start"},
                {"type": "reasoning", "text": "think", "state": "done"},
                {"type": "tool-lookup", "toolCallId": "c1", "state": "output-available", "input": {"q": 1}, "output": "found"},
                {"type": "tool-transfer", "toolCallId": "c2", "state": "approval-requested", "input": {}, "approval": {"id": "int-c2"}},
                {"type": "tool-fail", "toolCallId": "c3", "state": "output-error", "input": "oops", "errorText": "boom"},
                // What the agent says after the tools ran is the next step.
                {"type": "step-start"},
                {"type": "text", "text": "done", "state": "done"},
                {"type": "data-activity", "id": "x1", "data": {"activityType": "plan", "content": {"n": 1}}},
                {"type": "data-interrupt", "id": "int-c2", "data": {"id": "int-c2", "toolCallId": "c2"}},
            ]})
        );
    }

    #[test]
    fn media_become_file_parts_and_back() {
        let content = json!([
            {"type": "text", "text": "look"},
            {"type": "image", "source": {"type": "data", "value": "AAAA", "mimeType": "image/png"}},
            {"type": "document", "source": {"type": "url", "value": "https://x/y.pdf", "mimeType": "application/pdf"}},
            {"type": "binary", "mimeType": "audio/wav", "data": "BBBB", "filename": "a.wav"},
        ]);
        let ui = ui_messages(
            &[json!({"id": "u", "role": "user", "content": content})],
            &[],
            &Speakers::default(),
        );
        let parts = ui[0]["parts"].as_array().unwrap();
        assert_eq!(
            parts[1],
            json!({"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,AAAA"})
        );
        assert_eq!(
            parts[2],
            json!({"type": "file", "mediaType": "application/pdf", "url": "https://x/y.pdf"})
        );
        assert_eq!(parts[3]["filename"], "a.wav");
        let back = chat_turn(&json!({"id": "u", "role": "user", "parts": parts}), &[]).unwrap();
        let ChatTurn::User(m) = back else {
            panic!("user")
        };
        assert_eq!(m["content"][1], content[1]);
        assert_eq!(m["content"][2], content[2]);
        assert_eq!(
            m["content"][3],
            json!({"type": "audio", "source": {"type": "data", "value": "BBBB", "mimeType": "audio/wav"}, "filename": "a.wav"})
        );
    }

    #[test]
    fn chat_turns() {
        let user = json!({"id": "m1", "role": "user", "parts": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
        assert_eq!(
            chat_turn(&user, &[]).unwrap(),
            ChatTurn::User(json!({"id": "m1", "role": "user", "content": "ab"}))
        );
        let answer = json!({"id": "a", "role": "assistant", "parts": [
            {"type": "tool-transfer", "toolCallId": "c", "state": "approval-responded",
             "input": {}, "approval": {"id": "int-c", "approved": false, "reason": "no"}}]});
        assert_eq!(
            chat_turn(&answer, &[]).unwrap(),
            ChatTurn::Approvals(vec![json!({"interruptId": "int-c", "status": "resolved",
                "payload": {"approved": false, "reason": "no"}})])
        );
        assert!(chat_turn(&json!({"id": "a", "role": "assistant", "parts": []}), &[]).is_err());
        assert!(chat_turn(&json!({"role": "user", "parts": []}), &[]).is_err());
        assert!(chat_turn(&json!({"id": "x", "role": "user", "parts": []}), &[]).is_err());
        // `ai` 5: a tool output the client added answers the interrupt
        // waiting on that call; the agent's own results answer nothing.
        let pending = [json!({"id": "int-c", "toolCallId": "c"})];
        let added = json!({"id": "a", "role": "assistant", "parts": [
            {"type": "tool-lookup", "toolCallId": "l", "state": "output-available", "input": {}, "output": "42"},
            {"type": "data-interrupt", "id": "int-c", "data": pending[0]},
            {"type": "tool-transfer", "toolCallId": "c", "state": "output-available",
             "input": {}, "output": {"approved": true}}]});
        assert_eq!(
            chat_turn(&added, &pending).unwrap(),
            ChatTurn::Approvals(vec![json!({"interruptId": "int-c", "status": "resolved",
                "payload": {"approved": true}})])
        );
        assert!(chat_turn(&added, &[]).is_err(), "nothing pending");
    }
}
