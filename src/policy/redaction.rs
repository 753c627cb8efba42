//! Redaction rules: regex replacement over text and reasoning deltas, tool
//! arguments, tool results, state values, message snapshots and the run's
//! input as journaled on `RUN_STARTED` (each field with its own target),
//! before anything is journaled.
//!
//! Streams arrive in pieces, and a secret can be split across two deltas.
//! For each open message or tool call the filter holds back the last
//! `max_match_bytes − 1` bytes (the longest match a rule may need, set per
//! rule, default 256) and only emits text that no later delta can still turn
//! into a match; the held tail is flushed, redacted, just before the message's
//! or call's END. So a viewer may see text up to that many bytes later than
//! the agent sent it, and never a secret.

use super::Scope;
use super::kind::{Kind, Rule, RuleStore};
use crate::auth::Principal;
use crate::protocol::hooks::EventFilter;
use crate::protocol::{Event, EventType};
use regex::Regex;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;

/// Where a redaction rule looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// Text and reasoning message deltas, and the input's message text.
    Text,
    ToolArgs,
    ToolResults,
    State,
}

const ALL: [Target; 4] = [
    Target::Text,
    Target::ToolArgs,
    Target::ToolResults,
    Target::State,
];

/// The `redaction` kind.
pub const KIND: Kind = Kind::new("redaction", compile);

/// A redaction rule's own keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fields {
    pattern: Option<String>,
    replacement: Option<String>,
    max_match_bytes: Option<usize>,
    applies_to: Option<Vec<Target>>,
}

fn compile(mut rule: Rule, store: &mut RuleStore) -> Result<(), String> {
    let fields: Fields = rule.fields()?;
    let pattern = fields
        .pattern
        .as_deref()
        .ok_or("redaction rules need `pattern` (a regex)")?;
    let pattern = Regex::new(pattern).map_err(|e| format!("`pattern` does not compile: {e}"))?;
    store.push(RedactionRule {
        scope: rule.scope_with_when(),
        name: rule.name,
        pattern,
        replacement: fields.replacement.unwrap_or_else(|| "[redacted]".into()),
        max_match_bytes: fields.max_match_bytes.unwrap_or(256).max(1),
        targets: fields.applies_to.unwrap_or_else(|| ALL.to_vec()),
    });
    Ok(())
}

/// A compiled redaction rule.
#[derive(Debug)]
pub struct RedactionRule {
    pub name: String,
    scope: Scope,
    pattern: Regex,
    replacement: String,
    max_match_bytes: usize,
    targets: Vec<Target>,
}

/// The redaction filter for one run.
pub struct Redactor {
    rules: Vec<(String, Regex, String, Vec<Target>)>,
    /// Bytes held back per open stream (the largest `max_match_bytes − 1`).
    hold: usize,
    /// Held raw text per open stream: ("m"|"t", id).
    pending: HashMap<(char, String), String>,
    thread: String,
    user: String,
}

impl Redactor {
    /// The applicable rules for `who` on `agent`, or `None` when there are none.
    pub fn new(
        rules: &[RedactionRule],
        who: &Principal,
        agent: &str,
        thread: &str,
    ) -> Option<Redactor> {
        let applicable: Vec<&RedactionRule> = rules
            .iter()
            .filter(|r| r.scope.applies_on(who, agent, thread))
            .collect();
        if applicable.is_empty() {
            return None;
        }
        Some(Redactor {
            hold: applicable
                .iter()
                .map(|r| r.max_match_bytes - 1)
                .max()
                .unwrap_or(0),
            rules: applicable
                .iter()
                .map(|r| {
                    (
                        r.name.clone(),
                        r.pattern.clone(),
                        r.replacement.clone(),
                        r.targets.clone(),
                    )
                })
                .collect(),
            pending: HashMap::new(),
            thread: thread.to_owned(),
            user: format!("{}/{}", who.tenant, who.subject),
        })
    }

    /// Redacts `text` with every rule for `target`; logs rule names, never content.
    fn redact(&self, target: Target, text: &str) -> String {
        let mut out = text.to_owned();
        for (name, re, replacement, targets) in &self.rules {
            if targets.contains(&target) && re.is_match(&out) {
                tracing::info!(rule = %name, user = %self.user, thread = %self.thread, ?target, "policy redacted content");
                crate::metrics::metrics().policy_decided(name, "redact");
                out = re.replace_all(&out, replacement.as_str()).into_owned();
            }
        }
        out
    }

