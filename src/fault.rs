//! Named fault points: the seams where a node can die or stall between two
//! steps that must both happen (two store writes, a write and a release, a
//! decision and its effect).
//!
//! Crash timing is tested, not hoped for: every path that spans more than one
//! store write or await names the places between its steps with
//! [`point`] (or [`point_sync`] where no await is possible, e.g. under a
//! lock), and `tests/fault_points.rs` starts real nodes that die or stall at
//! each one and checks what viewers, requesters and the journal see.
//!
//! The points cost nothing in a normal build: without the `failpoints`
//! feature they are empty inline functions. With it, each is a
//! [`fail`](https://docs.rs/fail) point configured by the `FAILPOINTS`
//! environment variable at start-up (`name=action;name=action`), with three
//! actions of our own on top of fail's (`sleep`, `pause`, `panic`, …), given
//! as fail's `return(…)` argument:
//!
//! - `return(abort)`: the process aborts on the spot — a `kill -9` at exactly
//!   this step (no destructor, no flush, no lease release);
//! - `return(stop)`: the process sends itself `SIGSTOP` — the whole node
//!   frozen at this step, as a paused VM or a long GC would leave it, until
//!   someone sends `SIGCONT`;
//! - `return(stall:MS)`: only this task waits `MS` milliseconds (the rest of
//!   the node runs on: a slow store answer, a stuck await).
//!
//! `1*return(abort)` fires once. Every fired point says so on stderr
//! (`fault point NAME: ACTION`), which is how a harness knows it was reached.

/// The fault points by name, for the harness and the docs: a test that
/// iterates over them covers a new point as soon as it is listed here.
pub const POINTS: &[&str] = &[
    "run.lease_granted",
    "run.lease_held",
    "run.start_journaled",
    "run.batch_enqueued",
    "run.batch_stored",
    "run.end_enqueued",
    "run.end_stored",
    "run.lease_released",
    "handoff.decided",
    "handoff.target_starting",
    "run.abandoned_leased",
    "sweeper.pass",
    "sweeper.listed",
    "sweeper.not_orphaned",
    "sweeper.orphan_leased",
    "sweeper.orphan_closed",
    "compaction.serialized",
    "thread.evicting",
    "upstream.failover",
];

/// Keeps the points configured while the process runs (from `FAILPOINTS`).
#[cfg(feature = "failpoints")]
pub struct Faults(#[allow(dead_code)] fail::FailScenario<'static>);

/// Nothing to keep without the `failpoints` feature.
#[cfg(not(feature = "failpoints"))]
pub struct Faults;

/// Reads `FAILPOINTS`; keep the value for the life of the process.
#[cfg(feature = "failpoints")]
pub fn setup() -> Faults {
    let scenario = fail::FailScenario::setup();
    if let Ok(points) = std::env::var("FAILPOINTS") {
        eprintln!("fault points armed: {points}");
    }
    Faults(scenario)
}

/// Without the `failpoints` feature there is nothing to set up.
#[cfg(not(feature = "failpoints"))]
pub fn setup() -> Faults {
    Faults
}

/// What an armed point asks for, if anything (fail's own actions, such as
/// `sleep` or `panic`, have already run inside `eval`).
#[cfg(feature = "failpoints")]
fn fired(name: &str) -> Option<String> {
    let action = fail::eval(name, |arg| arg.unwrap_or_default())?;
    eprintln!("fault point {name}: {action}");
    match action.as_str() {
        "abort" => std::process::abort(),
        "stop" => {
            // SAFETY: raise() is async-signal-safe and takes no pointers.
            unsafe {
                libc::raise(libc::SIGSTOP);
            }
            None
        }
        _ => action.strip_prefix("stall:").map(|ms| ms.trim().to_owned()),
    }
}

/// A fault point inside an async path: see the module docs.
#[cfg(feature = "failpoints")]
pub async fn point(name: &'static str) {
    if let Some(ms) = fired(name) {
        let ms: u64 = ms.parse().unwrap_or(1000);
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}

/// A fault point where no await is possible (a stall blocks the thread).
#[cfg(feature = "failpoints")]
pub fn point_sync(name: &'static str) {
    if let Some(ms) = fired(name) {
        let ms: u64 = ms.parse().unwrap_or(1000);
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// A fault point: nothing without the `failpoints` feature.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub async fn point(_name: &'static str) {}

/// A fault point: nothing without the `failpoints` feature.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn point_sync(_name: &'static str) {}
