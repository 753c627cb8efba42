//! Rate rules: runs and meta events per minute, and concurrent WebSocket
//! connections, per user or per tenant (`governor`'s GCRA for the rates).
//! A refusal is `rate_limited` with the time to wait.
//!
//! With several nodes (Redis), every budget and connection count is also
//! kept in Redis ([`check_shared`], [`connect_shared`]), so a user's limits
//! hold cluster-wide however requests are spread; the in-memory counters
//! stay in front (they never refuse what the shared ones allow: they see a
//! subset of the same requests). Should Redis fail to answer, the shared
//! check lets the request through (logged): limits protect capacity, and a
//! node that cannot reach Redis refuses runs as `unavailable` anyway.
//!
//! The counters are shared state, not configuration: a reload builds new
//! rules and [`carry_state`] hands each one the live counters of the rule it
//! replaces, so editing (or merely touching) the policy file never resets a
//! budget or forgets an open connection.

use super::Scope;
use super::kind::{Kind, Rule, RuleStore};
use crate::auth::Principal;
use crate::store::counters::SharedCounters;
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

/// The `rate` kind. Its counters outlive a reload ([`carry_state`]).
pub const KIND: Kind = Kind {
    carry_state: Some(|new, old| carry_state(new.get_mut(), old.get())),
    ..Kind::new("rate", compile)
};

/// A rate rule's own keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fields {
    action: Option<Action>,
    per: Option<Per>,
    limit: Option<u32>,
}

fn compile(mut rule: Rule, store: &mut RuleStore) -> Result<(), String> {
    let fields: Fields = rule.fields()?;
    let action = fields
        .action
        .ok_or("rate rules need `action` (run, meta or connection)")?;
    let limit = fields
        .limit
        .filter(|l| *l > 0)
        .ok_or("rate rules need `limit` > 0")?;
    let limiter = match (action, NonZeroU32::new(limit)) {
        (Action::Connection, _) | (_, None) => None,
        (_, Some(n)) => Some(Arc::new(RateLimiter::keyed(Quota::per_minute(n)))),
    };
    store.push(RateRule {
        scope: rule.scope_with_when(),
        name: rule.name,
        action,
        per: fields.per.unwrap_or_default(),
        limit,
        limiter,
        open: Arc::new(DashMap::new()),
        next_forget: (FORGET_EVERY.as_millis() as u64).into(),
        built: std::time::Instant::now(),
    });
    Ok(())
}

/// A compiled rate rule.
pub struct RateRule {
    pub name: String,
    scope: Scope,
    action: Action,
    per: Per,
    limit: u32,
    /// Runs/meta budgets per key; shared with the rule this one replaced on
    /// reload when its quota is the same.
    limiter: Option<Arc<DefaultKeyedRateLimiter<String>>>,
    /// Open connections per key; shared across reloads (they are facts about
    /// sockets, not a budget) and with every [`ConnectionSlot`] that counts here.
    /// A key leaves when its last connection closes.
    open: Arc<DashMap<String, u32>>,
    /// When the limiter next forgets keys whose budget is full again
    /// (milliseconds since `built`).
    next_forget: std::sync::atomic::AtomicU64,
    built: std::time::Instant,
}

/// How often a rule forgets users whose budget has refilled: a key costs
/// memory only while its user is actually spending.
const FORGET_EVERY: Duration = Duration::from_secs(10);

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
    /// Forgets, at most once per [`FORGET_EVERY`], the keys whose budget is
    /// full again (indistinguishable from a key never seen), so the limiter
    /// holds only users who spent recently, not every user ever seen.
    fn forget_refilled(&self) {
        use std::sync::atomic::Ordering;
        let Some(limiter) = &self.limiter else { return };
        let now = self.built.elapsed().as_millis() as u64;
        let due = self.next_forget.load(Ordering::Relaxed);
        let next = now + FORGET_EVERY.as_millis() as u64;
        if now < due
            || self
                .next_forget
                .compare_exchange(due, next, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        limiter.retain_recent();
        limiter.shrink_to_fit();
    }

    /// Keys this rule holds state for (budgets being spent, open connections).
    pub fn keys_held(&self) -> usize {
        self.limiter.as_ref().map_or(0, |l| l.len()) + self.open.len()
    }

    /// Takes over `old`'s live state when `old` is the rule this one replaces
    /// (same name): its budgets if the quota (action, per, limit) is
    /// unchanged, and its open-connection counts if it counts the same
    /// connections (action `connection`, same `per`), whatever the new limit.
    /// A changed quota starts a fresh budget.
    fn adopt(&mut self, old: &RateRule) {
        if old.name != self.name || old.action != self.action || old.per != self.per {
            return;
        }
        if self.action == Action::Connection {
            self.open = old.open.clone();
        } else if old.limit == self.limit {
            self.limiter = old.limiter.clone();
        }
    }

    fn key(&self, who: &Principal) -> String {
        match self.per {
            Per::User => format!("{}/{}", who.tenant, who.subject),
            Per::Tenant => who.tenant.clone(),
        }
    }
}

