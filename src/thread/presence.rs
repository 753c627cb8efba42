//! Who is watching a thread: this node's table of its viewers, merged with
//! the other nodes' (through a [`PresenceStore`]), and the `presence` frames
//! that tell each viewer who joined and who left.
//!
//! Presence is ephemeral — never journaled — and coalesced: joins and
//! leaves change the table at once, but viewers hear of them at the next
//! tick (every [`PresenceSettings::interval`]) as one frame per thread of
//! what changed since they were last told. Someone who reconnects within a
//! tick neither leaves nor joins, and a burst of tabs costs one frame.
//! Each viewer is told relative to what *it* was last told (its join's
//! list), so nobody hears of a change twice or misses one.
//!
//! With several nodes each node records its own viewers in the store with
//! a time to live, renewed every tick while they stay: a node that dies
//! stops renewing, and its viewers leave everyone's list on their own.
//!
//! Someone typing is part of the same record (`composing`): the signal is
//! as ephemeral as presence, travels with it between nodes, and is told in
//! the same coalesced frames, so a fast typist costs no more than one frame
//! per tick. It lapses by itself [`TTL_TICKS`] ticks after the last signal
//! (a client repeats it while typing), and with the node's record when a
//! node dies, so nobody is shown typing for ever.

use super::fanout::{Outbox, Outgoing};
use crate::protocol::event::now_millis;
use crate::store::ThreadKey;
use crate::store::presence::{PresenceStore, Watcher};
use bytes::Bytes;
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How presence behaves (`[threads]` presence keys).
#[derive(Debug, Clone)]
pub struct PresenceSettings {
    /// Off: no table, no frames, empty lists.
    pub enabled: bool,
    /// How often viewers are told what changed (and the node renews its
    /// records in a shared store; they live for [`TTL_TICKS`] ticks).
    pub interval: Duration,
    /// Viewers holding any of these roles watch unlisted.
    pub hide_roles: Vec<String>,
}

/// A node's record in a shared store outlives this many ticks unrenewed.
pub const TTL_TICKS: u32 = 5;

/// Who a viewer is, as the list shows them.
#[derive(Debug, Clone)]
pub struct Visitor {
    pub user_id: String,
    pub name: Option<String>,
    pub roles: Vec<String>,
}

/// One connection watching one thread on this node.
struct Seat {
    who: Visitor,
    /// Where its frames go; `None`: counted, never told (an SSE stream).
    outbox: Option<Arc<Outbox>>,
    since: u64,
    /// Until when (Unix ms) this connection's person is shown typing
    /// (0: not).
    composing_until: u64,
    /// The list it was last told, by user id.
    told: BTreeMap<String, Watcher>,
}

/// One thread's viewers on this node.
#[derive(Default)]
struct Room {
    seats: HashMap<u64, Seat>,
    /// The other nodes' watchers, as last read.
    others: Vec<Watcher>,
}

/// This node's presence table.
pub struct Presence {
    settings: PresenceSettings,
    store: Arc<dyn PresenceStore>,
    rooms: Mutex<HashMap<ThreadKey, Room>>,
}

