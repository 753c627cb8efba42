//! A client's run as the thread takes it: a [`RunRequest`] for a run the
//! policy prepared, in its own `run` span. Shared by the commands and by a
//! handoff, whose next run is built the same way.

use crate::auth::Principal;
use crate::policy::Prepared;
use crate::protocol::hooks::RunInput;
use crate::thread::branch::BaseRequest;
use crate::thread::run::RunRequest;
use crate::upstream::Agent;
use std::sync::Arc;

/// The thread's request for a run the policy prepared, in a `run` span (a
/// child of the request's); who follows it is attached by [`launch`].
///
/// The upstream `traceparent` continues the client's (`traceparent`, HTTP)
/// or starts a trace; with OpenTelemetry export on it is the exported spans'
/// trace instead (the request span continued the client's), and the
/// upstream request's own span replaces it with its context.
pub fn run_request(
    agent: Arc<Agent>,
    run_id: String,
    input: RunInput,
    mut prepared: Prepared,
    (who, thread_id): (&Principal, &str),
    traceparent: Option<&str>,
    policy: &crate::policy::Policy,
) -> RunRequest {
    // The pool's backend group, by the agent's routing rules (the upstream
    // never sees who asked).
    let route = crate::policy::routing::group_for(
        policy.rules(),
        &agent.id,
        &agent.pool.routes,
        who,
        thread_id,
        || route_facts(&input),
    );
    let tenant = &who.tenant;
    let span = tracing::info_span!(
        "run",
        tenant = %tenant,
        thread = %thread_id,
        run = %run_id,
        agent = %agent.id,
    );
    let trace = crate::upstream::trace::of_span(&span)
        .unwrap_or_else(|| crate::upstream::trace::child_of(traceparent));
    tracing::info!(run = %run_id, agent = %agent.id, trace_id = %&trace[3..35], "run traced upstream");
    if let Ok(value) = reqwest::header::HeaderValue::from_str(&trace) {
        prepared.upstream_headers.insert("traceparent", value);
    }
    RunRequest {
        agent,
        run_id,
        input,
        starter: None,
        requester_connection: None,
        starter_visibility: None,
        filter: prepared.filter,
        upstream_headers: prepared.upstream_headers,
        span,
        base: BaseRequest::Head,
        started_by: Some(who.subject.clone()),
        handoff: Default::default(),
        route,
    }
}

/// What a routing condition sees of a run's input (`input.…`).
fn route_facts(input: &RunInput) -> serde_json::Value {
    match input {
        RunInput::Complete(i) => serde_json::json!({
            "forwardedProps": i.forwarded_props,
            "state": i.state,
            "context": i.context,
            "tools": i.tools,
            "messages": i.messages,
        }),
        RunInput::Incremental {
            messages,
            tools,
            context,
            state,
            forwarded_props,
            ..
        } => serde_json::json!({
            "forwardedProps": forwarded_props,
            "state": state,
            "context": context,
            "tools": tools,
            "messages": messages,
        }),
    }
}
