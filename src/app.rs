//! The gateway process wired together: the journal store (memory, SQLite
//! or Redis) with its publication bus and run leases, the thread registry,
//! policy and routes, the demo agent, the HTTP server, the background
//! sweepers, and the order things stop in on SIGTERM (drain, then flush the
//! journal). `main.rs` only reads the command line and the configuration;
//! everything that turns a [`Config`] into a serving gateway lives here, so a
//! reader finds the wiring in one place.

use crate::config::StoreKind;
use crate::config::{Config, DEFAULT_PATH};
use crate::policy::Policy;
use crate::server::{self, AppState, preflight};
use crate::store::JournalStore;
use crate::store::bus::{LocalBus, PublicationBus};
use crate::store::counters::SharedCounters;
use crate::store::lease::{LocalLeases, RunLeases};
use crate::store::memory::MemoryStore;
use crate::store::redis::{RedisStore, Target};
use crate::store::sqlite::SqliteStore;
use crate::thread::{Residency, ThreadSettings, Threads};
use crate::upstream::AgentRegistry;
use std::sync::Arc;
use std::time::Duration;

/// The start-up warning of a gateway on the public development secret,
/// naming where the secret came from: the file read, or — when no file was
/// found — the compiled-in configuration, which a newcomer would otherwise
/// look for on disk in vain.
pub fn dev_secret_warning(config: &Config) -> Option<String> {
    if config.auth.hs_secret.as_deref() != Some(crate::config::DEV_SECRET) {
        return None;
    }
    let whence = if config.embedded {
        format!(
            "of the compiled-in default configuration (no {DEFAULT_PATH} here and no --config, so \
             the copy built into the binary runs)"
        )
    } else {
        format!("in {}", config.origin())
    };
    Some(format!(
        "auth.hs_secret is the public development secret {whence}: anyone can mint tokens. \
         Set AGUI_GATEWAY__AUTH__HS_SECRET before exposing this gateway."
    ))
}

