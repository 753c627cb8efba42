//! Handoff, server side: which transfer tools a run is offered, and what
//! follows a run that asked for a handoff — decided by the handoff policy
//! and the caller's rights, the next run built the way a client's run is
//! (the target's own tool policy, limits and identity headers).
//!
//! The thread chains the next run in the same slot ([`crate::thread::handoff`]);
//! this module only answers its [`HandoffHook`]. A transfer that needs a
//! person's approval ends the run with an interrupt; its answer comes back
//! as an ordinary resume, turned here into the target's run
//! ([`answer_approval`]) or, declined, the source's run again with a
//! result saying so.

use super::error::{ApiError, ErrorCode};
use super::run_request::run_request;
use crate::auth::Principal;
use crate::policy::handoff::{Approval, OnRefusal, Respond};
use crate::policy::visibility::PolicySource;
use crate::policy::{Policy, PolicySlot};
use crate::protocol::Event;
use crate::protocol::handoff::{APPROVAL_REASON, Signal, Trigger, target_of, transfer_tool};
use crate::protocol::hooks::RunInput;
use crate::thread::branch::BaseRequest;
use crate::thread::handoff::{Decision, Ended, HandoffHook, HandoffPlan, Incoming, Then};
use crate::thread::run::RunRequest;
use crate::upstream::{Agent, AgentRegistry};
use serde_json::{Value, json};
use std::sync::Arc;

/// What a run's handoff decisions need: the rules and agents in force when
/// the run was asked for, who asked, and the turn's client input (carried to
/// the next agent).
#[derive(Clone)]
pub struct Handoffs {
    agents: Arc<AgentRegistry>,
    /// The policy slot: each decision reads the policy in force then (a
    /// reload between a run and its handoff applies to the handoff).
    policy: Arc<PolicySlot>,
    who: Principal,
    thread_id: String,
    /// The tools the client offered the turn (no transfer tools).
    client_tools: Vec<Value>,
    context: Vec<Value>,
    forwarded_props: Option<Value>,
    /// A run started again after a refusal: a second refusal ends the turn
    /// instead of looping.
    rerun: bool,
    /// The client request's W3C `traceparent`: every run the turn chains
    /// (a target, a source run again) continues it upstream, as the run the
    /// client asked for does, so the agents' traces of one turn are one trace.
    traceparent: Option<String>,
}

impl Handoffs {
    /// The handoff context of a run `who` asks for on `thread_id` with
    /// `input` (after the policy prepared it), under the agents and policy
    /// in force now.
    pub fn new(
        agents: Arc<AgentRegistry>,
        policy: Arc<PolicySlot>,
        who: &Principal,
        thread_id: &str,
        input: &RunInput,
    ) -> Handoffs {
        let (client_tools, context, forwarded_props): (Vec<Value>, Vec<Value>, Option<Value>) =
            match input {
                RunInput::Complete(i) => (
                    i.tools
                        .iter()
                        .filter_map(|t| serde_json::to_value(t).ok())
                        .collect(),
                    i.context
                        .iter()
                        .filter_map(|c| serde_json::to_value(c).ok())
                        .collect(),
                    i.forwarded_props.clone(),
                ),
                RunInput::Incremental {
                    tools,
                    context,
                    forwarded_props,
                    ..
                } => (tools.clone(), context.clone(), forwarded_props.clone()),
            };
        Handoffs {
            agents,
            policy,
            who: who.clone(),
            thread_id: thread_id.to_owned(),
            client_tools,
            context,
            forwarded_props,
            rerun: false,
            traceparent: None,
        }
    }

    /// The same, continuing the client's `traceparent` (HTTP) in the runs a
    /// handoff starts.
    pub fn continuing_trace(mut self, traceparent: Option<&str>) -> Handoffs {
        self.traceparent = traceparent.map(str::to_owned);
        self
    }
}

impl Handoffs {
    /// The policy in force now.
    fn policy(&self) -> Arc<Policy> {
        self.policy.current()
    }

