"""One replica of an agent for the backend-pool tests (tests/pools.rs).

Built with the PyPI `ag-ui-protocol` package like the other test agents.
Every run request it receives is appended to the record file named on the
command line ("<runId> <threadId>" per line, flushed at once), before it
answers, and "<runId> <threadId> started" once its first event was sent, so the file survives the process being killed and tells the test
which replica received which run — and whether any run reached two.

Paths are behaviours:
  /ok          a short run (RUN_STARTED, one text message, RUN_FINISHED)
  /slow        RUN_STARTED, then the rest after 100 ms
  /fail500     HTTP 500 before any event
  /fail-after  RUN_STARTED, then the response ends without a terminal event
  /flaky       HTTP 500 while failing (POST /fail), /ok otherwise (POST /heal)
  /hold        RUN_STARTED, then the rest once POST /release is called
  /fail404     HTTP 404 before any event
  /fail422     HTTP 422 before any event (the request refused as it is)
  /not-sse     HTTP 200 with a JSON body (not an event stream)
  /empty       HTTP 200 with text/event-stream headers and an empty body
  /drop        HTTP 200 with text/event-stream headers, then the connection
               is dropped (no event, no end of the chunked body)
  /headers-then-wait
               HTTP 200 with text/event-stream headers, then prints
               "HEADERS <runId>" and waits for ever: the test kills the
               replica at that moment, between its headers and first event
  GET /probe   the health check: 500 while failing, 200 once healed

Usage: pool_agent.py RECORD_FILE  -> prints "listening <port>", then serves.
"""

import asyncio
import json
import sys

from serve import serve
from ag_ui.core import (
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)
from ag_ui.encoder import EventEncoder
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

ENC = EventEncoder()
RECORD = open(sys.argv[1], "a", buffering=1)
FAILING = {"on": True}
RELEASE = asyncio.Event()


def answer(thread_id: str, run_id: str, delay: float = 0.0, hold: bool = False):
    async def gen():
        yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
        # Resumed once the server has sent the first event on: the run has
        # started (a replica killed before this line had not sent anything).
        RECORD.write(f"{run_id} {thread_id} started\n")
        if delay:
            await asyncio.sleep(delay)
        if hold:
            await RELEASE.wait()
        yield ENC.encode(TextMessageStartEvent(message_id="a-" + run_id, role="assistant"))
        yield ENC.encode(TextMessageContentEvent(message_id="a-" + run_id, delta="hi"))
        yield ENC.encode(TextMessageEndEvent(message_id="a-" + run_id))
        yield ENC.encode(RunFinishedEvent(thread_id=thread_id, run_id=run_id))

    return StreamingResponse(gen(), media_type="text/event-stream")


async def handle(request: Request) -> Response:
    scenario = request.path_params["scenario"]
    if scenario == "fail":
        FAILING["on"] = True
        return PlainTextResponse("failing")
    if scenario == "heal":
        FAILING["on"] = False
        return PlainTextResponse("healed")
    if scenario == "release":
        RELEASE.set()
        return PlainTextResponse("released")
    body = json.loads(await request.body())
    thread_id, run_id = body["threadId"], body["runId"]
    RECORD.write(f"{run_id} {thread_id}\n")
    RECORD.flush()
    if scenario == "ok":
        return answer(thread_id, run_id)
    if scenario == "slow":
        return answer(thread_id, run_id, 0.1)
    if scenario == "hold":
        return answer(thread_id, run_id, hold=True)
    if scenario == "fail500" or (scenario == "flaky" and FAILING["on"]):
        return PlainTextResponse("replica down", status_code=500)
    if scenario == "flaky":
        return answer(thread_id, run_id)
    if scenario == "fail404":
        return PlainTextResponse("no such agent here", status_code=404)
    if scenario == "fail422":
        return PlainTextResponse("unprocessable input", status_code=422)
    if scenario == "not-sse":
        return Response(json.dumps({"error": "not a stream"}), media_type="application/json")
    if scenario == "empty":
        async def nothing():
            return
            yield

        return StreamingResponse(nothing(), media_type="text/event-stream")
    if scenario == "drop":
        async def broken():
            # Raised after the headers went out: uvicorn closes the
            # connection mid-body, as a crashing replica would.
            raise ConnectionAbortedError("dropping the connection before the first event")
            yield

        return StreamingResponse(broken(), media_type="text/event-stream")
    if scenario == "headers-then-wait":
        async def wait():
            # The headers are on the socket before the body is iterated.
            print(f"HEADERS {run_id}", flush=True)
            await asyncio.Event().wait()
            yield

        return StreamingResponse(wait(), media_type="text/event-stream")
    if scenario == "fail-after":
        async def gen():
            yield ENC.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id))
        return StreamingResponse(gen(), media_type="text/event-stream")
    return PlainTextResponse(f"unknown scenario {scenario}", status_code=404)


async def probe(request: Request) -> Response:
    """GET /probe: the active health check; 500 while failing (see /flaky)."""
    return PlainTextResponse("down" if FAILING["on"] else "up", status_code=500 if FAILING["on"] else 200)


def main() -> None:
    serve(Starlette(routes=[Route("/probe", probe, methods=["GET"]), Route("/{scenario}", handle, methods=["POST"])]))


if __name__ == "__main__":
    sys.exit(main())
