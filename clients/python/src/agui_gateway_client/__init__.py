"""agui-gateway's client for Python: shared AG-UI thread sessions over the
gateway's WebSocket (asyncio, ``websockets``), with reconnect, gapless
resume and in-band token refresh; events typed with ``ag_ui.core``'s models.

    async with GatewayConnection("http://127.0.0.1:8080", token=jwt) as conn:
        thread = conn.session("team-7")
        ack = await thread.run("support", [{"id": "u1", "role": "user", "content": "Hi"}])
        async for item in thread.events():
            ...
"""

from .connection import Backoff, GatewayConnection, Retry, token_claims
from .errors import CLIENT_ERROR_CODES, ERROR_CODES, ClientErrorCode, ErrorCode, GatewayError
from .events import AnyEvent, ThreadEvent, UnknownEvent, parse_event
from .fold import apply_patch, fold_event
from .session import EventStream, RunAck, RunInfo, ThreadSession

__all__ = [
    "AnyEvent",
    "Backoff",
    "CLIENT_ERROR_CODES",
    "ClientErrorCode",
    "ERROR_CODES",
    "ErrorCode",
    "EventStream",
    "GatewayConnection",
    "GatewayError",
    "Retry",
    "RunAck",
    "RunInfo",
    "ThreadEvent",
    "ThreadSession",
    "UnknownEvent",
    "apply_patch",
    "fold_event",
    "parse_event",
    "token_claims",
]
__version__ = "0.1.0"
