"""Graphs the console tests run: a gated loop (steps committed on the test's signal), an
approval that calls a model and parks on ``ctx.interrupt``, a rule-routed graph, and a letter
that parks first and then streams a model's reply from a server the test holds mid-stream."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel

from stargraph import reducers
from stargraph.graph import END, START, Graph
from stargraph.llm import (
    ChatMessage,
    ChatRequest,
    ChatResponse,
    OpenAIChatModel,
    ScriptedChatModel,
    Usage,
)
from stargraph.runtime import RunContext
from stargraph.testing import RecordedRequest, Reply, ScriptedOpenAIServer
from stargraph.tools import Arbiter, ToolRegistry, tool

# Gate name -> semaphore the ``tick`` node waits on: the test decides when each step runs.
GATES: dict[str, threading.Semaphore] = {}


class Loop(BaseModel):
    n: int = 0
    limit: int = 3
    gate: str = ""
    tag: str = ""
    log: Annotated[list[str], reducers.append] = []


def tick(state: Loop) -> dict[str, Any]:
    if state.gate:
        assert GATES[state.gate].acquire(timeout=120), "the test never opened the gate"
    return {"n": state.n + 1, "log": [f"tick {state.n + 1}{state.tag}"]}


def again(state: Loop) -> str:
    return "tick" if state.n < state.limit else END


def loop_graph() -> Graph[Loop]:
    return (
        Graph("loop", state=Loop)
        .with_node("tick", tick)
        .with_edge(START, "tick")
        .with_conditional_edges("tick", again, {"tick": "tick", END: END})
    )


class Order(BaseModel):
    item: str = "widget"
    api_key: str = ""
    draft: str = ""
    answer: Any = None
    done: bool = False


def draft(state: Order, ctx: RunContext) -> dict[str, Any]:
    request = ChatRequest(
        messages=(
            ChatMessage.system("You write purchase notes."),
            ChatMessage.user(f"Write a note for one {state.item}."),
        )
    )
    reply = ctx.services["model"].complete(request)
    return {"draft": reply.message.content or ""}


def ask(state: Order, ctx: RunContext) -> dict[str, Any]:
    answer = ctx.interrupt({"question": "send this order?", "value": {"amount": 5}})
    return {"answer": answer}


def finish(state: Order) -> dict[str, Any]:
    return {"done": True}


def approval_graph() -> Graph[Order]:
    return (
        Graph("approval", state=Order)
        .with_node("draft", draft)
        .with_node("ask", ask)
        .with_node("finish", finish)
        .with_edge(START, "draft")
        .with_edge("draft", "ask")
        .with_edge("ask", "finish")
        .with_edge("finish", END)
    )


def scripted_model() -> ScriptedChatModel:
    reply = ChatResponse(
        message=ChatMessage(role="assistant", content="One widget, please <b>soon</b>."),
        usage=Usage(prompt_tokens=120, completion_tokens=30, total_tokens=150),
        model="scripted-model",
    )
    return ScriptedChatModel(lambda request: reply)


class Trip(BaseModel):
    city: str = "Oslo"
    confirm: bool = False
    notes: Annotated[list[str], reducers.append] = []
    booked: bool = False


def plan(state: Trip) -> dict[str, Any]:
    return {"notes": [f"plan {state.city}"]}


def look(state: Trip) -> dict[str, Any]:
    return {"notes": [f"look at hotels in {state.city}"]}


def book(state: Trip, ctx: RunContext) -> dict[str, Any]:
    if state.confirm:
        ctx.interrupt({"question": f"book a hotel in {state.city}?"})
    return {"notes": [f"booked {state.city}"], "booked": True}


def done(state: Trip) -> dict[str, Any]:
    return {"notes": ["done"]}


def trip_graph() -> Graph[Trip]:
    """A parent whose ``hotel`` node runs a two-step skill (look, book) as a child run."""
    from stargraph.nodes import SubgraphNode
    from stargraph.skills import Skill

    child = (
        Graph("hotel", state=Trip)
        .with_node("look", look)
        .with_node("book", book)
        .with_edge(START, "look")
        .with_edge("look", "book")
        .with_edge("book", END)
    )
    skill = Skill.from_graph(
        child,
        name="hotel",
        version="1.0.0",
        kind="workflow",
        description="find and book a hotel",
        state_schema=Trip,
    )
    return (
        Graph("trip", state=Trip)
        .with_node("plan", plan)
        .with_node(SubgraphNode.from_skill(skill, site="hotel"))
        .with_node("done", done)
        .with_edge(START, "plan")
        .with_edge("plan", "hotel")
        .with_edge("hotel", "done")
        .with_edge("done", END)
    )


class Letter(BaseModel):
    to: str = "Ada"
    answer: Any = None
    text: str = ""


def confirm(state: Letter, ctx: RunContext) -> dict[str, Any]:
    return {"answer": ctx.interrupt({"question": f"write to {state.to}?"})}


def write(state: Letter, ctx: RunContext) -> dict[str, Any]:
    request = ChatRequest(messages=(ChatMessage.user(f"Write to {state.to}."),))
    reply = ctx.services["model"].complete(request)
    return {"text": reply.message.content or ""}


def letter_graph() -> Graph[Letter]:
    """Parks on an interrupt first, then calls a model: answering it in the console runs the
    model call in the console's process, where its tokens stream to the page."""
    return (
        Graph("letter", state=Letter)
        .with_node("confirm", confirm)
        .with_node("write", write)
        .with_edge(START, "confirm")
        .with_edge("confirm", "write")
        .with_edge("write", END)
    )


