//! The journal writer: one task sends queued batches in order, as
//! pipelines of [`APPEND`] scripts (group commit).

use super::scripts::APPEND;

use super::*;

/// Most batches sent in one pipeline.
pub(super) const MAX_PIPELINE: usize = 64;

/// Sends queued batches in order, as pipelines of [`APPEND`] scripts.
pub(super) async fn write_loop(
    conn: Conn,
    mut queue: mpsc::UnboundedReceiver<(AppendBatch, Ack)>,
    healthy: Arc<AtomicBool>,
    names: KeyNamer,
    instance: String,
    journals: Arc<Journals>,
) {
    let script = Script::new(APPEND);
    // Runs (by fence) one of whose batches failed: their later batches are
    // refused unsent, so the journal never holds a run's events after a
    // hole (seqs are assigned here, so a hole would show no gap). Only the
    // batch that closes such a run is written. Bounded: a run is in here
    // from its failure to its closing batch.
    let mut failed_runs: std::collections::HashSet<Arc<str>> = Default::default();
    while let Some(first) = queue.recv().await {
        let mut group = Vec::with_capacity(MAX_PIPELINE);
        let mut next = Some(first);
        while let Some((batch, ack)) = next.take() {
            match &batch.fence {
                Some(fence) if failed_runs.contains(fence) => {
                    if batch.closes_failed_run {
                        failed_runs.remove(fence);
                        group.push((batch, ack));
                    } else {
                        let _ = ack.send(Err(StoreError::failed(
                            "an earlier batch of this run failed",
                        )));
                    }
                }
                _ => group.push((batch, ack)),
            }
            if group.len() < MAX_PIPELINE {
                next = queue.try_recv().ok();
            }
        }
        if group.is_empty() {
            continue;
        }
        // A cluster runs a pipeline on one slot: one per slot group, sent
        // at once (each in queue order, so a thread's batches stay in order).
        let parts = by_slot_group(group, &names);
        let sends = parts.iter().map(|part| {
            let mut conn = conn.clone();
            let (pipe, sent) = append_pipeline(&script, part, &names, &instance, &journals);
            let script = &script;
            async move { (send(&mut conn, script, &pipe).await, sent) }
        });
        let results = futures::future::join_all(sends).await;
        for (part, (results, sent)) in parts.into_iter().zip(results) {
            settle(part, sent, results, &healthy, &mut failed_runs, &journals);
        }
    }
}

/// `group` split by slot group, each part in queue order (one part on one
/// Redis).
fn by_slot_group(group: Vec<(AppendBatch, Ack)>, names: &KeyNamer) -> Vec<Vec<(AppendBatch, Ack)>> {
    if !names.sharded() {
        return vec![group];
    }
    let mut parts: Vec<(String, Vec<(AppendBatch, Ack)>)> = Vec::new();
    for (batch, ack) in group {
        let tag = super::keys::hash_tag(&names.thread(&batch.key).meta).to_owned();
        match parts.iter_mut().find(|(t, _)| *t == tag) {
            Some((_, part)) => part.push((batch, ack)),
            None => parts.push((tag, vec![(batch, ack)])),
        }
    }
    parts.into_iter().map(|(_, part)| part).collect()
}

/// Sends one pipeline of appends; loads the script and sends it again when
/// Redis does not have it (restarted, its cache flushed, a new master).
async fn send(
    conn: &mut Conn,
    script: &Script,
    pipe: &::redis::Pipeline,
) -> ::redis::RedisResult<Vec<(i64, RedisValue, String)>> {
    let results = pipe.query_async(conn).await;
    if results
        .as_ref()
        .is_err_and(|e| e.to_string().to_lowercase().contains("noscript"))
    {
        // Nothing ran: load the script and send the same pipeline again.
        if let Err(e) = script.prepare_invoke().load_async(conn).await {
            tracing::warn!("loading the append script failed: {e}");
        }
        return pipe.query_async(conn).await;
    }
    results
}

/// Answers each batch of a sent pipeline (`sent`: what the node knew of
/// each batch's journal when it was sent).
fn settle(
    group: Vec<(AppendBatch, Ack)>,
    sent: Vec<Sent>,
    results: ::redis::RedisResult<Vec<(i64, RedisValue, String)>>,
    healthy: &AtomicBool,
    failed_runs: &mut std::collections::HashSet<Arc<str>>,
    journals: &Journals,
) {
    match results {
        Ok(results) => {
            healthy.store(true, Ordering::Release);
            let answers = group.into_iter().zip(sent).zip(results);
            for (((batch, ack), sent), (ok, answer, epoch)) in answers {
                let result = match (ok, answer) {
                    (1, RedisValue::Int(first)) => {
                        let last = first as u64 + batch.events.len() as u64 - 1;
                        // Checked by the script: this is the journal known.
                        let _ = journals.observe(&member_of(&batch.key), Some(&epoch), last, None);
                        Ok(first as u64)
                    }
                    (4, stored) => {
                        let stored = match stored {
                            RedisValue::BulkString(e) if !e.is_empty() => {
                                String::from_utf8_lossy(&e).into_owned()
                            }
                            _ => "gone".to_owned(),
                        };
                        // Written for a history the node has reloaded
                        // since: refused, and no news.
                        let member = member_of(&batch.key);
                        if let Mismatch::Lost(known) = journals.refused(&member, &sent) {
                            journals.lost(
                                Some(&member),
                                &format!(
                                    "thread {:?} of tenant {:?}",
                                    batch.key.thread_id, batch.key.tenant
                                ),
                                &format!("an append found epoch {stored} {known}"),
                            );
                        }
                        Err(StoreError::JournalLost)
                    }
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
            for (batch, ack) in group {
                if let Some(fence) = batch.fence
                    && !batch.closes_failed_run
                {
                    failed_runs.insert(fence);
                }
                let _ = ack.send(Err(StoreError::failed(&e)));
            }
        }
    }
}

/// One [`APPEND`] invocation per batch, in queue order, and what the node
/// knew of each batch's journal (what the script checks it against).
pub(super) fn append_pipeline(
    script: &Script,
    group: &[(AppendBatch, Ack)],
    names: &KeyNamer,
    instance: &str,
    journals: &Journals,
) -> (::redis::Pipeline, Vec<Sent>) {
    let mut pipe = ::redis::pipe();
    let mut sent = Vec::with_capacity(group.len());
    for (batch, _) in group {
        let keys = names.thread(&batch.key);
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
            .arg(instance)
            .arg(&keys.member)
            .arg(&keys.channel)
            .arg(names.publish_command())
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
            .arg(names.control())
            .arg(batch.idempotency.as_ref().map_or("", |(_, id)| id.as_str()));
        let known = journals.sent(&keys.member);
        let (epoch, seen) = known.expected();
        invocation
            .arg(epoch)
            .arg(seen)
            .arg(uuid::Uuid::new_v4().to_string());
        sent.push(known);
        for (_, json) in &batch.events {
            invocation.arg(&json[..]);
        }
        pipe.invoke_script(&invocation);
    }
    (pipe, sent)
}
