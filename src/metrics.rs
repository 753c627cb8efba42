//! Process metrics, exposed at `/metrics` in the Prometheus/OpenMetrics text
//! format (the `prometheus-client` crate). One registry per process, reached
//! through [`metrics()`] from every layer that counts something, so no layer
//! has to carry a handle through the data path.
//!
//! Label values are bounded by configuration (agent ids, rule names) or by a
//! fixed set the gateway defines (transports, outcomes, error classes) —
//! never by a string an agent or a client sent, so a misbehaving agent cannot
//! blow up the number of series.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use std::sync::LazyLock;

/// A run's agent.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AgentLabel {
    pub agent: String,
}

/// How a run ended: `success`, `interrupt`, `cancelled`, `agent_error`,
/// `upstream_error`, `policy_violation` or `gateway_error` (see
/// [`outcome_class`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RunEndLabels {
    pub agent: String,
    pub outcome: &'static str,
}

/// An upstream failure the gateway turned into a `RUN_ERROR`, by its code
/// class (`upstream_http_5xx`, `upstream_timeout`, …).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamErrorLabels {
    pub agent: String,
    pub code: String,
}

/// One backend of an agent's pool, named by its URL without credentials
/// or query (bounded by configuration).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendLabels {
    pub agent: String,
    pub backend: String,
}

/// A client transport: `ws`, `sse` (join streams) or `http` (run responses).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransportLabel {
    pub transport: &'static str,
}

/// What resident bytes hold: `tail` (threads' hot tails of events) or
/// `threads` (each resident thread's fixed share: fold, runs, viewers).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResidentKindLabel {
    pub kind: &'static str,
}

/// One of the biggest resident threads (`agui_thread_resident_bytes`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ThreadLabel {
    pub tenant: String,
    pub thread: String,
}

/// Why memory was given back: `idle` (`threads.evict_after`), `count`
/// (`threads.max_resident`), `budget` (a whole thread, over
/// `threads.memory_budget`), `budget_tail` (old events of a tail) or
/// `budget_rss` (a check that shed more because the process's resident set
/// was over `threads.memory_budget + threads.memory_overhead`) or
/// `budget_spill` (a check that moved sealed pages to the spill file).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvictionLabel {
    pub reason: &'static str,
}

/// A refused authentication, by reason (`token_expired`, …) and transport.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuthFailureLabels {
    pub reason: &'static str,
    pub transport: &'static str,
}

/// A policy rule that decided something (`deny`, `redact`, `limit`, `rate`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    pub rule: String,
    pub decision: &'static str,
}

/// A handoff, by source and target agent and what came of it (`started`,
/// `refused`, `approval`, `declined`, `failed`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HandoffLabels {
    pub from: String,
    pub to: String,
    pub result: &'static str,
}

/// A configuration reload, by result (`ok`, `refused`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabel {
    pub result: &'static str,
}

/// A JWKS fetch, by result (`ok`, `error`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FetchLabel {
    pub result: &'static str,
}

