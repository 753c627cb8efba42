//! Stream verification with the AG-UI client's rules.
//!
//! A stock client throws on an out-of-order stream, so an upstream that breaks
//! the rules would break every viewer at once. The gateway checks first, with
//! the same rules as the client's `verifyEvents`: the first event is
//! `RUN_STARTED` or `RUN_ERROR`; nothing but a new run follows `RUN_FINISHED`
//! (nothing at all after `RUN_ERROR`); runs do not overlap; text messages,
//! tool calls, reasoning spans and messages, steps and subagents open and close
//! in pairs; `RUN_FINISHED` only when all of them are closed; optional fields
//! are omitted, never `null`; a subagent-attributed event agrees with the
//! subagent that opened its entity. Each violation names its rule (a stable
//! string) so logs and `RUN_ERROR.message` say exactly what broke.

use super::event::{Event, EventType};
use serde_json::Value;

/// The verifier looks up an id in these for every event of a stream: they
/// hash with foldhash (seeded per process), not the standard library's
/// SipHash, which was ~2 % of a long run's time. The ids come from the
/// run's own agent, so a crafted id could slow only that agent's run.
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A broken rule: `rule` is stable for matching, `message` is for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{rule}: {message}")]
pub struct Violation {
    /// Stable rule id, e.g. `message_pairing`.
    pub rule: &'static str,
    /// What happened, naming the event and ids.
    pub message: String,
}

fn violation(rule: &'static str, message: impl Into<String>) -> Violation {
    Violation {
        rule,
        message: message.into(),
    }
}

type Owner = Option<String>;

/// Per-stream verifier state; feed every event in order.
#[derive(Debug, Default)]
pub struct Verifier {
    first_seen: bool,
    run_started: bool,
    run_finished: bool,
    run_errored: bool,
    messages: HashSet<String>,
    tool_calls: HashSet<String>,
    reasoning_spans: HashSet<String>,
    reasoning_messages: HashSet<String>,
    steps: HashMap<Owner, HashSet<String>>,
    subagents: HashSet<String>,
    closed_subagents: HashSet<String>,
    message_owner: HashMap<String, Owner>,
    tool_owner: HashMap<String, Owner>,
    activity_owner: HashMap<String, Owner>,
    reasoning_owner: HashMap<String, Owner>,
}

impl Verifier {
    /// A verifier for a new stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// True once the current run has ended (`RUN_FINISHED` or `RUN_ERROR`).
    pub fn run_ended(&self) -> bool {
        self.run_finished || self.run_errored
    }

    /// Names of entities still open, for the message of a forced close.
    pub fn open_entities(&self) -> Vec<String> {
        let mut open = Vec::new();
        open.extend(self.messages.iter().map(|m| format!("text message {m}")));
        open.extend(self.tool_calls.iter().map(|t| format!("tool call {t}")));
        open.extend(
            self.reasoning_messages
                .iter()
                .map(|m| format!("reasoning message {m}")),
        );
        open.extend(
            self.reasoning_spans
                .iter()
                .map(|m| format!("reasoning span {m}")),
        );
        open
    }

    fn reset_run(&mut self) {
        *self = Verifier {
            first_seen: true,
            run_started: true,
            ..Verifier::default()
        };
    }

