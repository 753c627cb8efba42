"""The thread's messages and state, folded after every event.

The same rules as AG-UI clients (``@ag-ui/client``'s ``defaultApplyEvents``)
on the journaled dicts (camelCase). A journaled ``MESSAGES_SNAPSHOT`` is the
gateway's own fold of the thread (a fork journals its branch's history that
way) and is taken exactly. Unknown event types change nothing. Every change
makes new lists and dicts, so a holder of the old view keeps it unchanged.
"""

from __future__ import annotations

import copy
import json
from typing import Any

Message = dict[str, Any]


def fold_event(messages: list[Message], state: Any, event: dict[str, Any]) -> tuple[list[Message], Any]:
    """``(messages, state)`` after ``event``."""
    view = _View(messages, state)
    handler = _HANDLERS.get(str(event.get("type")))
    if handler is not None:
        handler(view, event)
    return view.messages, view.state


class _View:
    def __init__(self, messages: list[Message], state: Any) -> None:
        self.messages = messages
        self.state = state

    def index(self, message_id: Any) -> int:
        return next((i for i, m in enumerate(self.messages) if m.get("id") == message_id), -1)

    def put(self, message: Message) -> None:
        i = self.index(message.get("id"))
        self.messages = [*self.messages, message] if i < 0 else [message if j == i else m for j, m in enumerate(self.messages)]

    def append(self, message_id: Any, role: str, delta: Any) -> None:
        i = self.index(message_id)
        old = {"id": message_id, "role": role, "content": ""} if i < 0 else self.messages[i]
        content = old.get("content") if isinstance(old.get("content"), str) else ""
        self.put({**old, "content": content + (delta or "")})

    def holder(self, tool_call_id: Any) -> Message | None:
        return next((m for m in self.messages if any(c.get("id") == tool_call_id for c in m.get("toolCalls") or [])), None)

    def start_call(self, e: dict[str, Any]) -> None:
        if self.holder(e.get("toolCallId")):
            return
        parent_id = e.get("parentMessageId") or e.get("toolCallId")
        i = self.index(parent_id)
        parent = self.messages[i] if i >= 0 and self.messages[i].get("role") == "assistant" else {"id": parent_id, "role": "assistant", "toolCalls": []}
        call = {"id": e.get("toolCallId"), "type": "function", "function": {"name": e.get("toolCallName"), "arguments": ""}}
        self.put({**parent, "toolCalls": [*(parent.get("toolCalls") or []), call]})

    def call_args(self, tool_call_id: Any, delta: Any) -> None:
        m = self.holder(tool_call_id)
        if m is None:
            return
        calls = [
            {**c, "function": {**c["function"], "arguments": c["function"].get("arguments", "") + (delta or "")}} if c.get("id") == tool_call_id else c
            for c in m["toolCalls"]
        ]
        self.put({**m, "toolCalls": calls})


def _run_started(v: _View, e: dict[str, Any]) -> None:
    for m in (e.get("input") or {}).get("messages") or []:
        if v.index(m.get("id")) < 0:
            v.put(m)


def _text_start(v: _View, e: dict[str, Any]) -> None:
    if v.index(e.get("messageId")) < 0:
        v.put({"id": e.get("messageId"), "role": e.get("role") or "assistant", "content": ""})


def _reasoning_start(v: _View, e: dict[str, Any]) -> None:
    if v.index(e.get("messageId")) < 0:
        v.put({"id": e.get("messageId"), "role": "reasoning", "content": ""})


def _tool_chunk(v: _View, e: dict[str, Any]) -> None:
    if e.get("toolCallId") and e.get("toolCallName"):
        v.start_call(e)
    v.call_args(e.get("toolCallId"), e.get("delta"))


def _activity_snapshot(v: _View, e: dict[str, Any]) -> None:
    if e.get("replace") is not False or v.index(e.get("messageId")) < 0:
        v.put({"id": e.get("messageId"), "role": "activity", "activityType": e.get("activityType"), "content": e.get("content")})


