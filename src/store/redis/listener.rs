//! The listening connection: other nodes' publications of the threads this
//! node holds, and the requests between nodes.

use super::*;

/// What a listening loop needs: where to pass what it hears, and the
/// channels to subscribe (again).
pub(super) struct Listening {
    pub(super) names: KeyNamer,
    /// This process: its own publications are skipped.
    pub(super) instance: String,
    pub(super) out: mpsc::UnboundedSender<Publication>,
    pub(super) controls: mpsc::UnboundedSender<Control>,
    pub(super) watched: Arc<DashMap<String, usize>>,
    pub(super) sink: SharedSink,
    pub(super) journals: Arc<Journals>,
    pub(super) healthy: Arc<AtomicBool>,
    /// Where a dropped shard channel is asked for again.
    pub(super) subscriptions: mpsc::UnboundedSender<Subscription>,
}

impl Listening {
    /// Passes on one message; false once nobody listens any more.
    fn hear(&self, channel: &[u8], payload: &[u8]) -> bool {
        if channel == self.names.control().as_bytes() {
            match parse_control(payload) {
                Some(control) => {
                    let _ = self.controls.send(control);
                }
                None => tracing::warn!("unreadable run request between nodes"),
            }
            return true;
        }
        match parse_publication(payload) {
            Some((from, ..)) if from == self.instance => {}
            Some((_, epoch, publication)) => {
                // Written to a journal of another epoch than the one this
                // node holds: the store lost it.
                let member = member_of(&publication.key);
                let last = publication.events.last().map_or(0, |(seq, _)| *seq);
                let why = match self.journals.observe(&member, Some(&epoch), last, None) {
                    Ok(()) => None,
                    // From the history this node's latest reload left:
                    // what the store kept of it was loaded.
                    Err(Mismatch::Stale) => return true,
                    Err(Mismatch::Lost(why)) => Some(why),
                };
                if let Some(why) = why {
                    self.journals.lost(
                        Some(&member),
                        &format!(
                            "thread {:?} of tenant {:?}",
                            publication.key.thread_id, publication.key.tenant
                        ),
                        &format!("another node wrote to it: {why}"),
                    );
                    let _ = self.controls.send(Control::JournalLost {
                        key: publication.key,
                    });
                    return true;
                }
                return self.out.send(publication).is_ok();
            }
            None => tracing::warn!(
                "unreadable publication on {}",
                String::from_utf8_lossy(channel)
            ),
        }
        true
    }
}

