//! Chunk normalization: `*_CHUNK` events expanded to start/content/end.
//!
//! Agents may stream `TEXT_MESSAGE_CHUNK`, `TOOL_CALL_CHUNK` and
//! `REASONING_MESSAGE_CHUNK`, which leave opening and closing implicit. The
//! journal, the fold and the verifier all want explicit pairs, so the gateway
//! expands chunks the way the AG-UI client's `transformChunks` does: one open
//! "lane" per subagent (the parent agent is the `None` lane); a chunk continues
//! its lane's open stream or closes it and opens a new one; most other events
//! close their lane first, run boundaries and `MESSAGES_SNAPSHOT` close all.
//! Because the client applies the same transform, a client sees the same
//! events whether or not the gateway expanded them.

use super::event::{Event, EventType};
use serde_json::{Map, Value};

/// Why a chunk could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ChunkError(pub String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Tool,
    Reasoning,
}

impl Kind {
    fn id_field(self) -> &'static str {
        match self {
            Kind::Tool => "toolCallId",
            _ => "messageId",
        }
    }
    fn chunk_name(self) -> &'static str {
        match self {
            Kind::Text => "TEXT_MESSAGE_CHUNK",
            Kind::Tool => "TOOL_CALL_CHUNK",
            Kind::Reasoning => "REASONING_MESSAGE_CHUNK",
        }
    }
    fn entity(self) -> &'static str {
        match self {
            Kind::Text => "text message",
            Kind::Tool => "tool call",
            Kind::Reasoning => "reasoning message",
        }
    }
    /// Fields the chunk schema describes; anything else rides along.
    fn described(self, key: &str) -> bool {
        const COMMON: &[&str] = &["type", "timestamp", "rawEvent", "metadata", "subagentRunId"];
        COMMON.contains(&key)
            || match self {
                Kind::Text => matches!(key, "messageId" | "role" | "delta" | "name"),
                Kind::Tool => matches!(
                    key,
                    "toolCallId" | "toolCallName" | "parentMessageId" | "delta"
                ),
                Kind::Reasoning => matches!(key, "messageId" | "delta"),
            }
    }
    fn names(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Kind::Text => (
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
            ),
            Kind::Tool => ("TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"),
            Kind::Reasoning => (
                "REASONING_MESSAGE_START",
                "REASONING_MESSAGE_CONTENT",
                "REASONING_MESSAGE_END",
            ),
        }
    }
}

/// The opener fields of an open lane.
#[derive(Debug, Clone)]
struct Pending {
    kind: Kind,
    id: String,
    subagent: Option<String>,
    /// Text: role, name. Tool: toolCallName, parentMessageId.
    opener: Vec<(&'static str, Option<String>)>,
}

/// Expands chunk events; keeps per-stream lane state, so use one per upstream stream.
#[derive(Debug, Default)]
pub struct ChunkNormalizer {
    lanes: Vec<(Option<String>, Pending)>,
}

impl ChunkNormalizer {
    /// A normalizer with no open lanes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one event and appends what it expands to. Events that are not
    /// chunks come out unchanged (same bytes), preceded by any lane they close.
    pub fn push(&mut self, event: Event, out: &mut Vec<Event>) -> Result<(), ChunkError> {
        use EventType::*;
        let owner = event.subagent_run_id().map(str::to_owned);
        match event.kind() {
            TextMessageChunk => self.chunk(Kind::Text, event, out),
            ToolCallChunk => self.chunk(Kind::Tool, event, out),
            ReasoningMessageChunk => self.chunk(Kind::Reasoning, event, out),
            RunStarted | RunFinished | RunError | MessagesSnapshot => {
                self.close_all(out);
                out.push(event);
                Ok(())
            }
            Raw | ActivitySnapshot | ActivityDelta | ReasoningEncryptedValue | SubagentStarted => {
                out.push(event);
                Ok(())
            }
            SubagentFinished | SubagentError => {
                if owner.is_some() {
                    self.close_lane(&owner, out);
                }
                out.push(event);
                Ok(())
            }
            TextMessageStart
            | TextMessageContent
            | TextMessageEnd
            | ToolCallStart
            | ToolCallArgs
            | ToolCallEnd
            | ToolCallResult
            | StateSnapshot
            | StateDelta
            | Custom
            | StepStarted
            | StepFinished
            | ReasoningStart
            | ReasoningMessageStart
            | ReasoningMessageContent
            | ReasoningMessageEnd
            | ReasoningEnd => {
                self.close_lane(&owner, out);
                out.push(event);
                Ok(())
            }
            // Types the client's transform does not list pass untouched.
            _ => {
                out.push(event);
                Ok(())
            }
        }
    }

