//! The commands a client sends, whatever the transport: run, resume,
//! cancel and meta. WebSocket frames (`ws`) and HTTP routes (`http`,
//! `sideband`) parse their framing into these calls and write the answer in
//! their own format; the checks (agent roles, thread permissions, strategy
//! override), the policy and the refusals' stable codes live here once, so
//! both transports answer a command the same way.
//!
//! Each command returns its ack fields (`threadId`, `runId`, …), which the
//! WebSocket sends in an `ack` frame and HTTP as its JSON answer.

use super::access::{AccessError, thread_for};
use super::error::{ApiError, ErrorCode};
use super::handoff::Handoffs;
use super::run_request::run_request;
use super::state::AppState;
use crate::auth::{Permission, Principal};
use crate::config::Strategy;
use crate::policy::Prepared;
use crate::protocol::hooks::{RunInput, ViewerVisibility};
use crate::thread::Thread;
use crate::thread::branch::BaseRequest;
use crate::thread::fanout::Outbox;
use crate::thread::run::{RunRequest, Started};
use crate::upstream::Agent;
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The agent `agent_id`, if it exists and `who`'s roles may run it. Every
/// run and resume checks it; it stands alone so that HTTP can check the
/// agent in its path before it reads the body.
pub fn runnable_agent(
    state: &AppState,
    who: &Principal,
    agent_id: &str,
) -> Result<Arc<Agent>, ApiError> {
    let agent = state
        .agents()
        .get(agent_id)
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound, format!("no agent '{agent_id}'")))?;
    if !agent.allows(who) {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            format!("your roles may not run agent '{agent_id}'"),
        ));
    }
    Ok(agent)
}

/// A run as a transport parsed it: a WebSocket `run` frame (new messages
/// only) or an HTTP `RunAgentInput` (complete, and a resume when it carries
/// `resume` entries).
pub struct RunCommand {
    /// From [`runnable_agent`].
    pub agent: Arc<Agent>,
    /// The thread to run on; created by a run, required by a resume.
    pub thread_id: String,
    /// The client's run id (HTTP), or one the transport made up.
    pub run_id: String,
    /// The client's input; policy may rewrite it before the agent sees it.
    pub input: RunInput,
    /// The strategy the client chose, if it chose one; the agent's otherwise.
    pub strategy: Option<Strategy>,
    /// The client request's W3C `traceparent` (HTTP), continued upstream.
    pub traceparent: Option<String>,
    /// Where the run starts from: the head, or a run of the thread
    /// (`parentRunId`, regenerate, edit).
    pub base: BaseRequest,
}

/// A WebSocket `resume` frame: answers to the thread's pending interrupts.
pub struct ResumeCommand {
    /// The thread whose interrupts are answered; it must exist.
    pub thread_id: String,
    /// The agent to send the answers to; `None` → the one that last ran on
    /// the thread (the one that raised the interrupts).
    pub agent_id: Option<String>,
    /// The client's run id, or one the transport made up.
    pub run_id: String,
    /// Carries the `resume` entries.
    pub input: RunInput,
}

/// How the one who asked for a run follows it.
pub enum Requester<'a> {
    /// An HTTP response: this run's events only, in their own outbox.
    Feed(Arc<Outbox>),
    /// A WebSocket connection: the whole thread, as one of its viewers.
    Viewer(&'a mut dyn Viewer),
}

/// A connection that watches threads (the WebSocket), so that a run it asks
/// for makes it a viewer of the run's thread first.
pub trait Viewer: Send {
    /// Whether it already watches `thread`.
    fn watches(&self, thread: &Thread) -> bool;
    /// Starts watching `thread` live; called before the run starts, so the
    /// viewer misses none of its events.
    fn watch(&mut self, thread: &Arc<Thread>, visibility: ViewerVisibility);
    /// Stops watching `thread` again: a refused run leaves no subscription.
    fn unwatch(&mut self, thread: &Thread);
    /// Where the connection can be told about its run later (a queued run
    /// that can never start).
    fn connection(&self) -> Option<Arc<Outbox>> {
        None
    }
}

