//! A small scripted AG-UI agent, so a newcomer sees the gateway work with
//! nothing else installed.
//!
//! It is a real HTTP server on a loopback port: the gateway reaches it exactly
//! as it reaches any agent (config `url = "demo:"` resolves to its address),
//! so the demo exercises the full upstream path. A run shows what real agents
//! send: reasoning, a server-side tool call with its result, `STATE_SNAPSHOT`
//! and `STATE_DELTA`, streamed text. Ask it to "transfer", "delete" or
//! "approve" something and it stops with an interrupt
//! (`outcome.type = "interrupt"`) proposing the transfer the message asked
//! for ([`transfer`]); send the answer in `resume` and it carries on.

pub mod transfer;

use crate::config::DemoConfig;
use crate::protocol::event::now_millis;
use crate::protocol::input::{Content, ContentPart, Message, ResumeStatus};
use crate::protocol::sse::encode_data;
use crate::protocol::{Event, RunAgentInput};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::BytesMut;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use transfer::{Pending, Transfer};

/// Starts the demo agent; returns the address it listens on.
pub async fn start(cfg: &DemoConfig) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(&cfg.listen).await?;
    let addr = listener.local_addr()?;
    let delay = cfg.token_delay;
    let pending = Arc::new(Pending::default());
    let app = Router::new().route(
        "/agent",
        post(move |body: Bytes| run(body, delay, pending.clone())),
    );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("demo agent stopped: {e}");
        }
    });
    tracing::info!(%addr, "demo agent listening");
    Ok(addr)
}

