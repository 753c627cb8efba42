//! Operator policy from a file: who may do what, applied before anything is
//! forwarded.
//!
//! A policy is an ordered list of named rules. Each rule has a kind (one file
//! per kind: [`tools`], [`limits`], [`rate`], [`redaction`], [`visibility`]),
//! a scope (agent, role, tenant and user globs; all default to `*`) and an
//! optional CEL condition ([`cel`]) compiled at load. Deny beats allow; a set
//! of tool allow-rules makes an allow-list; a condition that errors denies
//! (fail closed) and is logged. The verified
//! identity can be injected into `forwardedProps` ([`identity`]).
//!
//! Request-side checks run before a run is started; event-side rules run as
//! the run's [`EventFilter`], so nothing a
//! rule removed is ever journaled or shown.
//!
//! **Adding a kind.** This file knows only the keys every rule shares; each
//! kind owns the rest. A new kind is a file here exporting a
//! `pub const KIND: Kind` ([`kind::Kind`]: its name, a `compile` that
//! deserializes its own `Fields` with `deny_unknown_fields`, validates them,
//! decides where the rule's `when` goes and pushes the compiled rule into the
//! [`kind::RuleStore`]; optionally a `from_config` hook for settings kept in
//! the gateway config and a `carry_state` hook for live state kept across a
//! reload), plus its line in [`KINDS`]. Its users read the compiled rules
//! with [`Policy::rules`]; nothing else here changes.

pub mod cel;
pub mod handoff;
pub mod identity;
pub mod kind;
pub mod limits;
pub mod rate;
pub mod redaction;
pub mod routing;
pub mod tools;
pub mod visibility;

use crate::auth::Principal;
use crate::auth::access::glob_match;
use crate::config::{Config, ConfigError};
use crate::protocol::Event;
use crate::protocol::hooks::{EventFilter, RunInput};
use kind::{Kind, RuleStore};
use serde::Deserialize;
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

/// Every rule kind: the values `kind` may take, and what compiles them.
pub const KINDS: &[Kind] = &[
    tools::KIND,
    limits::KIND,
    rate::KIND,
    redaction::KIND,
    visibility::KIND,
    handoff::KIND,
    routing::KIND,
];

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

/// One rule as written: the keys every rule shares, and the rest for its
/// kind ([`Kind::compile`] deserializes them with `deny_unknown_fields`;
/// serde cannot combine that with `flatten` here, so unknown keys are
/// reported per kind, with the rule's name and line).
#[derive(Debug, Default, Deserialize)]
struct RuleFile {
    name: String,
    kind: Option<String>,
    #[serde(default)]
    agents: Vec<String>,
    #[serde(default)]
    roles: Vec<String>,
    #[serde(default)]
    tenants: Vec<String>,
    #[serde(default)]
    users: Vec<String>,
    when: Option<String>,
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

/// Who and what a rule applies to (globs; empty = everyone), plus the
/// rule's `when` condition for kinds that put it here
/// ([`kind::Rule::scope_with_when`]; `tools` keeps its own).
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
            input: None,
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
    /// Every kind's compiled rules ([`Policy::rules`]).
    store: RuleStore,
    /// One shared hidden-set per policy class, built on first use.
    classes: dashmap::DashMap<visibility::ClassKey, Arc<visibility::Hidden>>,
}

impl Policy {
    /// The compiled rules of one kind, in file order: `rules::<tools::ToolRule>()`.
    pub fn rules<R: std::any::Any + Send + Sync + std::fmt::Debug>(&self) -> &[R] {
        self.store.get::<R>()
    }

    /// The policy `config` names: its file, the compiled-in
    /// [`EMBEDDED_POLICY`] for the embedded configuration, or none, then
    /// each kind's settings kept in the config itself
    /// ([`Kind::from_config`]). Loading lives here, not in config, so config
    /// stays plain settings. A file's problems read as configuration errors
    /// (`<config>: policy.path: …`), as the operator fixes them starting
    /// from that key; every problem, of the file and of the config, is
    /// reported at once.
    pub fn from_config(config: &Config) -> Result<Policy, Vec<String>> {
        Self::from_config_with(config, KINDS)
    }

