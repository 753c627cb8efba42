//! Redis journal for several gateway nodes sharing one Redis (or Valkey).
//!
//! Per thread (keys share one `{hash tag}`, see [`keys`] for the names):
//! - `…:ev`, a stream whose entry ids are the seqs (`<seq>-0`), field `e`
//!   the event JSON exactly as journaled;
//! - `…:meta`, a hash: creator, agent, status, created/updated ms, last seq,
//!   the journal's epoch ([`epochs`]), and the compacted base (seq + fold
//!   snapshot) once there is one;
//! - `…:lease`, the run lease while a run is active ([`super::lease`]);
//! - `…:cid:<key>`, a META idempotency key (a day);
//! - the channel `prefix:pub:<tenant/thread>`, where appends are published.
//!
//! Per tenant a sorted set of thread ids by update time (listing); one set of
//! running threads (node-loss detection) — on a cluster, one of each per slot
//! group; the live nodes (`prefix:nodes`, heartbeats); the store's identity
//! (`prefix:store`, see [`epochs`]); rate budgets (`prefix:rate:…`) and
//! connection counts (`prefix:conns:…`); the channel `prefix:ctl` for
//! requests between nodes.
//!
//! An append is one Lua script (`scripts::APPEND`), so it is atomic: it
//! checks the run's fence, gives the events the next seqs of the stored
//! journal, updates the metadata, trims what a compaction made obsolete,
//! releases the lease of a run it ends, and publishes the events on the
//! thread's channel — the [publication bus](super::bus). Nothing is ever
//! published that was not appended, and nothing appended goes unpublished.
//!
//! The parts: `scripts` (every Lua script), `writer` (one task sends
//! batches in order as pipelines: group commit), `listener` (the
//! subscribing connection), `leases` (run leases and the heartbeat),
//! `counters` (cluster-wide limits). Durability is Redis's: acknowledged
//! means in Redis's memory, and on disk as its `appendonly`/`appendfsync`
//! settings say.
//!
//! On a Redis Cluster (`store.kind = "redis-cluster"`) the same scripts run
//! on other key names ([`keys`]): every thread in one of a fixed number of
//! slot groups, the listings and the running set split by group, and a
//! thread's publications on a shard channel (`SPUBLISH`/`SSUBSCRIBE`).

use super::bus::{Publication, PublicationBus};
use super::counters::SharedCounters;
use super::lease::{Acquired, Control, Lease, RunLeases};
use super::*;
use ::redis::aio::ConnectionManager;
use ::redis::{AsyncCommands, Script, Value as RedisValue};
pub use conn::Target;
use conn::{Conn, Subscriber};
use dashmap::DashMap;
use futures::future::BoxFuture;
use keys::{KeyNamer, Keys};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
pub use tls::certificates as tls_certificates;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

mod conn;
mod counters;
mod epochs;
mod keys;
mod leases;
mod listener;
mod presence;
mod scripts;
mod tls;
mod writer;

use epochs::{Journals, Mismatch, Sent};
use leases::{HeldLease, heartbeat};
use listener::listen_loop;
use writer::write_loop;

type Ack = oneshot::Sender<Result<u64, StoreError>>;

