//! Handoff on the wire: how an agent asks to pass the thread to another
//! agent, how the journal records that it did, and which agent a thread's
//! next plain run goes to.
//!
//! AG-UI says agents "can hand off to other agents, maintaining context
//! continuity" but defines no mechanism, so the gateway speaks two that
//! peers use, both visible in a stock AG-UI stream:
//!
//! - a tool the gateway offers, `transfer_to_<agentId>` (as the OpenAI
//!   Agents SDK and LangGraph's swarm do): the agent calls it and ends its
//!   run the way AG-UI 1.x agents end on a frontend tool call;
//! - a `CUSTOM` event named [`HANDOFF_EVENT`] with `{to, reason?}`, for an
//!   agent that knows it is behind the gateway.
//!
//! The journal records a handoff that took place as the same `CUSTOM` name
//! in the new agent's run, written by the gateway (`from`, `to`, runs,
//! `trigger`, `result`). An agent's own events in the `agui-gateway/`
//! namespace never reach the journal ([`is_gateway_event`]): the journal's
//! word on who speaks is the gateway's, never an agent's.

use super::Event;
use super::EventType;
use serde_json::{Value, json};

/// The `CUSTOM` name of a handoff: an agent's request, and the gateway's
/// record of what came of it.
pub const HANDOFF_EVENT: &str = "agui-gateway/handoff";

/// The `CUSTOM` name of a person switching the thread's active agent.
pub const ACTIVE_AGENT_EVENT: &str = "agui-gateway/active-agent";

/// The prefix of the transfer tools the gateway offers.
pub const TRANSFER_PREFIX: &str = "transfer_to_";

/// The `reason` of the interrupt that asks a person to approve a transfer.
pub const APPROVAL_REASON: &str = "agui-gateway/handoff-approval";

/// The transfer tool to `target` (an AG-UI `Tool`), described by the
/// target's own description so the model knows when to call it.
pub fn transfer_tool(target: &str, description: &str) -> Value {
    let what = if description.is_empty() {
        format!("Transfer the conversation to the agent '{target}'.")
    } else {
        format!("Transfer the conversation to the agent '{target}': {description}")
    };
    json!({
        "name": format!("{TRANSFER_PREFIX}{target}"),
        "description": what,
        "parameters": {
            "type": "object",
            "properties": {
                "reason": {"type": "string", "description": "Why the conversation is transferred."}
            },
        },
    })
}

/// The agent a transfer tool's name names.
pub fn target_of(tool_name: &str) -> Option<&str> {
    tool_name
        .strip_prefix(TRANSFER_PREFIX)
        .filter(|t| !t.is_empty())
}

/// The `CUSTOM` name of the upstream pool's note on a run that could not go
/// to its thread's backend. The upstream layer writes it into the run's
/// stream itself (and drops an agent's event of that name), so it is the
/// one gateway event a run's stream may carry.
pub const UPSTREAM_NOTE: &str = "agui-gateway/upstream";

/// True for an event in the gateway's own namespace (`CUSTOM agui-gateway/…`).
pub fn is_gateway_event(event: &Event) -> bool {
    *event.kind() == EventType::Custom
        && event
            .str_field("name")
            .is_some_and(|n| n.starts_with("agui-gateway/"))
}

/// How an agent asked for a handoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// It called a `transfer_to_<agent>` tool.
    Tool,
    /// It sent `CUSTOM agui-gateway/handoff`.
    Event,
    /// A person answered an approval (the request was the agent's).
    Approval,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Tool => "tool",
            Trigger::Event => "event",
            Trigger::Approval => "approval",
        }
    }
}

/// One handoff request in a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Signal {
    pub to: String,
    pub reason: Option<String>,
    /// The transfer tool call, when the request was one.
    pub tool_call_id: Option<String>,
    pub trigger: Trigger,
}

