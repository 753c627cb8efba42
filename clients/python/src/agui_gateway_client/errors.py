"""Errors with the gateway contract's stable codes (docs/protocol.md)."""

from __future__ import annotations

from typing import Any, Final, Literal

#: The contract's error codes: what an `error` frame or an HTTP error body says.
ErrorCode = Literal[
    "unauthenticated",
    "forbidden",
    "not_found",
    "invalid",
    "conflict",
    "rate_limited",
    "too_large",
    "unavailable",
    "internal",
]
#: Codes of errors the gateway never answered.
ClientErrorCode = Literal["disconnected", "closed", "timeout"]

ERROR_CODES: Final = (
    "unauthenticated",
    "forbidden",
    "not_found",
    "invalid",
    "conflict",
    "rate_limited",
    "too_large",
    "unavailable",
    "internal",
)
CLIENT_ERROR_CODES: Final = ("disconnected", "closed", "timeout")

#: Answers meaning "not done, try later": nothing ran, sending again is safe.
RETRYABLE_CODES: Final = frozenset({"rate_limited", "unavailable"})


class GatewayError(Exception):
    """A refusal with its stable ``code``: one of :data:`ERROR_CODES`, one of
    :data:`CLIENT_ERROR_CODES`, or a code a newer gateway added (kept as it
    came: ``code`` is a ``str``)."""

    def __init__(
        self,
        code: str,
        message: str = "",
        *,
        retry_after: float | None = None,
        close_code: int | None = None,
        thread_id: str | None = None,
        run_id: str | None = None,
        status: int | None = None,
        not_sent: bool = False,
    ) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.retry_after = retry_after
        self.close_code = close_code
        self.thread_id = thread_id
        self.run_id = run_id
        self.status = status
        #: True when the command never left this process (safe to resend).
        self.not_sent = not_sent

    @classmethod
    def from_frame(cls, body: dict[str, Any], **extra: Any) -> GatewayError:
        """The error an ``error`` frame (or an HTTP body's ``error``) says."""
        return cls(
            str(body.get("code") or "internal"),
            str(body.get("message") or ""),
            retry_after=body.get("retryAfter"),
            thread_id=body.get("threadId"),
            run_id=body.get("runId"),
            **extra,
        )
