//! What a WebSocket client's commands do: each frame is decoded
//! ([`super::frame`]), run as its shared command or as a subscription, and
//! answered with an `ack` or `error` message carrying the frame's `id`.

use super::frame::{Refusal, branch_command, decode_command, resume_command, run_command};
use super::writer::reply;
use crate::auth::{Permission, Principal};
use crate::protocol::hooks::{RunInput, ViewerVisibility};
use crate::protocol::join::Cursor;
use crate::server::access::{AccessError, thread_for, thread_to_watch, visibility_on, visitor};
use crate::server::commands::{self, Requester, Viewer};
use crate::server::error::{ApiError, ErrorCode};
use crate::server::fields::{opt_bool, opt_str, req_str};
use crate::server::state::AppState;
use crate::store::ThreadKey;
use crate::store::presence::Watcher;
use crate::thread::fanout::Outbox;
use crate::thread::presence::{Presence, Visitor};
use crate::thread::{Start, Thread};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::Arc;

/// An authenticated connection's side of the conversation: who it is, where
/// its answers go, and the threads it watches.
pub(super) struct Client {
    state: Arc<AppState>,
    principal: Principal,
    /// Where replies go; the threads it watches feed the same outbox.
    outbox: Arc<Outbox>,
    subs: Subscriptions,
}

/// The threads a connection watches, all feeding its one outbox.
struct Subscriptions {
    /// The connection's viewer id on every thread.
    id: u64,
    outbox: Arc<Outbox>,
    threads: HashMap<ThreadKey, Arc<Thread>>,
    /// Who watches which thread (this connection is listed on each it watches).
    presence: Arc<Presence>,
    /// How this connection's user is listed.
    visitor: Visitor,
    /// It asked for `presence` frames (a `subscribe` with `presence:
    /// true`, granted or not): it gets them on the threads its runs make it
    /// watch too — a client whose first subscribe found no thread yet
    /// watches the thread its first run creates.
    wants_presence: bool,
    /// Who was there when a run made it watch a thread, for that run's
    /// `ack` (with [`Subscriptions::wants_presence`]).
    listed: Option<Vec<Watcher>>,
    /// A thread a `run` is about to make it watch, from the seq it had
    /// before the run: subscribed once the run's `ack` is queued
    /// ([`Subscriptions::start_pending`]), so the ack comes before the
    /// run's first event and the replay from that seq loses nothing.
    pending: Option<(Arc<Thread>, u64, ViewerVisibility)>,
}

impl Subscriptions {
    /// Watches `thread` from `start` (again, if it already did).
    fn add(&mut self, thread: Arc<Thread>, start: Start, visibility: ViewerVisibility) {
        thread.subscribe(self.id, self.outbox.clone(), start, visibility);
        self.threads.insert(thread.key.clone(), thread);
    }

    /// Lists this connection among `key`'s viewers; returns who is there.
    /// With `tell`, it is sent `presence` frames of later changes (a
    /// `subscribe` asks with `presence: true`; other clients never see one).
    fn present(&self, key: &ThreadKey, tell: bool) -> Vec<Watcher> {
        let outbox = tell.then(|| self.outbox.clone());
        self.presence
            .join(key, self.id, self.visitor.clone(), outbox)
    }

    /// Subscribes to the thread a run made it watch, from before the run
    /// (the run's `ack` is already queued ahead of everything this sends).
    fn start_pending(&mut self) {
        if let Some((thread, seen, visibility)) = self.pending.take()
            && self.threads.contains_key(&thread.key)
        {
            thread.subscribe(self.id, self.outbox.clone(), Start::After(seen), visibility);
        }
    }

    /// Stops watching the thread `key`, if it did.
    fn leave(&mut self, key: &ThreadKey) {
        if let Some(thread) = self.threads.remove(key) {
            thread.unsubscribe(self.id);
            thread.viewer_left();
        }
        self.presence.leave(key, self.id);
    }

    fn leave_all(&mut self) {
        for (key, thread) in self.threads.drain() {
            thread.unsubscribe(self.id);
            thread.viewer_left();
            self.presence.leave(&key, self.id);
        }
    }
}

impl Viewer for Subscriptions {
    fn watches(&self, thread: &Thread) -> bool {
        self.threads.contains_key(&thread.key)
    }