/// The result of a transfer call that did not hand the thread over (the
/// run ended otherwise: an error, a cancel, a refusal, its node stopped):
/// every tool call needs its result, or the next turn's history is one an
/// agent's model refuses (an assistant tool call with no tool message).
pub fn transfer_not_made(tool_call_id: &str, to: &str, why: &str) -> Event {
    Event::build(serde_json::json!({
        "type": "TOOL_CALL_RESULT",
        "messageId": format!("{tool_call_id}-result"),
        "toolCallId": tool_call_id,
        "role": "tool",
        "content": format!("The transfer to '{to}' did not happen: {why}"),
    }))
}

/// Collects a run's handoff requests as its events pass: transfer tool
/// calls the run left without a result, and `CUSTOM` requests; in order.
/// `is_agent` says which names are agents (a transfer to anything else is
/// an ordinary tool call); `client_tools` are the tools the client offered
/// (a client's own tool of that name stays the client's).
#[derive(Debug, Default)]
pub struct SignalWatch {
    signals: Vec<Signal>,
    /// The arguments of transfer calls still streaming, by call id.
    args: Vec<(String, String)>,
}

impl SignalWatch {
    /// Notes `event`; `target` says whether a tool name is a transfer (and
    /// to whom).
    pub fn observe(&mut self, event: &Event, target: impl Fn(&str) -> Option<String>) {
        let s = |k: &str| event.str_field(k);
        match event.kind() {
            EventType::ToolCallStart => {
                if let (Some(id), Some(to)) = (s("toolCallId"), s("toolCallName").and_then(&target))
                {
                    self.args.push((id.to_owned(), String::new()));
                    self.signals.push(Signal {
                        to,
                        reason: None,
                        tool_call_id: Some(id.to_owned()),
                        trigger: Trigger::Tool,
                    });
                }
            }
            EventType::ToolCallArgs => {
                if let (Some(id), Some(delta)) = (s("toolCallId"), s("delta"))
                    && let Some((_, args)) = self.args.iter_mut().find(|(i, _)| i == id)
                {
                    args.push_str(delta);
                }
            }
            EventType::ToolCallEnd => {
                if let Some(id) = s("toolCallId")
                    && let Some(i) = self.args.iter().position(|(i, _)| i == id)
                {
                    let (_, args) = self.args.swap_remove(i);
                    let reason = serde_json::from_str::<Value>(&args)
                        .ok()
                        .and_then(|a| a.get("reason").and_then(Value::as_str).map(str::to_owned));
                    if let Some(signal) = self
                        .signals
                        .iter_mut()
                        .find(|sig| sig.tool_call_id.as_deref() == Some(id))
                    {
                        signal.reason = reason.filter(|r| !r.is_empty());
                    }
                }
            }
            // Answered in the run itself: the agent ran it as its own tool.
            EventType::ToolCallResult => {
                if let Some(id) = s("toolCallId") {
                    self.signals
                        .retain(|sig| sig.tool_call_id.as_deref() != Some(id));
                }
            }
            EventType::Custom if s("name") == Some(HANDOFF_EVENT) => {
                let value = event.get("value");
                let field = |k: &str| value.and_then(|v| v.get(k)).and_then(Value::as_str);
                if let Some(to) = field("to") {
                    self.signals.push(Signal {
                        to: to.to_owned(),
                        reason: field("reason").map(str::to_owned),
                        tool_call_id: None,
                        trigger: Trigger::Event,
                    });
                }
            }
            _ => {}
        }
    }

    /// The requests seen, first first.
    pub fn signals(&self) -> &[Signal] {
        &self.signals
    }
}

