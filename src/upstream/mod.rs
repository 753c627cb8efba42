//! Upstream agents: which agent a run goes to ([`routing`]) and the HTTP
//! client that POSTs `RunAgentInput` and reads its SSE back ([`client`]).

pub mod client;
pub mod routing;
pub mod trace;

pub use client::{RunStream, UpstreamCode};
pub use routing::{Agent, AgentRegistry};

/// The `url` value that points an agent at the built-in demo agent (a config
/// value, so defined in config; re-exported for the router).
pub use crate::config::DEMO_URL;
