//! `GET /v1/ws`: shared sessions over WebSocket.
//!
//! Each connection is one task with two halves, polled together. The
//! reader (`connection`) authenticates and hands each command frame to its
//! `client`, which parses it (`frame`) into one of the shared
//! [`commands`](super::commands) and acks in the WebSocket's own format. The
//! writer (`writer`) drains the connection's
//! [`Outbox`](crate::thread::fanout::Outbox), which threads push to directly,
//! and sends pings; it is the only place that writes to the socket, so a
//! slow socket backs up one outbox and nothing else.

mod client;
mod connection;
mod frame;
mod writer;

pub use connection::{
    CLOSE_GOING_AWAY, CLOSE_POLICY, CLOSE_PROTOCOL, CLOSE_TOO_LARGE, CLOSE_UNAUTHENTICATED,
};
pub use frame::{Refusal, decode_command};

use super::error::{ApiError, ErrorCode};
use super::extract::bearer;
use super::state::AppState;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::sync::Arc;

/// The subprotocol the gateway speaks (and answers with).
pub const SUBPROTOCOL: &str = "agui-gateway.v1";

/// The upgrade handler: origin check, token from header / subprotocol /
/// (opt-in) query, then the connection.
pub async fn upgrade(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
    ws: WebSocketUpgrade,
) -> Response {
    let cfg = &state.config.ws;
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok())
        && !cfg.allowed_origins.is_empty()
        && !cfg
            .allowed_origins
            .iter()
            .any(|p| crate::auth::access::glob_match(p, origin))
    {
        return ApiError::new(
            ErrorCode::Forbidden,
            format!("origin '{origin}' is not allowed"),
        )
        .into_response();
    }
    let offered = headers
        .get(header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let token = bearer(&headers)
        .map(str::to_owned)
        .or_else(|| {
            offered
                .split(',')
                .map(str::trim)
                .find_map(|p| p.strip_prefix("bearer."))
                .map(str::to_owned)
        })
        .or_else(|| {
            cfg.query_token
                .then(|| query.get("access_token").cloned())
                .flatten()
        });
    let principal = match token {
        Some(t) => match state.auth.verify(&t).await {
            Ok(p) => Some(p),
            Err(f) => {
                crate::metrics::metrics().auth_failed(f.reason(), "ws");
                return ApiError::from(f).into_response();
            }
        },
        None => None,
    };
    // Connection limits, checked before the upgrade when the caller is known.
    let slot = match &principal {
        Some(p) => match crate::policy::rate::connect_shared(
            state.policy().rules(),
            p,
            state.counters.as_ref(),
        )
        .await
        {
            Ok(slot) => Some(slot),
            Err(l) => return ApiError::from(l).into_response(),
        },
        None => None,
    };
    let caller = Box::new(connection::Caller { principal, slot });
    let limit = cfg.max_frame_bytes;
    ws.protocols([SUBPROTOCOL])
        .max_message_size(limit)
        .max_frame_size(limit)
        // Small buffers: an idle socket should cost little (see docs/benchmarks.md).
        .read_buffer_size(1024)
        // Frames queued together go out in one write (see `write_loop`);
        // the buffer only grows for sockets that are sent bursts.
        .write_buffer_size(8 * 1024)
        .on_upgrade(move |socket| {
            let sockets = state.sockets.clone();
            sockets.track_future(connection::serve(state, socket, caller))
        })
}
