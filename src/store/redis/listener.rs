//! The listening connection: other nodes' publications of the threads this
//! node holds, and the requests between nodes.

use super::*;

/// Receives the publications of the threads this node holds (one channel
/// each, see [`RedisStore`]'s `watch`) and the requests between nodes,
/// passing on those of other nodes; reconnects with backoff, subscribes
/// again to every watched channel, and tells the registry to read back what
/// it may have missed meanwhile ([`Control::Resync`]).
pub(super) async fn listen_loop(
    client: ::redis::Client,
    (prefix, instance): (String, String),
    (out, controls): (
        mpsc::UnboundedSender<Publication>,
        mpsc::UnboundedSender<Control>,
    ),
    (watched, sink, journals): (Arc<DashMap<String, usize>>, SharedSink, Arc<Journals>),
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
                        Some((from, ..)) if from == instance => {}
                        Some((_, epoch, publication)) => {
                            // Written to a journal of another epoch than
                            // the one this node holds: the store lost it.
                            let member = member_of(&publication.key);
                            let last = publication.events.last().map_or(0, |(seq, _)| *seq);
                            if let Err(why) = journals.observe(&member, Some(&epoch), last, None) {
                                journals.lost(
                                    &format!(
                                        "thread {:?} of tenant {:?}",
                                        publication.key.thread_id, publication.key.tenant
                                    ),
                                    &format!("another node wrote to it: {why}"),
                                );
                                let _ = controls.send(Control::JournalLost {
                                    key: publication.key,
                                });
                                continue;
                            }
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
