//! `[demo]`: the built-in demo agent, with its checks.

use super::*;

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

impl DemoConfig {
    /// Checks of `[demo]`.
    pub(super) fn check(&self, bad: &mut impl FnMut(String, String)) {
        if self.enabled && self.listen.parse::<std::net::SocketAddr>().is_err() {
            bad(
                "demo.listen".into(),
                format!("'{}' is not an ip:port address", self.listen),
            );
        }
    }
}
