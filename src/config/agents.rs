//! `[[agents]]`: each upstream agent — its protocol, backends and pool,
//! timeouts, run strategy, branching — with the checks of every key.

use super::*;

/// What a run request does while another run is active on the thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema, Default)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Refuse with `conflict`.
    #[default]
    Reject,
    /// Start it when the active run (and earlier queued ones) end.
    Enqueue,
    /// Cancel the active run, then start this one.
    Interrupt,
}

/// What happens to a run when its last viewer leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnDisconnect {
    /// Keep running (viewers can come back with `subscribe after`).
    #[default]
    Continue,
    /// Cancel the run.
    Cancel,
}

/// How strictly an agent's stream is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema, Default)]
#[serde(rename_all = "lowercase")]
pub enum VerifyMode {
    /// A violation ends the run with `RUN_ERROR upstream_protocol_violation`.
    #[default]
    Strict,
    /// A violation is logged and the event forwarded.
    Lenient,
}

/// One upstream agent.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// The name clients use (`/v1/agents/{id}/run`).
    pub id: String,
    /// Where to POST `RunAgentInput`; `demo:` means the built-in demo agent.
    /// One backend; leave it out and list `backends` for several.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    /// Several replicas of this agent (instead of `url`): runs are balanced
    /// over them, failed over before the first event, and kept per thread
    /// on one of them when `pool.affinity` is on (docs/configuration.md,
    /// "Backend pools").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<BackendConfig>,
    /// How runs are spread over `backends` (or the one `url`), retried and
    /// kept off failing ones.
    #[serde(default)]
    pub pool: PoolConfig,
    /// Shown to clients in `GET /v1/agents`.
    #[serde(default)]
    pub description: String,
    /// Extra request headers; values may use `${ENV_VAR}`. Never logged.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Roles that may run this agent; `"*"` means any authenticated user.
    #[serde(default = "any_role")]
    pub roles: Vec<String>,
    /// How strictly the agent's stream is checked: `strict` or `lenient`.
    #[serde(default)]
    pub verify: VerifyMode,
    /// Upstream time limits.
    #[serde(default)]
    pub timeouts: Timeouts,
    /// Largest SSE frame accepted from this agent.
    #[serde(default = "default_frame")]
    pub max_frame_bytes: usize,
    /// What a second run on a busy thread does.
    #[serde(default)]
    pub strategy: Strategy,
    /// Whether a request may choose another strategy.
    #[serde(default)]
    pub allow_strategy_override: bool,
    /// What happens to a run when its last viewer leaves.
    #[serde(default)]
    pub on_disconnect: OnDisconnect,
    /// Which interrupt shapes to recognise: `auto`, `canonical`,
    /// `langgraph-legacy`, or `agent` (the agent's own, untouched: for
    /// LangGraph/CopilotKit frontends that resume the LangGraph way).
    #[serde(default)]
    pub interrupts: crate::protocol::interrupts::InterruptStyle,
    /// A LangGraph compatibility switch: when a `resume` answers interrupts
    /// this agent raised in LangGraph's legacy shape (`CUSTOM on_interrupt`),
    /// the answer is also written to `forwardedProps.command.resume`, the
    /// only channel releases of `ag-ui-langgraph` older than its
    /// `RunAgentInput.resume` support read. AG-UI 1.1 (`basic/run-input`)
    /// says of `forwardedProps`: "intermediaries MUST NOT alter it", so this
    /// is an exception an operator can turn off. It stays on by default
    /// because turning it off silently breaks those agents (their graph
    /// never resumes), it only ever applies to a resume of LangGraph-shaped
    /// interrupts (no other agent's `forwardedProps` are touched), and a
    /// current `ag-ui-langgraph` reads `RunAgentInput.resume` first
    /// ("input.resume wins"), so the copy changes nothing for it: set it to
    /// `false` for such an agent to forward `forwardedProps` untouched.
    #[serde(default = "yes")]
    pub langgraph_resume_command: bool,
    /// How runs of this agent may fork a thread (regenerate, edit, a run
    /// from an earlier run).
    #[serde(default)]
    pub branching: Branching,
    /// Which agents this one may hand the thread to, and how (docs/
    /// configuration.md, "Handoff"). Kept as written here: the policy's
    /// handoff kind owns its fields and validates them (`check-config`
    /// reports its errors like any other).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    pub handoff: Option<serde_json::Value>,
    /// Where the agent declares its own AG-UI capabilities (a JSON
    /// `AgentCapabilities`), merged into `GET /v1/agents/{id}/capabilities`.
    #[serde(default)]
    pub capabilities_url: Option<String>,
    /// What the agent speaks: `ag-ui` (POST `RunAgentInput`, SSE back) or
    /// `a2a` (an A2A agent: `url` is its base URL, its agent card is read
    /// from `<url>/.well-known/agent-card.json`; docs/a2a.md).
    #[serde(default)]
    pub protocol: AgentProtocol,
}