/// Receives the publications of the threads this node holds (one channel
/// each, see [`RedisStore`]'s `watch`) and the requests between nodes,
/// passing on those of other nodes; reconnects with backoff, subscribes
/// again to every watched channel, and tells the registry to read back what
/// it may have missed meanwhile ([`Control::Resync`]).
pub(super) async fn listen_loop(
    client: ::redis::Client,
    listening: Listening,
    subscribed: oneshot::Sender<()>,
) {
    use futures::StreamExt;
    let control_channel = listening.names.control();
    let mut subscribed = Some(subscribed);
    let mut backoff = std::time::Duration::from_millis(100);
    loop {
        let connected = async {
            let (mut new_sink, stream) = client.get_async_pubsub().await?.split();
            new_sink.subscribe(&control_channel).await?;
            // Published first, so a channel watched from now on is
            // subscribed by its watcher; the ones before are done here.
            *listening
                .sink
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some(Subscriber::Single(new_sink.clone()));
            let channels: Vec<String> = listening.watched.iter().map(|c| c.key().clone()).collect();
            for chunk in channels.chunks(1024) {
                new_sink.subscribe(chunk).await?;
            }
            Ok::<_, ::redis::RedisError>(stream)
        };
        match connected.await {
            Ok(mut messages) => {
                backoff = std::time::Duration::from_millis(100);
                listening.healthy.store(true, Ordering::Release);
                match subscribed.take() {
                    Some(tell) => {
                        let _ = tell.send(());
                    }
                    None => {
                        tracing::info!("redis subscription back; reading back missed events");
                        let _ = listening.controls.send(Control::Resync);
                    }
                }
                while let Some(message) = messages.next().await {
                    let channel = message.get_channel_name().as_bytes().to_vec();
                    if !listening.hear(&channel, message.get_payload_bytes()) {
                        return; // nobody listens any more
                    }
                }
                tracing::warn!("redis subscription lost; reconnecting");
            }
            Err(e) => tracing::warn!("redis unreachable for subscriptions: {e}"),
        }
        listening
            .sink
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        listening.healthy.store(false, Ordering::Release);
        if listening.out.is_closed() {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(std::time::Duration::from_secs(5));
    }
}

/// The listening side on a Redis Cluster: one RESP3 cluster connection
/// whose pushes carry the control channel (plain pub/sub, heard from any
/// master) and the shard channels of the threads this node holds (each
/// from the master of its slot). The connection follows the cluster: it
/// reconnects and subscribes every channel again on the master that owns
/// it now. Two things are read back ([`Control::Resync`]) because
/// publications may have been missed: a connection lost (once it is
/// subscribed again), and a shard channel the server dropped (its slot
/// changed master: a failover), subscribed again first.
///
/// The connection lives in `listening.sink` only (not in a local here), so
/// that [`resubscribe`] can replace it with a new one and the old one is
/// dropped with its last clone.
pub(super) async fn cluster_listen_loop(
    seeds: Vec<String>,
    tls: Option<::redis::TlsCertificates>,
    listening: Listening,
    subscribed: oneshot::Sender<()>,
) {
    let (pushes, mut heard) = mpsc::unbounded_channel();
    let renewal = Renewal {
        seeds,
        tls,
        pushes,
        control_channel: listening.names.control(),
    };
    let mut backoff = std::time::Duration::from_millis(100);
    let mut conn = loop {
        match renewal.connect().await {
            Ok(conn) => break conn,
            Err(e) => tracing::warn!("redis cluster unreachable for subscriptions: {e}"),
        }
        if listening.out.is_closed() {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(std::time::Duration::from_secs(5));
    };
    set_sink(&listening.sink, &conn);
    let channels: Vec<String> = listening.watched.iter().map(|c| c.key().clone()).collect();
    for channel in channels {
        let _ = conn.ssubscribe(channel).await;
    }
    drop(conn);
    let _ = subscribed.send(());
    let renewal = Arc::new(renewal);
    let mut reconnected = false;
    let resubscribing = Arc::new(AtomicBool::new(false));
    while let Some(push) = heard.recv().await {
        use ::redis::PushKind;
        let channel = match push.data.first() {
            Some(::redis::Value::BulkString(c)) => c.clone(),
            _ => Vec::new(),
        };
        match push.kind {
            PushKind::Message | PushKind::SMessage => {
                let payload = match push.data.get(1) {
                    Some(::redis::Value::BulkString(p)) => &p[..],
                    _ => continue,
                };
                if !listening.hear(&channel, payload) {
                    return;
                }
            }
            PushKind::Disconnection => {
                tracing::warn!("redis cluster subscription lost; reconnecting");
                reconnected = true;
                if !resubscribing.swap(true, Ordering::AcqRel) {
                    tokio::spawn(resubscribe(
                        renewal.clone(),
                        listening.sink.clone(),
                        listening.watched.clone(),
                        listening.controls.clone(),
                        resubscribing.clone(),
                    ));
                }
            }
            PushKind::Subscribe | PushKind::SSubscribe if reconnected => {
                tracing::info!("redis cluster subscription back; reading back missed events");
                reconnected = false;
                let _ = listening.controls.send(Control::Resync);
            }
            PushKind::SUnsubscribe => {
                // Ours (the last holder left) unless still watched.
                let channel = String::from_utf8_lossy(&channel).into_owned();
                if listening.watched.contains_key(&channel) {
                    tracing::info!(channel = %channel, "shard channel moved; subscribing again");
                    let _ = listening.subscriptions.send(Subscription::Again(channel));
                }
            }
            _ => {}
        }
    }
}

/// How a listening connection is built, first and again.
struct Renewal {
    seeds: Vec<String>,
    tls: Option<::redis::TlsCertificates>,
    /// Where every connection's pushes go: one stream for the loop,
    /// whichever connection is current.
    pushes: mpsc::UnboundedSender<::redis::PushInfo>,
    control_channel: String,
}

impl Renewal {
    /// A new cluster connection, subscribed to the control channel.
    async fn connect(&self) -> ::redis::RedisResult<::redis::cluster_async::ClusterConnection> {
        let client =
            super::conn::cluster_client(&self.seeds, self.tls.as_ref(), Some(self.pushes.clone()))?;
        let mut conn = client.get_async_connection().await?;
        conn.subscribe(&self.control_channel).await?;
        Ok(conn)
    }
}

fn set_sink(sink: &SharedSink, conn: &::redis::cluster_async::ClusterConnection) {
    *sink
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) =
        Some(Subscriber::Cluster(conn.clone()));
}

fn current(sink: &SharedSink) -> Option<::redis::cluster_async::ClusterConnection> {
    match &*sink
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
    {
        Some(Subscriber::Cluster(conn)) => Some(conn.clone()),
        _ => None,
    }
}

/// Subscribes every watched shard channel again after a connection to a
/// master was lost, until each is (then reads back what was missed). The
/// client subscribes again by itself on the address it lost; a master that
/// was killed never comes back there, and its promoted replica never heard
/// of the subscription (no `SUNSUBSCRIBE` comes from a dead master either):
/// a node watching one of its threads stayed deaf to it, never read back,
/// and never found the writes the dead master had not replicated (issue 34,
/// `writes_a_killed_master_never_replicated_are_found_lost_and_viewers_reset`).
/// `SSUBSCRIBE` routes by slot, so it goes to the new master once the
/// client's slot map has it; subscribing a channel twice is harmless.
///
/// The client's slot map can also keep the dead master's address (the
/// same flaw the command connection renews itself for, see
/// [`super::conn::Renewed`]): after [`super::conn::RENEW_AFTER`] of
/// failing, a new connection is built from the seeds, made the current
/// one, and every watched channel is subscribed on it.
async fn resubscribe(
    renewal: Arc<Renewal>,
    sink: SharedSink,
    watched: Arc<DashMap<String, usize>>,
    controls: mpsc::UnboundedSender<Control>,
    running: Arc<AtomicBool>,
) {
    let all = || -> Vec<String> { watched.iter().map(|c| c.key().clone()).collect() };
    let mut backoff = std::time::Duration::from_millis(200);
    let mut pending = all();
    let mut failing_since: Option<std::time::Instant> = None;
    while !pending.is_empty() && !controls.is_closed() {
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(std::time::Duration::from_secs(2));
        if failing_since.is_some_and(|since| since.elapsed() >= super::conn::RENEW_AFTER) {
            match renewal.connect().await {
                Ok(conn) => {
                    tracing::warn!(
                        "redis cluster listening connection renewed: a node stayed unreachable"
                    );
                    set_sink(&sink, &conn);
                    pending = all();
                    failing_since = None;
                }
                Err(e) => tracing::warn!("redis cluster listening connection not renewed: {e}"),
            }
        }
        let Some(mut conn) = current(&sink) else {
            break;
        };
        let mut failed = Vec::new();
        for channel in pending {
            if !watched.contains_key(&channel) {
                continue;
            }
            if let Err(e) = conn.ssubscribe(&channel).await {
                tracing::debug!(channel = %channel, "subscribing again failed (retried): {e}");
                failed.push(channel);
            }
        }
        if !failed.is_empty() {
            failing_since.get_or_insert_with(std::time::Instant::now);
        }
        pending = failed;
    }
    running.store(false, Ordering::Release);
    tracing::info!("redis cluster shard channels subscribed again; reading back missed events");
    let _ = controls.send(Control::Resync);
}

pub(super) fn control_payload(control: &Control) -> Option<String> {
    match control {
        Control::Cancel { key, run_id } => Some(format!("cancel\n{}\n{run_id}", member_of(key))),
        Control::Released { key } => Some(format!("released\n{}\n", member_of(key))),
        Control::Resync | Control::JournalLost { .. } => None,
    }
}

pub(super) fn parse_control(payload: &[u8]) -> Option<Control> {
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

/// `instance \n member \n first seq \n epoch \n` then `<len>:<json>` per
/// event; the instance, the journal's epoch, and the publication.
pub(super) fn parse_publication(payload: &[u8]) -> Option<(String, String, Publication)> {
    let mut parts = payload.splitn(5, |b| *b == b'\n');
    let node = std::str::from_utf8(parts.next()?).ok()?.to_owned();
    let key = key_of_member(std::str::from_utf8(parts.next()?).ok()?)?;
    let first: u64 = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    let epoch = std::str::from_utf8(parts.next()?).ok()?.to_owned();
    let mut rest = parts.next()?;
    let mut events = Vec::new();
    while !rest.is_empty() {
        let colon = rest.iter().position(|b| *b == b':')?;
        let len: usize = std::str::from_utf8(&rest[..colon]).ok()?.parse().ok()?;
        let json = rest.get(colon + 1..colon + 1 + len)?;
        events.push((first + events.len() as u64, Bytes::copy_from_slice(json)));
        rest = &rest[colon + 1 + len..];
    }
    Some((node, epoch, Publication { key, events }))
}
