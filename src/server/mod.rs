//! What clients talk to: the HTTP routes ([`http`]), their error shape
//! ([`error`]), CORS ([`cors`]) and the counters behind `/metrics` ([`metrics`]).

pub mod access;
pub mod cors;
pub mod error;
pub mod http;
pub mod metrics;
pub mod reload;
pub mod sideband;
pub mod sse;
pub mod threads;
pub mod ws;

use crate::auth::Authenticator;
use crate::config::Config;
use crate::thread::Threads;
use crate::upstream::AgentRegistry;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::net::TcpListener;

/// Everything a request handler needs, shared by reference count.
pub struct AppState {
    pub config: Config,
    pub auth: Authenticator,
    /// Agent routes; swapped whole on reload.
    agents: std::sync::RwLock<Arc<AgentRegistry>>,
    pub threads: Arc<Threads>,
    /// Operator policy (empty when no file is configured); swapped whole on reload.
    policy: std::sync::RwLock<Arc<crate::policy::Policy>>,
    pub metrics: metrics::Metrics,
    /// Source of connection/viewer ids.
    pub ids: AtomicU64,
    /// One-use SSE join tickets.
    pub tickets: crate::auth::ticket::StreamTickets,
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
            policy: std::sync::RwLock::new(Arc::new(policy)),
            metrics: Default::default(),
            ids: Default::default(),
            tickets: crate::auth::ticket::StreamTickets::new(config.server.ticket_ttl),
            config,
        }
    }

    /// The current agent routes.
    pub fn agents(&self) -> Arc<AgentRegistry> {
        self.agents
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The current policy.
    pub fn policy(&self) -> Arc<crate::policy::Policy> {
        self.policy
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Replaces routes and policy at once (hot reload); runs in flight keep
    /// the ones they started with. The new policy inherits the old one's
    /// live state (rate budgets, open connections), so a reload resets no quota.
    pub fn swap(&self, agents: AgentRegistry, mut policy: crate::policy::Policy) {
        *self
            .agents
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(agents);
        let mut current = self
            .policy
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        policy.carry_state_from(&current);
        *current = Arc::new(policy);
    }

    /// A fresh id for a connection or viewer.
    pub fn next_connection_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// A running gateway: its bound address and a handle to stop it.
pub struct Running {
    pub addr: SocketAddr,
    shutdown: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    /// Stops accepting, lets open streams finish for up to `shutdown_grace`,
    /// then returns.
    pub async fn shutdown(self) -> std::io::Result<()> {
        let _ = self.shutdown.send(true);
        self.task.await.unwrap_or(Ok(()))
    }

    /// Waits until the server stops by itself (it only does on error).
    pub async fn wait(self) -> std::io::Result<()> {
        self.task.await.unwrap_or(Ok(()))
    }

    /// A sender that triggers graceful shutdown.
    pub fn shutdown_handle(&self) -> tokio::sync::watch::Sender<bool> {
        self.shutdown.clone()
    }
}

/// Binds `state.config.server.listen` and serves until shut down.
pub async fn start(state: Arc<AppState>) -> std::io::Result<Running> {
    let listener = TcpListener::bind(&state.config.server.listen).await?;
    let addr = listener.local_addr()?;
    let grace = state.config.server.shutdown_grace;
    let app = http::router(state);
    let (tx, mut rx) = tokio::sync::watch::channel(false);
    let mut grace_rx = tx.subscribe();
    let task = tokio::spawn(async move {
        let server = axum::serve(listener, app).with_graceful_shutdown(async move {
            let _ = rx.wait_for(|stop| *stop).await;
        });
        tokio::select! {
            r = server => r,
            _ = async {
                let _ = grace_rx.wait_for(|stop| *stop).await;
                tokio::time::sleep(grace).await;
            } => {
                tracing::warn!("shutdown grace {grace:?} passed; closing remaining streams");
                Ok(())
            }
        }
    });
    Ok(Running {
        addr,
        shutdown: tx,
        task,
    })
}
