"""A real pydantic-ai agent served over AG-UI (`pydantic-ai-slim[ag-ui]`).

The model is a `FunctionModel`, so no network or API key is involved, but
everything else is pydantic-ai's own AG-UI adapter: it calls a server-side
tool (`lookup`) and then streams a text answer, exactly as with a real LLM.
Prints "listening <port>" on stdout.
"""

import sys

from serve import serve
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.ui.ag_ui import AGUIAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route


def tool_already_answered(messages: list[ModelMessage]) -> str | None:
    for message in reversed(messages):
        for part in getattr(message, "parts", []):
            if isinstance(part, ToolReturnPart):
                return str(part.content)
    return None


async def stream_model(messages: list[ModelMessage], info: AgentInfo):
    answered = tool_already_answered(messages)
    if answered is None:
        yield {0: DeltaToolCall(name="lookup", json_args='{"q": "life"}', tool_call_id="call_1")}
        return
    for word in ["The ", "answer ", "is ", answered, "."]:
        yield word


agent = Agent(FunctionModel(stream_function=stream_model), instructions="Be brief.")


@agent.tool_plain
def lookup(q: str) -> str:
    """Look something up."""
    return "42" if q == "life" else "unknown"


async def run(request: Request):
    return await AGUIAdapter.dispatch_request(request, agent=agent)


def main() -> None:
    app = Starlette(routes=[Route("/agent", run, methods=["POST"])])
    serve(app)


if __name__ == "__main__":
    sys.exit(main())
