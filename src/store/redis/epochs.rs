//! Journal epochs: how a node notices that Redis lost history it had seen.
//!
//! Redis acknowledges a write once it is in memory; a restart without
//! persistence, a `FLUSHALL`, or a restore from an older snapshot takes
//! acknowledged events back. Nodes holding a thread would then disagree with
//! the store and with each other, splice a new conversation onto an old one
//! for their viewers, and refuse runs forever (the store's last seq never
//! matches theirs). As Centrifugo does for its streams, each thread's journal
//! has an epoch — a random id written with its first event — that a fresh
//! journal never shares; and a node remembers, per thread it holds, the
//! highest seq it knows durable. The store must never be below that, and
//! never under another epoch: the append script refuses a batch otherwise,
//! read-backs and other nodes' publications are checked, and the store as a
//! whole has an identity (`prefix:store`) the heartbeat checks, which a
//! flush or an empty restart loses. On a mismatch the thread's copy is
//! reloaded ([`super::StoreError::JournalLost`]) and the node reports not
//! ready for a lease's time to live: the runs that wrote into the lost
//! history (on any node) stop within it.

use super::*;

/// Characters of a journal's epoch in a client's cursor.
const CURSOR_EPOCH_LEN: usize = 8;

/// What this node knows of one thread's journal.
#[derive(Debug, Default)]
struct Known {
    /// `None` until learned (a journal written before epochs existed has
    /// none until its next write).
    epoch: Option<String>,
    /// The highest seq this node knows durable.
    last: u64,
    /// Whole loads of the thread so far: a read or an append sent before
    /// the latest one was judged against a journal the node has since
    /// replaced, and its answer says nothing of the journal now.
    loads: u64,
    /// The epoch the latest load replaced, if it changed: another node's
    /// publications under it come late from the lost history.
    left: Option<String>,
    /// A loss was found and this node has not reloaded the thread since:
    /// only then may it start a new history ([`Journals::pending_loss`]).
    lost: bool,
}

/// What a node knew of a journal when it sent a read or an append
/// ([`Journals::sent`]).
#[derive(Debug, Clone, Default)]
pub(super) struct Sent {
    epoch: Option<String>,
    last: u64,
    loads: u64,
}

impl Sent {
    /// The epoch and last seq an append must find (`""` when no epoch is
    /// known: nothing to check).
    pub(super) fn expected(&self) -> (&str, u64) {
        match &self.epoch {
            Some(epoch) => (epoch, self.last),
            None => ("", 0),
        }
    }
}

/// Why an answer does not match what this node knows of a journal.
#[derive(Debug, PartialEq)]
pub(super) enum Mismatch {
    /// The store lost history this node saw (why, for the log).
    Lost(String),
    /// The answer was to a question asked of a journal this node has since
    /// reloaded (or is a late publication from the history it left): it
    /// says nothing of the journal now. Taken for a loss, it started a new
    /// history of a journal that had just been reloaded, and every node
    /// reset its viewers and stopped its runs a second time (a cluster test
    /// caught it: a master killed with writes its replica never had, both
    /// nodes found the loss, and a late answer to a read sent before the
    /// reload renewed the reloaded journal's epoch under a run just started).
    Stale,
}

/// The journals of the threads this node holds (bounded by them: an entry
/// lives from the thread's first watch to its last unwatch).
#[derive(Debug, Default)]
pub(super) struct Journals {
    known: DashMap<String, Known>,
    /// When history was last found lost.
    lost_at: Mutex<Option<std::time::Instant>>,
}

impl Journals {
    /// Starts tracking `member` (its first holder).
    pub(super) fn watch(&self, member: &str) {
        self.known.entry(member.to_owned()).or_default();
    }

    /// Stops tracking `member` (its last holder left).
    pub(super) fn unwatch(&self, member: &str) {
        self.known.remove(member);
    }

    /// A whole load: from now on this is what the node knows, and a loss
    /// found before is dealt with.
    pub(super) fn loaded(&self, member: &str, epoch: Option<String>, last: u64) {
        if let Some(mut k) = self.known.get_mut(member) {
            let k = &mut *k;
            if k.epoch != epoch {
                k.left = k.epoch.take();
            }
            k.epoch = epoch;
            k.last = last;
            k.loads += 1;
            k.lost = false;
        }
    }

