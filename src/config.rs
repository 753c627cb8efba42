//! Configuration: one TOML (or YAML) file plus `AGUI_GATEWAY__…` overrides.
//!
//! Everything is checked at start-up, and each error names the file and the
//! key, because an operator reading a failed deploy's log should not have to
//! guess which line to fix. `agui-gateway check-config` runs the same checks.
//!
//! This module is data only: the settings, their defaults, `${ENV}` expansion
//! and checks of its own fields. It imports none of the modules that act on
//! it, so it sits below all of them in the import graph; they read it
//! instead (the policy module loads the file `policy.path` names, auth applies
//! `[[grants]]`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub mod byte_size;

/// The file `serve` reads when no `--config` is given (when it exists).
pub const DEFAULT_PATH: &str = "config/gateway.toml";

/// `config/gateway.toml`, compiled in: with no config file at hand the binary
/// still runs (demo agent, development secret with its warning, a writable
/// data directory from [`default_data_dir`]), so a bare binary is a working
/// embedded gateway.
pub const EMBEDDED_CONFIG: &str = include_str!("../config/gateway.toml");

/// The agent `url` that points at the built-in demo agent rather than an
/// HTTP endpoint; defined here because it is a value an operator writes.
pub const DEMO_URL: &str = "demo:";

/// Where the embedded configuration keeps its journal: systemd's
/// `$STATE_DIRECTORY`, else `$XDG_STATE_HOME/agui-gateway`, else
/// `~/.local/state/agui-gateway`, else `./agui-gateway-data`.
pub fn default_data_dir() -> PathBuf {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = env("STATE_DIRECTORY") {
        // systemd may list several, separated by ':'; the first is ours.
        let first = dir
            .to_string_lossy()
            .split(':')
            .next()
            .unwrap_or("")
            .to_owned();
        return PathBuf::from(first);
    }
    if let Some(dir) = env("XDG_STATE_HOME") {
        return dir.join("agui-gateway");
    }
    if let Some(home) = env("HOME") {
        return home.join(".local/state/agui-gateway");
    }
    PathBuf::from("agui-gateway-data")
}

/// The development secret shipped in `config/gateway.toml`; the gateway warns
/// loudly at start-up while it is in use.
pub const DEV_SECRET: &str = "agui-gateway-development-secret-change-me";

/// The whole configuration: one TOML or YAML file. Any key can be
/// overridden from the environment as `AGUI_GATEWAY__SECTION__KEY`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "agui-gateway configuration")]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    pub auth: AuthConfig,
    #[serde(default)]
    pub demo: DemoConfig,
    #[serde(default)]
    pub inspector: InspectorConfig,
    #[serde(default)]
    pub agents: Vec<AgentConfig>,
    #[serde(default)]
    pub store: StoreConfig,
    #[serde(default)]
    pub threads: ThreadsConfig,
    #[serde(default)]
    pub ws: WsConfig,
    #[serde(default)]
    pub cors: CorsConfig,
    /// Role-wide thread permissions.
    #[serde(default)]
    pub grants: Vec<RoleGrant>,
    #[serde(default)]
    pub meta: MetaConfig,
    #[serde(default)]
    pub policy: PolicyConfig,
    #[serde(default)]
    pub tracing: TracingConfig,
    /// Where the file was read from (set by [`Config::load`]); empty for
    /// the embedded configuration.
    #[serde(skip)]
    pub source: PathBuf,
    /// True when this is the compiled-in [`EMBEDDED_CONFIG`] (no file to
    /// watch; with no `policy.path` the policy module uses its compiled-in
    /// default policy).
    #[serde(skip)]
    pub embedded: bool,
}

/// The listening side.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address to listen on, e.g. `127.0.0.1:8080`; port 0 picks a free one.
    pub listen: String,
    /// Largest accepted request body (bytes); larger → 413 `too_large`.
    pub max_body_bytes: usize,
    /// Interval of `: keepalive` comments on idle SSE responses.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub keepalive: Duration,
    /// How long shutdown waits for open streams before closing them.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub shutdown_grace: Duration,
    /// On SIGTERM/SIGINT, how long this node's active runs may take to
    /// finish (new runs are refused meanwhile); the rest are cancelled.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub drain_timeout: Duration,
    /// Lifetime of an SSE join ticket (`POST /v1/threads/{id}/ticket`) until
    /// it opens a stream, and how long after that stream ends the browser's
    /// own reconnect (with `Last-Event-ID`) may still use it.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub ticket_ttl: Duration,
    /// Most client connections at once (all transports); past it new ones
    /// are refused (HTTP 503 `unavailable`) until one closes. 0: no cap.
    pub max_connections: usize,
    /// How long a connection may take to send a complete request head, from
    /// being accepted (TLS handshake included) and again from going idle
    /// after a response; past it the connection is closed. Slow or silent
    /// clients (slowloris) so never hold a descriptor for longer.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub header_read_timeout: Duration,
    /// How long a request body (a run's input, a chat turn, a meta post) may
    /// take to arrive in full once its head has; past it the request is
    /// refused `invalid` and the connection closed. A body dripped a byte at
    /// a time so never holds a request (and its descriptor) for longer.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub body_read_timeout: Duration,
    /// HTTPS/WSS on the listener; unset: plain HTTP (terminate TLS in front).
    pub tls: Option<TlsConfig>,
}

/// The listener's certificate, reloaded when its files change.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain, leaf first (relative to the config file).
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1; relative to the config file).
    pub key: PathBuf,
}

