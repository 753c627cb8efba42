//! Interrupts in their canonical AG-UI 1.0 form, whatever the agent sent.
//!
//! Agents raise human-in-the-loop pauses three ways today:
//! - canonical 1.0: `RUN_FINISHED.outcome = {type: "interrupt", interrupts: [...]}`;
//! - the older docs draft: `outcome: "interrupt"` (a string) plus one
//!   `interrupt: {id?, reason?, payload?}` on the event;
//! - LangGraph's integration: `CUSTOM {name: "on_interrupt", value: "<JSON>"}`
//!   followed by a plain `RUN_FINISHED`.
//!
//! The gateway journals the canonical form so every viewer, the fold and
//! `resume` validation see one shape. The original events still pass through
//! (the `CUSTOM` is kept; the draft's payload goes to the interrupt's
//! `metadata`), and interrupts converted from LangGraph's form are marked in
//! `metadata["agui-gateway"].source` so a resume can also answer the way that
//! agent understands (`forwardedProps.command.resume`).
//!
//! An outcome the agent never sent changes what a client does, though: the
//! stock `@ag-ui/client` then holds `pendingInterrupts` and refuses any run
//! that does not answer them with `resume` — so a LangGraph/CopilotKit
//! frontend, which answers with a new message plus
//! `forwardedProps.command.resume`, works against the agent directly and
//! fails behind the gateway. Such an agent is configured
//! [`InterruptStyle::Agent`]: its interrupts pass through as it sent them.

use super::event::{Event, EventType};
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// Which shapes an agent's interrupts are recognised in.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema, Default,
)]
#[serde(rename_all = "kebab-case")]
pub enum InterruptStyle {
    /// All three shapes.
    #[default]
    Auto,
    /// Only canonical 1.0; nothing is rewritten (what `agent` does).
    Canonical,
    /// Canonical, plus LangGraph's `CUSTOM on_interrupt`.
    LanggraphLegacy,
    /// The agent's own interrupts, untouched: nothing is rewritten, and
    /// only an outcome the agent itself sent in the canonical form pauses
    /// the thread. For LangGraph/CopilotKit frontends that resume the
    /// LangGraph way (a message plus `forwardedProps.command.resume`).
    Agent,
}

impl InterruptStyle {
    /// Whether the agent's interrupts are rewritten into canonical ones.
    fn rewrites(self) -> bool {
        !matches!(self, InterruptStyle::Canonical | InterruptStyle::Agent)
    }
}

/// Marker source for interrupts converted from LangGraph's custom event.
pub const LANGGRAPH_SOURCE: &str = "langgraph-legacy";

/// Per-run rewriter; feed every event of the run in order.
#[derive(Debug)]
pub struct InterruptNormalizer {
    style: InterruptStyle,
    /// LangGraph interrupts seen in this run, waiting for its RUN_FINISHED.
    pending_legacy: Vec<Value>,
}

impl InterruptNormalizer {
    /// A normalizer for one run of an agent with `style`.
    pub fn new(style: InterruptStyle) -> Self {
        InterruptNormalizer {
            style,
            pending_legacy: Vec::new(),
        }
    }

    /// Returns the event to journal: `None` when `event` needs no change.
    pub fn apply(&mut self, event: &Event) -> Option<Event> {
        match event.kind() {
            EventType::Custom
                if self.style.rewrites() && event.str_field("name") == Some("on_interrupt") =>
            {
                let value = match event.get("value") {
                    Some(Value::String(s)) => {
                        serde_json::from_str(s).unwrap_or(Value::String(s.clone()))
                    }
                    Some(v) => v.clone(),
                    None => Value::Null,
                };
                self.pending_legacy.push(value);
                None
            }
            EventType::RunFinished => self.finish(event),
            _ => None,
        }
    }