    /// `member`'s epoch as clients see it in their cursors: its first
    /// [`CURSOR_EPOCH_LEN`] characters (a random id's; two journals of one
    /// thread share them about once in 4 billion), `None` while unknown.
    pub(super) fn cursor_epoch(&self, member: &str) -> Option<String> {
        let known = self.known.get(member)?;
        let epoch = known.epoch.as_deref()?;
        Some(
            epoch
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .take(CURSOR_EPOCH_LEN)
                .collect(),
        )
    }

    /// What this node knows of `member` now: taken before a read or an
    /// append is sent, it is what the answer must hold at least
    /// ([`Journals::observe`], [`Journals::refused`]).
    pub(super) fn sent(&self, member: &str) -> Sent {
        self.known
            .get(member)
            .map(|k| Sent {
                epoch: k.epoch.clone(),
                last: k.last,
                loads: k.loads,
            })
            .unwrap_or_default()
    }

    /// Checks what the store says of `member` against what this node knows,
    /// and learns it: `Err` when the journal is not the one this node knew.
    /// A read (`sent`: what this node knew when it sent it, see
    /// [`Journals::sent`]) must carry the epoch known then and not end
    /// before the seq known then. Not what is known now: a publication, an
    /// acknowledgement or another read handled while the read was on its
    /// way may name a journal or seqs the store did not hold yet when it
    /// answered. Taking later seqs for lost history reloaded the thread and
    /// reset its viewers for nothing (a cluster test caught it: one viewer
    /// got a run's events twice, another a gap); taking a later epoch for
    /// it reported brand-new threads "lost, epoch gone, seen up to seq 0"
    /// at 1,000 concurrent runs on a loaded machine: a read sent before the
    /// run's lease created the journal, handled after another read had
    /// learned its epoch. A read sent before the node's latest reload is
    /// [`Mismatch::Stale`]. A publication's seqs may be older than a
    /// read-back already learned, so it checks only the epoch known now
    /// (`sent` = `None`); one under the epoch the latest reload left is
    /// stale too. A loss found here is reported to the caller, which marks it
    /// pending ([`Journals::lost`]) until the thread is loaded again.
    pub(super) fn observe(
        &self,
        member: &str,
        epoch: Option<&str>,
        last: u64,
        sent: Option<&Sent>,
    ) -> Result<(), Mismatch> {
        let Some(mut k) = self.known.get_mut(member) else {
            return Ok(());
        };
        let must = match sent {
            Some(sent) if sent.loads != k.loads => return Err(Mismatch::Stale),
            None if epoch.is_some() && epoch == k.left.as_deref() => {
                return Err(Mismatch::Stale);
            }
            None => k.epoch.as_deref(),
            // No epoch known when it was sent: the answer may predate the
            // journal, and holds the node to nothing.
            Some(sent) => sent.epoch.as_deref(),
        };
        if let Some(must) = must {
            let why = if epoch != Some(must) {
                Some(format!(
                    "its epoch is {} instead of {must} (this node had seen up to seq {})",
                    epoch.unwrap_or("gone"),
                    k.last
                ))
            } else {
                sent.filter(|sent| last < sent.last).map(|sent| {
                    format!(
                        "it ends at seq {last}, but this node had seen seq {} durable",
                        sent.last
                    )
                })
            };
            if let Some(why) = why {
                return Err(Mismatch::Lost(why));
            }
        }
        if k.epoch.is_none() {
            k.epoch = epoch.map(str::to_owned);
        }
        // Seqs of the journal known (not of a stale answer's).
        if epoch.is_none() || epoch == k.epoch.as_deref() {
            k.last = k.last.max(last);
        }
        Ok(())
    }

    /// An append (sent knowing `sent`) was refused: the store's journal is
    /// not the one it was written for. A loss, unless the node reloaded the
    /// thread since the append was sent: then it was written for the
    /// history the reload left, and refusing it was all there was to do.
    pub(super) fn refused(&self, member: &str, sent: &Sent) -> Mismatch {
        match self.known.get(member) {
            Some(k) if k.loads != sent.loads => Mismatch::Stale,
            Some(k) => Mismatch::Lost(format!(
                "(known: {}, seen up to seq {})",
                k.epoch.as_deref().unwrap_or("none"),
                k.last
            )),
            None => Mismatch::Stale,
        }
    }

