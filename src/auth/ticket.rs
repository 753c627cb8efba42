//! Stream tickets for the SSE join stream: one use to open, and the
//! browser's own reconnects after that.
//!
//! A browser's `EventSource` cannot send an `Authorization` header, and a
//! long-lived JWT in a URL ends up in proxy logs, browser history and
//! `Referer` headers. So a client trades its token (over a normal
//! authenticated `POST`) for a ticket: random, valid for one thread, for a
//! few seconds, carrying the caller's principal. The join route accepts it
//! as `?ticket=`; nothing logs it. Tickets live in this process's memory.
//!
//! # Reconnects
//!
//! When its connection drops, `EventSource` reconnects by itself to the same
//! URL — the same ticket — with a `Last-Event-ID` header, and gives up for
//! good on a 401. So a used ticket may be presented again, but only as such
//! a reconnect, and only while all of this holds:
//!
//! - the request carries `Last-Event-ID`, and it names an event the
//!   ticket's streams have actually sent (between the position the first
//!   open started from and the highest `seq` sent since). A *fresh open* (no
//!   `Last-Event-ID`) of a used ticket is refused: opening stays one-use;
//! - the thread is the ticket's, and the principal is the one it was issued
//!   to (it is carried by the ticket, not presented again);
//! - the token the ticket was traded for has not expired (`exp`);
//! - the previous stream is still open, or ended less than `ticket_ttl` ago
//!   (the browser retries after seconds; a ticket nobody reconnects with is
//!   forgotten like an unused one).
//!
//! A reconnect ends the stream it replaces, so one ticket never feeds two
//! streams at once. Any presentation that fails these checks spends the
//! ticket for good. What a leaked used ticket URL is worth, then: nothing
//! without a position the stream really sent, nothing after the token's
//! `exp` or once its stream has been gone for `ticket_ttl`, never a second
//! parallel copy of the stream (a taker would cut the owner's stream, whose
//! reconnect cuts the taker's in turn), and only ever the thread and
//! principal the ticket was issued for — what the bearer token itself grants
//! for longer and on every route.

use super::Principal;
use dashmap::DashMap;
use std::sync::Arc;
use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Most tickets outstanding at once (each is ~1 KB); more → refused.
pub const MAX_OUTSTANDING: usize = 100_000;

struct Ticket {
    thread_id: String,
    principal: Principal,
    /// Until when it may open a stream (unused) — used tickets live by
    /// [`Streams::alive`] instead.
    expires: Instant,
    /// Set by the first use.
    used: Option<Arc<Streams>>,
}

/// The stream a used ticket feeds now.
#[derive(Default)]
struct Current {
    /// The open stream's number and stop signal.
    open: Option<(u64, CancellationToken)>,
    /// When the last stream ended (none open).
    ended: Option<Instant>,
}

/// The streams opened with one ticket (one at a time).
struct Streams {
    /// The position the first stream started after.
    floor: u64,
    /// The highest `seq` any of them sent.
    sent: AtomicU64,
    /// The open stream, or when the last one ended.
    current: StdMutex<Current>,
    /// Tells the streams apart (which one ended).
    next: AtomicU64,
    /// The token's `exp`, Unix seconds.
    token_exp: u64,
}

impl Streams {
    /// Still usable for a reconnect: a stream is open or ended less than
    /// `grace` ago, and the token has not expired.
    fn alive(&self, grace: Duration) -> bool {
        if crate::protocol::event::now_millis() / 1000 >= self.token_exp {
            return false;
        }
        let current = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        current.open.is_some() || current.ended.is_some_and(|ended| ended.elapsed() < grace)
    }

    /// Registers a new stream, ending the previous one.
    fn open(self: &Arc<Self>) -> StreamClaim {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let stop = CancellationToken::new();
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, previous)) = current.open.replace((id, stop.clone())) {
            previous.cancel();
        }
        StreamClaim {
            streams: self.clone(),
            id,
            stop,
        }
    }
}

/// A join stream's hold on its ticket: records what it sends (the positions
/// a reconnect may name) and is told when a reconnect replaces it.
pub struct StreamClaim {
    streams: Arc<Streams>,
    id: u64,
    stop: CancellationToken,
}

impl StreamClaim {
    /// The stream sent the event (or snapshot) at `seq`.
    pub fn sent(&self, seq: u64) {
        self.streams.sent.fetch_max(seq, Ordering::AcqRel);
    }

    /// Cancelled when a reconnect with the same ticket replaces this stream.
    pub fn replaced(&self) -> CancellationToken {
        self.stop.clone()
    }
}

impl Drop for StreamClaim {
    fn drop(&mut self) {
        let mut current = self
            .streams
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if current.open.as_ref().is_some_and(|(id, _)| *id == self.id) {
            current.open = None;
            current.ended = Some(Instant::now());
        }
    }
}

/// Outstanding tickets.
pub struct StreamTickets {
    tickets: DashMap<String, Ticket>,
    ttl: Duration,
}

impl StreamTickets {
    /// Tickets valid for `ttl` after issue (and reconnects for `ttl` after
    /// their stream ended).
    pub fn new(ttl: Duration) -> StreamTickets {
        StreamTickets {
            tickets: DashMap::new(),
            ttl,
        }
    }

