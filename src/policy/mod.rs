//! Operator policy from a file: who may do what, applied before anything is
//! forwarded.
//!
//! A policy is an ordered list of named rules. Each rule has a kind (one file
//! per kind: [`tools`], [`limits`]), a scope (agent, role, tenant and user
//! globs; all default to `*`) and an optional CEL condition ([`cel`]) compiled
//! at load. Deny beats allow; a set of tool allow-rules makes an allow-list;
//! a condition that errors denies (fail closed) and is logged. The verified
//! identity can be injected into `forwardedProps` ([`identity`]).
//!
//! Request-side checks run before a run is started; event-side rules run as
//! the run's [`EventFilter`], so nothing a
//! rule removed is ever journaled or shown.

pub mod cel;
pub mod handoff;
pub mod identity;
pub mod limits;
pub mod rate;
pub mod redaction;
pub mod tools;
pub mod visibility;

use crate::auth::Principal;
use crate::auth::access::glob_match;
use crate::config::{Config, ConfigError};
use crate::protocol::Event;
use crate::protocol::hooks::{EventFilter, RunInput};
use serde::Deserialize;
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

/// `config/policy.toml`, compiled in: the policy of the embedded
/// configuration (see [`Policy::from_config`]).
pub const EMBEDDED_POLICY: &str = include_str!("../../config/policy.toml");

/// The policy file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    identity: identity::IdentityConfig,
    #[serde(default)]
    rules: Vec<RuleFile>,
}

/// One rule as written: name, kind, scope, condition, and the fields of its
/// kind (flat, so unknown keys are still reported).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleFile {
    pub name: String,
    pub kind: Option<RuleKind>,
    #[serde(default)]
    pub agents: Vec<String>,
    #[serde(default)]
    pub roles: Vec<String>,
    #[serde(default)]
    pub tenants: Vec<String>,
    #[serde(default)]
    pub users: Vec<String>,
    pub when: Option<String>,
    // tools
    pub effect: Option<tools::Effect>,
    #[serde(default)]
    pub tools: Vec<String>,
    pub on_violation: Option<tools::OnViolation>,
    // limits
    pub max_request_bytes: Option<usize>,
    pub max_run_seconds: Option<u64>,
    pub max_messages: Option<usize>,
    pub max_tools: Option<usize>,
    pub max_event_bytes: Option<usize>,
    pub max_events_per_run: Option<usize>,
    pub mime_types: Option<Vec<String>>,
    pub max_inline_bytes: Option<usize>,
    pub url_schemes: Option<Vec<String>>,
    pub url_hosts: Option<Vec<String>>,
    pub allow_file_sources: Option<bool>,
    // redaction
    pub pattern: Option<String>,
    pub replacement: Option<String>,
    pub max_match_bytes: Option<usize>,
    pub applies_to: Option<Vec<redaction::Target>>,
    // visibility
    pub hide: Option<Vec<String>>,
    // rate
    pub action: Option<rate::Action>,
    pub per: Option<rate::Per>,
    pub limit: Option<u32>,
}

/// Rule kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleKind {
    Tools,
    Limits,
    Rate,
    Redaction,
    Visibility,
}

/// Who and what a rule applies to (globs; empty = everyone), plus, for
/// kinds other than `tools`, the rule's `when` condition.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    pub agents: Vec<String>,
    pub roles: Vec<String>,
    pub tenants: Vec<String>,
    pub users: Vec<String>,
    pub when: Option<Arc<cel::Condition>>,
}

fn any_glob(patterns: &[String], value: &str) -> bool {
    patterns.is_empty() || patterns.iter().any(|p| glob_match(p, value))
}

impl Scope {
    /// Whether the rule applies to `who` running `agent` on `thread`. A
    /// condition that fails to evaluate makes the rule apply: every kind that
    /// uses this restricts, so that is the closed side.
    pub fn applies_on(&self, who: &Principal, agent: &str, thread: &str) -> bool {
        if !self.applies(who, agent) {
            return false;
        }
        let Some(cond) = &self.when else { return true };
        let facts = cel::Facts {
            principal: who,
            agent,
            thread,
            tool: None,
        };
        cond.eval(&facts).unwrap_or_else(|e| {
            tracing::warn!(condition = %cond.source, "policy condition failed; applying the rule: {e}");
            true
        })
    }

