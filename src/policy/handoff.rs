//! The handoff kind: which agents an agent may hand a thread to, and how.
//!
//! Its settings live in each agent's own table, where an operator looks for
//! them (`[[agents]] … handoff = { targets = ["billing"] }`), not in the
//! rule file: a handoff is a property of the agent that hands off. Checked
//! at load (an unknown target fails `check-config`), applied when a run
//! asks for a handoff ([`HandoffPolicy::judge`]): a directed allow-list,
//! the caller's right to run the target (a handoff never escalates), and a
//! per-turn chain limit (two agents handing a thread back and forth).

use super::kind::{Kind, Rule, RuleStore};
use crate::config::{Config, ConfigError};
use crate::protocol::handoff::HistoryFilter;
use serde::Deserialize;
use std::collections::HashMap;

/// The kind: its settings come from the agents' tables, not the rule file.
pub const KIND: Kind = Kind {
    from_config: Some(|config, store| {
        let policy = HandoffPolicy::from_config(config).map_err(|errors| {
            errors
                .into_iter()
                .map(|(key, message)| ConfigError {
                    file: config.origin(),
                    key,
                    message,
                })
                .collect::<Vec<_>>()
        })?;
        store.push(policy);
        Ok(())
    }),
    ..Kind::new("handoff", compile)
};

/// A rule of the policy file has no handoff keys of its own.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoFields {}

fn compile(rule: Rule, _: &mut RuleStore) -> Result<(), String> {
    rule.fields::<NoFields>()?;
    Err("handoff settings live in each agent's own table: [[agents]] … handoff = { targets = [...] } (docs/configuration.md, \"Handoff\")".into())
}

/// The handoff settings among a policy's compiled rules
/// (`policy.rules::<HandoffPolicy>()`; none: no agent hands off).
pub fn of(rules: &[HandoffPolicy]) -> &HandoffPolicy {
    static NONE: std::sync::OnceLock<HandoffPolicy> = std::sync::OnceLock::new();
    rules
        .first()
        .unwrap_or_else(|| NONE.get_or_init(HandoffPolicy::default))
}

/// One agent's handoff settings, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Fields {
    #[serde(default)]
    targets: Vec<String>,
    history: Option<String>,
    carry_state: Option<bool>,
    approval: Option<Approval>,
    max_chain: Option<usize>,
    on_refusal: Option<OnRefusal>,
    respond: Option<Respond>,
    sticky: Option<bool>,
}

/// Whether a person approves a transfer first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Approval {
    #[default]
    None,
    /// The run ends with an interrupt "Transfer to …?", answered by resume.
    User,
}

/// What a refused handoff leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnRefusal {
    /// The agent runs again with a tool result saying why.
    #[default]
    Rerun,
    /// Nothing: the transfer call stays pending (its result comes with the
    /// next turn).
    End,
}

/// What the HTTP requester's response does when its run hands over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Respond {
    /// Goes on with the next agent's run.
    #[default]
    Continue,
    /// Ends with this run (the next one still runs, seen on the thread).
    End,
}

/// One agent's handoff settings, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentHandoff {
    pub agent: String,
    pub targets: Vec<String>,
    /// What a target of this agent is sent of the history.
    pub history: HistoryFilter,
    pub carry_state: bool,
    pub approval: Approval,
    /// Handoffs in a row allowed in one turn.
    pub max_chain: usize,
    pub on_refusal: OnRefusal,
    pub respond: Respond,
    /// Whether the thread's next plain run comes back to this agent once it
    /// speaks (else to the agent the turn began with).
    pub sticky: bool,
}

/// The chain limit when none is set: enough for triage → specialist →
/// back, few enough that two agents ping-ponging stop quickly.
pub const DEFAULT_MAX_CHAIN: usize = 4;

impl AgentHandoff {
    fn defaults(agent: &str) -> AgentHandoff {
        AgentHandoff {
            agent: agent.to_owned(),
            targets: Vec::new(),
            history: HistoryFilter::Full,
            carry_state: true,
            approval: Approval::None,
            max_chain: DEFAULT_MAX_CHAIN,
            on_refusal: OnRefusal::Rerun,
            respond: Respond::Continue,
            sticky: true,
        }
    }
}

/// Every agent's handoff settings.
#[derive(Debug, Clone, Default)]
pub struct HandoffPolicy {
    agents: HashMap<String, AgentHandoff>,
}

/// Why a handoff was refused (the text the source agent and the journal get).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: String,
}

