//! Run leases on Redis ([`RunLeases`]) and the node's heartbeat.

use super::epochs::IDENTITY;
use super::listener::control_payload;
use super::scripts::{ACQUIRE, RELEASE, RENEW};
use crate::store::lease::LeaseTiming;

use super::*;

/// A lease this node holds.
pub(super) struct HeldLease {
    value: Arc<str>,
    lost: CancellationToken,
    /// Last time Redis confirmed it: past the time to live without a
    /// confirmation, another node may have taken over, so the run stops.
    confirmed: std::time::Instant,
}

/// Records this node alive and renews its leases every
/// [`LeaseTiming::renew_every`]. A lease Redis no longer has as ours, or one
/// not confirmed for the key's whole time to live (Redis unreachable:
/// another node may take over once it expires), is lost: its run is told to
/// stop.
///
/// Each call (the store's identity, and on a cluster one renewal per slot
/// group) runs on its own and the loop never waits for one: a slow or
/// failing master must cost only the leases it holds. When the loop awaited
/// every group together, one call stuck until its response timeout (5 s, a
/// loaded master at 1,000 concurrent runs) held back the renewal of every
/// other group past the leases' time to live (⅔ of `lease_ttl`), and one
/// failing group failed them all: healthy masters' leases expired, and
/// another node closed their runs as `gateway_node_lost`.
pub(super) async fn heartbeat(
    conn: Conn,
    held: Arc<DashMap<String, HeldLease>>,
    (ttl, names, instance): (std::time::Duration, KeyNamer, String),
    healthy: Arc<AtomicBool>,
    (journals, controls): (Arc<Journals>, mpsc::UnboundedSender<Control>),
) {
    let identity = Arc::new(Mutex::new(None));
    let timing = LeaseTiming::of(ttl);
    let renewer = Renewer {
        conn,
        script: Script::new(RENEW),
        names,
        instance,
        ttl: timing.key_ttl,
        call_timeout: timing.key_ttl / 3,
        held,
        healthy,
        in_flight: Arc::new(Mutex::new(std::collections::HashSet::new())),
    };
    let mut tick = tokio::time::interval(timing.renew_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Some(call) = renewer.start("identity") {
            let check = check_identity(
                renewer.conn.clone(),
                renewer.names.identity(),
                identity.clone(),
            );
            let (journals, controls) = (journals.clone(), controls.clone());
            tokio::spawn(async move {
                if let Some((before, now)) = check.await {
                    journals.lost(
                        None,
                        "the whole store",
                        &format!("its identity changed from {before} to {now} (flushed, or restarted empty)"),
                    );
                    let _ = controls.send(Control::Resync);
                }
                drop(call);
            });
        }
        renewer.renew_all();
        renewer.expire_unconfirmed();
    }
}

/// Reads (or writes, on an empty store) the store's identity: the one seen
/// before and the one now when it changed (flushed, or restarted empty);
/// every journal this node holds must then be checked against the store
/// (see [`super::epochs`]).
async fn check_identity(
    mut conn: Conn,
    key: String,
    seen: Arc<Mutex<Option<String>>>,
) -> Option<(String, String)> {
    let candidate = uuid::Uuid::new_v4().to_string();
    let now = match Script::new(IDENTITY)
        .key(&key)
        .arg(&candidate)
        .invoke_async::<String>(&mut conn)
        .await
    {
        Ok(now) => now,
        Err(e) => {
            tracing::debug!("reading the store's identity failed (redis): {e}");
            return None;
        }
    };
    let before = seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .replace(now.clone());
    before
        .filter(|before| *before != now)
        .map(|before| (before, now))
}

/// How long after an unanswered or unreachable renewal it is sent again.
const RENEWAL_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);

/// What the heartbeat needs to renew the leases, shared by its calls.
#[derive(Clone)]
struct Renewer {
    conn: Conn,
    script: Script,
    names: KeyNamer,
    instance: String,
    /// The lease keys' time to live.
    ttl: std::time::Duration,
    /// How long a renewal call may go unanswered before it is sent again:
    /// a third of the keys' life. Why not the client's response timeout
    /// (5 s): a call to a master that died hangs that long (the client
    /// reconnects to the dead address meanwhile), and with the default
    /// `lease_ttl` the keys live 6.7 s, so a renewal waiting it out and
    /// only then going to the promoted replica came too late, and another
    /// node closed the run as `gateway_node_lost`
    /// (`redis_cluster::a_run_survives_the_loss_of_its_master`, seen in CI).
    call_timeout: std::time::Duration,
    held: Arc<DashMap<String, HeldLease>>,
    healthy: Arc<AtomicBool>,
    /// The calls under way, by name: a call not answered by the next tick
    /// is not sent again on top of it (that would pile up on a slow master).
    in_flight: Arc<Mutex<std::collections::HashSet<String>>>,
}

/// A call under way; it leaves [`Renewer::in_flight`] when dropped.
struct InFlight {
    name: String,
    set: Arc<Mutex<std::collections::HashSet<String>>>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.name);
    }
}

