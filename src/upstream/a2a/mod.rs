//! A2A agents behind the gateway (`[[agents]] protocol = "a2a"`): their
//! agent card ([`card`]), one run's JSON-RPC exchange ([`client`]) and the
//! mapping between A2A and AG-UI ([`mapping`]; the table is docs/a2a.md).
//!
//! An upstream protocol is one module here, chosen where a run attempt
//! starts ([`crate::upstream::client`]): everything after that point — the
//! channel of events, failover, the thread, the journal, viewers, policy —
//! is the AG-UI path, unchanged.

pub mod card;
pub mod client;
pub mod mapping;
