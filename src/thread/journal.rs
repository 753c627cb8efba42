//! A thread's journal: batches handed to the store in seq order, settled
//! when the store acknowledges them, and published — folded in, kept in
//! memory, pushed to every viewer — only as a contiguous durable prefix
//! (with several nodes, merged with the other nodes' announcements).

use super::*;

/// How long a seq may be missing while a later one is known before it is
/// read back from the store (it is normally an acknowledgement or another
/// node's announcement a moment away).
pub(super) const GAP_GRACE: std::time::Duration = std::time::Duration::from_millis(200);

/// A batch handed to the store ([`Thread::enqueue`]), not yet acknowledged.
pub struct PendingAppend {
    ack: Option<crate::store::AppendAck>,
    events: Vec<Event>,
    /// When it was handed over (journal latency metric).
    since: std::time::Instant,
    /// Its count in `Inner::inflight`.
    slot: Option<InflightSlot>,
}

/// A batch's count in `Inner::inflight`, given back by [`Thread::settle`] —
/// or, when the batch is dropped unsettled (a run stops on an earlier
/// failure with later batches in flight), by this drop, which then treats
/// the batch as failed: whether it landed is unknown, so a thread on a
/// store of its own recovers from what the store holds ([`recovery`]).
/// Without it the count stayed up forever, and with it compaction and the
/// recovery waited forever.
pub(super) struct InflightSlot(Option<std::sync::Weak<Thread>>);

impl InflightSlot {
    /// `settle` took the count back itself.
    pub(super) fn settled(mut self) {
        self.0 = None;
    }
}

impl Drop for InflightSlot {
    fn drop(&mut self) {
        if let Some(thread) = self.0.take().and_then(|t| t.upgrade()) {
            let mut inner = thread.lock();
            inner.inflight -= 1;
            if !thread.shared() {
                thread.journal_failed(
                    &mut inner,
                    &StoreError::failed("a batch was dropped before its acknowledgement"),
                );
            }
        }
    }
}

/// The status a thread has after `events` (its run's status, or `idle`):
/// `None` when no event among them changes it (most batches: no allocation).
pub(super) fn status_after<'a>(events: impl Iterator<Item = &'a Event>) -> Option<&'static str> {
    let mut status = None;
    for e in events {
        match e.kind() {
            EventType::RunStarted => status = Some("running"),
            EventType::RunError => status = Some("error"),
            EventType::RunFinished => {
                status = Some(
                    match e
                        .get("outcome")
                        .and_then(|o| o.get("type"))
                        .and_then(Value::as_str)
                    {
                        Some("interrupt") => "interrupted",
                        Some("cancelled") => "cancelled",
                        _ => "finished",
                    },
                )
            }
            _ => {}
        }
    }
    status
}

impl Thread {
    /// Appends events: durable first, then folded and fanned out. Returns the
    /// entries (with their seqs); empty when the journal failed (logged; see
    /// [`Thread::try_append`]).
    pub async fn append(&self, events: Vec<Event>) -> Vec<Arc<Entry>> {
        self.try_append(events).await.unwrap_or_default()
    }

    /// Appends events: the batch is handed to the store under the thread's
    /// lock, so the store receives batches in order; viewers get entries
    /// only once they and every earlier seq are durable (the contiguous
    /// acknowledged prefix). A failed write publishes nothing, ever: the
    /// thread refuses further appends (the journal would have a gap) until
    /// it has recovered ([`recovery`]).
    pub async fn try_append(&self, events: Vec<Event>) -> Result<Vec<Arc<Entry>>, StoreError> {
        let pending = self.enqueue(events, None)?;
        self.settle(pending).await
    }

    /// The first half of [`Thread::try_append`]: hands the batch to the
    /// store, without waiting. A run pipelines its batches this way (it
    /// reads the agent on while earlier batches commit), under its lease's
    /// `fence` ([`crate::store::lease`]).
    pub fn enqueue(
        &self,
        events: Vec<Event>,
        fence: Option<Arc<str>>,
    ) -> Result<PendingAppend, StoreError> {
        self.enqueue_batch(events, fence, false)
    }

    /// [`Thread::enqueue`] for the events that close a run after one of its
    /// batches failed (see [`AppendBatch::closes_failed_run`]).
    pub fn enqueue_closing(
        &self,
        events: Vec<Event>,
        fence: Option<Arc<str>>,
    ) -> Result<PendingAppend, StoreError> {
        self.enqueue_batch(events, fence, true)
    }