/// Starts (or queues) a run. Policy first, so a refused run creates no
/// thread; then the thread: created for a run, required for a resume
/// (`resume` permission instead of `run`).
pub async fn run(
    state: &AppState,
    who: &Principal,
    cmd: RunCommand,
    requester: Requester<'_>,
) -> Result<Map<String, Value>, ApiError> {
    let RunCommand {
        agent,
        thread_id,
        run_id,
        mut input,
        strategy,
        traceparent,
        base,
    } = cmd;
    super::access_log::record_thread(&thread_id, Some(&run_id));
    let strategy = match strategy {
        Some(chosen) if chosen != agent.strategy && !agent.allow_strategy_override => {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                format!("agent '{}' does not allow choosing the strategy", agent.id),
            ));
        }
        Some(chosen) => chosen,
        None => agent.strategy,
    };
    let need = if answers_interrupts(&input) {
        Permission::Resume
    } else {
        Permission::Run
    };
    let prepared = state
        .policy()
        .prepare_run(who, &agent.id, &thread_id, &mut input)?;
    state
        .check_shared_rate(crate::policy::rate::Action::Run, who, &agent.id, &thread_id)
        .await?;
    let thread = thread_for(state, who, &thread_id, need, need == Permission::Run)
        .await
        .map_err(AccessError::into_api)?;
    // A resume that also forks the thread is a run too: it needs both.
    if need == Permission::Resume && base != BaseRequest::Head {
        thread_for(state, who, &thread_id, Permission::Run, false)
            .await
            .map_err(AccessError::into_api)?;
    }
    let launched = async {
        let request = handoff_aware_request(
            state,
            who,
            &thread,
            (agent, run_id, input, prepared),
            need == Permission::Resume,
            traceparent.as_deref(),
        )
        .await?;
        let request = match request {
            Answered::Approval(answer) => answer,
            Answered::Run(mut request) => {
                request.base = base;
                request
            }
        };
        launch(state, who, &thread, request, strategy, requester).await
    }
    .await;
    if launched.is_err() {
        // A refused run creates nothing: a thread this request brought
        // into being (nothing journaled, nobody on it) goes again, so it
        // answers `not_found` as before.
        // A copy early viewers hold stays, unclaimed again.
        thread.release_claim(&who.subject);
        state.threads.forget_if_unused(&thread.key);
    }
    launched
}

/// A request as [`handoff_aware_request`] built it.
enum Answered {
    /// The run that answers a transfer's approval (its own base and agent).
    Approval(RunRequest),
    /// The run asked for, with its handoff plan.
    Run(RunRequest),
}

/// The request for a run the policy prepared, with its handoff plan; for a
/// resume of a transfer's approval, the run that answers it instead.
async fn handoff_aware_request(
    state: &AppState,
    who: &Principal,
    thread: &Thread,
    (agent, run_id, input, prepared): (Arc<Agent>, String, RunInput, Prepared),
    resumes: bool,
    traceparent: Option<&str>,
) -> Result<Answered, ApiError> {
    let thread_id = thread.key.thread_id.clone();
    let handoffs = Handoffs::new(state.agents(), state.policy_slot(), who, &thread_id, &input)
        .continuing_trace(traceparent);
    if resumes && let Some(answer) = approval(&handoffs, thread, &run_id, &input).await? {
        return Ok(Answered::Approval(answer));
    }
    let plan = handoffs.plan_for(&agent, None);
    let mut request = run_request(
        agent,
        run_id,
        input,
        prepared,
        (who, &thread_id),
        traceparent,
        &state.policy(),
    );
    request.handoff = plan;
    Ok(Answered::Run(request))
}

/// The run answering a transfer's approval, when the thread's pending
/// interrupts hold one (see [`super::handoff::answer_approval`]); it
/// takes the client's runId.
async fn approval(
    handoffs: &Handoffs,
    thread: &Thread,
    run_id: &str,
    input: &RunInput,
) -> Result<Option<RunRequest>, ApiError> {
    thread.refresh().await;
    let pending = thread.pending_interrupts();
    let Some(mut run) = super::handoff::answer_approval(handoffs, &pending, input)? else {
        return Ok(None);
    };
    run.run_id = run_id.to_owned();
    if let Some(incoming) = &mut run.handoff.incoming {
        incoming.record["toRunId"] = run_id.into();
    }
    Ok(Some(run))
}

