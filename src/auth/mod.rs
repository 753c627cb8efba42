//! JWT authentication: token in, [`Principal`] or a stable refusal out.
//!
//! Strict by default: the algorithm must be one the operator listed (so
//! `alg: none` never is), the key comes from the algorithm's own family (see
//! [`keys`]), `exp` is required, and `nbf`/`iss`/`aud` are checked when
//! configured. Every refusal carries an [`AuthFailure`] whose `reason()` is a
//! stable string operators and clients can match on.

pub mod access;
pub mod keys;
pub mod principal;
pub mod ticket;

pub use principal::{Permission, Principal, ThreadGrant};

use crate::config::{AuthConfig, ClaimNames, expand_env};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use keys::{Family, KeySet, PublicKey, RemoteKeySet};
use serde_json::{Map, Value};
use std::str::FromStr;

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthFailure {
    #[error("no bearer token")]
    MissingToken,
    #[error("token is not a well-formed JWT")]
    Malformed,
    #[error("algorithm {0} is not accepted")]
    AlgorithmNotAllowed(String),
    #[error("no verification key for this token: {0}")]
    UnknownKey(String),
    #[error("signature does not verify")]
    BadSignature,
    #[error("token expired")]
    Expired,
    #[error("token not valid yet (nbf)")]
    NotYetValid,
    #[error("wrong audience")]
    WrongAudience,
    #[error("wrong issuer")]
    WrongIssuer,
    #[error("claim missing or invalid: {0}")]
    BadClaim(String),
}

impl AuthFailure {
    /// Stable machine-readable reason (goes in the HTTP error's `reason`).
    pub fn reason(&self) -> &'static str {
        match self {
            AuthFailure::MissingToken => "missing_token",
            AuthFailure::Malformed => "malformed_token",
            AuthFailure::AlgorithmNotAllowed(_) => "algorithm_not_allowed",
            AuthFailure::UnknownKey(_) => "unknown_key",
            AuthFailure::BadSignature => "bad_signature",
            AuthFailure::Expired => "token_expired",
            AuthFailure::NotYetValid => "token_not_yet_valid",
            AuthFailure::WrongAudience => "wrong_audience",
            AuthFailure::WrongIssuer => "wrong_issuer",
            AuthFailure::BadClaim(_) => "bad_claim",
        }
    }
}

/// Verifies tokens against the configured keys.
pub struct Authenticator {
    algorithms: Vec<Algorithm>,
    secret: Option<DecodingKey>,
    pem: Option<PublicKey>,
    jwks_file: Option<KeySet>,
    jwks_url: Option<RemoteKeySet>,
    issuer: Option<String>,
    audience: Option<Vec<String>>,
    leeway_secs: u64,
    claims: ClaimNames,
}

impl Authenticator {
    /// Loads keys named by the config (files are read now, the JWKS URL lazily).
    pub fn from_config(cfg: &AuthConfig) -> Result<Authenticator, String> {
        let algorithms = cfg
            .algorithms
            .iter()
            .map(|a| Algorithm::from_str(a).map_err(|_| format!("auth.algorithms: unknown '{a}'")))
            .collect::<Result<Vec<_>, _>>()?;
        let secret = match &cfg.hs_secret {
            Some(s) => Some(DecodingKey::from_secret(
                expand_env(s)
                    .map_err(|v| format!("auth.hs_secret: unset variable {v}"))?
                    .as_bytes(),
            )),
            None => None,
        };
        let pem = match &cfg.public_key_pem {
            Some(p) => {
                let bytes = std::fs::read(p)
                    .map_err(|e| format!("auth.public_key_pem: {}: {e}", p.display()))?;
                Some(
                    PublicKey::from_pem(&bytes)
                        .map_err(|e| format!("auth.public_key_pem: {}: {e}", p.display()))?,
                )
            }
            None => None,
        };
        let jwks_file = match &cfg.jwks_file {
            Some(p) => {
                let bytes = std::fs::read(p)
                    .map_err(|e| format!("auth.jwks_file: {}: {e}", p.display()))?;
                Some(KeySet::parse(&bytes).map_err(|e| format!("auth.jwks_file: {e}"))?)
            }
            None => None,
        };
        let jwks_url = cfg.jwks_url.as_ref().map(|u| {
            RemoteKeySet::new(
                u.clone(),
                cfg.jwks_min_refresh,
                cfg.jwks_max_refresh,
                cfg.jwks_unknown_kid_interval,
                cfg.jwks_timeout,
            )
        });
        Ok(Authenticator {
            algorithms,
            secret,
            pem,
            jwks_file,
            jwks_url,
            issuer: cfg.issuer.clone(),
            audience: cfg.audience.clone(),
            leeway_secs: cfg.leeway.as_secs(),
            claims: cfg.claims.clone(),
        })
    }

