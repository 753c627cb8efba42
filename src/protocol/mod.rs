//! The AG-UI wire model, pure: no I/O, no clocks but event timestamps.
//!
//! Data flows through it in this order: [`sse`] turns bytes into frames,
//! [`event`] turns a frame into a lossless [`Event`], [`chunks`] expands
//! `*_CHUNK` events, [`verify`] checks the stream against the AG-UI client's
//! rules. [`input`] is the request side (`RunAgentInput` and what it holds).
//! [`fold`] summarizes a journal; [`open`] tracks what a run left open;
//! [`join`] presents any window of a journal as a valid AG-UI stream.
//! [`hooks`] are the traits policy implements for the run loop;
//! [`authorship`] says which agent's run each event and message belongs to;
//! [`lineage`] is the run tree (runs as commits, the head, checkpoints);
//! [`url_host`] reads a URL only in the form every HTTP client reads alike;
//! [`version`] is the AG-UI version the gateway declares.

pub mod authorship;
pub mod checkpoint;
pub mod chunks;
pub mod event;
pub mod export;
pub mod fold;
pub mod handoff;
pub mod hooks;
pub mod id_list;
pub mod input;
pub mod interrupts;
pub mod join;
pub mod json_patch_atomic;
pub mod lineage;
pub mod message;
pub mod message_list;
pub mod open;
pub mod page_spill;
pub mod run_list;
pub mod sealed;
pub mod sse;
pub mod url_host;
pub mod verify;
pub mod version;

pub use event::{Event, EventError, EventType};
pub use input::RunAgentInput;
pub use version::PROTOCOL_VERSION;
