"""The Python client against a real gateway and real agents, one scenario
per call: it prints what it saw as one JSON object; tests/client_python.rs
(in the repository) starts the gateway and agents and asserts.

usage: python scenarios.py <scenario> <base> <args...>
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import sys
import time
import traceback
import urllib.request
from typing import Any

from ag_ui.core import TextMessageContentEvent, UserMessage

from agui_gateway_client import Backoff, GatewayConnection, GatewayError, Retry, UnknownEvent


def mint(secret: str, **claims: Any) -> str:
    """An HS256 token signed with the test gateway's secret."""
    b64 = lambda v: base64.urlsafe_b64encode(json.dumps(v).encode()).rstrip(b"=").decode()  # noqa: E731
    body = {"sub": "pia", "roles": ["user"], "exp": int(time.time()) + 3600, **claims}
    head = f"{b64({'alg': 'HS256', 'typ': 'JWT'})}.{b64(body)}"
    sig = base64.urlsafe_b64encode(hmac.new(secret.encode(), head.encode(), hashlib.sha256).digest()).rstrip(b"=").decode()
    return f"{head}.{sig}"


def shape(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": m.get("id"), "role": m.get("role"), "content": m.get("content")} for m in messages]


def release(url: str) -> int:
    with urllib.request.urlopen(urllib.request.Request(url, method="POST")) as r:
        return r.status


def on_state(conn: GatewayConnection, state: str) -> asyncio.Event:
    """An event set when the connection next enters `state`."""
    reached = asyncio.Event()
    conn.on_state.append(lambda s: s == state and reached.set())
    return reached


async def code_of(awaitable: Any) -> str:
    try:
        await awaitable
        return "ok"
    except GatewayError as e:
        return e.code


async def sessions(out: dict[str, Any], base: str, token: str, agent: str) -> None:
    """Two sessions on one thread; a run, a fork of the first run, an edit,
    meta, cancel with nothing running; typed events; the folded views."""
    thread_id = f"py-{time.time_ns()}"
    async with GatewayConnection(base, token) as a_conn, GatewayConnection(base, token) as b_conn:
        a = a_conn.session(thread_id)
        out["subscribeBeforeThread"] = await code_of(a.subscribe())
        stream = a.events()
        ended = a.run_ended("r1")
        ack = await a.run(agent, [UserMessage(id="u1", role="user", content="hello there")], run_id="r1")
        out["ackRunId"] = ack.run_id
        await ended
        seen: list[Any] = []
        async for item in stream:
            seen.append(item)
            if item.type == "RUN_FINISHED" and item.raw.get("runId") == "r1":
                break
        stream.close()
        out["aSeqs"] = [i.seq for i in seen]
        out["typedClasses"] = sorted({type(i.event).__name__ for i in seen})
        out["unknown"] = [i.type for i in seen if isinstance(i.event, UnknownEvent)]
        out["deltasTyped"] = all(isinstance(i.event, TextMessageContentEvent) for i in seen if i.type == "TEXT_MESSAGE_CONTENT")
        out["aMessagesR1"] = shape(a.messages)
        out["snapshotR1"] = shape((await a.fetch_snapshot())["messages"])

        b = b_conn.session(thread_id)
        await b.subscribe()
        out["bJoinedAt"] = b.seq
        b_stream = b.events()
        ends = [a.run_ended("r2"), b.run_ended("r2")]
        again = await a.regenerate(run_id="r2")
        out["regenerateAckRunId"] = again.run_id
        await asyncio.gather(*ends)
        out["aRun"] = vars(a.latest_run)
        out["bRun"] = vars(b.latest_run)
        ends = [a.run_ended("r3"), b.run_ended("r3")]
        edited = await a.edit("u1", "hello again", run_id="r3")
        out["editAckRunId"] = edited.run_id
        await asyncio.gather(*ends)
        out["aMessages"] = shape(a.messages)
        out["bMessages"] = shape(b.messages)
        out["snapshot"] = shape((await a.fetch_snapshot())["messages"])
        out["bRun3"] = vars(b.latest_run)
        out["meta"] = (await a.meta("note", {"text": "hi"}, "n1"))["type"]
        out["cancelIdle"] = await code_of(a.cancel())
        b_stream.close()
        out["bSeqs"] = [i.seq async for i in b_stream]
        tree = await a.all_runs()
        out["tree"] = [[r["runId"], r["parentRunId"], r["kind"]] for r in tree["runs"]]


async def cut(out: dict[str, Any], base: str, token: str, agent: str, release_url: str) -> None:
    """A TCP connection cut mid-run: the session resumes after its last seq."""
    thread_id = f"py-cut-{time.time_ns()}"
    async with GatewayConnection(base, token) as conn:
        s = conn.session(thread_id)
        stream = s.events()
        ended = s.run_ended("g1")
        await s.run(agent, [{"id": "m1", "role": "user", "content": "go"}], run_id="g1")
        async for item in stream:
            if item.type == "TEXT_MESSAGE_CONTENT":
                break
        out["seqBeforeCut"] = s.seq
        reopened = on_state(conn, "open")
        conn._ws.transport.abort()  # the TCP connection dies without a close frame
        await reopened.wait()
        out["released"] = release(release_url)
        await ended
        seqs = [item.seq async for item in _drain(stream)]
        out["seqs"] = seqs
        out["opens"] = conn.opens
        out["snapshots"] = s.snapshots
        out["text"] = next((m["content"] for m in s.messages if m.get("role") == "assistant"), None)
        out["snapshotSeq"] = (await s.fetch_snapshot())["seq"]
        out["lastSeq"] = s.seq


async def _drain(stream: Any) -> Any:
    stream.close()
    async for item in stream:
        yield item


async def refresh(out: dict[str, Any], base: str, secret: str, agent: str, release_url: str) -> None:
    """A token expiring during a long run is refreshed on the open socket."""
    asked: list[str] = []

    def provider(reason: str, _previous: str | None) -> str:
        asked.append(reason)
        return mint(secret, exp=int(time.time()) + 4)

    async with GatewayConnection(base, provider) as conn:
        s = conn.session(f"py-refresh-{time.time_ns()}")
        ended = s.run_ended("long")
        await s.run(agent, [{"id": "l1", "role": "user", "content": "go"}], run_id="long")
        first_exp = json.loads(base64.urlsafe_b64decode(conn.token.split(".")[1] + "==")).get("exp")
        # A deadline, not an event: the run must outlive the first token.
        await asyncio.sleep(max(0.0, first_exp + 1 - time.time()))
        out["released"] = release(release_url)
        end = await ended
        out["endType"] = end.type
        out["asked"] = asked
        out["opens"] = conn.opens
        out["refreshes"] = conn.refreshes
        out["pastFirstExpiry"] = time.time() - first_exp


async def expiry(out: dict[str, Any], base: str, secret: str, agent: str, release_url: str) -> None:
    """Without refreshing ahead: the gateway closes with 4001 at expiry, the
    provider is asked again ('rejected'), and the session resumes after its
    last seq on the new socket — nothing missed, nothing twice."""
    asked: list[str] = []

    def provider(reason: str, _previous: str | None) -> str:
        asked.append(reason)
        return mint(secret, exp=int(time.time()) + 2)

    async with GatewayConnection(base, provider, auto_refresh=False, reconnect=Backoff(initial=0.05, maximum=0.2)) as conn:
        s = conn.session(f"py-expiry-{time.time_ns()}")
        stream = s.events()
        ended = s.run_ended("e1")
        await s.run(agent, [{"id": "e-u1", "role": "user", "content": "go"}], run_id="e1")
        async for item in stream:
            if item.type == "TEXT_MESSAGE_CONTENT":
                break
        out["seqBeforeExpiry"] = s.seq
        reopened = on_state(conn, "open")
        reconnecting = on_state(conn, "reconnecting")
        await reconnecting.wait()  # the 4001 at expiry
        await reopened.wait()
        out["released"] = release(release_url)
        await ended
        out["seqs"] = [item.seq async for item in _drain(stream)]
        out["asked"] = asked
        out["opens"] = conn.opens
        out["snapshots"] = s.snapshots
        out["text"] = next((m["content"] for m in s.messages if m.get("role") == "assistant"), None)


async def retry(out: dict[str, Any], base: str, token: str, agent: str) -> None:
    """A command sent while the socket is down: without retry it fails
    `disconnected` (never sent); with retry it is sent after the reconnect."""
    async with GatewayConnection(base, token) as conn:
        s = conn.session(f"py-retry-{time.time_ns()}")
        ended = s.run_ended("r0")
        await s.run(agent, [{"id": "r-u1", "role": "user", "content": "hi"}], run_id="r0")
        await ended
        down = on_state(conn, "reconnecting")
        conn._ws.transport.abort()
        await down.wait()
        out["withoutRetry"] = await code_of(s.meta("note", {"n": 0}, "r0"))
        out["withRetry"] = (await s.meta("note", {"n": 1}, "r1", retry=Retry(attempts=2)))["type"]


async def cli(out: dict[str, Any], base: str, token: str, agent: str) -> None:
    """`python -m agui_gateway_client watch THREAD` sees another session's run."""
    thread_id = f"py-cli-{time.time_ns()}"
    async with GatewayConnection(base, token) as conn:
        s = conn.session(thread_id)
        ended = s.run_ended("c1")
        await s.run(agent, [{"id": "c-u1", "role": "user", "content": "first"}], run_id="c1")
        await ended
        env = {**os.environ, "AGUI_GATEWAY_URL": base, "AGUI_TOKEN": token}
        watch = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agui_gateway_client", "watch", thread_id, env=env, stdout=asyncio.subprocess.PIPE
        )
        assert watch.stdout is not None
        out["head"] = (await watch.stdout.readline()).decode().strip()
        ended = s.run_ended("c2")
        await s.run(agent, [{"id": "c-u2", "role": "user", "content": "second"}], run_id="c2")
        await ended
        lines = []
        while True:
            line = (await asyncio.wait_for(watch.stdout.readline(), 30)).decode().strip()
            lines.append(line)
            if line.split(" ")[1] == "RUN_FINISHED":
                break
        watch.terminate()
        await watch.wait()
        out["lines"] = [[int(line.split(" ")[0]), line.split(" ")[1]] for line in lines]
        out["sessionSeq"] = s.seq
        # `run`: a user message from the shell, its run's events until it ends.
        ran = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agui_gateway_client", "--json", "run", thread_id, "third", "--agent", agent, env=env, stdout=asyncio.subprocess.PIPE
        )
        printed, _ = await asyncio.wait_for(ran.communicate(), 30)
        events = [json.loads(line) for line in printed.decode().splitlines()]
        out["runExit"] = ran.returncode
        out["runTypes"] = [e["event"]["type"] for e in events]
        out["runInput"] = next((m["content"] for e in events if e["event"]["type"] == "RUN_STARTED" for m in e["event"].get("input", {}).get("messages", [])), None)