/// Answers a thread's pending interrupts with a run, sent to the agent that
/// raised them unless another (runnable) one is named. The thread comes
/// first: it names the agent.
pub async fn resume(
    state: &AppState,
    who: &Principal,
    cmd: ResumeCommand,
    requester: Requester<'_>,
) -> Result<Map<String, Value>, ApiError> {
    let ResumeCommand {
        thread_id,
        agent_id,
        run_id,
        mut input,
    } = cmd;
    super::access_log::record_thread(&thread_id, Some(&run_id));
    let thread = thread_for(state, who, &thread_id, Permission::Resume, false)
        .await
        .map_err(AccessError::into_api)?;
    // Another node may have run the agent that raised the interrupts.
    thread.refresh().await;
    let agent_id = match agent_id {
        Some(a) => a,
        None => thread.meta().agent.ok_or_else(|| {
            ApiError::new(
                ErrorCode::Invalid,
                "no agent has run on this thread; name one in 'agent'",
            )
        })?,
    };
    let agent = runnable_agent(state, who, &agent_id)?;
    let strategy = agent.strategy;
    let prepared = state
        .policy()
        .prepare_run(who, &agent.id, &thread_id, &mut input)?;
    state
        .check_shared_rate(crate::policy::rate::Action::Run, who, &agent.id, &thread_id)
        .await?;
    let (Answered::Approval(request) | Answered::Run(request)) = handoff_aware_request(
        state,
        who,
        &thread,
        (agent, run_id, input, prepared),
        true,
        None,
    )
    .await?;
    launch(state, who, &thread, request, strategy, requester).await
}

/// Whether a run's input answers interrupts (a resume).
fn answers_interrupts(input: &RunInput) -> bool {
    match input {
        RunInput::Complete(i) => i.resume.as_ref().is_some_and(|r| !r.is_empty()),
        RunInput::Incremental { resume, .. } => resume
            .as_ref()
            .and_then(Value::as_array)
            .is_some_and(|r| !r.is_empty()),
    }
}

/// The common tail of a run and a resume (access and policy are settled):
/// the requester is attached, the thread starts or queues the run, and the
/// ack says which.
async fn launch(
    state: &AppState,
    who: &Principal,
    thread: &Arc<Thread>,
    mut request: RunRequest,
    strategy: Strategy,
    requester: Requester<'_>,
) -> Result<Map<String, Value>, ApiError> {
    if state.is_draining() {
        return Err(ApiError::new(
            ErrorCode::Unavailable,
            "this gateway node is draining before it stops; retry (another node takes the run)",
        ));
    }
    let thread_id = thread.key.thread_id.clone();
    let run_id = request.run_id.clone();
    let visibility = || state.viewer_rules(who, &thread_id);
    let mut newly_watching = None;
    match requester {
        Requester::Feed(outbox) => {
            request.starter_visibility = visibility();
            request.starter = Some(outbox);
        }
        Requester::Viewer(viewer) => {
            request.requester_connection = viewer.connection();
            if !viewer.watches(thread) {
                viewer.watch(thread, visibility());
                newly_watching = Some(viewer);
            }
        }
    }
    let started = match thread.start_run(request, strategy).await {
        Ok(started) => started,
        Err(refused) => {
            if let Some(viewer) = newly_watching {
                viewer.unwatch(thread);
            }
            return Err(refused.into());
        }
    };
    let mut ack = Map::new();
    ack.insert("threadId".into(), thread_id.into());
    ack.insert("runId".into(), run_id.into());
    if let Started::Queued(n) = started {
        ack.insert("queued".into(), n.into());
    }
    Ok(ack)
}

/// Cancels the thread's active run (only `run_id`'s when given). Returns the ack fields.
pub async fn cancel(
    state: &AppState,
    who: &Principal,
    thread_id: &str,
    run_id: Option<&str>,
) -> Result<Map<String, Value>, ApiError> {
    super::access_log::record_thread(thread_id, run_id);
    let thread = thread_for(state, who, thread_id, Permission::Cancel, false)
        .await
        .map_err(AccessError::into_api)?;
    let cancelled = thread.cancel_run(run_id).await?.ok_or_else(|| {
        ApiError::new(
            ErrorCode::Conflict,
            match run_id {
                Some(r) => format!("run '{r}' is not the active run"),
                None => "no active run".into(),
            },
        )
    })?;
    let mut ack = Map::new();
    ack.insert("threadId".into(), thread_id.into());
    ack.insert("runId".into(), cancelled.into());
    Ok(ack)
}

