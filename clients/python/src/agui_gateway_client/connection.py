"""One authenticated WebSocket to the gateway, kept open.

The token comes from a provider (asked again a little before it expires and
sent on the open socket as an ``auth`` frame, so nothing reconnects; asked
once more after a 4001 close), a lost socket is reopened with exponential
backoff and jitter, a silent one is found by WebSocket pings, commands are
matched to their answers by ``id``, and every thread session is resubscribed
after the last seq it applied (docs/protocol.md, "WebSocket").

Cancellation is asyncio's own: cancel the task awaiting a call (or wrap it in
``asyncio.timeout``); the waiting stops, and a command that was already sent
stays sent (``ThreadSession.cancel`` stops a run).
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Union

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.typing import Subprotocol

from .errors import RETRYABLE_CODES, GatewayError
from .retry import Retry
from .session import ThreadSession

SUBPROTOCOL = Subprotocol("agui-gateway.v1")

TokenReason = Literal["initial", "reconnect", "expiring", "rejected"]
#: A token, or a provider ``(reason, previous) -> token`` (sync or async).
TokenSource = Union[str, Callable[[TokenReason, Union[str, None]], Union[str, None, Awaitable[Union[str, None]]]]]
ConnectionState = Literal["idle", "connecting", "open", "reconnecting", "closed"]


@dataclass(frozen=True)
class Backoff:
    """Delays between reconnects: ``initial * factor**n`` up to ``maximum``,
    each spread by ±``jitter`` (so many clients do not return at once)."""

    initial: float = 0.25
    maximum: float = 10.0
    factor: float = 2.0
    jitter: float = 0.3

    def delay(self, attempt: int) -> float:
        base = min(self.maximum, self.initial * self.factor**attempt)
        return max(0.0, base * (1 - self.jitter + random.random() * 2 * self.jitter))


def token_claims(token: str) -> dict[str, Any] | None:
    """A JWT's claims, unverified (only to plan the refresh), or None."""
    try:
        part = token.split(".")[1]
        return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (IndexError, ValueError):
        return None


