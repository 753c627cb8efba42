//! Identity injection: the verified caller, written where the agent can rely
//! on it. A client-supplied value under the same key is removed first, so an
//! agent never trusts an identity the gateway did not verify.

use crate::auth::Principal;
use serde::Deserialize;
use serde_json::{Value, json};

/// `[identity]` in the policy file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityConfig {
    /// Key under `forwardedProps` that receives `{sub, tenant, roles}`; unset: no injection.
    pub forwarded_props_key: Option<String>,
    /// Also send `X-AGUI-User`, `X-AGUI-Tenant` and `X-AGUI-Roles` (comma-separated) upstream.
    #[serde(default)]
    pub headers: bool,
}

/// The identity headers for `who`, when configured.
pub fn headers(cfg: &IdentityConfig, who: &Principal) -> reqwest::header::HeaderMap {
    let mut h = reqwest::header::HeaderMap::new();
    if cfg.headers {
        for (name, value) in [
            ("x-agui-user", who.subject.clone()),
            ("x-agui-tenant", who.tenant.clone()),
            ("x-agui-roles", who.roles.join(",")),
        ] {
            if let Ok(v) = reqwest::header::HeaderValue::from_str(&value) {
                h.insert(name, v);
            }
        }
    }
    h
}

/// Writes `who` into `forwarded_props[key]`, replacing anything the client put there.
pub fn inject(cfg: &IdentityConfig, who: &Principal, forwarded_props: &mut Option<Value>) {
    let Some(key) = &cfg.forwarded_props_key else {
        return;
    };
    let props = forwarded_props.get_or_insert_with(|| json!({}));
    if !props.is_object() {
        *props = json!({});
    }
    props[key.as_str()] = json!({"sub": who.subject, "tenant": who.tenant, "roles": who.roles});
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_value_is_replaced() {
        let who = Principal {
            subject: "real".into(),
            roles: vec!["r".into()],
            tenant: "t".into(),
            grants: vec![],
            expires_at: 0,
            claims: Default::default(),
        };
        let mut props = Some(json!({"identity": {"sub": "forged"}, "other": 1}));
        inject(
            &IdentityConfig {
                forwarded_props_key: Some("identity".into()),
                headers: false,
            },
            &who,
            &mut props,
        );
        assert_eq!(
            props.unwrap(),
            json!({"identity": {"sub": "real", "tenant": "t", "roles": ["r"]}, "other": 1})
        );
    }
}
