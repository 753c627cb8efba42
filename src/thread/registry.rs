//! The registry of threads in memory: loaded from the store on demand,
//! created by a first run, recovered after a restart, evicted when idle.

use super::*;

/// How many threads stay in memory, and how long once idle. An evicted
/// thread is loaded back from the store on its next use, exactly as it was.
#[derive(Debug, Clone, Copy)]
pub struct Residency {
    /// A thread idle this long leaves memory (zero: only for the budget).
    pub evict_after: std::time::Duration,
    /// Most threads kept in memory; past it the longest-idle ones leave
    /// first (threads in use never do).
    pub max_resident: usize,
}

impl Default for Residency {
    fn default() -> Self {
        Residency {
            evict_after: std::time::Duration::ZERO,
            max_resident: usize::MAX,
        }
    }
}

/// Every thread in use, loaded from the store on demand and evicted when
/// idle (see [`Residency`]).
pub struct Threads {
    pub(super) map: DashMap<ThreadKey, Arc<Thread>>,
    store: Arc<dyn JournalStore>,
    bus: Arc<dyn PublicationBus>,
    leases: Arc<dyn RunLeases>,
    settings: ThreadSettings,
    residency: Residency,
}

impl Threads {
    /// A registry over `store`.
    pub fn new(store: Arc<dyn JournalStore>, settings: ThreadSettings) -> Threads {
        Threads {
            map: DashMap::new(),
            store,
            bus: Arc::new(crate::store::bus::LocalBus),
            leases: Arc::new(crate::store::lease::LocalLeases),
            settings,
            residency: Residency::default(),
        }
    }

    /// The same registry on a bus shared with other nodes (see
    /// [`crate::store::bus`]); their announcements reach this node's
    /// viewers through [`Threads::deliver`].
    pub fn with_bus(mut self, bus: Arc<dyn PublicationBus>) -> Threads {
        self.bus = bus;
        self
    }

    /// The same registry with its runs' leases shared with other nodes
    /// (see [`crate::store::lease`]).
    pub fn with_leases(mut self, leases: Arc<dyn RunLeases>) -> Threads {
        self.leases = leases;
        self
    }