/// How long a command may take before its answer counts as lost.
const RESPONSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Parses `url` the way [`RedisStore::connect`] does, without connecting.
pub fn check_url(url: &str) -> Result<(), String> {
    ::redis::Client::open(url)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A [`JournalStore`] (and [`PublicationBus`]) on Redis.
pub struct RedisStore {
    /// `None` once closed ([`JournalStore::close`]).
    writer: Mutex<Option<mpsc::UnboundedSender<(AppendBatch, Ack)>>>,
    /// The writer task, awaited by `close`.
    writer_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    conn: Conn,
    /// The key names (one Redis, or a cluster's slot groups).
    names: KeyNamer,
    runtime: tokio::runtime::Handle,
    /// False while Redis is unreachable or refusing writes.
    healthy: Arc<AtomicBool>,
    /// The other nodes' publications, until the registry takes them.
    publications: Mutex<Option<mpsc::UnboundedReceiver<Publication>>>,
    /// The other nodes' run requests, until the registry takes them.
    controls: Mutex<Option<mpsc::UnboundedReceiver<Control>>>,
    /// This node's name (in lease values).
    node: String,
    /// This process: the node's name and a random suffix, so a restarted
    /// node never inherits the connections its previous life counted, and
    /// two processes given one node name still hear each other's
    /// publications (each skips only its own).
    instance: String,
    /// Run leases this node holds, by lease key, renewed by [`heartbeat`].
    held: Arc<DashMap<String, HeldLease>>,
    /// A lease lives this long unless renewed (renewed every third of it).
    lease_ttl: std::time::Duration,
    /// The threads' channels this node listens to (those it holds in
    /// memory or is loading), each with how many holders asked for it;
    /// subscribed again after a reconnect.
    watched: Arc<DashMap<String, usize>>,
    /// Subscribe and unsubscribe requests, carried out in order by
    /// [`subscription_loop`] (a later unsubscribe can never overtake an
    /// earlier subscribe of the same channel).
    subscriptions: mpsc::UnboundedSender<Subscription>,
    /// What this node has seen of the journals it holds, to notice the store
    /// losing it ([`epochs`]).
    journals: Arc<Journals>,
}

/// The listening connection's subscribe side, replaced on every reconnect.
type SharedSink = Arc<Mutex<Option<Subscriber>>>;

/// A change to the listening connection's channels.
pub(super) enum Subscription {
    /// Subscribe (the channel's first holder); answered once Redis confirmed.
    Subscribe(String, oneshot::Sender<Result<(), StoreError>>),
    /// Answered once every request before it was carried out (a later
    /// holder of a channel whose subscribe may still be on its way).
    Barrier(oneshot::Sender<Result<(), StoreError>>),
    /// Unsubscribe (the channel's last holder left).
    Unsubscribe(String),
    /// Subscribe again to a channel still watched that the server dropped
    /// (its slot moved to another master: a failover), then read back.
    Again(String),
}

/// Carries out [`Subscription`] requests in order on the current listening
/// connection. While it is down a subscribe fails (the listener subscribes
/// every watched channel when it is back) and an unsubscribe has nothing to do.
async fn subscription_loop(
    mut requests: mpsc::UnboundedReceiver<Subscription>,
    sink: SharedSink,
    controls: mpsc::UnboundedSender<Control>,
) {
    while let Some(request) = requests.recv().await {
        let current = sink
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        match (request, current) {
            (Subscription::Subscribe(channel, done), Some(mut sink)) => {
                let _ = done.send(sink.subscribe(channel).await.map_err(StoreError::failed));
            }
            (Subscription::Subscribe(_, done), None) => {
                let _ = done.send(Err(StoreError::failed("redis subscription down")));
            }
            (Subscription::Barrier(done), current) => {
                let _ = done.send(match current {
                    Some(_) => Ok(()),
                    None => Err(StoreError::failed("redis subscription down")),
                });
            }
            (Subscription::Unsubscribe(channel), Some(mut sink)) => {
                let _ = sink.unsubscribe(channel).await;
            }
            (Subscription::Unsubscribe(_), None) => {}
            (Subscription::Again(channel), Some(mut sink)) => {
                // Whatever was published while the shard moved is read back.
                match sink.subscribe(channel).await {
                    Ok(()) => {
                        let _ = controls.send(Control::Resync);
                    }
                    Err(e) => tracing::warn!("subscribing again after a failover failed: {e}"),
                }
            }
            (Subscription::Again(_), None) => {}
        }
    }
}

/// The command connection to one Redis.
async fn single_connection(
    url: &str,
    tls: Option<&::redis::TlsCertificates>,
) -> Result<ConnectionManager, StoreError> {
    let client = conn::single_client(url, tls).map_err(StoreError::failed)?;
    // The crate's default 500 ms response timeout fails a pipeline of 64
    // appends or a large XRANGE under load while Redis did the work; a
    // failed acknowledgement costs the run, so wait longer. A Redis that
    // stops answering is still noticed by the heartbeat (readiness).
    let config = ::redis::aio::ConnectionManagerConfig::new()
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_connection_timeout(Some(std::time::Duration::from_secs(2)))
        .set_max_delay(std::time::Duration::from_secs(2));
    ConnectionManager::new_with_config(client, config)
        .await
        .map_err(StoreError::failed)
}

impl RedisStore {
    /// Connects to `url` (`redis://host:port/db`) as node `node`, with keys
    /// under `prefix`. Fails when Redis cannot be reached now; afterwards
    /// the connection reconnects by itself.
    pub async fn connect(
        url: &str,
        prefix: &str,
        node: &str,
        lease_ttl: std::time::Duration,
    ) -> Result<Arc<RedisStore>, StoreError> {
        Self::connect_to(&Target::single(url), prefix, node, lease_ttl).await
    }

    /// Like [`RedisStore::connect`], to one Redis or to a Redis Cluster.
    pub async fn connect_to(
        target: &Target,
        prefix: &str,
        node: &str,
        lease_ttl: std::time::Duration,
    ) -> Result<Arc<RedisStore>, StoreError> {
        let (conn, names) = match target {
            Target::Single { url, tls } => (
                Conn::Single(single_connection(url, tls.as_ref()).await?),
                KeyNamer::single(prefix),
            ),
            Target::Cluster { seeds, groups, tls } => (
                Conn::Cluster(
                    conn::Renewed::connect(seeds, tls.as_ref())
                        .await
                        .map_err(StoreError::failed)?,
                ),
                KeyNamer::cluster(prefix, *groups),
            ),
        };
        epochs::check_eviction_policy(&mut conn.clone()).await;
        let (tx, rx) = mpsc::unbounded_channel();
        let (pub_tx, pub_rx) = mpsc::unbounded_channel();
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let (subscriptions, subscription_requests) = mpsc::unbounded_channel();
        let sink: SharedSink = Arc::new(Mutex::new(None));
        tokio::spawn(subscription_loop(
            subscription_requests,
            sink.clone(),
            control_tx.clone(),
        ));
        let store = Arc::new(RedisStore {
            writer: Mutex::new(Some(tx)),
            writer_task: Mutex::new(None),
            conn: conn.clone(),
            names: names.clone(),
            runtime: tokio::runtime::Handle::current(),
            healthy: Arc::new(AtomicBool::new(true)),
            publications: Mutex::new(Some(pub_rx)),
            controls: Mutex::new(Some(control_rx)),
            node: node.to_owned(),
            instance: format!("{node}/{}", uuid::Uuid::new_v4()),
            held: Arc::new(DashMap::new()),
            lease_ttl,
            watched: Arc::new(DashMap::new()),
            subscriptions,
            journals: Arc::new(Journals::default()),
        });
        tokio::spawn(heartbeat(
            conn.clone(),
            store.held.clone(),
            (lease_ttl, names.clone(), store.instance.clone()),
            store.healthy.clone(),
            (store.journals.clone(), control_tx.clone()),
        ));
        let writer_task = tokio::spawn(write_loop(
            conn,
            rx,
            store.healthy.clone(),
            names.clone(),
            store.instance.clone(),
            store.journals.clone(),
        ));
        *store
            .writer_task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(writer_task);
        let (subscribed, is_subscribed) = oneshot::channel();
        let listening = listener::Listening {
            names,
            instance: store.instance.clone(),
            out: pub_tx,
            controls: control_tx,
            watched: store.watched.clone(),
            sink,
            journals: store.journals.clone(),
            healthy: store.healthy.clone(),
            subscriptions: store.subscriptions.clone(),
        };
        match target {
            Target::Single { url, tls } => {
                let client = conn::single_client(url, tls.as_ref()).map_err(StoreError::failed)?;
                tokio::spawn(listen_loop(client, listening, subscribed));
            }
            Target::Cluster { seeds, tls, .. } => {
                tokio::spawn(listener::cluster_listen_loop(
                    seeds.clone(),
                    tls.clone(),
                    listening,
                    subscribed,
                ));
            }
        }
        // Serve only once other nodes' publications can be heard.
        is_subscribed
            .await
            .map_err(|_| StoreError::failed("redis subscription failed"))?;
        Ok(store)
    }

    /// Reads a thread's metadata and its events after `after`; `check`:
    /// against what this node knows of the journal, else learning it anew.
    fn read(
        &self,
        key: &ThreadKey,
        after: u64,
        check: bool,
    ) -> Result<Option<StoredThread>, StoreError> {
        let keys = self.names.thread(key);
        let mut conn = self.conn.clone();
        // What the store must hold at least: what this node knew durable
        // before sending the read (see `Journals::observe`).
        let sent = self.journals.sent(&keys.member);
        let hash: HashMap<String, Vec<u8>> = self.block_on(conn.hgetall(&keys.meta))?;
        let meta = meta_from_hash(&hash);
        let epoch = hash
            .get("epoch")
            .map(|e| String::from_utf8_lossy(e).into_owned());
        let last = meta.as_ref().map_or(0, |m| m.last_seq);
        if check {
            match self
                .journals
                .observe(&keys.member, epoch.as_deref(), last, Some(&sent))
            {
                Ok(()) => {}
                // Sent before the thread's latest reload: asked again.
                Err(Mismatch::Stale) => return self.read(key, after, check),
                Err(Mismatch::Lost(why)) => {
                    self.journals.lost(
                        Some(&keys.member),
                        &format!("thread {:?} of tenant {:?}", key.thread_id, key.tenant),
                        &why,
                    );
                    return Err(StoreError::JournalLost);
                }
            }
        } else {
            self.journals.loaded(&keys.member, epoch.clone(), last);
        }
        let Some(meta) = meta else {
            return Ok(None);
        };
        let base = match (hash.get("base_seq"), hash.get("base")) {
            (Some(seq), Some(snapshot)) => std::str::from_utf8(seq)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .map(|seq| (seq, Bytes::from(snapshot.clone()))),
            _ => None,
        };
        let after = base.as_ref().map_or(0, |(s, _)| *s).max(after);
        let reply: ::redis::streams::StreamRangeReply =
            self.block_on(conn.xrange(&keys.events, format!("{}-0", after + 1), "+"))?;
        let events = stream_events(reply)?;
        if let Some(gap) = epochs::stream_gap(after, meta.last_seq, &events) {
            // The stream lost its start (eviction, a DEL) — or a compaction
            // came between the two reads: the script tells them apart.
            let meta_key = (keys.meta.as_str(), keys.events.as_str());
            if self.block_on(epochs::restart_history(
                &mut conn,
                meta_key,
                epoch.as_deref(),
            ))? {
                self.journals.lost(
                    Some(&keys.member),
                    &format!("thread {:?} of tenant {:?}", key.thread_id, key.tenant),
                    &format!(
                        "its event stream starts after seq {gap}, not at seq {}",
                        after + 1
                    ),
                );
                if check {
                    return Err(StoreError::JournalLost);
                }
            }
            return self.read(key, after, check);
        }
        Ok(Some(StoredThread { meta, base, events }))
    }

    fn block_on<T>(
        &self,
        f: impl std::future::Future<Output = ::redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        self.runtime.block_on(f).map_err(StoreError::failed)
    }
}

/// `tenant/thread`, each part escaped so neither can forge the other.
fn member_of(key: &ThreadKey) -> String {
    format!("{}/{}", escape(&key.tenant), escape(&key.thread_id))
}

fn key_of_member(member: &str) -> Option<ThreadKey> {
    let (tenant, thread) = member.split_once('/')?;
    Some(ThreadKey::new(unescape(tenant)?, unescape(thread)?))
}

/// Percent-escapes what would break a key, a member or a hash tag.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '%' | '/' | '{' | '}' | '\n' | ':' => out.push_str(&format!("%{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

fn unescape(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn meta_from_hash(h: &HashMap<String, Vec<u8>>) -> Option<ThreadMeta> {
    let text = |k: &str| h.get(k).and_then(|v| String::from_utf8(v.clone()).ok());
    let num = |k: &str| text(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    Some(ThreadMeta {
        creator: text("creator")?,
        agent: text("agent").filter(|a| !a.is_empty()),
        status: text("status").unwrap_or_else(|| "idle".into()),
        created_ms: num("created_ms"),
        updated_ms: num("updated_ms"),
        last_seq: num("last_seq"),
    })
}

impl JournalStore for RedisStore {
    fn epoch(&self, key: &ThreadKey) -> Option<String> {
        self.journals.cursor_epoch(&self.names.thread(key).member)
    }

    fn new_history(&self, key: &ThreadKey) -> Result<bool, StoreError> {
        let keys = self.names.thread(key);
        let Some(seen) = self.journals.pending_loss(&keys.member) else {
            return Ok(false);
        };
        let mut conn = self.conn.clone();
        self.block_on(epochs::new_epoch(&mut conn, &keys.meta, &seen))?;
        Ok(true)
    }

    fn append(&self, batch: AppendBatch) -> AppendAck {
        let (tx, rx) = oneshot::channel();
        let writer = self
            .writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let refused = match writer.as_ref() {
            Some(writer) => writer.send((batch, tx)).err().map(|e| e.0.1),
            None => Some(tx),
        };
        if let Some(ack) = refused {
            let _ = ack.send(Err(StoreError::failed("journal writer stopped")));
        }
        rx
    }

    /// Drops the queue's sender, so the writer sends what is queued and
    /// ends, and waits for it.
    fn close(&self) -> BoxFuture<'static, ()> {
        self.writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let task = self
            .writer_task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        Box::pin(async move {
            if let Some(task) = task {
                let _ = task.await;
            }
        })
    }

    /// A whole load: what it finds is what this node knows from now on.
    fn load(&self, key: &ThreadKey) -> Result<Option<StoredThread>, StoreError> {
        self.read(key, 0, false)
    }

    /// A catch-up: the stored journal must still be the one this node knows
    /// ([`StoreError::JournalLost`] otherwise, see [`epochs`]).
    fn load_after(&self, key: &ThreadKey, after: u64) -> Result<Option<StoredThread>, StoreError> {
        self.read(key, after, true)
    }

    /// One bounded `XRANGE` (no meta read: the caller's copy knows the
    /// thread; a journal lost meanwhile is noticed by its next append).
    fn read_events(
        &self,
        key: &ThreadKey,
        after: u64,
        until: u64,
        max_bytes: usize,
    ) -> Result<Vec<(u64, Bytes)>, StoreError> {
        if until <= after + 1 {
            return Ok(Vec::new());
        }
        let keys = self.names.thread(key);
        let mut conn = self.conn.clone();
        // About a page's worth of typical events per round trip.
        let count = (max_bytes / 128).clamp(16, 4096);
        let reply: ::redis::streams::StreamRangeReply = self.block_on(conn.xrange_count(
            &keys.events,
            format!("{}-0", after + 1),
            (until - 1).to_string(),
            count,
        ))?;
        Ok(crate::store::within(
            stream_events(reply)?.into_iter(),
            after,
            until,
            max_bytes,
        ))
    }

    /// Every share of the tenant's listing (one on one Redis, one per slot
    /// group on a cluster), each with its threads' metadata in one
    /// pipeline (one slot), newest first.
    fn list(&self, tenant: &str) -> Result<Vec<(ThreadKey, ThreadMeta)>, StoreError> {
        let shares = self.names.indexes(tenant);
        let reads = shares.iter().map(|index| {
            let mut conn = self.conn.clone();
            let names = self.names.clone();
            let index = index.clone();
            async move {
                let members: Vec<String> = conn.zrevrange(&index, 0, -1).await?;
                let keys: Vec<ThreadKey> =
                    members.iter().filter_map(|m| key_of_member(m)).collect();
                if keys.is_empty() {
                    return Ok(Vec::new());
                }
                let mut pipe = ::redis::pipe();
                for key in &keys {
                    pipe.hgetall(names.thread(key).meta);
                }
                let hashes: Vec<HashMap<String, Vec<u8>>> = pipe.query_async(&mut conn).await?;
                Ok::<_, ::redis::RedisError>(
                    keys.into_iter()
                        .zip(hashes)
                        .filter_map(|(k, h)| Some((k, meta_from_hash(&h)?)))
                        .collect::<Vec<_>>(),
                )
            }
        });
        let shares = self.block_on(futures::future::try_join_all(reads))?;
        let mut out: Vec<(ThreadKey, ThreadMeta)> = shares.into_iter().flatten().collect();
        out.sort_by(|a, b| b.1.updated_ms.cmp(&a.1.updated_ms).then(a.0.cmp(&b.0)));
        Ok(out)
    }

    fn running(&self) -> Result<Vec<ThreadKey>, StoreError> {
        let reads = self.names.running_sets().into_iter().map(|set| {
            let mut conn = self.conn.clone();
            async move { conn.smembers::<_, Vec<String>>(set).await }
        });
        let members = self.block_on(futures::future::try_join_all(reads))?;
        Ok(members
            .iter()
            .flatten()
            .filter_map(|m| key_of_member(m))
            .collect())
    }

    fn ping(&self) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let pong: String = self.block_on(::redis::cmd("PING").query_async(&mut conn))?;
        (pong == "PONG")
            .then_some(())
            .ok_or_else(|| StoreError::failed(format!("PING answered {pong}")))
    }

    /// False while Redis is unreachable or refusing writes, and for a
    /// lease's time to live after it was found to have lost history: the
    /// runs that wrote into the lost history stop within that time.
    fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire) && !self.journals.recently_lost(self.lease_ttl)
    }
}