    fn finish(&mut self, event: &Event) -> Option<Event> {
        let run_id = event.str_field("runId").unwrap_or("run").to_owned();
        match event.get("outcome") {
            Some(Value::Object(_)) => None, // canonical (or success/cancelled): as is
            Some(Value::String(s)) if s == "interrupt" && self.style == InterruptStyle::Auto => {
                let draft = event.get("interrupt").cloned().unwrap_or(json!({}));
                let mut i = Map::new();
                let id = draft
                    .get("id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("int-{run_id}-1"));
                i.insert("id".into(), id.into());
                i.insert(
                    "reason".into(),
                    draft
                        .get("reason")
                        .cloned()
                        .unwrap_or_else(|| "interrupt".into()),
                );
                if let Some(m) = draft.get("message").filter(|m| m.is_string()) {
                    i.insert("message".into(), m.clone());
                }
                let mut meta = draft
                    .get("metadata")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                if let Some(p) = draft.get("payload") {
                    meta.insert("payload".into(), p.clone());
                }
                if !meta.is_empty() {
                    i.insert("metadata".into(), Value::Object(meta));
                }
                Some(event.modify(|b| {
                    b.remove("interrupt");
                    b.insert(
                        "outcome".into(),
                        json!({"type": "interrupt", "interrupts": [i]}),
                    );
                }))
            }
            None if !self.pending_legacy.is_empty() => {
                let interrupts: Vec<Value> = std::mem::take(&mut self.pending_legacy)
                    .into_iter()
                    .enumerate()
                    .map(|(n, v)| {
                        let mut i = Map::new();
                        i.insert("id".into(), format!("lg-{run_id}-{}", n + 1).into());
                        i.insert(
                            "reason".into(),
                            v.get("reason")
                                .filter(|r| r.is_string())
                                .cloned()
                                .unwrap_or_else(|| "interrupt".into()),
                        );
                        if let Some(m) = v.get("message").filter(|m| m.is_string()) {
                            i.insert("message".into(), m.clone());
                        }
                        i.insert(
                            "metadata".into(),
                            json!({"agui-gateway": {"source": LANGGRAPH_SOURCE}, "value": v}),
                        );
                        Value::Object(i)
                    })
                    .collect();
                Some(event.modify(|b| {
                    b.insert(
                        "outcome".into(),
                        json!({"type": "interrupt", "interrupts": interrupts}),
                    );
                }))
            }
            _ => None,
        }
    }
}

/// True when `interrupt` came from LangGraph's legacy form.
pub fn is_langgraph(interrupt: &Value) -> bool {
    interrupt
        .pointer("/metadata/agui-gateway/source")
        .and_then(Value::as_str)
        == Some(LANGGRAPH_SOURCE)
}

/// True when `interrupt.expiresAt` (RFC 3339) is before `now_ms`.
pub fn is_expired(interrupt: &Value, now_ms: u64) -> bool {
    interrupt
        .get("expiresAt")
        .and_then(Value::as_str)
        .and_then(|s| humantime::parse_rfc3339_weak(s.trim_end_matches('Z')).ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .is_some_and(|t| (t.as_millis() as u64) < now_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(style: InterruptStyle, events: &[Value]) -> Vec<Value> {
        let mut n = InterruptNormalizer::new(style);
        events
            .iter()
            .map(|e| {
                let ev = Event::build(e.clone());
                Value::Object(n.apply(&ev).unwrap_or(ev).into_body())
            })
            .collect()
    }

    #[test]
    fn canonical_passes_untouched() {
        let e = json!({"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt","interrupts":[{"id":"i","reason":"tool_call"}]}});
        assert_eq!(run(InterruptStyle::Auto, std::slice::from_ref(&e)), [e]);
    }

    #[test]
    fn draft_shape_becomes_canonical_with_an_id() {
        let out = run(
            InterruptStyle::Auto,
            &[
                json!({"type":"RUN_FINISHED","threadId":"t","runId":"r9","outcome":"interrupt","interrupt":{"reason":"confirm","payload":{"q":"ok?"}}}),
            ],
        );
        assert_eq!(
            out[0],
            json!({"type":"RUN_FINISHED","threadId":"t","runId":"r9","outcome":{"type":"interrupt","interrupts":[
                {"id":"int-r9-1","reason":"confirm","metadata":{"payload":{"q":"ok?"}}}]}})
        );
        // Canonical-only agents are left alone.
        let raw = json!({"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":"interrupt","interrupt":{}});
        assert_eq!(
            run(InterruptStyle::Canonical, std::slice::from_ref(&raw)),
            [raw]
        );
    }

    #[test]
    fn langgraph_custom_then_plain_finish_becomes_canonical() {
        let out = run(
            InterruptStyle::Auto,
            &[
                json!({"type":"CUSTOM","name":"on_interrupt","value":"{\"reason\": \"confirmation\", \"message\": \"Send it?\", \"action\": \"send_email\"}"}),
                json!({"type":"RUN_FINISHED","threadId":"t","runId":"r1"}),
            ],
        );
        assert_eq!(
            out[0]["name"], "on_interrupt",
            "the custom event itself is kept"
        );
        let i = &out[1]["outcome"]["interrupts"][0];
        assert_eq!(i["id"], "lg-r1-1");
        assert_eq!(i["reason"], "confirmation");
        assert_eq!(i["message"], "Send it?");
        assert_eq!(i["metadata"]["value"]["action"], "send_email");
        assert!(is_langgraph(i));
        for untouched in [InterruptStyle::Canonical, InterruptStyle::Agent] {
            let events = [
                json!({"type":"CUSTOM","name":"on_interrupt","value":"{}"}),
                json!({"type":"RUN_FINISHED","threadId":"t","runId":"r"}),
            ];
            assert_eq!(run(untouched, &events), events, "{untouched:?}");
        }
    }

    #[test]
    fn expiry() {
        let now = 1_800_000_000_000;
        assert!(is_expired(
            &json!({"expiresAt":"2020-01-01T00:00:00Z"}),
            now
        ));
        assert!(!is_expired(
            &json!({"expiresAt":"2099-01-01T00:00:00Z"}),
            now
        ));
        assert!(!is_expired(&json!({}), now));
    }
}
