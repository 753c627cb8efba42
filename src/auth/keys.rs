//! Verification keys: a shared secret, a PEM public key, or a JWKS (file or URL).
//!
//! The key is chosen by the token's algorithm *family* before anything is
//! verified, and a family only ever gets keys of its own kind: an HS token is
//! checked against the configured secret and nothing else, so a public key can
//! never be misused as an HMAC secret (algorithm confusion). JWKS sets accept
//! public keys only.

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The algorithm family a key serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Hmac,
    Rsa,
    Ec,
    Ed,
}

impl Family {
    /// The family of an algorithm.
    pub fn of(alg: Algorithm) -> Family {
        use jsonwebtoken::AlgorithmFamily as F;
        match alg.family() {
            F::Hmac => Family::Hmac,
            F::Rsa => Family::Rsa,
            F::Ec => Family::Ec,
            _ => Family::Ed,
        }
    }
}

/// A public key and the family it belongs to.
#[derive(Clone)]
pub struct PublicKey {
    pub family: Family,
    pub key: DecodingKey,
}

impl PublicKey {
    /// Reads a PEM public key of any supported kind.
    pub fn from_pem(pem: &[u8]) -> Result<PublicKey, String> {
        let text = String::from_utf8_lossy(pem);
        if text.contains("BEGIN RSA PUBLIC KEY") {
            return DecodingKey::from_rsa_pem(pem)
                .map(|key| PublicKey {
                    family: Family::Rsa,
                    key,
                })
                .map_err(|e| e.to_string());
        }
        // SPKI "PUBLIC KEY": try each kind; the parser checks the key's OID.
        if let Ok(key) = DecodingKey::from_ed_pem(pem) {
            return Ok(PublicKey {
                family: Family::Ed,
                key,
            });
        }
        if let Ok(key) = DecodingKey::from_ec_pem(pem) {
            return Ok(PublicKey {
                family: Family::Ec,
                key,
            });
        }
        DecodingKey::from_rsa_pem(pem)
            .map(|key| PublicKey {
                family: Family::Rsa,
                key,
            })
            .map_err(|_| "not an RSA, EC or Ed25519 public key in PEM form".into())
    }

    fn from_jwk(jwk: &Jwk) -> Result<PublicKey, String> {
        use jsonwebtoken::jwk::AlgorithmParameters as P;
        let family = match &jwk.algorithm {
            P::RSA(_) => Family::Rsa,
            P::EllipticCurve(_) => Family::Ec,
            P::OctetKeyPair(_) => Family::Ed,
            P::OctetKey(_) => {
                return Err("symmetric (oct) keys are not accepted from a JWKS".into());
            }
            _ => return Err("unsupported key type".into()),
        };
        DecodingKey::from_jwk(jwk)
            .map(|key| PublicKey { family, key })
            .map_err(|e| e.to_string())
    }
}

/// Keys from a JWKS document, by `kid`.
#[derive(Clone, Default)]
pub struct KeySet {
    keys: Vec<(Option<String>, PublicKey)>,
}

impl KeySet {
    /// Parses a JWKS document; keys that cannot be used are skipped with a warning.
    pub fn parse(json: &[u8]) -> Result<KeySet, String> {
        let set: JwkSet = serde_json::from_slice(json).map_err(|e| format!("not a JWKS: {e}"))?;
        let mut keys = Vec::new();
        for jwk in &set.keys {
            match PublicKey::from_jwk(jwk) {
                Ok(k) => keys.push((jwk.common.key_id.clone(), k)),
                Err(e) => tracing::warn!(kid = ?jwk.common.key_id, "skipping JWKS key: {e}"),
            }
        }
        Ok(KeySet { keys })
    }

    /// The key for `kid` (or the only key of `family` when the token has no kid).
    pub fn find(&self, kid: Option<&str>, family: Family) -> Option<&PublicKey> {
        let mut candidates = self.keys.iter().filter(|(_, k)| k.family == family);
        match kid {
            Some(kid) => candidates
                .find(|(k, _)| k.as_deref() == Some(kid))
                .map(|(_, k)| k),
            None => {
                let first = candidates.next();
                if candidates.next().is_some() {
                    None // ambiguous without a kid
                } else {
                    first.map(|(_, k)| k)
                }
            }
        }
    }