    /// [`Thread::enqueue`] for a closer's batch that carries no run event
    /// but must settle the thread's status (to `finished`: its last run did): what a node that
    /// stopped mid-handoff left listed as running ([`super::abandoned`]).
    pub(super) fn enqueue_settling(
        &self,
        events: Vec<Event>,
        fence: Option<Arc<str>>,
    ) -> Result<PendingAppend, StoreError> {
        self.enqueue_batch_as(events, fence, false, true)
    }

    pub(super) fn enqueue_batch(
        &self,
        events: Vec<Event>,
        fence: Option<Arc<str>>,
        closes_failed_run: bool,
    ) -> Result<PendingAppend, StoreError> {
        self.enqueue_batch_as(events, fence, closes_failed_run, false)
    }

    fn enqueue_batch_as(
        &self,
        events: Vec<Event>,
        fence: Option<Arc<str>>,
        closes_failed_run: bool,
        settles: bool,
    ) -> Result<PendingAppend, StoreError> {
        if events.is_empty() {
            return Ok(PendingAppend {
                ack: None,
                events,
                since: std::time::Instant::now(),
                slot: None,
            });
        }
        let mut inner = self.lock();
        if let Some(e) = &inner.broken {
            return Err(StoreError::failed(format!("journal failed earlier: {e}")));
        }
        let first = inner.next_assign.max(inner.next_seq);
        inner.next_assign = first + events.len() as u64;
        let mut meta = inner.meta.clone();
        if let Some(status) = status_after(events.iter()) {
            meta.status = status.into();
        } else if settles {
            meta.status = "finished".into();
        }
        // A run that handed the thread over ends, but the thread runs on.
        // (The run is the one its `RUN_FINISHED` names: the fold may not
        // have published the run's start yet, its batch still in flight.)
        let open = events
            .iter()
            .rev()
            .find(|e| matches!(e.kind(), EventType::RunFinished | EventType::RunStarted))
            .and_then(|e| e.str_field("runId"))
            .or(inner.fold.run().map(|r| r.run_id.as_str()));
        if meta.status != "running" && inner.runs.handed_over(open) {
            meta.status = "running".into();
        }
        meta.updated_ms = updated_stamp(
            now_millis(),
            inner.meta.updated_ms,
            meta.status != inner.meta.status,
        );
        meta.last_seq = inner.next_assign - 1;
        if inner.meta.status != meta.status {
            inner.meta.status = meta.status.clone();
        }
        let batch = AppendBatch {
            key: self.key.clone(),
            meta,
            events: events
                .iter()
                .enumerate()
                .map(|(i, e)| (first + i as u64, e.json().clone()))
                .collect(),
            compact: None,
            fence,
            run_boundary: settles
                || events
                    .iter()
                    .any(|e| *e.kind() == EventType::RunStarted || e.kind().is_terminal()),
            idempotency: match events.as_slice() {
                [meta] if *meta.kind() == EventType::Meta => meta
                    .str_field("clientEventId")
                    .zip(meta.str_field("id"))
                    .map(|(cid, id)| (cid.to_owned(), id.to_owned())),
                _ => None,
            },
            closes_failed_run,
        };
        inner.inflight += 1;
        Ok(PendingAppend {
            ack: Some(self.store.append(batch)),
            events,
            since: std::time::Instant::now(),
            slot: Some(InflightSlot(Some(self.me.clone()))),
        })
    }