    /// Appends `delta` to the stream's held text; returns the redacted part
    /// that is safe to emit now.
    fn feed(&mut self, target: Target, key: (char, String), delta: &str) -> String {
        let mut buf = self.pending.remove(&key).unwrap_or_default();
        buf.push_str(delta);
        let mut cut = buf.len().saturating_sub(self.hold);
        // A match that starts before the cut and ends after it waits whole.
        for (_, re, _, targets) in &self.rules {
            if !targets.contains(&target) {
                continue;
            }
            for m in re.find_iter(&buf) {
                if m.start() < cut && m.end() > cut {
                    cut = m.start();
                }
            }
        }
        while !buf.is_char_boundary(cut) {
            cut -= 1;
        }
        let tail = buf.split_off(cut);
        self.pending.insert(key, tail);
        self.redact(target, &buf)
    }

    fn flush(&mut self, target: Target, key: (char, String)) -> Option<String> {
        self.pending
            .remove(&key)
            .filter(|t| !t.is_empty())
            .map(|t| self.redact(target, &t))
    }

    fn walk(&self, target: Target, v: &mut Value) {
        match v {
            Value::String(s) => {
                let r = self.redact(target, s);
                if r != *s {
                    *s = r;
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|x| self.walk(target, x)),
            Value::Object(m) => m.values_mut().for_each(|x| self.walk(target, x)),
            _ => {}
        }
    }

    /// Redacts a list of AG-UI messages (a run's input, a `MESSAGES_SNAPSHOT`)
    /// with the target each part belongs to: text as `text`, tool messages'
    /// content as `tool_results`, assistant tool-call arguments as
    /// `tool_args`. Ids, roles and media sources are not content and are
    /// left alone (an id rewritten would break the thread's fold).
    fn redact_messages(&self, messages: &mut Value) {
        let Some(list) = messages.as_array_mut() else {
            self.walk(Target::Text, messages);
            return;
        };
        for message in list {
            let Some(m) = message.as_object_mut() else {
                continue;
            };
            let target = match m.get("role").and_then(Value::as_str) {
                Some("tool") => Target::ToolResults,
                _ => Target::Text,
            };
            for (field, v) in m.iter_mut() {
                match field.as_str() {
                    "id" | "role" | "toolCallId" | "activityType" => {}
                    "content" => self.redact_content(target, v),
                    "toolCalls" => self.redact_tool_calls(v),
                    // Anything else a client attached to a message (a name,
                    // an error): content of the message's kind.
                    _ => self.walk(target, v),
                }
            }
        }
    }

    /// Message content: a string, multimodal parts (only text parts are
    /// text; image/audio/… sources are references, not prose), or an
    /// activity's structured content.
    fn redact_content(&self, target: Target, content: &mut Value) {
        match content {
            Value::Array(parts) => {
                for part in parts {
                    if part.get("type").and_then(Value::as_str) == Some("text")
                        && let Some(text) = part.get_mut("text")
                    {
                        self.walk(target, text);
                    }
                }
            }
            other => self.walk(target, other),
        }
    }

    /// `toolCalls[*].function.arguments` (a JSON string, or an object from
    /// a lenient client) as `tool_args`.
    fn redact_tool_calls(&self, calls: &mut Value) {
        let Some(calls) = calls.as_array_mut() else {
            self.walk(Target::ToolArgs, calls);
            return;
        };
        for call in calls {
            if let Some(args) = call
                .get_mut("function")
                .and_then(|f| f.get_mut("arguments"))
            {
                self.walk(Target::ToolArgs, args);
            }
        }
    }

    /// A run input, as journaled on `RUN_STARTED`: messages per
    /// [`Self::redact_messages`], `state` as `state`, and every other field a
    /// client controls (`context`, `forwardedProps`, `resume`, unknown
    /// fields) as `text`, so nothing the client sent is stored unredacted.
    /// Ids, the protocol version and the offered tool definitions are left
    /// alone: they are the agent's contract, not user content.
    fn redact_input(&self, input: &mut Value) {
        let Some(fields) = input.as_object_mut() else {
            self.walk(Target::Text, input);
            return;
        };
        for (field, v) in fields.iter_mut() {
            match field.as_str() {
                "threadId" | "runId" | "parentRunId" | "protocolVersion" | "tools" => {}
                "messages" => self.redact_messages(v),
                "state" => self.walk(Target::State, v),
                _ => self.walk(Target::Text, v),
            }
        }
    }

    /// A changed copy of `event` only when `redact` changed its `field`.
    fn rewrite(&self, event: Event, field: &str, redact: impl Fn(&Self, &mut Value)) -> Event {
        let Some(v) = event.get(field) else {
            return event;
        };
        let mut nv = v.clone();
        redact(self, &mut nv);
        if nv == *v {
            return event;
        }
        event.modify(|b| {
            b.insert(field.into(), nv);
        })
    }
}

impl EventFilter for Redactor {
    fn filter(&mut self, event: Event) -> Result<Vec<Event>, Box<Event>> {
        use EventType::*;
        let id = |f: &str| event.str_field(f).unwrap_or_default().to_owned();
        let streamed = |kind: &EventType| match kind {
            TextMessageContent | TextMessageEnd | ReasoningMessageContent | ReasoningMessageEnd => {
                Some(('m', Target::Text))
            }
            ToolCallArgs | ToolCallEnd => Some(('t', Target::ToolArgs)),
            _ => None,
        };
        let kind = event.kind().clone();
        if let Some((tag, target)) = streamed(&kind) {
            let field = if tag == 't' {
                "toolCallId"
            } else {
                "messageId"
            };
            let key = (tag, id(field));
            if matches!(kind, TextMessageEnd | ReasoningMessageEnd | ToolCallEnd) {
                let mut out = Vec::new();
                if let Some(rest) = self.flush(target, key.clone()) {
                    let content = match kind {
                        TextMessageEnd => "TEXT_MESSAGE_CONTENT",
                        ReasoningMessageEnd => "REASONING_MESSAGE_CONTENT",
                        _ => "TOOL_CALL_ARGS",
                    };
                    out.push(Event::build(
                        json!({"type": content, field: key.1, "delta": rest}),
                    ));
                }
                out.push(event);
                return Ok(out);
            }
            let delta = event.str_field("delta").unwrap_or_default().to_owned();
            let emit = self.feed(target, key, &delta);
            if emit == delta {
                return Ok(vec![event]);
            }
            return Ok(vec![event.modify(|b| {
                b.insert("delta".into(), emit.into());
            })]);
        }
        Ok(vec![match kind {
            ToolCallResult => self.rewrite(event, "content", |r, v| r.walk(Target::ToolResults, v)),
            StateSnapshot => self.rewrite(event, "snapshot", |r, v| r.walk(Target::State, v)),
            StateDelta => self.rewrite(event, "delta", |r, v| r.walk(Target::State, v)),
            RunStarted => self.rewrite(event, "input", Self::redact_input),
            MessagesSnapshot => self.rewrite(event, "messages", Self::redact_messages),
            _ => event,
        }])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;

    fn redactor() -> Redactor {
        let p = Policy::parse(
            "[[rules]]\nname = \"cards\"\nkind = \"redaction\"\npattern = '\\d{4}-\\d{4}-\\d{4}-\\d{4}'\nmax_match_bytes = 19\n",
            "t",
        )
        .unwrap();
        let who = Principal::for_test("u", &[]);
        Redactor::new(p.rules(), &who, "a", "th").unwrap()
    }

    fn text(r: &mut Redactor, deltas: &[&str]) -> String {
        let mut out = String::new();
        for d in deltas {
            for e in r
                .filter(Event::build(
                    json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": d}),
                ))
                .unwrap()
            {
                out.push_str(e.str_field("delta").unwrap());
            }
        }
        for e in r
            .filter(Event::build(
                json!({"type": "TEXT_MESSAGE_END", "messageId": "m"}),
            ))
            .unwrap()
        {
            out.push_str(e.str_field("delta").unwrap_or(""));
        }
        out
    }

    #[test]
    fn a_secret_split_across_deltas_is_redacted() {
        let mut r = redactor();
        let out = text(
            &mut r,
            &[
                "my card is 4111-11",
                "11-1111-1111 ok",
                " and more text here",
            ],
        );
        assert_eq!(out, "my card is [redacted] ok and more text here");
        // Every possible split of the secret.
        let full = "pay 4111-1111-1111-1111 now, thanks";
        for at in 0..=full.len() {
            let mut r = redactor();
            assert_eq!(
                text(&mut r, &[&full[..at], &full[at..]]),
                "pay [redacted] now, thanks",
                "split at {at}"
            );
        }
        // One character at a time.
        let chars: Vec<String> = full.chars().map(String::from).collect();
        let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(text(&mut redactor(), &refs), "pay [redacted] now, thanks");
    }

    #[test]
    fn tool_args_results_state_and_input() {
        let mut r = redactor();
        let args = r.filter(Event::build(json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "{\"card\": \"4111-1111-1111-1111\"}"}))).unwrap();
        let end = r
            .filter(Event::build(
                json!({"type": "TOOL_CALL_END", "toolCallId": "c"}),
            ))
            .unwrap();
        let all: String = args
            .iter()
            .chain(&end)
            .filter_map(|e| e.str_field("delta"))
            .collect();
        assert_eq!(all, "{\"card\": \"[redacted]\"}");
        let res = r.filter(Event::build(json!({"type": "TOOL_CALL_RESULT", "toolCallId": "c", "messageId": "r", "content": "charged 4111-1111-1111-1111"}))).unwrap();
        assert_eq!(res[0].body()["content"], "charged [redacted]");
        let st = r.filter(Event::build(json!({"type": "STATE_SNAPSHOT", "snapshot": {"cards": ["4111-1111-1111-1111"], "n": 1}}))).unwrap();
        assert_eq!(
            st[0].body()["snapshot"],
            json!({"cards": ["[redacted]"], "n": 1})
        );
        let input = r.filter(Event::build(json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r", "input": {"messages": [{"id": "u", "role": "user", "content": "4111-1111-1111-1111"}]}}))).unwrap();
        assert_eq!(
            input[0].body()["input"]["messages"][0]["content"],
            "[redacted]"
        );
        let untouched = Event::parse(r#"{"type":"CUSTOM","name":"x","value":1}"#).unwrap();
        assert_eq!(
            r.filter(untouched.clone()).unwrap()[0].json(),
            untouched.json()
        );
    }

    /// The journaled input is redacted field by field with each field's
    /// target: message text (string or text parts) as `text`, assistant
    /// tool-call arguments as `tool_args`, tool messages as `tool_results`,
    /// state as `state`; media sources and ids are left alone.
    #[test]
    fn run_input_is_redacted_per_target() {
        let p = Policy::parse(
            "[[rules]]\nname = \"cards-in-args\"\nkind = \"redaction\"\npattern = '\\d{4}-\\d{4}'\napplies_to = [\"tool_args\"]\n\
             [[rules]]\nname = \"emails\"\nkind = \"redaction\"\npattern = '[a-z]+@example\\.com'\nreplacement = \"[email]\"\napplies_to = [\"text\"]\n\
             [[rules]]\nname = \"keys\"\nkind = \"redaction\"\npattern = 'key-\\d+'\napplies_to = [\"state\", \"tool_results\"]\n",
            "t",
        )
        .unwrap();
        let who = Principal::for_test("u", &[]);
        let mut r = Redactor::new(p.rules(), &who, "a", "th").unwrap();
        let input = json!({
            "threadId": "th", "runId": "r",
            "messages": [
                {"id": "m1", "role": "user", "content": "ann@example.com 1234-5678"},
                {"id": "m2", "role": "user", "content": [
                    {"type": "text", "text": "bob@example.com"},
                    {"type": "image", "source": {"type": "url", "value": "https://cdn.example.com/eve@example.com.png"}}
                ]},
                {"id": "m3", "role": "assistant", "content": "ok", "toolCalls": [
                    {"id": "c1", "type": "function", "function": {"name": "pay", "arguments": "{\"card\": \"1234-5678\"}"}}
                ]},
                {"id": "m4", "role": "tool", "toolCallId": "c1", "content": "used key-42"}
            ],
            "state": {"apiKey": "key-7"},
            "tools": [], "context": []
        });
        let out = r
            .filter(Event::build(
                json!({"type": "RUN_STARTED", "threadId": "th", "runId": "r", "input": input}),
            ))
            .unwrap();
        let seen = out.first().and_then(|e| e.get("input")).unwrap();
        assert_eq!(
            seen["messages"][0]["content"], "[email] 1234-5678",
            "text rules only"
        );
        assert_eq!(seen["messages"][1]["content"][0]["text"], "[email]");
        assert_eq!(
            seen["messages"][1]["content"][1]["source"]["value"],
            "https://cdn.example.com/eve@example.com.png",
            "media sources are not text"
        );
        assert_eq!(
            seen["messages"][2]["toolCalls"][0]["function"]["arguments"],
            "{\"card\": \"[redacted]\"}"
        );
        assert_eq!(seen["messages"][3]["content"], "used [redacted]");
        assert_eq!(seen["state"]["apiKey"], "[redacted]");
        assert_eq!(seen["messages"][2]["id"], "m3");
    }

    /// An agent's `MESSAGES_SNAPSHOT` goes through the same message redaction.
    #[test]
    fn messages_snapshots_are_redacted() {
        let mut r = redactor();
        let out = r
            .filter(Event::build(json!({"type": "MESSAGES_SNAPSHOT", "messages": [
                {"id": "a", "role": "assistant", "content": "card 4111-1111-1111-1111", "toolCalls": [
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": "\"4111-1111-1111-1111\""}}
                ]}
            ]})))
            .unwrap();
        let text = serde_json::to_string(out[0].body()).unwrap();
        assert!(!text.contains("4111"), "{text}");
        assert_eq!(out[0].body()["messages"][0]["content"], "card [redacted]");
    }
}
