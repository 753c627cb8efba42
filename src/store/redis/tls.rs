//! TLS to Redis (`rediss://`): the PEM files of `[store.tls]` read into
//! what the Redis client trusts and presents.
//!
//! Read once, at start-up (and by `check-config`, so a bad file is named
//! before anything connects). A managed Redis signed by a public CA needs
//! none of it — the system's CAs are trusted by default; a private CA (a
//! self-hosted Redis, most Kubernetes operators) needs `ca`, and a Redis
//! started with `tls-auth-clients yes` needs `cert` and `key`.

use ::redis::{ClientTlsConfig, TlsCertificates};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;

/// The certificates for a `rediss://` connection: `ca` replaces the
/// system's CAs; `cert` and `key` (both or neither) are the client's. An
/// error names the setting at fault (`ca`, `cert` or `key`) and why.
pub fn certificates(
    ca: Option<&Path>,
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Result<TlsCertificates, (&'static str, String)> {
    let root_cert = ca.map(|ca| certificate_pem("ca", ca)).transpose()?;
    let client_tls = match (cert, key) {
        (Some(cert), Some(key)) => {
            let client_cert = certificate_pem("cert", cert)?;
            let client_key = std::fs::read(key).map_err(|e| ("key", at(key, e)))?;
            PrivateKeyDer::from_pem_slice(&client_key)
                .map_err(|e| ("key", format!("{}: {e}", key.display())))?;
            Some(ClientTlsConfig {
                client_cert,
                client_key,
            })
        }
        (None, None) => None,
        (Some(_), None) => return Err(("key", "cert is set without key".into())),
        (None, Some(_)) => return Err(("cert", "key is set without cert".into())),
    };
    Ok(TlsCertificates {
        client_tls,
        root_cert,
    })
}

/// A PEM file holding at least one certificate, as read.
fn certificate_pem(which: &'static str, path: &Path) -> Result<Vec<u8>, (&'static str, String)> {
    let pem = std::fs::read(path).map_err(|e| (which, at(path, e)))?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| (which, format!("{}: {e}", path.display())))?;
    if certificates.is_empty() {
        return Err((which, format!("{}: no certificate", path.display())));
    }
    Ok(pem)
}

fn at(path: &Path, e: std::io::Error) -> String {
    format!("{}: {e}", path.display())
}