/// Serves until SIGTERM or Ctrl-C: binds, runs, drains, flushes the journal.
pub async fn serve(config: Config, policy: Policy) -> Result<(), String> {
    // Everything check-config checks, before any port is bound.
    let checked = preflight::check(&config).map_err(|problems| {
        problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    let demo_addr = if config.demo.enabled {
        Some(
            crate::demo::start(&config.demo)
                .await
                .map_err(|e| format!("demo agent: cannot listen on {}: {e}", config.demo.listen))?,
        )
    } else {
        None
    };
    if let Some(warning) = dev_secret_warning(&config) {
        tracing::warn!("{warning}");
    }
    let auth = checked.auth;
    if config.embedded {
        tracing::info!(
            journal = %config.store.path.display(),
            "no config file: running on the compiled-in default configuration"
        );
    }
    let agents = AgentRegistry::from_config(&config.agents, demo_addr)?;
    type Shared = (
        Arc<dyn JournalStore>,
        Arc<dyn PublicationBus>,
        Arc<dyn RunLeases>,
        Option<Arc<dyn SharedCounters>>,
    );
    let mut presence: Option<Arc<dyn crate::store::presence::PresenceStore>> = None;
    let (store, bus, leases, counters): Shared = match config.store.kind {
        StoreKind::Sqlite => (
            Arc::new(
                SqliteStore::open_bounded(
                    &config.store.path,
                    &config.store.synchronous,
                    config.store.max_batch_events,
                    config.store.max_wal_bytes,
                )
                .map_err(|e| format!("store.path {}: {e}", config.store.path.display()))?,
            ),
            Arc::new(LocalBus),
            Arc::new(LocalLeases),
            None,
        ),
        StoreKind::Memory => (
            Arc::new(MemoryStore::new()),
            Arc::new(LocalBus),
            Arc::new(LocalLeases),
            None,
        ),
        StoreKind::Redis | StoreKind::RedisCluster => {
            let target = redis_target(&config.store)?;
            let node = config.store.node.clone().unwrap_or_else(|| {
                let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
                format!("{}-{}", host.trim(), std::process::id())
            });
            let redis = connect_redis(&target, &config.store.prefix, &node, config.store.lease_ttl)
                .await
                .map_err(|e| format!("store.url: {e}"))?;
            tracing::info!(node = %node, "journal on redis");
            presence = Some(redis.clone());
            (redis.clone(), redis.clone(), redis.clone(), Some(redis))
        }
    };
    crate::protocol::sealed::set_page_text(
        usize::try_from(config.threads.sealed_page_bytes).unwrap_or(usize::MAX),
    );
    install_spill_file(&config)?;
    let threads = Threads::new(
        store,
        ThreadSettings {
            max_events: config.threads.max_events,
            idle_ttl: config.threads.idle_ttl,
            max_runs: config.threads.max_runs,
            max_branches: config.threads.max_branches,
            hot_bytes: usize::try_from(config.threads.hot_bytes).unwrap_or(usize::MAX),
            node_bytes: Default::default(),
        },
    )
    .with_bus(bus)
    .with_leases(leases)
    .with_residency(Residency {
        evict_after: config.threads.evict_after,
        max_resident: config.threads.max_resident,
        memory_budget: usize::try_from(config.threads.memory_budget()).unwrap_or(usize::MAX),
        memory_overhead: usize::try_from(config.threads.memory_overhead).unwrap_or(usize::MAX),
    });
    // On a shared Redis a "running" thread may be a live run of another
    // node: only a node-local store can close what the last process left
    // open; on Redis the orphan sweeper closes the runs whose lease expired.
    let recovered = if matches!(
        config.store.kind,
        StoreKind::Redis | StoreKind::RedisCluster
    ) {
        0
    } else {
        threads.recover().await.map_err(|e| e.to_string())?
    };
    if recovered > 0 {
        tracing::warn!(
            runs = recovered,
            "closed runs left open by the previous process"
        );
    }
    let mut state = AppState::new(config, auth, agents, Arc::new(threads), policy);
    if let Some(counters) = counters {
        state = state.with_shared_counters(counters);
    }
    if let Some(presence) = presence {
        state = state.with_presence_store(presence);
    }
    let state = Arc::new(state);
    state.presence.spawn();
    crate::server::reload::spawn(state.clone(), demo_addr, Duration::from_secs(2));
    // Other nodes' durable events and run requests, when the store is shared.
    state.threads.spawn_bus_listener();
    state.threads.spawn_control_listener();
    state.threads.spawn_orphan_sweeper(
        crate::store::lease::LeaseTiming::of(state.config.store.lease_ttl).sweep_every,
    );
    // Compaction of idle journals and eviction of idle threads, each checked
    // at a quarter of its period (between 1 s and 60 s).
    let periods = [
        state.config.threads.idle_ttl,
        state.config.threads.evict_after,
    ];
    let every = periods
        .iter()
        .filter(|p| !p.is_zero())
        .map(|p| *p / 4)
        .min()
        .unwrap_or(Duration::from_secs(60))
        .clamp(Duration::from_secs(1), Duration::from_secs(60));
    state.threads.spawn_sweeper(every);
    let running = server::start(state.clone())
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", state.config.server.listen))?;
    // Tests and scripts read this line to find an ephemeral port.
    let scheme = if state.config.server.tls.is_some() {
        "https"
    } else {
        "http"
    };
    println!("agui-gateway listening on {scheme}://{}", running.addr);
    tracing::info!(addr = %running.addr, agents = state.config.agents.len(), "gateway listening");

    let stop = running.shutdown_handle();
    let draining = state.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!(
            window = ?draining.config.server.drain_timeout,
            "draining: new runs refused, active runs finishing"
        );
        let cancelled = draining.drain().await;
        tracing::info!(cancelled, "drained; shutting down");
        let _ = stop.send(true);
    });
    let served = running.wait().await.map_err(|e| e.to_string());
    // Each WebSocket was told to close (1001) when the node drained: let
    // the closes reach their clients before the process ends.
    state.sockets_closed(SOCKETS_GRACE).await;
    // Whatever is still queued for the journal (the cancelled runs' last
    // events, a late meta post) is written before the process exits.
    state.threads.store().close().await;
    tracing::info!("journal flushed; exiting");
    served
}

