//! An A2A agent's card (`<url>/.well-known/agent-card.json`): who it is
//! (name, description, skills — shown in `GET /v1/agents`), whether it
//! streams, and the one thing a run cannot do without: the URL of its
//! JSON-RPC interface, which need not be the base URL the operator gave.
//!
//! Only A2A v1.0 is spoken: a card must list a `supportedInterfaces` entry
//! with `protocolBinding` `JSONRPC` and a `protocolVersion` of 1.x. A 0.3
//! card (a top-level `url` and `preferredTransport`) is refused with a
//! message saying so: its JSON-RPC methods (`message/stream`) and part shapes
//! (`kind`) differ, and the a2a-sdk serves both versions on one endpoint
//! when asked, so a 1.0 interface is the one to point the gateway at.

use reqwest::Url;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Where the card lives, relative to the agent's base URL.
pub const WELL_KNOWN: &str = ".well-known/agent-card.json";
/// How long reading a card may take.
const CARD_WAIT: Duration = Duration::from_secs(5);

/// What the gateway uses of a card.
#[derive(Debug, Clone)]
pub struct Card {
    pub name: String,
    pub description: String,
    /// As the card lists them (id, name, description, tags, examples, …).
    pub skills: Vec<Value>,
    /// The card's `capabilities`, as it came.
    pub capabilities: Value,
    /// Whether to use `SendStreamingMessage` (else a blocking `SendMessage`).
    pub streaming: bool,
    /// Where JSON-RPC requests go.
    pub rpc_url: Url,
}

impl Card {
    /// Reads the card of `card` (a JSON object) whose agent lives at `base`.
    pub fn parse(card: &Value, base: &Url) -> Result<Card, String> {
        let text = |k: &str| card.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let interfaces = card
            .get("supportedInterfaces")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                if card.get("preferredTransport").is_some() || card.get("url").is_some() {
                    "an A2A 0.3 card (no supportedInterfaces): the gateway speaks A2A 1.0"
                        .to_owned()
                } else {
                    "no supportedInterfaces".to_owned()
                }
            })?;
        let rpc = interfaces
            .iter()
            .find(|i| {
                let binding = i
                    .get("protocolBinding")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let version = i
                    .get("protocolVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                binding.eq_ignore_ascii_case("JSONRPC")
                    && (version.is_empty() || version.starts_with("1."))
            })
            .and_then(|i| i.get("url").and_then(Value::as_str))
            .ok_or("no JSONRPC interface of protocolVersion 1.x in supportedInterfaces")?;
        let rpc_url = base
            .join(rpc)
            .map_err(|e| format!("interface url '{rpc}': {e}"))?;
        let capabilities = card.get("capabilities").cloned().unwrap_or(Value::Null);
        Ok(Card {
            name: text("name"),
            description: text("description"),
            skills: card
                .get("skills")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            streaming: capabilities.get("streaming").and_then(Value::as_bool) == Some(true),
            capabilities,
            rpc_url,
        })
    }

    /// Fetches and parses the card of the agent at `base`.
    pub async fn fetch(
        http: &reqwest::Client,
        base: &Url,
        headers: &reqwest::header::HeaderMap,
    ) -> Result<Card, String> {
        let url = card_url(base)?;
        let response = http
            .get(url)
            .headers(headers.clone())
            .timeout(CARD_WAIT)
            .send()
            .await
            .map_err(|e| format!("agent card unreachable: {}", e.without_url()))?;
        if !response.status().is_success() {
            return Err(format!(
                "agent card answered HTTP {}",
                response.status().as_u16()
            ));
        }
        let value: Value = response
            .json()
            .await
            .map_err(|e| format!("agent card is not JSON: {}", e.without_url()))?;
        Card::parse(&value, base).map_err(|e| format!("agent card: {e}"))
    }

    /// The agent as `GET /v1/agents` adds it: `{a2a: {name, description, skills, capabilities}}`.
    pub fn listing(&self) -> Value {
        serde_json::json!({
            "name": self.name, "description": self.description,
            "skills": self.skills, "capabilities": self.capabilities,
        })
    }
}

/// `<base>/.well-known/agent-card.json`, whether or not `base` ends in `/`.
pub fn card_url(base: &Url) -> Result<Url, String> {
    let mut dir = base.clone();
    if !dir.path().ends_with('/') {
        dir.set_path(&format!("{}/", dir.path()));
    }
    dir.join(WELL_KNOWN).map_err(|e| e.to_string())
}

/// The cards of an agent's backends, by backend name: read when the agent
/// is built (start, reload) and again by a run that finds none (the agent
/// was down then), so a card is never older than the config that named it.
#[derive(Debug, Default)]
pub struct Cards {
    by_backend: Mutex<HashMap<String, std::sync::Arc<Card>>>,
}

impl Cards {
    pub fn get(&self, backend: &str) -> Option<std::sync::Arc<Card>> {
        self.lock().get(backend).cloned()
    }

    pub fn put(&self, backend: &str, card: Card) -> std::sync::Arc<Card> {
        let card = std::sync::Arc::new(card);
        self.lock().insert(backend.into(), card.clone());
        card
    }

    /// Any backend's card (they serve one agent), for the listing.
    pub fn any(&self) -> Option<std::sync::Arc<Card>> {
        self.lock().values().next().cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, std::sync::Arc<Card>>> {
        self.by_backend.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_interface_url_comes_from_the_card_and_0_3_is_named() {
        let base = Url::parse("http://h:1/agents/x").unwrap();
        assert_eq!(
            card_url(&base).unwrap().as_str(),
            "http://h:1/agents/x/.well-known/agent-card.json"
        );
        let card = Card::parse(
            &json!({"name": "n", "capabilities": {"streaming": true}, "supportedInterfaces": [
                {"url": "http://h:1/grpc", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
                {"url": "http://h:1/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]}),
            &base,
        )
        .unwrap();
        assert_eq!(card.rpc_url.as_str(), "http://h:1/rpc");
        assert!(card.streaming);
        let old = Card::parse(
            &json!({"url": "http://h:1/", "preferredTransport": "JSONRPC"}),
            &base,
        )
        .unwrap_err();
        assert!(old.contains("0.3"), "{old}");
    }
}