    fn watch(&mut self, thread: &Arc<Thread>, visibility: ViewerVisibility) {
        let list = self.present(&thread.key, self.wants_presence);
        self.listed = self.wants_presence.then_some(list);
        self.threads.insert(thread.key.clone(), thread.clone());
        self.pending = Some((thread.clone(), thread.seq(), visibility));
    }

    fn unwatch(&mut self, thread: &Thread) {
        // A refused run: its list must not reach a later run's ack.
        self.listed = None;
        self.threads.remove(&thread.key);
        self.presence.leave(&thread.key, self.id);
        if self
            .pending
            .as_ref()
            .is_some_and(|(t, _, _)| t.key == thread.key)
        {
            self.pending = None;
        }
        thread.unsubscribe(self.id);
    }

    fn connection(&self) -> Option<Arc<Outbox>> {
        Some(self.outbox.clone())
    }
}

impl Client {
    /// A client for `principal`, answering into `outbox`.
    pub(super) fn new(state: Arc<AppState>, principal: Principal, outbox: Arc<Outbox>) -> Client {
        let subs = Subscriptions {
            id: state.next_connection_id(),
            outbox: outbox.clone(),
            threads: HashMap::new(),
            presence: state.presence.clone(),
            visitor: visitor(&principal),
            wants_presence: false,
            listed: None,
            pending: None,
        };
        Client {
            state,
            principal,
            outbox,
            subs,
        }
    }

    /// When the caller's token expires (Unix seconds).
    pub(super) fn expires_at(&self) -> u64 {
        self.principal.expires_at
    }

    /// Leaves every thread it watches (the connection ended).
    pub(super) fn leave_all(&mut self) {
        let keys: Vec<ThreadKey> = self.subs.threads.keys().cloned().collect();
        self.subs.leave_all();
        for key in &keys {
            self.state.threads.forget_if_unused(key);
        }
    }

    /// Answers with the contract's `error` message, echoing the frame's `id`.
    pub(super) fn error(&self, id: Option<&Value>, e: ApiError) {
        let mut v = json!({"type": "error", "code": e.code.as_str(), "message": e.message});
        if let Some(s) = e.retry_after {
            v["retryAfter"] = s.into();
        }
        if let Some(id) = id.filter(|i| !i.is_null()) {
            v["id"] = id.clone();
        }
        self.outbox.push(reply(v));
    }

    fn ack(&self, id: Option<&Value>, extra: Map<String, Value>) {
        let mut v = Map::new();
        v.insert("type".into(), "ack".into());
        v.insert("id".into(), id.cloned().unwrap_or(Value::Null));
        v.extend(extra);
        self.outbox.push(reply(Value::Object(v)));
    }

    /// Handles one command; returns a new token expiry after a refresh.
    pub(super) async fn handle(&mut self, text: &str) -> Option<u64> {
        let (v, kind) = match decode_command(text) {
            Ok(command) => command,
            Err(refusal) => {
                let Refusal { id, error } = *refusal;
                self.error(id.as_ref(), error);
                return None;
            }
        };
        let id = v.get("id");
        let result = match kind.as_str() {
            "ping" => {
                let mut pong = json!({"type": "pong"});
                if let Some(id) = id {
                    pong["id"] = id.clone();
                }
                self.outbox.push(reply(pong));
                Ok(None)
            }
            "auth" => self.refresh(&v).await.map(Some),
            "subscribe" => self.subscribe(&v).await.map(|_| None),
            "unsubscribe" => self.unsubscribe(&v).map(|_| None),
            "run" => self.run(&v).await.map(|_| None),
            "cancel" => self.cancel(&v).await.map(|_| None),
            "resume" => self.resume(&v).await.map(|_| None),
            "regenerate" | "edit" => self.branch(&v).await.map(|_| None),
            "meta" => self.meta(&v).await.map(|_| None),
            "switch" => self.switch(&v).await.map(|_| None),
            "composing" => self.composing(&v).map(|_| None),
            other => Err(ApiError::new(
                ErrorCode::Invalid,
                format!("unknown command type '{other}'"),
            )),
        };
        match result {
            Ok(exp) => exp,
            Err(e) => {
                self.error(id, e);
                None
            }
        }
    }

