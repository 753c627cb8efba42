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
/// [`LeaseTiming::renew_every`], in one script call. A lease Redis no longer
/// has as ours, or one not confirmed for the key's whole time to live (Redis
/// unreachable: another node may take over once it expires), is lost: its
/// run is told to stop.
pub(super) async fn heartbeat(
    mut conn: Conn,
    held: Arc<DashMap<String, HeldLease>>,
    (ttl, names, instance): (std::time::Duration, KeyNamer, String),
    healthy: Arc<AtomicBool>,
    (journals, controls): (Arc<Journals>, mpsc::UnboundedSender<Control>),
) {
    let identity_key = names.identity();
    let script = Script::new(RENEW);
    let identity_script = Script::new(IDENTITY);
    // The store's identity as last seen: a flushed or emptied store has lost
    // it (a new one is written), and every journal this node holds is then
    // checked against the store (see [`super::epochs`]).
    let mut identity: Option<String> = None;
    let timing = LeaseTiming::of(ttl);
    let ttl = timing.key_ttl;
    let mut tick = tokio::time::interval(timing.renew_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let candidate = uuid::Uuid::new_v4().to_string();
        match identity_script
            .key(&identity_key)
            .arg(&candidate)
            .invoke_async::<String>(&mut conn)
            .await
        {
            Ok(now) => {
                if identity.as_ref().is_some_and(|before| *before != now) {
                    journals.lost(
                        "the whole store",
                        &format!(
                            "its identity changed from {} to {now} (flushed, or restarted empty)",
                            identity.as_deref().unwrap_or_default()
                        ),
                    );
                    let _ = controls.send(Control::Resync);
                }
                identity = Some(now);
            }
            Err(e) => tracing::debug!("reading the store's identity failed (redis): {e}"),
        }
        let leases: Vec<(String, Arc<str>)> = held
            .iter()
            .map(|l| (l.key().clone(), l.value.clone()))
            .collect();
        let now = std::time::Instant::now();
        match renew(&mut conn, &script, (&names, &instance, ttl), &leases).await {
            Ok(kept) => {
                healthy.store(true, Ordering::Release);
                for ((key, value), kept) in leases.iter().zip(kept) {
                    if kept == 1 {
                        if let Some(mut l) = held.get_mut(key) {
                            l.confirmed = now;
                        }
                    } else if let Some((_, l)) = held.remove_if(key, |_, l| l.value == *value) {
                        tracing::info!(lease = %key, "run lease gone (its run ended, or another node took over); its run stops");
                        l.lost.cancel();
                    }
                }
            }
            Err(e) => {
                tracing::warn!("renewing run leases failed (redis): {e}");
                held.retain(|key, l| {
                    let keep = l.confirmed.elapsed() < ttl;
                    if !keep {
                        tracing::warn!(lease = %key, "run lease not renewed within its time to live; stopping its run");
                        l.lost.cancel();
                    }
                    keep
                });
            }
        }
    }
}

/// Records this node alive and renews `leases`: one [`RENEW`] call on one
/// Redis; on a cluster one for the heartbeat and one per slot group of
/// leases (a script runs on one slot), sent at once. 1 per lease kept.
async fn renew(
    conn: &mut Conn,
    script: &Script,
    (names, instance, ttl): (&KeyNamer, &str, std::time::Duration),
    leases: &[(String, Arc<str>)],
) -> ::redis::RedisResult<Vec<i64>> {
    let ttl = ttl.as_millis() as u64;
    let mut groups: Vec<(&str, Vec<usize>)> = vec![("", Vec::new())];
    for (i, (key, _)) in leases.iter().enumerate() {
        let group = names.lease_group(key);
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, members)) => members.push(i),
            None => groups.push((group, vec![i])),
        }
    }
    let calls = groups.iter().map(|(group, members)| {
        let mut invocation = script.prepare_invoke();
        match members.first() {
            // The heartbeat (with the leases of one Redis).
            _ if group.is_empty() => invocation.key(names.nodes()).arg(ttl).arg(instance),
            Some(first) => invocation.key(&leases[*first].0).arg(ttl).arg(""),
            None => unreachable!("a group has a lease"),
        };
        for i in members {
            invocation.key(&leases[*i].0).arg(&leases[*i].1[..]);
        }
        let mut conn = conn.clone();
        async move { invocation.invoke_async::<Vec<i64>>(&mut conn).await }
    });
    let answers = futures::future::try_join_all(calls).await?;
    let mut kept = vec![0; leases.len()];
    for ((_, members), answer) in groups.iter().zip(answers) {
        for (i, k) in members.iter().zip(answer) {
            kept[*i] = k;
        }
    }
    Ok(kept)
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
