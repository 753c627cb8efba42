//! Hot reload of agent routes and the policy, on SIGHUP and when either file
//! changes (polled: no extra watcher dependency, and a poll cannot miss an
//! editor's rename-into-place). A file that does not load leaves the running
//! gateway on its last good configuration, logs why, and sets
//! `agui_config_reload_success` to 0. Open connections and runs in flight
//! are untouched; new runs use the new routes and rules.
//!
//! Only `agents` and `policy.path` (with the policy file it names) take
//! effect on reload; every other key is read once, at start-up. A reload
//! warns about each of those whose value in the file differs from the one in
//! force, naming the key and never its value (some are secrets).

use super::state::AppState;
use crate::config::Config;
use crate::upstream::AgentRegistry;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The keys a reload puts in force (with everything under them).
pub const RELOADED_KEYS: &[&str] = &["agents", "policy.path"];

/// The keys whose value differs between `running` and `file` but that only a
/// restart puts in force: every changed key outside [`RELOADED_KEYS`], as a
/// path (`server.listen`, `auth.hs_secret`, `meta.webhook_headers.X-Key`;
/// a list is one key). Keys only, never values.
pub fn restart_only_changes(running: &Config, file: &Config) -> Vec<String> {
    fn diff(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
        use serde_json::Value::{Null, Object};
        match (a, b) {
            (Object(x), Object(y)) => {
                let keys = x.keys().chain(y.keys().filter(|k| !x.contains_key(*k)));
                for k in keys {
                    let sub = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    diff(
                        &sub,
                        x.get(k).unwrap_or(&Null),
                        y.get(k).unwrap_or(&Null),
                        out,
                    );
                }
            }
            _ if a != b => out.push(path.to_owned()),
            _ => {}
        }
    }
    let value = |c: &Config| serde_json::to_value(c).unwrap_or_default();
    let mut changed = Vec::new();
    diff("", &value(running), &value(file), &mut changed);
    changed.retain(|key| {
        !RELOADED_KEYS.iter().any(|r| {
            key == r
                || key
                    .strip_prefix(r)
                    .is_some_and(|rest| rest.starts_with(['.', '[']))
        })
    });
    changed
}

/// Re-reads the config file and policy now; returns the configuration read
/// (of which only the keys in [`RELOADED_KEYS`] took effect), or what was
/// wrong.
pub fn reload(state: &AppState, demo_addr: Option<SocketAddr>) -> Result<Config, Vec<String>> {
    let result = (|| {
        let config = if state.config.embedded {
            Config::embedded()
        } else {
            Config::load(&state.config.source)
        }
        .map_err(|e| e.iter().map(|e| e.to_string()).collect::<Vec<_>>())?;
        // Backends an agent keeps keep their live state (runs in flight, ejections).
        let agents =
            AgentRegistry::from_config_after(&config.agents, demo_addr, Some(&state.agents()))
                .map_err(|e| vec![e])?;
        let policy = crate::policy::Policy::from_config(&config)?;
        state.swap(agents, policy);
        Ok(config)
    })();
    match result {
        Ok(config) => {
            reloaded(true);
            tracing::info!(agents = config.agents.len(), "configuration reloaded");
            for key in restart_only_changes(&state.config, &config) {
                tracing::warn!(
                    key = %key,
                    "{key} changed in {} but takes effect only after a restart; the running value stays",
                    config.origin()
                );
            }
            Ok(config)
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
        // The policy file in force: a reload may name another one.
        let mut policy = state.config.policy.path.clone();
        let files = |s: &AppState, policy: &Option<PathBuf>| {
            let mut f: Vec<PathBuf> = (!s.config.embedded)
                .then(|| s.config.source.clone())
                .into_iter()
                .collect();
            f.extend(policy.clone());
            f
        };
        let mut seen = mtimes(&files(&state, &policy));
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
            let now = mtimes(&files(&state, &policy));
            if forced || now != seen {
                seen = now;
                if let Ok(config) = reload(&state, demo_addr)
                    && config.policy.path != policy
                {
                    policy = config.policy.path;
                    seen = mtimes(&files(&state, &policy));
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_only_changes_name_the_keys_reload_does_not_apply() {
        let dir = tempfile::tempdir().unwrap();
        let load = |extra: &str| {
            let p = dir.path().join("g.toml");
            std::fs::write(
                &p,
                format!(
                    "[auth]\nhs_secret = \"{}\"\n{extra}",
                    if extra.contains("rotated") {
                        "rotated-secret-rotated-secret-rotated"
                    } else {
                        "0123456789abcdef0123456789abcdef"
                    }
                ),
            )
            .unwrap();
            Config::load(&p).unwrap()
        };
        let running = load("[server]\nlisten = \"127.0.0.1:1\"\n");
        assert!(restart_only_changes(&running, &running).is_empty());
        let file = load(
            "# rotated\n[server]\nlisten = \"127.0.0.1:2\"\n[policy]\npath = \"p.toml\"\n\
             [meta]\nwebhook_headers = { X-Key = \"k\" }\n[store]\nlease_ttl = \"10s\"\n\
             [[agents]]\nid = \"a\"\nurl = \"http://127.0.0.1:9/\"\n",
        );
        assert_eq!(
            restart_only_changes(&running, &file),
            [
                "server.listen",
                "auth.hs_secret",
                "meta.webhook_headers.X-Key"
            ]
        );
    }
}