/// Cross-origin browser access to the HTTP routes.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct CorsConfig {
    /// Origins whose browser pages may call the HTTP routes (`*` wildcards,
    /// e.g. `https://*.example.com`, `http://localhost:*`; `"*"` any).
    /// Empty: no CORS headers, so browsers refuse cross-origin calls.
    pub allowed_origins: Vec<String>,
    /// Request headers those pages may send (case-insensitive; `"*"`: any
    /// the preflight asks for). The default is what the gateway reads plus
    /// the W3C trace context and baggage that browser OpenTelemetry adds.
    pub allowed_headers: Vec<String>,
    /// How long browsers may cache a preflight answer.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub max_age: Duration,
}

impl Default for CorsConfig {
    fn default() -> Self {
        CorsConfig {
            allowed_origins: Vec::new(),
            allowed_headers: [
                "authorization",
                "content-type",
                "accept",
                "last-event-id",
                "x-request-id",
                "traceparent",
                "tracestate",
                "baggage",
                "x-ai-sdk-version",
            ]
            .map(String::from)
            .to_vec(),
            max_age: Duration::from_secs(600),
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8080".into(),
            max_body_bytes: 1024 * 1024,
            keepalive: Duration::from_secs(15),
            shutdown_grace: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(30),
            ticket_ttl: Duration::from_secs(30),
            max_connections: 0,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            tls: None,
        }
    }
}

/// Which journal backend, and how it commits.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `sqlite` (default, durable), `memory` (lost on exit) or `redis`
    /// (several nodes sharing one Redis or Valkey).
    pub kind: StoreKind,
    /// Redis URL (`redis://host:port/db`), for `kind = "redis"`; `${VAR}`
    /// is expanded, so a password can stay in the environment.
    pub url: Option<String>,
    /// Prefix of every Redis key (several deployments can share a Redis).
    pub prefix: String,
    /// This node's name on the bus (default: host name and process id).
    pub node: Option<String>,
    /// Within how long a dead node's runs are closed by another node with
    /// `RUN_ERROR gateway_node_lost` (Redis): its leases live ⅔ of this past
    /// their last renewal, and every node looks for expired ones every ¼.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub lease_ttl: Duration,
    /// SQLite file (relative to the config file's folder).
    pub path: PathBuf,
    /// SQLite `synchronous`: `normal` (survives a process crash), `full`
    /// (also survives power loss, one fsync per group commit), `off` or `extra`.
    pub synchronous: String,
    /// Most events in one group commit.
    pub max_batch_events: usize,
    /// SQLite: when the write-ahead log passes this many bytes, the writer
    /// checkpoints it completely and truncates it (between two group
    /// commits), so it stays bounded under any sustained load.
    pub max_wal_bytes: u64,
}

/// Journal backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema, Default)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    #[default]
    Sqlite,
    Memory,
    Redis,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            kind: StoreKind::Sqlite,
            url: None,
            prefix: "agui".into(),
            node: None,
            lease_ttl: Duration::from_secs(10),
            path: PathBuf::from("data/agui-gateway.db"),
            synchronous: "normal".into(),
            max_batch_events: 4096,
            max_wal_bytes: 64 << 20,
        }
    }
}

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
    /// Bytes of a thread's newest events kept in memory (its hot tail);
    /// older ones stay in the store and are read from there when a reader
    /// asks for them (a catch-up, a join from an older cursor, a fork's
    /// replay). The events of a run still running always stay.
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
        }
    }
}

/// The WebSocket endpoint.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct WsConfig {
    /// Allowed `Origin`s (`*` wildcards allowed); empty allows any.
    pub allowed_origins: Vec<String>,
    /// Time allowed for the first `auth` frame when the upgrade carried no token.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub auth_timeout: Duration,
    /// Interval of WebSocket pings.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub ping_interval: Duration,
    /// A connection silent for this long (no frame, no pong) is dropped.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub read_timeout: Duration,
    /// Largest accepted frame; larger closes the socket with 1009.
    pub max_frame_bytes: usize,
    /// Accept `?access_token=` (never logged). Off by default.
    pub query_token: bool,
}

impl Default for WsConfig {
    fn default() -> Self {
        WsConfig {
            allowed_origins: Vec::new(),
            auth_timeout: Duration::from_secs(5),
            ping_interval: Duration::from_secs(20),
            read_timeout: Duration::from_secs(60),
            max_frame_bytes: 1024 * 1024,
            query_token: false,
        }
    }
}

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

/// Where the operator policy lives.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema, Default)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// The policy file (TOML or YAML; relative to the config file); unset: no policy.
    pub path: Option<PathBuf>,
}

/// Meta events (feedback, notes, tags).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct MetaConfig {
    /// Accepted `metaType`s; empty accepts any.
    pub allowed_types: Vec<String>,
    /// Largest `payload` (serialized bytes); larger → `too_large`.
    pub max_payload_bytes: usize,
    /// Also POST every meta event here (analytics), as
    /// `{"tenant","threadId","seq","event"}`; unset: no webhook.
    pub webhook_url: Option<String>,
    /// Extra webhook headers; values may use `${ENV}`; never logged.
    pub webhook_headers: std::collections::BTreeMap<String, String>,
    /// Attempts per event (with exponential backoff from 200 ms) before it is dropped and logged.
    pub webhook_attempts: u32,
}

impl Default for MetaConfig {
    fn default() -> Self {
        MetaConfig {
            allowed_types: Vec::new(),
            max_payload_bytes: 16 * 1024,
            webhook_url: None,
            webhook_headers: Default::default(),
            webhook_attempts: 5,
        }
    }
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

/// A role-wide grant (`[[grants]]`): what every holder of `role` may do on
/// the threads `threads` matches. Only the settings; `auth::access` applies
/// them.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RoleGrant {
    /// Role the grant applies to (`"*"`: every authenticated user).
    pub role: String,
    /// Thread-id glob (`*` any run of characters, `?` one character).
    pub threads: String,
    /// Permissions granted: `view`, `run`, `resume`, `cancel`, `meta`.
    pub permissions: Vec<String>,
}

