//! Fan-out: one outbox per connection, bounded in bytes.
//!
//! A thread pushes each published entry to every subscriber's outbox without
//! waiting: the entry is shared by reference count and its WebSocket frame was
//! serialized once, at append. Each connection's writer task drains its own
//! outbox, so a slow viewer delays nobody else. When a viewer falls behind by
//! more than its byte budget, its outbox closes it with 4008; it can come back
//! with `subscribe after=N` and lose nothing.

use super::Entry;
use axum::extract::ws::Utf8Bytes;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use tokio::sync::mpsc;

/// Close code for a viewer whose queue overflowed.
pub const CLOSE_TOO_SLOW: u16 = 4008;

/// What a connection's writer sends next.
#[derive(Debug, Clone)]
pub enum Outgoing {
    /// A journal entry (sent as its pre-built frame).
    Event(Arc<Entry>),
    /// Any other message (snapshot, ack, error, pong), already serialized.
    Message(Utf8Bytes),
    /// Close the connection with this code and reason.
    Close(u16, String),
}

impl Outgoing {
    fn cost(&self) -> usize {
        match self {
            Outgoing::Event(e) => e.ws.len(),
            Outgoing::Message(m) => m.len(),
            Outgoing::Close(..) => 0,
        }
    }
}

/// The sending side of a connection's queue.
///
/// The budget measures how far a viewer lags the live stream. Replay (a
/// subscription's catch-up from the journal) is queued uncounted: those
/// entries are shared with the journal, so queueing them costs a pointer each,
/// and a viewer catching up is behind by definition.
#[derive(Debug)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<(Outgoing, bool)>,
    queued: Arc<AtomicUsize>,
    limit: usize,
    closed: AtomicBool,
}

/// The receiving side, owned by the connection's writer task.
pub struct OutboxReceiver {
    rx: mpsc::UnboundedReceiver<(Outgoing, bool)>,
    queued: Arc<AtomicUsize>,
}

/// A new outbox that holds at most `limit` bytes of unsent frames.
pub fn outbox(limit: usize) -> (Arc<Outbox>, OutboxReceiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    let queued = Arc::new(AtomicUsize::new(0));
    (
        Arc::new(Outbox {
            tx,
            queued: queued.clone(),
            limit,
            closed: AtomicBool::new(false),
        }),
        OutboxReceiver { rx, queued },
    )
}

impl Outbox {
    /// Queues `item`; returns false (and closes the connection with 4008)
    /// when that would exceed the byte budget, or when already closed.
    pub fn push(&self, item: Outgoing) -> bool {
        if self.closed.load(Ordering::Acquire) {
            return false;
        }
        let cost = item.cost();
        let before = self.queued.fetch_add(cost, Ordering::AcqRel);
        if before + cost > self.limit && before > 0 {
            self.queued.fetch_sub(cost, Ordering::AcqRel);
            self.close(
                CLOSE_TOO_SLOW,
                "viewer too slow: queue overflowed; resubscribe with after",
            );
            return false;
        }
        if self.tx.send((item, true)).is_err() {
            self.closed.store(true, Ordering::Release);
            return false;
        }
        true
    }

    /// Queues catch-up items outside the byte budget (see the type's docs).
    pub fn push_replay(&self, item: Outgoing) -> bool {
        if self.closed.load(Ordering::Acquire) {
            return false;
        }
        self.tx.send((item, false)).is_ok()
    }

    /// Asks the writer to close the connection (once).
    pub fn close(&self, code: u16, reason: &str) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            let _ = self
                .tx
                .send((Outgoing::Close(code, reason.to_owned()), false));
        }
    }

    /// Resolves when the receiving side is gone (the connection ended).
    pub async fn closed(&self) {
        self.tx.closed().await
    }

    /// True once closed (overflow, explicit close, or the writer is gone).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.tx.is_closed()
    }
}

impl OutboxReceiver {
    /// The next item to send; `None` when every sender is gone.
    pub async fn recv(&mut self) -> Option<Outgoing> {
        let (item, counted) = self.rx.recv().await?;
        if counted {
            self.queued.fetch_sub(item.cost(), Ordering::AcqRel);
        }
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(n: usize) -> Outgoing {
        Outgoing::Message(Utf8Bytes::from("x".repeat(n)))
    }

    #[tokio::test]
    async fn overflow_closes_with_4008_and_draining_frees_budget() {
        let (ob, mut rx) = outbox(100);
        assert!(ob.push(msg(60)));
        assert!(rx.recv().await.is_some(), "drained: budget is back");
        assert!(ob.push(msg(60)));
        assert!(!ob.push(msg(60)), "would exceed 100 bytes");
        assert!(ob.is_closed());
        assert!(matches!(rx.recv().await, Some(Outgoing::Message(_))));
        assert!(matches!(
            rx.recv().await,
            Some(Outgoing::Close(CLOSE_TOO_SLOW, _))
        ));
        assert!(!ob.push(msg(1)), "closed stays closed");
    }

    #[tokio::test]
    async fn replay_is_outside_the_live_budget() {
        let (ob, mut rx) = outbox(100);
        for _ in 0..10 {
            assert!(ob.push_replay(msg(60)));
        }
        assert!(
            ob.push(msg(60)),
            "live budget untouched by 600 bytes of replay"
        );
        for _ in 0..11 {
            assert!(rx.recv().await.is_some());
        }
        assert!(ob.push(msg(60)) && ob.push(msg(30)));
    }

    #[tokio::test]
    async fn one_oversize_item_on_an_empty_queue_still_goes() {
        let (ob, mut rx) = outbox(10);
        assert!(
            ob.push(msg(50)),
            "a single large snapshot must not kill an idle viewer"
        );
        assert!(rx.recv().await.is_some());
    }
}
