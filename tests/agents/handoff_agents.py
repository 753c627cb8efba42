"""Agents that hand a conversation to each other, for the handoff tests.

`/triage` and `/billing` are real pydantic-ai agents served with its AG-UI
adapter (`pydantic-ai-slim[ag-ui]`), their models `FunctionModel`s, so no
network or key is involved: the transfer tools the gateway offers reach them
as AG-UI frontend tools, and calling one ends the run with the call pending,
as with a real LLM. What each does depends on the user's latest words:

- triage: "bill…" → thinks (a signed thinking part: an `encryptedValue`
  only triage may read) and calls `transfer_to_billing`; "twice" → calls
  `transfer_to_billing` and `transfer_to_support` in one response;
  "pingpong" → calls `transfer_to_billing` every time; after a transfer's
  result it answers with that result; else "Triage here.".
- billing: "pingpong" → calls `transfer_to_triage`; "slow…" → starts
  answering, then waits 30 s (a run to cancel); else answers.

`/scripted` is written with `ag_ui.core` events and takes its orders from
the last user message as JSON: `{"handoff": "<agent>"}` sends
`CUSTOM agui-gateway/handoff`; anything else is answered with text.

Every agent keeps the bodies it received: `GET /received/<agent>`, and the
`traceparent` header of each request: `GET /traceparents/<agent>`;
`GET /capabilities` is a declaration of AG-UI capabilities.
Prints "listening <port>" on stdout.
"""

import asyncio
import json
import sys
import uuid

from serve import serve
from ag_ui.core import (
    CustomEvent,
    EventType,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageChunkEvent,
)
from ag_ui.encoder import EventEncoder
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaThinkingPart, DeltaToolCall, FunctionModel
from pydantic_ai.ui.ag_ui import AGUIAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

RECEIVED: dict[str, list] = {}
TRACEPARENTS: dict[str, list] = {}


def last_user_text(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ""


def returns_since_user(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    found: list[ToolReturnPart] = []
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    return found
                if isinstance(part, ToolReturnPart):
                    found.append(part)
    return found


def call(name: str, args: dict) -> DeltaToolCall:
    return DeltaToolCall(name=name, json_args=json.dumps(args), tool_call_id=f"call_{uuid.uuid4().hex[:8]}")


async def triage_model(messages: list[ModelMessage], info: AgentInfo):
    text = last_user_text(messages).lower()
    if "pingpong" in text:
        yield {0: call("transfer_to_billing", {"reason": "pingpong"})}
        return
    returns = returns_since_user(messages)
    if returns:
        yield f"Triage again: {returns[0].content}"
        return
    if "twice" in text:
        yield {0: call("transfer_to_billing", {"reason": "first"}), 1: call("transfer_to_support", {})}
        return
    if "bill" in text:
        yield {0: DeltaThinkingPart(content="The user asks about an invoice.", signature="triage-only-secret")}
        yield {1: call("transfer_to_billing", {"reason": "invoice question"})}
        return
    yield "Triage here."


async def billing_model(messages: list[ModelMessage], info: AgentInfo):
    text = last_user_text(messages).lower()
    if "pingpong" in text:
        yield {0: call("transfer_to_triage", {"reason": "pingpong"})}
        return
    if "slow" in text:
        yield "Billing is thinking"
        await asyncio.sleep(30)
    for word in ["Billing ", "here: ", "your ", "invoice ", "is ", "paid."]:
        yield word


AGENTS = {
    "triage": Agent(FunctionModel(stream_function=triage_model), instructions="Route the user."),
    "billing": Agent(FunctionModel(stream_function=billing_model), instructions="Answer billing questions."),
}


def handler(name: str):
    async def run(request: Request):
        RECEIVED.setdefault(name, []).append(await request.json())
        TRACEPARENTS.setdefault(name, []).append(request.headers.get("traceparent"))
        return await AGUIAdapter.dispatch_request(request, agent=AGENTS[name])

    return run


async def scripted(request: Request):
    body = await request.json()
    RECEIVED.setdefault("scripted", []).append(body)
    enc = EventEncoder()
    thread, run = body["threadId"], body["runId"]
    last = (body.get("messages") or [{}])[-1]
    try:
        orders = json.loads(last.get("content") or "{}") if last.get("role") == "user" else {}
    except (TypeError, ValueError):
        orders = {}

    async def events():
        yield enc.encode(RunStartedEvent(type=EventType.RUN_STARTED, thread_id=thread, run_id=run))
        if isinstance(orders, dict) and "handoff" in orders:
            yield enc.encode(
                CustomEvent(
                    type=EventType.CUSTOM,
                    name="agui-gateway/handoff",
                    value={"to": orders["handoff"], "reason": "scripted"},
                )
            )
        else:
            content = last.get("content") if last.get("role") == "tool" else "scripted"
            yield enc.encode(
                TextMessageChunkEvent(
                    type=EventType.TEXT_MESSAGE_CHUNK,
                    message_id=f"m_{uuid.uuid4().hex[:8]}",
                    role="assistant",
                    delta=f"scripted: {content}",
                )
            )
        yield enc.encode(RunFinishedEvent(type=EventType.RUN_FINISHED, thread_id=thread, run_id=run))

    return StreamingResponse(events(), media_type="text/event-stream")


async def traceparents(request: Request):
    return JSONResponse(TRACEPARENTS.get(request.path_params["name"], []))


async def capabilities(request: Request):
    # What an agent might declare of itself; the gateway's own transport wins.
    return JSONResponse({"reasoning": {"supported": True, "encrypted": True}, "transport": {"streaming": False}})


async def received(request: Request):
    return JSONResponse(RECEIVED.get(request.path_params["name"], []))


def main() -> None:
    routes = [Route(f"/{name}", handler(name), methods=["POST"]) for name in AGENTS]
    routes.append(Route("/scripted", scripted, methods=["POST"]))
    routes.append(Route("/received/{name}", received, methods=["GET"]))
    routes.append(Route("/traceparents/{name}", traceparents, methods=["GET"]))
    routes.append(Route("/capabilities", capabilities, methods=["GET"]))
    serve(Starlette(routes=routes))


if __name__ == "__main__":
    sys.exit(main())