    fn lane_index(&self, owner: &Option<String>) -> Option<usize> {
        self.lanes.iter().position(|(o, _)| o == owner)
    }

    fn close_lane(&mut self, owner: &Option<String>, out: &mut Vec<Event>) {
        if let Some(i) = self.lane_index(owner) {
            let (_, pending) = self.lanes.remove(i);
            out.push(end_event(&pending));
        }
    }

    fn close_all(&mut self, out: &mut Vec<Event>) {
        for (_, pending) in self.lanes.drain(..) {
            out.push(end_event(&pending));
        }
    }

    /// Which lane a chunk belongs to (the client's `resolveLane`).
    fn resolve_lane(
        &self,
        kind: Kind,
        id: Option<&str>,
        tag: Option<&str>,
    ) -> Result<Option<String>, ChunkError> {
        if let Some(id) = id {
            if let Some((owner, _)) = self
                .lanes
                .iter()
                .find(|(_, p)| p.kind == kind && p.id == id)
            {
                if let Some(tag) = tag
                    && Some(tag) != owner.as_deref()
                {
                    return Err(ChunkError(format!(
                        "Cannot continue {} '{id}': chunk subagentRunId '{tag}' does not match the open stream's subagent '{}'.",
                        kind.entity(),
                        owner.as_deref().unwrap_or("(the parent agent)")
                    )));
                }
                return Ok(owner.clone());
            }
            return Ok(tag.map(str::to_owned));
        }
        if let Some(tag) = tag {
            return Ok(Some(tag.to_owned()));
        }
        if let Some(i) = self.lane_index(&None)
            && self.lanes[i].1.kind == kind
        {
            return Ok(None);
        }
        let candidates: Vec<_> = self.lanes.iter().filter(|(_, p)| p.kind == kind).collect();
        match candidates.len() {
            0 => Ok(None),
            1 => Ok(candidates[0].0.clone()),
            n => Err(ChunkError(format!(
                "Ambiguous {}: it carries neither a {} nor a subagentRunId, but {n} lanes have an open {}.",
                kind.chunk_name(),
                kind.id_field(),
                kind.entity()
            ))),
        }
    }