    /// The handoff part of a request for a run of `agent`: its transfer
    /// tools (targets the caller may run) and this hook.
    pub fn plan_for(&self, agent: &Agent, incoming: Option<Incoming>) -> HandoffPlan {
        let settings = crate::policy::handoff::of(self.policy().rules()).of(&agent.id);
        let tools = settings
            .targets
            .iter()
            .filter_map(|t| self.agents.get(t))
            .filter(|t| t.allows(&self.who))
            .map(|t| transfer_tool(&t.id, &t.description))
            .collect();
        HandoffPlan {
            tools,
            hook: Some(Arc::new(self.clone())),
            incoming,
            withhold_resume: false,
        }
    }

    /// The request for `agent`'s run with `messages` as its new input.
    fn request(&self, agent: Arc<Agent>, messages: Vec<Value>) -> Result<RunRequest, String> {
        let mut input = RunInput::Incremental {
            messages,
            tools: self.client_tools.clone(),
            context: self.context.clone(),
            state: None,
            forwarded_props: self.forwarded_props.clone(),
            resume: None,
        };
        let prepared = self
            .policy()
            .prepare_run(&self.who, &agent.id, &self.thread_id, &mut input)
            .map_err(|r| match r {
                crate::policy::Refused::Limit(l) => l.message,
                crate::policy::Refused::Rate(l) => format!("rate rule '{}'", l.rule),
            })?;
        let run_id = uuid::Uuid::new_v4().to_string();
        Ok(run_request(
            agent,
            run_id,
            input,
            prepared,
            (&self.who, &self.thread_id),
            self.traceparent.as_deref(),
            &self.policy(),
        ))
    }

    /// The target's run for `signal`, taking the thread over from `ended`.
    fn target_run(
        &self,
        ended: &Ended<'_>,
        signal: &Signal,
        others: Vec<Value>,
    ) -> Result<RunRequest, String> {
        let target = self
            .agents
            .get(&signal.to)
            .ok_or_else(|| format!("no agent '{}'", signal.to))?;
        let mut messages = Vec::new();
        if let Some(call) = &signal.tool_call_id {
            messages.push(tool_result(
                call,
                &format!("Transferred to '{}'.", signal.to),
            ));
        }
        messages.extend(others);
        let mut next = self.clone();
        next.rerun = false;
        next.context.push(json!({
            "description": "handoff",
            "value": match &signal.reason {
                Some(r) => format!("Agent '{}' handed this conversation to you ('{}'): {r}", ended.agent, signal.to),
                None => format!("Agent '{}' handed this conversation to you ('{}').", ended.agent, signal.to),
            },
        }));
        let mut run = next.request(target.clone(), messages)?;
        let settings = crate::policy::handoff::of(self.policy().rules()).of(ended.agent);
        let record = json!({
            "fromAgent": ended.agent,
            "toAgent": signal.to,
            "fromRunId": ended.run_id,
            "toRunId": run.run_id,
            "reason": signal.reason,
            "trigger": signal.trigger.as_str(),
            "toolCallId": signal.tool_call_id,
        });
        let incoming = Incoming {
            record,
            tool_call_id: signal.tool_call_id.clone(),
            history: settings.history,
            carry_state: settings.carry_state,
        };
        run.base = BaseRequest::Handoff;
        run.handoff = next.plan_for(&target, Some(incoming));
        Ok(run)
    }

    /// `ended`'s agent again, told why its transfer did not happen.
    fn rerun(&self, ended: &Ended<'_>, results: Vec<Value>) -> Option<RunRequest> {
        let agent = self.agents.get(ended.agent)?;
        let mut again = self.clone();
        again.rerun = true;
        let mut run = again.request(agent.clone(), results).ok()?;
        // Of kind handoff too: a gateway-started link of the turn's chain,
        // counted against its limit.
        run.base = BaseRequest::Handoff;
        run.handoff = again.plan_for(&agent, None);
        Some(run)
    }
}

/// A tool message answering `call`.
fn tool_result(call: &str, content: &str) -> Value {
    json!({
        "id": format!("handoff-result-{call}"),
        "role": "tool",
        "toolCallId": call,
        "content": content,
    })
}