/// Carries live counters from the rules of the policy being replaced to
/// their successors in `new` (matched by name; budgets only while the quota
/// is unchanged, connection counts while they count the same keys), so
/// a reload keeps every user's spent budget and open connections.
pub fn carry_state(new: &mut [RateRule], old: &[RateRule]) {
    for rule in new {
        if let Some(prev) = old.iter().find(|o| o.name == rule.name) {
            rule.adopt(prev);
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
        r.forget_refilled();
        if let Some(limiter) = &r.limiter
            && let Err(not_until) = limiter.check_key(&r.key(who))
        {
            let wait = not_until.wait_time_from(governor::clock::Clock::now(
                &governor::clock::DefaultClock::default(),
            ));
            tracing::info!(rule = %r.name, user = %who.subject, tenant = %who.tenant, ?action, "rate limited");
            crate::metrics::metrics().policy_decided(&r.name, "rate");
            return Err(Limited {
                rule: r.name.clone(),
                retry_after: wait.max(Duration::from_secs(1)),
            });
        }
    }
    Ok(())
}

/// The window of run and meta budgets.
const PER_MINUTE: Duration = Duration::from_secs(60);

/// The cluster-wide half of [`check`] (after it): takes one `action` from
/// every applicable rule's budget in the shared counters.
pub async fn check_shared(
    rules: &[RateRule],
    counters: &dyn SharedCounters,
    action: Action,
    who: &Principal,
    agent: &str,
    thread: &str,
) -> Result<(), Limited> {
    for r in rules
        .iter()
        .filter(|r| r.action == action && r.scope.applies_on(who, agent, thread))
    {
        // The quota is part of the key: a changed quota starts a fresh budget
        // (as the in-memory one does on reload).
        let key = format!("{}:{}:{}", r.name, r.limit, r.key(who));
        match counters.take(&key, r.limit, PER_MINUTE).await {
            Ok(None) => {}
            Ok(Some(wait)) => {
                tracing::info!(rule = %r.name, user = %who.subject, tenant = %who.tenant, ?action, "rate limited (cluster-wide)");
                crate::metrics::metrics().policy_decided(&r.name, "rate");
                return Err(Limited {
                    rule: r.name.clone(),
                    retry_after: wait.max(Duration::from_secs(1)),
                });
            }
            Err(e) => {
                tracing::warn!(rule = %r.name, "shared rate budget unreachable; allowed: {e}")
            }
        }
    }
    Ok(())
}

/// An open connection counted against connection rules; released on drop.
#[derive(Default)]
pub struct ConnectionSlot {
    local: Vec<(Arc<DashMap<String, u32>>, String)>,
    shared: Vec<(Arc<dyn SharedCounters>, String)>,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        for (counters, key) in &self.shared {
            counters.close(key);
        }
        for (open, key) in &self.local {
            if let Some(mut n) = open.get_mut(key) {
                *n = n.saturating_sub(1);
            }
            // The last connection of a key takes the key with it.
            open.remove_if(key, |_, n| *n == 0);
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
            crate::metrics::metrics().policy_decided(&r.name, "rate");
            return Err(Limited {
                rule: r.name.clone(),
                retry_after: Duration::from_secs(1),
            });
        }
        *n += 1;
        drop(n);
        slot.local.push((r.open.clone(), key));
    }
    Ok(slot)
}