    /// The second half of [`Thread::try_append`]: waits for the store, then
    /// publishes what is now the contiguous durable prefix. Returns the
    /// batch's entries with the seqs the store gave them.
    pub async fn settle(&self, pending: PendingAppend) -> Result<Vec<Arc<Entry>>, StoreError> {
        let PendingAppend {
            ack,
            events,
            since,
            slot,
        } = pending;
        let (Some(ack), Some(slot)) = (ack, slot) else {
            return Ok(Vec::new());
        };
        let result = match ack.await {
            Ok(r) => r,
            Err(_) => Err(StoreError::failed("journal writer gone")),
        };
        let metrics = crate::metrics::metrics();
        metrics
            .journal_append
            .observe(since.elapsed().as_secs_f64());
        metrics.journal_batch_events.observe(events.len() as f64);
        let mut inner = self.lock();
        inner.inflight -= 1;
        slot.settled();
        match result {
            Ok(first) => {
                let entries: Vec<Arc<Entry>> = events
                    .into_iter()
                    .enumerate()
                    .map(|(i, e)| Arc::new(Entry::new(self.id.clone(), first + i as u64, e)))
                    .collect();
                let after_last = first + entries.len() as u64;
                // Another node appended in between: later batches go after.
                inner.next_assign = inner.next_assign.max(after_last);
                if self.bus.wants_announcements() {
                    self.bus.announce(Publication {
                        key: self.key.clone(),
                        events: entries
                            .iter()
                            .map(|e| (e.seq, e.event.json().clone()))
                            .collect(),
                    });
                }
                for entry in &entries {
                    if entry.seq >= inner.next_seq {
                        inner
                            .arrived
                            .entry(entry.seq)
                            .or_insert_with(|| entry.clone());
                    }
                }
                self.publish_ready(&mut inner);
                Ok(entries)
            }
            Err(StoreError::Duplicate(id)) => Err(StoreError::Duplicate(id)),
            Err(StoreError::JournalLost) => {
                // Nothing was written; this copy is reloaded (not under the lock).
                if let Some(me) = self.me.upgrade() {
                    tokio::spawn(async move { me.journal_lost().await });
                }
                Err(StoreError::JournalLost)
            }
            Err(StoreError::Fenced) => {
                // Another node closed the run: its events reach this copy
                // through the bus; this copy itself is sound.
                tracing::warn!(tenant = %self.key.tenant, thread = %self.key.thread_id, "append refused: the run's lease was lost");
                Err(StoreError::Fenced)
            }
            Err(e) if self.shared() => {
                // The store assigns seqs: whether or not the batch landed,
                // this copy stays a faithful prefix of the journal (if it
                // did, its events come back like another node's).
                tracing::error!(tenant = %self.key.tenant, thread = %self.key.thread_id, "journal append failed (shared store): {e}");
                Err(e)
            }
            Err(e) => {
                tracing::error!(tenant = %self.key.tenant, thread = %self.key.thread_id, "journal append failed; nothing after seq {} is published until the journal recovers: {e}", inner.next_seq - 1);
                self.journal_failed(&mut inner, &e);
                Err(e)
            }
        }
    }

    /// True when other nodes write this thread's store too (a shared lease
    /// table, or a bus to announce on).
    pub(super) fn shared(&self) -> bool {
        self.leases.shared() || self.bus.wants_announcements()
    }

    /// Publishes the known entries that continue the published prefix, in
    /// seq order. When a later seq is known and an earlier one is not, the
    /// missing ones are read back from the store.
    pub(super) fn publish_ready(&self, inner: &mut Inner) {
        let published = inner.next_seq;
        while let Some(entry) = inner.arrived.first_entry() {
            let seq = *entry.key();
            if seq < inner.next_seq {
                entry.remove();
                continue;
            }
            if seq > inner.next_seq {
                break;
            }
            let entry = entry.remove();
            self.publish(inner, entry);
        }
        if inner.next_seq != published {
            touched(inner);
            self.fan_out(inner);
        }
        // Alone on its store, a copy's gaps are its own batches still being
        // acknowledged; shared, they may be another node's lost announcement.
        if !inner.arrived.is_empty() && !inner.backfilling && self.shared() {
            inner.backfilling = true;
            if let Some(me) = self.me.upgrade() {
                tokio::spawn(async move {
                    // Usually the missing seq is an acknowledgement or an
                    // announcement about to be handled: give it a moment.
                    tokio::time::sleep(GAP_GRACE).await;
                    let gap = {
                        let inner = me.lock();
                        inner
                            .arrived
                            .first_key_value()
                            .is_some_and(|(seq, _)| *seq > inner.next_seq)
                    };
                    if gap {
                        me.read_back().await;
                    }
                    me.lock().backfilling = false;
                });
            }
        }
    }

    /// Publishes events another node made durable (from the
    /// [bus](crate::store::bus)), as if appended here, in seq order with
    /// this node's own; those this copy has already are skipped.
    pub(super) fn publish_remote(&self, events: Vec<(u64, Bytes)>) {
        let mut inner = self.lock();
        for (seq, json) in events {
            if seq < inner.next_seq || inner.arrived.contains_key(&seq) {
                continue;
            }
            inner.next_assign = inner.next_assign.max(seq + 1);
            match Event::parse(json) {
                Ok(event) => {
                    let entry = Arc::new(Entry::new(self.id.clone(), seq, event));
                    inner.arrived.insert(seq, entry);
                }
                Err(e) => {
                    tracing::error!(thread = %self.key.thread_id, seq, "unreadable event from another node skipped: {e}");
                    // A placeholder keeps the order; nothing is published for it.
                    if seq == inner.next_seq {
                        inner.next_seq += 1;
                    }
                }
            }
        }
        self.publish_ready(&mut inner);
    }

