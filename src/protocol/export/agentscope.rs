//! AG-UI messages → AgentScope `Msg` JSON (agentscope 2.0.x,
//! `agentscope.message.Msg.model_validate` accepts each object).
//!
//! AgentScope allows three roles and constrains their blocks: `user` holds
//! only `text` and `data` blocks, `system` only `text`, `assistant`
//! anything. So: user → `user` (text, media as `data` blocks); system and
//! developer → `system` (text only); every run of consecutive assistant,
//! reasoning, tool and activity messages of one agent → ONE `assistant`
//! Msg named after that agent, as AgentScope's own agents write a reply
//! (where the producing agent changes — a handoff — a new Msg begins, as
//! each AgentScope agent writes its own replies): `thinking` blocks, `text` blocks,
//! `tool_call` blocks (raw JSON input string) each followed by its
//! `tool_result` block in the same Msg. Activities go to the Msg's
//! `metadata.agui_activities`; the AG-UI message ids of a merged Msg to
//! `metadata.agui_message_ids`; the producing agent, when a run names it,
//! to `metadata.agui_agent`; who started the run it began with to
//! `metadata.agui_started_by`, and who answered an interrupt in it to
//! `metadata.agui_answered_by` (`{runId, by}` a run).

use super::{Speaker, Speakers, content_text, interrupt_for_call, media, tool_calls};
use serde_json::{Value, json};

/// Notes in a Msg's metadata who started the run of one of its messages
/// (`agui_started_by`, the first run's) or, for a run that answered an
/// interrupt, who answered it (`agui_answered_by`, one `{runId, by}` a run).
fn note_attribution(metadata: &mut Value, run: &Speaker) {
    if run.answers {
        let entry = run.answer_json();
        match metadata["agui_answered_by"].as_array_mut() {
            Some(list) if list.contains(&entry) => {}
            Some(list) => list.push(entry),
            None => metadata["agui_answered_by"] = json!([entry]),
        }
    } else if metadata.get("agui_started_by").is_none()
        && let Some(by) = &run.by
    {
        metadata["agui_started_by"] = by.clone().into();
    }
}