/// A permission on a thread (spec: `view`, `run`, `resume`, `cancel`, `meta`).
/// Defined here because its names are values operators write in
/// `[[grants]]` (and identity providers put in the `threads` claim); `auth`
/// decides who holds which.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Permission {
    View,
    Run,
    Resume,
    Cancel,
    Meta,
}

impl Permission {
    /// Parses a wire name; unknown names are ignored by callers (forward compatible).
    pub fn parse(name: &str) -> Option<Permission> {
        Some(match name {
            "view" => Permission::View,
            "run" => Permission::Run,
            "resume" => Permission::Resume,
            "cancel" => Permission::Cancel,
            "meta" => Permission::Meta,
            _ => return None,
        })
    }
}

/// JWT verification.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Accepted `alg` values; anything else is rejected (`alg: none` always is).
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<String>,
    /// Shared secret for HS256/384/512 (`${ENV}` allowed); at least 32 bytes.
    pub hs_secret: Option<String>,
    /// PEM public key (RSA, EC or Ed25519) for RS*/PS*/ES*/EdDSA tokens.
    pub public_key_pem: Option<PathBuf>,
    /// A JWKS document on disk.
    pub jwks_file: Option<PathBuf>,
    /// A JWKS URL, fetched and cached per its `Cache-Control`.
    pub jwks_url: Option<String>,
    /// Shortest time a fetched JWKS is trusted (floor under its `Cache-Control: max-age`).
    #[serde(default = "default_jwks_min", with = "duration")]
    #[schemars(with = "duration::Text")]
    pub jwks_min_refresh: Duration,
    /// Longest time a fetched JWKS is trusted before it is fetched again.
    #[serde(default = "default_jwks_max", with = "duration")]
    #[schemars(with = "duration::Text")]
    pub jwks_max_refresh: Duration,
    /// At most one re-fetch for an unknown `kid` per this interval.
    #[serde(default = "default_jwks_kid", with = "duration")]
    #[schemars(with = "duration::Text")]
    pub jwks_unknown_kid_interval: Duration,
    /// Longest a JWKS fetch may take (connect and response), and so the
    /// longest an authentication waits for one; known keys never wait.
    #[serde(default = "default_jwks_timeout", with = "duration")]
    #[schemars(with = "duration::Text")]
    pub jwks_timeout: Duration,
    /// Required `iss`, when set.
    pub issuer: Option<String>,
    /// Accepted `aud` values, when set.
    pub audience: Option<Vec<String>>,
    /// Clock skew allowed on `exp` and `nbf`.
    #[serde(default = "default_leeway", with = "duration")]
    #[schemars(with = "duration::Text")]
    pub leeway: Duration,
    /// Which claims carry what.
    #[serde(default)]
    pub claims: ClaimNames,
}

fn default_algorithms() -> Vec<String> {
    vec!["HS256".into()]
}
fn default_jwks_min() -> Duration {
    Duration::from_secs(60)
}
fn default_jwks_max() -> Duration {
    Duration::from_secs(3600)
}
fn default_jwks_kid() -> Duration {
    Duration::from_secs(10)
}
fn default_jwks_timeout() -> Duration {
    Duration::from_secs(2)
}
fn default_leeway() -> Duration {
    Duration::from_secs(30)
}

/// Claim names, for identity providers that do not use ours.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ClaimNames {
    /// Claim holding the user id.
    pub sub: String,
    /// Claim holding the roles (a list, or a space-separated string).
    pub roles: String,
    /// Claim holding the tenant (absent: `default`).
    pub tenant: String,
    /// Claim holding per-thread grants (`{glob: [permissions]}`).
    pub threads: String,
}

impl Default for ClaimNames {
    fn default() -> Self {
        ClaimNames {
            sub: "sub".into(),
            roles: "roles".into(),
            tenant: "tenant".into(),
            threads: "threads".into(),
        }
    }
}

/// The inspector: a web page to watch and steer threads live.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct InspectorConfig {
    /// Serve it (off unless the config says so; the shipped config does).
    pub enabled: bool,
    /// Where it is served, e.g. `/inspector`.
    pub path: String,
}

impl Default for InspectorConfig {
    fn default() -> Self {
        InspectorConfig {
            enabled: false,
            path: "/inspector".into(),
        }
    }
}

/// OpenTelemetry traces, exported over OTLP/HTTP (protobuf); off unless an
/// endpoint is set.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TracingConfig {
    /// OTLP/HTTP collector URL, e.g. `http://127.0.0.1:4318` (`/v1/traces`
    /// is appended unless the URL already ends with it). Empty: no traces
    /// are exported.
    pub otlp_endpoint: String,
    /// The `service.name` resource attribute of the exported spans.
    pub service_name: String,
    /// Fraction of new traces exported, 0.0–1.0; a trace the client's
    /// `traceparent` continues follows the client's sampled flag.
    pub sample_ratio: f64,
}

impl Default for TracingConfig {
    fn default() -> Self {
        TracingConfig {
            otlp_endpoint: String::new(),
            service_name: "agui-gateway".into(),
            sample_ratio: 1.0,
        }
    }
}

/// The built-in demo agent.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DemoConfig {
    /// Start it (agents then reach it with `url = "demo:"`).
    pub enabled: bool,
    /// Loopback address it listens on; port 0 picks a free one.
    pub listen: String,
    /// Pause between streamed tokens, so a person can watch it stream.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub token_delay: Duration,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            enabled: false,
            listen: "127.0.0.1:0".into(),
            token_delay: Duration::from_millis(20),
        }
    }
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
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            first_event: Duration::from_secs(60),
            idle: Duration::from_secs(120),
            total: Duration::from_secs(1800),
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

/// A configuration problem, naming file and key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {key}: {message}")]
pub struct ConfigError {
    pub file: String,
    pub key: String,
    pub message: String,
}

