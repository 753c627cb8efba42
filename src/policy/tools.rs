//! Tool rules: which tools an agent is offered and may call.
//!
//! Unlike filtering only what an agent emits, this works on both sides. On
//! the way in, tools denied outright (by name, no condition) are removed from
//! `RunAgentInput.tools`. On the way out, every tool call is checked when its
//! arguments are complete (conditions see `tool.args`); a denied call's
//! `TOOL_CALL_*` events and its `TOOL_CALL_RESULT` never reach the journal,
//! and viewers get a `CUSTOM agui-gateway/policy` notice naming the rule
//! (never the arguments) — or, with `on_violation = "error"`, the run ends
//! with `RUN_ERROR policy_violation`.

use super::cel::{Condition, Facts};
use super::kind::{Kind, Rule, RuleStore};
use super::{Policy, Scope};
use crate::auth::Principal;
use crate::auth::access::glob_match;
use crate::protocol::event::run_error;
use crate::protocol::hooks::EventFilter;
use crate::protocol::{Event, EventType};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

/// Allow or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    Allow,
    Deny,
}

/// What a denied call does to the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnViolation {
    /// Drop the call's events; the run goes on.
    #[default]
    Drop,
    /// End the run with `RUN_ERROR policy_violation`.
    Error,
}

/// The `tools` kind. Its rules keep their `when` (it sees the call's
/// arguments, so it is evaluated per call, not as part of the scope).
pub const KIND: Kind = Kind::new("tools", compile);

/// A tools rule's own keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fields {
    effect: Option<Effect>,
    #[serde(default)]
    tools: Vec<String>,
    on_violation: Option<OnViolation>,
}

fn compile(rule: Rule, store: &mut RuleStore) -> Result<(), String> {
    let fields: Fields = rule.fields()?;
    let effect = fields
        .effect
        .ok_or("tools rules need `effect` (allow or deny)")?;
    if fields.tools.is_empty() {
        return Err("tools rules need `tools` (name globs)".into());
    }
    store.push(ToolRule {
        name: rule.name,
        scope: rule.scope,
        when: rule.when,
        effect,
        tools: fields.tools,
        on_violation: fields.on_violation.unwrap_or_default(),
    });
    Ok(())
}

/// A compiled tool rule.
#[derive(Debug)]
pub struct ToolRule {
    pub name: String,
    scope: Scope,
    when: Option<Condition>,
    effect: Effect,
    tools: Vec<String>,
    on_violation: OnViolation,
}

impl ToolRule {
    /// Whether the rule's scope covers `who` running `agent`.
    pub fn applies(&self, who: &Principal, agent: &str) -> bool {
        self.scope.applies(who, agent)
    }

    fn names(&self, tool: &str) -> bool {
        self.tools.iter().any(|p| glob_match(p, tool))
    }
}

/// The verdict on one tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// Denied by this rule (or by the allow-list when `None`).
    Denied {
        rule: Option<String>,
        error: bool,
    },
    /// Cannot be decided without the arguments.
    NeedsArgs,
}

/// Decides tool calls for one principal on one agent and thread.
#[derive(Clone)]
pub struct ToolDecider {
    policy: Arc<Policy>,
    principal: Principal,
    agent: String,
    thread: String,
}

impl ToolDecider {
    /// A decider for `principal` running `agent` on `thread`.
    pub fn new(
        policy: Arc<Policy>,
        principal: &Principal,
        agent: &str,
        thread: &str,
    ) -> ToolDecider {
        ToolDecider {
            policy,
            principal: principal.clone(),
            agent: agent.to_owned(),
            thread: thread.to_owned(),
        }
    }

    fn rules(&self) -> impl Iterator<Item = &ToolRule> {
        self.policy
            .rules::<ToolRule>()
            .iter()
            .filter(|r| r.scope.applies(&self.principal, &self.agent))
    }