    /// Feeds other nodes' announcements to [`Threads::deliver`], one at a
    /// time (so each thread's stay in seq order). Nothing to do on a bus
    /// without other nodes.
    pub fn spawn_bus_listener(self: &Arc<Self>) {
        let Some(mut publications) = self.bus.subscribe() else {
            return;
        };
        let threads = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some(publication) = publications.recv().await {
                let Some(threads) = threads.upgrade() else {
                    return;
                };
                threads.deliver(publication).await;
            }
        });
    }

    /// Publishes what another node made durable to this node's viewers of
    /// the thread, if it is in memory here (if not, there is nothing to do:
    /// it loads from the store when next used). A missed announcement is
    /// read back from the store, so viewers get every event, once, in order.
    pub async fn deliver(&self, publication: Publication) {
        let Some(thread) = self.map.get(&publication.key).map(|t| t.clone()) else {
            return;
        };
        thread.publish_remote(publication.events);
    }

    /// Acts on other nodes' requests about runs (see [`Control`]), for the
    /// life of the process. Nothing to do without other nodes.
    pub fn spawn_control_listener(self: &Arc<Self>) {
        let Some(mut controls) = self.leases.controls() else {
            return;
        };
        let threads = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some(control) = controls.recv().await {
                let Some(threads) = threads.upgrade() else {
                    return;
                };
                match control {
                    Control::Cancel { key, run_id } => {
                        if let Some(thread) = threads.map.get(&key).map(|t| t.clone())
                            && thread.cancel_here(Some(&run_id)).is_some()
                        {
                            tracing::info!(thread = %key.thread_id, run = %run_id, "run cancelled at another node's request");
                        }
                    }
                    Control::Released { key } => {
                        if let Some(thread) = threads.map.get(&key).map(|t| t.clone()) {
                            thread.lease_released();
                        }
                    }
                    Control::Resync => {
                        let resident: Vec<Arc<Thread>> =
                            threads.map.iter().map(|t| t.value().clone()).collect();
                        for thread in resident {
                            thread.read_back().await;
                        }
                    }
                }
            }
        });
    }

    /// Closes, every `every`, the runs whose node died (their lease expired
    /// while they were still running; see [`RunLeases::orphans`]) with
    /// `RUN_ERROR gateway_node_lost`; the first pass runs at once, so a node
    /// starting up closes exactly the runs whose lease has expired.
    pub fn spawn_orphan_sweeper(self: &Arc<Self>, every: std::time::Duration) {
        if !self.leases.shared() {
            return;
        }
        let threads = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(threads) = threads.upgrade() else {
                    return;
                };
                match threads.leases.orphans().await {
                    Ok(orphans) => {
                        for key in orphans {
                            threads.close_orphan(&key).await;
                        }
                    }
                    Err(e) => tracing::warn!("cannot look for runs of lost nodes: {e}"),
                }
            }
        });
    }

    /// Closes the run of a dead node on `key`, under a lease of its own (so
    /// two nodes never both close it, and the dead node, should it come
    /// back, cannot append after it).
    async fn close_orphan(&self, key: &ThreadKey) {
        let thread = match self.get(key).await {
            Ok(Some(thread)) => thread,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(thread = %key.thread_id, "cannot load a lost node's thread: {e}");
                return;
            }
        };
        thread.read_back().await;
        let Some(run_id) = thread.open_run() else {
            return;
        };
        let seen = thread.seq_known();
        let lease = match self
            .leases
            .acquire(key, "gateway-closer", seen, (&thread.creator(), None))
            .await
        {
            Ok(crate::store::lease::Acquired::Granted(lease)) => lease,
            _ => return, // taken meanwhile, or moved on: the next pass sees
        };
        let event = crate::protocol::event::run_error(
            "gateway_node_lost",
            "the gateway node running this run stopped; the run was not resumed",
        );
        let fence = (!lease.token.is_empty()).then(|| lease.token.clone());
        let closed = match thread.enqueue(vec![event], fence) {
            Ok(pending) => thread.settle(pending).await.is_ok(),
            Err(_) => false,
        };
        self.leases.release(key, &lease);
        if closed {
            tracing::warn!(tenant = %key.tenant, thread = %key.thread_id, run = %run_id, "closed the run of a lost node");
        }
    }

    /// The same registry, evicting idle threads per `residency`.
    pub fn with_residency(mut self, residency: Residency) -> Threads {
        self.residency = residency;
        self
    }

    /// Threads in memory now.
    pub fn resident(&self) -> usize {
        self.map.len()
    }

    /// Evicts idle threads: those idle past `evict_after`, and the
    /// longest-idle ones while more than `max_resident` are in memory. A
    /// thread anyone still holds (a connection, a run, a request) stays: it
    /// is removed only while the registry holds its one reference, under the
    /// map's lock, so no second copy can ever be loaded beside it. Returns
    /// how many left.
    pub fn evict_idle(&self) -> usize {
        let Residency {
            evict_after,
            max_resident,
        } = self.residency;
        let mut idle: Vec<(ThreadKey, std::time::Instant)> = self
            .map
            .iter()
            .filter(|t| Arc::strong_count(t.value()) == 1)
            .filter_map(|t| Some((t.key().clone(), t.value().idle_since()?)))
            .collect();
        idle.sort_by_key(|(_, since)| *since);
        let mut over = self.map.len().saturating_sub(max_resident);
        let mut evicted = 0;
        for (key, since) in idle {
            let expired = !evict_after.is_zero() && since.elapsed() >= evict_after;
            if !expired && over == 0 {
                continue;
            }
            let gone = self.map.remove_if(&key, |_, t| {
                Arc::strong_count(t) == 1 && t.idle_since().is_some()
            });
            if gone.is_some() {
                self.bus.unwatch(&key);
                evicted += 1;
                over = over.saturating_sub(1);
            }
        }
        evicted
    }

    /// The store (for listing and readiness).
    pub fn store(&self) -> &Arc<dyn JournalStore> {
        &self.store
    }

    /// The thread, loading it from the store if needed; `None` if it does not exist.
    pub async fn get(&self, key: &ThreadKey) -> Result<Option<Arc<Thread>>, StoreError> {
        self.get_watched(key, false).await
    }

    /// [`Threads::get`]; `creating` keeps hearing the thread's announcements
    /// when it does not exist yet (the caller creates it).
    async fn get_watched(
        &self,
        key: &ThreadKey,
        creating: bool,
    ) -> Result<Option<Arc<Thread>>, StoreError> {
        if let Some(t) = self.map.get(key) {
            return Ok(Some(t.clone()));
        }
        // Other nodes' events are heard from before the load on, so none
        // falls between the two (a copy with viewers must stay current).
        if let Err(e) = self.bus.watch(key).await {
            tracing::warn!(thread = %key.thread_id, "not hearing other nodes' events for this thread yet: {e}");
        }
        let store = self.store.clone();
        let k = key.clone();
        let stored = tokio::task::spawn_blocking(move || store.load(&k))
            .await
            .map_err(StoreError::failed)??;
        let Some(stored) = stored else {
            // Creating, the caller inserts the new thread and keeps the watch.
            if !creating {
                self.bus.unwatch(key);
            }
            return Ok(None);
        };
        let thread = Thread::new(
            key.clone(),
            (self.store.clone(), self.bus.clone(), self.leases.clone()),
            self.settings.clone(),
            stored.meta.clone(),
        );
        thread.restore(&mut thread.lock(), stored);
        let thread = self.insert_watched(key, thread);
        // What another node announced between the load and now was not
        // delivered (the thread was not in the map yet): read it back.
        thread.refresh().await;
        Ok(Some(thread))
    }

    /// The thread, created with `creator` when it does not exist.
    pub async fn get_or_create(
        &self,
        key: &ThreadKey,
        creator: &str,
    ) -> Result<Arc<Thread>, StoreError> {
        if let Some(t) = self.get_watched(key, true).await? {
            return Ok(t);
        }
        let now = now_millis();
        let meta = ThreadMeta {
            creator: creator.to_owned(),
            agent: None,
            status: "idle".into(),
            created_ms: now,
            updated_ms: now,
            last_seq: 0,
        };
        let thread = Thread::new(
            key.clone(),
            (self.store.clone(), self.bus.clone(), self.leases.clone()),
            self.settings.clone(),
            meta,
        );
        Ok(self.insert_watched(key, thread))
    }

    /// Puts a thread this caller loaded or created (holding one watch of its
    /// key) in the map, unless another caller's copy got there first: then
    /// that copy is the thread, and this caller's watch is given back.
    fn insert_watched(&self, key: &ThreadKey, thread: Arc<Thread>) -> Arc<Thread> {
        let resident = self
            .map
            .entry(key.clone())
            .or_insert(thread.clone())
            .clone();
        if !Arc::ptr_eq(&resident, &thread) {
            self.bus.unwatch(key);
        }
        resident
    }

    /// Viewers of `key` on this node, if the thread is in memory here.
    pub fn viewers_here(&self, key: &ThreadKey) -> Option<usize> {
        self.map.get(key).map(|t| t.viewer_count())
    }

    /// Runs active or queued on this node.
    pub fn runs_here(&self) -> usize {
        self.map.iter().map(|t| t.value().runs_here()).sum()
    }

    /// Cancels every run active on this node and drops the queued ones
    /// (a draining node starts nothing); returns how many were active.
    pub fn cancel_runs_here(&self) -> usize {
        self.map.iter().map(|t| t.value().cancel_all_here()).sum()
    }

    /// Compacts every idle thread's journal (see [`ThreadSettings::idle_ttl`]).
    pub async fn sweep_idle(&self) {
        let threads: Vec<Arc<Thread>> = self.map.iter().map(|t| t.value().clone()).collect();
        for t in threads {
            t.compact_if_idle().await;
        }
    }

    /// Runs [`Threads::sweep_idle`] and [`Threads::evict_idle`] every
    /// `every`, for the life of the process.
    pub fn spawn_sweeper(self: &Arc<Self>, every: std::time::Duration) {
        let threads = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(t) = threads.upgrade() else { return };
                t.sweep_idle().await;
                let evicted = t.evict_idle();
                if evicted > 0 {
                    tracing::debug!(evicted, resident = t.resident(), "idle threads left memory");
                    let _ = tokio::task::spawn_blocking(release_freed_memory).await;
                }
            }
        });
    }

    /// Closes runs that were active when the process last stopped, with
    /// `RUN_ERROR gateway_restarted`. Returns how many were closed; a thread
    /// that cannot be loaded is logged and skipped.
    pub async fn recover(&self) -> Result<usize, StoreError> {
        let store = self.store.clone();
        let running = tokio::task::spawn_blocking(move || store.running())
            .await
            .map_err(StoreError::failed)??;
        let mut closed = 0;
        for key in running {
            // One unreadable thread must not keep the gateway from starting.
            let thread = match self.get(&key).await {
                Ok(thread) => thread,
                Err(e) => {
                    tracing::error!(tenant = %key.tenant, thread = %key.thread_id, "cannot load thread to close its interrupted run; skipped: {e}");
                    continue;
                }
            };
            if let Some(thread) = thread {
                let event = crate::protocol::event::run_error(
                    "gateway_restarted",
                    "the gateway restarted while this run was active; the run was not resumed",
                );
                thread.append(vec![event]).await;
                closed += 1;
                tracing::warn!(tenant = %key.tenant, thread = %key.thread_id, "closed run interrupted by restart");
            }
        }
        Ok(closed)
    }
}

