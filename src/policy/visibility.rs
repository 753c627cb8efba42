//! Visibility rules: event types some viewers do not see (globs such as
//! `REASONING_*`, `RAW`, `STATE_*`), applied per viewer at fan-out, in
//! replay, and in snapshots (the folded messages and state those events
//! would have shown are removed too).
//!
//! Fan-out must stay cheap, so the hidden set is computed once per *policy
//! class* (the set of visibility rules that apply to a viewer) and shared by
//! every viewer in that class; the per-event check is a set lookup.

use super::kind::{Kind, Rule, RuleStore};
use super::{Policy, Scope};
use crate::auth::Principal;
use crate::auth::access::glob_match;
use crate::protocol::authorship::RunAgent;
use crate::protocol::hooks::{ViewerScope, Visibility};
use crate::protocol::{Event, EventType};
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;

/// The `visibility` kind.
pub const KIND: Kind = Kind::new("visibility", compile);

/// A visibility rule's own keys.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Fields {
    hide: Option<Vec<String>>,
}

fn compile(mut rule: Rule, store: &mut RuleStore) -> Result<(), String> {
    let fields: Fields = rule.fields()?;
    let hide = fields
        .hide
        .filter(|h| !h.is_empty())
        .ok_or("visibility rules need `hide` (event type globs)")?;
    store.push(VisibilityRule {
        scope: rule.scope_with_when(),
        name: rule.name,
        hide,
    });
    Ok(())
}

/// A compiled visibility rule.
#[derive(Debug)]
pub struct VisibilityRule {
    pub name: String,
    pub(super) scope: Scope,
    hide: Vec<String>,
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

    fn shows_message(&self, message: &mut Value) -> bool {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        let hidden = match role {
            "reasoning" => self.hides_type("REASONING_MESSAGE_CONTENT"),
            "tool" => self.hides_type("TOOL_CALL_RESULT"),
            "activity" => self.hides_type("ACTIVITY_SNAPSHOT"),
            _ => false,
        };
        if hidden {
            return false;
        }
        if self.hides_type("TOOL_CALL_START")
            && let Some(o) = message.as_object_mut()
        {
            o.remove("toolCalls");
        }
        true
    }

    fn hides_state(&self) -> bool {
        self.hides_type("STATE_SNAPSHOT")
    }
}

/// Where a viewer's rules come from: the live, reloadable policy.
pub trait PolicySource: Send + Sync {
    /// Bumped on every reload.
    fn generation(&self) -> u64;
    /// The policy now in force.
    fn current(&self) -> Arc<Policy>;
}

/// One viewer's rules on one thread, by the agent of each event's run
/// (see [`ViewerScope`]), always from the policy in force.
pub struct ViewerRules {
    source: Arc<dyn PolicySource>,
    who: Principal,
    thread: String,
}

impl ViewerRules {
    /// `who`'s rules on `thread`, read from `source`.
    pub fn new(source: Arc<dyn PolicySource>, who: &Principal, thread: &str) -> ViewerRules {
        ViewerRules {
            source,
            who: who.clone(),
            thread: thread.to_owned(),
        }
    }
}

impl ViewerScope for ViewerRules {
    fn generation(&self) -> u64 {
        self.source.generation()
    }

    fn visibility(&self, origin: &RunAgent) -> Option<Arc<dyn Visibility>> {
        self.source
            .current()
            .visibility_for(&self.who, origin, &self.thread)
            .map(|h| h as Arc<dyn Visibility>)
    }
}

/// The policy class of a viewer: which visibility rules apply to them, one
/// bit per rule (bit `i % 64` of word `i / 64` for rule `i`), trailing zero
/// words trimmed so equal sets give equal keys.
///
/// A growable bitset rather than a fixed-width integer, so any number of
/// rules counts: a fixed width silently ignored every rule past it (fail
/// open). Viewers with equal keys share one [`Hidden`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ClassKey(Vec<u64>);

impl ClassKey {
    /// No rule applies: the viewer sees everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether rule `i` applies (used to rebuild the class's rule set).
    pub fn contains(&self, i: usize) -> bool {
        self.0
            .get(i / 64)
            .is_some_and(|w| w & (1u64 << (i % 64)) != 0)
    }

    fn insert(&mut self, i: usize) {
        let word = i / 64;
        if self.0.len() <= word {
            self.0.resize(word + 1, 0);
        }
        if let Some(w) = self.0.get_mut(word) {
            *w |= 1u64 << (i % 64);
        }
    }
}

/// The class key: which of the rules apply to `who` on events of `origin`
/// (bit per rule, every rule counted). Between runs only rules without an
/// agent scope apply; for a run of unknown agent, every rule that applies
/// to `who` on any agent does, conditions included (fail closed).
pub fn class_of(
    rules: &[VisibilityRule],
    who: &Principal,
    origin: &RunAgent,
    thread: &str,
) -> ClassKey {
    let mut key = ClassKey::default();
    for (i, r) in rules.iter().enumerate() {
        let applies = match origin {
            RunAgent::Agent(agent) => r.scope.applies_on(who, agent, thread),
            RunAgent::Outside => r.scope.agents.is_empty() && r.scope.applies_on(who, "", thread),
            RunAgent::Unknown => r.scope.applies_to_any_agent(who),
        };
        if applies {
            key.insert(i);
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use crate::auth::Principal;
    use crate::policy::Policy;
    use crate::protocol::Event;
    use crate::protocol::authorship::RunAgent;
    use crate::protocol::hooks::Visibility;
    use serde_json::json;

    /// `n` rules that hide an unknown type each (scoped to `users`), then
    /// one last rule, for everyone, hiding `RAW`.
    fn many(n: usize, users: &str) -> Policy {
        let mut text = String::new();
        for i in 0..n {
            text.push_str(&format!(
                "[[rules]]\nname = \"r{i}\"\nkind = \"visibility\"\nusers = [{users}]\nhide = [\"X_{i}\"]\n"
            ));
        }
        text.push_str("[[rules]]\nname = \"last\"\nkind = \"visibility\"\nhide = [\"RAW\"]\n");
        Policy::parse(&text, "t").unwrap()
    }

    #[test]
    fn rules_past_the_128th_still_apply() {
        let who = Principal::for_test("u", &[]);
        let raw = Event::build(json!({"type": "RAW", "event": {}}));
        let text =
            Event::build(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "x"}));
        // Only the last of 131 rules applies to this viewer.
        let p = many(130, "\"someone-else\"");
        let hidden = p
            .visibility_for(&who, &RunAgent::Agent("a".into()), "t")
            .expect("rule 131 applies, so the viewer has a class");
        assert!(hidden.hides(&raw));
        assert!(!hidden.hides(&text));
        // All 131 apply: the union includes the last one, and the first.
        let p = many(130, "\"*\"");
        let hidden = p
            .visibility_for(&who, &RunAgent::Agent("a".into()), "t")
            .unwrap();
        assert!(hidden.hides(&raw));
        assert!(hidden.hides(&Event::build(json!({"type": "X_0"}))));
        assert!(hidden.hides(&Event::build(json!({"type": "X_129"}))));
        // Viewers in the same class share one hidden set.
        let again = p
            .visibility_for(
                &Principal::for_test("v", &[]),
                &RunAgent::Agent("a".into()),
                "t",
            )
            .unwrap();
        assert!(std::sync::Arc::ptr_eq(&hidden, &again));
    }
}