    /// The verdict for `tool`; `args` `None` means "not known yet".
    pub fn decide(&self, tool: &str, args: Option<&Value>) -> Verdict {
        let eval = |r: &ToolRule| -> Option<Result<bool, String>> {
            let cond = r.when.as_ref()?;
            let args = args?;
            Some(cond.eval(&Facts {
                principal: &self.principal,
                agent: &self.agent,
                thread: &self.thread,
                tool: Some((tool, args)),
                input: None,
            }))
        };
        let deny = |r: &ToolRule| Verdict::Denied {
            rule: Some(r.name.clone()),
            error: r.on_violation == OnViolation::Error,
        };
        let mut undecided = false;
        // Deny beats allow: every deny rule first.
        for r in self
            .rules()
            .filter(|r| r.effect == Effect::Deny && r.names(tool))
        {
            match (r.when.is_some(), eval(r)) {
                (false, _) => return deny(r),
                (true, None) => undecided = true,
                (true, Some(Ok(true))) => return deny(r),
                (true, Some(Ok(false))) => {}
                (true, Some(Err(e))) => {
                    tracing::warn!(rule = %r.name, tool, "policy condition failed; denying: {e}");
                    return deny(r);
                }
            }
        }
        let allows: Vec<&ToolRule> = self.rules().filter(|r| r.effect == Effect::Allow).collect();
        if allows.is_empty() {
            return if undecided {
                Verdict::NeedsArgs
            } else {
                Verdict::Allowed
            };
        }
        // Allow-list: some allow rule must name the tool and hold.
        let mut last_error = None;
        for r in allows.iter().filter(|r| r.names(tool)) {
            match (r.when.is_some(), eval(r)) {
                (false, _) => {
                    return if undecided {
                        Verdict::NeedsArgs
                    } else {
                        Verdict::Allowed
                    };
                }
                (true, None) => undecided = true,
                (true, Some(Ok(true))) => {
                    return if undecided {
                        Verdict::NeedsArgs
                    } else {
                        Verdict::Allowed
                    };
                }
                (true, Some(Ok(false))) => last_error = Some(r),
                (true, Some(Err(e))) => {
                    tracing::warn!(rule = %r.name, tool, "policy condition failed; denying: {e}");
                    last_error = Some(r);
                }
            }
        }
        if undecided {
            return Verdict::NeedsArgs;
        }
        match last_error {
            Some(r) => deny(r),
            None => Verdict::Denied {
                rule: None,
                error: allows.iter().any(|r| r.on_violation == OnViolation::Error),
            },
        }
    }

    /// Removes tools that are denied whatever their arguments; returns their names.
    pub fn filter_offered(&self, tools: &mut Vec<Value>) -> Vec<String> {
        let mut removed = Vec::new();
        tools.retain(|t| {
            let name = t.get("name").and_then(Value::as_str).unwrap_or("");
            let keep = !matches!(self.decide(name, None), Verdict::Denied { .. });
            if !keep {
                removed.push(name.to_owned());
            }
            keep
        });
        removed
    }

    /// The event filter that enforces the rules on the run's tool calls.
    pub fn guard(self) -> ToolGuard {
        ToolGuard {
            decider: self,
            calls: HashMap::new(),
        }
    }
}

enum Call {
    /// Held back until the arguments are complete.
    Pending {
        name: String,
        args: String,
        held: Vec<Event>,
    },
    Allowed,
    Denied,
}

/// Enforces tool rules on a run's events (an [`EventFilter`]).
pub struct ToolGuard {
    decider: ToolDecider,
    calls: HashMap<String, Call>,
}

impl ToolGuard {
    fn notice(&self, rule: &Option<String>, id: &str, name: &str) -> Event {
        tracing::info!(
            rule = rule.as_deref().unwrap_or("allow-list"), user = %self.decider.principal.subject,
            tenant = %self.decider.principal.tenant, thread = %self.decider.thread, tool = name,
            "policy dropped a tool call"
        );
        Event::build(json!({
            "type": "CUSTOM",
            "name": "agui-gateway/policy",
            "value": {"action": "tool_call_dropped", "rule": rule.as_deref().unwrap_or("allow-list"), "toolCallId": id, "toolName": name}
        }))
    }