/// Posts a META event: checks `meta` permission, the type allow-list and
/// payload size; `payload.userId` is always the caller. Returns the ack fields.
pub async fn meta(
    state: &AppState,
    who: &Principal,
    thread_id: &str,
    cmd: &Value,
) -> Result<Map<String, Value>, ApiError> {
    let invalid = |m: &str| ApiError::new(ErrorCode::Invalid, m);
    let meta_type = cmd
        .get("metaType")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| invalid("'metaType' must be a non-empty string"))?;
    let cfg = &state.config.meta;
    if !cfg.allowed_types.is_empty() && !cfg.allowed_types.iter().any(|t| t == meta_type) {
        return Err(ApiError::new(
            ErrorCode::Invalid,
            format!(
                "metaType '{meta_type}' is not allowed (allowed: {})",
                cfg.allowed_types.join(", ")
            ),
        ));
    }
    let payload = match cmd.get("payload") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(invalid("'payload' must be an object")),
    };
    let size = serde_json::to_vec(&payload)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if size > cfg.max_payload_bytes {
        return Err(ApiError::new(
            ErrorCode::TooLarge,
            format!(
                "payload is {size} bytes; the limit is {}",
                cfg.max_payload_bytes
            ),
        ));
    }
    let client_event_id = match cmd.get("clientEventId") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 128 => Some(s.clone()),
        Some(_) => {
            return Err(invalid(
                "'clientEventId' must be a string of 1-128 characters",
            ));
        }
    };
    let thread = thread_for(state, who, thread_id, Permission::Meta, false)
        .await
        .map_err(AccessError::into_api)?;
    crate::policy::rate::check(
        state.policy().rules(),
        crate::policy::rate::Action::Meta,
        who,
        "",
        thread_id,
    )?;
    state
        .check_shared_rate(crate::policy::rate::Action::Meta, who, "", thread_id)
        .await?;
    let (event_id, entry) = thread
        .append_meta(&who.subject, meta_type, payload, client_event_id)
        .await
        .map_err(|e| {
            ApiError::new(
                ErrorCode::Unavailable,
                format!("the meta event could not be stored ({e}); nothing was recorded, retry"),
            )
        })?;
    if let (Some(entry), Some(url)) = (&entry, &cfg.webhook_url) {
        let body = json!({
            "tenant": who.tenant,
            "threadId": thread_id,
            "seq": entry.seq,
            "event": entry.event.body(),
        });
        tokio::spawn(super::webhook::deliver(
            url.clone(),
            cfg.webhook_headers.clone(),
            cfg.webhook_attempts,
            body,
        ));
    }
    let mut ack = Map::new();
    ack.insert("threadId".into(), thread_id.into());
    ack.insert("eventId".into(), event_id.into());
    ack.insert("duplicate".into(), entry.is_none().into());
    Ok(ack)
}

/// The agent a run that names none goes to on `thread_id`: the thread's
/// active agent when it is sticky (its `handoff.sticky`, on by default),
/// else the agent the turn began with; a thread no agent ran on needs one
/// named.
pub async fn routed_agent(
    state: &AppState,
    who: &Principal,
    thread_id: &str,
) -> Result<Arc<Agent>, ApiError> {
    let thread = thread_for(state, who, thread_id, Permission::Run, false)
        .await
        .map_err(AccessError::into_api)?;
    thread.refresh().await;
    let agents = thread.active_agent();
    let policy = state.policy();
    let handoff = crate::policy::handoff::of(policy.rules());
    let id = match (agents.active, agents.entry) {
        (Some(active), _) if handoff.of(&active).sticky => Some(active),
        (_, Some(entry)) => Some(entry),
        (active, None) => active.or(thread.meta().agent),
    };
    let id = id.ok_or_else(|| {
        ApiError::new(
            ErrorCode::NotFound,
            "no agent has run on this thread; name one in 'agent'",
        )
    })?;
    runnable_agent(state, who, &id)
}

