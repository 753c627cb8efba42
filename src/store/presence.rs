//! Presence shared by the nodes: who watches a thread from each node.
//!
//! Each node records its own watchers of a thread under its own name, for
//! a time to live it renews while they stay ([`crate::thread::presence`]
//! does, at each of its ticks); a node that dies stops renewing, so its
//! watchers leave on their own when the record expires — nobody has to
//! notice the death. Presence is ephemeral: never journaled, never part of
//! a thread's history.

use super::{StoreError, ThreadKey};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One person watching a thread (from one node, or merged over all).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Watcher {
    /// The token's `sub`.
    pub user_id: String,
    /// A display name from the token's `name` claim, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The token's roles.
    #[serde(default)]
    pub roles: Vec<String>,
    /// Open connections of this person on the thread.
    pub connections: u32,
    /// When the first of them joined (Unix ms).
    pub since: u64,
    /// Typing in the thread now (a `composing` signal from one of their
    /// connections, not yet stopped or lapsed). Absent in a record: no.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub composing: bool,
}

/// Where the nodes record their watchers.
pub trait PresenceStore: Send + Sync {
    /// Whether other nodes share it; if not, a node's own table is the
    /// whole presence and nothing is written or read.
    fn shared(&self) -> bool;
    /// Records this node's watchers of `key` for `ttl`, replacing what it
    /// recorded before (none: removes its record). Blocking.
    fn put(&self, key: &ThreadKey, watchers: &[Watcher], ttl: Duration) -> Result<(), StoreError>;
    /// The other nodes' watchers of `key`, from records not expired. Blocking.
    fn others(&self, key: &ThreadKey) -> Result<Vec<Watcher>, StoreError>;
}

/// One process: its table is all there is (the memory and SQLite stores).
pub struct LocalPresence;

impl PresenceStore for LocalPresence {
    fn shared(&self) -> bool {
        false
    }

    fn put(&self, _: &ThreadKey, _: &[Watcher], _: Duration) -> Result<(), StoreError> {
        Ok(())
    }

    fn others(&self, _: &ThreadKey) -> Result<Vec<Watcher>, StoreError> {
        Ok(Vec::new())
    }
}