    /// The epoch of `member`'s journal as this node knew it when it found a
    /// loss it has not reloaded since (`""`: none known); `None` when no
    /// loss is pending — a late report of one already dealt with.
    pub(super) fn pending_loss(&self, member: &str) -> Option<String> {
        let k = self.known.get(member)?;
        k.lost.then(|| k.epoch.clone().unwrap_or_default())
    }

    /// Logs (loudly: acknowledged events are gone) that `what` lost history,
    /// and starts the not-ready window; `member`'s loss is pending until its
    /// next load ([`Journals::pending_loss`]).
    pub(super) fn lost(&self, member: Option<&str>, what: &str, why: &str) {
        if let Some(mut k) = member.and_then(|m| self.known.get_mut(m)) {
            k.lost = true;
        }
        tracing::error!(
            "JOURNAL LOST HISTORY: the shared store no longer holds what this node saw of {what}: {why}; \
             reloading it from the store, closing its runs, resetting its viewers"
        );
        *self
            .lost_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(std::time::Instant::now());
    }

    /// True within `window` of the last loss found.
    pub(super) fn recently_lost(&self, window: std::time::Duration) -> bool {
        self.lost_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some_and(|at| at.elapsed() < window)
    }
}

/// The `maxmemory-policy` the journal needs: `noeviction`. Any other policy
/// lets Redis delete keys under memory pressure — a thread's event stream
/// while its meta hash survives, or the other way round — which is history
/// lost without a flush, so an operator must hear of it at start. Redis
/// with `CONFIG` renamed away (managed services do) cannot be asked; that
/// is said too, once, and tolerated.
pub(super) async fn check_eviction_policy(conn: &mut Conn) {
    let reply: Result<Vec<String>, _> = ::redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await;
    match reply.as_deref() {
        Ok([_, policy]) if policy == "noeviction" => {}
        Ok([_, policy]) => tracing::warn!(
            policy = %policy,
            "Redis maxmemory-policy is '{policy}': Redis may evict journal keys under memory \
             pressure and lose acknowledged events; set `maxmemory-policy noeviction` \
             (docs/operations.md, Redis)"
        ),
        Ok(_) | Err(_) => tracing::info!(
            "could not read Redis's maxmemory-policy (CONFIG disabled?); it must be \
             noeviction (docs/operations.md, Redis)"
        ),
    }
}

/// Where a thread's event stream no longer holds what its meta hash says
/// it does: the events after `after` up to `last` must all be there, from
/// `after + 1`. Eviction (any `maxmemory-policy` but `noeviction`) or a
/// careless `DEL`/`XTRIM` deletes the stream and leaves the hash: appends go
/// on at the hash's last seq under the same epoch, and a node loading the
/// thread would show the events after the gap as the whole conversation,
/// at the seqs clients hold of the old one. `Some(seq)`: the stream starts
/// after `seq` instead (nothing of it before is left).
pub(super) fn stream_gap(after: u64, last: u64, events: &[(u64, Bytes)]) -> Option<u64> {
    let first = events.first().map_or(last + 1, |(seq, _)| *seq);
    (last > after && first > after + 1).then_some(first - 1)
}

/// Makes a stream's gap the start of a new history: a new epoch (every
/// cursor into the old one gets a reset), and the base moved to just before
/// the first event the stream still holds (or to the last seq, if it holds
/// none) with an empty conversation: what was before the gap is gone. The
/// gap is checked again here, atomically: a read sees the hash and then the
/// stream, and a compaction in between trims the stream to a base the read
/// did not see (no gap), and another node may have restarted the history
/// already (another epoch). KEYS: meta hash, event stream; ARGV: epoch seen
/// ('' = none), new epoch. Returns 1 when it restarted the history.
const RESTART_HISTORY: &str = r#"
local epoch = redis.call('HGET', KEYS[1], 'epoch') or ''
if epoch ~= ARGV[1] then
  return 0
end
local base = tonumber(redis.call('HGET', KEYS[1], 'base_seq') or '0')
local last = tonumber(redis.call('HGET', KEYS[1], 'last_seq') or '0')
if last <= base then
  return 0
end
local first = redis.call('XRANGE', KEYS[2], (base + 1) .. '-0', '+', 'COUNT', 1)[1]
local start = last + 1
if first then
  start = tonumber(string.match(first[1], '^(%d+)'))
