//! AG-UI messages ↔ Vercel AI SDK `UIMessage` (package `ai` 7.x).
//!
//! Export: user messages stay user messages (text parts, file parts for
//! media); system and developer messages become `system`; every run of
//! consecutive assistant, reasoning, tool and activity messages becomes ONE
//! assistant `UIMessage` (the AI SDK's shape: one message per response, its
//! steps as parts), opening with a `step-start` part. Tool calls become
//! `tool-<name>` parts whose state says how far they got: `output-available`
//! / `output-error` once a tool message answers them, `approval-requested`
//! while a pending interrupt waits on them, `input-available` otherwise.
//!
//! Import (the chat route): the newest `UIMessage` of a chat request becomes
//! the AG-UI user message of the run, or — for an assistant message whose
//! tool parts carry approval answers — the run's `resume` entries.

use super::{content_text, interrupt_for_call, media, parse_args, tool_calls};
use serde_json::{Map, Value, json};

/// The conversation `messages` (AG-UI, as folded) as AI SDK `UIMessage`s;
/// `interrupts` are the thread's pending ones.
pub fn ui_messages(messages: &[Value], interrupts: &[Value]) -> Vec<Value> {
    let calls = tool_calls(messages);
    let results: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").collect();
    let mut out: Vec<Value> = Vec::new();
    // The assistant message being built and its parts.
    let mut open: Option<(String, Vec<Value>)> = None;
    let close = |open: &mut Option<(String, Vec<Value>)>, out: &mut Vec<Value>| {
        if let Some((id, parts)) = open.take() {
            out.push(json!({"id": id, "role": "assistant", "parts": parts}));
        }
    };
    for m in messages {
        let id = m["id"].as_str().unwrap_or_default().to_owned();
        match m["role"].as_str().unwrap_or_default() {
            "user" => {
                close(&mut open, &mut out);
                out.push(json!({"id": id, "role": "user", "parts": user_parts(&m["content"])}));
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
                let parts = &mut open
                    .get_or_insert_with(|| (id.clone(), vec![json!({"type": "step-start"})]))
                    .1;
                match role {
                    "reasoning" => {
                        let mut p = json!({"type": "reasoning",
                            "text": content_text(&m["content"]), "state": "done"});
                        if let Some(enc) = m.get("encryptedValue") {
                            p["providerMetadata"] = json!({"agui": {"encryptedValue": enc}});
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
    // Interrupts that wait on no tool call: data parts of the last answer.
    let loose: Vec<&Value> = interrupts
        .iter()
        .filter(|i| {
            !i["toolCallId"]
                .as_str()
                .is_some_and(|c| calls.iter().any(|(id, ..)| id == c))
        })
        .collect();
    if !loose.is_empty() {
        let parts = &mut open
            .get_or_insert_with(|| {
                let id = loose[0]["id"].as_str().unwrap_or("interrupt").to_owned();
                (id, vec![json!({"type": "step-start"})])
            })
            .1;
        for i in loose {
            parts.push(json!({"type": "data-interrupt", "id": i["id"], "data": i}));
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

/// Reads the newest `UIMessage` of a chat request.
pub fn chat_turn(message: &Value) -> Result<ChatTurn, String> {
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
            let answers = approvals(parts);
            if answers.is_empty() {
                Err("the last message is an assistant message without approval answers; send a user message".into())
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

/// Resume entries for the approval answers among an assistant message's
/// tool parts (`state: "approval-responded"`): the approval id is the
/// interrupt id, the answer `{approved, reason?}` its payload.
fn approvals(parts: &[Value]) -> Vec<Value> {
    parts
        .iter()
        .filter(|p| p["state"] == "approval-responded")
        .filter_map(|p| {
            let approval = p.get("approval")?;
            let id = approval["id"].as_str()?;
            let mut payload = json!({"approved": approval["approved"].as_bool()?});
            if let Some(reason) = approval["reason"].as_str() {
                payload["reason"] = reason.into();
            }
            Some(json!({"interruptId": id, "status": "resolved", "payload": payload}))
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
        let ui = ui_messages(&messages, &interrupts);
        assert_eq!(ui.len(), 2);
        assert_eq!(
            ui[0],
            json!({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]})
        );
        assert_eq!(
            ui[1],
            json!({"id": "r1", "role": "assistant", "parts": [
                {"type": "step-start"},
                {"type": "reasoning", "text": "think", "state": "done"},
                {"type": "tool-lookup", "toolCallId": "c1", "state": "output-available", "input": {"q": 1}, "output": "found"},
                {"type": "tool-transfer", "toolCallId": "c2", "state": "approval-requested", "input": {}, "approval": {"id": "int-c2"}},
                {"type": "tool-fail", "toolCallId": "c3", "state": "output-error", "input": "oops", "errorText": "boom"},
                {"type": "text", "text": "done", "state": "done"},
                {"type": "data-activity", "id": "x1", "data": {"activityType": "plan", "content": {"n": 1}}},
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
        let back = chat_turn(&json!({"id": "u", "role": "user", "parts": parts})).unwrap();
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
            chat_turn(&user).unwrap(),
            ChatTurn::User(json!({"id": "m1", "role": "user", "content": "ab"}))
        );
        let answer = json!({"id": "a", "role": "assistant", "parts": [
            {"type": "tool-transfer", "toolCallId": "c", "state": "approval-responded",
             "input": {}, "approval": {"id": "int-c", "approved": false, "reason": "no"}}]});
        assert_eq!(
            chat_turn(&answer).unwrap(),
            ChatTurn::Approvals(vec![json!({"interruptId": "int-c", "status": "resolved",
                "payload": {"approved": false, "reason": "no"}})])
        );
        assert!(chat_turn(&json!({"id": "a", "role": "assistant", "parts": []})).is_err());
        assert!(chat_turn(&json!({"role": "user", "parts": []})).is_err());
        assert!(chat_turn(&json!({"id": "x", "role": "user", "parts": []})).is_err());
    }
}
