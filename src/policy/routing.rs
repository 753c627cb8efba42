//! The routing kind: which backend group of an agent's pool a run goes to,
//! by tenant, role or a CEL condition over the principal and the input
//! (`[[agents]] pool.routes`, docs/configuration.md).
//!
//! The rules live in the agent's pool settings, where the backends are;
//! this kind compiles their conditions at load (a condition that does not
//! compile fails `check-config`, like any policy condition) and decides
//! per run. It is the policy's because only the policy knows the principal
//! and speaks CEL: the upstream pool is told the group and never looks at
//! who asked.

use super::cel::{Condition, Facts};
use super::kind::{Kind, Rule, RuleStore};
use crate::auth::Principal;
use crate::auth::access::glob_match;
use crate::config::ConfigError;
use crate::config::PoolRoute;
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;

/// The kind: its settings come from the agents' pool tables.
pub const KIND: Kind = Kind {
    from_config: Some(|config, store| {
        let mut errors = Vec::new();
        for (i, agent) in config.agents.iter().enumerate() {
            for (j, route) in agent.pool.routes.iter().enumerate() {
                let Some(source) = &route.when else { continue };
                match Condition::compile(source) {
                    Ok(c) => store.push(RouteCondition {
                        agent: agent.id.clone(),
                        index: j,
                        condition: Arc::new(c),
                    }),
                    Err(e) => errors.push(ConfigError {
                        file: config.origin(),
                        key: format!("agents[{i}].pool.routes[{j}].when"),
                        message: format!("does not compile: {e}"),
                    }),
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }),
    ..Kind::new("routing", compile)
};

/// A rule of the policy file has no routing keys of its own.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoFields {}

fn compile(rule: Rule, _: &mut RuleStore) -> Result<(), String> {
    rule.fields::<NoFields>()?;
    Err("routing rules live in each agent's pool: [[agents]] … pool.routes = [{ tenants, roles, when, group }] (docs/configuration.md)".into())
}

/// A compiled `when` of route `index` of `agent`'s pool.
#[derive(Debug)]
pub struct RouteCondition {
    agent: String,
    index: usize,
    condition: Arc<Condition>,
}

/// The group of the first of `routes` (agent `agent`'s) that takes a run of
/// `who` on `thread` with `input`, if any; the pool's canary or default
/// group otherwise. `conditions`: the policy's compiled ones
/// (`policy.rules::<RouteCondition>()`).
pub fn group_for(
    conditions: &[RouteCondition],
    agent: &str,
    routes: &[PoolRoute],
    who: &Principal,
    thread: &str,
    input: impl Fn() -> Value,
) -> Option<String> {
    let mut input_value = None;
    routes.iter().enumerate().find_map(|(j, route)| {
        let tenant = route.tenants.is_empty() || route.tenants.contains(&who.tenant);
        let role = route.roles.is_empty()
            || route
                .roles
                .iter()
                .any(|p| who.roles.iter().any(|r| glob_match(p, r)));
        if !tenant || !role {
            return None;
        }
        if route.when.is_some() {
            let compiled = conditions
                .iter()
                .find(|c| c.agent == agent && c.index == j)?;
            let input = input_value.get_or_insert_with(&input);
            let facts = Facts {
                principal: who,
                agent,
                thread,
                tool: None,
                input: Some(input),
            };
            match compiled.condition.eval(&facts) {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => {
                    tracing::warn!(agent, route = j, condition = %compiled.condition.source, "routing condition failed; the route does not take the run: {e}");
                    return None;
                }
            }
        }
        Some(route.group.clone())
    })
}
