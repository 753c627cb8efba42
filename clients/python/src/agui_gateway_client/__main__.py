"""``python -m agui_gateway_client``: watch a thread, or run on it, from a shell.

    python -m agui_gateway_client watch THREAD            # snapshot, then live events
    python -m agui_gateway_client run THREAD --agent A "question"

The gateway and token come from ``--url``/``--token`` or ``AGUI_GATEWAY_URL``
/ ``AGUI_TOKEN``. Each event is printed as one line ``SEQ TYPE JSON`` (or the
``{"seq", "event"}`` object with ``--json``), so it pipes into grep or jq.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from typing import Any

from .connection import GatewayConnection
from .errors import GatewayError
from .events import ThreadEvent


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m agui_gateway_client", description="agui-gateway thread sessions from a shell")
    p.add_argument("--url", default=os.environ.get("AGUI_GATEWAY_URL", "http://127.0.0.1:8080"), help="the gateway (default $AGUI_GATEWAY_URL)")
    p.add_argument("--token", default=os.environ.get("AGUI_TOKEN"), help="a JWT (default $AGUI_TOKEN)")
    p.add_argument("--json", action="store_true", help="one JSON object per event")
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("watch", help="print the thread's snapshot line, then every event live (reconnects and resumes by itself)")
    w.add_argument("thread")
    w.add_argument("--max-events", type=int, default=0, help="exit after this many events (0: never)")
    r = sub.add_parser("run", help="send a user message and print the run's events until it ends")
    r.add_argument("thread")
    r.add_argument("text")
    r.add_argument("--agent", help="the gateway's agent id (default: the thread's)")
    return p


def _line(item: ThreadEvent, as_json: bool) -> str:
    if as_json:
        return json.dumps({"seq": item.seq, "event": item.raw})
    return f"{item.seq} {item.type} {json.dumps(item.raw, separators=(',', ':'))}"


async def _watch(conn: GatewayConnection, args: argparse.Namespace) -> int:
    thread = conn.session(args.thread)
    stream = thread.events()
    await thread.subscribe()
    head: dict[str, Any] = {"snapshot": thread.seq, "messages": len(thread.messages), "headRunId": thread.head_run_id}
    print(json.dumps(head) if args.json else f"snapshot seq={thread.seq} messages={len(thread.messages)} head={thread.head_run_id}", flush=True)
    seen = 0
    async for item in stream:
        print(_line(item, args.json), flush=True)
        seen += 1
        if args.max_events and seen >= args.max_events:
            break
    return 0


async def _run(conn: GatewayConnection, args: argparse.Namespace) -> int:
    thread = conn.session(args.thread)
    run_id = f"cli-{uuid.uuid4()}"
    stream = thread.events()
    await thread.run(args.agent, [{"id": str(uuid.uuid4()), "role": "user", "content": args.text}], run_id=run_id)
    async for item in stream:
        print(_line(item, args.json), flush=True)
        if item.type == "RUN_FINISHED" and item.raw.get("runId") == run_id:
            return 0
        if item.type == "RUN_ERROR":
            return 1
    return 1


async def _main(args: argparse.Namespace) -> int:
    if not args.token:
        print("no token: pass --token or set AGUI_TOKEN", file=sys.stderr)
        return 2
    async with GatewayConnection(args.url, args.token) as conn:
        return await (_watch if args.command == "watch" else _run)(conn, args)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return asyncio.run(_main(args))
    except GatewayError as e:
        print(f"error: {e.code}: {e.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