/// [`connect`], and with `counters` the same slots claimed cluster-wide.
pub async fn connect_shared(
    rules: &[RateRule],
    who: &Principal,
    counters: Option<&Arc<dyn SharedCounters>>,
) -> Result<ConnectionSlot, Limited> {
    let mut slot = connect(rules, who)?;
    let Some(counters) = counters else {
        return Ok(slot);
    };
    for r in rules
        .iter()
        .filter(|r| r.action == Action::Connection && r.scope.applies_on(who, "", ""))
    {
        let key = format!("{}:{}", r.name, r.key(who));
        match counters.open(&key, r.limit).await {
            Ok(true) => slot.shared.push((counters.clone(), key)),
            Ok(false) => {
                tracing::info!(rule = %r.name, user = %who.subject, tenant = %who.tenant, "connection limit reached (cluster-wide)");
                crate::metrics::metrics().policy_decided(&r.name, "rate");
                return Err(Limited {
                    rule: r.name.clone(),
                    retry_after: Duration::from_secs(1),
                });
            }
            Err(e) => {
                tracing::warn!(rule = %r.name, "shared connection count unreachable; allowed: {e}")
            }
        }
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
        assert!(check(p.rules::<RateRule>(), Action::Run, &who("a"), "x", "t").is_ok());
        assert!(check(p.rules::<RateRule>(), Action::Run, &who("a"), "x", "t").is_ok());
        let l = check(p.rules::<RateRule>(), Action::Run, &who("a"), "x", "t").unwrap_err();
        assert_eq!(l.rule, "runs");
        assert!(l.retry_after >= Duration::from_secs(1));
        assert!(
            check(p.rules::<RateRule>(), Action::Run, &who("b"), "x", "t").is_ok(),
            "per user"
        );
        let slot = connect(p.rules::<RateRule>(), &who("a")).unwrap();
        assert!(
            connect(p.rules::<RateRule>(), &who("b")).is_err(),
            "per tenant"
        );
        drop(slot);
        assert!(
            connect(p.rules::<RateRule>(), &who("b")).is_ok(),
            "released on drop"
        );
    }

    #[test]
    fn budgets_and_open_connections_survive_a_reload() {
        let text = |runs: u32, per: &str| {
            format!(
                "[[rules]]\nname = \"runs\"\nkind = \"rate\"\naction = \"run\"\nlimit = {runs}\n\
                 [[rules]]\nname = \"conns\"\nkind = \"rate\"\naction = \"connection\"\nper = \"{per}\"\nlimit = 1\n"
            )
        };
        let old = Policy::parse(&text(1, "user"), "t").unwrap();
        assert!(check(old.rules::<RateRule>(), Action::Run, &who("a"), "x", "t").is_ok());
        let slot = connect(old.rules::<RateRule>(), &who("a")).unwrap();

        // The same rules, reloaded: nothing resets.
        let mut same = Policy::parse(&text(1, "user"), "t").unwrap();
        same.carry_state_from(&old);
        assert!(check(same.rules::<RateRule>(), Action::Run, &who("a"), "x", "t").is_err());
        assert!(connect(same.rules::<RateRule>(), &who("a")).is_err());
        assert!(check(same.rules::<RateRule>(), Action::Run, &who("b"), "x", "t").is_ok());

        // A changed quota starts fresh; the connection is still counted.
        let mut more = Policy::parse(&text(2, "user"), "t").unwrap();
        more.carry_state_from(&same);
        assert!(check(more.rules::<RateRule>(), Action::Run, &who("a"), "x", "t").is_ok());
        assert!(connect(more.rules::<RateRule>(), &who("a")).is_err());
        // Closing the socket opened under the first policy frees the slot in the third.
        drop(slot);
        let again = connect(more.rules::<RateRule>(), &who("a")).unwrap();

        // Counting other keys (per tenant now): a fresh count.
        let mut tenant = Policy::parse(&text(2, "tenant"), "t").unwrap();
        tenant.carry_state_from(&more);
        assert!(connect(tenant.rules::<RateRule>(), &who("a")).is_ok());
        drop(again);
    }

    #[test]
    fn state_is_kept_only_for_users_who_are_spending_or_connected() {
        let p = Policy::parse(
            "[[rules]]\nname = \"runs\"\nkind = \"rate\"\naction = \"run\"\nlimit = 60000\n\
             [[rules]]\nname = \"conns\"\nkind = \"rate\"\naction = \"connection\"\nlimit = 5\n",
            "t",
        )
        .unwrap();
        let slots: Vec<_> = (0..1000)
            .map(|i| connect(p.rules::<RateRule>(), &who(&format!("u{i}"))).unwrap())
            .collect();
        assert_eq!(p.rules::<RateRule>()[1].keys_held(), 1000);
        drop(slots);
        assert_eq!(
            p.rules::<RateRule>()[1].keys_held(),
            0,
            "closed connections leave no key"
        );
        for i in 0..1000 {
            check(
                p.rules::<RateRule>(),
                Action::Run,
                &who(&format!("u{i}")),
                "x",
                "t",
            )
            .unwrap();
        }
        assert_eq!(p.rules::<RateRule>()[0].keys_held(), 1000);
        // 60,000 a minute refills one run per millisecond: after a few, every
        // budget is full again and the next sweep forgets those users.
        std::thread::sleep(Duration::from_millis(5));
        p.rules::<RateRule>()[0].forget_refilled();
        assert_eq!(
            p.rules::<RateRule>()[0].keys_held(),
            1000,
            "not yet: sweeps are periodic"
        );
        p.rules::<RateRule>()[0]
            .next_forget
            .store(0, std::sync::atomic::Ordering::Relaxed); // the period is over
        p.rules::<RateRule>()[0].forget_refilled();
        assert_eq!(
            p.rules::<RateRule>()[0].keys_held(),
            0,
            "refilled budgets are forgotten"
        );
        // And a forgotten user's budget is intact: a full minute's worth.
        for _ in 0..100 {
            check(p.rules::<RateRule>(), Action::Run, &who("u0"), "x", "t").unwrap();
        }
    }
}
