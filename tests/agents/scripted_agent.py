"""A scripted AG-UI agent built with the PyPI `ag-ui-protocol` package.

Each URL path is one scenario, good or faulty, so the integration tests can
point a gateway agent at exactly the behaviour they check. Events are built
with `ag_ui.core` models and written with `ag_ui.encoder.EventEncoder`, the
way a real Python agent does it; the fault scenarios write raw bytes where the
point is to break the protocol.

Usage: scripted_agent.py  -> prints "listening <port>" on stdout, then serves.
It prints "DISCONNECTED <scenario>" when a client drops a stalled stream.
"""

import asyncio
import json
import os
import sys

from serve import serve
from ag_ui.core import (
    CustomEvent,
    EventType,
    RunFinishedEvent,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallChunkEvent,
    ToolCallResultEvent,
    ReasoningStartEvent,
    ReasoningMessageChunkEvent,
    ReasoningEndEvent,
)
from ag_ui.encoder import EventEncoder
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

ENC = EventEncoder()
TS = 1795344400000  # fixed timestamps: the stream is byte-for-byte repeatable


# Open "gated" runs, released together by POST /release.
GATES: list = []


def say(line: str) -> None:
    print(line, flush=True)


def sse_raw(**fields) -> str:
    """One SSE frame from plain fields (for event kinds built by hand)."""
    return "data: %s\n\n" % json.dumps(fields)


def happy_events(thread_id: str, run_id: str):
    """A full, valid run that uses chunks, unknown fields and most event kinds."""
    t = TS
    yield RunStartedEvent(thread_id=thread_id, run_id=run_id, timestamp=t)
    yield StepStartedEvent(step_name="plan", timestamp=t + 1)
    yield ReasoningStartEvent(message_id="rs1", timestamp=t + 2)
    yield ReasoningMessageChunkEvent(message_id="rs1", delta="thinking", timestamp=t + 3)
    yield ReasoningEndEvent(message_id="rs1", timestamp=t + 4)
    yield StateSnapshotEvent(snapshot={"count": 1, "items": ["a"]}, timestamp=t + 5)
    # A chunked tool call, as many framework adapters stream them.
    yield ToolCallChunkEvent(
        tool_call_id="tc1", tool_call_name="search", parent_message_id="m0", delta='{"q":', timestamp=t + 6
    )
    yield ToolCallChunkEvent(tool_call_id="tc1", delta='"rust"}', timestamp=t + 7)
    yield ToolCallResultEvent(message_id="tr1", tool_call_id="tc1", content="3 results", role="tool", timestamp=t + 8)
    yield StateDeltaEvent(delta=[{"op": "replace", "path": "/count", "value": 2}], timestamp=t + 9)
    # Extra fields a newer protocol or a vendor might add: must survive.
    yield TextMessageStartEvent(message_id="m1", role="assistant", timestamp=t + 10, vendor_hint={"x": [1, 2.5]})
    for i, word in enumerate(["Hello", " wörld", " \u2603", " \U0001F600"]):
        yield TextMessageContentEvent(message_id="m1", delta=word, timestamp=t + 11 + i)
    yield TextMessageEndEvent(message_id="m1", timestamp=t + 20)
    yield TextMessageChunkEvent(message_id="m2", role="assistant", delta="chunked ", timestamp=t + 21)
    yield TextMessageChunkEvent(delta="text", timestamp=t + 22)
    yield CustomEvent(name="progress", value={"pct": 100}, timestamp=t + 23)
    yield StepFinishedEvent(step_name="plan", timestamp=t + 24)
    yield RunFinishedEvent(thread_id=thread_id, run_id=run_id, timestamp=t + 25, outcome={"type": "success"})


async def read_input(request: Request) -> dict:
    try:
        return json.loads(await request.body())
    except Exception:
        return {}


def sse(gen, status=200):
    return StreamingResponse(gen, status_code=status, media_type="text/event-stream")


