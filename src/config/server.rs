//! `[server]` (listening, TLS, connection limits, timeouts), `[cors]` and
//! `[ws]`: how clients reach the gateway, with the checks of those keys.

use super::*;

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

impl ServerConfig {
    /// Checks of `[server]`.
    pub(super) fn check(&self, bad: &mut impl FnMut(String, String)) {
        if self.listen.parse::<std::net::SocketAddr>().is_err() {
            bad(
                "server.listen".into(),
                format!("'{}' is not an ip:port address", self.listen),
            );
        }
        if self.body_read_timeout < Duration::from_millis(100) {
            bad(
                "server.body_read_timeout".into(),
                "must be at least 100ms".into(),
            );
        }
        if self.header_read_timeout < Duration::from_millis(100) {
            bad(
                "server.header_read_timeout".into(),
                "must be at least 100ms".into(),
            );
        }
        if self.max_body_bytes < 1024 {
            bad(
                "server.max_body_bytes".into(),
                "must be at least 1024".into(),
            );
        }
    }
}

impl CorsConfig {
    /// Checks of `[cors]`.
    pub(super) fn check(&self, bad: &mut impl FnMut(String, String)) {
        for (i, h) in self.allowed_headers.iter().enumerate() {
            if h != "*" && reqwest::header::HeaderName::from_bytes(h.as_bytes()).is_err() {
                bad(
                    format!("cors.allowed_headers[{i}]"),
                    format!("'{}' is not a header name", h.escape_default()),
                );
            }
        }
    }
}
