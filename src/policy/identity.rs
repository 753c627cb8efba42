//! Identity injection: the verified caller, written where the agent can rely
//! on it. A client-supplied value under the same key is removed first, so an
//! agent never trusts an identity the gateway did not verify.
//!
//! The identity is for the agent only: [`JournalScrub`] takes it back out of
//! the run input journaled on `RUN_STARTED`, which every viewer of the thread
//! (view-only ones included) and every snapshot would otherwise show.

use crate::auth::Principal;
use crate::protocol::hooks::EventFilter;
use crate::protocol::{Event, EventType};
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

/// Removes `forwardedProps.<key>` from the input a `RUN_STARTED` carries,
/// before it is journaled: the injected identity is the requester's, and the
/// journal is replayed to everyone who may view the thread.
pub struct JournalScrub {
    key: String,
}

impl JournalScrub {
    /// The scrub for `cfg`, or `None` when no identity is injected.
    pub fn new(cfg: &IdentityConfig) -> Option<JournalScrub> {
        cfg.forwarded_props_key
            .clone()
            .map(|key| JournalScrub { key })
    }
}

impl EventFilter for JournalScrub {
    fn filter(&mut self, event: Event) -> Result<Vec<Event>, Box<Event>> {
        let carries = *event.kind() == EventType::RunStarted
            && event
                .get("input")
                .and_then(|i| i.get("forwardedProps"))
                .and_then(|p| p.get(self.key.as_str()))
                .is_some();
        if !carries {
            return Ok(vec![event]);
        }
        Ok(vec![event.modify(|b| {
            if let Some(props) = b
                .get_mut("input")
                .and_then(|i| i.get_mut("forwardedProps"))
                .and_then(Value::as_object_mut)
            {
                props.remove(self.key.as_str());
            }
        })])
    }
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

    #[test]
    fn the_identity_is_not_journaled() {
        let cfg = IdentityConfig {
            forwarded_props_key: Some("identity".into()),
            headers: false,
        };
        let mut scrub = JournalScrub::new(&cfg).unwrap();
        let started = Event::build(json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r",
            "input": {"messages": [], "forwardedProps": {"identity": {"sub": "real"}, "other": 1}}}));
        let out = scrub.filter(started).unwrap();
        assert_eq!(
            out.first()
                .map(|e| e.body()["input"]["forwardedProps"].clone()),
            Some(json!({"other": 1}))
        );
        // Other events, and inputs without the key, pass unchanged.
        for e in [
            json!({"type": "CUSTOM", "name": "x", "value": {"forwardedProps": {"identity": 1}}}),
            json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r", "input": {"forwardedProps": "odd"}}),
            json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r"}),
        ] {
            let e = Event::build(e);
            assert_eq!(scrub.filter(e.clone()).unwrap()[0].json(), e.json());
        }
        assert!(JournalScrub::new(&IdentityConfig::default()).is_none());
    }
}