async def handle(request: Request) -> Response:
    scenario = request.path_params["scenario"]
    body = await read_input(request)
    thread_id = body.get("threadId", "t")
    run_id = body.get("runId", "r")

    if scenario == "ok":
        async def gen():
            for ev in happy_events(thread_id, run_id):
                yield ENC.encode(ev)
        return sse(gen())

    if scenario == "crlf":
        # Same events, CRLF framing, BOM, comments, cut into 7-byte pieces.
        raw = "\ufeff: hello\r\n\r\n" + "".join(
            ENC.encode(ev).replace("\n", "\r\n") + ": keepalive\r\n\r\n" for ev in happy_events(thread_id, run_id)
        )
        data = raw.encode("utf-8")

        async def gen():
            for i in range(0, len(data), 7):
                yield data[i : i + 7]
                await asyncio.sleep(0)
        return sse(gen())

    if scenario == "echo":
        async def gen():
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
            seen = {
                "input": body,
                "authorization": request.headers.get("authorization"),
                "accept": request.headers.get("accept"),
                "traceparent": request.headers.get("traceparent"),
                "identityHeaders": {k: v for k, v in request.headers.items() if k.lower().startswith("x-agui-")},
            }
            yield ENC.encode(CustomEvent(name="echo", value=seen))
            yield ENC.encode(RunFinishedEvent(thread_id=thread_id, run_id=run_id))
        return sse(gen())

    if scenario == "history":
        # Reports the history it was sent (ids and text), then answers the
        # last user message as "a-<runId>" and counts its turns in state.
        async def gen():
            msgs = body.get("messages", [])
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
            seen = [{"id": m.get("id"), "role": m.get("role"), "content": m.get("content")} for m in msgs]
            yield ENC.encode(CustomEvent(name="history", value={
                "messages": seen, "state": body.get("state"), "parentRunId": body.get("parentRunId"),
                "threadId": thread_id}))
            last = next((m.get("content") for m in reversed(msgs) if m.get("role") == "user"), "")
            if str(last).startswith("ask") and not body.get("resume"):
                # A question back: the run ends interrupted.
                yield sse_raw(type="RUN_FINISHED", threadId=thread_id, runId=run_id,
                              outcome={"type": "interrupt", "interrupts": [{"id": "int-" + run_id, "reason": "confirm"}]})
                return
            answer = "a-" + run_id
            yield ENC.encode(TextMessageStartEvent(message_id=answer, role="assistant"))
            yield ENC.encode(TextMessageContentEvent(message_id=answer, delta="re: %s" % last))
            yield ENC.encode(TextMessageEndEvent(message_id=answer))
            yield ENC.encode(StateSnapshotEvent(snapshot={"turns": sum(1 for m in msgs if m.get("role") == "user")}))
            yield ENC.encode(RunFinishedEvent(thread_id=thread_id, run_id=run_id))
        return sse(gen())

    if scenario == "unknown-type":
        async def gen():
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
            yield 'data: {"type":"FUTURE_EVENT","payload":{"deep":[1,{"a":null}]},"n":12345678901234567}\n\n'
            yield 'data: {"type":"THINKING_START","title":"legacy"}\n\n'
            yield 'data: {"type":"THINKING_END"}\n\n'
            yield ENC.encode(RunFinishedEvent(thread_id=thread_id, run_id=run_id))
        return sse(gen())

    if scenario.startswith("fixture-"):
        # Replays a captured stream from tests/fixtures byte-for-byte.
        name = scenario[len("fixture-"):]
        path = os.path.join(os.path.dirname(__file__), "..", "fixtures", "streams", name + ".sse")
        with open(path, "rb") as f:
            data = f.read()

        async def gen():
            for i in range(0, len(data), 512):
                yield data[i : i + 512]
        return sse(gen())

    if scenario == "draft-interrupt":
        # The older docs draft: outcome "interrupt" as a string, one `interrupt`
        # object without an id. Answered (resume present) it finishes normally.
        async def gen():
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
            if body.get("resume"):
                answer = body["resume"][0]
                yield ENC.encode(CustomEvent(name="answer", value=answer))
                yield ENC.encode(RunFinishedEvent(thread_id=thread_id, run_id=run_id))
            else:
                yield (
                    'data: {"type":"RUN_FINISHED","threadId":%s,"runId":%s,"outcome":"interrupt",'
                    '"interrupt":{"reason":"confirm_delete","payload":{"file":"report.pdf"}}}\n\n'
                    % (json.dumps(thread_id), json.dumps(run_id))
                )
        return sse(gen())

    if scenario == "expired-interrupt":
        async def gen():
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
            yield ENC.encode(RunFinishedEvent(
                thread_id=thread_id, run_id=run_id,
                outcome={"type": "interrupt", "interrupts": [
                    {"id": "late", "reason": "approval", "expiresAt": "2020-01-01T00:00:00Z"}]},
            ))
        return sse(gen())

    if scenario == "call-tool":
        # Calls forwardedProps.toolName with forwardedProps.args (as a real
        # agent would, whatever it was offered), then answers.
        props = body.get("forwardedProps") or {}
        name = props.get("toolName", "transfer_funds")
        args = json.dumps(props.get("args", {"amount": 500}))

        async def gen():
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
            yield ENC.encode(TextMessageStartEvent(message_id="m1", role="assistant"))
            yield ENC.encode(TextMessageEndEvent(message_id="m1"))
            yield 'data: %s\n\n' % json.dumps({"type": "TOOL_CALL_START", "toolCallId": "tc1", "toolCallName": name, "parentMessageId": "m1"})
            half = len(args) // 2
            for part in (args[:half], args[half:]):
                yield 'data: %s\n\n' % json.dumps({"type": "TOOL_CALL_ARGS", "toolCallId": "tc1", "delta": part})
            yield 'data: %s\n\n' % json.dumps({"type": "TOOL_CALL_END", "toolCallId": "tc1"})
            yield ENC.encode(ToolCallResultEvent(message_id="r1", tool_call_id="tc1", content="done", role="tool"))
            yield ENC.encode(TextMessageStartEvent(message_id="m2", role="assistant"))
            yield ENC.encode(TextMessageContentEvent(message_id="m2", delta="finished"))
            yield ENC.encode(TextMessageEndEvent(message_id="m2"))
            yield ENC.encode(RunFinishedEvent(thread_id=thread_id, run_id=run_id))
        return sse(gen())

    if scenario == "leak":
        # A card number split across two deltas, in tool args, a tool result and state.
        async def gen():
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
            yield ENC.encode(TextMessageStartEvent(message_id="m1", role="assistant"))
            for d in ["Your card 4111-11", "11-1111-1111 is on file."]:
                yield ENC.encode(TextMessageContentEvent(message_id="m1", delta=d))
            yield ENC.encode(TextMessageEndEvent(message_id="m1"))
            yield 'data: %s\n\n' % json.dumps({"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "charge", "parentMessageId": "m1"})
            yield 'data: %s\n\n' % json.dumps({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": '{"card": "4111-1111-'})
            yield 'data: %s\n\n' % json.dumps({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": '1111-1111"}'})
            yield 'data: %s\n\n' % json.dumps({"type": "TOOL_CALL_END", "toolCallId": "c1"})
            yield ENC.encode(ToolCallResultEvent(message_id="r1", tool_call_id="c1", content="charged 4111-1111-1111-1111", role="tool"))
            yield ENC.encode(StateSnapshotEvent(snapshot={"card": "4111-1111-1111-1111"}))
            yield ENC.encode(RunFinishedEvent(thread_id=thread_id, run_id=run_id))
        return sse(gen())

    if scenario == "flood":
        # ~10 MB of text in 10,000 events, as fast as the socket takes it:
        # more than a stalled reader's kernel buffers plus its 1 MiB queue hold.
        async def gen():
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
            yield ENC.encode(TextMessageStartEvent(message_id="f1", role="assistant"))
            chunk = "y" * 1000
            for i in range(10000):
                yield ENC.encode(TextMessageContentEvent(message_id="f1", delta=f"{i:05d}{chunk}"))
            yield ENC.encode(TextMessageEndEvent(message_id="f1"))
            yield ENC.encode(RunFinishedEvent(thread_id=thread_id, run_id=run_id))
        return sse(gen())

    if scenario == "http500":
        return PlainTextResponse("internal kaboom: database on fire at 10.0.0.7", status_code=500)

    if scenario == "wrong-ctype":
        return Response('{"hello":"json"}', media_type="application/json")

    if scenario == "garbage":
        async def gen():
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
            yield b"data: {this is not json\xff\xfe\n\n"
            yield ENC.encode(RunFinishedEvent(thread_id=thread_id, run_id=run_id))
        return sse(gen())

    if scenario == "violation":
        async def gen():
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
            yield ENC.encode(TextMessageContentEvent(message_id="never-started", delta="x"))
            yield ENC.encode(RunFinishedEvent(thread_id=thread_id, run_id=run_id))
        return sse(gen())

    if scenario == "bad-chunk":
        async def gen():
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
            # A first TOOL_CALL_CHUNK must name the tool; this one does not.
            yield 'data: {"type":"TOOL_CALL_CHUNK","toolCallId":"c1","delta":"{}"}\n\n'
            yield ENC.encode(RunFinishedEvent(thread_id=thread_id, run_id=run_id))
        return sse(gen())

    if scenario == "no-finish":
        async def gen():
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
            yield ENC.encode(TextMessageStartEvent(message_id="m1", role="assistant"))
            yield ENC.encode(TextMessageContentEvent(message_id="m1", delta="half"))
        return sse(gen())

    if scenario == "big-frame":
        async def gen():
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
            yield ENC.encode(CustomEvent(name="huge", value="x" * (2 * 1024 * 1024)))
            yield ENC.encode(RunFinishedEvent(thread_id=thread_id, run_id=run_id))
        return sse(gen())

    if scenario in ("stall", "stall-first"):
        async def gen():
            try:
                if scenario == "stall":
                    yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
                    yield ENC.encode(TextMessageStartEvent(message_id="m1", role="assistant"))
                else:
                    yield b": connected\n\n"
                await asyncio.sleep(3600)
            finally:
                say(f"DISCONNECTED {scenario}")
        return sse(gen())

    if scenario == "events":
        # Sends forwardedProps.events verbatim between RUN_STARTED and
        # RUN_FINISHED: a test scripts exactly the stream it needs.
        events = (body.get("forwardedProps") or {}).get("events", [])

        async def gen():
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
            for ev in events:
                yield "data: %s\n\n" % json.dumps(ev)
            yield ENC.encode(RunFinishedEvent(thread_id=thread_id, run_id=run_id))
        return sse(gen())

    if scenario == "xss":
        # Script and onerror payloads in every place an agent writes text:
        # a viewer must show them as text, never run them. The run ends
        # waiting for an answer whose reason, message, metadata, field name
        # and proposed value all carry the payload too.
        payload = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'

        async def gen():
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
            yield sse_raw(type="REASONING_START", messageId="xr")
            yield sse_raw(type="REASONING_MESSAGE_START", messageId="xr", role="reasoning")
            yield sse_raw(type="REASONING_MESSAGE_CONTENT", messageId="xr", delta="thinking " + payload)
            yield sse_raw(type="REASONING_MESSAGE_END", messageId="xr")
            yield sse_raw(type="REASONING_END", messageId="xr")
            yield ENC.encode(TextMessageStartEvent(message_id="x1", role="assistant"))
            yield ENC.encode(TextMessageContentEvent(message_id="x1", delta="look: " + payload))
            yield ENC.encode(TextMessageEndEvent(message_id="x1"))
            yield ENC.encode(ToolCallChunkEvent(tool_call_id="c1", tool_call_name=payload, parent_message_id="x1", delta='{"q":"' + payload.replace('"', "'") + '"}'))
            yield ENC.encode(ToolCallResultEvent(message_id="x2", tool_call_id="c1", content=payload))
            yield ENC.encode(StateSnapshotEvent(snapshot={payload: payload}))
            yield ENC.encode(CustomEvent(name=payload, value=payload))
            yield sse_raw(type="ACTIVITY_SNAPSHOT", messageId="xa", activityType=payload, content={payload: payload})
            yield sse_raw(type="SUBAGENT_STARTED", subagentRunId="xs", name=payload, description=payload)
            yield sse_raw(type="SUBAGENT_ERROR", subagentRunId="xs", message=payload, code=payload)
            yield ENC.encode(RunFinishedEvent(
                thread_id=thread_id, run_id=run_id,
                outcome={"type": "interrupt", "interrupts": [{
                    "id": "x-int", "reason": payload, "message": payload,
                    "metadata": {"comment": payload, "why": payload},
                    "responseSchema": {"type": "object", "properties": {
                        "comment": {"type": "string"}, payload: {"type": "string"}}},
                }]},
            ))
        return sse(gen())

    if scenario == "activity":
        # Activity and subagents as AG-UI 1.0 has them: an activity message
        # built by snapshot and RFC 6902 deltas (one `replace: false`
        # snapshot that must change nothing), a subagent that finishes with
        # its own message and activity, one that fails, a CUSTOM event sent
        # twice; and reasoning that goes on after a MESSAGES_SNAPSHOT names it.
        incoming = body.get("messages") or []

        async def gen():
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
            yield sse_raw(type="REASONING_START", messageId="rs1")
            yield sse_raw(type="REASONING_MESSAGE_START", messageId="rs1", role="reasoning")
            yield sse_raw(type="REASONING_MESSAGE_CONTENT", messageId="rs1", delta="first thought")
            yield sse_raw(type="MESSAGES_SNAPSHOT", messages=incoming + [{"id": "rs1", "role": "reasoning", "content": "first thought"}])
            yield sse_raw(type="REASONING_MESSAGE_CONTENT", messageId="rs1", delta=", then more")
            yield sse_raw(type="REASONING_MESSAGE_END", messageId="rs1")
            yield sse_raw(type="REASONING_END", messageId="rs1")
            yield sse_raw(type="ACTIVITY_SNAPSHOT", messageId="plan", activityType="plan", content={"steps": ["search"], "status": "working"})
            yield sse_raw(type="SUBAGENT_STARTED", subagentRunId="sa-research", name="researcher", description="looks things up")
            yield sse_raw(type="TEXT_MESSAGE_START", messageId="sm1", role="assistant", subagentRunId="sa-research")
            yield sse_raw(type="TEXT_MESSAGE_CONTENT", messageId="sm1", delta="found 3 sources")
            yield sse_raw(type="TEXT_MESSAGE_END", messageId="sm1")
            yield sse_raw(type="ACTIVITY_SNAPSHOT", messageId="search", activityType="web_search", content={"query": "journals", "found": 0}, subagentRunId="sa-research")
            yield sse_raw(type="ACTIVITY_DELTA", messageId="search", activityType="web_search", patch=[{"op": "replace", "path": "/found", "value": 3}])
            yield sse_raw(type="SUBAGENT_FINISHED", subagentRunId="sa-research", result="3 sources", outcome={"type": "success"})
            yield sse_raw(type="SUBAGENT_STARTED", subagentRunId="sa-writer", name="writer")
            yield sse_raw(type="SUBAGENT_ERROR", subagentRunId="sa-writer", message="quota exceeded", code="quota")
            yield sse_raw(type="ACTIVITY_DELTA", messageId="plan", activityType="plan", patch=[
                {"op": "add", "path": "/steps/-", "value": "write"}, {"op": "replace", "path": "/status", "value": "done"}])
            yield sse_raw(type="ACTIVITY_SNAPSHOT", messageId="plan", activityType="plan", content={"steps": []}, replace=False)
            yield sse_raw(type="CUSTOM", name="progress", value={"pct": 50})
            yield sse_raw(type="CUSTOM", name="progress", value={"pct": 100})
            yield ENC.encode(TextMessageStartEvent(message_id="final", role="assistant"))
            yield ENC.encode(TextMessageContentEvent(message_id="final", delta="summary written"))
            yield ENC.encode(TextMessageEndEvent(message_id="final"))
            yield ENC.encode(RunFinishedEvent(thread_id=thread_id, run_id=run_id))
        return sse(gen())

    if scenario == "gated":
        # Streams "part1", then waits for POST /release before "part2": a
        # viewer can join while the run is provably in the middle of a message.
        gate = asyncio.Event()
        GATES.append(gate)

        async def gen():
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
            yield ENC.encode(TextMessageStartEvent(message_id="g1", role="assistant"))
            yield ENC.encode(TextMessageContentEvent(message_id="g1", delta="part1"))
            say(f"GATED {run_id}")
            await gate.wait()
            yield ENC.encode(TextMessageContentEvent(message_id="g1", delta="part2"))
            yield ENC.encode(TextMessageEndEvent(message_id="g1"))
            yield ENC.encode(RunFinishedEvent(thread_id=thread_id, run_id=run_id))
        return sse(gen())

    if scenario == "gated-start":
        # Sends nothing until POST /release, then a whole happy run: the run
        # is accepted (its lease taken) while its journal has no event yet.
        gate = asyncio.Event()
        GATES.append(gate)

        async def gen():
            say(f"GATED-START {run_id}")
            await gate.wait()
            for event in happy_events(thread_id, run_id):
                yield ENC.encode(event)
        return sse(gen())

    if scenario == "release":
        while GATES:
            GATES.pop().set()
        return PlainTextResponse("released")

    if scenario == "die":
        async def gen():
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
            yield ENC.encode(TextMessageStartEvent(message_id="m1", role="assistant"))
            yield ENC.encode(TextMessageContentEvent(message_id="m1", delta="about to"))
            await asyncio.sleep(0.05)
            say("DYING")
            os._exit(1)
        return sse(gen())

    if scenario == "encrypted":
        # Reasoning and a tool call with provider artefacts (AG-UI 1.1
        # `encryptedValueType`); message r2's value is replaced by one
        # without a type, which must clear the stored type.
        def enc(subtype, entity, value, kind=None):
            fields = {"type": "REASONING_ENCRYPTED_VALUE", "subtype": subtype,
                      "entityId": entity, "encryptedValue": value}
            if kind is not None:
                fields["encryptedValueType"] = kind
            return sse_raw(**fields)

        async def gen():
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
            if any(m.get("id") == "r1" for m in body.get("messages", [])):
                # A later run: report what it was sent (its own artefacts back).
                yield ENC.encode(CustomEvent(name="echo", value={"input": body}))
                yield ENC.encode(RunFinishedEvent(thread_id=thread_id, run_id=run_id))
                return
            for rid in ("r1", "r2"):
                yield ENC.encode(ReasoningStartEvent(message_id=rid))
                yield ENC.encode(ReasoningMessageChunkEvent(message_id=rid, delta="thinking"))
                yield ENC.encode(ReasoningEndEvent(message_id=rid))
            yield enc("message", "r1", "sig-1", "anthropic.signature")
            yield enc("message", "r2", "old-bytes", "anthropic.redacted_thinking")
            yield enc("message", "r2", "new-bytes")
            yield ENC.encode(ToolCallChunkEvent(tool_call_id="c1", tool_call_name="search", parent_message_id="a1", delta="{}"))
            yield ENC.encode(ToolCallResultEvent(message_id="t1", tool_call_id="c1", content="ok", role="tool"))
            yield enc("tool-call", "c1", "enc-1", "openai.encrypted_content")
            yield ENC.encode(RunFinishedEvent(thread_id=thread_id, run_id=run_id))
        return sse(gen())

    if scenario == "versioned":
        # Declares its own protocol version, an older one than the gateway's.
        async def gen():
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id, protocol_version="1.0"))
            yield ENC.encode(RunFinishedEvent(thread_id=thread_id, run_id=run_id))
        return sse(gen())

    if scenario in ("late-error", "after-finish", "finish-and-hold"):
        # After RUN_FINISHED: a flush error (admitted by AG-UI 1.1), an
        # event that is not (dropped), or nothing, with the response kept
        # open (the gateway stops waiting after its grace).
        async def gen():
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
            yield ENC.encode(TextMessageStartEvent(message_id="m-" + run_id, role="assistant"))
            yield ENC.encode(TextMessageContentEvent(message_id="m-" + run_id, delta="done"))
            yield ENC.encode(TextMessageEndEvent(message_id="m-" + run_id))
            yield ENC.encode(RunFinishedEvent(thread_id=thread_id, run_id=run_id))
            await asyncio.sleep(0.2)
            if scenario == "late-error":
                yield sse_raw(type="RUN_ERROR", message="flushing the transcript failed", code="flush_failed")
            elif scenario == "after-finish":
                yield sse_raw(type="CUSTOM", name="too-late", value=1)
            else:
                await asyncio.sleep(60)
        return sse(gen())

    return PlainTextResponse(f"unknown scenario {scenario}", status_code=404)


def main() -> None:
    app = Starlette(routes=[Route("/{scenario}", handle, methods=["POST"])])
    serve(app)


if __name__ == "__main__":
    sys.exit(main())
