//! Who is calling: the verified identity a token maps to.

use crate::config::ClaimNames;
/// Re-exported so callers keep naming permissions through `auth`; the type
/// lives in config because operators write its names there.
pub use crate::config::Permission;
use serde_json::{Map, Value};

/// Tenant of a token without a tenant claim.
pub const DEFAULT_TENANT: &str = "default";

/// A `threads` claim entry: thread-id glob → permissions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadGrant {
    pub pattern: String,
    pub permissions: Vec<Permission>,
}

/// The verified caller.
#[derive(Debug, Clone, PartialEq)]
pub struct Principal {
    /// User id (`sub`, or the configured claim).
    pub subject: String,
    pub roles: Vec<String>,
    pub tenant: String,
    pub grants: Vec<ThreadGrant>,
    /// `exp`, seconds since the epoch (sockets close when it passes).
    pub expires_at: u64,
    /// All claims, for policy expressions.
    pub claims: Map<String, Value>,
}

impl Principal {
    /// Maps verified claims to a principal; `Err` names a missing or mistyped claim.
    pub fn from_claims(
        claims: Map<String, Value>,
        names: &ClaimNames,
    ) -> Result<Principal, String> {
        let subject = match claims.get(&names.sub) {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => return Err(format!("claim '{}' must be a non-empty string", names.sub)),
        };
        let roles = match claims.get(&names.roles) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|r| r.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| format!("claim '{}' must be a list of strings", names.roles))?,
            Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
            Some(_) => return Err(format!("claim '{}' must be a list of strings", names.roles)),
        };
        let tenant = match claims.get(&names.tenant) {
            None | Some(Value::Null) => DEFAULT_TENANT.to_owned(),
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(_) => {
                return Err(format!(
                    "claim '{}' must be a non-empty string",
                    names.tenant
                ));
            }
        };
        let grants = match claims.get(&names.threads) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(pattern, perms)| {
                    let perms = perms.as_array().ok_or_else(|| {
                        format!("claim '{}' must map globs to lists", names.threads)
                    })?;
                    Ok(ThreadGrant {
                        pattern: pattern.clone(),
                        permissions: perms
                            .iter()
                            .filter_map(Value::as_str)
                            .filter_map(Permission::parse)
                            .collect(),
                    })
                })
                .collect::<Result<_, String>>()?,
            Some(_) => return Err(format!("claim '{}' must be an object", names.threads)),
        };
        let expires_at = claims.get("exp").and_then(Value::as_u64).unwrap_or(0);
        Ok(Principal {
            subject,
            roles,
            tenant,
            grants,
            expires_at,
            claims,
        })
    }

    /// A principal for unit tests: `subject` in tenant `t` with `roles`.
    #[cfg(test)]
    pub fn for_test(subject: &str, roles: &[&str]) -> Principal {
        Principal {
            subject: subject.into(),
            roles: roles.iter().map(|r| r.to_string()).collect(),
            tenant: "t".into(),
            grants: Vec::new(),
            expires_at: 0,
            claims: Map::new(),
        }
    }

    /// True when any of the principal's roles is in `allowed` (`"*"` matches all).
    pub fn has_any_role(&self, allowed: &[String]) -> bool {
        allowed
            .iter()
            .any(|a| a == "*" || self.roles.iter().any(|r| r == a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claims(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn maps_all_claims() {
        let p = Principal::from_claims(
            claims(
                json!({"sub":"u1","roles":["admin","ops"],"tenant":"acme","exp":99,
                "threads":{"team-7-*":["view","meta","bogus"]}}),
            ),
            &ClaimNames::default(),
        )
        .unwrap();
        assert_eq!(p.subject, "u1");
        assert_eq!(p.tenant, "acme");
        assert_eq!(p.expires_at, 99);
        assert_eq!(
            p.grants[0].permissions,
            [Permission::View, Permission::Meta]
        );
        assert!(p.has_any_role(&["ops".into()]));
        assert!(!p.has_any_role(&["x".into()]));
        assert!(p.has_any_role(&["*".into()]));
    }

    #[test]
    fn defaults_and_custom_names() {
        let names = ClaimNames {
            sub: "uid".into(),
            roles: "scope".into(),
            tenant: "org".into(),
            threads: "th".into(),
        };
        let p = Principal::from_claims(claims(json!({"uid":"u","scope":"a b"})), &names).unwrap();
        assert_eq!(p.roles, ["a", "b"]);
        assert_eq!(p.tenant, DEFAULT_TENANT);
    }

    #[test]
    fn bad_claims_are_named() {
        let n = ClaimNames::default();
        assert!(
            Principal::from_claims(claims(json!({})), &n)
                .unwrap_err()
                .contains("'sub'")
        );
        assert!(
            Principal::from_claims(claims(json!({"sub":"u","roles":[1]})), &n)
                .unwrap_err()
                .contains("'roles'")
        );
        assert!(
            Principal::from_claims(claims(json!({"sub":"u","threads":[]})), &n)
                .unwrap_err()
                .contains("'threads'")
        );
    }
}