impl Config {
    /// Reads `path` (TOML or YAML by extension), applies `AGUI_GATEWAY__…`
    /// environment overrides, and validates. All problems are returned, not
    /// just the first.
    pub fn load(path: &Path) -> Result<Config, Vec<ConfigError>> {
        if !path.exists() {
            return Err(vec![ConfigError {
                file: path.display().to_string(),
                key: "-".into(),
                message: "file not found".into(),
            }]);
        }
        let file = config::Config::builder().add_source(config::File::from(path));
        Self::build(file, path, false)
    }

    /// The compiled-in default ([`EMBEDDED_CONFIG`]) with its journal in
    /// [`default_data_dir`]; environment overrides apply as for a file.
    pub fn embedded() -> Result<Config, Vec<ConfigError>> {
        let db = default_data_dir().join("agui-gateway.db");
        let store = format!(
            "[store]\npath = {}\n[policy]\npath = \"\"\n",
            toml::Value::from(db.display().to_string())
        );
        let sources = config::Config::builder()
            .add_source(config::File::from_str(
                EMBEDDED_CONFIG,
                config::FileFormat::Toml,
            ))
            .add_source(config::File::from_str(&store, config::FileFormat::Toml));
        Self::build(sources, Path::new(""), true)
    }

    /// What the configuration was read from, for messages.
    pub fn origin(&self) -> String {
        if self.embedded {
            "<embedded config/gateway.toml>".into()
        } else {
            self.source.display().to_string()
        }
    }

    /// Adds the environment overrides to `sources`, deserializes and validates.
    fn build(
        sources: config::builder::ConfigBuilder<config::builder::DefaultState>,
        path: &Path,
        embedded: bool,
    ) -> Result<Config, Vec<ConfigError>> {
        let file = if embedded {
            "<embedded config/gateway.toml>".to_owned()
        } else {
            path.display().to_string()
        };
        let err = |key: &str, message: String| ConfigError {
            file: file.clone(),
            key: key.into(),
            message,
        };
        let built = sources
            .add_source(
                config::Environment::with_prefix("AGUI_GATEWAY")
                    .prefix_separator("__")
                    .separator("__")
                    .try_parsing(true),
            )
            .build()
            .map_err(|e| vec![err("-", e.to_string())])?;
        let mut cfg: Config = serde_path_to_error::deserialize(built).map_err(|e| {
            let key = e.path().to_string();
            vec![err(
                if key == "." { "-" } else { &key },
                e.into_inner().to_string(),
            )]
        })?;
        cfg.source = path.to_path_buf();
        cfg.embedded = embedded;
        if embedded
            && cfg
                .policy
                .path
                .as_ref()
                .is_some_and(|p| p.as_os_str().is_empty())
        {
            cfg.policy.path = None;
        }
        cfg.resolve_paths();
        let problems = cfg.validate();
        if problems.is_empty() {
            Ok(cfg)
        } else {
            Err(problems
                .into_iter()
                .map(|(key, message)| err(&key, message))
                .collect())
        }
    }

