//! `GET /v1/agents/{agent}/capabilities`: what a client can count on when
//! it runs an agent through the gateway, in AG-UI's `AgentCapabilities`
//! shape (docs.ag-ui.com, "Capabilities").
//!
//! The gateway declares what it provides whatever the agent: streaming,
//! WebSocket, the protobuf encoding, resumable streams (the journal),
//! interrupts, and the agent's handoff targets. AG-UI defines no HTTP route
//! through which an agent declares its own, so an agent's are merged in
//! only when the operator names where to read them (`capabilities_url`);
//! the gateway's word wins where both speak (the transport is the
//! gateway's, not the agent's). "Absent = unknown": nothing is declared
//! that the gateway does not know.

use super::commands;

use super::extract::Authenticated;
use super::state::AppState;
use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::Arc;

/// How long the agent's own declaration may take to arrive.
const UPSTREAM_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

pub async fn get(
    State(state): State<Arc<AppState>>,
    Path(agent_id): Path<String>,
    Authenticated(who): Authenticated,
) -> Response {
    let agent = match commands::runnable_agent(&state, &who, &agent_id) {
        Ok(agent) => agent,
        Err(e) => return e.into_response(),
    };
    let policy = state.policy();
    let handoff = crate::policy::handoff::of(policy.rules()).of(&agent.id);
    let agents = state.agents();
    // Only targets this caller may run: a handoff never escalates.
    let targets: Vec<Value> = handoff
        .targets
        .iter()
        .filter_map(|t| agents.get(t))
        .filter(|t| t.allows(&who))
        .map(|t| json!({"name": t.id, "description": t.description}))
        .collect();
    let mut ours = json!({
        "identity": {"name": agent.id, "description": agent.description},
        "transport": {"streaming": true, "websocket": true, "httpBinary": true, "resumable": true},
        "humanInTheLoop": {"supported": true, "interrupts": true},
        "multiAgent": {"supported": !targets.is_empty(), "handoffs": !targets.is_empty(), "subagents": targets},
    });
    // Approvals the gateway itself asks for (its handoffs'); absent = unknown
    // (the agent's own approvals, if any, are its to declare).
    if handoff.approval == crate::policy::handoff::Approval::User {
        ours["humanInTheLoop"]["approvals"] = true.into();
    }
    // An A2A agent's card says who it is and what it can do.
    if let Some(card) = agent.a2a_cards().any() {
        ours["identity"]["a2a"] = card.listing();
    }
    if let Some(url) = &agent.capabilities_url {
        match upstream(&agent, url).await {
            Ok(theirs) => ours = merged(theirs, ours),
            Err(e) => {
                tracing::warn!(agent = %agent.id, "the agent's capabilities could not be read: {e}");
                ours["custom"] = json!({"agui-gateway": {"upstream": "unavailable"}});
            }
        }
    }
    Json(ours).into_response()
}

/// The agent's own declaration, read from `url` with its first backend's
/// configured headers (the same credentials a run carries).
async fn upstream(agent: &crate::upstream::Agent, url: &reqwest::Url) -> Result<Value, String> {
    let headers = agent
        .pool
        .backends
        .first()
        .map(|b| b.headers.clone())
        .unwrap_or_default();
    let response = agent
        .http
        .get(url.clone())
        .headers(headers)
        .timeout(UPSTREAM_WAIT)
        .send()
        .await
        .map_err(|e| e.without_url().to_string())?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status().as_u16()));
    }
    let value: Value = response
        .json()
        .await
        .map_err(|e| e.without_url().to_string())?;
    value
        .is_object()
        .then_some(value)
        .ok_or_else(|| "not a JSON object".into())
}

/// `base` with `over` laid on top, object by object.
fn merged(base: Value, over: Value) -> Value {
    match (base, over) {
        (Value::Object(mut b), Value::Object(o)) => {
            for (k, v) in o {
                let merged_value = match b.remove(&k) {
                    Some(old) => merged(old, v),
                    None => v,
                };
                b.insert(k, merged_value);
            }
            Value::Object(b)
        }
        (_, over) => over,
    }
}
