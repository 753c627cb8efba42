//! The global connection cap (`server.max_connections`): every accepted
//! connection takes a slot for as long as it is open (a WebSocket for its
//! whole life, not just its upgrade request). Past the cap a connection is
//! still accepted — TLS included — but every request on it is answered
//! `503 unavailable` with `Connection: close`, so the client learns why
//! instead of seeing a reset. Except `/healthz`: a full node is alive, and a
//! liveness probe failing at the cap would get a busy node restarted.

use super::error::{ApiError, ErrorCode};
use axum::extract::Request;
use axum::extract::connect_info::ConnectInfo;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::serve::Listener;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A connection, holding its slot (none when it came past the cap).
pub struct Admitted<Io> {
    io: Io,
    /// Held for the connection's whole life; dropping it frees the slot.
    _slot: Option<OwnedSemaphorePermit>,
    refused: bool,
}

impl<Io> Admitted<Io> {
    /// Whether this connection came past the cap.
    pub fn refused(&self) -> bool {
        self.refused
    }
}

impl<Io: AsyncRead + Unpin> AsyncRead for Admitted<Io> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<Io: AsyncWrite + Unpin> AsyncWrite for Admitted<Io> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// A listener whose connections take slots of the cap.
pub struct AdmissionListener<L> {
    inner: L,
    /// `None`: no cap.
    slots: Option<Arc<Semaphore>>,
}

impl<L> AdmissionListener<L> {
    /// Caps `inner` at `max` open connections (0: no cap).
    pub fn new(inner: L, max: usize) -> AdmissionListener<L> {
        AdmissionListener {
            inner,
            slots: (max > 0).then(|| Arc::new(Semaphore::new(max))),
        }
    }
}

impl<L: Listener> Listener for AdmissionListener<L> {
    type Io = Admitted<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = self.inner.accept().await;
        let slot = self
            .slots
            .as_ref()
            .map(|s| s.clone().try_acquire_owned().ok());
        let refused = matches!(slot, Some(None));
        if refused {
            crate::metrics::metrics().connections_refused.inc();
        }
        let io = Admitted {
            io,
            _slot: slot.flatten(),
            refused,
        };
        (io, addr)
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// Whether a connection came past the cap: per-connection request data,
/// put on each request as `ConnectInfo` by [`super::serve`].
#[derive(Debug, Clone, Copy)]
pub struct Admission {
    pub refused: bool,
}

/// Answers every request of a connection past the cap with 503 (but
/// `/healthz`, answered and then closed).
pub async fn gate(req: Request, next: Next) -> Response {
    let refused = req
        .extensions()
        .get::<ConnectInfo<Admission>>()
        .is_some_and(|ConnectInfo(a)| a.refused);
    if refused && req.uri().path() == "/healthz" {
        let mut alive = next.run(req).await;
        alive.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        return alive;
    }
    if refused {
        let mut refused = ApiError::new(
            ErrorCode::Unavailable,
            "this gateway node is at its connection limit (server.max_connections); retry shortly",
        )
        .into_response();
        refused.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        return refused;
    }
    next.run(req).await
}