/// Every metric of the process.
pub struct Metrics {
    registry: Registry,
    /// Open client connections.
    pub connections: Family<TransportLabel, Gauge>,
    /// WebSocket connections that authenticated.
    pub sessions: Gauge,
    /// Connections refused at `server.max_connections`.
    pub connections_refused: Counter,
    /// Threads in memory (set at scrape time).
    pub resident_threads: Gauge,
    /// Runs active or queued on this node (set at scrape time).
    pub active_runs: Gauge,
    pub runs_started: Family<AgentLabel, Counter>,
    pub runs_ended: Family<RunEndLabels, Counter>,
    pub run_duration: Family<AgentLabel, Histogram>,
    /// From sending the request to the agent's first event.
    pub upstream_first_event: Family<AgentLabel, Histogram>,
    pub upstream_errors: Family<UpstreamErrorLabels, Counter>,
    /// Per backend of a pool (docs/operations.md, "Backend pools").
    pub backend_runs: Family<BackendLabels, Counter>,
    pub backend_failures: Family<BackendLabels, Counter>,
    pub backend_ejections: Family<BackendLabels, Counter>,
    pub backend_in_flight: Family<BackendLabels, Gauge>,
    pub backend_first_event: Family<BackendLabels, Histogram>,
    /// Runs sent to another backend after a failure before the first event.
    pub upstream_retries: Family<AgentLabel, Counter>,
    /// Requests sent again on a new connection after the kept-alive one
    /// closed under them before any answer (`upstream::keep_alive`).
    pub upstream_resends: Family<AgentLabel, Counter>,
    /// Events received from agents.
    pub events_in: Family<AgentLabel, Counter>,
    /// Events sent to clients.
    pub events_out: Family<TransportLabel, Counter>,
    /// From handing a batch to the store to its acknowledgement.
    pub journal_append: Histogram,
    /// Events per journal batch.
    pub journal_batch_events: Histogram,
    pub policy_decisions: Family<PolicyLabels, Counter>,
    /// Handoffs between agents (`handoffs_total{from,to,result}`).
    pub handoffs: Family<HandoffLabels, Counter>,
    pub auth_failures: Family<AuthFailureLabels, Counter>,
    /// Fetches of `auth.jwks_url`: what the key server sees of the gateway.
    pub jwks_fetches: Family<FetchLabel, Counter>,
    pub reloads: Family<ReloadLabel, Counter>,
    /// 1 when the last reload succeeded (or none happened), 0 after a refused one.
    pub reload_success: Gauge,
    /// Bytes of live frames queued for clients and not yet written.
    pub outbox_bytes: Gauge,
    /// Readers (viewers, join streams, requesters) reading the journal
    /// because they fell behind the live stream by more than their budget.
    pub readers_catching_up: Gauge,
    /// Bytes resident threads hold, by kind (set at scrape time).
    pub resident_bytes: Family<ResidentKindLabel, Gauge>,
    /// The biggest resident threads' bytes (tail and fold), refilled at
    /// each scrape: what an operator looks at first when the budget
    /// bites.
    pub thread_resident_bytes: Family<ThreadLabel, Gauge>,
    /// The process's resident set as the system counts it (set at scrape
    /// time; Linux): held to `threads.memory_budget + threads.memory_overhead`.
    pub process_resident_bytes: Gauge,
    /// Bytes of sealed pages' packed text in the spill file (set at scrape
    /// time; `threads.spill_bytes` bounds it).
    pub spilled_page_bytes: Gauge,
    /// Threads and tails that left memory, by reason.
    pub evictions: Family<EvictionLabel, Counter>,
    /// Events read back from the store because they had left memory.
    pub cold_reads: Counter,
    /// Size of the SQLite journal's WAL file, after the latest commit.
    pub journal_wal_bytes: Gauge,
    /// Resets of the SQLite journal's log by its writer: the background
    /// checkpoint fell behind, and appends waited for the reset's fsync.
    pub journal_wal_resets: Counter,
    /// Restarts of the SQLite journal's log by the background checkpoint
    /// (the normal way the log is kept within its bound).
    pub journal_wal_restarts: Counter,
}

fn seconds_buckets() -> Histogram {
    // 5 ms … ~78 min (0.005 × 2.5^15 s): past an agent's 30 min default
    // total timeout, so a long run lands in a bucket, not only in +Inf.
    Histogram::new(exponential_buckets(0.005, 2.5, 16))
}