    /// Whether the rule applies to `who` whatever the agent: its user,
    /// role and tenant globs match (agents and conditions not consulted, so
    /// a caller that cannot name the agent errs on the rule's side).
    pub fn applies_to_any_agent(&self, who: &Principal) -> bool {
        any_glob(&self.tenants, &who.tenant)
            && any_glob(&self.users, &who.subject)
            && (self.roles.is_empty()
                || self
                    .roles
                    .iter()
                    .any(|p| p == "*" || who.roles.iter().any(|r| glob_match(p, r))))
    }

    /// Whether the globs match `who` running `agent` (conditions not evaluated).
    pub fn applies(&self, who: &Principal, agent: &str) -> bool {
        any_glob(&self.agents, agent) && self.applies_to_any_agent(who)
    }
}

/// The compiled policy.
#[derive(Debug, Default)]
pub struct Policy {
    pub identity: identity::IdentityConfig,
    pub tools: Vec<tools::ToolRule>,
    pub limits: Vec<limits::LimitRule>,
    pub rates: Vec<rate::RateRule>,
    pub redactions: Vec<redaction::RedactionRule>,
    pub visibility: Vec<visibility::VisibilityRule>,
    pub handoff: handoff::HandoffPolicy,
    /// One shared hidden-set per policy class, built on first use.
    classes: dashmap::DashMap<visibility::ClassKey, Arc<visibility::Hidden>>,
}

impl Policy {
    /// The policy `config` names: its file, the compiled-in
    /// [`EMBEDDED_POLICY`] for the embedded configuration, or none. Loading
    /// lives here, not in config, so config stays plain settings. A file's
    /// problems read as configuration errors (`<config>: policy.path: …`),
    /// as the operator fixes them starting from that key.
    pub fn from_config(config: &Config) -> Result<Policy, Vec<String>> {
        let mut policy = Self::from_file_of(config)?;
        policy.handoff = handoff::HandoffPolicy::from_config(config).map_err(|errors| {
            errors
                .into_iter()
                .map(|(key, message)| {
                    ConfigError {
                        file: config.origin(),
                        key,
                        message,
                    }
                    .to_string()
                })
                .collect::<Vec<_>>()
        })?;
        Ok(policy)
    }

    fn from_file_of(config: &Config) -> Result<Policy, Vec<String>> {
        match &config.policy.path {
            Some(p) => Self::load(p).map_err(|errors| {
                errors
                    .into_iter()
                    .map(|message| {
                        ConfigError {
                            file: config.origin(),
                            key: "policy.path".into(),
                            message,
                        }
                        .to_string()
                    })
                    .collect()
            }),
            None if config.embedded => {
                Self::parse(EMBEDDED_POLICY, "<embedded config/policy.toml>")
            }
            None => Ok(Default::default()),
        }
    }

