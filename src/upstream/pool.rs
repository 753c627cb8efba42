//! An agent's backends and how a run gets one.
//!
//! A run asks for a backend with [`Pool::acquire`], naming the backends it
//! already tried (a retry goes elsewhere) and, with affinity on, its
//! thread's key. The choice, under one lock per agent:
//!
//! 1. Candidates: the backends not tried yet whose circuit admits a run
//!    (closed, or half-open with no probe out). When the circuit admits
//!    none of them the run tries them all the same ("panic routing", as in
//!    Envoy): failing every run fast because every replica was ejected
//!    would turn a short outage into a longer one, and an agent with one
//!    backend behaves exactly as before pools existed.
//! 2. Affinity: the thread's owner among *all* backends (see
//!    [`super::affinity`]); if it is a candidate the run goes there (waiting
//!    for a slot if it is at its cap: a stateful agent's state is worth a
//!    wait), otherwise to the owner among the candidates, and the run is
//!    marked as moved (the journal says so).
//! 3. Otherwise the balancer (see [`super::balancer`]) among candidates
//!    under their cap.
//!
//! When every candidate is at its `max_in_flight` the run waits for a slot
//! to free, up to `pool.queue_timeout`.

use super::affinity;
use super::backend::{Backend, BackendState, Slot};
use super::balancer::{Balancer, Candidate};
use super::health::{Admit, Ejection};
use crate::config::{Balance, Canary, DEFAULT_GROUP, PoolConfig, PoolRoute};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The part of a pool that outlives a reload (the balancer's credits, the
/// waiters for a slot).
#[derive(Default)]
pub struct PoolShared {
    balancer: Mutex<Balancer>,
    freed: Arc<Notify>,
}

/// An agent's backends with its pool settings.
pub struct Pool {
    pub backends: Vec<Backend>,
    pub balance: Balance,
    pub affinity: bool,
    pub attempts: u32,
    pub retry_backoff: Duration,
    pub queue_timeout: Duration,
    pub ejection: Ejection,
    pub admin_roles: Vec<String>,
    pub routes: Vec<PoolRoute>,
    pub canary: Option<Canary>,
    pub shared: Arc<PoolShared>,
    /// The active health check's task, if configured (ends with the pool).
    pub probing: Option<tokio_util::task::AbortOnDropHandle<()>>,
}

/// Whose run it is: routing rules and the canary look at the tenant,
/// affinity and the canary at the thread.
#[derive(Debug, Clone)]
pub struct RunKey {
    pub tenant: String,
    pub thread: String,
    /// The group the agent's routing rules chose, if one did.
    pub route: Option<String>,
}

/// A backend granted to a run.
pub struct Granted {
    pub index: usize,
    pub slot: Slot,
    /// The thread's own backend could not take the run (see the module doc).
    pub moved: bool,
}

/// Why no backend was granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoBackend {
    /// Every backend was tried already.
    Exhausted,
    /// Every candidate stayed at its cap for `queue_timeout`.
    Busy,
}

enum Pick {
    Granted(Granted),
    Busy,
    Exhausted,
}

impl Pool {
    pub fn new(
        cfg: &PoolConfig,
        affinity: bool,
        backends: Vec<Backend>,
        shared: Arc<PoolShared>,
    ) -> Pool {
        Pool {
            backends,
            balance: cfg.balance,
            affinity,
            attempts: cfg.attempts,
            retry_backoff: cfg.retry_backoff,
            queue_timeout: cfg.queue_timeout,
            ejection: Ejection {
                after: cfg.eject_after,
                base: cfg.eject_base,
                max: cfg.eject_max,
            },
            admin_roles: cfg.admin_roles.clone(),
            routes: cfg.routes.clone(),
            canary: cfg.canary.clone(),
            shared,
            probing: None,
        }
    }

    /// The live state of the backend named `name`, if this pool has it (a
    /// reload carries it over).
    pub fn state_of(&self, name: &str) -> Option<Arc<BackendState>> {
        self.backends
            .iter()
            .find(|b| b.name == name)
            .map(|b| b.state.clone())
    }

    /// The backend group of `run`: the one its routing rules chose, else
    /// the canary's group for the canary's share of threads, else `default`.
    pub fn group_of<'a>(&'a self, run: Option<&'a RunKey>) -> &'a str {
        let Some(run) = run else {
            return DEFAULT_GROUP;
        };
        // Routing rules are decided by the policy, which knows who asked
        // (`policy::routing`); the pool is told their group.
        if let Some(group) = &run.route {
            return group;
        }
        match &self.canary {
            Some(c)
                if affinity::unit(&affinity::key(&run.tenant, &run.thread), "canary")
                    < c.percent / 100.0 =>
            {
                &c.group
            }
            _ => DEFAULT_GROUP,
        }
    }

