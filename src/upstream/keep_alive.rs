//! Connections to an agent kept alive between runs, and the one race that
//! comes with them.
//!
//! A run's request goes out on a connection an earlier run left idle: no
//! TCP and TLS handshake on the live path. The agent's server keeps such a
//! connection for a time of its own (uvicorn and Node: 5 s, gunicorn: 2 s)
//! and then closes it. A request the gateway sends on it at that moment
//! crosses the close: the server never read it as a request, and the
//! gateway sees the connection end before any answer ("connection closed
//! before message completed"). hyper resends only when it notices the close
//! before writing; after, it is the caller's to decide.
//!
//! Two things keep a run from ending `upstream_unavailable` over it:
//!
//! - idle connections are let go after `timeouts.keep_alive` (4 s by
//!   default), before the usual servers close theirs, which makes the race
//!   rare;
//! - a request that meets it anyway is sent once more, over a connection
//!   opened for it ([`send`]). Browsers resend in the same case (a reused
//!   connection that closed before any answer); Go's client does for
//!   requests it may replay. Once, and on a new connection: an agent that
//!   drops every request is not sent a run a third time, and a second
//!   failure is the agent's.
//!
//! What the resend risks: an agent that read the request, acted, and then
//! died before answering gets it twice. The pool already takes that risk
//! for every failure before the first event (a run moves to another
//! backend, see [`super::client`]); this is the same risk on the same
//! backend, taken only when nothing at all was answered.

use std::time::Duration;

/// An agent's two HTTP clients with the same settings: `pooled` keeps
/// idle connections for `keep_alive`, `fresh` keeps none (every request
/// opens its own), for [`send`]'s resend.
pub fn clients(
    connect: Duration,
    keep_alive: Duration,
) -> reqwest::Result<(reqwest::Client, reqwest::Client)> {
    let builder = || {
        reqwest::Client::builder()
            .connect_timeout(connect)
            .tcp_nodelay(true)
    };
    let pooled = builder().pool_idle_timeout(keep_alive).build()?;
    let fresh = builder().pool_max_idle_per_host(0).build()?;
    Ok((pooled, fresh))
}

/// Sends the request `build` makes with `pooled`; if the connection closed
/// under it before any answer (see the module doc), once more with `fresh`.
pub async fn send(
    agent: &str,
    pooled: &reqwest::Client,
    fresh: &reqwest::Client,
    build: impl Fn(&reqwest::Client) -> reqwest::RequestBuilder,
) -> reqwest::Result<reqwest::Response> {
    match build(pooled).send().await {
        Err(e) if closed_before_an_answer(&e) => {
            tracing::debug!(agent, error = %super::attempt::describe(&e),
                "the agent's connection closed under the request before any answer: sent again on a new one");
            crate::metrics::metrics()
                .upstream_resends
                .get_or_create(&crate::metrics::AgentLabel {
                    agent: agent.to_owned(),
                })
                .inc();
            build(fresh).send().await
        }
        answered => answered,
    }
}

/// Whether `e` is a connection that ended (closed or reset) after the
/// request was handed to it and before any answer: not a failure to
/// connect, a timeout, or anything about a response.
fn closed_before_an_answer(e: &reqwest::Error) -> bool {
    if e.is_connect() || e.is_timeout() || e.is_body() || e.is_decode() || e.is_status() {
        return false;
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(h) = s.downcast_ref::<hyper::Error>()
            && (h.is_incomplete_message() || h.is_closed())
        {
            return true;
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
            )
        {
            return true;
        }
        source = s.source();
    }
    false
}