    /// Verifies `token` and maps its claims to a principal.
    pub async fn verify(&self, token: &str) -> Result<Principal, AuthFailure> {
        // Read the header ourselves first: jsonwebtoken cannot even parse
        // `alg: none`, and we want that reported as what it is.
        let alg_name = header_alg(token).ok_or(AuthFailure::Malformed)?;
        let alg = Algorithm::from_str(&alg_name)
            .ok()
            .filter(|a| self.algorithms.contains(a))
            .ok_or(AuthFailure::AlgorithmNotAllowed(alg_name))?;
        let header = jsonwebtoken::decode_header(token).map_err(|_| AuthFailure::Malformed)?;
        let family = Family::of(alg);
        let key: DecodingKey = match family {
            Family::Hmac => self
                .secret
                .clone()
                .ok_or_else(|| AuthFailure::UnknownKey("no HMAC secret configured".into()))?,
            _ => self.public_key(header.kid.as_deref(), family).await?.key,
        };

        let mut v = Validation::new(alg);
        v.algorithms = vec![alg];
        v.leeway = self.leeway_secs;
        v.validate_exp = true;
        v.validate_nbf = true;
        let mut required = vec!["exp"];
        if let Some(iss) = &self.issuer {
            v.set_issuer(&[iss]);
            required.push("iss");
        }
        match &self.audience {
            Some(aud) => {
                v.set_audience(aud);
                required.push("aud");
            }
            None => v.validate_aud = false,
        }
        v.set_required_spec_claims(&required);

        let data =
            jsonwebtoken::decode::<Map<String, Value>>(token, &key, &v).map_err(|e| {
                match e.kind() {
                    ErrorKind::ExpiredSignature => AuthFailure::Expired,
                    ErrorKind::ImmatureSignature => AuthFailure::NotYetValid,
                    ErrorKind::InvalidAudience => AuthFailure::WrongAudience,
                    ErrorKind::InvalidIssuer => AuthFailure::WrongIssuer,
                    ErrorKind::InvalidSignature => AuthFailure::BadSignature,
                    ErrorKind::MissingRequiredClaim(c) => {
                        AuthFailure::BadClaim(format!("'{c}' is required"))
                    }
                    ErrorKind::InvalidClaimFormat(c) => {
                        AuthFailure::BadClaim(format!("'{c}' has the wrong type"))
                    }
                    ErrorKind::InvalidAlgorithm => AuthFailure::AlgorithmNotAllowed(alg_str(alg)),
                    _ => AuthFailure::Malformed,
                }
            })?;
        Principal::from_claims(data.claims, &self.claims).map_err(AuthFailure::BadClaim)
    }

    async fn public_key(
        &self,
        kid: Option<&str>,
        family: Family,
    ) -> Result<PublicKey, AuthFailure> {
        if let Some(set) = &self.jwks_file
            && let Some(k) = set.find(kid, family)
        {
            return Ok(k.clone());
        }
        if let Some(pem) = self.pem.as_ref().filter(|k| k.family == family) {
            return Ok(pem.clone());
        }
        if let Some(remote) = &self.jwks_url {
            return remote
                .find(kid, family)
                .await
                .map_err(AuthFailure::UnknownKey);
        }
        Err(AuthFailure::UnknownKey(format!(
            "no {family:?} key{}",
            kid.map(|k| format!(" with kid '{k}'")).unwrap_or_default()
        )))
    }
}

fn alg_str(alg: Algorithm) -> String {
    format!("{alg:?}")
}

