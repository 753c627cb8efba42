//! Upstream agents: which agent a run goes to ([`routing`]), the backends
//! it may run on ([`pool`]: [`backend`], [`balancer`], [`affinity`],
//! [`health`], [`probe`]) and the HTTP client that POSTs `RunAgentInput`, reads its SSE
//! back and fails over before the first event ([`client`], with what an
//! attempt yields in [`attempt`], over connections kept alive between runs,
//! [`keep_alive`]); an agent that
//! speaks A2A instead is reached through [`a2a`], chosen by the agent's
//! `protocol` where a run attempt starts.

pub mod a2a;
pub mod affinity;
pub mod attempt;
pub mod backend;
pub mod balancer;
pub mod client;
pub mod health;
pub mod keep_alive;
pub mod pool;
pub mod probe;
pub mod routing;
pub mod trace;

pub use attempt::UpstreamCode;
pub use client::RunStream;
pub use routing::{Agent, AgentRegistry};

/// The `url` value that points an agent at the built-in demo agent (a config
/// value, so defined in config; re-exported for the router).
pub use crate::config::DEMO_URL;
