"""AG-UI events as ag-ui-protocol's models, losslessly.

The gateway never drops an event type it does not know, and neither does
this client: an event ``ag_ui.core`` cannot validate (a type newer than the
installed ag-ui-protocol) arrives as :class:`UnknownEvent`, and every
:class:`ThreadEvent` keeps the event exactly as journaled in ``raw``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from ag_ui.core.events import Event
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

_EVENT = TypeAdapter(Event)


class UnknownEvent(BaseModel):
    """An event this ag-ui-protocol does not know; its fields are kept."""

    model_config = ConfigDict(extra="allow")
    type: str


AnyEvent = Union[Event, UnknownEvent]


def parse_event(raw: dict[str, Any]) -> AnyEvent:
    """``raw`` (camelCase, as journaled) as an ``ag_ui.core`` event model."""
    try:
        return _EVENT.validate_python(raw)
    except ValidationError:
        return UnknownEvent.model_validate(raw)


@dataclass(frozen=True)
class ThreadEvent:
    """One journaled event of a thread: its ``seq``, the typed ``event`` and
    the ``raw`` dict exactly as the gateway sent it."""

    seq: int
    event: AnyEvent
    raw: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.raw.get("type"))
