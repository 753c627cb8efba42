//! Fuzz target `fold`: `protocol::fold::Fold::apply` over arbitrary event
//! sequences.
//!
//! Two input forms, told apart by the first byte:
//!
//! - `{…`: JSON lines, one event per line (lines that are not an event with a
//!   string `type` are skipped), so captured streams are seeds as they are;
//! - anything else: bytes for a structure-aware generator ([`events`]) that
//!   writes events of the types the fold handles, with fields of the right
//!   shape most of the time and of any shape otherwise, ids drawn from a small
//!   pool so that events keep meeting the same messages and tool calls.
//!
//! It asserts that folding never panics, that every message in the fold is a
//! JSON object with a string `id` (the fold's own lookups rely on it), that
//! `seq` is the last one applied, that `to_stored_json`/`from_json` round-trips, and
//! that a fold restored from its JSON form halfway through (as a thread
//! reloaded from a stored snapshot is) ends where the uninterrupted one ends,
//! and that a fold packing its finished messages into sealed pages at every
//! run's end — their packed text moved to a spill file after every event,
//! as a node over its ceiling does — reads the same as one that never packs
//! them.

#![no_main]

use agui_gateway::protocol::Event;
use agui_gateway::protocol::fold::Fold;
use agui_gateway::protocol::page_spill;
use agui_gateway::store::page_file::PageFile;
use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};

/// The state cap the fold is held to here: small, so inputs that grow the
/// state (RFC 6902 `copy` doubles it) reach it in microseconds, not seconds.
const STATE_CAP: usize = 64 * 1024;

/// The text a sealed page holds here: tiny, so every run's end seals what
/// the run finished (the gateway's pages hold 16 KiB).
const SEALED_PAGE: usize = 32;

/// The process's spill file, installed once.
static SPILL: std::sync::Once = std::sync::Once::new();

fuzz_target!(|data: &[u8]| {
    SPILL.call_once(|| {
        let file = PageFile::create(&std::env::temp_dir(), 1 << 30).expect("a spill file");
        page_spill::install(Box::new(file));
    });
    let events = if data.first() == Some(&b'{') {
        data.split(|&b| b == b'\n')
            .filter_map(|line| Event::parse(line.to_vec()).ok())
            .collect()
    } else {
        let mut u = Unstructured::new(data);
        let mut events = Vec::new();
        while !u.is_empty() && events.len() < 64 {
            match event(&mut u) {
                Ok(e) => events.push(e),
                Err(_) => break,
            }
        }
        events
    };

    let mut fold = Fold::new().with_state_cap(STATE_CAP);
    let mut sealed = Fold::new()
        .with_state_cap(STATE_CAP)
        .with_page_text(SEALED_PAGE);
    let mut restored = None;
    for (i, e) in events.iter().enumerate() {
        if i == events.len() / 2 {
            restored = Some(
                Fold::from_json(&Value::Object(fold.to_stored_json()), fold.run().cloned())
                    .with_state_cap(STATE_CAP),
            );
        }
        fold.apply(i as u64 + 1, e);
        sealed.apply(i as u64 + 1, e);
        page_spill::spill_oldest(usize::MAX);
        if let Some(r) = &mut restored {
            r.apply(i as u64 + 1, e);
        }
        for m in fold.messages().iter() {
            assert!(
                m.id().is_some(),
                "message without a string id after {e:?}: {m:?}"
            );
        }
    }
    assert_eq!(fold.seq, events.len() as u64);
    let back = Fold::from_json(&Value::Object(fold.to_stored_json()), fold.run().cloned());
    assert_eq!(back, fold, "to_json/from_json round trip");
    if let Some(r) = restored {
        assert_eq!(r, fold, "restored halfway, then folded the rest");
    }
    assert_eq!(sealed, fold, "sealed pages read as the messages they hold");
    let snapshot = |f: &Fold| serde_json::to_value(f.messages()).unwrap();
    assert_eq!(snapshot(&sealed), snapshot(&fold), "sealed messages serialize as before");
});