async fn run(body: Bytes, delay: Duration, pending: Arc<Pending>) -> Response {
    let input = match RunAgentInput::from_json(&body) {
        Ok(i) => i,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let script = script(&input, &pending);
    let frames = futures::stream::unfold(script.into_iter(), move |mut steps| async move {
        let (pause, mut event) = steps.next()?;
        if pause {
            tokio::time::sleep(delay).await;
        }
        // Stamped when sent, so timestamps show the streaming pace.
        event["timestamp"] = now_millis().into();
        let event = Event::build(event);
        let mut buf = BytesMut::new();
        encode_data(event.json(), None, &mut buf);
        Some((Ok::<_, std::convert::Infallible>(buf.freeze()), steps))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(frames))
        .expect("static response parts")
}

/// The text of the newest user message.
fn last_user_text(input: &RunAgentInput) -> String {
    input
        .messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::User(u) => Some(match &u.content {
                Content::Text(t) => t.clone(),
                Content::Parts(parts) => parts
                    .iter()
                    .filter_map(|p| match p {
                        ContentPart::Text(t) => Some(t.text.as_str()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join(" "),
            }),
            _ => None,
        })
        .unwrap_or_default()
}

/// The arguments of tool call `id` in the run's history, when the client
/// sent it (a WebSocket run always has it: the gateway adds the thread's
/// history; an HTTP run has what the client sent).
fn proposed_in_history(input: &RunAgentInput, id: &str) -> Option<Transfer> {
    input.messages.iter().rev().find_map(|m| match m {
        Message::Assistant(a) => a
            .tool_calls
            .iter()
            .flatten()
            .find(|c| c.id == id)
            .and_then(|c| serde_json::from_str(&c.function.arguments).ok())
            .and_then(|args: Value| Transfer::from_json(&args)),
        _ => None,
    })
}

/// Words that make the demo ask for approval first.
const NEEDS_APPROVAL: &[&str] = &["transfer", "delete", "approve"];

/// A run as (pause-before?, event) steps; events get their timestamp when
/// sent. `pending`: the proposals this agent is waiting to hear about.
fn script(input: &RunAgentInput, pending: &Pending) -> Vec<(bool, Value)> {
    let ids = Ids::new(&input.run_id);
    let mut s = Script::default();
    s.emit(json!({"type":"RUN_STARTED","threadId":input.thread_id,"runId":input.run_id,"protocolVersion":crate::protocol::PROTOCOL_VERSION}));

    if let Some(resume) = input.resume.as_ref().filter(|r| !r.is_empty()) {
        let answer = &resume[0];
        let payload = answer
            .payload
            .as_ref()
            .filter(|_| answer.status == ResumeStatus::Resolved);
        let field = |name: &str| payload.and_then(|p| p.get(name));
        let approved = field("approved").and_then(Value::as_bool).unwrap_or(false);
        let call_id = answer
            .interrupt_id
            .strip_prefix("int-")
            .unwrap_or(&answer.interrupt_id);
        // What was proposed: as the history shows it, else as remembered
        // (an answer without history), else the defaults (an agent restarted).
        let remembered = pending.answered(&answer.interrupt_id);
        let proposed = proposed_in_history(input, call_id)
            .or(remembered)
            .unwrap_or_default();
        // The answer may edit what was proposed: the transfer made is the answered one.
        let amount = field("amount")
            .filter(|a| a.is_number())
            .cloned()
            .unwrap_or(proposed.amount.into());
        let to = field("to")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .unwrap_or(proposed.to.as_str());
        let result = if approved {
            "transfer executed"
        } else {
            "transfer declined by user"
        };
        s.emit(json!({"type":"TOOL_CALL_RESULT","messageId":ids.make("result"),"toolCallId":call_id,"content":result,"role":"tool"}));
        let mut delta = vec![
            json!({"op":"add","path":"/approval","value": if approved {"approved"} else {"declined"}}),
        ];
        if approved {
            delta.push(json!({"op":"add","path":"/transfer","value":{"amount":amount,"to":to}}));
        }
        s.emit(json!({"type":"STATE_DELTA","delta":delta}));
        let reply = if approved {
            format!("Done: the transfer of {amount} to {to} went through.")
        } else {
            "Understood, I did not make the transfer.".to_owned()
        };
        s.text(&ids.make("reply"), &reply);
        s.emit(json!({"type":"RUN_FINISHED","threadId":input.thread_id,"runId":input.run_id,"outcome":{"type":"success"}}));
        return s.steps;
    }

    let question = last_user_text(input);
    let turns = input
        .state
        .as_ref()
        .and_then(|st| st.get("turns"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    s.emit(json!({"type":"STATE_SNAPSHOT","snapshot":{"turns":turns,"topic":question}}));

    let reasoning_id = ids.make("reasoning");
    s.emit(json!({"type":"REASONING_START","messageId":reasoning_id}));
    s.emit(json!({"type":"REASONING_MESSAGE_START","messageId":reasoning_id,"role":"reasoning"}));
    for word in ["Let", " me", " look", " that", " up."] {
        s.pause(json!({"type":"REASONING_MESSAGE_CONTENT","messageId":reasoning_id,"delta":word}));
    }
    s.emit(json!({"type":"REASONING_MESSAGE_END","messageId":reasoning_id}));
    s.emit(json!({"type":"REASONING_END","messageId":reasoning_id}));

    let lower = question.to_lowercase();
    if NEEDS_APPROVAL.iter().any(|w| lower.contains(w)) {
        let msg_id = ids.make("ask");
        s.text(&msg_id, "This needs your approval first.");
        let call_id = ids.make("call");
        let interrupt_id = format!("int-{call_id}");
        let asked = Transfer::asked_in(&question);
        let proposal = asked.to_json();
        pending.remember(&interrupt_id, asked);
        let args = proposal.to_string();
        s.emit(json!({"type":"TOOL_CALL_START","toolCallId":call_id,"toolCallName":"transfer_funds","parentMessageId":msg_id}));
        s.pause(json!({"type":"TOOL_CALL_ARGS","toolCallId":call_id,"delta":args}));
        s.emit(json!({"type":"TOOL_CALL_END","toolCallId":call_id}));
        s.emit(
            json!({"type":"RUN_FINISHED","threadId":input.thread_id,"runId":input.run_id,"outcome":{
                "type":"interrupt",
                "interrupts":[{
                    "id": interrupt_id,
                    "reason":"tool_call",
                    "message": format!("Approve transfer_funds({args})?"),
                    "toolCallId": call_id,
                    // What is proposed, under the names the answer uses to change it.
                    "metadata": proposal,
                    "responseSchema": {"type":"object","properties":{
                        "approved":{"type":"boolean"},
                        "amount":{"type":"number","description":"amount to send"},
                        "to":{"type":"string","description":"account to send it to"}
                    },"required":["approved"]}
                }]
            }}),
        );
        return s.steps;
    }

    let msg_id = ids.make("msg");
    let call_id = ids.make("call");
    s.emit(json!({"type":"TEXT_MESSAGE_START","messageId":msg_id,"role":"assistant"}));
    s.emit(json!({"type":"TEXT_MESSAGE_END","messageId":msg_id}));
    s.emit(json!({"type":"TOOL_CALL_START","toolCallId":call_id,"toolCallName":"lookup","parentMessageId":msg_id}));
    s.pause(json!({"type":"TOOL_CALL_ARGS","toolCallId":call_id,"delta":"{\"q\": "}));
    s.pause(json!({"type":"TOOL_CALL_ARGS","toolCallId":call_id,"delta":json!(question).to_string() + "}"}));
    s.emit(json!({"type":"TOOL_CALL_END","toolCallId":call_id}));
    s.pause(json!({"type":"TOOL_CALL_RESULT","messageId":ids.make("result"),"toolCallId":call_id,"content":format!("{} characters, {} words", question.chars().count(), question.split_whitespace().count()),"role":"tool"}));
    s.emit(
        json!({"type":"STATE_DELTA","delta":[{"op":"replace","path":"/turns","value":turns + 1}]}),
    );
    let answer = format!(
        "You said \"{question}\". This is the agui-gateway demo agent: every event you see came through the gateway."
    );
    s.text(&ids.make("answer"), &answer);
    s.emit(json!({"type":"RUN_FINISHED","threadId":input.thread_id,"runId":input.run_id,"outcome":{"type":"success"}}));
    s.steps
}

/// Ids unique per run, readable in logs.
struct Ids {
    prefix: String,
}

impl Ids {
    fn new(run_id: &str) -> Ids {
        Ids {
            prefix: run_id.chars().take(24).collect(),
        }
    }
    fn make(&self, what: &str) -> String {
        format!("{}-{what}", self.prefix)
    }
}

#[derive(Default)]
struct Script {
    steps: Vec<(bool, Value)>,
}

impl Script {
    fn add(&mut self, pause: bool, v: Value) {
        self.steps.push((pause, v));
    }
    fn emit(&mut self, v: Value) {
        self.add(false, v)
    }
    fn pause(&mut self, v: Value) {
        self.add(true, v)
    }
    /// A streamed assistant text message, one word per content event.
    fn text(&mut self, id: &str, text: &str) {
        self.emit(json!({"type":"TEXT_MESSAGE_START","messageId":id,"role":"assistant"}));
        for (i, word) in text.split(' ').enumerate() {
            let delta = if i == 0 {
                word.to_owned()
            } else {
                format!(" {word}")
            };
            self.pause(json!({"type":"TEXT_MESSAGE_CONTENT","messageId":id,"delta":delta}));
        }
        self.emit(json!({"type":"TEXT_MESSAGE_END","messageId":id}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::verify::Verifier;

    fn input(text: &str, resume: Option<Value>) -> RunAgentInput {
        let mut v = json!({"threadId":"t","runId":"r1","messages":[{"id":"u","role":"user","content":text}]});
        if let Some(r) = resume {
            v["resume"] = r;
        }
        RunAgentInput::from_json(v.to_string().as_bytes()).unwrap()
    }

    fn verified(steps: &[(bool, Value)]) -> Vec<String> {
        let mut v = Verifier::new();
        steps
            .iter()
            .map(|(_, e)| {
                let e = Event::build(e.clone());
                v.check(&e).unwrap();
                e.kind().to_string()
            })
            .collect()
    }

    #[test]
    fn plain_run_has_every_kind_of_event_and_verifies() {
        let kinds = verified(&script(&input("hello there", None), &Pending::default()));
        for k in [
            "REASONING_MESSAGE_CONTENT",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_RESULT",
            "STATE_SNAPSHOT",
            "STATE_DELTA",
            "TEXT_MESSAGE_CONTENT",
        ] {
            assert!(kinds.iter().any(|x| x == k), "missing {k}");
        }
        assert_eq!(kinds.last().unwrap(), "RUN_FINISHED");
    }

    #[test]
    fn approval_words_interrupt_and_resume_continues() {
        let pending = Pending::default();
        let steps = script(&input("please transfer 500", None), &pending);
        verified(&steps);
        let last = steps.last().unwrap().1.clone();
        assert_eq!(last["outcome"]["type"], "interrupt");
        let id = last["outcome"]["interrupts"][0]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let call = last["outcome"]["interrupts"][0]["toolCallId"].clone();
        let resumed = script(
            &input(
                "",
                Some(json!([{"interruptId": id, "status":"resolved","payload":{"approved":true}}])),
            ),
            &pending,
        );
        verified(&resumed);
        let result = resumed
            .iter()
            .find(|(_, e)| e["type"] == "TOOL_CALL_RESULT")
            .unwrap();
        assert_eq!(result.1["toolCallId"], call);
        assert_eq!(result.1["content"], "transfer executed");
    }

    #[test]
    fn the_interrupt_proposes_values_and_the_answer_may_edit_them() {
        let pending = Pending::default();
        let steps = script(&input("please transfer 500", None), &pending);
        let interrupt = steps.last().unwrap().1["outcome"]["interrupts"][0].clone();
        assert_eq!(
            interrupt["metadata"],
            json!({"amount": 500, "to": "acct-9"})
        );
        let props = &interrupt["responseSchema"]["properties"];
        assert_eq!(
            (
                props["amount"]["type"].as_str(),
                props["to"]["type"].as_str()
            ),
            (Some("number"), Some("string"))
        );
        let resumed = script(
            &input(
                "",
                Some(
                    json!([{"interruptId": interrupt["id"], "status":"resolved","payload":{"approved":true,"amount":25}}]),
                ),
            ),
            &pending,
        );
        verified(&resumed);
        let delta = resumed
            .iter()
            .find(|(_, e)| e["type"] == "STATE_DELTA")
            .unwrap();
        assert_eq!(
            delta.1["delta"][1]["value"],
            json!({"amount": 25, "to": "acct-9"})
        );
        let text: String = resumed
            .iter()
            .filter(|(_, e)| e["type"] == "TEXT_MESSAGE_CONTENT")
            .map(|(_, e)| e["delta"].as_str().unwrap())
            .collect();
        assert_eq!(text, "Done: the transfer of 25 to acct-9 went through.");
    }

    /// The text the resumed run streams.
    fn reply(steps: &[(bool, Value)]) -> String {
        steps
            .iter()
            .filter(|(_, e)| e["type"] == "TEXT_MESSAGE_CONTENT")
            .map(|(_, e)| e["delta"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn it_proposes_what_was_asked_and_makes_that_transfer_when_approved() {
        let pending = Pending::default();
        let steps = script(&input("please transfer 25 EUR to bob", None), &pending);
        let interrupt = steps.last().unwrap().1["outcome"]["interrupts"][0].clone();
        assert_eq!(interrupt["metadata"], json!({"amount": 25, "to": "bob"}));
        assert_eq!(
            interrupt["message"],
            r#"Approve transfer_funds({"amount":25,"to":"bob"})?"#
        );
        let approve = json!([{"interruptId": interrupt["id"], "status":"resolved","payload":{"approved":true}}]);
        // An answer with no history (a curl with only `resume`): remembered.
        let resumed = script(&input("", Some(approve.clone())), &pending);
        assert_eq!(
            reply(&resumed),
            "Done: the transfer of 25 to bob went through."
        );
        // An answer carrying the history, to an agent that remembers nothing
        // (restarted, or another node's): read from the tool call.
        let mut with_history = json!({"threadId":"t","runId":"r2","messages":[
            {"id":"u","role":"user","content":"please transfer 25 EUR to bob"},
            {"id":"a","role":"assistant","toolCalls":[{"id": interrupt["toolCallId"], "type":"function",
              "function":{"name":"transfer_funds","arguments":"{\"amount\":25,\"to\":\"bob\"}"}}]}
        ]});
        with_history["resume"] = approve.clone();
        let with_history = RunAgentInput::from_json(with_history.to_string().as_bytes()).unwrap();
        let resumed = script(&with_history, &Pending::default());
        assert_eq!(
            reply(&resumed),
            "Done: the transfer of 25 to bob went through."
        );
        // Neither: the defaults, as before.
        let resumed = script(&input("", Some(approve)), &Pending::default());
        assert_eq!(
            reply(&resumed),
            "Done: the transfer of 500 to acct-9 went through."
        );
    }
}
