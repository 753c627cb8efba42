//! RFC 6902 patches applied all or nothing, and never a panic.
//!
//! Why not `json_patch::patch` alone: it applies the operations in place
//! and, when one fails, undoes the ones before it from an undo list, and
//! panics ("unable to undo applied patches") when the undo itself fails.
//! It does for a `move` whose target is invalid: the move has already
//! removed its source when it fails, so undoing an earlier `add` of that
//! source finds nothing. The `fold` fuzz target found it with a
//! `STATE_DELTA` of three operations. An agent's delta must never take a
//! thread's task down, so a patch with a `move` is applied to a copy,
//! swapped in only when every operation succeeded. Every other patch keeps
//! the in-place path: no copy of a state that may be megabytes for a delta
//! of a few bytes.

use json_patch::{Patch, PatchOperation};
use serde_json::Value;

/// Applies `ops` to `doc`: true when every operation succeeded; false
/// leaves `doc` as it was.
pub fn apply(doc: &mut Value, ops: &Patch) -> bool {
    if ops.0.iter().all(undone_in_place) {
        return json_patch::patch(doc, ops).is_ok();
    }
    let mut work = doc.clone();
    if json_patch::patch_unsafe(&mut work, ops).is_err() {
        return false;
    }
    *doc = work;
    true
}

/// True when `json_patch` undoes `op` right should a later one fail:
/// every operation but `move`, which is not atomic (see the module's docs).
fn undone_in_place(op: &PatchOperation) -> bool {
    !matches!(op, PatchOperation::Move(_))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patch(v: Value) -> Patch {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_failing_move_after_an_add_leaves_the_document_as_it_was() {
        // The fuzz target's case: `json_patch::patch` panics on it.
        let mut doc = json!({});
        let ops = patch(json!([
            {"op": "add", "path": "/-", "value": 1},
            {"op": "add", "path": "/~0", "value": [null, 2]},
            {"op": "move", "from": "/~0", "path": "/x/y"},
        ]));
        assert!(!apply(&mut doc, &ops));
        assert_eq!(doc, json!({}));
    }

    #[test]
    fn a_failing_patch_after_an_append_or_a_copy_leaves_the_array_as_it_was() {
        let mut doc = json!({"a": [1]});
        let ops = patch(json!([
            {"op": "add", "path": "/a/-", "value": 2},
            {"op": "test", "path": "/a/0", "value": 9},
        ]));
        assert!(!apply(&mut doc, &ops));
        assert_eq!(doc, json!({"a": [1]}));
        let ops = patch(json!([
            {"op": "copy", "from": "/a/0", "path": "/a/-"},
            {"op": "remove", "path": "/nope"},
        ]));
        assert!(!apply(&mut doc, &ops));
        assert_eq!(doc, json!({"a": [1]}));
    }

    #[test]
    fn patches_that_succeed_apply_on_either_path() {
        let mut doc = json!({"a": [1], "b": {"c": 1}});
        assert!(apply(
            &mut doc,
            &patch(json!([
                {"op": "add", "path": "/a/-", "value": 2},
                {"op": "move", "from": "/b/c", "path": "/d"},
            ]))
        ));
        assert_eq!(doc, json!({"a": [1, 2], "b": {}, "d": 1}));
        assert!(apply(
            &mut doc,
            &patch(json!([{"op": "replace", "path": "/d", "value": 3}]))
        ));
        assert_eq!(doc["d"], 3);
        // In place, a failure is undone by the crate itself.
        assert!(!apply(
            &mut doc,
            &patch(json!([
                {"op": "replace", "path": "/d", "value": 4},
                {"op": "remove", "path": "/nope"},
            ]))
        ));
        assert_eq!(doc["d"], 3);
    }
}