    /// How many usable keys the set holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when no key is usable.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// A JWKS fetched over HTTP and cached.
///
/// Fresh for the response's `Cache-Control: max-age`, clamped to
/// `[min_refresh, max_refresh]`. The identity provider is asked sparingly
/// whatever the tokens say, because every token can name a `kid` and an
/// attacker chooses how many tokens arrive:
///
/// - **single flight**: at most one fetch is in flight; everyone who needs a
///   fetch joins it rather than starting another;
/// - **unknown kids**: a `kid` the cached set lacks triggers a re-fetch at
///   most once per `unknown_kid_interval`, so a flood of forged kids cannot
///   turn the gateway into a load generator against the identity provider;
/// - **backoff**: after a failed fetch the next one waits 1 s, then 2 s, 4 s …
///   up to [`BACKOFF_CAP`]; while it waits, tokens that need a fetch are
///   refused at once instead of each trying again;
/// - **known keys keep working**: a key the cache holds is served without
///   waiting even when the set is stale (it is refreshed in the background,
///   stale-while-revalidate), so a failing or hanging key server never locks
///   out clients whose keys the gateway already knows;
/// - **bounded wait**: a fetch gets `timeout` to connect and answer, and an
///   authentication waits for one at most that long — a hanging key server
///   costs an unknown-kid token `timeout`, not the HTTP client's default.
pub struct RemoteKeySet {
    inner: Arc<Remote>,
}

struct Remote {
    url: String,
    client: reqwest::Client,
    min_refresh: Duration,
    max_refresh: Duration,
    unknown_kid_interval: Duration,
    timeout: Duration,
    state: StdMutex<RemoteState>,
}

/// The longest pause between fetches of a failing key server.
pub const BACKOFF_CAP: Duration = Duration::from_secs(60);
const BACKOFF_BASE: Duration = Duration::from_secs(1);

#[derive(Default)]
struct RemoteState {
    keys: KeySet,
    fresh_until: Option<Instant>,
    /// When the last fetch started, whatever its outcome.
    last_attempt: Option<Instant>,
    /// Failed fetches in a row (0 after a success).
    failures: u32,
    /// No fetch before this instant (set by a failure).
    retry_at: Option<Instant>,
    last_error: Option<String>,
    /// The fetch in flight: becomes `true` when it has finished.
    inflight: Option<watch::Receiver<bool>>,
}

impl RemoteState {
    fn backing_off(&self, now: Instant) -> bool {
        self.retry_at.is_some_and(|t| now < t)
    }
}

impl RemoteKeySet {
    /// A cache for `url`; nothing is fetched until the first token needs it.
    /// `timeout` bounds a fetch (connect and response) and so how long an
    /// authentication can wait for one.
    pub fn new(
        url: String,
        min_refresh: Duration,
        max_refresh: Duration,
        unknown_kid_interval: Duration,
        timeout: Duration,
    ) -> RemoteKeySet {
        RemoteKeySet {
            inner: Arc::new(Remote {
                url,
                client: reqwest::Client::builder()
                    .connect_timeout(timeout)
                    .timeout(timeout)
                    .build()
                    .expect("HTTP client builds"),
                min_refresh,
                max_refresh,
                unknown_kid_interval,
                timeout,
                state: StdMutex::new(RemoteState::default()),
            }),
        }
    }

