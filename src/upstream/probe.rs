//! Active health checks: a GET per backend on an interval
//! (`[agents.pool.probe]`).
//!
//! A probe feeds the same circuit as the runs (see [`super::health`]): a
//! failure (no 2xx within the timeout) counts like a run's failure before
//! its first event, so `eject_after` failed probes eject a backend that no
//! run was sent to; a success closes the circuit, so an ejected backend
//! comes back without a user's run being its test. The probing task
//! belongs to the agent's pool and ends when the pool is dropped (after a
//! reload, once the last run on the old configuration has ended).

use super::backend::BackendState;
use super::health::Ejection;
use crate::config::Probe;
use crate::metrics::metrics;
use std::sync::Arc;
use std::time::Instant;
use tokio_util::task::AbortOnDropHandle;

/// Starts probing `targets` (the probe URL and state of each backend);
/// `None` outside a runtime (`check-config` builds agents without one).
pub fn start(
    probe: &Probe,
    http: reqwest::Client,
    targets: Vec<(reqwest::Url, Arc<BackendState>)>,
    ejection: Ejection,
) -> Option<AbortOnDropHandle<()>> {
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let probe = probe.clone();
    let task = runtime.spawn(async move {
        let mut tick = tokio::time::interval(probe.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let checks = targets.iter().map(|(url, state)| {
                let request = http.get(url.clone()).timeout(probe.timeout).send();
                async move {
                    let healthy = matches!(request.await, Ok(r) if r.status().is_success());
                    let mut circuit = state.circuit();
                    if healthy {
                        circuit.success();
                    } else {
                        metrics().backend_failures.get_or_create(&state.labels).inc();
                        if circuit.failure(Instant::now(), &ejection) {
                            metrics().backend_ejections.get_or_create(&state.labels).inc();
                            tracing::warn!(agent = %state.labels.agent, backend = %state.labels.backend, "backend ejected after failed health probes");
                        }
                    }
                }
            });
            futures::future::join_all(checks).await;
        }
    });
    Some(AbortOnDropHandle::new(task))
}
