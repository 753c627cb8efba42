//! The agent card the gateway serves for each of its agents at
//! `/a2a/{agent}/.well-known/agent-card.json`, generated from the agent's
//! config: its id and description, one JSON-RPC v1.0 interface at
//! `/a2a/{agent}` on the address the client used, streaming, bearer
//! authentication — and, for an agent that is itself an A2A agent behind
//! the gateway, the skills its own card lists.

use crate::upstream::Agent;
use axum::http::HeaderMap;
use serde_json::{Value, json};

/// The card of `agent`, reachable at `interface` (its JSON-RPC URL).
pub fn of(agent: &Agent, interface: &str) -> Value {
    let upstream = agent.a2a_cards().any();
    let description = match (&upstream, agent.description.is_empty()) {
        (Some(card), true) => card.description.clone(),
        _ => agent.description.clone(),
    };
    let skills = match &upstream {
        Some(card) if !card.skills.is_empty() => card.skills.clone(),
        _ => vec![json!({
            "id": agent.id, "name": agent.id, "description": description,
            "tags": ["ag-ui"],
        })],
    };
    json!({
        "name": agent.id,
        "description": description,
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [
            {"url": interface, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": skills,
        "securitySchemes": {"bearer": {"httpAuthSecurityScheme": {
            "scheme": "Bearer", "bearerFormat": "JWT",
            "description": "the gateway's bearer token, as for every other route",
        }}},
        "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
    })
}

/// `scheme://host` as the client reached the gateway: the `Host` header,
/// `https` when the gateway terminates TLS or a proxy in front of it says
/// so (`X-Forwarded-Proto`), so the card names a URL the client can use.
pub fn public_base(headers: &HeaderMap, tls: bool) -> String {
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let forwarded = headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .map(|p| {
            p.split(',')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
    let scheme = match forwarded.as_deref() {
        Some("https") => "https",
        Some("http") => "http",
        _ if tls => "https",
        _ => "http",
    };
    format!("{scheme}://{host}")
}
