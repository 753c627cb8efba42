//! `[auth]` (JWT algorithms, keys, claims) and `[[grants]]` (role grants),
//! with their checks.

use super::*;

/// A role-wide grant (`[[grants]]`): what every holder of `role` may do on
/// the threads `threads` matches. Only the settings; `auth::access` applies
/// them.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RoleGrant {
    /// Role the grant applies to (`"*"`: every authenticated user).
    pub role: String,
    /// Thread-id glob (`*` any run of characters, `?` one character).
    pub threads: String,
    /// Permissions granted: `view`, `run`, `resume`, `cancel`, `meta`.
    pub permissions: Vec<String>,
}

/// A permission on a thread (spec: `view`, `run`, `resume`, `cancel`, `meta`).
/// Defined here because its names are values operators write in
/// `[[grants]]` (and identity providers put in the `threads` claim); `auth`
/// decides who holds which.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Permission {
    View,
    Run,
    Resume,
    Cancel,
    Meta,
}

impl Permission {
    /// Parses a wire name; unknown names are ignored by callers (forward compatible).
    pub fn parse(name: &str) -> Option<Permission> {
        Some(match name {
            "view" => Permission::View,
            "run" => Permission::Run,
            "resume" => Permission::Resume,
            "cancel" => Permission::Cancel,
            "meta" => Permission::Meta,
            _ => return None,
        })
    }
}

/// JWT verification.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Accepted `alg` values; anything else is rejected (`alg: none` always is).
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<String>,
    /// Shared secret for HS256/384/512 (`${ENV}` allowed); at least 32 bytes.
    pub hs_secret: Option<String>,
    /// PEM public key (RSA, EC or Ed25519) for RS*/PS*/ES*/EdDSA tokens.
    pub public_key_pem: Option<PathBuf>,
    /// A JWKS document on disk.
    pub jwks_file: Option<PathBuf>,
    /// A JWKS URL, fetched and cached per its `Cache-Control`.
    pub jwks_url: Option<String>,
    /// Shortest time a fetched JWKS is trusted (floor under its `Cache-Control: max-age`).
    #[serde(default = "default_jwks_min", with = "duration")]
    #[schemars(with = "duration::Text")]
    pub jwks_min_refresh: Duration,
    /// Longest time a fetched JWKS is trusted before it is fetched again.
    #[serde(default = "default_jwks_max", with = "duration")]
    #[schemars(with = "duration::Text")]
    pub jwks_max_refresh: Duration,
    /// At most one re-fetch for an unknown `kid` per this interval.
    #[serde(default = "default_jwks_kid", with = "duration")]
    #[schemars(with = "duration::Text")]
    pub jwks_unknown_kid_interval: Duration,
    /// Longest a JWKS fetch may take (connect and response), and so the
    /// longest an authentication waits for one; known keys never wait.
    #[serde(default = "default_jwks_timeout", with = "duration")]
    #[schemars(with = "duration::Text")]
    pub jwks_timeout: Duration,
    /// Required `iss`, when set.
    pub issuer: Option<String>,
    /// Accepted `aud` values, when set.
    pub audience: Option<Vec<String>>,
    /// Clock skew allowed on `exp` and `nbf`.
    #[serde(default = "default_leeway", with = "duration")]
    #[schemars(with = "duration::Text")]
    pub leeway: Duration,
    /// Which claims carry what.
    #[serde(default)]
    pub claims: ClaimNames,
}

fn default_algorithms() -> Vec<String> {
    vec!["HS256".into()]
}

fn default_jwks_min() -> Duration {
    Duration::from_secs(60)
}

fn default_jwks_max() -> Duration {
    Duration::from_secs(3600)
}

fn default_jwks_kid() -> Duration {
    Duration::from_secs(10)
}

fn default_jwks_timeout() -> Duration {
    Duration::from_secs(2)
}

fn default_leeway() -> Duration {
    Duration::from_secs(30)
}

/// Claim names, for identity providers that do not use ours.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ClaimNames {
    /// Claim holding the user id.
    pub sub: String,
    /// Claim holding the roles (a list, or a space-separated string).
    pub roles: String,
    /// Claim holding the tenant (absent: `default`).
    pub tenant: String,
    /// Claim holding per-thread grants (`{glob: [permissions]}`).
    pub threads: String,
}

impl Default for ClaimNames {
    fn default() -> Self {
        ClaimNames {
            sub: "sub".into(),
            roles: "roles".into(),
            tenant: "tenant".into(),
            threads: "threads".into(),
        }
    }
}

/// Checks of `[[grants]]`.
pub(super) fn check_grants(grants: &[RoleGrant], bad: &mut impl FnMut(String, String)) {
    for (i, g) in grants.iter().enumerate() {
        for (j, p) in g.permissions.iter().enumerate() {
            if Permission::parse(p).is_none() {
                bad(
                    format!("grants[{i}].permissions[{j}]"),
                    format!("'{p}' is not one of view, run, resume, cancel, meta"),
                );
            }
        }
    }
}

impl AuthConfig {
    /// Checks of `[auth]`: the algorithms, and the secret or keys each needs.
    pub(super) fn check(&self, bad: &mut impl FnMut(String, String)) {
        let a = self;
        if a.algorithms.is_empty() {
            bad(
                "auth.algorithms".into(),
                "list at least one algorithm".into(),
            );
        }
        let mut needs_secret = false;
        let mut needs_public = false;
        for (i, alg) in a.algorithms.iter().enumerate() {
            match alg.as_str() {
                "HS256" | "HS384" | "HS512" => needs_secret = true,
                "RS256" | "RS384" | "RS512" | "PS256" | "PS384" | "PS512" | "ES256" | "ES384"
                | "EdDSA" => needs_public = true,
                other => bad(
                    format!("auth.algorithms[{i}]"),
                    format!("'{other}' is not a supported algorithm"),
                ),
            }
        }
        if needs_secret {
            match a.hs_secret.as_deref().map(expand_env) {
                None => bad(
                    "auth.hs_secret".into(),
                    "an HS algorithm is enabled but no secret is set".into(),
                ),
                Some(Err(var)) => bad(
                    "auth.hs_secret".into(),
                    format!("references unset environment variable {var}"),
                ),
                Some(Ok(s)) if s.len() < 32 => bad(
                    "auth.hs_secret".into(),
                    "must be at least 32 bytes (256 bits)".into(),
                ),
                _ => {}
            }
        }
        if needs_public
            && a.public_key_pem.is_none()
            && a.jwks_file.is_none()
            && a.jwks_url.is_none()
        {
            bad(
                "auth".into(),
                "an asymmetric algorithm is enabled: set public_key_pem, jwks_file or jwks_url"
                    .into(),
            );
        }
        for (key, p) in [
            ("auth.public_key_pem", &a.public_key_pem),
            ("auth.jwks_file", &a.jwks_file),
        ] {
            if let Some(p) = p
                && !p.exists()
            {
                bad(key.into(), format!("{} does not exist", p.display()));
            }
        }
        if let Some(u) = &a.jwks_url {
            check_http_url(u, &mut |e| bad("auth.jwks_url".into(), e));
        }
        if a.jwks_timeout.is_zero() {
            bad("auth.jwks_timeout".into(), "must be more than 0".into());
        }
        if a.jwks_min_refresh > a.jwks_max_refresh {
            bad(
                "auth.jwks_min_refresh".into(),
                "must not exceed jwks_max_refresh".into(),
            );
        }
    }
}
