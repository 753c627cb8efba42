"""Loads an AgentScope Msg list exported by the gateway with the real
`agentscope` package: reads `{"messages": [...]}` JSON on stdin, builds each
`agentscope.message.Msg` with `Msg.model_validate` (its role/content-block
validators included), and prints one JSON line: per message its role, name,
block types, and `model_dump(mode="json")`; or `{"error": ...}` on failure.
"""

import json
import sys

from agentscope.message import Msg


def main() -> None:
    exported = json.load(sys.stdin)["messages"]
    try:
        msgs = [Msg.model_validate(m) for m in exported]
    except Exception as e:  # noqa: BLE001 - report any validation failure
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return
    print(json.dumps({"messages": [
        {"role": m.role, "name": m.name, "blocks": [b.type for b in m.content],
         "text": m.get_text_content(), "dump": m.model_dump(mode="json")}
        for m in msgs
    ]}))


if __name__ == "__main__":
    sys.exit(main())