    /// Checks `event` against the stream so far; on success the state advances.
    pub fn check(&mut self, event: &Event) -> Result<(), Violation> {
        use EventType::*;
        let kind = event.kind();
        let t = kind.as_str();

        if self.run_errored && *kind != RunStarted {
            return Err(violation(
                "after_run_error",
                format!(
                    "Cannot send event type '{t}': The run has already errored with 'RUN_ERROR'."
                ),
            ));
        }
        if self.run_finished && !matches!(kind, RunError | RunStarted) {
            return Err(violation(
                "after_run_finished",
                format!(
                    "Cannot send event type '{t}': The run has already finished with 'RUN_FINISHED'."
                ),
            ));
        }
        if !self.first_seen {
            self.first_seen = true;
            if !matches!(kind, RunStarted | RunError) {
                return Err(violation(
                    "first_event",
                    format!("First event must be 'RUN_STARTED', got '{t}'"),
                ));
            }
        } else if *kind == RunStarted {
            if self.run_started && !self.run_ended() {
                return Err(violation(
                    "run_overlap",
                    "Cannot send 'RUN_STARTED' while a run is still active.",
                ));
            }
            if self.run_ended() {
                self.reset_run();
            }
        }
        if event.is_null("subagentRunId") {
            return Err(null_field(t, "subagentRunId"));
        }

        let tag = event.subagent_run_id().map(str::to_owned);
        let id = |field: &str| event.str_field(field).unwrap_or("").to_owned();
        // The streaming events only look their entity up: no copy.
        let id_ref = |field: &str| event.str_field(field).unwrap_or("");

        match kind {
            TextMessageStart => {
                let m = id("messageId");
                if self.messages.contains(&m) {
                    return Err(violation(
                        "message_pairing",
                        format!(
                            "Cannot send 'TEXT_MESSAGE_START': text message '{m}' is already in progress."
                        ),
                    ));
                }
                attribution(t, &tag, self.message_owner.get(&m), "message", &m)?;
                self.message_owner.entry(m.clone()).or_insert(tag);
                self.messages.insert(m);
            }
            TextMessageContent | TextMessageEnd => continue_open(
                &mut self.messages,
                &self.message_owner,
                Entity::new(
                    "message_pairing",
                    "text message",
                    t,
                    &tag,
                    id_ref("messageId"),
                ),
                *kind == TextMessageEnd,
            )?,
            ToolCallStart => {
                let c = id("toolCallId");
                if self.tool_calls.contains(&c) {
                    return Err(violation(
                        "tool_call_pairing",
                        format!(
                            "Cannot send 'TOOL_CALL_START': tool call '{c}' is already in progress."
                        ),
                    ));
                }
                let mut inherited = None;
                if let Some(parent) = event.str_field("parentMessageId")
                    && let Some(parent_owner) = self.message_owner.get(parent)
                {
                    if tag.is_some() && tag != *parent_owner {
                        return Err(violation(
                            "subagent_attribution",
                            format!(
                                "Cannot send 'TOOL_CALL_START': subagentRunId does not match its parent message '{parent}'."
                            ),
                        ));
                    }
                    inherited = Some(parent_owner.clone());
                }
                if let Some(existing) = self.tool_owner.get(&c) {
                    attribution(t, &tag, Some(existing), "tool call", &c)?;
                    if tag.is_none() && inherited.as_ref().is_some_and(|i| i != existing) {
                        return Err(violation(
                            "subagent_attribution",
                            format!(
                                "Cannot send 'TOOL_CALL_START': tool call '{c}' and its parent message have different owners."
                            ),
                        ));
                    }
                }
                let owner = if tag.is_some() {
                    tag
                } else {
                    inherited.unwrap_or(None)
                };
                self.tool_owner.entry(c.clone()).or_insert(owner);
                self.tool_calls.insert(c);
            }
            ToolCallArgs | ToolCallEnd => continue_open(
                &mut self.tool_calls,
                &self.tool_owner,
                Entity::new(
                    "tool_call_pairing",
                    "tool call",
                    t,
                    &tag,
                    id_ref("toolCallId"),
                ),
                *kind == ToolCallEnd,
            )?,
            StepStarted => {
                let s = id("stepName");
                let steps = self.steps.entry(tag).or_default();
                if !steps.insert(s.clone()) {
                    return Err(violation(
                        "step_pairing",
                        format!("Step \"{s}\" is already active for 'STEP_STARTED'"),
                    ));
                }
            }
            StepFinished => {
                let s = id("stepName");
                let removed = self.steps.get_mut(&tag).is_some_and(|set| set.remove(&s));
                if !removed {
                    return Err(violation(
                        "step_pairing",
                        format!(
                            "Cannot send 'STEP_FINISHED' for step \"{s}\" that was not started"
                        ),
                    ));
                }
            }
            ActivitySnapshot => {
                let m = id("messageId");
                let replace = event.get("replace").and_then(Value::as_bool) != Some(false);
                if !self.activity_owner.contains_key(&m) || replace {
                    self.activity_owner.insert(m, tag);
                }
            }
            ActivityDelta => {
                let m = id("messageId");
                attribution(t, &tag, self.activity_owner.get(&m), "activity", &m)?;
            }
            ToolCallResult => {
                if let Some(m) = event.str_field("messageId") {
                    self.message_owner.insert(m.to_owned(), tag);
                }
            }
            ReasoningStart | ReasoningMessageStart => {
                let m = id("messageId");
                let span = *kind == ReasoningStart;
                let open = if span {
                    &mut self.reasoning_spans
                } else {
                    &mut self.reasoning_messages
                };
                if open.contains(&m) {
                    return Err(violation(
                        "reasoning_pairing",
                        format!("Cannot send '{t}': reasoning '{m}' is already in progress."),
                    ));
                }
                open.insert(m.clone());
                attribution(
                    t,
                    &tag,
                    self.reasoning_owner.get(&m),
                    "reasoning message",
                    &m,
                )?;
                self.reasoning_owner.entry(m).or_insert(tag);
            }
            ReasoningMessageContent | ReasoningMessageEnd | ReasoningEnd => {
                let open = if *kind == ReasoningEnd {
                    &mut self.reasoning_spans
                } else {
                    &mut self.reasoning_messages
                };
                continue_open(
                    open,
                    &self.reasoning_owner,
                    Entity::new(
                        "reasoning_pairing",
                        "reasoning",
                        t,
                        &tag,
                        id_ref("messageId"),
                    ),
                    *kind != ReasoningMessageContent,
                )?
            }
            ReasoningEncryptedValue => {
                let e = id("entityId");
                let owner = match event.str_field("subtype") {
                    Some("tool-call") => self.tool_owner.get(&e),
                    Some("message") => self
                        .message_owner
                        .get(&e)
                        .or_else(|| self.reasoning_owner.get(&e)),
                    _ => self.reasoning_owner.get(&e),
                };
                attribution(t, &tag, owner, "entity", &e)?;
            }
            SubagentStarted => {
                for f in [
                    "description",
                    "parentSubagentRunId",
                    "parentToolCallId",
                    "parentMessageId",
                ] {
                    if event.is_null(f) {
                        return Err(null_field(t, f));
                    }
                }
                let Some(s) = tag else {
                    return Err(violation(
                        "subagent_lifecycle",
                        "Cannot send 'SUBAGENT_STARTED' without a 'subagentRunId'.",
                    ));
                };
                if event.str_field("name").is_none() {
                    return Err(violation(
                        "subagent_lifecycle",
                        "Cannot send 'SUBAGENT_STARTED' without a 'name'.",
                    ));
                }
                if self.subagents.contains(&s) || self.closed_subagents.contains(&s) {
                    return Err(violation(
                        "subagent_lifecycle",
                        format!(
                            "Cannot send 'SUBAGENT_STARTED': subagent '{s}' was already started in this run."
                        ),
                    ));
                }
                if let Some(parent) = event.str_field("parentSubagentRunId")
                    && !self.subagents.contains(parent)
                    && !self.closed_subagents.contains(parent)
                {
                    return Err(violation(
                        "subagent_lifecycle",
                        format!(
                            "Cannot send 'SUBAGENT_STARTED': parentSubagentRunId '{parent}' has not been started in this run."
                        ),
                    ));
                }
                self.subagents.insert(s);
            }
            SubagentFinished | SubagentError => {
                let optional = if *kind == SubagentFinished {
                    "outcome"
                } else {
                    "code"
                };
                if event.is_null(optional) {
                    return Err(null_field(t, optional));
                }
                if let Some(outcome) = event.get("outcome").filter(|_| *kind == SubagentFinished) {
                    let ty = outcome.get("type").and_then(Value::as_str);
                    if !matches!(ty, Some("success" | "suspended")) {
                        return Err(violation(
                            "subagent_lifecycle",
                            format!(
                                "Cannot send '{t}' with outcome type '{}'.",
                                ty.unwrap_or("?")
                            ),
                        ));
                    }
                }
                let Some(s) = tag else {
                    return Err(violation(
                        "subagent_lifecycle",
                        format!("Cannot send '{t}' without a 'subagentRunId'."),
                    ));
                };
                if *kind == SubagentError && event.str_field("message").is_none() {
                    return Err(violation(
                        "subagent_lifecycle",
                        "Cannot send 'SUBAGENT_ERROR' without a 'message'.",
                    ));
                }
                if !self.subagents.remove(&s) {
                    return Err(violation(
                        "subagent_lifecycle",
                        format!("Cannot send '{t}': no active subagent with ID '{s}'."),
                    ));
                }
                self.closed_subagents.insert(s);
            }
            MessagesSnapshot => self.seed_owners(event.get("messages"), true)?,
            RunStarted => {
                self.run_started = true;
                let messages = event.get("input").and_then(|i| i.get("messages"));
                self.seed_owners(messages, false)?;
            }
            RunFinished => {
                let open_steps: Vec<String> = self
                    .steps
                    .values()
                    .flat_map(|names| names.iter().cloned())
                    .collect();
                let open = [
                    ("steps", open_steps),
                    ("text messages", self.messages.iter().cloned().collect()),
                    (
                        "reasoning messages",
                        self.reasoning_messages.iter().cloned().collect(),
                    ),
                    (
                        "reasoning spans",
                        self.reasoning_spans.iter().cloned().collect(),
                    ),
                    ("tool calls", self.tool_calls.iter().cloned().collect()),
                    ("subagents", self.subagents.iter().cloned().collect()),
                ];
                for (what, mut ids) in open {
                    if !ids.is_empty() {
                        ids.sort();
                        return Err(violation(
                            "run_finished_open",
                            format!(
                                "Cannot send 'RUN_FINISHED' while {what} are still active: {}",
                                ids.join(", ")
                            ),
                        ));
                    }
                }
                if let Some(interrupts) = event
                    .get("outcome")
                    .filter(|o| o.get("type").and_then(Value::as_str) == Some("interrupt"))
                    .and_then(|o| o.get("interrupts"))
                    .and_then(Value::as_array)
                    && interrupts
                        .iter()
                        .any(|i| matches!(i.get("subagentRunId"), Some(Value::Null)))
                {
                    return Err(null_field(t, "outcome.interrupts[].subagentRunId"));
                }
                self.run_finished = true;
            }
            RunError => self.run_errored = true,
            _ => {}
        }
        Ok(())
    }