class GatewayConnection:
    """The connection; ``async with GatewayConnection(...) as conn:`` opens
    and closes it. ``url`` is the gateway (``https://host``) or its WebSocket
    URL (``wss://host/v1/ws``)."""

    def __init__(
        self,
        url: str,
        token: TokenSource,
        *,
        reconnect: Backoff = Backoff(),
        retry: Retry = Retry(),
        ping_interval: float | None = 15.0,
        ping_timeout: float | None = 10.0,
        request_timeout: float | None = 30.0,
        refresh_lead: float = 30.0,
        auto_refresh: bool = True,
    ) -> None:
        self.url, self.http_base = _urls(url)
        self._provider = token if callable(token) else (lambda _reason, _previous, t=token: t)
        self.backoff = reconnect
        self.retry = retry
        self.ping_interval = ping_interval
        self.ping_timeout = ping_timeout
        self.request_timeout = request_timeout
        self.refresh_lead = refresh_lead
        self.auto_refresh = auto_refresh
        self.state: ConnectionState = "idle"
        #: The token the connection authenticated with last.
        self.token: str | None = None
        self.sessions: dict[str, ThreadSession] = {}
        #: Called with each state change, and with every reconnect's delay.
        self.on_state: list[Callable[[ConnectionState], None]] = []
        self._ws: ClientConnection | None = None
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._next_id = 1
        self._task: asyncio.Task[None] | None = None
        self._refresh_task: asyncio.Task[None] | None = None
        self._opened: asyncio.Future[None] | None = None
        self._open_event = asyncio.Event()
        self._error: GatewayError | None = None
        #: How many sockets were authenticated, and how many tokens refreshed in-band.
        self.opens = 0
        self.refreshes = 0

    async def __aenter__(self) -> GatewayConnection:
        await self.connect()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    @property
    def is_open(self) -> bool:
        return self.state == "open"

    async def connect(self) -> None:
        """Opens the connection; returns once authenticated (the first time)."""
        if self.state == "open":
            return
        if self._opened is None or self._opened.done():
            self._opened = asyncio.get_running_loop().create_future()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run())
        await asyncio.shield(self._opened)

    def session(self, thread_id: str) -> ThreadSession:
        """The session for ``thread_id`` on this connection (one per thread)."""
        if thread_id not in self.sessions:
            self.sessions[thread_id] = ThreadSession(self, thread_id)
        return self.sessions[thread_id]

    async def close(self) -> None:
        """Closes cleanly (1000): nothing reconnects, waiting calls raise ``closed``."""
        self._set_state("closed")
        for task in (self._refresh_task, self._task):
            if task and task is not asyncio.current_task():
                task.cancel()
        ws, self._ws = self._ws, None
        if ws is not None:
            await ws.close(1000, "client closed")
        self._fail_pending("closed", "the connection was closed")
        if self._opened and not self._opened.done():
            self._opened.set_exception(GatewayError("closed", "the connection was closed"))
        for s in self.sessions.values():
            s._end_streams()

    # ----- commands -----

    async def send(self, command: dict[str, Any], *, retry: Retry | None = None, timeout: float | None = None) -> dict[str, Any]:
        """Sends a command; returns its ``ack`` (or ``pong``) frame, raises a
        :class:`GatewayError` with the ``error`` frame's code."""
        policy = retry or self.retry
        attempt = 0
        while True:
            try:
                return await self._send_once(command, timeout)
            except GatewayError as e:
                if attempt >= policy.attempts or not (e.code in RETRYABLE_CODES or e.not_sent):
                    raise
                if e.not_sent:
                    await self.wait_open()
                else:
                    await asyncio.sleep(_retry_delay(policy, attempt, e))
                attempt += 1

    async def _send_once(self, command: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        ws = self._ws
        if self.state != "open" or ws is None:
            closed = self.state == "closed"
            raise GatewayError("closed" if closed else "disconnected", "not connected; the connection reconnects by itself", not_sent=not closed)
        cid = str(command.get("id") or f"c{self._next_id}")
        self._next_id += 1
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[cid] = answer
        if command.get("type") in ("run", "resume", "regenerate", "edit") and command.get("threadId") in self.sessions:
            # A run subscribes the connection to its thread: resubscribed after a reconnect.
            self.sessions[command["threadId"]]._joined_by_run()
        try:
            try:
                await ws.send(json.dumps({**command, "id": cid}))
            except ConnectionClosed:
                raise GatewayError("disconnected", "the socket closed before the command left", not_sent=True) from None
            limit = timeout if timeout is not None else self.request_timeout
            try:
                return await asyncio.wait_for(asyncio.shield(answer), limit)
            except asyncio.TimeoutError:
                raise GatewayError("timeout", f"no answer to {command.get('type')!r} within {limit} s") from None
        finally:
            self._pending.pop(cid, None)

    async def authenticate(self, token: str) -> None:
        """Sends ``token`` as an ``auth`` frame on the open socket (a refresh)."""
        await self.send({"type": "auth", "token": token})
        self.token = token
        self.refreshes += 1
        self._plan_refresh(token)

    async def wait_open(self) -> None:
        """Returns when a socket is authenticated (at once when one is), or
        raises ``closed``."""
        while not (self.state == "open" and self._ws is not None):
            if self.state == "closed":
                raise GatewayError("closed", "the connection was closed")
            self._open_event.clear()
            await self._open_event.wait()

    # ----- HTTP -----

    async def request(self, path: str, *, method: str = "GET", body: Any = None, retry: Retry | None = None) -> Any:
        """A JSON request to the gateway's HTTP API with the current token; an
        error answer raises its contract code."""
        policy = retry or self.retry
        safe = method.upper() in ("GET", "HEAD")
        attempt = 0
        while True:
            try:
                return await self._request_once(path, method, body)
            except GatewayError as e:
                if attempt >= policy.attempts or not (e.code in RETRYABLE_CODES or (safe and e.code == "disconnected")):
                    raise
                await asyncio.sleep(_retry_delay(policy, attempt, e))
                attempt += 1

    async def _request_once(self, path: str, method: str, body: Any) -> Any:
        token = self.token or await self._ask("initial")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.http_base + path, data=data, method=method)
        req.add_header("accept", "application/json")
        req.add_header("authorization", f"Bearer {token}")
        if data is not None:
            req.add_header("content-type", "application/json")

        def call() -> Any:
            try:
                with urllib.request.urlopen(req, timeout=self.request_timeout) as res:
                    return json.loads(res.read() or b"null")
            except urllib.error.HTTPError as e:
                try:
                    err = json.loads(e.read() or b"{}").get("error") or {}
                except ValueError:
                    err = {}
                error = GatewayError.from_frame(err or {"code": "internal", "message": f"HTTP {e.code}"}, status=e.code)
                after = e.headers.get("retry-after")
                if after and after.isdigit():
                    error.retry_after = float(after)
                raise error from None
            except (urllib.error.URLError, OSError) as e:
                raise GatewayError("disconnected", f"the request failed: {e}") from None

        return await asyncio.to_thread(call)

    # ----- the socket's life -----

    async def _ask(self, reason: TokenReason) -> str | None:
        got = self._provider(reason, self.token)
        return await got if inspect.isawaitable(got) else got

    async def _run(self) -> None:
        attempt = 0
        rejected = False
        self._set_state("connecting")
        while self.state != "closed":
            try:
                token = await self._ask("rejected" if rejected else "reconnect" if self.token else "initial")
            except Exception as e:  # the provider's own failure
                return self._fail(GatewayError("unauthenticated", f"the token provider failed: {e}"))
            if not token or (rejected and token == self.token):
                return self._fail(self._error or GatewayError("unauthenticated", "no token", close_code=4001))
            self.token = token
            code, reason, authenticated = await self._one_socket(token)
            if self.state == "closed":
                return
            if authenticated:
                attempt = 0
            rejected = code == 4001
            if code == 4003:
                return self._fail(GatewayError("forbidden", reason, close_code=code))
            self._set_state("reconnecting")
            await asyncio.sleep(self.backoff.delay(attempt))
            attempt += 1

    async def _one_socket(self, token: str) -> tuple[int | None, str, bool]:
        """Opens, authenticates and reads one socket until it closes."""
        authenticated = False
        try:
            ws = await connect(
                self.url,
                subprotocols=[SUBPROTOCOL],
                ping_interval=self.ping_interval,
                ping_timeout=self.ping_timeout,
                max_size=None,
                open_timeout=10,
            )
        except (OSError, InvalidHandshake, asyncio.TimeoutError) as e:
            return None, f"cannot open: {e}", False
        self._ws = ws
        try:
            # The token travels in the first frame, never in the URL.
            await ws.send(json.dumps({"type": "auth", "token": token, "id": "auth"}))
            async for message in ws:
                frame = json.loads(message)
                if not authenticated and frame.get("id") == "auth":
                    if frame.get("type") == "ack":
                        authenticated = True
                        self._authenticated(token)
                    else:
                        self._error = GatewayError.from_frame(frame)
                    continue
                self._frame(frame)
        except ConnectionClosed:
            pass
        finally:
            if self._ws is ws:
                self._ws = None
            self._lost()
        return ws.close_code, ws.close_reason or "", authenticated

    def _authenticated(self, token: str) -> None:
        self._error = None
        self.opens += 1
        self._set_state("open")
        self._open_event.set()
        self._plan_refresh(token)
        if self._opened and not self._opened.done():
            self._opened.set_result(None)
        for s in list(self.sessions.values()):
            s._connected()

    def _lost(self) -> None:
        if self._refresh_task:
            self._refresh_task.cancel()
        self._fail_pending("disconnected", "the connection dropped before the gateway answered")
        for s in self.sessions.values():
            s._disconnected()

    def _fail(self, error: GatewayError) -> None:
        self._set_state("closed")
        self._fail_pending("closed", error.message)
        if self._opened and not self._opened.done():
            self._opened.set_exception(error)
        for s in self.sessions.values():
            s._end_streams()

    def _fail_pending(self, code: str, message: str) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(GatewayError(code, message))
        self._pending.clear()

    def _set_state(self, state: ConnectionState) -> None:
        if self.state == state or self.state == "closed":
            return
        self.state = state
        self._open_event.set()
        for fn in list(self.on_state):
            fn(state)

    def _plan_refresh(self, token: str) -> None:
        if self._refresh_task:
            self._refresh_task.cancel()
        exp = (token_claims(token) or {}).get("exp")
        if not self.auto_refresh or not isinstance(exp, (int, float)):
            return
        left = exp - time.time()
        self._refresh_task = asyncio.create_task(self._refresh(max(0.0, left - min(self.refresh_lead, left / 2))))

    async def _refresh(self, after: float) -> None:
        await asyncio.sleep(after)
        try:
            token = await self._ask("expiring")
            if token and token != self.token:
                await self.authenticate(token)
        except Exception:  # noqa: BLE001 — a failed refresh is not fatal:
            # at expiry the gateway closes with 4001, and the reconnect asks
            # the provider again ("rejected").
            pass

    def _frame(self, frame: dict[str, Any]) -> None:
        fid = frame.get("id")
        kind = frame.get("type")
        waiting = self._pending.get(str(fid)) if fid is not None else None
        if kind == "ack" and isinstance(frame.get("presence"), list):
            # A subscribe's list, taken before the snapshot that follows it.
            listed = self.sessions.get(frame.get("threadId", ""))
            if listed is not None:
                listed._presence(frame["presence"])
        if waiting is not None and kind in ("ack", "error", "pong"):
            if not waiting.done():
                if kind == "error":
                    waiting.set_exception(GatewayError.from_frame(frame))
                else:
                    waiting.set_result(frame)
            return
        session = self.sessions.get(frame.get("threadId", ""))
        if session is not None and kind in ("event", "snapshot"):
            session._frame(frame)
        elif session is not None and kind == "presence":
            session._presence(frame.get("viewers") or [])
        elif session is not None and kind == "error":
            session._error(GatewayError.from_frame(frame))


def _retry_delay(policy: Retry, attempt: int, error: GatewayError) -> float:
    backoff = min(policy.maximum, policy.initial * policy.factor**attempt)
    return max(backoff, float(error.retry_after)) if error.retry_after is not None else backoff


def _urls(url: str) -> tuple[str, str]:
    """The WebSocket URL and the HTTP origin of a gateway URL."""
    u = urllib.parse.urlsplit(url)
    secure = u.scheme in ("https", "wss")
    path = u.path if u.path not in ("", "/") else "/v1/ws"
    ws = urllib.parse.urlunsplit(("wss" if secure else "ws", u.netloc, path, u.query, ""))
    return ws, f"{'https' if secure else 'http'}://{u.netloc}"