impl HandoffPolicy {
    /// Reads and checks every `[[agents]]` table's `handoff`; errors name
    /// the key (`agents[i].handoff.…`).
    pub fn from_config(config: &Config) -> Result<HandoffPolicy, Vec<(String, String)>> {
        let mut policy = HandoffPolicy::default();
        let mut errors = Vec::new();
        let known = |id: &str| config.agents.iter().any(|a| a.id == id);
        for (i, agent) in config.agents.iter().enumerate() {
            let Some(raw) = &agent.handoff else { continue };
            let key = format!("agents[{i}].handoff");
            let fields: Fields = match serde_json::from_value(raw.clone()) {
                Ok(f) => f,
                Err(e) => {
                    errors.push((key, e.to_string()));
                    continue;
                }
            };
            let mut settings = AgentHandoff::defaults(&agent.id);
            for target in &fields.targets {
                if !known(target) {
                    errors.push((
                        format!("{key}.targets"),
                        format!("no agent '{target}' is configured"),
                    ));
                } else if *target == agent.id {
                    errors.push((
                        format!("{key}.targets"),
                        format!("agent '{target}' cannot hand off to itself"),
                    ));
                }
            }
            settings.targets = fields.targets;
            if let Some(h) = &fields.history {
                match HistoryFilter::parse(h) {
                    Ok(h) => settings.history = h,
                    Err(e) => errors.push((format!("{key}.history"), e)),
                }
            }
            if let Some(n) = fields.max_chain {
                if n == 0 {
                    errors.push((format!("{key}.max_chain"), "must be at least 1".into()));
                }
                settings.max_chain = n;
            }
            settings.carry_state = fields.carry_state.unwrap_or(true);
            settings.approval = fields.approval.unwrap_or_default();
            settings.on_refusal = fields.on_refusal.unwrap_or_default();
            settings.respond = fields.respond.unwrap_or_default();
            settings.sticky = fields.sticky.unwrap_or(true);
            policy.agents.insert(agent.id.clone(), settings);
        }
        if errors.is_empty() {
            Ok(policy)
        } else {
            Err(errors)
        }
    }

    /// `agent`'s settings (the defaults, with no targets, when it has none).
    pub fn of(&self, agent: &str) -> AgentHandoff {
        self.agents
            .get(agent)
            .cloned()
            .unwrap_or_else(|| AgentHandoff::defaults(agent))
    }

    /// Whether a run of `from` may hand the thread to `to` as the
    /// `chain`-th handoff in a row (counting this one) — the caller's right
    /// to run `to` is checked by whoever knows the caller
    /// (`caller_may_run`).
    pub fn judge(
        &self,
        from: &str,
        to: &str,
        chain: usize,
        caller_may_run: bool,
    ) -> Result<(), Refusal> {
        let settings = self.of(from);
        let refuse = |reason: String| Err(Refusal { reason });
        if !settings.targets.iter().any(|t| t == to) {
            return refuse(format!(
                "agent '{from}' may not hand off to '{to}' (its handoff.targets: {})",
                if settings.targets.is_empty() {
                    "none".to_owned()
                } else {
                    settings.targets.join(", ")
                }
            ));
        }
        if !caller_may_run {
            return refuse(format!(
                "the user's roles may not run agent '{to}', so the thread cannot be handed to it"
            ));
        }
        if chain > settings.max_chain {
            return refuse(format!(
                "{} handoffs in a row in one turn reach agent '{from}''s limit of {} (handoff.max_chain)",
                chain, settings.max_chain
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(agents: &str) -> Config {
        let text = format!("[auth]\nhs_secret = \"0123456789abcdef0123456789abcdef\"\n{agents}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.toml");
        std::fs::write(&path, text).unwrap();
        Config::load(&path).unwrap()
    }

    #[test]
    fn targets_are_checked_at_load_and_judged_per_run() {
        let bad = config(
            "[[agents]]\nid = \"triage\"\nurl = \"http://127.0.0.1:1/a\"\nhandoff = { targets = [\"billing\", \"nope\"], history = \"last-n:x\" }\n\
             [[agents]]\nid = \"billing\"\nurl = \"http://127.0.0.1:1/b\"\nhandoff = { colour = 1 }\n",
        );
        let errors = HandoffPolicy::from_config(&bad).unwrap_err();
        let keys: Vec<&str> = errors.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "agents[0].handoff.targets",
                "agents[0].handoff.history",
                "agents[1].handoff"
            ],
            "{errors:?}"
        );
        assert!(errors[0].1.contains("'nope'"), "{errors:?}");
        assert!(errors[2].1.contains("colour"), "{errors:?}");

        let good = config(
            "[[agents]]\nid = \"triage\"\nurl = \"http://127.0.0.1:1/a\"\nhandoff = { targets = [\"billing\"], max_chain = 2 }\n\
             [[agents]]\nid = \"billing\"\nurl = \"http://127.0.0.1:1/b\"\nhandoff = { targets = [\"triage\"], sticky = false }\n\
             [[agents]]\nid = \"admin\"\nurl = \"http://127.0.0.1:1/c\"\n",
        );
        let p = HandoffPolicy::from_config(&good).unwrap();
        assert!(p.judge("triage", "billing", 1, true).is_ok());
        assert!(
            p.judge("triage", "admin", 1, true)
                .unwrap_err()
                .reason
                .contains("may not hand off")
        );
        assert!(
            p.judge("triage", "billing", 1, false)
                .unwrap_err()
                .reason
                .contains("roles")
        );
        assert!(
            p.judge("triage", "billing", 3, true)
                .unwrap_err()
                .reason
                .contains("max_chain")
        );
        assert!(
            p.judge("admin", "triage", 1, true).is_err(),
            "no targets, no handoff"
        );
        assert!(!p.of("billing").sticky);
        assert!(p.of("admin").sticky);
    }
}