class HeldServer(ScriptedOpenAIServer):
    """A scripted OpenAI-compatible server whose streamed replies stop after ``hold_after``
    SSE chunks (the first is the role chunk, then one per word) until the test sets
    ``release``; ``held`` is set when a reply reaches that point."""

    def __init__(self, script: list[Reply], *, hold_after: int) -> None:
        super().__init__(script)
        self.hold_after = hold_after
        self.held = threading.Event()
        self.release = threading.Event()

    def chunks(self, reply: Reply, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The scripted chunks, held at ``hold_after``."""
        for sent, chunk in enumerate(super().chunks(reply, body)):
            if sent == self.hold_after:
                self.held.set()
                if not self.release.wait(120):
                    return  # the test never let go: the stream ends short
            yield chunk

    def close(self) -> None:
        """Let any held reply go, then stop."""
        self.release.set()
        super().close()


def letter_model(server: ScriptedOpenAIServer) -> OpenAIChatModel:
    return OpenAIChatModel(
        "scripted-model", base_url=server.base_url, api_key="x", max_retries=0, backoff=0
    )


@tool(id="desk.lookup@1.0.0")
def lookup(order_id: str) -> dict[str, Any]:
    """Look an order up."""
    return {"order": order_id, "item": "kettle", "status": "arrived broken"}


def desk_script(request: RecordedRequest) -> Reply:
    """Look the order up (the model is offered ``desk.lookup@1.0.0`` as ``lookup``), then
    answer."""
    if not [m for m in request.messages if m["role"] == "tool"]:
        return Reply.tool_calls([("lookup", {"order_id": "A-17"})])
    return Reply.text("Your kettle A-17 arrived broken; a refund is on its way.")


def desk_app(server: ScriptedOpenAIServer, store: Any, workspace: Path) -> Any:
    """A ReAct agent (model calls, a tool call, a rule that stops it) over ``store``."""
    from stargraph.skills.react import react_graph

    graph = react_graph(
        name="desk", tools=["desk.lookup@1.0.0"], system_prompt="Help.", max_steps=4
    )
    arbiter = Arbiter(ToolRegistry.build(builtins=[lookup]), workspace=workspace)
    return graph.compile(store=store, services={"model": letter_model(server), "arbiter": arbiter})