/// The journal's note of a refused handoff (beside the tool policy's notices).
fn refusal_note(ended: &Ended<'_>, signal: &Signal, reason: &str) -> Event {
    Event::build(json!({
        "type": "CUSTOM",
        "name": "agui-gateway/policy",
        "value": {
            "action": "handoff_refused",
            "kind": "handoff",
            "fromAgent": ended.agent,
            "toAgent": signal.to,
            "toolCallId": signal.tool_call_id,
            "reason": reason,
        },
    }))
}

/// The interrupt asking a person to approve `signal` (AG-UI 1.1's
/// interrupt shape; the answer is `payload.approved`).
fn approval_interrupt(ended: &Ended<'_>, signal: &Signal) -> Value {
    let id = match &signal.tool_call_id {
        Some(call) => format!("handoff-{call}"),
        None => format!("handoff-{}", uuid::Uuid::new_v4()),
    };
    json!({
        "id": id,
        "reason": APPROVAL_REASON,
        "message": format!("Transfer to {}?", signal.to),
        "toolCallId": signal.tool_call_id,
        "responseSchema": {
            "type": "object",
            "properties": {"approved": {"type": "boolean"}},
            "required": ["approved"],
        },
        "metadata": {"agui-gateway": {"handoff": {
            "fromAgent": ended.agent,
            "toAgent": signal.to,
            "fromRunId": ended.run_id,
            "reason": signal.reason,
            "trigger": signal.trigger.as_str(),
        }}},
    })
}

impl HandoffHook for Handoffs {
    fn target(&self, tool_name: &str) -> Option<String> {
        let to = target_of(tool_name)?;
        let clients_own = self
            .client_tools
            .iter()
            .any(|t| t.get("name").and_then(Value::as_str) == Some(tool_name));
        (!clients_own && self.agents.get(to).is_some()).then(|| to.to_owned())
    }

    fn decide(&self, ended: &Ended<'_>) -> Decision {
        let (first, later) = ended
            .signals
            .split_first()
            .expect("a handoff was asked for");
        // Every other transfer call of the turn gets a result too: no call
        // is ever left dangling.
        let others: Vec<Value> = later
            .iter()
            .filter_map(|s| s.tool_call_id.as_deref())
            .filter(|call| first.tool_call_id.as_deref() != Some(*call))
            .map(|call| {
                tool_result(
                    call,
                    &format!(
                        "Not transferred: only the first transfer of a turn is taken (to '{}').",
                        first.to
                    ),
                )
            })
            .collect();
        let settings = crate::policy::handoff::of(self.policy().rules()).of(ended.agent);
        let may_run = self
            .agents
            .get(&first.to)
            .is_some_and(|a| a.allows(&self.who));
        let verdict = crate::policy::handoff::of(self.policy().rules())
            .judge(ended.agent, &first.to, ended.chain + 1, may_run)
            .map_err(|r| r.reason);
        let started = verdict.and_then(|()| {
            if settings.approval == Approval::User && first.trigger != Trigger::Approval {
                return Ok(None);
            }
            self.target_run(ended, first, others.clone()).map(Some)
        });
        match started {
            Ok(Some(run)) => {
                crate::metrics::handoff(ended.agent, &first.to, "started");
                tracing::info!(thread = %self.thread_id, from = ended.agent, to = %first.to, run = %run.run_id, "handoff");
                Decision {
                    notes: Vec::new(),
                    then: Then::Start {
                        run: Box::new(run),
                        keep_requester: settings.respond == Respond::Continue,
                    },
                }
            }
            Ok(None) => {
                crate::metrics::handoff(ended.agent, &first.to, "approval");
                Decision {
                    notes: Vec::new(),
                    then: Then::Ask(approval_interrupt(ended, first)),
                }
            }
            Err(reason) => {
                crate::metrics::handoff(ended.agent, &first.to, "refused");
                tracing::info!(thread = %self.thread_id, from = ended.agent, to = %first.to, "handoff refused: {reason}");
                let notes = vec![refusal_note(ended, first, &reason)];
                // Only a transfer call can be answered; a second refusal in a
                // row ends the turn rather than looping.
                let then = match &first.tool_call_id {
                    Some(call) if settings.on_refusal == OnRefusal::Rerun && !self.rerun => {
                        let mut results = vec![tool_result(
                            call,
                            &format!("The transfer to '{}' was refused: {reason}", first.to),
                        )];
                        results.extend(others);
                        match self.rerun(ended, results) {
                            Some(run) => Then::Start {
                                run: Box::new(run),
                                keep_requester: settings.respond == Respond::Continue,
                            },
                            None => Then::End,
                        }
                    }
                    _ => Then::End,
                };
                Decision { notes, then }
            }
        }
    }
}