impl PublicationBus for RedisStore {
    /// Nothing to do: the append script published the batch already.
    fn announce(&self, _: Publication) {}

    /// Counted: the first holder of a channel subscribes, later ones wait
    /// until that subscribe was carried out.
    fn watch(&self, key: &ThreadKey) -> BoxFuture<'static, Result<(), StoreError>> {
        let Keys {
            channel, member, ..
        } = self.names.thread(key);
        let (done, answer) = oneshot::channel();
        {
            // Requests are queued under the channel's entry lock, so they
            // reach Redis in the order the counts changed.
            let mut holders = self.watched.entry(channel.clone()).or_insert(0);
            *holders += 1;
            if *holders == 1 {
                self.journals.watch(&member);
            }
            let request = if *holders == 1 {
                Subscription::Subscribe(channel, done)
            } else {
                Subscription::Barrier(done)
            };
            let _ = self.subscriptions.send(request);
        }
        Box::pin(async move {
            answer
                .await
                .unwrap_or_else(|_| Err(StoreError::failed("redis subscriptions stopped")))
        })
    }

    /// Counted: the last holder's unwatch unsubscribes.
    fn unwatch(&self, key: &ThreadKey) {
        let Keys {
            channel, member, ..
        } = self.names.thread(key);
        if let dashmap::Entry::Occupied(mut holders) = self.watched.entry(channel.clone()) {
            *holders.get_mut() -= 1;
            if *holders.get() == 0 {
                holders.remove();
                self.journals.unwatch(&member);
                let _ = self.subscriptions.send(Subscription::Unsubscribe(channel));
            }
        }
    }

    fn subscribe(&self) -> Option<mpsc::UnboundedReceiver<Publication>> {
        self.publications
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// The append script publishes: nothing to announce.
    fn wants_announcements(&self) -> bool {
        false
    }
}