/// Switches the thread's active agent to `agent_id` for its next plain run
/// (a person taking the conversation to another agent): the caller must be
/// allowed to run on the thread and to run that agent. Journaled as
/// `CUSTOM agui-gateway/active-agent`, so every viewer and node follows.
pub async fn switch_agent(
    state: &AppState,
    who: &Principal,
    thread_id: &str,
    agent_id: &str,
) -> Result<Map<String, Value>, ApiError> {
    super::access_log::record_thread(thread_id, None);
    let agent = runnable_agent(state, who, agent_id)?;
    let thread = thread_for(state, who, thread_id, Permission::Run, false)
        .await
        .map_err(AccessError::into_api)?;
    let entry = thread
        .switch_agent(&agent.id, &who.subject)
        .await
        .map_err(|e| {
            ApiError::new(
                ErrorCode::Unavailable,
                format!("the switch could not be stored ({e}); nothing changed, retry"),
            )
        })?;
    let mut ack = Map::new();
    ack.insert("threadId".into(), thread_id.into());
    ack.insert("agent".into(), agent.id.clone().into());
    ack.insert("seq".into(), entry.seq.into());
    Ok(ack)
}

/// The answers a `regenerate` carries: when the answer it replaces came
/// from a run that answered interrupts (a resume after an approval), that
/// run's base — the run that asked — still has them pending, so its
/// sibling must answer them too; a regenerate asks the agent again, not
/// the people, so it sends the same answers. `None`: the regenerated run
/// answered nothing (a plain regenerate). Refused when those answers are
/// no longer in the journal (compacted away).
pub fn regenerated_answers(
    thread: &Thread,
    message_id: Option<&str>,
    visibility: &ViewerVisibility,
) -> Result<Option<Value>, ApiError> {
    let message_id = match message_id {
        Some(id) => id.to_owned(),
        None => match last_assistant(&thread.snapshot(visibility)) {
            Some(id) => id,
            None => return Ok(None),
        },
    };
    let runs = thread.runs_page(0, usize::MAX);
    let produced = |r: &&Value| {
        r["outputMessageIds"]
            .as_array()
            .is_some_and(|ids| ids.iter().any(|i| i == message_id.as_str()))
    };
    let Some(run) = runs["runs"].as_array().into_iter().flatten().find(produced) else {
        return Ok(None);
    };
    if !answers_its_base(&runs, run) {
        return Ok(None);
    }
    let started = run["startedSeq"].as_u64().unwrap_or(0);
    let answers = thread
        .entries_after(started.saturating_sub(1))
        .and_then(|entries| entries.into_iter().find(|e| e.seq == started))
        .and_then(|e| e.event.get("input")?.get("resume").cloned())
        .filter(|r| r.as_array().is_some_and(|a| !a.is_empty()));
    match answers {
        Some(answers) => Ok(Some(answers)),
        None => Err(ApiError::new(
            ErrorCode::Conflict,
            format!(
                "run '{}' answered the interrupts of run '{}', and its answers are no longer in the journal: answer them again with a resume from that run (parentRunId)",
                run["runId"].as_str().unwrap_or_default(),
                run["parentRunId"].as_str().unwrap_or_default(),
            ),
        )),
    }
}

/// True when `run` (of the runs page `runs`) answered its base's
/// interrupts: a resume, or a regenerate of such an answer (it carried the
/// same answers), whose parent ended interrupted. Regenerating its answer
/// again must carry them again.
fn answers_its_base(runs: &Value, run: &Value) -> bool {
    match run["kind"].as_str() {
        Some("resume") => true,
        Some("regenerate") => runs["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["runId"] == run["parentRunId"])
            .is_some_and(|p| p["status"] == "interrupted"),
        _ => false,
    }
}

/// The id of the last assistant message of a snapshot.
fn last_assistant(snapshot: &Map<String, Value>) -> Option<String> {
    snapshot
        .get("messages")?
        .as_array()?
        .iter()
        .rev()
        .find(|m| m["role"] == "assistant")
        .and_then(|m| m["id"].as_str().map(str::to_owned))
}