/// The run that answers a transfer's approval: the target's, approved, or
/// the source's again with a result saying the person declined. `pending`
/// are the thread's pending interrupts (one of them the approval); the
/// request's `resume` must answer them all, as any resume does.
pub fn answer_approval(
    hook: &Handoffs,
    pending: &[Value],
    input: &RunInput,
) -> Result<Option<RunRequest>, ApiError> {
    let Some(approval) = pending
        .iter()
        .find(|i| i.get("reason").and_then(Value::as_str) == Some(APPROVAL_REASON))
    else {
        return Ok(None);
    };
    let id = approval
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let entries = input.resume_entries();
    let entry = entries
        .iter()
        .find(|e| e.get("interruptId").and_then(Value::as_str) == Some(id))
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::Invalid,
                format!("the resume does not answer interrupt '{id}' (the transfer's approval)"),
            )
        })?;
    let approved = entry.get("status").and_then(Value::as_str) != Some("cancelled")
        && entry
            .get("payload")
            .and_then(|p| p.get("approved"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
    let h = &approval["metadata"]["agui-gateway"]["handoff"];
    let s = |k: &str| h.get(k).and_then(Value::as_str).map(str::to_owned);
    let (Some(from), Some(to), Some(from_run)) = (s("fromAgent"), s("toAgent"), s("fromRunId"))
    else {
        return Err(ApiError::new(
            ErrorCode::Invalid,
            "the transfer's approval interrupt is damaged",
        ));
    };
    let signal = Signal {
        to: to.clone(),
        reason: s("reason"),
        tool_call_id: approval
            .get("toolCallId")
            .and_then(Value::as_str)
            .map(str::to_owned),
        trigger: Trigger::Approval,
    };
    let ended = Ended {
        thread_id: &hook.thread_id,
        run_id: &from_run,
        agent: &from,
        signals: std::slice::from_ref(&signal),
        chain: 0,
    };
    let resume = match input {
        RunInput::Complete(i) => serde_json::to_value(&i.resume)
            .ok()
            .filter(|r| !r.is_null()),
        RunInput::Incremental { resume, .. } => resume.clone(),
    };
    let mut run = if approved {
        let may_run = hook.agents.get(&to).is_some_and(|a| a.allows(&hook.who));
        let started = crate::policy::handoff::of(hook.policy().rules())
            .judge(&from, &to, 1, may_run)
            .map_err(|r| r.reason)
            .and_then(|()| hook.target_run(&ended, &signal, Vec::new()));
        match started {
            Ok(run) => {
                crate::metrics::handoff(&from, &to, "started");
                run
            }
            Err(reason) => {
                crate::metrics::handoff(&from, &to, "refused");
                return Err(ApiError::new(
                    ErrorCode::Forbidden,
                    format!("the transfer can no longer happen: {reason}"),
                ));
            }
        }
    } else {
        crate::metrics::handoff(&from, &to, "declined");
        let results = signal
            .tool_call_id
            .iter()
            .map(|call| tool_result(call, &format!("The user declined the transfer to '{to}'.")))
            .collect();
        hook.rerun(&ended, results)
            .ok_or_else(|| ApiError::new(ErrorCode::NotFound, format!("no agent '{from}'")))?
    };
    if let RunInput::Incremental { resume: r, .. } = &mut run.input {
        *r = resume;
    }
    run.handoff.withhold_resume = true;
    Ok(Some(run))
}
