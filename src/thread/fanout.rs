//! Fan-out: one outbox per connection, bounded in bytes.
//!
//! A thread pushes what it publishes to every subscriber's outbox without
//! waiting: the entries are shared by reference count and each transport's
//! frame for one is built once, by the first viewer that sends it. A batch
//! of entries (what one upstream read or one store acknowledgement brought)
//! is one item in each outbox, not one per event: one budget check, one
//! queue operation and at most one wake-up of the writer per batch
//! ([`Outbox::push_live_batch`]). Each connection's writer task drains its own
//! outbox, so a slow viewer delays nobody else. When a viewer falls behind the
//! live stream by more than its byte budget it is not cut off: it leaves the
//! thread's live list, and its outbox reads the journal from where it was, a
//! budget's worth at a time, until it has caught up and goes live again
//! ([`CatchUp`]). Nothing is lost or repeated, and the viewer costs no more
//! than its budget. A subscription's snapshot takes the same way: it is built
//! when the writer gets to it, as the first page of a catch-up, so a snapshot
//! of any size reaches a client that reads, and one that does not holds at
//! most the snapshot being written. Control messages (acks, errors) over the
//! budget still close the connection with 4008: those are not in any journal.

use super::{Entry, Thread, Viewer};
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use tokio::sync::mpsc;

/// Close code for a viewer whose queue overflowed.
pub const CLOSE_TOO_SLOW: u16 = 4008;

/// What a connection's writer sends next.
#[derive(Debug, Clone)]
pub enum Outgoing {
    /// A journal entry (each transport encodes it, see [`Entry::frame`]).
    Event(Arc<Entry>),
    /// Any other message of the client contract (snapshot, ack, error,
    /// pong), already serialized as JSON text.
    Message(Bytes),
    /// Close the connection with this code and reason.
    Close(u16, String),
    /// The run this stream follows hands the thread over to another run
    /// (a handoff): its terminal event does not end the stream, the next
    /// run's events follow.
    Continues,
}

impl Outgoing {
    fn cost(&self) -> usize {
        match self {
            Outgoing::Event(e) => e.cost(),
            Outgoing::Message(m) => m.len(),
            Outgoing::Close(..) | Outgoing::Continues => 0,
        }
    }
}

/// How [`Outbox::push_live`] went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Live {
    Queued,
    /// Over the budget: the viewer must catch up from the journal.
    Full,
    /// The connection is gone.
    Closed,
}

/// A lagging viewer's way back: it reads its thread's journal after `after`
/// page by page until it is live again. Queued in the viewer's own outbox
/// (after everything it was sent before), handled by [`OutboxReceiver::recv`].
pub struct CatchUp {
    thread: Weak<Thread>,
    /// `None` once handed back to the thread (nothing to forget on drop).
    viewer: Option<Viewer>,
    after: u64,
    /// Tells this catch-up from a later one of the same viewer (a re-subscribe
    /// supersedes a catch-up still queued).
    ticket: u64,
    /// `Some(reset)`: the first page is a snapshot (a `reset` one when the
    /// viewer's position is gone), built when the writer reaches it rather
    /// than at subscribe — a multi-MiB snapshot queued behind an ack would
    /// otherwise overflow the byte budget of a client that reads promptly.
    snapshot: Option<bool>,
    /// Counts this reader in `agui_readers_catching_up` while it lives (moved
    /// from page to page, so a reader counts once until it is live again).
    counted: Option<CatchingUpGauge>,
}

/// One reader in the `readers_catching_up` gauge, for as long as it lives.
struct CatchingUpGauge;

impl CatchingUpGauge {
    fn new() -> CatchingUpGauge {
        crate::metrics::metrics().readers_catching_up.inc();
        CatchingUpGauge
    }
}

impl Drop for CatchingUpGauge {
    fn drop(&mut self) {
        crate::metrics::metrics().readers_catching_up.dec();
    }
}

impl CatchUp {
    /// A catch-up for `viewer` of `thread` from after `after`.
    pub(super) fn new(thread: Weak<Thread>, viewer: Viewer, after: u64) -> CatchUp {
        static TICKETS: AtomicUsize = AtomicUsize::new(1);
        let ticket = TICKETS.fetch_add(1, Ordering::Relaxed) as u64;
        CatchUp {
            thread,
            viewer: Some(viewer),
            after,
            ticket,
            snapshot: None,
            counted: Some(CatchingUpGauge::new()),
        }
    }