/// The `alg` of a JWT's header, read without trusting anything else in it.
fn header_alg(token: &str) -> Option<String> {
    use base64::Engine;
    let head = token.split('.').next()?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(head.trim_end_matches('='))
        .ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    if token.split('.').count() != 3 {
        return None;
    }
    v.get("alg")?.as_str().map(str::to_owned)
}

/// The `threads` claim of a development token: every permission on every
/// thread of the token's tenant. Development tokens are the ones minted on
/// the public development secret (the inspector's mint, `agui-gateway token`
/// while the config uses that secret), where anyone can sign any claim
/// anyway; sharing is what two people trying the gateway together expect.
/// Tenants stay apart (a grant, like every grant, is within the tenant), and
/// tokens on a real secret or key get nothing from this.
pub fn dev_thread_grants() -> Value {
    serde_json::json!({"*": ["view", "run", "resume", "cancel", "meta"]})
}

/// Options for [`mint`], the dev-token helper behind `agui-gateway token`.
#[derive(Debug, Clone)]
pub struct MintRequest {
    pub subject: String,
    pub roles: Vec<String>,
    pub tenant: Option<String>,
    pub ttl_secs: u64,
    pub threads: Option<Value>,
}

/// Signs a token with the configured HS secret (for development and tests).
pub fn mint(cfg: &AuthConfig, req: &MintRequest) -> Result<String, String> {
    let secret = cfg
        .hs_secret
        .as_deref()
        .ok_or("auth.hs_secret is not set; `token` signs with the HS secret")?;
    let secret = expand_env(secret).map_err(|v| format!("auth.hs_secret: unset variable {v}"))?;
    let alg = cfg
        .algorithms
        .iter()
        .filter_map(|a| Algorithm::from_str(a).ok())
        .find(|a| Family::of(*a) == Family::Hmac)
        .ok_or("no HS algorithm is enabled in auth.algorithms")?;
    let now = jsonwebtoken::get_current_timestamp();
    let n = &cfg.claims;
    let mut claims = Map::new();
    claims.insert(n.sub.clone(), req.subject.clone().into());
    claims.insert(n.roles.clone(), req.roles.clone().into());
    if let Some(t) = &req.tenant {
        claims.insert(n.tenant.clone(), t.clone().into());
    }
    if let Some(t) = &req.threads {
        claims.insert(n.threads.clone(), t.clone());
    }
    claims.insert("iat".into(), now.into());
    claims.insert("exp".into(), (now + req.ttl_secs).into());
    if let Some(iss) = &cfg.issuer {
        claims.insert("iss".into(), iss.clone().into());
    }
    if let Some(aud) = cfg.audience.as_ref().and_then(|a| a.first()) {
        claims.insert("aud".into(), aud.clone().into());
    }
    jsonwebtoken::encode(
        &Header::new(alg),
        &claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AuthConfig;
    use base64::Engine;
    use serde_json::json;

    const SECRET: &str = "0123456789abcdef0123456789abcdef-test";

    fn cfg() -> AuthConfig {
        toml_cfg(&format!("hs_secret = \"{SECRET}\""))
    }

    fn toml_cfg(extra: &str) -> AuthConfig {
        let text = format!("{extra}\n");
        config::Config::builder()
            .add_source(config::File::from_str(&text, config::FileFormat::Toml))
            .build()
            .unwrap()
            .try_deserialize()
            .unwrap()
    }

    fn sign(claims: Value, alg: Algorithm, secret: &str) -> String {
        jsonwebtoken::encode(
            &Header::new(alg),
            &claims,
            &EncodingKey::from_secret(secret.as_bytes()),
        )
        .unwrap()
    }

    fn now() -> u64 {
        jsonwebtoken::get_current_timestamp()
    }

    async fn verify(cfg: &AuthConfig, token: &str) -> Result<Principal, AuthFailure> {
        Authenticator::from_config(cfg).unwrap().verify(token).await
    }

    #[tokio::test]
    async fn valid_token_maps_to_principal() {
        let t = sign(
            json!({"sub":"u","roles":["r"],"exp":now()+60}),
            Algorithm::HS256,
            SECRET,
        );
        let p = verify(&cfg(), &t).await.unwrap();
        assert_eq!((p.subject.as_str(), p.roles[0].as_str()), ("u", "r"));
    }

    #[tokio::test]
    async fn refusals_have_stable_reasons() {
        let c = cfg();
        let reason = |r: Result<Principal, AuthFailure>| r.unwrap_err().reason();
        let exp = now() + 60;
        assert_eq!(reason(verify(&c, "garbage").await), "malformed_token");
        assert_eq!(
            reason(verify(&c, &sign(json!({"sub":"u"}), Algorithm::HS256, SECRET)).await),
            "bad_claim"
        );
        assert_eq!(
            reason(
                verify(
                    &c,
                    &sign(
                        json!({"sub":"u","exp":now()-3600}),
                        Algorithm::HS256,
                        SECRET
                    )
                )
                .await
            ),
            "token_expired"
        );
        assert_eq!(
            reason(
                verify(
                    &c,
                    &sign(
                        json!({"sub":"u","exp":exp,"nbf":now()+3600}),
                        Algorithm::HS256,
                        SECRET
                    )
                )
                .await
            ),
            "token_not_yet_valid"
        );
        assert_eq!(
            reason(
                verify(
                    &c,
                    &sign(
                        json!({"sub":"u","exp":exp}),
                        Algorithm::HS256,
                        "another-secret-another-secret-xx"
                    )
                )
                .await
            ),
            "bad_signature"
        );
        assert_eq!(
            reason(
                verify(
                    &c,
                    &sign(json!({"sub":"u","exp":exp}), Algorithm::HS512, SECRET)
                )
                .await
            ),
            "algorithm_not_allowed"
        );
        assert_eq!(
            reason(verify(&c, &sign(json!({"exp":exp}), Algorithm::HS256, SECRET)).await),
            "bad_claim"
        );
    }

    #[tokio::test]
    async fn alg_none_is_refused() {
        let b64 = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        let t = format!(
            "{}.{}.",
            b64(json!({"alg":"none","typ":"JWT"})),
            b64(json!({"sub":"u","exp":now()+60}))
        );
        assert_eq!(
            verify(&cfg(), &t).await.unwrap_err().reason(),
            "algorithm_not_allowed"
        );
    }

    #[tokio::test]
    async fn issuer_and_audience_when_configured() {
        let c = toml_cfg(&format!(
            "hs_secret = \"{SECRET}\"\nissuer = \"idp\"\naudience = [\"gw\"]"
        ));
        let exp = now() + 60;
        let ok = sign(
            json!({"sub":"u","exp":exp,"iss":"idp","aud":"gw"}),
            Algorithm::HS256,
            SECRET,
        );
        verify(&c, &ok).await.unwrap();
        let wrong_aud = sign(
            json!({"sub":"u","exp":exp,"iss":"idp","aud":"x"}),
            Algorithm::HS256,
            SECRET,
        );
        assert_eq!(
            verify(&c, &wrong_aud).await.unwrap_err().reason(),
            "wrong_audience"
        );
        let wrong_iss = sign(
            json!({"sub":"u","exp":exp,"iss":"x","aud":"gw"}),
            Algorithm::HS256,
            SECRET,
        );
        assert_eq!(
            verify(&c, &wrong_iss).await.unwrap_err().reason(),
            "wrong_issuer"
        );
        let no_aud = sign(
            json!({"sub":"u","exp":exp,"iss":"idp"}),
            Algorithm::HS256,
            SECRET,
        );
        assert_eq!(verify(&c, &no_aud).await.unwrap_err().reason(), "bad_claim");
    }

    #[tokio::test]
    async fn leeway_applies_to_exp() {
        let c = cfg(); // 30 s default leeway
        let t = sign(json!({"sub":"u","exp":now()-5}), Algorithm::HS256, SECRET);
        verify(&c, &t).await.unwrap();
    }

    #[tokio::test]
    async fn mint_round_trips() {
        let c = cfg();
        let t = mint(
            &c,
            &MintRequest {
                subject: "alice".into(),
                roles: vec!["admin".into()],
                tenant: Some("acme".into()),
                ttl_secs: 60,
                threads: Some(json!({"t-*":["view"]})),
            },
        )
        .unwrap();
        let p = verify(&c, &t).await.unwrap();
        assert_eq!(p.tenant, "acme");
        assert_eq!(p.grants[0].pattern, "t-*");
    }
}
