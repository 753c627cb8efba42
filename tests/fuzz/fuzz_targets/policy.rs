//! Fuzz target `policy`: the policy loader, `policy::Policy::parse(text,
//! origin)`, on arbitrary text (TOML, rules, globs, regexes, CEL `when`
//! conditions).
//!
//! It asserts that loading never panics, except inside the CEL parser:
//! `cel-parser` (and the `antlr4rust` runtime under it) is known to panic on
//! some malformed conditions (e.g. `&& &&`), and
//! `policy::cel::Condition::compile` contains that with `catch_unwind`, the
//! only one in the gateway. The fuzzer's own panic hook aborts on *every*
//! panic, caught or not, so this target wraps it: a panic raised in the CEL
//! crates is let through to unwind (into that `catch_unwind`; should nothing
//! catch it, libfuzzer-sys's own `catch_unwind` still aborts and the input is
//! a crash), anything else aborts as usual and is a finding. It also asserts
//! that a refused policy says why, each error naming the origin, and that
//! loading the same text twice gives the same answer.

#![no_main]

use agui_gateway::policy::Policy;
use libfuzzer_sys::fuzz_target;
use std::backtrace::Backtrace;

const ORIGIN: &str = "fuzz.toml";

fuzz_target!(
    init: {
        let fuzzer_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !in_cel_crates(info) {
                fuzzer_hook(info);
            }
        }));
    },
    |data: &[u8]| {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        let first = Policy::parse(text, ORIGIN);
        if let Err(errors) = &first {
            assert!(!errors.is_empty(), "refused without a reason");
            for e in errors {
                assert!(e.starts_with(ORIGIN), "error does not name the origin: {e}");
            }
        }
        let second = Policy::parse(text, ORIGIN);
        assert_eq!(first.is_ok(), second.is_ok(), "same text, different answer");
        assert_eq!(first.err(), second.err(), "same text, different errors");
    }
);

/// Crates whose panics `Condition::compile` contains, as they appear in
/// source paths.
const CEL_CRATES: &[&str] = &["/cel-parser-", "/cel-interpreter-", "/antlr4rust-"];

/// Whether a panic is raised in the CEL crates: by its location, else (a
/// panic raised in `core`, say, on their behalf) by a frame of theirs on the
/// stack.
fn in_cel_crates(info: &std::panic::PanicHookInfo<'_>) -> bool {
    let in_cel = |path: &str| CEL_CRATES.iter().any(|c| path.contains(c));
    if info.location().is_some_and(|l| in_cel(l.file())) {
        return true;
    }
    in_cel(&Backtrace::force_capture().to_string())
}