impl Renewer {
    /// Marks call `name` under way, unless it already is.
    fn start(&self, name: &str) -> Option<InFlight> {
        let mut set = self
            .in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        set.insert(name.to_owned()).then(|| InFlight {
            name: name.to_owned(),
            set: self.in_flight.clone(),
        })
    }

    /// Sends the heartbeat and one renewal per slot group (one call on one
    /// Redis), each on its own task.
    fn renew_all(&self) {
        let leases: Vec<(String, Arc<str>)> = self
            .held
            .iter()
            .map(|l| (l.key().clone(), l.value.clone()))
            .collect();
        for (group, members) in renewal_groups(&self.names, leases) {
            let Some(call) = self.start(&format!("group {group}")) else {
                continue;
            };
            let renewer = self.clone();
            tokio::spawn(async move {
                renewer.renew_group(&group, &members).await;
                drop(call);
            });
        }
    }

    /// Renews one group's leases (`""`: the heartbeat, and on one Redis
    /// every lease) and settles what Redis answered.
    async fn renew_group(&self, group: &str, leases: &[(String, Arc<str>)]) {
        let sent = std::time::Instant::now();
        let mut invocation = self.script.prepare_invoke();
        let ttl = self.ttl.as_millis() as u64;
        match leases.first() {
            _ if group.is_empty() => invocation
                .key(self.names.nodes())
                .arg(ttl)
                .arg(&self.instance),
            Some((first, _)) => invocation.key(first).arg(ttl).arg(""),
            None => return,
        };
        for (key, value) in leases {
            invocation.key(key).arg(&value[..]);
        }
        let mut conn = self.conn.clone();
        let mut sent = sent;
        loop {
            let answer = tokio::time::timeout(
                self.call_timeout,
                invocation.invoke_async::<Vec<i64>>(&mut conn),
            )
            .await;
            match answer {
                Ok(Ok(kept)) => {
                    if group.is_empty() {
                        self.healthy.store(true, Ordering::Release);
                    }
                    for ((key, value), kept) in leases.iter().zip(kept) {
                        self.settle(key, value, kept == 1, sent);
                    }
                    return;
                }
                Ok(Err(e)) if !super::conn::unreachable(&e) => {
                    tracing::warn!(group, "renewing run leases failed (redis): {e}");
                    return;
                }
                Ok(Err(e)) => {
                    tracing::warn!(group, "renewing run leases failed (redis): {e}")
                }
                Err(_) => {
                    conn.unanswered(sent);
                    tracing::warn!(
                        group,
                        "renewing run leases failed (redis): no answer within {:?}",
                        self.call_timeout
                    );
                }
            }
            // Tried again shortly (a failover's new master, or a renewed
            // connection, may answer) while the leases can still be kept.
            if sent.elapsed() + RENEWAL_RETRY_PAUSE >= self.ttl {
                return;
            }
            tokio::time::sleep(RENEWAL_RETRY_PAUSE).await;
            sent = std::time::Instant::now();
        }
    }

    /// Records what Redis said of one lease renewed by a call sent at `sent`.
    fn settle(&self, key: &str, value: &Arc<str>, kept: bool, sent: std::time::Instant) {
        if kept {
            if let Some(mut l) = self.held.get_mut(key)
                && l.value == *value
            {
                l.confirmed = l.confirmed.max(sent);
            }
        } else if let Some((_, l)) = self.held.remove_if(key, |_, l| l.value == *value) {
            tracing::info!(lease = %key, "run lease gone (its run ended, or another node took over); its run stops");
            l.lost.cancel();
        }
    }

    /// Stops the runs whose lease Redis has not confirmed for the key's time
    /// to live: it may have expired there, and another node take over.
    fn expire_unconfirmed(&self) {
        self.held.retain(|key, l| {
            let keep = l.confirmed.elapsed() < self.ttl;
            if !keep {
                tracing::warn!(lease = %key, "run lease not renewed within its time to live; stopping its run");
                l.lost.cancel();
            }
            keep
        });
    }
}

/// A lease key and the value this node holds it with.
type HeldValue = (String, Arc<str>);

/// The calls that renew `leases`: the heartbeat (group `""`), with every
/// lease on one Redis; on a cluster one per slot group of leases (a script
/// runs on one slot).
fn renewal_groups(
    names: &KeyNamer,
    leases: Vec<(String, Arc<str>)>,
) -> Vec<(String, Vec<HeldValue>)> {
    let mut groups: Vec<(String, Vec<HeldValue>)> = vec![(String::new(), Vec::new())];
    for lease in leases {
        let group = names.lease_group(&lease.0);
        match groups.iter_mut().find(|(g, _)| g == group) {
            Some((_, members)) => members.push(lease),
            None => groups.push((group.to_owned(), vec![lease])),
        }
    }
    groups
}