    /// The key for `kid`/`family`: from the cache when it has it (refreshing
    /// a stale set in the background), otherwise after a fetch when one is
    /// allowed, waiting at most `timeout`.
    pub async fn find(&self, kid: Option<&str>, family: Family) -> Result<PublicKey, String> {
        let waiting = {
            let mut s = self.inner.lock();
            let now = Instant::now();
            let stale = s.fresh_until.is_none_or(|t| now >= t);
            if let Some(k) = s.keys.find(kid, family).cloned() {
                if stale && s.inflight.is_none() && !s.backing_off(now) {
                    // Refreshed for later tokens; this one does not wait.
                    let _ = self.inner.start_fetch(&mut s);
                }
                return Ok(k);
            }
            match &s.inflight {
                Some(rx) => rx.clone(),
                None => {
                    if s.backing_off(now) {
                        let wait = s.retry_at.map_or(Duration::ZERO, |t| t - now);
                        return Err(format!(
                            "no key for kid {kid:?}: JWKS unavailable ({}), next fetch in {} ms",
                            s.last_error.as_deref().unwrap_or("failed"),
                            wait.as_millis()
                        ));
                    }
                    let recently = s
                        .last_attempt
                        .is_some_and(|t| now.duration_since(t) < self.inner.unknown_kid_interval);
                    if !stale && recently {
                        return Err(format!(
                            "no key for kid {kid:?} in JWKS (re-fetch for unknown kids rate-limited)"
                        ));
                    }
                    self.inner.start_fetch(&mut s)
                }
            }
        };
        let mut waiting = waiting;
        // The fetch has its own timeout; this one is the promise to the client.
        let _ = tokio::time::timeout(self.inner.timeout, waiting.wait_for(|done| *done)).await;
        let s = self.inner.lock();
        match s.keys.find(kid, family) {
            Some(k) => Ok(k.clone()),
            None if s.failures > 0 => Err(format!(
                "no key for kid {kid:?}: JWKS unavailable ({})",
                s.last_error.as_deref().unwrap_or("failed")
            )),
            None if s.inflight.is_some() => Err(format!(
                "no key for kid {kid:?}: JWKS fetch still running after {} ms",
                self.inner.timeout.as_millis()
            )),
            None => Err(format!("no key for kid {kid:?} in JWKS")),
        }
    }
}

impl Remote {
    fn lock(&self) -> std::sync::MutexGuard<'_, RemoteState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts the one fetch in flight (the caller checked there is none) on
    /// its own task, so that a waiter giving up does not cancel it for the
    /// others; returns what becomes `true` when it has finished.
    fn start_fetch(self: &Arc<Self>, s: &mut RemoteState) -> watch::Receiver<bool> {
        let (tx, rx) = watch::channel(false);
        s.inflight = Some(rx.clone());
        s.last_attempt = Some(Instant::now());
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let result = this.fetch().await;
            crate::metrics::metrics().jwks_fetched(result.is_ok());
            let mut s = this.lock();
            let now = Instant::now();
            match result {
                Ok((keys, ttl)) => {
                    s.keys = keys;
                    s.fresh_until = Some(now + ttl);
                    s.failures = 0;
                    s.retry_at = None;
                    s.last_error = None;
                }
                Err(e) => {
                    s.failures = s.failures.saturating_add(1);
                    let backoff = BACKOFF_BASE
                        .saturating_mul(1 << (s.failures - 1).min(16))
                        .min(BACKOFF_CAP);
                    s.retry_at = Some(now + backoff);
                    tracing::warn!(
                        url = %this.url,
                        failures = s.failures,
                        retry_in_ms = backoff.as_millis() as u64,
                        "JWKS fetch failed: {e}"
                    );
                    s.last_error = Some(e);
                }
            }
            s.inflight = None;
            drop(s);
            let _ = tx.send(true);
        });
        rx
    }

    /// One GET of the JWKS: its keys and how long they are fresh.
    async fn fetch(&self) -> Result<(KeySet, Duration), String> {
        let resp = self
            .client
            .get(&self.url)
            .send()
            .await
            .map_err(|e| error_chain(&e))?;
        if !resp.status().is_success() {
            return Err(format!("HTTP {}", resp.status()));
        }
        let max_age = resp
            .headers()
            .get(reqwest::header::CACHE_CONTROL)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_max_age);
        let body = resp.bytes().await.map_err(|e| error_chain(&e))?;
        let keys = KeySet::parse(&body)?;
        let ttl = max_age
            .unwrap_or(self.min_refresh)
            .clamp(self.min_refresh, self.max_refresh);
        Ok((keys, ttl))
    }
}

/// A reqwest error with its causes ("error sending request" alone says
/// nothing about a refused connection or a timeout).
fn error_chain(e: &reqwest::Error) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// Reads `max-age=N` from a `Cache-Control` value.
pub fn parse_max_age(header: &str) -> Option<Duration> {
    header.split(',').find_map(|d| {
        let d = d.trim();
        d.strip_prefix("max-age=")
            .and_then(|n| n.trim_matches('"').parse().ok())
            .map(Duration::from_secs)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_age_parsing() {
        assert_eq!(
            parse_max_age("public, max-age=300"),
            Some(Duration::from_secs(300))
        );
        assert_eq!(parse_max_age("no-store"), None);
        assert_eq!(parse_max_age("max-age=x"), None);
    }

    #[test]
    fn jwks_rejects_symmetric_keys_and_finds_by_kid() {
        let set = KeySet::parse(br#"{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"s"}]}"#).unwrap();
        assert!(set.is_empty());
        assert!(KeySet::parse(b"[]").is_err());
    }
}