/// A stream range's entries as (seq, event JSON).
fn stream_events(
    reply: ::redis::streams::StreamRangeReply,
) -> Result<Vec<(u64, Bytes)>, StoreError> {
    let mut events = Vec::with_capacity(reply.ids.len());
    for entry in reply.ids {
        let seq = entry
            .id
            .split_once('-')
            .and_then(|(s, _)| s.parse::<u64>().ok())
            .ok_or_else(|| StoreError::failed(format!("bad stream id {}", entry.id)))?;
        let json = match entry.map.get("e") {
            Some(RedisValue::BulkString(b)) => Bytes::from(b.clone()),
            _ => {
                return Err(StoreError::failed(format!(
                    "stream entry {seq} has no event"
                )));
            }
        };
        events.push((seq, json));
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::listener::parse_publication;
    use super::*;

    #[test]
    fn keys_and_publications_round_trip_whatever_the_ids_hold() {
        for (tenant, thread) in [("t", "th"), ("a/b", "{x}:y%"), ("é", "\n/")] {
            let key = ThreadKey::new(tenant, thread);
            let member = member_of(&key);
            assert_eq!(member.matches('/').count(), 1, "{member}");
            assert!(!member.contains('{') && !member.contains('}'));
            assert_eq!(key_of_member(&member), Some(key.clone()));
            let payload = format!("n1\n{member}\n7\nep\n2:{{}}11:{{\"a\":\"b:c\"}}");
            let (node, epoch, p) = parse_publication(payload.as_bytes()).unwrap();
            assert_eq!(node, "n1");
            assert_eq!(epoch, "ep");
            assert_eq!(p.key, key);
            assert_eq!(
                p.events,
                vec![
                    (7, Bytes::from_static(b"{}")),
                    (8, Bytes::from_static(br#"{"a":"b:c"}"#))
                ]
            );
        }
        assert!(
            parse_publication(b"n1\nt/x\n1\nep\n99:{}").is_none(),
            "truncated"
        );
    }
}
