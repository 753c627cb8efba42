//! Fuzz target `run_agent_input`: the run request parser,
//! `protocol::RunAgentInput::from_json` and `validate`.
//!
//! The input is a request body as a client would send it. It asserts:
//!
//! - `from_json` never panics, and accepts exactly the bodies that plain
//!   `serde_json` deserializes *and* `validate` passes (the path-reporting
//!   deserializer must not disagree with the plain one);
//! - a refusal names a path and a message;
//! - an accepted input, written back out as the gateway writes it to the
//!   agent, parses again to the same input (nothing the client sent is lost
//!   or changed on the way through the gateway).

#![no_main]

use agui_gateway::protocol::RunAgentInput;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parsed = RunAgentInput::from_json(data);
    let plain = serde_json::from_slice::<RunAgentInput>(data);
    let plain_valid = plain.as_ref().ok().map(RunAgentInput::validate);
    match &parsed {
        Ok(input) => {
            assert_eq!(plain.as_ref().ok(), Some(input), "plain serde_json agrees");
            assert_eq!(plain_valid, Some(Ok(())), "from_json validated");
            let bytes = serde_json::to_vec(input).expect("an input serializes");
            let again = RunAgentInput::from_json(&bytes)
                .unwrap_or_else(|e| panic!("re-parse of {}: {e}", String::from_utf8_lossy(&bytes)));
            assert_eq!(&again, input, "round trip");
        }
        Err(e) => {
            assert!(!e.path.is_empty() && !e.message.is_empty(), "{e:?}");
            assert!(
                !matches!(plain_valid, Some(Ok(()))),
                "plain serde_json and validate accept what from_json refused: {e}"
            );
        }
    }
});
