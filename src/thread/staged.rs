//! What a run is about to journal, and what its HTTP requester gets for
//! each event instead.
//!
//! The journal holds the gateway's version of a run (the normalized input
//! on `RUN_STARTED`, canonical interrupts, the operator's filter applied);
//! the requester of the run mostly gets the same, but not always — the
//! agent's own `RUN_STARTED`, nothing for input the gateway restates — so
//! every staged event carries its [`ForRequester`].

use crate::protocol::Event;
use crate::protocol::hooks::EventFilter;

/// What the HTTP requester gets for a journaled event.
#[derive(Clone)]
pub(super) enum ForRequester {
    /// Nothing: the journal only (input the gateway restates, a synthetic
    /// opening the agent never sent).
    Nothing,
    /// The journaled event itself.
    Same,
    /// The agent's own version of it (its `RUN_STARTED`, before the
    /// gateway normalized the input and stamped it).
    Instead(Event),
}

/// Events about to be journaled, each with what the requester gets for it.
pub(super) type Staged = Vec<(Event, ForRequester)>;

/// Runs staged events through the run's filter; `true` when the filter ended
/// the run (its terminal event is then the last one). An event the filter
/// left unchanged keeps what the requester gets for it; anything the filter
/// changed or added is sent to the requester as journaled.
pub(super) fn apply_filter(
    filter: &mut Option<Box<dyn EventFilter>>,
    staged: Staged,
) -> (Staged, bool) {
    let Some(filter) = filter else {
        return (staged, false);
    };
    let mut out = Vec::with_capacity(staged.len());
    for (event, original) in staged {
        let before = event.json().clone();
        match filter.filter(event) {
            Ok(events) => {
                for e in events {
                    let keep = if *e.json() == before {
                        original.clone()
                    } else {
                        ForRequester::Same
                    };
                    out.push((e, keep));
                }
            }
            Err(end) => {
                out.push((*end, ForRequester::Same));
                return (out, true);
            }
        }
    }
    (out, false)
}
