//! What start-up checks before it binds a port or opens the journal, beyond
//! the configuration's own fields ([`Config::validate`], run when it loads):
//! the JWT keys, every agent's route and headers, the TLS certificate and
//! key, the journal's location and the Redis URL. `serve` runs it before
//! anything else and `check-config` runs it whole, so the two cannot
//! disagree about a configuration. Nothing here listens or connects.

use crate::auth::Authenticator;
use crate::config::{Config, ConfigError, StoreKind, expand_env};
use crate::upstream::Agent;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;

/// What the checks built that start-up keeps.
pub struct Checked {
    pub auth: Authenticator,
}

/// Every problem start-up would stop at, each naming the file and the key.
pub fn check(config: &Config) -> Result<Checked, Vec<ConfigError>> {
    let mut problems = Vec::new();
    let mut bad = |key: &str, message: String| {
        problems.push(ConfigError {
            file: config.origin(),
            key: key.into(),
            message,
        })
    };

    let auth = Authenticator::from_config(&config.auth)
        .map_err(|e| {
            // Its messages start with the key ("auth.hs_secret: …").
            match e.split_once(": ") {
                Some((key, rest)) if key.starts_with("auth") => bad(key, rest.into()),
                _ => bad("auth", e),
            }
        })
        .ok();

    // The demo agent's port is only known once it listens: any address
    // checks the route the same way.
    let demo = config
        .demo
        .enabled
        .then_some(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)));
    for (i, agent) in config.agents.iter().enumerate() {
        if let Err(e) = Agent::from_config(agent, demo) {
            bad(&format!("agents[{i}]"), e);
        }
    }

    if let Some(tls) = &config.server.tls
        && let Err((which, e)) = super::tls::load_keyed(&tls.cert, &tls.key)
    {
        bad(&format!("server.tls.{which}"), e);
    }

    match config.store.kind {
        StoreKind::Sqlite => {
            if let Err(e) = journal_location(&config.store.path) {
                bad("store.path", e);
            }
        }
        StoreKind::Redis => {
            if let Some(Ok(url)) = config.store.url.as_deref().map(expand_env)
                && let Err(e) = crate::store::redis::check_url(&url)
            {
                bad("store.url", e);
            }
        }
        StoreKind::RedisCluster => {
            for url in config.store.urls.iter().filter_map(|u| expand_env(u).ok()) {
                if let Err(e) = crate::store::redis::check_url(&url) {
                    bad("store.urls", e);
                }
            }
        }
        StoreKind::Memory => {}
    }
    if let Some(tls) = &config.store.tls
        && let Err((which, e)) = crate::store::redis::tls_certificates(
            tls.ca.as_deref(),
            tls.cert.as_deref(),
            tls.key.as_deref(),
        )
    {
        bad(&format!("store.tls.{which}"), e);
    }

    match auth {
        Some(auth) if problems.is_empty() => Ok(Checked { auth }),
        _ => Err(problems),
    }
}

/// The SQLite file can be created or opened where `path` says: it is not a
/// folder, and the nearest existing folder above it is a folder (start-up
/// creates the missing ones).
fn journal_location(path: &Path) -> Result<(), String> {
    if path.is_dir() {
        return Err(format!("{} is a folder, not a file", path.display()));
    }
    let mut above = path.parent();
    while let Some(dir) = above.filter(|d| !d.as_os_str().is_empty()) {
        if dir.exists() {
            return if dir.is_dir() {
                Ok(())
            } else {
                Err(format!("{} is not a folder", dir.display()))
            };
        }
        above = dir.parent();
    }
    Ok(())
}