    /// Reads and compiles `path` (TOML, or YAML for `.yaml`/`.yml`).
    /// Errors name `file:line` and the rule.
    pub fn load(path: &Path) -> Result<Policy, Vec<String>> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| vec![format!("{origin}: {e}")])?;
        if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            let file: PolicyFile = config::Config::builder()
                .add_source(config::File::from_str(&text, config::FileFormat::Yaml))
                .build()
                .and_then(|c| c.try_deserialize())
                .map_err(|e| vec![format!("{origin}: {e}")])?;
            return Self::compile(file, &text, &origin);
        }
        Self::parse(&text, &origin)
    }

    /// Compiles policy text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Policy, Vec<String>> {
        let file: PolicyFile = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start].lines().count().max(1))
                .unwrap_or(0);
            vec![format!("{origin}:{line}: {}", e.message())]
        })?;
        Self::compile(file, text, origin)
    }

    fn compile(file: PolicyFile, text: &str, origin: &str) -> Result<Policy, Vec<String>> {
        let line_of = |name: &str| {
            text.lines()
                .position(|l| {
                    l.contains(&format!("\"{name}\"")) && l.trim_start().starts_with("name")
                })
                .map(|i| i + 1)
                .unwrap_or(0)
        };
        let mut policy = Policy {
            identity: file.identity,
            ..Default::default()
        };
        let mut errors = Vec::new();
        let mut names = std::collections::HashSet::new();
        for rule in file.rules {
            let at = format!("{origin}:{} (rule '{}')", line_of(&rule.name), rule.name);
            if !names.insert(rule.name.clone()) {
                errors.push(format!("{at}: duplicate rule name"));
                continue;
            }
            let when = match rule
                .when
                .as_deref()
                .map(cel::Condition::compile)
                .transpose()
            {
                Ok(w) => w,
                Err(e) => {
                    errors.push(format!("{at}: `when` does not compile: {e}"));
                    continue;
                }
            };
            let mut scope = Scope {
                agents: rule.agents.clone(),
                roles: rule.roles.clone(),
                tenants: rule.tenants.clone(),
                users: rule.users.clone(),
                when: None,
            };
            let when = if rule.kind == Some(RuleKind::Tools) {
                when
            } else {
                scope.when = when.map(Arc::new);
                None
            };
            let result = match rule.kind {
                Some(RuleKind::Tools) => {
                    tools::ToolRule::new(&rule, scope, when).map(|r| policy.tools.push(r))
                }
                Some(RuleKind::Limits) => {
                    limits::LimitRule::new(&rule, scope).map(|r| policy.limits.push(r))
                }

                Some(RuleKind::Rate) => {
                    rate::RateRule::new(&rule, scope).map(|r| policy.rates.push(r))
                }
                Some(RuleKind::Redaction) => {
                    redaction::RedactionRule::new(&rule, scope).map(|r| policy.redactions.push(r))
                }
                Some(RuleKind::Visibility) => {
                    visibility::VisibilityRule::new(&rule, scope).map(|r| policy.visibility.push(r))
                }
                None => Err("missing `kind` (tools, limits, rate, redaction or visibility)".into()),
            };
            if let Err(e) = result {
                errors.push(format!("{at}: {e}"));
            }
        }
        if errors.is_empty() {
            Ok(policy)
        } else {
            Err(errors)
        }
    }
}

/// Several filters in order; an event runs through each.
struct Chain(Vec<Box<dyn EventFilter>>);

impl EventFilter for Chain {
    fn filter(&mut self, event: Event) -> Result<Vec<Event>, Box<Event>> {
        let mut events = vec![event];
        for f in &mut self.0 {
            let mut next = Vec::with_capacity(events.len());
            for e in events {
                next.extend(f.filter(e)?);
            }
            events = next;
        }
        Ok(events)
    }
}

/// What a run gets from the policy: its event filter and extra upstream headers.
pub struct Prepared {
    pub filter: Option<Box<dyn EventFilter>>,
    pub upstream_headers: reqwest::header::HeaderMap,
}

/// Why the policy refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    Limit(limits::Refusal),
    Rate(rate::Limited),
}

impl From<limits::Refusal> for Refused {
    fn from(r: limits::Refusal) -> Refused {
        Refused::Limit(r)
    }
}

/// The policy in force, swapped whole on reload, with a generation that
/// tells viewers caching their rules ([`visibility::ViewerRules`]) to ask again.
pub struct PolicySlot {
    current: std::sync::RwLock<Arc<Policy>>,
    generation: std::sync::atomic::AtomicU64,
}

impl PolicySlot {
    /// A slot holding `policy`.
    pub fn new(policy: Policy) -> PolicySlot {
        PolicySlot {
            current: std::sync::RwLock::new(Arc::new(policy)),
            generation: std::sync::atomic::AtomicU64::new(1),
        }
    }

    /// Puts `policy` in force; it takes over the live state of the one it
    /// replaces ([`Policy::carry_state_from`]).
    pub fn replace(&self, mut policy: Policy) {
        let mut current = self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        policy.carry_state_from(&current);
        *current = Arc::new(policy);
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::Release);
    }
}

