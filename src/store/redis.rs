//! Redis journal for several gateway nodes sharing one Redis (or Valkey).
//!
//! Per thread (keys share one `{hash tag}`):
//! - `…:ev`, a stream whose entry ids are the seqs (`<seq>-0`), field `e`
//!   the event JSON exactly as journaled;
//! - `…:meta`, a hash: creator, agent, status, created/updated ms, last seq,
//!   and the compacted base (seq + fold snapshot) once there is one;
//! - per tenant a sorted set of thread ids by update time (listing), and one
//!   set of running threads (restart recovery).
//!
//! An append is one Lua script ([`APPEND`]), so it is atomic: it checks that
//! the batch continues the stored journal (else [`StoreError::SeqConflict`]
//! and nothing changes), appends, updates the metadata, trims what a
//! compaction made obsolete, and publishes the events on the thread's
//! channel — the [publication bus](super::bus) other nodes listen to. Nothing
//! is ever published that was not appended, and nothing appended goes
//! unpublished.
//!
//! Batches are sent by one writer task, in the order they were queued, as a
//! pipeline of scripts (group commit: whatever queued up while the previous
//! pipeline was in flight), over a connection that reconnects by itself.
//! Durability is Redis's: acknowledged means in Redis's memory, and on disk
//! as its `appendonly`/`appendfsync` settings say.
//!
//! Redis Cluster is not supported: the listing and running sets span slots.

use super::bus::{Publication, PublicationBus};
use super::counters::SharedCounters;
use super::lease::{Acquired, Control, Lease, RunLeases};
use super::*;
use ::redis::aio::ConnectionManager;
use ::redis::{AsyncCommands, Script, Value as RedisValue};
use dashmap::DashMap;
use futures::future::BoxFuture;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

type Ack = oneshot::Sender<Result<u64, StoreError>>;

/// Most batches sent in one pipeline.
const MAX_PIPELINE: usize = 64;

/// The append script. KEYS: events stream, meta hash, tenant index, running
/// set, run lease, idempotency key. ARGV: node, member, channel, (unused), event count,
/// creator, agent, status, created ms, updated ms, run boundary (`1`/`0`),
/// base seq ('' = none), base snapshot, fence ('' = none), control channel,
/// the META event id under the idempotency key ('' = none), then the events.
/// A META event whose idempotency key is taken is not appended: `{3, id}`
/// answers with the first one's id (keys live a day: retries come within
/// seconds). The events get the seqs after the stored last one. A
/// fenced batch that ends its run also releases the run's lease, in the same
/// step (the thread takes a new run the moment its last one is over).
/// Returns `{1, first seq}`, or `{2, 0}` when the fence is not the current
/// lease.
const APPEND: &str = r#"
if ARGV[14] ~= '' and redis.call('GET', KEYS[5]) ~= ARGV[14] then
  return {2, 0}
end
if ARGV[16] ~= '' then
  local prior = redis.call('GET', KEYS[6])
  if prior then
    return {3, prior}
  end
  redis.call('SET', KEYS[6], ARGV[16], 'EX', 86400)