end
if start <= base + 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'epoch', ARGV[2], 'base_seq', start - 1, 'base', '{}')
return 1
"#;

/// Runs [`RESTART_HISTORY`] on a thread whose read found a gap; true when
/// the history was restarted (false: no gap after all, or done already).
pub(super) async fn restart_history(
    conn: &mut Conn,
    (meta, events): (&str, &str),
    seen: Option<&str>,
) -> ::redis::RedisResult<bool> {
    ::redis::Script::new(RESTART_HISTORY)
        .key(meta)
        .key(events)
        .arg(seen.unwrap_or(""))
        .arg(uuid::Uuid::new_v4().to_string())
        .invoke_async::<i64>(conn)
        .await
        .map(|restarted| restarted == 1)
}

/// A new epoch for a journal that went back (see
/// [`crate::store::JournalStore::new_history`]), only if it still has the
/// epoch this node knew (`seen`; another node may have renewed it, and a
/// flushed journal has none or a new one already). KEYS: meta hash; ARGV:
/// epoch seen, new epoch.
const NEW_EPOCH: &str = r#"
if ARGV[1] ~= '' and redis.call('HGET', KEYS[1], 'epoch') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'epoch', ARGV[2])
  return 1
end
return 0
"#;

/// Runs [`NEW_EPOCH`] on `meta`.
pub(super) async fn new_epoch(conn: &mut Conn, meta: &str, seen: &str) -> ::redis::RedisResult<()> {
    ::redis::Script::new(NEW_EPOCH)
        .key(meta)
        .arg(seen)
        .arg(uuid::Uuid::new_v4().to_string())
        .invoke_async::<i64>(conn)
        .await
        .map(drop)
}

/// The store's identity. KEYS: the identity key; ARGV: a new identity, used
/// when the key is missing (a fresh, flushed, or emptied store). Returns it.
pub(super) const IDENTITY: &str = r#"
local id = redis.call('GET', KEYS[1])
if id then
  return id