    /// With other nodes on the store: catches this copy up with the stored
    /// journal and metadata (before a decision that needs the latest, such
    /// as which agent raised the pending interrupts). Alone: nothing to do.
    pub async fn refresh(&self) {
        if self.shared() {
            self.read_back().await;
        }
    }

    /// Reads what this copy lacks from the store and publishes it: after a
    /// gap on the bus, a lost subscription, or before deciding on a run
    /// when the stored journal moved on. A journal that lost history this
    /// copy holds reloads it ([`Thread::journal_lost`]). False when the store
    /// could not be read.
    pub async fn read_back(&self) -> bool {
        let store = self.store.clone();
        let key = self.key.clone();
        let next = self.lock().next_seq;
        let stored = tokio::task::spawn_blocking(move || store.load_after(&key, next - 1)).await;
        match stored {
            Ok(Ok(Some(stored))) if stored.base.as_ref().is_none_or(|(base, _)| *base < next) => {
                let missing = stored.events.into_iter().filter(|(seq, _)| *seq >= next);
                self.publish_remote(missing.collect());
                // The agent of the latest run (the journal does not name it).
                if let Some(agent) = stored.meta.agent {
                    self.lock().meta.agent = Some(agent);
                }
                true
            }
            Ok(Ok(_)) => true,
            Ok(Err(StoreError::JournalLost)) => {
                Box::pin(self.journal_lost()).await;
                true
            }
            _ => {
                tracing::warn!(
                    thread = %self.key.thread_id,
                    next,
                    "missing events could not be read back from the store; retried at the next event"
                );
                false
            }
        }
    }

    /// Publishes one entry, the next in seq order: fold, journal, viewers.
    /// (When it happened is set once per batch, by [`touched`].)
    pub(super) fn publish(&self, inner: &mut Inner, entry: Arc<Entry>) {
        inner.next_seq = entry.seq + 1;
        inner.meta.last_seq = entry.seq;
        if let Some(status) = status_after(std::iter::once(&entry.event)) {
            inner.meta.status = status.into();
        }
        let kind = entry.event.kind().clone();
        if kind == EventType::RunStarted
            && let Some(run_id) = entry.event.str_field("runId")
        {
            inner.runs.remember(run_id);
        }
        if kind == EventType::Meta
            && let (Some(cid), Some(id)) = (
                entry.event.str_field("clientEventId"),
                entry.event.str_field("id"),
            )
        {
            inner.meta_ids.insert(cid.to_owned(), id.to_owned());
        }
        if kind == EventType::Meta {
            inner.meta_notes.note(&entry.event);
            let Inner {
                meta_notes, fold, ..
            } = &mut *inner;
            meta_notes.tell(&entry, fold);
        }
        entry.set_origin(inner.fold.apply(entry.seq, &entry.event));
        inner.journal.push_back(&entry);
        if inner.journal.bytes() > self.settings.hot_bytes {
            self.trim_tail(inner, self.settings.hot_bytes);
        }
        // What each viewer gets of it is decided now (by the fold as of
        // this entry) and queued with the rest of the batch ([`Self::fan_out`]).
        let Inner { viewers, fold, .. } = &mut *inner;
        for viewer in viewers.iter_mut().filter(|v| !v.ended) {
            if let Some(item) = viewer.view(&entry, fold) {
                viewer.ended = viewer.ends_with(&entry.event);
                viewer.staged.push(item);
            }
        }
        if kind.is_terminal() {
            // The run is over the moment its end is published: this node's
            // slot is free before any viewer can answer it, and a run
            // queued here (behind this node's run or another's) may start.
            // What viewers have of it goes out first, so nothing queued to
            // them by the next run's start can overtake it.
            touched(inner);
            self.fan_out(inner);
            self.terminal_published(inner);
            self.recount_fold(inner, false);
        }
    }