fn latency_buckets() -> Histogram {
    // 50 µs … ~13 s.
    Histogram::new(exponential_buckets(0.000_05, 2.3, 16))
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::with_prefix("agui");
        registry.register(
            "build",
            "Build of this gateway.",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        let m = Metrics {
            connections: Family::default(),
            sessions: Gauge::default(),
            connections_refused: Counter::default(),
            resident_threads: Gauge::default(),
            active_runs: Gauge::default(),
            runs_started: Family::default(),
            runs_ended: Family::default(),
            run_duration: Family::new_with_constructor(seconds_buckets),
            upstream_first_event: Family::new_with_constructor(seconds_buckets),
            upstream_errors: Family::default(),
            backend_runs: Family::default(),
            backend_failures: Family::default(),
            backend_ejections: Family::default(),
            backend_in_flight: Family::default(),
            backend_first_event: Family::new_with_constructor(seconds_buckets),
            upstream_retries: Family::default(),
            upstream_resends: Family::default(),
            events_in: Family::default(),
            events_out: Family::default(),
            journal_append: latency_buckets(),
            journal_batch_events: Histogram::new(exponential_buckets(1.0, 2.0, 14)),
            policy_decisions: Family::default(),
            handoffs: Family::default(),
            auth_failures: Family::default(),
            jwks_fetches: Family::default(),
            reloads: Family::default(),
            reload_success: Gauge::default(),
            outbox_bytes: Gauge::default(),
            readers_catching_up: Gauge::default(),
            resident_bytes: Family::default(),
            thread_resident_bytes: Family::default(),
            process_resident_bytes: Gauge::default(),
            spilled_page_bytes: Gauge::default(),
            evictions: Family::default(),
            cold_reads: Counter::default(),
            journal_wal_bytes: Gauge::default(),
            journal_wal_resets: Counter::default(),
            journal_wal_restarts: Counter::default(),
            registry: Registry::default(),
        };
        m.reload_success.set(1);
        let r = &mut registry;
        r.register(
            "connections",
            "Open client connections by transport.",
            m.connections.clone(),
        );
        r.register(
            "ws_sessions",
            "Authenticated WebSocket sessions.",
            m.sessions.clone(),
        );
        r.register(
            "connections_refused",
            "Connections refused at server.max_connections.",
            m.connections_refused.clone(),
        );
        r.register(
            "resident_threads",
            "Threads in memory.",
            m.resident_threads.clone(),
        );
        r.register(
            "active_runs",
            "Runs active or queued on this node.",
            m.active_runs.clone(),
        );
        r.register(
            "runs_started",
            "Runs started, by agent.",
            m.runs_started.clone(),
        );
        r.register(
            "runs_ended",
            "Runs ended, by agent and outcome class.",
            m.runs_ended.clone(),
        );
        r.register(
            "run_duration_seconds",
            "Run duration, by agent.",
            m.run_duration.clone(),
        );
        r.register(
            "upstream_first_event_seconds",
            "Time from the upstream request to the agent's first event.",
            m.upstream_first_event.clone(),
        );
        r.register(
            "upstream_errors",
            "Runs the gateway ended for an upstream failure, by code class.",
            m.upstream_errors.clone(),
        );
        r.register(
            "upstream_backend_runs",
            "Requests sent to each backend of an agent (a retried run counts on each).",
            m.backend_runs.clone(),
        );
        r.register(
            "upstream_backend_failures",
            "Requests to a backend that failed before the agent's first event (connect, 5xx, timeout).",
            m.backend_failures.clone(),
        );
        r.register(
            "upstream_backend_ejections",
            "Times a backend was ejected after failures in a row.",
            m.backend_ejections.clone(),
        );
        r.register(
            "upstream_backend_in_flight",
            "Runs in flight on each backend.",
            m.backend_in_flight.clone(),
        );
        r.register(
            "upstream_backend_first_event_seconds",
            "Time from the request to a backend to the agent's first event.",
            m.backend_first_event.clone(),
        );
        r.register(
            "upstream_retries",
            "Runs retried on another backend after a failure before the first event.",
            m.upstream_retries.clone(),
        );
        r.register(
            "upstream_resends",
            "Requests sent again on a new connection after the kept-alive one closed under them before any answer.",
            m.upstream_resends.clone(),
        );
        r.register(
            "events_in",
            "Events received from agents.",
            m.events_in.clone(),
        );
        r.register(
            "events_out",
            "Events sent to clients, by transport.",
            m.events_out.clone(),
        );
        r.register(
            "journal_append_seconds",
            "From handing a batch to the journal to its acknowledgement.",
            m.journal_append.clone(),
        );
        r.register(
            "journal_batch_events",
            "Events per journal batch.",
            m.journal_batch_events.clone(),
        );
        r.register(
            "policy_decisions",
            "Policy rules that denied, redacted, limited or rate-limited.",
            m.policy_decisions.clone(),
        );
        r.register(
            "handoffs",
            "Handoffs between agents, by source, target and result.",
            m.handoffs.clone(),
        );
        r.register(
            "auth_failures",
            "Refused authentications, by reason and transport.",
            m.auth_failures.clone(),
        );
        r.register(
            "jwks_fetches",
            "Fetches of auth.jwks_url, by result.",
            m.jwks_fetches.clone(),
        );
        r.register(
            "config_reloads",
            "Configuration reloads, by result.",
            m.reloads.clone(),
        );
        r.register(
            "config_reload_success",
            "1 if the last configuration reload succeeded.",
            m.reload_success.clone(),
        );
        r.register(
            "outbox_bytes",
            "Bytes of live frames queued for clients, not yet written.",
            m.outbox_bytes.clone(),
        );
        r.register(
            "resident_bytes",
            "Bytes resident threads hold, by kind (held to threads.memory_budget).",
            m.resident_bytes.clone(),
        );
        r.register(
            "thread_resident_bytes",
            "Bytes the biggest resident threads hold (tail and fold), the 10 biggest at scrape time.",
            m.thread_resident_bytes.clone(),
        );
        r.register(
            "process_resident_bytes",
            "The process's resident set (held to threads.memory_budget + threads.memory_overhead).",
            m.process_resident_bytes.clone(),
        );
        r.register(
            "spilled_page_bytes",
            "Bytes of sealed pages' packed text moved to the spill file (bounded by threads.spill_bytes).",
            m.spilled_page_bytes.clone(),
        );
        r.register(
            "evictions",
            "Threads (idle, count, budget) and old tail events (budget_tail) that left memory; budget_rss counts checks that shed more for the process's resident set; budget_spill checks that moved sealed pages to the spill file.",
            m.evictions.clone(),
        );
        r.register(
            "cold_reads",
            "Events read back from the store after they left memory.",
            m.cold_reads.clone(),
        );
        r.register(
            "readers_catching_up",
            "Readers reading the journal after falling behind the live stream.",
            m.readers_catching_up.clone(),
        );
        r.register(
            "journal_wal_bytes",
            "Size of the SQLite journal's write-ahead log file (bounded by store.max_wal_bytes).",
            m.journal_wal_bytes.clone(),
        );
        r.register(
            "journal_wal_resets",
            "Resets of the SQLite journal's log by its writer, appends waiting meanwhile (the background checkpoint fell behind; normally 0).",
            m.journal_wal_resets.clone(),
        );
        r.register(
            "journal_wal_restarts",
            "Restarts of the SQLite journal's log by the background checkpoint, right after a passive pass (how the log normally stays within store.max_wal_bytes).",
            m.journal_wal_restarts.clone(),
        );
        Metrics { registry, ..m }
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }

    /// Counts a refused authentication.
    pub fn auth_failed(&self, reason: &'static str, transport: &'static str) {
        self.auth_failures
            .get_or_create(&AuthFailureLabels { reason, transport })
            .inc();
    }

    /// Counts a fetch of the JWKS URL.
    pub fn jwks_fetched(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.jwks_fetches
            .get_or_create(&FetchLabel { result })
            .inc();
    }

    /// Counts a policy decision of `rule`.
    pub fn policy_decided(&self, rule: &str, decision: &'static str) {
        self.policy_decisions
            .get_or_create(&PolicyLabels {
                rule: rule.to_owned(),
                decision,
            })
            .inc();
    }

    /// Counts an event sent to a client over `transport`.
    pub fn event_out(&self, transport: &'static str) {
        self.events_out_counter(transport).inc();
    }

    /// The counter of events sent over `transport`, for a connection to keep
    /// (one atomic add per event, no lookup).
    pub fn events_out_counter(&self, transport: &'static str) -> Counter {
        self.events_out
            .get_or_create(&TransportLabel { transport })
            .clone()
    }

    /// An authenticated WebSocket session, counted while the guard lives.
    pub fn session(&'static self) -> ConnectionGuard {
        self.sessions.inc();
        ConnectionGuard(self.sessions.clone())
    }

    /// A connection over `transport`, counted while the guard lives.
    pub fn connection(&'static self, transport: &'static str) -> ConnectionGuard {
        let gauge = self
            .connections
            .get_or_create(&TransportLabel { transport })
            .clone();
        gauge.inc();
        ConnectionGuard(gauge)
    }
}

