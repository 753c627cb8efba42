//! Rate rules: runs and meta events per minute, and concurrent WebSocket
//! connections, per user or per tenant (`governor`'s GCRA for the rates).
//! A refusal is `rate_limited` with the time to wait.

use super::{RuleFile, Scope};
use crate::auth::Principal;
use dashmap::DashMap;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use serde::Deserialize;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

/// What a rate rule counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Runs (and resumes) started, per minute.
    Run,
    /// Meta events posted, per minute.
    Meta,
    /// WebSocket connections open at once.
    Connection,
}

/// Whose budget it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Per {
    #[default]
    User,
    Tenant,
}

/// A compiled rate rule.
pub struct RateRule {
    pub name: String,
    scope: Scope,
    action: Action,
    per: Per,
    limit: u32,
    limiter: Option<DefaultKeyedRateLimiter<String>>,
    open: Arc<DashMap<String, u32>>,
}

impl std::fmt::Debug for RateRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RateRule({}, {:?} {} per {:?})",
            self.name, self.action, self.limit, self.per
        )
    }
}

/// Refused: wait this long (connections: until one closes; reported as 1 s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limited {
    pub rule: String,
    pub retry_after: Duration,
}

impl RateRule {
    /// Builds a rule from its file form.
    pub fn new(file: &RuleFile, scope: Scope) -> Result<RateRule, String> {
        let action = file
            .action
            .ok_or("rate rules need `action` (run, meta or connection)")?;
        let limit = file
            .limit
            .filter(|l| *l > 0)
            .ok_or("rate rules need `limit` > 0")?;
        let limiter = (action != Action::Connection).then(|| {
            RateLimiter::keyed(Quota::per_minute(
                NonZeroU32::new(limit).expect("checked > 0"),
            ))
        });
        Ok(RateRule {
            name: file.name.clone(),
            scope,
            action,
            per: file.per.unwrap_or_default(),
            limit,
            limiter,
            open: Arc::new(DashMap::new()),
        })
    }

    fn key(&self, who: &Principal) -> String {
        match self.per {
            Per::User => format!("{}/{}", who.tenant, who.subject),
            Per::Tenant => who.tenant.clone(),
        }
    }
}

/// Takes one `action` from every applicable rule's budget.
pub fn check(
    rules: &[RateRule],
    action: Action,
    who: &Principal,
    agent: &str,
    thread: &str,
) -> Result<(), Limited> {
    for r in rules
        .iter()
        .filter(|r| r.action == action && r.scope.applies_on(who, agent, thread))
    {
        if let Some(limiter) = &r.limiter
            && let Err(not_until) = limiter.check_key(&r.key(who))
        {
            let wait = not_until.wait_time_from(governor::clock::Clock::now(
                &governor::clock::DefaultClock::default(),
            ));
            tracing::info!(rule = %r.name, user = %who.subject, tenant = %who.tenant, ?action, "rate limited");
            return Err(Limited {
                rule: r.name.clone(),
                retry_after: wait.max(Duration::from_secs(1)),
            });
        }
    }
    Ok(())
}

/// An open connection counted against connection rules; released on drop.
#[derive(Default)]
pub struct ConnectionSlot(Vec<(Arc<DashMap<String, u32>>, String)>);

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        for (open, key) in &self.0 {
            if let Some(mut n) = open.get_mut(key) {
                *n = n.saturating_sub(1);
            }
        }
    }
}

/// Claims a connection slot from every applicable connection rule.
pub fn connect(rules: &[RateRule], who: &Principal) -> Result<ConnectionSlot, Limited> {
    let mut slot = ConnectionSlot::default();
    for r in rules
        .iter()
        .filter(|r| r.action == Action::Connection && r.scope.applies_on(who, "", ""))
    {
        let key = r.key(who);
        let mut n = r.open.entry(key.clone()).or_insert(0);
        if *n >= r.limit {
            drop(n);
            tracing::info!(rule = %r.name, user = %who.subject, tenant = %who.tenant, "connection limit reached");
            return Err(Limited {
                rule: r.name.clone(),
                retry_after: Duration::from_secs(1),
            });
        }
        *n += 1;
        drop(n);
        slot.0.push((r.open.clone(), key));
    }
    Ok(slot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;

    fn who(sub: &str) -> Principal {
        Principal::for_test(sub, &[])
    }

    #[test]
    fn runs_per_minute_and_connections() {
        let p = Policy::parse(
            "[[rules]]\nname = \"runs\"\nkind = \"rate\"\naction = \"run\"\nlimit = 2\n\
             [[rules]]\nname = \"conns\"\nkind = \"rate\"\naction = \"connection\"\nper = \"tenant\"\nlimit = 1\n",
            "t",
        )
        .unwrap();
        assert!(check(&p.rates, Action::Run, &who("a"), "x", "t").is_ok());
        assert!(check(&p.rates, Action::Run, &who("a"), "x", "t").is_ok());
        let l = check(&p.rates, Action::Run, &who("a"), "x", "t").unwrap_err();
        assert_eq!(l.rule, "runs");
        assert!(l.retry_after >= Duration::from_secs(1));
        assert!(
            check(&p.rates, Action::Run, &who("b"), "x", "t").is_ok(),
            "per user"
        );
        let slot = connect(&p.rates, &who("a")).unwrap();
        assert!(connect(&p.rates, &who("b")).is_err(), "per tenant");
        drop(slot);
        assert!(connect(&p.rates, &who("b")).is_ok(), "released on drop");
    }
}
