//! The registry of threads in memory: loaded from the store on demand,
//! created by a first run, recovered after a restart, evicted when idle.

use super::drive::fence_of;
use super::*;
use crate::store::lease::Acquired;

/// How many threads stay in memory, and how long once idle. An evicted
/// thread is loaded back from the store on its next use, exactly as it was.
#[derive(Debug, Clone, Copy)]
pub struct Residency {
    /// A thread idle this long leaves memory (zero: only for the budget).
    pub evict_after: std::time::Duration,
    /// Most threads kept in memory; past it the longest-idle ones leave
    /// first (threads in use never do).
    pub max_resident: usize,
    /// Bytes resident threads may hold in all ([`Threads::resident_bytes`]);
    /// past it idle threads leave (longest idle first), then the biggest
    /// tails give back their oldest events.
    pub memory_budget: usize,
    /// What the process may hold beside the budget, as the system counts
    /// it (its resident set): past `memory_budget + memory_overhead` of
    /// RSS the threads shed more ([`super::memory_ceiling`]).
    pub memory_overhead: usize,
}

impl Default for Residency {
    fn default() -> Self {
        Residency {
            evict_after: std::time::Duration::ZERO,
            max_resident: usize::MAX,
            memory_budget: usize::MAX,
            memory_overhead: usize::MAX,
        }
    }
}

/// What a resident thread is counted beside its tail and its fold: the
/// thread's own structures, its viewers' registrations, the registry's
/// entry, its bus subscription. A fixed share, counted high.
pub const THREAD_BYTES: usize = 4 << 10;

