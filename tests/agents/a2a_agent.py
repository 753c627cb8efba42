"""A real A2A agent for the A2A tests (tests/a2a.rs), built with PyPI `a2a-sdk`.

It speaks A2A v1.0 JSON-RPC as the SDK serves it. The JSON-RPC endpoint is
at /rpc, not at the base URL, so a client that ignores the interface URL its
agent card names (and posts to the base URL) fails.

The first word of the user's text picks the behaviour:
  fail      the task fails, with the message "the agent failed on purpose"
  reject    the task is rejected, with the message "not my job"
  ask       the task asks for input (input-required, "which colour?"); the
            next message to the same task completes it with "you said <text>"
  auth      the task asks for authentication (auth-required)
  wait      completes with "waited" after 500 ms
  slow      streams "tick" artifact chunks every 100 ms until cancelled
  anything else: streams "echo: <text>" as three artifact chunks, completes

Every request's message is appended, as one JSON line, to the record file if
one is given (so a test can check what the gateway sent: contextId, taskId,
parts), and every cancel as {"cancel": <taskId>}.

Usage: a2a_agent.py [--no-streaming] [--name=NAME] [--v03] [RECORD_FILE]
  -> prints "listening <port>", then serves.
"""

import asyncio
import json
import sys

from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from serve import serve
from a2a.helpers.proto_helpers import new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2 as pb

STREAMING = "--no-streaming" not in sys.argv
# Also serve A2A 0.3 (the SDK's compat layer) and a 0.3 card at
# /.well-known/agent.json, for clients from before 1.0 (@ag-ui/a2a).
V03 = "--v03" in sys.argv
NAME = next((a.removeprefix("--name=") for a in sys.argv if a.startswith("--name=")), "Echo A2A")
ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
RECORD = ARGS[0] if ARGS else None


def record(context: RequestContext) -> None:
    if RECORD is None or context.message is None:
        return
    with open(RECORD, "a") as f:
        line = MessageToDict(context.message)
        line["_task"] = context.task_id  # the task the SDK runs it as
        f.write(json.dumps(line) + "\n")
        f.flush()


class Executor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        record(context)
        text = context.get_user_input().strip()
        task = context.current_task
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if task is None:
            await event_queue.enqueue_event(
                new_task(
                    context.task_id,
                    context.context_id,
                    pb.TaskState.TASK_STATE_SUBMITTED,
                    history=[context.message],
                )
            )
        await updater.start_work()

        def say(words: str) -> pb.Message:
            return updater.new_agent_message([new_text_part(words)])

        if task is not None and task.status.state == pb.TaskState.TASK_STATE_INPUT_REQUIRED:
            await updater.complete(say(f"you said {text}"))
            return
        word = text.split(" ", 1)[0] if text else ""
        if word == "fail":
            await updater.failed(say("the agent failed on purpose"))
        elif word == "reject":
            await updater.reject(say("not my job"))
        elif word == "ask":
            await updater.requires_input(say("which colour?"))
        elif word == "auth":
            await updater.requires_auth(say("sign in first"))
        elif word == "wait":
            await asyncio.sleep(0.5)
            await updater.complete(say("waited"))
        elif word == "slow":
            artifact = "ticks"
            n = 0
            while True:
                await updater.add_artifact(
                    [new_text_part("tick ")], artifact_id=artifact, append=n > 0
                )
                n += 1
                await asyncio.sleep(0.1)
        else:
            artifact = "answer"
            for i, piece in enumerate(["echo: ", text, "!"]):
                await updater.add_artifact(
                    [new_text_part(piece)],
                    artifact_id=artifact,
                    append=i > 0,
                    last_chunk=i == 2,
                )
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        if RECORD is not None:
            with open(RECORD, "a") as f:
                f.write(json.dumps({"cancel": context.task_id}) + "\n")
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()


def main() -> None:
    import socket

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    card = pb.AgentCard(
        name=NAME,
        description="Echoes, asks, fails and ticks: a test agent",
        version="1.0.0",
        supported_interfaces=[
            pb.AgentInterface(url=f"{base}/rpc", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=pb.AgentCapabilities(streaming=STREAMING),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            pb.AgentSkill(id="echo", name="Echo", description="Says back what it got", tags=["test"])
        ],
    )
    handler = DefaultRequestHandler(
        agent_executor=Executor(), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(
        handler, "/rpc", enable_v0_3_compat=V03
    )
    if V03:
        old_card = {
            "name": NAME,
            "description": card.description,
            "url": f"{base}/rpc",
            "version": "1.0.0",
            "protocolVersion": "0.3.0",
            "capabilities": {"streaming": STREAMING},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "echo", "name": "Echo", "description": "Says back what it got", "tags": ["test"]}],
        }

        async def agent_json(request):
            return JSONResponse(old_card)

        routes.append(Route("/.well-known/agent.json", agent_json, methods=["GET"]))
    app = Starlette(routes=routes)
    print(f"listening {port}", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off")).run(sockets=[sock])


if __name__ == "__main__":
    main()