/// Event types the fold looks at, plus two it ignores.
const TYPES: &[&str] = &[
    "RUN_STARTED",
    "RUN_FINISHED",
    "RUN_ERROR",
    "TEXT_MESSAGE_START",
    "TEXT_MESSAGE_CONTENT",
    "TEXT_MESSAGE_END",
    "REASONING_MESSAGE_START",
    "REASONING_MESSAGE_CONTENT",
    "REASONING_ENCRYPTED_VALUE",
    "TOOL_CALL_START",
    "TOOL_CALL_ARGS",
    "TOOL_CALL_RESULT",
    "STATE_SNAPSHOT",
    "STATE_DELTA",
    "MESSAGES_SNAPSHOT",
    "ACTIVITY_SNAPSHOT",
    "ACTIVITY_DELTA",
    "CUSTOM",
    "FUTURE_EVENT",
];

/// Ids shared by messages, tool calls and entities, so events collide.
const IDS: &[&str] = &["a", "b", "c", "d", ""];
const ROLES: &[&str] = &[
    "assistant",
    "user",
    "tool",
    "activity",
    "reasoning",
    "system",
    "developer",
];
/// Object keys for arbitrary JSON: the names the fold reads, at any depth.
const KEYS: &[&str] = &[
    "id",
    "role",
    "content",
    "toolCalls",
    "toolCallId",
    "function",
    "name",
    "arguments",
    "type",
    "subagentRunId",
    "encryptedValue",
    "messages",
    "interrupts",
    "op",
    "path",
    "from",
    "value",
    "x",
];
const WORDS: &[&str] = &[
    "a",
    "b",
    "assistant",
    "tool",
    "activity",
    "reasoning",
    "function",
    "interrupt",
    "cancelled",
    "success",
    "tool-call",
    "",
];
const OPS: &[&str] = &["add", "remove", "replace", "move", "copy", "test", "bogus"];
const PATHS: &[&str] = &[
    "", "/", "/a", "/a/0", "/a/-", "/-", "/0", "/x/y", "/steps/-", "/~1", "/~0",
];

fn pick(u: &mut Unstructured, pool: &[&str]) -> Result<Value> {
    Ok(Value::from(*u.choose(pool)?))
}

/// A string: usually a pooled id, sometimes free text.
fn id(u: &mut Unstructured) -> Result<Value> {
    if u.ratio(7, 8)? {
        pick(u, IDS)
    } else {
        Ok(Value::from(u.arbitrary::<String>()?))
    }
}

fn text(u: &mut Unstructured) -> Result<Value> {
    if u.ratio(1, 2)? {
        pick(u, WORDS)
    } else {
        Ok(Value::from(u.arbitrary::<String>()?))
    }
}

/// Any JSON value, at most `depth` levels deep.
fn any(u: &mut Unstructured, depth: u32) -> Result<Value> {
    let max = if depth == 0 { 5 } else { 7 };
    Ok(match u.int_in_range(0..=max)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => Value::from(u.arbitrary::<i32>()?),
        3 => json!(u.arbitrary::<f64>()?), // NaN and infinities become null
        4 => text(u)?,
        5 => id(u)?,
        6 => Value::Array(list(u, |u| any(u, depth - 1))?),
        _ => {
            let mut m = Map::new();
            for _ in 0..u.int_in_range(0..=4)? {
                let k = *u.choose(KEYS)?;
                m.insert(k.into(), any(u, depth - 1)?);
            }
            Value::Object(m)
        }
    })
}

/// Usually `typed`, one time in eight a value of any shape.
fn or_any(
    u: &mut Unstructured,
    typed: impl FnOnce(&mut Unstructured) -> Result<Value>,
) -> Result<Value> {
    if u.ratio(1, 8)? { any(u, 2) } else { typed(u) }
}

fn list(
    u: &mut Unstructured,
    mut item: impl FnMut(&mut Unstructured) -> Result<Value>,
) -> Result<Vec<Value>> {
    let mut v = Vec::new();
    for _ in 0..u.int_in_range(0..=4)? {
        v.push(item(u)?);
    }
    Ok(v)
}

fn tool_call(u: &mut Unstructured) -> Result<Value> {
    let mut m = Map::new();
    m.insert("id".into(), or_any(u, id)?);
    m.insert("type".into(), "function".into());
    let function = or_any(u, |u| Ok(json!({"name": text(u)?, "arguments": text(u)?})))?;
    m.insert("function".into(), function);
    Ok(Value::Object(m))
}