/// The protocol an upstream agent speaks (docs/a2a.md for `a2a`).
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum AgentProtocol {
    /// AG-UI over HTTP: POST `RunAgentInput`, read SSE events back.
    #[default]
    AgUi,
    /// A2A v1.0 (JSON-RPC binding), its events mapped to AG-UI.
    A2a,
}

/// An agent's branching settings (docs/protocol.md, "Branches").
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct Branching {
    /// On the AG-UI HTTP face, a client that names no `parentRunId` but
    /// sends the head's history cut after a user message (a regenerate) or
    /// a known user message with new content (an edit) forks the thread,
    /// as CopilotKit's reload expects. Off: such input runs on top of the
    /// head, as before branching existed.
    pub implicit: bool,
    /// What the agent is told of a fork.
    pub mode: BranchMode,
}

impl Default for Branching {
    fn default() -> Self {
        Branching {
            implicit: true,
            mode: BranchMode::Stateless,
        }
    }
}

/// How an agent takes a run that forks the thread.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum BranchMode {
    /// The agent keeps no state of its own: it is sent the branch's whole
    /// history (and `parentRunId`), which is all it needs.
    #[default]
    Stateless,
    /// A stateful agent that forks by itself when it sees a history it
    /// holds cut or edited: only regenerate and edit are allowed; a run
    /// from any other run is refused (`invalid`). (ag-ui-langgraph's own
    /// detection still sees the replaced answer here, with or without the
    /// gateway: use `fork-thread` for it.)
    SameThread,
    /// A stateful agent that knows nothing of forks: each branch is sent
    /// as its own thread (`<threadId>~<branch run>`), seeded with the
    /// branch's history; the gateway maps the id back in what it journals.
    /// The mode in which regenerate and edit work with ag-ui-langgraph.
    ForkThread,
    /// Forks are refused (`invalid`).
    Refuse,
}

fn yes() -> bool {
    true
}

fn any_role() -> Vec<String> {
    vec!["*".into()]
}

fn default_frame() -> usize {
    crate::protocol::sse::DEFAULT_MAX_FRAME_BYTES
}

/// Upstream time limits; each failure ends the run with `upstream_timeout`
/// (or `upstream_unavailable` for connect).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// Longest TCP (and TLS) connect to the agent.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub connect: Duration,
    /// From request sent to the first event.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub first_event: Duration,
    /// Longest silence between two events.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub idle: Duration,
    /// Longest whole run.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub total: Duration,
    /// How long a connection to the agent is kept idle for the next run.
    /// Below the agent server's own (uvicorn and Node: 5 s), so the
    /// gateway lets go of it first (see `upstream::keep_alive`).
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub keep_alive: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            first_event: Duration::from_secs(60),
            idle: Duration::from_secs(120),
            total: Duration::from_secs(1800),
            // Below the 5 s after which uvicorn and Node close theirs.
            keep_alive: Duration::from_secs(4),
        }
    }
}

/// One replica of an agent (`[[agents]] backends = [{ url = "…" }, …]`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// Where to POST `RunAgentInput`; `demo:` means the built-in demo agent.
    pub url: String,
    /// Share of the runs relative to the other backends' weights.
    #[serde(default = "one")]
    pub weight: u32,
    /// Request headers for this backend alone, over the agent's `headers`;
    /// values may use `${ENV_VAR}`. Never logged.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Most runs at once on this backend (none: no cap). A run that finds
    /// every backend at its cap waits up to `pool.queue_timeout` for a slot.
    #[serde(default)]
    pub max_in_flight: Option<usize>,
    /// The backend group it belongs to: runs go to the `default` group
    /// unless a `pool.routes` entry or the `pool.canary` sends them to
    /// another.
    #[serde(default = "default_group")]
    pub group: String,
}