    fn seed_owners(
        &mut self,
        messages: Option<&Value>,
        authoritative: bool,
    ) -> Result<(), Violation> {
        let Some(messages) = messages.and_then(Value::as_array) else {
            return Ok(());
        };
        for msg in messages {
            let Some(mid) = msg.get("id").and_then(Value::as_str) else {
                continue;
            };
            if matches!(msg.get("subagentRunId"), Some(Value::Null)) {
                return Err(null_field("message", "subagentRunId"));
            }
            let owner: Owner = msg
                .get("subagentRunId")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let bucket = match msg.get("role").and_then(Value::as_str) {
                Some("reasoning") => &mut self.reasoning_owner,
                Some("activity") => &mut self.activity_owner,
                _ => &mut self.message_owner,
            };
            if authoritative || !bucket.contains_key(mid) {
                bucket.insert(mid.to_owned(), owner.clone());
            }
            for tc in msg
                .get("toolCalls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(tid) = tc.get("id").and_then(Value::as_str)
                    && (authoritative || !self.tool_owner.contains_key(tid))
                {
                    self.tool_owner.insert(tid.to_owned(), owner.clone());
                }
            }
        }
        Ok(())
    }
}

/// The entity a CONTENT/END-style event refers to, for [`continue_open`].
struct Entity<'a> {
    rule: &'static str,
    what: &'static str,
    event_type: &'a str,
    tag: &'a Owner,
    id: &'a str,
}

