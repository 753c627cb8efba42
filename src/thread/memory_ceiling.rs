//! The budget held against what the operating system counts.
//!
//! `threads.memory_budget` counts the bytes resident threads hold (their
//! hot tails, folds and a fixed share each). That count is what the
//! registry sheds by, but it is not what an out-of-memory killer or a
//! container limit looks at: the process's resident set also holds the
//! allocator's free-but-kept pages, connection buffers, run bodies in
//! flight and whatever the count does not know. Under 200 busy watched
//! threads held to a 96 MiB budget, RSS reached three times the budget on
//! every allocator tried (docs/benchmarks.md, "Fourth pass"), with the
//! count itself within the budget. So the count is also checked against
//! the resident set: when RSS passes `memory_budget + memory_overhead`,
//! the bytes the count may hold come down by what RSS is over, the coldest
//! bytes leave as for the budget itself (old events of the biggest tails,
//! then idle threads), and freed pages go back to the system. What left is
//! in the store; a reader of it waits for a store read, nothing else.
//!
//! A feedback, not a model: freeing counted bytes gives back fewer pages
//! than it frees (fragmentation), so the limit is recomputed every check
//! from what RSS is then, and it relaxes back to the budget as soon as RSS
//! is under the ceiling again.

/// How many bytes the counted resident threads may hold now: the budget,
/// or less while the process's resident set (`rss`, when known) is above
/// `budget + overhead` — by what it is above. `counted` is what they hold
/// now. The second value is true when the resident set was over.
pub fn limit(budget: usize, overhead: usize, counted: usize, rss: Option<usize>) -> (usize, bool) {
    let ceiling = budget.saturating_add(overhead);
    match rss {
        Some(rss) if rss > ceiling => (counted.saturating_sub(rss - ceiling).min(budget), true),
        _ => (budget, false),
    }
}

/// The process's resident set in bytes (`VmRSS`), where the system says
/// it (Linux); `None` elsewhere, and the budget is then the count alone.
pub fn process_rss() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: usize = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn the_count_comes_down_by_what_the_resident_set_is_over() {
        // Within the ceiling, or unknown: the budget.
        assert_eq!(
            limit(96 * MIB, 64 * MIB, 90 * MIB, Some(150 * MIB)),
            (96 * MIB, false)
        );
        assert_eq!(limit(96 * MIB, 64 * MIB, 90 * MIB, None), (96 * MIB, false));
        // 40 MiB over: the count (90) must come down to 50.
        assert_eq!(
            limit(96 * MIB, 64 * MIB, 90 * MIB, Some(200 * MIB)),
            (50 * MIB, true)
        );
        // Never above the budget, never below nothing.
        assert_eq!(
            limit(96 * MIB, 64 * MIB, 120 * MIB, Some(170 * MIB)),
            (96 * MIB, true)
        );
        assert_eq!(
            limit(96 * MIB, 64 * MIB, 10 * MIB, Some(400 * MIB)),
            (0, true)
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_resident_set_is_read_and_grows_with_what_is_touched() {
        let before = process_rss().expect("VmRSS on Linux");
        assert!(before > 0);
        // Seen by the optimizer as used, or a release build may not
        // allocate it at all.
        let held = std::hint::black_box(vec![1u8; 64 * MIB]);
        let after = process_rss().unwrap();
        assert!(after >= before + 32 * MIB, "{before} → {after}");
        drop(held);
    }
}
