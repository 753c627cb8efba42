"""A pydantic-ai agent with an approval-required tool, served over AG-UI.

`transfer` has `requires_approval=True`, so pydantic-ai's AG-UI adapter ends
the first run with a canonical 1.0 interrupt (`outcome.type = "interrupt"`,
`toolCallId`, `responseSchema`) and accepts the answer in
`RunAgentInput.resume`. The model is a `FunctionModel` (no network).
Prints "listening <port>" on stdout.
"""

import sys

from serve import serve
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.ui.ag_ui import AGUIAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route


def tool_result(messages: list[ModelMessage]) -> str | None:
    for message in reversed(messages):
        for part in getattr(message, "parts", []):
            if isinstance(part, ToolReturnPart):
                return str(part.content)
    return None


async def stream_model(messages: list[ModelMessage], info: AgentInfo):
    result = tool_result(messages)
    if result is None:
        yield {0: DeltaToolCall(name="transfer", json_args='{"amount": 500, "to": "acct-9"}', tool_call_id="call_t")}
        return
    for word in ["Transfer ", "result: ", result]:
        yield word


agent = Agent(FunctionModel(stream_function=stream_model), output_type=[str, DeferredToolRequests])


@agent.tool_plain(requires_approval=True)
def transfer(amount: int, to: str) -> str:
    """Move money; a human must approve."""
    return f"sent {amount} to {to}"


async def run(request: Request):
    return await AGUIAdapter.dispatch_request(request, agent=agent)


def main() -> None:
    app = Starlette(routes=[Route("/agent", run, methods=["POST"])])
    serve(app)


if __name__ == "__main__":
    sys.exit(main())
