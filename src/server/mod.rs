//! What clients talk to. This module builds the router over the route
//! modules — [`http`] (the AG-UI run endpoint, agents, health), [`ws`]
//! (shared sessions), [`threads`] (viewer routes), [`sideband`] (meta and
//! cancel over HTTP), [`aisdk`] (the Vercel AI SDK chat face), [`exports`]
//! (the conversation in other frameworks' shapes), [`openapi`] (their
//! description) — and serves it. The route modules never import each
//! other: what they share sits below them — [`commands`] (run, resume,
//! cancel, meta, once for both transports), [`extract`] (authentication and
//! bodies as axum extractors), [`access`], [`error`], [`state`]. [`serve`]
//! runs the connections (with [`admission`]'s cap and [`tls`]).

pub mod a2a;
pub mod access;
pub mod access_log;
pub mod admission;
pub mod aisdk;
pub mod capabilities;
pub mod commands;
pub mod cors;
pub mod encode;
pub mod error;
pub mod exports;
pub mod extract;
pub mod fields;
pub mod handoff;
pub mod http;
pub mod inspector;
pub mod openapi;
pub mod preflight;
pub mod reload;
pub mod run_request;
pub mod serve;
pub mod sideband;
pub mod sse;
pub mod state;
pub mod threads;
pub mod tls;
pub mod webhook;
pub mod ws;

pub use state::AppState;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::{Json, Router};
use error::{ApiError, ErrorCode};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;

/// All routes, with JSON errors for unknown paths and methods, and CORS for
/// the configured browser origins.
pub fn router(state: Arc<AppState>) -> Router {
    let cors = Arc::new(cors::Cors::new(&state.config.cors));
    let mut router = Router::new()
        .route("/v1/agents", get(http::list_agents))
        .route("/v1/agents/{agent}/run", post(http::run_agent))
        .route("/v1/agents/{agent}/capabilities", get(capabilities::get))
        .route("/v1/run", post(http::run_routed))
        .route("/v1/agents/{agent}/chat", post(aisdk::chat))
        .route(
            "/v1/agents/{agent}/chat/{thread}/stream",
            get(aisdk::reconnect),
        )
        .route("/v1/ws", get(ws::upgrade))
        .route("/v1/threads", get(threads::list))
        .route("/v1/threads/{thread}", get(threads::snapshot))
        .route("/v1/threads/{thread}/events", get(threads::join))
        .route("/v1/threads/{thread}/runs", get(threads::runs))
        .route("/v1/threads/{thread}/presence", get(threads::presence))
        .route("/v1/threads/{thread}/messages", get(exports::messages))
        .route("/v1/threads/{thread}/ticket", post(threads::issue_ticket))
        .route("/v1/threads/{thread}/meta", post(sideband::post_meta))
        .route("/v1/threads/{thread}/cancel", post(sideband::post_cancel))
        .route("/v1/threads/{thread}/agent", post(sideband::post_agent))
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/readyz", get(http::ready))
        .route("/metrics", get(http::metrics))
        .route("/v1/openapi.json", get(openapi::document));
    router = router.merge(a2a::routes());
    if let Some(inspector) = inspector::routes(&state) {
        router = router.merge(inspector);
    }
    let router = router
        .fallback(|| async { ApiError::new(ErrorCode::NotFound, "no such route") })
        // Bodies are read by our extractors, so an oversize one gets our JSON 413.
        .layer(DefaultBodyLimit::disable())
        // Whatever answers with an error (a framework rejection, a wrong
        // method, a failed upgrade) answers with the documented JSON shape.
        .layer(axum::middleware::map_response(error::json_errors))
        .layer(axum::middleware::from_fn_with_state(cors, cors::gate))
        .layer(axum::middleware::from_fn(admission::gate));
    access_log::layer(router).with_state(state)
}

/// A running gateway: its bound address and a handle to stop it.
pub struct Running {
    pub addr: SocketAddr,
    shutdown: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    /// Stops accepting, lets open streams finish for up to `shutdown_grace`,
    /// then returns.
    pub async fn shutdown(self) -> std::io::Result<()> {
        let _ = self.shutdown.send(true);
        self.task.await.unwrap_or(Ok(()))
    }

    /// Waits until the server stops by itself (it only does on error).
    pub async fn wait(self) -> std::io::Result<()> {
        self.task.await.unwrap_or(Ok(()))
    }

    /// A sender that triggers graceful shutdown.
    pub fn shutdown_handle(&self) -> tokio::sync::watch::Sender<bool> {
        self.shutdown.clone()
    }
}

/// The listener: plain TCP, or TLS on it (see [`tls`]).
enum Bound {
    Plain(TcpListener),
    Tls(tls::TlsListener),
}

/// Binds `state.config.server.listen` and serves until shut down.
pub async fn start(state: Arc<AppState>) -> std::io::Result<Running> {
    let listener = TcpListener::bind(&state.config.server.listen).await?;
    let addr = listener.local_addr()?;
    let grace = state.config.server.shutdown_grace;
    let cap = state.config.server.max_connections;
    let header_timeout = state.config.server.header_read_timeout;
    let bound = match &state.config.server.tls {
        Some(tls) => Bound::Tls(
            tls::TlsListener::new(listener, tls, header_timeout).map_err(std::io::Error::other)?,
        ),
        None => Bound::Plain(listener),
    };
    let app = router(state);
    let (tx, mut rx) = tokio::sync::watch::channel(false);
    let mut grace_rx = tx.subscribe();
    let task = tokio::spawn(async move {
        let stopped = async move {
            let _ = rx.wait_for(|stop| *stop).await;
        };
        let server = async move {
            match bound {
                Bound::Tls(listener) => {
                    let listener = admission::AdmissionListener::new(listener, cap);
                    serve::serve(listener, app, header_timeout, stopped).await
                }
                Bound::Plain(listener) => {
                    // No Nagle: an event is a small write that must leave
                    // now, not when the client's delayed ACK arrives (~40 ms
                    // stalls otherwise).
                    let listener = listener.tap_io(|tcp| {
                        if let Err(e) = tcp.set_nodelay(true) {
                            tracing::debug!("TCP_NODELAY: {e}");
                        }
                    });
                    let listener = admission::AdmissionListener::new(listener, cap);
                    serve::serve(listener, app, header_timeout, stopped).await
                }
            }
        };
        tokio::select! {
            r = server => r,
            _ = async {
                let _ = grace_rx.wait_for(|stop| *stop).await;
                tokio::time::sleep(grace).await;
            } => {
                tracing::warn!("shutdown grace {grace:?} passed; closing remaining streams");
                Ok(())
            }
        }
    });
    Ok(Running {
        addr,
        shutdown: tx,
        task,
    })
}