end
local n = tonumber(ARGV[5])
local last = tonumber(redis.call('HGET', KEYS[2], 'last_seq') or '0')
local first = last + 1
local payload = {ARGV[1], '\n', ARGV[2], '\n', tostring(first), '\n'}
for i = 1, n do
  local json = ARGV[16 + i]
  redis.call('XADD', KEYS[1], (first + i - 1) .. '-0', 'e', json)
  payload[#payload + 1] = #json .. ':' .. json
end
redis.call('HSETNX', KEYS[2], 'creator', ARGV[6])
redis.call('HSETNX', KEYS[2], 'created_ms', ARGV[9])
redis.call('HSET', KEYS[2], 'updated_ms', ARGV[10], 'last_seq', last + n)
if ARGV[11] == '1' then
  redis.call('HSET', KEYS[2], 'agent', ARGV[7], 'status', ARGV[8])
  if ARGV[8] == 'running' then
    redis.call('SADD', KEYS[4], ARGV[2])
  else
    redis.call('SREM', KEYS[4], ARGV[2])
  end
end
redis.call('ZADD', KEYS[3], ARGV[10], ARGV[2])
if ARGV[11] == '1' and ARGV[8] ~= 'running' and ARGV[14] ~= '' then
  redis.call('DEL', KEYS[5])
  redis.call('PUBLISH', ARGV[15], 'released\n' .. ARGV[2] .. '\n')
end
if ARGV[12] ~= '' then
  redis.call('HSET', KEYS[2], 'base_seq', ARGV[12], 'base', ARGV[13])
  redis.call('XTRIM', KEYS[1], 'MINID', (tonumber(ARGV[12]) + 1) .. '-0')
end
if n > 0 then
  redis.call('PUBLISH', ARGV[3], table.concat(payload))
end
return {1, first}
"#;

/// Takes a run lease. KEYS: lease, meta hash, tenant index. ARGV: lease
/// value, time to live (ms), the last seq the caller has seen, creator,
/// now (ms), member. A new thread is recorded at once (so a viewer on any
/// node finds it as soon as its first run is accepted). Returns `{1, ''}`
/// granted, `{0, holder}` held, `{2, ''}` the journal moved on.
const ACQUIRE: &str = r#"
local held = redis.call('GET', KEYS[1])
if held then
  return {0, held}
end
local last = tonumber(redis.call('HGET', KEYS[2], 'last_seq') or '0')
if last ~= tonumber(ARGV[3]) then
  return {2, ''}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if redis.call('HSETNX', KEYS[2], 'creator', ARGV[4]) == 1 then
  redis.call('HSET', KEYS[2], 'created_ms', ARGV[5], 'updated_ms', ARGV[5], 'last_seq', 0, 'status', 'idle')
  redis.call('ZADD', KEYS[3], ARGV[5], ARGV[6])
end
return {1, ''}
"#;

/// The node's heartbeat: records it alive (for connection counts) and
/// renews the leases it holds. KEYS: live-nodes sorted set, then the
/// leases; ARGV: time to live (ms), this process's instance id, then each
/// lease's value. Returns 1 per lease still held, 0 per lost.
const RENEW: &str = r#"
local t = redis.call('TIME')
redis.call('ZADD', KEYS[1], t[1] * 1000 + math.floor(t[2] / 1000), ARGV[2])
local out = {}
for i = 2, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i + 1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[1])
    out[i - 1] = 1
  else
    out[i - 1] = 0
  end
end
return out
"#;

/// GCRA rate budget. KEYS: the budget; ARGV: emission interval (ms), burst
/// window (ms). Returns 0 when taken, else the milliseconds to wait.
const TAKE: &str = r#"
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local interval = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local next_tat = tat + interval
if next_tat - now > window then
  return next_tat - now - window
end
redis.call('SET', KEYS[1], next_tat, 'PX', next_tat - now)
return 0
"#;

/// Opens a counted connection. KEYS: the key's counts per instance, the
/// live-nodes set; ARGV: instance id, limit, staleness (ms). Counts of
/// instances without a recent heartbeat are dropped. Returns 1 opened, 0 at
/// the limit.
const OPEN: &str = r#"
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local counts = redis.call('HGETALL', KEYS[1])
local total = 0
for i = 1, #counts, 2 do
  local seen = tonumber(redis.call('ZSCORE', KEYS[2], counts[i]) or '0')
  if counts[i] == ARGV[1] or seen >= now - tonumber(ARGV[3]) then
    total = total + tonumber(counts[i + 1])
  else
    redis.call('HDEL', KEYS[1], counts[i])
  end
end
if total >= tonumber(ARGV[2]) then
  return 0
end
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
return 1
"#;

/// Closes a counted connection. KEYS: the key's counts; ARGV: instance id.
const CLOSE: &str = r#"
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
end
return 1
"#;

