//! HTTPS and WSS on the listener itself (rustls), for deployments without a
//! TLS-terminating proxy in front. The certificate and key are read from PEM
//! files and read again when either file changes, so a renewed certificate
//! (certbot, cert-manager) is served without a restart; a pair that does not
//! load is logged and the previous one stays in service.
//!
//! Handshakes run in their own tasks, so a slow or silent client never holds
//! up accepting the next connection, and must finish within
//! `server.header_read_timeout` (the deadline of a request head, see
//! [`super::serve`]), so it never holds a descriptor for long either.

use crate::config::TlsConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How often the certificate files are checked for changes.
const RELOAD_CHECK: Duration = Duration::from_secs(2);

/// Reads a certificate chain and its key into what rustls serves.
pub fn load(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, String> {
    load_keyed(cert, key).map_err(|(_, message)| message)
}

/// Like [`load`], naming the setting at fault (`cert` or `key`): what
/// start-up and `check-config` report.
pub fn load_keyed(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, (&'static str, String)> {
    let at_cert = |e: String| ("cert", format!("{}: {e}", cert.display()));
    let at_key = |e: String| ("key", format!("{}: {e}", key.display()));
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| at_cert(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| at_cert(e.to_string()))?;
    if chain.is_empty() {
        return Err(at_cert("no certificate".into()));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| at_key(e.to_string()))?;
    let signer = rustls::crypto::aws_lc_rs::sign::any_supported_type(&key_der)
        .map_err(|e| at_key(e.to_string()))?;
    let certified = CertifiedKey::new(chain, signer);
    certified.keys_match().map_err(|e| {
        (
            "key",
            format!("{} does not match {}: {e}", key.display(), cert.display()),
        )
    })?;
    Ok(Arc::new(certified))
}

/// The certificate in service, swapped whole on reload.
#[derive(Debug)]
struct Current(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.0
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        )
    }
}

/// A listener whose connections are TLS streams, handshakes done.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Serves TLS on `tcp` with the certificate of `tls` (fails if it does
    /// not load now), watching its files for changes; a handshake not done
    /// within `deadline` is dropped.
    pub fn new(
        tcp: TcpListener,
        tls: &TlsConfig,
        deadline: Duration,
    ) -> Result<TlsListener, String> {
        let local = tcp.local_addr().map_err(|e| e.to_string())?;
        let current = Arc::new(Current(RwLock::new(load(&tls.cert, &tls.key)?)));
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_cert_resolver(current.clone());
        // HTTP/1.1 only: WebSocket upgrades need it (and browsers offer it).
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let (tx, ready) = mpsc::channel(64);
        tokio::spawn(accept_loop(tcp, acceptor, deadline, tx.clone()));
        tokio::spawn(reload_loop(
            tls.cert.clone(),
            tls.key.clone(),
            current,
            tx.downgrade(),
        ));
        Ok(TlsListener { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept loop only ends with the process.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

/// Accepts TCP connections and hands each to its own handshake task.
async fn accept_loop(
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    deadline: Duration,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    loop {
        let (stream, addr) = match tcp.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                // Out of file descriptors and the like: breathe, go on.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY: {e}");
        }
        let acceptor = acceptor.clone();
        let ready = ready.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(deadline, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = ready.send((tls, addr)).await;
                }
                Ok(Err(e)) => tracing::debug!(%addr, "TLS handshake failed: {e}"),
                Err(_) => tracing::debug!(%addr, "TLS handshake timed out"),
            }
        });
    }
}

/// Reloads the certificate when either file's modification time changes.
async fn reload_loop(
    cert: PathBuf,
    key: PathBuf,
    current: Arc<Current>,
    alive: mpsc::WeakSender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    let stamp = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let mut seen: (Option<SystemTime>, Option<SystemTime>) = (stamp(&cert), stamp(&key));
    let mut tick = tokio::time::interval(RELOAD_CHECK);
    loop {
        tick.tick().await;
        if alive.upgrade().is_none() {
            return;
        }
        let now = (stamp(&cert), stamp(&key));
        if now == seen {
            continue;
        }
        seen = now;
        match load(&cert, &key) {
            Ok(fresh) => {
                *current
                    .0
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
                tracing::info!(cert = %cert.display(), "TLS certificate reloaded");
            }
            Err(e) => {
                tracing::error!("TLS certificate not reloaded, the previous one stays: {e}")
            }
        }
    }
}