    /// A subscription that starts with a snapshot (`reset` when it replaces
    /// a position the journal no longer has), then goes live.
    pub(super) fn snapshot(thread: Weak<Thread>, viewer: Viewer, reset: bool) -> CatchUp {
        let mut catch_up = CatchUp::new(thread, viewer, 0);
        catch_up.snapshot = Some(reset);
        catch_up
    }

    /// This catch-up's ticket (the thread registers it).
    pub(super) fn ticket(&self) -> u64 {
        self.ticket
    }

    /// Items of the next page, and the catch-up to continue with (if any).
    fn next_page(mut self, budget: usize) -> (Vec<Outgoing>, Option<CatchUp>) {
        let (Some(thread), Some(viewer)) = (self.thread.upgrade(), self.viewer.take()) else {
            return (Vec::new(), None);
        };
        let (page, rest) =
            thread.catch_up_page(viewer, self.after, self.ticket, budget, self.snapshot);
        let counted = self.counted.take();
        let rest = rest.map(|(viewer, after)| CatchUp {
            thread: self.thread.clone(),
            viewer: Some(viewer),
            after,
            ticket: self.ticket,
            snapshot: None,
            counted,
        });
        (page, rest)
    }

    /// Gives up without telling the thread (its caller holds the thread's lock).
    fn disarm(mut self) {
        self.viewer = None;
    }
}

impl Drop for CatchUp {
    fn drop(&mut self) {
        // The reader went away mid-catch-up: let compaction proceed.
        if let (Some(viewer), Some(thread)) = (self.viewer.take(), self.thread.upgrade()) {
            thread.catch_up_dropped(viewer.id, self.ticket);
        }
    }
}

impl std::fmt::Debug for CatchUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatchUp")
            .field("after", &self.after)
            .finish()
    }
}

/// What travels through the queue.
enum Queued {
    /// An item, and whether it counts against the live budget.
    Item(Outgoing, bool),
    /// Live journal entries queued together, and their cost.
    Batch(Vec<Arc<Entry>>, usize),
    /// (Boxed: a channel slot is as large as its largest item, and an idle
    /// connection's outbox allocates a block of 32 slots up front.)
    CatchUp(Box<CatchUp>),
}

/// The sending side of a connection's queue.
///
/// The budget measures how far a viewer lags the live stream. Replay (a
/// subscription's catch-up from the journal) is queued uncounted: those
/// entries are shared with the journal, so queueing them costs a pointer each,
/// and a viewer catching up is behind by definition.
#[derive(Debug)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Queued>,
    queued: Arc<QueuedBytes>,
    limit: usize,
    closed: AtomicBool,
}

/// The receiving side, owned by the connection's writer task.
pub struct OutboxReceiver {
    rx: mpsc::UnboundedReceiver<Queued>,
    queued: Arc<QueuedBytes>,
    /// Bytes a catch-up page may hold (the live budget).
    limit: usize,
    /// What is left of the batch being sent (sent before anything else;
    /// its vector is freed when it is done, so a burst leaves nothing
    /// behind in an idle connection).
    batch: std::vec::IntoIter<Arc<Entry>>,
    /// The current catch-up page.
    page: VecDeque<Outgoing>,
    /// Catch-ups to read, one thread at a time.
    catch_ups: VecDeque<CatchUp>,
}

/// Bytes of live frames queued in one outbox, mirrored into the process-wide
/// `agui_outbox_bytes` gauge (what all viewers together have not read yet).
#[derive(Debug, Default)]
struct QueuedBytes(AtomicUsize);

impl QueuedBytes {
    /// Adds `cost`; returns the bytes queued before.
    fn add(&self, cost: usize) -> usize {
        crate::metrics::metrics().outbox_bytes.inc_by(cost as i64);
        self.0.fetch_add(cost, Ordering::AcqRel)
    }

    /// Takes `cost` back (nothing once the receiver's drop zeroed the count).
    fn sub(&self, cost: usize) {
        if self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| q.checked_sub(cost))
            .is_ok()
        {
            crate::metrics::metrics().outbox_bytes.dec_by(cost as i64);
        }
    }
}

impl Drop for OutboxReceiver {
    fn drop(&mut self) {
        // Frames never sent (the connection ended) leave the gauge; the
        // atomic is zeroed so a sender failing later subtracts nothing twice.
        self.rx.close();
        let left = self.queued.0.swap(0, Ordering::AcqRel);
        crate::metrics::metrics().outbox_bytes.dec_by(left as i64);
    }
}

