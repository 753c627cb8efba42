//! A handoff: a run that ends asking for another agent is followed, on the
//! same thread and in the same run slot, by that agent's run.
//!
//! The thread knows how to notice the request ([`SignalWatch`]) and how to
//! chain the next run without letting anything in between (the slot passes
//! from one run to the next before the first one's terminal event is
//! published, see [`Thread::hand_over`]); whether the handoff may happen and
//! what the next run is — the target's rules, the caller's rights, an
//! approval — is the policy's, above this layer, reached through the
//! [`HandoffHook`] a run request carries (its types live with the request,
//! [`super::request`], which they are part of).
//!
//! [`SignalWatch`]: crate::protocol::handoff::SignalWatch

pub use super::request::{Decision, Ended, HandoffHook, HandoffPlan, Incoming, Then};
use super::{Entry, Thread};
use crate::protocol::Event;
use crate::protocol::event::now_millis;
use crate::protocol::handoff::{ACTIVE_AGENT_EVENT, ActiveAgent};
use crate::protocol::lineage::RunKind;
use crate::store::StoreError;
use serde_json::json;
use std::sync::Arc;

impl Thread {
    /// How many handoffs in a row led to `run_id` (0 for a run a person
    /// started).
    pub(super) fn handoff_chain(&self, run_id: &str) -> usize {
        let inner = self.lock();
        inner
            .fold
            .runs()
            .path(run_id)
            .iter()
            .take_while(|r| r.kind == RunKind::Handoff)
            .count()
    }
}

impl Thread {
    /// Who speaks on the thread now and who its turn began with, as the
    /// journal says (see [`ActiveAgent`]).
    pub fn active_agent(&self) -> ActiveAgent {
        self.lock().fold.agents().clone()
    }

    /// The head's pending interrupts.
    pub fn pending_interrupts(&self) -> Vec<serde_json::Value> {
        self.lock().fold.interrupts().to_vec()
    }

    /// Journals a person's switch of the thread's active agent to `agent`
    /// (the next plain run goes to it).
    pub async fn switch_agent(&self, agent: &str, by: &str) -> Result<Arc<Entry>, StoreError> {
        let event = Event::build(json!({
            "type": "CUSTOM",
            "name": ACTIVE_AGENT_EVENT,
            "value": {"agent": agent, "by": by, "at": now_millis()},
        }));
        let mut entries = self.try_append(vec![event]).await?;
        entries
            .pop()
            .ok_or_else(|| StoreError::Failed("the switch was not journaled".into()))
    }
}