impl Presence {
    /// A table over `store` (other nodes' records, if it is shared).
    pub fn new(settings: PresenceSettings, store: Arc<dyn PresenceStore>) -> Presence {
        Presence {
            settings,
            store,
            rooms: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ThreadKey, Room>> {
        self.rooms
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn hidden(&self, who: &Visitor) -> bool {
        who.roles
            .iter()
            .any(|r| self.settings.hide_roles.contains(r))
    }

    /// Connection `conn` of `who` watches `key` from now on; returns the
    /// list as it stands (what the subscribe reply carries). Frames about
    /// later changes go to `outbox`.
    pub fn join(
        &self,
        key: &ThreadKey,
        conn: u64,
        who: Visitor,
        outbox: Option<Arc<Outbox>>,
    ) -> Vec<Watcher> {
        if !self.settings.enabled {
            return Vec::new();
        }
        let mut rooms = self.lock();
        let room = rooms.entry(key.clone()).or_default();
        room.seats.insert(
            conn,
            Seat {
                who,
                outbox,
                since: now_millis(),
                composing_until: 0,
                told: BTreeMap::new(),
            },
        );
        let list = self.merged(room);
        if let Some(seat) = room.seats.get_mut(&conn) {
            seat.told = list.clone();
        }
        list.into_values().collect()
    }

    /// How long a `composing` signal holds unrepeated (ms): as long as a
    /// node's record lives, so a signal never outlives its node.
    pub fn composing_lapse_ms(&self) -> u64 {
        (self.settings.interval * TTL_TICKS).as_millis() as u64
    }

    /// Connection `conn`'s person is typing in `key` (`on`) or stopped;
    /// told at the next tick. `false` when the connection does not watch
    /// the thread (there is no one to show typing).
    pub fn composing(&self, key: &ThreadKey, conn: u64, on: bool) -> bool {
        let lapse = self.composing_lapse_ms();
        let mut rooms = self.lock();
        let Some(seat) = rooms.get_mut(key).and_then(|r| r.seats.get_mut(&conn)) else {
            return false;
        };
        seat.composing_until = if on { now_millis() + lapse } else { 0 };
        true
    }

    /// Connection `conn` stopped watching `key` (told at the next tick).
    pub fn leave(&self, key: &ThreadKey, conn: u64) {
        if let Some(room) = self.lock().get_mut(key) {
            room.seats.remove(&conn);
        }
    }

    /// Who watches `key` now, on every node (reads the others' records
    /// when the store is shared).
    pub async fn list(&self, key: &ThreadKey) -> Vec<Watcher> {
        if !self.settings.enabled {
            return Vec::new();
        }
        let others = self.read_others(key).await;
        let mut rooms = self.lock();
        let room = rooms.entry(key.clone()).or_default();
        if let Some(others) = others {
            room.others = others;
        }
        let list = self.merged(room).into_values().collect();
        if room.seats.is_empty() {
            rooms.remove(key);
        }
        list
    }

    /// This node's listed viewers of a room, one entry per person.
    fn mine(&self, room: &Room) -> BTreeMap<String, Watcher> {
        let mut out: BTreeMap<String, Watcher> = BTreeMap::new();
        let now = now_millis();
        for seat in room.seats.values().filter(|s| !self.hidden(&s.who)) {
            let w = out
                .entry(seat.who.user_id.clone())
                .or_insert_with(|| Watcher {
                    user_id: seat.who.user_id.clone(),
                    name: seat.who.name.clone(),
                    roles: seat.who.roles.clone(),
                    connections: 0,
                    since: seat.since,
                    composing: false,
                });
            w.connections += 1;
            w.since = w.since.min(seat.since);
            w.composing |= seat.composing_until > now;
        }
        out
    }

    /// Everyone listed on the room's thread: this node's and the others'.
    fn merged(&self, room: &Room) -> BTreeMap<String, Watcher> {
        let mut out = self.mine(room);
        for o in &room.others {
            match out.get_mut(&o.user_id) {
                Some(w) => {
                    w.connections += o.connections;
                    w.since = w.since.min(o.since);
                    w.composing |= o.composing;
                }
                None => {
                    out.insert(o.user_id.clone(), o.clone());
                }
            }
        }
        out
    }

    async fn read_others(&self, key: &ThreadKey) -> Option<Vec<Watcher>> {
        if !self.store.shared() {
            return None;
        }
        let (store, k) = (self.store.clone(), key.clone());
        match tokio::task::spawn_blocking(move || store.others(&k)).await {
            Ok(Ok(others)) => Some(others),
            Ok(Err(e)) => {
                tracing::warn!(thread = %key.thread_id, "presence of other nodes unreadable: {e}");
                None
            }
            Err(_) => None,
        }
    }

    /// One tick: renews this node's records, reads the other nodes', and
    /// tells every viewer what changed since it was last told.
    pub async fn tick(&self) {
        let keys: Vec<(ThreadKey, Vec<Watcher>)> = self
            .lock()
            .iter()
            .map(|(k, room)| (k.clone(), self.mine(room).into_values().collect()))
            .collect();
        let ttl = self.settings.interval * TTL_TICKS;
        for (key, mine) in keys {
            if self.store.shared() {
                let (store, k) = (self.store.clone(), key.clone());
                let put = tokio::task::spawn_blocking(move || store.put(&k, &mine, ttl)).await;
                if let Ok(Err(e)) = put {
                    tracing::warn!(thread = %key.thread_id, "presence not recorded: {e}");
                }
            }
            let others = self.read_others(&key).await;
            self.tell(&key, others);
        }
    }

    /// Sends each seat of `key` the change from what it was told.
    fn tell(&self, key: &ThreadKey, others: Option<Vec<Watcher>>) {
        let mut rooms = self.lock();
        let Some(room) = rooms.get_mut(key) else {
            return;
        };
        if let Some(others) = others {
            room.others = others;
        }
        if room.seats.is_empty() {
            rooms.remove(key);
            return;
        }
        let now = self.merged(room);
        for seat in room.seats.values_mut() {
            if let Some(frame) = change(&key.thread_id, &seat.told, &now)
                && let Some(outbox) = &seat.outbox
            {
                outbox.push(Outgoing::Message(frame));
            }
            seat.told = now.clone();
        }
    }

    /// Ticks every [`PresenceSettings::interval`] for the life of the process.
    pub fn spawn(self: &Arc<Self>) {
        if !self.settings.enabled {
            return;
        }
        let me = Arc::downgrade(self);
        let every = self.settings.interval;
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(every);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                let Some(me) = me.upgrade() else { return };
                me.tick().await;
            }
        });
    }
}

