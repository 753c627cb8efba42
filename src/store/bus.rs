//! The publication bus: how a node tells the others what it made durable.
//!
//! One process needs none: a thread publishes to its own viewers right after
//! the store acknowledges a batch. With several nodes sharing one store, a
//! thread can be in memory on more than one of them (viewers connected to
//! different nodes); the node that appended announces the durable events on
//! the bus, and every other node's copy publishes them to its viewers
//! ([`crate::thread::Threads::deliver`]) exactly as if they were its own —
//! in seq order, each once, a missed announcement read back from the store.
//! A node hears only the threads it holds in memory
//! ([`PublicationBus::watch`]), so the bus's traffic grows with the threads
//! actually shared between nodes, not with every thread of the cluster.

use super::{StoreError, ThreadKey};
use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::sync::mpsc;

/// Durable events of one thread, in seq order.
#[derive(Debug, Clone, PartialEq)]
pub struct Publication {
    pub key: ThreadKey,
    /// (seq, event JSON), consecutive, all acknowledged by the store.
    pub events: Vec<(u64, Bytes)>,
}

/// Where durable events are announced, and where other nodes' announcements
/// come from.
pub trait PublicationBus: Send + Sync + 'static {
    /// Announces events this node made durable. Called under the thread's
    /// lock, in seq order, so it must not block (queue and return).
    fn announce(&self, publication: Publication);

    /// The other nodes' announcements, for the registry's listener; `None`
    /// when there is no other node (or once taken).
    fn subscribe(&self) -> Option<mpsc::UnboundedReceiver<Publication>>;

    /// False when [`PublicationBus::announce`] does nothing — one process,
    /// or a store that publishes as part of the append (Redis) — so threads
    /// skip building publications altogether.
    fn wants_announcements(&self) -> bool {
        true
    }

    /// Starts hearing `key`'s announcements (resolves once that is certain):
    /// a node listens only to the threads it holds in memory. Counted: every
    /// `watch` is balanced by one [`PublicationBus::unwatch`], and the
    /// announcements stop with the last.
    fn watch(&self, _key: &ThreadKey) -> BoxFuture<'static, Result<(), StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// Stops hearing `key`'s announcements (the thread left memory).
    fn unwatch(&self, _key: &ThreadKey) {}
}

/// The bus of a single process: nobody else to tell.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalBus;

impl PublicationBus for LocalBus {
    fn announce(&self, _: Publication) {}

    fn subscribe(&self) -> Option<mpsc::UnboundedReceiver<Publication>> {
        None
    }

    fn wants_announcements(&self) -> bool {
        false
    }
}