    /// A ticket for `who` to join `thread_id`, and how long it is valid
    /// (never past the token's own expiry); `None` when too many are out.
    pub fn issue(&self, who: &Principal, thread_id: &str) -> Option<(String, Duration)> {
        let now = Instant::now();
        if self.tickets.len() >= MAX_OUTSTANDING {
            let grace = self.ttl;
            self.tickets.retain(|_, t| match &t.used {
                None => t.expires > now,
                Some(streams) => streams.alive(grace),
            });
            if self.tickets.len() >= MAX_OUTSTANDING {
                return None;
            }
        }
        let token_left = Duration::from_secs(
            who.expires_at
                .saturating_sub(crate::protocol::event::now_millis() / 1000),
        );
        let ttl = self.ttl.min(token_left);
        // 244 random bits from the OS generator (two v4 UUIDs).
        let id = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        self.tickets.insert(
            id.clone(),
            Ticket {
                thread_id: thread_id.to_owned(),
                principal: who.clone(),
                expires: now + ttl,
                used: None,
            },
        );
        Some((id, ttl))
    }

    /// Opens a stream of `thread_id` with `ticket`: the principal it was
    /// issued to and the stream's claim, or `None` (and the ticket is spent
    /// for good). An unused ticket opens once, from `after`; a used one only
    /// as a reconnect, `last_event_id` naming an event its streams sent (see
    /// the module's docs).
    pub fn redeem(
        &self,
        ticket: &str,
        thread_id: &str,
        after: u64,
        last_event_id: Option<u64>,
    ) -> Option<(Principal, StreamClaim)> {
        let mut entry = self.tickets.get_mut(ticket)?;
        let t = entry.value_mut();
        let accepted = t.thread_id == thread_id
            && match &t.used {
                None => t.expires > Instant::now(),
                Some(streams) => {
                    last_event_id.is_some_and(|n| {
                        n >= streams.floor && n <= streams.sent.load(Ordering::Acquire)
                    }) && streams.alive(self.ttl)
                }
            };
        if !accepted {
            drop(entry);
            self.tickets.remove(ticket);
            return None;
        }
        let streams = t
            .used
            .get_or_insert_with(|| {
                Arc::new(Streams {
                    floor: after,
                    sent: AtomicU64::new(after),
                    current: StdMutex::default(),
                    next: AtomicU64::new(0),
                    token_exp: t.principal.expires_at,
                })
            })
            .clone();
        Some((t.principal.clone(), streams.open()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Principal {
        let mut who = Principal::for_test("alice", &[]);
        who.expires_at = u64::MAX;
        who
    }

    #[test]
    fn one_open_one_thread_and_expiring() {
        let who = alice();
        let tickets = StreamTickets::new(Duration::from_secs(30));
        let (t, ttl) = tickets.issue(&who, "th").unwrap();
        assert!(ttl <= Duration::from_secs(30));
        assert_eq!(t.len(), 64);
        assert!(
            tickets.redeem(&t, "other", 0, None).is_none(),
            "wrong thread"
        );
        assert!(
            tickets.redeem(&t, "th", 0, None).is_none(),
            "spent by the wrong-thread try"
        );
        let (t, _) = tickets.issue(&who, "th").unwrap();
        let (p, _claim) = tickets.redeem(&t, "th", 0, None).unwrap();
        assert_eq!(p.subject, "alice");
        assert!(tickets.redeem(&t, "th", 0, None).is_none(), "one open");
        let expired = StreamTickets::new(Duration::ZERO);
        let (t, _) = expired.issue(&who, "th").unwrap();
        assert!(expired.redeem(&t, "th", 0, None).is_none(), "expired");
    }

    #[test]
    fn a_used_ticket_reconnects_only_from_a_position_it_sent_and_replaces_its_stream() {
        let tickets = StreamTickets::new(Duration::from_secs(30));
        let (t, _) = tickets.issue(&alice(), "th").unwrap();
        let (_, first) = tickets.redeem(&t, "th", 3, None).unwrap();
        first.sent(7);
        assert!(
            tickets.redeem(&t, "th", 0, Some(8)).is_none(),
            "seq 8 was never sent: refused, and the ticket is spent"
        );
        assert!(tickets.redeem(&t, "th", 0, Some(5)).is_none(), "spent");

        let (t, _) = tickets.issue(&alice(), "th").unwrap();
        let (_, first) = tickets.redeem(&t, "th", 3, None).unwrap();
        first.sent(7);
        let (_, second) = tickets.redeem(&t, "th", 5, Some(5)).unwrap();
        assert!(first.replaced().is_cancelled(), "one stream per ticket");
        drop(first);
        assert!(!second.replaced().is_cancelled());
        drop(second);
        // Ended: a reconnect within the grace still works, below the floor never.
        assert!(tickets.redeem(&t, "th", 2, Some(2)).is_none());
        let (t, _) = tickets.issue(&alice(), "th").unwrap();
        let (_, claim) = tickets.redeem(&t, "th", 0, None).unwrap();
        claim.sent(4);
        drop(claim);
        assert!(tickets.redeem(&t, "th", 4, Some(4)).is_some());

        // Past the token's `exp`, or `ticket_ttl` after its stream ended: dead.
        let streams = |token_exp, ended: Duration| Streams {
            floor: 0,
            sent: AtomicU64::new(1),
            current: StdMutex::new(Current {
                open: None,
                ended: Instant::now().checked_sub(ended),
            }),
            next: AtomicU64::new(0),
            token_exp,
        };
        let grace = Duration::from_secs(30);
        assert!(streams(u64::MAX, Duration::from_secs(1)).alive(grace));
        assert!(!streams(u64::MAX, Duration::from_secs(31)).alive(grace));
        assert!(
            !streams(0, Duration::from_secs(1)).alive(grace),
            "token expired"
        );
    }
}