async def presence(out: dict[str, Any], base: str, token_a: str, token_b: str) -> None:
    """Two people on one thread nobody has run yet: each session lists both;
    when one leaves, the other's list drops them."""
    thread = f"team-7-py-{int(time.time() * 1000)}"
    ids = lambda s: sorted(w["userId"] for w in s.viewers())  # noqa: E731

    async def until(session: Any, want: list[str]) -> None:
        while ids(session) != want:
            session.presence_changed.clear()
            await session.presence_changed.wait()

    a = GatewayConnection(base, token=token_a)
    b = GatewayConnection(base, token=token_b)
    await a.connect()
    sa = a.session(thread)
    await sa.subscribe()
    out["atJoin"] = ids(sa)
    await b.connect()
    sb = b.session(thread)
    await sb.subscribe()
    await until(sa, ["ann", "ben"])
    await until(sb, ["ann", "ben"])
    out["both"] = ids(sb)
    # Ben types: Ann's session lists him typing; a repeat at once sends
    # nothing; he stops.
    ack = await sb.composing()
    out["lapseMs"] = ack["lapseMs"]
    out["repeat"] = await sb.composing()
    while sa.typing() != ["ben"]:
        sa.presence_changed.clear()
        await sa.presence_changed.wait()
    out["typing"] = sa.typing()
    await sb.composing(False)
    while sa.typing():
        sa.presence_changed.clear()
        await sa.presence_changed.wait()
    await b.close()
    await until(sa, ["ann"])
    out["after"] = ids(sa)
    await a.close()


SCENARIOS = {"sessions": sessions, "cut": cut, "refresh": refresh, "expiry": expiry, "retry": retry, "cli": cli, "presence": presence}


def main() -> None:
    out: dict[str, Any] = {}
    try:
        asyncio.run(asyncio.wait_for(SCENARIOS[sys.argv[1]](out, *sys.argv[2:]), 80))
    except BaseException as e:  # noqa: BLE001 — the failure is the report
        out["failure"] = "".join(traceback.format_exception(e))
        if isinstance(e, GatewayError):
            out["failureCode"] = e.code
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
