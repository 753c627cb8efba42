//! A backend's circuit: passive health from the runs it serves.
//!
//! Only failures *before the agent's first event* count (a refused or
//! failed connection, a non-2xx answer, a response that is not an event
//! stream, a body that is empty or breaks, a first-event timeout): they are
//! the ones that say the replica is not serving, and the ones a run is
//! retried after (see [`super::client`]).
//! A failure later in a run (a broken stream, a protocol violation) is the
//! agent's answer to that run, not a sign the replica is down.
//!
//! `eject_after` such failures in a row open the circuit for `eject_base`,
//! doubled for each ejection in a row up to `eject_max` (a replica that
//! keeps failing is tried less and less often). When the interval has
//! passed the circuit half-opens: exactly one run is let through as a
//! probe; its first event closes the circuit, its failure opens it again
//! for twice as long. A probe that ends without a verdict (cancelled) lets
//! the next run probe.

use std::time::{Duration, Instant};

/// Ejection settings (from `pool`).
#[derive(Debug, Clone, Copy)]
pub struct Ejection {
    pub after: u32,
    pub base: Duration,
    pub max: Duration,
}

/// Where a backend's circuit stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Serving; `failures` in a row so far.
    Closed { failures: u32 },
    /// Ejected until `until`.
    Open { until: Instant },
    /// Past its ejection: one probe run at a time (`probing`).
    HalfOpen { probing: bool },
}

/// A backend's circuit and how many ejections in a row it has had.
#[derive(Debug, Clone)]
pub struct Circuit {
    state: State,
    /// Ejections since the circuit last closed (the next interval's doubling).
    streak: u32,
}

/// What [`Circuit::admit`] lets a run do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// The circuit is closed.
    Yes,
    /// The run is the half-open probe.
    Probe,
    /// Ejected, or another run is probing.
    No,
}

impl Default for Circuit {
    fn default() -> Self {
        Circuit {
            state: State::Closed { failures: 0 },
            streak: 0,
        }
    }
}

impl Circuit {
    /// The state now (an ejection that has run out reads as half-open).
    pub fn state(&mut self, now: Instant) -> State {
        if let State::Open { until } = self.state
            && until <= now
        {
            self.state = State::HalfOpen { probing: false };
        }
        self.state
    }

    /// Whether a run may go to this backend now (without taking it: see
    /// [`Circuit::take`]).
    pub fn admits(&mut self, now: Instant) -> Admit {
        match self.state(now) {
            State::Closed { .. } => Admit::Yes,
            State::HalfOpen { probing: false } => Admit::Probe,
            _ => Admit::No,
        }
    }

    /// A run was sent here as the half-open probe.
    pub fn take_probe(&mut self) {
        if let State::HalfOpen { .. } = self.state {
            self.state = State::HalfOpen { probing: true };
        }
    }

    /// The agent's first event arrived: the backend serves.
    pub fn success(&mut self) {
        self.state = State::Closed { failures: 0 };
        self.streak = 0;
    }

    /// A failure before the first event; `true` when it ejected the backend.
    pub fn failure(&mut self, now: Instant, cfg: &Ejection) -> bool {
        let eject = match self.state(now) {
            State::Closed { failures } => {
                let failures = failures + 1;
                self.state = State::Closed { failures };
                failures >= cfg.after
            }
            State::HalfOpen { .. } => true,
            // A run sent before the ejection (or in panic routing) failing
            // too: the ejection stands as it is.
            State::Open { .. } => false,
        };
        if eject {
            let factor = 1u32.checked_shl(self.streak.min(20)).unwrap_or(u32::MAX);
            let interval = cfg.base.saturating_mul(factor).min(cfg.max);
            self.state = State::Open {
                until: now + interval,
            };
            self.streak = self.streak.saturating_add(1);
        }
        eject
    }

    /// The probe run ended without a verdict: the next run probes.
    pub fn probe_abandoned(&mut self) {
        if let State::HalfOpen { probing: true } = self.state {
            self.state = State::HalfOpen { probing: false };
        }
    }

    /// For listings: `healthy`, `ejected` or `half-open`.
    pub fn label(&mut self, now: Instant) -> &'static str {
        match self.state(now) {
            State::Closed { .. } => "healthy",
            State::Open { .. } => "ejected",
            State::HalfOpen { .. } => "half-open",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: Ejection = Ejection {
        after: 2,
        base: Duration::from_secs(1),
        max: Duration::from_secs(3),
    };

    #[test]
    fn consecutive_failures_eject_for_growing_intervals_and_a_probe_closes() {
        let t0 = Instant::now();
        let mut c = Circuit::default();
        assert!(!c.failure(t0, &CFG));
        c.success(); // a success in between resets the count
        assert!(!c.failure(t0, &CFG));
        assert!(c.failure(t0, &CFG), "second failure in a row ejects");
        assert_eq!(c.admits(t0), Admit::No);
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(c.admits(t1), Admit::Probe);
        c.take_probe();
        assert_eq!(c.admits(t1), Admit::No, "one probe at a time");
        c.probe_abandoned();
        assert_eq!(c.admits(t1), Admit::Probe);
        c.take_probe();
        assert!(c.failure(t1, &CFG), "a failed probe ejects again");
        assert_eq!(c.admits(t1 + Duration::from_millis(1999)), Admit::No);
        let t2 = t1 + Duration::from_secs(2);
        assert_eq!(c.admits(t2), Admit::Probe, "twice as long");
        c.take_probe();
        assert!(c.failure(t2, &CFG));
        assert_eq!(c.admits(t2 + Duration::from_millis(2999)), Admit::No);
        let t3 = t2 + Duration::from_secs(3);
        assert_eq!(c.admits(t3), Admit::Probe, "capped at max");
        c.take_probe();
        c.success();
        assert_eq!(c.admits(t3), Admit::Yes);
        assert!(!c.failure(t3, &CFG), "closed again: the count restarts");
        assert!(c.failure(t3, &CFG));
        assert_eq!(
            c.admits(t3 + Duration::from_secs(1)),
            Admit::Probe,
            "the streak restarted too"
        );
    }
}