/// How long a stopping node waits for its WebSockets to send their close
/// (each writer itself gives up after 5 s).
const SOCKETS_GRACE: Duration = Duration::from_secs(6);

/// Where `[store]` says the shared journal is: one Redis (`url`) or a
/// Redis Cluster (`urls`, seed nodes), `${VAR}`s expanded.
fn redis_target(store: &crate::config::StoreConfig) -> Result<Target, String> {
    let tls = store
        .tls
        .as_ref()
        .map(|t| {
            crate::store::redis::tls_certificates(
                t.ca.as_deref(),
                t.cert.as_deref(),
                t.key.as_deref(),
            )
            .map_err(|(which, e)| format!("store.tls.{which}: {e}"))
        })
        .transpose()?;
    if store.kind == StoreKind::RedisCluster {
        let seeds = store
            .urls
            .iter()
            .map(|u| crate::config::expand_env(u))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Target::Cluster {
            seeds,
            groups: store.cluster_groups,
            tls,
        });
    }
    Ok(Target::Single {
        url: crate::config::expand_env(store.url.as_deref().unwrap_or(""))?,
        tls,
    })
}

/// How long a node starting up waits for an unreachable Redis before it
/// gives up (exit 1, for its supervisor to restart it): a node and its Redis
/// started together, or a Redis restarting during a deploy, is not an error.
const REDIS_START_PATIENCE: Duration = Duration::from_secs(30);

/// [`RedisStore::connect`], retried with backoff for up to
/// [`REDIS_START_PATIENCE`].
async fn connect_redis(
    target: &Target,
    prefix: &str,
    node: &str,
    lease_ttl: Duration,
) -> Result<Arc<RedisStore>, crate::store::StoreError> {
    let give_up = tokio::time::Instant::now() + REDIS_START_PATIENCE;
    let mut backoff = Duration::from_millis(250);
    loop {
        match RedisStore::connect_to(target, prefix, node, lease_ttl).await {
            Ok(store) => return Ok(store),
            Err(e) if tokio::time::Instant::now() + backoff < give_up => {
                tracing::warn!("redis unreachable at start-up ({e}); retrying in {backoff:?}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
            Err(e) => return Err(e),
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// Opens the spill file of sealed pages (`threads.spill_bytes` in
/// `threads.spill_dir`). Unset, the directory is the SQLite journal's (a
/// disk the operator gave the gateway; the system's temporary directory
/// may be a tmpfs, which is memory again), or the temporary directory for
/// the other stores. A directory the operator named must work; a default
/// one failing only costs the spilling (said in the log).
fn install_spill_file(config: &Config) -> Result<(), String> {
    let threads = &config.threads;
    if threads.spill_bytes == 0 {
        return Ok(());
    }
    let journal_dir = match config.store.kind {
        StoreKind::Sqlite => config
            .store
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .map(std::path::Path::to_path_buf)
            .or_else(|| Some(".".into())),
        _ => None,
    };
    let dir = threads
        .spill_dir
        .clone()
        .or(journal_dir)
        .unwrap_or_else(std::env::temp_dir);
    match crate::store::page_file::PageFile::create(&dir, threads.spill_bytes) {
        Ok(file) => {
            crate::protocol::page_spill::install(Box::new(file));
            Ok(())
        }
        Err(e) if threads.spill_dir.is_some() => {
            Err(format!("threads.spill_dir {}: {e}", dir.display()))
        }
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "no spill file for sealed pages: they stay in memory");
            Ok(())
        }
    }
}
