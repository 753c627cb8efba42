//! One-use stream tickets for the SSE join stream.
//!
//! A browser's `EventSource` cannot send an `Authorization` header, and a
//! long-lived JWT in a URL ends up in proxy logs, browser history and
//! `Referer` headers. So a client trades its token (over a normal
//! authenticated `POST`) for a ticket: random, valid for one thread, for a
//! few seconds, and for one use, carrying the caller's principal. The join
//! route accepts it as `?ticket=`; nothing logs it. Tickets live in this
//! process's memory (a reconnect fetches a new one).

use super::Principal;
use dashmap::DashMap;
use std::time::{Duration, Instant};

/// Most tickets outstanding at once (each is ~1 KB); more → refused.
pub const MAX_OUTSTANDING: usize = 100_000;

struct Ticket {
    thread_id: String,
    principal: Principal,
    expires: Instant,
}

/// Outstanding tickets.
pub struct StreamTickets {
    tickets: DashMap<String, Ticket>,
    ttl: Duration,
}

impl StreamTickets {
    /// Tickets valid for `ttl` after issue.
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
            self.tickets.retain(|_, t| t.expires > now);
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
            },
        );
        Some((id, ttl))
    }

    /// Uses up `ticket`: the principal it was issued to, when it is valid
    /// for `thread_id` and not expired. Any presented ticket is spent.
    pub fn redeem(&self, ticket: &str, thread_id: &str) -> Option<Principal> {
        let (_, t) = self.tickets.remove(ticket)?;
        (t.thread_id == thread_id && t.expires > Instant::now()).then_some(t.principal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_use_one_thread_and_expiring() {
        let mut who = Principal::for_test("alice", &[]);
        who.expires_at = u64::MAX;
        let tickets = StreamTickets::new(Duration::from_secs(30));
        let (t, ttl) = tickets.issue(&who, "th").unwrap();
        assert!(ttl <= Duration::from_secs(30));
        assert_eq!(t.len(), 64);
        assert!(tickets.redeem(&t, "other").is_none(), "wrong thread");
        assert!(
            tickets.redeem(&t, "th").is_none(),
            "spent by the wrong-thread try"
        );
        let (t, _) = tickets.issue(&who, "th").unwrap();
        assert_eq!(tickets.redeem(&t, "th").unwrap().subject, "alice");
        assert!(tickets.redeem(&t, "th").is_none(), "one use");
        let expired = StreamTickets::new(Duration::ZERO);
        let (t, _) = expired.issue(&who, "th").unwrap();
        assert!(expired.redeem(&t, "th").is_none(), "expired");
    }
}