impl RunLeases for RedisStore {
    fn acquire(
        &self,
        key: &ThreadKey,
        run_id: &str,
        seen_last_seq: u64,
        (creator, agent): (&str, Option<&str>),
    ) -> BoxFuture<'static, Result<Acquired, StoreError>> {
        let keys = self.names.thread(key);
        let value: Arc<str> =
            Arc::from(format!("{}\n{}\n{run_id}", uuid::Uuid::new_v4(), self.node));
        let mut conn = self.conn.clone();
        let held = self.held.clone();
        let ttl = LeaseTiming::of(self.lease_ttl).key_ttl;
        let creator = creator.to_owned();
        let agent = agent.unwrap_or("").to_owned();
        Box::pin(async move {
            let (answer, holder): (i64, String) = Script::new(ACQUIRE)
                .key(&keys.lease)
                .key(&keys.meta)
                .key(&keys.index)
                .arg(&value[..])
                .arg(ttl.as_millis() as u64)
                .arg(seen_last_seq)
                .arg(creator)
                .arg(crate::protocol::event::now_millis())
                .arg(&keys.member)
                .arg(agent)
                .arg(uuid::Uuid::new_v4().to_string())
                .invoke_async(&mut conn)
                .await
                .map_err(StoreError::failed)?;
            Ok(match answer {
                1 | 3 => {
                    let lost = CancellationToken::new();
                    held.insert(
                        keys.lease,
                        HeldLease {
                            value: value.clone(),
                            lost: lost.clone(),
                            confirmed: std::time::Instant::now(),
                        },
                    );
                    let lease = Lease { token: value, lost };
                    if answer == 1 {
                        Acquired::Granted(lease)
                    } else {
                        Acquired::Abandoned(lease)
                    }
                }
                0 => Acquired::Held {
                    run_id: holder.rsplit('\n').next().unwrap_or_default().to_owned(),
                },
                _ => Acquired::Stale,
            })
        })
    }

    fn release(&self, key: &ThreadKey, lease: &Lease) {
        let keys = self.names.thread(key);
        self.held
            .remove_if(&keys.lease, |_, l| l.value == lease.token);
        let mut conn = self.conn.clone();
        let value = lease.token.clone();
        let channel = self.names.control();
        let notice = control_payload(&Control::Released { key: key.clone() }).unwrap_or_default();
        tokio::spawn(async move {
            let released: ::redis::RedisResult<i64> = Script::new(RELEASE)
                .key(&keys.lease)
                .arg(&value[..])
                .invoke_async(&mut conn)
                .await;
            match released {
                // Runs queued on other nodes may start now.
                Ok(1) => {
                    let _: ::redis::RedisResult<i64> = conn.publish(channel, notice).await;
                }
                Ok(_) => {}
                // It expires by itself within its time to live.
                Err(e) => {
                    tracing::warn!(lease = %keys.lease, "releasing a run lease failed (redis): {e}")
                }
            }
        });
    }

    fn send(&self, control: Control) -> BoxFuture<'static, Result<(), StoreError>> {
        let mut conn = self.conn.clone();
        let channel = self.names.control();
        Box::pin(async move {
            let Some(payload) = control_payload(&control) else {
                return Ok(());
            };
            let _: i64 = conn
                .publish(channel, payload)
                .await
                .map_err(StoreError::failed)?;
            Ok(())
        })
    }

    fn controls(&self) -> Option<mpsc::UnboundedReceiver<Control>> {
        self.controls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    fn orphans(&self) -> BoxFuture<'static, Result<Vec<ThreadKey>, StoreError>> {
        let shares: Vec<_> = self
            .names
            .running_sets()
            .into_iter()
            .map(|set| {
                let mut conn = self.conn.clone();
                let names = self.names.clone();
                async move { orphans_in(&mut conn, &names, &set).await }
            })
            .collect();
        Box::pin(async move {
            let shares = futures::future::try_join_all(shares)
                .await
                .map_err(StoreError::failed)?;
            Ok(shares.into_iter().flatten().collect())
        })
    }

    fn shared(&self) -> bool {
        true
    }

    fn patience(&self) -> std::time::Duration {
        self.lease_ttl
    }
}

/// The threads of one share of the running set with no lease (one slot:
/// the set and its threads' leases share the group's tag on a cluster).
async fn orphans_in(
    conn: &mut Conn,
    names: &KeyNamer,
    set: &str,
) -> ::redis::RedisResult<Vec<ThreadKey>> {
    let members: Vec<String> = conn.smembers(set).await?;
    let keys: Vec<ThreadKey> = members.iter().filter_map(|m| key_of_member(m)).collect();
    if keys.is_empty() {
        return Ok(keys);
    }
    // Two reads, not one step: a run may end in between (see the sweeper's
    // `close_orphan`, which checks again as it takes the lease).
    crate::fault::point("sweeper.listed").await;
    let mut pipe = ::redis::pipe();
    for key in &keys {
        pipe.exists(names.thread(key).lease);
    }
    let leased: Vec<bool> = pipe.query_async(conn).await?;
    Ok(keys
        .into_iter()
        .zip(leased)
        .filter(|(_, leased)| !leased)
        .map(|(key, _)| key)
        .collect())
}