impl visibility::PolicySource for PolicySlot {
    fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    fn current(&self) -> Arc<Policy> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Policy {
    /// Takes over the live state of `old`, the policy this one replaces on
    /// reload: rate budgets and open-connection counts (see
    /// [`rate::carry_state`]). Without it a reload, or just touching the
    /// policy file, would reset every user's quota.
    pub fn carry_state_from(&mut self, old: &Policy) {
        rate::carry_state(&mut self.rates, &old.rates);
    }

    /// What `who` may see on `thread` of the events of runs of `origin`
    /// (`None`: everything).
    pub fn visibility_for(
        &self,
        who: &Principal,
        origin: &crate::protocol::authorship::RunAgent,
        thread: &str,
    ) -> Option<Arc<visibility::Hidden>> {
        let class = visibility::class_of(&self.visibility, who, origin, thread);
        if class.is_empty() {
            return None;
        }
        if let Some(hidden) = self.classes.get(&class) {
            return Some(hidden.clone());
        }
        let hidden = self
            .classes
            .entry(class.clone())
            .or_insert_with(|| {
                let rules: Vec<&visibility::VisibilityRule> = self
                    .visibility
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| class.contains(*i))
                    .map(|(_, r)| r)
                    .collect();
                Arc::new(visibility::Hidden::new(&rules))
            })
            .clone();
        Some(hidden)
    }

    /// Applies the request-side rules to a run about to start (rate, limits,
    /// offered tools, identity) and returns the filter for its events, if any
    /// rule needs one.
    pub fn prepare_run(
        self: &Arc<Self>,
        who: &Principal,
        agent: &str,
        thread: &str,
        input: &mut RunInput,
    ) -> Result<Prepared, Refused> {
        let refused = |r: Refused| {
            let rule = match &r {
                Refused::Limit(l) => l.message.clone(),
                Refused::Rate(l) => format!("rate rule '{}'", l.rule),
            };
            tracing::info!(user = %who.subject, tenant = %who.tenant, agent, thread, "policy refused a run: {rule}");
            r
        };
        rate::check(&self.rates, rate::Action::Run, who, agent, thread)
            .map_err(|l| refused(Refused::Rate(l)))?;
        let size = match &*input {
            RunInput::Incremental {
                messages,
                tools,
                context,
                ..
            } => serde_json::to_vec(&(messages, tools, context))
                .map(|v| v.len())
                .unwrap_or(0),
            RunInput::Complete(i) => serde_json::to_vec(i).map(|v| v.len()).unwrap_or(0),
        };
        limits::check_size(self, who, agent, thread, size)
            .map_err(|l| refused(Refused::Limit(l)))?;
        let decider = tools::ToolDecider::new(self.clone(), who, agent, thread);
        match input {
            RunInput::Incremental {
                messages,
                tools,
                forwarded_props,
                ..
            } => {
                limits::check_request(self, who, agent, thread, messages, tools)?;
                let removed = decider.filter_offered(tools);
                log_removed(&removed, who, agent, thread);
                identity::inject(&self.identity, who, forwarded_props);
            }
            RunInput::Complete(i) => {
                let messages: Vec<Value> = i
                    .messages
                    .iter()
                    .map(|m| serde_json::to_value(m).unwrap_or_default())
                    .collect();
                let mut offered: Vec<Value> = i
                    .tools
                    .iter()
                    .map(|t| serde_json::to_value(t).unwrap_or_default())
                    .collect();
                limits::check_request(self, who, agent, thread, &messages, &offered)
                    .map_err(|l| refused(Refused::Limit(l)))?;
                let removed = decider.filter_offered(&mut offered);
                i.tools.retain(|t| !removed.contains(&t.name));
                log_removed(&removed, who, agent, thread);
                identity::inject(&self.identity, who, &mut i.forwarded_props);
            }
        }
        let mut chain: Vec<Box<dyn EventFilter>> = Vec::new();
        // The identity injected above is for the agent, never the journal.
        if let Some(s) = identity::JournalScrub::new(&self.identity) {
            chain.push(Box::new(s));
        }
        if self.tools.iter().any(|r| r.applies(who, agent)) {
            chain.push(Box::new(decider.guard()));
        }
        if let Some(l) = limits::EventLimits::new(self, who, agent, thread) {
            chain.push(Box::new(l));
        }
        // Last, so it also sees what the other filters emit (their notices).
        if let Some(r) = redaction::Redactor::new(&self.redactions, who, agent, thread) {
            // (logs name the rule, the user and the thread, never the content)
            chain.push(Box::new(r));
        }
        Ok(Prepared {
            filter: (!chain.is_empty()).then(|| Box::new(Chain(chain)) as Box<dyn EventFilter>),
            upstream_headers: identity::headers(&self.identity, who),
        })
    }
}