    /// Makes key-file paths relative to the config file's folder.
    fn resolve_paths(&mut self) {
        let base = self
            .source
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        for p in [&mut self.auth.public_key_pem, &mut self.auth.jwks_file]
            .into_iter()
            .flatten()
            .chain([&mut self.store.path])
            .chain(self.policy.path.iter_mut())
            .chain(
                self.server
                    .tls
                    .iter_mut()
                    .flat_map(|t| [&mut t.cert, &mut t.key]),
            )
        {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
    }

    /// Every problem as (key, message). The policy file's contents are the
    /// policy module's to check (when it loads them), not this one's.
    pub fn validate(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        let mut bad = |key: String, message: String| problems.push((key, message));

        if self.server.listen.parse::<std::net::SocketAddr>().is_err() {
            bad(
                "server.listen".into(),
                format!("'{}' is not an ip:port address", self.server.listen),
            );
        }
        for (i, h) in self.cors.allowed_headers.iter().enumerate() {
            if h != "*" && reqwest::header::HeaderName::from_bytes(h.as_bytes()).is_err() {
                bad(
                    format!("cors.allowed_headers[{i}]"),
                    format!("'{}' is not a header name", h.escape_default()),
                );
            }
        }
        if self.server.body_read_timeout < Duration::from_millis(100) {
            bad(
                "server.body_read_timeout".into(),
                "must be at least 100ms".into(),
            );
        }
        if self.server.header_read_timeout < Duration::from_millis(100) {
            bad(
                "server.header_read_timeout".into(),
                "must be at least 100ms".into(),
            );
        }
        if self.server.max_body_bytes < 1024 {
            bad(
                "server.max_body_bytes".into(),
                "must be at least 1024".into(),
            );
        }
        if self.demo.enabled && self.demo.listen.parse::<std::net::SocketAddr>().is_err() {
            bad(
                "demo.listen".into(),
                format!("'{}' is not an ip:port address", self.demo.listen),
            );
        }

        if !(0.0..=1.0).contains(&self.tracing.sample_ratio) {
            bad(
                "tracing.sample_ratio".into(),
                format!("{} is not between 0.0 and 1.0", self.tracing.sample_ratio),
            );
        }
        let endpoint = &self.tracing.otlp_endpoint;
        if !endpoint.is_empty() {
            check_http_url(endpoint, &mut |e| bad("tracing.otlp_endpoint".into(), e));
        }
        if self.tracing.service_name.trim().is_empty() {
            bad("tracing.service_name".into(), "must not be empty".into());
        }

        if !matches!(
            self.store.synchronous.as_str(),
            "off" | "normal" | "full" | "extra"
        ) {
            bad(
                "store.synchronous".into(),
                format!(
                    "'{}' is not off, normal, full or extra",
                    self.store.synchronous
                ),
            );
        }
        if self.store.kind == StoreKind::Redis {
            match &self.store.url {
                None => bad(
                    "store.url".into(),
                    "kind = \"redis\" needs url = \"redis://host:port\"".into(),
                ),
                Some(u) if !u.starts_with("redis://") && !u.starts_with("rediss://") => bad(
                    "store.url".into(),
                    format!("'{u}' is not a redis:// or rediss:// URL"),
                ),
                Some(u) => {
                    if let Err(var) = expand_env(u) {
                        bad(
                            "store.url".into(),
                            format!("references unset environment variable {var}"),
                        );
                    }
                }
            }
            if self.store.lease_ttl < Duration::from_secs(1) {
                bad("store.lease_ttl".into(), "must be at least 1s".into());
            }
        }
        if let Some(u) = &self.meta.webhook_url {
            check_http_url(u, &mut |e| bad("meta.webhook_url".into(), e));
        }
        for (name, value) in &self.meta.webhook_headers {
            if let Err(var) = expand_env(value) {
                bad(
                    format!("meta.webhook_headers.{name}"),
                    format!("references unset environment variable {var}"),
                );
            }
        }
        if self.store.max_wal_bytes < 1 << 20 {
            bad(
                "store.max_wal_bytes".into(),
                "must be at least 1048576 (1 MiB)".into(),
            );
        }
        if self.threads.viewer_queue_bytes < 4096 {
            bad(
                "threads.viewer_queue_bytes".into(),
                "must be at least 4096".into(),
            );
        }
        if self.threads.hot_bytes < 1024 {
            bad("threads.hot_bytes".into(), "must be at least 1KiB".into());
        }
        if self.threads.memory_budget() < self.threads.hot_bytes {
            bad(
                "threads.memory_budget".into(),
                format!(
                    "must be at least threads.hot_bytes ({})",
                    byte_size::format(self.threads.hot_bytes)
                ),
            );
        }
        for (i, g) in self.grants.iter().enumerate() {
            for (j, p) in g.permissions.iter().enumerate() {
                if Permission::parse(p).is_none() {
                    bad(
                        format!("grants[{i}].permissions[{j}]"),
                        format!("'{p}' is not one of view, run, resume, cancel, meta"),
                    );
                }
            }
        }
        let a = &self.auth;
        if a.algorithms.is_empty() {
            bad(
                "auth.algorithms".into(),
                "list at least one algorithm".into(),
            );
        }
        let mut needs_secret = false;
        let mut needs_public = false;
        for (i, alg) in a.algorithms.iter().enumerate() {
            match alg.as_str() {
                "HS256" | "HS384" | "HS512" => needs_secret = true,
                "RS256" | "RS384" | "RS512" | "PS256" | "PS384" | "PS512" | "ES256" | "ES384"
                | "EdDSA" => needs_public = true,
                other => bad(
                    format!("auth.algorithms[{i}]"),
                    format!("'{other}' is not a supported algorithm"),
                ),
            }
        }
        if needs_secret {
            match a.hs_secret.as_deref().map(expand_env) {
                None => bad(
                    "auth.hs_secret".into(),
                    "an HS algorithm is enabled but no secret is set".into(),
                ),
                Some(Err(var)) => bad(
                    "auth.hs_secret".into(),
                    format!("references unset environment variable {var}"),
                ),
                Some(Ok(s)) if s.len() < 32 => bad(
                    "auth.hs_secret".into(),
                    "must be at least 32 bytes (256 bits)".into(),
                ),
                _ => {}
            }
        }
        if needs_public
            && a.public_key_pem.is_none()
            && a.jwks_file.is_none()
            && a.jwks_url.is_none()
        {
            bad(
                "auth".into(),
                "an asymmetric algorithm is enabled: set public_key_pem, jwks_file or jwks_url"
                    .into(),
            );
        }
        for (key, p) in [
            ("auth.public_key_pem", &a.public_key_pem),
            ("auth.jwks_file", &a.jwks_file),
        ] {
            if let Some(p) = p
                && !p.exists()
            {
                bad(key.into(), format!("{} does not exist", p.display()));
            }
        }
        if let Some(u) = &a.jwks_url {
            check_http_url(u, &mut |e| bad("auth.jwks_url".into(), e));
        }
        if a.jwks_timeout.is_zero() {
            bad("auth.jwks_timeout".into(), "must be more than 0".into());
        }
        if a.jwks_min_refresh > a.jwks_max_refresh {
            bad(
                "auth.jwks_min_refresh".into(),
                "must not exceed jwks_max_refresh".into(),
            );
        }

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
            self.check_backends(agent, &k, &mut bad);
            check_headers(&agent.headers, &k, &mut bad);
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
        problems
    }
}

/// Durations, read the same way everywhere: config keys, their
/// `AGUI_GATEWAY__…` overrides and `agui-gateway token --ttl`. Either
/// humantime text (`250ms`, `30s`, `10m`, `1h`, `1h 30m`, `2days`) or a whole
/// number of seconds (`3600`).
pub mod duration {
    use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
    use serde::{Deserializer, Serializer, de};
    use std::borrow::Cow;
    use std::time::Duration;

    /// The pattern of a duration written as text (a bare number is seconds).
    pub const PATTERN: &str = r"^\s*[0-9]+\s*([a-zA-Zµ]+\s*([0-9]+\s*[a-zA-Zµ]+\s*)*)?$";

    /// Parses `text`: humantime, or a whole number of seconds.
    pub fn parse(text: &str) -> Result<Duration, String> {
        let t = text.trim();
        if let Ok(secs) = t.parse::<u64>() {
            return Ok(Duration::from_secs(secs));
        }
        humantime::parse_duration(t).map_err(|e| {
            format!(
                "'{text}' is not a duration ({e}): write e.g. 250ms, 30s, 10m, 1h, or whole seconds"
            )
        })
    }

