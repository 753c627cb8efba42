//! `[inspector]`: the built-in inspector's page.

use super::*;

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
