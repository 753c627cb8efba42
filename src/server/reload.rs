//! Hot reload of agent routes and the policy, on SIGHUP and when either file
//! changes (polled: no extra watcher dependency, and a poll cannot miss an
//! editor's rename-into-place). A file that does not load leaves the running
//! gateway on its last good configuration, logs why, and sets
//! `agui_config_reload_success` to 0. Open connections and runs in flight
//! are untouched; new runs use the new routes and rules.

use super::state::AppState;
use crate::config::Config;
use crate::upstream::AgentRegistry;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Re-reads the config file and policy now; `Err` lists what was wrong.
pub fn reload(state: &AppState, demo_addr: Option<SocketAddr>) -> Result<(), Vec<String>> {
    let result = (|| {
        let config = if state.config.embedded {
            Config::embedded()
        } else {
            Config::load(&state.config.source)
        }
        .map_err(|e| e.iter().map(|e| e.to_string()).collect::<Vec<_>>())?;
        let agents = AgentRegistry::from_config(&config.agents, demo_addr).map_err(|e| vec![e])?;
        let policy = crate::policy::Policy::from_config(&config)?;
        state.swap(agents, policy);
        Ok(config.agents.len())
    })();
    match result {
        Ok(n) => {
            reloaded(true);
            tracing::info!(agents = n, "configuration reloaded");
            Ok(())
        }
        Err(errors) => {
            reloaded(false);
            for e in &errors {
                tracing::error!("reload refused, keeping the last good configuration: {e}");
            }
            Err(errors)
        }
    }
}

fn mtimes(files: &[PathBuf]) -> Vec<Option<SystemTime>> {
    files
        .iter()
        .map(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok())
        .collect()
}

/// Reloads on SIGHUP and whenever the config or policy file changes.
pub fn spawn(state: Arc<AppState>, demo_addr: Option<SocketAddr>, poll: Duration) {
    tokio::spawn(async move {
        let files = |s: &AppState| {
            let mut f: Vec<PathBuf> = (!s.config.embedded)
                .then(|| s.config.source.clone())
                .into_iter()
                .collect();
            f.extend(s.config.policy.path.clone());
            f
        };
        let mut seen = mtimes(&files(&state));
        #[cfg(unix)]
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        loop {
            #[cfg(unix)]
            let signalled = async {
                match hup.as_mut() {
                    Some(h) => {
                        h.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            #[cfg(not(unix))]
            let signalled = std::future::pending::<()>();
            let forced = tokio::select! {
                _ = signalled => true,
                _ = tokio::time::sleep(poll) => false,
            };
            let now = mtimes(&files(&state));
            if forced || now != seen {
                seen = now;
                let _ = reload(&state, demo_addr);
            }
        }
    });
}

/// Counts a reload attempt and whether the configuration in force is the
/// file's (1) or an older one the file failed to replace (0).
fn reloaded(ok: bool) {
    let m = crate::metrics::metrics();
    m.reloads
        .get_or_create(&crate::metrics::ReloadLabel {
            result: if ok { "ok" } else { "refused" },
        })
        .inc();
    m.reload_success.set(i64::from(ok));
}