    /// The shortest exact text for `d` (`250ms`, `90s`, `10m`, `24h`).
    pub fn format(d: Duration) -> String {
        let secs = d.as_secs();
        if !d.subsec_nanos().is_multiple_of(1_000_000) {
            humantime::format_duration(d).to_string()
        } else if d.subsec_millis() != 0 {
            format!("{}ms", d.as_millis())
        } else if secs == 0 {
            "0s".into()
        } else if secs.is_multiple_of(3600) {
            format!("{}h", secs / 3600)
        } else if secs.is_multiple_of(60) {
            format!("{}m", secs / 60)
        } else {
            format!("{secs}s")
        }
    }

    /// For `#[serde(with = "duration")]`.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(*d))
    }

    /// For `#[serde(with = "duration")]`: text or whole seconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = Duration;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a duration such as \"250ms\", \"30s\", \"1h\", or whole seconds")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
                parse(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
                Ok(Duration::from_secs(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
                u64::try_from(v)
                    .map(Duration::from_secs)
                    .map_err(|_| E::custom(format!("{v} is negative")))
            }
        }
        d.deserialize_any(Visitor)
    }

    /// The schema of a duration field (`#[schemars(with = "duration::Text")]`).
    pub struct Text;

    impl JsonSchema for Text {
        fn schema_name() -> Cow<'static, str> {
            "Duration".into()
        }
        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({
                "description": "A duration: \"250ms\", \"30s\", \"10m\", \"1h\", \"1h 30m\", \"2days\", or a whole number of seconds.",
                "type": ["string", "integer"],
                "pattern": PATTERN,
                "minimum": 0
            })
        }
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

fn check_http_url(raw: &str, bad: &mut impl FnMut(String)) {
    match crate::protocol::url_host::parse(raw) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {}
        Ok(_) => bad(format!("'{raw}' is not an http(s) URL")),
        Err(e) => bad(format!("'{}' {e}", raw.escape_default())),
    }
}

pub fn json_schema() -> serde_json::Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(Config)).expect("schema is JSON");
    // A section's default is the sum of its keys' defaults, each shown on
    // its key; repeating the whole object on the section is noise.
    fn drop_object_defaults(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                if map.get("default").is_some_and(|d| d.is_object())
                    && !map
                        .get("additionalProperties")
                        .is_some_and(|a| a.is_object())
                {
                    map.remove("default");
                }
                map.values_mut().for_each(drop_object_defaults);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(drop_object_defaults),
            _ => {}
        }
    }
    drop_object_defaults(&mut schema);
    schema
}

/// `json_schema()` as written to `config/schema.json`.
pub fn json_schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&json_schema()).expect("schema is JSON");
    text.push('\n');
    text
}

