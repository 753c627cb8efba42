"""One thread as seen through a connection: a snapshot, then live events.

Each seq arrives once and in order across any reconnect (the session
resubscribes ``after`` the last seq it applied, with the epoch the gateway
named; a ``reset`` snapshot replaces everything). ``messages`` and ``state``
are folded after every event, so whoever starts a run sees its answer.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from .errors import GatewayError
from .events import ThreadEvent, parse_event
from .fold import fold_event

from .retry import Retry


class Connection(Protocol):
    """What a session needs of its connection (``GatewayConnection``),
    named here so that the session does not import the connection that
    creates it."""

    @property
    def is_open(self) -> bool: ...

    async def wait_open(self) -> None: ...

    async def send(self, command: dict[str, Any], *, retry: Retry | None = None) -> dict[str, Any]: ...

    async def request(self, path: str) -> Any: ...

RunKind = Literal["continue", "branch", "regenerate", "edit", "resume", "handoff"]
RunStatus = Literal["idle", "running", "interrupted", "finished", "cancelled", "error"]
RunStrategy = Literal["reject", "enqueue", "interrupt"]


@dataclass
class RunInfo:
    """The thread's latest run as the gateway reports it."""

    run_id: str | None
    agent: str | None
    status: str
    #: The run it started from (None: the thread's first run, or a fork of it).
    parent_run_id: str | None = None
    kind: str = "continue"


@dataclass(frozen=True)
class RunAck:
    """The ack of a command that started a run: it names the run."""

    run_id: str
    thread_id: str
    raw: dict[str, Any] = field(repr=False)

    @property
    def queued(self) -> int | None:
        return self.raw.get("queued")


def _message(m: Any) -> dict[str, Any]:
    """A message as a command carries it: an ``ag_ui.core`` model or a dict."""
    dump = getattr(m, "model_dump", None)
    return dump(by_alias=True, exclude_none=True, mode="json") if dump else dict(m)


def _run_info(run: dict[str, Any] | None) -> RunInfo | None:
    if not run:
        return None
    return RunInfo(run.get("runId"), run.get("agent"), run.get("status", "idle"), run.get("parentRunId"), run.get("kind", "continue"))


