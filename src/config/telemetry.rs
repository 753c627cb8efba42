//! `[tracing]`: OpenTelemetry export, with its checks.

use super::*;

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

impl TracingConfig {
    /// Checks of `[tracing]`.
    pub(super) fn check(&self, bad: &mut impl FnMut(String, String)) {
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            bad(
                "tracing.sample_ratio".into(),
                format!("{} is not between 0.0 and 1.0", self.sample_ratio),
            );
        }
        let endpoint = &self.otlp_endpoint;
        if !endpoint.is_empty() {
            check_http_url(endpoint, &mut |e| bad("tracing.otlp_endpoint".into(), e));
        }
        if self.service_name.trim().is_empty() {
            bad("tracing.service_name".into(), "must not be empty".into());
        }
    }
}