/// Decrements its connection gauge when dropped.
pub struct ConnectionGuard(Gauge);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The class of a run's terminal event, for `agui_runs_ended_total`: a fixed
/// set, whatever code an agent put in its `RUN_ERROR`.
pub fn outcome_class(kind_is_error: bool, code_or_outcome: Option<&str>) -> &'static str {
    match (kind_is_error, code_or_outcome) {
        (false, None | Some("success")) => "success",
        (false, Some("interrupt")) => "interrupt",
        (false, Some("cancelled")) => "cancelled",
        (false, Some(_)) => "success",
        (true, Some(code)) if code.starts_with("upstream_") => "upstream_error",
        (true, Some("policy_violation")) => "policy_violation",
        (
            true,
            Some("journal_unavailable" | "gateway_node_lost" | "gateway_restarted" | "internal"),
        ) => "gateway_error",
        (true, _) => "agent_error",
    }
}

/// `upstream_http_503` → `upstream_http_5xx`; other codes unchanged (they
/// are the gateway's own, a fixed set).
pub fn upstream_code_class(code: &str) -> String {
    match code.strip_prefix("upstream_http_") {
        Some(status) => format!("upstream_http_{}xx", &status[..1.min(status.len())]),
        None => code.to_owned(),
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    &METRICS
}

/// Counts a handoff from `from` to `to` that ended as `result`.
pub fn handoff(from: &str, to: &str, result: &'static str) {
    metrics()
        .handoffs
        .get_or_create(&HandoffLabels {
            from: from.to_owned(),
            to: to.to_owned(),
            result,
        })
        .inc();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_and_codes_stay_within_fixed_sets() {
        assert_eq!(outcome_class(false, None), "success");
        assert_eq!(outcome_class(false, Some("interrupt")), "interrupt");
        assert_eq!(
            outcome_class(true, Some("upstream_http_502")),
            "upstream_error"
        );
        assert_eq!(
            outcome_class(true, Some("gateway_node_lost")),
            "gateway_error"
        );
        assert_eq!(
            outcome_class(true, Some("whatever the agent said")),
            "agent_error"
        );
        assert_eq!(
            upstream_code_class("upstream_http_503"),
            "upstream_http_5xx"
        );
        assert_eq!(upstream_code_class("upstream_timeout"), "upstream_timeout");
        let m = metrics();
        m.event_out("ws");
        let text = m.render();
        assert!(
            text.contains("agui_events_out_total{transport=\"ws\"}"),
            "{text}"
        );
        assert!(text.contains("agui_build_info{version="), "{text}");
    }
}