fn log_removed(removed: &[String], who: &Principal, agent: &str, thread: &str) {
    if !removed.is_empty() {
        tracing::info!(user = %who.subject, tenant = %who.tenant, agent, thread, tools = ?removed, "policy removed offered tools");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_scopes_every_rule_kind_and_errors_apply_the_rule() {
        let p = Policy::parse(
            "[[rules]]\nname = \"free-tier\"\nkind = \"limits\"\nmax_messages = 1\nwhen = 'principal.tenant == \"free\"'\n\
             [[rules]]\nname = \"broken\"\nkind = \"limits\"\nmax_tools = 0\nwhen = 'principal.claims.nope.deeper'\n",
            "t",
        )
        .unwrap();
        let who = |tenant: &str| Principal {
            tenant: tenant.into(),
            ..Principal::for_test("u", &[])
        };
        let two = vec![serde_json::json!({}), serde_json::json!({})];
        assert!(limits::check_request(&p, &who("free"), "a", "t", &two, &[]).is_err());
        assert!(limits::check_request(&p, &who("paid"), "a", "t", &two, &[]).is_ok());
        // The erroring condition makes its restriction apply (fail closed).
        let tool = vec![serde_json::json!({"name": "x"})];
        let e = limits::check_request(&p, &who("paid"), "a", "t", &[], &tool).unwrap_err();
        assert!(e.message.contains("'broken'"), "{e:?}");
    }

    #[test]
    fn from_config_reads_the_named_file_or_the_embedded_default() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("p.toml"), "[[rules]]\nname = 1\n").unwrap();
        let cfg = dir.path().join("g.toml");
        std::fs::write(
            &cfg,
            "[auth]\nhs_secret = \"0123456789abcdef0123456789abcdef\"\n[policy]\npath = \"p.toml\"\n",
        )
        .unwrap();
        // The config's own fields are fine; the file it names is not.
        let config = Config::load(&cfg).unwrap();
        let errs = Policy::from_config(&config).unwrap_err();
        let prefix = format!("{}: policy.path: ", cfg.display());
        assert!(
            errs[0].starts_with(&prefix) && errs[0].contains("p.toml:2:"),
            "{errs:?}"
        );
        Policy::from_config(&Config::embedded().unwrap()).unwrap();
    }

    #[test]
    fn yaml_policies_load_too() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.yaml");
        std::fs::write(&p, "rules:\n  - name: no-deletes\n    kind: tools\n    effect: deny\n    tools: [\"delete_*\"]\n").unwrap();
        let policy = Policy::load(&p).unwrap();
        assert_eq!(policy.tools[0].name, "no-deletes");
    }

    #[test]
    fn errors_name_file_line_and_rule() {
        let text = "[[rules]]\nname = \"ok\"\nkind = \"tools\"\neffect = \"deny\"\ntools = [\"x\"]\n\n\
                    [[rules]]\nname = \"broken\"\nkind = \"tools\"\neffect = \"allow\"\ntools = [\"y\"]\nwhen = \"&& nope\"\n";
        let errs = Policy::parse(text, "p.toml").unwrap_err();
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].starts_with("p.toml:8 (rule 'broken'): `when` does not compile"),
            "{errs:?}"
        );
        let errs = Policy::parse("[[rules]]\nname = 1\n", "p.toml").unwrap_err();
        assert!(errs[0].starts_with("p.toml:2:"), "{errs:?}");
        let errs = Policy::parse(
            "[[rules]]\nname = \"a\"\nkind = \"tools\"\nbogus = 1\n",
            "p.toml",
        )
        .unwrap_err();
        assert!(errs[0].contains("bogus"), "{errs:?}");
    }
}