    /// [`Policy::from_config`] with the kinds `kinds`.
    fn from_config_with(config: &Config, kinds: &[Kind]) -> Result<Policy, Vec<String>> {
        let file = match &config.policy.path {
            Some(p) => Self::load_with(p, kinds).map_err(|errors| {
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
                Self::parse_with(EMBEDDED_POLICY, "<embedded config/policy.toml>", kinds)
            }
            None => Ok(Default::default()),
        };
        let (mut policy, mut errors) = match file {
            Ok(p) => (p, Vec::new()),
            Err(e) => (Policy::default(), e),
        };
        for hook in kinds.iter().filter_map(|k| k.from_config) {
            if let Err(e) = hook(config, &mut policy.store) {
                errors.extend(e.iter().map(ToString::to_string));
            }
        }
        if errors.is_empty() {
            Ok(policy)
        } else {
            Err(errors)
        }
    }

    /// Reads and compiles `path` (TOML, or YAML for `.yaml`/`.yml`).
    /// Errors name `file:line` and the rule.
    pub fn load(path: &Path) -> Result<Policy, Vec<String>> {
        Self::load_with(path, KINDS)
    }

    fn load_with(path: &Path, kinds: &[Kind]) -> Result<Policy, Vec<String>> {
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
            return Self::compile(file, &text, &origin, kinds);
        }
        Self::parse_with(&text, &origin, kinds)
    }

