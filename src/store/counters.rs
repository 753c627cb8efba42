//! Counters shared by every node: rate budgets and open connections, so a
//! user's limits hold cluster-wide however a load balancer spreads their
//! requests. One process keeps its counters in memory
//! ([`crate::policy::rate`]); nodes sharing Redis also ask Redis.

use super::StoreError;
use futures::future::BoxFuture;
use std::time::Duration;

/// Cluster-wide counters (Redis).
pub trait SharedCounters: Send + Sync + 'static {
    /// Takes one unit from `key`'s budget of `limit` per `window` (GCRA:
    /// `limit` at once, refilling one per `window / limit`). `Ok(None)`
    /// taken; `Ok(Some(wait))` spent, try again after `wait`.
    fn take(
        &self,
        key: &str,
        limit: u32,
        window: Duration,
    ) -> BoxFuture<'static, Result<Option<Duration>, StoreError>>;

    /// Counts one more open connection for `key` if fewer than `limit` are
    /// open on live nodes; `Ok(false)` at the limit. Connections of a node
    /// that died stop counting once its heartbeat is stale.
    fn open(&self, key: &str, limit: u32) -> BoxFuture<'static, Result<bool, StoreError>>;

    /// Counts one connection of `key` less (the socket closed).
    fn close(&self, key: &str);
}