/// Replaces `${NAME}` with the environment variable's value; `Err(NAME)` when unset.
pub fn expand_env(value: &str) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let name = &after[..end];
        out.push_str(&std::env::var(name).map_err(|_| name.to_owned())?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &tempfile::TempDir, text: &str) -> PathBuf {
        let p = dir.path().join("g.toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn minimal_config_gets_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(&dir, &format!("[auth]\nhs_secret = \"{SECRET}\"\n"));
        let c = Config::load(&p).unwrap();
        assert_eq!(c.server.listen, "127.0.0.1:8080");
        assert_eq!(c.auth.algorithms, ["HS256"]);
        assert!(c.agents.is_empty());
    }

    #[test]
    fn errors_name_file_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            &dir,
            "[auth]\nhs_secret = \"short\"\nalgorithms=[\"HS256\",\"none\"]\n\
                 [[agents]]\nid=\"a\"\nurl=\"ftp://x\"\n[[agents]]\nid=\"a\"\nurl=\"http://x\"\n\
                 headers={Authorization=\"Bearer ${AGUI_TEST_UNSET_VAR}\"}\n",
        );
        let errs = Config::load(&p).unwrap_err();
        let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        let has = |s: &str| text.iter().any(|t| t.contains(s));
        assert!(has("auth.hs_secret: must be at least 32 bytes"), "{text:?}");
        assert!(has("auth.algorithms[1]: 'none'"), "{text:?}");
        assert!(has("agents[0].url"), "{text:?}");
        assert!(has("agents[1].id: duplicate"), "{text:?}");
        assert!(
            has(
                "agents[1].headers.Authorization: references unset environment variable AGUI_TEST_UNSET_VAR"
            ),
            "{text:?}"
        );
        assert!(text.iter().all(|t| t.starts_with(&p.display().to_string())));
    }

    #[test]
    fn backend_pools_are_checked_key_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            &dir,
            &format!(
                "[auth]\nhs_secret = \"{SECRET}\"\n\
                 [[agents]]\nid=\"both\"\nurl=\"http://a\"\nbackends=[{{url=\"http://b\"}}]\n\
                 [[agents]]\nid=\"none\"\n\
                 [[agents]]\nid=\"bad\"\nbackends=[{{url=\"http://b\", weight=0, max_in_flight=0}}, \
                 {{url=\"http://b\"}}, {{url=\"ftp://c\", headers={{\"X k\"=\"v\"}}}}]\n\
                 [agents.pool]\nattempts=0\neject_base=\"10s\"\neject_max=\"1s\"\n"
            ),
        );
        let errs = Config::load(&p).unwrap_err();
        let keys: Vec<String> = errs
            .iter()
            .map(|e| format!("{}: {}", e.key, e.message))
            .collect();
        for want in [
            "agents[0].backends: set either url (one backend) or backends, not both",
            "agents[1].url: missing: set url (one backend) or backends",
            "agents[2].backends[0].weight: must be at least 1",
            "agents[2].backends[0].max_in_flight: must be at least 1",
            "agents[2].backends[1].url: duplicate backend url 'http://b'",
            "agents[2].backends[2].url: 'ftp://c' is not an http(s) URL",
            "agents[2].backends[2].headers.X k: not a valid header name",
            "agents[2].pool.attempts: must be 1 to 10",
            "agents[2].pool.eject_max: must not be less than eject_base",
        ] {
            assert!(
                keys.iter().any(|k| k.starts_with(want)),
                "{want}: {keys:#?}"
            );
        }
        // `url` alone is one backend of weight 1; affinity follows `branching.mode`.
        let p = write(
            &dir,
            &format!(
                "[auth]\nhs_secret = \"{SECRET}\"\n[[agents]]\nid=\"a\"\nurl=\"http://a\"\n\
                 [agents.branching]\nmode=\"same-thread\"\n"
            ),
        );
        let c = Config::load(&p).unwrap();
        assert_eq!(c.agents[0].backend_list()[0].url, "http://a");
        assert!(c.agents[0].affinity());
    }

    #[test]
    fn unknown_and_mistyped_keys_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            &dir,
            &format!("[auth]\nhs_secret = \"{SECRET}\"\n[server]\nlisen = \"x\"\n"),
        );
        let e = &Config::load(&p).unwrap_err()[0];
        assert_eq!(e.key, "server.lisen", "{e}");
        let p = write(
            &dir,
            &format!("[auth]\nhs_secret = \"{SECRET}\"\n[server]\nmax_body_bytes = \"lots\"\n"),
        );
        let e = &Config::load(&p).unwrap_err()[0];
        assert_eq!(e.key, "server.max_body_bytes", "{e}");
    }

    #[test]
    fn expand_env_replaces_and_reports() {
        // SAFETY: no other test reads or writes this variable.
        unsafe { std::env::set_var("AGUI_TEST_SET_VAR", "v") };
        assert_eq!(expand_env("a ${AGUI_TEST_SET_VAR} b").unwrap(), "a v b");
        assert_eq!(expand_env("plain").unwrap(), "plain");
        assert_eq!(expand_env("${AGUI_NOPE_X}").unwrap_err(), "AGUI_NOPE_X");
    }

    /// Every key of the schema as a path (`server.listen`,
    /// `agents[].timeouts.connect`) with its schema (property level).
    fn schema_keys(schema: &serde_json::Value) -> Vec<(String, serde_json::Value)> {
        fn resolve<'a>(
            root: &'a serde_json::Value,
            s: &'a serde_json::Value,
        ) -> &'a serde_json::Value {
            if let Some(r) = s["$ref"].as_str() {
                return &root["$defs"][r.trim_start_matches("#/$defs/")];
            }
            for alt in ["anyOf", "oneOf"] {
                if let Some(r) = s[alt]
                    .as_array()
                    .and_then(|a| a.iter().find(|x| x.get("$ref").is_some()))
                {
                    return resolve(root, r);
                }
            }
            s
        }
        fn walk(
            root: &serde_json::Value,
            path: &str,
            s: &serde_json::Value,
            out: &mut Vec<(String, serde_json::Value)>,
        ) {
            let r = resolve(root, s);
            if let Some(props) = r["properties"].as_object() {
                for (k, v) in props {
                    let sub = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(root, &sub, v, out);
                }
            } else if r["items"].is_object() && resolve(root, &r["items"])["properties"].is_object()
            {
                walk(root, &format!("{path}[]"), &r["items"], out);
            } else {
                out.push((path.to_owned(), s.clone()));
            }
        }
        let mut out = Vec::new();
        walk(schema, "", schema, &mut out);
        out
    }

    fn is_duration(key_schema: &serde_json::Value) -> bool {
        key_schema["$ref"] == "#/$defs/Duration"
    }

    #[test]
    fn schema_file_is_current() {
        let committed = include_str!("../config/schema.json");
        assert!(
            committed == json_schema_text(),
            "config/schema.json is not what the config types generate; regenerate it with\n  \
             cargo run -- config-schema > config/schema.json\n(and document any new key in docs/configuration.md)"
        );
    }

    #[test]
    fn every_key_has_a_description() {
        let schema = json_schema();
        let keys = schema_keys(&schema);
        assert!(keys.len() > 60, "{}", keys.len());
        for (key, s) in &keys {
            let own = s["description"].as_str().unwrap_or("");
            assert!(!own.trim().is_empty(), "{key}: no doc comment");
        }
    }

    /// docs/configuration.md has a row `| `key` | default | meaning |` for
    /// every key of the schema, whose default (its first `code`, or none)
    /// is the schema's.
    #[test]
    fn every_key_is_documented_with_its_default() {
        let docs = include_str!("../docs/configuration.md");
        let rows: BTreeMap<&str, &str> = docs
            .lines()
            .filter_map(|l| {
                let mut cells = l.strip_prefix("| `")?.splitn(3, '|');
                let key = cells.next()?.trim().strip_suffix('`')?;
                Some((key, cells.next()?.trim()))
            })
            .collect();
        let schema = json_schema();
        let keys = schema_keys(&schema);
        let mut problems = Vec::new();
        for (key, s) in &keys {
            let Some(cell) = rows.get(key.as_str()) else {
                problems.push(format!("{key}: no row in docs/configuration.md"));
                continue;
            };
            let documented = cell
                .strip_prefix('`')
                .and_then(|c| c.split_once('`'))
                .map(|(d, _)| d);
            let expected = match &s["default"] {
                serde_json::Value::Null => None,
                serde_json::Value::String(d) if d.is_empty() => Some("\"\"".into()),
                serde_json::Value::String(d) => Some(d.clone()),
                other => Some(other.to_string()),
            };
            let same = match (&expected, documented) {
                (None, None) => true,
                (Some(e), Some(d)) if is_duration(s) => {
                    duration::parse(e).ok() == duration::parse(d).ok()
                }
                (Some(e), Some(d)) => e == d,
                _ => false,
            };
            if !same {
                problems.push(format!(
                    "{key}: docs/configuration.md says {documented:?}, the schema {expected:?}"
                ));
            }
        }
        for key in rows.keys() {
            if !keys.iter().any(|(k, _)| k == key) {
                problems.push(format!("{key}: documented but not a key"));
            }
        }
        assert!(problems.is_empty(), "{problems:#?}");
    }

    /// Every key the shipped files set is a key of the schema, and every
    /// duration in them matches the schema's pattern.
    #[test]
    fn shipped_files_use_schema_keys() {
        fn flatten(path: &str, v: &toml::Value, out: &mut Vec<(String, toml::Value)>) {
            match v {
                toml::Value::Table(t) => {
                    for (k, v) in t {
                        let sub = if path.is_empty() {
                            k.clone()
                        } else {
                            format!("{path}.{k}")
                        };
                        flatten(&sub, v, out);
                    }
                }
                toml::Value::Array(items)
                    if items.iter().all(|i| i.is_table()) && !items.is_empty() =>
                {
                    for i in items {
                        flatten(&format!("{path}[]"), i, out);
                    }
                }
                _ => out.push((path.to_owned(), v.clone())),
            }
        }
        let schema = json_schema();
        let keys: BTreeMap<String, serde_json::Value> = schema_keys(&schema).into_iter().collect();
        let top = schema["properties"].as_object().unwrap();
        let pattern = regex::Regex::new(duration::PATTERN).unwrap();
        for f in ["config/gateway.toml", "deploy/cluster.toml"] {
            let text =
                std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(f)).unwrap();
            let file: toml::Value = toml::from_str(&text).unwrap();
            for k in file.as_table().unwrap().keys() {
                assert!(top.contains_key(k), "{f}: [{k}] is not in the schema");
            }
            let mut set = Vec::new();
            flatten("", &file, &mut set);
            for (key, value) in set {
                // Keys under a map (`agents[].headers.Authorization`) are the map's.
                let known = keys.get(&key).or_else(|| {
                    keys.iter()
                        .find(|(k, s)| {
                            s["additionalProperties"].is_object()
                                && key.starts_with(&format!("{k}."))
                        })
                        .map(|(_, s)| s)
                });
                let s = known.unwrap_or_else(|| panic!("{f}: {key} is not in the schema"));
                if is_duration(s)
                    && let toml::Value::String(d) = &value
                {
                    assert!(
                        pattern.is_match(d),
                        "{f}: {key} = {d:?} does not match the pattern"
                    );
                    duration::parse(d).unwrap();
                }
            }
        }
    }

    #[test]
    fn durations_read_the_same_everywhere() {
        let p = |s: &str| duration::parse(s).unwrap();
        assert_eq!(p("1h"), Duration::from_secs(3600));
        assert_eq!(p("90"), Duration::from_secs(90));
        assert_eq!(p(" 1h 30m "), Duration::from_secs(5400));
        assert_eq!(p("250ms"), Duration::from_millis(250));
        assert!(
            duration::parse("1x")
                .unwrap_err()
                .contains("'1x' is not a duration")
        );
        assert!(duration::parse("-5").is_err());
        let pattern = regex::Regex::new(duration::PATTERN).unwrap();
        for s in ["1h", "90", "1h 30m", "250ms", "2days", "0s"] {
            assert!(pattern.is_match(s), "{s}");
            assert_eq!(p(&duration::format(p(s))), p(s), "{s}");
        }
        assert!(!pattern.is_match("soon"));
        for (d, text) in [
            (3600, "1h"),
            (86400, "24h"),
            (90, "90s"),
            (600, "10m"),
            (0, "0s"),
        ] {
            assert_eq!(duration::format(Duration::from_secs(d)), text);
        }
        // In the file: text or whole seconds.
        let dir = tempfile::tempdir().unwrap();
        let f = write(
            &dir,
            &format!(
                "[auth]\nhs_secret = \"{SECRET}\"\n[server]\nkeepalive = 7\nshutdown_grace = \"1m\"\n"
            ),
        );
        let c = Config::load(&f).unwrap();
        assert_eq!(c.server.keepalive, Duration::from_secs(7));
        assert_eq!(c.server.shutdown_grace, Duration::from_secs(60));
        let f = write(
            &dir,
            &format!("[auth]\nhs_secret = \"{SECRET}\"\n[server]\nkeepalive = \"soon\"\n"),
        );
        let e = &Config::load(&f).unwrap_err()[0];
        assert_eq!(e.key, "server.keepalive", "{e}");
        assert!(e.message.contains("'soon' is not a duration"), "{e}");
    }

    #[test]
    fn redis_settings_are_checked_with_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let f = write(
            &dir,
            &format!(
                "[auth]\nhs_secret = \"{SECRET}\"\n[store]\nkind = \"redis\"\n\
                 url = \"redis://:${{AGUI_TEST_UNSET_PW}}@localhost\"\nlease_ttl = \"500ms\"\n"
            ),
        );
        let text: Vec<String> = Config::load(&f)
            .unwrap_err()
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert!(
            text.iter()
                .any(|t| t.ends_with("store.lease_ttl: must be at least 1s")),
            "{text:?}"
        );
        assert!(
            text.iter().any(|t| t
                .ends_with("store.url: references unset environment variable AGUI_TEST_UNSET_PW")),
            "{text:?}"
        );
    }

    #[test]
    fn shipped_configs_are_valid() {
        {
            let f = "config/gateway.toml";
            let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(f);
            Config::load(&p).unwrap_or_else(|e| panic!("{f}: {e:?}"));
        }
    }
}
