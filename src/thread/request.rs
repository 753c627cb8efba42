//! A request for a run, and why one is refused.
//!
//! What every face (WebSocket, AG-UI HTTP, AI SDK) hands the thread: the
//! agent, the input, who follows the run, where it starts from. Below
//! everything else in `thread/` that looks at a request (`branch`,
//! `run_input`, `drive`, `run`), so none of them reaches back up.

use super::fanout::Outbox;
use crate::protocol::Event;
use crate::protocol::handoff::{HistoryFilter, Signal};
use crate::protocol::hooks::{EventFilter, RunInput, ViewerVisibility};
use crate::upstream::Agent;
use serde_json::Value;
use std::sync::Arc;

/// A request to run an agent on a thread.
pub struct RunRequest {
    pub agent: Arc<Agent>,
    pub run_id: String,
    pub input: RunInput,
    /// The HTTP requester's stream: this run's events only.
    pub starter: Option<Arc<Outbox>>,
    /// What the HTTP requester may see.
    pub starter_visibility: ViewerVisibility,
    /// A WebSocket requester's connection: it sees the run as a viewer, and
    /// is told here (an `error` frame naming the run) if the run, queued,
    /// can never start.
    pub requester_connection: Option<Arc<Outbox>>,
    /// Operator rules on the run's events, if any.
    pub filter: Option<Box<dyn EventFilter>>,
    /// Extra upstream request headers (the verified identity, when configured).
    pub upstream_headers: reqwest::header::HeaderMap,
    /// The run's span (thread, run, agent): the run is driven inside it, so
    /// the upstream request's span is its child.
    pub span: tracing::Span,
    /// Where the run starts from ([`super::branch`]).
    pub base: BaseRequest,
    /// Who asked for it (the principal's subject), journaled with the run.
    pub started_by: Option<String>,
    /// Its transfer tools and what follows a handoff ([`super::handoff`]).
    pub handoff: HandoffPlan,
    /// The backend group of the agent's pool its routing rules chose for
    /// it (`None`: the canary's share or the default group).
    pub route: Option<String>,
}

/// Decides what follows a run that asked for a handoff.
pub trait HandoffHook: Send + Sync {
    /// The agent a tool named `tool_name` transfers to, if it is a transfer
    /// tool of this run (a client's own tool of that name is not).
    fn target(&self, tool_name: &str) -> Option<String>;

    /// What follows `ended`.
    fn decide(&self, ended: &Ended<'_>) -> Decision;
}

/// A run that ended (successfully) asking for a handoff.
pub struct Ended<'a> {
    pub thread_id: &'a str,
    pub run_id: &'a str,
    pub agent: &'a str,
    /// Every request the run made, first first (the first one wins).
    pub signals: &'a [Signal],
    /// Handoffs in a row that led to this run in the current turn.
    pub chain: usize,
}

/// What follows a run that asked for a handoff.
pub struct Decision {
    /// Journaled in the ending run, before its terminal event (why a
    /// handoff was refused).
    pub notes: Vec<Event>,
    pub then: Then,
}

pub enum Then {
    /// Start this run next, in the same slot. `keep_requester`: the HTTP
    /// requester's response goes on with it (else it ends with this run).
    Start {
        run: Box<RunRequest>,
        keep_requester: bool,
    },
    /// Ask a person first: the run ends with this interrupt pending.
    Ask(Value),
    /// Nothing follows: the transfer call stays pending.
    End,
}

/// What a run that takes a thread over is given besides its input.
#[derive(Debug, Clone)]
pub struct Incoming {
    /// The `CUSTOM agui-gateway/handoff` value journaled after its
    /// `RUN_STARTED` (without `result`, which is added once the agent
    /// answered or failed).
    pub record: Value,
    /// The transfer call whose tool result (in the input) says the
    /// transfer happened; rewritten as a failure if the agent never starts.
    pub tool_call_id: Option<String>,
    pub history: HistoryFilter,
    /// Whether the thread's state is sent (else `{}`).
    pub carry_state: bool,
}

/// A run request's handoff parts.
#[derive(Default)]
pub struct HandoffPlan {
    /// Tools offered to the agent besides the client's (its transfer tools):
    /// in the upstream body only, never in the journal.
    pub tools: Vec<Value>,
    /// Decides what follows a handoff request; `None`: requests are ignored.
    pub hook: Option<std::sync::Arc<dyn HandoffHook>>,
    /// Set when this run takes the thread over from another.
    pub incoming: Option<Incoming>,
    /// The run's `resume` answers the gateway's own interrupt (a transfer's
    /// approval): journaled, never sent to an agent that did not raise it.
    pub withhold_resume: bool,
}

/// How a request was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    Now,
    /// Queued behind this many runs (active one included).
    Queued(usize),
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunRefused {
    /// `conflict`: a run is active, interrupts are pending, or they were already answered.
    #[error("{0}")]
    Conflict(String),
    /// `invalid`: a resume that does not answer the pending interrupts.
    #[error("{0}")]
    Invalid(String),
    /// `unavailable`: the store shared with the other nodes cannot be reached.
    #[error("{0}")]
    Unavailable(String),
    /// `not_found`: the run or message a branch names is not (or no longer) known.
    #[error("{0}")]
    NotFound(String),
    /// `too_large`: a per-thread cap on runs or branches is reached.
    #[error("{0}")]
    TooLarge(String),
}

impl RunRefused {
    /// The contract's stable code.
    pub fn code(&self) -> &'static str {
        match self {
            RunRefused::Conflict(_) => "conflict",
            RunRefused::Invalid(_) => "invalid",
            RunRefused::Unavailable(_) => "unavailable",
            RunRefused::NotFound(_) => "not_found",
            RunRefused::TooLarge(_) => "too_large",
        }
    }
}

/// Where a run asks to start from.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum BaseRequest {
    /// The head (or, with a resume, the head's interrupts answered).
    #[default]
    Head,
    /// `parentRunId`: from the end of this run of the thread.
    Run(String),
    /// Answer this assistant message again (default: the head's last one).
    Regenerate(Option<String>),
    /// This user message (same id) with new content.
    Edit { message_id: String, message: Value },
    /// The head, taken over from the run that just ended there by a handoff.
    Handoff,
    /// A complete input from a client that does not name a base: a strict
    /// prefix of the head's history ending in a user message is a
    /// regenerate, a known user message with new content an edit, anything
    /// else the head.
    Detect,
}

/// A plain run request for the unit tests: `messages` as new input, at
/// `base`, by user `u`; its fields are public for whatever a test changes.
#[cfg(test)]
pub(crate) fn test_request(
    agent: Arc<Agent>,
    run_id: &str,
    messages: Vec<Value>,
    base: super::branch::BaseRequest,
) -> RunRequest {
    RunRequest {
        agent,
        run_id: run_id.into(),
        input: RunInput::Incremental {
            messages,
            tools: vec![],
            context: vec![],
            state: None,
            forwarded_props: None,
            resume: None,
        },
        starter: None,
        requester_connection: None,
        starter_visibility: None,
        filter: None,
        upstream_headers: Default::default(),
        span: tracing::Span::none(),
        base,
        started_by: Some("u".into()),
        handoff: Default::default(),
        route: None,
    }
}