    /// A backend for a run that has tried `tried`, in the group of `run`
    /// (and its thread's own backend when affinity is on); waits up to
    /// `queue_timeout` for a slot.
    pub async fn acquire(
        &self,
        run: Option<&RunKey>,
        tried: &[usize],
    ) -> Result<Granted, NoBackend> {
        let deadline = tokio::time::Instant::now() + self.queue_timeout;
        let group = self.group_of(run);
        let key = run
            .filter(|_| self.affinity)
            .map(|r| affinity::key(&r.tenant, &r.thread));
        loop {
            // Registered before looking, so a slot freed in between wakes us.
            let freed = self.shared.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match self.pick(group, key.as_deref(), tried) {
                Pick::Granted(g) => return Ok(g),
                Pick::Exhausted => return Err(NoBackend::Exhausted),
                Pick::Busy => {
                    if tokio::time::timeout_at(deadline, freed).await.is_err() {
                        return Err(NoBackend::Busy);
                    }
                }
            }
        }
    }

    /// Whether `run`'s group has a backend it has not tried: a failed
    /// attempt waits out the backoff only when there is one to try next.
    pub fn untried(&self, run: Option<&RunKey>, tried: &[usize]) -> bool {
        let group = self.group_of(run);
        self.backends
            .iter()
            .enumerate()
            .any(|(i, b)| b.group == group && !tried.contains(&i))
    }

    fn pick(&self, group: &str, key: Option<&str>, tried: &[usize]) -> Pick {
        let mut balancer = self
            .shared
            .balancer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        struct Look {
            index: usize,
            admit: Admit,
            full: bool,
        }
        let looks: Vec<Look> = self
            .backends
            .iter()
            .enumerate()
            .filter(|(i, b)| b.group == group && !tried.contains(i))
            .map(|(index, b)| Look {
                index,
                admit: b.state.circuit().admits(now),
                full: b
                    .max_in_flight
                    .is_some_and(|cap| b.state.in_flight() >= cap),
            })
            .collect();
        if looks.is_empty() {
            return Pick::Exhausted;
        }
        let panic = looks.iter().all(|l| l.admit == Admit::No);
        let candidates: Vec<&Look> = looks
            .iter()
            .filter(|l| panic || l.admit != Admit::No)
            .collect();
        let mut moved = false;
        let chosen = if let Some(key) = key {
            let all = self
                .backends
                .iter()
                .enumerate()
                .filter(|(_, b)| b.group == group)
                .map(|(i, b)| (i, b.name.as_str(), b.weight));
            let own = affinity::owner(key, all);
            match candidates.iter().find(|l| Some(l.index) == own) {
                Some(l) if l.full => return Pick::Busy,
                Some(l) => l.index,
                None => {
                    moved = true;
                    let open = candidates.iter().filter(|l| !l.full).map(|l| {
                        let b = &self.backends[l.index];
                        (l.index, b.name.as_str(), b.weight)
                    });
                    match affinity::owner(key, open) {
                        Some(i) => i,
                        None => return Pick::Busy,
                    }
                }
            }
        } else {
            let open: Vec<Candidate> = candidates
                .iter()
                .filter(|l| !l.full)
                .map(|l| Candidate {
                    index: l.index,
                    weight: self.backends[l.index].weight,
                    in_flight: self.backends[l.index].state.in_flight(),
                })
                .collect();
            match balancer.pick(self.balance, self.backends.len(), &open) {
                Some(i) => i,
                None => return Pick::Busy,
            }
        };
        let probe = looks
            .iter()
            .any(|l| l.index == chosen && l.admit == Admit::Probe);
        let backend = &self.backends[chosen];
        Pick::Granted(Granted {
            index: chosen,
            slot: backend.state.take(probe, self.shared.freed.clone()),
            moved,
        })
    }

    /// The backends as admins see them in `GET /v1/agents`.
    pub fn listing(&self) -> Value {
        let m = crate::metrics::metrics();
        let now = Instant::now();
        let backends: Vec<Value> = self
            .backends
            .iter()
            .map(|b| {
                let l = &b.state.labels;
                json!({
                    "url": b.name,
                    "group": b.group,
                    "weight": b.weight,
                    "maxInFlight": b.max_in_flight,
                    "inFlight": b.state.in_flight(),
                    "health": b.state.circuit().label(now),
                    "runs": m.backend_runs.get_or_create(l).get(),
                    "failures": m.backend_failures.get_or_create(l).get(),
                    "ejections": m.backend_ejections.get_or_create(l).get(),
                })
            })
            .collect();
        json!({"affinity": self.affinity, "backends": backends})
    }
}
