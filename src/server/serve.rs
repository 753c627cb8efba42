//! The connection loop: each accepted connection is served HTTP/1.1 by
//! hyper, with a deadline on what a client owes before it is anyone.
//!
//! `axum::serve` sets no timer, so hyper's header timeout never ran: a
//! client sending a header byte every few seconds (slowloris), or nothing
//! at all, held its connection — one file descriptor, one slot of
//! `server.max_connections` — forever, and a few hundred of them starved
//! the node until even `/healthz` could not connect. Here every connection
//! must deliver a complete request head within `server.header_read_timeout`
//! of being accepted, and again of going idle after each response (an idle
//! keep-alive connection is closed then). Time spent inside a request —
//! an SSE stream, an upgraded WebSocket (which answers for itself with
//! `ws.auth_timeout` and `ws.read_timeout`) — is not limited here. TLS
//! handshakes have the same deadline ([`super::tls`]).
//!
//! What `axum::serve` gave is kept: graceful shutdown (stop accepting, let
//! each connection finish its request, wait for them), WebSocket upgrades,
//! and the connection cap's [`Admission`] as `ConnectInfo`. HTTP/1.1 only:
//! the TLS listener never offered HTTP/2 and nothing documented cleartext
//! HTTP/2, whose preface wait has no deadline in hyper.

use super::admission::{Admission, AdmissionListener};
use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::serve::Listener;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::Future;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// Serves `app` on `listener` until `stopped` completes, then waits for the
/// open connections to finish (the caller bounds that wait).
pub async fn serve<L>(
    mut listener: AdmissionListener<L>,
    app: Router,
    header_read_timeout: Duration,
    stopped: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    L: Listener,
    L::Io: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let connections = TaskTracker::new();
    let stop = CancellationToken::new();
    tokio::pin!(stopped);
    loop {
        let io = tokio::select! {
            (io, _) = listener.accept() => io,
            () = &mut stopped => break,
        };
        let admission = Admission {
            refused: io.refused(),
        };
        let app = app.clone();
        let stop = stop.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                let mut req = req.map(Body::new);
                req.extensions_mut().insert(ConnectInfo(admission));
                app.clone().oneshot(req)
            });
            let mut http = http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout);
            let conn = http
                .serve_connection(TokioIo::new(io), service)
                .with_upgrades();
            tokio::pin!(conn);
            let served = tokio::select! {
                served = conn.as_mut() => served,
                () = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = served {
                // A header timeout, a reset, a malformed request: the
                // client's doing, and routine.
                tracing::debug!("connection closed: {e}");
            }
        });
    }
    // Stop accepting before waiting: new clients are refused, not queued.
    drop(listener);
    stop.cancel();
    connections.close();
    connections.wait().await;
    Ok(())
}
