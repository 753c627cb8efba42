//! agui-gateway: a secure, multi-viewer proxy in front of AG-UI agents.
//!
//! The modules read as the data path: [`protocol`] (the pure AG-UI wire model)
//! → [`upstream`] (agent HTTP client and routing) → [`server`] (what clients
//! talk to), with [`auth`] and [`config`] beside them, and [`demo`] as a
//! stand-alone AG-UI agent the default config runs so the gateway works out of
//! the box. [`app`] wires them into a serving process (`main.rs` only reads
//! the command line and the configuration).
//!
//! [`metrics`] is a leaf every layer counts into (Prometheus at `/metrics`);
//! [`telemetry`] exports the gateway's spans over OTLP when configured;
//! [`fault`] names the seams the crash-timing tests stop a node at
//! (compiled in only with the `failpoints` feature);
//! [`log_line`] keeps each log event on one line whatever clients sent.
//!
//! [`config`] is plain settings data and imports no sibling but [`protocol`];
//! what acts on it lives with its user ([`auth`] grants and keys, [`policy`]
//! reading its file), so config is never part of an import cycle.

pub mod app;
pub mod auth;
pub mod config;
pub mod demo;
pub mod fault;
pub mod log_line;
pub mod metrics;
pub mod policy;
pub mod protocol;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod thread;
pub mod upstream;