    fn chunk(&mut self, kind: Kind, chunk: Event, out: &mut Vec<Event>) -> Result<(), ChunkError> {
        let body = chunk.body();
        let id = body.get(kind.id_field()).and_then(Value::as_str);
        let tag = chunk.subagent_run_id();
        let lane = self.resolve_lane(kind, id, tag)?;
        let remainder: Map<String, Value> = body
            .iter()
            .filter(|(k, _)| !kind.described(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let opener_fields: &[&'static str] = match kind {
            Kind::Text => &["role", "name"],
            Kind::Tool => &["toolCallName", "parentMessageId"],
            Kind::Reasoning => &[],
        };

        let mut result: Vec<Map<String, Value>> = Vec::new();
        let open = self
            .lane_index(&lane)
            .map(|i| self.lanes[i].1.clone())
            .filter(|p| p.kind == kind && id.is_none_or(|id| id == p.id));
        let pending = match open {
            Some(p) => {
                for (field, established) in &p.opener {
                    let incoming = body.get(*field).and_then(Value::as_str);
                    if let Some(incoming) = incoming
                        && Some(incoming) != established.as_deref()
                    {
                        return Err(ChunkError(format!(
                            "Cannot continue {} '{}': chunk {field} '{incoming}' does not match the open stream's {field} {}.",
                            kind.entity(),
                            p.id,
                            established
                                .as_deref()
                                .map(|e| format!("'{e}'"))
                                .unwrap_or("(absent)".into())
                        )));
                    }
                }
                p
            }
            None => {
                let mut closed = Vec::new();
                self.close_lane(&lane, &mut closed);
                let Some(id) = id else {
                    return Err(ChunkError(format!(
                        "First {} must have a {}",
                        kind.chunk_name(),
                        kind.id_field()
                    )));
                };
                if kind == Kind::Tool && body.get("toolCallName").and_then(Value::as_str).is_none()
                {
                    return Err(ChunkError(
                        "First TOOL_CALL_CHUNK must have a toolCallName".into(),
                    ));
                }
                let mut opener: Vec<(&'static str, Option<String>)> = opener_fields
                    .iter()
                    .map(|f| (*f, body.get(*f).and_then(Value::as_str).map(str::to_owned)))
                    .collect();
                if kind == Kind::Text && opener[0].1.is_none() {
                    opener[0].1 = Some("assistant".into());
                }
                let pending = Pending {
                    kind,
                    id: id.to_owned(),
                    subagent: tag.map(str::to_owned),
                    opener,
                };
                let mut start = Map::new();
                start.insert("type".into(), kind.names().0.into());
                start.insert(kind.id_field().into(), id.into());
                for (field, value) in &pending.opener {
                    if let Some(v) = value {
                        start.insert((*field).into(), v.clone().into());
                    }
                }
                if kind == Kind::Reasoning {
                    start.insert("role".into(), "reasoning".into());
                }
                if let Some(tag) = tag {
                    start.insert("subagentRunId".into(), tag.into());
                }
                copy(body, &mut start, "metadata");
                out.extend(closed);
                self.lanes.retain(|(o, _)| o != &lane);
                self.lanes.push((lane.clone(), pending.clone()));
                result.push(start);
                pending
            }
        };

        let owner = tag.map(str::to_owned).or(pending.subagent.clone());
        let mut carried = false;
        if body.contains_key("delta") || body.contains_key("rawEvent") {
            let mut content = remainder.clone();
            content.insert("type".into(), kind.names().1.into());
            content.insert(kind.id_field().into(), pending.id.clone().into());
            content.insert(
                "delta".into(),
                body.get("delta").cloned().unwrap_or_else(|| "".into()),
            );
            if let Some(o) = &owner {
                content.insert("subagentRunId".into(), o.clone().into());
            }
            copy(body, &mut content, "metadata");
            copy(body, &mut content, "rawEvent");
            result.push(content);
            carried = true;
        }
        if result.is_empty()
            && (body.contains_key("metadata")
                || body.contains_key("rawEvent")
                || chunk.is_null("subagentRunId")
                || !remainder.is_empty())
        {
            let mut content = remainder.clone();
            content.insert("type".into(), kind.names().1.into());
            content.insert(kind.id_field().into(), pending.id.clone().into());
            content.insert("delta".into(), "".into());
            copy(body, &mut content, "metadata");
            copy(body, &mut content, "rawEvent");
            if let Some(o) = &owner {
                content.insert("subagentRunId".into(), o.clone().into());
            }
            result.push(content);
            carried = true;
        }
        if !remainder.is_empty()
            && !carried
            && let Some(last) = result.last_mut()
        {
            // The synthesized value wins over a same-named chunk field.
            let mut merged = remainder;
            for (k, v) in std::mem::take(last) {
                merged.insert(k, v);
            }
            *last = merged;
        }
        for body in result {
            out.push(Event::from_body(body).expect("synthesized events have a type"));
        }
        Ok(())
    }
}

fn copy(from: &Map<String, Value>, to: &mut Map<String, Value>, key: &str) {
    if let Some(v) = from.get(key) {
        to.insert(key.into(), v.clone());
    }
}

fn end_event(p: &Pending) -> Event {
    let mut end = Map::new();
    end.insert("type".into(), p.kind.names().2.into());
    end.insert(p.kind.id_field().into(), p.id.clone().into());
    if let Some(s) = &p.subagent {
        end.insert("subagentRunId".into(), s.clone().into());
    }
    Event::from_body(end).expect("end event has a type")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(events: &[Value]) -> Result<Vec<Value>, ChunkError> {
        let mut n = ChunkNormalizer::new();
        let mut out = Vec::new();
        for e in events {
            n.push(Event::build(e.clone()), &mut out)?;
        }
        Ok(out
            .into_iter()
            .map(|e| Value::Object(e.into_body()))
            .collect())
    }

    #[test]
    fn text_chunks_expand_and_close_on_run_finished() {
        let out = run(&[
            json!({"type":"RUN_STARTED","threadId":"t","runId":"r"}),
            json!({"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"Hel"}),
            json!({"type":"TEXT_MESSAGE_CHUNK","delta":"lo"}),
            json!({"type":"RUN_FINISHED","threadId":"t","runId":"r"}),
        ])
        .unwrap();
        assert_eq!(
            out,
            vec![
                json!({"type":"RUN_STARTED","threadId":"t","runId":"r"}),
                json!({"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}),
                json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"Hel"}),
                json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"lo"}),
                json!({"type":"TEXT_MESSAGE_END","messageId":"m"}),
                json!({"type":"RUN_FINISHED","threadId":"t","runId":"r"}),
            ]
        );
    }

    #[test]
    fn tool_chunk_then_other_event_closes_lane() {
        let out = run(&[
            json!({"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"f","parentMessageId":"m","delta":"{\"a\""}),
            json!({"type":"TOOL_CALL_CHUNK","toolCallId":"c","delta":":1}"}),
            json!({"type":"STATE_SNAPSHOT","snapshot":{}}),
        ])
        .unwrap();
        assert_eq!(
            out,
            vec![
                json!({"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"f","parentMessageId":"m"}),
                json!({"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"{\"a\""}),
                json!({"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":":1}"}),
                json!({"type":"TOOL_CALL_END","toolCallId":"c"}),
                json!({"type":"STATE_SNAPSHOT","snapshot":{}}),
            ]
        );
    }

    #[test]
    fn new_id_closes_previous_stream_in_lane() {
        let out = run(&[
            json!({"type":"TEXT_MESSAGE_CHUNK","messageId":"a","delta":"x"}),
            json!({"type":"TEXT_MESSAGE_CHUNK","messageId":"b","role":"user","delta":"y"}),
        ])
        .unwrap();
        let types: Vec<_> = out.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT"
            ]
        );
        assert_eq!(out[3]["role"], "user");
    }

    #[test]
    fn reasoning_chunk_and_subagent_lanes_are_separate() {
        let out = run(&[
            json!({"type":"REASONING_MESSAGE_CHUNK","messageId":"r1","delta":"think"}),
            json!({"type":"TEXT_MESSAGE_CHUNK","messageId":"s1","subagentRunId":"sa","delta":"sub"}),
            json!({"type":"SUBAGENT_FINISHED","subagentRunId":"sa"}),
            json!({"type":"RUN_ERROR","message":"x"}),
        ])
        .unwrap();
        let types: Vec<_> = out.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "REASONING_MESSAGE_START",
                "REASONING_MESSAGE_CONTENT",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "SUBAGENT_FINISHED",
                "REASONING_MESSAGE_END",
                "RUN_ERROR"
            ]
        );
        assert_eq!(out[0]["role"], "reasoning");
        assert_eq!(out[4]["subagentRunId"], "sa");
    }

    #[test]
    fn unknown_chunk_fields_ride_on_content_and_metadata_on_both() {
        let out = run(&[json!({"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"x","vendor":7,"metadata":{"k":1},"timestamp":5})]).unwrap();
        assert_eq!(out[0].get("vendor"), None);
        assert_eq!(out[0]["metadata"], json!({"k":1}));
        assert_eq!(out[1]["vendor"], 7);
        assert_eq!(out[1]["metadata"], json!({"k":1}));
    }

    #[test]
    fn remainder_without_delta_rides_on_opener_or_empty_content() {
        // Opening chunk without delta: the remainder lands on the synthesized START.
        let out = run(&[
            json!({"type":"TEXT_MESSAGE_CHUNK","messageId":"m","vendor":true}),
            json!({"type":"TEXT_MESSAGE_CHUNK","messageId":"m","other":1}),
            json!({"type":"TEXT_MESSAGE_CHUNK","messageId":"m"}),
        ])
        .unwrap();
        assert_eq!(
            out,
            vec![
                json!({"vendor":true,"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}),
                // Continuing chunk without delta: an empty CONTENT carries it.
                json!({"other":1,"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":""}),
                // A bare continuing chunk produces nothing.
            ]
        );
    }

    #[test]
    fn non_chunk_events_keep_their_bytes() {
        let mut n = ChunkNormalizer::new();
        let mut out = Vec::new();
        let text = r#"{"type":"CUSTOM", "name":"x","value":1.50}"#;
        n.push(Event::parse(text).unwrap(), &mut out).unwrap();
        assert_eq!(&out[0].json()[..], text.as_bytes());
    }

    #[test]
    fn violations_are_errors() {
        assert!(run(&[json!({"type":"TEXT_MESSAGE_CHUNK","delta":"x"})]).is_err());
        assert!(run(&[json!({"type":"TOOL_CALL_CHUNK","toolCallId":"c"})]).is_err());
        let mismatch = run(&[
            json!({"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"f"}),
            json!({"type":"TOOL_CALL_CHUNK","toolCallId":"c","toolCallName":"g"}),
        ]);
        assert!(mismatch.unwrap_err().0.contains("toolCallName 'g'"));
        let ambiguous = run(&[
            json!({"type":"TEXT_MESSAGE_CHUNK","messageId":"a","subagentRunId":"x","delta":"1"}),
            json!({"type":"TEXT_MESSAGE_CHUNK","messageId":"b","subagentRunId":"y","delta":"1"}),
            json!({"type":"TEXT_MESSAGE_CHUNK","delta":"1"}),
        ]);
        assert!(ambiguous.unwrap_err().0.starts_with("Ambiguous"));
    }
}