    /// Queues what [`Self::publish`] staged for each viewer as one outbox
    /// item per viewer ([`Outbox::push_live_batch`]); a viewer that has its
    /// last event, or whose connection is gone, leaves the live list, and
    /// one over its budget reads the journal from its first unsent entry.
    pub(super) fn fan_out(&self, inner: &mut Inner) {
        let mut i = 0;
        while i < inner.viewers.len() {
            let viewer = &mut inner.viewers[i];
            let Some(first) = viewer.staged.first().map(|e| e.seq) else {
                i += 1;
                continue;
            };
            match viewer.outbox.push_live_batch(&mut viewer.staged) {
                Live::Queued if viewer.ended => {
                    inner.viewers.swap_remove(i);
                }
                Live::Queued => i += 1,
                Live::Closed => {
                    inner.viewers.swap_remove(i);
                }
                Live::Full => {
                    // Behind by more than its budget: it leaves the live
                    // list and reads the journal from here on.
                    let mut viewer = inner.viewers.swap_remove(i);
                    viewer.staged = Vec::new();
                    viewer.ended = false;
                    let (id, outbox) = (viewer.id, viewer.outbox.clone());
                    let catch_up = CatchUp::new(self.me.clone(), viewer, first - 1);
                    let ticket = catch_up.ticket();
                    if outbox.push_catch_up(catch_up) {
                        inner.catching_up.insert(id, ticket);
                    }
                }
            }
        }
    }

    /// Appends a META event by `user` (who overrides any `payload.userId`).
    /// Idempotent per `client_event_id`: a repeat returns the first event's id
    /// and no entry, and appends nothing. A store failure is an error and
    /// leaves the key unused, so the client's retry can still be stored.
    pub async fn append_meta(
        &self,
        user: &str,
        meta_type: &str,
        mut payload: Map<String, Value>,
        client_event_id: Option<String>,
    ) -> Result<(String, Option<Arc<Entry>>), StoreError> {
        let id = uuid::Uuid::new_v4().to_string();
        if let Some(cid) = &client_event_id {
            let mut inner = self.lock();
            if let Some(existing) = inner.meta_ids.get(cid) {
                return Ok((existing.clone(), None));
            }
            inner.meta_ids.insert(cid.clone(), id.clone());
        }
        payload.insert("userId".into(), user.into());
        let mut event = json!({
            "type": "META",
            "id": id,
            "metaType": meta_type,
            "payload": payload,
            "timestamp": now_millis(),
        });
        if let Some(cid) = &client_event_id {
            event["clientEventId"] = cid.clone().into();
        }
        match self.try_append(vec![Event::build(event)]).await {
            Ok(mut entries) => Ok((id, entries.pop())),
            // Posted through another node first: that event's id.
            Err(StoreError::Duplicate(existing)) => Ok((existing, None)),
            Err(e) => {
                if let Some(cid) = &client_event_id {
                    let mut inner = self.lock();
                    if inner.meta_ids.get(cid) == Some(&id) {
                        inner.meta_ids.forget(cid);
                    }
                }
                Err(e)
            }
        }
    }
}

/// Something was published now: the thread's clocks (for idleness and its
/// metadata), read once per batch — two clock reads per event were 3 % of
/// a long run's time.
fn touched(inner: &mut Inner) {
    inner.last_event = std::time::Instant::now();
    inner.meta.updated_ms = updated_stamp(now_millis(), inner.meta.updated_ms, false);
}

/// A thread's `updated_ms` (what listings sort by) as a batch leaves it:
/// now when its status changes (a run starts or ends), otherwise moved at
/// most once a second. Why not exact: with SQLite the stamp is indexed, and
/// a paced run commits one event at a time — rewriting the index's page
/// with every event was a quarter of what each commit wrote to the log
/// (four pages for a 150-byte event), all of it copied and synced again by
/// the checkpoints, on the same cores as the live path.
fn updated_stamp(now: u64, previous: u64, status_changed: bool) -> u64 {
    if status_changed || now >= previous.saturating_add(1000) || now < previous {
        now
    } else {
        previous
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_update_stamp_moves_at_a_status_change_or_once_a_second() {
        let now = 1_000_000;
        assert_eq!(
            updated_stamp(now, now - 300, false),
            now - 300,
            "within the second: kept"
        );
        assert_eq!(
            updated_stamp(now, now - 300, true),
            now,
            "a status change: now"
        );
        assert_eq!(
            updated_stamp(now, now - 1_000, false),
            now,
            "a second on: now"
        );
        assert_eq!(
            updated_stamp(now, now + 60_000, false),
            now,
            "a clock that went back is followed"
        );
    }
}