/// Releases a lease if it is still the caller's. KEYS: lease; ARGV: value.
const RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"#;

/// A [`JournalStore`] (and [`PublicationBus`]) on Redis.
pub struct RedisStore {
    writer: mpsc::UnboundedSender<(AppendBatch, Ack)>,
    conn: ConnectionManager,
    prefix: String,
    runtime: tokio::runtime::Handle,
    /// False while Redis is unreachable or refusing writes.
    healthy: Arc<AtomicBool>,
    /// The other nodes' publications, until the registry takes them.
    publications: Mutex<Option<mpsc::UnboundedReceiver<Publication>>>,
    /// The other nodes' run requests, until the registry takes them.
    controls: Mutex<Option<mpsc::UnboundedReceiver<Control>>>,
    /// This node's name (in lease values and publications).
    node: String,
    /// This process: the node's name and a random suffix, so a restarted
    /// node never inherits the connections its previous life counted.
    instance: String,
    /// Run leases this node holds, by lease key, renewed by [`heartbeat`].
    held: Arc<DashMap<String, HeldLease>>,
    /// A lease lives this long unless renewed (renewed every third of it).
    lease_ttl: std::time::Duration,
    /// The threads' channels this node listens to (those it holds in
    /// memory), subscribed again after a reconnect.
    watched: Arc<DashMap<String, ()>>,
    /// Subscribes and unsubscribes on the listening connection; `None`
    /// while it is down.
    sink: SharedSink,
}

/// The listening connection's subscribe side, replaced on every reconnect.
type SharedSink = Arc<Mutex<Option<::redis::aio::PubSubSink>>>;

/// A lease this node holds.
struct HeldLease {
    value: Arc<str>,
    lost: CancellationToken,
    /// Last time Redis confirmed it: past the time to live without a
    /// confirmation, another node may have taken over, so the run stops.
    confirmed: std::time::Instant,
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
        let client = ::redis::Client::open(url).map_err(StoreError::failed)?;
        let conn = ConnectionManager::new(client.clone())
            .await
            .map_err(StoreError::failed)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let (pub_tx, pub_rx) = mpsc::unbounded_channel();
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let store = Arc::new(RedisStore {
            writer: tx,
            conn: conn.clone(),
            prefix: prefix.to_owned(),
            runtime: tokio::runtime::Handle::current(),
            healthy: Arc::new(AtomicBool::new(true)),
            publications: Mutex::new(Some(pub_rx)),
            controls: Mutex::new(Some(control_rx)),
            node: node.to_owned(),
            instance: format!("{node}/{}", uuid::Uuid::new_v4()),
            held: Arc::new(DashMap::new()),
            lease_ttl,
            watched: Arc::new(DashMap::new()),
            sink: Arc::new(Mutex::new(None)),
        });
        tokio::spawn(heartbeat(
            conn.clone(),
            store.held.clone(),
            (lease_ttl, format!("{prefix}:nodes"), store.instance.clone()),
            store.healthy.clone(),
        ));
        tokio::spawn(write_loop(
            conn,
            rx,
            store.healthy.clone(),
            prefix.to_owned(),
            node.to_owned(),
        ));
        let (subscribed, is_subscribed) = oneshot::channel();
        tokio::spawn(listen_loop(
            client,
            (prefix.to_owned(), node.to_owned()),
            (pub_tx, control_tx),
            (store.watched.clone(), store.sink.clone()),
            store.healthy.clone(),
            subscribed,
        ));
        // Serve only once other nodes' publications can be heard.
        is_subscribed
            .await
            .map_err(|_| StoreError::failed("redis subscription failed"))?;
        Ok(store)
    }

    fn block_on<T>(
        &self,
        f: impl std::future::Future<Output = ::redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        self.runtime.block_on(f).map_err(StoreError::failed)
    }
}