    async fn refresh(&mut self, v: &Value) -> Result<u64, ApiError> {
        let token = req_str(v, "token")?;
        let p = self
            .state
            .auth
            .verify(token)
            .await
            .map_err(ApiError::from)?;
        if p.subject != self.principal.subject || p.tenant != self.principal.tenant {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                "a refreshed token must name the same user and tenant",
            ));
        }
        let exp = p.expires_at;
        self.principal = p;
        self.ack(v.get("id"), Map::new());
        Ok(exp)
    }

    async fn subscribe(&mut self, v: &Value) -> Result<(), ApiError> {
        let thread_id = req_str(v, "threadId")?;
        let cursor = subscribe_cursor(v)?;
        let tell = opt_bool(v, "presence")?.unwrap_or(false);
        self.subs.wants_presence |= tell;
        let thread = thread_to_watch(&self.state, &self.principal, thread_id)
            .await
            .map_err(AccessError::into_api)?;
        let epoch = thread.epoch();
        let start = match cursor {
            None => Start::Snapshot,
            // A cursor into a history the store lost: its seqs name other
            // events now, so a reset snapshot (past the end gives one).
            Some(c) if c.from_other_history(epoch.as_deref()) => Start::After(u64::MAX),
            Some(c) => Start::After(c.seq),
        };
        // Listed before the ack, which carries who is there (this
        // connection included); changes follow as `presence` frames.
        let present = self.subs.present(&thread.key, tell);
        if v.get("id").is_some() {
            let mut extra = Map::new();
            extra.insert("threadId".into(), thread_id.into());
            if let Some(epoch) = epoch {
                extra.insert("epoch".into(), epoch.into());
            }
            extra.insert("presence".into(), json!(present));
            self.ack(v.get("id"), extra);
        }
        let visibility = visibility_on(&self.state, &self.principal, &thread);
        self.subs.add(thread, start, visibility);
        Ok(())
    }

    fn unsubscribe(&mut self, v: &Value) -> Result<(), ApiError> {
        let thread_id = req_str(v, "threadId")?;
        let key = ThreadKey::new(self.principal.tenant.clone(), thread_id);
        self.subs.leave(&key);
        // A thread watched before its first run leaves memory with its
        // last viewer, as if never asked for.
        self.state.threads.forget_if_unused(&key);
        let mut extra = Map::new();
        extra.insert("threadId".into(), thread_id.into());
        self.ack(v.get("id"), extra);
        Ok(())
    }

    /// `run`: the connection watches the thread from before the run
    /// starts; its `ack` comes first, then every event after that point.
    async fn run(&mut self, v: &Value) -> Result<(), ApiError> {
        // No agent named: the one the thread routes a plain run to.
        let routed = match opt_str(v, "agent")? {
            Some(_) => None,
            None => {
                let thread_id = req_str(v, "threadId")?;
                Some(commands::routed_agent(&self.state, &self.principal, thread_id).await?)
            }
        };
        let cmd = run_command(&self.state, &self.principal, v, routed)?;
        let requester = Requester::Viewer(&mut self.subs);
        let mut ack = commands::run(&self.state, &self.principal, cmd, requester).await?;
        // The epoch of the seqs this connection is about to get (a thread
        // not written yet has none until its first event).
        if let Some(epoch) = self.subs.pending.as_ref().and_then(|(t, ..)| t.epoch()) {
            ack.insert("epoch".into(), epoch.into());
        }
        self.ack_run(v, ack);
        Ok(())
    }

    /// Acks a command that started a run, with who is watching when the
    /// run made the connection watch the thread (and it asks for presence),
    /// then watches from before the run.
    fn ack_run(&mut self, v: &Value, mut ack: Map<String, Value>) {
        if let Some(list) = self.subs.listed.take() {
            ack.insert("presence".into(), json!(list));
        }
        self.ack(v.get("id"), ack);
        self.subs.start_pending();
    }

    /// `regenerate` / `edit`: a run that forks the thread (see
    /// [`crate::thread::branch`]).
    async fn branch(&mut self, v: &Value) -> Result<(), ApiError> {
        let thread_id = req_str(v, "threadId")?;
        let thread = thread_for(
            &self.state,
            &self.principal,
            thread_id,
            Permission::Run,
            false,
        )
        .await
        .map_err(AccessError::into_api)?;
        thread.refresh().await;
        let mut cmd = branch_command(&self.state, &self.principal, v, thread.meta().agent)?;
        if req_str(v, "type")? == "regenerate" {
            let visibility = visibility_on(&self.state, &self.principal, &thread);
            let message_id = opt_str(v, "messageId")?;
            if let Some(answers) = commands::regenerated_answers(&thread, message_id, &visibility)?
                && let RunInput::Incremental { resume, .. } = &mut cmd.input
            {
                *resume = Some(answers);
            }
        }
        let requester = Requester::Viewer(&mut self.subs);
        let ack = commands::run(&self.state, &self.principal, cmd, requester).await?;
        self.ack_run(v, ack);
        Ok(())
    }

    /// `resume`: answers to the thread's pending interrupts, as a run.
    async fn resume(&mut self, v: &Value) -> Result<(), ApiError> {
        let cmd = resume_command(v)?;
        let requester = Requester::Viewer(&mut self.subs);
        let ack = commands::resume(&self.state, &self.principal, cmd, requester).await?;
        self.ack_run(v, ack);
        Ok(())
    }

    async fn cancel(&mut self, v: &Value) -> Result<(), ApiError> {
        let thread_id = req_str(v, "threadId")?;
        let run_id = opt_str(v, "runId")?;
        let ack = commands::cancel(&self.state, &self.principal, thread_id, run_id).await?;
        self.ack(v.get("id"), ack);
        Ok(())
    }

    /// `switch`: the thread's next plain run goes to `agent`.
    async fn switch(&mut self, v: &Value) -> Result<(), ApiError> {
        let thread_id = req_str(v, "threadId")?;
        let agent = req_str(v, "agent")?;
        let ack = commands::switch_agent(&self.state, &self.principal, thread_id, agent).await?;
        self.ack(v.get("id"), ack);
        Ok(())
    }

    /// `composing`: the caller is typing in a thread it watches (or
    /// stopped). Ephemeral, told to the others in their next `presence`
    /// frame; acked only when it carries an `id` (a client repeats it every
    /// few seconds while typing, and an ack nobody waits for is noise).
    fn composing(&mut self, v: &Value) -> Result<(), ApiError> {
        let thread_id = req_str(v, "threadId")?;
        let on = opt_bool(v, "composing")?.unwrap_or(true);
        let key = ThreadKey::new(self.principal.tenant.clone(), thread_id);
        if !self.subs.threads.contains_key(&key)
            || !self.subs.presence.composing(&key, self.subs.id, on)
        {
            return Err(ApiError::new(
                ErrorCode::Invalid,
                format!(
                    "'composing' needs the connection to watch thread '{thread_id}' (subscribe first)"
                ),
            ));
        }
        if v.get("id").is_some_and(|i| !i.is_null()) {
            let mut extra = Map::new();
            extra.insert("threadId".into(), thread_id.into());
            // How long the signal holds unrepeated: a client repeats it
            // well within that while its person types.
            extra.insert(
                "lapseMs".into(),
                self.subs.presence.composing_lapse_ms().into(),
            );
            self.ack(v.get("id"), extra);
        }
        Ok(())
    }

    async fn meta(&mut self, v: &Value) -> Result<(), ApiError> {
        let thread_id = req_str(v, "threadId")?;
        let ack = commands::meta(&self.state, &self.principal, thread_id, v).await?;
        self.ack(v.get("id"), ack);
        Ok(())
    }
}

/// The position a `subscribe` names: `after` as a seq (with `epoch`
/// beside it), or as a cursor text `<seq>.<epoch>` (docs/protocol.md,
/// "Cursors"); `None` without `after` (a snapshot start).
fn subscribe_cursor(v: &Value) -> Result<Option<Cursor>, ApiError> {
    let bad = || {
        ApiError::new(
            ErrorCode::Invalid,
            "'after' must be a non-negative integer or a cursor '<seq>.<epoch>', \
             and 'epoch' a string",
        )
    };
    let mut cursor = match v.get("after") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => Cursor::parse(s).ok_or_else(bad)?,
        Some(a) => Cursor {
            seq: a.as_u64().ok_or_else(bad)?,
            epoch: None,
        },
    };
    match v.get("epoch") {
        None | Some(Value::Null) => {}
        Some(Value::String(e)) => cursor.epoch = Some(e.clone()),
        Some(_) => return Err(bad()),
    }
    Ok(Some(cursor))
}