/// The conversation `messages` (AG-UI, as folded) as AgentScope `Msg`
/// objects; `speakers` say which agent produced each message (the `name` of
/// its Msg; `agent` for a Msg whose messages no run claims), `interrupts`
/// are the thread's pending ones (their tool calls are `asking`).
pub fn msgs(
    messages: &[Value],
    interrupts: &[Value],
    agent: &str,
    speakers: &Speakers,
) -> Vec<Value> {
    let calls = tool_calls(messages);
    let mut out: Vec<Value> = Vec::new();
    let mut open: Option<Value> = None;
    let close = |open: &mut Option<Value>, out: &mut Vec<Value>| {
        if let Some(m) = open.take() {
            out.push(m);
        }
    };
    for m in messages {
        let id = m["id"].as_str().unwrap_or_default();
        match m["role"].as_str().unwrap_or_default() {
            "user" => {
                close(&mut open, &mut out);
                let name = m["name"].as_str().unwrap_or("user");
                out.push(json!({"id": id, "name": name, "role": "user",
                    "content": user_blocks(&m["content"]), "metadata": {}}));
            }
            role @ ("system" | "developer") => {
                close(&mut open, &mut out);
                let mut msg = json!({"id": id, "name": "system", "role": "system",
                    "content": [{"type": "text", "text": content_text(&m["content"])}],
                    "metadata": {}});
                if role == "developer" {
                    msg["metadata"]["agui_role"] = "developer".into();
                }
                out.push(msg);
            }
            role => {
                // A tool result in the Msg of its call says nothing of who
                // speaks; anything else does.
                let answers_a_call = role == "tool"
                    && calls
                        .iter()
                        .any(|(c, ..)| m["toolCallId"].as_str() == Some(c.as_str()));
                let speaker = speakers.of(id).filter(|_| !answers_a_call);
                let named = open.as_ref().map(|o| o["metadata"]["agui_agent"].clone());
                if let (Some(s), Some(Value::String(current))) = (speaker, &named)
                    && s != current.as_str()
                {
                    close(&mut open, &mut out);
                }
                let msg = open.get_or_insert_with(|| {
                    json!({"id": id, "name": agent, "role": "assistant", "content": [],
                        "metadata": {"agui_message_ids": []}})
                });
                if let Some(s) = speaker
                    && msg["metadata"].get("agui_agent").is_none()
                {
                    msg["name"] = s.into();
                    msg["metadata"]["agui_agent"] = s.into();
                }
                if let Some(run) = speakers.run_of(id).filter(|_| !answers_a_call) {
                    note_attribution(&mut msg["metadata"], run);
                }
                if let Some(ids) = msg["metadata"]["agui_message_ids"].as_array_mut() {
                    ids.push(id.into());
                }
                let blocks = match msg["content"].as_array_mut() {
                    Some(b) => b,
                    None => continue,
                };
                match role {
                    "reasoning" => blocks
                        .push(json!({"type": "thinking", "thinking": content_text(&m["content"])})),
                    "assistant" => {
                        let text = content_text(&m["content"]);
                        if !text.is_empty() {
                            blocks.push(json!({"type": "text", "text": text}));
                        }
                        for c in m
                            .get("toolCalls")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                        {
                            let call = c["id"].as_str().unwrap_or_default();
                            let result = messages
                                .iter()
                                .find(|r| r["role"] == "tool" && r["toolCallId"] == call);
                            let state = match (result, interrupt_for_call(interrupts, call)) {
                                (Some(_), _) => "finished",
                                (None, Some(_)) => "asking",
                                (None, None) => "pending",
                            };
                            let name = c["function"]["name"].as_str().unwrap_or("unknown");
                            blocks.push(json!({"type": "tool_call", "id": call, "name": name,
                                "input": c["function"]["arguments"].as_str().unwrap_or_default(),
                                "state": state}));
                            if let Some(r) = result {
                                blocks.push(tool_result(call, name, r));
                            }
                        }
                    }
                    "tool" => {
                        let call = m["toolCallId"].as_str().unwrap_or_default();
                        if !calls.iter().any(|(id, ..)| id == call) {
                            blocks.push(tool_result(call, "unknown", m));
                        }
                    }
                    "activity" => {
                        let activity = json!({"id": id, "activityType": m["activityType"],
                            "content": m["content"]});
                        match msg["metadata"]["agui_activities"].as_array_mut() {
                            Some(a) => a.push(activity),
                            None => msg["metadata"]["agui_activities"] = json!([activity]),
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    close(&mut open, &mut out);
    out
}

/// A `tool_result` block for AG-UI tool message `r` answering call `id`.
fn tool_result(id: &str, name: &str, r: &Value) -> Value {
    match r.get("error").and_then(Value::as_str) {
        Some(e) => json!({"type": "tool_result", "id": id, "name": name, "output": e,
            "state": "error"}),
        None => json!({"type": "tool_result", "id": id, "name": name,
            "output": content_text(&r["content"]), "state": "success"}),
    }
}

/// A user message's content as text and `data` blocks.
fn user_blocks(content: &Value) -> Vec<Value> {
    match content {
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| {
                if p["type"] == "text" {
                    return Some(json!({"type": "text", "text": p["text"]}));
                }
                let m = media(p)?;
                let source = match (m.data, m.url) {
                    (Some(data), _) => {
                        json!({"type": "base64", "data": data, "media_type": m.media_type})
                    }
                    (None, Some(url)) => {
                        json!({"type": "url", "url": url, "media_type": m.media_type})
                    }
                    (None, None) => return None,
                };
                let mut block = json!({"type": "data", "source": source});
                if let Some(name) = m.filename {
                    block["name"] = name.into();
                }
                Some(block)
            })
            .collect(),
        other => vec![json!({"type": "text", "text": content_text(other)})],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_and_blocks() {
        let messages = vec![
            json!({"id": "s", "role": "developer", "content": "be brief"}),
            json!({"id": "u", "role": "user", "content": [
                {"type": "text", "text": "see"},
                {"type": "image", "source": {"type": "url", "value": "https://x/a.png", "mimeType": "image/png"}}]}),
            json!({"id": "r", "role": "reasoning", "content": "hm"}),
            json!({"id": "a", "role": "assistant", "toolCalls": [
                {"id": "c", "type": "function", "function": {"name": "go", "arguments": "{\"x\":1}"}},
                {"id": "d", "type": "function", "function": {"name": "pay", "arguments": "{}"}}]}),
            json!({"id": "t", "role": "tool", "toolCallId": "c", "content": "ok"}),
        ];
        let out = msgs(
            &messages,
            &[json!({"id": "int-d", "toolCallId": "d"})],
            "bot",
            &Speakers::default(),
        );
        assert_eq!(out.len(), 3);
        assert_eq!(out[0]["role"], "system");
        assert_eq!(out[0]["metadata"]["agui_role"], "developer");
        assert_eq!(
            out[1]["content"][1],
            json!({"type": "data", "source": {"type": "url", "url": "https://x/a.png", "media_type": "image/png"}})
        );
        assert_eq!(
            out[2],
            json!({"id": "r", "name": "bot", "role": "assistant", "content": [
                {"type": "thinking", "thinking": "hm"},
                {"type": "tool_call", "id": "c", "name": "go", "input": "{\"x\":1}", "state": "finished"},
                {"type": "tool_result", "id": "c", "name": "go", "output": "ok", "state": "success"},
                {"type": "tool_call", "id": "d", "name": "pay", "input": "{}", "state": "asking"},
            ], "metadata": {"agui_message_ids": ["r", "a", "t"]}})
        );
    }

    #[test]
    fn a_handoff_starts_a_msg_named_after_the_agent_now_speaking() {
        let messages = vec![
            json!({"id": "u", "role": "user", "content": "bill?"}),
            json!({"id": "a", "role": "assistant", "toolCalls": [
                {"id": "c", "type": "function", "function": {"name": "transfer_to_billing", "arguments": "{}"}}]}),
            json!({"id": "t", "role": "tool", "toolCallId": "c", "content": "Transferred."}),
            json!({"id": "b", "role": "assistant", "content": "paid"}),
        ];
        let mut speakers = Speakers::default();
        speakers.note_runs(&[
            json!({"agent": "triage", "outputMessageIds": ["a"]}),
            json!({"agent": "billing", "outputMessageIds": ["b"]}),
        ]);
        let out = msgs(&messages, &[], "thread-agent", &speakers);
        let names: Vec<&str> = out.iter().map(|m| m["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["user", "triage", "billing"]);
        assert_eq!(out[1]["content"][1]["type"], "tool_result");
        assert_eq!(out[2]["content"], json!([{"type": "text", "text": "paid"}]));
        // Without speakers, one Msg under the thread's agent, as before.
        let out = msgs(&messages, &[], "thread-agent", &Speakers::default());
        assert_eq!(out.len(), 2);
        assert_eq!(out[1]["name"], "thread-agent");
    }
}