end
redis.call('SETNX', KEYS[1], ARGV[1])
return ARGV[1]
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn expected(journals: &Journals, member: &str) -> (String, u64) {
        let sent = journals.sent(member);
        let (epoch, last) = sent.expected();
        (epoch.to_owned(), last)
    }

    #[test]
    fn answers_to_what_was_asked_before_a_reload_are_no_second_loss() {
        let journals = Journals::default();
        journals.watch("t/a");
        journals.loaded("t/a", Some("e1".into()), 30);
        // A read and an append are sent knowing e1 up to seq 30 ...
        let before = journals.sent("t/a");
        // ... a loss is found (the store went back to seq 27) ...
        let after = journals.sent("t/a");
        assert!(matches!(
            journals.observe("t/a", Some("e1"), 27, Some(&after)),
            Err(Mismatch::Lost(_))
        ));
        journals.lost(Some("t/a"), "thread a", "a test");
        assert_eq!(journals.pending_loss("t/a").as_deref(), Some("e1"));
        // ... and dealt with: a new history (e2), reloaded.
        journals.loaded("t/a", Some("e2".into()), 28);
        assert_eq!(journals.pending_loss("t/a"), None, "nothing more to renew");
        // The read's answer, under e2 or under e1, is stale, not a loss ...
        for epoch in ["e2", "e1"] {
            assert_eq!(
                journals.observe("t/a", Some(epoch), 28, Some(&before)),
                Err(Mismatch::Stale)
            );
        }
        // ... so is the refusal of the append written for e1 ...
        assert_eq!(journals.refused("t/a", &before), Mismatch::Stale);
        // ... and another node's late publication under e1.
        assert_eq!(
            journals.observe("t/a", Some("e1"), 30, None),
            Err(Mismatch::Stale)
        );
        assert_eq!(journals.pending_loss("t/a"), None);
        assert_eq!(expected(&journals, "t/a"), ("e2".into(), 28));
        // What is sent from now on is judged against e2: a refusal is a loss.
        let now = journals.sent("t/a");
        assert!(matches!(journals.refused("t/a", &now), Mismatch::Lost(_)));
        assert!(journals.observe("t/a", Some("e2"), 29, Some(&now)).is_ok());
        assert!(matches!(
            journals.observe("t/a", Some("e3"), 29, None),
            Err(Mismatch::Lost(_))
        ));
    }

    #[test]
    fn a_stream_that_no_longer_reaches_back_to_its_base_has_a_gap() {
        let ev = |seqs: &[u64]| -> Vec<(u64, Bytes)> {
            seqs.iter().map(|s| (*s, Bytes::new())).collect()
        };
        assert_eq!(stream_gap(0, 3, &ev(&[1, 2, 3])), None);
        assert_eq!(stream_gap(5, 7, &ev(&[6, 7])), None, "after a base");
        assert_eq!(stream_gap(0, 0, &ev(&[])), None, "nothing written");
        assert_eq!(stream_gap(7, 7, &ev(&[])), None, "nothing after");
        assert_eq!(stream_gap(0, 7, &ev(&[])), Some(7), "deleted");
        assert_eq!(
            stream_gap(0, 9, &ev(&[8, 9])),
            Some(7),
            "deleted, then written"
        );
        assert_eq!(stream_gap(2, 9, &ev(&[5, 9])), Some(4));
    }

    #[test]
    fn a_journal_under_another_epoch_or_behind_what_was_seen_is_lost() {
        let journals = Journals::default();
        journals.watch("t/a");
        // Nothing known yet: anything is learned.
        assert_eq!(expected(&journals, "t/a"), (String::new(), 0));
        assert!(
            journals
                .observe("t/a", Some("e1"), 5, Some(&Sent::default()))
                .is_ok()
        );
        assert_eq!(expected(&journals, "t/a"), ("e1".into(), 5));
        // A publication older than what a read-back learned is no loss ...
        assert!(journals.observe("t/a", Some("e1"), 3, None).is_ok());
        assert_eq!(expected(&journals, "t/a"), ("e1".into(), 5));
        // ... nor a read sent when seq 3 was the latest known, answered
        // before seqs 4 and 5 were written, and handled after a publication
        // of 5 ...
        let at3 = Sent {
            last: 3,
            ..journals.sent("t/a")
        };
        assert!(journals.observe("t/a", Some("e1"), 3, Some(&at3)).is_ok());
        assert_eq!(expected(&journals, "t/a"), ("e1".into(), 5));
        // ... but a store ending before what was known when the read was
        // sent is (restored from a snapshot),
        let sent = journals.sent("t/a");
        assert!(journals.observe("t/a", Some("e1"), 4, Some(&sent)).is_err());
        // as is another epoch (a new journal) or none (flushed).
        assert!(journals.observe("t/a", Some("e2"), 9, None).is_err());
        assert!(journals.observe("t/a", None, 0, Some(&sent)).is_err());
        // A whole load is what the node knows from then on.
        journals.loaded("t/a", Some("e2".into()), 1);
        let sent = journals.sent("t/a");
        assert!(journals.observe("t/a", Some("e2"), 1, Some(&sent)).is_ok());
        assert!(!journals.recently_lost(std::time::Duration::from_secs(60)));
        journals.lost(Some("t/a"), "thread a", "a test");
        assert!(journals.recently_lost(std::time::Duration::from_secs(60)));
        // Threads not held are not tracked (bounded by what the node holds).
        journals.unwatch("t/a");
        assert!(journals.observe("t/a", Some("e3"), 0, Some(&sent)).is_ok());
        assert_eq!(expected(&journals, "t/a"), (String::new(), 0));
    }

    #[test]
    fn a_read_sent_before_a_new_journal_was_known_does_not_lose_it() {
        let journals = Journals::default();
        journals.watch("t/new");
        // A read sent while the thread had no journal yet ...
        let before = journals.sent("t/new");
        // ... a run's lease creates it (epoch e1, nothing written), and
        // another read learns that ...
        let after = journals.sent("t/new");
        assert!(
            journals
                .observe("t/new", Some("e1"), 0, Some(&after))
                .is_ok()
        );
        // ... before the first read's answer (no journal) is handled: no
        // loss, and the epoch stays known.
        assert!(journals.observe("t/new", None, 0, Some(&before)).is_ok());
        assert_eq!(expected(&journals, "t/new"), ("e1".into(), 0));
        assert!(!journals.recently_lost(std::time::Duration::from_secs(60)));
        // A read sent once e1 was known that finds none is a loss.
        let known = journals.sent("t/new");
        assert!(journals.observe("t/new", None, 0, Some(&known)).is_err());
    }
}