    /// Compiles policy text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Policy, Vec<String>> {
        Self::parse_with(text, origin, KINDS)
    }

    fn parse_with(text: &str, origin: &str, kinds: &[Kind]) -> Result<Policy, Vec<String>> {
        let file: PolicyFile = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start].lines().count().max(1))
                .unwrap_or(0);
            vec![format!("{origin}:{line}: {}", e.message())]
        })?;
        Self::compile(file, text, origin, kinds)
    }

    fn compile(
        file: PolicyFile,
        text: &str,
        origin: &str,
        kinds: &[Kind],
    ) -> Result<Policy, Vec<String>> {
        // The line of `name = "…"` (TOML) or `- name: …` (YAML, quoted or not).
        let line_of = |name: &str| {
            text.lines()
                .position(|l| {
                    let l = l.trim_start();
                    (l.contains(&format!("\"{name}\"")) && l.starts_with("name"))
                        || l.trim_start_matches("- ")
                            .strip_prefix("name:")
                            .is_some_and(|v| v.trim().trim_matches(['"', '\'']) == name)
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
            let kind = match rule.kind.as_deref() {
                Some(name) => match kinds.iter().find(|k| k.name == name) {
                    Some(k) => k,
                    None => {
                        errors.push(format!(
                            "{at}: unknown `kind` '{name}' ({})",
                            kind::names(kinds)
                        ));
                        continue;
                    }
                },
                None => {
                    errors.push(format!("{at}: missing `kind` ({})", kind::names(kinds)));
                    continue;
                }
            };
            let compiled = kind::Rule {
                name: rule.name,
                scope: Scope {
                    agents: rule.agents,
                    roles: rule.roles,
                    tenants: rule.tenants,
                    users: rule.users,
                    when: None,
                },
                when,
                fields: rule.rest,
            };
            if let Err(e) = (kind.compile)(compiled, &mut policy.store) {
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
    /// reload, each kind its own ([`Kind::carry_state`]; rate budgets and
    /// open-connection counts: [`rate::carry_state`]). Without it a reload,
    /// or just touching the policy file, would reset every user's quota.
    pub fn carry_state_from(&mut self, old: &Policy) {
        for carry in KINDS.iter().filter_map(|k| k.carry_state) {
            carry(&mut self.store, &old.store);
        }
    }

    /// What `who` may see on `thread` of the events of runs of `origin`
    /// (`None`: everything).
    pub fn visibility_for(
        &self,
        who: &Principal,
        origin: &crate::protocol::authorship::RunAgent,
        thread: &str,
    ) -> Option<Arc<visibility::Hidden>> {
        let class = visibility::class_of(self.rules(), who, origin, thread);
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
                    .rules()
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
        rate::check(self.rules(), rate::Action::Run, who, agent, thread)
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
        if self
            .rules::<tools::ToolRule>()
            .iter()
            .any(|r| r.applies(who, agent))
        {
            chain.push(Box::new(decider.guard()));
        }
        if let Some(l) = limits::EventLimits::new(self, who, agent, thread) {
            chain.push(Box::new(l));
        }
        // Last, so it also sees what the other filters emit (their notices).
        if let Some(r) = redaction::Redactor::new(self.rules(), who, agent, thread) {
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
        std::fs::write(
            &p,
            "rules:\n  - name: no-deletes\n    kind: tools\n    effect: deny\n    tools: [\"delete_*\"]\n\
             \x20 - name: few\n    kind: rate\n    action: run\n    limit: 2\n\
             \x20 - name: small\n    kind: limits\n    max_messages: 1\n    allow_file_sources: false\n",
        )
        .unwrap();
        let policy = Policy::load(&p).unwrap();
        assert_eq!(policy.rules::<tools::ToolRule>()[0].name, "no-deletes");
        // The kinds' own keys arrive through the same flattened map as TOML's.
        let who = Principal::for_test("u", &[]);
        let rates = policy.rules::<rate::RateRule>();
        assert!(rate::check(rates, rate::Action::Run, &who, "a", "t").is_ok());
        assert!(rate::check(rates, rate::Action::Run, &who, "a", "t").is_ok());
        assert!(rate::check(rates, rate::Action::Run, &who, "a", "t").is_err());
        let two = vec![serde_json::json!({}), serde_json::json!({})];
        assert!(limits::check_request(&policy, &who, "a", "t", &two, &[]).is_err());
        std::fs::write(
            &p,
            "rules:\n  - name: a\n    kind: rate\n    action: run\n    limit: 2\n    hide: [RAW]\n",
        )
        .unwrap();
        let errs = Policy::load(&p).unwrap_err();
        assert!(
            errs[0].starts_with(&format!(
                "{}:2 (rule 'a'): unknown field `hide`",
                p.display()
            )),
            "{errs:?}"
        );
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

    #[test]
    fn each_kind_owns_its_keys() {
        // A key of no kind, and a key of another kind, are refused with the
        // rule's name and line; every rule's problems are reported at once.
        let text = "[[rules]]\nname = \"a\"\nkind = \"tools\"\neffect = \"deny\"\ntools = [\"x\"]\nbogus = 1\n\
                    [[rules]]\nname = \"b\"\nkind = \"tools\"\neffect = \"deny\"\ntools = [\"x\"]\nhide = [\"RAW\"]\n\
                    [[rules]]\nname = \"c\"\nkind = \"rate\"\naction = \"run\"\nlimit = \"many\"\n";
        let errs = Policy::parse(text, "p.toml").unwrap_err();
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(
            errs[0].starts_with(
                "p.toml:2 (rule 'a'): unknown field `bogus`, expected one of `effect`, `tools`"
            ),
            "{errs:?}"
        );
        assert!(
            errs[1].starts_with("p.toml:8 (rule 'b'): unknown field `hide`"),
            "{errs:?}"
        );
        // A value of the wrong type names its key.
        assert!(
            errs[2].starts_with("p.toml:14 (rule 'c'): `limit`: invalid type: string \"many\""),
            "{errs:?}"
        );
        // Each kind still validates what it needs.
        let errs = Policy::parse("[[rules]]\nname = \"a\"\nkind = \"visibility\"\n", "p.toml")
            .unwrap_err();
        assert_eq!(
            errs,
            ["p.toml:2 (rule 'a'): visibility rules need `hide` (event type globs)"]
        );
    }

    #[test]
    fn kind_values_come_from_the_registration_table() {
        let errs = Policy::parse(
            "[[rules]]\nname = \"a\"\nkind = \"handof\"\n[[rules]]\nname = \"b\"\n",
            "p.toml",
        )
        .unwrap_err();
        assert_eq!(
            errs,
            [
                "p.toml:2 (rule 'a'): unknown `kind` 'handof' (tools, limits, rate, redaction, visibility, handoff or routing)",
                "p.toml:5 (rule 'b'): missing `kind` (tools, limits, rate, redaction, visibility, handoff or routing)",
            ]
        );
        // Every registered name is accepted as a `kind`.
        for k in KINDS {
            let errs = Policy::parse(
                &format!(
                    "[[rules]]\nname = \"a\"\nkind = \"{}\"\nbogus = 1\n",
                    k.name
                ),
                "p.toml",
            )
            .unwrap_err();
            assert!(errs[0].contains("unknown field `bogus`"), "{errs:?}");
        }
    }

    /// A kind that exists only here: its rules come from the policy file
    /// (`label`) and from the gateway config (one per agent, from its
    /// description), which refuses an agent without one.
    mod probe {
        use super::super::kind::{Kind, Rule, RuleStore};
        use crate::config::{Config, ConfigError};

        #[derive(Debug, PartialEq)]
        pub struct Probe(pub String);

        pub const KIND: Kind = Kind {
            from_config: Some(from_config),
            ..Kind::new("probe", compile)
        };

        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Fields {
            label: String,
        }

        fn compile(rule: Rule, store: &mut RuleStore) -> Result<(), String> {
            let f: Fields = rule.fields()?;
            store.push(Probe(format!("{}={}", rule.name, f.label)));
            Ok(())
        }

        fn from_config(config: &Config, store: &mut RuleStore) -> Result<(), Vec<ConfigError>> {
            let mut errors = Vec::new();
            for (i, agent) in config.agents.iter().enumerate() {
                if agent.description.is_empty() {
                    errors.push(ConfigError {
                        file: config.origin(),
                        key: format!("agents[{i}].description"),
                        message: "a probe needs one".into(),
                    });
                } else {
                    store.push(Probe(format!("{}:{}", agent.id, agent.description)));
                }
            }
            if errors.is_empty() {
                Ok(())
            } else {
                Err(errors)
            }
        }
    }

    #[test]
    fn a_kind_reads_its_settings_from_the_gateway_config() {
        let kinds = [tools::KIND, probe::KIND];
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("p.toml"),
            "[[rules]]\nname = \"r\"\nkind = \"probe\"\nlabel = \"x\"\n",
        )
        .unwrap();
        let cfg = dir.path().join("g.toml");
        let write = |agents: &str| {
            std::fs::write(
                &cfg,
                format!(
                    "[auth]\nhs_secret = \"0123456789abcdef0123456789abcdef\"\n[policy]\npath = \"p.toml\"\n{agents}"
                ),
            )
            .unwrap();
            Config::load(&cfg).unwrap()
        };
        let agent = |id: &str, description: &str| {
            format!(
                "[[agents]]\nid = \"{id}\"\nurl = \"http://example.com/\"\ndescription = \"{description}\"\n"
            )
        };
        // The file's rules first, then what the hook found in the config.
        let config = write(&(agent("a", "alpha") + &agent("b", "beta")));
        let policy = Policy::from_config_with(&config, &kinds).unwrap();
        assert_eq!(
            policy.rules::<probe::Probe>(),
            [
                probe::Probe("r=x".into()),
                probe::Probe("a:alpha".into()),
                probe::Probe("b:beta".into())
            ]
        );
        // Its errors read as configuration errors, beside the file's own.
        let config = write(&(agent("a", "alpha") + &agent("b", "")));
        std::fs::write(
            dir.path().join("p.toml"),
            "[[rules]]\nname = \"r\"\nkind = \"probe\"\n",
        )
        .unwrap();
        let errs = Policy::from_config_with(&config, &kinds).unwrap_err();
        assert_eq!(
            errs,
            [
                format!(
                    "{}: policy.path: {}:2 (rule 'r'): missing field `label`",
                    cfg.display(),
                    dir.path().join("p.toml").display()
                ),
                format!(
                    "{}: agents[1].description: a probe needs one",
                    cfg.display()
                ),
            ]
        );
        // The gateway's own kinds are the ones `from_config` uses.
        let errs = Policy::from_config(&config).unwrap_err();
        assert!(errs[0].contains("unknown `kind` 'probe'"), "{errs:?}");
    }
}
