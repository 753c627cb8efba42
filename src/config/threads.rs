//! `[threads]`: what a thread keeps and for how long — its hot tail and
//! the node's memory budget in bytes, compaction, residency, caps — with
//! their checks.

use super::*;

/// Per-thread limits.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ThreadsConfig {
    /// A journal longer than this is compacted into its fold when a run ends.
    pub max_events: usize,
    /// Live lag (unsent bytes) a reader may have before it switches to
    /// reading the journal until it catches up.
    pub viewer_queue_bytes: usize,
    /// A thread idle this long (no run, no event) has its journal compacted
    /// into its snapshot; `0s` never.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub idle_ttl: Duration,
    /// A thread nobody uses (no viewer, no run) for this long leaves memory;
    /// it loads back from the journal on its next use. `0s`: only for the budget.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub evict_after: Duration,
    /// Most threads kept in memory; past it the longest-idle unused ones leave.
    pub max_resident: usize,
    /// Most runs one thread takes in its life; past it a run is refused
    /// `too_large`. `0`: no cap.
    pub max_runs: u64,
    /// Most runs that fork one thread (branches, regenerates, edits); past
    /// it a fork is refused `too_large`. `0`: no cap.
    pub max_branches: usize,
    /// Bytes of memory a thread's newest events may take (its hot tail;
    /// full chunks of events are compressed, so it keeps several times as
    /// much JSON); older ones stay in the store and are read from there
    /// when a reader asks for them (a catch-up, a join from an older
    /// cursor, a fork's replay). The events of a run still running always
    /// stay.
    #[serde(with = "byte_size")]
    #[schemars(with = "byte_size::Text")]
    pub hot_bytes: u64,
    /// What this node's resident threads may hold in all (their hot tails
    /// and a fixed share per thread); past it the coldest bytes leave first:
    /// the oldest events of the biggest tails, then whole idle threads.
    /// Unset: a quarter of the machine's (or cgroup's) memory, at least
    /// 64 MiB ([`ThreadsConfig::memory_budget`]).
    #[serde(with = "byte_size::option")]
    #[schemars(with = "Option<byte_size::Text>")]
    pub memory_budget: Option<u64>,
    /// What the process may hold beside `memory_budget`, as the system
    /// counts it (its resident set: code, runtime, store caches, connection
    /// buffers, runs in flight, the allocator's kept pages). While RSS is
    /// above `memory_budget + memory_overhead`, the threads shed more (old
    /// events of the biggest tails, then idle threads) until it is not;
    /// size a container's limit above the two. Default 64 MiB.
    #[serde(with = "byte_size")]
    #[schemars(with = "byte_size::Text")]
    pub memory_overhead: u64,
    /// Text a sealed page of a conversation's finished messages holds
    /// (`src/protocol/sealed.rs`): a conversation with two pages' worth of
    /// finished messages not on a page packs the oldest into one, about a
    /// third to a fifth of their size. Smaller pages seal sooner and unpack
    /// faster, larger ones pack better. At least 1 byte (every run's end
    /// seals what is finished: for tests); `1TiB` never seals. A page
    /// holds at most 64 MiB of text, whatever this says.
    #[serde(with = "byte_size")]
    #[schemars(with = "byte_size::Text")]
    pub sealed_page_bytes: u64,
    /// Most bytes of sealed pages (their packed text, and each message's
    /// entry and id) this node may move to its spill file once it has shed
    /// everything else its budget allows (old events of tails, idle
    /// threads): the oldest pages of watched threads' conversations leave
    /// memory and are read back from the file (`src/protocol/page_spill.rs`).
    /// `0`: pages never leave memory.
    #[serde(with = "byte_size")]
    #[schemars(with = "byte_size::Text")]
    pub spill_bytes: u64,
    /// Directory of the spill file (created unlinked: nothing is left in it
    /// when the process ends). Put it on a disk, not a tmpfs (which is
    /// memory again). Unset: the SQLite journal's directory, or the
    /// system's temporary directory with the other stores.
    pub spill_dir: Option<std::path::PathBuf>,
    /// Who is watching a thread (the subscribe reply's `presence`, the
    /// `presence` frames, `GET /v1/threads/{id}/presence`); off: empty lists.
    pub presence: bool,
    /// How often viewers hear who joined and left (coalesced: one frame per
    /// thread per interval at most); with several nodes each node renews
    /// its viewers' record this often, and a record unrenewed for five
    /// intervals (a dead node's) lapses.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub presence_interval: Duration,
    /// Viewers holding any of these roles watch without being listed.
    pub presence_hide_roles: Vec<String>,
}

impl ThreadsConfig {
    /// The node's memory budget: as set, or a share of the machine's.
    pub fn memory_budget(&self) -> u64 {
        self.memory_budget
            .unwrap_or_else(byte_size::default_memory_budget)
    }
}

impl Default for ThreadsConfig {
    fn default() -> Self {
        ThreadsConfig {
            max_events: 10_000,
            viewer_queue_bytes: 1024 * 1024,
            idle_ttl: Duration::from_secs(24 * 3600),
            evict_after: Duration::from_secs(600),
            max_resident: 100_000,
            max_runs: 0,
            max_branches: 0,
            hot_bytes: 4 << 20,
            memory_budget: None,
            memory_overhead: 64 << 20,
            sealed_page_bytes: crate::protocol::sealed::PAGE_TEXT as u64,
            spill_bytes: 1 << 30,
            spill_dir: None,
            presence: true,
            presence_interval: Duration::from_secs(1),
            presence_hide_roles: Vec::new(),
        }
    }
}

impl ThreadsConfig {
    /// Checks of `[threads]`.
    pub(super) fn check(&self, bad: &mut impl FnMut(String, String)) {
        if self.viewer_queue_bytes < 4096 {
            bad(
                "threads.viewer_queue_bytes".into(),
                "must be at least 4096".into(),
            );
        }
        if self.presence_interval < Duration::from_millis(50) {
            bad(
                "threads.presence_interval".into(),
                "must be at least 50ms".into(),
            );
        }
        if self.hot_bytes < 1024 {
            bad("threads.hot_bytes".into(), "must be at least 1KiB".into());
        }
        if self.sealed_page_bytes == 0 {
            bad(
                "threads.sealed_page_bytes".into(),
                "must be at least 1 byte".into(),
            );
        }
        if self.memory_overhead < 16 << 20 {
            bad(
                "threads.memory_overhead".into(),
                "must be at least 16MiB (what a gateway process holds before any thread)".into(),
            );
        }
        if self.memory_budget() < self.hot_bytes {
            bad(
                "threads.memory_budget".into(),
                format!(
                    "must be at least threads.hot_bytes ({})",
                    byte_size::format(self.hot_bytes)
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(c: &ThreadsConfig) -> Vec<(String, String)> {
        let mut out = Vec::new();
        c.check(&mut |k, m| out.push((k, m)));
        out
    }

    #[test]
    fn a_sealed_page_holds_at_least_a_byte() {
        let mut c = ThreadsConfig {
            memory_budget: Some(64 << 20),
            ..Default::default()
        };
        assert!(problems(&c).is_empty(), "{:?}", problems(&c));
        assert_eq!(c.sealed_page_bytes, 16 << 10);
        c.sealed_page_bytes = 0;
        assert_eq!(
            problems(&c),
            [(
                "threads.sealed_page_bytes".to_owned(),
                "must be at least 1 byte".to_owned()
            )]
        );
        c.sealed_page_bytes = 1;
        assert!(problems(&c).is_empty());
    }
}