/// Which agent a thread's next plain run goes to, folded from the journal:
/// `active` is who speaks now (moved by a handoff that took place or a
/// person's switch), `entry` the agent the turn began with (where a
/// non-sticky agent hands the thread back), `by` who put `active` there.
///
/// `by` is a subject, like a run's `startedBy`, because people sharing a
/// thread ask "who moved us to this agent?": the `by` of a person's switch,
/// the caller whose run first went to the agent, or — for a handoff, which
/// an agent asks for — the caller of the run it took place in (the person
/// whose turn it was, or who approved the transfer). A run on the agent
/// already speaking changes nothing: nobody switched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActiveAgent {
    pub active: Option<String>,
    pub entry: Option<String>,
    pub by: Option<String>,
    /// The `by` of the run going on (its stamp): who a handoff in it is
    /// attributed to, since the handoff record itself names agents only.
    turn_by: Option<String>,
}

impl ActiveAgent {
    /// Notes a journaled event: a run that is not a handoff makes its agent
    /// both; a handoff record that took place moves `active`; a switch moves
    /// both.
    pub fn observe(&mut self, event: &Event) {
        match event.kind() {
            EventType::RunStarted => {
                // The gateway's stamp (an unstamped run, journaled before
                // stamps, names no agent and moves nothing).
                let stamp = event.get("agui-gateway");
                let field = |k: &str| stamp.and_then(|s| s.get(k)).and_then(Value::as_str);
                self.turn_by = field("by").map(str::to_owned);
                if let Some(agent) = field("agent")
                    && field("kind") != Some("handoff")
                {
                    self.moved_to(agent, self.turn_by.clone());
                    self.entry = Some(agent.to_owned());
                }
            }
            EventType::Custom => {
                let value = event.get("value");
                let field = |k: &str| value.and_then(|v| v.get(k)).and_then(Value::as_str);
                match event.str_field("name") {
                    Some(HANDOFF_EVENT) if field("result") == Some("accepted") => {
                        if let Some(to) = field("toAgent") {
                            self.moved_to(to, self.turn_by.clone());
                        }
                    }
                    Some(ACTIVE_AGENT_EVENT) => {
                        if let Some(agent) = field("agent") {
                            // A person's switch is theirs even to the agent
                            // already speaking: they chose it.
                            self.active = Some(agent.to_owned());
                            self.entry = Some(agent.to_owned());
                            self.by = field("by").map(str::to_owned);
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }

    /// `agent` speaks now; `by` is credited only when that is a change (or
    /// nobody was credited yet).
    fn moved_to(&mut self, agent: &str, by: Option<String>) {
        if self.active.as_deref() != Some(agent) || self.by.is_none() {
            self.by = by;
        }
        self.active = Some(agent.to_owned());
    }

    /// The stored form (inside a compacted base).
    pub fn to_json(&self) -> Value {
        json!({"active": self.active, "entry": self.entry, "by": self.by,
            "turnBy": self.turn_by})
    }

    /// Reads [`ActiveAgent::to_json`]; a base stored before `by` was kept
    /// loads with nobody credited (until the next switch or new agent).
    pub fn from_json(v: &Value) -> ActiveAgent {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        ActiveAgent {
            active: s("active"),
            entry: s("entry"),
            by: s("by"),
            turn_by: s("turnBy"),
        }
    }
}

/// What part of the history an agent taking a thread over is sent
/// (`handoff.history`): the journal keeps everything either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HistoryFilter {
    #[default]
    Full,
    /// Without tool calls and their results (the transfer's included).
    NoToolCalls,
    /// From the last user message on.
    SinceLastUser,
    /// The last N messages (never starting inside a tool exchange).
    LastN(usize),
}

impl HistoryFilter {
    /// Parses `full | no-tool-calls | since-last-user | last-n:N`.
    pub fn parse(s: &str) -> Result<HistoryFilter, String> {
        match s {
            "full" => Ok(HistoryFilter::Full),
            "no-tool-calls" => Ok(HistoryFilter::NoToolCalls),
            "since-last-user" => Ok(HistoryFilter::SinceLastUser),
            _ => match s.strip_prefix("last-n:").map(str::parse::<usize>) {
                Some(Ok(n)) if n > 0 => Ok(HistoryFilter::LastN(n)),
                _ => Err(format!(
                    "'{s}' is not a history filter (full, no-tool-calls, since-last-user or last-n:N with N > 0)"
                )),
            },
        }
    }

    /// `messages` filtered. A cut never leaves a tool result whose call was
    /// cut away (an upstream model API refuses such a history).
    pub fn apply(self, messages: Vec<Value>) -> Vec<Value> {
        let role = |m: &Value| m.get("role").and_then(Value::as_str).map(str::to_owned);
        let mut out: Vec<Value> = match self {
            HistoryFilter::Full => return messages,
            HistoryFilter::NoToolCalls => messages
                .into_iter()
                .filter(|m| role(m).as_deref() != Some("tool"))
                .filter_map(|mut m| {
                    if let Some(obj) = m.as_object_mut() {
                        obj.remove("toolCalls");
                        let empty = obj
                            .get("content")
                            .is_none_or(|c| c.is_null() || c.as_str() == Some(""));
                        if obj.get("role").and_then(Value::as_str) == Some("assistant") && empty {
                            return None;
                        }
                    }
                    Some(m)
                })
                .collect(),
            HistoryFilter::SinceLastUser => {
                let from = messages
                    .iter()
                    .rposition(|m| role(m).as_deref() == Some("user"))
                    .unwrap_or(0);
                messages.into_iter().skip(from).collect()
            }
            HistoryFilter::LastN(n) => {
                let from = messages.len().saturating_sub(n);
                messages.into_iter().skip(from).collect()
            }
        };
        // Drop leading tool results whose call was cut away.
        let calls: std::collections::HashSet<String> = out
            .iter()
            .filter_map(|m| m.get("toolCalls").and_then(Value::as_array))
            .flatten()
            .filter_map(|c| c.get("id").and_then(Value::as_str).map(str::to_owned))
            .collect();
        out.retain(|m| {
            role(m).as_deref() != Some("tool")
                || m.get("toolCallId")
                    .and_then(Value::as_str)
                    .is_some_and(|id| calls.contains(id))
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(v: Value) -> Event {
        Event::build(v)
    }

    #[test]
    fn a_transfer_call_left_unanswered_is_a_request_with_its_reason() {
        let mut w = SignalWatch::default();
        let target = |name: &str| {
            target_of(name)
                .filter(|t| *t == "billing")
                .map(str::to_owned)
        };
        for e in [
            json!({"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "transfer_to_billing"}),
            json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{\"reason\": \"inv"}),
            json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "oice\"}"}),
            json!({"type": "TOOL_CALL_END", "toolCallId": "c1"}),
            json!({"type": "TOOL_CALL_START", "toolCallId": "c2", "toolCallName": "transfer_to_nobody"}),
            json!({"type": "TOOL_CALL_START", "toolCallId": "c3", "toolCallName": "transfer_to_billing"}),
            json!({"type": "TOOL_CALL_RESULT", "toolCallId": "c3", "messageId": "r", "content": "x"}),
            json!({"type": "CUSTOM", "name": HANDOFF_EVENT, "value": {"to": "support"}}),
        ] {
            w.observe(&ev(e), target);
        }
        let s = w.signals();
        assert_eq!(s.len(), 2, "{s:?}");
        assert_eq!(s[0].to, "billing");
        assert_eq!(s[0].reason.as_deref(), Some("invoice"));
        assert_eq!(s[0].trigger, Trigger::Tool);
        assert_eq!(s[1].to, "support");
        assert_eq!(s[1].trigger, Trigger::Event);
    }

    #[test]
    fn the_active_agent_moves_only_on_a_handoff_that_took_place() {
        let mut a = ActiveAgent::default();
        let started = |agent: &str, kind: &str| {
            ev(json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r",
                "agui-gateway": {"agent": agent, "kind": kind, "at": 1}}))
        };
        a.observe(&started("triage", "continue"));
        assert_eq!(a.active.as_deref(), Some("triage"));
        a.observe(&started("billing", "handoff"));
        let record = |result: &str| {
            ev(json!({"type": "CUSTOM", "name": HANDOFF_EVENT,
                "value": {"fromAgent": "triage", "toAgent": "billing", "result": result}}))
        };
        a.observe(&record("failed"));
        assert_eq!(a.active.as_deref(), Some("triage"));
        a.observe(&record("accepted"));
        assert_eq!(a.active.as_deref(), Some("billing"));
        assert_eq!(a.entry.as_deref(), Some("triage"));
        assert_eq!(ActiveAgent::from_json(&a.to_json()), a);
    }

    #[test]
    fn who_put_the_active_agent_there_is_kept_and_old_bases_still_load() {
        let started = |agent: &str, kind: &str, by: &str| {
            ev(json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r",
                "agui-gateway": {"agent": agent, "kind": kind, "by": by, "at": 1}}))
        };
        let switch = |agent: &str, by: &str| {
            ev(json!({"type": "CUSTOM", "name": ACTIVE_AGENT_EVENT,
                "value": {"agent": agent, "by": by, "at": 1}}))
        };
        let mut a = ActiveAgent::default();
        a.observe(&started("triage", "new", "ann"));
        assert_eq!(a.by.as_deref(), Some("ann"), "her run chose the agent");
        a.observe(&started("triage", "continue", "ben"));
        assert_eq!(a.by.as_deref(), Some("ann"), "same agent: nobody switched");
        a.observe(&switch("billing", "cat"));
        assert_eq!(
            (a.active.as_deref(), a.by.as_deref()),
            (Some("billing"), Some("cat"))
        );
        // Ben's run on billing hands over to triage: his turn, his handoff.
        a.observe(&started("billing", "continue", "ben"));
        a.observe(&started("triage", "handoff", "ben"));
        a.observe(&ev(json!({"type": "CUSTOM", "name": HANDOFF_EVENT,
            "value": {"fromAgent": "billing", "toAgent": "triage", "result": "accepted"}})));
        assert_eq!(
            (a.active.as_deref(), a.by.as_deref()),
            (Some("triage"), Some("ben"))
        );
        assert_eq!(ActiveAgent::from_json(&a.to_json()), a);
        // A base stored before `by` existed: loads, nobody credited.
        let old = ActiveAgent::from_json(&json!({"active": "triage", "entry": "triage"}));
        assert_eq!((old.active.as_deref(), old.by), (Some("triage"), None));
    }

    #[test]
    fn history_filters_never_leave_an_orphan_tool_result() {
        let h = vec![
            json!({"id": "u1", "role": "user", "content": "hi"}),
            json!({"id": "a1", "role": "assistant", "toolCalls": [{"id": "c1", "type": "function", "function": {"name": "transfer_to_b", "arguments": "{}"}}]}),
            json!({"id": "t1", "role": "tool", "toolCallId": "c1", "content": "ok"}),
            json!({"id": "a2", "role": "assistant", "content": "done"}),
        ];
        assert_eq!(HistoryFilter::Full.apply(h.clone()).len(), 4);
        let ids = |v: Vec<Value>| -> Vec<String> {
            v.iter()
                .map(|m| m["id"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(
            ids(HistoryFilter::NoToolCalls.apply(h.clone())),
            ["u1", "a2"]
        );
        assert_eq!(ids(HistoryFilter::LastN(2).apply(h.clone())), ["a2"]);
        assert_eq!(ids(HistoryFilter::SinceLastUser.apply(h.clone())).len(), 4);
        assert_eq!(
            HistoryFilter::parse("last-n:3"),
            Ok(HistoryFilter::LastN(3))
        );
        assert!(HistoryFilter::parse("last-n:0").is_err());
        assert!(HistoryFilter::parse("some").is_err());
    }
}