fn message(u: &mut Unstructured) -> Result<Value> {
    let mut m = Map::new();
    m.insert("id".into(), or_any(u, id)?);
    m.insert("role".into(), or_any(u, |u| pick(u, ROLES))?);
    m.insert("content".into(), or_any(u, text)?);
    if u.arbitrary()? {
        m.insert(
            "toolCalls".into(),
            or_any(u, |u| Ok(Value::Array(list(u, tool_call)?)))?,
        );
    }
    if u.arbitrary()? {
        m.insert("toolCallId".into(), or_any(u, id)?);
    }
    if u.arbitrary()? {
        m.insert("subagentRunId".into(), any(u, 0)?);
    }
    Ok(Value::Object(m))
}

fn patch(u: &mut Unstructured) -> Result<Value> {
    let ops = list(u, |u| {
        or_any(u, |u| {
            let mut m = Map::new();
            m.insert("op".into(), pick(u, OPS)?);
            m.insert("path".into(), or_any(u, |u| pick(u, PATHS))?);
            if u.arbitrary()? {
                m.insert("from".into(), pick(u, PATHS)?);
            }
            if u.arbitrary()? {
                m.insert("value".into(), any(u, 2)?);
            }
            Ok(Value::Object(m))
        })
    })?;
    Ok(Value::Array(ops))
}

/// The fields each event type carries, as (name, generator).
type Field = (&'static str, fn(&mut Unstructured) -> Result<Value>);

fn fields(kind: &str) -> &'static [Field] {
    match kind {
        "RUN_STARTED" => &[
            ("runId", id),
            ("input", |u| Ok(json!({"messages": list(u, message)?}))),
        ],
        "RUN_FINISHED" => &[("outcome", |u| {
            let kind = pick(u, &["interrupt", "cancelled", "success"])?;
            Ok(json!({"type": kind, "interrupts": list(u, |u| any(u, 1))?}))
        })],
        "TEXT_MESSAGE_START" => &[
            ("messageId", id),
            ("role", |u| pick(u, ROLES)),
            ("name", text),
            ("subagentRunId", id),
        ],
        "TEXT_MESSAGE_CONTENT" | "REASONING_MESSAGE_CONTENT" | "TEXT_MESSAGE_END" => {
            &[("messageId", id), ("delta", text)]
        }
        "REASONING_MESSAGE_START" => &[("messageId", id), ("subagentRunId", id)],
        "REASONING_ENCRYPTED_VALUE" => &[
            ("entityId", id),
            ("encryptedValue", text),
            ("subtype", |u| pick(u, &["tool-call", "message"])),
        ],
        "TOOL_CALL_START" => &[
            ("toolCallId", id),
            ("toolCallName", text),
            ("parentMessageId", id),
            ("subagentRunId", id),
        ],
        "TOOL_CALL_ARGS" => &[("toolCallId", id), ("delta", text)],
        "TOOL_CALL_RESULT" => &[
            ("messageId", id),
            ("toolCallId", id),
            ("role", |u| pick(u, ROLES)),
            ("content", text),
        ],
        "STATE_SNAPSHOT" => &[("snapshot", |u| any(u, 3))],
        "STATE_DELTA" => &[("delta", patch)],
        "MESSAGES_SNAPSHOT" => &[("messages", |u| Ok(Value::Array(list(u, message)?)))],
        "ACTIVITY_SNAPSHOT" => &[
            ("messageId", id),
            ("activityType", text),
            ("content", |u| any(u, 2)),
            ("replace", |u| Ok(Value::Bool(u.arbitrary()?))),
        ],
        "ACTIVITY_DELTA" => &[("messageId", id), ("patch", patch)],
        _ => &[("name", text), ("value", |u| any(u, 2))],
    }
}

/// One event: a type, each of its fields usually present and usually of
/// the right shape, sometimes one extra field of any shape.
fn event(u: &mut Unstructured) -> Result<Event> {
    let kind = *u.choose(TYPES)?;
    let mut body = Map::new();
    body.insert("type".into(), kind.into());
    for (name, generate) in fields(kind) {
        if u.ratio(7, 8)? {
            body.insert((*name).into(), or_any(u, *generate)?);
        }
    }
    if u.ratio(1, 8)? {
        let k = *u.choose(KEYS)?;
        if k != "type" {
            body.insert(k.into(), any(u, 2)?);
        }
    }
    Ok(Event::from_body(body).expect("the body has a string type"))
}
