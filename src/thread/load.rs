//! Loading a thread's copy from what the store holds: at first use, after
//! the store lost history ([`super::journal_lost`]) and after a failed write
//! ([`super::recovery`]). One function, so a reloaded copy is exactly what a
//! fresh load gives (fold, run ids, meta idempotency keys, each event's run).

use super::*;
use crate::store::StoredThread;

impl Inner {
    /// Replaces this copy with `stored` (a thread as loaded); `None`, the
    /// store holds nothing of it any more: an empty journal, same creator.
    /// The runIds already used stay refused.
    pub(super) fn fill(&mut self, id: &Arc<str>, stored: Option<StoredThread>) {
        let stored = stored.unwrap_or_else(|| StoredThread {
            meta: ThreadMeta {
                agent: None,
                status: "idle".into(),
                last_seq: 0,
                updated_ms: now_millis(),
                ..self.meta.clone()
            },
            base: None,
            events: Vec::new(),
        });
        self.meta = stored.meta;
        self.fold = Fold::new();
        self.journal.clear();
        self.base_seq = 0;
        self.arrived.clear();
        self.meta_ids = recent::Recent::new(META_IDS_KEPT);
        self.meta_notes.load_base(None);
        if let Some((base_seq, snapshot)) = &stored.base {
            let v: Value = serde_json::from_slice(snapshot).unwrap_or_default();
            let run = v.get("run").and_then(|r| {
                Some(RunInfo {
                    run_id: r.get("runId")?.as_str()?.to_owned(),
                    status: match r.get("status")?.as_str()? {
                        "running" => RunStatus::Running,
                        "interrupted" => RunStatus::Interrupted,
                        "cancelled" => RunStatus::Cancelled,
                        "error" => RunStatus::Error,
                        _ => RunStatus::Finished,
                    },
                    agent: r
                        .get("agent")
                        .map_or(RunAgent::Unknown, RunAgent::from_json),
                })
            });
            self.fold = Fold::from_json(&v, run);
            self.meta_notes.load_base(v.get("metaNotes"));
            for id in v
                .get("runIds")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(id) = id.as_str() {
                    self.runs.remember(id);
                }
            }
            self.base_seq = *base_seq;
            self.fold.seq = *base_seq;
        }
        for (seq, json) in stored.events {
            match Event::parse(json) {
                Ok(event) => {
                    let entry = Arc::new(Entry::new(id.clone(), seq, event));
                    if let (EventType::Meta, Some(cid), Some(eid)) = (
                        entry.event.kind(),
                        entry.event.str_field("clientEventId"),
                        entry.event.str_field("id"),
                    ) {
                        self.meta_ids.insert(cid.to_owned(), eid.to_owned());
                    }
                    if *entry.event.kind() == EventType::Meta {
                        self.meta_notes.note(&entry.event);
                    }
                    if *entry.event.kind() == EventType::RunStarted
                        && let Some(run_id) = entry.event.str_field("runId")
                    {
                        self.runs.remember(run_id);
                    }
                    entry.set_origin(self.fold.apply(seq, &entry.event));
                    self.journal.push_back(&entry);
                }
                Err(e) => {
                    tracing::error!(thread = %id, seq, "unreadable journal event skipped: {e}")
                }
            }
        }
        self.next_seq = self.fold.seq.max(self.meta.last_seq) + 1;
        self.next_assign = self.next_seq;
    }
}
