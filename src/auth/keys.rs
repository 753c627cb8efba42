//! Verification keys: a shared secret, a PEM public key, or a JWKS (file or URL).
//!
//! The key is chosen by the token's algorithm *family* before anything is
//! verified, and a family only ever gets keys of its own kind: an HS token is
//! checked against the configured secret and nothing else, so a public key can
//! never be misused as an HMAC secret (algorithm confusion). JWKS sets accept
//! public keys only.

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey};
use std::sync::Mutex as StdMutex;
use std::time::{Duration, Instant};

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
/// `[min_refresh, max_refresh]`; an unknown `kid` triggers a re-fetch at most
/// once per `unknown_kid_interval`, so a flood of forged kids cannot turn the
/// gateway into a load generator against the identity provider.
pub struct RemoteKeySet {
    url: String,
    client: reqwest::Client,
    min_refresh: Duration,
    max_refresh: Duration,
    unknown_kid_interval: Duration,
    state: StdMutex<RemoteState>,
    fetch_lock: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct RemoteState {
    keys: KeySet,
    fresh_until: Option<Instant>,
    last_fetch: Option<Instant>,
    /// Bumped by every fetch, so tasks queued behind one fetch do not repeat it.
    generation: u64,
}

impl RemoteKeySet {
    /// A cache for `url`; nothing is fetched until the first token needs it.
    pub fn new(
        url: String,
        min_refresh: Duration,
        max_refresh: Duration,
        unknown_kid_interval: Duration,
    ) -> RemoteKeySet {
        RemoteKeySet {
            url,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("HTTP client builds"),
            min_refresh,
            max_refresh,
            unknown_kid_interval,
            state: StdMutex::new(RemoteState::default()),
            fetch_lock: tokio::sync::Mutex::new(()),
        }
    }

    /// The key for `kid`/`family`, fetching when stale or when the kid is new.
    pub async fn find(&self, kid: Option<&str>, family: Family) -> Result<PublicKey, String> {
        let (found, stale, may_refetch, generation) = {
            let s = self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let now = Instant::now();
            (
                s.keys.find(kid, family).cloned(),
                s.fresh_until.is_none_or(|t| now >= t),
                s.last_fetch
                    .is_none_or(|t| now.duration_since(t) >= self.unknown_kid_interval),
                s.generation,
            )
        };
        if let (Some(k), false) = (&found, stale) {
            return Ok(k.clone());
        }
        if stale || may_refetch {
            let _single_flight = self.fetch_lock.lock().await;
            // Another task may have fetched while we waited for the lock.
            let fetched_meanwhile = self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .generation
                != generation;
            if !fetched_meanwhile && let Err(e) = self.fetch().await {
                tracing::warn!(url = %self.url, "JWKS fetch failed: {e}");
                if let Some(k) = found {
                    return Ok(k); // serve the stale key rather than lock everyone out
                }
                return Err(format!("JWKS unavailable: {e}"));
            }
        }
        let s = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.keys
            .find(kid, family)
            .cloned()
            .ok_or_else(|| format!("no key for kid {kid:?} in JWKS"))
    }

    async fn fetch(&self) -> Result<(), String> {
        {
            let mut s = self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            s.last_fetch = Some(Instant::now());
            s.generation += 1;
        }
        let resp = self
            .client
            .get(&self.url)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !resp.status().is_success() {
            return Err(format!("HTTP {}", resp.status()));
        }
        let max_age = resp
            .headers()
            .get(reqwest::header::CACHE_CONTROL)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_max_age);
        let body = resp.bytes().await.map_err(|e| e.to_string())?;
        let keys = KeySet::parse(&body)?;
        let ttl = max_age
            .unwrap_or(self.min_refresh)
            .clamp(self.min_refresh, self.max_refresh);
        let mut s = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.keys = keys;
        s.fresh_until = Some(Instant::now() + ttl);
        Ok(())
    }
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