/// The `presence` frame from `before` to `now`, if anyone joined or left,
/// or started or stopped typing.
fn change(
    thread_id: &str,
    before: &BTreeMap<String, Watcher>,
    now: &BTreeMap<String, Watcher>,
) -> Option<Bytes> {
    let typing = |list: &BTreeMap<String, Watcher>| -> Vec<String> {
        list.values()
            .filter(|w| w.composing)
            .map(|w| w.user_id.clone())
            .collect()
    };
    let composing = typing(now);
    let joined: Vec<&Watcher> = now
        .iter()
        .filter(|(id, _)| !before.contains_key(*id))
        .map(|(_, w)| w)
        .collect();
    let left: Vec<serde_json::Value> = before
        .iter()
        .filter(|(id, _)| !now.contains_key(*id))
        .map(|(id, w)| json!({"userId": id, "name": w.name}))
        .collect();
    if joined.is_empty() && left.is_empty() && composing == typing(before) {
        return None;
    }
    let viewers: Vec<&Watcher> = now.values().collect();
    let frame = json!({"type": "presence", "threadId": thread_id, "joined": joined,
                       "left": left, "viewers": viewers, "composing": composing});
    Some(Bytes::from(frame.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::presence::LocalPresence;

    fn table(hide: &[&str]) -> Presence {
        Presence::new(
            PresenceSettings {
                enabled: true,
                interval: Duration::from_millis(10),
                hide_roles: hide.iter().map(|r| r.to_string()).collect(),
            },
            Arc::new(LocalPresence),
        )
    }

    fn visitor(user: &str, roles: &[&str]) -> Visitor {
        Visitor {
            user_id: user.into(),
            name: None,
            roles: roles.iter().map(|r| r.to_string()).collect(),
        }
    }

    #[tokio::test]
    async fn one_entry_per_person_and_hidden_roles_unlisted() {
        let p = table(&["auditor"]);
        let k = ThreadKey::new("t", "th");
        p.join(&k, 1, visitor("ann", &[]), None);
        p.join(&k, 2, visitor("ann", &[]), None);
        p.join(&k, 3, visitor("aud", &["auditor"]), None);
        let list = p.list(&k).await;
        assert_eq!(list.len(), 1);
        assert_eq!((list[0].user_id.as_str(), list[0].connections), ("ann", 2));
        // Another tenant's thread of the same id is another room.
        assert!(p.list(&ThreadKey::new("other", "th")).await.is_empty());
    }

    #[tokio::test]
    async fn a_join_and_leave_within_a_tick_tell_nobody() {
        let p = table(&[]);
        let k = ThreadKey::new("t", "th");
        let (ob, mut rx) = super::super::fanout::outbox(1 << 20);
        p.join(&k, 1, visitor("ann", &[]), Some(ob));
        p.join(&k, 2, visitor("ben", &[]), None);
        p.leave(&k, 2);
        p.tick().await;
        assert!(rx.try_recv().is_none(), "ben came and went within a tick");
        p.join(&k, 3, visitor("cat", &[]), None);
        p.tick().await;
        let Some(Outgoing::Message(m)) = rx.try_recv() else {
            panic!("a frame for cat's join")
        };
        let v: serde_json::Value = serde_json::from_slice(&m).unwrap();
        assert_eq!(v["joined"][0]["userId"], "cat", "{v}");
        assert_eq!(v["viewers"].as_array().unwrap().len(), 2, "{v}");
    }

    /// Typing is told once per change, by person, never for a hidden
    /// role, and lapses on its own when the signal is not repeated.
    #[tokio::test]
    async fn composing_is_told_when_it_changes_and_lapses_by_itself() {
        let p = table(&["auditor"]);
        let k = ThreadKey::new("t", "th");
        let (ob, mut rx) = super::super::fanout::outbox(1 << 20);
        p.join(&k, 1, visitor("ann", &[]), Some(ob));
        p.join(&k, 2, visitor("ben", &[]), None);
        p.join(&k, 3, visitor("aud", &["auditor"]), None);
        let frame = |rx: &mut super::super::fanout::OutboxReceiver| match rx.try_recv() {
            Some(Outgoing::Message(m)) => {
                Some(serde_json::from_slice::<serde_json::Value>(&m).unwrap())
            }
            _ => None,
        };
        p.tick().await;
        assert_eq!(frame(&mut rx).unwrap()["joined"][0]["userId"], "ben");
        assert!(p.composing(&k, 2, true));
        assert!(p.composing(&k, 3, true), "the auditor types, unlisted");
        assert!(!p.composing(&k, 9, true), "a connection not watching");
        p.tick().await;
        let v = frame(&mut rx).expect("ben types");
        assert_eq!(v["composing"], json!(["ben"]), "{v}");
        assert_eq!(v["joined"], json!([]), "{v}");
        let ben = v["viewers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["userId"] == "ben")
            .cloned();
        assert_eq!(ben.unwrap()["composing"], true, "{v}");
        // Repeated while typing: nothing new to tell.
        assert!(p.composing(&k, 2, true));
        p.tick().await;
        assert!(frame(&mut rx).is_none());
        // It lapses after TTL_TICKS intervals without a repeat.
        tokio::time::sleep(Duration::from_millis(10) * (TTL_TICKS + 1)).await;
        p.tick().await;
        let v = frame(&mut rx).expect("ben stopped");
        assert_eq!(v["composing"], json!([]), "{v}");
        // And stops at once when told.
        p.composing(&k, 2, true);
        p.tick().await;
        assert!(frame(&mut rx).is_some());
        p.composing(&k, 2, false);
        p.tick().await;
        assert_eq!(frame(&mut rx).unwrap()["composing"], json!([]));
    }
}
