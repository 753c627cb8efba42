//! Redaction rules: regex replacement over text and reasoning deltas, tool
//! arguments, tool results, state values and the user's input messages,
//! before anything is journaled.
//!
//! Streams arrive in pieces, and a secret can be split across two deltas.
//! For each open message or tool call the filter holds back the last
//! `max_match_bytes − 1` bytes (the longest match a rule may need, set per
//! rule, default 256) and only emits text that no later delta can still turn
//! into a match; the held tail is flushed, redacted, just before the message's
//! or call's END. So a viewer may see text up to that many bytes later than
//! the agent sent it, and never a secret.

use super::{RuleFile, Scope};
use crate::auth::Principal;
use crate::protocol::{Event, EventType};
use crate::thread::run::EventFilter;
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

impl RedactionRule {
    /// Builds a rule from its file form.
    pub fn new(file: &RuleFile, scope: Scope) -> Result<RedactionRule, String> {
        let pattern = file
            .pattern
            .as_deref()
            .ok_or("redaction rules need `pattern` (a regex)")?;
        let pattern =
            Regex::new(pattern).map_err(|e| format!("`pattern` does not compile: {e}"))?;
        Ok(RedactionRule {
            name: file.name.clone(),
            scope,
            pattern,
            replacement: file
                .replacement
                .clone()
                .unwrap_or_else(|| "[redacted]".into()),
            max_match_bytes: file.max_match_bytes.unwrap_or(256).max(1),
            targets: file.applies_to.clone().unwrap_or_else(|| ALL.to_vec()),
        })
    }
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

    /// A changed copy of `event` only when redaction changed something.
    fn rewrite(&self, event: Event, target: Target, field: &str) -> Event {
        let Some(v) = event.get(field) else {
            return event;
        };
        let mut nv = v.clone();
        self.walk(target, &mut nv);
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
            ToolCallResult => self.rewrite(event, Target::ToolResults, "content"),
            StateSnapshot => self.rewrite(event, Target::State, "snapshot"),
            StateDelta => self.rewrite(event, Target::State, "delta"),
            RunStarted => self.rewrite(event, Target::Text, "input"),
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
        Redactor::new(&p.redactions, &who, "a", "th").unwrap()
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
}