fn default_group() -> String {
    DEFAULT_GROUP.into()
}

/// The backend group runs go to when no route or canary chooses another.
pub const DEFAULT_GROUP: &str = "default";

/// A routing rule: runs of these tenants, roles, or matching `when` go to
/// `group` (all given criteria must hold; first matching rule wins).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PoolRoute {
    /// Tenants (the principal's tenant claim) whose runs this rule takes;
    /// empty: any tenant.
    #[serde(default)]
    pub tenants: Vec<String>,
    /// Roles, any of which the principal must hold; empty: any roles.
    #[serde(default)]
    pub roles: Vec<String>,
    /// A CEL condition over `principal`, `agent`, `thread` and `input` (the
    /// run's `forwardedProps`, `state`, `context`, `tools` and `messages`),
    /// compiled at load by the policy's `routing` kind; a condition that
    /// fails to evaluate does not match.
    #[serde(default)]
    pub when: Option<String>,
    /// The backend group they go to.
    pub group: String,
}

/// A canary: a share of the threads (the same threads for as long as the
/// share stays; a larger share keeps them and adds more) go to `group`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Canary {
    /// The backend group of the new version.
    pub group: String,
    /// Share of the threads, 0–100 (fractions allowed).
    pub percent: f64,
}

fn one() -> u32 {
    1
}

/// How an agent's runs pick, retry and avoid backends.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PoolConfig {
    /// `weighted` (each backend its weight's share of the runs, evenly
    /// interleaved) or `least-in-flight` (the backend with the fewest runs
    /// in flight for its weight, ties shared by weight: a replica slowed
    /// by long runs gets fewer new ones, so shares follow speed more than
    /// weight).
    pub balance: Balance,
    /// How long a run waits for a slot when every backend is at its
    /// `max_in_flight`, before it ends `upstream_unavailable`.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub queue_timeout: Duration,
    /// Backends tried for one run, the first included, as long as each
    /// failed before the agent's first event (never once it sent one).
    pub attempts: u32,
    /// Pause before a retry; doubled after each.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub retry_backoff: Duration,
    /// Consecutive failures before the first event (connect, 5xx, timeout)
    /// that eject a backend.
    pub eject_after: u32,
    /// How long a first ejection lasts; each ejection in a row doubles it.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub eject_base: Duration,
    /// The longest ejection.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub eject_max: Duration,
    /// Keep each thread's runs on one backend while it is healthy
    /// (consistent hashing on tenant and thread). None: on for an agent
    /// whose `branching.mode` says it keeps state (`same-thread`,
    /// `fork-thread`), off otherwise.
    pub affinity: Option<bool>,
    /// Roles that see this agent's backends and their health in
    /// `GET /v1/agents`.
    pub admin_roles: Vec<String>,
    /// Routing rules (tenant, role, CEL), first match wins: a matching run goes to the rule's
    /// backend group (and only there), not to `default` nor the canary.
    pub routes: Vec<PoolRoute>,
    /// Sends a share of the other runs' threads to a backend group.
    pub canary: Option<Canary>,
    /// An active health check: a GET per backend on an interval.
    pub probe: Option<Probe>,
}

/// An active health check of each backend (`[agents.pool.probe]`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Probe {
    /// What to GET, resolved against each backend's URL (`/healthz`: the
    /// backend's host, that path). A 2xx answer is healthy.
    pub path: String,
    /// Between two probes of a backend.
    #[serde(with = "duration", default = "probe_interval")]
    #[schemars(with = "duration::Text")]
    pub interval: Duration,
    /// Longest wait for the answer (longer counts as a failure).
    #[serde(with = "duration", default = "probe_timeout")]
    #[schemars(with = "duration::Text")]
    pub timeout: Duration,
}

fn probe_interval() -> Duration {
    Duration::from_secs(10)
}

