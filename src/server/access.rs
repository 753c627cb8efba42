//! Thread lookup with access control, shared by the WebSocket and HTTP routes
//! so both answer the same way: a thread the caller may not view is
//! `not_found`, exactly like a missing one; a visible thread without the
//! needed permission is `forbidden`.

use super::error::{ApiError, ErrorCode};
use super::state::AppState;
use crate::auth::access::permissions;
use crate::auth::{Permission, Principal};
use crate::store::{StoreError, ThreadKey};
use crate::thread::Thread;
use std::sync::Arc;

/// Why a thread could not be used.
#[derive(Debug)]
pub enum AccessError {
    Invalid(String),
    NotFound,
    Forbidden(Permission),
    Store(StoreError),
}

impl AccessError {
    /// The contract's error for this refusal.
    pub fn into_api(self) -> ApiError {
        match self {
            AccessError::Invalid(m) => ApiError::new(ErrorCode::Invalid, m),
            AccessError::NotFound => ApiError::new(ErrorCode::NotFound, "no such thread"),
            AccessError::Forbidden(p) => ApiError::new(
                ErrorCode::Forbidden,
                format!(
                    "missing permission '{}' on this thread",
                    format!("{p:?}").to_lowercase()
                ),
            ),
            AccessError::Store(e) => {
                tracing::error!("{e}");
                ApiError::new(ErrorCode::Unavailable, "journal unavailable")
            }
        }
    }
}

/// What `who` may see on `thread`: each event by the rules of its run's agent.
pub fn visibility_on(
    state: &AppState,
    who: &Principal,
    thread: &Thread,
) -> crate::protocol::hooks::ViewerVisibility {
    state.viewer_rules(who, &thread.key.thread_id)
}

/// How `who` is listed among a thread's viewers (see
/// [`crate::thread::presence`]): the `sub`, the token's `name` claim as a
/// display name, the roles.
pub fn visitor(who: &Principal) -> crate::thread::presence::Visitor {
    crate::thread::presence::Visitor {
        user_id: who.subject.clone(),
        name: who
            .claims
            .get("name")
            .and_then(|n| n.as_str())
            .map(str::to_owned),
        roles: who.roles.clone(),
    }
}

/// Thread ids: 1–128 of `A-Z a-z 0-9 . _ : -` (spec).
pub fn valid_thread_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// The caller's thread `thread_id` if they hold `need` on it; with `create`,
/// a missing thread is created with the caller as its creator (and a copy
/// nobody created yet, made for early viewers, is claimed by the caller).
pub async fn thread_for(
    state: &AppState,
    who: &Principal,
    thread_id: &str,
    need: Permission,
    create: bool,
) -> Result<Arc<Thread>, AccessError> {
    if !valid_thread_id(thread_id) {
        return Err(AccessError::Invalid(
            "'threadId' must be 1-128 characters of A-Z a-z 0-9 . _ : -".into(),
        ));
    }
    let key = ThreadKey::new(who.tenant.clone(), thread_id);
    match state.threads.get(&key).await.map_err(AccessError::Store)? {
        Some(thread) => {
            let creator = match creator_of(state, &thread).await? {
                Some(creator) => creator,
                None if create => thread.claim_creator(&who.subject),
                // Watched before its first run: it does not exist yet.
                None => return Err(AccessError::NotFound),
            };
            let p = permissions(who, thread_id, Some(&creator), &state.config.grants);
            if !p.has(Permission::View) {
                return Err(AccessError::NotFound);
            }
            if !p.has(need) {
                return Err(AccessError::Forbidden(need));
            }
            Ok(thread)
        }
        None if create => state
            .threads
            .get_or_create(&key, &who.subject)
            .await
            .map_err(AccessError::Store),
        None => Err(AccessError::NotFound),
    }
}

/// The thread `thread_id` for a viewer who holds `view` on it: as
/// [`thread_for`], and also before its first run when a grant (the token's
/// `threads` claim or a role grant) gives `view` on its id. The caller then
/// watches an empty thread (seq 0) that no one created yet, live from its
/// first event, whichever node runs it. Without such a grant the answer
/// stays `not_found`, exactly as for a thread the caller may not see.
pub async fn thread_to_watch(
    state: &AppState,
    who: &Principal,
    thread_id: &str,
) -> Result<Arc<Thread>, AccessError> {
    match thread_for(state, who, thread_id, Permission::View, false).await {
        Err(AccessError::NotFound)
            if permissions(who, thread_id, None, &state.config.grants).has(Permission::View) =>
        {
            let key = ThreadKey::new(who.tenant.clone(), thread_id);
            state
                .threads
                .get_or_create(&key, UNCLAIMED)
                .await
                .map_err(AccessError::Store)
        }
        found => found,
    }
}

/// The creator of a copy made for early viewers: nobody's until a run
/// claims it ([`Thread::claim_creator`]).
const UNCLAIMED: &str = "";

/// `thread`'s creator; `None` while nobody created it. A copy made for
/// early viewers asks the store, since another node may have created the
/// thread meanwhile (its events reach this copy, its creator does not).
async fn creator_of(state: &AppState, thread: &Thread) -> Result<Option<String>, AccessError> {
    let creator = thread.creator();
    if creator != UNCLAIMED {
        return Ok(Some(creator));
    }
    let store = state.threads.store().clone();
    let (key, after) = (thread.key.clone(), thread.seq());
    let stored = tokio::task::spawn_blocking(move || store.load_after(&key, after))
        .await
        .map_err(|e| AccessError::Store(StoreError::failed(e)))?
        .map_err(AccessError::Store)?;
    Ok(stored
        .map(|s| s.meta.creator)
        .filter(|c| c != UNCLAIMED)
        .map(|c| thread.claim_creator(&c)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_id_format() {
        assert!(valid_thread_id("team-7:a_b.c"));
        assert!(!valid_thread_id(""));
        assert!(!valid_thread_id("a/b"));
        assert!(!valid_thread_id(&"x".repeat(129)));
    }
}