/// A new outbox that holds at most `limit` bytes of unsent frames.
pub fn outbox(limit: usize) -> (Arc<Outbox>, OutboxReceiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    let queued = Arc::new(QueuedBytes::default());
    (
        Arc::new(Outbox {
            tx,
            queued: queued.clone(),
            limit,
            closed: AtomicBool::new(false),
        }),
        OutboxReceiver {
            rx,
            queued,
            limit,
            batch: Vec::new().into_iter(),
            page: VecDeque::new(),
            catch_ups: VecDeque::new(),
        },
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
        let before = self.queued.add(cost);
        if before + cost > self.limit && before > 0 {
            self.queued.sub(cost);
            self.close(
                CLOSE_TOO_SLOW,
                "viewer too slow: queue overflowed; resubscribe with after",
            );
            return false;
        }
        if self.tx.send(Queued::Item(item, true)).is_err() {
            self.unsent(cost);
            return false;
        }
        true
    }

    /// Queues a journal entry for a live viewer; over the budget it is not
    /// queued and the caller starts the viewer's catch-up ([`CatchUp`]).
    pub fn push_live(&self, item: Outgoing) -> Live {
        let cost = item.cost();
        self.queue_live(Queued::Item(item, true), cost)
    }

    /// Queues live journal entries as one item (the entries are taken out
    /// of `entries`; one entry goes as an [`Outgoing::Event`], leaving the
    /// vector's room to the caller for the next batch). Over the budget
    /// nothing is queued and the caller starts the viewer's catch-up from
    /// the first of them ([`CatchUp`]), as for [`Outbox::push_live`].
    pub fn push_live_batch(&self, entries: &mut Vec<Arc<Entry>>) -> Live {
        if entries.len() <= 1 {
            return match entries.pop() {
                Some(entry) => self.push_live(Outgoing::Event(entry)),
                None => Live::Queued,
            };
        }
        let entries = std::mem::take(entries);
        let cost = entries.iter().map(|e| e.cost()).sum();
        self.queue_live(Queued::Batch(entries, cost), cost)
    }

    /// Queues live frames of `cost` bytes unless that passes the budget
    /// (one item over it still goes on an empty queue).
    fn queue_live(&self, queued: Queued, cost: usize) -> Live {
        if self.is_closed() {
            return Live::Closed;
        }
        let before = self.queued.add(cost);
        if before + cost > self.limit && before > 0 {
            self.queued.sub(cost);
            return Live::Full;
        }
        if self.tx.send(queued).is_err() {
            self.unsent(cost);
            return Live::Closed;
        }
        Live::Queued
    }

    /// A counted frame the receiver was gone for: closed, and its cost
    /// taken back (unless the receiver's drop already zeroed the count).
    fn unsent(&self, cost: usize) {
        self.closed.store(true, Ordering::Release);
        self.queued.sub(cost);
    }

    /// Queues a catch-up behind everything already queued; false when the
    /// connection is gone (the catch-up is then dropped without a callback,
    /// so this may be called under the thread's lock).
    pub(super) fn push_catch_up(&self, catch_up: CatchUp) -> bool {
        match self.tx.send(Queued::CatchUp(Box::new(catch_up))) {
            Ok(()) => true,
            Err(mpsc::error::SendError(Queued::CatchUp(c))) => {
                c.disarm();
                false
            }
            Err(_) => false,
        }
    }

    /// Queues catch-up items outside the byte budget (see the type's docs).
    pub fn push_replay(&self, item: Outgoing) -> bool {
        if self.closed.load(Ordering::Acquire) {
            return false;
        }
        self.tx.send(Queued::Item(item, false)).is_ok()
    }

    /// Asks the writer to close the connection (once).
    pub fn close(&self, code: u16, reason: &str) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            let _ = self.tx.send(Queued::Item(
                Outgoing::Close(code, reason.to_owned()),
                false,
            ));
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
    /// The next item to send; `None` when every sender is gone. A viewer
    /// catching up gets its journal pages here, transparently.
    pub async fn recv(&mut self) -> Option<Outgoing> {
        loop {
            if let Some(item) = self.ready() {
                return Some(item);
            }
            let queued = self.rx.recv().await?;
            if let Some(item) = self.take(queued) {
                return Some(item);
            }
        }
    }

    /// The next item if one is ready now, without waiting: a writer drains
    /// what is queued into one socket write instead of one per frame.
    pub fn try_recv(&mut self) -> Option<Outgoing> {
        loop {
            if let Some(item) = self.ready() {
                return Some(item);
            }
            let queued = self.rx.try_recv().ok()?;
            if let Some(item) = self.take(queued) {
                return Some(item);
            }
        }
    }

    /// The next item of the current catch-up page, reading the next page
    /// when one is due.
    fn ready(&mut self) -> Option<Outgoing> {
        if let Some(entry) = self.batch.next() {
            return Some(Outgoing::Event(entry));
        }
        loop {
            if let Some(item) = self.page.pop_front() {
                return Some(item);
            }
            let catch_up = self.catch_ups.pop_front()?;
            let (page, rest) = catch_up.next_page(self.limit);
            self.page.extend(page);
            if let Some(rest) = rest {
                self.catch_ups.push_front(rest);
            }
        }
    }

    /// An item off the queue (its budget released), or `None` for a catch-up
    /// (kept, to be read in turn). Only called with nothing else ready, so
    /// a batch taken here is sent next, in order.
    fn take(&mut self, queued: Queued) -> Option<Outgoing> {
        match queued {
            Queued::Batch(entries, cost) => {
                self.queued.sub(cost);
                self.batch = entries.into_iter();
                self.batch.next().map(Outgoing::Event)
            }
            Queued::Item(item, counted) => {
                if counted {
                    self.queued.sub(item.cost());
                }
                Some(item)
            }
            Queued::CatchUp(c) => {
                self.catch_ups.push_back(*c);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(n: usize) -> Outgoing {
        Outgoing::Message(Bytes::from("x".repeat(n)))
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

    fn entry(seq: u64) -> Arc<Entry> {
        let event = crate::protocol::Event::build(serde_json::json!({
            "type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "0123456789"
        }));
        Arc::new(Entry::new("t".into(), seq, event))
    }

    fn seq_of(item: Option<Outgoing>) -> u64 {
        match item {
            Some(Outgoing::Event(e)) => e.seq,
            other => panic!("expected an event, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_batch_is_one_item_sent_in_order_and_releases_its_budget() {
        let one = entry(1).cost();
        let (ob, mut rx) = outbox(one * 10);
        let mut batch: Vec<_> = (1..=4).map(entry).collect();
        assert_eq!(ob.push_live_batch(&mut batch), Live::Queued);
        assert!(batch.is_empty(), "the entries went into the outbox");
        assert_eq!(ob.queued.0.load(Ordering::Acquire), one * 4);
        assert!(ob.push(msg(3)));
        let mut single = vec![entry(5)];
        assert_eq!(ob.push_live_batch(&mut single), Live::Queued);
        assert!(
            single.is_empty() && single.capacity() > 0,
            "one entry leaves the room"
        );
        assert_eq!(seq_of(rx.recv().await), 1);
        assert_eq!(
            ob.queued.0.load(Ordering::Acquire),
            3 + one,
            "the whole batch's budget is released when it is taken"
        );
        for seq in 2..=4 {
            assert_eq!(seq_of(rx.try_recv()), seq);
        }
        assert!(matches!(rx.try_recv(), Some(Outgoing::Message(_))));
        assert_eq!(seq_of(rx.try_recv()), 5);
        assert!(rx.try_recv().is_none());
    }

    #[tokio::test]
    async fn a_batch_over_the_budget_is_not_queued_and_the_viewer_catches_up() {
        let one = entry(1).cost();
        let (ob, mut rx) = outbox(one * 3);
        let mut first = vec![entry(1), entry(2)];
        assert_eq!(ob.push_live_batch(&mut first), Live::Queued);
        let mut second = vec![entry(3), entry(4)];
        assert_eq!(ob.push_live_batch(&mut second), Live::Full);
        assert!(
            !ob.is_closed(),
            "a live viewer over budget catches up, not closed"
        );
        assert_eq!(seq_of(rx.recv().await), 1);
        assert_eq!(seq_of(rx.try_recv()), 2);
        assert!(
            rx.try_recv().is_none(),
            "nothing of the refused batch was queued"
        );
        drop(rx);
        let mut third = vec![entry(5), entry(6)];
        assert_eq!(ob.push_live_batch(&mut third), Live::Closed);
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