fn probe_timeout() -> Duration {
    Duration::from_secs(2)
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            balance: Balance::Weighted,
            queue_timeout: Duration::from_secs(5),
            attempts: 3,
            retry_backoff: Duration::from_millis(100),
            eject_after: 3,
            eject_base: Duration::from_secs(5),
            eject_max: Duration::from_secs(300),
            affinity: None,
            admin_roles: vec!["admin".into()],
            routes: Vec::new(),
            canary: None,
            probe: None,
        }
    }
}

/// How a backend is chosen for a run without affinity.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Balance {
    /// By weight alone (smooth weighted round robin).
    #[default]
    Weighted,
    /// Fewest runs in flight for its weight; ties by weight.
    LeastInFlight,
}

impl AgentConfig {
    /// The agent's backends: `backends`, or the one `url`.
    pub fn backend_list(&self) -> Vec<BackendConfig> {
        if self.backends.is_empty() {
            vec![BackendConfig {
                url: self.url.clone(),
                weight: 1,
                headers: BTreeMap::new(),
                max_in_flight: None,
                group: default_group(),
            }]
        } else {
            self.backends.clone()
        }
    }

    /// Whether runs of a thread stay on one backend (`pool.affinity`, by
    /// default on for agents that keep state — an A2A agent always does:
    /// it holds its contexts).
    pub fn affinity(&self) -> bool {
        self.pool.affinity.unwrap_or(
            matches!(
                self.branching.mode,
                BranchMode::SameThread | BranchMode::ForkThread
            ) || self.protocol == AgentProtocol::A2a,
        )
    }
}

/// The JSON Schema of the configuration file (draft 2020-12), generated
/// from these types: `agui-gateway config-schema` prints it, and
/// `config/schema.json` is a copy a test keeps current.
/// Reports (through `bad`) why `raw` is not an http(s) URL that every HTTP
/// client reads with the same host ([`crate::protocol::url_host`]): the
/// gateway checks it with one parser, and the exporter or client library
/// that fetches it may use another.
impl Config {
    /// An agent's `url`/`backends` and `pool` keys.
    fn check_backends(
        &self,
        agent: &AgentConfig,
        k: &dyn Fn(&str) -> String,
        bad: &mut impl FnMut(String, String),
    ) {
        let demo = self.demo.enabled;
        let check_url = |key: String, url: &str, bad: &mut dyn FnMut(String, String)| {
            if url == DEMO_URL {
                if agent.protocol == AgentProtocol::A2a {
                    bad(
                        key,
                        "'demo:' is an AG-UI agent: it cannot be protocol = \"a2a\"".into(),
                    );
                } else if !demo {
                    bad(key, "'demo:' needs [demo] enabled = true".into());
                }
            } else {
                check_http_url(url, &mut |e| bad(key.clone(), e));
            }
        };
        match (agent.url.is_empty(), agent.backends.is_empty()) {
            (false, false) => bad(
                k("backends"),
                "set either url (one backend) or backends, not both".into(),
            ),
            (true, true) => bad(
                k("url"),
                "missing: set url (one backend) or backends".into(),
            ),
            (false, true) => check_url(k("url"), &agent.url, bad),
            (true, false) => {
                let mut seen = std::collections::HashSet::new();
                for (j, b) in agent.backends.iter().enumerate() {
                    let bk = |f: &str| k(&format!("backends[{j}].{f}"));
                    check_url(bk("url"), &b.url, bad);
                    if !seen.insert(b.url.as_str()) {
                        bad(bk("url"), format!("duplicate backend url '{}'", b.url));
                    }
                    if b.weight == 0 {
                        bad(bk("weight"), "must be at least 1".into());
                    }
                    if b.max_in_flight == Some(0) {
                        bad(
                            bk("max_in_flight"),
                            "must be at least 1 (leave it out for no cap)".into(),
                        );
                    }
                    check_headers(&b.headers, &bk, bad);
                }
                if agent.backends.len() > MAX_BACKENDS {
                    bad(
                        k("backends"),
                        format!("at most {MAX_BACKENDS} backends per agent"),
                    );
                }
            }
        }
        let p = &agent.pool;
        let list = agent.backend_list();
        let has_group = |g: &str| list.iter().any(|b| b.group == g);
        for (j, r) in p.routes.iter().enumerate() {
            if r.tenants.is_empty() && r.roles.is_empty() && r.when.is_none() {
                bad(
                    k(&format!("pool.routes[{j}]")),
                    "no tenants, roles or when: the rule would take every run (use the default group)".into(),
                );
            }
            if !has_group(&r.group) {
                bad(
                    k(&format!("pool.routes[{j}].group")),
                    format!("no backend is in group '{}'", r.group),
                );
            }
        }
        if let Some(c) = &p.canary {
            if !has_group(&c.group) {
                bad(
                    k("pool.canary.group"),
                    format!("no backend is in group '{}'", c.group),
                );
            }
            if !(0.0..=100.0).contains(&c.percent) {
                bad(k("pool.canary.percent"), "must be 0 to 100".into());
            }
        }
        if !list.is_empty()
            && !has_group(DEFAULT_GROUP)
            && p.canary.as_ref().is_none_or(|c| c.percent < 100.0)
        {
            bad(
                k("backends"),
                format!(
                    "no backend in group '{DEFAULT_GROUP}': runs that no route or canary takes would have nowhere to go"
                ),
            );
        }
        if let Some(probe) = &p.probe {
            if probe.interval.is_zero() || probe.timeout.is_zero() {
                bad(
                    k("pool.probe"),
                    "interval and timeout must be greater than 0".into(),
                );
            }
            if !probe.path.starts_with('/') {
                bad(
                    k("pool.probe.path"),
                    format!("'{}' must start with /", probe.path),
                );
            }
        }
        if p.attempts == 0 || p.attempts > 10 {
            bad(k("pool.attempts"), "must be 1 to 10".into());
        }
        if p.eject_after == 0 {
            bad(k("pool.eject_after"), "must be at least 1".into());
        }
        if p.eject_base.is_zero() {
            bad(k("pool.eject_base"), "must be greater than 0".into());
        }
        if p.eject_max < p.eject_base {
            bad(
                k("pool.eject_max"),
                "must not be less than eject_base".into(),
            );
        }
    }
}