impl<'a> Entity<'a> {
    fn new(
        rule: &'static str,
        what: &'static str,
        event_type: &'a str,
        tag: &'a Owner,
        id: &'a str,
    ) -> Self {
        Entity {
            rule,
            what,
            event_type,
            tag,
            id,
        }
    }
}

/// An event that continues (or, with `closes`, ends) an open entity: the
/// entity must be open, and a subagent tag must match the one that opened it.
fn continue_open(
    open: &mut HashSet<String>,
    owners: &HashMap<String, Owner>,
    e: Entity<'_>,
    closes: bool,
) -> Result<(), Violation> {
    if !open.contains(e.id) {
        return Err(violation(
            e.rule,
            format!(
                "Cannot send '{}': no active {} with ID '{}'.",
                e.event_type, e.what, e.id
            ),
        ));
    }
    attribution(e.event_type, e.tag, owners.get(e.id), e.what, e.id)?;
    if closes {
        open.remove(e.id);
    }
    Ok(())
}

fn null_field(t: &str, field: &str) -> Violation {
    violation(
        "null_optional_field",
        format!("Cannot send '{t}' with '{field}: null'. The field is optional; omit it."),
    )
}

fn attribution(
    t: &str,
    tag: &Owner,
    owner: Option<&Owner>,
    entity: &str,
    id: &str,
) -> Result<(), Violation> {
    match (tag, owner) {
        (Some(tag), Some(owner)) if Some(tag) != owner.as_ref() => Err(violation(
            "subagent_attribution",
            format!(
                "Cannot send '{t}': subagentRunId '{tag}' does not match the {entity} '{id}' opener's subagent '{}'.",
                owner.as_deref().unwrap_or("(the parent agent)")
            ),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check_all(events: &[Value]) -> Result<(), Violation> {
        let mut v = Verifier::new();
        for e in events {
            v.check(&Event::build(e.clone()))?;
        }
        Ok(())
    }

    fn rule(events: &[Value]) -> &'static str {
        check_all(events).unwrap_err().rule
    }

    fn started() -> Value {
        json!({"type":"RUN_STARTED","threadId":"t","runId":"r"})
    }
    fn finished() -> Value {
        json!({"type":"RUN_FINISHED","threadId":"t","runId":"r"})
    }

    #[test]
    fn a_full_valid_run_passes_and_allows_a_next_run() {
        check_all(&[
            started(),
            json!({"type":"STEP_STARTED","stepName":"s"}),
            json!({"type":"REASONING_START","messageId":"r1"}),
            json!({"type":"REASONING_MESSAGE_START","messageId":"r1","role":"reasoning"}),
            json!({"type":"REASONING_MESSAGE_CONTENT","messageId":"r1","delta":"x"}),
            json!({"type":"REASONING_MESSAGE_END","messageId":"r1"}),
            json!({"type":"REASONING_END","messageId":"r1"}),
            json!({"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}),
            json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"hi"}),
            json!({"type":"TEXT_MESSAGE_END","messageId":"m"}),
            json!({"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"f","parentMessageId":"m"}),
            json!({"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"{}"}),
            json!({"type":"TOOL_CALL_END","toolCallId":"c"}),
            json!({"type":"TOOL_CALL_RESULT","toolCallId":"c","messageId":"tr","content":"ok"}),
            json!({"type":"SUBAGENT_STARTED","subagentRunId":"sa","name":"helper"}),
            json!({"type":"TEXT_MESSAGE_START","messageId":"sm","role":"assistant","subagentRunId":"sa"}),
            json!({"type":"TEXT_MESSAGE_END","messageId":"sm","subagentRunId":"sa"}),
            json!({"type":"SUBAGENT_FINISHED","subagentRunId":"sa","outcome":{"type":"success"}}),
            json!({"type":"STATE_SNAPSHOT","snapshot":{}}),
            json!({"type":"THINKING_START"}),
            json!({"type":"META","metaType":"thumbs_up","payload":{}}),
            json!({"type":"SOMETHING_NEW"}),
            json!({"type":"STEP_FINISHED","stepName":"s"}),
            finished(),
            started(),
            json!({"type":"RUN_ERROR","message":"boom"}),
            started(),
        ])
        .unwrap();
    }

    #[test]
    fn first_event_rule() {
        assert_eq!(
            rule(&[json!({"type":"TEXT_MESSAGE_START","messageId":"m"})]),
            "first_event"
        );
        check_all(&[json!({"type":"RUN_ERROR","message":"x"})]).unwrap();
    }

    #[test]
    fn nothing_after_finish_or_error() {
        assert_eq!(
            rule(&[
                started(),
                finished(),
                json!({"type":"CUSTOM","name":"x","value":1})
            ]),
            "after_run_finished"
        );
        check_all(&[
            started(),
            finished(),
            json!({"type":"RUN_ERROR","message":"late"}),
        ])
        .unwrap();
        assert_eq!(
            rule(&[
                started(),
                json!({"type":"RUN_ERROR","message":"x"}),
                json!({"type":"RUN_ERROR","message":"y"})
            ]),
            "after_run_error"
        );
    }

    #[test]
    fn runs_do_not_overlap() {
        assert_eq!(rule(&[started(), started()]), "run_overlap");
    }

    #[test]
    fn pairing_rules() {
        let s = started();
        assert_eq!(
            rule(&[
                s.clone(),
                json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"})
            ]),
            "message_pairing"
        );
        assert_eq!(
            rule(&[
                s.clone(),
                json!({"type":"TEXT_MESSAGE_START","messageId":"m"}),
                json!({"type":"TEXT_MESSAGE_START","messageId":"m"})
            ]),
            "message_pairing"
        );
        assert_eq!(
            rule(&[s.clone(), json!({"type":"TOOL_CALL_END","toolCallId":"c"})]),
            "tool_call_pairing"
        );
        assert_eq!(
            rule(&[s.clone(), json!({"type":"REASONING_END","messageId":"r"})]),
            "reasoning_pairing"
        );
        assert_eq!(
            rule(&[s.clone(), json!({"type":"STEP_FINISHED","stepName":"x"})]),
            "step_pairing"
        );
        assert_eq!(
            rule(&[
                s.clone(),
                json!({"type":"SUBAGENT_FINISHED","subagentRunId":"x"})
            ]),
            "subagent_lifecycle"
        );
    }

    #[test]
    fn run_finished_needs_everything_closed() {
        let err = check_all(&[
            started(),
            json!({"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"f"}),
            finished(),
        ])
        .unwrap_err();
        assert_eq!(err.rule, "run_finished_open");
        assert!(err.message.contains("tool calls") && err.message.contains('c'));
        assert_eq!(
            rule(&[
                started(),
                json!({"type":"STEP_STARTED","stepName":"s"}),
                finished()
            ]),
            "run_finished_open"
        );
    }

    #[test]
    fn null_optional_fields_and_attribution() {
        assert_eq!(
            rule(&[
                started(),
                json!({"type":"CUSTOM","name":"x","value":1,"subagentRunId":null})
            ]),
            "null_optional_field"
        );
        assert_eq!(
            rule(&[
                started(),
                json!({"type":"TEXT_MESSAGE_START","messageId":"m"}),
                json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x","subagentRunId":"other"})
            ]),
            "subagent_attribution"
        );
    }

    #[test]
    fn real_fixture_streams_pass() {
        for name in [
            "pydantic-ai-tool-and-text.sse",
            "pydantic-ai-approval-interrupt.sse",
            "langgraph-legacy-interrupt.sse",
            "langgraph-resumed.sse",
        ] {
            let path = format!(
                "{}/tests/fixtures/streams/{name}",
                env!("CARGO_MANIFEST_DIR")
            );
            let Ok(bytes) = std::fs::read(&path) else {
                panic!("fixture {path} missing");
            };
            let mut d = crate::protocol::sse::SseDecoder::new(1 << 20);
            let mut frames = Vec::new();
            d.feed(&bytes, &mut frames).unwrap();
            d.finish(&mut frames).unwrap();
            let mut v = Verifier::new();
            for f in &frames {
                v.check(&Event::parse(f.data.clone()).unwrap())
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
            }
            assert!(v.run_ended(), "{name} ends its run");
        }
    }
}