/// The keys of one thread (one hash tag: they live in one slot).
struct Keys {
    /// `prefix:{tenant/thread}`: every key of the thread starts with it.
    tag: String,
    events: String,
    meta: String,
    index: String,
    running: String,
    lease: String,
    member: String,
    channel: String,
}

impl Keys {
    fn of(prefix: &str, key: &ThreadKey) -> Keys {
        let member = member_of(key);
        let tag = format!("{prefix}:{{{member}}}");
        Keys {
            tag: tag.clone(),
            events: format!("{tag}:ev"),
            meta: format!("{tag}:meta"),
            index: format!("{prefix}:threads:{}", escape(&key.tenant)),
            running: format!("{prefix}:running"),
            lease: format!("{tag}:lease"),
            channel: format!("{prefix}:pub:{member}"),
            member,
        }
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

/// Sends queued batches in order, as pipelines of [`APPEND`] scripts.
async fn write_loop(
    mut conn: ConnectionManager,
    mut queue: mpsc::UnboundedReceiver<(AppendBatch, Ack)>,
    healthy: Arc<AtomicBool>,
    prefix: String,
    node: String,
) {
    let script = Script::new(APPEND);
    while let Some(first) = queue.recv().await {
        let mut group = vec![first];
        while group.len() < MAX_PIPELINE {
            match queue.try_recv() {
                Ok(next) => group.push(next),
                Err(_) => break,
            }
        }
        let pipe = append_pipeline(&script, &group, &prefix, &node);
        let mut results: ::redis::RedisResult<Vec<(i64, RedisValue)>> =
            pipe.query_async(&mut conn).await;
        if results
            .as_ref()
            .is_err_and(|e| e.to_string().to_lowercase().contains("noscript"))
        {
            // Redis restarted or its script cache was flushed: nothing ran.
            // Load the script and send the same pipeline again.
            if let Err(e) = script.prepare_invoke().load_async(&mut conn).await {
                tracing::warn!("loading the append script failed: {e}");
            }
            results = pipe.query_async(&mut conn).await;
        }
        match results {
            Ok(results) => {
                healthy.store(true, Ordering::Release);
                for ((_, ack), (ok, answer)) in group.into_iter().zip(results) {
                    let result = match (ok, answer) {
                        (1, RedisValue::Int(first)) => Ok(first as u64),
                        (3, RedisValue::BulkString(id)) => Err(StoreError::Duplicate(
                            String::from_utf8_lossy(&id).into_owned(),
                        )),
                        (2, _) => Err(StoreError::Fenced),
                        other => Err(StoreError::failed(format!(
                            "unexpected append answer {other:?}"
                        ))),
                    };
                    let _ = ack.send(result);
                }
            }
            Err(e) => {
                tracing::error!("journal write failed (redis): {e}");
                healthy.store(false, Ordering::Release);
                for (_, ack) in group {
                    let _ = ack.send(Err(StoreError::failed(&e)));
                }
            }
        }
    }
}

/// One [`APPEND`] invocation per batch, in queue order.
fn append_pipeline(
    script: &Script,
    group: &[(AppendBatch, Ack)],
    prefix: &str,
    node: &str,
) -> ::redis::Pipeline {
    let mut pipe = ::redis::pipe();
    for (batch, _) in group {
        let keys = Keys::of(prefix, &batch.key);
        let m = &batch.meta;
        let (base_seq, base) = match &batch.compact {
            Some((seq, snapshot)) => (seq.to_string(), snapshot.to_vec()),
            None => (String::new(), Vec::new()),
        };
        let mut invocation = script.prepare_invoke();
        invocation
            .key(&keys.events)
            .key(&keys.meta)
            .key(&keys.index)
            .key(&keys.running)
            .key(&keys.lease)
            .key(match &batch.idempotency {
                Some((cid, _)) => format!("{}:cid:{}", keys.tag, escape(cid)),
                None => format!("{}:cid", keys.tag),
            })
            .arg(node)
            .arg(&keys.member)
            .arg(&keys.channel)
            .arg(batch.events.first().map_or(0, |(s, _)| *s))
            .arg(batch.events.len())
            .arg(&m.creator)
            .arg(m.agent.as_deref().unwrap_or(""))
            .arg(&m.status)
            .arg(m.created_ms)
            .arg(m.updated_ms)
            .arg(if batch.run_boundary { "1" } else { "0" })
            .arg(base_seq)
            .arg(base)
            .arg(batch.fence.as_deref().unwrap_or(""))
            .arg(format!("{prefix}:ctl"))
            .arg(batch.idempotency.as_ref().map_or("", |(_, id)| id.as_str()));
        for (_, json) in &batch.events {
            invocation.arg(&json[..]);
        }
        pipe.invoke_script(&invocation);
    }
    pipe
}

/// Receives the publications of the threads this node holds (one channel
/// each, see [`RedisStore`]'s `watch`) and the requests between nodes,
/// passing on those of other nodes; reconnects with backoff, subscribes
/// again to every watched channel, and tells the registry to read back what
/// it may have missed meanwhile ([`Control::Resync`]).
async fn listen_loop(
    client: ::redis::Client,
    (prefix, node): (String, String),
    (out, controls): (
        mpsc::UnboundedSender<Publication>,
        mpsc::UnboundedSender<Control>,
    ),
    (watched, sink): (Arc<DashMap<String, ()>>, SharedSink),
    healthy: Arc<AtomicBool>,
    subscribed: oneshot::Sender<()>,
) {
    use futures::StreamExt;
    let control_channel = format!("{prefix}:ctl");
    let mut subscribed = Some(subscribed);
    let mut backoff = std::time::Duration::from_millis(100);
    loop {
        let connected = async {
            let (mut new_sink, stream) = client.get_async_pubsub().await?.split();
            new_sink.subscribe(&control_channel).await?;
            // Published first, so a channel watched from now on is
            // subscribed by its watcher; the ones before are done here.
            *sink
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(new_sink.clone());
            let channels: Vec<String> = watched.iter().map(|c| c.key().clone()).collect();
            for chunk in channels.chunks(1024) {
                new_sink.subscribe(chunk).await?;
            }
            Ok::<_, ::redis::RedisError>(stream)
        };
        match connected.await {
            Ok(mut messages) => {
                backoff = std::time::Duration::from_millis(100);
                healthy.store(true, Ordering::Release);
                match subscribed.take() {
                    Some(tell) => {
                        let _ = tell.send(());
                    }
                    None => {
                        tracing::info!("redis subscription back; reading back missed events");
                        let _ = controls.send(Control::Resync);
                    }
                }
                while let Some(message) = messages.next().await {
                    let payload = message.get_payload_bytes();
                    if message.get_channel_name() == control_channel {
                        match parse_control(payload) {
                            Some(control) => {
                                let _ = controls.send(control);
                            }
                            None => tracing::warn!("unreadable run request between nodes"),
                        }
                        continue;
                    }
                    match parse_publication(payload) {
                        Some((from, _)) if from == node => {}
                        Some((_, publication)) => {
                            if out.send(publication).is_err() {
                                return; // nobody listens any more
                            }
                        }
                        None => tracing::warn!(
                            "unreadable publication on {}",
                            message.get_channel_name()
                        ),
                    }
                }
                tracing::warn!("redis subscription lost; reconnecting");
            }
            Err(e) => tracing::warn!("redis unreachable for subscriptions: {e}"),
        }
        sink.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        healthy.store(false, Ordering::Release);
        if out.is_closed() {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(std::time::Duration::from_secs(5));
    }
}

/// `cancel \n member \n run id`, or `released \n member \n`.
fn control_payload(control: &Control) -> Option<String> {
    match control {
        Control::Cancel { key, run_id } => Some(format!("cancel\n{}\n{run_id}", member_of(key))),
        Control::Released { key } => Some(format!("released\n{}\n", member_of(key))),
        Control::Resync => None,
    }
}

fn parse_control(payload: &[u8]) -> Option<Control> {
    let text = std::str::from_utf8(payload).ok()?;
    let mut parts = text.splitn(3, '\n');
    match (parts.next()?, parts.next(), parts.next()) {
        ("cancel", Some(member), Some(run_id)) => Some(Control::Cancel {
            key: key_of_member(member)?,
            run_id: run_id.to_owned(),
        }),
        ("released", Some(member), _) => Some(Control::Released {
            key: key_of_member(member)?,
        }),
        _ => None,
    }
}

/// Records this node alive and renews its leases every third of their time
/// to live, in one script call. A lease Redis no longer has as ours, or one not confirmed
/// for a whole time to live (Redis unreachable: another node may take over
/// once it expires), is lost: its run is told to stop.
async fn heartbeat(
    mut conn: ConnectionManager,
    held: Arc<DashMap<String, HeldLease>>,
    (ttl, nodes, instance): (std::time::Duration, String, String),
    healthy: Arc<AtomicBool>,
) {
    let script = Script::new(RENEW);
    let mut tick = tokio::time::interval(ttl / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let leases: Vec<(String, Arc<str>)> = held
            .iter()
            .map(|l| (l.key().clone(), l.value.clone()))
            .collect();
        let mut invocation = script.prepare_invoke();
        invocation
            .key(&nodes)
            .arg(ttl.as_millis() as u64)
            .arg(&instance);
        for (key, value) in &leases {
            invocation.key(key).arg(&value[..]);
        }
        let now = std::time::Instant::now();
        match invocation.invoke_async::<Vec<i64>>(&mut conn).await {
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

/// `node \n member \n first seq \n` then `<len>:<json>` per event.
fn parse_publication(payload: &[u8]) -> Option<(String, Publication)> {
    let mut parts = payload.splitn(4, |b| *b == b'\n');
    let node = std::str::from_utf8(parts.next()?).ok()?.to_owned();
    let key = key_of_member(std::str::from_utf8(parts.next()?).ok()?)?;
    let first: u64 = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    let mut rest = parts.next()?;
    let mut events = Vec::new();
    while !rest.is_empty() {
        let colon = rest.iter().position(|b| *b == b':')?;
        let len: usize = std::str::from_utf8(&rest[..colon]).ok()?.parse().ok()?;
        let json = rest.get(colon + 1..colon + 1 + len)?;
        events.push((first + events.len() as u64, Bytes::copy_from_slice(json)));
        rest = &rest[colon + 1 + len..];
    }
    Some((node, Publication { key, events }))
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
    fn append(&self, batch: AppendBatch) -> AppendAck {
        let (tx, rx) = oneshot::channel();
        if let Err(mpsc::error::SendError((_, ack))) = self.writer.send((batch, tx)) {
            let _ = ack.send(Err(StoreError::failed("journal writer stopped")));
        }
        rx
    }

    fn load(&self, key: &ThreadKey) -> Result<Option<StoredThread>, StoreError> {
        self.load_after(key, 0)
    }

    fn load_after(&self, key: &ThreadKey, after: u64) -> Result<Option<StoredThread>, StoreError> {
        let keys = Keys::of(&self.prefix, key);
        let mut conn = self.conn.clone();
        let hash: HashMap<String, Vec<u8>> = self.block_on(conn.hgetall(&keys.meta))?;
        let Some(meta) = meta_from_hash(&hash) else {
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
        Ok(Some(StoredThread { meta, base, events }))
    }

    fn list(&self, tenant: &str) -> Result<Vec<(ThreadKey, ThreadMeta)>, StoreError> {
        let mut conn = self.conn.clone();
        let index = format!("{}:threads:{}", self.prefix, escape(tenant));
        let members: Vec<String> = self.block_on(conn.zrevrange(&index, 0, -1))?;
        let mut pipe = ::redis::pipe();
        let keys: Vec<ThreadKey> = members.iter().filter_map(|m| key_of_member(m)).collect();
        for key in &keys {
            pipe.hgetall(Keys::of(&self.prefix, key).meta);
        }
        let hashes: Vec<HashMap<String, Vec<u8>>> = self.block_on(pipe.query_async(&mut conn))?;
        let mut out: Vec<(ThreadKey, ThreadMeta)> = keys
            .into_iter()
            .zip(hashes)
            .filter_map(|(k, h)| Some((k, meta_from_hash(&h)?)))
            .collect();
        out.sort_by(|a, b| b.1.updated_ms.cmp(&a.1.updated_ms).then(a.0.cmp(&b.0)));
        Ok(out)
    }

    fn running(&self) -> Result<Vec<ThreadKey>, StoreError> {
        let mut conn = self.conn.clone();
        let members: Vec<String> =
            self.block_on(conn.smembers(format!("{}:running", self.prefix)))?;
        Ok(members.iter().filter_map(|m| key_of_member(m)).collect())
    }

    fn ping(&self) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let pong: String = self.block_on(::redis::cmd("PING").query_async(&mut conn))?;
        (pong == "PONG")
            .then_some(())
            .ok_or_else(|| StoreError::failed(format!("PING answered {pong}")))
    }

    fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }
}

impl PublicationBus for RedisStore {
    /// Nothing to do: the append script published the batch already.
    fn announce(&self, _: Publication) {}

    fn watch(&self, key: &ThreadKey) -> BoxFuture<'static, Result<(), StoreError>> {
        let channel = Keys::of(&self.prefix, key).channel;
        self.watched.insert(channel.clone(), ());
        let sink = self
            .sink
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        Box::pin(async move {
            match sink {
                Some(mut sink) => sink.subscribe(channel).await.map_err(StoreError::failed),
                // Subscribed when the connection is back.
                None => Err(StoreError::failed("redis subscription down")),
            }
        })
    }

    fn unwatch(&self, key: &ThreadKey) {
        let channel = Keys::of(&self.prefix, key).channel;
        self.watched.remove(&channel);
        let sink = self
            .sink
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let watched = self.watched.clone();
        if let Some(mut sink) = sink {
            tokio::spawn(async move {
                // Watched again meanwhile: keep it.
                if !watched.contains_key(&channel) {
                    let _ = sink.unsubscribe(channel).await;
                }
            });
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

impl SharedCounters for RedisStore {
    fn take(
        &self,
        key: &str,
        limit: u32,
        window: std::time::Duration,
    ) -> BoxFuture<'static, Result<Option<std::time::Duration>, StoreError>> {
        let mut conn = self.conn.clone();
        let key = format!("{}:rate:{key}", self.prefix);
        let window_ms = window.as_millis().max(1) as u64;
        let interval = (window_ms / u64::from(limit.max(1))).max(1);
        Box::pin(async move {
            let wait: u64 = Script::new(TAKE)
                .key(key)
                .arg(interval)
                .arg(window_ms)
                .invoke_async(&mut conn)
                .await
                .map_err(StoreError::failed)?;
            Ok((wait > 0).then(|| std::time::Duration::from_millis(wait)))
        })
    }

    fn open(&self, key: &str, limit: u32) -> BoxFuture<'static, Result<bool, StoreError>> {
        let mut conn = self.conn.clone();
        let key = format!("{}:conns:{key}", self.prefix);
        let nodes = format!("{}:nodes", self.prefix);
        let instance = self.instance.clone();
        // A node's heartbeat comes every third of the lease's time to live.
        let stale = self.lease_ttl.as_millis() as u64;
        Box::pin(async move {
            let opened: i64 = Script::new(OPEN)
                .key(key)
                .key(nodes)
                .arg(instance)
                .arg(limit)
                .arg(stale)
                .invoke_async(&mut conn)
                .await
                .map_err(StoreError::failed)?;
            Ok(opened == 1)
        })
    }

    fn close(&self, key: &str) {
        let mut conn = self.conn.clone();
        let key = format!("{}:conns:{key}", self.prefix);
        let instance = self.instance.clone();
        tokio::spawn(async move {
            let closed: ::redis::RedisResult<i64> = Script::new(CLOSE)
                .key(&key)
                .arg(instance)
                .invoke_async(&mut conn)
                .await;
            if let Err(e) = closed {
                // Counted until this node's heartbeat goes stale (a restart
                // starts a new instance): a cap errs on the strict side.
                tracing::warn!(key = %key, "uncounting a closed connection failed (redis): {e}");
            }
        });
    }
}

impl RunLeases for RedisStore {
    fn acquire(
        &self,
        key: &ThreadKey,
        run_id: &str,
        seen_last_seq: u64,
        creator: &str,
    ) -> BoxFuture<'static, Result<Acquired, StoreError>> {
        let keys = Keys::of(&self.prefix, key);
        let value: Arc<str> =
            Arc::from(format!("{}\n{}\n{run_id}", uuid::Uuid::new_v4(), self.node));
        let mut conn = self.conn.clone();
        let held = self.held.clone();
        let ttl = self.lease_ttl;
        let creator = creator.to_owned();
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
                .invoke_async(&mut conn)
                .await
                .map_err(StoreError::failed)?;
            Ok(match answer {
                1 => {
                    let lost = CancellationToken::new();
                    held.insert(
                        keys.lease,
                        HeldLease {
                            value: value.clone(),
                            lost: lost.clone(),
                            confirmed: std::time::Instant::now(),
                        },
                    );
                    Acquired::Granted(Lease { token: value, lost })
                }
                0 => Acquired::Held {
                    run_id: holder.rsplit('\n').next().unwrap_or_default().to_owned(),
                },
                _ => Acquired::Stale,
            })
        })
    }

    fn release(&self, key: &ThreadKey, lease: &Lease) {
        let keys = Keys::of(&self.prefix, key);
        self.held
            .remove_if(&keys.lease, |_, l| l.value == lease.token);
        let mut conn = self.conn.clone();
        let value = lease.token.clone();
        let channel = format!("{}:ctl", self.prefix);
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
        let channel = format!("{}:ctl", self.prefix);
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
        let mut conn = self.conn.clone();
        let prefix = self.prefix.clone();
        Box::pin(async move {
            let members: Vec<String> = conn
                .smembers(format!("{prefix}:running"))
                .await
                .map_err(StoreError::failed)?;
            let keys: Vec<ThreadKey> = members.iter().filter_map(|m| key_of_member(m)).collect();
            if keys.is_empty() {
                return Ok(keys);
            }
            let mut pipe = ::redis::pipe();
            for key in &keys {
                pipe.exists(Keys::of(&prefix, key).lease);
            }
            let leased: Vec<bool> = pipe
                .query_async(&mut conn)
                .await
                .map_err(StoreError::failed)?;
            Ok(keys
                .into_iter()
                .zip(leased)
                .filter(|(_, leased)| !leased)
                .map(|(key, _)| key)
                .collect())
        })
    }

    fn shared(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_publications_round_trip_whatever_the_ids_hold() {
        for (tenant, thread) in [("t", "th"), ("a/b", "{x}:y%"), ("é", "\n/")] {
            let key = ThreadKey::new(tenant, thread);
            let member = member_of(&key);
            assert_eq!(member.matches('/').count(), 1, "{member}");
            assert!(!member.contains('{') && !member.contains('}'));
            assert_eq!(key_of_member(&member), Some(key.clone()));
            let payload = format!("n1\n{member}\n7\n2:{{}}11:{{\"a\":\"b:c\"}}");
            let (node, p) = parse_publication(payload.as_bytes()).unwrap();
            assert_eq!(node, "n1");
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
            parse_publication(b"n1\nt/x\n1\n99:{}").is_none(),
            "truncated"
        );
    }
}