/// How often the sweeper compares the node's bytes with its budget.
const BUDGET_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// How often, at most, a node over its memory ceiling with nothing left to
/// shed says so.
const RSS_WARNING_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

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
                    Control::JournalLost { key } => {
                        if let Some(thread) = threads.map.get(&key).map(|t| t.clone()) {
                            thread.journal_lost().await;
                        }
                    }
                    Control::Resync => {
                        let resident: Vec<Arc<Thread>> =
                            threads.map.iter().map(|t| t.value().clone()).collect();
                        tokio::spawn(read_back_all(resident));
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
                crate::fault::point("sweeper.pass").await;
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

    /// Closes what a dead node left on `key` (its run, or a handoff it
    /// decided; see [`super::abandoned`]), under a lease of its own (so two
    /// nodes never both close it, and the dead node, should it come back,
    /// cannot append after it). The store lists the thread as running with
    /// no live lease, which is what makes it the closer's.
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
        let seen = thread.seq_known();
        let lease = match self
            .leases
            .acquire(key, super::run::CLOSER, seen, (&thread.creator(), None))
            .await
        {
            Ok(Acquired::Abandoned(lease)) => lease,
            // No longer running: the listing and the lease check are two
            // reads, and a run that ended between them (its end batch takes
            // the thread out of the running set and deletes its lease in
            // one step) is listed without a lease. Nothing was left open,
            // and closing it anyway would journal a failed handoff after a
            // run that finished.
            Ok(Acquired::Granted(lease)) => {
                // Held for this moment only; a run asking meanwhile waits
                // for it (see `Thread::start_run`).
                crate::fault::point("sweeper.not_orphaned").await;
                self.leases.release(key, &lease);
                return;
            }
            _ => return, // taken meanwhile, or moved on: the next pass sees
        };
        crate::fault::point("sweeper.orphan_leased").await;
        let closed = thread
            .close_abandoned(super::abandoned::NODE_LOST, true, fence_of(&lease))
            .await;
        crate::fault::point("sweeper.orphan_closed").await;
        self.leases.release(key, &lease);
        match closed {
            Ok(true) => {
                tracing::warn!(tenant = %key.tenant, thread = %key.thread_id, "closed what a lost node left on the thread")
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(tenant = %key.tenant, thread = %key.thread_id, "closing what a lost node left failed: {e}")
            }
        }
    }

    /// Drops `key`'s copy when nothing ever happened on it (no event
    /// journaled, no run, no viewer) and nobody but the registry and the
    /// caller holds it: what a refused first run leaves, so the refusal
    /// creates nothing. A request that holds the copy too (about to start
    /// its own run) keeps it, or it would run on a copy the registry no
    /// longer knows while the next request loads a second one. (A store
    /// that recorded the thread when a lease was asked for keeps it; it
    /// holds no events either.)
    pub fn forget_if_unused(&self, key: &ThreadKey) {
        let unused = |_: &ThreadKey, t: &Arc<Thread>| Arc::strong_count(t) <= 2 && t.never_used();
        if self.map.remove_if(key, unused).is_some() {
            self.bus.unwatch(key);
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
        self.evict_within(self.residency.memory_budget).0
    }

    /// [`Threads::evict_idle`] holding the counted bytes to `memory_budget`
    /// (the budget, or less while the process is over its ceiling, see
    /// [`super::memory_ceiling`]). Returns how many threads left and whether
    /// any bytes did.
    fn evict_within(&self, memory_budget: usize) -> (usize, bool) {
        let Residency {
            evict_after,
            max_resident,
            ..
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
            let over_budget = self.total_bytes() > memory_budget;
            if !expired && over == 0 && !over_budget {
                continue;
            }
            crate::fault::point_sync("thread.evicting");
            let gone = self.map.remove_if(&key, |_, t| {
                Arc::strong_count(t) == 1 && t.idle_since().is_some()
            });
            if let Some((_, thread)) = gone {
                self.bus.unwatch(&key);
                evicted += 1;
                over = over.saturating_sub(1);
                let reason = if expired {
                    "idle"
                } else if over_budget {
                    "budget"
                } else {
                    "count"
                };
                evicted_for(reason);
                drop(thread); // its tail's bytes leave the count now
            }
        }
        let shrunk = self.shrink_tails(memory_budget);
        (evicted, evicted > 0 || shrunk)
    }

    /// Still over the budget with every idle thread gone: the biggest
    /// threads give back their tails' oldest events and their older runs'
    /// end views (halved, biggest first, until the node is within budget).
    /// Those events stay in the store; readers of them read them there,
    /// and a view at such a run is rebuilt from them. True when any left.
    fn shrink_tails(&self, memory_budget: usize) -> bool {
        if self.total_bytes() <= memory_budget {
            return false;
        }
        let mut shrunk = false;
        let mut tails: Vec<(usize, Arc<Thread>)> = self
            .map
            .iter()
            .map(|t| (t.value().resident_bytes(), t.value().clone()))
            .filter(|(bytes, _)| *bytes > 0)
            .collect();
        tails.sort_by_key(|(bytes, _)| std::cmp::Reverse(*bytes));
        for (_, thread) in tails {
            if self.total_bytes() <= memory_budget {
                break;
            }
            if thread.shrink() > 0 {
                evicted_for("budget_tail");
                shrunk = true;
            }
        }
        shrunk
    }

    /// The `n` resident threads holding the most bytes (tail and fold),
    /// biggest first: the admin view of where the budget goes. One lock
    /// per resident thread, so for a scrape, not a hot path.
    pub fn biggest(&self, n: usize) -> Vec<(ThreadKey, usize)> {
        let mut all: Vec<(ThreadKey, usize)> = self
            .map
            .iter()
            .map(|t| (t.key().clone(), t.value().resident_bytes()))
            .collect();
        all.sort_by_key(|(_, bytes)| std::cmp::Reverse(*bytes));
        all.truncate(n);
        all
    }

    /// Bytes the resident threads hold, by kind: their tails, their folds
    /// (as estimated at each run's end), and each one's fixed share
    /// ([`THREAD_BYTES`]).
    pub fn resident_bytes(&self) -> [(&'static str, usize); 3] {
        [
            ("tail", self.settings.node_bytes.tails()),
            ("fold", self.settings.node_bytes.folds()),
            ("threads", self.map.len() * THREAD_BYTES),
        ]
    }

    /// All of [`Threads::resident_bytes`].
    pub fn total_bytes(&self) -> usize {
        self.resident_bytes().iter().map(|(_, b)| b).sum()
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
        {
            let mut inner = thread.lock();
            inner.fill(&thread.id, Some(stored));
            thread.settle_residency(&mut inner);
        }
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
            // The budget is looked at every second (an atomic read and
            // one small read of /proc when within it): a node filling up
            // must not wait for the idle sweep's period, which can be a
            // minute.
            let mut tick = tokio::time::interval(BUDGET_CHECK.min(every));
            tick.tick().await;
            let mut last_sweep = tokio::time::Instant::now();
            let mut warned: Option<tokio::time::Instant> = None;
            loop {
                tick.tick().await;
                let Some(t) = threads.upgrade() else { return };
                let Residency {
                    memory_budget,
                    memory_overhead,
                    ..
                } = t.residency;
                let counted = t.total_bytes();
                let rss = super::memory_ceiling::process_rss();
                let (limit, rss_over) =
                    super::memory_ceiling::limit(memory_budget, memory_overhead, counted, rss);
                if counted <= limit && !rss_over && last_sweep.elapsed() < every {
                    continue;
                }
                if last_sweep.elapsed() >= every {
                    last_sweep = tokio::time::Instant::now();
                    t.sweep_idle().await;
                }
                let (evicted, mut freed) = t.evict_within(limit);
                if evicted > 0 {
                    tracing::debug!(evicted, resident = t.resident(), "idle threads left memory");
                }
                if let Some(over) =
                    still_over(t.total_bytes(), limit, rss, memory_budget, memory_overhead)
                {
                    freed |= spill_pages(over).await;
                }
                if rss_over && freed {
                    evicted_for("budget_rss");
                } else if rss_over && warned.is_none_or(|at| at.elapsed() >= RSS_WARNING_EVERY) {
                    warned = Some(tokio::time::Instant::now());
                    tracing::warn!(
                        rss = rss.unwrap_or(0),
                        counted,
                        ceiling = memory_budget.saturating_add(memory_overhead),
                        "the process holds more than threads.memory_budget + threads.memory_overhead \
                         with nothing left to shed: what it holds is in use (watched threads' \
                         conversations, connections, runs in flight); see docs/operations.md, \
                         \"Sizing by bytes\""
                    );
                }
                // What left goes back to the system, or the resident set
                // would not show it (and the next check shed more).
                if evicted > 0 || (rss_over && freed) {
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
            let Some(thread) = thread else { continue };
            match thread
                .close_abandoned(super::abandoned::RESTARTED, true, None)
                .await
            {
                Ok(true) => {
                    closed += 1;
                    tracing::warn!(tenant = %key.tenant, thread = %key.thread_id, "closed run interrupted by restart");
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::error!(tenant = %key.tenant, thread = %key.thread_id, "closing a run interrupted by restart failed: {e}")
                }
            }
        }
        Ok(closed)
    }
}

/// Reads back what each of `threads` missed (after the link to the other
/// nodes was down, or the store lost history), asking again with backoff
/// while the store fails — just after Redis is back the first commands may
/// fail — so no copy stays behind (or on a lost journal) until its next
/// event.
async fn read_back_all(mut threads: Vec<Arc<Thread>>) {
    let mut backoff = std::time::Duration::from_millis(100);
    for _ in 0..8 {
        let mut failed = Vec::new();
        for thread in threads {
            if !thread.read_back().await {
                failed.push(thread);
            }
        }
        if failed.is_empty() {
            return;
        }
        threads = failed;
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(std::time::Duration::from_secs(2));
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

/// Bytes the node is still over after shedding what it could (its count
/// over the limit, or its resident set over the ceiling as read before the
/// shedding), if it is.
fn still_over(
    counted: usize,
    limit: usize,
    rss: Option<usize>,
    budget: usize,
    overhead: usize,
) -> Option<usize> {
    let by_count = counted.saturating_sub(limit);
    let by_rss = rss.map_or(0, |rss| rss.saturating_sub(budget.saturating_add(overhead)));
    let over = by_count.max(by_rss);
    (over > 0).then_some(over)
}

/// The last thing the budget sheds: the oldest sealed pages of the
/// conversations still resident leave memory for the spill file
/// ([`crate::protocol::page_spill`]), at most `over` bytes of them. On a
/// blocking thread (file writes), off the live path. True when any left.
async fn spill_pages(over: usize) -> bool {
    let freed =
        tokio::task::spawn_blocking(move || crate::protocol::page_spill::spill_oldest(over))
            .await
            .unwrap_or(0);
    if freed > 0 {
        evicted_for("budget_spill");
        tracing::debug!(freed, "sealed pages left memory for the spill file");
    }
    freed > 0
}

/// Counts one eviction for `reason` ([`crate::metrics::EvictionLabel`]).
fn evicted_for(reason: &'static str) {
    crate::metrics::metrics()
        .evictions
        .get_or_create(&crate::metrics::EvictionLabel { reason })
        .inc();
}
