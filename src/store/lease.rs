//! Run leases: at most one active run per thread across every node sharing
//! a store, and the signals between nodes about runs.
//!
//! One process needs nothing more than its own run slot ([`LocalLeases`]
//! grants every request at once). With several nodes (Redis) a run holds a
//! lease on its thread for as long as it runs: acquired before the run is
//! accepted, renewed by a heartbeat, released after its terminal event is
//! durable. The lease's value doubles as a fencing token: every append of
//! the run carries it and the store refuses the append once the lease is no
//! longer that run's ([`super::StoreError::Fenced`]), so a node that lost its
//! lease (paused, cut off) can never write after another node closed its run.
//!
//! A lease that expires while its thread is still `running` means the node
//! died: another node closes the run with `RUN_ERROR gateway_node_lost`
//! ([`RunLeases::orphans`]), or, if a run is asked for on the thread first,
//! the node granted that run's lease closes it before the run starts
//! ([`Acquired::Abandoned`]).

use super::{StoreError, ThreadKey};
use futures::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// How `store.lease_ttl` is spent, so that a dead node's runs are closed
/// within it, as the docs promise, and not "about" it.
///
/// A dead node's lease disappears from the store at most `key_ttl` after
/// its last renewal, and every node looks for expired leases every
/// `sweep_every`, so its runs are closed between `key_ttl - renew_every`
/// (= ½) and `key_ttl + sweep_every` (= 11⁄12) of `lease_ttl` after it
/// stopped, plus the few store round trips of the close itself, which the
/// last twelfth leaves room for. (With the lease living the whole
/// `lease_ttl` and a sweep every half of it, that was 0.7–1.5 × `lease_ttl`.)
/// Renewing every sixth keeps a live node's lease through three slow or
/// failed renewals in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// The lease key's time to live in the store, set at every renewal.
    pub key_ttl: Duration,
    /// How often a node renews its leases (its heartbeat).
    pub renew_every: Duration,
    /// How often a node looks for leases that expired under a running run.
    pub sweep_every: Duration,
}

impl LeaseTiming {
    /// The timing for `store.lease_ttl`.
    pub fn of(lease_ttl: Duration) -> LeaseTiming {
        LeaseTiming {
            key_ttl: lease_ttl * 2 / 3,
            renew_every: lease_ttl / 6,
            sweep_every: lease_ttl / 4,
        }
    }
}

/// A lease held by this node: its fencing token, and a token cancelled when
/// the lease is lost (its heartbeat failed for longer than its time to live,
/// or another node took over) — the run must stop then.
#[derive(Debug, Clone)]
pub struct Lease {
    /// Carried by every append of the run ([`super::AppendBatch::fence`]).
    pub token: Arc<str>,
    /// Cancelled when the lease is lost.
    pub lost: CancellationToken,
}

/// The answer to [`RunLeases::acquire`].
#[derive(Debug, Clone)]
pub enum Acquired {
    /// This node may run; nobody else can until it releases or dies.
    Granted(Lease),
    /// Another run holds the thread (on this node or another).
    Held {
        /// The holder's run id.
        run_id: String,
    },
    /// The stored journal moved past what this node's copy has seen
    /// (another node appended): catch up, decide again.
    Stale,
    /// Granted, but the thread is still `running` with nobody's lease: a
    /// node stopped in the middle of a run (or of a handoff). The holder
    /// must first close what that node left ([`crate::thread::abandoned`]),
    /// under this lease, before anything else is journaled: no run may
    /// start inside another. The grant and the finding are one atomic
    /// step in the store, so no other node can start a run in between.
    Abandoned(Lease),
}

/// A request between nodes about a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// Stop run `run_id` on `key` (sent by the node a client asked).
    Cancel { key: ThreadKey, run_id: String },
    /// The lease on `key` was released: a run queued there may start.
    Released { key: ThreadKey },
    /// This node's link to the other nodes was re-established: their
    /// announcements in between may be lost, so every thread in memory
    /// reads back what it missed from the store. (Also after the store was
    /// found to have lost history: the read-backs find the threads affected.)
    Resync,
    /// The store lost history of `key` that this node had seen (see
    /// [`super::StoreError::JournalLost`]): its copy is reloaded.
    JournalLost { key: ThreadKey },
}

/// Cluster-wide run coordination.
pub trait RunLeases: Send + Sync + 'static {
    /// Takes the lease on `key` for `run_id`, provided nobody holds it and
    /// the stored journal ends at `seen_last_seq` (what the caller decided
    /// on: the pending interrupts, the history). The check makes "first
    /// answer wins" hold across nodes. A thread the store does not know yet
    /// is recorded with `creator`, so every node finds it from now on; a
    /// granted lease records `agent` as the thread's agent at once, so a node
    /// loading the thread before the run's first batch lands already applies
    /// that agent's visibility rules to its viewers.
    fn acquire(
        &self,
        key: &ThreadKey,
        run_id: &str,
        seen_last_seq: u64,
        creator_and_agent: (&str, Option<&str>),
    ) -> BoxFuture<'static, Result<Acquired, StoreError>>;

    /// Gives the lease back (only if it is still `lease`'s).
    fn release(&self, key: &ThreadKey, lease: &Lease);

    /// Asks every node to deliver `control` (the one running the run acts).
    fn send(&self, control: Control) -> BoxFuture<'static, Result<(), StoreError>>;

    /// Other nodes' requests, for the registry's listener; `None` when there
    /// is no other node (or once taken).
    fn controls(&self) -> Option<mpsc::UnboundedReceiver<Control>>;

    /// Threads whose latest run is still `running` although nobody holds its
    /// lease any more: their node died. Empty for one process (its restart
    /// recovery closes them instead).
    fn orphans(&self) -> BoxFuture<'static, Result<Vec<ThreadKey>, StoreError>>;

    /// True when other nodes may run this store's threads.
    fn shared(&self) -> bool;

    /// How long a run queued on this node keeps asking for a lease the store
    /// fails to answer before it is refused: as long as a lease lives (a
    /// run whose lease cannot be renewed that long stops too).
    fn patience(&self) -> std::time::Duration {
        std::time::Duration::from_secs(10)
    }
}

/// The leases of a single process: its run slots already exclude each
/// other, so every request is granted and nothing needs fencing.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalLeases;

impl RunLeases for LocalLeases {
    fn acquire(
        &self,
        _: &ThreadKey,
        _: &str,
        _: u64,
        _: (&str, Option<&str>),
    ) -> BoxFuture<'static, Result<Acquired, StoreError>> {
        Box::pin(std::future::ready(Ok(Acquired::Granted(Lease {
            token: Arc::from(""),
            lost: CancellationToken::new(),
        }))))
    }

    fn release(&self, _: &ThreadKey, _: &Lease) {}

    fn send(&self, _: Control) -> BoxFuture<'static, Result<(), StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn controls(&self) -> Option<mpsc::UnboundedReceiver<Control>> {
        None
    }

    fn orphans(&self) -> BoxFuture<'static, Result<Vec<ThreadKey>, StoreError>> {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }

    fn shared(&self) -> bool {
        false
    }
}
