//! `[policy]` (the operator's rules file) and `[meta]` (meta events and
//! their webhook), with their checks.

use super::*;

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

impl MetaConfig {
    /// Checks of `[meta]`.
    pub(super) fn check(&self, bad: &mut impl FnMut(String, String)) {
        if let Some(u) = &self.webhook_url {
            check_http_url(u, &mut |e| bad("meta.webhook_url".into(), e));
        }
        for (name, value) in &self.webhook_headers {
            if let Err(var) = expand_env(value) {
                bad(
                    format!("meta.webhook_headers.{name}"),
                    format!("references unset environment variable {var}"),
                );
            }
        }
    }
}
