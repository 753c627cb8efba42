"""A LangGraph graph that calls `interrupt()`, served with PyPI `ag-ui-langgraph`.

No model is involved: the `chat` node answers with a fixed message and the
`approve` node pauses with `interrupt(...)`. ag-ui-langgraph reports the pause
its default way, `CUSTOM on_interrupt` (value: a JSON string) followed by a
plain `RUN_FINISHED`, and resumes from `forwardedProps.command.resume` or
`RunAgentInput.resume`. Prints "listening <port>" on stdout, then
"forwarded <json>" with each request's `forwardedProps` (what the tests
check the gateway sent).
"""

import json
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


def recall(state: MessagesState):
    """Answers with what the graph's own (checkpointed) state holds: the
    human messages it has seen on this thread, so a test can tell which
    branch the graph is on."""
    said = [m.content for m in state["messages"] if m.type == "human"]
    return {"messages": [AIMessage(content="seen %d: %s" % (len(said), "|".join(said)))]}


memory = StateGraph(MessagesState)
memory.add_node("recall", recall)
memory.add_edge(START, "recall")
memory.add_edge("recall", END)
memory_graph = memory.compile(checkpointer=MemorySaver())


class TurnState(MessagesState):
    turns: int


def count(state: TurnState):
    """Counts this thread's runs in a key only the checkpoint holds (it is
    not in the output schema, so it never reaches the client's state and
    cannot come back in `RunAgentInput.state`): a replica without the
    thread's checkpoint starts again at 1 (tests/pools.rs, affinity)."""
    n = state.get("turns", 0) + 1
    return {"turns": n, "messages": [AIMessage(content="turn %d" % n)]}


turns = StateGraph(TurnState, output_schema=MessagesState)
turns.add_node("count", count)
turns.add_edge(START, "count")
turns.add_edge("count", END)
turns_graph = turns.compile(checkpointer=MemorySaver())


class LogForwardedProps:
    """ASGI wrapper: prints each request's forwardedProps, then replays the body."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            msg = await receive()
            chunks.append(msg.get("body", b""))
            more = msg.get("more_body", False)
        body = b"".join(chunks)
        try:
            print("forwarded " + json.dumps(json.loads(body).get("forwardedProps")), flush=True)
        except ValueError:
            print("forwarded null", flush=True)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def main() -> None:
    app = FastAPI()
    add_langgraph_fastapi_endpoint(app, LangGraphAgent(name="lg", graph=graph), "/agent")
    add_langgraph_fastapi_endpoint(app, LangGraphAgent(name="memory", graph=memory_graph), "/memory")
    add_langgraph_fastapi_endpoint(app, LangGraphAgent(name="turns", graph=turns_graph), "/turns")
    serve(LogForwardedProps(app))


if __name__ == "__main__":
    sys.exit(main())