class ThreadSession:
    """Get one with ``connection.session(thread_id)``."""

    def __init__(self, connection: Connection, thread_id: str) -> None:
        self.connection = connection
        self.thread_id = thread_id
        #: The last seq applied (None before the first snapshot or event).
        self.seq: int | None = None
        #: The epoch of the history ``seq`` belongs to, as the gateway named it.
        self.epoch: str | None = None
        #: The thread's messages (AG-UI ``Message`` dicts, camelCase), folded live.
        self.messages: list[dict[str, Any]] = []
        self.state: Any = {}
        self.latest_run: RunInfo | None = None
        #: The thread's head: the newest run started.
        self.head_run_id: str | None = None
        #: The agent speaking on the thread (handoff, switch), or None.
        self.active_agent: str | None = None
        #: Pending interrupts (AG-UI ``Interrupt`` dicts).
        self.interrupts: list[dict[str, Any]] = []
        #: Snapshots applied (``reset`` ones included), for whoever watches.
        self.snapshots = 0
        #: Who is watching, by user id (the subscribe ack's list, then the
        #: gateway's ``presence`` frames); see ``viewers()``.
        self._watchers: dict[str, dict[str, Any]] = {}
        self._composing_until = 0.0
        #: Set whenever the list of viewers changed (cleared by whoever waits).
        self.presence_changed = asyncio.Event()
        self._wanted = False
        self._joined = False
        self._ready = asyncio.Event()
        self._streams: set[asyncio.Queue[ThreadEvent | None]] = set()
        self._ends: dict[str, asyncio.Future[ThreadEvent]] = {}
        self._subscribing: asyncio.Task[None] | None = None
        self._errors: list[GatewayError] = []

    # ----- watching -----

    async def subscribe(self) -> None:
        """Subscribes; returns once the snapshot (or the catch-up) is in.
        Raises ``not_found`` for a thread nobody has run yet."""
        self._wanted = True
        await self.connection.wait_open()
        await self._send_subscribe()
        await self._ready.wait()

    async def unsubscribe(self) -> None:
        self._wanted = self._joined = False
        self._ready.clear()
        if self.connection.is_open:
            await self.connection.send({"type": "unsubscribe", "threadId": self.thread_id})

    def events(self) -> EventStream:
        """The thread's events from now on (from this call, not from the
        first iteration: take it before starting a run), each seq once and in
        order across reconnects, buffered while the loop body awaits. It ends
        when the connection closes; ``stream.close()`` (or ``with``) ends it
        early."""
        return EventStream(self)

    def run_ended(self, run_id: str) -> asyncio.Future[ThreadEvent]:
        """A future of the event that ends run ``run_id`` (RUN_FINISHED or
        RUN_ERROR). Take it *before* starting the run: its first events may
        arrive before the ack."""
        if run_id not in self._ends or self._ends[run_id].done():
            self._ends[run_id] = asyncio.get_running_loop().create_future()
        return self._ends[run_id]

    # ----- commands -----

    async def run(
        self,
        agent: str | None = None,
        messages: list[Any] | None = None,
        *,
        run_id: str | None = None,
        parent_run_id: str | None = None,
        strategy: RunStrategy | None = None,
        tools: list[Any] | None = None,
        context: list[Any] | None = None,
        state: Any = None,
        forwarded_props: Any = None,
        retry: Retry | None = None,
    ) -> RunAck:
        """Starts a run with the NEW ``messages`` (the gateway holds the history)."""
        return await self._start(
            "run",
            {
                "agent": agent,
                "messages": [_message(m) for m in messages] if messages else None,
                "runId": run_id,
                "parentRunId": parent_run_id,
                "strategy": strategy,
                "tools": tools,
                "context": context,
                "state": state,
                "forwardedProps": forwarded_props,
            },
            retry,
        )

    async def resume(self, resume: list[dict[str, Any]], *, agent: str | None = None, run_id: str | None = None, messages: list[Any] | None = None, retry: Retry | None = None) -> RunAck:
        """Answers the pending interrupts (AG-UI ``ResumeEntry`` dicts)."""
        fields = {"resume": resume, "agent": agent, "runId": run_id, "messages": [_message(m) for m in messages] if messages else None}
        return await self._start("resume", fields, retry)

    async def regenerate(self, message_id: str | None = None, *, agent: str | None = None, run_id: str | None = None, retry: Retry | None = None) -> RunAck:
        """Answers again: a sibling of the run that produced ``message_id``
        (default: the head's last assistant message)."""
        return await self._start("regenerate", {"messageId": message_id, "agent": agent, "runId": run_id}, retry)

    async def edit(self, message_id: str, content: Any, *, agent: str | None = None, run_id: str | None = None, retry: Retry | None = None) -> RunAck:
        """Replaces user message ``message_id`` (same id) on a sibling of the
        run that introduced it, and runs from there."""
        message = {"id": message_id, "role": "user", "content": content}
        return await self._start("edit", {"messageId": message_id, "message": message, "agent": agent, "runId": run_id}, retry)

    async def cancel(self, run_id: str | None = None) -> dict[str, Any]:
        """Stops the active run (or run ``run_id``)."""
        return await self.connection.send(_compact({"type": "cancel", "threadId": self.thread_id, "runId": run_id}))

    async def switch_agent(self, agent: str) -> dict[str, Any]:
        """The thread's next plain run goes to ``agent``."""
        return await self.connection.send({"type": "switch", "threadId": self.thread_id, "agent": agent})

    async def meta(self, meta_type: str, payload: dict[str, Any], client_event_id: str | None = None, *, retry: Retry | None = None) -> dict[str, Any]:
        """Appends a META event (idempotent per ``client_event_id``)."""
        command = _compact({"type": "meta", "threadId": self.thread_id, "metaType": meta_type, "payload": payload, "clientEventId": client_event_id})
        return await self.connection.send(command, retry=retry)

    async def composing(self, on: bool = True) -> dict[str, Any] | None:
        """This person is typing in the thread (``on``) or stopped (call it
        with ``False`` when the text is sent or cleared). Call it on every
        keystroke: a repeat is sent only once half the signal's life (the
        gateway's ``lapseMs``) has gone by. Returns the ack, or ``None`` when
        nothing was sent."""
        now = time.monotonic()
        if on and now < self._composing_until:
            return None
        self._composing_until = now + 1.0 if on else 0.0
        try:
            ack = await self.connection.send({"type": "composing", "threadId": self.thread_id, "composing": on})
        except BaseException:
            self._composing_until = 0.0
            raise
        if on and self._composing_until:
            self._composing_until = now + max(0.25, ack.get("lapseMs", 2000) / 2000)
        return ack

    async def fetch_snapshot(self, run_id: str | None = None) -> dict[str, Any]:
        """The thread's snapshot over HTTP; with ``run_id``: at the end of that run."""
        query = f"?runId={urllib.parse.quote(run_id)}" if run_id else ""
        return await self.connection.request(f"/v1/threads/{urllib.parse.quote(self.thread_id, safe='')}{query}")

    async def runs(self, cursor: int | None = None, limit: int | None = None) -> dict[str, Any]:
        """One page of the run tree (``{threadId, headRunId, runs, nextCursor}``)."""
        query = urllib.parse.urlencode(_compact({"cursor": cursor, "limit": limit}))
        return await self.connection.request(f"/v1/threads/{urllib.parse.quote(self.thread_id, safe='')}/runs{'?' + query if query else ''}")

    async def all_runs(self) -> dict[str, Any]:
        """Every page of the run tree."""
        page = await self.runs()
        runs = list(page["runs"])
        while page.get("nextCursor") is not None:
            page = await self.runs(cursor=page["nextCursor"])
            runs.extend(page["runs"])
        return {"threadId": self.thread_id, "headRunId": page.get("headRunId"), "runs": runs}

    async def _start(self, kind: str, fields: dict[str, Any], retry: Retry | None) -> RunAck:
        ack = await self.connection.send(_compact({"type": kind, "threadId": self.thread_id, **fields}), retry=retry)
        self._learn_epoch(ack)
        return RunAck(str(ack.get("runId")), str(ack.get("threadId", self.thread_id)), ack)

    # ----- what the connection tells it -----

    async def _send_subscribe(self) -> None:
        # ``presence``: told who joins and leaves (``viewers()``).
        frame: dict[str, Any] = {"type": "subscribe", "threadId": self.thread_id, "presence": True}
        if self.seq is not None:
            # After a reconnect: every event after the last one seen, nothing twice.
            frame["after"] = self.seq
            if self.epoch is not None:
                frame["epoch"] = self.epoch
        try:
            ack = await self.connection.send(frame)
        except GatewayError as e:
            if e.code not in ("disconnected", "closed"):
                self._wanted = self._joined
            raise
        self._learn_epoch(ack)
        if self.seq is not None:
            self._ready.set()

    def _resubscribe(self) -> None:
        async def again() -> None:
            try:
                await self._send_subscribe()
            except GatewayError as e:
                self._error(e)

        self._subscribing = asyncio.create_task(again())

    def viewers(self) -> list[dict[str, Any]]:
        """Who is watching the thread now, on every node: one
        ``{userId, name?, roles, connections, since, composing?}`` per person."""
        return list(self._watchers.values())

    def typing(self) -> list[str]:
        """The user ids typing in the thread now (``composing`` signals)."""
        return sorted(w["userId"] for w in self._watchers.values() if w.get("composing"))

    def _presence(self, viewers: list[dict[str, Any]]) -> None:
        self._watchers = {w["userId"]: w for w in viewers if isinstance(w, dict) and "userId" in w}
        self.presence_changed.set()

    def _learn_epoch(self, ack: dict[str, Any]) -> None:
        if isinstance(ack.get("epoch"), str):
            self.epoch = ack["epoch"]

    def _joined_by_run(self) -> None:
        self._wanted = self._joined = True

    def _connected(self) -> None:
        if self._wanted:
            self._resubscribe()

    def _disconnected(self) -> None:
        self._ready.clear()

    def _error(self, error: GatewayError) -> None:
        self._errors.append(error)

    def _end_streams(self) -> None:
        for q in self._streams:
            q.put_nowait(None)

    def _frame(self, frame: dict[str, Any]) -> None:
        if frame.get("type") == "snapshot":
            return self._snapshot(frame)
        seq = frame["seq"]
        if self.seq is not None and seq <= self.seq:
            return  # seen already
        if self.seq is not None and seq != self.seq + 1:
            # Cannot happen with the contract; if it does, ask again from what we have.
            if self.connection.is_open:
                self._resubscribe()
            return
        self.seq = seq
        raw = frame["event"]
        self.messages, self.state = fold_event(self.messages, self.state, raw)
        self._track_run(raw)
        item = ThreadEvent(seq, parse_event(raw), raw)
        for q in self._streams:
            q.put_nowait(item)
        self._settle_run(raw, item)

    def _snapshot(self, frame: dict[str, Any]) -> None:
        self.seq = frame["seq"]
        if isinstance(frame.get("epoch"), str):
            self.epoch = frame["epoch"]
        elif frame.get("reset"):
            self.epoch = None
        self.messages = list(frame.get("messages") or [])
        self.state = frame.get("state") if frame.get("state") is not None else {}
        self.latest_run = _run_info(frame.get("run"))
        self.head_run_id = frame.get("headRunId") or (self.latest_run.run_id if self.latest_run else None)
        self.active_agent = frame.get("activeAgent")
        self.interrupts = list(frame.get("interrupts") or [])
        self.snapshots += 1
        self._ready.set()

    def _track_run(self, e: dict[str, Any]) -> None:
        kind = e.get("type")
        if kind == "RUN_STARTED":
            stamp = e.get("agui-gateway") or {}
            # An explicit null (a fork of the first run) is an answer, not a missing one.
            parent = e["parentRunId"] if "parentRunId" in e else stamp["parentRunId"] if "parentRunId" in stamp else self.head_run_id
            agent = stamp.get("agent") or (self.latest_run.agent if self.latest_run else None)
            self.latest_run = RunInfo(e.get("runId"), agent, "running", parent, stamp.get("kind", "continue"))
            self.head_run_id = e.get("runId")
            self.interrupts = []
            if stamp.get("agent") and stamp.get("kind") != "handoff":
                self.active_agent = stamp["agent"]
        elif kind == "CUSTOM":
            value = e.get("value") or {}
            if e.get("name") == "agui-gateway/handoff" and value.get("result") == "accepted":
                self.active_agent = value.get("toAgent", self.active_agent)
            if e.get("name") == "agui-gateway/active-agent":
                self.active_agent = value.get("agent", self.active_agent)
        elif kind == "RUN_FINISHED":
            outcome = (e.get("outcome") or {}).get("type")
            status = {"interrupt": "interrupted", "cancelled": "cancelled"}.get(outcome, "finished")
            base = self.latest_run or RunInfo(None, None, "idle")
            self.latest_run = RunInfo(e.get("runId"), base.agent, status, base.parent_run_id, base.kind)
            self.interrupts = list((e.get("outcome") or {}).get("interrupts") or []) if outcome == "interrupt" else []
        elif kind == "RUN_ERROR" and self.latest_run:
            self.latest_run.status = "error"

    def _settle_run(self, e: dict[str, Any], item: ThreadEvent) -> None:
        kind = e.get("type")
        run_id = e.get("runId") if kind == "RUN_FINISHED" else (self.latest_run.run_id if kind == "RUN_ERROR" and self.latest_run else None)
        fut = self._ends.pop(run_id, None) if run_id else None
        if fut and not fut.done():
            fut.set_result(item)


class EventStream:
    """An async iterator of a session's :class:`ThreadEvent` s."""

    def __init__(self, session: ThreadSession) -> None:
        self._session = session
        self._queue: asyncio.Queue[ThreadEvent | None] = asyncio.Queue()
        session._streams.add(self._queue)

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> ThreadEvent:
        item = await self._queue.get()
        if item is None:
            self.close()
            raise StopAsyncIteration
        return item

    def close(self) -> None:
        """Stops buffering; the iteration ends once the buffer is drained."""
        if self._queue in self._session._streams:
            self._session._streams.discard(self._queue)
            self._queue.put_nowait(None)

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _compact(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}