impl Thread {
    /// Loads `stored` into an empty copy: the base's fold and runIds, then
    /// every event after it.
    pub(super) fn restore(&self, inner: &mut Inner, stored: crate::store::StoredThread) {
        if let Some((base_seq, snapshot)) = &stored.base {
            let v: Value = serde_json::from_slice(snapshot).unwrap_or_default();
            let run = v.get("run").and_then(|r| {
                Some(RunInfo {
                    run_id: r.get("runId")?.as_str()?.to_owned(),
                    status: match r.get("status")?.as_str()? {
                        "running" => RunStatus::Running,
                        "interrupted" => RunStatus::Interrupted,
                        "cancelled" => RunStatus::Cancelled,
                        "error" => RunStatus::Error,
                        _ => RunStatus::Finished,
                    },
                })
            });
            inner.fold = Fold::from_json(&v, run);
            for id in v
                .get("runIds")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(id) = id.as_str() {
                    inner.runs.remember(id);
                }
            }
            inner.base_seq = *base_seq;
            inner.fold.seq = *base_seq;
        }
        for (seq, json) in stored.events {
            match Event::parse(json) {
                Ok(event) => {
                    let entry = Arc::new(Entry::new(self.id.clone(), seq, event));
                    if let (EventType::Meta, Some(cid), Some(id)) = (
                        entry.event.kind(),
                        entry.event.str_field("clientEventId"),
                        entry.event.str_field("id"),
                    ) {
                        inner.meta_ids.insert(cid.to_owned(), id.to_owned());
                    }
                    if *entry.event.kind() == EventType::RunStarted
                        && let Some(run_id) = entry.event.str_field("runId")
                    {
                        inner.runs.remember(run_id);
                    }
                    inner.fold.apply(seq, &entry.event);
                    inner.journal.push_back(entry);
                }
                Err(e) => {
                    tracing::error!(thread = %self.key.thread_id, seq, "unreadable journal event skipped: {e}")
                }
            }
        }
        inner.next_seq = inner.fold.seq.max(stored.meta.last_seq) + 1;
        inner.next_assign = inner.next_seq;
    }
}

/// Hands the heap that evicted threads freed back to the OS. glibc keeps
/// freed memory in its arenas: after 1,000 threads × 1,000 events were
/// evicted RSS stayed at 350–410 MB, and 25 MB once trimmed
/// (docs/benchmarks.md). Elsewhere (musl, other systems) nothing to do.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        unsafe extern "C" {
            fn malloc_trim(pad: usize) -> std::ffi::c_int;
        }
        // SAFETY: glibc's malloc_trim takes no pointers and locks each arena
        // itself; it is safe to call from any thread at any time.
        unsafe {
            malloc_trim(0);
        }
    }
}