    /// Applies a verdict to a call whose events so far are `held`.
    fn settle(
        &mut self,
        id: &str,
        name: &str,
        verdict: Verdict,
        held: Vec<Event>,
    ) -> Result<Vec<Event>, Box<Event>> {
        match verdict {
            Verdict::Denied { rule, error } => {
                self.calls.insert(id.to_owned(), Call::Denied);
                crate::metrics::metrics()
                    .policy_decided(rule.as_deref().unwrap_or("allow-list"), "deny");
                if error {
                    return Err(Box::new(run_error(
                        "policy_violation",
                        format!(
                            "tool '{name}' is not allowed (rule '{}')",
                            rule.as_deref().unwrap_or("allow-list")
                        ),
                    )));
                }
                Ok(vec![self.notice(&rule, id, name)])
            }
            _ => {
                self.calls.insert(id.to_owned(), Call::Allowed);
                Ok(held)
            }
        }
    }
}

impl EventFilter for ToolGuard {
    fn filter(&mut self, event: Event) -> Result<Vec<Event>, Box<Event>> {
        let id = event.str_field("toolCallId").unwrap_or_default().to_owned();
        match event.kind() {
            EventType::ToolCallStart => {
                let name = event
                    .str_field("toolCallName")
                    .unwrap_or_default()
                    .to_owned();
                match self.decider.decide(&name, None) {
                    Verdict::NeedsArgs => {
                        self.calls.insert(
                            id,
                            Call::Pending {
                                name,
                                args: String::new(),
                                held: vec![event],
                            },
                        );
                        Ok(vec![])
                    }
                    verdict => self.settle(&id, &name, verdict, vec![event]),
                }
            }
            EventType::ToolCallArgs | EventType::ToolCallEnd => match self.calls.get_mut(&id) {
                Some(Call::Pending { args, held, .. }) => {
                    if let Some(d) = event.str_field("delta") {
                        args.push_str(d);
                    }
                    let end = *event.kind() == EventType::ToolCallEnd;
                    held.push(event);
                    if !end {
                        return Ok(vec![]);
                    }
                    let Some(Call::Pending { name, args, held }) = self.calls.remove(&id) else {
                        unreachable!()
                    };
                    // Unparseable arguments cannot satisfy a condition: `{}` fails closed.
                    let parsed: Value = serde_json::from_str(&args).unwrap_or(json!({}));
                    let verdict = self.decider.decide(&name, Some(&parsed));
                    self.settle(&id, &name, verdict, held)
                }
                Some(Call::Denied) => Ok(vec![]),
                _ => Ok(vec![event]),
            },
            EventType::ToolCallResult if matches!(self.calls.get(&id), Some(Call::Denied)) => {
                Ok(vec![])
            }
            _ => Ok(vec![event]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(roles: &[&str]) -> Principal {
        Principal::for_test("u", roles)
    }

    const FINANCE: &str = r#"
[[rules]]
name = "no-deletes"
kind = "tools"
effect = "deny"
tools = ["delete_*"]

[[rules]]
name = "treasurer-transfers"
kind = "tools"
effect = "deny"
agents = ["finance"]
tools = ["transfer_*"]
when = '!("treasurer" in principal.roles) || tool.args.amount >= 10000'
on_violation = "error"
"#;

    fn decider(text: &str, roles: &[&str]) -> ToolDecider {
        ToolDecider::new(
            Arc::new(Policy::parse(text, "t").unwrap()),
            &who(roles),
            "finance",
            "th",
        )
    }

    #[test]
    fn deny_by_name_and_by_condition() {
        let d = decider(FINANCE, &["treasurer"]);
        assert!(matches!(
            d.decide("delete_all", None),
            Verdict::Denied { .. }
        ));
        assert_eq!(d.decide("transfer_funds", None), Verdict::NeedsArgs);
        assert_eq!(
            d.decide("transfer_funds", Some(&json!({"amount": 500}))),
            Verdict::Allowed
        );
        assert_eq!(
            d.decide("transfer_funds", Some(&json!({"amount": 50000}))),
            Verdict::Denied {
                rule: Some("treasurer-transfers".into()),
                error: true
            }
        );
        let clerk = decider(FINANCE, &["clerk"]);
        assert!(matches!(
            clerk.decide("transfer_funds", Some(&json!({"amount": 5}))),
            Verdict::Denied { .. }
        ));
        assert_eq!(clerk.decide("lookup", None), Verdict::Allowed);
        // A condition that errors denies.
        assert!(matches!(
            d.decide("transfer_funds", Some(&json!({"amt": 5}))),
            Verdict::Denied { .. }
        ));
    }

    #[test]
    fn allow_list_and_offered_tools() {
        let d = decider(
            "[[rules]]\nname = \"only-search\"\nkind = \"tools\"\neffect = \"allow\"\ntools = [\"search*\"]\n",
            &[],
        );
        assert_eq!(d.decide("search_web", None), Verdict::Allowed);
        assert_eq!(
            d.decide("shell", None),
            Verdict::Denied {
                rule: None,
                error: false
            }
        );
        let mut offered = vec![json!({"name": "search_web"}), json!({"name": "shell"})];
        assert_eq!(d.filter_offered(&mut offered), ["shell"]);
        assert_eq!(offered.len(), 1);
    }

    #[test]
    fn guard_holds_conditional_calls_and_drops_denied_ones() {
        let mut g = decider(
            FINANCE.replace("on_violation = \"error\"", "").as_str(),
            &["treasurer"],
        )
        .guard();
        let ev = |v: Value| Event::build(v);
        let start = |id: &str, name: &str| {
            ev(json!({"type": "TOOL_CALL_START", "toolCallId": id, "toolCallName": name}))
        };
        let args =
            |id: &str, d: &str| ev(json!({"type": "TOOL_CALL_ARGS", "toolCallId": id, "delta": d}));
        let end = |id: &str| ev(json!({"type": "TOOL_CALL_END", "toolCallId": id}));
        // Allowed after its args are known: all three events come out together.
        assert!(g.filter(start("a", "transfer_funds")).unwrap().is_empty());
        assert!(g.filter(args("a", "{\"amount\": 5}")).unwrap().is_empty());
        assert_eq!(g.filter(end("a")).unwrap().len(), 3);
        // Denied: nothing but a notice, and its result is dropped too.
        g.filter(start("b", "transfer_funds")).unwrap();
        g.filter(args("b", "{\"amount\": 99999, \"secret\": \"s3\"}"))
            .unwrap();
        let out = g.filter(end("b")).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].body()["name"], "agui-gateway/policy");
        assert!(
            !String::from_utf8_lossy(out[0].json()).contains("s3"),
            "never the arguments"
        );
        assert!(g.filter(ev(json!({"type": "TOOL_CALL_RESULT", "toolCallId": "b", "messageId": "m", "content": "x"}))).unwrap().is_empty());
        // Denied by name: dropped at START.
        assert_eq!(
            g.filter(start("c", "delete_db")).unwrap()[0].body()["value"]["rule"],
            "no-deletes"
        );
        assert!(g.filter(args("c", "{}")).unwrap().is_empty());
        // Untouched tools pass straight through.
        assert_eq!(g.filter(start("d", "lookup")).unwrap().len(), 1);
    }

    #[test]
    fn error_mode_ends_the_run() {
        let mut g = decider(FINANCE, &["clerk"]).guard();
        g.filter(Event::build(
            json!({"type": "TOOL_CALL_START", "toolCallId": "a", "toolCallName": "transfer_funds"}),
        ))
        .unwrap();
        g.filter(Event::build(
            json!({"type": "TOOL_CALL_ARGS", "toolCallId": "a", "delta": "{\"amount\": 1}"}),
        ))
        .unwrap();
        let end = g
            .filter(Event::build(
                json!({"type": "TOOL_CALL_END", "toolCallId": "a"}),
            ))
            .unwrap_err();
        assert_eq!(end.body()["code"], "policy_violation");
    }
}
