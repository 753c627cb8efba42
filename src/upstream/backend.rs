//! One replica of an agent, and what is known of it.
//!
//! The config half ([`Backend`]) is rebuilt on every reload; the live half
//! ([`BackendState`]: runs in flight, the circuit) is carried over to the
//! new config when the agent keeps a backend of the same URL, so a reload
//! neither forgets an ejection nor lets a capped backend take more runs
//! than its cap while the runs started before the reload go on.

use super::health::{Circuit, Ejection};
use crate::metrics::{BackendLabels, metrics};
use reqwest::header::HeaderMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// A backend as configured.
pub struct Backend {
    pub url: reqwest::Url,
    /// The URL without credentials or query: its name in metrics, logs and
    /// listings (and its affinity identity: see [`super::affinity`]).
    pub name: String,
    /// The agent's headers with this backend's over them; sensitive.
    pub headers: HeaderMap,
    pub weight: u32,
    pub max_in_flight: Option<usize>,
    /// Its backend group (`pool.routes`, `pool.canary`).
    pub group: String,
    pub state: Arc<BackendState>,
}

/// What is known of a backend while the gateway runs.
pub struct BackendState {
    /// Runs holding a [`Slot`] on it (only raised under the pool's lock,
    /// so the cap holds; lowered by the slot's drop).
    in_flight: AtomicUsize,
    circuit: Mutex<Circuit>,
    pub labels: BackendLabels,
}

impl BackendState {
    pub fn new(agent: &str, name: &str) -> BackendState {
        BackendState {
            in_flight: AtomicUsize::new(0),
            circuit: Mutex::new(Circuit::default()),
            labels: BackendLabels {
                agent: agent.to_owned(),
                backend: name.to_owned(),
            },
        }
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    pub fn circuit(&self) -> MutexGuard<'_, Circuit> {
        self.circuit.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes a slot (the pool's lock held: see [`super::pool`]).
    pub(super) fn take(self: &Arc<Self>, probe: bool, freed: Arc<tokio::sync::Notify>) -> Slot {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        metrics()
            .backend_in_flight
            .get_or_create(&self.labels)
            .inc();
        metrics().backend_runs.get_or_create(&self.labels).inc();
        if probe {
            self.circuit().take_probe();
        }
        Slot {
            state: self.clone(),
            probe,
            verdict: false,
            started: Instant::now(),
            freed,
        }
    }
}

impl Backend {
    /// The name of `url`: scheme, host, port and path.
    pub fn name_of(url: &reqwest::Url) -> String {
        let mut u = url.clone();
        let _ = u.set_username("");
        let _ = u.set_password(None);
        u.set_query(None);
        u.set_fragment(None);
        u.to_string()
    }
}

/// One run's hold on a backend: counted in flight until dropped, and the
/// way the run reports on the backend's health.
pub struct Slot {
    state: Arc<BackendState>,
    /// This run is the half-open probe.
    probe: bool,
    /// The run reported the first event or a failure.
    verdict: bool,
    started: Instant,
    /// Woken on drop: a run waiting for a slot may take this one.
    freed: Arc<tokio::sync::Notify>,
}

impl Slot {
    pub fn name(&self) -> &str {
        &self.state.labels.backend
    }

    /// The agent's first event arrived (once per run).
    pub fn first_event(&mut self) {
        if std::mem::replace(&mut self.verdict, true) {
            return;
        }
        self.state.circuit().success();
        metrics()
            .backend_first_event
            .get_or_create(&self.state.labels)
            .observe(self.started.elapsed().as_secs_f64());
    }

    /// The backend failed before the first event; `true` when that ejected it.
    pub fn failed(&mut self, ejection: &Ejection) -> bool {
        self.verdict = true;
        metrics()
            .backend_failures
            .get_or_create(&self.state.labels)
            .inc();
        let ejected = self.state.circuit().failure(Instant::now(), ejection);
        if ejected {
            metrics()
                .backend_ejections
                .get_or_create(&self.state.labels)
                .inc();
            tracing::warn!(agent = %self.state.labels.agent, backend = %self.name(), "backend ejected after failures before the first event");
        }
        ejected
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.probe && !self.verdict {
            self.state.circuit().probe_abandoned();
        }
        self.state.in_flight.fetch_sub(1, Ordering::AcqRel);
        metrics()
            .backend_in_flight
            .get_or_create(&self.state.labels)
            .dec();
        self.freed.notify_waiters();
    }
}
