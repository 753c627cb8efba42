//! Prometheus counters, kept as plain atomics: the hot path pays one relaxed
//! add per event and nothing else.

use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Process-wide counters.
#[derive(Default)]
pub struct Metrics {
    pub runs_started: AtomicU64,
    pub events_forwarded: AtomicU64,
    pub auth_failures: AtomicU64,
    /// 1 when the last reload succeeded (or none happened), 0 after a refused one.
    reload_ok: AtomicU64,
    reloads: AtomicU64,
    /// Runs that ended, by terminal code (`success`, `interrupt`, `upstream_timeout`, …).
    runs_ended: Mutex<Vec<(String, u64)>>,
}

impl Metrics {
    /// Records a reload attempt.
    pub fn reloaded(&self, ok: bool) {
        self.reloads.fetch_add(1, Relaxed);
        self.reload_ok.store(if ok { 0 } else { 1 }, Relaxed);
    }

    /// Counts a finished run under `outcome`.
    pub fn run_ended(&self, outcome: &str) {
        let mut ended = self
            .runs_ended
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match ended.iter_mut().find(|(o, _)| o == outcome) {
            Some((_, n)) => *n += 1,
            None => ended.push((outcome.to_owned(), 1)),
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
            );
        };
        counter(
            &mut out,
            "agui_runs_started_total",
            "Runs sent to an upstream agent.",
            self.runs_started.load(Relaxed),
        );
        counter(
            &mut out,
            "agui_events_forwarded_total",
            "Events forwarded to clients.",
            self.events_forwarded.load(Relaxed),
        );
        counter(
            &mut out,
            "agui_auth_failures_total",
            "Requests refused for authentication.",
            self.auth_failures.load(Relaxed),
        );
        counter(
            &mut out,
            "agui_config_reloads_total",
            "Configuration reload attempts.",
            self.reloads.load(Relaxed),
        );
        // Stored inverted so the zero default means "fine".
        let ok = 1 - self.reload_ok.load(Relaxed).min(1);
        let _ = writeln!(
            out,
            "# HELP agui_config_reload_success 1 if the last configuration reload succeeded.\n# TYPE agui_config_reload_success gauge\nagui_config_reload_success {ok}"
        );
        let _ = writeln!(
            out,
            "# HELP agui_runs_ended_total Runs that ended, by outcome or error code.\n# TYPE agui_runs_ended_total counter"
        );
        for (outcome, n) in self
            .runs_ended
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
        {
            let _ = writeln!(out, "agui_runs_ended_total{{outcome=\"{outcome}\"}} {n}");
        }
        out
    }
}