def _activity_delta(v: _View, e: dict[str, Any]) -> None:
    i = v.index(e.get("messageId"))
    if i >= 0:
        m = v.messages[i]
        v.put({**m, "content": apply_patch(m.get("content") or {}, e.get("patch") or [])})


def _state_delta(v: _View, e: dict[str, Any]) -> None:
    v.state = apply_patch(v.state if v.state is not None else {}, e.get("delta") or [])


_HANDLERS = {
    "RUN_STARTED": _run_started,
    "MESSAGES_SNAPSHOT": lambda v, e: setattr(v, "messages", list(e.get("messages") or [])),
    "TEXT_MESSAGE_START": _text_start,
    "TEXT_MESSAGE_CONTENT": lambda v, e: v.append(e.get("messageId"), "assistant", e.get("delta")),
    "TEXT_MESSAGE_CHUNK": lambda v, e: e.get("messageId") and v.append(e.get("messageId"), e.get("role") or "assistant", e.get("delta")),
    "REASONING_MESSAGE_START": _reasoning_start,
    "REASONING_MESSAGE_CONTENT": lambda v, e: v.append(e.get("messageId"), "reasoning", e.get("delta")),
    "REASONING_MESSAGE_CHUNK": lambda v, e: e.get("messageId") and v.append(e.get("messageId"), "reasoning", e.get("delta")),
    "TOOL_CALL_START": lambda v, e: v.start_call(e),
    "TOOL_CALL_ARGS": lambda v, e: v.call_args(e.get("toolCallId"), e.get("delta")),
    "TOOL_CALL_CHUNK": _tool_chunk,
    "TOOL_CALL_RESULT": lambda v, e: v.put(
        {"id": e.get("messageId"), "role": e.get("role") or "tool", "toolCallId": e.get("toolCallId"), "content": e.get("content")}
    ),
    "ACTIVITY_SNAPSHOT": _activity_snapshot,
    "ACTIVITY_DELTA": _activity_delta,
    "STATE_SNAPSHOT": lambda v, e: setattr(v, "state", e.get("snapshot")),
    "STATE_DELTA": _state_delta,
}


class PatchError(ValueError):
    """A JSON Patch ``test`` operation failed."""


def apply_patch(doc: Any, patch: list[dict[str, Any]]) -> Any:
    """RFC 6902 JSON Patch applied to a copy of ``doc``."""
    root = {"": copy.deepcopy(doc)}

    def keys(path: str) -> list[str]:
        return [""] + [k.replace("~1", "/").replace("~0", "~") for k in path.split("/")[1:]]

    def get(ks: list[str]) -> Any:
        node: Any = root
        for k in ks:
            node = node[int(k)] if isinstance(node, list) else node.get(k) if isinstance(node, dict) else None
        return node

    def put(ks: list[str], value: Any, insert: bool) -> None:
        parent, key = get(ks[:-1]), ks[-1]
        if isinstance(parent, list):
            i = len(parent) if key == "-" else int(key)
            parent[i : i if insert else i + 1] = [value]
        else:
            parent[key] = value

    def remove(ks: list[str]) -> Any:
        parent, key = get(ks[:-1]), ks[-1]
        return parent.pop(int(key)) if isinstance(parent, list) else parent.pop(key)

    for op in patch:
        ks = keys(op["path"])
        kind = op.get("op")
        if kind == "add":
            put(ks, copy.deepcopy(op.get("value")), True)
        elif kind == "replace":
            put(ks, copy.deepcopy(op.get("value")), False)
        elif kind == "remove":
            remove(ks)
        elif kind == "move":
            put(ks, remove(keys(op["from"])), True)
        elif kind == "copy":
            put(ks, copy.deepcopy(get(keys(op["from"]))), True)
        elif kind == "test" and json.dumps(get(ks), sort_keys=True) != json.dumps(op.get("value"), sort_keys=True):
            raise PatchError(f"JSON Patch test failed at {op['path']}")
    return root[""]
