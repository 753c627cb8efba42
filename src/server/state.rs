//! The state every handler shares: configuration, authenticator, agent
//! routes and policy (both swapped whole on reload), threads, counters.
//! Its own file so route modules and commands can use it without reaching
//! up into `server/mod.rs`, which builds the router over them.

use crate::auth::Authenticator;
use crate::config::Config;
use crate::policy::visibility::PolicySource;
use crate::thread::Threads;
use crate::upstream::AgentRegistry;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Everything a request handler needs, shared by reference count.
pub struct AppState {
    pub config: Config,
    pub auth: Authenticator,
    /// Agent routes; swapped whole on reload.
    agents: std::sync::RwLock<Arc<AgentRegistry>>,
    pub threads: Arc<Threads>,
    /// Operator policy (empty when no file is configured); swapped whole on
    /// reload. Shared with viewers, whose rules follow a reload.
    policy: Arc<crate::policy::PolicySlot>,
    /// Source of connection/viewer ids.
    pub ids: AtomicU64,
    /// One-use SSE join tickets.
    pub tickets: crate::auth::ticket::StreamTickets,
    /// Rate budgets and connection counts shared with the other nodes
    /// (Redis); `None` for one process.
    pub counters: Option<Arc<dyn crate::store::counters::SharedCounters>>,
    /// Set when the node drains before it stops: readiness turns false and
    /// new runs are refused (`unavailable`), while active ones finish.
    pub draining: std::sync::atomic::AtomicBool,
    /// Cancelled once the node has drained: every WebSocket gets close 1001
    /// after what it was sent, every SSE join stream ends.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// The open WebSocket connections. An upgraded socket leaves the HTTP
    /// server's connection tracking, so without this the process could
    /// exit while a socket's close 1001 was still queued, and its client
    /// would see the connection drop (1006) instead of a close.
    pub sockets: tokio_util::task::TaskTracker,
    /// Who watches which thread, on every node.
    pub presence: Arc<crate::thread::presence::Presence>,
}

impl AppState {
    /// State for a gateway with these parts.
    pub fn new(
        config: Config,
        auth: Authenticator,
        agents: AgentRegistry,
        threads: Arc<Threads>,
        policy: crate::policy::Policy,
    ) -> AppState {
        AppState {
            auth,
            agents: std::sync::RwLock::new(Arc::new(agents)),
            threads,
            policy: Arc::new(crate::policy::PolicySlot::new(policy)),
            ids: Default::default(),
            tickets: crate::auth::ticket::StreamTickets::new(config.server.ticket_ttl),
            counters: None,
            draining: Default::default(),
            shutdown: Default::default(),
            sockets: Default::default(),
            presence: Arc::new(crate::thread::presence::Presence::new(
                presence_settings(&config),
                Arc::new(crate::store::presence::LocalPresence),
            )),
            config,
        }
    }

    /// Waits, for at most `grace`, until every WebSocket connection has
    /// ended (after [`AppState::drain`] told each to close).
    pub async fn sockets_closed(&self, grace: std::time::Duration) {
        self.sockets.close();
        let _ = tokio::time::timeout(grace, self.sockets.wait()).await;
    }

    /// True once the node drains (see [`AppState::drain`]).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Drains the node before it stops: refuses new runs from now on, lets
    /// the runs active here finish for up to `server.drain_timeout`, then
    /// cancels the rest (each journals its own `RUN_FINISHED` cancelled) and
    /// waits for them to end, so nothing half-written is left behind.
    /// Viewers on other nodes keep watching throughout. Returns how many
    /// runs had to be cancelled.
    pub async fn drain(&self) -> usize {
        self.draining.store(true, Ordering::Release);
        let deadline = tokio::time::Instant::now() + self.config.server.drain_timeout;
        let every = std::time::Duration::from_millis(50);
        while self.threads.runs_here() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(every).await;
        }
        let cancelled = self.threads.cancel_runs_here();
        if cancelled > 0 {
            tracing::warn!(
                runs = cancelled,
                "drain window over: cancelling the runs still active"
            );
            let give_up = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
            while self.threads.runs_here() > 0 && tokio::time::Instant::now() < give_up {
                tokio::time::sleep(every).await;
            }
        }
        self.shutdown.cancel();
        cancelled
    }

    /// The same state with presence shared with the other nodes through `store`.
    pub fn with_presence_store(
        mut self,
        store: Arc<dyn crate::store::presence::PresenceStore>,
    ) -> AppState {
        self.presence = Arc::new(crate::thread::presence::Presence::new(
            presence_settings(&self.config),
            store,
        ));
        self
    }

    /// The same state with rate limits and connection caps kept cluster-wide
    /// in `counters` (see [`crate::policy::rate`]).
    pub fn with_shared_counters(
        mut self,
        counters: Arc<dyn crate::store::counters::SharedCounters>,
    ) -> AppState {
        self.counters = Some(counters);
        self
    }

    /// Takes one `action` from the caller's cluster-wide budgets (nothing
    /// to do for one process: [`crate::policy::rate::check`] did it).
    pub async fn check_shared_rate(
        &self,
        action: crate::policy::rate::Action,
        who: &crate::auth::Principal,
        agent: &str,
        thread: &str,
    ) -> Result<(), crate::policy::rate::Limited> {
        let Some(counters) = &self.counters else {
            return Ok(());
        };
        crate::policy::rate::check_shared(
            self.policy().rules(),
            counters.as_ref(),
            action,
            who,
            agent,
            thread,
        )
        .await
    }

    /// The current agent routes.
    pub fn agents(&self) -> Arc<AgentRegistry> {
        self.agents
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The current policy.
    /// The slot the policy in force is read from (for what decides later,
    /// such as a run's handoff, and must follow a reload).
    pub fn policy_slot(&self) -> Arc<crate::policy::PolicySlot> {
        self.policy.clone()
    }

    pub fn policy(&self) -> Arc<crate::policy::Policy> {
        self.policy.current()
    }

    /// What `who` may see on `thread`, run by run, always by the policy in force.
    pub fn viewer_rules(
        &self,
        who: &crate::auth::Principal,
        thread: &str,
    ) -> crate::protocol::hooks::ViewerVisibility {
        Some(Arc::new(crate::policy::visibility::ViewerRules::new(
            self.policy.clone(),
            who,
            thread,
        )))
    }

    /// Replaces routes and policy at once (hot reload); runs in flight keep
    /// the ones they started with (viewers follow the new visibility rules).
    /// The new policy inherits the old one's live state (rate budgets, open
    /// connections), so a reload resets no quota.
    pub fn swap(&self, agents: AgentRegistry, policy: crate::policy::Policy) {
        *self
            .agents
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(agents);
        self.policy.replace(policy);
    }

    /// A fresh id for a connection or viewer.
    pub fn next_connection_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// The presence keys of `[threads]`.
fn presence_settings(config: &Config) -> crate::thread::presence::PresenceSettings {
    crate::thread::presence::PresenceSettings {
        enabled: config.threads.presence,
        interval: config.threads.presence_interval,
        hide_roles: config.threads.presence_hide_roles.clone(),
    }
}
