"""The PyPI `a2a-sdk` client against the gateway's A2A face (tests/a2a.rs).

Resolves the agent's card at URL (with the bearer token, as the gateway
requires it), then sends each turn as one message with the SDK's client
(streaming unless --blocking), all in one context: a turn is the user's
text, and "reply:<text>" answers the task of the previous turn (the task
that asked for input). Prints one JSON line: {"card": <the card as the SDK
parsed it>, "turns": [[<each StreamResponse as JSON>...], ...]} — or
{"error": "<what the SDK raised>"}.

Usage: a2a_client.py URL TOKEN '["hello", "reply:blue"]' [--blocking]
"""

import asyncio
import json
import sys
import uuid

import httpx
from google.protobuf.json_format import MessageToDict

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb


async def main() -> None:
    url, token, turns = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    streaming = "--blocking" not in sys.argv
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    card = await A2ACardResolver(http, url).get_agent_card()
    client = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)
    context_id, task_id, out = None, None, []
    try:
        for turn in turns:
            text = turn.removeprefix("reply:")
            message = pb.Message(
                message_id=str(uuid.uuid4()),
                role=pb.Role.ROLE_USER,
                parts=[pb.Part(text=text)],
            )
            if context_id:
                message.context_id = context_id
            if turn.startswith("reply:") and task_id:
                message.task_id = task_id
            responses = []
            async for response in client.send_message(pb.SendMessageRequest(message=message)):
                r = MessageToDict(response)
                responses.append(r)
                task = r.get("task") or {}
                context_id = context_id or task.get("contextId")
                task_id = task.get("id", task_id)
            out.append(responses)
        print(json.dumps({"card": MessageToDict(card), "turns": out}), flush=True)
    except Exception as e:  # the test asserts on it
        print(json.dumps({"error": f"{type(e).__name__}: {e}", "turns": out}), flush=True)
    finally:
        await http.aclose()


if __name__ == "__main__":
    asyncio.run(main())
