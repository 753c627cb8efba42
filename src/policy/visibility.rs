//! Visibility rules: event types some viewers do not see (globs such as
//! `REASONING_*`, `RAW`, `STATE_*`), applied per viewer at fan-out, in
//! replay, and in snapshots (the folded messages and state those events
//! would have shown are removed too).
//!
//! Fan-out must stay cheap, so the hidden set is computed once per *policy
//! class* (the set of visibility rules that apply to a viewer) and shared by
//! every viewer in that class; the per-event check is a set lookup.

use super::{RuleFile, Scope};
use crate::auth::Principal;
use crate::auth::access::glob_match;
use crate::protocol::{Event, EventType};
use crate::thread::Visibility;
use serde_json::{Map, Value};
use std::collections::HashSet;

/// A compiled visibility rule.
#[derive(Debug)]
pub struct VisibilityRule {
    pub name: String,
    pub(super) scope: Scope,
    hide: Vec<String>,
}

impl VisibilityRule {
    /// Builds a rule from its file form.
    pub fn new(file: &RuleFile, scope: Scope) -> Result<VisibilityRule, String> {
        let hide = file
            .hide
            .clone()
            .filter(|h| !h.is_empty())
            .ok_or("visibility rules need `hide` (event type globs)")?;
        Ok(VisibilityRule {
            name: file.name.clone(),
            scope,
            hide,
        })
    }
}

/// What one policy class may not see.
#[derive(Debug)]
pub struct Hidden {
    /// Known type names hidden (precomputed from the globs).
    known: HashSet<&'static str>,
    /// The globs, for types this build does not know.
    patterns: Vec<String>,
}

impl Hidden {
    /// The union of `rules`.
    pub fn new(rules: &[&VisibilityRule]) -> Hidden {
        let patterns: Vec<String> = rules.iter().flat_map(|r| r.hide.iter().cloned()).collect();
        let known = EventType::known()
            .filter_map(|t| t.static_name())
            .filter(|name| patterns.iter().any(|p| glob_match(p, name)))
            .collect();
        Hidden { known, patterns }
    }

    fn hides_type(&self, name: &str) -> bool {
        self.known.contains(name) || self.patterns.iter().any(|p| glob_match(p, name))
    }
}

impl Visibility for Hidden {
    fn hides(&self, event: &Event) -> bool {
        match event.kind() {
            EventType::Other(name) => self.patterns.iter().any(|p| glob_match(p, name)),
            known => self.known.contains(known.as_str()),
        }
    }

    fn redact_snapshot(&self, snap: &mut Map<String, Value>) {
        let no_reasoning = self.hides_type("REASONING_MESSAGE_CONTENT");
        let no_tools = self.hides_type("TOOL_CALL_START");
        let no_results = self.hides_type("TOOL_CALL_RESULT");
        let no_activity = self.hides_type("ACTIVITY_SNAPSHOT");
        if let Some(Value::Array(messages)) = snap.get_mut("messages") {
            messages.retain(|m| {
                let role = m.get("role").and_then(Value::as_str).unwrap_or("");
                !(no_reasoning && role == "reasoning"
                    || no_results && role == "tool"
                    || no_activity && role == "activity")
            });
            if no_tools {
                for m in messages.iter_mut() {
                    if let Some(o) = m.as_object_mut() {
                        o.remove("toolCalls");
                    }
                }
            }
        }
        if self.hides_type("STATE_SNAPSHOT") {
            snap.insert("state".into(), Value::Null);
        }
    }
}

/// The class key: which of the rules apply to `who` on `agent` (bit per rule).
pub fn class_of(rules: &[VisibilityRule], who: &Principal, agent: &str, thread: &str) -> u128 {
    rules
        .iter()
        .enumerate()
        .take(128)
        .filter(|(_, r)| r.scope.applies_on(who, agent, thread))
        .fold(0u128, |acc, (i, _)| acc | (1 << i))
}
