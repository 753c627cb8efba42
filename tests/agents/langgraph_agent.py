"""A LangGraph graph that calls `interrupt()`, served with PyPI `ag-ui-langgraph`.

No model is involved: the `chat` node answers with a fixed message and the
`approve` node pauses with `interrupt(...)`. ag-ui-langgraph reports the pause
its default way, `CUSTOM on_interrupt` (value: a JSON string) followed by a
plain `RUN_FINISHED`, and resumes from `forwardedProps.command.resume` or
`RunAgentInput.resume`. Prints "listening <port>" on stdout.
"""

import sys

from serve import serve
from ag_ui_langgraph import LangGraphAgent, add_langgraph_fastapi_endpoint
from fastapi import FastAPI
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import MemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt


class State(MessagesState):
    approved: bool


def chat(state: State):
    return {"messages": [AIMessage(content="I will send the email once you approve.")]}


def approve(state: State):
    answer = interrupt({"reason": "confirmation", "message": "Send the email to a@b.com?", "action": "send_email"})
    approved = bool(answer.get("approved")) if isinstance(answer, dict) else bool(answer)
    return {"messages": [AIMessage(content="Sent." if approved else "Not sent.")], "approved": approved}


builder = StateGraph(State)
builder.add_node("chat", chat)
builder.add_node("approve", approve)
builder.add_edge(START, "chat")
builder.add_edge("chat", "approve")
builder.add_edge("approve", END)
graph = builder.compile(checkpointer=MemorySaver())


def main() -> None:
    app = FastAPI()
    add_langgraph_fastapi_endpoint(app, LangGraphAgent(name="lg", graph=graph), "/agent")
    serve(app)


if __name__ == "__main__":
    sys.exit(main())
