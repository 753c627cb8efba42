//! The AG-UI protocol version the gateway speaks.
//!
//! AG-UI 1.1 (`basic/versioning`, "Version negotiation") puts the version
//! in-band: a consumer declares its own on `RunAgentInput.protocolVersion`,
//! a producer declares *its own* on `RUN_STARTED.protocolVersion` — "never
//! an echo of the input's" — and "a proxy that forwards a run untranslated
//! declares what the original producer spoke, and one that translates
//! declares what it emits". So the gateway never rewrites an upstream's
//! `RUN_STARTED.protocolVersion` (the run is the agent's, relayed), and
//! writes this constant only where it speaks for itself: the run input it
//! builds for an agent, and every `RUN_STARTED` it makes (a run whose agent
//! failed or was cancelled before starting, a join stream opening a run
//! mid-way or around a snapshot, the built-in demo agent).
//!
//! 1.1 adds one thing to 1.0, `encryptedValueType`, which the fold keeps
//! and returns with its value ([`super::fold`]).

/// The `MAJOR.MINOR` the gateway declares.
pub const PROTOCOL_VERSION: &str = "1.1";
