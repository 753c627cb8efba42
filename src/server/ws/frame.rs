//! What a client's text frames mean: the command object and its `type`
//! ([`decode_command`]), and the `run` and `resume` frames as the shared
//! [`commands`](crate::server::commands) they ask for.

use crate::auth::Principal;
use crate::config::Strategy;
use crate::protocol::hooks::RunInput;
use crate::protocol::input::{Message as AguiMessage, ResumeEntry};
use crate::server::commands::{self, ResumeCommand, RunCommand};
use crate::server::error::{ApiError, ErrorCode};
use crate::server::fields::{opt_array, opt_str, req_str};
use crate::server::state::AppState;
use crate::thread::branch::BaseRequest;
use crate::upstream::Agent;
use serde_json::Value;
use std::sync::Arc;

/// A frame [`decode_command`] refused: the error to answer with, and the
/// frame's `id` (when the frame was an object that had one) for the answer
/// to echo, so the client can match it to its command.
#[derive(Debug)]
pub struct Refusal {
    /// The frame's `id`, echoed in the error answer.
    pub id: Option<Value>,
    /// Why the frame is not a command (always `invalid`).
    pub error: ApiError,
}

/// Decodes one client text frame into its command object and `type`.
///
/// This is the whole of a frame's decoding that needs no connection state,
/// kept pure and public so it can be fuzzed without a socket (`tests/fuzz`,
/// target `ws_command`). The refusal is boxed: it is the rare path, and large.
pub fn decode_command(text: &str) -> Result<(Value, String), Box<Refusal>> {
    let v: Value = match serde_json::from_str(text) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            let error = ApiError::new(ErrorCode::Invalid, "frame is not a JSON object");
            return Err(Box::new(Refusal { id: None, error }));
        }
    };
    match req_str(&v, "type") {
        Ok(kind) => {
            let kind = kind.to_owned();
            Ok((v, kind))
        }
        Err(error) => Err(Box::new(Refusal {
            id: v.get("id").cloned(),
            error,
        })),
    }
}

/// A `run` frame: new messages for a thread, to an agent the caller may run
/// (checked as soon as the frame names it), or `routed`, the thread's, when
/// it names none.
pub(super) fn run_command(
    state: &AppState,
    who: &Principal,
    v: &Value,
    routed: Option<Arc<Agent>>,
) -> Result<RunCommand, ApiError> {
    let thread_id = req_str(v, "threadId")?;
    let run_id = run_id(v)?;
    let agent = match routed {
        Some(agent) => agent,
        None => commands::runnable_agent(state, who, req_str(v, "agent")?)?,
    };
    let strategy = opt_str(v, "strategy")?.map(strategy).transpose()?;
    let messages = opt_array(v, "messages")?;
    for (i, m) in messages.iter().enumerate() {
        serde_json::from_value::<AguiMessage>(m.clone())
            .map_err(|e| ApiError::new(ErrorCode::Invalid, format!("messages[{i}]: {e}")))?;
    }
    let input = RunInput::Incremental {
        messages,
        tools: opt_array(v, "tools")?,
        context: opt_array(v, "context")?,
        state: v.get("state").cloned().filter(|s| !s.is_null()),
        forwarded_props: v.get("forwardedProps").cloned().filter(|s| !s.is_null()),
        resume: None,
    };
    let base = match opt_str(v, "parentRunId")? {
        Some(parent) => BaseRequest::Run(parent.to_owned()),
        None => BaseRequest::Head,
    };
    Ok(RunCommand {
        agent,
        thread_id: thread_id.to_owned(),
        run_id,
        input,
        strategy,
        traceparent: None,
        base,
    })
}

/// A `regenerate` or `edit` frame: a run that forks from the run that
/// produced (regenerate) or introduced (edit) `messageId`. Its agent is
/// the frame's `agent`, else `default_agent` (the thread's latest).
pub(super) fn branch_command(
    state: &AppState,
    who: &Principal,
    v: &Value,
    default_agent: Option<String>,
) -> Result<RunCommand, ApiError> {
    let thread_id = req_str(v, "threadId")?;
    let kind = req_str(v, "type")?;
    let agent_id = match opt_str(v, "agent")? {
        Some(a) => a.to_owned(),
        None => default_agent.ok_or_else(|| {
            ApiError::new(
                ErrorCode::NotFound,
                "no agent has run on this thread; name one in 'agent'",
            )
        })?,
    };
    let agent = commands::runnable_agent(state, who, &agent_id)?;
    let message_id = opt_str(v, "messageId")?.map(str::to_owned);
    let base = if kind == "edit" {
        let message_id = message_id
            .ok_or_else(|| ApiError::new(ErrorCode::Invalid, "'messageId' is required"))?;
        let mut message = v
            .get("message")
            .filter(|m| m.is_object())
            .cloned()
            .ok_or_else(|| ApiError::new(ErrorCode::Invalid, "'message' must be an object"))?;
        message["id"] = message_id.clone().into();
        if message.get("role").is_none() {
            message["role"] = "user".into();
        }
        serde_json::from_value::<AguiMessage>(message.clone())
            .map_err(|e| ApiError::new(ErrorCode::Invalid, format!("message: {e}")))?;
        BaseRequest::Edit {
            message_id,
            message,
        }
    } else {
        BaseRequest::Regenerate(message_id)
    };
    Ok(RunCommand {
        agent,
        thread_id: thread_id.to_owned(),
        run_id: run_id(v)?,
        input: RunInput::Incremental {
            messages: Vec::new(),
            tools: opt_array(v, "tools")?,
            context: opt_array(v, "context")?,
            state: v.get("state").cloned().filter(|s| !s.is_null()),
            forwarded_props: v.get("forwardedProps").cloned().filter(|s| !s.is_null()),
            resume: None,
        },
        strategy: opt_str(v, "strategy")?.map(strategy).transpose()?,
        traceparent: None,
        base,
    })
}

/// A `resume` frame: answers to a thread's pending interrupts.
pub(super) fn resume_command(v: &Value) -> Result<ResumeCommand, ApiError> {
    let thread_id = req_str(v, "threadId")?;
    let entries = match v.get("resume") {
        Some(Value::Array(a)) if !a.is_empty() => a.clone(),
        _ => {
            return Err(ApiError::new(
                ErrorCode::Invalid,
                "'resume' must be a non-empty array",
            ));
        }
    };
    for (i, e) in entries.iter().enumerate() {
        serde_json::from_value::<ResumeEntry>(e.clone())
            .map_err(|err| ApiError::new(ErrorCode::Invalid, format!("resume[{i}]: {err}")))?;
    }
    Ok(ResumeCommand {
        thread_id: thread_id.to_owned(),
        agent_id: opt_str(v, "agent")?.map(str::to_owned),
        run_id: run_id(v)?,
        input: RunInput::Incremental {
            messages: opt_array(v, "messages")?,
            tools: opt_array(v, "tools")?,
            context: opt_array(v, "context")?,
            state: None,
            forwarded_props: v.get("forwardedProps").cloned().filter(|s| !s.is_null()),
            resume: Some(Value::Array(entries)),
        },
    })
}

/// A frame's `runId`, or a fresh one.
fn run_id(v: &Value) -> Result<String, ApiError> {
    Ok(opt_str(v, "runId")?
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()))
}

/// A frame's `strategy`, by its wire name.
fn strategy(name: &str) -> Result<Strategy, ApiError> {
    serde_json::from_value(Value::from(name)).map_err(|_| {
        ApiError::new(
            ErrorCode::Invalid,
            "'strategy' must be reject, enqueue or interrupt",
        )
    })
}