/// Header names and their `${ENV}` references, each under `key("headers.NAME")`.
fn check_headers(
    headers: &BTreeMap<String, String>,
    key: &dyn Fn(&str) -> String,
    bad: &mut impl FnMut(String, String),
) {
    for (name, value) in headers {
        if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
            bad(
                key(&format!("headers.{name}")),
                "not a valid header name".into(),
            );
        }
        if let Err(var) = expand_env(value) {
            bad(
                key(&format!("headers.{name}")),
                format!("references unset environment variable {var}"),
            );
        }
    }
}

/// Most backends one agent may list (a pool is a handful of replicas; the
/// balancer scans them all for each run).
pub const MAX_BACKENDS: usize = 64;

impl Config {
    /// Checks of every `[[agents]]` entry (ids, backends and pool, headers,
    /// roles, timeouts, frame size).
    pub(super) fn check_agents(&self, bad: &mut impl FnMut(String, String)) {
        let mut seen = std::collections::HashSet::new();
        for (i, agent) in self.agents.iter().enumerate() {
            let k = |f: &str| format!("agents[{i}].{f}");
            if agent.id.is_empty()
                || !agent
                    .id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                bad(
                    k("id"),
                    format!("'{}' must be 1+ of A-Z a-z 0-9 - _ .", agent.id),
                );
            }
            if !seen.insert(agent.id.as_str()) {
                bad(k("id"), format!("duplicate agent id '{}'", agent.id));
            }
            // Backends (the one `url` or the `backends` list).
            self.check_backends(agent, &k, bad);
            check_headers(&agent.headers, &k, bad);
            if agent.roles.is_empty() {
                bad(
                    k("roles"),
                    "empty: nobody could run this agent (use [\"*\"] for everyone)".into(),
                );
            }
            let t = &agent.timeouts;
            for (name, d) in [
                ("connect", t.connect),
                ("first_event", t.first_event),
                ("idle", t.idle),
                ("total", t.total),
            ] {
                if d.is_zero() {
                    bad(
                        k(&format!("timeouts.{name}")),
                        "must be greater than 0".into(),
                    );
                }
            }
            if agent.max_frame_bytes < 1024 {
                bad(k("max_frame_bytes"), "must be at least 1024".into());
            }
        }
    }
}
