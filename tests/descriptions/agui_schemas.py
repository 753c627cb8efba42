"""Writes AG-UI's own shapes into the API descriptions.

The AG-UI payloads in docs/ws-protocol.schema.json (`$defs`) and
docs/openapi.json (`components.schemas`) — events, messages, tools, context,
interrupts — are generated from the official AG-UI Python SDK's models
(ag-ui-protocol, pydantic: `TypeAdapter(...).json_schema(by_alias=True)`),
under names prefixed `agui.`. Made to compile under ajv's strict mode: the
OpenAPI-only `discriminator` is dropped (each variant pins its `type` or
`role` with `const`), and `type` lists become `anyOf`.

Run after upgrading ag-ui-protocol (tests/agents/requirements.txt pins it):
    .venv/bin/python tests/descriptions/agui_schemas.py
"""

from __future__ import annotations

import json
import pathlib
from importlib.metadata import version
from typing import Any

from ag_ui.core import Context, Message, Tool
from ag_ui.core.events import Event
from pydantic import TypeAdapter

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"
ROOTS = {"Event": Event, "Message": Message, "Tool": Tool, "Context": Context}


def strict(node: Any, ref_base: str) -> Any:
    """The schema with refs moved under `ref_base`, made ajv-strict."""
    if isinstance(node, list):
        return [strict(v, ref_base) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("discriminator", "title"):
            continue
        if key == "$ref":
            out[key] = ref_base + "agui." + value.rsplit("/", 1)[1]
        elif key == "type" and isinstance(value, list):
            out.setdefault("anyOf", []).extend({"type": t} for t in value)
        else:
            out[key] = strict(value, ref_base)
    # ajv's strictTypes: keywords of objects need `type: object` beside them.
    if ("properties" in out or "required" in out) and "type" not in out and "anyOf" not in out and "oneOf" not in out:
        out["type"] = "object"
    return out


def agui_defs(ref_base: str) -> dict[str, Any]:
    """Every AG-UI shape, `agui.<Name>`, refs pointing at `ref_base`."""
    defs: dict[str, Any] = {}
    for name, model in ROOTS.items():
        schema = TypeAdapter(model).json_schema(by_alias=True, mode="validation")
        for sub, body in schema.pop("$defs", {}).items():
            defs["agui." + sub] = strict(body, ref_base)
        defs.setdefault("agui." + name, strict(schema, ref_base))
    known = sorted(
        body["properties"]["type"]["const"]
        for key, body in defs.items()
        if key.endswith("Event") and "const" in body.get("properties", {}).get("type", {})
    )
    defs["agui.UnknownEvent"] = {
        "type": "object",
        "description": "an event type this description predates: the gateway relays and journals it unchanged (lossless)",
        "required": ["type"],
        "properties": {"type": {"type": "string", "not": {"enum": known}}},
        "additionalProperties": True,
    }
    defs["agui.AnyEvent"] = {
        "description": f"an AG-UI event (ag-ui-protocol {version('ag-ui-protocol')}), camelCase, as the policy left it; or one of a newer type",
        "anyOf": [{"$ref": ref_base + "agui.Event"}, {"$ref": ref_base + "agui.UnknownEvent"}],
    }
    return dict(sorted(defs.items()))


def write(path: pathlib.Path, doc: dict[str, Any]) -> None:
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


def main() -> None:
    ws_path = DOCS / "ws-protocol.schema.json"
    ws = json.loads(ws_path.read_text())
    ws["$defs"] = {k: v for k, v in ws["$defs"].items() if not k.startswith("agui.")} | agui_defs("#/$defs/")
    write(ws_path, ws)
    api_path = DOCS / "openapi.json"
    api = json.loads(api_path.read_text())
    schemas = api["components"]["schemas"]
    api["components"]["schemas"] = {k: v for k, v in schemas.items() if not k.startswith("agui.")} | agui_defs("#/components/schemas/")
    write(api_path, api)


if __name__ == "__main__":
    main()
