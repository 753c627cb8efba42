"""How a request the gateway did not carry out is tried again: its own
module so that a session (which takes a ``Retry`` per call) and the
connection (which carries it out) both use it without importing each
other."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Retry:
    """Retries of requests the gateway did not carry out (``rate_limited``
    — waiting at least its ``retryAfter`` —, ``unavailable``, a command sent
    while the socket was down, a GET whose answer was lost). ``attempts``
    more tries; 0 (the default) retries nothing."""

    attempts: int = 0
    initial: float = 0.25
    maximum: float = 5.0
    factor: float = 2.0
